/* SPDX-License-Identifier: MIT */
/*
 * qs_matmul against OpenBLAS on the dense float32 weights, same shapes, same run, one thread
 * (OpenBLAS is told so too): GEMV (M = 1) for NF4 with f32 and int8 activations, INT8 row
 * W8A8, 2:4 + NF4, against cblas_sgemv; NF4 GEMM at M = 512 against cblas_sgemm. The weights of
 * each case cycle over enough matrices that the working set exceeds the last-level cache, so
 * every call streams its weight from memory; the read bandwidth of one pass over the f32
 * matrices is measured in the same run. Prints time per call, the ratio to OpenBLAS (> 1: we are
 * faster), GB/s of weight bytes and OPENBLAS_CORETYPE.
 *
 * Usage: bench_matmul [N=K] [copies]   (default 4096 and 8)
 *        QS_BENCH_INT8_ONLY=1: only the int8-activation table; QS_BENCH_NO_INT8=1: without it
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "bench_util.h"
#include "qsparse.h"

#ifdef QS_HAVE_BLAS
#include <cblas.h>

#define REPS 9

typedef struct {
    const char *name;
    qs_quant_params p;
    qs_qtensor q;
    qs_weight w;
    uint16_t *meta;
    int64_t bytes;
} wcopy;

static void *xmalloc(size_t n)
{
    void *p = malloc(n ? n : 1);
    if (!p) {
        fprintf(stderr, "out of memory\n");
        exit(1);
    }
    return p;
}

static void make_quant(qs_ctx *ctx, const float *w, int64_t N, int64_t K, int32_t fmt, int sparse,
                       wcopy *c)
{
    void **ptr[QS_PLANE_COUNT] = {&c->q.data, &c->q.scale, &c->q.zero_point, &c->q.nested_scale};
    int64_t *cap[QS_PLANE_COUNT] = {&c->q.data_bytes, &c->q.scale_bytes, &c->q.zero_point_bytes,
                                    &c->q.nested_scale_bytes};
    int64_t cols = sparse ? K / 2 : K, mc = N * ((K + 15) / 16);

    memset(c, 0, sizeof *c);
    qs_quant_params_init(&c->p, fmt);
    for (int i = 0; i < QS_PLANE_COUNT; i++) {
        int64_t b = 0;
        qs_quant_size(&c->p, N, cols, i, &b);
        *ptr[i] = b > 0 ? xmalloc((size_t)b) : NULL;
        *cap[i] = b;
        c->bytes += b;
    }
    c->w.quant = &c->p;
    c->w.q = &c->q;
    if (!sparse) {
        c->w.kind = QS_WEIGHT_QUANT;
        if (qs_quantize(ctx, &c->p, w, QS_DTYPE_F32, N, K, &c->q) != QS_OK)
            exit(1);
        return;
    }
    c->meta = xmalloc((size_t)mc * 2);
    c->bytes += mc * 2;
    {
        int64_t vb = 0;
        float *vals, *pruned = xmalloc((size_t)(N * K) * 4);
        qs_sp24_size(QS_DTYPE_F32, N, K, &vb, NULL);
        vals = xmalloc((size_t)vb);
        if (qs_sp24_prune_compress(ctx, w, QS_DTYPE_F32, N, K, NULL, vals, vb, c->meta, mc, NULL,
                                   0) != QS_OK ||
            qs_sp24_decompress(ctx, vals, QS_DTYPE_F32, c->meta, mc, N, K, pruned, N * K * 4) !=
                QS_OK ||
            qs_sp24_quantize(ctx, &c->p, pruned, QS_DTYPE_F32, N, K, NULL, &c->q, c->meta, mc) !=
                QS_OK)
            exit(1);
        free(vals);
        free(pruned);
    }
    c->w.kind = QS_WEIGHT_SP24_QUANT;
    c->w.meta = c->meta;
    c->w.meta_count = mc;
}

static void free_quant(wcopy *c)
{
    free(c->q.data);
    free(c->q.scale);
    free(c->q.zero_point);
    free(c->q.nested_scale);
    free(c->meta);
    memset(&c->q, 0, sizeof c->q);
    c->meta = NULL;
}

/* A dense weight quantized with the parameters already in c->p. */
static void make_quant_p(qs_ctx *ctx, const float *w, int64_t N, int64_t K, wcopy *c)
{
    void **ptr[QS_PLANE_COUNT] = {&c->q.data, &c->q.scale, &c->q.zero_point, &c->q.nested_scale};
    int64_t *cap[QS_PLANE_COUNT] = {&c->q.data_bytes, &c->q.scale_bytes, &c->q.zero_point_bytes,
                                    &c->q.nested_scale_bytes};

    c->bytes = 0;
    for (int i = 0; i < QS_PLANE_COUNT; i++) {
        int64_t b = 0;
        qs_quant_size(&c->p, N, K, i, &b);
        *ptr[i] = b > 0 ? xmalloc((size_t)b) : NULL;
        *cap[i] = b;
        c->bytes += b;
    }
    c->w.quant = &c->p;
    c->w.q = &c->q;
    c->w.kind = QS_WEIGHT_QUANT;
    if (qs_quantize(ctx, &c->p, w, QS_DTYPE_F32, N, K, &c->q) != QS_OK) {
        fprintf(stderr, "qs_quantize: %s\n", qs_ctx_last_error(ctx));
        exit(1);
    }
}

/* Median seconds per call of qs_matmul over the copies, cycling. */
static double time_qs(qs_ctx *ctx, const qs_matmul_params *mp, const float *x, int64_t M, int64_t K,
                      const wcopy *c, int copies, int64_t N, float *y)
{
    double t[REPS];
    for (int r = 0; r < REPS; r++) {
        double t0 = now();
        for (int i = 0; i < copies; i++)
            if (qs_matmul(ctx, mp, x, QS_DTYPE_F32, M, K, &c[i].w, N, NULL, y, M * N * 4) !=
                QS_OK) {
                fprintf(stderr, "qs_matmul: %s\n", qs_ctx_last_error(ctx));
                exit(1);
            }
        t[r] = (now() - t0) / copies;
    }
    return median(t, REPS);
}

static double time_blas(float *const *wf, int fcopies, const float *x, int64_t M, int64_t K,
                        int64_t N, float *y)
{
    double t[REPS];
    for (int r = 0; r < REPS; r++) {
        double t0 = now();
        for (int i = 0; i < fcopies; i++) {
            if (M == 1)
                cblas_sgemv(CblasRowMajor, CblasNoTrans, (int)N, (int)K, 1.0f, wf[i], (int)K, x, 1,
                            0.0f, y, 1);
            else
                cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasTrans, (int)M, (int)N, (int)K, 1.0f,
                            x, (int)K, wf[i], (int)K, 0.0f, y, (int)N);
        }
        t[r] = (now() - t0) / fcopies;
    }
    return median(t, REPS);
}

/* Seconds per call of one pass of OpenBLAS over the f32 copies. */
static double time_blas_once(float *const *wf, int fcopies, const float *x, int64_t M, int64_t K,
                             int64_t N, float *y)
{
    double t0 = now();
    for (int i = 0; i < fcopies; i++) {
        if (M == 1)
            cblas_sgemv(CblasRowMajor, CblasNoTrans, (int)N, (int)K, 1.0f, wf[i], (int)K, x, 1,
                        0.0f, y, 1);
        else
            cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasTrans, (int)M, (int)N, (int)K, 1.0f, x,
                        (int)K, wf[i], (int)K, 0.0f, y, (int)N);
    }
    return (now() - t0) / fcopies;
}

/* Fastest seconds per call of qs_matmul (over the copies) and of OpenBLAS (over the f32 copies),
 * measured alternately `reps` times: on a loaded machine each side's minimum is its least
 * disturbed pass, and both come from the same stretch of time. */
static void paired_min(qs_ctx *ctx, const qs_matmul_params *mp, const float *x, int64_t M,
                       int64_t K, const wcopy *c, int copies, int64_t N, float *y, float *const *wf,
                       int fcopies, int reps, double *tq, double *tb)
{
    *tq = *tb = 1e30;
    for (int r = 0; r < reps; r++) {
        double b = time_blas_once(wf, fcopies, x, M, K, N, y), t0 = now();
        for (int i = 0; i < copies; i++)
            if (qs_matmul(ctx, mp, x, QS_DTYPE_F32, M, K, &c[i].w, N, NULL, y, M * N * 4) !=
                QS_OK) {
                fprintf(stderr, "qs_matmul: %s\n", qs_ctx_last_error(ctx));
                exit(1);
            }
        double q = (now() - t0) / copies;
        *tq = q < *tq ? q : *tq;
        *tb = b < *tb ? b : *tb;
    }
}

/* int8-activation cases (matmul_act8.c): every integer weight kind as a GEMV against sgemv, and
 * W8A8 GEMM at M = Mg against sgemm, each ratio from paired_min. */
static void bench_int8(qs_ctx *ctx, float *const *wf, int fcopies, int copies, const float *x,
                       int64_t Mg, int64_t N, int64_t K, float *y)
{
    static const struct {
        const char *name;
        int32_t fmt, gran, sym, block;
        float threshold;
    } kinds[] = {
        {"NF4 x int8", QS_FORMAT_NF4, 0, 0, 64, 0.0f},
        {"FP4 x int8", QS_FORMAT_FP4, 0, 0, 64, 0.0f},
        {"INT8 row W8A8", QS_FORMAT_INT8, QS_GRAN_ROW, 1, 0, 0.0f},
        {"INT8 row asym W8A8", QS_FORMAT_INT8, QS_GRAN_ROW, 0, 0, 0.0f},
        {"INT8 tensor W8A8", QS_FORMAT_INT8, QS_GRAN_TENSOR, 1, 0, 0.0f},
        {"INT8 group128 W8A8", QS_FORMAT_INT8, QS_GRAN_GROUP, 1, 128, 0.0f},
        {"LLM.int8 (no outliers)", QS_FORMAT_LLM_INT8, 0, 0, 0, 0.0f},
        {"LLM.int8 threshold 0.99", QS_FORMAT_LLM_INT8, 0, 0, 0, 0.99f},
    };
    wcopy *c = xmalloc(sizeof(wcopy) * (size_t)copies);
    qs_matmul_params p;

    qs_matmul_params_init(&p);
    p.activations = QS_MATMUL_ACT_INT8;
    printf("\nint8 activations: each case timed alternately with OpenBLAS, fastest of %d each\n",
           REPS);
    printf("%-28s %10s %10s %9s %10s\n", "case (M = 1)", "ms/call", "sgemv ms", "vs sgemv",
           "weight GB/s");
    for (size_t k = 0; k < sizeof kinds / sizeof kinds[0]; k++) {
        double t, b;
        for (int i = 0; i < copies; i++) {
            memset(&c[i], 0, sizeof c[i]);
            qs_quant_params_init(&c[i].p, kinds[k].fmt);
            if (kinds[k].gran)
                c[i].p.granularity = kinds[k].gran;
            if (kinds[k].fmt == QS_FORMAT_INT8)
                c[i].p.symmetric = kinds[k].sym;
            if (kinds[k].block)
                c[i].p.block_size = kinds[k].block;
            make_quant_p(ctx, wf[i % fcopies], N, K, &c[i]);
        }
        p.threshold = kinds[k].threshold;
        paired_min(ctx, &p, x, 1, K, c, copies, N, y, wf, fcopies, REPS, &t, &b);
        printf("%-28s %10.3f %10.3f %9.2f %10.1f\n", kinds[k].name, t * 1e3, b * 1e3, b / t,
               (double)c[0].bytes / t * 1e-9);
        if (kinds[k].fmt == QS_FORMAT_INT8 && kinds[k].gran == QS_GRAN_ROW && kinds[k].sym) {
            p.threshold = 0.0f;
            paired_min(ctx, &p, x, Mg, K, c, 1, N, y, wf, 1, 3, &t, &b);
            printf("%-28s %10.1f %10.1f %9.2f %10.1f   (M = %lld vs sgemm, GFLOP/s)\n",
                   "  W8A8 GEMM", t * 1e3, b * 1e3, b / t, 2.0 * (double)(Mg * N * K) / t * 1e-9,
                   (long long)Mg);
        }
        for (int i = 0; i < copies; i++)
            free_quant(&c[i]);
    }
    free(c);
}

int main(int argc, char **argv)
{
    int64_t N = argc > 1 ? atoll(argv[1]) : 4096, K = N, Mg = 512;
    int copies = argc > 2 ? atoi(argv[2]) : 8, fcopies = 2;
    const char *core = getenv("OPENBLAS_CORETYPE");
    char model[256];
    qs_ctx_params cp;
    qs_ctx *ctx = NULL;
    float *wf[2], *x, *y;
    wcopy *nf4, *i8, *spnf4;

    cpu_model(model, sizeof model);
    openblas_set_num_threads(1);
    qs_ctx_params_init(&cp);
    cp.num_threads = 1;
    if (qs_ctx_create(&cp, &ctx) != QS_OK)
        return 1;
    printf("bench_matmul: N = K = %lld, %d quantized copies, %d f32 copies, 1 thread\n",
           (long long)N, copies, fcopies);
    printf("CPU %s, tier %s, OPENBLAS_CORETYPE=%s, OpenBLAS %s\n", model, qs_ctx_isa_name(ctx),
           core ? core : "(unset)", OPENBLAS_VERSION);

    x = xmalloc((size_t)(Mg * K) * 4);
    y = xmalloc((size_t)(Mg * N) * 4);
    for (int64_t i = 0; i < Mg * K; i++)
        x[i] = (float)((i * 7919 % 2001) - 1000) / 1000.0f;
    nf4 = xmalloc(sizeof(wcopy) * (size_t)copies);
    i8 = xmalloc(sizeof(wcopy) * (size_t)copies);
    spnf4 = xmalloc(sizeof(wcopy) * (size_t)copies);
    for (int i = 0; i < fcopies; i++) {
        wf[i] = xmalloc((size_t)(N * K) * 4);
        for (int64_t e = 0; e < N * K; e++)
            wf[i][e] = (float)(((e + i) * 2654435761u % 4001) - 2000) / 40000.0f;
    }
    for (int i = 0; i < copies; i++) {
        make_quant(ctx, wf[i % fcopies], N, K, QS_FORMAT_NF4, 0, &nf4[i]);
        make_quant(ctx, wf[i % fcopies], N, K, QS_FORMAT_INT8, 0, &i8[i]);
        make_quant(ctx, wf[i % fcopies], N, K, QS_FORMAT_NF4, 1, &spnf4[i]);
    }
    {
        double rd = read_pass(wf[0], (size_t)(N * K) * 4);
        rd = read_pass(wf[1], (size_t)(N * K) * 4);
        printf("read bandwidth (one pass over a %lld MiB f32 matrix): %.1f GB/s\n",
               (long long)(N * K * 4 >> 20), (double)(N * K * 4) / rd * 1e-9);
    }

    if (getenv("QS_BENCH_INT8_ONLY")) { /* only the int8-activation table */
        bench_int8(ctx, wf, fcopies, copies, x, Mg, N, K, y);
        qs_ctx_destroy(ctx);
        return 0;
    }
    qs_matmul_params f32p, i8p;
    qs_matmul_params_init(&f32p);
    qs_matmul_params_init(&i8p);
    i8p.activations = QS_MATMUL_ACT_INT8;
    double sgemv = time_blas(wf, fcopies, x, 1, K, N, y);
    printf("\n%-28s %10s %9s %10s\n", "case (M = 1)", "ms/call", "vs sgemv", "weight GB/s");
    printf("%-28s %10.3f %9.2f %10.1f\n", "OpenBLAS sgemv f32", sgemv * 1e3, 1.0,
           (double)(N * K * 4) / sgemv * 1e-9);
    struct {
        const char *name;
        const wcopy *c;
        const qs_matmul_params *p;
    } cases[] = {
        {"NF4, f32 activations", nf4, &f32p},
        {"NF4, int8 activations", nf4, &i8p},
        {"INT8 row W8A8", i8, &i8p},
        {"INT8 row, f32 activations", i8, &f32p},
        {"2:4 + NF4, f32 activations", spnf4, &f32p},
    };
    for (size_t c = 0; c < sizeof cases / sizeof cases[0]; c++) {
        double t = time_qs(ctx, cases[c].p, x, 1, K, cases[c].c, copies, N, y);
        printf("%-28s %10.3f %9.2f %10.1f\n", cases[c].name, t * 1e3, sgemv / t,
               (double)cases[c].c[0].bytes / t * 1e-9);
    }
    double sgemm = time_blas(wf, fcopies, x, Mg, K, N, y);
    double tg = time_qs(ctx, &f32p, x, Mg, K, nf4, 2, N, y);
    printf("\n%-28s %10s %9s %10s\n", "case (M = 512)", "ms/call", "vs sgemm", "GFLOP/s");
    printf("%-28s %10.1f %9.2f %10.1f\n", "OpenBLAS sgemm f32", sgemm * 1e3, 1.0,
           2.0 * (double)(Mg * N * K) / sgemm * 1e-9);
    printf("%-28s %10.1f %9.2f %10.1f\n", "NF4 GEMM (panels + sgemm)", tg * 1e3, sgemm / tg,
           2.0 * (double)(Mg * N * K) / tg * 1e-9);
    if (!getenv("QS_BENCH_NO_INT8"))
        bench_int8(ctx, wf, fcopies, copies, x, Mg, N, K, y);
    qs_ctx_destroy(ctx);
    return 0;
}
#else
int main(void)
{
    printf("bench_matmul: this build has no OpenBLAS to compare with\n");
    return 77;
}
#endif
