/* SPDX-License-Identifier: MIT */
/*
 * bitsandbytes FP4 quantize and dequantize for AVX2 + FMA + F16C (spec/formats.md §4, §5), bit for
 * bit as src/ref/fp4_ref.c and in the same operation order: absmax with NaN ignored,
 * inv = 1/absmax, x = v * inv (a multiply, never a division), sign from x < 0, rank
 * r = #{k : |x| > t_k} over the CUDA threshold literals, code = sign | R[r]. The rank is found by
 * a three-step branchless binary search over the sorted thresholds (same count, since they
 * increase strictly); NaN fails every compare and gets code 0 as in the reference. Block tails
 * and odd lengths use the reference's element routines.
 */
#include <math.h>

#include <immintrin.h>

#include "../core/kernels.h"
#include "../ref/ref.h"

/* Thresholds arranged per search step, indexed by the rank found so far: step 4 tests t3; step 2
 * tests t1 or t5 (rank 0 or 4); step 1 tests t[r] for even r. Ranks map to code bits by R. */
typedef struct {
    __m256 t3, step2, step1;
    __m256i rank;
} fp4_tab_avx2;

static inline fp4_tab_avx2 fp4_tab_avx2_load(void)
{
    const float *t = qs_fp4_thresholds;
    const uint8_t *r = qs_fp4_rank_code;
    fp4_tab_avx2 tab;

    tab.t3 = _mm256_set1_ps(t[3]);
    tab.step2 = _mm256_setr_ps(t[1], t[1], t[1], t[1], t[5], t[5], t[5], t[5]);
    tab.step1 = _mm256_setr_ps(t[0], t[0], t[2], t[2], t[4], t[4], t[6], t[6]);
    tab.rank = _mm256_setr_epi32(r[0], r[1], r[2], r[3], r[4], r[5], r[6], r[7]);
    return tab;
}

/* Eight scaled values to FP4 codes (one per 32-bit lane), §4 encode. */
static inline __m256i fp4_encode_avx2(__m256 x, const fp4_tab_avx2 *t)
{
    /* -0.0 and NaN are not < 0: sign bit clear (§4) */
    __m256 neg = _mm256_cmp_ps(x, _mm256_setzero_ps(), _CMP_LT_OQ);
    __m256i s = _mm256_and_si256(_mm256_castps_si256(neg), _mm256_set1_epi32(8));
    __m256 a = _mm256_and_ps(x, _mm256_castsi256_ps(_mm256_set1_epi32(0x7FFFFFFF)));
    __m256 m = _mm256_cmp_ps(a, t->t3, _CMP_GT_OQ);
    __m256i r = _mm256_and_si256(_mm256_castps_si256(m), _mm256_set1_epi32(4));

    m = _mm256_cmp_ps(a, _mm256_permutevar8x32_ps(t->step2, r), _CMP_GT_OQ);
    r = _mm256_add_epi32(r, _mm256_and_si256(_mm256_castps_si256(m), _mm256_set1_epi32(2)));
    m = _mm256_cmp_ps(a, _mm256_permutevar8x32_ps(t->step1, r), _CMP_GT_OQ);
    r = _mm256_sub_epi32(r, _mm256_castps_si256(m)); /* a true compare is -1 */
    return _mm256_or_si256(s, _mm256_permutevar8x32_epi32(t->rank, r));
}

/* 32 codes (four vectors of eight, in element order) to 16 bytes, element 2j in the high nibble. */
static inline __m128i nibbles_pack_avx2(__m256i c0, __m256i c1, __m256i c2, __m256i c3)
{
    __m256i b = _mm256_packus_epi16(_mm256_packs_epi32(c0, c1), _mm256_packs_epi32(c2, c3));
    /* the packs interleave 128-bit halves: put the 4-byte groups back in element order */
    b = _mm256_permutevar8x32_epi32(b, _mm256_setr_epi32(0, 4, 1, 5, 2, 6, 3, 7));
    __m256i w = _mm256_maddubs_epi16(b, _mm256_set1_epi16(0x0110)); /* 16 * c[2j] + c[2j+1] */
    w = _mm256_permute4x64_epi64(_mm256_packus_epi16(w, w), 0x08);
    return _mm256_castsi256_si128(w);
}

static inline float block_amax_avx2(const float *v, int64_t len)
{
    const __m256 abs = _mm256_castsi256_ps(_mm256_set1_epi32(0x7FFFFFFF));
    __m256 a0 = _mm256_setzero_ps(), a1 = a0;
    int64_t i = 0;

    for (; i + 16 <= len; i += 16) {
        a0 = _mm256_max_ps(_mm256_and_ps(_mm256_loadu_ps(v + i), abs), a0); /* NaN ignored */
        a1 = _mm256_max_ps(_mm256_and_ps(_mm256_loadu_ps(v + i + 8), abs), a1);
    }
    a0 = _mm256_max_ps(a0, a1);
    __m128 m = _mm_max_ps(_mm256_castps256_ps128(a0), _mm256_extractf128_ps(a0, 1));
    m = _mm_max_ps(m, _mm_movehl_ps(m, m));
    m = _mm_max_ss(m, _mm_movehdup_ps(m));
    float r = _mm_cvtss_f32(m);
    for (; i < len; i++)
        r = qs_ref_absmax_step(r, v[i]);
    return r;
}

static void fp4_block_avx2(const float *v, int64_t len, float absmax, uint8_t *dst,
                           const fp4_tab_avx2 *t)
{
    float inv;
    int64_t i = 0;

    if (absmax == 0.0f) { /* all-zero or all-NaN block: explicit branch, codes 0 (§5.2) */
        memset(dst, 0x00, (size_t)((len + 1) / 2));
        return;
    }
    inv = 1.0f / absmax;
    const __m256 vinv = _mm256_set1_ps(inv);
    for (; i + 32 <= len; i += 32) {
        __m256i c0 = fp4_encode_avx2(_mm256_mul_ps(_mm256_loadu_ps(v + i), vinv), t);
        __m256i c1 = fp4_encode_avx2(_mm256_mul_ps(_mm256_loadu_ps(v + i + 8), vinv), t);
        __m256i c2 = fp4_encode_avx2(_mm256_mul_ps(_mm256_loadu_ps(v + i + 16), vinv), t);
        __m256i c3 = fp4_encode_avx2(_mm256_mul_ps(_mm256_loadu_ps(v + i + 24), vinv), t);
        _mm_storeu_si128((__m128i *)(dst + i / 2), nibbles_pack_avx2(c0, c1, c2, c3));
    }
    for (; i < len; i += 2) {
        uint8_t hi = qs_ref_fp4_encode(v[i] * inv);
        uint8_t lo = qs_ref_fp4_encode((i + 1 < len ? v[i + 1] : 0.0f) * inv); /* odd pad: 0.0 */
        dst[i / 2] = (uint8_t)(hi << 4 | lo);
    }
}

void qs_fp4_quant__avx2(const float *src, int64_t n, int32_t block, uint8_t *dst, float *absmax)
{
    const fp4_tab_avx2 t = fp4_tab_avx2_load();

    /* Blocks go in groups of about 2048 elements: every absmax of the group first, then every
     * block's codes, so that one block's reduction, division and encode do not form a single
     * dependency chain per block (the group is still in L1 for the second pass). */
    const int64_t group = block >= 2048 ? 1 : 2048 / block;
    for (int64_t g = 0; g * block < n; g += group) {
        for (int64_t b = g; b < g + group && b * block < n; b++) {
            int64_t len = n - b * block < block ? n - b * block : block;
            absmax[b] = block_amax_avx2(src + b * block, len);
        }
        for (int64_t b = g; b < g + group && b * block < n; b++) {
            int64_t len = n - b * block < block ? n - b * block : block;
            fp4_block_avx2(src + b * block, len, absmax[b], dst + b * block / 2, &t);
        }
    }
}

void qs_fp4_dequant__avx2(const uint8_t *src, const float *absmax, int64_t n, int32_t block,
                          float *dst)
{
    const __m256 lo = _mm256_loadu_ps(qs_fp4_codebook), hi = _mm256_loadu_ps(qs_fp4_codebook + 8);
    /* byte j of a 4-byte word holds element 2j in bits 4..7 and element 2j+1 in bits 0..3 */
    const __m256i shift = _mm256_setr_epi32(4, 0, 12, 8, 20, 16, 28, 24);

    for (int64_t b = 0; b * block < n; b++) {
        int64_t start = b * block;
        int64_t len = n - start < block ? n - start : block;
        const uint8_t *s = src + start / 2;
        float *d = dst + start;
        const float scale = absmax[b];
        const __m256 vs = _mm256_set1_ps(scale);
        int64_t i = 0;

        for (; i + 8 <= len; i += 8) {
            uint32_t w;
            memcpy(&w, s + i / 2, sizeof w);
            __m256i idx = _mm256_srlv_epi32(_mm256_set1_epi32((int32_t)w), shift);
            idx = _mm256_and_si256(idx, _mm256_set1_epi32(0xF));
            /* bit 3 of the code picks the upper half of the codebook */
            __m256 v = _mm256_blendv_ps(_mm256_permutevar8x32_ps(lo, idx),
                                        _mm256_permutevar8x32_ps(hi, idx),
                                        _mm256_castsi256_ps(_mm256_slli_epi32(idx, 28)));
            _mm256_storeu_ps(d + i, _mm256_mul_ps(v, vs)); /* §5.3: one f32 multiply */
        }
        for (; i < len; i++) {
            uint8_t code = (i & 1) ? (s[i / 2] & 0xF) : (s[i / 2] >> 4);
            d[i] = qs_fp4_codebook[code] * scale;
        }
    }
}
