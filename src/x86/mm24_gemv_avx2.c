/* SPDX-License-Identifier: MIT */
/*
 * The 2:4 GEMV gather (slot mm_gather_sp24) for AVX2: xg[2g + t] = x[4g + index t of meta
 * nibble g] (docs/sparsity.md §3.2, src/ref/matmul_ref.c), so the dot-product kernels run over
 * the kept columns only. One meta word (4 groups, 16 columns of x, 8 kept) a step: the 8 two-bit
 * indices are spread into the 8 lanes with one variable shift, offset by 4 per group inside each
 * 8-column half, used to permute both halves, and the halves blended (groups 0-1 from the first,
 * 2-3 from the second). Values are only moved, so NaN bits are kept, as in the reference. A tail
 * of fewer than 16 columns goes to the reference.
 */
#include <immintrin.h>

#include "../core/kernels.h"
#include "../ref/ref.h"

void qs_mm_gather_sp24__avx2_1x1x16(const float *x, const uint16_t *meta, int64_t n, float *xg)
{
    const __m256i shift = _mm256_setr_epi32(0, 2, 4, 6, 8, 10, 12, 14);
    const __m256i base = _mm256_setr_epi32(0, 0, 4, 4, 0, 0, 4, 4);
    const __m256i three = _mm256_set1_epi32(3);
    int64_t i = 0;

    for (; i + 16 <= n; i += 16) {
        __m256i idx = _mm256_srlv_epi32(_mm256_set1_epi32((int)qs_ld_u16(meta + i / 16)), shift);
        idx = _mm256_add_epi32(_mm256_and_si256(idx, three), base);
        __m256 lo = _mm256_permutevar8x32_ps(_mm256_loadu_ps(x + i), idx);
        __m256 hi = _mm256_permutevar8x32_ps(_mm256_loadu_ps(x + i + 8), idx);
        _mm256_storeu_ps(xg + i / 2, _mm256_blend_ps(lo, hi, 0xF0));
    }
    qs_mm_gather_sp24__ref(x + i, meta + i / 16, n - i, xg + i / 2);
}
