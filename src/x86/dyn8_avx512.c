/* SPDX-License-Identifier: MIT */
/*
 * bitsandbytes blockwise 8-bit quantization with the signed dynamic map for AVX-512 F/BW/DQ/VL
 * (docs/formats.md §6.3, §6.4), bit for bit as src/ref/dyn8_ref.c and in the same operation
 * order: absmax with NaN ignored, inv = 1/absmax, x = v * inv, code = #{j : x > m_j} with the
 * midpoints m_j = fl(map[j] + map[j+1]) * 0.5 and an exact tie on m_j going to the even index of
 * {j, j+1}. That tie rule equals counting x >= m_j for odd j and x > m_j for even j, which is
 * monotone in j because the midpoints increase strictly, so an eight-step branchless binary search
 * finds the code: every step but the last tests an odd j (>=), the last an even j (>). The
 * thresholds of each step live in registers (16-, 32-, 64- and 128-entry permute tables). NaN
 * fails every compare and gets code 0. Tails use masked loads and stores. The absmax and the group
 * driver are shared with NF4/FP4 in bnb_avx512.h.
 */
#include <math.h>
#include <string.h>

#include <immintrin.h>

#include "../core/kernels.h"
#include "../ref/ref.h"
#include "bnb_avx512.h"
#include "nan_avx512.h"

/* Search step s tests j = c + s - 1 where c, the partial code, is a multiple of 2s. Steps 128...8
 * index a 16-entry table by c >> 4; step 4 a 32-entry table by c >> 3; step 2 a 64-entry table by
 * c >> 2; step 1 a 128-entry table by c >> 1. */
typedef struct {
    __m512 s16[5]; /* steps 128, 64, 32, 16, 8 */
    __m512 s4[2], s2[4], s1[8];
} dyn8_tab_avx512;

static void dyn8_tab_avx512_init(dyn8_tab_avx512 *t)
{
    float mid[255], tab[128];

    for (int j = 0; j < 255; j++)
        mid[j] = (qs_dyn8_map[j] + qs_dyn8_map[j + 1]) * 0.5f;
    for (int s = 128, i = 0; s >= 8; s /= 2, i++) {
        for (int k = 0; k < 16; k++)
            tab[k] = mid[16 * k + s - 1 < 254 ? 16 * k + s - 1 : 254]; /* unreachable k: any */
        t->s16[i] = _mm512_loadu_ps(tab);
    }
    for (int k = 0; k < 32; k++)
        tab[k] = mid[8 * k + 3];
    for (int r = 0; r < 2; r++)
        t->s4[r] = _mm512_loadu_ps(tab + 16 * r);
    for (int k = 0; k < 64; k++)
        tab[k] = mid[4 * k + 1];
    for (int r = 0; r < 4; r++)
        t->s2[r] = _mm512_loadu_ps(tab + 16 * r);
    for (int k = 0; k < 128; k++)
        tab[k] = mid[2 * k];
    for (int r = 0; r < 8; r++)
        t->s1[r] = _mm512_loadu_ps(tab + 16 * r);
}

/* 64-entry lookup: bits 0..4 of k select within a pair of registers, bit 5 the pair. */
static inline __m512 lut64_avx512(__m512i k, const __m512 *t)
{
    __mmask16 hi = _mm512_test_epi32_mask(k, _mm512_set1_epi32(32));
    return _mm512_mask_blend_ps(hi, _mm512_permutex2var_ps(t[0], k, t[1]),
                                _mm512_permutex2var_ps(t[2], k, t[3]));
}

/* Sixteen scaled values to codes 0...255 (one per 32-bit lane). */
static inline __m512i dyn8_encode_avx512(__m512 x, const dyn8_tab_avx512 *t)
{
    __m512i c = _mm512_setzero_si512();
    __mmask16 m;

    for (int i = 0, s = 128; i < 5; i++, s /= 2) {
        m = _mm512_cmp_ps_mask(x, _mm512_permutexvar_ps(_mm512_srli_epi32(c, 4), t->s16[i]),
                               _CMP_GE_OQ);
        c = _mm512_mask_add_epi32(c, m, c, _mm512_set1_epi32(s));
    }
    __m512 thr = _mm512_permutex2var_ps(t->s4[0], _mm512_srli_epi32(c, 3), t->s4[1]);
    m = _mm512_cmp_ps_mask(x, thr, _CMP_GE_OQ);
    c = _mm512_mask_add_epi32(c, m, c, _mm512_set1_epi32(4));
    m = _mm512_cmp_ps_mask(x, lut64_avx512(_mm512_srli_epi32(c, 2), t->s2), _CMP_GE_OQ);
    c = _mm512_mask_add_epi32(c, m, c, _mm512_set1_epi32(2));
    __m512i k = _mm512_srli_epi32(c, 1);
    __mmask16 upper = _mm512_test_epi32_mask(k, _mm512_set1_epi32(64));
    thr = _mm512_mask_blend_ps(upper, lut64_avx512(k, t->s1), lut64_avx512(k, t->s1 + 4));
    m = _mm512_cmp_ps_mask(x, thr, _CMP_GT_OQ);
    return _mm512_mask_add_epi32(c, m, c, _mm512_set1_epi32(1));
}

/* Codes of one block of len elements whose absmax m is known. */
static void dyn8_block_avx512(const float *v, int64_t len, float m, uint8_t *d,
                              const void *tab)
{
    const dyn8_tab_avx512 *t = tab;
    int64_t i = 0;

    if (m == 0.0f) { /* absmax 0: codes 0 by an explicit branch, as the reference (§6.4) */
        memset(d, 0x00, (size_t)len);
        return;
    }
    const __m512 vinv = _mm512_set1_ps(1.0f / m);
    for (; i + 32 <= len; i += 32) {
        __m512i c0 = dyn8_encode_avx512(_mm512_mul_ps(_mm512_loadu_ps(v + i), vinv), t);
        __m512i c1 = dyn8_encode_avx512(_mm512_mul_ps(_mm512_loadu_ps(v + i + 16), vinv), t);
        _mm_storeu_si128((__m128i *)(d + i), _mm512_cvtepi32_epi8(c0));
        _mm_storeu_si128((__m128i *)(d + i + 16), _mm512_cvtepi32_epi8(c1));
    }
    for (; i < len; i += 16) {
        __mmask16 tm = tail_mask_avx512(len - i);
        __m512 x = _mm512_mul_ps(_mm512_maskz_loadu_ps(tm, v + i), vinv);
        _mm_mask_storeu_epi8(d + i, tm, _mm512_cvtepi32_epi8(dyn8_encode_avx512(x, t)));
    }
}

void qs_dyn8_quant__avx512(const float *src, int64_t n, int32_t block, uint8_t *dst,
                           float *absmax)
{
    dyn8_tab_avx512 t;

    dyn8_tab_avx512_init(&t);
    bnb_quant_avx512(src, n, block, 1, dst, absmax, dyn8_block_avx512, &t);
}

void qs_dyn8_dequant__avx512(const uint8_t *src, const float *absmax, int64_t n, int32_t block,
                             float offset, float *dst)
{
    const __m512 voff = _mm512_set1_ps(offset);

    for (int64_t b = 0; b * block < n; b++) {
        int64_t start = b * block;
        int64_t len = n - start < block ? n - start : block;
        const __m512 vs = _mm512_set1_ps(qs_ld_f32(absmax + b));

        for (int64_t i = 0; i < len; i += 16) {
            __mmask16 tm = tail_mask_avx512(len - i);
            __m512i idx = _mm512_cvtepu8_epi32(_mm_maskz_loadu_epi8(tm, src + start + i));
            __m512 v = _mm512_i32gather_ps(idx, qs_dyn8_map, 4);
            /* a multiply, then a separate add (§6.2): never fused */
            _mm512_mask_storeu_ps(dst + start + i, tm,
                                  nan_canon_avx512(_mm512_add_ps(_mm512_mul_ps(v, vs), voff)));
        }
    }
}
