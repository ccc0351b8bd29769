/* SPDX-License-Identifier: MIT */
/*
 * The NaN rule of src/ref/ref.h (qs_ref_nan_canon, docs/nan.md) for AVX2 kernels: every NaN lane
 * of a computed float result becomes the canonical quiet NaN 0x7FC00000. x86 arithmetic makes
 * 0xFFC00000 from non-NaN operands and returns its first NaN operand otherwise, so without this a
 * result's NaN bits would depend on the ISA and on operand order. One compare and one blend per
 * vector, just before the store. Include only from files compiled with the AVX2 flags.
 */
#ifndef QS_X86_NAN_AVX2_H
#define QS_X86_NAN_AVX2_H

#include <immintrin.h>

#include "../ref/ref.h"

static inline __m256 nan_canon_avx2(__m256 v)
{
    const __m256 qnan = _mm256_castsi256_ps(_mm256_set1_epi32((int32_t)QS_NAN_F32_BITS));
    return _mm256_blendv_ps(v, qnan, _mm256_cmp_ps(v, v, _CMP_UNORD_Q));
}

#endif /* QS_X86_NAN_AVX2_H */
