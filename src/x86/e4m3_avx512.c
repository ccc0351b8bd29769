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

/* fl(value(q) * 2^-8 * s8) through the F16C decode, 64 values per step. canon = 0 (s8 finite)
 * needs no NaN fix-up: NaN codes decode to the canonical 0x7FC00000 and a finite E4M3 value times
 * a finite s8 is never NaN, so a NaN product is a copy of that operand (tests/test_kernels.c
 * proves it over all 256 codes). A constant at each call: two loops, neither with a select. */
static inline void e4m3_dequant_f16_avx512(const uint8_t *src, int64_t n, float s8, float *dst,
                                           int canon)
{
    const __m512 vs = _mm512_set1_ps(s8);
    int64_t i = 0;

    for (; i + 64 <= n; i += 64) {
        /* the NaN codes' fix-up only in a step that holds one */
        if (e4m3_any_nan64_avx512(src + i))
            for (int k = 0; k < 64; k += 16) {
                __m512 v = _mm512_mul_ps(
                    e4m3_decode16_f16_avx512(_mm_loadu_si128((const __m128i *)(src + i + k))), vs);
                _mm512_storeu_ps(dst + i + k, canon ? nan_canon_avx512(v) : v);
            }
        else
            for (int k = 0; k < 64; k += 16) {
                __m512 v = _mm512_mul_ps(
                    e4m3_decode16_f16_nonan_avx512(_mm_loadu_si128((const __m128i *)(src + i + k))),
                    vs);
                _mm512_storeu_ps(dst + i + k, canon ? nan_canon_avx512(v) : v);
            }
    }
    for (; i < n; i += 16) {
        __mmask16 k = lane_mask_avx512(n - i);
        __m512 v = _mm512_mul_ps(e4m3_decode16_f16_avx512(_mm_maskz_loadu_epi8(k, src + i)), vs);
        _mm512_mask_storeu_ps(dst + i, k, canon ? nan_canon_avx512(v) : v);
    }
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
    if ((qs_f32_bits(s8) & fin) == fin)
        e4m3_dequant_f16_avx512(src, n, s8, dst, 1); /* NaN or Inf scale: Inf * 0, payloads */
    else
        e4m3_dequant_f16_avx512(src, n, s8, dst, 0);
}
