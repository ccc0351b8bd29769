/* SPDX-License-Identifier: MIT */
/*
 * The matmul reference (include/qsparse/matmul.h): the dot product of x with one row of W, with
 * dequantization fused, in the defined summation order:
 *
 * - The row is cut into segments: the elements that share one scale (an NF4/FP4 block of the
 *   flattened tensor clipped to the row, an INT8 group or row or tensor, an MX block of 32, an
 *   NVFP4 block of 16; the whole row for FP8 and for plain weights).
 * - Inside a segment, the product x_k * v_k of the element's unscaled value v_k is added to
 *   partial sum p[(k - segment start) mod 16] (ascending k, each p starting at +0); the segment
 *   sum is the fixed tree p[i] += p[i + 8] (i < 8), p[i] += p[i + 4] (i < 4), p[i] += p[i + 2],
 *   p[0] += p[1]. A SIMD kernel with 16 lanes (two AVX2 registers, four NEON registers) keeps
 *   the same order.
 * - acc = acc + fl(segment sum * segment scale), ascending segments, acc starting at +0.
 *   Scale-free kinds (plain f32/f16/bf16) return the segment sum of their single segment.
 *
 * The unscaled element values come from the format's own tables (the NF4/FP4 codebooks its
 * dequantize kernels multiply by absmax) or its dequantize kernel called with a unit scale (E8M0
 * 127, E4M3 scale 0x38, FP8 scale 1, INT8 scale 1 with the zero point), which is exact, so no
 * codebook or element rule is repeated here.
 *
 * Every float a kernel computes is returned or stored under the NaN rule of ref.h (a NaN result
 * is the canonical quiet NaN); caller arrays are read through qs_ld_f32 / qs_ld_u16 (no alignment).
 *
 * The int8 path (w8a8): per segment an exact integer sum sum q_x * (q_w - zp) in int32 (the
 * driver bounds K so it cannot overflow), then t = t + fl(a_s * scale_s) in ascending segments.
 */
#include "../core/kernels.h"
#include "mm_lanes_ref.h"
#include "ref.h"
#include "sp24_ref.h"

/* Elements decoded per call of a dequantize kernel: a multiple of MM_LANES and of 2 (nibbles). */
#define PIECE 64

static const uint8_t e8m0_one[2] = {127, 127}; /* 2^0; a piece spans at most 2 MX blocks */
static const uint8_t e4m3_one[4] = {0x38, 0x38, 0x38, 0x38}; /* 1.0; up to 4 NVFP4 blocks */

/* ---- plain weights ----------------------------------------------------------------------------
 */

float qs_mm_dot_f32__ref(const float *x, const float *w, int64_t n)
{
    struct mm_lanes l;
    float v[PIECE];

    mm_lanes_reset(&l);
    for (int64_t i = 0; i < n; i += PIECE) {
        int64_t len = n - i < PIECE ? n - i : PIECE;
        for (int64_t k = 0; k < len; k++)
            v[k] = qs_ld_f32(w + i + k); /* the caller's weight may sit at any byte */
        mm_lanes_feed(&l, x + i, v, len);
    }
    return qs_ref_nan_canon(mm_lanes_sum(&l));
}

static float dot_u16(const float *x, const uint16_t *w, int64_t n,
                     void (*cvt)(const uint16_t *, int64_t, float *))
{
    struct mm_lanes l;
    float v[PIECE];

    mm_lanes_reset(&l);
    for (int64_t i = 0; i < n; i += PIECE) {
        int64_t len = n - i < PIECE ? n - i : PIECE;
        cvt(w + i, len, v);
        mm_lanes_feed(&l, x + i, v, len);
    }
    return qs_ref_nan_canon(mm_lanes_sum(&l));
}

float qs_mm_dot_f16__ref(const float *x, const uint16_t *w, int64_t n)
{
    return dot_u16(x, w, n, qs_cvt_f16_f32__ref);
}

float qs_mm_dot_bf16__ref(const float *x, const uint16_t *w, int64_t n)
{
    return dot_u16(x, w, n, qs_cvt_bf16_f32__ref);
}

/* ---- NF4 / FP4: blocks over the flattened tensor ----------------------------------------------
 */

/* Row elements [0, n) are flat elements start ... start + n - 1 (element j in byte j / 2, high
 * nibble for even j); block b of the tensor has scale absmax[b]. The unscaled value of a code is
 * the format's codebook entry, the table its dequantize kernel multiplies by absmax. */
static float bnb4_dot(const float *book, const float *x, int64_t n, const uint8_t *data,
                      int64_t start, const float *absmax, int32_t block)
{
    float acc = 0.0f, v[PIECE];
    int64_t i = 0;

    while (i < n) {
        int64_t b = (start + i) / block, end = (b + 1) * block - start;
        struct mm_lanes l;

        if (end > n)
            end = n;
        mm_lanes_reset(&l);
        while (i < end) {
            int64_t len = end - i < PIECE ? end - i : PIECE;
            for (int64_t k = 0; k < len; k++) {
                int64_t f = start + i + k;
                v[k] = book[(f & 1) ? data[f / 2] & 0xF : data[f / 2] >> 4];
            }
            mm_lanes_feed(&l, x + i, v, len);
            i += len;
        }
        acc = acc + mm_lanes_sum(&l) * qs_ld_f32(absmax + b);
    }
    return qs_ref_nan_canon(acc);
}

float qs_mm_dot_nf4__ref(const float *x, int64_t n, const uint8_t *data, int64_t start,
                         const float *absmax, int32_t block)
{
    return bnb4_dot(qs_nf4_codebook, x, n, data, start, absmax, block);
}

float qs_mm_dot_fp4__ref(const float *x, int64_t n, const uint8_t *data, int64_t start,
                         const float *absmax, int32_t block)
{
    return bnb4_dot(qs_fp4_codebook, x, n, data, start, absmax, block);
}

/* ---- INT8 (f32 activations) -------------------------------------------------------------------
 */

/* Each unit scale applied as fl(scale * mul) (the GEMV's view: fl(1/127) for LLM.int8, whose
 * plane stores the row absmax; 1, exact, for mm_dot_int8). */
static float int8_dot(const float *x, int64_t n, const int8_t *q, const float *scale,
                      const int8_t *zp, int64_t group, float mul)
{
    float acc = 0.0f, v[PIECE];

    for (int64_t s = 0; s * group < n; s++) {
        int64_t i0 = s * group, end = i0 + group < n ? i0 + group : n;
        struct mm_lanes l;

        mm_lanes_reset(&l);
        for (int64_t i = i0; i < end; i += PIECE) {
            int64_t len = end - i < PIECE ? end - i : PIECE;
            qs_int8_dequant__ref(q + i, len, 1.0f, zp ? zp[s] : 0, v); /* q - zp, exact */
            mm_lanes_feed(&l, x + i, v, len);
        }
        acc = acc + mm_lanes_sum(&l) * (qs_ld_f32(scale + s) * mul);
    }
    return qs_ref_nan_canon(acc);
}

float qs_mm_dot_int8__ref(const float *x, int64_t n, const int8_t *q, const float *scale,
                          const int8_t *zp, int64_t group)
{
    return int8_dot(x, n, q, scale, zp, group, 1.0f);
}

/* ---- FP8: one per-tensor scale ----------------------------------------------------------------
 */

static float fp8_dot(qs_e4m3_dequant_fn *dec, const float *x, int64_t n, const uint8_t *q,
                     float scale)
{
    float acc = 0.0f, v[PIECE];
    struct mm_lanes l;

    mm_lanes_reset(&l);
    for (int64_t i = 0; i < n; i += PIECE) {
        int64_t len = n - i < PIECE ? n - i : PIECE;
        dec(q + i, len, 1.0f, v);
        mm_lanes_feed(&l, x + i, v, len);
    }
    return qs_ref_nan_canon(acc + mm_lanes_sum(&l) * scale);
}

float qs_mm_dot_e4m3__ref(const float *x, int64_t n, const uint8_t *q, float scale)
{
    return fp8_dot(qs_e4m3_dequant__ref, x, n, q, scale);
}

float qs_mm_dot_e5m2__ref(const float *x, int64_t n, const uint8_t *q, float scale)
{
    return fp8_dot(qs_e5m2_dequant__ref, x, n, q, scale);
}

/* ---- MX and NVFP4: blocks along the row -------------------------------------------------------
 */

float qs_mm_dot_mxfp4__ref(const float *x, int64_t n, const uint8_t *data, const uint8_t *scales)
{
    float acc = 0.0f, v[32];

    for (int64_t i = 0; i < n; i += 32) {
        int64_t len = n - i < 32 ? n - i : 32;
        struct mm_lanes l;
        qs_mxfp4_dequant__ref(data + i / 2, e8m0_one, len, v);
        mm_lanes_reset(&l);
        mm_lanes_feed(&l, x + i, v, len);
        acc = acc + mm_lanes_sum(&l) * qs_ref_e8m0_decode(scales[i / 32]);
    }
    return qs_ref_nan_canon(acc);
}

float qs_mm_dot_mxfp8__ref(const float *x, int64_t n, const uint8_t *data, const uint8_t *scales)
{
    float acc = 0.0f, v[32];

    for (int64_t i = 0; i < n; i += 32) {
        int64_t len = n - i < 32 ? n - i : 32;
        struct mm_lanes l;
        qs_mxfp8_dequant__ref(data + i, e8m0_one, len, v);
        mm_lanes_reset(&l);
        mm_lanes_feed(&l, x + i, v, len);
        acc = acc + mm_lanes_sum(&l) * qs_ref_e8m0_decode(scales[i / 32]);
    }
    return qs_ref_nan_canon(acc);
}

float qs_mm_dot_nvfp4__ref(const float *x, int64_t n, const uint8_t *data, const uint8_t *scales,
                           float s_global)
{
    float acc = 0.0f, v[16];

    for (int64_t i = 0; i < n; i += 16) {
        int64_t len = n - i < 16 ? n - i : 16;
        struct mm_lanes l;
        /* the block's den as the dequantize rule forms it: fl(value(S & 0x7F) * s_global) */
        float den = qs_ref_e4m3_decode(scales[i / 16] & 0x7F) * s_global;
        qs_nvfp4_dequant__ref(data + i / 2, e4m3_one, len, 1.0f, v);
        mm_lanes_reset(&l);
        mm_lanes_feed(&l, x + i, v, len);
        acc = acc + mm_lanes_sum(&l) * den;
    }
    return qs_ref_nan_canon(acc);
}

/* ---- int8 activations x INT8 weights ----------------------------------------------------------
 */

float qs_mm_dot_w8a8__ref(const int8_t *xq, const int8_t *wq, int64_t n, const float *scale,
                          const int8_t *zp, int64_t group)
{
    float t = 0.0f;

    for (int64_t s = 0; s * group < n; s++) {
        int64_t i0 = s * group, end = i0 + group < n ? i0 + group : n;
        int32_t z = zp ? zp[s] : 0, a = 0;
        for (int64_t i = i0; i < end; i++)
            a += (int32_t)xq[i] * ((int32_t)wq[i] - z);
        t = t + (float)a * qs_ld_f32(scale + s);
    }
    return qs_ref_nan_canon(t);
}

/* ---- 2:4 --------------------------------------------------------------------------------------
 */

void qs_mm_gather_sp24__ref(const float *x, const uint16_t *meta, int64_t n, float *xg)
{
    for (int64_t g = 0; g < n / 4; g++) {
        unsigned nib = (qs_ld_u16(meta + g / 4) >> (4 * (g % 4))) & 15u;
        qs_st_f32(xg + 2 * g, qs_ld_f32(x + 4 * g + (nib & 3u))); /* moved: NaN bits kept */
        qs_st_f32(xg + 2 * g + 1, qs_ld_f32(x + 4 * g + (nib >> 2)));
    }
}

void qs_mm_sp24_axpy__ref(const float *values, const uint16_t *meta, int64_t n, const float *xt,
                          int64_t ldxt, int64_t m, float *acc)
{
    for (int64_t g = 0; g < n / 4; g++) {
        unsigned nib = (qs_ld_u16(meta + g / 4) >> (4 * (g % 4))) & 15u;
        for (int t = 0; t < 2; t++) {
            float v = qs_ld_f32(values + 2 * g + t);
            const float *row = xt + (4 * g + (t ? nib >> 2 : nib & 3u)) * ldxt;
            for (int64_t i = 0; i < m; i++)
                qs_st_f32(acc + i, qs_ld_f32(acc + i) + v * qs_ld_f32(row + i));
        }
    }
    for (int64_t i = 0; i < m; i++)
        qs_st_f32(acc + i, qs_ref_nan_canon(qs_ld_f32(acc + i)));
}

/* ---- multi-row GEMV: the dot products above, one per (x row, W row) ---------------------------
 * Rows r0 ... r0 + rows - 1 of the view (src/core/kernels.h): row layouts at data + r *
 * row_bytes with their scales at scale + r * sstride, NF4/FP4 from flat element r * k. */

/* Row r of a row layout, and of its scales (sstride units of `unit` bytes). */
static const void *row_of(const qs_mm_weight *w, int64_t r)
{
    return (const uint8_t *)w->data + r * w->row_bytes;
}

static const void *scales_of(const qs_mm_weight *w, int64_t r, int64_t unit)
{
    return (const uint8_t *)w->scale + r * w->sstride * unit;
}

void qs_mm_gemv_f32__ref(const qs_mm_weight *w, int64_t r0, int64_t rows, const float *x,
                         int64_t ldx, int64_t m, float *y, int64_t ldy)
{
    for (int64_t i = 0; i < m; i++)
        for (int64_t r = 0; r < rows; r++)
            qs_st_f32(y + i * ldy + r,
                      qs_mm_dot_f32__ref(x + i * ldx, (const float *)row_of(w, r0 + r), w->k));
}

void qs_mm_gemv_f16__ref(const qs_mm_weight *w, int64_t r0, int64_t rows, const float *x,
                         int64_t ldx, int64_t m, float *y, int64_t ldy)
{
    for (int64_t i = 0; i < m; i++)
        for (int64_t r = 0; r < rows; r++)
            qs_st_f32(y + i * ldy + r,
                      qs_mm_dot_f16__ref(x + i * ldx, (const uint16_t *)row_of(w, r0 + r), w->k));
}

void qs_mm_gemv_bf16__ref(const qs_mm_weight *w, int64_t r0, int64_t rows, const float *x,
                          int64_t ldx, int64_t m, float *y, int64_t ldy)
{
    for (int64_t i = 0; i < m; i++)
        for (int64_t r = 0; r < rows; r++)
            qs_st_f32(y + i * ldy + r,
                      qs_mm_dot_bf16__ref(x + i * ldx, (const uint16_t *)row_of(w, r0 + r), w->k));
}

static void gemv_bnb4(const float *book, const qs_mm_weight *w, int64_t r0, int64_t rows,
                      const float *x, int64_t ldx, int64_t m, float *y, int64_t ldy)
{
    for (int64_t i = 0; i < m; i++)
        for (int64_t r = 0; r < rows; r++)
            qs_st_f32(y + i * ldy + r,
                      bnb4_dot(book, x + i * ldx, w->k, (const uint8_t *)w->data, (r0 + r) * w->k,
                               (const float *)w->scale, (int32_t)w->group));
}

void qs_mm_gemv_nf4__ref(const qs_mm_weight *w, int64_t r0, int64_t rows, const float *x,
                         int64_t ldx, int64_t m, float *y, int64_t ldy)
{
    gemv_bnb4(qs_nf4_codebook, w, r0, rows, x, ldx, m, y, ldy);
}

void qs_mm_gemv_fp4__ref(const qs_mm_weight *w, int64_t r0, int64_t rows, const float *x,
                         int64_t ldx, int64_t m, float *y, int64_t ldy)
{
    gemv_bnb4(qs_fp4_codebook, w, r0, rows, x, ldx, m, y, ldy);
}

void qs_mm_gemv_int8__ref(const qs_mm_weight *w, int64_t r0, int64_t rows, const float *x,
                          int64_t ldx, int64_t m, float *y, int64_t ldy)
{
    for (int64_t i = 0; i < m; i++)
        for (int64_t r = 0; r < rows; r++)
            qs_st_f32(y + i * ldy + r,
                      int8_dot(x + i * ldx, w->k, (const int8_t *)row_of(w, r0 + r),
                               (const float *)scales_of(w, r0 + r, 4),
                               w->zp ? w->zp + (r0 + r) * w->sstride : NULL, w->group,
                               w->scale_mul));
}

void qs_mm_gemv_e4m3__ref(const qs_mm_weight *w, int64_t r0, int64_t rows, const float *x,
                          int64_t ldx, int64_t m, float *y, int64_t ldy)
{
    const float scale = qs_ld_f32((const float *)w->scale);

    for (int64_t i = 0; i < m; i++)
        for (int64_t r = 0; r < rows; r++)
            qs_st_f32(y + i * ldy + r,
                      qs_mm_dot_e4m3__ref(x + i * ldx, w->k, row_of(w, r0 + r), scale));
}

void qs_mm_gemv_e5m2__ref(const qs_mm_weight *w, int64_t r0, int64_t rows, const float *x,
                          int64_t ldx, int64_t m, float *y, int64_t ldy)
{
    const float scale = qs_ld_f32((const float *)w->scale);

    for (int64_t i = 0; i < m; i++)
        for (int64_t r = 0; r < rows; r++)
            qs_st_f32(y + i * ldy + r,
                      qs_mm_dot_e5m2__ref(x + i * ldx, w->k, row_of(w, r0 + r), scale));
}

void qs_mm_gemv_mxfp4__ref(const qs_mm_weight *w, int64_t r0, int64_t rows, const float *x,
                           int64_t ldx, int64_t m, float *y, int64_t ldy)
{
    for (int64_t i = 0; i < m; i++)
        for (int64_t r = 0; r < rows; r++)
            qs_st_f32(y + i * ldy + r, qs_mm_dot_mxfp4__ref(x + i * ldx, w->k, row_of(w, r0 + r),
                                                            scales_of(w, r0 + r, 1)));
}

void qs_mm_gemv_mxfp8__ref(const qs_mm_weight *w, int64_t r0, int64_t rows, const float *x,
                           int64_t ldx, int64_t m, float *y, int64_t ldy)
{
    for (int64_t i = 0; i < m; i++)
        for (int64_t r = 0; r < rows; r++)
            qs_st_f32(y + i * ldy + r, qs_mm_dot_mxfp8__ref(x + i * ldx, w->k, row_of(w, r0 + r),
                                                            scales_of(w, r0 + r, 1)));
}

void qs_mm_gemv_nvfp4__ref(const qs_mm_weight *w, int64_t r0, int64_t rows, const float *x,
                           int64_t ldx, int64_t m, float *y, int64_t ldy)
{
    for (int64_t i = 0; i < m; i++)
        for (int64_t r = 0; r < rows; r++)
            qs_st_f32(y + i * ldy + r, qs_mm_dot_nvfp4__ref(x + i * ldx, w->k, row_of(w, r0 + r),
                                                            scales_of(w, r0 + r, 1), w->s_global));
}

/* ---- fused 2:4 GEMV: the gather above, then the dot product over the kept values ---------------
 */

/* xg[0 .. len) = x at the kept columns of kept values j0 ... j0 + len - 1 (kept value j is index
 * j % 2 of group j / 2). */
static void gather_kept(const float *x, const uint16_t *meta, int64_t j0, int64_t len, float *xg)
{
    for (int64_t i = 0; i < len; i++) {
        int64_t j = j0 + i, g = j / 2;
        unsigned nib = (qs_ld_u16(meta + g / 4) >> (4 * (g % 4))) & 15u;
        xg[i] = qs_ld_f32(x + 4 * g + ((j & 1) ? nib >> 2 : nib & 3u));
    }
}

static float sp24_dot_plain(const float *x, const uint16_t *meta, int64_t n, const void *w,
                            void (*cvt)(const uint16_t *, int64_t, float *))
{
    struct mm_lanes l;
    float v[PIECE], xg[PIECE];

    mm_lanes_reset(&l);
    for (int64_t i = 0; i < n / 2; i += PIECE) {
        int64_t len = n / 2 - i < PIECE ? n / 2 - i : PIECE;
        if (cvt)
            cvt((const uint16_t *)w + i, len, v);
        else
            for (int64_t k = 0; k < len; k++)
                v[k] = qs_ld_f32((const float *)w + i + k);
        gather_kept(x, meta, i, len, xg);
        mm_lanes_feed(&l, xg, v, len);
    }
    return qs_ref_nan_canon(mm_lanes_sum(&l));
}

static float sp24_dot_f32(const float *x, const uint16_t *meta, int64_t n, const void *w)
{
    return sp24_dot_plain(x, meta, n, w, NULL);
}

static float sp24_dot_f16(const float *x, const uint16_t *meta, int64_t n, const void *w)
{
    return sp24_dot_plain(x, meta, n, w, qs_cvt_f16_f32__ref);
}

static float sp24_dot_bf16(const float *x, const uint16_t *meta, int64_t n, const void *w)
{
    return sp24_dot_plain(x, meta, n, w, qs_cvt_bf16_f32__ref);
}

int qs_mm_gemv_sp24_f32__ref(const qs_mm_weight *w, int64_t r0, int64_t rows, const float *x,
                             float *y)
{
    return qs_sp24_plain_rows_by_dot(w, r0, rows, x, y, sp24_dot_f32, qs_mm_sp24_meta_bad__ref);
}

int qs_mm_gemv_sp24_f16__ref(const qs_mm_weight *w, int64_t r0, int64_t rows, const float *x,
                             float *y)
{
    return qs_sp24_plain_rows_by_dot(w, r0, rows, x, y, sp24_dot_f16, qs_mm_sp24_meta_bad__ref);
}

int qs_mm_gemv_sp24_bf16__ref(const qs_mm_weight *w, int64_t r0, int64_t rows, const float *x,
                              float *y)
{
    return qs_sp24_plain_rows_by_dot(w, r0, rows, x, y, sp24_dot_bf16, qs_mm_sp24_meta_bad__ref);
}

/* bnb4_dot over the kept values, x gathered piece by piece. */
float qs_mm_dot_sp24_nf4__ref(const float *x, const uint16_t *meta, int64_t n, const uint8_t *data,
                              int64_t start, const float *absmax, int32_t block)
{
    float acc = 0.0f, v[PIECE], xg[PIECE];
    int64_t i = 0, kept = n / 2;

    while (i < kept) {
        int64_t b = (start + i) / block, end = (b + 1) * block - start;
        struct mm_lanes l;

        if (end > kept)
            end = kept;
        mm_lanes_reset(&l);
        while (i < end) {
            int64_t len = end - i < PIECE ? end - i : PIECE;
            for (int64_t k = 0; k < len; k++) {
                int64_t f = start + i + k;
                v[k] = qs_nf4_codebook[(f & 1) ? data[f / 2] & 0xF : data[f / 2] >> 4];
            }
            gather_kept(x, meta, i, len, xg);
            mm_lanes_feed(&l, xg, v, len);
            i += len;
        }
        acc = acc + mm_lanes_sum(&l) * qs_ld_f32(absmax + b);
    }
    return qs_ref_nan_canon(acc);
}

int qs_mm_gemv_sp24_nf4__ref(const qs_mm_weight *w, int64_t r0, int64_t rows, const float *x,
                             float *y)
{
    return qs_sp24_nf4_rows_by_dot(w, r0, rows, x, y, qs_mm_dot_sp24_nf4__ref,
                                   qs_mm_sp24_meta_bad__ref);
}

int qs_mm_sp24_meta_bad__ref(const uint16_t *w, int64_t n)
{
    for (int64_t i = 0; i < n; i++)
        for (int t = 0; t < 4; t++)
            if (!qs_sp24_nibble_valid((qs_ld_u16(w + i) >> (4 * t)) & 15u))
                return 1;
    return 0;
}

void qs_mm_transpose_f32__ref(const float *src, int64_t lds, int64_t rows, int64_t cols, float *dst,
                              int64_t ldd)
{
    for (int64_t r = 0; r < rows; r++)
        for (int64_t c = 0; c < cols; c++)
            qs_st_f32(dst + c * ldd + r, qs_ld_f32(src + r * lds + c));
}
