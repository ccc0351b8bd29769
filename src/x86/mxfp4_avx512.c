/* SPDX-License-Identifier: MIT */
/*
 * OCP MXFP4 quantize and dequantize for AVX-512 F/BW/DQ/VL (spec/formats.md §11, §12, §13),
 * bit-identical to src/ref/mxfp4_ref.c. Per block of 32 (two vectors): any NaN/Inf gives scale
 * 0xFF and codes 0; otherwise the E8M0 byte comes from the exponent bits of amax (FLOOR:
 * floor(log2 amax) - 2, RCEIL: one more when the mantissa of amax exceeds that of 6), clamped at
 * 2^-127. Elements are scaled by the power of two 2^-shared_exp (a normal f32, so one multiply
 * rounds like ldexpf) and encoded E2M1 RNE, saturating, first element in the low nibble. A partial
 * last block is read with zero-masked loads, which is the spec's +0.0 padding, and written with
 * masked stores, so nothing past n is read or written.
 */
#include <immintrin.h>

#include "../core/kernels.h"
#include "../ref/ref.h"

/* E2M1 codes (0...15) of 16 finite floats, one per 32-bit lane. */
static inline __m512i e2m1_encode_avx512(__m512 y)
{
    const __m512i u = _mm512_castps_si512(y);
    const __m512i a = _mm512_and_si512(u, _mm512_set1_epi32(0x7FFFFFFF));
    /* below the smallest normal 1.0 the quantum is 0.5: rne(a * 2), exact scaling */
    __m512i sub =
        _mm512_cvtps_epi32(_mm512_mul_ps(_mm512_castsi512_ps(a), _mm512_set1_ps(2.0f)));
    /* normal: RNE at f32 mantissa bit 22, then rebias 127 -> 1; a carry rolls into the exponent */
    __m512i odd = _mm512_and_si512(_mm512_srli_epi32(a, 22), _mm512_set1_epi32(1));
    __m512i r = _mm512_add_epi32(_mm512_add_epi32(a, _mm512_set1_epi32(0x1FFFFF)), odd);
    __m512i mag = _mm512_sub_epi32(_mm512_srli_epi32(r, 22), _mm512_set1_epi32(126 << 1));

    mag = _mm512_mask_mov_epi32(mag, _mm512_cmplt_epi32_mask(a, _mm512_set1_epi32(0x3F800000)),
                                sub);
    mag = _mm512_min_epi32(mag, _mm512_set1_epi32(7)); /* saturate to 6 */
    return _mm512_or_si512(mag, _mm512_and_si512(_mm512_srli_epi32(u, 28), _mm512_set1_epi32(8)));
}

/* Join 16 codes pairwise into 8 bytes (element 2j low nibble), in the low 64 bits. */
static inline __m128i pack_nibbles_avx512(__m512i c)
{
    return _mm512_cvtepi64_epi8(_mm512_or_si512(c, _mm512_srli_epi64(c, 28)));
}

/* The E8M0 byte of a block without NaN/Inf from its amax (>= 0), FLOOR or RCEIL (§13). */
static inline uint8_t mxfp4_scale_avx512(float amax, int32_t rounding)
{
    uint32_t b = qs_f32_bits(amax);
    /* biased exponent minus emax = floor(log2 amax) - 2 + 127; subnormal or zero amax clamps */
    int32_t e = (int32_t)(b >> 23) - 2;

    if (rounding != 0 && (b & 0x7FFFFFu) > 0x400000u)
        e++; /* amax > 6 * 2^(e - 127): one binade up, so that nothing clips */
    return (uint8_t)(e < 0 ? 0 : e);
}

/* One block of len (1...32) values: (len + 1) / 2 data bytes and the scale byte. */
static inline void mxfp4_block_avx512(const float *v, int64_t len, int32_t rounding,
                                      uint8_t *dst, uint8_t *scale)
{
    const __m512i expo = _mm512_set1_epi32(0x7F800000);
    __mmask16 k0 = len >= 16 ? (__mmask16)0xFFFF : (__mmask16)((1u << len) - 1);
    __mmask16 k1 = len >= 32 ? (__mmask16)0xFFFF
                   : len > 16 ? (__mmask16)((1u << (len - 16)) - 1) : (__mmask16)0;
    int64_t nbytes = (len + 1) / 2;
    __mmask8 b0 = nbytes >= 8 ? (__mmask8)0xFF : (__mmask8)((1u << nbytes) - 1);
    __mmask8 b1 = nbytes >= 16 ? (__mmask8)0xFF
                  : nbytes > 8 ? (__mmask8)((1u << (nbytes - 8)) - 1) : (__mmask8)0;
    __m512 x0 = _mm512_maskz_loadu_ps(k0, v), x1 = _mm512_maskz_loadu_ps(k1, v + 16);
    __mmask16 special =
        _mm512_cmpeq_epi32_mask(_mm512_and_si512(_mm512_castps_si512(x0), expo), expo) |
        _mm512_cmpeq_epi32_mask(_mm512_and_si512(_mm512_castps_si512(x1), expo), expo);

    if (special) {
        *scale = 0xFF; /* NaN block; element codes 0 [convention] (§13 step 1) */
        _mm_mask_storeu_epi8(dst, (__mmask16)(((uint32_t)b1 << 8) | b0), _mm_setzero_si128());
        return;
    }
    uint8_t s = mxfp4_scale_avx512(
        _mm512_reduce_max_ps(_mm512_max_ps(_mm512_abs_ps(x0), _mm512_abs_ps(x1))), rounding);
    /* 2^(127 - s) with 127 - s in [-126, 127]: s <= 253 for finite amax */
    __m512 mul = _mm512_castsi512_ps(_mm512_set1_epi32((int32_t)(254 - s) << 23));
    __m512i c0 = e2m1_encode_avx512(_mm512_mul_ps(x0, mul));
    __m512i c1 = e2m1_encode_avx512(_mm512_mul_ps(x1, mul));

    *scale = s;
    _mm512_mask_cvtepi64_storeu_epi8(dst, b0, _mm512_or_si512(c0, _mm512_srli_epi64(c0, 28)));
    _mm512_mask_cvtepi64_storeu_epi8(dst + 8, b1, _mm512_or_si512(c1, _mm512_srli_epi64(c1, 28)));
}

void qs_mxfp4_quant__avx512(const float *src, int64_t n, int32_t rounding, uint8_t *dst,
                            uint8_t *scales)
{
    int64_t b = 0;

    for (; (b + 1) * 32 <= n; b++) {
        const float *v = src + b * 32;
        __m512 x0 = _mm512_loadu_ps(v), x1 = _mm512_loadu_ps(v + 16);
        const __m512i expo = _mm512_set1_epi32(0x7F800000);
        __mmask16 special =
            _mm512_cmpeq_epi32_mask(_mm512_and_si512(_mm512_castps_si512(x0), expo), expo) |
            _mm512_cmpeq_epi32_mask(_mm512_and_si512(_mm512_castps_si512(x1), expo), expo);
        if (special) {
            mxfp4_block_avx512(v, 32, rounding, dst + b * 16, scales + b);
            continue;
        }
        uint8_t s = mxfp4_scale_avx512(
            _mm512_reduce_max_ps(_mm512_max_ps(_mm512_abs_ps(x0), _mm512_abs_ps(x1))), rounding);
        __m512 mul = _mm512_castsi512_ps(_mm512_set1_epi32((int32_t)(254 - s) << 23));
        __m128i lo = pack_nibbles_avx512(e2m1_encode_avx512(_mm512_mul_ps(x0, mul)));
        __m128i hi = pack_nibbles_avx512(e2m1_encode_avx512(_mm512_mul_ps(x1, mul)));
        scales[b] = s;
        _mm_storeu_si128((__m128i *)(dst + b * 16), _mm_unpacklo_epi64(lo, hi));
    }
    if (b * 32 < n)
        mxfp4_block_avx512(src + b * 32, n - b * 32, rounding, dst + b * 16, scales + b);
}

/* 16 bytes of nibbles -> 32 codes in two vectors, element order. */
static inline void unpack_nibbles_avx512(__m128i b, __m512i *c0, __m512i *c1)
{
    __m512i w = _mm512_cvtepu8_epi32(b);
    __m512i lo = _mm512_and_si512(w, _mm512_set1_epi32(0xF));
    __m512i hi = _mm512_srli_epi32(w, 4);

    *c0 = _mm512_permutex2var_epi32(lo, _mm512_setr_epi32(0, 16, 1, 17, 2, 18, 3, 19, 4, 20, 5,
                                                          21, 6, 22, 7, 23), hi);
    *c1 = _mm512_permutex2var_epi32(lo, _mm512_setr_epi32(8, 24, 9, 25, 10, 26, 11, 27, 12, 28,
                                                          13, 29, 14, 30, 15, 31), hi);
}

void qs_mxfp4_dequant__avx512(const uint8_t *src, const uint8_t *scales, int64_t n, float *dst)
{
    const __m512 table = _mm512_loadu_ps(qs_e2m1_values);

    for (int64_t b = 0; b * 32 < n; b++) {
        int64_t len = n - b * 32 < 32 ? n - b * 32 : 32;
        int64_t nbytes = (len + 1) / 2;
        __mmask16 kb = nbytes >= 16 ? (__mmask16)0xFFFF : (__mmask16)((1u << nbytes) - 1);
        __mmask16 k0 = len >= 16 ? (__mmask16)0xFFFF : (__mmask16)((1u << len) - 1);
        __mmask16 k1 = len >= 32 ? (__mmask16)0xFFFF
                       : len > 16 ? (__mmask16)((1u << (len - 16)) - 1) : (__mmask16)0;
        __m512 scale = _mm512_set1_ps(qs_ref_e8m0_decode(scales[b]));
        __m512i c0, c1;

        unpack_nibbles_avx512(_mm_maskz_loadu_epi8(kb, src + b * 16), &c0, &c1);
        _mm512_mask_storeu_ps(dst + b * 32, k0,
                              _mm512_mul_ps(_mm512_permutexvar_ps(c0, table), scale));
        _mm512_mask_storeu_ps(dst + b * 32 + 16, k1,
                              _mm512_mul_ps(_mm512_permutexvar_ps(c1, table), scale));
    }
}
