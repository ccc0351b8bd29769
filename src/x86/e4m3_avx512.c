/* SPDX-License-Identifier: MIT */
/*
 * FP8 E4M3 ("fn") quantize and dequantize with a per-tensor scale for AVX-512 F/BW/DQ/VL
 * (spec/formats.md §10), bit-identical to src/ref/e4m3_ref.c: q = E4M3_RNE_sat(fl(x / scale)) with
 * a true division, NaN -> 0x7F | sign, decode fl(value(q) * scale). Same integer-domain rounding
 * as e4m3_avx2.c on 16 lanes; the tail uses masked loads and stores, so nothing past n is read or
 * written.
 */
#include <immintrin.h>

#include "../core/kernels.h"

/* E4M3 codes of 16 floats, one per 32-bit lane (0...255). */
static inline __m512i e4m3_encode_avx512(__m512 y)
{
    const __m512i u = _mm512_castps_si512(y);
    const __m512i a = _mm512_and_si512(u, _mm512_set1_epi32(0x7FFFFFFF));
    /* below the smallest normal 2^-6 every value has the quantum 2^-9: rne(a * 2^9), exact */
    __m512i sub =
        _mm512_cvtps_epi32(_mm512_mul_ps(_mm512_castsi512_ps(a), _mm512_set1_ps(0x1p9f)));
    /* normal: RNE at f32 mantissa bit 20, then rebias 127 -> 7; a carry rolls into the exponent */
    __m512i odd = _mm512_and_si512(_mm512_srli_epi32(a, 20), _mm512_set1_epi32(1));
    __m512i r = _mm512_add_epi32(_mm512_add_epi32(a, _mm512_set1_epi32(0x7FFFF)), odd);
    __m512i mag = _mm512_sub_epi32(_mm512_srli_epi32(r, 20), _mm512_set1_epi32(120 << 3));
    __mmask16 is_sub = _mm512_cmplt_epi32_mask(a, _mm512_set1_epi32(0x3C800000));
    __mmask16 is_nan = _mm512_cmpgt_epi32_mask(a, _mm512_set1_epi32(0x7F800000));

    mag = _mm512_mask_mov_epi32(mag, is_sub, sub);
    /* saturating: everything above 448 (Inf included) becomes 0x7E */
    mag = _mm512_min_epi32(mag, _mm512_set1_epi32(0x7E));
    mag = _mm512_mask_mov_epi32(mag, is_nan, _mm512_set1_epi32(0x7F));
    return _mm512_or_si512(mag, _mm512_and_si512(_mm512_srli_epi32(u, 24),
                                                 _mm512_set1_epi32(0x80)));
}

/* Values of 16 E4M3 codes (0...255 per 32-bit lane), exact. */
static inline __m512 e4m3_decode_avx512(__m512i c)
{
    const __m512i m = _mm512_and_si512(c, _mm512_set1_epi32(0x7F));
    /* normal: exponent field e -> e + 120, mantissa to the top of the f32 mantissa */
    __m512i v = _mm512_add_epi32(_mm512_slli_epi32(m, 20), _mm512_set1_epi32(120 << 23));
    /* subnormal (e = 0): m * 2^-9, computed from an integer so no f32 denormal is touched */
    __m512i sub = _mm512_castps_si512(
        _mm512_mul_ps(_mm512_cvtepi32_ps(m), _mm512_set1_ps(0x1p-9f)));

    v = _mm512_mask_mov_epi32(v, _mm512_cmplt_epi32_mask(m, _mm512_set1_epi32(8)), sub);
    v = _mm512_mask_mov_epi32(v, _mm512_cmpeq_epi32_mask(m, _mm512_set1_epi32(0x7F)),
                              _mm512_set1_epi32(0x7FC00000));
    v = _mm512_or_si512(v, _mm512_slli_epi32(_mm512_and_si512(c, _mm512_set1_epi32(0x80)), 24));
    return _mm512_castsi512_ps(v);
}

void qs_e4m3_quant__avx512(const float *src, int64_t n, float scale, uint8_t *dst)
{
    const __m512 vs = _mm512_set1_ps(scale);
    int64_t i = 0;

    for (; i + 32 <= n; i += 32) {
        __m512i c0 = e4m3_encode_avx512(_mm512_div_ps(_mm512_loadu_ps(src + i), vs));
        __m512i c1 = e4m3_encode_avx512(_mm512_div_ps(_mm512_loadu_ps(src + i + 16), vs));
        _mm_storeu_si128((__m128i *)(dst + i), _mm512_cvtepi32_epi8(c0));
        _mm_storeu_si128((__m128i *)(dst + i + 16), _mm512_cvtepi32_epi8(c1));
    }
    for (; i < n; i += 16) {
        __mmask16 k = n - i >= 16 ? (__mmask16)0xFFFF : (__mmask16)((1u << (n - i)) - 1);
        __m512i c = e4m3_encode_avx512(_mm512_div_ps(_mm512_maskz_loadu_ps(k, src + i), vs));
        _mm512_mask_cvtepi32_storeu_epi8(dst + i, k, c);
    }
}

void qs_e4m3_dequant__avx512(const uint8_t *src, int64_t n, float scale, float *dst)
{
    const __m512 vs = _mm512_set1_ps(scale);
    int64_t i = 0;

    for (; i + 32 <= n; i += 32) {
        __m512i c0 = _mm512_cvtepu8_epi32(_mm_loadu_si128((const __m128i *)(src + i)));
        __m512i c1 = _mm512_cvtepu8_epi32(_mm_loadu_si128((const __m128i *)(src + i + 16)));
        _mm512_storeu_ps(dst + i, _mm512_mul_ps(e4m3_decode_avx512(c0), vs));
        _mm512_storeu_ps(dst + i + 16, _mm512_mul_ps(e4m3_decode_avx512(c1), vs));
    }
    for (; i < n; i += 16) {
        __mmask16 k = n - i >= 16 ? (__mmask16)0xFFFF : (__mmask16)((1u << (n - i)) - 1);
        __m512i c = _mm512_cvtepu8_epi32(_mm_maskz_loadu_epi8(k, src + i));
        _mm512_mask_storeu_ps(dst + i, k, _mm512_mul_ps(e4m3_decode_avx512(c), vs));
    }
}
