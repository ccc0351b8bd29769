/* SPDX-License-Identifier: MIT */
/*
 * FP8 E5M2 quantize and dequantize with a per-tensor scale for AVX-512 F/BW/DQ/VL
 * (docs/formats.md §10), bit-identical to src/ref/e5m2_ref.c: q = E5M2_RNE_sat(fl(x / scale)) with
 * a true division, saturation to +-57344, NaN -> 0x7F | sign; decode fl(value(q) * scale) through
 * VCVTPH2PS, since E5M2 is the upper byte of binary16. The tail uses masked loads and stores, so
 * nothing past n is read or written. The encoder and the drivers are shared through
 * minifloat_avx512.h.
 */
#include <immintrin.h>

#include "../core/kernels.h"
#include "minifloat_avx512.h"

void qs_e5m2_quant__avx512(const float *src, int64_t n, float scale, uint8_t *dst)
{
    /* saturating: from 61440 up (Inf included) the code is 0x7B, never the Inf code 0x7C */
    fp8_quant_avx512(src, n, scale, dst, 2, 15, 0x7B);
}

/* 16 E5M2 codes (bytes) -> 16 floats through binary16. */
static inline __m512 e5m2_decode_avx512(__m128i b)
{
    return _mm512_cvtph_ps(_mm256_slli_epi16(_mm256_cvtepu8_epi16(b), 8));
}

void qs_e5m2_dequant__avx512(const uint8_t *src, int64_t n, float scale, float *dst)
{
    fp8_dequant_avx512(src, n, scale, dst, e5m2_decode_avx512);
}
