/* SPDX-License-Identifier: MIT */
/*
 * FP8 E4M3 ("fn") quantize and dequantize with a per-tensor scale for AVX2 + FMA + F16C
 * (spec/formats.md §10), bit-identical to src/ref/e4m3_ref.c: q = E4M3_RNE_sat(fl(x / scale)) with
 * a true division, NaN -> 0x7F | sign, decode fl(value(q) * scale). The encoder rounds in the
 * integer domain on the f32 bits for normal results and with one exact power-of-two scaling plus
 * VCVTPS2DQ (RNE in the default MXCSR) for subnormal ones. A tail shorter than one 32-element
 * step is copied into a zero-padded local block, so nothing past n is read or written.
 */
#include <immintrin.h>
#include <string.h>

#include "../core/kernels.h"

/* E4M3 codes of 8 floats, one per 32-bit lane (0...255). */
static inline __m256i e4m3_encode_avx2(__m256 y)
{
    const __m256i u = _mm256_castps_si256(y);
    const __m256i a = _mm256_and_si256(u, _mm256_set1_epi32(0x7FFFFFFF));
    /* below the smallest normal 2^-6 every value has the quantum 2^-9: rne(a * 2^9), exact */
    __m256i sub =
        _mm256_cvtps_epi32(_mm256_mul_ps(_mm256_castsi256_ps(a), _mm256_set1_ps(0x1p9f)));
    /* normal: RNE at f32 mantissa bit 20, then rebias 127 -> 7; a carry rolls into the exponent */
    __m256i odd = _mm256_and_si256(_mm256_srli_epi32(a, 20), _mm256_set1_epi32(1));
    __m256i r = _mm256_add_epi32(_mm256_add_epi32(a, _mm256_set1_epi32(0x7FFFF)), odd);
    __m256i nrm = _mm256_sub_epi32(_mm256_srli_epi32(r, 20), _mm256_set1_epi32(120 << 3));
    __m256i is_sub = _mm256_cmpgt_epi32(_mm256_set1_epi32(0x3C800000), a);
    /* saturating: everything above 448 (Inf included) becomes 0x7E */
    __m256i mag = _mm256_min_epi32(_mm256_blendv_epi8(nrm, sub, is_sub), _mm256_set1_epi32(0x7E));
    __m256i is_nan = _mm256_cmpgt_epi32(a, _mm256_set1_epi32(0x7F800000));
    __m256i sign = _mm256_and_si256(_mm256_srli_epi32(u, 24), _mm256_set1_epi32(0x80));

    mag = _mm256_or_si256(mag, _mm256_and_si256(is_nan, _mm256_set1_epi32(0x7F)));
    return _mm256_or_si256(mag, sign);
}

/* Values of 8 E4M3 codes (0...255 per 32-bit lane), exact. */
static inline __m256 e4m3_decode_avx2(__m256i c)
{
    const __m256i m = _mm256_and_si256(c, _mm256_set1_epi32(0x7F));
    /* normal: exponent field e -> e + 120, mantissa to the top of the f32 mantissa */
    __m256i nrm = _mm256_add_epi32(_mm256_slli_epi32(m, 20), _mm256_set1_epi32(120 << 23));
    /* subnormal (e = 0): m * 2^-9, computed from an integer so no f32 denormal is touched */
    __m256i sub = _mm256_castps_si256(
        _mm256_mul_ps(_mm256_cvtepi32_ps(m), _mm256_set1_ps(0x1p-9f)));
    __m256i is_sub = _mm256_cmpgt_epi32(_mm256_set1_epi32(8), m);
    __m256i is_nan = _mm256_cmpeq_epi32(m, _mm256_set1_epi32(0x7F));
    __m256i v = _mm256_blendv_epi8(nrm, sub, is_sub);

    v = _mm256_blendv_epi8(v, _mm256_set1_epi32(0x7FC00000), is_nan);
    v = _mm256_or_si256(v, _mm256_slli_epi32(_mm256_and_si256(c, _mm256_set1_epi32(0x80)), 24));
    return _mm256_castsi256_ps(v);
}

/* Bytes 0...31 from the low bytes of four vectors of 32-bit codes (each <= 255). */
static inline __m256i pack_bytes_avx2(__m256i c0, __m256i c1, __m256i c2, __m256i c3)
{
    __m256i b = _mm256_packus_epi16(_mm256_packus_epi32(c0, c1), _mm256_packus_epi32(c2, c3));
    /* the packs work per 128-bit lane; put the dwords back in element order */
    return _mm256_permutevar8x32_epi32(b, _mm256_setr_epi32(0, 4, 1, 5, 2, 6, 3, 7));
}

static inline void e4m3_quant32_avx2(const float *src, __m256 vs, uint8_t *dst)
{
    __m256i c0 = e4m3_encode_avx2(_mm256_div_ps(_mm256_loadu_ps(src), vs));
    __m256i c1 = e4m3_encode_avx2(_mm256_div_ps(_mm256_loadu_ps(src + 8), vs));
    __m256i c2 = e4m3_encode_avx2(_mm256_div_ps(_mm256_loadu_ps(src + 16), vs));
    __m256i c3 = e4m3_encode_avx2(_mm256_div_ps(_mm256_loadu_ps(src + 24), vs));

    _mm256_storeu_si256((__m256i *)dst, pack_bytes_avx2(c0, c1, c2, c3));
}

void qs_e4m3_quant__avx2(const float *src, int64_t n, float scale, uint8_t *dst)
{
    const __m256 vs = _mm256_set1_ps(scale);
    int64_t i = 0;

    for (; i + 32 <= n; i += 32)
        e4m3_quant32_avx2(src + i, vs, dst + i);
    if (i < n) {
        float buf[32] = {0};
        uint8_t out[32];
        memcpy(buf, src + i, (size_t)(n - i) * sizeof(float));
        e4m3_quant32_avx2(buf, vs, out);
        memcpy(dst + i, out, (size_t)(n - i));
    }
}

static inline void e4m3_dequant8_avx2(const uint8_t *src, __m256 vs, float *dst)
{
    __m256i c = _mm256_cvtepu8_epi32(_mm_loadl_epi64((const __m128i *)src));

    _mm256_storeu_ps(dst, _mm256_mul_ps(e4m3_decode_avx2(c), vs));
}

void qs_e4m3_dequant__avx2(const uint8_t *src, int64_t n, float scale, float *dst)
{
    const __m256 vs = _mm256_set1_ps(scale);
    int64_t i = 0;

    for (; i + 32 <= n; i += 32) {
        e4m3_dequant8_avx2(src + i, vs, dst + i);
        e4m3_dequant8_avx2(src + i + 8, vs, dst + i + 8);
        e4m3_dequant8_avx2(src + i + 16, vs, dst + i + 16);
        e4m3_dequant8_avx2(src + i + 24, vs, dst + i + 24);
    }
    for (; i + 8 <= n; i += 8)
        e4m3_dequant8_avx2(src + i, vs, dst + i);
    if (i < n) {
        uint8_t buf[8] = {0};
        float out[8];
        memcpy(buf, src + i, (size_t)(n - i));
        e4m3_dequant8_avx2(buf, vs, out);
        memcpy(dst + i, out, (size_t)(n - i) * sizeof(float));
    }
}
