/* SPDX-License-Identifier: MIT */
/*
 * bitsandbytes blockwise 8-bit quantization with the signed dynamic map for AVX2 + FMA + F16C
 * (docs/formats.md §6.3, §6.4), bit for bit as src/ref/dyn8_ref.c and in the same operation order:
 * absmax with NaN ignored, inv = 1/absmax, x = v * inv, code = #{j : x > m_j} with the midpoints
 * m_j = fl(map[j] + map[j+1]) * 0.5 and an exact tie on m_j going to the even index of {j, j+1}.
 * That tie rule is the same as counting x >= m_j for odd j and x > m_j for even j, which is
 * monotone in j because the midpoints increase strictly, so an eight-step branchless binary
 * search finds the code: every step but the last tests an odd j (>=), the last an even j (>).
 * NaN fails every compare and gets code 0. Tails use the reference's element routines. The absmax
 * and the group driver are shared with NF4/FP4 in bnb_avx2.h.
 */
#include <math.h>
#include <string.h>

#include <immintrin.h>

#include "../core/kernels.h"
#include "../ref/ref.h"
#include "bnb_avx2.h"
#include "nan_avx2.h"

/* Midpoints, computed per call exactly as the reference does, and the register tables of the
 * first search steps (the later steps gather from mid). */
typedef struct {
    float mid[256];
    __m256 s128, s64a, s64b, s32, s16, s8lo, s8hi;
} dyn8_tab_avx2;

static void dyn8_tab_avx2_init(dyn8_tab_avx2 *t)
{
    float s32[8], s16[8], s8[16];

    for (int j = 0; j < 255; j++)
        t->mid[j] = (qs_dyn8_map[j] + qs_dyn8_map[j + 1]) * 0.5f;
    t->mid[255] = t->mid[254]; /* never indexed */
    for (int k = 0; k < 8; k++) {
        s32[k] = t->mid[64 * (k & 3) + 31]; /* step 32 tests j = c + 31, c = 64k */
        s16[k] = t->mid[32 * k + 15];       /* step 16: c = 32k */
    }
    for (int k = 0; k < 16; k++)
        s8[k] = t->mid[16 * k + 7]; /* step 8: c = 16k */
    t->s128 = _mm256_set1_ps(t->mid[127]);
    t->s64a = _mm256_set1_ps(t->mid[63]);
    t->s64b = _mm256_set1_ps(t->mid[191]);
    t->s32 = _mm256_loadu_ps(s32);
    t->s16 = _mm256_loadu_ps(s16);
    t->s8lo = _mm256_loadu_ps(s8);
    t->s8hi = _mm256_loadu_ps(s8 + 8);
}

/* c += step where the compare m holds. */
static inline __m256i step_add_avx2(__m256i c, __m256 m, int step)
{
    return _mm256_add_epi32(c, _mm256_and_si256(_mm256_castps_si256(m), _mm256_set1_epi32(step)));
}

/* Eight scaled values to codes 0...255 (one per 32-bit lane). */
static inline __m256i dyn8_encode_avx2(__m256 x, const dyn8_tab_avx2 *t)
{
    __m256 m = _mm256_cmp_ps(x, t->s128, _CMP_GE_OQ);
    __m256i c = _mm256_and_si256(_mm256_castps_si256(m), _mm256_set1_epi32(128));

    m = _mm256_cmp_ps(x, _mm256_blendv_ps(t->s64a, t->s64b, m), _CMP_GE_OQ);
    c = step_add_avx2(c, m, 64);
    m = _mm256_cmp_ps(x, _mm256_permutevar8x32_ps(t->s32, _mm256_srli_epi32(c, 6)), _CMP_GE_OQ);
    c = step_add_avx2(c, m, 32);
    m = _mm256_cmp_ps(x, _mm256_permutevar8x32_ps(t->s16, _mm256_srli_epi32(c, 5)), _CMP_GE_OQ);
    c = step_add_avx2(c, m, 16);
    __m256i k = _mm256_srli_epi32(c, 4); /* 0...15; bit 3 (bit 7 of c) picks the upper table */
    __m256 thr = _mm256_blendv_ps(_mm256_permutevar8x32_ps(t->s8lo, k),
                                  _mm256_permutevar8x32_ps(t->s8hi, k),
                                  _mm256_castsi256_ps(_mm256_slli_epi32(c, 24)));
    c = step_add_avx2(c, _mm256_cmp_ps(x, thr, _CMP_GE_OQ), 8);
    thr = _mm256_i32gather_ps(t->mid, _mm256_add_epi32(c, _mm256_set1_epi32(3)), 4);
    c = step_add_avx2(c, _mm256_cmp_ps(x, thr, _CMP_GE_OQ), 4);
    thr = _mm256_i32gather_ps(t->mid, _mm256_add_epi32(c, _mm256_set1_epi32(1)), 4);
    c = step_add_avx2(c, _mm256_cmp_ps(x, thr, _CMP_GE_OQ), 2);
    thr = _mm256_i32gather_ps(t->mid, c, 4);
    return _mm256_sub_epi32(c, _mm256_castps_si256(_mm256_cmp_ps(x, thr, _CMP_GT_OQ)));
}

/* Codes of one block of len elements whose absmax m is known. */
static void dyn8_block_avx2(const float *v, int64_t len, float m, uint8_t *d, const void *tab,
                            int64_t ahead)
{
    const dyn8_tab_avx2 *t = tab;
    int64_t i = 0;

    if (m == 0.0f) { /* absmax 0: codes 0 by an explicit branch, as the reference (§6.4) */
        memset(d, 0x00, (size_t)len);
        return;
    }
    const float inv = 1.0f / m;
    const __m256 vinv = _mm256_set1_ps(inv);
    for (; i + 32 <= len; i += 32) {
        bnb_prefetch32_avx2(v + i, ahead);
        __m256i c0 = dyn8_encode_avx2(_mm256_mul_ps(_mm256_loadu_ps(v + i), vinv), t);
        __m256i c1 = dyn8_encode_avx2(_mm256_mul_ps(_mm256_loadu_ps(v + i + 8), vinv), t);
        __m256i c2 = dyn8_encode_avx2(_mm256_mul_ps(_mm256_loadu_ps(v + i + 16), vinv), t);
        __m256i c3 = dyn8_encode_avx2(_mm256_mul_ps(_mm256_loadu_ps(v + i + 24), vinv), t);
        __m256i p = _mm256_packus_epi16(_mm256_packs_epi32(c0, c1), _mm256_packs_epi32(c2, c3));
        /* the packs interleave 128-bit halves: put the 4-byte groups back in order */
        p = _mm256_permutevar8x32_epi32(p, _mm256_setr_epi32(0, 4, 1, 5, 2, 6, 3, 7));
        _mm256_storeu_si256((__m256i *)(d + i), p);
    }
    for (; i < len; i++)
        d[i] = qs_ref_dyn8_encode(qs_ld_f32(v + i) * inv);
}

void qs_dyn8_quant__avx2(const float *src, int64_t n, int32_t block, uint8_t *dst, float *absmax)
{
    dyn8_tab_avx2 t;

    dyn8_tab_avx2_init(&t);
    bnb_quant_avx2(src, n, block, 1, dst, absmax, dyn8_block_avx2, &t);
}

void qs_dyn8_dequant__avx2(const uint8_t *src, const float *absmax, int64_t n, int32_t block,
                           float offset, float *dst)
{
    const __m256 voff = _mm256_set1_ps(offset);

    for (int64_t b = 0; b * block < n; b++) {
        int64_t start = b * block;
        int64_t len = n - start < block ? n - start : block;
        const float scale = qs_ld_f32(absmax + b);
        const __m256 vs = _mm256_set1_ps(scale);
        int64_t i = 0;

        for (; i + 8 <= len; i += 8) {
            __m128i bytes = _mm_loadl_epi64((const __m128i *)(src + start + i));
            __m256 v = _mm256_i32gather_ps(qs_dyn8_map, _mm256_cvtepu8_epi32(bytes), 4);
            /* a multiply, then a separate add (§6.2): never fused */
            _mm256_storeu_ps(dst + start + i,
                             nan_canon_avx2(_mm256_add_ps(_mm256_mul_ps(v, vs), voff)));
        }
        for (; i < len; i++) {
            float v = qs_dyn8_map[src[start + i]] * scale;
            qs_st_f32(dst + start + i, qs_ref_nan_canon(v + offset));
        }
    }
}
