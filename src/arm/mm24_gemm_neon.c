/* SPDX-License-Identifier: MIT */
/*
 * The 2:4 GEMM step (slot mm_sp24_axpy) for NEON: acc[0..m) += v_j * xt[col_j * ldxt + 0..m)
 * for every kept value j of one 2:4 row (docs/sparsity.md §3.2 for the meta nibbles), ascending,
 * as src/ref/matmul_ref.c defines it. Each kept value is broadcast and multiplied with the x^T
 * row its meta index selects, into 64 accumulators held in sixteen registers for the whole row.
 * Multiply and add stay separate operations (no FMLA), as in the reference, so the result is
 * the reference's bit for bit (a NaN is canonical at the end). Rows past the last multiple of
 * 64 run 4 at a time, the last 1 to 3 with the reference's scalar steps. The transposed copy
 * that packs x^T for it (slot mm_transpose_f32) is at the end.
 */
#include <arm_neon.h>

#include "../core/kernels.h"
#include "../ref/ref.h"
#include "../ref/transpose_ref.h"
#include "neon_common.h"

#define MR 64 /* accumulator rows held in registers */

/* kept value t of the 8 of one meta word: its row of x^T */
static inline const float *row_neon(const float *base, unsigned word, int t, int64_t ldxt)
{
    return base + (int64_t)(4 * (t >> 1) + ((word >> (2 * t)) & 3u)) * ldxt;
}

static void rows64_neon(const float *values, const uint16_t *meta, int64_t n, const float *xt,
                        int64_t ldxt, float *acc)
{
    float32x4_t a[16];
    int64_t groups = n / 4;

    for (int i = 0; i < 16; i++)
        a[i] = vld1q_f32(acc + 4 * i);
    for (int64_t g = 0; g < groups; g++) {
        unsigned nib = (qs_ld_u16(meta + g / 4) >> (4 * (g % 4))) & 15u;
        for (int t = 0; t < 2; t++) {
            float32x4_t vb = vdupq_n_f32(qs_ld_f32(values + 2 * g + t));
            const float *r = row_neon(xt + 4 * g * ldxt, nib, t, ldxt);
            for (int i = 0; i < 16; i++)
                a[i] = vaddq_f32(a[i], vmulq_f32(vb, vld1q_f32(r + 4 * i)));
        }
    }
    for (int i = 0; i < 16; i++)
        vst1q_f32(acc + 4 * i, nan_canon_neon(a[i]));
}

static void rows4_neon(const float *values, const uint16_t *meta, int64_t n, const float *xt,
                       int64_t ldxt, float *acc)
{
    float32x4_t a = vld1q_f32(acc);

    for (int64_t g = 0; g < n / 4; g++) {
        unsigned nib = (qs_ld_u16(meta + g / 4) >> (4 * (g % 4))) & 15u;
        for (int t = 0; t < 2; t++) {
            float32x4_t vb = vdupq_n_f32(qs_ld_f32(values + 2 * g + t));
            a = vaddq_f32(a, vmulq_f32(vb, vld1q_f32(row_neon(xt + 4 * g * ldxt, nib, t, ldxt))));
        }
    }
    vst1q_f32(acc, nan_canon_neon(a));
}

void qs_mm_sp24_axpy__neon_64x1x4(const float *values, const uint16_t *meta, int64_t n,
                                  const float *xt, int64_t ldxt, int64_t m, float *acc)
{
    int64_t i = 0;

    for (; i + MR <= m; i += MR)
        rows64_neon(values, meta, n, xt + i, ldxt, acc + i);
    for (; i + 4 <= m; i += 4)
        rows4_neon(values, meta, n, xt + i, ldxt, acc + i);
    if (i < m)
        qs_mm_sp24_axpy__ref(values, meta, n, xt + i, ldxt, m - i, acc + i);
}

/* ---- transposed copy (slot mm_transpose_f32) ---------------------------------------------------
 * 4 x 4 blocks in registers: 4 row loads, TRN1/TRN2 of row pairs, then the 64-bit halves
 * recombined, and 4 stores of whole columns; the edges (fewer than 4 rows or columns) as the
 * reference. Only bits move (permutes never compute). */
static inline void t4x4_neon(const float *s, int64_t lds, float *d, int64_t ldd)
{
    const float32x4x2_t p01 = vtrnq_f32(vld1q_f32(s), vld1q_f32(s + lds));
    const float32x4x2_t p23 = vtrnq_f32(vld1q_f32(s + 2 * lds), vld1q_f32(s + 3 * lds));

    vst1q_f32(d, vcombine_f32(vget_low_f32(p01.val[0]), vget_low_f32(p23.val[0])));
    vst1q_f32(d + ldd, vcombine_f32(vget_low_f32(p01.val[1]), vget_low_f32(p23.val[1])));
    vst1q_f32(d + 2 * ldd, vcombine_f32(vget_high_f32(p01.val[0]), vget_high_f32(p23.val[0])));
    vst1q_f32(d + 3 * ldd, vcombine_f32(vget_high_f32(p01.val[1]), vget_high_f32(p23.val[1])));
}

void qs_mm_transpose_f32__neon_4x4x1(const float *src, int64_t lds, int64_t rows, int64_t cols,
                                     float *dst, int64_t ldd)
{
    qs_transpose_by_blocks(src, lds, rows, cols, dst, ldd, 4, t4x4_neon);
}
