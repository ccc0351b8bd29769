/* SPDX-License-Identifier: MIT */
/*
 * bitsandbytes NF4 quantize and dequantize for AVX2 + FMA + F16C (docs/formats.md §2, §3, §5), bit
 * for bit as src/ref/nf4_ref.c and in the same operation order: absmax with NaN ignored,
 * inv = 1/absmax, x = v * inv (a multiply, never a division), code = #{k : x > t_k}. The count
 * is found by a four-step branchless binary search over the sorted thresholds, which gives the
 * same number because the thresholds increase strictly; NaN fails every compare and gets code 0
 * as in the reference. Block tails and odd lengths use the reference's element routines. The block
 * driver, absmax and nibble packing are shared with FP4 in bnb_avx2.h.
 */
#include <math.h>

#include <immintrin.h>

#include "../core/kernels.h"
#include "../ref/ref.h"
#include "bnb_avx2.h"

/* Thresholds arranged per search step: step 8 tests t7; step 4 tests t3 or t11; step 2 tests
 * t[c + 1] for c in {0, 4, 8, 12}; step 1 tests t[c] for even c. */
typedef struct {
    __m256 t7, t3, t11, step2, step1;
} nf4_tab_avx2;

static inline nf4_tab_avx2 nf4_tab_avx2_load(void)
{
    const float *t = qs_nf4_thresholds;
    nf4_tab_avx2 r;

    r.t7 = _mm256_set1_ps(t[7]);
    r.t3 = _mm256_set1_ps(t[3]);
    r.t11 = _mm256_set1_ps(t[11]);
    r.step2 = _mm256_setr_ps(t[1], t[5], t[9], t[13], t[13], t[13], t[13], t[13]);
    r.step1 = _mm256_setr_ps(t[0], t[2], t[4], t[6], t[8], t[10], t[12], t[14]);
    return r;
}

/* Eight scaled values to codes #{k : x > t_k} (one per 32-bit lane). */
static inline __m256i nf4_encode_avx2(__m256 x, const void *tab)
{
    const nf4_tab_avx2 *t = tab;
    __m256 m = _mm256_cmp_ps(x, t->t7, _CMP_GT_OQ);
    __m256i c = _mm256_and_si256(_mm256_castps_si256(m), _mm256_set1_epi32(8));

    m = _mm256_cmp_ps(x, _mm256_blendv_ps(t->t3, t->t11, m), _CMP_GT_OQ);
    c = _mm256_add_epi32(c, _mm256_and_si256(_mm256_castps_si256(m), _mm256_set1_epi32(4)));
    m = _mm256_cmp_ps(x, _mm256_permutevar8x32_ps(t->step2, _mm256_srli_epi32(c, 2)), _CMP_GT_OQ);
    c = _mm256_add_epi32(c, _mm256_and_si256(_mm256_castps_si256(m), _mm256_set1_epi32(2)));
    m = _mm256_cmp_ps(x, _mm256_permutevar8x32_ps(t->step1, _mm256_srli_epi32(c, 1)), _CMP_GT_OQ);
    return _mm256_sub_epi32(c, _mm256_castps_si256(m)); /* a true compare is -1 */
}

static void nf4_block_avx2(const float *v, int64_t len, float absmax, uint8_t *dst, const void *t,
                           int64_t ahead)
{
    bnb4_block_avx2(v, len, absmax, dst, t, ahead, nf4_encode_avx2, qs_ref_nf4_encode);
}

void qs_nf4_quant__avx2(const float *src, int64_t n, int32_t block, uint8_t *dst, float *absmax)
{
    const nf4_tab_avx2 t = nf4_tab_avx2_load();

    bnb_quant_avx2(src, n, block, 2, dst, absmax, nf4_block_avx2, &t);
}

void qs_nf4_dequant__avx2(const uint8_t *src, const float *absmax, int64_t n, int32_t block,
                          float *dst)
{
    bnb4_dequant_avx2(src, absmax, n, block, qs_nf4_codebook, dst);
}
