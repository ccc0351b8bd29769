/* SPDX-License-Identifier: MIT */
/*
 * OCP MXFP8 (E4M3 elements) quantize and dequantize for AVX2 + FMA + F16C (spec/formats.md §10,
 * §12, §13), bit-identical to src/ref/mxfp8_ref.c. Per block of 32: any NaN/Inf gives scale 0xFF
 * and codes 0; otherwise the E8M0 byte comes from the exponent bits of amax (FLOOR:
 * floor(log2 amax) - 8, RCEIL: one more when the mantissa of amax exceeds that of
 * 448 = 1.75 * 2^8), clamped at 2^-127. Elements are scaled by the power of two 2^-shared_exp
 * (a normal f32 here, so one multiply rounds exactly like ldexpf) and encoded E4M3 RNE, saturating.
 * A partial last block goes through a zero-padded local block (the spec's +0.0 padding), so
 * nothing past n is read or written.
 */
#include <immintrin.h>
#include <string.h>

#include "../core/kernels.h"
#include "../ref/ref.h"

/* E4M3 codes of 8 finite floats, one per 32-bit lane (NaN cannot reach this encoder). */
static inline __m256i e4m3_encode_finite_avx2(__m256 y)
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
    __m256i mag = _mm256_min_epi32(_mm256_blendv_epi8(nrm, sub, is_sub), _mm256_set1_epi32(0x7E));

    return _mm256_or_si256(mag, _mm256_and_si256(_mm256_srli_epi32(u, 24),
                                                 _mm256_set1_epi32(0x80)));
}

/* Values of 8 E4M3 codes (0...255 per 32-bit lane), exact; 0x7F / 0xFF give NaN with the sign. */
static inline __m256 e4m3_decode_avx2(__m256i c)
{
    const __m256i m = _mm256_and_si256(c, _mm256_set1_epi32(0x7F));
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

/* The E8M0 byte of a block without NaN/Inf from its amax (>= 0), FLOOR or RCEIL (§13). */
static inline uint8_t mxfp8_scale_avx2(float amax, int32_t rounding)
{
    uint32_t b = qs_f32_bits(amax);
    /* biased exponent minus emax = floor(log2 amax) - 8 + 127; subnormal or zero amax clamps */
    int32_t e = (int32_t)(b >> 23) - 8;

    if (rounding != 0 && (b & 0x7FFFFFu) > 0x600000u)
        e++; /* amax > 448 * 2^(e - 127): one binade up, so that nothing clips */
    return (uint8_t)(e < 0 ? 0 : e);
}

static inline float hmax_avx2(__m256 m)
{
    __m128 h = _mm_max_ps(_mm256_castps256_ps128(m), _mm256_extractf128_ps(m, 1));
    h = _mm_max_ps(h, _mm_movehl_ps(h, h));
    h = _mm_max_ss(h, _mm_movehdup_ps(h));
    return _mm_cvtss_f32(h);
}

/* One full block of 32 values: 32 data bytes and the scale byte. */
static inline void mxfp8_block_avx2(const float *v, int32_t rounding, uint8_t *dst,
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
        memset(dst, 0, 32);
        return;
    }
    uint8_t s = mxfp8_scale_avx2(hmax_avx2(m), rounding);
    /* 2^(127 - s) with 127 - s in [-119, 127]: s <= 247 for finite amax */
    __m256 mul = _mm256_castsi256_ps(_mm256_set1_epi32((int32_t)(254 - s) << 23));

    *scale = s;
    _mm256_storeu_si256((__m256i *)dst,
                        pack_bytes_avx2(e4m3_encode_finite_avx2(_mm256_mul_ps(x[0], mul)),
                                        e4m3_encode_finite_avx2(_mm256_mul_ps(x[1], mul)),
                                        e4m3_encode_finite_avx2(_mm256_mul_ps(x[2], mul)),
                                        e4m3_encode_finite_avx2(_mm256_mul_ps(x[3], mul))));
}

void qs_mxfp8_quant__avx2(const float *src, int64_t n, int32_t rounding, uint8_t *dst,
                          uint8_t *scales)
{
    int64_t b = 0;

    for (; (b + 1) * 32 <= n; b++)
        mxfp8_block_avx2(src + b * 32, rounding, dst + b * 32, scales + b);
    if (b * 32 < n) {
        size_t len = (size_t)(n - b * 32);
        float buf[32] = {0};
        uint8_t out[32];
        memcpy(buf, src + b * 32, len * sizeof(float));
        mxfp8_block_avx2(buf, rounding, out, scales + b);
        memcpy(dst + b * 32, out, len);
    }
}

/* 32 codes -> 32 floats, each times the block's scale. */
static inline void mxfp8_dequant32_avx2(const uint8_t *src, __m256 scale, float *dst)
{
    for (int k = 0; k < 4; k++) {
        __m256i c = _mm256_cvtepu8_epi32(_mm_loadl_epi64((const __m128i *)(src + 8 * k)));
        _mm256_storeu_ps(dst + 8 * k, _mm256_mul_ps(e4m3_decode_avx2(c), scale));
    }
}

void qs_mxfp8_dequant__avx2(const uint8_t *src, const uint8_t *scales, int64_t n, float *dst)
{
    int64_t b = 0;

    for (; (b + 1) * 32 <= n; b++)
        mxfp8_dequant32_avx2(src + b * 32, _mm256_set1_ps(qs_ref_e8m0_decode(scales[b])),
                             dst + b * 32);
    if (b * 32 < n) {
        size_t len = (size_t)(n - b * 32);
        uint8_t buf[32] = {0};
        float out[32];
        memcpy(buf, src + b * 32, len);
        mxfp8_dequant32_avx2(buf, _mm256_set1_ps(qs_ref_e8m0_decode(scales[b])), out);
        memcpy(dst + b * 32, out, len * sizeof(float));
    }
}
