/* SPDX-License-Identifier: MIT */
/*
 * qs_matmul: checks the parameters, shapes and activations and builds the weight view (weight.c:
 * its planes against an N x K weight of its format), then calls the context's backend (backend.h).
 * The CPU backend's run, qs_cpu_matmul, checks the 2:4 meta nibbles, plans the call (plan.c),
 * allocates every scratch buffer the plan needs, and only then converts x (to f32, to x^ or to
 * bf16: act_bf16.c), decodes double-quantized scales and runs the plan's path (f32 and bf16
 * activations) or the int8-activation part (act8.c). Nothing is written to y before all of that
 * succeeded.
 */
#include <math.h>
#include <string.h>

#ifdef _OPENMP
#include <omp.h>
#endif

#include "../core/parallel.h"
#include "../core/profile_internal.h"
#include "../core/quant_common.h"
#include "../ref/ref.h"
#include "../core/backend.h"
#include "gemm_internal.h"

QS_API void qs_matmul_params_init(qs_matmul_params *params)
{
    if (!params)
        return;
    memset(params, 0, sizeof *params);
    params->activations = QS_MATMUL_ACT_F32;
}

QS_API uint32_t qs_matmul_info(void)
{
#ifdef QS_HAVE_BLAS
    return QS_MATMUL_BLAS;
#else
    return 0;
#endif
}

#define MM_RUNS_PER_THREAD 4 /* see mm_parallel */

static int64_t sat_add(int64_t a, int64_t b)
{
    int64_t r;
    return qs_add_overflow(a, b, &r) ? INT64_MAX : r;
}

/* The matmul's own parallel regions take the library's threading policy (core/parallel.h): as
 * many threads as the call's work (j->work) is worth, none while the machine is busy, and a
 * report of each region afterwards. Which thread runs a task never changes a bit. */
static void mm_parallel(const struct qs_mm_job *j, int64_t count, qs_mm_task_fn *fn, int dynamic)
{
    int32_t threads = count > 1 ? qs_parallel_threads(j->ctx, j->work) : 1;

    if (threads > count)
        threads = (int32_t)count;
    if (threads <= 1) {
        for (int64_t i = 0; i < count; i++)
            fn(j, i, j->scratch);
        return;
    }
#ifdef _OPENMP
    /* dynamic: runs of consecutive tasks, about MM_RUNS_PER_THREAD per thread. Handed out one at
     * a time, the int8 GEMV's tasks (16 rows, a few microseconds each) ran about a third slower
     * on 2 threads than under the static split (measured): a thread's rows no longer follow one
     * another, so each task starts its memory streams afresh. */
    int64_t chunk = count / ((int64_t)threads * MM_RUNS_PER_THREAD);
    double t0 = omp_get_wtime(), busy = 0.0;

    chunk = chunk < 1 ? 1 : chunk;
#pragma omp parallel num_threads(threads) reduction(+ : busy)
    {
        float *s = j->scratch ? j->scratch + (int64_t)omp_get_thread_num() * j->per_thread : NULL;
        double start = omp_get_wtime();
        if (dynamic) {
#pragma omp for schedule(dynamic, chunk) nowait
            for (int64_t i = 0; i < count; i++)
                fn(j, i, s);
        } else {
#pragma omp for schedule(static) nowait
            for (int64_t i = 0; i < count; i++)
                fn(j, i, s);
        }
        busy = omp_get_wtime() - start;
    }
    qs_parallel_note(j->ctx, omp_get_wtime() - t0, busy);
#endif
}

void qs_mm_parallel(const struct qs_mm_job *j, int64_t count, qs_mm_task_fn *fn)
{
    mm_parallel(j, count, fn, 0);
}

void qs_mm_parallel_dynamic(const struct qs_mm_job *j, int64_t count, qs_mm_task_fn *fn)
{
    mm_parallel(j, count, fn, 1);
}

/* ---- checks -----------------------------------------------------------------------------------
 */

qs_status qs_matmul_check_params(qs_ctx *ctx, const qs_matmul_params *p)
{
    for (size_t i = 0; i < sizeof p->reserved / sizeof p->reserved[0]; i++)
        if (p->reserved[i] != 0)
            return qs_fail(ctx, QS_ERR_INVALID_ARG,
                           "qs_matmul_params reserved fields must be zero");
    if (p->activations != QS_MATMUL_ACT_F32 && p->activations != QS_MATMUL_ACT_INT8 &&
        p->activations != QS_MATMUL_ACT_BF16)
        return qs_fail(ctx, QS_ERR_INVALID_ARG,
                       "unknown activations %d (QS_MATMUL_ACT_F32, QS_MATMUL_ACT_INT8 or "
                       "QS_MATMUL_ACT_BF16)",
                       p->activations);
    if (!(p->threshold >= 0.0f) || isinf(p->threshold))
        return qs_fail(ctx, QS_ERR_INVALID_ARG, "threshold must be finite and >= 0, got %g",
                       (double)p->threshold);
    if (p->threshold > 0.0f && p->activations != QS_MATMUL_ACT_INT8)
        return qs_fail(ctx, QS_ERR_INVALID_ARG,
                       "an outlier threshold needs int8 activations (QS_MATMUL_ACT_INT8)");
    return QS_OK;
}

/* ---- x conversion and double-quantized scales -------------------------------------------------
 */

struct cvt_job {
    const qs_ctx *ctx;
    const uint16_t *src;
    int32_t dtype;
    int64_t n;
    float *dst;
    const uint8_t *codes;
    const float *nested;
    float offset;
};

static void cvt_task(void *arg, int64_t i, float *tile)
{
    const struct cvt_job *c = arg;
    int64_t start = i * QS_TILE, len = c->n - start < QS_TILE ? c->n - start : QS_TILE;

    (void)tile;
    if (c->dtype == QS_DTYPE_F16)
        c->ctx->k.cvt_f16_f32(c->src + start, len, c->dst + start);
    else
        c->ctx->k.cvt_bf16_f32(c->src + start, len, c->dst + start);
}

static void dyn8_task(void *arg, int64_t i, float *tile)
{
    const struct cvt_job *c = arg;
    int64_t start = i * QS_DQ_CHUNK, len = c->n - start < QS_DQ_CHUNK ? c->n - start : QS_DQ_CHUNK;

    (void)tile;
    c->ctx->k.dyn8_dequant(c->codes + start, c->nested + start / 256, len, 256, c->offset,
                           c->dst + start);
}

/* ---- entry point ------------------------------------------------------------------------------
 */

/* Every check of qs_matmul but the 2:4 meta nibbles, which the backend's run checks (the CPU's
 * below, inside its GEMV tasks where it can). Fills *j with the weight view and the shape. */
static qs_status matmul_check(qs_ctx *ctx, const qs_matmul_params *params, const void *x,
                              int32_t x_dtype, int64_t M, int64_t K, const qs_weight *w, int64_t N,
                              float *y, int64_t y_bytes, struct qs_mm_job *j)
{
    qs_status st;
    int64_t mk, nk, mn;
    int meta_later = 0;

    if ((st = qs_matmul_check_params(ctx, params)) != QS_OK)
        return st;
    if (!w)
        return qs_fail(ctx, QS_ERR_INVALID_ARG, "w is NULL");
    if (qs_dtype_size(x_dtype) == 0)
        return qs_fail(ctx, QS_ERR_INVALID_ARG, "unknown activation dtype %d", x_dtype);
    if (M < 0 || K < 0 || N < 0)
        return qs_fail(ctx, QS_ERR_INVALID_ARG, "negative shape M=%lld K=%lld N=%lld", (long long)M,
                       (long long)K, (long long)N);
    if (qs_mul_overflow(M, K, &mk) || qs_mul_overflow(N, K, &nk) || qs_mul_overflow(M, N, &mn) ||
        qs_mul_overflow(mk, 4, &mk) || qs_mul_overflow(nk, 4, &nk) || qs_mul_overflow(mn, 4, &mn))
        return qs_fail(ctx, QS_ERR_OVERFLOW, "shape M=%lld K=%lld N=%lld overflows", (long long)M,
                       (long long)K, (long long)N);
    if (!x && mk > 0)
        return qs_fail(ctx, QS_ERR_INVALID_ARG, "x is NULL");
    if (!y && mn > 0)
        return qs_fail(ctx, QS_ERR_INVALID_ARG, "y is NULL");
    if (y_bytes < mn)
        return qs_fail(ctx, QS_ERR_BUFFER_TOO_SMALL, "y holds %lld bytes, %lld needed",
                       (long long)y_bytes, (long long)mn);
    memset(j, 0, sizeof *j);
    j->ctx = ctx;
    j->M = M;
    j->K = K;
    j->N = N;
    j->meta_bad = &meta_later; /* the view leaves the nibbles to the run */
    if ((st = qs_mm_weight_build(ctx, w, j)) != QS_OK)
        return st;
    j->meta_bad = NULL;
    if (params->activations == QS_MATMUL_ACT_INT8 && j->kind == QS_WEIGHT_QUANT &&
        j->mt->a8_slot >= 0 && K > QS_MATMUL_INT8_MAX_K)
        return qs_fail(ctx, QS_ERR_UNSUPPORTED,
                       "int8 activations with INT8, LLM_INT8, NF4, FP4, MXFP4, NVFP4 or "
                       "FP8 E4M3 weights support K <= %d, got %lld",
                       QS_MATMUL_INT8_MAX_K, (long long)K);
    return QS_OK;
}

/* The CPU backend's matmul (backend.h): the run of the job matmul_check filled. */
qs_status qs_cpu_matmul(qs_ctx *ctx, const struct qs_mm_job *checked,
                        const qs_matmul_params *params, const void *x, int32_t x_dtype, int64_t M,
                        int64_t K, const qs_weight *w, int64_t N, const float *bias, float *y)
{
    struct qs_mm_job j = *checked; /* its view is the weight (w, packed or not, was checked) */
    qs_status st;
    int64_t mk = M * K * 4, mn = M * N * 4, nb = 0, per_thread = 0, panel = 0, xt = 0, threads;
    int need_x, need_xb, need_absmax, bf16, bf16_gemv;
    float *xf = NULL, *absmax = NULL, *scratch = NULL, *big = NULL, *ydefer = NULL;
    uint16_t *xb = NULL;
    int meta_bad = 0;

    (void)w;
    j.bias = bias;
    /* the call's work for the threading policy: its multiply-adds (one byte each, the policy's
     * rule) and the bytes it reads and writes */
    j.work = sat_add(sat_add(qs_work(M, qs_work(N, K)), qs_work(N, qs_work(K, j.bits) / 8 + 1)),
                     sat_add(mk, mn));
    j.y = y;
    /* A 2:4 GEMV with f32 activations checks its meta in the tasks (qs_mm_job.meta_bad): the
     * check's own pass over the meta cost 2:4 + NF4 at 4096 x 4096 about an eighth of its time.
     * Full meta words only (K % 16 == 0: the word-parallel check); an empty y keeps the check
     * up front, since no task runs. */
    if (j.kind == QS_WEIGHT_SP24 || j.kind == QS_WEIGHT_SP24_QUANT) {
        if (M > 0 && N > 0 && !qs_ctx_kernel_select(ctx, QS_SLOT_mm_gemm_f32, M, N, K) &&
            K % 16 == 0 && params->activations == QS_MATMUL_ACT_F32)
            j.meta_bad = &meta_bad;
        else if ((st = qs_mm_check_meta(ctx, j.w.meta, N, K, j.w.words)) != QS_OK)
            return st;
    }
    qs_mm_plan_make(ctx, &j, params->activations);
    if (mn == 0)
        return qs_ok(ctx);
    if (K == 0) {
        /* Every dot product is empty: y = fl(+0 + bias[n]) on every path. Nothing of x or W is
         * read (their pointers may be NULL: even adding a zero offset to them is undefined),
         * and the LLM.int8 scaling with r_m = 0 would turn a NaN or negative SCB into NaN / -0. */
        for (int64_t m = 0; m < M; m++)
            for (int64_t n = 0; n < N; n++)
                qs_st_f32(y + m * N + n,
                          qs_ref_nan_canon(bias ? 0.0f + qs_ld_f32(bias + n) : 0.0f));
        return qs_ok(ctx);
    }

    /* Scratch, all of it before any output. bf16 activations: the bf16 kernels read x in bf16
     * (the caller's bf16 x as it is, else rounded into scratch), the f32 path x^ in f32. */
    bf16 = params->activations == QS_MATMUL_ACT_BF16;
    bf16_gemv = j.plan.path == QS_MM_GEMV_BF16;
    need_x = bf16 ? !bf16_gemv : x_dtype != QS_DTYPE_F32;
    need_xb = bf16_gemv && x_dtype != QS_DTYPE_BF16;
    /* double-quantized scales: the view gets them decoded to f32 */
    need_absmax = j.dq_codes != NULL;
    if (need_absmax) {
        nb = qs_ceil_div(j.N * j.w.k, j.w.group);
        if (!(absmax = qs_scratch_alloc(ctx, (size_t)(nb > 0 ? nb : 1) * sizeof(float))))
            return qs_fail(ctx, QS_ERR_OUT_OF_MEMORY, "no memory for %lld absmax values",
                           (long long)nb);
    }
    if ((need_x && !(xf = qs_scratch_alloc(ctx, (size_t)(mk > 0 ? mk : 4)))) ||
        (need_xb && !(xb = qs_scratch_alloc(ctx, (size_t)(mk / 2 > 0 ? mk / 2 : 2))))) {
        qs_scratch_free(ctx, xf);
        qs_scratch_free(ctx, absmax);
        return qs_fail(ctx, QS_ERR_OUT_OF_MEMORY, "no memory for %lld activation bytes",
                       (long long)(need_x ? mk : mk / 2));
    }
    if (params->activations != QS_MATMUL_ACT_INT8) {
        qs_mm_f32_scratch(&j, &per_thread, &panel, &xt);
        threads = qs_threads(ctx);
        scratch = per_thread > 0
                      ? qs_scratch_alloc(ctx, (size_t)(threads * per_thread) * sizeof(float))
                      : NULL;
        big = panel + xt > 0 ? qs_scratch_alloc(ctx, (size_t)(panel + xt) * sizeof(float)) : NULL;
        ydefer = j.meta_bad ? qs_scratch_alloc(ctx, (size_t)mn) : NULL;
        if ((per_thread > 0 && !scratch) || (panel + xt > 0 && !big) || (j.meta_bad && !ydefer)) {
            qs_scratch_free(ctx, ydefer);
            qs_scratch_free(ctx, scratch);
            qs_scratch_free(ctx, big);
            qs_scratch_free(ctx, xb);
            qs_scratch_free(ctx, xf);
            qs_scratch_free(ctx, absmax);
            return qs_fail(ctx, QS_ERR_OUT_OF_MEMORY, "no memory for matmul scratch");
        }
        j.scratch = scratch;
        j.per_thread = per_thread;
        j.panel = panel > 0 ? big : NULL;
        j.xt = xt > 0 ? big + panel : NULL;
    }

    /* Inputs: x in f32 (the caller's, converted, or x^), or in bf16 for the bf16 kernels. */
    j.x = x;
    if (bf16_gemv) {
        j.x = NULL;
        j.xb = x;
        if (need_xb) {
            qs_mm_x_to_bf16(ctx, x, x_dtype, M * K, xb);
            j.xb = xb;
        }
    } else if (bf16) {
        qs_mm_x_to_bf16_f32(ctx, x, x_dtype, M * K, xf);
        j.x = xf;
    } else if (need_x) {
        struct cvt_job c = {ctx, x, x_dtype, M * K, xf, NULL, NULL, 0.0f};
        qs_parallel_run(ctx, qs_ceil_div(c.n, QS_TILE), qs_work(c.n, 6), cvt_task, NULL, &c);
        j.x = xf;
    }
    if (need_absmax) {
        struct cvt_job c = {ctx, NULL, 0, nb, absmax, j.dq_codes, j.dq_nested, j.dq_offset};
        qs_parallel_run(ctx, qs_ceil_div(nb, QS_DQ_CHUNK), qs_work(nb, 5), dyn8_task, NULL, &c);
        j.w.scale = absmax;
    }

    st = QS_OK;
    if (params->activations != QS_MATMUL_ACT_INT8) {
        if (ydefer)
            j.y = ydefer;
        qs_mm_run_f32(&j);
        if (ydefer) {
            /* every task checked its rows: y only if all of them passed, else the error of the
             * first bad nibble (check_meta locates it) and y untouched */
            if (!meta_bad)
                memcpy(y, ydefer, (size_t)mn);
            else if ((st = qs_mm_check_meta(ctx, j.w.meta, N, K, j.w.words)) == QS_OK)
                st = qs_fail(ctx, QS_ERR_BAD_DATA, "2:4 meta holds an invalid nibble");
        }
    } else {
        st = qs_mm_run_int8(ctx, &j, params->threshold);
    }
    qs_scratch_free(ctx, scratch);
    qs_scratch_free(ctx, big);
    qs_scratch_free(ctx, ydefer);
    qs_scratch_free(ctx, xb);
    qs_scratch_free(ctx, xf);
    qs_scratch_free(ctx, absmax);
    return st == QS_OK ? qs_ok(ctx) : st;
}

/* ---- profiling ------------------------------------------------------------------------------- */

/* Bytes of the weight a call reads: its planes for the shape (the capacities may be larger). */
static uint64_t weight_bytes(qs_ctx *ctx, const qs_weight *w, int64_t N, int64_t K)
{
    int64_t cols = w->kind == QS_WEIGHT_SP24 || w->kind == QS_WEIGHT_SP24_QUANT ? K / 2 : K;

    if (w->kind == QS_WEIGHT_PACKED) /* its header and planes */
        return (uint64_t)w->data_bytes;
    uint64_t meta = w->meta ? (uint64_t)(N * qs_ceil_div(K, 16)) * 2u : 0;
    struct qs_layout l;

    if (w->quant && qs_layout_compute(ctx, w->quant, N, cols, &l) == QS_OK)
        return qs_layout_total_bytes(&l) + meta;
    return (uint64_t)(N * cols * qs_dtype_size(w->dtype)) + meta;
}

QS_API qs_status qs_matmul(qs_ctx *ctx, const qs_matmul_params *params, const void *x,
                           int32_t x_dtype, int64_t M, int64_t K, const qs_weight *w, int64_t N,
                           const float *bias, float *y, int64_t y_bytes)
{
    qs_matmul_params defaults;

    if (!ctx)
        return QS_ERR_INVALID_ARG;
    if (!params) {
        qs_matmul_params_init(&defaults);
        params = &defaults;
    }
    struct qs_mm_job j;
    uint64_t t0 = qs_prof_start(ctx);
    const char *kernel = "";
    qs_status st = matmul_check(ctx, params, x, x_dtype, M, K, w, N, y, y_bytes, &j);
    if (st == QS_OK)
        st = qs_backend_matmul(ctx, &j, params, x, x_dtype, M, K, w, N, bias, y);
    if (t0 && st == QS_OK && ctx->backend == QS_BACKEND_CPU) {
        /* the entry the CPU's plan runs (the plan depends only on the context and the call) */
        qs_mm_plan_make(ctx, &j, params->activations);
        kernel = j.plan.entry ? j.plan.entry->name : "";
    }
    if (t0 && st == QS_OK)
        qs_prof_record_kernel(
            ctx, t0, "matmul", kernel,
            w->quant && w->kind != QS_WEIGHT_DENSE && w->kind != QS_WEIGHT_SP24 ? w->quant->format
                                                                                : 0,
            (uint64_t)M * (uint64_t)N * (uint64_t)K,
            (uint64_t)(M * K * qs_dtype_size(x_dtype)) + weight_bytes(ctx, w, N, K),
            (uint64_t)(M * N) * 4u);
    return st;
}
