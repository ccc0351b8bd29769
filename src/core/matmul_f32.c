/* SPDX-License-Identifier: MIT */
/*
 * The f32 paths of qs_matmul over validated inputs:
 * - GEMV (M < QS_MATMUL_GEMM_MIN_M, or K = 0): y[m, n] from the fused dot-product kernels of the
 *   table, tasks of MM_GEMV_ROWS rows of W (every m per task, so W streams once).
 * - GEMM, dense and quantized weights: panels of MM_PANEL rows of W dequantized with the table's
 *   dequantize kernels (in parallel), then cblas_sgemm (QS_HAVE_BLAS) or blocks of MM_GEMM_ROWS
 *   rows of x against the panel with the f32 dot kernel.
 * - GEMM, 2:4 weights: the outer-product form over rows of x^T (no zeros, no gathers).
 * Tasks have fixed bounds that depend only on the shape, so the bits never depend on threads.
 */
#include <limits.h>
#include <string.h>

#ifdef QS_HAVE_BLAS
#include <cblas.h>
#endif

#include "../ref/ref.h"
#include "matmul_internal.h"

#define MM_GEMV_ROWS 64 /* rows of W per GEMV task (the kernels prefetch within a task) */
#define MM_PANEL 512    /* rows of W per dequantized GEMM panel (sgemm wants wide panels) */
#define MM_GEMM_ROWS 32 /* rows of x per task of the plain blocked GEMM */
#define MM_SP_MR 64     /* rows of x per packed panel of the 2:4 GEMM */
#define MM_SP_NT 128    /* rows of W per 2:4 GEMM task */
#define MM_SP_KC 128    /* columns of x per slice of the 2:4 GEMM (a multiple of 16: whole words) */
#define MM_SP_GROUP 4   /* panels of x packed at a time */

static int use_gemm(const struct qs_mm_job *j)
{
    return j->M >= QS_MATMUL_GEMM_MIN_M && j->K > 0;
}

static int sparse(const struct qs_mm_job *j)
{
    return j->kind == QS_WEIGHT_SP24 || j->kind == QS_WEIGHT_SP24_QUANT;
}

/* y = fl(acc + bias[n]) under the NaN rule: a computed NaN is the canonical quiet NaN. */
static float finish(const struct qs_mm_job *j, float acc, int64_t n)
{
    return qs_ref_nan_canon(j->bias ? acc + qs_ld_f32(j->bias + n) : acc);
}

void qs_mm_f32_scratch(const struct qs_mm_job *j, int64_t *per_thread, int64_t *panel, int64_t *xt)
{
    *per_thread = 0;
    *panel = 0;
    *xt = 0;
    if (!use_gemm(j)) {
        if (sparse(j))
            *per_thread = j->wcols; /* gathered x */
        return;
    }
    if (sparse(j)) {
        /* accumulator and decode tile per thread; f32 kept values unless they are f32 already;
         * one packed panel of x */
        *per_thread = MM_SP_NT * MM_SP_MR + QS_TILE;
        if (!(j->kind == QS_WEIGHT_SP24 && j->wdtype == QS_DTYPE_F32))
            *panel = j->N * j->wcols;
        *xt = (j->M < MM_SP_GROUP * MM_SP_MR ? qs_ceil_div(j->M, MM_SP_MR) : MM_SP_GROUP) *
              MM_SP_MR * j->K;
        return;
    }
    if (qs_mm_gemm_tiled(j)) {
        qs_mm_gemm_scratch(j, per_thread, xt);
        return;
    }
    *per_thread = QS_TILE; /* NF4/FP4 first partial block of a row */
    if (!(j->kind == QS_WEIGHT_DENSE && j->wdtype == QS_DTYPE_F32))
        *panel = (j->N < MM_PANEL ? j->N : MM_PANEL) * j->K;
}

/* ---- one row of W ---------------------------------------------------------------------------- */

/* Scale pointers of row n of an INT8 weight of `cols` columns. */
static const float *int8_scale(const struct qs_mm_job *j, int64_t n, int64_t cols,
                               const int8_t **zp)
{
    int64_t u = j->gran == QS_GRAN_TENSOR ? 0 : j->gran == QS_GRAN_ROW ? n : n * (cols / j->group);
    *zp = j->zp ? j->zp + u : NULL;
    return j->fscale + u;
}

/* The fused dot product of x (cols values) with row n of a quantized matrix of `cols` columns. */
static float quant_dot(const struct qs_mm_job *j, const float *x, int64_t n, int64_t cols)
{
    const struct qs_kernels *k = &j->ctx->k;
    const uint8_t *d = j->wdata;
    const int8_t *zp;
    const float *s;
    float rs;

    switch (j->format) {
    case QS_FORMAT_NF4: return k->mm_dot_nf4(x, cols, d, n * cols, j->absmax, j->block);
    case QS_FORMAT_FP4: return k->mm_dot_fp4(x, cols, d, n * cols, j->absmax, j->block);
    case QS_FORMAT_INT8:
        s = int8_scale(j, n, cols, &zp);
        return k->mm_dot_int8(x, cols, (const int8_t *)d + n * cols, s, zp, j->group);
    case QS_FORMAT_LLM_INT8:
        rs = qs_ld_f32(j->fscale + n) * QS_MM_INV127; /* the row's fl(SCB * fl(1/127)) */
        return k->mm_dot_int8(x, cols, (const int8_t *)d + n * cols, &rs, NULL, cols);
    case QS_FORMAT_FP8_E4M3: return k->mm_dot_e4m3(x, cols, d + n * cols, qs_ld_f32(j->fscale));
    case QS_FORMAT_FP8_E5M2: return k->mm_dot_e5m2(x, cols, d + n * cols, qs_ld_f32(j->fscale));
    case QS_FORMAT_MXFP4:
        return k->mm_dot_mxfp4(x, cols, d + n * j->row_bytes, j->bscale + n * j->spr);
    case QS_FORMAT_MXFP8:
        return k->mm_dot_mxfp8(x, cols, d + n * j->row_bytes, j->bscale + n * j->spr);
    default:
        return k->mm_dot_nvfp4(x, cols, d + n * j->row_bytes, j->bscale + n * j->spr, j->s_global);
    }
}

static float plain_dot(const struct qs_mm_job *j, const float *x, int64_t n, int64_t cols)
{
    const struct qs_kernels *k = &j->ctx->k;

    switch (j->wdtype) {
    case QS_DTYPE_F32: return k->mm_dot_f32(x, (const float *)j->wdata + n * cols, cols);
    case QS_DTYPE_F16: return k->mm_dot_f16(x, (const uint16_t *)j->wdata + n * cols, cols);
    default: return k->mm_dot_bf16(x, (const uint16_t *)j->wdata + n * cols, cols);
    }
}

/* The fused 2:4 dot product of x with row n of 2:4 f32/f16/bf16 values (gather + plain_dot). */
static float sp24_dot(const struct qs_mm_job *j, const float *x, int64_t n)
{
    const struct qs_kernels *k = &j->ctx->k;
    const uint16_t *meta = j->meta + n * j->words;

    switch (j->wdtype) {
    case QS_DTYPE_F32:
        return k->mm_dot_sp24_f32(x, meta, j->K, (const float *)j->wdata + n * j->wcols);
    case QS_DTYPE_F16:
        return k->mm_dot_sp24_f16(x, meta, j->K, (const uint16_t *)j->wdata + n * j->wcols);
    default: return k->mm_dot_sp24_bf16(x, meta, j->K, (const uint16_t *)j->wdata + n * j->wcols);
    }
}

/* The dot product of the gathered x (xg, wcols values) with row n of a 2:4 + quantized weight
 * other than NF4, through the format's multi-row GEMV kernel called for that one row: the same
 * SIMD decode, FMA and once-per-block scales as the dense GEMV (within the GEMV bound of the
 * reference). */
static float sp24_quant_gemv(const struct qs_mm_job *j, const float *xg, int64_t n)
{
    const struct qs_kernels *k = &j->ctx->k;
    const uint8_t *d = j->wdata;
    int64_t c = j->wcols;
    const int8_t *zp;
    const float *s;
    float y = 0.0f, rs;

    switch (j->format) {
    case QS_FORMAT_FP4: k->mm_gemv_fp4(xg, c, 1, c, d, n * c, j->absmax, j->block, 1, &y, 1); break;
    case QS_FORMAT_INT8:
        s = int8_scale(j, n, c, &zp);
        k->mm_gemv_int8(xg, c, 1, c, (const int8_t *)d + n * c, s, zp, j->group, 0, 1, &y, 1);
        break;
    case QS_FORMAT_LLM_INT8:
        rs = qs_ld_f32(j->fscale + n) * QS_MM_INV127; /* the row's fl(SCB * fl(1/127)) */
        k->mm_gemv_int8(xg, c, 1, c, (const int8_t *)d + n * c, &rs, NULL, c, 0, 1, &y, 1);
        break;
    case QS_FORMAT_FP8_E4M3:
        k->mm_gemv_e4m3(xg, c, 1, c, d + n * c, qs_ld_f32(j->fscale), 1, &y, 1);
        break;
    case QS_FORMAT_FP8_E5M2:
        k->mm_gemv_e5m2(xg, c, 1, c, d + n * c, qs_ld_f32(j->fscale), 1, &y, 1);
        break;
    case QS_FORMAT_MXFP4:
        k->mm_gemv_mxfp4(xg, c, 1, c, d + n * j->row_bytes, j->row_bytes, j->bscale + n * j->spr,
                         j->spr, 1, &y, 1);
        break;
    case QS_FORMAT_MXFP8:
        k->mm_gemv_mxfp8(xg, c, 1, c, d + n * j->row_bytes, j->row_bytes, j->bscale + n * j->spr,
                         j->spr, 1, &y, 1);
        break;
    case QS_FORMAT_NVFP4:
        k->mm_gemv_nvfp4(xg, c, 1, c, d + n * j->row_bytes, j->row_bytes, j->bscale + n * j->spr,
                         j->spr, j->s_global, 1, &y, 1);
        break;
    default: return quant_dot(j, xg, n, c);
    }
    return y;
}

/* x . W[n, :] by the GEMV definition; xg holds wcols floats for 2:4 weights. */
static float row_dot(const struct qs_mm_job *j, const float *x, int64_t n, float *xg)
{
    switch (j->kind) {
    case QS_WEIGHT_DENSE: return plain_dot(j, x, n, j->K);
    case QS_WEIGHT_QUANT: return quant_dot(j, x, n, j->K);
    case QS_WEIGHT_SP24: return sp24_dot(j, x, n);
    default: /* NF4 runs through sp24_nf4_rows */
        j->ctx->k.mm_gather_sp24(x, j->meta + n * j->words, j->K, xg);
        return sp24_quant_gemv(j, xg, n);
    }
}

/* Rows [n0, n0 + nb) of a dense f16/bf16 or quantized W against every row of x through the
 * multi-row GEMV kernels (each W row streams once for all M rows of x), raw sums into y; returns
 * 0 for the weights they do not cover (plain f32, 2:4). */
static int gemv_rows(const struct qs_mm_job *j, int64_t n0, int64_t nb)
{
    const struct qs_kernels *k = &j->ctx->k;
    const uint8_t *d = j->wdata;
    const float *x = j->x;
    int64_t K = j->K, M = j->M, ldy = j->N;
    float *y = j->y + n0;

    if (j->kind == QS_WEIGHT_DENSE) {
        if (j->wdtype == QS_DTYPE_F32)
            return 0;
        (j->wdtype == QS_DTYPE_F16 ? k->mm_gemv_f16 : k->mm_gemv_bf16)(
            x, K, M, K, (const uint16_t *)j->wdata + n0 * K, nb, y, ldy);
        return 1;
    }
    if (j->kind != QS_WEIGHT_QUANT)
        return 0;
    switch (j->format) {
    case QS_FORMAT_NF4:
        k->mm_gemv_nf4(x, K, M, K, d, n0 * K, j->absmax, j->block, nb, y, ldy);
        return 1;
    case QS_FORMAT_FP4:
        k->mm_gemv_fp4(x, K, M, K, d, n0 * K, j->absmax, j->block, nb, y, ldy);
        return 1;
    case QS_FORMAT_INT8: {
        const int8_t *zp;
        const float *s = int8_scale(j, n0, K, &zp);
        int64_t ss = j->gran == QS_GRAN_TENSOR ? 0 : j->gran == QS_GRAN_ROW ? 1 : K / j->group;
        k->mm_gemv_int8(x, K, M, K, (const int8_t *)d + n0 * K, s, zp, j->group, ss, nb, y, ldy);
        return 1;
    }
    case QS_FORMAT_LLM_INT8: {
        float rs[MM_GEMV_ROWS]; /* each row's fl(SCB * fl(1/127)), as quant_dot forms it */
        for (int64_t r = 0; r < nb; r++)
            rs[r] = qs_ld_f32(j->fscale + n0 + r) * QS_MM_INV127;
        k->mm_gemv_int8(x, K, M, K, (const int8_t *)d + n0 * K, rs, NULL, K, 1, nb, y, ldy);
        return 1;
    }
    case QS_FORMAT_FP8_E4M3:
        k->mm_gemv_e4m3(x, K, M, K, d + n0 * K, qs_ld_f32(j->fscale), nb, y, ldy);
        return 1;
    case QS_FORMAT_FP8_E5M2:
        k->mm_gemv_e5m2(x, K, M, K, d + n0 * K, qs_ld_f32(j->fscale), nb, y, ldy);
        return 1;
    case QS_FORMAT_MXFP4:
        k->mm_gemv_mxfp4(x, K, M, K, d + n0 * j->row_bytes, j->row_bytes, j->bscale + n0 * j->spr,
                         j->spr, nb, y, ldy);
        return 1;
    case QS_FORMAT_MXFP8:
        k->mm_gemv_mxfp8(x, K, M, K, d + n0 * j->row_bytes, j->row_bytes, j->bscale + n0 * j->spr,
                         j->spr, nb, y, ldy);
        return 1;
    default:
        k->mm_gemv_nvfp4(x, K, M, K, d + n0 * j->row_bytes, j->row_bytes, j->bscale + n0 * j->spr,
                         j->spr, j->s_global, nb, y, ldy);
        return 1;
    }
}

static int is_sp24_nf4(const struct qs_mm_job *j)
{
    return j->kind == QS_WEIGHT_SP24_QUANT && j->format == QS_FORMAT_NF4;
}

/* Rows [n0, n0 + nb) of a 2:4 + NF4 W against each row of x through the multi-row kernel, raw
 * sums into y; nonzero if the kernel found a bad meta nibble in them (*meta_bad set). The
 * kernel checks the rows' meta itself, as it reads them (again for each further row of x, from
 * cache). */
static int sp24_nf4_rows(const struct qs_mm_job *j, int64_t n0, int64_t nb)
{
    for (int64_t m = 0; m < j->M; m++)
        if (j->ctx->k.mm_gemv_sp24_nf4(j->x + m * j->K, j->K, j->meta + n0 * j->words, j->words,
                                       j->wdata, n0 * j->wcols, j->absmax, j->block, nb,
                                       j->y + m * j->N + n0)) {
            if (j->meta_bad)
                __atomic_store_n(j->meta_bad, 1, __ATOMIC_RELAXED);
            return 1;
        }
    return 0;
}

static void gemv_task(const struct qs_mm_job *j, int64_t t, float *scratch)
{
    int64_t n0 = t * MM_GEMV_ROWS, n1 = n0 + MM_GEMV_ROWS < j->N ? n0 + MM_GEMV_ROWS : j->N;
    int sp_nf4 = is_sp24_nf4(j);

    if (j->meta_bad && !sp_nf4 &&
        j->ctx->k.mm_sp24_meta_bad(j->meta + n0 * j->words, (n1 - n0) * j->words)) {
        __atomic_store_n(j->meta_bad, 1, __ATOMIC_RELAXED);
        return;
    }
    if (sp_nf4 && sp24_nf4_rows(j, n0, n1 - n0))
        return;
    if (sp_nf4 || gemv_rows(j, n0, n1 - n0)) {
        for (int64_t m = 0; m < j->M; m++)
            for (int64_t n = n0; n < n1; n++)
                qs_st_f32(j->y + m * j->N + n, finish(j, qs_ld_f32(j->y + m * j->N + n), n));
        return;
    }
    for (int64_t m = 0; m < j->M; m++)
        for (int64_t n = n0; n < n1; n++) {
            float v = row_dot(j, j->x + m * j->K, n, scratch);
            qs_st_f32(j->y + m * j->N + n, finish(j, v, n));
        }
}

/* ---- dequantized rows -------------------------------------------------------------------------
 */

/* NF4/FP4 elements [f, f + len) of the flattened tensor into out: a first partial block is
 * decoded whole into tmp (kernels start at a block), the rest straight into out. */
void qs_mm_bnb4_span(const struct qs_mm_job *j, int64_t f, int64_t len, float *out, float *tmp)
{
    qs_nf4_dequant_fn *dec =
        j->format == QS_FORMAT_NF4 ? j->ctx->k.nf4_dequant : j->ctx->k.fp4_dequant;
    const uint8_t *d = j->wdata;
    int64_t a = f - f % j->block;

    if (a < f) {
        int64_t end = a + j->block < f + len ? a + j->block : f + len;
        dec(d + a / 2, j->absmax + a / j->block, end - a, j->block, tmp);
        memcpy(out, tmp + (f - a), (size_t)(end - f) * sizeof(float));
        out += end - f;
        len -= end - f;
        f = end;
    }
    if (len > 0)
        dec(d + f / 2, j->absmax + f / j->block, len, j->block, out);
}

void qs_mm_row_dequant(const struct qs_mm_job *j, int64_t n, float *out, float *tmp)
{
    const struct qs_kernels *k = &j->ctx->k;
    int64_t cols = j->wcols;
    const uint8_t *d = j->wdata;
    const int8_t *zp;
    const float *s;

    if (j->kind == QS_WEIGHT_DENSE || j->kind == QS_WEIGHT_SP24) {
        if (j->wdtype == QS_DTYPE_F32)
            memcpy(out, (const float *)j->wdata + n * cols, (size_t)cols * sizeof(float));
        else if (j->wdtype == QS_DTYPE_F16)
            k->cvt_f16_f32((const uint16_t *)j->wdata + n * cols, cols, out);
        else
            k->cvt_bf16_f32((const uint16_t *)j->wdata + n * cols, cols, out);
        return;
    }
    switch (j->format) {
    case QS_FORMAT_NF4:
    case QS_FORMAT_FP4: qs_mm_bnb4_span(j, n * cols, cols, out, tmp); break;
    case QS_FORMAT_INT8:
        s = int8_scale(j, n, cols, &zp);
        for (int64_t g = 0; g * j->group < cols; g++) {
            int64_t c0 = g * j->group, len = cols - c0 < j->group ? cols - c0 : j->group;
            int64_t u = j->gran == QS_GRAN_GROUP ? g : 0;
            k->int8_dequant((const int8_t *)d + n * cols + c0, len, qs_ld_f32(s + u),
                            zp ? zp[u] : 0, out + c0);
        }
        break;
    case QS_FORMAT_LLM_INT8:
        k->int8_dequant_rowstat((const int8_t *)d + n * cols, cols, qs_ld_f32(j->fscale + n), out);
        break;
    case QS_FORMAT_FP8_E4M3: k->e4m3_dequant(d + n * cols, cols, qs_ld_f32(j->fscale), out); break;
    case QS_FORMAT_FP8_E5M2: k->e5m2_dequant(d + n * cols, cols, qs_ld_f32(j->fscale), out); break;
    case QS_FORMAT_MXFP4:
        k->mxfp4_dequant(d + n * j->row_bytes, j->bscale + n * j->spr, cols, out);
        break;
    case QS_FORMAT_MXFP8:
        k->mxfp8_dequant(d + n * j->row_bytes, j->bscale + n * j->spr, cols, out);
        break;
    default:
        k->nvfp4_dequant(d + n * j->row_bytes, j->bscale + n * j->spr, cols, j->s_global, out);
        break;
    }
}

/* ---- GEMM through dequantized panels -----------------------------------------------------------
 */

static void panel_task(const struct qs_mm_job *j, int64_t r, float *scratch)
{
    qs_mm_row_dequant(j, j->n0 + r, j->panel + r * j->K, scratch);
}

/* Rows [m0, m0 + MM_GEMM_ROWS) of x against every row of the panel (no BLAS). */
static void block_task(const struct qs_mm_job *j, int64_t t, float *scratch)
{
    const float *w = j->panel ? j->panel : (const float *)j->wdata + j->n0 * j->K;
    int64_t m0 = t * MM_GEMM_ROWS, m1 = m0 + MM_GEMM_ROWS < j->M ? m0 + MM_GEMM_ROWS : j->M;

    (void)scratch;
    for (int64_t m = m0; m < m1; m++)
        for (int64_t r = 0; r < j->nb; r++)
            qs_st_f32(j->y + m * j->N + j->n0 + r,
                      j->ctx->k.mm_dot_f32(j->x + m * j->K, w + r * j->K, j->K));
}

/* Bias and the NaN rule over row m of y, after sgemm or the blocked loop. */
static void finish_task(const struct qs_mm_job *j, int64_t m, float *scratch)
{
    (void)scratch;
    for (int64_t n = 0; n < j->N; n++)
        qs_st_f32(j->y + m * j->N + n, finish(j, qs_ld_f32(j->y + m * j->N + n), n));
}

static void gemm_panels(struct qs_mm_job *j)
{
    int blas = 0;

#ifdef QS_HAVE_BLAS
    blas = j->M <= INT_MAX && j->K <= INT_MAX && j->N <= INT_MAX;
#endif
    for (j->n0 = 0; j->n0 < j->N; j->n0 += MM_PANEL) {
        j->nb = j->N - j->n0 < MM_PANEL ? j->N - j->n0 : MM_PANEL;
        if (j->panel)
            qs_mm_parallel(j, j->nb, panel_task);
#ifdef QS_HAVE_BLAS
        if (blas) {
            const float *w = j->panel ? j->panel : (const float *)j->wdata + j->n0 * j->K;
            cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasTrans, (int)j->M, (int)j->nb, (int)j->K,
                        1.0f, j->x, (int)j->K, w, (int)j->K, 0.0f, j->y + j->n0, (int)j->N);
            continue;
        }
#endif
        (void)blas;
        qs_mm_parallel(j, qs_ceil_div(j->M, MM_GEMM_ROWS), block_task);
    }
    qs_mm_parallel(j, j->M, finish_task);
}

/* ---- 2:4 GEMM: outer product over rows of x^T -------------------------------------------------
 *
 * The kept values are f32 in place, or dequantized once into j->panel (N x wcols). x is taken
 * MM_SP_GROUP panels of MM_SP_MR rows at a time (j->n0 is the first row), each packed transposed
 * into j->xt (K rows of MM_SP_MR floats, zero past M) by the table's mm_transpose_f32, which also
 * writes each task's accumulators (y^T) back into y: one buffer of a few MiB, reused group
 * after group, so it stays in the last-level cache and costs few fresh pages. A task of MM_SP_NT
 * rows of W runs over every panel of the group (its kept values stay in L2); per panel it walks the
 * K slices of MM_SP_KC columns in ascending order, every row of the task running over a slice (a
 * small contiguous block, in L1) before the next; the kernel (mm_sp24_axpy) accumulates in
 * ascending kept order whatever the slicing, so the bits are those of one call over the whole row,
 * for any thread count. */

static void sp24_dequant_task(const struct qs_mm_job *j, int64_t n, float *scratch)
{
    qs_mm_row_dequant(j, n, j->panel + n * j->wcols, scratch + MM_SP_NT * MM_SP_MR);
}

/* rows of x in the group starting at j->n0 */
static int64_t group_rows(const struct qs_mm_job *j)
{
    return j->M - j->n0 < MM_SP_GROUP * MM_SP_MR ? j->M - j->n0 : MM_SP_GROUP * MM_SP_MR;
}

/* Panel t of the group: x^T by the transposed copy, zero past M. */
static void pack_task(const struct qs_mm_job *j, int64_t t, float *scratch)
{
    float *xt = (float *)j->xt + t * MM_SP_MR * j->K;
    int64_t m0 = j->n0 + t * MM_SP_MR;
    int64_t mb = j->M - m0 < MM_SP_MR ? j->M - m0 : MM_SP_MR;

    (void)scratch;
    j->ctx->k.mm_transpose_f32(j->x + m0 * j->K, j->K, mb, j->K, xt, MM_SP_MR);
    if (mb < MM_SP_MR)
        for (int64_t k = 0; k < j->K; k++)
            memset(xt + k * MM_SP_MR + mb, 0, (size_t)(MM_SP_MR - mb) * sizeof(float));
}

/* Rows [n0, n0 + nr) of W against one packed panel of x (rows m0 ...). */
static void sp24_panel(const struct qs_mm_job *j, const float *xt, int64_t m0, int64_t n0,
                       int64_t nr, float *acc)
{
    int64_t mb = j->M - m0 < MM_SP_MR ? j->M - m0 : MM_SP_MR;
    const float *v = (j->panel ? j->panel : (const float *)j->wdata) + n0 * j->wcols;

    memset(acc, 0, (size_t)(nr * MM_SP_MR) * sizeof(float));
    for (int64_t k0 = 0; k0 < j->K; k0 += MM_SP_KC) {
        int64_t kc = j->K - k0 < MM_SP_KC ? j->K - k0 : MM_SP_KC;
        int64_t knext = j->K - k0 - kc < MM_SP_KC ? j->K - k0 - kc : MM_SP_KC;
        int64_t lines = knext * MM_SP_MR / 16, per = qs_ceil_div(lines, nr);
        const float *next = xt + (k0 + kc) * MM_SP_MR;

        for (int64_t r = 0; r < nr; r++) {
            const float *vr = v + r * j->wcols;
            /* A slice is read in meta order, which no hardware prefetcher follows: each row
             * fetches its share of the next slice, and its own next kept values. */
            for (int64_t l = r * per; l < (r + 1) * per && l < lines; l++)
                __builtin_prefetch(next + 16 * l);
            for (int64_t q = 0; q < knext / 2; q += 16)
                __builtin_prefetch(vr + (k0 + kc) / 2 + q);
            j->ctx->k.mm_sp24_axpy(vr + k0 / 2, j->meta + (n0 + r) * j->words + k0 / 16, kc,
                                   xt + k0 * MM_SP_MR, MM_SP_MR, mb, acc + r * MM_SP_MR);
        }
    }
    /* acc holds y^T: bias and the NaN rule in place, then one transposed copy into y */
    for (int64_t r = 0; r < nr; r++) {
        float *a = acc + r * MM_SP_MR;
        if (j->bias) {
            float b = qs_ld_f32(j->bias + n0 + r);
            for (int64_t i = 0; i < mb; i++)
                a[i] = qs_ref_nan_canon(a[i] + b);
        } else {
            for (int64_t i = 0; i < mb; i++)
                a[i] = qs_ref_nan_canon(a[i]);
        }
    }
    j->ctx->k.mm_transpose_f32(acc, MM_SP_MR, nr, mb, j->y + m0 * j->N + n0, j->N);
}

static void sp24_task(const struct qs_mm_job *j, int64_t t, float *scratch)
{
    int64_t n0 = t * MM_SP_NT, nr = j->N - n0 < MM_SP_NT ? j->N - n0 : MM_SP_NT;

    for (int64_t p = 0; p * MM_SP_MR < group_rows(j); p++)
        sp24_panel(j, j->xt + p * MM_SP_MR * j->K, j->n0 + p * MM_SP_MR, n0, nr, scratch);
}

static void gemm_sp24(struct qs_mm_job *j)
{
    if (j->panel)
        qs_mm_parallel(j, j->N, sp24_dequant_task);
    for (j->n0 = 0; j->n0 < j->M; j->n0 += MM_SP_GROUP * MM_SP_MR) {
        qs_mm_parallel(j, qs_ceil_div(group_rows(j), MM_SP_MR), pack_task);
        qs_mm_parallel(j, qs_ceil_div(j->N, MM_SP_NT), sp24_task);
    }
}

void qs_mm_run_f32(struct qs_mm_job *j)
{
    if (!use_gemm(j)) {
        qs_mm_parallel_dynamic(j, qs_ceil_div(j->N, MM_GEMV_ROWS), gemv_task);
    } else if (sparse(j)) {
        gemm_sp24(j);
    } else if (qs_mm_gemm_tiled(j)) {
        qs_mm_gemm_run(j);
    } else {
        gemm_panels(j);
    }
}
