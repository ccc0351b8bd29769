/* SPDX-License-Identifier: MIT */
/*
 * OCP MXFP4 quantize and dequantize for AVX-512 F/BW/DQ/VL (docs/formats.md §11, §12, §13),
 * bit-identical to src/ref/mxfp4_ref.c. Per block of 32 (two vectors): any NaN/Inf gives scale
 * 0xFF and codes 0; otherwise the E8M0 byte comes from the exponent bits of amax (FLOOR:
 * floor(log2 amax) - 2, RCEIL: one more when the mantissa of amax exceeds that of 6), clamped at
 * 2^-127. Elements are scaled by the power of two 2^-shared_exp (a normal f32, so one multiply
 * rounds like ldexpf) and encoded E2M1 RNE, saturating, first element in the low nibble. A partial
 * last block is read with zero-masked loads, which is the format's +0.0 padding, and written with
 * masked stores, so nothing past n is read or written. The E2M1 rounding and the E8M0 block scale
 * are shared through minifloat_avx512.h.
 */
#include <immintrin.h>

#include "../core/kernels.h"
#include "../ref/ref.h"
#include "minifloat_avx512.h"
#include "nan_avx512.h"

/* One block of len (1...32) values: (len + 1) / 2 data bytes and the scale byte. */
static inline void mxfp4_block_avx512(const float *v, int64_t len, int32_t rounding,
                                      uint8_t *dst, uint8_t *scale)
{
    __mmask16 k0 = lane_mask_avx512(len), k1 = lane_mask_avx512(len - 16);
    int64_t nbytes = (len + 1) / 2;
    __mmask8 b0 = nbytes >= 8 ? (__mmask8)0xFF : (__mmask8)((1u << nbytes) - 1);
    __mmask8 b1 = nbytes >= 16 ? (__mmask8)0xFF
                  : nbytes > 8 ? (__mmask8)((1u << (nbytes - 8)) - 1) : (__mmask8)0;
    __m512 x0 = _mm512_maskz_loadu_ps(k0, v), x1 = _mm512_maskz_loadu_ps(k1, v + 16);
    if (mx_special_avx512(x0, x1)) {
        *scale = 0xFF; /* NaN block; element codes 0 [convention] (§13 step 1) */
        _mm_mask_storeu_epi8(dst, (__mmask16)(((uint32_t)b1 << 8) | b0), _mm_setzero_si128());
        return;
    }
    /* emax 2; RCEIL when the mantissa of amax exceeds that of 6 = 1.5 * 2^2 */
    uint8_t s = mx_block_scale_avx512(x0, x1, rounding, 2, 0x400000u);
    /* 2^(127 - s) with 127 - s in [-126, 127]: s <= 253 for finite amax */
    __m512 mul = mx_mul_avx512(s);
    __m512i c0 = e2m1_encode_finite_avx512(_mm512_mul_ps(x0, mul));
    __m512i c1 = e2m1_encode_finite_avx512(_mm512_mul_ps(x1, mul));

    *scale = s;
    _mm512_mask_cvtepi64_storeu_epi8(dst, b0, _mm512_or_si512(c0, _mm512_srli_epi64(c0, 28)));
    _mm512_mask_cvtepi64_storeu_epi8(dst + 8, b1, _mm512_or_si512(c1, _mm512_srli_epi64(c1, 28)));
}

/* Codes of one finite block, x * mul, as 16 data bytes: the two vectors' codes joined into the
 * bytes 0 and 1 of each 32-bit lane, each pair of lanes into nibbles, the bytes then sorted back. */
static inline void mxfp4_encode32_avx512(__m512 x0, __m512 x1, __m512 mul, uint8_t *dst)
{
    __m512i y = _mm512_or_si512(e2m1_encode_finite_avx512(_mm512_mul_ps(x0, mul)),
                                _mm512_slli_epi32(e2m1_encode_finite_avx512(_mm512_mul_ps(x1, mul)),
                                                  8));
    __m128i b = _mm512_cvtepi64_epi16(_mm512_or_si512(y, _mm512_srli_epi64(y, 28)));

    _mm_storeu_si128((__m128i *)dst,
                     _mm_shuffle_epi8(b, _mm_setr_epi8(0, 2, 4, 6, 8, 10, 12, 14, 1, 3, 5, 7, 9, 11,
                                                       13, 15)));
}

void qs_mxfp4_quant__avx512(const float *src, int64_t n, int32_t rounding, uint8_t *dst,
                            uint8_t *scales)
{
    /* emax 2; RCEIL when the mantissa of amax exceeds that of 6 = 1.5 * 2^2 */
    mx_quant_avx512(src, n, rounding, 2, 0x400000u, 2, mxfp4_encode32_avx512, mxfp4_block_avx512,
                    dst, scales);
}

/* 16 bytes of nibbles -> 32 codes in two vectors, element order. The bytes are interleaved with
 * themselves shifted right by 4 in 128-bit registers, then widened: two 512-bit operations
 * instead of four. The table permute reads only bits 0..3 of an index, so neither nibble needs a
 * mask (the high bits left by the 16-bit shift are never read). */
static inline void unpack_nibbles_avx512(__m128i b, __m512i *c0, __m512i *c1)
{
    __m128i h = _mm_srli_epi16(b, 4);

    *c0 = _mm512_cvtepu8_epi32(_mm_unpacklo_epi8(b, h));
    *c1 = _mm512_cvtepu8_epi32(_mm_unpackhi_epi8(b, h));
}

/* The E8M0 scales of 16 blocks from their bytes, as qs_e8m0_decode_inline: 2^(e - 127), 2^-127
 * (the subnormal 0x00400000) for 0, the canonical NaN for 0xFF. */
static inline __m512 e8m0_decode16_avx512(__m128i bytes)
{
    __m512i e = _mm512_cvtepu8_epi32(bytes);
    __m512i v = _mm512_slli_epi32(e, 23);

    v = _mm512_mask_mov_epi32(v, _mm512_cmpeq_epi32_mask(e, _mm512_setzero_si512()),
                              _mm512_set1_epi32(0x00400000));
    v = _mm512_mask_mov_epi32(v, _mm512_cmpeq_epi32_mask(e, _mm512_set1_epi32(0xFF)),
                              _mm512_set1_epi32((int32_t)QS_NAN_F32_BITS));
    return _mm512_castsi512_ps(v);
}

/*
 * Sixteen full blocks (512 values) per step: their scales decoded in one vector and read back per
 * block by a broadcast load, no scalar decode in the block loop. No NaN fix-up: E2M1 values are
 * finite and a scale is a power of two or the canonical NaN (0xFF), so a NaN product is always a
 * copy of that canonical operand (tests/test_kernels.c proves it over every code and scale byte).
 */
void qs_mxfp4_dequant__avx512(const uint8_t *src, const uint8_t *scales, int64_t n, float *dst)
{
    const __m512 table = _mm512_loadu_ps(qs_e2m1_values);
    int64_t b = 0;

    for (; (b + 16) * 32 <= n; b += 16) {
        float sc[16];

        _mm512_storeu_ps(sc, e8m0_decode16_avx512(_mm_loadu_si128((const __m128i *)(scales + b))));
        for (int k = 0; k < 16; k++) {
            __m512 scale = _mm512_set1_ps(sc[k]);
            __m512i c0, c1;

            unpack_nibbles_avx512(_mm_loadu_si128((const __m128i *)(src + (b + k) * 16)), &c0, &c1);
            _mm512_storeu_ps(dst + (b + k) * 32,
                             _mm512_mul_ps(_mm512_permutexvar_ps(c0, table), scale));
            _mm512_storeu_ps(dst + (b + k) * 32 + 16,
                             _mm512_mul_ps(_mm512_permutexvar_ps(c1, table), scale));
        }
    }
    for (; b * 32 < n; b++) { /* the last blocks, the partial one with masked loads and stores */
        int64_t len = n - b * 32 < 32 ? n - b * 32 : 32;
        int64_t nbytes = (len + 1) / 2;
        __mmask16 kb = lane_mask_avx512(nbytes);
        __mmask16 k0 = lane_mask_avx512(len), k1 = lane_mask_avx512(len - 16);
        __m512 scale = _mm512_set1_ps(qs_e8m0_decode_inline(scales[b]));
        __m512i c0, c1;

        unpack_nibbles_avx512(_mm_maskz_loadu_epi8(kb, src + b * 16), &c0, &c1);
        _mm512_mask_storeu_ps(dst + b * 32, k0,
                              _mm512_mul_ps(_mm512_permutexvar_ps(c0, table), scale));
        _mm512_mask_storeu_ps(dst + b * 32 + 16, k1,
                              _mm512_mul_ps(_mm512_permutexvar_ps(c1, table), scale));
    }
}
