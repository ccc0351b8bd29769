/* SPDX-License-Identifier: MIT */
/*
 * OCP MXFP8 (E4M3 elements) quantize and dequantize for AVX-512 F/BW/DQ/VL (spec/formats.md §10,
 * §12, §13), bit-identical to src/ref/mxfp8_ref.c. Per block of 32 (two vectors): any NaN/Inf
 * gives scale 0xFF and codes 0; otherwise the E8M0 byte comes from the exponent bits of amax
 * (FLOOR: floor(log2 amax) - 8, RCEIL: one more when the mantissa of amax exceeds that of 448),
 * clamped at 2^-127. Elements are scaled by the power of two 2^-shared_exp (a normal f32, so one
 * multiply rounds like ldexpf) and encoded E4M3 RNE, saturating. A partial last block is read with
 * zero-masked loads (the spec's +0.0 padding) and written with masked stores, so nothing past n is
 * read or written.
 */
#include <immintrin.h>

#include "../core/kernels.h"
#include "../ref/ref.h"

/* E4M3 codes of 16 finite floats, one per 32-bit lane (NaN cannot reach this encoder). */
static inline __m512i e4m3_encode_finite_avx512(__m512 y)
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

    mag = _mm512_mask_mov_epi32(mag, _mm512_cmplt_epi32_mask(a, _mm512_set1_epi32(0x3C800000)),
                                sub);
    mag = _mm512_min_epi32(mag, _mm512_set1_epi32(0x7E)); /* saturate to 448 */
    return _mm512_or_si512(mag, _mm512_and_si512(_mm512_srli_epi32(u, 24),
                                                 _mm512_set1_epi32(0x80)));
}

/* Values of 16 E4M3 codes (0...255 per 32-bit lane), exact; 0x7F / 0xFF give NaN with the sign. */
static inline __m512 e4m3_decode_avx512(__m512i c)
{
    const __m512i m = _mm512_and_si512(c, _mm512_set1_epi32(0x7F));
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

/* The E8M0 byte of a block without NaN/Inf from its amax (>= 0), FLOOR or RCEIL (§13). */
static inline uint8_t mxfp8_scale_avx512(float amax, int32_t rounding)
{
    uint32_t b = qs_f32_bits(amax);
    /* biased exponent minus emax = floor(log2 amax) - 8 + 127; subnormal or zero amax clamps */
    int32_t e = (int32_t)(b >> 23) - 8;

    if (rounding != 0 && (b & 0x7FFFFFu) > 0x600000u)
        e++; /* amax > 448 * 2^(e - 127): one binade up, so that nothing clips */
    return (uint8_t)(e < 0 ? 0 : e);
}

/* One block of len (1...32) values: len data bytes and the scale byte. */
static inline void mxfp8_block_avx512(const float *v, int64_t len, int32_t rounding,
                                      uint8_t *dst, uint8_t *scale)
{
    const __m512i expo = _mm512_set1_epi32(0x7F800000);
    __mmask16 k0 = len >= 16 ? (__mmask16)0xFFFF : (__mmask16)((1u << len) - 1);
    __mmask16 k1 = len >= 32 ? (__mmask16)0xFFFF
                   : len > 16 ? (__mmask16)((1u << (len - 16)) - 1) : (__mmask16)0;
    __m512 x0 = _mm512_maskz_loadu_ps(k0, v), x1 = _mm512_maskz_loadu_ps(k1, v + 16);
    __mmask16 special =
        _mm512_cmpeq_epi32_mask(_mm512_and_si512(_mm512_castps_si512(x0), expo), expo) |
        _mm512_cmpeq_epi32_mask(_mm512_and_si512(_mm512_castps_si512(x1), expo), expo);

    if (special) {
        *scale = 0xFF; /* NaN block; element codes 0 [convention] (§13 step 1) */
        _mm_mask_storeu_epi8(dst, k0, _mm_setzero_si128());
        _mm_mask_storeu_epi8(dst + 16, k1, _mm_setzero_si128());
        return;
    }
    uint8_t s = mxfp8_scale_avx512(
        _mm512_reduce_max_ps(_mm512_max_ps(_mm512_abs_ps(x0), _mm512_abs_ps(x1))), rounding);
    /* 2^(127 - s) with 127 - s in [-119, 127]: s <= 247 for finite amax */
    __m512 mul = _mm512_castsi512_ps(_mm512_set1_epi32((int32_t)(254 - s) << 23));

    *scale = s;
    _mm512_mask_cvtepi32_storeu_epi8(dst, k0, e4m3_encode_finite_avx512(_mm512_mul_ps(x0, mul)));
    _mm512_mask_cvtepi32_storeu_epi8(dst + 16, k1,
                                     e4m3_encode_finite_avx512(_mm512_mul_ps(x1, mul)));
}

void qs_mxfp8_quant__avx512(const float *src, int64_t n, int32_t rounding, uint8_t *dst,
                            uint8_t *scales)
{
    for (int64_t b = 0; b * 32 < n; b++) {
        int64_t len = n - b * 32 < 32 ? n - b * 32 : 32;
        mxfp8_block_avx512(src + b * 32, len, rounding, dst + b * 32, scales + b);
    }
}

void qs_mxfp8_dequant__avx512(const uint8_t *src, const uint8_t *scales, int64_t n, float *dst)
{
    for (int64_t b = 0; b * 32 < n; b++) {
        int64_t len = n - b * 32 < 32 ? n - b * 32 : 32;
        __mmask16 k0 = len >= 16 ? (__mmask16)0xFFFF : (__mmask16)((1u << len) - 1);
        __mmask16 k1 = len >= 32 ? (__mmask16)0xFFFF
                       : len > 16 ? (__mmask16)((1u << (len - 16)) - 1) : (__mmask16)0;
        __m512 scale = _mm512_set1_ps(qs_ref_e8m0_decode(scales[b]));
        __m512i c0 = _mm512_cvtepu8_epi32(_mm_maskz_loadu_epi8(k0, src + b * 32));
        __m512i c1 = _mm512_cvtepu8_epi32(_mm_maskz_loadu_epi8(k1, src + b * 32 + 16));

        _mm512_mask_storeu_ps(dst + b * 32, k0, _mm512_mul_ps(e4m3_decode_avx512(c0), scale));
        _mm512_mask_storeu_ps(dst + b * 32 + 16, k1,
                              _mm512_mul_ps(e4m3_decode_avx512(c1), scale));
    }
}
