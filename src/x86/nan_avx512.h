/* SPDX-License-Identifier: MIT */
/*
 * The NaN rule of src/ref/ref.h (qs_ref_nan_canon, docs/nan.md) for AVX-512 kernels: every NaN
 * lane of a computed float result becomes the canonical quiet NaN 0x7FC00000 (x86 arithmetic
 * would give 0xFFC00000 or its first NaN operand). One compare into a mask and one masked move
 * per vector, just before the store. Include only from files compiled with the AVX-512 flags.
 */
#ifndef QS_X86_NAN_AVX512_H
#define QS_X86_NAN_AVX512_H

#include <immintrin.h>

#include "../ref/ref.h"

static inline __m512 nan_canon_avx512(__m512 v)
{
    const __m512 qnan = _mm512_castsi512_ps(_mm512_set1_epi32((int32_t)QS_NAN_F32_BITS));
    return _mm512_mask_mov_ps(v, _mm512_cmp_ps_mask(v, v, _CMP_UNORD_Q), qnan);
}

#endif /* QS_X86_NAN_AVX512_H */
