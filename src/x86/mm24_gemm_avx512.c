/* SPDX-License-Identifier: MIT */
/*
 * The 2:4 GEMM step (slot mm_sp24_axpy) for AVX-512: acc[0..m) += v_j * xt[col_j * ldxt + 0..m)
 * for every kept value j of one 2:4 row (docs/sparsity.md §3.2 for the meta nibbles), ascending,
 * as src/ref/matmul_ref.c defines it. The outer-product form needs no gather: each kept value is
 * broadcast and multiplied with the x^T row its meta index selects, read straight from memory,
 * into 64 accumulators held in four registers for the whole row. Multiply and add stay separate
 * operations, as in the reference, so every accumulator sees the same roundings in the same
 * order: the result is the reference's bit for bit (a NaN is canonical at the end). Rows of the
 * accumulator beyond the last multiple of 64 run 16 at a time under a load mask.
 */
#include <immintrin.h>

#include "../core/kernels.h"
#include "../ref/ref.h"
#include "../ref/transpose_ref.h"
#include "nan_avx512.h"

#define MR 64 /* accumulator rows held in registers */

static inline __m512 bcast_avx512(const float *p)
{
    return _mm512_set1_ps(qs_ld_f32(p));
}

/* One kept value: a += v * row, for the four vectors of 64 rows. */
#define STEP64(vp, r)                                                                              \
    do {                                                                                           \
        __m512 vb = bcast_avx512(vp);                                                              \
        a0 = _mm512_add_ps(a0, _mm512_mul_ps(vb, _mm512_loadu_ps((r))));                           \
        a1 = _mm512_add_ps(a1, _mm512_mul_ps(vb, _mm512_loadu_ps((r) + 16)));                      \
        a2 = _mm512_add_ps(a2, _mm512_mul_ps(vb, _mm512_loadu_ps((r) + 32)));                      \
        a3 = _mm512_add_ps(a3, _mm512_mul_ps(vb, _mm512_loadu_ps((r) + 48)));                      \
    } while (0)

/* 64 accumulator rows over the whole 2:4 row: one meta word (4 groups, 8 kept values) a step. */
static void rows64_avx512(const float *values, const uint16_t *meta, int64_t n, const float *xt,
                          int64_t ldxt, float *acc)
{
    __m512 a0 = _mm512_loadu_ps(acc), a1 = _mm512_loadu_ps(acc + 16);
    __m512 a2 = _mm512_loadu_ps(acc + 32), a3 = _mm512_loadu_ps(acc + 48);
    int64_t groups = n / 4, g = 0;

    for (; g + 4 <= groups; g += 4) {
        unsigned word = qs_ld_u16(meta + g / 4);
        const float *v = values + 2 * g, *base = xt + 4 * g * ldxt;
        for (int t = 0; t < 8; t++) {
            /* kept value t is in group t / 2; its index is bits 2t + 1 .. 2t of the word */
            const float *r = base + (int64_t)(4 * (t >> 1) + ((word >> (2 * t)) & 3u)) * ldxt;
            STEP64(v + t, r);
        }
    }
    for (; g < groups; g++) {
        unsigned nib = (qs_ld_u16(meta + g / 4) >> (4 * (g % 4))) & 15u;
        STEP64(values + 2 * g, xt + (4 * g + (nib & 3u)) * ldxt);
        STEP64(values + 2 * g + 1, xt + (4 * g + (nib >> 2)) * ldxt);
    }
    _mm512_storeu_ps(acc, nan_canon_avx512(a0));
    _mm512_storeu_ps(acc + 16, nan_canon_avx512(a1));
    _mm512_storeu_ps(acc + 32, nan_canon_avx512(a2));
    _mm512_storeu_ps(acc + 48, nan_canon_avx512(a3));
}

/* Up to 16 accumulator rows under mask k. */
static void rows16_avx512(const float *values, const uint16_t *meta, int64_t n, const float *xt,
                          int64_t ldxt, __mmask16 k, float *acc)
{
    __m512 a = _mm512_maskz_loadu_ps(k, acc);

    for (int64_t g = 0; g < n / 4; g++) {
        unsigned nib = (qs_ld_u16(meta + g / 4) >> (4 * (g % 4))) & 15u;
        const float *r0 = xt + (4 * g + (nib & 3u)) * ldxt, *r1 = xt + (4 * g + (nib >> 2)) * ldxt;
        a = _mm512_add_ps(
            a, _mm512_mul_ps(bcast_avx512(values + 2 * g), _mm512_maskz_loadu_ps(k, r0)));
        a = _mm512_add_ps(
            a, _mm512_mul_ps(bcast_avx512(values + 2 * g + 1), _mm512_maskz_loadu_ps(k, r1)));
    }
    _mm512_mask_storeu_ps(acc, k, nan_canon_avx512(a));
}

void qs_mm_sp24_axpy__avx512_64x1x4(const float *values, const uint16_t *meta, int64_t n,
                                    const float *xt, int64_t ldxt, int64_t m, float *acc)
{
    int64_t i = 0;

    for (; i + MR <= m; i += MR)
        rows64_avx512(values, meta, n, xt + i, ldxt, acc + i);
    for (; i < m; i += 16) {
        __mmask16 k = m - i >= 16 ? (__mmask16)0xFFFF : (__mmask16)((1u << (m - i)) - 1u);
        rows16_avx512(values, meta, n, xt + i, ldxt, k, acc + i);
    }
}

/* ---- transposed copy (slot mm_transpose_f32) ---------------------------------------------------
 * 16 x 16 blocks in registers: 16 row loads, four rounds of two-register permutations and 16
 * stores of whole columns; the edges (fewer than 16 rows or columns) as the reference. Round w
 * (1, 2, 4, 8) swaps bit w of the row index with bit w of the lane index: rows i and i + w
 * (bit w of i clear) trade lane l + w of row i for lane l of row i + w (bit w of l clear). Only
 * bits move. */
static const int32_t t_lo[4][16] = {
    {0, 16, 2, 18, 4, 20, 6, 22, 8, 24, 10, 26, 12, 28, 14, 30},
    {0, 1, 16, 17, 4, 5, 20, 21, 8, 9, 24, 25, 12, 13, 28, 29},
    {0, 1, 2, 3, 16, 17, 18, 19, 8, 9, 10, 11, 24, 25, 26, 27},
    {0, 1, 2, 3, 4, 5, 6, 7, 16, 17, 18, 19, 20, 21, 22, 23},
};
static const int32_t t_hi[4][16] = {
    {1, 17, 3, 19, 5, 21, 7, 23, 9, 25, 11, 27, 13, 29, 15, 31},
    {2, 3, 18, 19, 6, 7, 22, 23, 10, 11, 26, 27, 14, 15, 30, 31},
    {4, 5, 6, 7, 20, 21, 22, 23, 12, 13, 14, 15, 28, 29, 30, 31},
    {8, 9, 10, 11, 12, 13, 14, 15, 24, 25, 26, 27, 28, 29, 30, 31},
};

static inline void t16x16_avx512(const float *s, int64_t lds, float *d, int64_t ldd)
{
    __m512i v[16];

    for (int i = 0; i < 16; i++)
        v[i] = _mm512_castps_si512(_mm512_loadu_ps(s + i * lds));
    for (int k = 0; k < 4; k++) {
        const int w = 1 << k;
        const __m512i lo = _mm512_loadu_si512(t_lo[k]), hi = _mm512_loadu_si512(t_hi[k]);
        for (int i = 0; i < 16; i++)
            if ((i & w) == 0) {
                __m512i a = v[i], b = v[i + w];
                v[i] = _mm512_permutex2var_epi32(a, lo, b);
                v[i + w] = _mm512_permutex2var_epi32(a, hi, b);
            }
    }
    for (int i = 0; i < 16; i++)
        _mm512_storeu_ps(d + i * ldd, _mm512_castsi512_ps(v[i]));
}

void qs_mm_transpose_f32__avx512_16x16x1(const float *src, int64_t lds, int64_t rows,
                                         int64_t cols, float *dst, int64_t ldd)
{
    qs_transpose_by_blocks(src, lds, rows, cols, dst, ldd, 16, t16x16_avx512);
}
