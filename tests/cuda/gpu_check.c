/* SPDX-License-Identifier: MIT */
/*
 * The CUDA plugin on a GPU (run by tests/cuda/run.sh): every format and option through
 * qs_cuda_quantize / qs_cuda_dequantize on device memory, compared bit for bit with the CPU
 * backend (the scalar reference) on large and tail shapes and adversarial data; the NF4 and
 * INT8 GEMV compared bit for bit with the reference dot products; then the throughput of each
 * against a device-to-device copy measured in the same run. Plain C (no cmocka: the GPU machine
 * has none), linked with the static libqsparse and the CUDA runtime; prints one line per check
 * and a summary, exit status 0 only when every check passed.
 *
 * Usage: gpu_check [--bench] RESULTS_FILE
 */
#include <cuda_runtime_api.h>
#include <math.h>
#include <stdarg.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "qsparse.h"
#include "../../src/core/kernels.h"

static int failures, checks;
static FILE *out;

static void report(const char *fmt, ...) __attribute__((format(printf, 1, 2)));
static void report(const char *fmt, ...)
{
    va_list ap;
    va_start(ap, fmt);
    vprintf(fmt, ap);
    va_end(ap);
    va_start(ap, fmt);
    vfprintf(out, fmt, ap);
    va_end(ap);
    fflush(stdout);
    fflush(out);
}

#define CU(call)                                                                                   \
    do {                                                                                           \
        cudaError_t e_ = (call);                                                                   \
        if (e_ != cudaSuccess) {                                                                   \
            report("FATAL %s:%d %s: %s\n", __FILE__, __LINE__, #call, cudaGetErrorString(e_));      \
            exit(2);                                                                               \
        }                                                                                          \
    } while (0)

/* splitmix64 and a mix of normal values and the adversarial list */
static uint64_t rng_s;
static uint64_t rnd(void)
{
    uint64_t z = (rng_s += 0x9E3779B97F4A7C15ull);
    z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ull;
    z = (z ^ (z >> 27)) * 0x94D049BB133111EBull;
    return z ^ (z >> 31);
}

static float bits_f(uint32_t u)
{
    float f;
    memcpy(&f, &u, 4);
    return f;
}

static const float special[] = {
    0.0f, -0.0f, 1.0f, -1.0f, 0.5f, INFINITY, -INFINITY, NAN, 1e-45f, -3e-39f, 1.17549435e-38f,
    3.4028235e38f, 448.0f, 464.0f, -480.0f, 57344.0f, 61440.0f, 65520.0f, 6.0f, 7.0f, 0.25f,
    0x1p-9f, 0x1p-10f, 0x1p-127f, 7.9999995f, 1e30f,
};

static void fill(float *x, int64_t n, double p_special)
{
    for (int64_t i = 0; i < n; i++) {
        double u = (double)(rnd() >> 11) * 0x1p-53;
        if (u < p_special * 0.1)
            x[i] = bits_f(rnd() & 1 ? 0x7FA00000u : 0xFFA00001u);
        else if (u < p_special)
            x[i] = special[rnd() % (sizeof special / sizeof special[0])];
        else if (u < p_special + 0.02 && i > 0)
            x[i] = x[i - 1];
        else {
            double a = (double)(rnd() >> 11) * 0x1p-53, b = (double)(rnd() >> 11) * 0x1p-53;
            x[i] = (float)(sqrt(-2.0 * log(a + 1e-300)) * cos(6.283185307179586 * b) *
                           ldexp(1.0, (int)(rnd() % 40) - 20));
        }
    }
}

static qs_ctx *cpu_ctx(void)
{
    qs_ctx_params cp;
    qs_ctx *c;
    qs_ctx_params_init(&cp);
    cp.backend = QS_BACKEND_CPU;
    if (qs_ctx_create(&cp, &c) != QS_OK)
        exit(2);
    return c;
}

struct planes {
    qs_qtensor q;
    int64_t bytes[QS_PLANE_COUNT];
};

static void planes_new(struct planes *t, const qs_quant_params *p, int64_t rows, int64_t cols,
                       int device)
{
    void **ptr[QS_PLANE_COUNT] = {&t->q.data, &t->q.scale, &t->q.zero_point, &t->q.nested_scale};
    int64_t *cap[QS_PLANE_COUNT] = {&t->q.data_bytes, &t->q.scale_bytes, &t->q.zero_point_bytes,
                                    &t->q.nested_scale_bytes};
    memset(t, 0, sizeof *t);
    for (int k = 0; k < QS_PLANE_COUNT; k++) {
        qs_quant_size(p, rows, cols, k, &t->bytes[k]);
        *cap[k] = t->bytes[k];
        if (!t->bytes[k])
            continue;
        if (device)
            CU(cudaMalloc(ptr[k], (size_t)t->bytes[k]));
        else
            *ptr[k] = malloc((size_t)t->bytes[k]);
    }
}

static void planes_free(struct planes *t, int device)
{
    void *ptr[QS_PLANE_COUNT] = {t->q.data, t->q.scale, t->q.zero_point, t->q.nested_scale};
    for (int k = 0; k < QS_PLANE_COUNT; k++)
        if (ptr[k])
            device ? (void)cudaFree(ptr[k]) : free(ptr[k]);
}

static int same(const char *what, const void *a, const void *b, size_t n, const char *name)
{
    const uint8_t *x = a, *y = b;
    for (size_t i = 0; i < n; i++)
        if (x[i] != y[i]) {
            report("FAIL %s %s: byte %zu of %zu: gpu 0x%02x cpu 0x%02x\n", name, what, i, n, x[i],
                   y[i]);
            return 0;
        }
    return 1;
}

/* One format and option on one shape and dtype: quantize and dequantize on both backends. */
static void check_quant(const char *name, const qs_quant_params *p, int64_t rows, int64_t cols,
                        int32_t dtype, qs_ctx *cpu, qs_ctx *gpu_msg)
{
    int64_t n = rows * cols, esz = qs_dtype_size(dtype), bytes;
    struct planes h, d, back;
    float *x = malloc((size_t)(n ? n : 1) * 4);
    void *src = malloc((size_t)(n ? n : 1) * (size_t)esz), *dsrc, *ddst;
    void *deq_cpu = malloc((size_t)(n ? n : 1) * (size_t)esz);
    void *deq_gpu = malloc((size_t)(n ? n : 1) * (size_t)esz);
    char label[160];
    qs_status sc, sg;
    int ok = 1;

    if (qs_quant_size(p, rows, cols, QS_PLANE_DATA, &bytes) != QS_OK)
        goto skip;
    snprintf(label, sizeof label, "%s %lldx%lld %s", name, (long long)rows, (long long)cols,
             qs_dtype_name(dtype));
    fill(x, n, 0.03);
    if (dtype == QS_DTYPE_F32)
        memcpy(src, x, (size_t)n * 4);
    else
        qs_convert(cpu, x, QS_DTYPE_F32, src, dtype, n, n * esz);
    planes_new(&h, p, rows, cols, 0);
    planes_new(&d, p, rows, cols, 1);
    planes_new(&back, p, rows, cols, 0);
    CU(cudaMalloc(&dsrc, (size_t)(n ? n : 1) * (size_t)esz));
    CU(cudaMalloc(&ddst, (size_t)(n ? n : 1) * (size_t)esz));
    CU(cudaMemcpy(dsrc, src, (size_t)(n * esz), cudaMemcpyHostToDevice));
    sc = qs_quantize(cpu, p, src, dtype, rows, cols, &h.q);
    sg = qs_cuda_quantize(gpu_msg, p, dsrc, dtype, rows, cols, &d.q, NULL);
    CU(cudaDeviceSynchronize());
    checks++;
    if (sc != QS_OK || sg != QS_OK) {
        report("FAIL %s: status cpu %d gpu %d (%s)\n", label, sc, sg, qs_ctx_last_error(gpu_msg));
        ok = 0;
    }
    {
        void *hp[QS_PLANE_COUNT] = {h.q.data, h.q.scale, h.q.zero_point, h.q.nested_scale};
        void *dp[QS_PLANE_COUNT] = {d.q.data, d.q.scale, d.q.zero_point, d.q.nested_scale};
        void *bp[QS_PLANE_COUNT] = {back.q.data, back.q.scale, back.q.zero_point,
                                    back.q.nested_scale};
        for (int k = 0; ok && k < QS_PLANE_COUNT; k++) {
            if (!h.bytes[k])
                continue;
            CU(cudaMemcpy(bp[k], dp[k], (size_t)h.bytes[k], cudaMemcpyDeviceToHost));
            ok = same(k == 0 ? "data plane" : "scale/zero/nested plane", bp[k], hp[k],
                      (size_t)h.bytes[k], label);
        }
    }
    if (ok && (memcmp(&h.q.global_scale, &d.q.global_scale, 4) ||
               memcmp(&h.q.nested_offset, &d.q.nested_offset, 4))) {
        report("FAIL %s: global_scale or nested_offset differ\n", label);
        ok = 0;
    }
    if (ok) {
        /* dequantize the CPU's planes on both */
        void *hp[QS_PLANE_COUNT] = {h.q.data, h.q.scale, h.q.zero_point, h.q.nested_scale};
        void *dp[QS_PLANE_COUNT] = {d.q.data, d.q.scale, d.q.zero_point, d.q.nested_scale};
        for (int k = 0; k < QS_PLANE_COUNT; k++)
            if (h.bytes[k])
                CU(cudaMemcpy(dp[k], hp[k], (size_t)h.bytes[k], cudaMemcpyHostToDevice));
        sc = qs_dequantize(cpu, p, &h.q, rows, cols, deq_cpu, dtype, n * esz);
        sg = qs_cuda_dequantize(gpu_msg, p, &d.q, rows, cols, ddst, dtype, n * esz, NULL);
        CU(cudaMemcpy(deq_gpu, ddst, (size_t)(n * esz), cudaMemcpyDeviceToHost));
        if (sc != QS_OK || sg != QS_OK) {
            report("FAIL %s dequantize: status cpu %d gpu %d (%s)\n", label, sc, sg,
                   qs_ctx_last_error(gpu_msg));
            ok = 0;
        } else {
            ok = same("dequantized", deq_gpu, deq_cpu, (size_t)(n * esz), label);
        }
    }
    failures += !ok;
    planes_free(&h, 0);
    planes_free(&back, 0);
    planes_free(&d, 1);
    cudaFree(dsrc);
    cudaFree(ddst);
skip:
    free(x);
    free(src);
    free(deq_cpu);
    free(deq_gpu);
}

static void check_gemv(const char *name, const qs_quant_params *p, int64_t rows, int64_t cols,
                       qs_ctx *cpu, qs_ctx *gpu_msg)
{
    int64_t n = rows * cols, units = 0, bytes;
    struct planes h, d;
    float *w = malloc((size_t)n * 4), *x = malloc((size_t)cols * 4);
    float *want = malloc((size_t)rows * 4), *got = malloc((size_t)rows * 4), *dx, *dy;
    float *absmax = NULL;
    int ok = 1;

    if (qs_quant_size(p, rows, cols, QS_PLANE_DATA, &bytes) != QS_OK)
        return;
    fill(w, n, 0.0);
    fill(x, cols, 0.01);
    planes_new(&h, p, rows, cols, 0);
    planes_new(&d, p, rows, cols, 1);
    qs_quantize(cpu, p, w, QS_DTYPE_F32, rows, cols, &h.q);
    if (p->format == QS_FORMAT_NF4) {
        units = (n + p->block_size - 1) / p->block_size;
        if (p->double_quant) {
            absmax = malloc((size_t)units * 4);
            qs_dyn8_dequant__ref(h.q.scale, h.q.nested_scale, units, 256, h.q.nested_offset,
                                 absmax);
        }
    }
    for (int64_t r = 0; r < rows; r++) {
        if (p->format == QS_FORMAT_NF4) {
            want[r] = qs_mm_dot_nf4__ref(x, cols, h.q.data, r * cols,
                                         absmax ? absmax : (const float *)h.q.scale,
                                         p->block_size);
        } else {
            int64_t u = p->granularity == QS_GRAN_ROW     ? r
                        : p->granularity == QS_GRAN_GROUP ? r * (cols / p->block_size)
                                                          : 0;
            int64_t group = p->granularity == QS_GRAN_GROUP ? p->block_size : cols;
            want[r] = qs_mm_dot_int8__ref(x, cols, (const int8_t *)h.q.data + r * cols,
                                          (const float *)h.q.scale + u,
                                          p->symmetric ? NULL
                                                       : (const int8_t *)h.q.zero_point + u,
                                          group);
        }
    }
    {
        void *hp[QS_PLANE_COUNT] = {h.q.data, h.q.scale, h.q.zero_point, h.q.nested_scale};
        void *dp[QS_PLANE_COUNT] = {d.q.data, d.q.scale, d.q.zero_point, d.q.nested_scale};
        for (int k = 0; k < QS_PLANE_COUNT; k++)
            if (h.bytes[k])
                CU(cudaMemcpy(dp[k], hp[k], (size_t)h.bytes[k], cudaMemcpyHostToDevice));
        d.q.nested_offset = h.q.nested_offset;
    }
    CU(cudaMalloc((void **)&dx, (size_t)cols * 4));
    CU(cudaMalloc((void **)&dy, (size_t)rows * 4));
    CU(cudaMemcpy(dx, x, (size_t)cols * 4, cudaMemcpyHostToDevice));
    checks++;
    if (qs_cuda_gemv(gpu_msg, p, &d.q, rows, cols, dx, dy, NULL) != QS_OK) {
        report("FAIL gemv %s: %s\n", name, qs_ctx_last_error(gpu_msg));
        ok = 0;
    } else {
        char label[128];
        CU(cudaMemcpy(got, dy, (size_t)rows * 4, cudaMemcpyDeviceToHost));
        snprintf(label, sizeof label, "gemv %s %lldx%lld", name, (long long)rows,
                 (long long)cols);
        ok = same("y", got, want, (size_t)rows * 4, label);
    }
    failures += !ok;
    planes_free(&h, 0);
    planes_free(&d, 1);
    cudaFree(dx);
    cudaFree(dy);
    free(w);
    free(x);
    free(want);
    free(got);
    free(absmax);
}

/* 2:4 prune+compress (|w| or Wanda), compress by mask, decompress: GPU against CPU. */
static int64_t vb_dummy(int64_t n)
{
    return (n / 2 > 0 ? n / 2 : 1) * 4;
}

static void check_sp24(int64_t rows, int64_t cols, int wanda, qs_ctx *cpu, qs_ctx *msg)
{
    int64_t n = rows * cols, vb, mc;
    float *w = malloc((size_t)n * 4), *norms = malloc((size_t)cols * 4);
    float *vals = malloc((size_t)vb_dummy(n)), *vals_g = malloc((size_t)vb_dummy(n));
    float *dense = malloc((size_t)n * 4), *dense_g = malloc((size_t)n * 4);
    uint8_t *mask = malloc((size_t)n), *mask_g = malloc((size_t)n);
    uint16_t *meta, *meta_g;
    void *dw, *dn, *dv, *dm, *dk, *dd;
    char label[96];
    int ok = 1;

    qs_sp24_size(QS_DTYPE_F32, rows, cols, &vb, &mc);
    meta = malloc((size_t)mc * 2);
    meta_g = malloc((size_t)mc * 2);
    fill(w, n, 0.03);
    for (int64_t c = 0; c < cols; c++)
        norms[c] = (float)((rnd() >> 11) * 0x1p-53 * 4.0);
    snprintf(label, sizeof label, "sp24 %s %lldx%lld", wanda ? "wanda" : "|w|", (long long)rows,
             (long long)cols);
    CU(cudaMalloc(&dw, (size_t)n * 4));
    CU(cudaMalloc(&dn, (size_t)cols * 4));
    CU(cudaMalloc(&dv, (size_t)vb));
    CU(cudaMalloc(&dm, (size_t)mc * 2));
    CU(cudaMalloc(&dk, (size_t)n));
    CU(cudaMalloc(&dd, (size_t)n * 4));
    CU(cudaMemcpy(dw, w, (size_t)n * 4, cudaMemcpyHostToDevice));
    CU(cudaMemcpy(dn, norms, (size_t)cols * 4, cudaMemcpyHostToDevice));
    checks++;
    if (qs_sp24_prune_compress(cpu, w, QS_DTYPE_F32, rows, cols, wanda ? norms : NULL, vals, vb,
                               meta, mc, mask, n) != QS_OK ||
        qs_cuda_sp24_prune_compress(msg, dw, rows, cols, wanda ? dn : NULL, dv, vb, dm, mc, dk, n,
                                    NULL) != QS_OK) {
        report("FAIL %s prune: %s\n", label, qs_ctx_last_error(msg));
        ok = 0;
    }
    if (ok) {
        CU(cudaMemcpy(vals_g, dv, (size_t)vb, cudaMemcpyDeviceToHost));
        CU(cudaMemcpy(meta_g, dm, (size_t)mc * 2, cudaMemcpyDeviceToHost));
        CU(cudaMemcpy(mask_g, dk, (size_t)n, cudaMemcpyDeviceToHost));
        ok = same("values", vals_g, vals, (size_t)vb, label) &&
             same("meta", meta_g, meta, (size_t)mc * 2, label) &&
             same("mask", mask_g, mask, (size_t)n, label);
    }
    if (ok) { /* compress by the CPU's mask, then decompress */
        if (qs_cuda_sp24_compress(msg, dw, rows, cols, dk, dv, vb, dm, mc, NULL) != QS_OK) {
            report("FAIL %s compress: %s\n", label, qs_ctx_last_error(msg));
            ok = 0;
        } else {
            CU(cudaMemcpy(vals_g, dv, (size_t)vb, cudaMemcpyDeviceToHost));
            ok = same("compressed values", vals_g, vals, (size_t)vb, label);
        }
    }
    if (ok) {
        qs_sp24_decompress(cpu, vals, QS_DTYPE_F32, meta, mc, rows, cols, dense, n * 4);
        if (qs_cuda_sp24_decompress(msg, dv, dm, mc, rows, cols, dd, n * 4, NULL) != QS_OK) {
            report("FAIL %s decompress: %s\n", label, qs_ctx_last_error(msg));
            ok = 0;
        } else {
            CU(cudaMemcpy(dense_g, dd, (size_t)n * 4, cudaMemcpyDeviceToHost));
            ok = same("decompressed", dense_g, dense, (size_t)n * 4, label);
        }
    }
    failures += !ok;
    cudaFree(dw), cudaFree(dn), cudaFree(dv), cudaFree(dm), cudaFree(dk), cudaFree(dd);
    free(w), free(norms), free(vals), free(vals_g), free(dense), free(dense_g), free(mask);
    free(mask_g), free(meta), free(meta_g);
}

struct fmt_case {
    const char *name;
    int32_t format, block, dq, gran, sym, rounding;
    float scale;
};

static const struct fmt_case cases[] = {
    {"nf4", QS_FORMAT_NF4, 64, 0, 0, 1, 0, 0},        {"nf4-dq", QS_FORMAT_NF4, 64, 1, 0, 1, 0, 0},
    {"nf4-b4096", QS_FORMAT_NF4, 4096, 0, 0, 1, 0, 0}, {"fp4", QS_FORMAT_FP4, 64, 0, 0, 1, 0, 0},
    {"fp4-dq", QS_FORMAT_FP4, 128, 1, 0, 1, 0, 0},
    {"int8-tensor", QS_FORMAT_INT8, 0, 0, QS_GRAN_TENSOR, 1, 0, 0},
    {"int8-row", QS_FORMAT_INT8, 0, 0, QS_GRAN_ROW, 1, 0, 0},
    {"int8-row-asym", QS_FORMAT_INT8, 0, 0, QS_GRAN_ROW, 0, 0, 0},
    {"int8-group128", QS_FORMAT_INT8, 128, 0, QS_GRAN_GROUP, 1, 0, 0},
    {"int8-group128-asym", QS_FORMAT_INT8, 128, 0, QS_GRAN_GROUP, 0, 0, 0},
    {"llm-int8", QS_FORMAT_LLM_INT8, 0, 0, 0, 1, 0, 0},
    {"fp8-e4m3", QS_FORMAT_FP8_E4M3, 0, 0, 0, 1, 0, 0},
    {"fp8-e4m3-given", QS_FORMAT_FP8_E4M3, 0, 0, 0, 1, 0, 3.0f},
    {"fp8-e5m2", QS_FORMAT_FP8_E5M2, 0, 0, 0, 1, 0, 0},
    {"mxfp4", QS_FORMAT_MXFP4, 0, 0, 0, 1, 0, 0}, {"mxfp4-rceil", QS_FORMAT_MXFP4, 0, 0, 0, 1, 1, 0},
    {"mxfp8", QS_FORMAT_MXFP8, 0, 0, 0, 1, 0, 0}, {"nvfp4", QS_FORMAT_NVFP4, 0, 0, 0, 1, 0, 0},
    {"nvfp4-given", QS_FORMAT_NVFP4, 0, 0, 0, 1, 0, 0.01f},
};
#define NCASES ((int)(sizeof cases / sizeof cases[0]))

static qs_quant_params params_of(const struct fmt_case *c)
{
    qs_quant_params p;
    qs_quant_params_init(&p, c->format);
    if (c->block)
        p.block_size = c->block;
    p.double_quant = c->dq;
    if (c->format == QS_FORMAT_INT8) {
        p.granularity = c->gran;
        p.symmetric = c->sym;
    }
    p.scale_rounding = c->rounding;
    p.scale = c->scale;
    return p;
}

/* ---- benchmarks ------------------------------------------------------------------------------ */

static float time_ms(void (*fn)(void *), void *arg, int reps)
{
    cudaEvent_t a, b;
    float ms, best = 1e30f;
    CU(cudaEventCreate(&a));
    CU(cudaEventCreate(&b));
    fn(arg); /* warm-up */
    CU(cudaDeviceSynchronize());
    for (int r = 0; r < reps; r++) {
        CU(cudaEventRecord(a, 0));
        fn(arg);
        CU(cudaEventRecord(b, 0));
        CU(cudaEventSynchronize(b));
        CU(cudaEventElapsedTime(&ms, a, b));
        if (ms < best)
            best = ms;
    }
    cudaEventDestroy(a);
    cudaEventDestroy(b);
    return best;
}

struct bench_arg {
    qs_ctx *ctx;
    qs_quant_params p;
    qs_qtensor q;
    void *src, *dst, *x, *y;
    int64_t rows, cols, bytes;
};

static void do_copy(void *v)
{
    struct bench_arg *a = v;
    cudaMemcpyAsync(a->dst, a->src, (size_t)a->bytes, cudaMemcpyDeviceToDevice, 0);
}

static void do_quant(void *v)
{
    struct bench_arg *a = v;
    if (qs_cuda_quantize(a->ctx, &a->p, a->src, QS_DTYPE_F32, a->rows, a->cols, &a->q, NULL))
        report("FAIL bench quantize: %s\n", qs_ctx_last_error(a->ctx)), failures++;
}

static void do_dequant(void *v)
{
    struct bench_arg *a = v;
    if (qs_cuda_dequantize(a->ctx, &a->p, &a->q, a->rows, a->cols, a->dst, QS_DTYPE_F32,
                           a->rows * a->cols * 4, NULL))
        report("FAIL bench dequantize: %s\n", qs_ctx_last_error(a->ctx)), failures++;
}

static void do_gemv(void *v)
{
    struct bench_arg *a = v;
    if (qs_cuda_gemv(a->ctx, &a->p, &a->q, a->rows, a->cols, a->x, a->y, NULL))
        report("FAIL bench gemv: %s\n", qs_ctx_last_error(a->ctx)), failures++;
}

static void bench(qs_ctx *ctx)
{
    const int64_t rows = 8192, cols = 8192, n = rows * cols;
    struct bench_arg a;
    struct planes d;
    float copy_ms, copy_gbs;

    memset(&a, 0, sizeof a);
    a.ctx = ctx;
    a.rows = rows;
    a.cols = cols;
    a.bytes = n * 4;
    CU(cudaMalloc(&a.src, (size_t)a.bytes));
    CU(cudaMalloc(&a.dst, (size_t)a.bytes));
    CU(cudaMalloc(&a.x, (size_t)cols * 4));
    CU(cudaMalloc(&a.y, (size_t)rows * 4));
    {
        float *h = malloc((size_t)a.bytes);
        fill(h, n, 0.0);
        CU(cudaMemcpy(a.src, h, (size_t)a.bytes, cudaMemcpyHostToDevice));
        CU(cudaMemcpy(a.x, h, (size_t)cols * 4, cudaMemcpyHostToDevice));
        free(h);
    }
    copy_ms = time_ms(do_copy, &a, 20);
    copy_gbs = (float)(2.0 * (double)a.bytes / (copy_ms * 1e-3) / 1e9);
    report("BENCH d2d-copy %lld MiB: %.3f ms, %.0f GB/s (bytes read + written)\n",
           (long long)(a.bytes >> 20), copy_ms, copy_gbs);
    for (int c = 0; c < NCASES; c++) {
        int64_t moved = a.bytes;
        float qms, dms;
        a.p = params_of(&cases[c]);
        planes_new(&d, &a.p, rows, cols, 1);
        a.q = d.q;
        for (int k = 0; k < QS_PLANE_COUNT; k++)
            moved += d.bytes[k];
        qms = time_ms(do_quant, &a, 10);
        dms = time_ms(do_dequant, &a, 10);
        report("BENCH %-20s 8192x8192 f32: quantize %.3f ms %.0f GB/s (%.0f%% of copy), "
               "dequantize %.3f ms %.0f GB/s (%.0f%% of copy)\n",
               cases[c].name, qms, moved / (qms * 1e-3) / 1e9,
               100.0 * moved / (qms * 1e-3) / 1e9 / copy_gbs, dms, moved / (dms * 1e-3) / 1e9,
               100.0 * moved / (dms * 1e-3) / 1e9 / copy_gbs);
        if (cases[c].format == QS_FORMAT_NF4 && !cases[c].dq && cases[c].block == 64) {
            float gms = time_ms(do_gemv, &a, 20);
            int64_t wbytes = d.bytes[0] + d.bytes[1];
            report("BENCH gemv-nf4 8192x8192: %.3f ms, %.0f GB/s on the compressed bytes "
                   "(%.0f%% of copy)\n",
                   gms, wbytes / (gms * 1e-3) / 1e9,
                   100.0 * wbytes / (gms * 1e-3) / 1e9 / copy_gbs);
        }
        if (cases[c].format == QS_FORMAT_INT8 && cases[c].gran == QS_GRAN_ROW && cases[c].sym) {
            float gms = time_ms(do_gemv, &a, 20);
            int64_t wbytes = d.bytes[0] + d.bytes[1];
            report("BENCH gemv-int8-row 8192x8192: %.3f ms, %.0f GB/s on the compressed bytes "
                   "(%.0f%% of copy)\n",
                   gms, wbytes / (gms * 1e-3) / 1e9,
                   100.0 * wbytes / (gms * 1e-3) / 1e9 / copy_gbs);
        }
        planes_free(&d, 1);
    }
    cudaFree(a.src);
    cudaFree(a.dst);
    cudaFree(a.x);
    cudaFree(a.y);
}

int main(int argc, char **argv)
{
    const int64_t shapes[][2] = {{1, 1}, {1, 7}, {3, 33}, {5, 100}, {7, 1000}, {2, 16385},
                                 {64, 4096}, {1, 1 << 20}, {1023, 1025}, {4096, 4096}};
    const int32_t dtypes[3] = {QS_DTYPE_F32, QS_DTYPE_F16, QS_DTYPE_BF16};
    int do_bench = argc > 2 && strcmp(argv[1], "--bench") == 0;
    qs_ctx *cpu = cpu_ctx(), *msg = cpu_ctx();
    struct cudaDeviceProp prop;

    out = fopen(argv[argc - 1], "w");
    if (argc < 2 || !out) {
        fprintf(stderr, "usage: gpu_check [--bench] RESULTS_FILE\n");
        return 2;
    }
    rng_s = 12345;
    CU(cudaGetDeviceProperties(&prop, 0));
    report("device: %s, compute capability %d.%d, %d SMs\n", prop.name, prop.major, prop.minor,
           prop.multiProcessorCount);
    if (!qs_backend_available(QS_BACKEND_CUDA)) {
        report("FAIL the CUDA backend is not available: %s\n",
               qs_backend_message(QS_BACKEND_CUDA));
        return 1;
    }
    for (int c = 0; c < NCASES; c++) {
        qs_quant_params p = params_of(&cases[c]);
        int before = failures;
        for (size_t s = 0; s < sizeof shapes / sizeof shapes[0]; s++)
            for (int d = 0; d < 3; d++) {
                if (shapes[s][0] * shapes[s][1] > (1 << 20) + 4096 && d > 0)
                    continue; /* the largest shapes in f32 only, to keep the run short */
                check_quant(cases[c].name, &p, shapes[s][0], shapes[s][1], dtypes[d], cpu, msg);
            }
        report("%s %s: quantize + dequantize, %d shapes x dtypes\n",
               failures == before ? "ok  " : "FAIL", cases[c].name,
               (int)(sizeof shapes / sizeof shapes[0]) * 3);
    }
    {
        const int64_t gshapes[][2] = {{1, 1}, {3, 7}, {17, 333}, {8, 1024}, {2, 4099},
                                      {1024, 4096}, {8192, 8192}};
        int before = failures;
        for (size_t s = 0; s < sizeof gshapes / sizeof gshapes[0]; s++)
            for (int c = 0; c < NCASES; c++) {
                qs_quant_params p = params_of(&cases[c]);
                if (cases[c].format != QS_FORMAT_NF4 && cases[c].format != QS_FORMAT_INT8)
                    continue;
                check_gemv(cases[c].name, &p, gshapes[s][0], gshapes[s][1], cpu, msg);
            }
        report("%s gemv: NF4 and INT8 against the reference dot products\n",
               failures == before ? "ok  " : "FAIL");
    }
    {
        const int64_t sshapes[][2] = {{1, 4}, {3, 20}, {7, 100}, {5, 1028}, {4096, 4096}};
        int before = failures;
        for (size_t s = 0; s < sizeof sshapes / sizeof sshapes[0]; s++)
            for (int wanda = 0; wanda < 2; wanda++)
                check_sp24(sshapes[s][0], sshapes[s][1], wanda, cpu, msg);
        report("%s sp24: prune, compress, decompress against the CPU\n",
               failures == before ? "ok  " : "FAIL");
    }
    if (do_bench)
        bench(msg);
    report("SUMMARY %d checks, %d failed\n", checks, failures);
    fclose(out);
    qs_ctx_destroy(cpu);
    qs_ctx_destroy(msg);
    return failures ? 1 : 0;
}
