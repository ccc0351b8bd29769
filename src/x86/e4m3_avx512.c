/* SPDX-License-Identifier: MIT */
/*
 * FP8 E4M3 ("fn") quantize and dequantize with a per-tensor scale for AVX-512 F/BW/DQ/VL
 * (docs/formats.md §10), bit-identical to src/ref/e4m3_ref.c: q = E4M3_RNE_sat(fl(x / scale)) with
 * a true division, NaN -> 0x7F | sign, decode fl(value(q) * scale). Same integer-domain rounding
 * as e4m3_avx2.c on 16 lanes; the tail uses masked loads and stores, so nothing past n is read or
 * written. The encoder, decoder and driver are shared through minifloat_avx512.h.
 */
#include <immintrin.h>

#include "../core/kernels.h"
#include "minifloat_avx512.h"

void qs_e4m3_quant__avx512(const float *src, int64_t n, float scale, uint8_t *dst)
{
    fp8_quant_avx512(src, n, scale, dst, 3, 7, 0x7E); /* saturating to 448 = code 0x7E */
}

/* 16 E4M3 codes (bytes) -> 16 floats. */
static inline __m512 e4m3_decode16_avx512(__m128i b)
{
    return e4m3_decode_avx512(_mm512_cvtepu8_epi32(b));
}

void qs_e4m3_dequant__avx512(const uint8_t *src, int64_t n, float scale, float *dst)
{
    /* value(q) * scale = (value(q) * 2^-8) * (2^8 * scale) exactly, as one rounding of the same
     * product, whenever 2^8 * scale is finite or scale is not (Inf and NaN stay what they were) */
    const float s8 = scale * 256.0f;
    const uint32_t fin = 0x7F800000u;

    if ((qs_f32_bits(s8) & fin) == fin && (qs_f32_bits(scale) & fin) != fin) {
        fp8_dequant_avx512(src, n, scale, dst, e4m3_decode16_avx512);
        return;
    }
    const __m512 vs = _mm512_set1_ps(s8);
    int64_t i = 0;

    for (; i + 32 <= n; i += 32) {
        __m512 v0 = e4m3_decode16_f16_avx512(_mm_loadu_si128((const __m128i *)(src + i)));
        __m512 v1 = e4m3_decode16_f16_avx512(_mm_loadu_si128((const __m128i *)(src + i + 16)));
        _mm512_storeu_ps(dst + i, nan_canon_avx512(_mm512_mul_ps(v0, vs)));
        _mm512_storeu_ps(dst + i + 16, nan_canon_avx512(_mm512_mul_ps(v1, vs)));
    }
    for (; i < n; i += 16) {
        __mmask16 k = lane_mask_avx512(n - i);
        __m512 v = e4m3_decode16_f16_avx512(_mm_maskz_loadu_epi8(k, src + i));
        _mm512_mask_storeu_ps(dst + i, k, nan_canon_avx512(_mm512_mul_ps(v, vs)));
    }
}
