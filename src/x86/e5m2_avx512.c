/* SPDX-License-Identifier: MIT */
/*
 * FP8 E5M2 quantize and dequantize with a per-tensor scale for AVX-512 F/BW/DQ/VL
 * (spec/formats.md §10), bit-identical to src/ref/e5m2_ref.c: q = E5M2_RNE_sat(fl(x / scale)) with
 * a true division, saturation to +-57344, NaN -> 0x7F | sign; decode fl(value(q) * scale) through
 * VCVTPH2PS, since E5M2 is the upper byte of binary16. The tail uses masked loads and stores, so
 * nothing past n is read or written.
 */
#include <immintrin.h>

#include "../core/kernels.h"

/* E5M2 codes of 16 floats, one per 32-bit lane (0...255). */
static inline __m512i e5m2_encode_avx512(__m512 y)
{
    const __m512i u = _mm512_castps_si512(y);
    const __m512i a = _mm512_and_si512(u, _mm512_set1_epi32(0x7FFFFFFF));
    /* below the smallest normal 2^-14 the quantum is 2^-16: rne(a * 2^16), exact scaling */
    __m512i sub =
        _mm512_cvtps_epi32(_mm512_mul_ps(_mm512_castsi512_ps(a), _mm512_set1_ps(0x1p16f)));
    /* normal: RNE at f32 mantissa bit 21, then rebias 127 -> 15; a carry rolls into the exponent */
    __m512i odd = _mm512_and_si512(_mm512_srli_epi32(a, 21), _mm512_set1_epi32(1));
    __m512i r = _mm512_add_epi32(_mm512_add_epi32(a, _mm512_set1_epi32(0xFFFFF)), odd);
    __m512i mag = _mm512_sub_epi32(_mm512_srli_epi32(r, 21), _mm512_set1_epi32(112 << 2));
    __mmask16 is_sub = _mm512_cmplt_epi32_mask(a, _mm512_set1_epi32(0x38800000));
    __mmask16 is_nan = _mm512_cmpgt_epi32_mask(a, _mm512_set1_epi32(0x7F800000));

    mag = _mm512_mask_mov_epi32(mag, is_sub, sub);
    /* saturating: from 61440 up (Inf included) the code is 0x7B, never the Inf code 0x7C */
    mag = _mm512_min_epi32(mag, _mm512_set1_epi32(0x7B));
    mag = _mm512_mask_mov_epi32(mag, is_nan, _mm512_set1_epi32(0x7F));
    return _mm512_or_si512(mag, _mm512_and_si512(_mm512_srli_epi32(u, 24),
                                                 _mm512_set1_epi32(0x80)));
}

void qs_e5m2_quant__avx512(const float *src, int64_t n, float scale, uint8_t *dst)
{
    const __m512 vs = _mm512_set1_ps(scale);
    int64_t i = 0;

    for (; i + 32 <= n; i += 32) {
        __m512i c0 = e5m2_encode_avx512(_mm512_div_ps(_mm512_loadu_ps(src + i), vs));
        __m512i c1 = e5m2_encode_avx512(_mm512_div_ps(_mm512_loadu_ps(src + i + 16), vs));
        _mm_storeu_si128((__m128i *)(dst + i), _mm512_cvtepi32_epi8(c0));
        _mm_storeu_si128((__m128i *)(dst + i + 16), _mm512_cvtepi32_epi8(c1));
    }
    for (; i < n; i += 16) {
        __mmask16 k = n - i >= 16 ? (__mmask16)0xFFFF : (__mmask16)((1u << (n - i)) - 1);
        __m512i c = e5m2_encode_avx512(_mm512_div_ps(_mm512_maskz_loadu_ps(k, src + i), vs));
        _mm512_mask_cvtepi32_storeu_epi8(dst + i, k, c);
    }
}

/* 16 E5M2 codes (bytes) -> 16 floats through binary16. */
static inline __m512 e5m2_decode_avx512(__m128i b)
{
    return _mm512_cvtph_ps(_mm256_slli_epi16(_mm256_cvtepu8_epi16(b), 8));
}

void qs_e5m2_dequant__avx512(const uint8_t *src, int64_t n, float scale, float *dst)
{
    const __m512 vs = _mm512_set1_ps(scale);
    int64_t i = 0;

    for (; i + 32 <= n; i += 32) {
        __m512 v0 = e5m2_decode_avx512(_mm_loadu_si128((const __m128i *)(src + i)));
        __m512 v1 = e5m2_decode_avx512(_mm_loadu_si128((const __m128i *)(src + i + 16)));
        _mm512_storeu_ps(dst + i, _mm512_mul_ps(v0, vs));
        _mm512_storeu_ps(dst + i + 16, _mm512_mul_ps(v1, vs));
    }
    for (; i < n; i += 16) {
        __mmask16 k = n - i >= 16 ? (__mmask16)0xFFFF : (__mmask16)((1u << (n - i)) - 1);
        __m512 v = e5m2_decode_avx512(_mm_maskz_loadu_epi8(k, src + i));
        _mm512_mask_storeu_ps(dst + i, k, _mm512_mul_ps(v, vs));
    }
}
