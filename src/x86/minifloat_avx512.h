/* SPDX-License-Identifier: MIT */
/*
 * Minifloat helpers shared by the FP8 and microscaling kernels for AVX-512 F/BW/DQ/VL
 * (e4m3_avx512.c, e5m2_avx512.c, mxfp4_avx512.c, mxfp8_avx512.c, nvfp4_avx512.c;
 * docs/formats.md §10-§14): RNE encoders for E4M3 and E5M2 that round in the integer domain on
 * the f32 bits for normal results and with one exact power-of-two scaling plus VCVTPS2DQ (RNE in
 * the default MXCSR) for subnormal ones, an E2M1 encoder by three comparisons against its
 * midpoints, the exact E4M3 decoder, tail masks, the OCP MX (E8M0)
 * block scale and the per-tensor FP8 drivers. Tails use masked loads and stores, so nothing past n
 * is read or written. Everything is `static inline`; the format constants and the routines passed
 * to the drivers are compile-time constants, so each kernel file gets its own inlined copy.
 * Include only from files compiled with the AVX-512 flags (*_avx512.c).
 */
#ifndef QS_X86_MINIFLOAT_AVX512_H
#define QS_X86_MINIFLOAT_AVX512_H

#include <string.h>

#include <immintrin.h>

#include "../core/kernels.h"
#include "../ref/ref.h"
#include "nan_avx512.h"

/* Lanes 0 ... left - 1 of 16 (all 16 when left >= 16; none when left <= 0). */
static inline __mmask16 lane_mask_avx512(int64_t left)
{
    return left >= 16 ? (__mmask16)0xFFFF : left > 0 ? (__mmask16)((1u << left) - 1) : (__mmask16)0;
}

/* Magnitude codes of 16 values from their bits without sign, a = |y| (NaN excluded), for a format
 * with mbits mantissa bits and exponent bias `bias`, RNE, saturating to max_code (Inf included). */
static inline __m512i minifloat_mag_avx512(__m512i a, int mbits, int bias, int max_code)
{
    const int shift = 23 - mbits;
    /* below the smallest normal 2^(1 - bias) the quantum is 2^(1 - bias - mbits): rne(a * 2^(bias
     * + mbits - 1)), an exact scaling */
    const __m512 up = _mm512_castsi512_ps(_mm512_set1_epi32((127 + bias + mbits - 1) << 23));
    __m512i sub = _mm512_cvtps_epi32(_mm512_mul_ps(_mm512_castsi512_ps(a), up));
    /* normal: RNE at f32 mantissa bit `shift`, then rebias 127 -> bias; a carry rolls into the
     * exponent */
    __m512i odd = _mm512_and_si512(_mm512_srli_epi32(a, shift), _mm512_set1_epi32(1));
    __m512i r =
        _mm512_add_epi32(_mm512_add_epi32(a, _mm512_set1_epi32((1 << (shift - 1)) - 1)), odd);
    __m512i mag =
        _mm512_sub_epi32(_mm512_srli_epi32(r, shift), _mm512_set1_epi32((127 - bias) << mbits));
    __mmask16 is_sub = _mm512_cmplt_epi32_mask(a, _mm512_set1_epi32((128 - bias) << 23));

    mag = _mm512_mask_mov_epi32(mag, is_sub, sub);
    return _mm512_min_epi32(mag, _mm512_set1_epi32(max_code));
}

/* FP8 codes of 16 floats (0...255 per 32-bit lane): sign in bit 7, NaN -> 0x7F | sign. */
static inline __m512i fp8_encode_avx512(__m512 y, int mbits, int bias, int max_code)
{
    const __m512i u = _mm512_castps_si512(y);
    const __m512i a = _mm512_and_si512(u, _mm512_set1_epi32(0x7FFFFFFF));
    __mmask16 is_nan = _mm512_cmpgt_epi32_mask(a, _mm512_set1_epi32(0x7F800000));
    __m512i mag = minifloat_mag_avx512(a, mbits, bias, max_code);

    mag = _mm512_mask_mov_epi32(mag, is_nan, _mm512_set1_epi32(0x7F));
    return _mm512_or_si512(mag,
                           _mm512_and_si512(_mm512_srli_epi32(u, 24), _mm512_set1_epi32(0x80)));
}

/* E4M3 codes of 16 floats: everything above 448 (Inf included) becomes 0x7E. */
static inline __m512i e4m3_encode_avx512(__m512 y)
{
    return fp8_encode_avx512(y, 3, 7, 0x7E);
}

/* E4M3 codes of 16 finite floats (NaN must not reach this encoder). */
static inline __m512i e4m3_encode_finite_avx512(__m512 y)
{
    const __m512i u = _mm512_castps_si512(y);
    __m512i mag =
        minifloat_mag_avx512(_mm512_and_si512(u, _mm512_set1_epi32(0x7FFFFFFF)), 3, 7, 0x7E);

    return _mm512_or_si512(mag,
                           _mm512_and_si512(_mm512_srli_epi32(u, 24), _mm512_set1_epi32(0x80)));
}

/* E2M1 codes (0...15) of 16 floats that are not NaN, one per 32-bit lane; above 6 (Inf too)
 * saturates to 0x7. RNE to E2M1 is a count of the midpoints |y| passes, ties going to the even
 * code: |y| > 0.25, >= 0.75, > 1.25, >= 1.75, > 2.5, >= 3.5, > 5, i.e. |y| > F_k for the f32
 * F = 0.25, pred(0.75), 1.25, pred(1.75), 2.5, pred(3.5), 5 (the same codes as the reference's
 * rounding, for every f32). Three comparisons find the count: against F_3, then F_1 or F_5, then
 * F_0, F_2, F_4 or F_6 (lane c of the table for c = 0, 2, 4, 6). */
static inline __m512i e2m1_encode_finite_avx512(__m512 y)
{
    const __m512 t = _mm512_castsi512_ps(_mm512_setr_epi32(
        0x3E800000, 0x3F3FFFFF, 0x3FA00000, 0x3FDFFFFF, 0x40200000, 0x405FFFFF, 0x40A00000,
        0x7F800000, 0, 0, 0, 0, 0, 0, 0, 0));
    const __m512 a = _mm512_abs_ps(y);
    __mmask16 m1 = _mm512_cmp_ps_mask(a, _mm512_castsi512_ps(_mm512_set1_epi32(0x3FDFFFFF)),
                                      _CMP_GT_OQ);
    __mmask16 m2 = _mm512_cmp_ps_mask(
        a,
        _mm512_mask_blend_ps(m1, _mm512_castsi512_ps(_mm512_set1_epi32(0x3F3FFFFF)),
                             _mm512_castsi512_ps(_mm512_set1_epi32(0x405FFFFF))),
        _CMP_GT_OQ);
    __m512i c = _mm512_maskz_mov_epi32(m1, _mm512_set1_epi32(4));

    c = _mm512_mask_add_epi32(c, m2, c, _mm512_set1_epi32(2));
    c = _mm512_mask_add_epi32(c, _mm512_cmp_ps_mask(a, _mm512_permutexvar_ps(c, t), _CMP_GT_OQ),
                              c, _mm512_set1_epi32(1));
    return _mm512_ternarylogic_epi32(c, _mm512_srli_epi32(_mm512_castps_si512(y), 28),
                                     _mm512_set1_epi32(8), 0xF8); /* c | (sign & 8) */
}

/* Values of 16 E4M3 codes (0...255 per 32-bit lane), exact; 0x7F / 0xFF give NaN with the sign. */
static inline __m512 e4m3_decode_avx512(__m512i c)
{
    const __m512i m = _mm512_and_si512(c, _mm512_set1_epi32(0x7F));
    /* normal: exponent field e -> e + 120, mantissa to the top of the f32 mantissa */
    __m512i v = _mm512_add_epi32(_mm512_slli_epi32(m, 20), _mm512_set1_epi32(120 << 23));
    /* subnormal (e = 0): m * 2^-9, computed from an integer so no f32 denormal is touched */
    __m512i sub =
        _mm512_castps_si512(_mm512_mul_ps(_mm512_cvtepi32_ps(m), _mm512_set1_ps(0x1p-9f)));

    v = _mm512_mask_mov_epi32(v, _mm512_cmplt_epi32_mask(m, _mm512_set1_epi32(8)), sub);
    v = _mm512_mask_mov_epi32(v, _mm512_cmpeq_epi32_mask(m, _mm512_set1_epi32(0x7F)),
                              _mm512_set1_epi32(0x7FC00000));
    v = _mm512_or_si512(v, _mm512_slli_epi32(_mm512_and_si512(c, _mm512_set1_epi32(0x80)), 24));
    return _mm512_castsi512_ps(v);
}

/* value(q) * 2^-8 of 16 E4M3 codes (bytes), exactly, through the F16C conversion: the code's seven
 * magnitude bits shifted left by 7 are an f16 with the same fields, whose exponent bias 15 instead
 * of 7 makes every value (subnormals included) 2^-8 times the E4M3 one, and VCVTPH2PS converts it
 * exactly. 0x7F / 0xFF give NaN. A few 256-bit operations instead of the integer decode on 16
 * 32-bit lanes; the caller multiplies by 2^8 * scale, which is exact whenever that is finite. */
static inline __m512 e4m3_decode16_f16_avx512(__m128i b)
{
    const __m256i w = _mm256_cvtepu8_epi16(b);
    const __m256i mag = _mm256_and_si256(w, _mm256_set1_epi16(0x7F));
    __m256i h = _mm256_or_si256(_mm256_slli_epi16(mag, 7),
                                _mm256_and_si256(_mm256_slli_epi16(w, 8),
                                                 _mm256_set1_epi16((short)0x8000)));

    h = _mm256_mask_mov_epi16(h, _mm256_cmpeq_epi16_mask(mag, _mm256_set1_epi16(0x7F)),
                              _mm256_set1_epi16(0x7E00)); /* an f16 NaN */
    return _mm512_cvtph_ps(h);
}

/* e4m3_decode16_f16_avx512 for codes known not to be NaN (no 0x7F / 0xFF among them): the f16
 * (c & 0x7F) << 7 | (c & 0x80) << 8 is (c + (c & 0x80)) << 7, three operations. */
static inline __m512 e4m3_decode16_f16_nonan_avx512(__m128i b)
{
    const __m256i w = _mm256_cvtepu8_epi16(b);

    return _mm512_cvtph_ps(
        _mm256_slli_epi16(_mm256_add_epi16(w, _mm256_and_si256(w, _mm256_set1_epi16(0x80))), 7));
}

/* 1 if any of the 64 code bytes at p is an E4M3 NaN (0x7F or 0xFF). */
static inline int e4m3_any_nan64_avx512(const uint8_t *p)
{
    __m512i v = _mm512_or_si512(_mm512_loadu_si512((const void *)p), _mm512_set1_epi8((char)0x80));
    return _mm512_cmpeq_epi8_mask(v, _mm512_set1_epi8((char)0xFF)) != 0;
}

/* The per-tensor FP8 quantize driver (§10): codes of fl(x / scale) with a true division. */
static inline void fp8_quant_avx512(const float *src, int64_t n, float scale, uint8_t *dst,
                                    int mbits, int bias, int max_code)
{
    const __m512 vs = _mm512_set1_ps(scale);
    int64_t i = 0;

    for (; i + 32 <= n; i += 32) {
        __m512i c0 =
            fp8_encode_avx512(_mm512_div_ps(_mm512_loadu_ps(src + i), vs), mbits, bias, max_code);
        __m512i c1 = fp8_encode_avx512(_mm512_div_ps(_mm512_loadu_ps(src + i + 16), vs), mbits,
                                       bias, max_code);
        _mm_storeu_si128((__m128i *)(dst + i), _mm512_cvtepi32_epi8(c0));
        _mm_storeu_si128((__m128i *)(dst + i + 16), _mm512_cvtepi32_epi8(c1));
    }
    for (; i < n; i += 16) {
        __mmask16 k = lane_mask_avx512(n - i);
        __m512i c = fp8_encode_avx512(_mm512_div_ps(_mm512_maskz_loadu_ps(k, src + i), vs), mbits,
                                      bias, max_code);
        _mm512_mask_cvtepi32_storeu_epi8(dst + i, k, c);
    }
}

/* Values of 16 FP8 codes (bytes). */
typedef __m512 (*fp8_decode16_avx512_fn)(__m128i b);

/* The per-tensor FP8 dequantize driver (§10): fl(value(q) * scale). */
static inline void fp8_dequant_avx512(const uint8_t *src, int64_t n, float scale, float *dst,
                                      fp8_decode16_avx512_fn decode16)
{
    const __m512 vs = _mm512_set1_ps(scale);
    int64_t i = 0;

    for (; i + 32 <= n; i += 32) {
        __m512 v0 = decode16(_mm_loadu_si128((const __m128i *)(src + i)));
        __m512 v1 = decode16(_mm_loadu_si128((const __m128i *)(src + i + 16)));
        _mm512_storeu_ps(dst + i, nan_canon_avx512(_mm512_mul_ps(v0, vs)));
        _mm512_storeu_ps(dst + i + 16, nan_canon_avx512(_mm512_mul_ps(v1, vs)));
    }
    for (; i < n; i += 16) {
        __mmask16 k = lane_mask_avx512(n - i);
        __m512 v = decode16(_mm_maskz_loadu_epi8(k, src + i));
        _mm512_mask_storeu_ps(dst + i, k, nan_canon_avx512(_mm512_mul_ps(v, vs)));
    }
}

/* The E8M0 byte of a block without NaN/Inf from its amax (>= 0), FLOOR or RCEIL (§13), for an
 * element format whose largest value has exponent emax and f32 mantissa bits max_mant. */
static inline uint8_t mx_scale_avx512(float amax, int32_t rounding, int32_t emax, uint32_t max_mant)
{
    uint32_t b = qs_f32_bits(amax);
    /* biased exponent minus emax = floor(log2 amax) - emax + 127; subnormal or zero amax clamps */
    int32_t e = (int32_t)(b >> 23) - emax;

    if (rounding != 0 && (b & 0x7FFFFFu) > max_mant)
        e++; /* amax > max * 2^(e - 127): one binade up, so that nothing clips */
    return (uint8_t)(e < 0 ? 0 : e);
}

/* Nonzero when a value of the MX block of 32 held in x0, x1 is NaN or Inf (§13 step 1). */
static inline __mmask16 mx_special_avx512(__m512 x0, __m512 x1)
{
    const __m512i expo = _mm512_set1_epi32(0x7F800000);

    return _mm512_cmpeq_epi32_mask(_mm512_and_si512(_mm512_castps_si512(x0), expo), expo) |
           _mm512_cmpeq_epi32_mask(_mm512_and_si512(_mm512_castps_si512(x1), expo), expo);
}

/* The scale byte of an MX block of 32 without NaN/Inf held in x0, x1 (see mx_scale_avx512). */
static inline uint8_t mx_block_scale_avx512(__m512 x0, __m512 x1, int32_t rounding, int32_t emax,
                                            uint32_t max_mant)
{
    __m512 m = _mm512_max_ps(_mm512_abs_ps(x0), _mm512_abs_ps(x1));

    return mx_scale_avx512(_mm512_reduce_max_ps(m), rounding, emax, max_mant);
}

/* 2^(127 - s), the element multiplier of scale byte s (a normal f32 for every finite block). */
static inline __m512 mx_mul_avx512(uint8_t s)
{
    return _mm512_castsi512_ps(_mm512_set1_epi32((int32_t)(254 - s) << 23));
}

/* ---- MX quantize, four blocks per step ------------------------------------------------------- */

/* Element codes of one finite block x0, x1 scaled by mul, stored as the block's data bytes. */
typedef void (*mx_encode32_avx512_fn)(__m512 x0, __m512 x1, __m512 mul, uint8_t *dst);
/* One block of len (1...32) values by itself, NaN/Inf blocks included: data bytes and scale. */
typedef void (*mx_block_avx512_fn)(const float *v, int64_t len, int32_t rounding, uint8_t *dst,
                                   uint8_t *scale);

/* The amax bits of four blocks, block k in x[2k], x[2k + 1], in every lane of 128-bit quarter k:
 * a transposing reduction (three steps of one max each) instead of four horizontal maxima with a
 * round trip through a scalar, so the four blocks do not form one dependency chain each. It takes
 * the bits of |x| as unsigned integers, whose order is that of the magnitudes and in which NaN
 * and Inf (exponent all ones) are at or above 0x7F800000: a lane there says that its block holds
 * one (§13 step 1), which saves a separate test of every vector. */
static inline __m512i mx_amax4_avx512(const __m512 x[8])
{
    const __m512i absm = _mm512_set1_epi32(0x7FFFFFFF);
    __m512i m[4];

    for (int k = 0; k < 4; k++)
        m[k] = _mm512_max_epu32(_mm512_and_si512(_mm512_castps_si512(x[2 * k]), absm),
                                _mm512_and_si512(_mm512_castps_si512(x[2 * k + 1]), absm));
    /* quarters [m0 q0|q2, m0 q1|q3, m1 q0|q2, m1 q1|q3], likewise for m2, m3 */
    __m512i a = _mm512_max_epu32(_mm512_shuffle_i32x4(m[0], m[1], 0x44),
                                 _mm512_shuffle_i32x4(m[0], m[1], 0xEE));
    __m512i b = _mm512_max_epu32(_mm512_shuffle_i32x4(m[2], m[3], 0x44),
                                 _mm512_shuffle_i32x4(m[2], m[3], 0xEE));
    /* quarter k: four lanes of block k */
    __m512i c = _mm512_max_epu32(_mm512_shuffle_i32x4(a, b, 0x88), _mm512_shuffle_i32x4(a, b, 0xDD));

    c = _mm512_max_epu32(c, _mm512_shuffle_epi32(c, _MM_PERM_BADC));
    return _mm512_max_epu32(c, _mm512_shuffle_epi32(c, _MM_PERM_CDAB));
}

/* mx_scale_avx512 on every lane: E8M0 bytes (one per 32-bit lane) of finite amax values. */
static inline __m512i mx_scale_vec_avx512(__m512 amax, int32_t rounding, int32_t emax,
                                          uint32_t max_mant)
{
    __m512i b = _mm512_castps_si512(amax);
    __m512i e = _mm512_sub_epi32(_mm512_srli_epi32(b, 23), _mm512_set1_epi32(emax));

    if (rounding != 0) /* one binade up where the mantissa of amax exceeds that of the maximum */
        e = _mm512_mask_add_epi32(
            e,
            _mm512_cmpgt_epi32_mask(_mm512_and_si512(b, _mm512_set1_epi32(0x7FFFFF)),
                                    _mm512_set1_epi32((int32_t)max_mant)),
            e, _mm512_set1_epi32(1));
    return _mm512_max_epi32(e, _mm512_setzero_si512());
}

/* The MX quantize driver: four blocks of 32 per step whenever all four are finite (amax, scale
 * bytes and multipliers computed for the four at once), block by block otherwise and for the
 * partial last block. Element format: largest value 2^emax with f32 mantissa max_mant; a block
 * takes 32 / per_byte data bytes. */
static inline void mx_quant_avx512(const float *src, int64_t n, int32_t rounding, int32_t emax,
                                   uint32_t max_mant, int32_t per_byte,
                                   mx_encode32_avx512_fn encode32, mx_block_avx512_fn block_fn,
                                   uint8_t *dst, uint8_t *scales)
{
    const int64_t bb = 32 / per_byte; /* data bytes per block */
    int64_t b = 0;

    for (; (b + 4) * 32 <= n; b += 4) {
        const float *v = src + b * 32;
        __m512 x[8];
        for (int k = 0; k < 8; k++)
            x[k] = _mm512_loadu_ps(v + 16 * k);
        __m512i am = mx_amax4_avx512(x);
        if (_mm512_cmpge_epu32_mask(am, _mm512_set1_epi32(0x7F800000))) {
            /* a NaN/Inf block among the four (§13 step 1): one at a time */
            for (int k = 0; k < 4; k++)
                block_fn(v + 32 * k, 32, rounding, dst + (b + k) * bb, scales + b + k);
            continue;
        }
        __m512i s = mx_scale_vec_avx512(_mm512_castsi512_ps(am), rounding, emax, max_mant);
        /* 2^(127 - s) per lane: a normal f32 for every finite block (s <= 253) */
        __m512 mul = _mm512_castsi512_ps(
            _mm512_slli_epi32(_mm512_sub_epi32(_mm512_set1_epi32(254), s), 23));
        /* the scale bytes sit in lanes 0, 4, 8, 12 */
        __m128i sb = _mm_shuffle_epi8(_mm512_cvtepi32_epi8(s),
                                      _mm_setr_epi8(0, 4, 8, 12, -1, -1, -1, -1, -1, -1, -1, -1,
                                                    -1, -1, -1, -1));
        uint32_t w = (uint32_t)_mm_cvtsi128_si32(sb);
        memcpy(scales + b, &w, 4);
        encode32(x[0], x[1], _mm512_shuffle_f32x4(mul, mul, 0x00), dst + b * bb);
        encode32(x[2], x[3], _mm512_shuffle_f32x4(mul, mul, 0x55), dst + (b + 1) * bb);
        encode32(x[4], x[5], _mm512_shuffle_f32x4(mul, mul, 0xAA), dst + (b + 2) * bb);
        encode32(x[6], x[7], _mm512_shuffle_f32x4(mul, mul, 0xFF), dst + (b + 3) * bb);
    }
    for (; b * 32 < n; b++) {
        int64_t len = n - b * 32 < 32 ? n - b * 32 : 32;
        block_fn(src + b * 32, len, rounding, dst + b * bb, scales + b);
    }
}

#endif /* QS_X86_MINIFLOAT_AVX512_H */
