/* SPDX-License-Identifier: MIT */
/*
 * FP8 E5M2 quantize and dequantize with a per-tensor scale for AVX2 + FMA + F16C
 * (docs/formats.md §10), bit-identical to src/ref/e5m2_ref.c: q = E5M2_RNE_sat(fl(x / scale)) with
 * a true division, saturation to +-57344, NaN -> 0x7F | sign; decode fl(value(q) * scale). E5M2 is
 * the upper byte of binary16, so decoding is VCVTPH2PS (F16C), which keeps NaN payloads exactly as
 * the reference's f16 decoder does. A tail shorter than one step goes through a zero-padded local
 * block, so nothing past n is read or written. The encoder and the drivers are shared through
 * minifloat_avx2.h.
 */
#include <immintrin.h>

#include "../core/kernels.h"
#include "minifloat_avx2.h"
#include "nan_avx2.h"

void qs_e5m2_quant__avx2(const float *src, int64_t n, float scale, uint8_t *dst)
{
    /* saturating: from 61440 up (Inf included) the code is 0x7B, never the Inf code 0x7C */
    fp8_quant_avx2(src, n, scale, dst, 2, 15, 0x7B);
}

/* 16 codes -> 16 floats: the code is the high byte of a binary16. */
static inline void e5m2_dequant16_avx2(const uint8_t *src, __m256 vs, float *dst)
{
    __m128i b = _mm_loadu_si128((const __m128i *)src);
    __m128i h0 = _mm_unpacklo_epi8(_mm_setzero_si128(), b);
    __m128i h1 = _mm_unpackhi_epi8(_mm_setzero_si128(), b);

    _mm256_storeu_ps(dst, nan_canon_avx2(_mm256_mul_ps(_mm256_cvtph_ps(h0), vs)));
    _mm256_storeu_ps(dst + 8, nan_canon_avx2(_mm256_mul_ps(_mm256_cvtph_ps(h1), vs)));
}

void qs_e5m2_dequant__avx2(const uint8_t *src, int64_t n, float scale, float *dst)
{
    fp8_dequant_avx2(src, n, scale, dst, e5m2_dequant16_avx2);
}
