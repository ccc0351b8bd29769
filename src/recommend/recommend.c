/* SPDX-License-Identifier: MIT */
/*
 * qs_recommend (include/qsparse/recommend.h): every candidate form of one weight, made with the
 * public API as a user would, measured for error and for speed in a short probe of qs_matmul
 * against dense f32, then ranked. The probe's kernel names come from the profiling counters, so
 * what is reported is what ran.
 */
#include <math.h>
#include <stdio.h>
#include <string.h>

#ifdef QS_HAVE_BLAS
#include <cblas.h>
#endif

#include "../ref/ref.h"
#include "../core/internal.h"
#include "../core/profile_internal.h"
#include "qsparse/matmul.h"
#include "qsparse/profile.h"
#include "qsparse/recommend.h"
#include "qsparse/sparse.h"

QS_API void qs_recommend_params_init(qs_recommend_params *params)
{
    if (!params)
        return;
    memset(params, 0, sizeof *params);
    params->objective = QS_RECOMMEND_SPEED;
    params->max_error = 0.1f;
    params->sparse24 = 1;
    params->gemm_rows = 64;
    params->probe_seconds = 0.02;
}

/* ---- candidates ------------------------------------------------------------------------------ */

struct cand_def {
    const char *label;
    int32_t format; /* 0: 2:4 with f32 values */
    int32_t sp24, act8, dq, gran, group, symmetric;
    float threshold; /* int8 activations: the LLM.int8 outlier threshold, or 0 */
};

static const struct cand_def cand_defs[] = {
    {"nf4 b64", QS_FORMAT_NF4, 0, 0, 0, 0, 0, 1, 0.0f},
    {"nf4 b64 + dq", QS_FORMAT_NF4, 0, 0, 1, 0, 0, 1, 0.0f},
    {"fp4 b64", QS_FORMAT_FP4, 0, 0, 0, 0, 0, 1, 0.0f},
    {"int8 row", QS_FORMAT_INT8, 0, 0, 0, QS_GRAN_ROW, 0, 1, 0.0f},
    {"int8 g128 asym", QS_FORMAT_INT8, 0, 0, 0, QS_GRAN_GROUP, 128, 0, 0.0f},
    {"int8 row / int8 act", QS_FORMAT_INT8, 0, 1, 0, QS_GRAN_ROW, 0, 1, 0.0f},
    {"llm.int8", QS_FORMAT_LLM_INT8, 0, 0, 0, 0, 0, 1, 0.0f},
    {"llm.int8 / int8 act", QS_FORMAT_LLM_INT8, 0, 1, 0, 0, 0, 1, QS_LLM_INT8_THRESHOLD},
    {"fp8 e4m3", QS_FORMAT_FP8_E4M3, 0, 0, 0, 0, 0, 1, 0.0f},
    {"fp8 e5m2", QS_FORMAT_FP8_E5M2, 0, 0, 0, 0, 0, 1, 0.0f},
    {"mxfp4", QS_FORMAT_MXFP4, 0, 0, 0, 0, 0, 1, 0.0f},
    {"mxfp8", QS_FORMAT_MXFP8, 0, 0, 0, 0, 0, 1, 0.0f},
    {"nvfp4", QS_FORMAT_NVFP4, 0, 0, 0, 0, 0, 1, 0.0f},
    {"2:4 f32", 0, 1, 0, 0, 0, 0, 1, 0.0f},
    {"2:4 + nf4", QS_FORMAT_NF4, 1, 0, 0, 0, 0, 1, 0.0f},
};
#define CAND_COUNT ((int)(sizeof cand_defs / sizeof cand_defs[0]))

/* One candidate's weight and the memory behind it. */
struct made {
    qs_quant_params qp;
    qs_qtensor q;
    qs_weight w;
    void *values; /* 2:4 kept values (f32) */
    uint16_t *meta;
    void *plane[QS_PLANE_COUNT];
    int64_t bytes;
};

static void made_free(qs_ctx *ctx, struct made *m)
{
    for (int i = 0; i < QS_PLANE_COUNT; i++)
        qs_scratch_free(ctx, m->plane[i]);
    qs_scratch_free(ctx, m->values);
    qs_scratch_free(ctx, m->meta);
    memset(m, 0, sizeof *m);
}

/* Quantize src (rows x cols f32) into m's planes with m->qp. */
static qs_status make_quant(qs_ctx *ctx, struct made *m, const float *src, int64_t rows,
                            int64_t cols)
{
    void **ptr[QS_PLANE_COUNT] = {&m->q.data, &m->q.scale, &m->q.zero_point, &m->q.nested_scale};
    int64_t *cap[QS_PLANE_COUNT] = {&m->q.data_bytes, &m->q.scale_bytes, &m->q.zero_point_bytes,
                                    &m->q.nested_scale_bytes};
    qs_status st;

    for (int i = 0; i < QS_PLANE_COUNT; i++) {
        int64_t b = 0;
        if ((st = qs_quant_size(&m->qp, rows, cols, i, &b)) != QS_OK)
            return st;
        if (b > 0) {
            if (!(m->plane[i] = qs_scratch_alloc(ctx, (size_t)b)))
                return QS_ERR_OUT_OF_MEMORY;
            *ptr[i] = m->plane[i];
            *cap[i] = b;
            m->bytes += b;
        }
    }
    return qs_quantize(ctx, &m->qp, src, QS_DTYPE_F32, rows, cols, &m->q);
}

static qs_status make(qs_ctx *ctx, const struct cand_def *d, const float *w, int64_t rows,
                      int64_t cols, struct made *m)
{
    qs_status st;

    memset(m, 0, sizeof *m);
    if (d->format) {
        qs_format_info info;
        /* the candidate's options, where the format reads them (the defaults elsewhere) */
        qs_quant_params_init(&m->qp, d->format);
        if (qs_format_info_get(d->format, &info) != QS_OK)
            return qs_fail(ctx, QS_ERR_INVALID_ARG, "unknown format %d", d->format);
        if (info.options & QS_OPT_DOUBLE_QUANT)
            m->qp.double_quant = d->dq;
        if (info.options & QS_OPT_GRANULARITY)
            m->qp.granularity = d->gran;
        if (info.options & QS_OPT_SYMMETRIC)
            m->qp.symmetric = d->symmetric;
        if ((info.options & QS_OPT_GRANULARITY) && d->gran == QS_GRAN_GROUP)
            m->qp.block_size = d->group;
    }
    if (!d->sp24) {
        if ((st = make_quant(ctx, m, w, rows, cols)) != QS_OK)
            return st;
        m->w.kind = QS_WEIGHT_QUANT;
        m->w.quant = &m->qp;
        m->w.q = &m->q;
        return QS_OK;
    }
    int64_t vbytes = 0, mcount = 0;
    if ((st = qs_sp24_size(QS_DTYPE_F32, rows, cols, &vbytes, &mcount)) != QS_OK)
        return st;
    m->values = qs_scratch_alloc(ctx, (size_t)vbytes);
    m->meta = qs_scratch_alloc(ctx, (size_t)mcount * sizeof(uint16_t));
    if (!m->values || !m->meta)
        return QS_ERR_OUT_OF_MEMORY;
    st = qs_sp24_prune_compress(ctx, w, QS_DTYPE_F32, rows, cols, NULL, m->values, vbytes,
                                m->meta, mcount, NULL, 0);
    if (st != QS_OK)
        return st;
    m->bytes = mcount * 2;
    m->w.meta = m->meta;
    m->w.meta_count = mcount;
    if (!d->format) {
        m->w.kind = QS_WEIGHT_SP24;
        m->w.dtype = QS_DTYPE_F32;
        m->w.data = m->values;
        m->w.data_bytes = vbytes;
        m->bytes += vbytes;
        return QS_OK;
    }
    if ((st = make_quant(ctx, m, m->values, rows, cols / 2)) != QS_OK)
        return st;
    m->w.kind = QS_WEIGHT_SP24_QUANT;
    m->w.quant = &m->qp;
    m->w.q = &m->q;
    return QS_OK;
}

/* ---- measurements ---------------------------------------------------------------------------- */

static double rel_error(const float *ref, const float *got, int64_t n)
{
    double num = 0.0, den = 0.0;
    for (int64_t i = 0; i < n; i++) {
        double d = (double)got[i] - (double)ref[i];
        num += d * d;
        den += (double)ref[i] * (double)ref[i];
    }
    return den > 0.0 ? sqrt(num / den) : sqrt(num);
}

/* Minimum time of fn over repetitions within `seconds` (at least 2 runs after a warm-up). */
struct probe {
    qs_ctx *ctx;
    const qs_matmul_params *mp;
    const float *x;
    int64_t M, K, N;
    const qs_weight *w;
    const float *wf; /* dense f32 weight for the BLAS baseline (w NULL) */
    float *y;
};

static qs_status run_once(const struct probe *p)
{
#ifdef QS_HAVE_BLAS
    if (!p->w) {
        if (p->M == 1)
            cblas_sgemv(CblasRowMajor, CblasNoTrans, (int)p->N, (int)p->K, 1.0f, p->wf,
                        (int)p->K, p->x, 1, 0.0f, p->y, 1);
        else
            cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasTrans, (int)p->M, (int)p->N,
                        (int)p->K, 1.0f, p->x, (int)p->K, p->wf, (int)p->K, 0.0f, p->y,
                        (int)p->N);
        return QS_OK;
    }
#endif
    qs_weight dense = {0};
    const qs_weight *w = p->w;
    if (!w) {
        dense.kind = QS_WEIGHT_DENSE;
        dense.dtype = QS_DTYPE_F32;
        dense.data = p->wf;
        dense.data_bytes = p->N * p->K * 4;
        w = &dense;
    }
    return qs_matmul(p->ctx, p->mp, p->x, QS_DTYPE_F32, p->M, p->K, w, p->N, NULL, p->y,
                     p->M * p->N * 4);
}

static qs_status time_min(const struct probe *p, double seconds, double *best)
{
    qs_status st = run_once(p); /* warm-up: pages, OpenMP team, caches */
    uint64_t start = qs_prof_now();
    double b = 1e30;

    for (int r = 0; st == QS_OK && (r < 2 || (double)(qs_prof_now() - start) * 1e-9 < seconds);
         r++) {
        uint64_t t0 = qs_prof_now();
        st = run_once(p);
        double t = (double)(qs_prof_now() - t0) * 1e-9;
        b = t < b ? t : b;
        if (r >= 50)
            break;
    }
    *best = b;
    return st;
}

/* The kernel the GEMV of this weight runs: one counted call on a context with the counters on. */
static const char *gemv_kernel(qs_ctx *ctx, const struct probe *p)
{
    struct qs_prof *saved = ctx->prof;
    const char *name = "";
    qs_profile_entry e;

    ctx->prof = NULL;
    if (qs_prof_enable(ctx, 1) != QS_OK) {
        ctx->prof = saved;
        return name;
    }
    if (run_once(p) == QS_OK && qs_profile_get(ctx, 0, &e) == QS_OK)
        name = e.kernel;
    qs_prof_enable(ctx, 0);
    ctx->prof = saved;
    return name;
}

/* Why the hardware runs this candidate slowly, or NULL. */
static const char *slow_reason(const qs_ctx *ctx, const struct cand_def *d, const char *kernel)
{
    uint32_t isa = ctx->isa;
    if (d->act8 && !(isa & (QS_ISA_AVX512_VNNI | QS_ISA_AVX_VNNI | QS_ISA_AMX_INT8 |
                            QS_ISA_NEON_DOTPROD | QS_ISA_NEON_I8MM)))
        return "no integer dot-product instructions (VNNI, AMX-INT8, dotprod) on this CPU";
    size_t n = strlen(kernel);
    if (isa && n > 5 && strcmp(kernel + n - 5, "__ref") == 0)
        return "no SIMD kernel for this path yet: the scalar reference runs";
    return NULL;
}

/* ---- ranking --------------------------------------------------------------------------------- */

static int cmp_cand(const qs_candidate *a, const qs_candidate *b, int32_t objective)
{
    if (a->within_error != b->within_error)
        return b->within_error - a->within_error;
    if (!a->within_error)
        return a->error < b->error ? -1 : a->error > b->error;
    if (objective == QS_RECOMMEND_SIZE && a->bits_per_weight != b->bits_per_weight)
        return a->bits_per_weight < b->bits_per_weight ? -1 : 1;
    if (a->gemv_speedup != b->gemv_speedup)
        return a->gemv_speedup > b->gemv_speedup ? -1 : 1;
    return a->error < b->error ? -1 : a->error > b->error;
}

/* Insertion sort (n <= 32): qsort has no argument for the objective, and a file-level variable
 * would race between contexts recommending on two threads. Stable, so ties keep table order. */
static void sort_cands(qs_candidate *c, int64_t n, int32_t objective)
{
    for (int64_t i = 1; i < n; i++) {
        qs_candidate v = c[i];
        int64_t j = i;
        while (j > 0 && cmp_cand(&c[j - 1], &v, objective) > 0) {
            c[j] = c[j - 1];
            j--;
        }
        c[j] = v;
    }
    for (int64_t i = 0; i < n; i++)
        c[i].rank = (int32_t)(i + 1);
}

/* ---- the entry point ------------------------------------------------------------------------- */

static qs_status check_args(qs_ctx *ctx, const qs_recommend_params *p, const float *w,
                            int64_t rows, int64_t cols, const float *x, int64_t xrows,
                            const qs_candidate *out, int64_t capacity, const int64_t *count)
{
    int64_t n;
    if (!w || !out || !count || (xrows > 0 && !x))
        return qs_fail(ctx, QS_ERR_INVALID_ARG, "qs_recommend: NULL pointer");
    if (rows < 1 || cols < 1 || xrows < 0 || qs_mul_overflow(rows, cols, &n) ||
        n > INT32_MAX || rows > INT32_MAX || cols > INT32_MAX)
        return qs_fail(ctx, QS_ERR_INVALID_ARG, "qs_recommend: shape %lld x %lld out of range",
                       (long long)rows, (long long)cols);
    if ((p->objective != QS_RECOMMEND_SPEED && p->objective != QS_RECOMMEND_SIZE) ||
        !(p->max_error > 0.0f) || !isfinite(p->max_error) || (p->sparse24 != 0 &&
        p->sparse24 != 1) || (p->gemm_rows != 0 && p->gemm_rows < 16) ||
        !(p->probe_seconds > 0.0) || p->probe_seconds > 10.0)
        return qs_fail(ctx, QS_ERR_INVALID_ARG, "qs_recommend: bad parameters");
    for (size_t i = 0; i < sizeof p->reserved / sizeof p->reserved[0]; i++)
        if (p->reserved[i])
            return qs_fail(ctx, QS_ERR_INVALID_ARG, "qs_recommend: reserved fields must be 0");
    if (capacity < QS_RECOMMEND_MAX_CANDIDATES)
        return qs_fail(ctx, QS_ERR_BUFFER_TOO_SMALL,
                       "qs_recommend: capacity %lld, QS_RECOMMEND_MAX_CANDIDATES (%d) needed",
                       (long long)capacity, QS_RECOMMEND_MAX_CANDIDATES);
    for (int64_t i = 0; i < n; i++)
        if (!isfinite(qs_ld_f32(w + i)))
            return qs_fail(ctx, QS_ERR_NONFINITE, "qs_recommend: w[%lld] is not finite",
                           (long long)i);
    for (int64_t i = 0; i < xrows * cols; i++)
        if (!isfinite(qs_ld_f32(x + i)))
            return qs_fail(ctx, QS_ERR_NONFINITE, "qs_recommend: x[%lld] is not finite",
                           (long long)i);
    return QS_OK;
}

struct rec_state {
    float *y_ref, *y, *xg, *yg, *back, *xv;
    double dense_gemv_1t, dense_gemv_mt, dense_gemm;
};

static qs_status measure(qs_ctx *ctx, const qs_recommend_params *p, const struct cand_def *d,
                         const float *w, int64_t rows, int64_t cols, const float *x,
                         int64_t xrows, struct rec_state *s, qs_candidate *c)
{
    struct made m;
    qs_matmul_params mp;
    qs_status st;
    int32_t threads = ctx->num_threads;

    memset(c, 0, sizeof *c);
    snprintf(c->label, sizeof c->label, "%s", d->label);
    c->format = d->format;
    c->sparse24 = d->sp24;
    c->int8_activations = d->act8;
    qs_matmul_params_init(&mp);
    if (d->act8) {
        mp.activations = QS_MATMUL_ACT_INT8;
        mp.threshold = d->threshold;
    }
    if ((st = make(ctx, d, w, rows, cols, &m)) != QS_OK)
        goto done;
    c->bytes = m.bytes;
    c->bits_per_weight = (double)m.bytes * 8.0 / ((double)rows * (double)cols);

    /* error */
    if (xrows > 0) {
        st = qs_matmul(ctx, &mp, x, QS_DTYPE_F32, xrows, cols, &m.w, rows, NULL, s->y,
                       xrows * rows * 4);
        if (st != QS_OK)
            goto done;
        c->error = rel_error(s->y_ref, s->y, xrows * rows);
    } else {
        /* the weight through the matmul: y = e_k . W^T for unit rows would cost rows*cols^2;
         * dequantize instead (2:4: decompress the kept values, then their quantization) */
        if (d->sp24) {
            const void *vals = m.values;
            if (d->format) {
                st = qs_dequantize(ctx, &m.qp, &m.q, rows, cols / 2, s->xv, QS_DTYPE_F32,
                                   rows * cols / 2 * 4);
                vals = s->xv;
            }
            if (st == QS_OK)
                st = qs_sp24_decompress(ctx, vals, QS_DTYPE_F32, m.meta, m.w.meta_count, rows,
                                        cols, s->back, rows * cols * 4);
        } else {
            st = qs_dequantize(ctx, &m.qp, &m.q, rows, cols, s->back, QS_DTYPE_F32,
                               rows * cols * 4);
        }
        if (st != QS_OK)
            goto done;
        c->error = rel_error(w, s->back, rows * cols);
    }
    c->within_error = c->error <= p->max_error;

    /* speed: GEMV with one thread, then the context's threads; GEMM with the context's */
    struct probe pr = {ctx, &mp, s->xg, 1, cols, rows, &m.w, NULL, s->yg};
    double t;
    ctx->num_threads = 1;
    c->kernel = gemv_kernel(ctx, &pr);
    st = time_min(&pr, p->probe_seconds, &t);
    ctx->num_threads = threads;
    if (st != QS_OK)
        goto done;
    c->gemv_speedup = s->dense_gemv_1t / t;
    if ((st = time_min(&pr, p->probe_seconds, &t)) != QS_OK)
        goto done;
    c->gemv_speedup_mt = s->dense_gemv_mt / t;
    if (p->gemm_rows > 0) {
        pr.M = p->gemm_rows;
        if ((st = time_min(&pr, p->probe_seconds, &t)) != QS_OK)
            goto done;
        c->gemm_speedup = s->dense_gemm / t;
    }
    const char *why = slow_reason(ctx, d, c->kernel);
    if (why) {
        c->slow = 1;
        snprintf(c->reason, sizeof c->reason, "%s", why);
    }
done:
    ctx->num_threads = threads;
    made_free(ctx, &m);
    return st;
}

QS_API qs_status qs_recommend(qs_ctx *ctx, const qs_recommend_params *params, const float *w,
                              int64_t rows, int64_t cols, const float *x, int64_t xrows,
                              qs_candidate *out, int64_t capacity, int64_t *count)
{
    qs_recommend_params defaults;
    qs_candidate cands[QS_RECOMMEND_MAX_CANDIDATES];
    struct rec_state s;
    qs_status st;
    int64_t n = 0, gm;

    if (!ctx)
        return QS_ERR_INVALID_ARG;
    if (!params) {
        qs_recommend_params_init(&defaults);
        params = &defaults;
    }
    if ((st = check_args(ctx, params, w, rows, cols, x, xrows, out, capacity, count)) != QS_OK)
        return st;
    gm = params->gemm_rows > 0 ? params->gemm_rows : 1;
    memset(&s, 0, sizeof s);
    s.y_ref = qs_scratch_alloc(ctx, (size_t)((xrows > 0 ? xrows : 1) * rows) * 4);
    s.y = qs_scratch_alloc(ctx, (size_t)((xrows > 0 ? xrows : 1) * rows) * 4);
    s.xg = qs_scratch_alloc(ctx, (size_t)(gm * cols) * 4);
    s.yg = qs_scratch_alloc(ctx, (size_t)(gm * rows) * 4);
    s.back = qs_scratch_alloc(ctx, (size_t)(rows * cols) * 4);
    s.xv = qs_scratch_alloc(ctx, (size_t)(rows * cols / 2 + 1) * 4);
    if (!s.y_ref || !s.y || !s.xg || !s.yg || !s.back || !s.xv) {
        st = qs_fail(ctx, QS_ERR_OUT_OF_MEMORY, "qs_recommend: no memory for the probes");
        goto out;
    }
    /* probe activations: the caller's rows where there are, else a fixed pattern in [-1, 1] */
    for (int64_t i = 0; i < gm * cols; i++)
        s.xg[i] = xrows > 0 ? x[i % (xrows * cols)]
                            : (float)((uint32_t)(i * 2654435761u) >> 8) / 8388608.0f - 1.0f;

    qs_matmul_params dense_mp;
    qs_matmul_params_init(&dense_mp);
    /* the reference output through qs_matmul on the dense f32 weight (not BLAS: its rounding
     * would differ from what a user who checks the figures computes with the library) */
    qs_weight wdense = {0};
    wdense.kind = QS_WEIGHT_DENSE;
    wdense.dtype = QS_DTYPE_F32;
    wdense.data = w;
    wdense.data_bytes = rows * cols * 4;
    struct probe dense = {ctx, &dense_mp, x, xrows, cols, rows, &wdense, w, s.y_ref};
    int32_t threads = ctx->num_threads;
    if (xrows > 0 && (st = run_once(&dense)) != QS_OK)
        goto out;
    dense.w = NULL; /* timing baseline: BLAS where the build has it */
    dense.x = s.xg;
    dense.y = s.yg;
    dense.M = 1;
    ctx->num_threads = 1;
    st = time_min(&dense, params->probe_seconds, &s.dense_gemv_1t);
    ctx->num_threads = threads;
    if (st != QS_OK || (st = time_min(&dense, params->probe_seconds, &s.dense_gemv_mt)) != QS_OK)
        goto out;
    if (params->gemm_rows > 0) {
        dense.M = params->gemm_rows;
        if ((st = time_min(&dense, params->probe_seconds, &s.dense_gemm)) != QS_OK)
            goto out;
    }

    for (int i = 0; i < CAND_COUNT; i++) {
        const struct cand_def *d = &cand_defs[i];
        if (d->sp24 && (!params->sparse24 || cols % 4 != 0))
            continue;
        if (d->gran == QS_GRAN_GROUP && cols % d->group != 0)
            continue;
        if ((st = measure(ctx, params, d, w, rows, cols, x, xrows, &s, &cands[n])) != QS_OK) {
            if (st == QS_ERR_OUT_OF_MEMORY)
                goto out;
            /* a shape a format cannot take (e.g. MX blocks) is left out, not an error */
            st = QS_OK;
            continue;
        }
        n++;
    }
    sort_cands(cands, n, params->objective);
    memcpy(out, cands, (size_t)n * sizeof *out);
    *count = n;
out:
    qs_scratch_free(ctx, s.y_ref);
    qs_scratch_free(ctx, s.y);
    qs_scratch_free(ctx, s.xg);
    qs_scratch_free(ctx, s.yg);
    qs_scratch_free(ctx, s.back);
    qs_scratch_free(ctx, s.xv);
    return st == QS_OK ? qs_ok(ctx) : st;
}
