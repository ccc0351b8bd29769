/* SPDX-License-Identifier: MIT */
/*
 * The int8-activation matmul reference (include/qsparse/matmul.h, "int8 activations"): integer
 * dot products of per-token int8 codes with
 * - INT8 / LLM_INT8 weight rows (w8a8): per segment (an INT8 group, or the whole row) the exact
 *   int32 sum a_s = sum x * (q - zp), then t = t + fl(a_s * scale_s) in ascending segments;
 * - NF4 / FP4 weight rows (nf4a8, fp4a8): each 4-bit code stands for its codebook entry scaled to
 *   int8, rne(127 * c) (the tables below); per segment (a bnb block clipped to the row) the exact
 *   int32 sum a_s = sum x * w8, then t = t + fl(a_s * absmax_b) in ascending segments.
 * t starts at +0 and is returned under the NaN rule of ref.h. The driver multiplies by the
 * activation scale (and for the 4-bit formats by 1/127 for the table); SIMD kernels compute the
 * same integers and the same float steps, so they agree bit for bit.
 *
 * The xsum argument of the slots (group / 64-element sums of x) is read only by SIMD kernels
 * (offset and zero-point corrections); the reference computes everything from xq.
 */
#include "../core/kernels.h"
#include "mm8_ref.h"
#include "ref.h"

const int8_t qs_nf4_codebook_i8[16] = {-127, -88, -67, -50, -36, -23, -12, 0,
                                       10,   20,  31,  43,  56,  71,  92,  127};
/* 0, 1/192, 2/3, 1, 1/3, 1/2, 1/6, 1/4 and their negatives; 127/2 = 63.5 rounds to even 64. */
const int8_t qs_fp4_codebook_i8[16] = {0, 1,  85,  127,  42,  64,  21,  32,
                                       0, -1, -85, -127, -42, -64, -21, -32};

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
