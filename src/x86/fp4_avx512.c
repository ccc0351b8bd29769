/* SPDX-License-Identifier: MIT */
/*
 * bitsandbytes FP4 quantize and dequantize for AVX-512 F/BW/DQ/VL (spec/formats.md §4, §5), bit
 * for bit as src/ref/fp4_ref.c and in the same operation order: absmax with NaN ignored,
 * inv = 1/absmax, x = v * inv (a multiply, never a division), sign from x < 0, rank
 * r = #{k : |x| > t_k} over the CUDA threshold literals, code = sign | R[r]. The rank is found by
 * a three-step branchless binary search (one 16-entry permute per step) over the strictly
 * increasing thresholds; NaN fails every compare and gets code 0 as in the reference. Block tails
 * use masked loads and stores: a masked-off odd pad lane loads 0.0, exactly the pad value the
 * reference quantizes (§5.1), and nothing outside the buffers is touched.
 */
#include <math.h>

#include <immintrin.h>

#include "../core/kernels.h"
#include "../ref/ref.h"

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
static inline __m512i fp4_encode_avx512(__m512 x, const fp4_tab_avx512 *t)
{
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

/* 16 codes to 8 bytes (low half of the result), element 2j in the high nibble. */
static inline __m128i nibbles16_avx512(__m512i c)
{
    __m128i w = _mm_maddubs_epi16(_mm512_cvtepi32_epi8(c), _mm_set1_epi16(0x0110));
    return _mm_packus_epi16(w, w); /* 16 * c[2j] + c[2j+1] <= 255 */
}

/* 32 codes to 16 bytes. */
static inline __m128i nibbles32_avx512(__m512i c0, __m512i c1)
{
    __m256i b = _mm256_inserti128_si256(_mm256_castsi128_si256(_mm512_cvtepi32_epi8(c0)),
                                        _mm512_cvtepi32_epi8(c1), 1);
    return _mm256_cvtepi16_epi8(_mm256_maddubs_epi16(b, _mm256_set1_epi16(0x0110)));
}

static inline __mmask16 tail_mask_avx512(int64_t left)
{
    return left >= 16 ? (__mmask16)0xFFFF : (__mmask16)((1u << left) - 1u);
}

static inline float block_amax_avx512(const float *v, int64_t len)
{
    __m512 a0 = _mm512_setzero_ps(), a1 = a0;
    int64_t i = 0;

    for (; i + 32 <= len; i += 32) {
        a0 = _mm512_max_ps(_mm512_abs_ps(_mm512_loadu_ps(v + i)), a0); /* NaN ignored */
        a1 = _mm512_max_ps(_mm512_abs_ps(_mm512_loadu_ps(v + i + 16)), a1);
    }
    for (; i < len; i += 16) /* masked-off lanes load +0, which cannot raise the max */
        a0 = _mm512_max_ps(_mm512_abs_ps(_mm512_maskz_loadu_ps(tail_mask_avx512(len - i), v + i)),
                           a0);
    return _mm512_reduce_max_ps(_mm512_max_ps(a0, a1)); /* no NaN, no -0: exact */
}

static void fp4_block_avx512(const float *v, int64_t len, float absmax, uint8_t *dst,
                             const fp4_tab_avx512 *t)
{
    int64_t i = 0;

    if (absmax == 0.0f) { /* all-zero or all-NaN block: explicit branch, codes 0 (§5.2) */
        memset(dst, 0x00, (size_t)((len + 1) / 2));
        return;
    }
    const __m512 vinv = _mm512_set1_ps(1.0f / absmax);
    for (; i + 32 <= len; i += 32) {
        __m512i c0 = fp4_encode_avx512(_mm512_mul_ps(_mm512_loadu_ps(v + i), vinv), t);
        __m512i c1 = fp4_encode_avx512(_mm512_mul_ps(_mm512_loadu_ps(v + i + 16), vinv), t);
        _mm_storeu_si128((__m128i *)(dst + i / 2), nibbles32_avx512(c0, c1));
    }
    for (; i < len; i += 16) {
        int64_t left = len - i < 16 ? len - i : 16;
        __m512 x = _mm512_maskz_loadu_ps(tail_mask_avx512(left), v + i);
        __m128i b = nibbles16_avx512(fp4_encode_avx512(_mm512_mul_ps(x, vinv), t));
        _mm_mask_storeu_epi8(dst + i / 2, (__mmask16)((1u << ((left + 1) / 2)) - 1u), b);
    }
}

void qs_fp4_quant__avx512(const float *src, int64_t n, int32_t block, uint8_t *dst, float *absmax)
{
    const fp4_tab_avx512 t = fp4_tab_avx512_load();

    /* Blocks go in groups of about 2048 elements: every absmax of the group first, then every
     * block's codes, so that one block's reduction, division and encode do not form a single
     * dependency chain per block (the group is still in L1 for the second pass). */
    const int64_t group = block >= 2048 ? 1 : 2048 / block;
    for (int64_t g = 0; g * block < n; g += group) {
        for (int64_t b = g; b < g + group && b * block < n; b++) {
            int64_t len = n - b * block < block ? n - b * block : block;
            absmax[b] = block_amax_avx512(src + b * block, len);
        }
        for (int64_t b = g; b < g + group && b * block < n; b++) {
            int64_t len = n - b * block < block ? n - b * block : block;
            fp4_block_avx512(src + b * block, len, absmax[b], dst + b * block / 2, &t);
        }
    }
}

/* Codes of 8 packed bytes (16 elements, element 2j in the high nibble) in 32-bit lanes. */
static inline __m512i nibbles_unpack_avx512(__m128i b)
{
    const __m512i shift = _mm512_set4_epi32(0, 4, 0, 4); /* lanes 0, 1, 2, 3: 4, 0, 4, 0 */
    __m512i idx = _mm512_cvtepu8_epi32(_mm_unpacklo_epi8(b, b));
    return _mm512_and_si512(_mm512_srlv_epi32(idx, shift), _mm512_set1_epi32(0xF));
}

void qs_fp4_dequant__avx512(const uint8_t *src, const float *absmax, int64_t n, int32_t block,
                            float *dst)
{
    const __m512 book = _mm512_loadu_ps(qs_fp4_codebook);

    for (int64_t b = 0; b * block < n; b++) {
        int64_t start = b * block;
        int64_t len = n - start < block ? n - start : block;
        const uint8_t *s = src + start / 2;
        float *d = dst + start;
        const __m512 vs = _mm512_set1_ps(absmax[b]);
        int64_t i = 0;

        for (; i + 32 <= len; i += 32) {
            __m128i bytes = _mm_loadu_si128((const __m128i *)(s + i / 2));
            __m512 v0 = _mm512_permutexvar_ps(nibbles_unpack_avx512(bytes), book);
            __m512 v1 = _mm512_permutexvar_ps(
                nibbles_unpack_avx512(_mm_unpackhi_epi64(bytes, bytes)), book);
            _mm512_storeu_ps(d + i, _mm512_mul_ps(v0, vs)); /* §5.3: one f32 multiply */
            _mm512_storeu_ps(d + i + 16, _mm512_mul_ps(v1, vs));
        }
        for (; i < len; i += 16) {
            int64_t left = len - i < 16 ? len - i : 16;
            __mmask16 bm = (__mmask16)((1u << ((left + 1) / 2)) - 1u);
            __m128i bytes = _mm_maskz_loadu_epi8(bm, s + i / 2);
            __m512 v = _mm512_permutexvar_ps(nibbles_unpack_avx512(bytes), book);
            _mm512_mask_storeu_ps(d + i, tail_mask_avx512(left), _mm512_mul_ps(v, vs));
        }
    }
}
