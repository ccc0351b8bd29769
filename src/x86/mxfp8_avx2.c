/* SPDX-License-Identifier: MIT */
/*
 * OCP MXFP8 (E4M3 elements) quantize and dequantize for AVX2 + FMA + F16C (docs/formats.md §10,
 * §12, §13), bit-identical to src/ref/mxfp8_ref.c. Per block of 32: any NaN/Inf gives scale 0xFF
 * and codes 0; otherwise the E8M0 byte comes from the exponent bits of amax (FLOOR:
 * floor(log2 amax) - 8, RCEIL: one more when the mantissa of amax exceeds that of
 * 448 = 1.75 * 2^8), clamped at 2^-127. Elements are scaled by the power of two 2^-shared_exp
 * (a normal f32 here, so one multiply rounds exactly like ldexpf) and encoded E4M3 RNE, saturating.
 * A partial last block goes through a zero-padded local block (the format's +0.0 padding), so
 * nothing past n is read or written. The E4M3 rounding and the E8M0 block scale are shared through
 * minifloat_avx2.h.
 */
#include <immintrin.h>

#include "../core/kernels.h"
#include "../ref/ref.h"
#include "minifloat_avx2.h"
#include "nan_avx2.h"

/* Codes of the 32 values x[k] * mul of a finite block (mul = 2^(127 - s) with 127 - s in
 * [-119, 127]: s <= 247 for finite amax). */
static inline void mxfp8_encode32_avx2(const __m256 x[4], __m256 mul, uint8_t *dst)
{
    __m256i c0 = e4m3_encode_finite_avx2(_mm256_mul_ps(x[0], mul));
    __m256i c1 = e4m3_encode_finite_avx2(_mm256_mul_ps(x[1], mul));
    __m256i c2 = e4m3_encode_finite_avx2(_mm256_mul_ps(x[2], mul));
    __m256i c3 = e4m3_encode_finite_avx2(_mm256_mul_ps(x[3], mul));

    _mm256_storeu_si256((__m256i *)dst, pack_bytes_avx2(c0, c1, c2, c3));
}

void qs_mxfp8_quant__avx2(const float *src, int64_t n, int32_t rounding, uint8_t *dst,
                          uint8_t *scales)
{
    /* emax 8; RCEIL when the mantissa of amax exceeds that of 448 = 1.75 * 2^8 */
    mx_quant_avx2(src, n, rounding, 8, 0x600000u, 1, mxfp8_encode32_avx2, dst, scales);
}

/* 32 codes -> 32 floats, each times the block's scale. */
static inline void mxfp8_dequant32_avx2(const uint8_t *src, __m256 scale, float *dst,
                                        const void *tab)
{
    (void)tab;
    for (int k = 0; k < 4; k++) {
        __m256i c = _mm256_cvtepu8_epi32(_mm_loadl_epi64((const __m128i *)(src + 8 * k)));
        _mm256_storeu_ps(dst + 8 * k, nan_canon_avx2(_mm256_mul_ps(e4m3_decode_avx2(c), scale)));
    }
}

/* 32 codes -> 32 floats through F16C, each times s8 = 2^8 * the block's scale (a normal number,
 * or the canonical NaN). No NaN fix-up: NaN codes decode to the canonical NaN and a finite E4M3
 * value times a normal number is never NaN, so a NaN product is a copy of a canonical operand
 * (tests/test_kernels.c proves it over all 256 x 256 code and scale bytes). */
static inline void mxfp8_dequant32_f16_avx2(const uint8_t *src, __m256 s8, float *dst)
{
    for (int k = 0; k < 2; k++) {
        __m256 v0, v1;
        e4m3_decode16_f16_avx2(_mm_loadu_si128((const __m128i *)(src + 16 * k)), &v0, &v1);
        _mm256_storeu_ps(dst + 16 * k, _mm256_mul_ps(v0, s8));
        _mm256_storeu_ps(dst + 16 * k + 8, _mm256_mul_ps(v1, s8));
    }
}

void qs_mxfp8_dequant__avx2(const uint8_t *src, const uint8_t *scales, int64_t n, float *dst)
{
    int64_t b = 0;

    for (; (b + 1) * 32 <= n; b++) {
        uint8_t e = scales[b];
        if (e <= 246 || e == 0xFF) /* value * 2^(e - 127) = (value * 2^-8) * 2^(e - 119) */
            mxfp8_dequant32_f16_avx2(
                src + b * 32,
                _mm256_set1_ps(e == 0xFF ? qs_f32_from_bits(QS_NAN_F32_BITS)
                                         : qs_f32_from_bits((uint32_t)(e + 8) << 23)),
                dst + b * 32);
        else /* 2^(e - 119) would overflow */
            mxfp8_dequant32_avx2(src + b * 32, _mm256_set1_ps(qs_e8m0_decode_inline(e)),
                                 dst + b * 32, NULL);
    }
    if (b * 32 < n) /* the partial last block, through a zero-padded copy */
        mx_dequant_avx2(src + b * 32, scales + b, n - b * 32, 1, dst + b * 32,
                        mxfp8_dequant32_avx2, NULL);
}
