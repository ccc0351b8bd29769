/* SPDX-License-Identifier: MIT */
/*
 * bitsandbytes FP4 quantize and dequantize for AVX2 + FMA + F16C (docs/formats.md §4, §5), bit for
 * bit as src/ref/fp4_ref.c and in the same operation order: absmax with NaN ignored,
 * inv = 1/absmax, x = v * inv (a multiply, never a division), sign from x < 0, rank
 * r = #{k : |x| > t_k} over the CUDA threshold literals, code = sign | R[r]. The rank is found by
 * a three-step branchless binary search over the sorted thresholds (same count, since they
 * increase strictly); NaN fails every compare and gets code 0 as in the reference. Block tails
 * and odd lengths use the reference's element routines. The block driver, absmax and nibble packing
 * are shared with NF4 in bnb_avx2.h.
 */
#include <math.h>

#include <immintrin.h>

#include "../core/kernels.h"
#include "../ref/ref.h"
#include "bnb_avx2.h"

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
static inline __m256i fp4_encode_avx2(__m256 x, const void *tab)
{
    const fp4_tab_avx2 *t = tab;
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

static void fp4_block_avx2(const float *v, int64_t len, float absmax, uint8_t *dst, const void *t,
                           int64_t ahead)
{
    bnb4_block_avx2(v, len, absmax, dst, t, ahead, fp4_encode_avx2, qs_ref_fp4_encode);
}

void qs_fp4_quant__avx2(const float *src, int64_t n, int32_t block, uint8_t *dst, float *absmax)
{
    const fp4_tab_avx2 t = fp4_tab_avx2_load();

    bnb_quant_avx2(src, n, block, 2, dst, absmax, fp4_block_avx2, &t);
}

void qs_fp4_dequant__avx2(const uint8_t *src, const float *absmax, int64_t n, int32_t block,
                          float *dst)
{
    bnb4_dequant_avx2(src, absmax, n, block, qs_fp4_codebook, dst);
}
