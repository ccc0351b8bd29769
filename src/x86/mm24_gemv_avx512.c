/* SPDX-License-Identifier: MIT */
/*
 * The 2:4 GEMV gather (slot mm_gather_sp24) for AVX-512: xg[2g + t] = x[4g + index t of meta
 * nibble g] (docs/sparsity.md §3.2, src/ref/matmul_ref.c), so the dot-product kernels run over
 * the kept columns only. Two meta words (8 groups, 32 columns of x, 16 kept) a step: the 16
 * two-bit indices are spread into the 16 lanes with one variable shift, offset by 4 per group
 * and used as a two-register permutation of the 32 x values. Values are only moved, so NaN bits
 * are kept, as in the reference. A tail of fewer than 32 columns goes to the reference.
 */
#include <immintrin.h>

#include "../core/kernels.h"
#include "../ref/ref.h"

void qs_mm_gather_sp24__avx512_1x1x32(const float *x, const uint16_t *meta, int64_t n, float *xg)
{
    /* lane l holds kept value l: group l / 2, index bits 2l + 1 .. 2l of the two words */
    const __m512i shift =
        _mm512_setr_epi32(0, 2, 4, 6, 8, 10, 12, 14, 16, 18, 20, 22, 24, 26, 28, 30);
    const __m512i base =
        _mm512_setr_epi32(0, 0, 4, 4, 8, 8, 12, 12, 16, 16, 20, 20, 24, 24, 28, 28);
    const __m512i three = _mm512_set1_epi32(3);
    int64_t i = 0;

    for (; i + 32 <= n; i += 32) {
        uint32_t w = (uint32_t)qs_ld_u16(meta + i / 16) | (uint32_t)qs_ld_u16(meta + i / 16 + 1)
                                                              << 16;
        __m512i idx = _mm512_and_si512(_mm512_srlv_epi32(_mm512_set1_epi32((int)w), shift), three);
        idx = _mm512_add_epi32(idx, base);
        __m512 r = _mm512_permutex2var_ps(_mm512_loadu_ps(x + i), idx, _mm512_loadu_ps(x + i + 16));
        _mm512_storeu_ps(xg + i / 2, r);
    }
    qs_mm_gather_sp24__ref(x + i, meta + i / 16, n - i, xg + i / 2);
}
