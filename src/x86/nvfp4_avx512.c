/* SPDX-License-Identifier: MIT */
/*
 * NVIDIA NVFP4 quantize and dequantize for AVX-512 F/BW/DQ/VL (docs/formats.md §11, §14),
 * bit-identical to src/ref/nvfp4_ref.c, with its operation order: per block of 16, amax (NaN
 * ignored), S = fl(amax / fl(6 * s_global)), S = 0 -> 0x38, S < 2^-9 -> 2^-9 (a comparison, so
 * NaN stays NaN), scale byte E4M3_RNE_sat(S) without sign, den = fl(value(S) * s_global), codes
 * E2M1_RNE_sat(fl(v / den)) (NaN -> 0; den = 0 -> 0), decode fl(value(P) * den). The block scales
 * of 16 blocks are computed in one vector pass. Where the 16 dens are finite and > 0, the codes
 * come from three comparisons of |v| against the block's exact thresholds (nvfp4_rows.h: the
 * same codes as the division, without one); otherwise, and for a partial last group, by the
 * division itself. A partial last block is read with zero-masked loads (+0.0 changes no amax)
 * and written with masked stores, so nothing past n is read or written. The E4M3/E2M1 rounding
 * and decoding are shared through minifloat_avx512.h.
 */
#include <string.h>

#include <immintrin.h>

#include "../core/kernels.h"
#include "../ref/ref.h"
#include "minifloat_avx512.h"
#include "nan_avx512.h"
#include "nvfp4_rows.h"
#include "prefetch_x86.h"

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
 * The amaxes of 16 blocks (v[16k ... 16k + 15]) in lane k: a transposing reduction of 31 shuffles
 * and 15 maxima instead of 16 horizontal ones with a round trip through memory. Levels: quarters
 * of blocks k and k + 8, then 128-bit halves of k and k + 4, then pairs of lanes of k and k + 2,
 * then lanes of k and k + 1; the last permute puts the lanes in block order. The first level is
 * VRANGEPS (max(|a|, |b|), sign cleared), which ignores a quiet NaN operand as the reference does
 * but turns a signaling one into a NaN that would hide its partner; so the later levels are
 * unsigned integer maxima of the bits, in which every NaN (bits above those of +Inf, the sign
 * bit included) wins. A lane above 0x7F800000 thus says that its block held a NaN, and the caller
 * then takes nvfp4_amax16_nan_avx512; otherwise every lane is the exact block amax (maxima are
 * exact, so their order does not matter).
 */
static inline __m512i nvfp4_amax16_bits_avx512(const float *v)
{
    __m512i t[8], u[4], w[2], r;

    for (int k = 0; k < 8; k++) {
        __m512 a = _mm512_loadu_ps(v + 16 * k), b = _mm512_loadu_ps(v + 16 * k + 128);
        t[k] = _mm512_castps_si512(_mm512_range_ps(_mm512_shuffle_f32x4(a, b, 0x44),
                                                   _mm512_shuffle_f32x4(a, b, 0xEE), 0x0B));
    }
    /* u[k] quarters: blocks k, k + 8, k + 4, k + 12 (four partial lanes each) */
    for (int k = 0; k < 4; k++)
        u[k] = _mm512_max_epu32(_mm512_shuffle_i32x4(t[k], t[k + 4], 0x88),
                                _mm512_shuffle_i32x4(t[k], t[k + 4], 0xDD));
    /* w[k] quarter j: two lanes of the block of u[k], two of the block of u[k + 2] */
    for (int k = 0; k < 2; k++)
        w[k] = _mm512_max_epu32(_mm512_unpacklo_epi64(u[k], u[k + 2]),
                                _mm512_unpackhi_epi64(u[k], u[k + 2]));
    /* quarter j of r: the blocks of u[0], u[2], u[1], u[3] in that quarter */
    r = _mm512_max_epu32(
        _mm512_castps_si512(_mm512_shuffle_ps(_mm512_castsi512_ps(w[0]), _mm512_castsi512_ps(w[1]),
                                              0x88)),
        _mm512_castps_si512(_mm512_shuffle_ps(_mm512_castsi512_ps(w[0]), _mm512_castsi512_ps(w[1]),
                                              0xDD)));
    return _mm512_permutexvar_epi32(
        _mm512_setr_epi32(0, 2, 1, 3, 8, 10, 9, 11, 4, 6, 5, 7, 12, 14, 13, 15), r);
}

/* The amaxes of 16 blocks with NaN left out, for a group that holds one: each block on its own. */
static inline __m512 nvfp4_amax16_nan_avx512(const float *v)
{
    _Alignas(64) float am[16];

    for (int k = 0; k < 16; k++)
        am[k] = nvfp4_amax_avx512(_mm512_loadu_ps(v + 16 * k));
    return _mm512_load_ps(am);
}

/* Row s of thresholds (nvfp4_rows.h): floor_f32(M_k * den), M_k * den exact in double, rounded
 * down once by the conversion's embedded rounding. */
static inline void nvfp4_row_fill_avx512(struct nvfp4_rows *r, int s)
{
    static const double mid[8] = NVFP4_MIDPOINTS_INIT;
    const __m512d b = _mm512_mul_pd(_mm512_loadu_pd(mid),
                                    _mm512_set1_pd((double)(qs_ue4m3_values[s] * r->s_global)));

    _mm256_store_ps(r->f[s], _mm512_cvt_roundpd_ps(b, _MM_FROUND_TO_NEG_INF | _MM_FROUND_NO_EXC));
}

/*
 * Codes (0...15, one per 32-bit lane) of one block against its row of thresholds F_0 ... F_6
 * (nvfp4_rows.h): the magnitude #{k : |v| > F_k} by a three-step search, against F_3, then F_1
 * or F_5 (a blend of the two), then F_0, F_2, F_4 or F_6 (lane c of the row for the running code
 * c = 0, 2, 4, 6); then the sign bit for every negative v that is not NaN (a NaN fails every
 * comparison and gets code 0, §11).
 */
static inline __m512i nvfp4_row_codes_avx512(__m512 x, const float *row)
{
    const __m512 t = _mm512_castps256_ps512(_mm256_load_ps(row)); /* lanes 8...15 never read */
    const __m512 a = _mm512_abs_ps(x);
    __mmask16 m1 = _mm512_cmp_ps_mask(a, _mm512_set1_ps(row[3]), _CMP_GT_OQ);
    __mmask16 m2 = _mm512_cmp_ps_mask(
        a, _mm512_mask_blend_ps(m1, _mm512_set1_ps(row[1]), _mm512_set1_ps(row[5])), _CMP_GT_OQ);
    __m512i c = _mm512_maskz_mov_epi32(m1, _mm512_set1_epi32(4));

    c = _mm512_mask_add_epi32(c, m2, c, _mm512_set1_epi32(2));
    c = _mm512_mask_add_epi32(
        c, _mm512_cmp_ps_mask(a, _mm512_permutexvar_ps(c, t), _CMP_GT_OQ), c,
        _mm512_set1_epi32(1));
    /* negative zero, subnormal, normal or infinite: not NaN */
    return _mm512_mask_or_epi32(c, _mm512_fpclass_ps_mask(x, 0x54), c, _mm512_set1_epi32(8));
}

/* The 32 data bytes of four consecutive blocks from their codes: the four blocks' codes are
 * joined into the bytes of one 32-bit lane, each pair of lanes into nibbles (element 2j low),
 * then the bytes are put back in block order. */
static inline void nvfp4_store4_avx512(__m512i c0, __m512i c1, __m512i c2, __m512i c3,
                                       uint8_t *dst)
{
    __m512i y = _mm512_ternarylogic_epi32(c0, _mm512_slli_epi32(c1, 8), _mm512_slli_epi32(c2, 16),
                                          0xFE);
    y = _mm512_or_si512(y, _mm512_slli_epi32(c3, 24));
    y = _mm512_or_si512(y, _mm512_srli_epi64(y, 28)); /* byte k of qword j: block k, pair j */
    __m256i b = _mm512_cvtepi64_epi32(y);
    /* per 128-bit half (pairs 0-3, 4-7): bytes grouped by block, then halves interleaved */
    b = _mm256_shuffle_epi8(b, _mm256_setr_epi8(0, 4, 8, 12, 1, 5, 9, 13, 2, 6, 10, 14, 3, 7, 11,
                                                15, 0, 4, 8, 12, 1, 5, 9, 13, 2, 6, 10, 14, 3, 7,
                                                11, 15));
    b = _mm256_permutevar8x32_epi32(b, _mm256_setr_epi32(0, 4, 1, 5, 2, 6, 3, 7));
    _mm256_storeu_si256((__m256i *)dst, b);
}

/* The scale bytes (one per lane) and dens of the 16 full blocks at v: the group's amaxes, then
 * its block scales. */
static inline __m512i nvfp4_group_scales_avx512(const float *v, float s_global, __m512 *den)
{
    __m512i am = nvfp4_amax16_bits_avx512(v);

    return nvfp4_scales_avx512(_mm512_cmpgt_epu32_mask(am, _mm512_set1_epi32(0x7F800000))
                                   ? nvfp4_amax16_nan_avx512(v)
                                   : _mm512_castsi512_ps(am),
                               s_global, den);
}

void qs_nvfp4_quant__avx512(const float *src, int64_t n, float s_global, uint8_t *dst,
                            uint8_t *scales)
{
    struct nvfp4_rows rows;
    int64_t b = 0;
    __m512 den = _mm512_setzero_ps();
    __m512i code = _mm512_setzero_si512();

    nvfp4_rows_init(&rows, s_global);
    /* 16 blocks at a time: the block scales of the group take one vector pass. The scales of the
     * next group are computed before the codes of this one: their chain of dependent steps
     * (amax, division, E4M3 rounding and decoding) then runs while this group's codes are
     * made, instead of stalling the start of every group (the group's work is more than the
     * out-of-order window holds) */
    if (16 * 16 <= n)
        code = nvfp4_group_scales_avx512(src, s_global, &den);
    for (; (b + 16) * 16 <= n; b += 16) {
        const float *v = src + b * 16;
        __m512 next_den = _mm512_setzero_ps();
        __m512i next_code = _mm512_setzero_si512();

        /* and the group after it into L1: the next group's amax loads are the oldest work in
         * flight, and a miss there held up everything after it (4096 x 4096: slower on average
         * than without the early scales, 7-9% faster with this). A prefetch never faults and
         * changes no data; past n it warms the caller's next span */
        for (int k = 0; k < 16; k++)
            qs_prefetch_l1(v, 4 * (512 + 16 * k));
        if ((b + 32) * 16 <= n)
            next_code = nvfp4_group_scales_avx512(v + 256, s_global, &next_den);
        _Alignas(16) uint8_t sb[16]; /* the scale bytes, also indices of the rows */
        _mm_store_si128((__m128i *)sb, _mm512_cvtepi32_epi8(code));
        memcpy(scales + b, sb, 16);
        __mmask16 ok = _mm512_cmp_ps_mask(den, _mm512_setzero_ps(), _CMP_GT_OQ) &
                       _mm512_cmp_ps_mask(den, _mm512_set1_ps(0x1.fffffep127f), _CMP_LE_OQ);
        if (ok != 0xFFFF) { /* a den of 0, Inf or NaN: the division, as the reference */
            for (int k = 0; k < 16; k++) {
                __m512 d = _mm512_permutexvar_ps(_mm512_set1_epi32(k), den);
                __m512i c = nvfp4_block_codes_avx512(_mm512_loadu_ps(v + 16 * k), d);
                _mm_storel_epi64((__m128i *)(dst + (b + k) * 8), _mm512_cvtepi64_epi8(c));
            }
        } else {
            /* rows for the group's scale bytes (rarely new after the first groups) */
            if (_mm512_cmplt_epi32_mask(code, _mm512_set1_epi32(rows.lo)) |
                _mm512_cmpgt_epi32_mask(code, _mm512_set1_epi32(rows.hi)))
                nvfp4_rows_cover(&rows, _mm512_reduce_min_epi32(code),
                                 _mm512_reduce_max_epi32(code), nvfp4_row_fill_avx512);
            for (int k = 0; k < 16; k += 4) {
                const uint8_t *s = sb + k;
                nvfp4_store4_avx512(
                    nvfp4_row_codes_avx512(_mm512_loadu_ps(v + 16 * k), rows.f[s[0]]),
                    nvfp4_row_codes_avx512(_mm512_loadu_ps(v + 16 * k + 16), rows.f[s[1]]),
                    nvfp4_row_codes_avx512(_mm512_loadu_ps(v + 16 * k + 32), rows.f[s[2]]),
                    nvfp4_row_codes_avx512(_mm512_loadu_ps(v + 16 * k + 48), rows.f[s[3]]),
                    dst + (b + k) * 8);
            }
        }
        code = next_code;
        den = next_den;
    }
    for (; b * 16 < n; b++) {
        int64_t len = n - b * 16 < 16 ? n - b * 16 : 16;
        int64_t nbytes = (len + 1) / 2;
        __mmask16 k = lane_mask_avx512(len);
        __m512 x = _mm512_maskz_loadu_ps(k, src + b * 16);

        code = nvfp4_scales_avx512(_mm512_set1_ps(nvfp4_amax_avx512(x)), s_global, &den);

        scales[b] = (uint8_t)_mm_cvtsi128_si32(_mm512_castsi512_si128(code));
        _mm512_mask_cvtepi64_storeu_epi8(dst + b * 8, (__mmask8)((1u << nbytes) - 1),
                                         nvfp4_block_codes_avx512(x, den));
    }
}

/* 16 bytes of nibbles -> 32 codes in two vectors, element order (low nibble first). The bytes
 * are interleaved with themselves shifted right by 4 in 128-bit registers, then widened: two
 * 512-bit operations instead of four. The table permute reads only bits 0..3 of an index, so
 * neither nibble needs a mask (the high bits left by the 16-bit shift are never read). */
static inline void nvfp4_unpack32_avx512(__m128i b, __m512i *c0, __m512i *c1)
{
    __m128i h = _mm_srli_epi16(b, 4);

    *c0 = _mm512_cvtepu8_epi32(_mm_unpacklo_epi8(b, h));
    *c1 = _mm512_cvtepu8_epi32(_mm_unpackhi_epi8(b, h));
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
