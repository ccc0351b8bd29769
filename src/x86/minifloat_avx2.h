/* SPDX-License-Identifier: MIT */
/*
 * Minifloat helpers shared by the FP8 and microscaling kernels for AVX2 + FMA + F16C (e4m3_avx2.c,
 * e5m2_avx2.c, mxfp4_avx2.c, mxfp8_avx2.c, nvfp4_avx2.c; docs/formats.md §10-§14): RNE encoders
 * for E4M3, E5M2 and E2M1 that round in the integer domain on the f32 bits for normal results and
 * with one exact power-of-two scaling plus VCVTPS2DQ (RNE in the default MXCSR) for subnormal
 * ones, the exact E4M3 decoder (E2M1 decodes through lut16_avx2.h), byte and nibble packing, the
 * OCP MX (E8M0) block scale and the quantize/dequantize drivers of the MX formats, whose partial
 * last block goes through a zero-padded local block (the format's +0.0 padding) so nothing past
 * n is read or written.
 * Everything is `static inline`; the format constants and the block routines passed to the
 * drivers are compile-time constants, so each kernel file gets its own inlined copy. Include only
 * from files compiled with the AVX2 flags (*_avx2.c).
 */
#ifndef QS_X86_MINIFLOAT_AVX2_H
#define QS_X86_MINIFLOAT_AVX2_H

#include <string.h>

#include <immintrin.h>

#include "../core/kernels.h"
#include "../ref/ref.h"
#include "prefetch_x86.h"

/* Magnitude codes of 8 values from their bits without sign, a = |y| (NaN excluded), for a format
 * with mbits mantissa bits and exponent bias `bias`, RNE, saturating to max_code (Inf included). */
static inline __m256i minifloat_mag_avx2(__m256i a, int mbits, int bias, int max_code)
{
    const int shift = 23 - mbits;
    /* below the smallest normal 2^(1 - bias) the quantum is 2^(1 - bias - mbits): rne(a * 2^(bias
     * + mbits - 1)), an exact scaling */
    const __m256 up = _mm256_castsi256_ps(_mm256_set1_epi32((127 + bias + mbits - 1) << 23));
    __m256i sub = _mm256_cvtps_epi32(_mm256_mul_ps(_mm256_castsi256_ps(a), up));
    /* normal: RNE at f32 mantissa bit `shift`, then rebias 127 -> bias; a carry rolls into the
     * exponent */
    __m256i odd = _mm256_and_si256(_mm256_srli_epi32(a, shift), _mm256_set1_epi32(1));
    __m256i r =
        _mm256_add_epi32(_mm256_add_epi32(a, _mm256_set1_epi32((1 << (shift - 1)) - 1)), odd);
    __m256i nrm =
        _mm256_sub_epi32(_mm256_srli_epi32(r, shift), _mm256_set1_epi32((127 - bias) << mbits));
    __m256i is_sub = _mm256_cmpgt_epi32(_mm256_set1_epi32((128 - bias) << 23), a);

    return _mm256_min_epi32(_mm256_blendv_epi8(nrm, sub, is_sub), _mm256_set1_epi32(max_code));
}

/* FP8 codes of 8 floats (0...255 per 32-bit lane): sign in bit 7, NaN -> 0x7F | sign. */
static inline __m256i fp8_encode_avx2(__m256 y, int mbits, int bias, int max_code)
{
    const __m256i u = _mm256_castps_si256(y);
    const __m256i a = _mm256_and_si256(u, _mm256_set1_epi32(0x7FFFFFFF));
    __m256i mag = minifloat_mag_avx2(a, mbits, bias, max_code);
    __m256i is_nan = _mm256_cmpgt_epi32(a, _mm256_set1_epi32(0x7F800000));
    __m256i sign = _mm256_and_si256(_mm256_srli_epi32(u, 24), _mm256_set1_epi32(0x80));

    mag = _mm256_or_si256(mag, _mm256_and_si256(is_nan, _mm256_set1_epi32(0x7F)));
    return _mm256_or_si256(mag, sign);
}

/* E4M3 codes of 8 floats: everything above 448 (Inf included) becomes 0x7E. */
static inline __m256i e4m3_encode_avx2(__m256 y)
{
    return fp8_encode_avx2(y, 3, 7, 0x7E);
}

/* E4M3 codes of 8 finite floats (NaN must not reach this encoder). */
static inline __m256i e4m3_encode_finite_avx2(__m256 y)
{
    const __m256i u = _mm256_castps_si256(y);
    __m256i mag =
        minifloat_mag_avx2(_mm256_and_si256(u, _mm256_set1_epi32(0x7FFFFFFF)), 3, 7, 0x7E);

    return _mm256_or_si256(mag,
                           _mm256_and_si256(_mm256_srli_epi32(u, 24), _mm256_set1_epi32(0x80)));
}

/* E2M1 codes (0...15) of 8 finite floats, one per 32-bit lane; above 6 saturates to 0x7. */
static inline __m256i e2m1_encode_finite_avx2(__m256 y)
{
    const __m256i u = _mm256_castps_si256(y);
    __m256i mag = minifloat_mag_avx2(_mm256_and_si256(u, _mm256_set1_epi32(0x7FFFFFFF)), 1, 1, 7);

    return _mm256_or_si256(mag, _mm256_and_si256(_mm256_srli_epi32(u, 28), _mm256_set1_epi32(8)));
}

/* Values of 8 E4M3 codes (0...255 per 32-bit lane), exact; 0x7F / 0xFF give NaN with the sign. */
static inline __m256 e4m3_decode_avx2(__m256i c)
{
    const __m256i m = _mm256_and_si256(c, _mm256_set1_epi32(0x7F));
    /* normal: exponent field e -> e + 120, mantissa to the top of the f32 mantissa */
    __m256i nrm = _mm256_add_epi32(_mm256_slli_epi32(m, 20), _mm256_set1_epi32(120 << 23));
    /* subnormal (e = 0): m * 2^-9, computed from an integer so no f32 denormal is touched */
    __m256i sub =
        _mm256_castps_si256(_mm256_mul_ps(_mm256_cvtepi32_ps(m), _mm256_set1_ps(0x1p-9f)));
    __m256i is_sub = _mm256_cmpgt_epi32(_mm256_set1_epi32(8), m);
    __m256i is_nan = _mm256_cmpeq_epi32(m, _mm256_set1_epi32(0x7F));
    __m256i v = _mm256_blendv_epi8(nrm, sub, is_sub);

    v = _mm256_blendv_epi8(v, _mm256_set1_epi32(0x7FC00000), is_nan);
    v = _mm256_or_si256(v, _mm256_slli_epi32(_mm256_and_si256(c, _mm256_set1_epi32(0x80)), 24));
    return _mm256_castsi256_ps(v);
}

/* value(q) * 2^-8 of 16 E4M3 codes (bytes) in two vectors, exactly, through the F16C conversion:
 * the code's seven magnitude bits shifted left by 7 are an f16 with the same fields, whose exponent
 * bias 15 instead of 7 makes every value (subnormals included) 2^-8 times the E4M3 one, and
 * VCVTPH2PS converts it exactly. 0x7F / 0xFF give NaN. The caller multiplies by 2^8 * scale, which
 * is exact whenever that is finite. */
static inline void e4m3_decode16_f16_avx2(__m128i b, __m256 *v0, __m256 *v1)
{
    const __m256i w = _mm256_cvtepu8_epi16(b);
    const __m256i mag = _mm256_and_si256(w, _mm256_set1_epi16(0x7F));
    __m256i h = _mm256_or_si256(_mm256_slli_epi16(mag, 7),
                                _mm256_and_si256(_mm256_slli_epi16(w, 8),
                                                 _mm256_set1_epi16((short)0x8000)));
    /* magnitude 0x7F: the f16 NaN 0x7E00 whatever the sign, which VCVTPH2PS turns into the
     * canonical 0x7FC00000, so callers multiplying by a finite number need no NaN fix-up */
    h = _mm256_blendv_epi8(h, _mm256_set1_epi16(0x7E00),
                           _mm256_cmpeq_epi16(mag, _mm256_set1_epi16(0x7F)));
    *v0 = _mm256_cvtph_ps(_mm256_castsi256_si128(h));
    *v1 = _mm256_cvtph_ps(_mm256_extracti128_si256(h, 1));
}

/* Bytes 0...31 from the low bytes of four vectors of 32-bit codes (each <= 255). */
static inline __m256i pack_bytes_avx2(__m256i c0, __m256i c1, __m256i c2, __m256i c3)
{
    __m256i b = _mm256_packus_epi16(_mm256_packus_epi32(c0, c1), _mm256_packus_epi32(c2, c3));
    /* the packs work per 128-bit lane; put the dwords back in element order */
    return _mm256_permutevar8x32_epi32(b, _mm256_setr_epi32(0, 4, 1, 5, 2, 6, 3, 7));
}

/* 16 bytes of nibbles from 32 codes (four vectors of 8), element 2j in the low nibble of byte j. */
static inline __m128i pack_nibbles_avx2(__m256i c0, __m256i c1, __m256i c2, __m256i c3)
{
    __m256i b = pack_bytes_avx2(c0, c1, c2, c3);
    /* b holds the 32 codes as bytes in element order; join each pair of bytes into one */
    __m256i w =
        _mm256_and_si256(_mm256_or_si256(b, _mm256_srli_epi16(b, 4)), _mm256_set1_epi16(0x00FF));
    w = _mm256_permute4x64_epi64(_mm256_packus_epi16(w, w), 0x08);
    return _mm256_castsi256_si128(w);
}

static inline float hmax_avx2(__m256 m)
{
    __m128 h = _mm_max_ps(_mm256_castps256_ps128(m), _mm256_extractf128_ps(m, 1));
    h = _mm_max_ps(h, _mm_movehl_ps(h, h));
    h = _mm_max_ss(h, _mm_movehdup_ps(h));
    return _mm_cvtss_f32(h);
}

/* One step of the per-tensor FP8 quantizer: codes of 32 values fl(x / scale) (a true division). */
static inline void fp8_quant32_avx2(const float *src, __m256 vs, uint8_t *dst, int mbits, int bias,
                                    int max_code)
{
    __m256i c0 = fp8_encode_avx2(_mm256_div_ps(_mm256_loadu_ps(src), vs), mbits, bias, max_code);
    __m256i c1 =
        fp8_encode_avx2(_mm256_div_ps(_mm256_loadu_ps(src + 8), vs), mbits, bias, max_code);
    __m256i c2 =
        fp8_encode_avx2(_mm256_div_ps(_mm256_loadu_ps(src + 16), vs), mbits, bias, max_code);
    __m256i c3 =
        fp8_encode_avx2(_mm256_div_ps(_mm256_loadu_ps(src + 24), vs), mbits, bias, max_code);

    _mm256_storeu_si256((__m256i *)dst, pack_bytes_avx2(c0, c1, c2, c3));
}

/* The per-tensor FP8 quantize driver (§10); a tail shorter than 32 goes through a zero-padded
 * local block. */
static inline void fp8_quant_avx2(const float *src, int64_t n, float scale, uint8_t *dst, int mbits,
                                  int bias, int max_code)
{
    const __m256 vs = _mm256_set1_ps(scale);
    int64_t i = 0;

    /* the two lines 2048 values (8 KiB) ahead into L1 as each 32 are read (see mx_quant_avx2) */
    for (; i + 32 <= n; i += 32) {
        qs_prefetch_l1(src + i, 4 * 2048);
        qs_prefetch_l1(src + i, 4 * (2048 + 16));
        fp8_quant32_avx2(src + i, vs, dst + i, mbits, bias, max_code);
    }
    if (i < n) {
        float buf[32] = {0};
        uint8_t out[32];
        memcpy(buf, src + i, (size_t)(n - i) * sizeof(float));
        fp8_quant32_avx2(buf, vs, out, mbits, bias, max_code);
        memcpy(dst + i, out, (size_t)(n - i));
    }
}

/* 16 FP8 codes -> 16 floats fl(value(q) * scale). */
typedef void (*fp8_dequant16_avx2_fn)(const uint8_t *src, __m256 vs, float *dst);

/* The per-tensor FP8 dequantize driver (§10); a tail shorter than 16 goes through a zero-padded
 * local block. */
static inline void fp8_dequant_avx2(const uint8_t *src, int64_t n, float scale, float *dst,
                                    fp8_dequant16_avx2_fn dequant16)
{
    const __m256 vs = _mm256_set1_ps(scale);
    int64_t i = 0;

    for (; i + 32 <= n; i += 32) {
        dequant16(src + i, vs, dst + i);
        dequant16(src + i + 16, vs, dst + i + 16);
    }
    for (; i + 16 <= n; i += 16)
        dequant16(src + i, vs, dst + i);
    if (i < n) {
        uint8_t buf[16] = {0};
        float out[16];
        memcpy(buf, src + i, (size_t)(n - i));
        dequant16(buf, vs, out);
        memcpy(dst + i, out, (size_t)(n - i) * sizeof(float));
    }
}

/* Element codes of 32 values x[k] * mul (a finite block), stored as the block's data bytes. */
typedef void (*mx_encode32_avx2_fn)(const __m256 x[4], __m256 mul, uint8_t *dst);
/* 32 codes of one MX block -> 32 floats, each times the block's scale; tab: the format's table
 * (or NULL). */
typedef void (*mx_dequant32_avx2_fn)(const uint8_t *src, __m256 scale, float *dst,
                                     const void *tab);

/* The E8M0 byte of a block without NaN/Inf from its amax (>= 0), FLOOR or RCEIL (§13), for an
 * element format whose largest value has exponent emax and f32 mantissa bits max_mant. */
static inline uint8_t mx_scale_avx2(float amax, int32_t rounding, int32_t emax, uint32_t max_mant)
{
    uint32_t b = qs_f32_bits(amax);
    /* biased exponent minus emax = floor(log2 amax) - emax + 127; subnormal or zero amax clamps */
    int32_t e = (int32_t)(b >> 23) - emax;

    if (rounding != 0 && (b & 0x7FFFFFu) > max_mant)
        e++; /* amax > max * 2^(e - 127): one binade up, so that nothing clips */
    return (uint8_t)(e < 0 ? 0 : e);
}

/* 2^(127 - s), the element multiplier of scale byte s (a normal f32 for every finite block). */
static inline __m256 mx_mul_avx2(uint8_t s)
{
    return _mm256_castsi256_ps(_mm256_set1_epi32((int32_t)(254 - s) << 23));
}

/* One full MX block of 32 values, of an element format with exponent emax and f32 mantissa bits
 * max_mant of its largest value: 32 / per_byte data bytes and the scale byte. */
static inline void mx_block_avx2(const float *v, int32_t rounding, int32_t emax, uint32_t max_mant,
                                 int32_t per_byte, mx_encode32_avx2_fn encode32, uint8_t *dst,
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
        memset(dst, 0, (size_t)(32 / per_byte));
        return;
    }
    uint8_t s = mx_scale_avx2(hmax_avx2(m), rounding, emax, max_mant);

    *scale = s;
    encode32(x, mx_mul_avx2(s), dst);
}

/* Four full MX blocks (128 values) at once when all are finite: the four maxima in one
 * transposing reduction (block 0 in lane 0, 1 in lane 4, 2 in lane 2, 3 in lane 6), the scale bytes
 * and multipliers of the four in one vector, so that the blocks do not each wait on a horizontal
 * maximum through a scalar. 0 (nothing written) when a block holds NaN or Inf. */
static inline int mx_quad_avx2(const float *v, int32_t rounding, int32_t emax, uint32_t max_mant,
                               int32_t per_byte, mx_encode32_avx2_fn encode32, uint8_t *dst,
                               uint8_t *scales)
{
    const __m256i expo = _mm256_set1_epi32(0x7F800000);
    const __m256 absm = _mm256_castsi256_ps(_mm256_set1_epi32(0x7FFFFFFF));
    __m256 x[16], m[4];
    __m256i special = _mm256_setzero_si256();

    for (int k = 0; k < 16; k++) {
        x[k] = _mm256_loadu_ps(v + 8 * k);
        special = _mm256_or_si256(
            special, _mm256_cmpeq_epi32(_mm256_and_si256(_mm256_castps_si256(x[k]), expo), expo));
    }
    if (!_mm256_testz_si256(special, special))
        return 0;
    for (int b = 0; b < 4; b++) /* finite: no NaN reaches a max */
        m[b] = _mm256_max_ps(
            _mm256_max_ps(_mm256_and_ps(x[4 * b], absm), _mm256_and_ps(x[4 * b + 1], absm)),
            _mm256_max_ps(_mm256_and_ps(x[4 * b + 2], absm), _mm256_and_ps(x[4 * b + 3], absm)));
    /* [m0 | m1] and [m2 | m3] folded to four lanes each, then pairs of lanes, then lanes */
    __m256 t0 = _mm256_max_ps(_mm256_permute2f128_ps(m[0], m[1], 0x20),
                              _mm256_permute2f128_ps(m[0], m[1], 0x31));
    __m256 t1 = _mm256_max_ps(_mm256_permute2f128_ps(m[2], m[3], 0x20),
                              _mm256_permute2f128_ps(m[2], m[3], 0x31));
    __m256 u = _mm256_max_ps(_mm256_shuffle_ps(t0, t1, 0x88), _mm256_shuffle_ps(t0, t1, 0xDD));
    __m256i a = _mm256_castps_si256(_mm256_max_ps(u, _mm256_permute_ps(u, 0xB1)));
    /* mx_scale_avx2 on every lane */
    __m256i e = _mm256_sub_epi32(_mm256_srli_epi32(a, 23), _mm256_set1_epi32(emax));
    if (rounding != 0)
        e = _mm256_sub_epi32(e, _mm256_cmpgt_epi32(_mm256_and_si256(a, _mm256_set1_epi32(0x7FFFFF)),
                                                   _mm256_set1_epi32((int32_t)max_mant)));
    e = _mm256_max_epi32(e, _mm256_setzero_si256());
    /* 2^(127 - s): a normal f32 for every finite block */
    __m256 mul =
        _mm256_castsi256_ps(_mm256_slli_epi32(_mm256_sub_epi32(_mm256_set1_epi32(254), e), 23));
    static const int lane[4] = {0, 4, 2, 6};
    for (int b = 0; b < 4; b++) {
        const __m256i idx = _mm256_set1_epi32(lane[b]);
        scales[b] = (uint8_t)_mm256_cvtsi256_si32(_mm256_permutevar8x32_epi32(e, idx));
        encode32(x + 4 * b, _mm256_permutevar8x32_ps(mul, idx), dst + b * 32 / per_byte);
    }
    return 1;
}

/* The MX quantize driver over blocks of 32 (see mx_quad_avx2 and mx_block_avx2). */
static inline void mx_quant_avx2(const float *src, int64_t n, int32_t rounding, int32_t emax,
                                 uint32_t max_mant, int32_t per_byte, mx_encode32_avx2_fn encode32,
                                 uint8_t *dst, uint8_t *scales)
{
    int64_t b = 0;

    for (; (b + 4) * 32 <= n; b += 4) {
        /* the quad 2048 values (8 KiB) ahead into L1, line by line: the hardware prefetcher
         * alone leaves the loads at the head of each quad waiting on memory (MXFP4, 4096 x 4096
         * on a Zen 2: 0.50 ns per value against 0.77). A prefetch never faults and changes no
         * data; past n it warms the caller's next span */
        for (int k = 0; k < 8; k++)
            qs_prefetch_l1(src + b * 32, 4 * (2048 + 16 * k));
        if (mx_quad_avx2(src + b * 32, rounding, emax, max_mant, per_byte, encode32,
                         dst + b * 32 / per_byte, scales + b))
            continue;
        for (int k = 0; k < 4; k++) /* a NaN/Inf block among the four (§13 step 1) */
            mx_block_avx2(src + (b + k) * 32, rounding, emax, max_mant, per_byte, encode32,
                          dst + (b + k) * 32 / per_byte, scales + b + k);
    }
    for (; (b + 1) * 32 <= n; b++)
        mx_block_avx2(src + b * 32, rounding, emax, max_mant, per_byte, encode32,
                      dst + b * 32 / per_byte, scales + b);
    if (b * 32 < n) {
        size_t len = (size_t)(n - b * 32);
        float buf[32] = {0};
        uint8_t out[32];
        memcpy(buf, src + b * 32, len * sizeof(float));
        mx_block_avx2(buf, rounding, emax, max_mant, per_byte, encode32, out, scales + b);
        memcpy(dst + b * 32 / per_byte, out, (len + (size_t)per_byte - 1) / (size_t)per_byte);
    }
}

/* The MX dequantize driver over blocks of 32; a block takes 32 / per_byte data bytes. */
static inline void mx_dequant_avx2(const uint8_t *src, const uint8_t *scales, int64_t n,
                                   int32_t per_byte, float *dst, mx_dequant32_avx2_fn dequant32,
                                   const void *tab)
{
    int64_t b = 0;

    for (; (b + 1) * 32 <= n; b++)
        dequant32(src + b * 32 / per_byte, _mm256_set1_ps(qs_e8m0_decode_inline(scales[b])),
                  dst + b * 32, tab);
    if (b * 32 < n) {
        size_t len = (size_t)(n - b * 32);
        uint8_t buf[32] = {0};
        float out[32];
        memcpy(buf, src + b * 32 / per_byte, (len + (size_t)per_byte - 1) / (size_t)per_byte);
        dequant32(buf, _mm256_set1_ps(qs_e8m0_decode_inline(scales[b])), out, tab);
        memcpy(dst + b * 32, out, len * sizeof(float));
    }
}

#endif /* QS_X86_MINIFLOAT_AVX2_H */
