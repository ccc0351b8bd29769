/* SPDX-License-Identifier: MIT */
/*
 * The 2:4 GEMM step (slot mm_sp24_axpy) for AVX2: acc[0..m) += v_j * xt[col_j * ldxt + 0..m)
 * for every kept value j of one 2:4 row (docs/sparsity.md §3.2 for the meta nibbles), ascending,
 * as src/ref/matmul_ref.c defines it. The outer-product form needs no gather: each kept value is
 * broadcast and multiplied with the x^T row its meta index selects, read straight from memory,
 * into 64 accumulators held in eight registers for the whole row. Multiply and add stay separate
 * operations, as in the reference, so the result is the reference's bit for bit (a NaN is
 * canonical at the end). Rows beyond the last multiple of 64 run 8 at a time, the last ones
 * under a load mask. The transposed copy that packs x^T for it (slot mm_transpose_f32) is at the
 * end.
 */
#include <immintrin.h>

#include "../core/kernels.h"
#include "../ref/ref.h"
#include "../ref/transpose_ref.h"
#include "nan_avx2.h"

#define MR 64 /* accumulator rows held in registers */

static inline __m256 bcast_avx2(const float *p)
{
    return _mm256_set1_ps(qs_ld_f32(p));
}

#define MAC(a, vb, p) a = _mm256_add_ps(a, _mm256_mul_ps(vb, _mm256_loadu_ps(p)))

/* One kept value: a += v * row, for the eight vectors of 64 rows. */
#define STEP64(vp, r)                                                                              \
    do {                                                                                           \
        __m256 vb = bcast_avx2(vp);                                                                \
        MAC(a0, vb, (r));                                                                          \
        MAC(a1, vb, (r) + 8);                                                                      \
        MAC(a2, vb, (r) + 16);                                                                     \
        MAC(a3, vb, (r) + 24);                                                                     \
        MAC(a4, vb, (r) + 32);                                                                     \
        MAC(a5, vb, (r) + 40);                                                                     \
        MAC(a6, vb, (r) + 48);                                                                     \
        MAC(a7, vb, (r) + 56);                                                                     \
    } while (0)

/* 64 accumulator rows over the whole 2:4 row: one meta word (4 groups, 8 kept values) a step. */
static void rows64_avx2(const float *values, const uint16_t *meta, int64_t n, const float *xt,
                        int64_t ldxt, float *acc)
{
    __m256 a0 = _mm256_loadu_ps(acc), a1 = _mm256_loadu_ps(acc + 8);
    __m256 a2 = _mm256_loadu_ps(acc + 16), a3 = _mm256_loadu_ps(acc + 24);
    __m256 a4 = _mm256_loadu_ps(acc + 32), a5 = _mm256_loadu_ps(acc + 40);
    __m256 a6 = _mm256_loadu_ps(acc + 48), a7 = _mm256_loadu_ps(acc + 56);
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
    _mm256_storeu_ps(acc, nan_canon_avx2(a0));
    _mm256_storeu_ps(acc + 8, nan_canon_avx2(a1));
    _mm256_storeu_ps(acc + 16, nan_canon_avx2(a2));
    _mm256_storeu_ps(acc + 24, nan_canon_avx2(a3));
    _mm256_storeu_ps(acc + 32, nan_canon_avx2(a4));
    _mm256_storeu_ps(acc + 40, nan_canon_avx2(a5));
    _mm256_storeu_ps(acc + 48, nan_canon_avx2(a6));
    _mm256_storeu_ps(acc + 56, nan_canon_avx2(a7));
}

/* Up to 8 accumulator rows under lane mask k (all ones in the lanes to touch). */
static void rows8_avx2(const float *values, const uint16_t *meta, int64_t n, const float *xt,
                       int64_t ldxt, __m256i k, float *acc)
{
    __m256 a = _mm256_maskload_ps(acc, k);

    for (int64_t g = 0; g < n / 4; g++) {
        unsigned nib = (qs_ld_u16(meta + g / 4) >> (4 * (g % 4))) & 15u;
        const float *r0 = xt + (4 * g + (nib & 3u)) * ldxt, *r1 = xt + (4 * g + (nib >> 2)) * ldxt;
        a = _mm256_add_ps(a, _mm256_mul_ps(bcast_avx2(values + 2 * g), _mm256_maskload_ps(r0, k)));
        a = _mm256_add_ps(a,
                          _mm256_mul_ps(bcast_avx2(values + 2 * g + 1), _mm256_maskload_ps(r1, k)));
    }
    _mm256_maskstore_ps(acc, k, nan_canon_avx2(a));
}

void qs_mm_sp24_axpy__avx2_64x1x4(const float *values, const uint16_t *meta, int64_t n,
                                  const float *xt, int64_t ldxt, int64_t m, float *acc)
{
    int64_t i = 0;

    for (; i + MR <= m; i += MR)
        rows64_avx2(values, meta, n, xt + i, ldxt, acc + i);
    for (; i < m; i += 8) {
        int64_t left = m - i < 8 ? m - i : 8;
        __m256i k = _mm256_cmpgt_epi32(_mm256_set1_epi32((int)left),
                                       _mm256_setr_epi32(0, 1, 2, 3, 4, 5, 6, 7));
        rows8_avx2(values, meta, n, xt + i, ldxt, k, acc + i);
    }
}

/* ---- transposed copy (slot mm_transpose_f32) ---------------------------------------------------
 * 8 x 8 blocks in registers: 8 row loads, the classic three rounds (unpack pairs of rows, shuffle
 * pairs of pairs, swap 128-bit halves) and 8 stores of whole columns; the edges (fewer than 8 rows
 * or columns) as the reference. Only bits move: the shuffles never compute, so NaN payloads, Inf
 * and -0 arrive as they left. Without it the reference's element loop took 18% of a 2:4 GEMM. */
static inline void t8x8_avx2(const float *s, int64_t lds, float *d, int64_t ldd)
{
    __m256 r[8], t[8], u[8];

    for (int i = 0; i < 8; i++)
        r[i] = _mm256_loadu_ps(s + i * lds);
    /* t[i]: rows i and i + 1 interleaved, lanes 0, 1 | 4, 5; t[i + 1]: lanes 2, 3 | 6, 7 */
    for (int i = 0; i < 8; i += 2) {
        t[i] = _mm256_unpacklo_ps(r[i], r[i + 1]);
        t[i + 1] = _mm256_unpackhi_ps(r[i], r[i + 1]);
    }
    for (int h = 0; h < 8; h += 4) { /* u[h + c]: column c (and c + 4) of rows h ... h + 3 */
        u[h + 0] = _mm256_shuffle_ps(t[h], t[h + 2], 0x44);
        u[h + 1] = _mm256_shuffle_ps(t[h], t[h + 2], 0xEE);
        u[h + 2] = _mm256_shuffle_ps(t[h + 1], t[h + 3], 0x44);
        u[h + 3] = _mm256_shuffle_ps(t[h + 1], t[h + 3], 0xEE);
    }
    for (int c = 0; c < 4; c++) {
        _mm256_storeu_ps(d + c * ldd, _mm256_permute2f128_ps(u[c], u[c + 4], 0x20));
        _mm256_storeu_ps(d + (c + 4) * ldd, _mm256_permute2f128_ps(u[c], u[c + 4], 0x31));
    }
}

void qs_mm_transpose_f32__avx2_8x8x1(const float *src, int64_t lds, int64_t rows, int64_t cols,
                                     float *dst, int64_t ldd)
{
    qs_transpose_by_blocks(src, lds, rows, cols, dst, ldd, 8, t8x8_avx2);
}
