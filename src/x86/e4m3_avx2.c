/* SPDX-License-Identifier: MIT */
/*
 * FP8 E4M3 ("fn") quantize and dequantize with a per-tensor scale for AVX2 + FMA + F16C
 * (docs/formats.md §10), bit-identical to src/ref/e4m3_ref.c: q = E4M3_RNE_sat(fl(x / scale)) with
 * a true division, NaN -> 0x7F | sign, decode fl(value(q) * scale). The encoder rounds in the
 * integer domain on the f32 bits for normal results and with one exact power-of-two scaling plus
 * VCVTPS2DQ (RNE in the default MXCSR) for subnormal ones. A tail shorter than one 32-element
 * step is copied into a zero-padded local block, so nothing past n is read or written. The encoder,
 * decoder and driver are shared through minifloat_avx2.h.
 */
#include <immintrin.h>

#include "../core/kernels.h"
#include "minifloat_avx2.h"
#include "nan_avx2.h"

void qs_e4m3_quant__avx2(const float *src, int64_t n, float scale, uint8_t *dst)
{
    fp8_quant_avx2(src, n, scale, dst, 3, 7, 0x7E); /* saturating to 448 = code 0x7E */
}

/* 16 codes -> 16 floats, each times the scale. */
static inline void e4m3_dequant16_avx2(const uint8_t *src, __m256 vs, float *dst)
{
    __m128i b = _mm_loadu_si128((const __m128i *)src);
    __m256i c0 = _mm256_cvtepu8_epi32(b), c1 = _mm256_cvtepu8_epi32(_mm_srli_si128(b, 8));

    _mm256_storeu_ps(dst, nan_canon_avx2(_mm256_mul_ps(e4m3_decode_avx2(c0), vs)));
    _mm256_storeu_ps(dst + 8, nan_canon_avx2(_mm256_mul_ps(e4m3_decode_avx2(c1), vs)));
}

/* 16 codes -> 16 floats through F16C, each times vs8 = 2^8 * scale (finite, or scale is not). */
static inline void e4m3_dequant16_f16_avx2(const uint8_t *src, __m256 vs8, float *dst)
{
    __m256 v0, v1;

    e4m3_decode16_f16_avx2(_mm_loadu_si128((const __m128i *)src), &v0, &v1);
    _mm256_storeu_ps(dst, nan_canon_avx2(_mm256_mul_ps(v0, vs8)));
    _mm256_storeu_ps(dst + 8, nan_canon_avx2(_mm256_mul_ps(v1, vs8)));
}

/* The same for a finite vs8, without the NaN fix-up: NaN codes decode to the canonical NaN and a
 * finite E4M3 value times a finite vs8 is never NaN, so a NaN product is a copy of that operand
 * (tests/test_kernels.c proves it over all 256 codes). */
static inline void e4m3_dequant16_f16_finite_avx2(const uint8_t *src, __m256 vs8, float *dst)
{
    __m256 v0, v1;

    e4m3_decode16_f16_avx2(_mm_loadu_si128((const __m128i *)src), &v0, &v1);
    _mm256_storeu_ps(dst, _mm256_mul_ps(v0, vs8));
    _mm256_storeu_ps(dst + 8, _mm256_mul_ps(v1, vs8));
}

void qs_e4m3_dequant__avx2(const uint8_t *src, int64_t n, float scale, float *dst)
{
    /* value(q) * scale = (value(q) * 2^-8) * (2^8 * scale) exactly, as one rounding of the same
     * product, whenever 2^8 * scale is finite or scale is not (Inf and NaN stay what they were) */
    const float s8 = scale * 256.0f;
    const uint32_t fin = 0x7F800000u;

    if ((qs_f32_bits(s8) & fin) == fin && (qs_f32_bits(scale) & fin) != fin)
        fp8_dequant_avx2(src, n, scale, dst, e4m3_dequant16_avx2);
    else if ((qs_f32_bits(s8) & fin) == fin) /* NaN or Inf scale: Inf * 0, payloads */
        fp8_dequant_avx2(src, n, s8, dst, e4m3_dequant16_f16_avx2);
    else
        fp8_dequant_avx2(src, n, s8, dst, e4m3_dequant16_f16_finite_avx2);
}
