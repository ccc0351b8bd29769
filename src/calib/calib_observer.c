/* SPDX-License-Identifier: MIT */
/*
 * Observers (docs/calibration.md §1-§3, §9): parameters, state allocation through the context's
 * allocator, updates per tensor or per channel, exact merges, and the per-channel results. The
 * histogram lives on the power-of-two grid of §3, so its state is a function of the multiset of
 * values seen, whatever the batching, order, thread count or shard split. The hot loops are the
 * hist_scan / hist_update kernels of the context's table.
 */
#include <math.h>
#include <string.h>

#include "../core/parallel.h"
#include "calib_internal.h"

/* f32 elements scanned and binned per kernel call: large enough to amortise the call, small
 * enough (256 KiB) that the binning pass re-reads them from cache. */
#define SPAN (16 * QS_TILE)
/* Per-channel updates along columns gather COL_BLOCK columns x ROW_BLOCK rows per tile: 16 f32
 * columns are one 64-byte line of each row. */
#define COL_BLOCK 16
#define ROW_BLOCK (QS_TILE / COL_BLOCK)

static const char *const method_names[] = {NULL, "minmax", "moving_average", "percentile",
                                           "entropy", "mse"};
static const char *const target_names[] = {NULL, "int8", "int8_asym", "fp8_e4m3", "fp8_e5m2",
                                           "nvfp4"};

QS_API const char *qs_observer_method_name(int32_t method)
{
    return method >= 1 && method <= QS_OBSERVER_MSE ? method_names[method] : NULL;
}

QS_API int32_t qs_observer_method_from_name(const char *name)
{
    if (!name)
        return -1;
    for (int32_t m = 1; m <= QS_OBSERVER_MSE; m++)
        if (strcmp(name, method_names[m]) == 0)
            return m;
    return -1;
}

QS_API const char *qs_calib_target_name(int32_t target)
{
    return target >= 1 && target <= QS_CALIB_NVFP4 ? target_names[target] : NULL;
}

QS_API int32_t qs_calib_target_from_name(const char *name)
{
    if (!name)
        return -1;
    if (strcmp(name, "int8_sym") == 0)
        return QS_CALIB_INT8_SYM;
    for (int32_t t = 1; t <= QS_CALIB_NVFP4; t++)
        if (strcmp(name, target_names[t]) == 0)
            return t;
    return -1;
}

QS_API void qs_observer_params_init(qs_observer_params *params, int32_t method)
{
    if (!params)
        return;
    memset(params, 0, sizeof *params);
    params->method = method;
    params->axis = -1;
    params->num_bins = 2048;   /* §3, PQ / MO / TensorRT */
    params->num_levels = 128;  /* §5: 2^(8 - 1) */
    params->start_bin = 128;   /* §5, §6 */
    params->target = QS_CALIB_INT8_SYM;
    params->averaging_constant = 0.01f; /* §2, PT averaging_constant */
    params->percentile = 99.99;         /* §4, PQ */
}

const char *qs_calib_params_error(const qs_observer_params *p)
{
    if (p->method < 1 || p->method > QS_OBSERVER_MSE)
        return "unknown observer method";
    if (p->axis < -1 || p->axis > 1)
        return "axis must be -1 (per tensor), 0 or 1";
    if (p->num_bins < QS_HIST_MIN_BINS || p->num_bins > QS_HIST_MAX_BINS ||
        (p->num_bins & (p->num_bins - 1)) != 0)
        return "num_bins must be a power of two in [4, 2^20]";
    if ((p->method == QS_OBSERVER_ENTROPY || p->method == QS_OBSERVER_MSE) &&
        p->num_bins > QS_OBSERVER_SEARCH_MAX_BINS)
        return "the entropy and MSE searches take time quadratic in num_bins: at most 4096 bins "
               "(QS_OBSERVER_SEARCH_MAX_BINS)";
    if (p->start_bin < 1 || p->start_bin > p->num_bins / 2)
        return "start_bin must be in [1, num_bins / 2]";
    if (p->num_levels < 1 || p->num_levels > p->start_bin)
        return "num_levels must be in [1, start_bin]";
    if (p->target != QS_CALIB_INT8_SYM && p->target != QS_CALIB_FP8_E4M3 &&
        p->target != QS_CALIB_FP8_E5M2)
        return "the MSE target must be QS_CALIB_INT8_SYM, QS_CALIB_FP8_E4M3 or QS_CALIB_FP8_E5M2";
    if (!(p->averaging_constant > 0.0f && p->averaging_constant <= 1.0f))
        return "averaging_constant must be in (0, 1]";
    if (!(p->percentile > 0.0 && p->percentile <= 100.0))
        return "percentile must be in (0, 100]";
    if (p->reserved0 != 0)
        return "reserved fields must be zero";
    for (size_t i = 0; i < sizeof p->reserved / sizeof p->reserved[0]; i++)
        if (p->reserved[i] != 0)
            return "reserved fields must be zero";
    return NULL;
}

void qs_calib_chan_init(struct qs_calib_chan *c)
{
    memset(c, 0, sizeof *c);
    c->lo = INFINITY;
    c->hi = -INFINITY;
    c->batch_lo = INFINITY;
    c->batch_hi = -INFINITY;
}

void *qs_calib_alloc(const qs_allocator *a, size_t bytes)
{
    return a->alloc(a->user, bytes ? bytes : 1, 64);
}

void qs_calib_free(const qs_allocator *a, void *p)
{
    if (p)
        a->free(a->user, p);
}

qs_status qs_calib_alloc_state(const qs_allocator *a, const qs_observer_params *p,
                               int64_t channels, struct qs_calib_chan **ch, uint64_t **counts)
{
    int64_t cb, nb;

    *ch = NULL;
    *counts = NULL;
    if (qs_mul_overflow(channels, (int64_t)sizeof(struct qs_calib_chan), &cb) ||
        qs_mul_overflow(channels, (int64_t)p->num_bins * 8, &nb) || (uint64_t)nb > SIZE_MAX)
        return QS_ERR_OVERFLOW;
    *ch = qs_calib_alloc(a, (size_t)cb);
    if (!*ch)
        return QS_ERR_OUT_OF_MEMORY;
    if (qs_calib_has_hist(p->method)) {
        *counts = qs_calib_alloc(a, (size_t)nb);
        if (!*counts) {
            qs_calib_free(a, *ch);
            *ch = NULL;
            return QS_ERR_OUT_OF_MEMORY;
        }
        memset(*counts, 0, (size_t)nb);
    }
    for (int64_t c = 0; c < channels; c++)
        qs_calib_chan_init(&(*ch)[c]);
    return QS_OK;
}

int32_t qs_calib_fit_k(float amax, int32_t log2_bins)
{
    int e;

    /* amax = f * 2^e with f in [0.5, 1): N * 2^(e - log2 N) = 2^e > amax >= 2^(e-1), so
     * k = e - log2 N is the smallest k with amax < N * 2^k (§3), from the bits, never log2 */
    (void)frexpf(amax, &e);
    return (int32_t)e - log2_bins;
}

void qs_calib_hist_coarsen(uint64_t *counts, int32_t nbins, int32_t k, int32_t k2)
{
    int64_t d = (int64_t)k2 - k;

    if (d <= 0)
        return;
    if (d >= 31 || ((int64_t)1 << d) >= nbins) {
        uint64_t sum = 0;
        for (int32_t j = 0; j < nbins; j++)
            sum += counts[j];
        memset(counts, 0, (size_t)nbins * sizeof *counts);
        counts[0] = sum;
        return;
    }
    /* new[t] = sum of old[t * 2^d ... (t + 1) * 2^d): nested edges make this exact (§3
     * growth); t * 2^d >= t, so every old bin is read before its slot is overwritten */
    int32_t group = 1 << d, used = nbins >> d;
    for (int32_t t = 0; t < used; t++) {
        uint64_t sum = 0;
        for (int32_t j = t * group; j < (t + 1) * group; j++)
            sum += counts[j];
        counts[t] = sum;
    }
    memset(counts + used, 0, (size_t)(nbins - used) * sizeof *counts);
}

float qs_calib_chan_amax(const struct qs_calib_chan *c)
{
    if (c->total == 0)
        return 0.0f;
    return -c->lo > c->hi ? -c->lo : c->hi;
}

/* ---- create / destroy ------------------------------------------------------------------------ */

QS_API qs_status qs_observer_create(qs_ctx *ctx, const qs_observer_params *params,
                                    qs_observer **out)
{
    const char *why;
    qs_observer *o;
    qs_status st;

    if (!ctx)
        return QS_ERR_INVALID_ARG;
    if (!params || !out)
        return qs_fail(ctx, QS_ERR_INVALID_ARG, "qs_observer_create: null pointer");
    if ((why = qs_calib_params_error(params)) != NULL)
        return qs_fail(ctx, QS_ERR_INVALID_ARG, "qs_observer_create: %s", why);
    o = qs_calib_alloc(&ctx->allocator, sizeof *o);
    if (!o)
        return qs_fail(ctx, QS_ERR_OUT_OF_MEMORY, "qs_observer_create: out of memory");
    memset(o, 0, sizeof *o);
    o->alloc = ctx->allocator;
    o->p = *params;
    for (o->log2_bins = 0; (1 << o->log2_bins) < params->num_bins; o->log2_bins++)
        ;
    if (params->axis < 0) {
        st = qs_calib_alloc_state(&o->alloc, params, 1, &o->ch, &o->counts);
        if (st != QS_OK) {
            qs_calib_free(&o->alloc, o);
            return qs_fail(ctx, st, "qs_observer_create: out of memory for the state");
        }
        o->channels = 1;
    }
    *out = o;
    return qs_ok(ctx);
}

QS_API void qs_observer_destroy(qs_observer *obs)
{
    if (!obs)
        return;
    qs_allocator a = obs->alloc;
    qs_calib_free(&a, obs->counts);
    qs_calib_free(&a, obs->ch);
    qs_calib_free(&a, obs);
}

QS_API qs_status qs_observer_get_params(const qs_observer *obs, qs_observer_params *params)
{
    if (!obs || !params)
        return QS_ERR_INVALID_ARG;
    *params = obs->p;
    return QS_OK;
}

QS_API qs_status qs_observer_channels(const qs_observer *obs, int64_t *channels)
{
    if (!obs || !channels)
        return QS_ERR_INVALID_ARG;
    *channels = obs->channels;
    return QS_OK;
}

/* ---- update ---------------------------------------------------------------------------------- */

/* Add n contiguous f32 values to one channel: scan (range, NaN / Inf counts), widen the bins if
 * the range grew, then bin. */
static void chan_span(const qs_ctx *ctx, const qs_observer *o, struct qs_calib_chan *c,
                      uint64_t *counts, const float *x, int64_t n)
{
    float lo = INFINITY, hi = -INFINITY;
    uint64_t nn = 0, ni = 0, fin;

    if (n <= 0)
        return;
    /* with a bin width already set, scan and bin in one pass; the kernel leaves the counts
     * alone when the span's maximum needs wider bins, and the general path below bins again */
    int binned = counts && c->has_k &&
                 ctx->k.hist_scan_update(x, n, c->k, o->p.num_bins, counts, &lo, &hi, &nn, &ni);
    if (!(counts && c->has_k))
        ctx->k.hist_scan(x, n, &lo, &hi, &nn, &ni);
    fin = (uint64_t)n - nn - ni;
    c->n_nan += nn;
    c->n_inf += ni;
    if (fin == 0)
        return;
    c->total += fin;
    if (lo < c->lo)
        c->lo = lo;
    if (hi > c->hi)
        c->hi = hi;
    if (lo < c->batch_lo)
        c->batch_lo = lo;
    if (hi > c->batch_hi)
        c->batch_hi = hi;
    if (!counts || binned)
        return;
    float amax = -lo > hi ? -lo : hi;
    if (amax > 0.0f) {
        int32_t k2 = qs_calib_fit_k(amax, o->log2_bins);
        if (!c->has_k) {
            /* the first non-zero value fixes k; earlier zeros enter bin 0 now (§3) */
            c->k = k2;
            c->has_k = 1;
            counts[0] += c->zeros_pending;
            c->zeros_pending = 0;
        } else if (k2 > c->k) {
            qs_calib_hist_coarsen(counts, o->p.num_bins, c->k, k2);
            c->k = k2;
        }
    }
    if (c->has_k)
        ctx->k.hist_update(x, n, c->k, o->p.num_bins, counts);
    else
        c->zeros_pending += fin;
}

static void chan_begin(struct qs_calib_chan *c)
{
    c->batch_lo = INFINITY;
    c->batch_hi = -INFINITY;
}

/* Moving average (§2): the first batch with a finite value initialises, later ones move the
 * average by c * (batch - average), in f32 like the reference observers. */
static void chan_end(const qs_observer *o, struct qs_calib_chan *c)
{
    if (o->p.method != QS_OBSERVER_MOVING_AVERAGE || c->batch_lo > c->batch_hi)
        return;
    if (!c->ema_init) {
        c->ema_lo = c->batch_lo;
        c->ema_hi = c->batch_hi;
        c->ema_init = 1;
        return;
    }
    float k = o->p.averaging_constant;
    c->ema_lo = c->ema_lo + k * (c->batch_lo - c->ema_lo);
    c->ema_hi = c->ema_hi + k * (c->batch_hi - c->ema_hi);
}

static uint64_t *chan_counts(const qs_observer *o, int64_t c)
{
    return o->counts ? o->counts + c * (int64_t)o->p.num_bins : NULL;
}

/* n values of src (of dtype) starting at element `start`, into one channel's state. */
static void chan_add(const qs_ctx *ctx, const qs_observer *o, struct qs_calib_chan *c,
                     uint64_t *counts, const void *src, int32_t dtype, int64_t start, int64_t n,
                     float *tile)
{
    int64_t step = dtype == QS_DTYPE_F32 ? SPAN : QS_TILE;

    for (int64_t off = 0; off < n; off += step) {
        int64_t len = n - off < step ? n - off : step;
        chan_span(ctx, o, c, counts, qs_stage_f32(ctx, src, dtype, start + off, len, tile), len);
    }
}

/* Per-tensor updates on several threads: fixed chunks of PAR_CHUNK values, each into a private
 * state, merged afterwards. Merging is exact (§3), so the bits equal the sequential update's. */
#define PAR_CHUNK ((int64_t)1 << 20)
/* Work per value of an update for the threading policy (parallel.h): a histogram update costs
 * several times a read of the value. */
#define OBS_BYTES 8

struct par_job {
    const qs_ctx *ctx;
    const qs_observer *o;
    const void *src;
    int32_t dtype;
    int64_t n;
    struct qs_calib_chan *ch;
    uint64_t *counts;
};

static void par_task(void *arg, int64_t i, float *tile)
{
    const struct par_job *j = arg;
    int64_t start = i * PAR_CHUNK, len = j->n - start < PAR_CHUNK ? j->n - start : PAR_CHUNK;

    chan_add(j->ctx, j->o, &j->ch[i], j->counts ? j->counts + i * j->o->p.num_bins : NULL,
             j->src, j->dtype, start, len, tile);
}

static void chan_merge(const qs_observer *o, struct qs_calib_chan *d, uint64_t *dc,
                       const struct qs_calib_chan *s, const uint64_t *sc);

static void update_tensor(qs_ctx *ctx, qs_observer *o, const void *src, int32_t dtype, int64_t n)
{
    struct qs_calib_chan *c = &o->ch[0], *priv = NULL;
    uint64_t *pcounts = NULL;
    int64_t chunks = qs_ceil_div(n, PAR_CHUNK);

    chan_begin(c);
    if (chunks > 1 && qs_parallel_threads(ctx, qs_work(n, OBS_BYTES)) > 1 &&
        qs_calib_alloc_state(&ctx->allocator, &o->p, chunks, &priv, &pcounts) == QS_OK) {
        struct par_job j = {ctx, o, src, dtype, n, priv, pcounts};
        qs_parallel_run(ctx, chunks, qs_work(n, OBS_BYTES), par_task, NULL, &j);
        for (int64_t i = 0; i < chunks; i++) {
            chan_merge(o, c, o->counts, &priv[i], pcounts ? pcounts + i * o->p.num_bins : NULL);
            if (priv[i].lo < c->batch_lo)
                c->batch_lo = priv[i].lo;
            if (priv[i].hi > c->batch_hi)
                c->batch_hi = priv[i].hi;
        }
        qs_calib_free(&ctx->allocator, pcounts);
        qs_calib_free(&ctx->allocator, priv);
    } else {
        /* one thread, or no memory for private states: the same bits, sequentially */
        float tile[QS_TILE];
        chan_add(ctx, o, c, o->counts, src, dtype, 0, n, tile);
    }
    chan_end(o, c);
}

struct upd_job {
    const qs_ctx *ctx;
    const qs_observer *o;
    const void *src;
    int32_t dtype;
    int64_t rows, cols;
};

static void row_task(void *arg, int64_t r, float *tile)
{
    const struct upd_job *j = arg;

    chan_begin(&j->o->ch[r]);
    chan_add(j->ctx, j->o, &j->o->ch[r], chan_counts(j->o, r), j->src, j->dtype, r * j->cols,
             j->cols, tile);
    chan_end(j->o, &j->o->ch[r]);
}

/* Channels are columns: gather a COL_BLOCK x ROW_BLOCK block transposed into the tile, so each
 * channel's values are contiguous for the kernels. */
static void col_task(void *arg, int64_t b, float *tile)
{
    const struct upd_job *j = arg;
    int64_t c0 = b * COL_BLOCK, nc = j->cols - c0 < COL_BLOCK ? j->cols - c0 : COL_BLOCK;
    float seg[COL_BLOCK];

    for (int64_t c = 0; c < nc; c++)
        chan_begin(&j->o->ch[c0 + c]);
    for (int64_t r0 = 0; r0 < j->rows; r0 += ROW_BLOCK) {
        int64_t nr = j->rows - r0 < ROW_BLOCK ? j->rows - r0 : ROW_BLOCK;
        for (int64_t r = 0; r < nr; r++) {
            const float *row = qs_stage_f32(j->ctx, j->src, j->dtype, (r0 + r) * j->cols + c0,
                                            nc, seg);
            for (int64_t c = 0; c < nc; c++)
                tile[c * ROW_BLOCK + r] = row[c];
        }
        for (int64_t c = 0; c < nc; c++)
            chan_span(j->ctx, j->o, &j->o->ch[c0 + c], chan_counts(j->o, c0 + c),
                      tile + c * ROW_BLOCK, nr);
    }
    for (int64_t c = 0; c < nc; c++)
        chan_end(j->o, &j->o->ch[c0 + c]);
}

/* Values one channel has counted: finite, NaN and Inf. Every other counter of the channel (its
 * bins, zeros_pending) is bounded by the finite count, as the deserializer checks, so a channel
 * whose seen count can absorb `more` values cannot wrap any counter. */
static int chan_room(const struct qs_calib_chan *c, uint64_t more)
{
    uint64_t seen = c->total;

    if (more == 0)
        return 1;
    if (seen + c->n_nan < seen)
        return 0;
    seen += c->n_nan;
    if (seen + c->n_inf < seen)
        return 0;
    seen += c->n_inf;
    return seen + more >= seen;
}

/* Seen count of a channel, for merging: UINT64_MAX when it is already unrepresentable. */
static uint64_t chan_seen(const struct qs_calib_chan *c)
{
    return chan_room(c, 0) ? c->total + c->n_nan + c->n_inf : UINT64_MAX;
}

/* Whether every one of `channels` channels can take `per` more values. */
static int chans_room(const qs_observer *o, int64_t channels, uint64_t per)
{
    for (int64_t c = 0; c < channels; c++)
        if (!chan_room(&o->ch[c], per))
            return 0;
    return 1;
}

static qs_status check_dtype(qs_ctx *ctx, const char *fn, int32_t dtype)
{
    if (dtype != QS_DTYPE_F32 && dtype != QS_DTYPE_F16 && dtype != QS_DTYPE_BF16)
        return qs_fail(ctx, QS_ERR_INVALID_ARG, "%s: unknown dtype %d", fn, dtype);
    return QS_OK;
}

QS_API qs_status qs_observer_update(qs_ctx *ctx, qs_observer *obs, const void *src,
                                    int32_t dtype, int64_t rows, int64_t cols)
{
    int64_t n, channels;
    qs_status st;

    if (!ctx)
        return QS_ERR_INVALID_ARG;
    if (!obs)
        return qs_fail(ctx, QS_ERR_INVALID_ARG, "qs_observer_update: null observer");
    if (rows < 0 || cols < 0)
        return qs_fail(ctx, QS_ERR_INVALID_ARG, "qs_observer_update: negative size");
    if ((st = check_dtype(ctx, "qs_observer_update", dtype)) != QS_OK)
        return st;
    if (qs_mul_overflow(rows, cols, &n) || n > INT64_MAX / 4)
        return qs_fail(ctx, QS_ERR_OVERFLOW, "qs_observer_update: size overflows");
    if (n > 0 && !src)
        return qs_fail(ctx, QS_ERR_INVALID_ARG, "qs_observer_update: null input");

    struct upd_job j = {ctx, obs, src, dtype, rows, cols};
    if (obs->p.axis < 0) {
        /* a state read back from bytes may be close to 2^64 values already */
        if (n > 0 && !chans_room(obs, 1, (uint64_t)n))
            return qs_fail(ctx, QS_ERR_OVERFLOW,
                           "qs_observer_update: the observer's value count would pass 2^64");
        update_tensor(ctx, obs, src, dtype, n);
        return qs_ok(ctx);
    }
    channels = obs->p.axis == 0 ? rows : cols;
    if (obs->ch && channels != obs->channels)
        return qs_fail(ctx, QS_ERR_SHAPE,
                       "qs_observer_update: %lld channels, the observer has %lld",
                       (long long)channels, (long long)obs->channels);
    if (!obs->ch) {
        st = qs_calib_alloc_state(&obs->alloc, &obs->p, channels, &obs->ch, &obs->counts);
        if (st != QS_OK)
            return qs_fail(ctx, st, "qs_observer_update: no memory for %lld channels",
                           (long long)channels);
        obs->channels = channels;
    }
    if (n == 0)
        return qs_ok(ctx);
    if (!chans_room(obs, channels, (uint64_t)(n / channels)))
        return qs_fail(ctx, QS_ERR_OVERFLOW,
                       "qs_observer_update: a channel's value count would pass 2^64");
    /* one task per channel (axis 0) or block of channels (axis 1): every channel's state is
     * touched by one task, in data order, so the bits do not depend on the thread count */
    if (obs->p.axis == 0)
        qs_parallel_run(ctx, rows, qs_work(n, OBS_BYTES), row_task, NULL, &j);
    else
        qs_parallel_run(ctx, qs_ceil_div(cols, COL_BLOCK), qs_work(n, OBS_BYTES), col_task, NULL,
                        &j);
    return qs_ok(ctx);
}

/* ---- merge ----------------------------------------------------------------------------------- */

static void chan_merge(const qs_observer *o, struct qs_calib_chan *d, uint64_t *dc,
                       const struct qs_calib_chan *s, const uint64_t *sc)
{
    int32_t nbins = o->p.num_bins;

    if (dc) {
        if (s->has_k) {
            if (!d->has_k) {
                /* d has seen zeros only (all counts 0): adopt s's width */
                d->k = s->k;
                d->has_k = 1;
                dc[0] += d->zeros_pending;
                d->zeros_pending = 0;
            } else if (s->k > d->k) {
                qs_calib_hist_coarsen(dc, nbins, d->k, s->k);
                d->k = s->k;
            }
            /* bring s to d's (not smaller) width on the fly: bin j of s lies in bin j >> shift */
            int64_t shift = (int64_t)d->k - s->k;
            uint64_t zeros = s->zeros_pending; /* 0 when s has k; read before d changes */
            if (shift >= 31) {
                uint64_t sum = 0;
                for (int32_t j = 0; j < nbins; j++)
                    sum += sc[j];
                dc[0] += sum;
            } else {
                for (int32_t j = 0; j < nbins; j++)
                    dc[j >> shift] += sc[j];
            }
            dc[0] += zeros;
        } else if (d->has_k) {
            dc[0] += s->zeros_pending;
        } else {
            d->zeros_pending += s->zeros_pending;
        }
    }
    d->total += s->total;
    d->n_nan += s->n_nan;
    d->n_inf += s->n_inf;
    if (s->lo < d->lo)
        d->lo = s->lo;
    if (s->hi > d->hi)
        d->hi = s->hi;
}

QS_API qs_status qs_observer_merge(qs_ctx *ctx, qs_observer *dst, const qs_observer *src)
{
    if (!ctx)
        return QS_ERR_INVALID_ARG;
    if (!dst || !src)
        return qs_fail(ctx, QS_ERR_INVALID_ARG, "qs_observer_merge: null observer");
    if (dst->p.method == QS_OBSERVER_MOVING_AVERAGE || src->p.method == QS_OBSERVER_MOVING_AVERAGE)
        return qs_fail(ctx, QS_ERR_UNSUPPORTED,
                       "qs_observer_merge: a moving average depends on batch order and cannot "
                       "be merged (docs/calibration.md §2)");
    if (memcmp(&dst->p, &src->p, sizeof dst->p) != 0)
        return qs_fail(ctx, QS_ERR_INVALID_ARG, "qs_observer_merge: the parameters differ");
    if (!src->ch || src->channels == 0)
        return qs_ok(ctx);
    if (dst->ch && dst->channels != src->channels)
        return qs_fail(ctx, QS_ERR_SHAPE, "qs_observer_merge: %lld vs %lld channels",
                       (long long)dst->channels, (long long)src->channels);
    /* check every channel before changing any, so a refused merge leaves dst as it was */
    for (int64_t c = 0; dst->ch && c < src->channels; c++)
        if (!chan_room(&dst->ch[c], chan_seen(&src->ch[c])))
            return qs_fail(ctx, QS_ERR_OVERFLOW,
                           "qs_observer_merge: channel %lld would count more than 2^64 values",
                           (long long)c);
    if (!dst->ch) {
        qs_status st =
            qs_calib_alloc_state(&dst->alloc, &dst->p, src->channels, &dst->ch, &dst->counts);
        if (st != QS_OK)
            return qs_fail(ctx, st, "qs_observer_merge: no memory for the state");
        dst->channels = src->channels;
    }
    for (int64_t c = 0; c < dst->channels; c++)
        chan_merge(dst, &dst->ch[c], chan_counts(dst, c), &src->ch[c], chan_counts(src, c));
    return qs_ok(ctx);
}

/* ---- results --------------------------------------------------------------------------------- */

/* The clipping threshold of one channel; work holds 3 * num_bins doubles. */
static float chan_result(const qs_observer *o, int64_t ci, double *work)
{
    const struct qs_calib_chan *c = &o->ch[ci];
    const uint64_t *counts = chan_counts(o, ci);
    float amax = qs_calib_chan_amax(c);
    int64_t n_used, idx;

    switch (o->p.method) {
    case QS_OBSERVER_MINMAX: return amax;
    case QS_OBSERVER_MOVING_AVERAGE:
        if (!c->ema_init)
            return 0.0f;
        return fabsf(c->ema_lo) > fabsf(c->ema_hi) ? fabsf(c->ema_lo) : fabsf(c->ema_hi);
    default: break;
    }
    if (!c->has_k)
        return 0.0f;
    /* the bin holding amax: n_used = floor(amax / w) + 1, in (N/2, N] (§3) */
    n_used = (int64_t)floor(ldexp((double)amax, -c->k)) + 1;
    if (n_used > o->p.num_bins)
        n_used = o->p.num_bins;
    switch (o->p.method) {
    case QS_OBSERVER_PERCENTILE:
        idx = qs_calib_percentile(counts, n_used, c->total, o->p.percentile);
        return (float)ldexp((double)idx, c->k);
    case QS_OBSERVER_ENTROPY:
        idx = qs_calib_entropy(counts, n_used, o->p.num_levels, o->p.start_bin, work);
        return (float)ldexp((double)idx, c->k);
    default:
        idx = qs_calib_mse(counts, o->p.num_bins, o->p.start_bin, o->p.target, work);
        return (float)ldexp((double)idx + 0.5, c->k);
    }
}

/* Searches of many channels run in parallel, channel c in task c % tasks with its own work
 * buffer; each channel's result depends on its histogram only. */
#define SEARCH_TASKS 32

struct search_job {
    const qs_observer *o;
    float *amax;
    double *work;
    int64_t tasks;
};

static void search_task(void *arg, int64_t t, float *tile)
{
    const struct search_job *j = arg;
    double *work = j->work ? j->work + t * 3 * (int64_t)j->o->p.num_bins : NULL;

    (void)tile;
    for (int64_t c = t; c < j->o->channels; c += j->tasks)
        j->amax[c] = chan_result(j->o, c, work);
}

QS_API qs_status qs_observer_amax(qs_ctx *ctx, const qs_observer *obs, float *amax, int64_t count)
{
    struct search_job j = {obs, amax, NULL, 1};

    if (!ctx)
        return QS_ERR_INVALID_ARG;
    if (!obs || (!amax && obs->channels > 0))
        return qs_fail(ctx, QS_ERR_INVALID_ARG, "qs_observer_amax: null pointer");
    if (count < obs->channels)
        return qs_fail(ctx, QS_ERR_BUFFER_TOO_SMALL, "qs_observer_amax: %lld < %lld channels",
                       (long long)count, (long long)obs->channels);
    if (obs->p.method == QS_OBSERVER_ENTROPY || obs->p.method == QS_OBSERVER_MSE) {
        size_t per = (size_t)obs->p.num_bins * 3 * sizeof(double);
        int64_t tasks = obs->channels < SEARCH_TASKS ? obs->channels : SEARCH_TASKS;
        if (qs_threads(ctx) > 1 && tasks > 1)
            j.work = qs_scratch_alloc(ctx, per * (size_t)tasks);
        if (j.work) {
            j.tasks = tasks;
        } else {
            j.work = qs_scratch_alloc(ctx, per); /* one buffer, channels in turn */
            if (!j.work)
                return qs_fail(ctx, QS_ERR_OUT_OF_MEMORY, "qs_observer_amax: no scratch memory");
        }
    }
    if (j.tasks > 1)
        qs_parallel_for(ctx, j.tasks, search_task, &j);
    else
        for (int64_t c = 0; c < obs->channels; c++)
            amax[c] = chan_result(obs, c, j.work);
    qs_scratch_free(ctx, j.work);
    return qs_ok(ctx);
}

QS_API qs_status qs_observer_range(qs_ctx *ctx, const qs_observer *obs, float *lo, float *hi,
                                   int64_t count)
{
    if (!ctx)
        return QS_ERR_INVALID_ARG;
    if (!obs || ((!lo || !hi) && obs->channels > 0))
        return qs_fail(ctx, QS_ERR_INVALID_ARG, "qs_observer_range: null pointer");
    if (count < obs->channels)
        return qs_fail(ctx, QS_ERR_BUFFER_TOO_SMALL, "qs_observer_range: %lld < %lld channels",
                       (long long)count, (long long)obs->channels);
    for (int64_t i = 0; i < obs->channels; i++) {
        const struct qs_calib_chan *c = &obs->ch[i];
        if (obs->p.method == QS_OBSERVER_MOVING_AVERAGE) {
            lo[i] = c->ema_init ? c->ema_lo : 0.0f;
            hi[i] = c->ema_init ? c->ema_hi : 0.0f;
        } else {
            lo[i] = c->total ? c->lo : 0.0f;
            hi[i] = c->total ? c->hi : 0.0f;
        }
    }
    return qs_ok(ctx);
}

QS_API qs_status qs_observer_counts(const qs_observer *obs, int64_t channel, uint64_t *finite,
                                    uint64_t *nan, uint64_t *inf)
{
    uint64_t f = 0, a = 0, b = 0;

    if (!obs || channel < -1 || channel >= obs->channels)
        return QS_ERR_INVALID_ARG;
    for (int64_t c = channel < 0 ? 0 : channel; c < (channel < 0 ? obs->channels : channel + 1);
         c++) {
        f += obs->ch[c].total;
        a += obs->ch[c].n_nan;
        b += obs->ch[c].n_inf;
    }
    if (finite)
        *finite = f;
    if (nan)
        *nan = a;
    if (inf)
        *inf = b;
    return QS_OK;
}

QS_API qs_status qs_observer_histogram(const qs_observer *obs, int64_t channel, uint64_t *counts,
                                       int64_t count, int32_t *log2_width)
{
    if (!obs || !counts || !log2_width || channel < 0 || channel >= obs->channels)
        return QS_ERR_INVALID_ARG;
    if (!qs_calib_has_hist(obs->p.method))
        return QS_ERR_UNSUPPORTED;
    if (count < obs->p.num_bins)
        return QS_ERR_BUFFER_TOO_SMALL;
    const struct qs_calib_chan *c = &obs->ch[channel];
    memcpy(counts, chan_counts(obs, channel), (size_t)obs->p.num_bins * sizeof *counts);
    if (c->has_k) {
        *log2_width = c->k;
    } else {
        counts[0] = c->zeros_pending;
        *log2_width = QS_HIST_NO_WIDTH;
    }
    return QS_OK;
}
