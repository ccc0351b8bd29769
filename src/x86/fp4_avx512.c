/* SPDX-License-Identifier: MIT */
/*
 * bitsandbytes FP4 quantize and dequantize for AVX-512 F/BW/DQ/VL (docs/formats.md §4, §5), bit
 * for bit as src/ref/fp4_ref.c and in the same operation order: absmax with NaN ignored,
 * inv = 1/absmax, x = v * inv (a multiply, never a division), sign from x < 0, rank
 * r = #{k : |x| > t_k} over the CUDA threshold literals, code = sign | R[r]. The rank is found by
 * a three-step branchless binary search (one 16-entry permute per step) over the strictly
 * increasing thresholds; NaN fails every compare and gets code 0 as in the reference. Block tails
 * use masked loads and stores: a masked-off odd pad lane loads 0.0, exactly the pad value the
 * reference quantizes (§5.1), and nothing outside the buffers is touched. The block driver, absmax
 * and nibble packing are shared with NF4 in bnb_avx512.h.
 */
#include <math.h>

#include <immintrin.h>

#include "../core/kernels.h"
#include "../ref/ref.h"
#include "bnb_avx512.h"

/* Per search step s (2, 1), the threshold to test for each partial rank r: t[r + s - 1]; the
 * first step (s = 4) tests t3. Ranks map to code bits by R. */
typedef struct {
    __m512 t3, step2, step1;
    __m512i rank;
} fp4_tab_avx512;

static inline __m512 step_table_avx512(int s)
{
    float t[16];
    for (int r = 0; r < 16; r++)
        t[r] = qs_fp4_thresholds[r + s - 1 < 6 ? r + s - 1 : 6]; /* unreachable r: any value */
    return _mm512_loadu_ps(t);
}

static inline fp4_tab_avx512 fp4_tab_avx512_load(void)
{
    int32_t rank[16];
    fp4_tab_avx512 tab;

    for (int r = 0; r < 16; r++)
        rank[r] = qs_fp4_rank_code[r & 7];
    tab.t3 = _mm512_set1_ps(qs_fp4_thresholds[3]);
    tab.step2 = step_table_avx512(2);
    tab.step1 = step_table_avx512(1);
    tab.rank = _mm512_loadu_si512(rank);
    return tab;
}

/* Sixteen scaled values to FP4 codes (one per 32-bit lane), §4 encode. */
static inline __m512i fp4_encode_avx512(__m512 x, const void *tab)
{
    const fp4_tab_avx512 *t = tab;
    /* -0.0 and NaN are not < 0: sign bit clear (§4) */
    __mmask16 neg = _mm512_cmp_ps_mask(x, _mm512_setzero_ps(), _CMP_LT_OQ);
    __m512 a = _mm512_abs_ps(x);
    __mmask16 m = _mm512_cmp_ps_mask(a, t->t3, _CMP_GT_OQ);
    __m512i r = _mm512_maskz_mov_epi32(m, _mm512_set1_epi32(4));

    m = _mm512_cmp_ps_mask(a, _mm512_permutexvar_ps(r, t->step2), _CMP_GT_OQ);
    r = _mm512_mask_add_epi32(r, m, r, _mm512_set1_epi32(2));
    m = _mm512_cmp_ps_mask(a, _mm512_permutexvar_ps(r, t->step1), _CMP_GT_OQ);
    r = _mm512_mask_add_epi32(r, m, r, _mm512_set1_epi32(1));
    r = _mm512_permutexvar_epi32(r, t->rank);
    return _mm512_mask_or_epi32(r, neg, r, _mm512_set1_epi32(8));
}

static void fp4_block_avx512(const float *v, int64_t len, float absmax, uint8_t *dst,
                             const void *t)
{
    bnb4_block_avx512(v, len, absmax, dst, t, fp4_encode_avx512);
}

void qs_fp4_quant__avx512(const float *src, int64_t n, int32_t block, uint8_t *dst, float *absmax)
{
    const fp4_tab_avx512 t = fp4_tab_avx512_load();

    bnb_quant_avx512(src, n, block, 2, dst, absmax, fp4_block_avx512, &t);
}

void qs_fp4_dequant__avx512(const uint8_t *src, const float *absmax, int64_t n, int32_t block,
                            float *dst)
{
    bnb4_dequant_avx512(src, absmax, n, block, qs_fp4_codebook, dst);
}
