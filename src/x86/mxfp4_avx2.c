/* SPDX-License-Identifier: MIT */
/*
 * OCP MXFP4 quantize and dequantize for AVX2 + FMA + F16C (spec/formats.md §11, §12, §13),
 * bit-identical to src/ref/mxfp4_ref.c. Per block of 32: any NaN/Inf gives scale 0xFF and codes 0;
 * otherwise the E8M0 byte comes from the exponent bits of amax (FLOOR: floor(log2 amax) - 2,
 * RCEIL: one more when the mantissa of amax exceeds that of 6 = 1.5 * 2^2), clamped at 2^-127.
 * Elements are scaled by the power of two 2^-shared_exp, always a normal f32 here, so one multiply
 * rounds exactly like the reference's ldexpf; then E2M1 RNE with saturation to 6, the first element
 * in the low nibble. A partial last block is copied into a zero-padded local block, which is the
 * spec's "missing elements are +0.0" rule, so nothing past n is read or written.
 */
#include <immintrin.h>
#include <string.h>

#include "../core/kernels.h"
#include "../ref/ref.h"

/* E2M1 codes (0...15) of 8 finite floats, one per 32-bit lane. */
static inline __m256i e2m1_encode_avx2(__m256 y)
{
    const __m256i u = _mm256_castps_si256(y);
    const __m256i a = _mm256_and_si256(u, _mm256_set1_epi32(0x7FFFFFFF));
    /* below the smallest normal 1.0 the quantum is 0.5: rne(a * 2), exact scaling */
    __m256i sub =
        _mm256_cvtps_epi32(_mm256_mul_ps(_mm256_castsi256_ps(a), _mm256_set1_ps(2.0f)));
    /* normal: RNE at f32 mantissa bit 22, then rebias 127 -> 1; a carry rolls into the exponent */
    __m256i odd = _mm256_and_si256(_mm256_srli_epi32(a, 22), _mm256_set1_epi32(1));
    __m256i r = _mm256_add_epi32(_mm256_add_epi32(a, _mm256_set1_epi32(0x1FFFFF)), odd);
    __m256i nrm = _mm256_sub_epi32(_mm256_srli_epi32(r, 22), _mm256_set1_epi32(126 << 1));
    __m256i is_sub = _mm256_cmpgt_epi32(_mm256_set1_epi32(0x3F800000), a);
    /* saturating: everything above 6 becomes 0x7 */
    __m256i mag = _mm256_min_epi32(_mm256_blendv_epi8(nrm, sub, is_sub), _mm256_set1_epi32(7));

    return _mm256_or_si256(mag, _mm256_and_si256(_mm256_srli_epi32(u, 28), _mm256_set1_epi32(8)));
}

/* 16 bytes of nibbles from 32 codes (four vectors of 8), element 2j in the low nibble of byte j. */
static inline __m128i pack_nibbles_avx2(__m256i c0, __m256i c1, __m256i c2, __m256i c3)
{
    __m256i b = _mm256_packus_epi16(_mm256_packus_epi32(c0, c1), _mm256_packus_epi32(c2, c3));
    b = _mm256_permutevar8x32_epi32(b, _mm256_setr_epi32(0, 4, 1, 5, 2, 6, 3, 7));
    /* b holds the 32 codes as bytes in element order; join each pair of bytes into one */
    __m256i w = _mm256_and_si256(_mm256_or_si256(b, _mm256_srli_epi16(b, 4)),
                                 _mm256_set1_epi16(0x00FF));
    w = _mm256_permute4x64_epi64(_mm256_packus_epi16(w, w), 0x08);
    return _mm256_castsi256_si128(w);
}

/* The E8M0 byte of a block without NaN/Inf from its amax (>= 0), FLOOR or RCEIL (§13). */
static inline uint8_t mxfp4_scale_avx2(float amax, int32_t rounding)
{
    uint32_t b = qs_f32_bits(amax);
    /* biased exponent minus emax = floor(log2 amax) - 2 + 127; subnormal or zero amax clamps */
    int32_t e = (int32_t)(b >> 23) - 2;

    if (rounding != 0 && (b & 0x7FFFFFu) > 0x400000u)
        e++; /* amax > 6 * 2^(e - 127): one binade up, so that nothing clips */
    return (uint8_t)(e < 0 ? 0 : e);
}

static inline float hmax_avx2(__m256 m)
{
    __m128 h = _mm_max_ps(_mm256_castps256_ps128(m), _mm256_extractf128_ps(m, 1));
    h = _mm_max_ps(h, _mm_movehl_ps(h, h));
    h = _mm_max_ss(h, _mm_movehdup_ps(h));
    return _mm_cvtss_f32(h);
}

/* One full block of 32 values: 16 data bytes and the scale byte. */
static inline void mxfp4_block_avx2(const float *v, int32_t rounding, uint8_t *dst,
                                    uint8_t *scale)
{
    const __m256i expo = _mm256_set1_epi32(0x7F800000);
    const __m256 absm = _mm256_castsi256_ps(_mm256_set1_epi32(0x7FFFFFFF));
    __m256 x[4];
    __m256i special = _mm256_setzero_si256();
    __m256 m = _mm256_setzero_ps();

    for (int k = 0; k < 4; k++) {
        x[k] = _mm256_loadu_ps(v + 8 * k);
        __m256i e = _mm256_and_si256(_mm256_castps_si256(x[k]), expo);
        special = _mm256_or_si256(special, _mm256_cmpeq_epi32(e, expo));
        m = _mm256_max_ps(m, _mm256_and_ps(x[k], absm));
    }
    if (!_mm256_testz_si256(special, special)) {
        *scale = 0xFF; /* NaN block; element codes 0 [convention] (§13 step 1) */
        memset(dst, 0, 16);
        return;
    }
    uint8_t s = mxfp4_scale_avx2(hmax_avx2(m), rounding);
    /* 2^(127 - s) with 127 - s in [-126, 127]: s <= 253 for finite amax */
    __m256 mul = _mm256_castsi256_ps(_mm256_set1_epi32((int32_t)(254 - s) << 23));

    *scale = s;
    _mm_storeu_si128((__m128i *)dst,
                     pack_nibbles_avx2(e2m1_encode_avx2(_mm256_mul_ps(x[0], mul)),
                                       e2m1_encode_avx2(_mm256_mul_ps(x[1], mul)),
                                       e2m1_encode_avx2(_mm256_mul_ps(x[2], mul)),
                                       e2m1_encode_avx2(_mm256_mul_ps(x[3], mul))));
}

void qs_mxfp4_quant__avx2(const float *src, int64_t n, int32_t rounding, uint8_t *dst,
                          uint8_t *scales)
{
    int64_t b = 0;

    for (; (b + 1) * 32 <= n; b++)
        mxfp4_block_avx2(src + b * 32, rounding, dst + b * 16, scales + b);
    if (b * 32 < n) {
        size_t len = (size_t)(n - b * 32);
        float buf[32] = {0};
        uint8_t out[16];
        memcpy(buf, src + b * 32, len * sizeof(float));
        mxfp4_block_avx2(buf, rounding, out, scales + b);
        memcpy(dst + b * 16, out, (len + 1) / 2);
    }
}

/* E2M1 values of 8 codes (0...15): two 8-entry lookups, chosen by bit 3 of the code. */
static inline __m256 e2m1_decode_avx2(__m256i c)
{
    __m256 lo = _mm256_permutevar8x32_ps(_mm256_loadu_ps(qs_e2m1_values), c);
    __m256 hi = _mm256_permutevar8x32_ps(_mm256_loadu_ps(qs_e2m1_values + 8), c);

    return _mm256_blendv_ps(lo, hi, _mm256_castsi256_ps(_mm256_slli_epi32(c, 28)));
}

/* 16 bytes (32 codes) -> 32 floats, each times the block's scale. */
static inline void mxfp4_dequant32_avx2(const uint8_t *src, __m256 scale, float *dst)
{
    const __m128i nib = _mm_set1_epi8(0x0F);
    __m128i b = _mm_loadu_si128((const __m128i *)src);
    __m128i lo = _mm_and_si128(b, nib), hi = _mm_and_si128(_mm_srli_epi16(b, 4), nib);
    __m128i e0 = _mm_unpacklo_epi8(lo, hi), e1 = _mm_unpackhi_epi8(lo, hi);
    __m256i c[4] = {_mm256_cvtepu8_epi32(e0), _mm256_cvtepu8_epi32(_mm_srli_si128(e0, 8)),
                    _mm256_cvtepu8_epi32(e1), _mm256_cvtepu8_epi32(_mm_srli_si128(e1, 8))};

    for (int k = 0; k < 4; k++)
        _mm256_storeu_ps(dst + 8 * k, _mm256_mul_ps(e2m1_decode_avx2(c[k]), scale));
}

void qs_mxfp4_dequant__avx2(const uint8_t *src, const uint8_t *scales, int64_t n, float *dst)
{
    int64_t b = 0;

    for (; (b + 1) * 32 <= n; b++)
        mxfp4_dequant32_avx2(src + b * 16, _mm256_set1_ps(qs_ref_e8m0_decode(scales[b])),
                             dst + b * 32);
    if (b * 32 < n) {
        size_t len = (size_t)(n - b * 32);
        uint8_t buf[16] = {0};
        float out[32];
        memcpy(buf, src + b * 16, (len + 1) / 2);
        mxfp4_dequant32_avx2(buf, _mm256_set1_ps(qs_ref_e8m0_decode(scales[b])), out);
        memcpy(dst + b * 32, out, len * sizeof(float));
    }
}
