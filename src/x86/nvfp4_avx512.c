/* SPDX-License-Identifier: MIT */
/*
 * NVIDIA NVFP4 quantize and dequantize for AVX-512 F/BW/DQ/VL (docs/formats.md §11, §14),
 * bit-identical to src/ref/nvfp4_ref.c, with its operation order: per block of 16, amax (NaN
 * ignored), S = fl(amax / fl(6 * s_global)), S = 0 -> 0x38, S < 2^-9 -> 2^-9 (a comparison, so
 * NaN stays NaN), scale byte E4M3_RNE_sat(S) without sign, den = fl(value(S) * s_global), codes
 * E2M1_RNE_sat(fl(v / den)) with a true division (NaN -> 0; den = 0 -> 0), decode
 * fl(value(P) * den). The block scales of 16 blocks are computed in one vector pass. A partial
 * last block is read with zero-masked loads (+0.0 changes no amax) and written with masked
 * stores, so nothing past n is read or written. The E4M3/E2M1 rounding and decoding are shared
 * through minifloat_avx512.h.
 */
#include <immintrin.h>

#include "../core/kernels.h"
#include "../ref/ref.h"
#include "minifloat_avx512.h"
#include "nan_avx512.h"

/* E2M1 codes (0...15) of 16 floats, one per 32-bit lane; NaN -> 0 (§11), Inf saturates. */
static inline __m512i e2m1_encode_avx512(__m512 y)
{
    __m512i a = _mm512_and_si512(_mm512_castps_si512(y), _mm512_set1_epi32(0x7FFFFFFF));
    __mmask16 ok = _mm512_cmple_epi32_mask(a, _mm512_set1_epi32(0x7F800000)); /* not NaN */

    return _mm512_maskz_mov_epi32(ok, e2m1_encode_finite_avx512(y));
}

static inline float nvfp4_amax_avx512(__m512 x)
{
    /* maxps returns its second operand when the first is NaN: NaN is ignored (fmaxf) */
    return _mm512_reduce_max_ps(_mm512_max_ps(_mm512_abs_ps(x), _mm512_setzero_ps()));
}

/* Scale bytes of up to 16 blocks from their amaxes, one per lane, and den = fl(value(scale) *
 * s_global) per lane: the reference's block-scale steps, vectorized across blocks. */
static inline __m512i nvfp4_scales_avx512(__m512 amax, float s_global, __m512 *den)
{
    __m512 s = _mm512_div_ps(amax, _mm512_set1_ps(6.0f * s_global));
    __mmask16 zero = _mm512_cmp_ps_mask(s, _mm512_setzero_ps(), _CMP_EQ_OQ);
    /* a comparison, not a max, so that NaN stays NaN */
    __mmask16 small = _mm512_cmp_ps_mask(s, _mm512_set1_ps(0x1p-9f), _CMP_LT_OQ);
    __m512i code;

    s = _mm512_mask_mov_ps(s, small, _mm512_set1_ps(0x1p-9f));
    code = _mm512_and_si512(e4m3_encode_avx512(s), _mm512_set1_epi32(0x7F)); /* unsigned */
    code = _mm512_mask_mov_epi32(code, zero, _mm512_set1_epi32(0x38)); /* all-zero block: 1.0 */
    *den = _mm512_mul_ps(e4m3_decode_avx512(code), _mm512_set1_ps(s_global));
    return code;
}

/* Codes of one block divided by its den, joined pairwise (element 2j in the low nibble of byte
 * j), in 64-bit lanes; every code 0 when den == 0 (subnormal s_global). */
static inline __m512i nvfp4_block_codes_avx512(__m512 x, __m512 den)
{
    __mmask16 nz = _mm512_cmp_ps_mask(den, _mm512_setzero_ps(), _CMP_NEQ_UQ);
    __m512i c = _mm512_maskz_mov_epi32(nz, e2m1_encode_avx512(_mm512_div_ps(x, den)));

    return _mm512_or_si512(c, _mm512_srli_epi64(c, 28));
}

/*
 * The amaxes of 16 blocks (v[16k ... 16k + 15]) in lane k, NaN ignored as nvfp4_amax_avx512 does
 * (a NaN lane becomes +0 before any maximum; max is exact, so the order of the maxima does not
 * matter): a transposing reduction of 45 shuffles and maxima instead of 16 horizontal ones with
 * a round trip through memory. Levels: quarters of blocks k and k + 8, then 128-bit halves of k
 * and k + 4, then pairs of lanes of k and k + 2, then lanes of k and k + 1; the last permute puts
 * the lanes in block order.
 */
static inline __m512 nvfp4_amax16_avx512(const float *v)
{
    __m512 m[16], t[8], u[4], w[2], r;

    for (int k = 0; k < 16; k++)
        m[k] = _mm512_max_ps(_mm512_abs_ps(_mm512_loadu_ps(v + 16 * k)), _mm512_setzero_ps());
    for (int k = 0; k < 8; k++)
        t[k] = _mm512_max_ps(_mm512_shuffle_f32x4(m[k], m[k + 8], 0x44),
                             _mm512_shuffle_f32x4(m[k], m[k + 8], 0xEE));
    /* u[k] quarters: blocks k, k + 8, k + 4, k + 12 (four partial lanes each) */
    for (int k = 0; k < 4; k++)
        u[k] = _mm512_max_ps(_mm512_shuffle_f32x4(t[k], t[k + 4], 0x88),
                             _mm512_shuffle_f32x4(t[k], t[k + 4], 0xDD));
    /* w[k] quarter j: two lanes of the block of u[k], two of the block of u[k + 2] */
    for (int k = 0; k < 2; k++)
        w[k] = _mm512_max_ps(_mm512_shuffle_ps(u[k], u[k + 2], 0x44),
                             _mm512_shuffle_ps(u[k], u[k + 2], 0xEE));
    /* quarter j of r: the blocks of u[0], u[2], u[1], u[3] in that quarter */
    r = _mm512_max_ps(_mm512_shuffle_ps(w[0], w[1], 0x88), _mm512_shuffle_ps(w[0], w[1], 0xDD));
    return _mm512_permutexvar_ps(
        _mm512_setr_epi32(0, 2, 1, 3, 8, 10, 9, 11, 4, 6, 5, 7, 12, 14, 13, 15), r);
}

void qs_nvfp4_quant__avx512(const float *src, int64_t n, float s_global, uint8_t *dst,
                            uint8_t *scales)
{
    int64_t b = 0;

    /* 16 blocks at a time: the block scales of the group take one vector pass */
    for (; (b + 16) * 16 <= n; b += 16) {
        const float *v = src + b * 16;
        __m512 den;
        __m512i code = nvfp4_scales_avx512(nvfp4_amax16_avx512(v), s_global, &den);
        _mm_storeu_si128((__m128i *)(scales + b), _mm512_cvtepi32_epi8(code));
        for (int k = 0; k < 16; k++) {
            __m512 d = _mm512_permutexvar_ps(_mm512_set1_epi32(k), den);
            __m512i c = nvfp4_block_codes_avx512(_mm512_loadu_ps(v + 16 * k), d);
            _mm_storel_epi64((__m128i *)(dst + (b + k) * 8), _mm512_cvtepi64_epi8(c));
        }
    }
    for (; b * 16 < n; b++) {
        int64_t len = n - b * 16 < 16 ? n - b * 16 : 16;
        int64_t nbytes = (len + 1) / 2;
        __mmask16 k = lane_mask_avx512(len);
        __m512 x = _mm512_maskz_loadu_ps(k, src + b * 16), den;
        __m512i code = nvfp4_scales_avx512(_mm512_set1_ps(nvfp4_amax_avx512(x)), s_global, &den);

        scales[b] = (uint8_t)_mm_cvtsi128_si32(_mm512_castsi512_si128(code));
        _mm512_mask_cvtepi64_storeu_epi8(dst + b * 8, (__mmask8)((1u << nbytes) - 1),
                                         nvfp4_block_codes_avx512(x, den));
    }
}

/* 16 bytes of nibbles -> 32 codes in two vectors, element order (low nibble first). */
static inline void nvfp4_unpack32_avx512(__m128i b, __m512i *c0, __m512i *c1)
{
    __m512i w = _mm512_cvtepu8_epi32(b);
    /* the table permute reads only bits 0..3 of an index: the high nibble needs no mask */
    __m512i lo = w, hi = _mm512_srli_epi32(w, 4);

    *c0 = _mm512_permutex2var_epi32(lo, _mm512_setr_epi32(0, 16, 1, 17, 2, 18, 3, 19, 4, 20, 5,
                                                          21, 6, 22, 7, 23), hi);
    *c1 = _mm512_permutex2var_epi32(lo, _mm512_setr_epi32(8, 24, 9, 25, 10, 26, 11, 27, 12, 28,
                                                          13, 29, 14, 30, 15, 31), hi);
}

/* Sixteen full blocks (256 values) with their dens, two blocks per step; canon: the NaN fix-up
 * (a constant at each call, so the compiler keeps two loops, neither with a select). */
static inline void nvfp4_dequant16_avx512(const uint8_t *src, const float *den, __m512 table,
                                          float *dst, int canon)
{
    for (int k = 0; k < 16; k += 2) {
        __m512i c0, c1;
        __m512 v0, v1;

        nvfp4_unpack32_avx512(_mm_loadu_si128((const __m128i *)(src + k * 8)), &c0, &c1);
        v0 = _mm512_mul_ps(_mm512_permutexvar_ps(c0, table), _mm512_set1_ps(den[k]));
        v1 = _mm512_mul_ps(_mm512_permutexvar_ps(c1, table), _mm512_set1_ps(den[k + 1]));
        _mm512_storeu_ps(dst + k * 16, canon ? nan_canon_avx512(v0) : v0);
        _mm512_storeu_ps(dst + k * 16 + 16, canon ? nan_canon_avx512(v1) : v1);
    }
}

void qs_nvfp4_dequant__avx512(const uint8_t *src, const uint8_t *scales, int64_t n,
                              float s_global, float *dst)
{
    const __m512 table = _mm512_loadu_ps(qs_e2m1_values);
    const __m512i idx = _mm512_setr_epi32(0, 0, 1, 1, 2, 2, 3, 3, 4, 4, 5, 5, 6, 6, 7, 7);
    const __m512i shift = _mm512_setr_epi32(0, 4, 0, 4, 0, 4, 0, 4, 0, 4, 0, 4, 0, 4, 0, 4);
    int64_t b = 0;

    /* sixteen full blocks (256 values) per group, two per step, unmasked; den = fl(value(scale) *
     * s_global), the scale's value from a table (UE4M3: readers ignore the sign bit, §14). When
     * the group's 16 dens are all finite, no product can be NaN (E2M1 values are finite), so the
     * NaN fix-up is left out; a NaN or infinite den (NaN scale byte, NaN or huge s_global) keeps
     * it, since Inf * 0 and a NaN s_global's payload must come out as the canonical NaN */
    for (; (b + 16) * 16 <= n; b += 16) {
        /* the 16 dens in one vector: the integer E4M3 decode is exact, so each is the table's
         * value times s_global, the reference's one rounding */
        __m512i sc = _mm512_and_si512(
            _mm512_cvtepu8_epi32(_mm_loadu_si128((const __m128i *)(scales + b))),
            _mm512_set1_epi32(0x7F));
        __m512 dv = _mm512_mul_ps(e4m3_decode_avx512(sc), _mm512_set1_ps(s_global));
        int finite = _mm512_cmp_ps_mask(_mm512_abs_ps(dv), _mm512_set1_ps(0x1.fffffep127f),
                                        _CMP_LE_OQ) == 0xFFFF;
        float den[16];

        _mm512_storeu_ps(den, dv);
        if (finite)
            nvfp4_dequant16_avx512(src + b * 8, den, table, dst + b * 16, 0);
        else
            nvfp4_dequant16_avx512(src + b * 8, den, table, dst + b * 16, 1);
    }
    for (; (b + 2) * 16 <= n; b += 2) {
        __m512i c0, c1;
        __m512 d0 = _mm512_set1_ps(qs_ue4m3_values[scales[b] & 0x7F] * s_global);
        __m512 d1 = _mm512_set1_ps(qs_ue4m3_values[scales[b + 1] & 0x7F] * s_global);

        nvfp4_unpack32_avx512(_mm_loadu_si128((const __m128i *)(src + b * 8)), &c0, &c1);
        _mm512_storeu_ps(dst + b * 16,
                         nan_canon_avx512(_mm512_mul_ps(_mm512_permutexvar_ps(c0, table), d0)));
        _mm512_storeu_ps(dst + b * 16 + 16,
                         nan_canon_avx512(_mm512_mul_ps(_mm512_permutexvar_ps(c1, table), d1)));
    }
    for (; b * 16 < n; b++) {
        int64_t len = n - b * 16 < 16 ? n - b * 16 : 16;
        int64_t nbytes = (len + 1) / 2;
        __mmask16 k = lane_mask_avx512(len);
        __mmask16 kb = (__mmask16)((1u << nbytes) - 1);
        __m512i w = _mm512_cvtepu8_epi32(_mm_maskz_loadu_epi8(kb, src + b * 8));
        /* lane 2j takes the low nibble of byte j, lane 2j + 1 its high nibble */
        __m512i c = _mm512_and_si512(_mm512_srlv_epi32(_mm512_permutexvar_epi32(idx, w), shift),
                                     _mm512_set1_epi32(0xF));
        __m512 den = _mm512_mul_ps(_mm512_set1_ps(qs_ue4m3_values[scales[b] & 0x7F]),
                                   _mm512_set1_ps(s_global));

        _mm512_mask_storeu_ps(
            dst + b * 16, k, nan_canon_avx512(_mm512_mul_ps(_mm512_permutexvar_ps(c, table), den)));
    }
}
