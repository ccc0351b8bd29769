/* SPDX-License-Identifier: MIT */
/*
 * FP8 E5M2 quantize and dequantize with a per-tensor scale for AVX2 + FMA + F16C
 * (spec/formats.md §10), bit-identical to src/ref/e5m2_ref.c: q = E5M2_RNE_sat(fl(x / scale)) with
 * a true division, saturation to +-57344, NaN -> 0x7F | sign; decode fl(value(q) * scale). E5M2 is
 * the upper byte of binary16, so decoding is VCVTPH2PS (F16C), which keeps NaN payloads exactly as
 * the reference's f16 decoder does. A tail shorter than one step goes through a zero-padded local
 * block, so nothing past n is read or written.
 */
#include <immintrin.h>
#include <string.h>

#include "../core/kernels.h"

/* E5M2 codes of 8 floats, one per 32-bit lane (0...255). */
static inline __m256i e5m2_encode_avx2(__m256 y)
{
    const __m256i u = _mm256_castps_si256(y);
    const __m256i a = _mm256_and_si256(u, _mm256_set1_epi32(0x7FFFFFFF));
    /* below the smallest normal 2^-14 the quantum is 2^-16: rne(a * 2^16), exact scaling */
    __m256i sub =
        _mm256_cvtps_epi32(_mm256_mul_ps(_mm256_castsi256_ps(a), _mm256_set1_ps(0x1p16f)));
    /* normal: RNE at f32 mantissa bit 21, then rebias 127 -> 15; a carry rolls into the exponent */
    __m256i odd = _mm256_and_si256(_mm256_srli_epi32(a, 21), _mm256_set1_epi32(1));
    __m256i r = _mm256_add_epi32(_mm256_add_epi32(a, _mm256_set1_epi32(0xFFFFF)), odd);
    __m256i nrm = _mm256_sub_epi32(_mm256_srli_epi32(r, 21), _mm256_set1_epi32(112 << 2));
    __m256i is_sub = _mm256_cmpgt_epi32(_mm256_set1_epi32(0x38800000), a);
    /* saturating: from 61440 up (Inf included) the code is 0x7B, never the Inf code 0x7C */
    __m256i mag = _mm256_min_epi32(_mm256_blendv_epi8(nrm, sub, is_sub), _mm256_set1_epi32(0x7B));
    __m256i is_nan = _mm256_cmpgt_epi32(a, _mm256_set1_epi32(0x7F800000));
    __m256i sign = _mm256_and_si256(_mm256_srli_epi32(u, 24), _mm256_set1_epi32(0x80));

    mag = _mm256_or_si256(mag, _mm256_and_si256(is_nan, _mm256_set1_epi32(0x7F)));
    return _mm256_or_si256(mag, sign);
}

/* Bytes 0...31 from the low bytes of four vectors of 32-bit codes (each <= 255). */
static inline __m256i pack_bytes_avx2(__m256i c0, __m256i c1, __m256i c2, __m256i c3)
{
    __m256i b = _mm256_packus_epi16(_mm256_packus_epi32(c0, c1), _mm256_packus_epi32(c2, c3));
    /* the packs work per 128-bit lane; put the dwords back in element order */
    return _mm256_permutevar8x32_epi32(b, _mm256_setr_epi32(0, 4, 1, 5, 2, 6, 3, 7));
}

static inline void e5m2_quant32_avx2(const float *src, __m256 vs, uint8_t *dst)
{
    __m256i c0 = e5m2_encode_avx2(_mm256_div_ps(_mm256_loadu_ps(src), vs));
    __m256i c1 = e5m2_encode_avx2(_mm256_div_ps(_mm256_loadu_ps(src + 8), vs));
    __m256i c2 = e5m2_encode_avx2(_mm256_div_ps(_mm256_loadu_ps(src + 16), vs));
    __m256i c3 = e5m2_encode_avx2(_mm256_div_ps(_mm256_loadu_ps(src + 24), vs));

    _mm256_storeu_si256((__m256i *)dst, pack_bytes_avx2(c0, c1, c2, c3));
}

void qs_e5m2_quant__avx2(const float *src, int64_t n, float scale, uint8_t *dst)
{
    const __m256 vs = _mm256_set1_ps(scale);
    int64_t i = 0;

    for (; i + 32 <= n; i += 32)
        e5m2_quant32_avx2(src + i, vs, dst + i);
    if (i < n) {
        float buf[32] = {0};
        uint8_t out[32];
        memcpy(buf, src + i, (size_t)(n - i) * sizeof(float));
        e5m2_quant32_avx2(buf, vs, out);
        memcpy(dst + i, out, (size_t)(n - i));
    }
}

/* 16 codes -> 16 floats: the code is the high byte of a binary16. */
static inline void e5m2_dequant16_avx2(const uint8_t *src, __m256 vs, float *dst)
{
    __m128i b = _mm_loadu_si128((const __m128i *)src);
    __m128i h0 = _mm_unpacklo_epi8(_mm_setzero_si128(), b);
    __m128i h1 = _mm_unpackhi_epi8(_mm_setzero_si128(), b);

    _mm256_storeu_ps(dst, _mm256_mul_ps(_mm256_cvtph_ps(h0), vs));
    _mm256_storeu_ps(dst + 8, _mm256_mul_ps(_mm256_cvtph_ps(h1), vs));
}

void qs_e5m2_dequant__avx2(const uint8_t *src, int64_t n, float scale, float *dst)
{
    const __m256 vs = _mm256_set1_ps(scale);
    int64_t i = 0;

    for (; i + 32 <= n; i += 32) {
        e5m2_dequant16_avx2(src + i, vs, dst + i);
        e5m2_dequant16_avx2(src + i + 16, vs, dst + i + 16);
    }
    for (; i + 16 <= n; i += 16)
        e5m2_dequant16_avx2(src + i, vs, dst + i);
    if (i < n) {
        uint8_t buf[16] = {0};
        float out[16];
        memcpy(buf, src + i, (size_t)(n - i));
        e5m2_dequant16_avx2(buf, vs, out);
        memcpy(dst + i, out, (size_t)(n - i) * sizeof(float));
    }
}
