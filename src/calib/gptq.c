/* SPDX-License-Identifier: MIT */
/*
 * GPTQ (docs/calibration.md §15; Frantar et al. 2022, "GPTQ: Accurate Post-Training Quantization
 * for Generative Pre-trained Transformers"): columns are quantized one at a time in a fixed
 * order, and each column's rounding error, divided by the diagonal of the inverse Hessian's
 * Cholesky factor U, is subtracted from the columns not yet quantized along U's row. Updates
 * inside a block of columns are applied at once (row by row, each row independent); the
 * trailing columns receive a block's errors in one matrix product (the "lazy batch" update).
 *
 * Rows are independent given U, so the per-block work is split into fixed chunks of rows; the
 * result does not depend on the thread count (the trailing sgemm's bits may, see gptq.h).
 */
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "../core/parallel.h"
#include "gptq_internal.h"

#define GPTQ_ROW_CHUNK 16

QS_API void qs_gptq_params_init(qs_gptq_params *params)
{
    if (!params)
        return;
    memset(params, 0, sizeof *params);
    params->percdamp = 0.01;
    params->block_size = 128;
    params->scale_search = 1;
}

struct gptq_job {
    struct qs_grid *g;
    float *w;          /* rows x k, processing order; quantized values replace finished columns */
    const float *u;    /* k x k upper factor */
    float *err;        /* rows x bk */
    double *loss;      /* per row */
    const int32_t *perm;
    int64_t rows, k, bk, i1, i2;
};

static void gptq_block_task(void *arg, int64_t chunk, float *tile)
{
    const struct gptq_job *j = arg;
    struct qs_grid *g = j->g;
    int64_t r1 = (chunk + 1) * GPTQ_ROW_CHUNK < j->rows ? (chunk + 1) * GPTQ_ROW_CHUNK : j->rows;
    (void)tile;

    for (int64_t r = chunk * GPTQ_ROW_CHUNK; r < r1; r++) {
        float *w = j->w + r * j->k;
        float *e = j->err + r * j->bk;
        double loss = 0.0;
        for (int64_t t = j->i1; t < j->i2; t++) {
            const float *urow = j->u + t * j->k;
            int64_t col = j->perm ? j->perm[t] : t;
            if (g->dynamic && t % g->group == 0) { /* dynamic grids never permute */
                int64_t len = j->k - t < g->group ? j->k - t : g->group;
                struct qs_mx_sweep sw;
                /* the group lies inside this lazy block, so its U rows too */
                if (g->search && qs_grid_fit_search(g, r, t / g->group, w + t, len, urow + t,
                                                    j->k, &sw)) {
                    /* the search swept the group with the scale it chose, as the loop below
                     * would: take its codes, values and errors, and carry the errors to the
                     * block's later columns (each gets them in column order, as below) */
                    for (int64_t i = 0; i < len; i++) {
                        const float *ur = j->u + (t + i) * j->k;
                        float er = sw.er[i];
                        loss += (double)er * (double)er * 0.5;
                        for (int64_t c = t + len; c < j->i2; c++)
                            w[c] -= er * ur[c];
                        e[t + i - j->i1] = er;
                        w[t + i] = sw.q[i];
                        g->codes[r * g->lcols + t + i] = sw.code[i];
                    }
                    t += len - 1;
                    continue;
                }
                if (!g->search)
                    qs_grid_fit(g, r, t / g->group, w + t, len);
            }
            float x = w[t];
            float qv = qs_grid_round(g, r, col, x);
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

/* Columns in decreasing order of diag S, ties in increasing index: a stable bottom-up merge
 * sort (perm has 2 k entries, the second half is scratch). */
static void act_order_perm(const struct qs_hessian *h, int32_t *perm, double *diag)
{
    for (int64_t i = 0; i < h->k; i++) {
        perm[i] = (int32_t)i;
        diag[i] = h->s[i * h->k + i];
    }
    int32_t *tmp = perm + h->k;
    for (int64_t width = 1; width < h->k; width *= 2) {
        for (int64_t lo = 0; lo < h->k; lo += 2 * width) {
            int64_t mid = lo + width < h->k ? lo + width : h->k;
            int64_t hi = lo + 2 * width < h->k ? lo + 2 * width : h->k;
            int64_t a = lo, b = mid, o = lo;
            while (a < mid && b < hi)
                tmp[o++] = diag[perm[b]] > diag[perm[a]] ? perm[b++] : perm[a++];
            while (a < mid)
                tmp[o++] = perm[a++];
            while (b < hi)
                tmp[o++] = perm[b++];
        }
        memcpy(perm, tmp, (size_t)h->k * sizeof *perm);
    }
}

qs_status qs_gptq_check_common(qs_ctx *ctx, const float *w, int64_t rows, int64_t cols,
                               const qs_hessian *h, double percdamp, int32_t block,
                               const int64_t *reserved, int32_t reserved0, const char *who)
{
    int64_t n;
    if (!(percdamp >= 0.0) || !isfinite(percdamp) || block < 1 || block > 4096 || reserved0)
        return qs_fail(ctx, QS_ERR_INVALID_ARG, "%s: bad parameters (percdamp, block_size or a "
                       "reserved field)", who);
    for (int i = 0; i < 6; i++)
        if (reserved[i])
            return qs_fail(ctx, QS_ERR_INVALID_ARG, "%s: reserved fields must be zero", who);
    if (rows < 0 || cols < 0)
        return qs_fail(ctx, QS_ERR_INVALID_ARG, "%s: negative size", who);
    if (cols != h->k)
        return qs_fail(ctx, QS_ERR_SHAPE, "%s: %lld columns for a Hessian of K = %lld", who,
                       (long long)cols, (long long)h->k);
    if (qs_mul_overflow(rows, cols, &n) || n > INT64_MAX / 8)
        return qs_fail(ctx, QS_ERR_OVERFLOW, "%s: size overflow", who);
    if (n && qs_tensor_nonfinite(ctx, w, QS_DTYPE_F32, n))
        return qs_fail(ctx, QS_ERR_INVALID_ARG, "%s: the weight has a NaN or Inf", who);
    return QS_OK;
}

QS_API qs_status qs_gptq_quantize(qs_ctx *ctx, const qs_gptq_params *gparams,
                                  const qs_quant_params *qparams, const float *w, int64_t rows,
                                  int64_t cols, const qs_hessian *h, qs_qtensor *q, double *loss)
{
    const char *who = "qs_gptq_quantize";
    struct qs_grid g;
    qs_status st;
    float *wp = NULL, *u = NULL, *err = NULL;
    double *rl = NULL, *diag = NULL;
    int32_t *perm = NULL;
    uint8_t *dead = NULL;

    if (!ctx)
        return QS_ERR_INVALID_ARG;
    if (!gparams || !qparams || !w || !h || !q)
        return qs_fail(ctx, QS_ERR_INVALID_ARG, "%s: null pointer", who);
    if ((unsigned)gparams->act_order > 1 || (unsigned)gparams->static_groups > 1 ||
        (unsigned)gparams->scale_search > 1)
        return qs_fail(ctx, QS_ERR_INVALID_ARG, "%s: act_order, static_groups and scale_search "
                       "are 0 or 1", who);
    if ((st = qs_gptq_check_common(ctx, w, rows, cols, h, gparams->percdamp, gparams->block_size,
                                   gparams->reserved, 0, who)) != QS_OK)
        return st;
    int32_t stat = gparams->act_order || gparams->static_groups;
    if ((st = qs_grid_init(ctx, &g, qparams, rows, cols, w, cols, stat, q, who)) != QS_OK)
        return st;
    g.search = gparams->scale_search && g.t->driver == QS_DRIVER_MX && g.dynamic;
    const int64_t k = cols;
    /* the lazy block holds whole scale groups, so a group's values are current when fitted */
    int64_t bk = gparams->block_size;
    if (g.dynamic)
        bk = g.group >= bk ? g.group : bk / g.group * g.group;

    wp = qs_scratch_alloc(ctx, (size_t)(rows * k > 0 ? rows * k : 1) * sizeof(float));
    u = qs_scratch_alloc(ctx, (size_t)k * (size_t)k * sizeof(float));
    err = qs_scratch_alloc(ctx, (size_t)(rows * bk > 0 ? rows * bk : 1) * sizeof(float));
    rl = qs_scratch_alloc(ctx, (size_t)(rows ? rows : 1) * sizeof(double));
    dead = qs_scratch_alloc(ctx, (size_t)k);
    if (gparams->act_order) {
        perm = qs_scratch_alloc(ctx, (size_t)(2 * k) * sizeof(int32_t));
        diag = qs_scratch_alloc(ctx, (size_t)k * sizeof(double));
    }
    if (!wp || !u || !err || !rl || !dead || (gparams->act_order && (!perm || !diag))) {
        st = qs_fail(ctx, QS_ERR_OUT_OF_MEMORY, "%s: out of memory", who);
        goto done;
    }
    if (perm)
        act_order_perm(h, perm, diag);
    if ((st = qs_gptq_hinv(ctx, h, gparams->percdamp, perm, dead, u)) != QS_OK) {
        st = st == QS_ERR_BAD_DATA ? qs_fail(ctx, st, "%s: " QS_GPTQ_HINV_BAD, who)
                                   : qs_fail(ctx, st, "%s: out of memory", who);
        goto done;
    }
    for (int64_t r = 0; r < rows; r++) {
        rl[r] = 0.0;
        for (int64_t t = 0; t < k; t++)
            wp[r * k + t] = dead[t] ? 0.0f : w[r * k + (perm ? perm[t] : t)] + 0.0f; /* -0 -> +0 */
    }
    struct gptq_job j = {&g, wp, u, err, rl, perm, rows, k, bk, 0, 0};
    for (int64_t i1 = 0; i1 < k; i1 += bk) {
        j.i1 = i1;
        j.i2 = i1 + bk < k ? i1 + bk : k;
        qs_parallel_for(ctx, qs_ceil_div(rows, GPTQ_ROW_CHUNK), gptq_block_task, &j);
        qs_gptq_gemm_sub(ctx, rows, k - j.i2, j.i2 - i1, err, bk, u + i1 * k + j.i2, k,
                         wp + j.i2, k);
    }
    /* Every column's scaled error is in the loss: a finite loss means no Inf or NaN was
     * rounded or carried, so the planes hold what the objective measured. */
    double total = qs_calib_loss_sum(rl, rows);
    if (!isfinite(total)) {
        st = qs_fail(ctx, QS_ERR_BAD_DATA, "%s: the loss is not finite (the weight or Hessian "
                     "is out of float range for GPTQ; nothing written)", who);
        goto done;
    }
    qs_grid_store(ctx, &g, qparams, q);
    if (loss)
        *loss = total;
    st = qs_ok(ctx);
done:
    qs_scratch_free(ctx, wp);
    qs_scratch_free(ctx, u);
    qs_scratch_free(ctx, err);
    qs_scratch_free(ctx, rl);
    qs_scratch_free(ctx, dead);
    qs_scratch_free(ctx, perm);
    qs_scratch_free(ctx, diag);
    qs_grid_free(ctx, &g);
    return st;
}
