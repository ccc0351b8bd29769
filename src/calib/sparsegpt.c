/* SPDX-License-Identifier: MIT */
/*
 * SparseGPT (docs/calibration.md §16; Frantar & Alistarh 2023, "SparseGPT: Massive Language Models
 * Can Be Accurately Pruned in One-Shot"): the GPTQ sweep of gptq.c where a column's "rounding" is
 * pruning (and, jointly, quantization of the kept values). The mask is chosen from the saliency
 * w^2 / U_jj^2 of the updated weights: per group of m columns (keep the n largest, ties to the
 * lower index) when the sweep reaches the group, or per lazy block for unstructured sparsity (the
 * smallest (1 - density) fraction of the block's rows x columns is pruned, ties to the lower
 * row-major index).
 *
 * Jointly with a format (2:4 only) the kept values form the compressed rows x cols/2 matrix of
 * qs_sp24_quantize; a scale group of G kept values covers 2 G dense columns, whose masks are all
 * chosen when the sweep reaches the span's first column, then the group's scale is fitted to
 * their kept values.
 */
#include <float.h>
#include <math.h>
#include <string.h>

#include "../core/parallel.h"
#include "gptq_internal.h"

#define SG_ROW_CHUNK 16

QS_API void qs_sparsegpt_params_init(qs_sparsegpt_params *params)
{
    if (!params)
        return;
    memset(params, 0, sizeof *params);
    params->percdamp = 0.01;
    params->density = 0.5;
    params->block_size = 128;
    params->n = 2;
    params->m = 4;
}

struct sg_job {
    struct qs_grid *g;    /* NULL: prune only */
    float *w;             /* rows x k */
    const float *u;
    float *err;           /* rows x bk */
    uint8_t *mask;        /* rows x bk (unstructured: chosen before the rows run) */
    double *loss;
    int64_t rows, k, bk, i1, i2, span;
    int32_t n, m;
    float dscale; /* saliency_scale: 1 for every Hessian of ordinary scale */
};

/* The saliency w^2 / d^2 of a weight, d its column's scaled U_jj. A NaN (a weight that became
 * NaN: an Inf error times a zero entry of U) ranks below every number, so that exactly n of m
 * are kept whatever the values: the 2:4 column map (sp24_col) counts on it. Such a sweep's loss
 * is not finite, and the call fails before anything is written. */
static inline float saliency(float w, float d)
{
    float s = w * w / (d * d);
    return s == s ? s : -1.0f;
}

/* N:M mask of row w over columns [c0, c0 + len) (len a multiple of m) into mask (block-local). */
static void nm_choose(const struct sg_job *j, const float *w, int64_t c0, int64_t len,
                      uint8_t *mask)
{
    for (int64_t c = c0; c < c0 + len; c += j->m) {
        float s[16];
        for (int32_t i = 0; i < j->m; i++) {
            s[i] = saliency(w[c + i], j->u[(c + i) * j->k + c + i] * j->dscale);
        }
        for (int32_t i = 0; i < j->m; i++) {
            int32_t better = 0; /* scores ranked above s[i]: larger, or equal at a lower index */
            for (int32_t o = 0; o < j->m; o++)
                better += s[o] > s[i] || (s[o] == s[i] && o < i);
            mask[c - j->i1 + i] = better < j->n;
        }
    }
}

/* The power of two c that the saliency w^2 / (c d)^2 scales U's diagonal entries d by, so that
 * every (c d)^2 is a positive normal float and the saliency is never 0 / 0 or x / Inf: 1 when
 * the squares already are (every ordinary Hessian: the bits are those of w^2 / d^2), else the
 * one that centres the diagonal's exponents (a Hessian of a huge or tiny scale, whose U has
 * entries near 1e-30 or 1e30). Scaling by a power of two keeps the ranking. 0 when the diagonal
 * spans more than the float range of its squares. */
static float saliency_scale(const float *u, int64_t k)
{
    float lo = u[0], hi = u[0], c = 1.0f;

    for (int64_t i = 1; i < k; i++) {
        lo = u[i * k + i] < lo ? u[i * k + i] : lo;
        hi = u[i * k + i] > hi ? u[i * k + i] : hi;
    }
    if (!(lo * lo >= FLT_MIN) || !isfinite(hi * hi))
        c = ldexpf(1.0f, -(ilogbf(lo) + ilogbf(hi)) / 2); /* lo >= FLT_MIN: |e| <= 127 */
    lo *= c;
    hi *= c;
    return lo * lo >= FLT_MIN && isfinite(hi * hi) ? c : 0.0f;
}

/* Compressed column of dense column c (2:4): 2 * (c / 4) + kept positions before c in its group. */
static int64_t sp24_col(const uint8_t *mask, int64_t c, int64_t i1)
{
    int64_t g0 = c & ~(int64_t)3, before = 0;
    for (int64_t x = g0; x < c; x++)
        before += mask[x - i1];
    return g0 / 2 + before;
}

static void sg_block_task(void *arg, int64_t chunk, float *tile)
{
    const struct sg_job *j = arg;
    struct qs_grid *g = j->g;
    int64_t r1 = (chunk + 1) * SG_ROW_CHUNK < j->rows ? (chunk + 1) * SG_ROW_CHUNK : j->rows;
    (void)tile;

    for (int64_t r = chunk * SG_ROW_CHUNK; r < r1; r++) {
        float *w = j->w + r * j->k;
        float *e = j->err + r * j->bk;
        uint8_t *mask = j->mask + r * j->bk;
        double loss = 0.0;
        for (int64_t t = j->i1; t < j->i2; t++) {
            const float *urow = j->u + t * j->k;
            if (j->m && (t - j->i1) % j->span == 0) {
                int64_t len = j->i2 - t < j->span ? j->i2 - t : j->span; /* a multiple of m */
                nm_choose(j, w, t, len, mask);
                if (g && g->dynamic) { /* the span is one scale group of kept values */
                    float v[2048];
                    int64_t nv = 0;
                    for (int64_t c = t; c < t + len; c++)
                        if (mask[c - j->i1])
                            v[nv++] = w[c];
                    qs_grid_fit(g, r, t / 2 / g->group, v, nv);
                }
            }
            float x = w[t], qv = 0.0f;
            if (mask[t - j->i1])
                qv = g ? qs_grid_round(g, r, sp24_col(mask, t, j->i1), x) : x;
            float d = urow[t];
            float er = (x - qv) / d;
            loss += (double)er * (double)er * 0.5;
            for (int64_t c = t + 1; c < j->i2; c++)
                w[c] -= er * urow[c];
            e[t - j->i1] = er;
            w[t] = qv;
        }
        j->loss[r] += loss;
    }
}

/* Meta nibbles of one block's 2:4 mask (rows x bk) into the plain meta words. */
static void sp24_meta_block(const struct sg_job *j, uint16_t *meta, int64_t mwords)
{
    for (int64_t r = 0; r < j->rows; r++) {
        const uint8_t *mask = j->mask + r * j->bk;
        for (int64_t c = j->i1; c < j->i2; c += 4) {
            int idx[2] = {0, 0}, n = 0;
            for (int i = 0; i < 4; i++)
                if (mask[c - j->i1 + i] && n < 2)
                    idx[n++] = i;
            int64_t grp = c / 4;
            uint16_t *wd = meta + r * mwords + grp / 4;
            *wd = (uint16_t)(*wd | (uint16_t)((idx[0] | idx[1] << 2) << (4 * (grp % 4))));
        }
    }
}

/* Threshold of the unstructured mask of one block: prune the `prune` smallest saliencies. */
static void unstructured_mask(const struct sg_job *j, double density, float *score)
{
    const int64_t bw = j->i2 - j->i1, n = j->rows * bw;
    int64_t prune = (int64_t)floor((1.0 - density) * (double)n + 0.5), lo = 0, hi = n - 1;
    float thr;

    for (int64_t r = 0; r < j->rows; r++)
        for (int64_t c = 0; c < bw; c++) {
            score[r * bw + c] = saliency(j->w[r * j->k + j->i1 + c],
                                         j->u[(j->i1 + c) * j->k + j->i1 + c] * j->dscale);
        }
    if (prune <= 0) {
        for (int64_t r = 0; r < j->rows; r++)
            memset(j->mask + r * j->bk, 1, (size_t)bw);
        return;
    }
    /* quickselect the prune-th smallest (copy in score, order destroyed) */
    int64_t kth = prune - 1;
    float *a = score + n; /* second half of the scratch */
    memcpy(a, score, (size_t)n * sizeof(float));
    while (lo < hi) {
        float pivot = a[lo + (hi - lo) / 2];
        int64_t i = lo, k2 = hi;
        while (i <= k2) {
            while (a[i] < pivot)
                i++;
            while (a[k2] > pivot)
                k2--;
            if (i <= k2) {
                float t = a[i];
                a[i] = a[k2];
                a[k2] = t;
                i++;
                k2--;
            }
        }
        if (kth <= k2)
            hi = k2;
        else if (kth >= i)
            lo = i;
        else
            break;
    }
    thr = a[kth];
    int64_t below = 0;
    for (int64_t i = 0; i < n; i++)
        below += score[i] < thr;
    int64_t ties = prune - below; /* prune this many equal to thr, lowest index first */
    for (int64_t r = 0; r < j->rows; r++)
        for (int64_t c = 0; c < bw; c++) {
            float s = score[r * bw + c];
            uint8_t keep = s > thr;
            if (s == thr)
                keep = ties-- > 0 ? 0 : 1;
            j->mask[r * j->bk + c] = keep;
        }
}

QS_API qs_status qs_sparsegpt(qs_ctx *ctx, const qs_sparsegpt_params *sp,
                              const qs_quant_params *qparams, const float *w, int64_t rows,
                              int64_t cols, const qs_hessian *h, float *w_out, int64_t w_out_count,
                              qs_qtensor *q, uint16_t *meta, int64_t meta_count, double *loss)
{
    const char *who = "qs_sparsegpt";
    struct qs_grid g, *gp = NULL;
    qs_status st;
    float *wp = NULL, *u = NULL, *err = NULL, *score = NULL;
    double *rl = NULL;
    uint8_t *dead = NULL, *mask = NULL;
    uint16_t *mstage = NULL;
    int64_t mwords = 0;
    float dscale;

    if (!ctx)
        return QS_ERR_INVALID_ARG;
    if (!sp || !w || !h)
        return qs_fail(ctx, QS_ERR_INVALID_ARG, "%s: null pointer", who);
    if (sp->m == 0 ? !(sp->density > 0.0 && sp->density <= 1.0)
                   : (sp->n < 1 || sp->m > 16 || sp->n >= sp->m))
        return qs_fail(ctx, QS_ERR_INVALID_ARG, "%s: bad n:m (1 <= n < m <= 16) or density", who);
    if ((st = qs_gptq_check_common(ctx, w, rows, cols, h, sp->percdamp, sp->block_size,
                                   sp->reserved, sp->reserved0, who)) != QS_OK)
        return st;
    if (sp->m && cols % sp->m)
        return qs_fail(ctx, QS_ERR_SHAPE, "%s: %lld columns are not a multiple of m = %d", who,
                       (long long)cols, sp->m);
    if (qparams) {
        if (sp->n != 2 || sp->m != 4)
            return qs_fail(ctx, QS_ERR_UNSUPPORTED, "%s: joint quantization needs 2:4", who);
        if (!q || !meta)
            return qs_fail(ctx, QS_ERR_INVALID_ARG, "%s: null q or meta", who);
        mwords = qs_ceil_div(cols, 16);
        if (meta_count < rows * mwords)
            return qs_fail(ctx, QS_ERR_BUFFER_TOO_SMALL, "%s: meta holds %lld words, need %lld",
                           who, (long long)meta_count, (long long)(rows * mwords));
    } else if (q || meta) {
        return qs_fail(ctx, QS_ERR_INVALID_ARG, "%s: q and meta need qparams", who);
    } else if (!w_out) {
        return qs_fail(ctx, QS_ERR_INVALID_ARG, "%s: no output (w_out)", who);
    }
    if (w_out && w_out_count < rows * cols)
        return qs_fail(ctx, QS_ERR_BUFFER_TOO_SMALL, "%s: w_out holds %lld floats, need %lld",
                       who, (long long)w_out_count, (long long)(rows * cols));
    if (qparams) {
        if ((st = qs_grid_init(ctx, &g, qparams, rows, cols / 2, w, cols, 0, q, who)) != QS_OK)
            return st;
        gp = &g;
        if (g.dynamic && (int64_t)g.group > 2048) {
            qs_grid_free(ctx, &g);
            return qs_fail(ctx, QS_ERR_UNSUPPORTED, "%s: scale groups over 2048 kept values", who);
        }
    }
    const int64_t k = cols;
    /* a mask span: one m-group, or the 2 G dense columns of a scale group */
    int64_t span = sp->m ? sp->m : 1;
    if (gp && g.dynamic)
        span = 2 * (int64_t)g.group;
    int64_t bk = sp->block_size < span ? span : (int64_t)sp->block_size / span * span;

    wp = qs_scratch_alloc(ctx, (size_t)(rows * k > 0 ? rows * k : 1) * sizeof(float));
    u = qs_scratch_alloc(ctx, (size_t)k * (size_t)k * sizeof(float));
    err = qs_scratch_alloc(ctx, (size_t)(rows * bk > 0 ? rows * bk : 1) * sizeof(float));
    mask = qs_scratch_alloc(ctx, (size_t)(rows * bk > 0 ? rows * bk : 1));
    rl = qs_scratch_alloc(ctx, (size_t)(rows ? rows : 1) * sizeof(double));
    dead = qs_scratch_alloc(ctx, (size_t)k);
    if (!sp->m)
        score = qs_scratch_alloc(ctx, (size_t)(2 * rows * bk > 0 ? 2 * rows * bk : 1) * sizeof(float));
    /* the meta words are built in scratch and copied out with the planes, after the loss check */
    if (meta)
        mstage = qs_scratch_alloc(ctx, (size_t)(rows * mwords > 0 ? rows * mwords : 1) *
                                           sizeof(uint16_t));
    if (!wp || !u || !err || !mask || !rl || !dead || (!sp->m && !score) || (meta && !mstage)) {
        st = qs_fail(ctx, QS_ERR_OUT_OF_MEMORY, "%s: out of memory", who);
        goto done;
    }
    if ((st = qs_gptq_hinv(ctx, h, sp->percdamp, NULL, dead, u)) != QS_OK) {
        st = st == QS_ERR_BAD_DATA ? qs_fail(ctx, st, "%s: " QS_GPTQ_HINV_BAD, who)
                                   : qs_fail(ctx, st, "%s: out of memory", who);
        goto done;
    }
    if ((dscale = saliency_scale(u, k)) == 0.0f) {
        st = qs_fail(ctx, QS_ERR_BAD_DATA, "%s: the inverse factor's diagonal spans more than "
                     "the float range of the saliency w^2 / d^2 (scale the calibration data)",
                     who);
        goto done;
    }
    for (int64_t r = 0; r < rows; r++) {
        rl[r] = 0.0;
        for (int64_t t = 0; t < k; t++)
            wp[r * k + t] = dead[t] ? 0.0f : w[r * k + t] + 0.0f; /* -0 -> +0 */
    }
    if (meta)
        memset(mstage, 0, (size_t)(rows * mwords) * sizeof(uint16_t));
    struct sg_job j = {gp, wp, u, err, mask, rl, rows, k, bk, 0, 0, span, sp->n, sp->m, dscale};
    for (int64_t i1 = 0; i1 < k; i1 += bk) {
        j.i1 = i1;
        j.i2 = i1 + bk < k ? i1 + bk : k;
        if (!sp->m)
            unstructured_mask(&j, sp->density, score);
        qs_parallel_for(ctx, qs_ceil_div(rows, SG_ROW_CHUNK), sg_block_task, &j);
        if (meta)
            sp24_meta_block(&j, mstage, mwords);
        qs_gptq_gemm_sub(ctx, rows, k - j.i2, j.i2 - i1, err, bk, u + i1 * k + j.i2, k,
                         wp + j.i2, k);
    }
    /* every column's scaled error (pruned or rounded) is in the loss: finite means no Inf or
     * NaN was carried into the outputs */
    double total = qs_calib_loss_sum(rl, rows);
    if (!isfinite(total)) {
        st = qs_fail(ctx, QS_ERR_BAD_DATA, "%s: the loss is not finite (the weight or Hessian "
                     "is out of float range for SparseGPT; nothing written)", who);
        goto done;
    }
    if (gp)
        qs_grid_store(ctx, gp, qparams, q);
    if (meta && rows * mwords > 0)
        memcpy(meta, mstage, (size_t)(rows * mwords) * sizeof(uint16_t));
    if (w_out && rows * k > 0)
        memcpy(w_out, wp, (size_t)(rows * k) * sizeof(float));
    if (loss)
        *loss = total;
    st = qs_ok(ctx);
done:
    qs_scratch_free(ctx, wp);
    qs_scratch_free(ctx, u);
    qs_scratch_free(ctx, err);
    qs_scratch_free(ctx, mask);
    qs_scratch_free(ctx, rl);
    qs_scratch_free(ctx, dead);
    qs_scratch_free(ctx, score);
    qs_scratch_free(ctx, mstage);
    if (gp)
        qs_grid_free(ctx, gp);
    return st;
}
