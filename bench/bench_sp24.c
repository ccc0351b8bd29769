/* SPDX-License-Identifier: MIT */
/*
 * The 2:4 paths of qs_matmul against OpenBLAS on the same weight decompressed to dense f32, same
 * run, one thread (OpenBLAS too): GEMM (M = N = K, default 2048) against sgemm, and GEMV (M = 1,
 * N = K, default 4096) for f32, f16 and bf16 kept values and for NF4-quantized kept values (with
 * the dense NF4 GEMV beside it) against sgemv, each GEMV weight cycling over 8 copies so it
 * streams from memory (the dense NF4 one too: 75 MB, beyond the last-level cache, as the 2:4 +
 * NF4 one's 54 MB). Times are the minimum over REPS of this thread's CPU time, so a loaded
 * machine disturbs the ratios less (the GEMM pair runs interleaved, call by call, and the dense
 * NF4 and 2:4 + NF4 GEMVs pass by pass).
 * OPENBLAS_CORETYPE is printed.
 * The 2:4 + NF4 GEMV is also given as a fraction of the read bandwidth (a pass over the dense
 * copies, same run), in cache (N = K = 1024, one copy: the kernels' compute alone) and on two
 * threads (wall time, the best of REPS, against the two-thread read bandwidth and the one-thread
 * wall time).
 *
 * Usage: bench_sp24 [GEMM N] [GEMV N]
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include <pthread.h>

#include "bench_util.h"
#include "qsparse.h"
#include "qsparse/matmul.h"
#include "qsparse/sparse.h"

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

static void free_wcopy(wcopy *c)
{
    free(c->q.data);
    free(c->q.scale);
    free(c->q.zero_point);
    free(c->q.nested_scale);
    free(c->meta);
}

static double cpu_now(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_THREAD_CPUTIME_ID, &ts);
    return (double)ts.tv_sec + 1e-9 * (double)ts.tv_nsec;
}

static double min_of(const double *t, int n)
{
    double m = t[0];
    for (int i = 1; i < n; i++)
        m = t[i] < m ? t[i] : m;
    return m;
}

static double time_blas_cpu(float *const *wf, int fcopies, const float *x, int64_t M, int64_t K,
                            int64_t N, float *y)
{
    double t[REPS];
    for (int r = 0; r < REPS; r++) {
        double t0 = cpu_now();
        for (int i = 0; i < fcopies; i++) {
            if (M == 1)
                cblas_sgemv(CblasRowMajor, CblasNoTrans, (int)N, (int)K, 1.0f, wf[i], (int)K, x, 1,
                            0.0f, y, 1);
            else
                cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasTrans, (int)M, (int)N, (int)K, 1.0f,
                            x, (int)K, wf[i], (int)K, 0.0f, y, (int)N);
        }
        t[r] = (cpu_now() - t0) / fcopies;
    }
    return min_of(t, REPS);
}

static double g_wall; /* wall time (best of REPS) of the last time_sp24 */

static double time_sp24(qs_ctx *ctx, const qs_matmul_params *p, const float *x, int64_t M,
                        int64_t K, const qs_weight *const *w, int copies, int64_t N, float *y)
{
    double t[REPS], tw[REPS];
    for (int r = 0; r < REPS; r++) {
        double t0 = cpu_now(), w0 = now();
        for (int i = 0; i < copies; i++)
            if (qs_matmul(ctx, p, x, QS_DTYPE_F32, M, K, w[i], N, NULL, y, M * N * 4) != QS_OK) {
                fprintf(stderr, "qs_matmul: %s\n", qs_ctx_last_error(ctx));
                exit(1);
            }
        t[r] = (cpu_now() - t0) / copies;
        tw[r] = (now() - w0) / copies;
    }
    g_wall = min_of(tw, REPS);
    return min_of(t, REPS);
}

/* The GEMM pair, interleaved: sgemm on the dense copy and qs_matmul on the 2:4 weight in turn,
 * REPS times, so that both see the same load; the minimum CPU time of each. */
static void time_gemm_pair(qs_ctx *ctx, const float *dense, const qs_weight *w, const float *x,
                           int64_t n, float *y, double *tblas, double *tsp)
{
    double tb[REPS], ts[REPS];
    for (int r = 0; r < REPS; r++) {
        double t0 = cpu_now();
        cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasTrans, (int)n, (int)n, (int)n, 1.0f, x,
                    (int)n, dense, (int)n, 0.0f, y, (int)n);
        double t1 = cpu_now();
        if (qs_matmul(ctx, NULL, x, QS_DTYPE_F32, n, n, w, n, NULL, y, n * n * 4) != QS_OK) {
            fprintf(stderr, "qs_matmul: %s\n", qs_ctx_last_error(ctx));
            exit(1);
        }
        tb[r] = t1 - t0;
        ts[r] = cpu_now() - t1;
    }
    *tblas = min_of(tb, REPS);
    *tsp = min_of(ts, REPS);
}

typedef struct {
    const char *p;
    size_t bytes;
} rd_arg;

static void *rd_thread(void *a)
{
    const rd_arg *r = a;
    read_pass(r->p, r->bytes);
    return NULL;
}

/* Read bandwidth (bytes/s) of `threads` (1 or 2) threads reading disjoint halves of each of the
 * two dense copies, best of REPS. */
static double read_bw(float *const *dense, size_t bytes, int threads)
{
    double best = 1e30;
    for (int r = 0; r < REPS; r++) {
        double t0 = now();
        for (int i = 0; i < 2; i++) {
            size_t part = bytes / (size_t)threads & ~(size_t)63;
            rd_arg a[2] = {{(const char *)dense[i], part},
                           {(const char *)dense[i] + part, bytes - part}};
            pthread_t th;
            if (threads > 1 && pthread_create(&th, NULL, rd_thread, &a[1]) != 0)
                exit(1);
            rd_thread(&a[0]);
            if (threads > 1)
                pthread_join(th, NULL);
        }
        double t = (now() - t0) / 2;
        best = t < best ? t : best;
    }
    return (double)bytes / best;
}

/* Copy i: a 2:4 weight of N x K (values of dtype) and its dense f32 decompression in dense[i]. */
static void make_sp24(qs_ctx *ctx, int64_t N, int64_t K, int32_t dtype, int seed, qs_weight *w,
                      float *dense)
{
    int64_t vb = 0, mc = N * ((K + 15) / 16);
    float *src = xmalloc((size_t)(N * K) * 4);
    uint16_t *meta = xmalloc((size_t)mc * 2);
    void *vals;

    for (int64_t e = 0; e < N * K; e++)
        src[e] = (float)(((e + seed) * 2654435761u % 4001) - 2000) / 40000.0f;
    qs_sp24_size(dtype, N, K, &vb, NULL);
    vals = xmalloc((size_t)vb);
    void *wd = src;
    if (dtype != QS_DTYPE_F32) {
        wd = xmalloc((size_t)(N * K) * 2);
        if (qs_convert(ctx, src, QS_DTYPE_F32, wd, dtype, N * K, N * K * 2) != QS_OK)
            exit(1);
    }
    if (qs_sp24_prune_compress(ctx, wd, dtype, N, K, NULL, vals, vb, meta, mc, NULL, 0) != QS_OK)
        exit(1);
    if (wd != src)
        free(wd);
    if (dense && qs_sp24_decompress(ctx, vals, dtype, meta, mc, N, K, dense, N * K * 4) != QS_OK)
        exit(1);
    free(src);
    memset(w, 0, sizeof *w);
    w->kind = QS_WEIGHT_SP24;
    w->dtype = dtype;
    w->data = vals;
    w->data_bytes = vb;
    w->meta = meta;
    w->meta_count = mc;
}

static void free_sp24(qs_weight *w)
{
    free((void *)w->data);
    free((void *)w->meta);
}

static void bench_sp24(qs_ctx *ctx, qs_ctx *ctx2, int64_t gn, int64_t vn, int copies)
{
    static const int32_t dts[3] = {QS_DTYPE_F32, QS_DTYPE_F16, QS_DTYPE_BF16};
    static const char *const dtn[3] = {"f32", "f16", "bf16"};
    qs_weight *w = xmalloc(sizeof(qs_weight) * (size_t)copies);
    const qs_weight **wp = xmalloc(sizeof(qs_weight *) * (size_t)(copies > 64 ? copies : 64));
    wcopy *spnf4 = xmalloc(sizeof(wcopy) * (size_t)(copies + 1)),
          *nf4 = xmalloc(sizeof(wcopy) * (size_t)(copies + 1));
    const qs_weight **wn = xmalloc(sizeof(qs_weight *) * (size_t)copies),
                    **ws = xmalloc(sizeof(qs_weight *) * (size_t)copies);
    int64_t big = gn > vn ? gn : vn;
    float *dense[2], *x = xmalloc((size_t)(big * big) * 4), *y = xmalloc((size_t)(big * big) * 4);
    double t;

    for (int64_t i = 0; i < big * big; i++)
        x[i] = (float)((i * 7919 % 2001) - 1000) / 1000.0f;

    /* GEMM: one weight, which the sgemm reads densely */
    dense[0] = xmalloc((size_t)(gn * gn) * 4);
    make_sp24(ctx, gn, gn, QS_DTYPE_F32, 0, &w[0], dense[0]);
    wp[0] = &w[0];
    double sgemm;
    time_gemm_pair(ctx, dense[0], wp[0], x, gn, y, &sgemm, &t);
    printf("\n2:4 GEMM, M = N = K = %lld     %10s %9s %10s\n", (long long)gn, "ms/call", "vs sgemm",
           "GFLOP/s*");
    printf("%-28s %10.1f %9.2f %10.1f\n", "OpenBLAS sgemm f32 (dense)", sgemm * 1e3, 1.0,
           2.0 * (double)(gn * gn * gn) / sgemm * 1e-9);
    printf("%-28s %10.1f %9.2f %10.1f\n", "2:4 f32 (outer product)", t * 1e3, sgemm / t,
           2.0 * (double)(gn * gn * gn) / t * 1e-9);
    printf("(* dense-equivalent: 2 M N K / time)\n");
    free_sp24(&w[0]);
    free(dense[0]);

    /* GEMV: sgemv over two dense copies, each 2:4 kind over `copies` copies */
    for (int i = 0; i < 2; i++) {
        dense[i] = xmalloc((size_t)(vn * vn) * 4);
        make_sp24(ctx, vn, vn, QS_DTYPE_F32, i, &w[i], dense[i]);
    }
    free_sp24(&w[0]);
    free_sp24(&w[1]);
    double sgemv = time_blas_cpu(dense, 2, x, 1, vn, vn, y);
    printf("\n2:4 GEMV, M = 1, N = K = %lld %10s %9s %10s\n", (long long)vn, "ms/call", "vs sgemv",
           "weight GB/s");
    printf("%-28s %10.3f %9.2f %10.1f\n", "OpenBLAS sgemv f32 (dense)", sgemv * 1e3, 1.0,
           (double)(vn * vn * 4) / sgemv * 1e-9);
    for (int d = 0; d < 3; d++) {
        char name[64];
        for (int i = 0; i < copies; i++) {
            make_sp24(ctx, vn, vn, dts[d], i, &w[i], NULL);
            wp[i] = &w[i];
        }
        int64_t bytes = w[0].data_bytes + w[0].meta_count * 2;
        t = time_sp24(ctx, NULL, x, 1, vn, wp, copies, vn, y);
        snprintf(name, sizeof name, "2:4 %s values", dtn[d]);
        printf("%-28s %10.3f %9.2f %10.1f\n", name, t * 1e3, sgemv / t, (double)bytes / t * 1e-9);
        for (int i = 0; i < copies; i++)
            free_sp24(&w[i]);
    }
    /* dense NF4 and 2:4 + NF4, `copies` copies each (working sets of 75 and 54 MB at 4096,
     * beyond the last-level cache), timed in alternation so that both see the same load */
    for (int i = 0; i < copies; i++) {
        make_quant(ctx, dense[i % 2], vn, vn, QS_FORMAT_NF4, 0, &nf4[i]);
        make_quant(ctx, dense[i % 2], vn, vn, QS_FORMAT_NF4, 1, &spnf4[i]);
        wn[i] = &nf4[i].w;
        ws[i] = &spnf4[i].w;
    }
    double tn = 1e30, ts = 1e30;
    for (int r = 0; r < 3; r++) {
        t = time_sp24(ctx, NULL, x, 1, vn, wn, copies, vn, y);
        tn = t < tn ? t : tn;
        t = time_sp24(ctx, NULL, x, 1, vn, ws, copies, vn, y);
        ts = t < ts ? t : ts;
    }
    double bw1 = read_bw(dense, (size_t)(vn * vn) * 4, 1);
    printf("%-28s %10.3f %9.2f %10.1f\n", "NF4 dense", tn * 1e3, sgemv / tn,
           (double)nf4[0].bytes / tn * 1e-9);
    printf("%-28s %10.3f %9.2f %10.1f  (%.2fx NF4 dense, %.0f%% of read %.1f GB/s)\n",
           "2:4 + NF4", ts * 1e3, sgemv / ts, (double)spnf4[0].bytes / ts * 1e-9, tn / ts,
           100.0 * (double)spnf4[0].bytes / ts / bw1, bw1 * 1e-9);

    /* in cache: one 1024 x 1024 copy each, the kernels' compute (before the two-thread runs,
     * whose idle OpenMP workers spin for a while after) */
    {
        int64_t cn = 1024;
        float *wc = xmalloc((size_t)(cn * cn) * 4);
        for (int64_t e = 0; e < cn * cn; e++)
            wc[e] = (float)(((e * 2654435761u) % 4001) - 2000) / 40000.0f;
        make_quant(ctx, wc, cn, cn, QS_FORMAT_NF4, 0, &nf4[copies]);
        make_quant(ctx, wc, cn, cn, QS_FORMAT_NF4, 1, &spnf4[copies]);
        /* 64 calls a timing, so the best of REPS finds a quiet stretch on a loaded machine */
        for (int i = 0; i < 64; i++)
            wp[i] = &nf4[copies].w;
        double cd = time_sp24(ctx, NULL, x, 1, cn, wp, 64, cn, y);
        for (int i = 0; i < 64; i++)
            wp[i] = &spnf4[copies].w;
        double cs = time_sp24(ctx, NULL, x, 1, cn, wp, 64, cn, y);
        printf("\nin cache, N = K = %lld, 1 thread: NF4 dense %.4f ms, 2:4 + NF4 %.4f ms (%.2fx)\n",
               (long long)cn, cd * 1e3, cs * 1e3, cd / cs);
        free_wcopy(&nf4[copies]);
        free_wcopy(&spnf4[copies]);
        free(wc);
    }
    /* two threads: wall time against the two-thread read bandwidth */
    double bw2 = read_bw(dense, (size_t)(vn * vn) * 4, 2);
    /* 1 and 2 threads in alternation, so that the drift of this VM's memory bandwidth over the
     * run (up to 30%) hits both: the 1-thread figure above came minutes earlier */
    double ts1 = 1e30, ts2 = 1e30, tn2 = 1e30;
    for (int r = 0; r < 3; r++) {
        time_sp24(ctx2, NULL, x, 1, vn, wn, copies, vn, y);
        tn2 = g_wall < tn2 ? g_wall : tn2;
        time_sp24(ctx, NULL, x, 1, vn, ws, copies, vn, y);
        ts1 = g_wall < ts1 ? g_wall : ts1;
        time_sp24(ctx2, NULL, x, 1, vn, ws, copies, vn, y);
        ts2 = g_wall < ts2 ? g_wall : ts2;
    }
    printf("\n2 threads (wall)             %10s %9s %10s\n", "ms/call", "vs 1 thr", "weight GB/s");
    printf("%-28s %10.3f %9.2f %10.1f  (%.2fx NF4 dense, %.0f%% of read %.1f GB/s)\n",
           "2:4 + NF4", ts2 * 1e3, ts1 / ts2, (double)spnf4[0].bytes / ts2 * 1e-9, tn2 / ts2,
           100.0 * (double)spnf4[0].bytes / ts2 / bw2, bw2 * 1e-9);
    printf("%-28s %10.3f\n", "NF4 dense", tn2 * 1e3);
    for (int i = 0; i < copies; i++) {
        free_wcopy(&spnf4[i]);
        free_wcopy(&nf4[i]);
    }
    free(wn);
    free(ws);

    free(dense[0]);
    free(dense[1]);
    free(x);
    free(y);
    free(w);
    free(wp);
}

int main(int argc, char **argv)
{
    qs_ctx_params sp;
    qs_ctx *sc = NULL, *sc2 = NULL;
    openblas_set_num_threads(1);
    qs_ctx_params_init(&sp);
    sp.num_threads = 1;
    if (qs_ctx_create(&sp, &sc) != QS_OK)
        return 1;
    sp.num_threads = 2;
    if (qs_ctx_create(&sp, &sc2) != QS_OK)
        return 1;
    printf("bench_sp24: tier %s, OPENBLAS_CORETYPE=%s, 1 thread\n", qs_ctx_isa_name(sc),
           getenv("OPENBLAS_CORETYPE") ? getenv("OPENBLAS_CORETYPE") : "(unset)");
    bench_sp24(sc, sc2, argc > 1 ? atoll(argv[1]) : 2048, argc > 2 ? atoll(argv[2]) : 4096, 8);
    qs_ctx_destroy(sc);
    qs_ctx_destroy(sc2);
    return 0;
}
#else
int main(void)
{
    printf("bench_sp24: built without OpenBLAS, nothing to compare with\n");
    return 0;
}
#endif
