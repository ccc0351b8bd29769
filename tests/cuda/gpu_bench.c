/* SPDX-License-Identifier: MIT */
/*
 * The GPU check's throughput table (issue 31's targets): on 8192 x 8192 tensors, quantize and
 * dequantize of each format (f32 and bf16 in / out), GEMV (M = 1) and GEMM (M = 512, bf16
 * activations) of each weight, each as bytes moved per second and as a share of a
 * device-to-device copy measured in the same run; the GEMM rows also as TFLOPS and against
 * cuBLAS's bf16 GEMM on the dense weight (cublasGemmEx, bf16 in, f32 out, loaded with dlopen:
 * "n/a" where the machine has no libcublas). Times are the median of several runs after a
 * warm-up, on the legacy default stream, by CUDA events. The table goes to stdout and the
 * results file (report()) as Markdown.
 */
#include <dlfcn.h>

#include "gpu_common.h"

#define ROWS 8192
#define COLS 8192
#define GEMM_M 512

static double copy_gbs;

static int cmp_float(const void *a, const void *b)
{
    float x = *(const float *)a, y = *(const float *)b;
    return x < y ? -1 : x > y;
}

/* Median milliseconds of fn(arg) over reps runs, after one warm-up. */
static float time_ms(int (*fn)(void *), void *arg, int reps)
{
    cudaEvent_t a, b;
    float ms[32];

    CU(cudaEventCreate(&a));
    CU(cudaEventCreate(&b));
    if (fn(arg) != 0)
        return -1.0f;
    CU(cudaDeviceSynchronize());
    for (int r = 0; r < reps; r++) {
        CU(cudaEventRecord(a, 0));
        fn(arg);
        CU(cudaEventRecord(b, 0));
        CU(cudaEventSynchronize(b));
        CU(cudaEventElapsedTime(&ms[r], a, b));
    }
    cudaEventDestroy(a);
    cudaEventDestroy(b);
    qsort(ms, (size_t)reps, sizeof ms[0], cmp_float);
    return ms[reps / 2];
}

struct arg {
    qs_ctx *ctx;
    qs_quant_params p;
    qs_weight w;
    qs_qtensor q;
    int32_t dtype; /* quantize input, dequantize output, matmul x */
    void *src, *dst, *x, *y;
    int64_t m, bytes;
    /* cuBLAS */
    void *blas;
    int (*gemm)(void *, int, int, int, int, int, const void *, const void *, int, int, const void *,
                int, int, const void *, void *, int, int, int, int);
};

static int do_copy(void *v)
{
    struct arg *a = v;
    return cudaMemcpyAsync(a->dst, a->src, (size_t)a->bytes, cudaMemcpyDeviceToDevice, 0) !=
           cudaSuccess;
}

static int do_quant(void *v)
{
    struct arg *a = v;
    return qs_cuda_quantize(a->ctx, &a->p, a->src, a->dtype, ROWS, COLS, &a->q, NULL) != QS_OK;
}

static int do_dequant(void *v)
{
    struct arg *a = v;
    return qs_cuda_dequantize(a->ctx, &a->p, &a->q, ROWS, COLS, a->dst, a->dtype,
                              (int64_t)ROWS * COLS * 4, NULL) != QS_OK;
}

static int do_matmul(void *v)
{
    struct arg *a = v;
    return qs_cuda_matmul(a->ctx, NULL, a->x, a->dtype, a->m, COLS, &a->w, ROWS, NULL, a->y,
                          a->m * ROWS * 4, NULL) != QS_OK;
}

/* y (M x N, f32) = x (M x K bf16) . W^T (N x K bf16), column-major: C = op_T(W) op_N(x). */
static int do_cublas(void *v)
{
    struct arg *a = v;
    const float one = 1.0f, zero = 0.0f;
    return a->gemm(a->blas, 1, 0, ROWS, (int)a->m, COLS, &one, a->dst, 14, COLS, a->x, 14, COLS,
                   &zero, a->y, 0, ROWS, 68, -1) != 0;
}

static void row(const char *op, const char *fmt, const char *io, float ms, double bytes,
                double flops, double blas_ms)
{
    char gbs[32] = "", share[32] = "", tf[32] = "", vs[32] = "";

    if (ms <= 0.0f) {
        report("FAIL bench %s %s %s: %s\n", op, fmt, io, "the call failed");
        failures++;
        return;
    }
    if (bytes > 0) {
        snprintf(gbs, sizeof gbs, "%.0f", bytes / (ms * 1e-3) / 1e9);
        snprintf(share, sizeof share, "%.0f%%", 100.0 * bytes / (ms * 1e-3) / 1e9 / copy_gbs);
    }
    if (flops > 0) {
        snprintf(tf, sizeof tf, "%.1f", flops / (ms * 1e-3) / 1e12);
        if (blas_ms > 0)
            snprintf(vs, sizeof vs, "%.2fx", blas_ms / ms);
        else
            snprintf(vs, sizeof vs, "n/a");
    }
    report("| %-7s | %-15s | %-9s | %8.3f | %6s | %9s | %6s | %13s |\n", op, fmt, io, (double)ms,
           gbs, share, tf, vs);
}

static int64_t plane_total(const struct planes *d)
{
    int64_t s = 0;
    for (int k = 0; k < QS_PLANE_COUNT; k++)
        s += d->bytes[k];
    return s;
}

/* The formats of the table: one line per format and option that matters for speed. */
static const char *const bench_cases[] = {"nf4",           "nf4-dq",   "fp4",        "int8-row",
                                          "int8-group128", "llm-int8", "fp8-e4m3",   "mxfp4",
                                          "mxfp8",         "nvfp4",    "nvfp4-given"};

void bench(qs_ctx *ctx)
{
    const int64_t n = (int64_t)ROWS * COLS;
    const double gemm_flops = 2.0 * GEMM_M * ROWS * (double)COLS;
    struct arg a;
    void *lib = dlopen("libcublas.so.13", RTLD_NOW | RTLD_LOCAL);
    float blas_ms = -1.0f, ms;
    void *xb, *wbf;

    if (!lib)
        lib = dlopen("libcublas.so.12", RTLD_NOW | RTLD_LOCAL);
    if (!lib)
        lib = dlopen("libcublas.so", RTLD_NOW | RTLD_LOCAL);
    memset(&a, 0, sizeof a);
    a.ctx = ctx;
    a.bytes = n * 4;
    CU(cudaMalloc(&a.src, (size_t)n * 4));
    CU(cudaMalloc(&a.dst, (size_t)n * 4));
    CU(cudaMalloc(&a.y, (size_t)GEMM_M * ROWS * 4));
    CU(cudaMalloc(&xb, (size_t)GEMM_M * COLS * 2));
    CU(cudaMalloc(&wbf, (size_t)n * 2));
    {
        float *h = malloc((size_t)n * 4);
        for (int64_t i = 0; i < n; i++)
            h[i] = (float)(unif() * 2.0 - 1.0);
        CU(cudaMemcpy(a.src, h, (size_t)n * 4, cudaMemcpyHostToDevice));
        free(h);
    }
    /* bf16 copies: the dense weight and x for the GEMMs */
    {
        uint16_t *hb = malloc((size_t)n * 2);
        float *h = malloc((size_t)n * 4);
        CU(cudaMemcpy(h, a.src, (size_t)n * 4, cudaMemcpyDeviceToHost));
        qs_convert(ctx, h, QS_DTYPE_F32, hb, QS_DTYPE_BF16, n, n * 2);
        CU(cudaMemcpy(wbf, hb, (size_t)n * 2, cudaMemcpyHostToDevice));
        CU(cudaMemcpy(xb, hb, (size_t)GEMM_M * COLS * 2, cudaMemcpyHostToDevice));
        free(hb);
        free(h);
    }
    ms = time_ms(do_copy, &a, 20);
    copy_gbs = 2.0 * (double)a.bytes / (ms * 1e-3) / 1e9;
    report("BENCH d2d copy of %lld MiB: %.3f ms, %.0f GB/s (bytes read + written)\n",
           (long long)(a.bytes >> 20), (double)ms, copy_gbs);
    if (lib) {
        int (*create)(void **) = (int (*)(void **))dlsym(lib, "cublasCreate_v2");
        a.gemm = (int (*)(void *, int, int, int, int, int, const void *, const void *, int, int,
                          const void *, int, int, const void *, void *, int, int, int,
                          int))dlsym(lib, "cublasGemmEx");
        if (create && a.gemm && create(&a.blas) == 0) {
            void *keep = a.dst;
            a.dst = wbf;
            a.x = xb;
            a.m = GEMM_M;
            blas_ms = time_ms(do_cublas, &a, 10);
            a.dst = keep;
        }
    }
    report("\n8192 x 8192; GEMV M = 1, GEMM M = %d with bf16 x; %% of copy = GB/s over the copy's; "
           "x cuBLAS = cuBLAS bf16 GEMM time / ours\n\n",
           GEMM_M);
    report("| op      | format          | in / out  |       ms |   GB/s | %% of copy | TFLOPS | "
           "x cuBLAS bf16 |\n");
    report("|---------|-----------------|-----------|---------:|-------:|----------:|-------:|"
           "--------------:|\n");
    if (blas_ms > 0)
        row("GEMM", "cuBLAS bf16", "bf16", blas_ms, 0, gemm_flops, blas_ms);
    else
        report("| GEMM    | cuBLAS bf16     | bf16      |      n/a |        |           |        "
               "|               |\n");
    /* plain bf16 weights: our GEMV and GEMM */
    memset(&a.w, 0, sizeof a.w);
    a.w.kind = QS_WEIGHT_DENSE;
    a.w.dtype = QS_DTYPE_BF16;
    a.w.data = wbf;
    a.w.data_bytes = n * 2;
    a.x = xb;
    a.dtype = QS_DTYPE_BF16;
    a.m = 1;
    row("GEMV", "bf16", "bf16", time_ms(do_matmul, &a, 20), n * 2.0, 0, 0);
    a.m = GEMM_M;
    row("GEMM", "bf16", "bf16", time_ms(do_matmul, &a, 5), 0, gemm_flops, blas_ms);
    for (size_t i = 0; i < sizeof bench_cases / sizeof bench_cases[0]; i++) {
        const struct fmt_case *c = NULL;
        struct planes d;
        double pb;
        for (int k = 0; k < ncases; k++)
            if (strcmp(cases[k].name, bench_cases[i]) == 0)
                c = &cases[k];
        if (!c)
            continue;
        a.p = params_of(c);
        planes_new(&d, &a.p, ROWS, COLS, 1);
        a.q = d.q;
        pb = (double)plane_total(&d);
        a.dtype = QS_DTYPE_F32;
        row("quant", c->name, "f32", time_ms(do_quant, &a, 10), n * 4.0 + pb, 0, 0);
        row("dequant", c->name, "f32", time_ms(do_dequant, &a, 10), n * 4.0 + pb, 0, 0);
        a.dtype = QS_DTYPE_BF16; /* a.src's first half read as bf16: the bytes are what count */
        row("quant", c->name, "bf16", time_ms(do_quant, &a, 10), n * 2.0 + pb, 0, 0);
        row("dequant", c->name, "bf16", time_ms(do_dequant, &a, 10), n * 2.0 + pb, 0, 0);
        /* planes of a real weight for the matmul rows */
        a.dtype = QS_DTYPE_F32;
        do_quant(&a);
        memset(&a.w, 0, sizeof a.w);
        a.w.kind = QS_WEIGHT_QUANT;
        a.w.quant = &a.p;
        a.w.q = &a.q;
        a.x = xb;
        a.dtype = QS_DTYPE_BF16;
        a.m = 1;
        row("GEMV", c->name, "bf16", time_ms(do_matmul, &a, 20), pb + COLS * 2.0, 0, 0);
        a.m = GEMM_M;
        row("GEMM", c->name, "bf16", time_ms(do_matmul, &a, 5), 0, gemm_flops, blas_ms);
        planes_free(&d, 1);
    }
    report("\n");
    cudaFree(a.src);
    cudaFree(a.dst);
    cudaFree(a.y);
    cudaFree(xb);
    cudaFree(wbf);
}
