/* SPDX-License-Identifier: MIT */
/*
 * bitsandbytes NF4 quantize and dequantize for AVX-512 F/BW/DQ/VL (docs/formats.md §2, §3, §5),
 * bit for bit as src/ref/nf4_ref.c and in the same operation order: absmax with NaN ignored,
 * inv = 1/absmax, x = v * inv (a multiply, never a division), code = #{k : x > t_k}. The count
 * is found by a four-step branchless binary search (one 16-entry permute per step) over the
 * strictly increasing thresholds; NaN fails every compare and gets code 0 as in the reference.
 * Block tails use masked loads and stores: a masked-off odd pad lane loads 0.0, which is exactly
 * the pad value the reference quantizes (§5.1), and nothing outside the buffers is touched. The
 * block driver, absmax and nibble packing are shared with FP4 in bnb_avx512.h.
 */
#include <math.h>

#include <immintrin.h>

#include "../core/kernels.h"
#include "../ref/ref.h"
#include "bnb_avx512.h"

/* Per search step s (8, 4, 2, 1), the threshold to test for each partial code c: t[c + s - 1]. */
typedef struct {
    __m512 t7, step4, step2, step1;
} nf4_tab_avx512;

static inline __m512 step_table_avx512(int s)
{
    float t[16];
    for (int c = 0; c < 16; c++)
        t[c] = qs_nf4_thresholds[c + s - 1 < 14 ? c + s - 1 : 14]; /* unreachable c: any value */
    return _mm512_loadu_ps(t);
}

static inline nf4_tab_avx512 nf4_tab_avx512_load(void)
{
    nf4_tab_avx512 r;
    r.t7 = _mm512_set1_ps(qs_nf4_thresholds[7]);
    r.step4 = step_table_avx512(4);
    r.step2 = step_table_avx512(2);
    r.step1 = step_table_avx512(1);
    return r;
}

/* Sixteen scaled values to codes #{k : x > t_k} (one per 32-bit lane). */
static inline __m512i nf4_encode_avx512(__m512 x, const void *tab)
{
    const nf4_tab_avx512 *t = tab;
    __mmask16 m = _mm512_cmp_ps_mask(x, t->t7, _CMP_GT_OQ);
    __m512i c = _mm512_maskz_mov_epi32(m, _mm512_set1_epi32(8));

    m = _mm512_cmp_ps_mask(x, _mm512_permutexvar_ps(c, t->step4), _CMP_GT_OQ);
    c = _mm512_mask_add_epi32(c, m, c, _mm512_set1_epi32(4));
    m = _mm512_cmp_ps_mask(x, _mm512_permutexvar_ps(c, t->step2), _CMP_GT_OQ);
    c = _mm512_mask_add_epi32(c, m, c, _mm512_set1_epi32(2));
    m = _mm512_cmp_ps_mask(x, _mm512_permutexvar_ps(c, t->step1), _CMP_GT_OQ);
    return _mm512_mask_add_epi32(c, m, c, _mm512_set1_epi32(1));
}

static void nf4_block_avx512(const float *v, int64_t len, float absmax, uint8_t *dst,
                             const void *t)
{
    bnb4_block_avx512(v, len, absmax, dst, t, nf4_encode_avx512);
}

void qs_nf4_quant__avx512(const float *src, int64_t n, int32_t block, uint8_t *dst, float *absmax)
{
    const nf4_tab_avx512 t = nf4_tab_avx512_load();

    bnb_quant_avx512(src, n, block, 2, dst, absmax, nf4_block_avx512, &t);
}

void qs_nf4_dequant__avx512(const uint8_t *src, const float *absmax, int64_t n, int32_t block,
                            float *dst)
{
    bnb4_dequant_avx512(src, absmax, n, block, qs_nf4_codebook, dst);
}
