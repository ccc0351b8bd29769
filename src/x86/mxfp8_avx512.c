/* SPDX-License-Identifier: MIT */
/*
 * OCP MXFP8 (E4M3 elements) quantize and dequantize for AVX-512 F/BW/DQ/VL (docs/formats.md §10,
 * §12, §13), bit-identical to src/ref/mxfp8_ref.c. Per block of 32 (two vectors): any NaN/Inf
 * gives scale 0xFF and codes 0; otherwise the E8M0 byte comes from the exponent bits of amax
 * (FLOOR: floor(log2 amax) - 8, RCEIL: one more when the mantissa of amax exceeds that of 448),
 * clamped at 2^-127. Elements are scaled by the power of two 2^-shared_exp (a normal f32, so one
 * multiply rounds like ldexpf) and encoded E4M3 RNE, saturating. A partial last block is read with
 * zero-masked loads (the format's +0.0 padding) and written with masked stores, so nothing past n
 * is read or written. The E4M3 rounding and the E8M0 block scale are shared through
 * minifloat_avx512.h.
 */
#include <immintrin.h>

#include "../core/kernels.h"
#include "../ref/ref.h"
#include "minifloat_avx512.h"
#include "nan_avx512.h"

/* One block of len (1...32) values: len data bytes and the scale byte. */
static inline void mxfp8_block_avx512(const float *v, int64_t len, int32_t rounding,
                                      uint8_t *dst, uint8_t *scale)
{
    __mmask16 k0 = lane_mask_avx512(len), k1 = lane_mask_avx512(len - 16);
    __m512 x0 = _mm512_maskz_loadu_ps(k0, v), x1 = _mm512_maskz_loadu_ps(k1, v + 16);
    if (mx_special_avx512(x0, x1)) {
        *scale = 0xFF; /* NaN block; element codes 0 [convention] (§13 step 1) */
        _mm_mask_storeu_epi8(dst, k0, _mm_setzero_si128());
        _mm_mask_storeu_epi8(dst + 16, k1, _mm_setzero_si128());
        return;
    }
    /* emax 8; RCEIL when the mantissa of amax exceeds that of 448 = 1.75 * 2^8 */
    uint8_t s = mx_block_scale_avx512(x0, x1, rounding, 8, 0x600000u);
    /* 2^(127 - s) with 127 - s in [-119, 127]: s <= 247 for finite amax */
    __m512 mul = mx_mul_avx512(s);

    *scale = s;
    _mm512_mask_cvtepi32_storeu_epi8(dst, k0, e4m3_encode_finite_avx512(_mm512_mul_ps(x0, mul)));
    _mm512_mask_cvtepi32_storeu_epi8(dst + 16, k1,
                                     e4m3_encode_finite_avx512(_mm512_mul_ps(x1, mul)));
}

/* Codes of one finite block, x * mul, as 32 data bytes. */
static inline void mxfp8_encode32_avx512(__m512 x0, __m512 x1, __m512 mul, uint8_t *dst)
{
    _mm_storeu_si128((__m128i *)dst,
                     _mm512_cvtepi32_epi8(e4m3_encode_finite_avx512(_mm512_mul_ps(x0, mul))));
    _mm_storeu_si128((__m128i *)(dst + 16),
                     _mm512_cvtepi32_epi8(e4m3_encode_finite_avx512(_mm512_mul_ps(x1, mul))));
}

void qs_mxfp8_quant__avx512(const float *src, int64_t n, int32_t rounding, uint8_t *dst,
                            uint8_t *scales)
{
    /* emax 8; RCEIL when the mantissa of amax exceeds that of 448 = 1.75 * 2^8 */
    mx_quant_avx512(src, n, rounding, 8, 0x600000u, 1, mxfp8_encode32_avx512, mxfp8_block_avx512,
                    dst, scales);
}

/* One block of len (1...32) values with any scale byte: the general decode (also the partial last
 * block and the rare scales 247...254, where 2^(e - 119) would overflow). */
static inline void mxfp8_dequant_block_avx512(const uint8_t *src, uint8_t e, int64_t len,
                                              float *dst)
{
    __mmask16 k0 = lane_mask_avx512(len), k1 = lane_mask_avx512(len - 16);
    __m128i b0 = _mm_maskz_loadu_epi8(k0, src), b1 = _mm_maskz_loadu_epi8(k1, src + 16);
    __m512 v0, v1, scale;

    if (e <= 246 || e == 0xFF) {
        /* value * 2^(e - 127) = (value * 2^-8) * 2^(e - 119), one rounding of the same product;
         * 2^(e - 119) is a normal f32 (e = 0 included), NaN for 0xFF */
        scale = _mm512_set1_ps(e == 0xFF ? qs_f32_from_bits(QS_NAN_F32_BITS)
                                         : qs_f32_from_bits((uint32_t)(e + 8) << 23));
        v0 = e4m3_decode16_f16_avx512(b0);
        v1 = e4m3_decode16_f16_avx512(b1);
    } else { /* 2^(e - 119) would overflow */
        scale = _mm512_set1_ps(qs_e8m0_decode_inline(e));
        v0 = e4m3_decode_avx512(_mm512_cvtepu8_epi32(b0));
        v1 = e4m3_decode_avx512(_mm512_cvtepu8_epi32(b1));
    }
    _mm512_mask_storeu_ps(dst, k0, nan_canon_avx512(_mm512_mul_ps(v0, scale)));
    _mm512_mask_storeu_ps(dst + 16, k1, nan_canon_avx512(_mm512_mul_ps(v1, scale)));
}

/*
 * Sixteen full blocks (512 values) per step: their scales 2^(e - 119) (NaN for 0xFF) computed in
 * one vector and read back per block by a broadcast load, no scalar decode in the block loop. A
 * group holding a scale byte 247...254 goes block by block through the general decode. No NaN
 * fix-up on this path: the F16C decode gives NaN codes the canonical 0x7FC00000, the scale is
 * normal or that same NaN, and a finite E4M3 value times a normal number is never NaN, so every
 * NaN product is a copy of a canonical operand (tests/test_kernels.c proves it over all 256 x 256
 * code and scale bytes).
 */
void qs_mxfp8_dequant__avx512(const uint8_t *src, const uint8_t *scales, int64_t n, float *dst)
{
    int64_t b = 0;

    for (; (b + 16) * 32 <= n; b += 16) {
        __m512i e = _mm512_cvtepu8_epi32(_mm_loadu_si128((const __m128i *)(scales + b)));
        __mmask16 nan = _mm512_cmpeq_epi32_mask(e, _mm512_set1_epi32(0xFF));
        __mmask16 big = _mm512_cmpgt_epi32_mask(e, _mm512_set1_epi32(246)) & (__mmask16)~nan;
        float sc[16];

        if (big) {
            for (int k = 0; k < 16; k++)
                mxfp8_dequant_block_avx512(src + (b + k) * 32, scales[b + k], 32,
                                           dst + (b + k) * 32);
            continue;
        }
        _mm512_storeu_ps(sc, _mm512_castsi512_ps(_mm512_mask_mov_epi32(
                                 _mm512_slli_epi32(_mm512_add_epi32(e, _mm512_set1_epi32(8)), 23),
                                 nan, _mm512_set1_epi32((int32_t)QS_NAN_F32_BITS))));
        for (int k = 0; k < 16; k += 2) {
            const uint8_t *s = src + (b + k) * 32;
            __m512 s0 = _mm512_set1_ps(sc[k]), s1 = _mm512_set1_ps(sc[k + 1]);
            __m512 v[4];

            /* two blocks of codes: the NaN codes' fix-up only where one of them is there */
            if (e4m3_any_nan64_avx512(s))
                for (int h = 0; h < 4; h++)
                    v[h] = e4m3_decode16_f16_avx512(_mm_loadu_si128((const __m128i *)(s + 16 * h)));
            else
                for (int h = 0; h < 4; h++)
                    v[h] = e4m3_decode16_f16_nonan_avx512(
                        _mm_loadu_si128((const __m128i *)(s + 16 * h)));
            _mm512_storeu_ps(dst + (b + k) * 32, _mm512_mul_ps(v[0], s0));
            _mm512_storeu_ps(dst + (b + k) * 32 + 16, _mm512_mul_ps(v[1], s0));
            _mm512_storeu_ps(dst + (b + k) * 32 + 32, _mm512_mul_ps(v[2], s1));
            _mm512_storeu_ps(dst + (b + k) * 32 + 48, _mm512_mul_ps(v[3], s1));
        }
    }
    for (; b * 32 < n; b++)
        mxfp8_dequant_block_avx512(src + b * 32, scales[b], n - b * 32 < 32 ? n - b * 32 : 32,
                                   dst + b * 32);
}
