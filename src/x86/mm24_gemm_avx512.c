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
