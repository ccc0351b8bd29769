/* SPDX-License-Identifier: MIT */
/*
 * The int8-activation matmul reference (include/qsparse/matmul.h, "int8 activations"): integer
 * dot products of per-token int8 codes with
 * - INT8 / LLM_INT8 weight rows (w8a8): per segment (an INT8 group, or the whole row) the exact
 *   int32 sum a_s = sum x * (q - zp), then t = t + fl(a_s * scale_s) in ascending segments;
 * - NF4 / FP4 weight rows (nf4a8, fp4a8): each 4-bit code stands for its codebook entry scaled to
 *   int8, rne(127 * c) (the tables below); per segment (a bnb block clipped to the row) the exact
 *   int32 sum a_s = sum x * w8, then t = t + fl(a_s * absmax_b) in ascending segments.
 * - MXFP4 / NVFP4 rows (mxfp4a8, nvfp4a8): each E2M1 code stands for twice its value, an integer
 *   of -12 ... 12 (qs_e2m1_i8x2); per block a_s = sum x * w2 exactly, then t = fmaf(a_s, sc_s, t)
 *   with sc_s half the block scale: 2^(E - 128) for an E8M0 byte E (NaN for 0xFF), value(S &
 *   0x7F) / 2 for an NVFP4 E4M3 byte S; NVFP4 returns fl(t * s_global).
 * - FP8 E4M3 rows (e4m3a8): each code stands for 2^9 times its value, an integer of -229376 ...
 *   229376; per 64 columns (QS_MM_E4M3A8_SEG, the last segment shorter) a_s = sum x * c exactly
 *   (|a_s| <= 64 * 127 * 229376 < 2^31), then t = fmaf((float)a_s, u, t), u = fl(scale * 2^-9);
 *   a segment holding a NaN code (0x7F, 0xFF) makes t NaN.
 * t starts at +0 and is returned under the NaN rule of ref.h. The driver multiplies by the
 * activation scale (and for the NF4/FP4 by 1/127 for the table); SIMD kernels compute the
 * same integers and the same float steps, so they agree bit for bit.
 *
 * The xsum argument of the slots (group / 64-element sums of x) is read only by SIMD kernels
 * (offset and zero-point corrections); the reference computes everything from xq.
 */
#include <math.h>

#include "../core/kernels.h"
#include "mm8_ref.h"
#include "ref.h"

const int8_t qs_nf4_codebook_i8[16] = {-127, -88, -67, -50, -36, -23, -12, 0,
                                       10,   20,  31,  43,  56,  71,  92,  127};
/* 0, 1/192, 2/3, 1, 1/3, 1/2, 1/6, 1/4 and their negatives; 127/2 = 63.5 rounds to even 64. */
const int8_t qs_fp4_codebook_i8[16] = {0, 1,  85,  127,  42,  64,  21,  32,
                                       0, -1, -85, -127, -42, -64, -21, -32};
/* 2 * E2M1 value of each code: 0 0.5 1 1.5 2 3 4 6 and their negatives (code 8 is -0). */
const int8_t qs_e2m1_i8x2[16] = {0, 1, 2, 3, 4, 6, 8, 12, 0, -1, -2, -3, -4, -6, -8, -12};

int32_t qs_e4m3_int9(uint8_t c)
{
    int32_t e = (c >> 3) & 0xF, f = c & 7;
    int32_t v = e == 0 ? f : (8 + f) << (e - 1); /* value * 2^9: f 2^-9 or (8 + f) 2^(e - 10) */
    return (c & 0x80) ? -v : v;
}

/* W row r of the view: INT8 codes at data + r * row_bytes, its unit scales and zero points at
 * r * sstride (src/core/kernels.h). */
void qs_mm_w8a8__ref(const int8_t *xq, const int32_t *xsum, int64_t m, const qs_mm_weight *w,
                     int64_t r0, int64_t rows, float *out, int64_t ldo)
{
    const int64_t n = w->k;

    (void)xsum;
    for (int64_t i = 0; i < m; i++)
        for (int64_t r = 0; r < rows; r++) {
            int64_t row = r0 + r;
            out[i * ldo + r] =
                qs_mm_dot_w8a8__ref(xq + i * n, (const int8_t *)w->data + row * w->row_bytes, n,
                                    (const float *)w->scale + row * w->sstride,
                                    w->zp ? w->zp + row * w->sstride : NULL, w->group);
        }
}

static float bnb4_a8_row(const int8_t *book, const int8_t *x, int64_t n, const uint8_t *data,
                         int64_t start, const float *absmax, int32_t block)
{
    float t = 0.0f;
    int64_t i = 0;

    while (i < n) {
        int64_t b = (start + i) / block, end = (b + 1) * block - start;
        int32_t a = 0;

        if (end > n)
            end = n;
        for (; i < end; i++) {
            int64_t f = start + i;
            uint8_t c = (f & 1) ? data[f / 2] & 0xF : data[f / 2] >> 4;
            a += (int32_t)x[i] * book[c];
        }
        t = t + (float)a * qs_ld_f32(absmax + b);
    }
    return qs_ref_nan_canon(t);
}

/* W row r of the view: flat elements r * k ... of the bnb4 tensor, absmax w->scale in blocks of
 * w->group. */
static void bnb4_a8(const int8_t *book, const int8_t *xq, int64_t m, const qs_mm_weight *w,
                    int64_t r0, int64_t rows, float *out, int64_t ldo)
{
    const int64_t n = w->k;

    for (int64_t i = 0; i < m; i++)
        for (int64_t r = 0; r < rows; r++)
            out[i * ldo + r] =
                bnb4_a8_row(book, xq + i * n, n, (const uint8_t *)w->data, (r0 + r) * n,
                            (const float *)w->scale, (int32_t)w->group);
}

void qs_mm_nf4a8__ref(const int8_t *xq, const int32_t *xsum, int64_t m, const qs_mm_weight *w,
                      int64_t r0, int64_t rows, float *out, int64_t ldo)
{
    (void)xsum;
    bnb4_a8(qs_nf4_codebook_i8, xq, m, w, r0, rows, out, ldo);
}

void qs_mm_fp4a8__ref(const int8_t *xq, const int32_t *xsum, int64_t m, const qs_mm_weight *w,
                      int64_t r0, int64_t rows, float *out, int64_t ldo)
{
    (void)xsum;
    bnb4_a8(qs_fp4_codebook_i8, xq, m, w, r0, rows, out, ldo);
}

/* ---- MXFP4 / NVFP4: E2M1 codes doubled, blocks along the row ---------------------------------
 */

/* One row: codes at d (element i in byte i / 2, the low nibble for an even i), block scales sb
 * (E8M0 bytes for MX, E4M3 bytes for NVFP4), blocks of `block` columns. */
static float e2m1_a8_row(const int8_t *x, int64_t n, const uint8_t *d, const uint8_t *sb,
                         int64_t block, int nv)
{
    float t = 0.0f;

    for (int64_t s = 0; s * block < n; s++) {
        int64_t i0 = s * block, end = i0 + block < n ? i0 + block : n;
        int32_t a = 0;
        for (int64_t i = i0; i < end; i++)
            a += (int32_t)x[i] * qs_e2m1_i8x2[(i & 1) ? d[i / 2] >> 4 : d[i / 2] & 0xF];
        /* half the block scale, exactly: 2^(E - 128), or an E4M3 value (>= 2^-9) halved */
        float sc = (nv ? qs_ue4m3_values[sb[s] & 0x7F] : qs_e8m0_decode_inline(sb[s])) * 0.5f;
        t = fmaf((float)a, sc, t);
    }
    return t;
}

static void e2m1_a8(const int8_t *xq, int64_t m, const qs_mm_weight *w, int64_t r0, int64_t rows,
                    float *out, int64_t ldo, int nv)
{
    const int64_t n = w->k;

    for (int64_t i = 0; i < m; i++)
        for (int64_t r = 0; r < rows; r++) {
            int64_t row = r0 + r;
            float t = e2m1_a8_row(xq + i * n, n, (const uint8_t *)w->data + row * w->row_bytes,
                                  (const uint8_t *)w->scale + row * w->sstride, w->group, nv);
            out[i * ldo + r] = qs_ref_nan_canon(nv ? t * w->s_global : t);
        }
}

void qs_mm_mxfp4a8__ref(const int8_t *xq, const int32_t *xsum, int64_t m, const qs_mm_weight *w,
                        int64_t r0, int64_t rows, float *out, int64_t ldo)
{
    (void)xsum;
    e2m1_a8(xq, m, w, r0, rows, out, ldo, 0);
}

void qs_mm_nvfp4a8__ref(const int8_t *xq, const int32_t *xsum, int64_t m, const qs_mm_weight *w,
                        int64_t r0, int64_t rows, float *out, int64_t ldo)
{
    (void)xsum;
    e2m1_a8(xq, m, w, r0, rows, out, ldo, 1);
}

/* ---- FP8 E4M3: codes times 2^9, segments of 64 columns ----------------------------------------
 */

void qs_mm_e4m3a8__ref(const int8_t *xq, const int32_t *xsum, int64_t m, const qs_mm_weight *w,
                       int64_t r0, int64_t rows, float *out, int64_t ldo)
{
    const int64_t n = w->k;

    (void)xsum;
    for (int64_t i = 0; i < m; i++)
        for (int64_t r = 0; r < rows; r++) {
            int64_t row = r0 + r;
            const uint8_t *c = (const uint8_t *)w->data + row * w->row_bytes;
            const int8_t *x = xq + i * n;
            float u = qs_ld_f32((const float *)w->scale + row * w->sstride) * 0x1p-9f, t = 0.0f;
            for (int64_t k0 = 0; k0 < n; k0 += QS_MM_E4M3A8_SEG) {
                int64_t end = k0 + QS_MM_E4M3A8_SEG < n ? k0 + QS_MM_E4M3A8_SEG : n;
                int32_t a = 0;
                int nan = 0;
                for (int64_t k = k0; k < end; k++) {
                    nan |= (c[k] & 0x7F) == 0x7F;
                    a += (int32_t)x[k] * qs_e4m3_int9(c[k]); /* |partial| < 64 * 127 * 229376 */
                }
                t = nan ? qs_f32_from_bits(QS_NAN_F32_BITS) : fmaf((float)a, u, t);
            }
            out[i * ldo + r] = qs_ref_nan_canon(t);
        }
}
