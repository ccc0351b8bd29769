/* SPDX-License-Identifier: MIT */
/*
 * qs_matmul against OpenBLAS on the dense float32 weights, same shapes, same run, 1 and 2
 * threads (OpenBLAS is told the same count): every GEMV path (M = 1: each quantized format and
 * option, f16/bf16 weights, int8 activations, 2:4) against cblas_sgemv, a small-M GEMV against
 * cblas_sgemm, and the GEMM path at M = 512 against cblas_sgemm. Each weight set cycles over
 * enough copies that its working set exceeds the last-level cache (twice sysconf's L3, at least
 * WORKING_SET_MIN bytes), so every call streams its weight from memory; the read bandwidth of a
 * pass over f32 matrices is measured in the same run with as many threads, as READ_STREAMS
 * interleaved streams (the access pattern of a GEMV tile; the targets' denominator), with one
 * stream and on huge pages in the header.
 *
 * This machine may be shared and its memory bandwidth drifts between runs, so each case runs
 * interleaved rounds (ROUNDS_GEMV, ROUNDS_GEMM; the thread order alternates between rounds),
 * each of them one pass of OpenBLAS, one pass of qs_matmul over the copies (after one untimed
 * call: the steady state of a decode loop, see wake_latency) and one read pass at every thread
 * count, and keeps each one's minimum: the ratios of a row (to OpenBLAS, to the read
 * bandwidth, to the 1-thread time) come from the same rounds. Columns: time per call (wall, and
 * on 1 thread the calling thread's CPU time), GFLOP/s (2 M N K), GB/s of weight bytes (every
 * plane), that rate as a fraction of the read bandwidth (GEMV rows: the case's own read passes;
 * GEMM rows: the header's; "(tcpu)": by thread CPU time), OpenBLAS's time over ours (> 1:
 * faster) by wall time, by process CPU time and (1 thread) by the calling thread's CPU time, the
 * figure a loaded machine disturbs least, the speed over the case's 1-thread
 * speed ("x 1T"), and the same ratio of the fastest single calls ("(1 call)": a pass of 10 to 20
 * calls needs both cores free for its whole length, one call for a millisecond or so, so on a
 * loaded machine this one still says how the call itself scales), and the kernel the call's plan
 * runs (src/gemm/plan.c, named by the profiler).
 *
 * The table of cases is `cases` below: one line per row (a weight, M, the activations).
 *
 * Usage: bench_matmul [N=K] [max threads] [case filter] [GEMV rounds]   (default 4096, 2, every
 * case, ROUNDS_GEMV; the filter keeps the cases whose name contains it, e.g. "GEMM", "" all;
 * "GEMV" keeps every case below QS_MATMUL_GEMM_MIN_M rows)
 */
#define _DEFAULT_SOURCE /* madvise, MADV_HUGEPAGE */
#include <pthread.h>
#include <sys/mman.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "bench_util.h"
#include "qsparse.h"
#include "qsparse/profile.h"

#ifdef QS_HAVE_BLAS
#include <cblas.h>

#define ROUNDS_GEMV 20 /* interleaved rounds per GEMV case (small M): cheap, the machine noisy */
#define ROUNDS_GEMM 3  /* per GEMM case: a round there takes about a second */
#define WORKING_SET_MIN (192ll << 20) /* bytes per weight set, at least twice the LLC */
#define GEMM_M 512
#define SETTLE_MS 10 /* pause after a pass on more than one thread (see settle) */

/* A weight: quantized (`format` >= 0, with options), 2:4 + quantized (sparse), or dense f16/bf16
 * (format < 0, dtype). */
typedef struct {
    int32_t format, dtype, sparse;
    int32_t gran, sym, dq, block;
} wkind;

typedef struct {
    const char *name;
    wkind w;
    int64_t M;
    int32_t act; /* QS_MATMUL_ACT_* */
} bcase;

/* The rows of the table. Add a row here; nothing else needs to change. */
static const bcase cases[] = {
    {"NF4", {QS_FORMAT_NF4, 0, 0, 0, 1, 0, 64}, 1, QS_MATMUL_ACT_F32},
    {"NF4 double quant", {QS_FORMAT_NF4, 0, 0, 0, 1, 1, 64}, 1, QS_MATMUL_ACT_F32},
    {"FP4", {QS_FORMAT_FP4, 0, 0, 0, 1, 0, 64}, 1, QS_MATMUL_ACT_F32},
    {"INT8 row", {QS_FORMAT_INT8, 0, 0, QS_GRAN_ROW, 1, 0, 0}, 1, QS_MATMUL_ACT_F32},
    {"INT8 group 128 asym", {QS_FORMAT_INT8, 0, 0, QS_GRAN_GROUP, 0, 0, 128}, 1,
     QS_MATMUL_ACT_F32},
    {"LLM.int8", {QS_FORMAT_LLM_INT8, 0, 0, 0, 1, 0, 0}, 1, QS_MATMUL_ACT_F32},
    {"FP8 E4M3", {QS_FORMAT_FP8_E4M3, 0, 0, 0, 1, 0, 0}, 1, QS_MATMUL_ACT_F32},
    {"FP8 E5M2", {QS_FORMAT_FP8_E5M2, 0, 0, 0, 1, 0, 0}, 1, QS_MATMUL_ACT_F32},
    {"MXFP4", {QS_FORMAT_MXFP4, 0, 0, 0, 1, 0, 0}, 1, QS_MATMUL_ACT_F32},
    {"MXFP8", {QS_FORMAT_MXFP8, 0, 0, 0, 1, 0, 0}, 1, QS_MATMUL_ACT_F32},
    {"NVFP4", {QS_FORMAT_NVFP4, 0, 0, 0, 1, 0, 0}, 1, QS_MATMUL_ACT_F32},
    {"f16 weights", {-1, QS_DTYPE_F16, 0, 0, 0, 0, 0}, 1, QS_MATMUL_ACT_F32},
    {"bf16 weights", {-1, QS_DTYPE_BF16, 0, 0, 0, 0, 0}, 1, QS_MATMUL_ACT_F32},
    {"NF4, int8 activations", {QS_FORMAT_NF4, 0, 0, 0, 1, 0, 64}, 1, QS_MATMUL_ACT_INT8},
    {"FP4, int8 activations", {QS_FORMAT_FP4, 0, 0, 0, 1, 0, 64}, 1, QS_MATMUL_ACT_INT8},
    {"INT8 row W8A8", {QS_FORMAT_INT8, 0, 0, QS_GRAN_ROW, 1, 0, 0}, 1, QS_MATMUL_ACT_INT8},
    {"LLM.int8 W8A8", {QS_FORMAT_LLM_INT8, 0, 0, 0, 1, 0, 0}, 1, QS_MATMUL_ACT_INT8},
    {"NF4, bf16 activations", {QS_FORMAT_NF4, 0, 0, 0, 1, 0, 64}, 1, QS_MATMUL_ACT_BF16},
    {"FP4, bf16 activations", {QS_FORMAT_FP4, 0, 0, 0, 1, 0, 64}, 1, QS_MATMUL_ACT_BF16},
    {"INT8 row, bf16 activations", {QS_FORMAT_INT8, 0, 0, QS_GRAN_ROW, 1, 0, 0}, 1,
     QS_MATMUL_ACT_BF16},
    {"LLM.int8, bf16 activations", {QS_FORMAT_LLM_INT8, 0, 0, 0, 1, 0, 0}, 1, QS_MATMUL_ACT_BF16},
    {"E4M3, bf16 activations", {QS_FORMAT_FP8_E4M3, 0, 0, 0, 1, 0, 0}, 1, QS_MATMUL_ACT_BF16},
    {"E5M2, bf16 activations", {QS_FORMAT_FP8_E5M2, 0, 0, 0, 1, 0, 0}, 1, QS_MATMUL_ACT_BF16},
    {"MXFP4, bf16 activations", {QS_FORMAT_MXFP4, 0, 0, 0, 1, 0, 0}, 1, QS_MATMUL_ACT_BF16},
    {"MXFP8, bf16 activations", {QS_FORMAT_MXFP8, 0, 0, 0, 1, 0, 0}, 1, QS_MATMUL_ACT_BF16},
    {"NVFP4, bf16 activations", {QS_FORMAT_NVFP4, 0, 0, 0, 1, 0, 0}, 1, QS_MATMUL_ACT_BF16},
    {"bf16 weights, bf16 act.", {-1, QS_DTYPE_BF16, 0, 0, 0, 0, 0}, 1, QS_MATMUL_ACT_BF16},
    {"2:4 + NF4", {QS_FORMAT_NF4, 0, 1, 0, 1, 0, 64}, 1, QS_MATMUL_ACT_F32},
    {"NF4 M=4", {QS_FORMAT_NF4, 0, 0, 0, 1, 0, 64}, 4, QS_MATMUL_ACT_F32},
    {"NF4 M=8", {QS_FORMAT_NF4, 0, 0, 0, 1, 0, 64}, 8, QS_MATMUL_ACT_F32},
    {"MXFP4, int8 activations", {QS_FORMAT_MXFP4, 0, 0, 0, 1, 0, 0}, 1, QS_MATMUL_ACT_INT8},
    {"NVFP4, int8 activations", {QS_FORMAT_NVFP4, 0, 0, 0, 1, 0, 0}, 1, QS_MATMUL_ACT_INT8},
    {"FP8 E4M3, int8 activations", {QS_FORMAT_FP8_E4M3, 0, 0, 0, 1, 0, 0}, 1,
     QS_MATMUL_ACT_INT8},
    /* small M with int8 activations: each W block decoded once for every x row */
    {"NF4 M=2, int8 act.", {QS_FORMAT_NF4, 0, 0, 0, 1, 0, 64}, 2, QS_MATMUL_ACT_INT8},
    {"NF4 M=4, int8 act.", {QS_FORMAT_NF4, 0, 0, 0, 1, 0, 64}, 4, QS_MATMUL_ACT_INT8},
    {"NF4 M=8, int8 act.", {QS_FORMAT_NF4, 0, 0, 0, 1, 0, 64}, 8, QS_MATMUL_ACT_INT8},
    {"NF4 M=16, int8 act.", {QS_FORMAT_NF4, 0, 0, 0, 1, 0, 64}, 16, QS_MATMUL_ACT_INT8},
    {"W8A8 M=2", {QS_FORMAT_INT8, 0, 0, QS_GRAN_ROW, 1, 0, 0}, 2, QS_MATMUL_ACT_INT8},
    {"W8A8 M=4", {QS_FORMAT_INT8, 0, 0, QS_GRAN_ROW, 1, 0, 0}, 4, QS_MATMUL_ACT_INT8},
    {"W8A8 M=8", {QS_FORMAT_INT8, 0, 0, QS_GRAN_ROW, 1, 0, 0}, 8, QS_MATMUL_ACT_INT8},
    {"W8A8 M=16", {QS_FORMAT_INT8, 0, 0, QS_GRAN_ROW, 1, 0, 0}, 16, QS_MATMUL_ACT_INT8},
    {"NF4 M=4, bf16 act.", {QS_FORMAT_NF4, 0, 0, 0, 1, 0, 64}, 4, QS_MATMUL_ACT_BF16},
    {"NF4 M=16, bf16 act.", {QS_FORMAT_NF4, 0, 0, 0, 1, 0, 64}, 16, QS_MATMUL_ACT_BF16},
    {"NF4 GEMM", {QS_FORMAT_NF4, 0, 0, 0, 1, 0, 64}, GEMM_M, QS_MATMUL_ACT_F32},
    {"INT8 row W8A8 GEMM", {QS_FORMAT_INT8, 0, 0, QS_GRAN_ROW, 1, 0, 0}, GEMM_M,
     QS_MATMUL_ACT_INT8},
    /* int8 activations at M = 512: integer products per block (VNNI, AMX) */
    {"NF4 GEMM, int8 act.", {QS_FORMAT_NF4, 0, 0, 0, 1, 0, 64}, GEMM_M, QS_MATMUL_ACT_INT8},
    {"FP4 GEMM, int8 act.", {QS_FORMAT_FP4, 0, 0, 0, 1, 0, 64}, GEMM_M, QS_MATMUL_ACT_INT8},
    {"MXFP4 GEMM, int8 act.", {QS_FORMAT_MXFP4, 0, 0, 0, 1, 0, 0}, GEMM_M, QS_MATMUL_ACT_INT8},
    {"NVFP4 GEMM, int8 act.", {QS_FORMAT_NVFP4, 0, 0, 0, 1, 0, 0}, GEMM_M, QS_MATMUL_ACT_INT8},
    {"FP8 E4M3 GEMM, int8 act.", {QS_FORMAT_FP8_E4M3, 0, 0, 0, 1, 0, 0}, GEMM_M,
     QS_MATMUL_ACT_INT8},
    /* The tiled f32 GEMM path (src/gemm/gemm_tiled.c): every format family at M = 512, NF4 at
     * the smallest GEMM M and between. */
    {"NF4 GEMM M=16", {QS_FORMAT_NF4, 0, 0, 0, 1, 0, 64}, 16, QS_MATMUL_ACT_F32},
    {"NF4 GEMM M=64", {QS_FORMAT_NF4, 0, 0, 0, 1, 0, 64}, 64, QS_MATMUL_ACT_F32},
    {"NF4 double quant GEMM", {QS_FORMAT_NF4, 0, 0, 0, 1, 1, 64}, GEMM_M, QS_MATMUL_ACT_F32},
    {"FP4 GEMM", {QS_FORMAT_FP4, 0, 0, 0, 1, 0, 64}, GEMM_M, QS_MATMUL_ACT_F32},
    {"INT8 row GEMM", {QS_FORMAT_INT8, 0, 0, QS_GRAN_ROW, 1, 0, 0}, GEMM_M, QS_MATMUL_ACT_F32},
    {"INT8 group 128 GEMM", {QS_FORMAT_INT8, 0, 0, QS_GRAN_GROUP, 0, 0, 128}, GEMM_M,
     QS_MATMUL_ACT_F32},
    {"FP8 E4M3 GEMM", {QS_FORMAT_FP8_E4M3, 0, 0, 0, 1, 0, 0}, GEMM_M, QS_MATMUL_ACT_F32},
    {"MXFP4 GEMM", {QS_FORMAT_MXFP4, 0, 0, 0, 1, 0, 0}, GEMM_M, QS_MATMUL_ACT_F32},
    {"MXFP8 GEMM", {QS_FORMAT_MXFP8, 0, 0, 0, 1, 0, 0}, GEMM_M, QS_MATMUL_ACT_F32},
    {"NVFP4 GEMM", {QS_FORMAT_NVFP4, 0, 0, 0, 1, 0, 0}, GEMM_M, QS_MATMUL_ACT_F32},
    {"bf16 weights GEMM", {-1, QS_DTYPE_BF16, 0, 0, 0, 0, 0}, GEMM_M, QS_MATMUL_ACT_F32},
};
#define NCASES ((int)(sizeof cases / sizeof cases[0]))

typedef struct {
    qs_quant_params p;
    qs_qtensor q;
    qs_weight w;
    void *planes[QS_PLANE_COUNT + 2]; /* owned buffers */
    int64_t bytes;
} wcopy;

/* Process CPU seconds (all threads): on a shared machine, wall time includes the time other
 * processes ran; CPU time per thread count does not, so the table reports both ratios. */
static double cpu_now(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_PROCESS_CPUTIME_ID, &ts);
    return (double)ts.tv_sec + 1e-9 * (double)ts.tv_nsec;
}

/* CPU seconds of the calling thread: a 1-thread call runs on it alone (no OpenMP region), so this
 * is the call's own time, whatever else the machine runs (issue: quiet-machine protocol). */
static double tcpu_now(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_THREAD_CPUTIME_ID, &ts);
    return (double)ts.tv_sec + 1e-9 * (double)ts.tv_nsec;
}

static void *xmalloc(size_t n)
{
    void *p = malloc(n ? n : 1);
    if (!p) {
        fprintf(stderr, "out of memory\n");
        exit(1);
    }
    return p;
}

static void *dup_bytes(const void *p, size_t n)
{
    return p ? memcpy(xmalloc(n), p, n) : NULL;
}

static void must(qs_status s, qs_ctx *ctx, const char *what)
{
    if (s != QS_OK) {
        fprintf(stderr, "%s: %s\n", what, qs_ctx_last_error(ctx));
        exit(1);
    }
}

/* Bytes of a weight set: twice the last-level cache (sysconf's L3, which glibc reads from
 * CPUID), at least WORKING_SET_MIN, so every call streams its weight from memory. */
static int64_t working_set_bytes(void)
{
    long l3 = sysconf(_SC_LEVEL3_CACHE_SIZE);
    int64_t ws = l3 > 0 ? 2 * (int64_t)l3 : 0;
    return ws > WORKING_SET_MIN ? ws : WORKING_SET_MIN;
}

/* n bytes on 2 MiB pages where the kernel grants them (transparent huge pages, madvise): the
 * huge-page read pass, against which the 4 KiB-page figures can be judged. */
static void *huge_alloc(size_t n)
{
    size_t align = (size_t)2 << 20, size = (n + align - 1) / align * align;
    void *p = NULL;
    if (posix_memalign(&p, align, size) != 0) {
        fprintf(stderr, "out of memory\n");
        exit(1);
    }
    madvise(p, size, MADV_HUGEPAGE);
    return p;
}

/* The first copy of a weight from the f32 matrix w. */
static void make_weight(qs_ctx *ctx, const float *w, int64_t N, int64_t K, const wkind *k, wcopy *c)
{
    memset(c, 0, sizeof *c);
    if (k->format < 0) {
        int64_t b = N * K * 2;
        c->planes[0] = xmalloc((size_t)b);
        must(qs_convert(ctx, w, QS_DTYPE_F32, c->planes[0], k->dtype, N * K, b), ctx, "convert");
        c->w.kind = QS_WEIGHT_DENSE;
        c->w.dtype = k->dtype;
        c->w.data = c->planes[0];
        c->w.data_bytes = b;
        c->bytes = b;
        return;
    }
    void **ptr[QS_PLANE_COUNT] = {&c->q.data, &c->q.scale, &c->q.zero_point, &c->q.nested_scale};
    int64_t *cap[QS_PLANE_COUNT] = {&c->q.data_bytes, &c->q.scale_bytes, &c->q.zero_point_bytes,
                                    &c->q.nested_scale_bytes};
    int64_t cols = k->sparse ? K / 2 : K, mc = N * ((K + 15) / 16);
    qs_quant_params_init(&c->p, k->format);
    if (k->format == QS_FORMAT_NF4 || k->format == QS_FORMAT_FP4) {
        c->p.block_size = k->block;
        c->p.double_quant = k->dq;
    }
    if (k->format == QS_FORMAT_INT8) {
        c->p.granularity = k->gran;
        c->p.symmetric = k->sym;
        if (k->gran == QS_GRAN_GROUP)
            c->p.block_size = k->block;
    }
    for (int i = 0; i < QS_PLANE_COUNT; i++) {
        int64_t b = 0;
        qs_quant_size(&c->p, N, cols, i, &b);
        *ptr[i] = c->planes[i] = b > 0 ? xmalloc((size_t)b) : NULL;
        *cap[i] = b;
        c->bytes += b;
    }
    c->w.quant = &c->p;
    c->w.q = &c->q;
    if (!k->sparse) {
        c->w.kind = QS_WEIGHT_QUANT;
        must(qs_quantize(ctx, &c->p, w, QS_DTYPE_F32, N, K, &c->q), ctx, "quantize");
        return;
    }
    int64_t vb = 0;
    uint16_t *meta = xmalloc((size_t)mc * 2);
    float *pruned = xmalloc((size_t)(N * K) * 4), *vals;
    qs_sp24_size(QS_DTYPE_F32, N, K, &vb, NULL);
    vals = xmalloc((size_t)vb);
    must(qs_sp24_prune_compress(ctx, w, QS_DTYPE_F32, N, K, NULL, vals, vb, meta, mc, NULL, 0),
         ctx, "prune");
    must(qs_sp24_decompress(ctx, vals, QS_DTYPE_F32, meta, mc, N, K, pruned, N * K * 4), ctx,
         "decompress");
    must(qs_sp24_quantize(ctx, &c->p, pruned, QS_DTYPE_F32, N, K, NULL, &c->q, meta, mc), ctx,
         "sp24 quantize");
    free(vals);
    free(pruned);
    c->planes[QS_PLANE_COUNT] = meta;
    c->w.kind = QS_WEIGHT_SP24_QUANT;
    c->w.meta = meta;
    c->w.meta_count = mc;
    c->bytes += mc * 2;
}

/* Copy i > 0: the planes duplicated (so each copy is its own memory). */
static void copy_weight(const wcopy *a, wcopy *c, int64_t N, int64_t K)
{
    *c = *a;
    if (a->w.kind == QS_WEIGHT_DENSE) {
        c->planes[0] = dup_bytes(a->planes[0], (size_t)(N * K * 2));
        c->w.data = c->planes[0];
        return;
    }
    void **ptr[QS_PLANE_COUNT] = {&c->q.data, &c->q.scale, &c->q.zero_point, &c->q.nested_scale};
    const int64_t cap[QS_PLANE_COUNT] = {a->q.data_bytes, a->q.scale_bytes, a->q.zero_point_bytes,
                                         a->q.nested_scale_bytes};
    for (int i = 0; i < QS_PLANE_COUNT; i++)
        *ptr[i] = c->planes[i] = dup_bytes(a->planes[i], (size_t)cap[i]);
    c->w.quant = &c->p;
    c->w.q = &c->q;
    if (a->w.kind == QS_WEIGHT_SP24_QUANT) {
        c->planes[QS_PLANE_COUNT] =
            dup_bytes(a->planes[QS_PLANE_COUNT], (size_t)a->w.meta_count * 2);
        c->w.meta = c->planes[QS_PLANE_COUNT];
    }
}

static void free_weight(wcopy *c)
{
    for (int i = 0; i < QS_PLANE_COUNT + 2; i++)
        free(c->planes[i]);
}

/* One timed pass: wall and process CPU seconds per call (the minima over a case's rounds are
 * kept). */
typedef struct {
    double wall, cpu, call; /* per call over a pass: wall, CPU; the fastest single call */
    double tcpu;            /* per call over a pass: the calling thread's CPU time */
} tpair;

static void keep_min(tpair *best, double wall, double cpu)
{
    best->wall = wall < best->wall ? wall : best->wall;
    best->cpu = cpu < best->cpu ? cpu : best->cpu;
}

static void keep_min_t(tpair *best, double tcpu)
{
    best->tcpu = tcpu < best->tcpu ? tcpu : best->tcpu;
}

/* After a pass on several threads their workers spin a while before they sleep (libgomp's
 * default spin count: a few ms here), taking a core from the next pass of another pool: the
 * next pass starts when they sleep. */
static void settle(int threads)
{
    struct timespec ts = {0, SETTLE_MS * 1000000L};
    if (threads > 1)
        nanosleep(&ts, NULL);
}

/* The kernel the call's plan runs (the profiler's name for it), in out. */
static void plan_kernel(qs_ctx *ctx, const qs_matmul_params *mp, const float *x, int64_t M,
                        int64_t K, const wcopy *c, int64_t N, float *y, char *out, size_t cap)
{
    qs_profile_entry e;

    snprintf(out, cap, "?");
    if (qs_ctx_set(ctx, QS_PARAM_PROFILE, 1) != QS_OK)
        return;
    must(qs_matmul(ctx, mp, x, QS_DTYPE_F32, M, K, &c->w, N, NULL, y, M * N * 4), ctx,
         "qs_matmul");
    if (qs_profile_count(ctx) > 0 && qs_profile_get(ctx, 0, &e) == QS_OK)
        snprintf(out, cap, "%s", e.kernel[0] ? e.kernel + 3 : "cblas_sgemm");
    qs_ctx_set(ctx, QS_PARAM_PROFILE, 0);
}

/* One pass of qs_matmul over the copies, after one untimed call on the last copy. The pass
 * before it ended with a pause (settle), and on this kind of virtual machine a core that went
 * idle takes milliseconds to wake (measured: 2-4 ms on average for a worker thread after 1-100 ms
 * asleep, against under 1 us when the worker still spins): the first call of a pass would pay
 * that once, which no decode loop of back-to-back calls does. */
static void pass_qs(qs_ctx *ctx, const qs_matmul_params *mp, const float *x, int64_t M, int64_t K,
                    const wcopy *c, int copies, int64_t N, float *y, tpair *best)
{
    must(qs_matmul(ctx, mp, x, QS_DTYPE_F32, M, K, &c[copies - 1].w, N, NULL, y, M * N * 4), ctx,
         "qs_matmul");
    double t0 = now(), c0 = cpu_now(), tc0 = tcpu_now(), ti = t0;
    for (int i = 0; i < copies; i++) {
        must(qs_matmul(ctx, mp, x, QS_DTYPE_F32, M, K, &c[i].w, N, NULL, y, M * N * 4), ctx,
             "qs_matmul");
        double te = now();
        best->call = te - ti < best->call ? te - ti : best->call;
        ti = te;
    }
    keep_min_t(best, (tcpu_now() - tc0) / copies);
    keep_min(best, (now() - t0) / copies, (cpu_now() - c0) / copies);
}

/* One pass of OpenBLAS (sgemv at M = 1, else sgemm) over the f32 copies. */
static void pass_blas(float *const *wf, int fcopies, const float *x, int64_t M, int64_t K,
                      int64_t N, float *y, tpair *best)
{
    double t0 = now(), c0 = cpu_now(), tc0 = tcpu_now();
    for (int i = 0; i < fcopies; i++) {
        if (M == 1)
            cblas_sgemv(CblasRowMajor, CblasNoTrans, (int)N, (int)K, 1.0f, wf[i], (int)K, x, 1,
                        0.0f, y, 1);
        else
            cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasTrans, (int)M, (int)N, (int)K, 1.0f, x,
                        (int)K, wf[i], (int)K, 0.0f, y, (int)N);
    }
    keep_min_t(best, (tcpu_now() - tc0) / fcopies);
    keep_min(best, (now() - t0) / fcopies, (cpu_now() - c0) / fcopies);
}

/* Reads `bytes` as READ_STREAMS equal parts side by side, one 64-byte line of each in turn: the
 * access pattern of a GEMV tile that reads several weight rows at once, and the bandwidth the
 * issue's targets are shares of ("an 8-stream read"). One stream reads slower on some machines,
 * more on others, so the header prints both. */
#define READ_STREAMS 8
static void read_pass8(const void *p, size_t bytes)
{
    size_t part = bytes / READ_STREAMS / 64 * 64;
    const uint64_t *s[READ_STREAMS];
    uint64_t acc[READ_STREAMS] = {0}, sum = 0;

    for (int i = 0; i < READ_STREAMS; i++)
        s[i] = (const uint64_t *)((const char *)p + (size_t)i * part);
    for (size_t o = 0; o < part / 8; o += 8)
        for (int i = 0; i < READ_STREAMS; i++)
            acc[i] += s[i][o] + s[i][o + 1] + s[i][o + 2] + s[i][o + 3] + s[i][o + 4] +
                      s[i][o + 5] + s[i][o + 6] + s[i][o + 7];
    for (int i = 0; i < READ_STREAMS; i++)
        sum ^= acc[i];
    bench_sink = sum;
}

typedef struct {
    float *const *wf;
    int fcopies, streams;
    size_t offset, bytes;
} rd_arg;

/* Thread t's part of every copy, one after the other. */
static void *rd_thread(void *a)
{
    const rd_arg *r = a;
    for (int i = 0; i < r->fcopies; i++)
        if (r->streams > 1)
            read_pass8((const char *)r->wf[i] + r->offset, r->bytes);
        else
            read_pass((const char *)r->wf[i] + r->offset, r->bytes);
    return NULL;
}

/* One pass of `threads` threads reading disjoint parts of each f32 copy: seconds per copy (the
 * read bandwidth is bytes over the minimum). The threads start once per pass, not once per copy:
 * a thread started on an idle core may wait milliseconds to run (wake_latency), which at one
 * start per copy made the 2-thread read bandwidth of 4 MiB copies lower than one thread's. */
static void pass_read(float *const *wf, int fcopies, size_t bytes, int threads, int streams,
                      tpair *best)
{
    pthread_t th[8];
    rd_arg a[8];
    size_t part = bytes / (size_t)threads & ~(size_t)63;
    double t0 = now(), tc0 = tcpu_now();
    for (int t = 0; t < threads; t++) {
        a[t].wf = wf;
        a[t].fcopies = fcopies;
        a[t].streams = streams;
        a[t].offset = (size_t)t * part;
        a[t].bytes = t == threads - 1 ? bytes - (size_t)t * part : part;
        if (t > 0)
            pthread_create(&th[t], NULL, rd_thread, &a[t]);
    }
    rd_thread(&a[0]);
    double tc = (tcpu_now() - tc0) / fcopies;
    for (int t = 1; t < threads; t++)
        pthread_join(th[t], NULL);
    double t = (now() - t0) / fcopies;
    best->wall = t < best->wall ? t : best->wall;
    keep_min_t(best, tc);
}

/* How long a thread asleep on another core takes to run after it is signalled, the core idle
 * for 10 ms before: the price the first call of a pass pays on more than one thread (a worker
 * that still spins starts within a microsecond). Median and maximum over WAKE_TRIES, in us. */
#define WAKE_TRIES 21
typedef struct {
    pthread_mutex_t mu;
    pthread_cond_t cv;
    int go, quit;
    double woke;
} wake_arg;

static void *wake_thread(void *a)
{
    wake_arg *w = a;
    pthread_mutex_lock(&w->mu);
    for (;;) {
        while (!w->go && !w->quit)
            pthread_cond_wait(&w->cv, &w->mu);
        if (w->quit)
            break;
        w->woke = now();
        w->go = 0;
    }
    pthread_mutex_unlock(&w->mu);
    return NULL;
}

static int cmp_dbl(const void *a, const void *b)
{
    double x = *(const double *)a, y = *(const double *)b;
    return x < y ? -1 : x > y;
}

static void wake_latency(double *median_us, double *max_us)
{
    wake_arg w = {PTHREAD_MUTEX_INITIALIZER, PTHREAD_COND_INITIALIZER, 0, 0, 0.0};
    double d[WAKE_TRIES];
    pthread_t th;
    struct timespec ts = {0, 10 * 1000000L};

    *median_us = *max_us = -1.0;
    if (pthread_create(&th, NULL, wake_thread, &w) != 0)
        return;
    for (int i = 0; i < WAKE_TRIES; i++) {
        nanosleep(&ts, NULL);
        pthread_mutex_lock(&w.mu);
        double t0 = now();
        w.go = 1;
        pthread_cond_signal(&w.cv);
        pthread_mutex_unlock(&w.mu);
        for (;;) { /* spin until the thread has run */
            pthread_mutex_lock(&w.mu);
            int done = !w.go;
            pthread_mutex_unlock(&w.mu);
            if (done)
                break;
        }
        d[i] = (w.woke - t0) * 1e6;
    }
    pthread_mutex_lock(&w.mu);
    w.quit = 1;
    pthread_cond_signal(&w.cv);
    pthread_mutex_unlock(&w.mu);
    pthread_join(th, NULL);
    qsort(d, WAKE_TRIES, sizeof d[0], cmp_dbl);
    *median_us = d[WAKE_TRIES / 2];
    *max_us = d[WAKE_TRIES - 1];
}

/* The thread count of step i of round r: ascending in even rounds, descending in odd ones, so
 * neither count always runs right after the other's traffic. */
static int round_threads(int r, int i, int max_threads)
{
    return r % 2 == 0 ? i + 1 : max_threads - i;
}

int main(int argc, char **argv)
{
    int64_t N = argc > 1 ? atoll(argv[1]) : 4096, K = N;
    int max_threads = argc > 2 ? atoi(argv[2]) : 2;
    const char *filter = argc > 3 ? argv[3] : NULL;
    int rounds_gemv = argc > 4 ? atoi(argv[4]) : ROUNDS_GEMV;
    const char *core = getenv("OPENBLAS_CORETYPE");
    int64_t fbytes = N * K * 4, working_set = working_set_bytes();
    int fcopies = (int)((working_set + fbytes - 1) / fbytes);
    char model[256];
    float **wf, **wh, *x, *y;
    qs_ctx *ctx[8] = {NULL};
    tpair bw1[8], bw8[8], bwh[8];
    tpair sgemv[8], sgemm[8];

    if (max_threads < 1 || max_threads > 8 || N < 64 || rounds_gemv < 1)
        return 2;
    /* OpenBLAS's pthread workers spin for 2^28 cycles (about 0.1 s) after each call unless
     * OPENBLAS_THREAD_TIMEOUT says otherwise; in interleaved rounds they would take a core from
     * the qs_matmul pass that follows. The variable is read when OpenBLAS loads, so the bench
     * runs itself again with it set (2^4 cycles: the workers sleep at once; a caller's value
     * is kept). */
    if (!getenv("OPENBLAS_THREAD_TIMEOUT") && setenv("OPENBLAS_THREAD_TIMEOUT", "4", 1) == 0)
        execv("/proc/self/exe", argv); /* returns only if that failed: run as we are */
    fcopies = fcopies < 2 ? 2 : fcopies;
    cpu_model(model, sizeof model);
    for (int t = 1; t <= max_threads; t++) {
        qs_ctx_params cp;
        qs_ctx_params_init(&cp);
        cp.num_threads = t;
        if (qs_ctx_create(&cp, &ctx[t - 1]) != QS_OK)
            return 1;
    }
    printf("bench_matmul: N = K = %lld, weight sets of >= %lld MiB (twice the LLC), 1...%d threads; "
           "minima over %d interleaved rounds (GEMM: %d) of OpenBLAS, qs_matmul at each thread "
           "count and an %d-stream read pass\n",
           (long long)N, (long long)(working_set >> 20), max_threads, rounds_gemv, ROUNDS_GEMM,
           READ_STREAMS);
    printf("CPU %s, tier %s, OPENBLAS_CORETYPE=%s, OPENBLAS_THREAD_TIMEOUT=%s, OpenBLAS %s\n",
           model, qs_ctx_isa_name(ctx[0]), core ? core : "(unset)",
           getenv("OPENBLAS_THREAD_TIMEOUT") ? getenv("OPENBLAS_THREAD_TIMEOUT") : "(unset)",
           OPENBLAS_VERSION);

    x = xmalloc((size_t)(GEMM_M * K) * 4);
    y = xmalloc((size_t)(GEMM_M * N) * 4);
    for (int64_t i = 0; i < GEMM_M * K; i++)
        x[i] = (float)((i * 7919 % 2001) - 1000) / 1000.0f;
    wf = xmalloc(sizeof(float *) * (size_t)fcopies);
    wh = xmalloc(sizeof(float *) * (size_t)fcopies);
    for (int i = 0; i < fcopies; i++) {
        wf[i] = xmalloc((size_t)fbytes);
        wh[i] = huge_alloc((size_t)fbytes);
        for (int64_t e = 0; e < N * K; e++)
            wf[i][e] = wh[i][e] = (float)(((e + i) * 2654435761u % 4001) - 2000) / 40000.0f;
    }
    /* The machine's figures, for the header (each case measures its own in its rounds). */
    for (int t = 0; t < max_threads; t++) {
        bw1[t].wall = bw8[t].wall = bwh[t].wall = 1e30;
        bw1[t].tcpu = bw8[t].tcpu = bwh[t].tcpu = 1e30;
        sgemv[t].wall = sgemv[t].cpu = sgemm[t].wall = sgemm[t].cpu = 1e30;
    }
    for (int r = 0; r < rounds_gemv; r++)
        for (int i = 0; i < max_threads; i++) {
            int t = round_threads(r, i, max_threads);
            openblas_set_num_threads(t);
            pass_read(wf, fcopies, (size_t)fbytes, t, 1, &bw1[t - 1]);
            pass_read(wf, fcopies, (size_t)fbytes, t, READ_STREAMS, &bw8[t - 1]);
            pass_read(wh, fcopies, (size_t)fbytes, t, READ_STREAMS, &bwh[t - 1]);
            pass_blas(wf, fcopies, x, 1, K, N, y, &sgemv[t - 1]);
            settle(t);
            if (r < ROUNDS_GEMM) {
                pass_blas(wf, 2, x, GEMM_M, K, N, y, &sgemm[t - 1]);
                settle(t);
            }
        }
    if (max_threads > 1) {
        double wm, wx;
        wake_latency(&wm, &wx);
        printf("wake of a thread on an idle core: median %.0f us, worst %.0f us (so every pass "
               "starts after one untimed call)\n",
               wm, wx);
    }
    for (int t = 1; t <= max_threads; t++)
        printf("%d thread%s: read bandwidth %.1f GB/s with %d streams (1 stream %.1f, huge pages "
               "%.1f); OpenBLAS sgemv %.3f ms (%.1f GB/s), sgemm M=%d %.1f ms\n",
               t, t > 1 ? "s" : "", (double)fbytes / bw8[t - 1].wall * 1e-9, READ_STREAMS,
               (double)fbytes / bw1[t - 1].wall * 1e-9, (double)fbytes / bwh[t - 1].wall * 1e-9,
               sgemv[t - 1].wall * 1e3, (double)fbytes / sgemv[t - 1].wall * 1e-9, GEMM_M,
               sgemm[t - 1].wall * 1e3);
    printf("%% read: weight bytes per second over the %d-stream read's, in the case's own rounds; "
           "(thread cpu): the same by the calling thread's CPU clock (1 thread)\n",
           READ_STREAMS);
    printf("\n%-26s %4s %3s %9s %9s %8s %11s %7s %7s %8s %10s %7s %6s %9s  %s\n", "case", "M",
           "thr", "ms/call", "(tcpu ms)", "GFLOP/s", "weight GB/s", "% read", "(tcpu)", "vs BLAS",
           "(cpu time)", "(tcpu)", "x 1T", "(1 call)", "kernel (the plan's entry)");
    for (int c = 0; c < NCASES; c++) {
        const bcase *bc = &cases[c];
        wcopy first, *wc;
        int copies, rounds, bcopies;
        qs_matmul_params mp;
        tpair tq[8], tb[8], rd[8];

        if (filter && !strstr(bc->name, filter) &&
            !(strcmp(filter, "GEMV") == 0 && bc->M < QS_MATMUL_GEMM_MIN_M))
            continue;

        make_weight(ctx[0], wf[0], N, K, &bc->w, &first);
        copies = (int)((working_set + first.bytes - 1) / first.bytes);
        copies = bc->M >= GEMM_M ? 2 : copies < 2 ? 2 : copies;
        bcopies = bc->M >= GEMM_M ? 2 : fcopies;
        rounds = bc->M >= QS_MATMUL_GEMM_MIN_M ? ROUNDS_GEMM : rounds_gemv;
        wc = xmalloc(sizeof(wcopy) * (size_t)copies);
        wc[0] = first;
        for (int i = 1; i < copies; i++)
            copy_weight(&first, &wc[i], N, K);
        qs_matmul_params_init(&mp);
        mp.activations = bc->act;
        for (int t = 0; t < max_threads; t++) {
            tq[t].wall = tq[t].cpu = tq[t].call = tq[t].tcpu = 1e30;
            tb[t].wall = tb[t].cpu = tb[t].tcpu = 1e30;
            rd[t].wall = rd[t].tcpu = 1e30;
        }
        char kernel[96];
        plan_kernel(ctx[0], &mp, x, bc->M, K, &wc[0], N, y, kernel, sizeof kernel);
        /* A warm-up call per thread count (first-touch of the library's scratch, thread pool). */
        for (int t = 0; t < max_threads; t++)
            must(qs_matmul(ctx[t], &mp, x, QS_DTYPE_F32, bc->M, K, &wc[0].w, N, NULL, y,
                           bc->M * N * 4),
                 ctx[t], "qs_matmul");
        for (int r = 0; r < rounds; r++)
            for (int i = 0; i < max_threads; i++) {
                int t = round_threads(r, i, max_threads);
                openblas_set_num_threads(t);
                pass_blas(wf, bcopies, x, bc->M, K, N, y, &tb[t - 1]);
                settle(t);
                pass_qs(ctx[t - 1], &mp, x, bc->M, K, wc, copies, N, y, &tq[t - 1]);
                settle(t);
                if (bc->M < QS_MATMUL_GEMM_MIN_M)
                    pass_read(wf, fcopies, (size_t)fbytes, t, READ_STREAMS, &rd[t - 1]);
            }
        for (int t = 1; t <= max_threads; t++) {
            double q = tq[t - 1].wall, gbs = (double)first.bytes / q;
            const tpair *rp = rd[t - 1].wall < 1e30 ? &rd[t - 1] : &bw8[t - 1];
            double bwt = (double)fbytes / rp->wall;
            char speedup[16] = "-", call[16] = "-", tshare[16] = "-", tblas[16] = "-";
            if (t == 1) { /* both on the calling thread's clock */
                snprintf(tshare, sizeof tshare, "%.0f%%",
                         100.0 * ((double)first.bytes / tq[0].tcpu) / ((double)fbytes / rp->tcpu));
                snprintf(tblas, sizeof tblas, "%.2f", tb[0].tcpu / tq[0].tcpu);
            }
            if (t > 1) {
                snprintf(speedup, sizeof speedup, "%.2f", tq[0].wall / q);
                snprintf(call, sizeof call, "%.2f", tq[0].call / tq[t - 1].call);
            }
            printf("%-26s %4lld %3d %9.3f %9.3f %8.1f %11.1f %6.0f%% %7s %8.2f %10.2f %7s %6s "
                   "%9s  %s\n",
                   bc->name, (long long)bc->M, t, q * 1e3, t == 1 ? tq[0].tcpu * 1e3 : 0.0,
                   2.0 * (double)(bc->M * N * K) / q * 1e-9, gbs * 1e-9, 100.0 * gbs / bwt,
                   tshare, tb[t - 1].wall / q, tb[t - 1].cpu / tq[t - 1].cpu, tblas, speedup,
                   call, t == 1 ? kernel : "");
            fflush(stdout);
        }
        for (int i = 0; i < copies; i++)
            free_weight(&wc[i]);
        free(wc);
    }
    for (int t = 1; t <= max_threads; t++)
        qs_ctx_destroy(ctx[t - 1]);
    for (int i = 0; i < fcopies; i++) {
        free(wf[i]);
        free(wh[i]);
    }
    free(wf);
    free(wh);
    free(x);
    free(y);
    return 0;
}
#else
int main(void)
{
    printf("bench_matmul: this build has no OpenBLAS to compare with\n");
    return 77;
}
#endif
