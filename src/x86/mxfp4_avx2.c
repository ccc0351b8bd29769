/* SPDX-License-Identifier: MIT */
/*
 * OCP MXFP4 quantize and dequantize for AVX2 + FMA + F16C (docs/formats.md §11, §12, §13),
 * bit-identical to src/ref/mxfp4_ref.c. Per block of 32: any NaN/Inf gives scale 0xFF and codes 0;
 * otherwise the E8M0 byte comes from the exponent bits of amax (FLOOR: floor(log2 amax) - 2,
 * RCEIL: one more when the mantissa of amax exceeds that of 6 = 1.5 * 2^2), clamped at 2^-127.
 * Elements are scaled by the power of two 2^-shared_exp, always a normal f32 here, so one multiply
 * rounds exactly like the reference's ldexpf; then E2M1 RNE with saturation to 6, the first element
 * in the low nibble. A partial last block is copied into a zero-padded local block, which is the
 * spec's "missing elements are +0.0" rule, so nothing past n is read or written. The E2M1 rounding
 * and the E8M0 block scale are shared through minifloat_avx2.h.
 */
#include <immintrin.h>

#include "../core/kernels.h"
#include "../ref/ref.h"
#include "lut16_avx2.h"
#include "minifloat_avx2.h"
#include "nan_avx2.h"

/* Codes of the 32 values x[k] * mul of a finite block (mul = 2^(127 - s) with 127 - s in
 * [-126, 127]: s <= 253 for finite amax). */
static inline void mxfp4_encode32_avx2(const __m256 x[4], __m256 mul, uint8_t *dst)
{
    __m256i c0 = e2m1_encode_finite_avx2(_mm256_mul_ps(x[0], mul));
    __m256i c1 = e2m1_encode_finite_avx2(_mm256_mul_ps(x[1], mul));
    __m256i c2 = e2m1_encode_finite_avx2(_mm256_mul_ps(x[2], mul));
    __m256i c3 = e2m1_encode_finite_avx2(_mm256_mul_ps(x[3], mul));

    _mm_storeu_si128((__m128i *)dst, pack_nibbles_avx2(c0, c1, c2, c3));
}

void qs_mxfp4_quant__avx2(const float *src, int64_t n, int32_t rounding, uint8_t *dst,
                          uint8_t *scales)
{
    /* emax 2; RCEIL when the mantissa of amax exceeds that of 6 = 1.5 * 2^2 */
    mx_quant_avx2(src, n, rounding, 2, 0x400000u, 2, mxfp4_encode32_avx2, dst, scales);
}

/* 16 bytes (32 codes) -> 32 floats, each times the block's scale; tab: the E2M1 values' byte
 * planes (lut16_avx2.h). No NaN fix-up: E2M1 values are finite and the scale a power of two or
 * the canonical NaN (0xFF), so a NaN product is a copy of that canonical operand
 * (tests/test_kernels.c proves it over every code and scale byte). */
static inline void mxfp4_dequant32_avx2(const uint8_t *src, __m256 scale, float *dst,
                                        const void *tab)
{
    __m256 v[4];

    lut16_decode32_avx2(src, tab, 0, v);
    for (int k = 0; k < 4; k++)
        _mm256_storeu_ps(dst + 8 * k, _mm256_mul_ps(v[k], scale));
}

void qs_mxfp4_dequant__avx2(const uint8_t *src, const uint8_t *scales, int64_t n, float *dst)
{
    const lut16_avx2 e2m1 = lut16_avx2_load(qs_e2m1_values);

    mx_dequant_avx2(src, scales, n, 2, dst, mxfp4_dequant32_avx2, &e2m1);
}
