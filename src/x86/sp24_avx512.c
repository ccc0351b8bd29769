/* SPDX-License-Identifier: MIT */
/*
 * 2:4 kernels for AVX-512 (F/BW/DQ/VL): STRIP mask, fused prune + compress, compress with a mask
 * or by non-zero values, and decompress, 16 floats (four groups, one meta word) per step. Same
 * rules as src/ref/sp24_ref.c (docs/sparsity.md §2.2, §3): rank keys are the magnitude bits of
 * the score with NaN clamped above +Inf, compared inside each 128-bit lane (one group) with
 * rotations, ties going to the lower position; kept values are gathered with vcompressps and
 * scattered back with vexpandps. Tails of fewer than 16 elements call the reference kernels.
 */
#include <immintrin.h>

#include "../core/kernels.h"
#include "../ref/ref.h"
#include "../ref/sp24_ref.h"

/* Keep bits of four groups: lane i of a group loses to lane (i + r) % 4 when that key is larger,
 * or equal and at a lower position, i.e. when i >= 4 - r (the tie masks below). */
static inline __mmask16 keep16_avx512(__m512i k)
{
    const __m512i one = _mm512_set1_epi32(1);
    __m512i r1 = _mm512_shuffle_epi32(k, (_MM_PERM_ENUM)0x39);
    __m512i r2 = _mm512_shuffle_epi32(k, (_MM_PERM_ENUM)0x4E);
    __m512i r3 = _mm512_shuffle_epi32(k, (_MM_PERM_ENUM)0x93);
    __mmask16 b1 = _mm512_cmpgt_epu32_mask(r1, k) | (_mm512_cmpeq_epu32_mask(r1, k) & 0x8888);
    __mmask16 b2 = _mm512_cmpgt_epu32_mask(r2, k) | (_mm512_cmpeq_epu32_mask(r2, k) & 0xCCCC);
    __mmask16 b3 = _mm512_cmpgt_epu32_mask(r3, k) | (_mm512_cmpeq_epu32_mask(r3, k) & 0xEEEE);
    __m512i rank = _mm512_maskz_mov_epi32(b1, one);
    rank = _mm512_mask_add_epi32(rank, b2, rank, one);
    rank = _mm512_mask_add_epi32(rank, b3, rank, one);
    return _mm512_cmplt_epu32_mask(rank, _mm512_set1_epi32(2));
}

/* Score keys of 16 elements: |w| or fl(|w| * norm), magnitude bits, NaN clamped. */
static inline __m512i keys16_avx512(__m512 x, const float *norm)
{
    __m512 a = _mm512_abs_ps(x);
    if (norm)
        a = _mm512_mul_ps(a, _mm512_loadu_ps(norm));
    __m512i k = _mm512_and_si512(_mm512_castps_si512(a), _mm512_set1_epi32(0x7FFFFFFF));
    return _mm512_min_epu32(k, _mm512_set1_epi32((int)QS_SP_KEY_NAN));
}

/* Meta word and the two-per-group selection of four keep nibbles (§3.2, §3.4). */
static inline unsigned meta16_avx512(unsigned keep, unsigned *sel)
{
    *sel = qs_sp24_select_of_keep8[keep & 0xFFu] |
           (unsigned)qs_sp24_select_of_keep8[keep >> 8] << 8;
    return qs_sp24_nibbles_of_keep8[keep & 0xFFu] |
           (unsigned)qs_sp24_nibbles_of_keep8[keep >> 8] << 8;
}

void qs_sp24_mask_f32__avx512(const float *w, const float *norm, int64_t n, uint8_t *mask)
{
    int64_t i = 0;
    for (; i + 16 <= n; i += 16) {
        __m512i k = keys16_avx512(_mm512_loadu_ps(w + i), norm ? norm + i : NULL);
        __mmask16 keep = keep16_avx512(k);
        _mm_storeu_si128((__m128i *)(mask + i), _mm_maskz_set1_epi8(keep, 1));
    }
    qs_sp24_mask_f32__ref(w + i, norm ? norm + i : NULL, n - i, mask + i);
}

void qs_sp24_prune_f32__avx512(const float *w, const float *norm, int64_t n, float *values,
                               uint16_t *meta)
{
    int64_t i = 0;
    for (; i + 16 <= n; i += 16) {
        __m512 x = _mm512_loadu_ps(w + i);
        __mmask16 keep = keep16_avx512(keys16_avx512(x, norm ? norm + i : NULL));
        unsigned sel;
        /* Exactly two kept per group, so the compressed vector holds eight values. */
        _mm256_storeu_ps(values + i / 2, _mm512_castps512_ps256(_mm512_maskz_compress_ps(keep, x)));
        qs_st_u16(meta + i / 16, (uint16_t)meta16_avx512(keep, &sel));
    }
    qs_sp24_prune_f32__ref(w + i, norm ? norm + i : NULL, n - i, values + i / 2, meta + i / 16);
}

void qs_sp24_compress_f32__avx512(const float *w, const uint8_t *mask, int64_t n, float *values,
                                  uint16_t *meta)
{
    int64_t i = 0;
    for (; i + 16 <= n; i += 16) {
        __m512 x = _mm512_loadu_ps(w + i);
        __mmask16 keep;
        unsigned sel;
        if (mask) {
            __m128i m = _mm_loadu_si128((const __m128i *)(mask + i));
            keep = _mm_test_epi8_mask(m, m);
        } else {
            keep = _mm512_cmp_ps_mask(x, _mm512_setzero_ps(), _CMP_NEQ_UQ); /* NaN kept */
        }
        qs_st_u16(meta + i / 16, (uint16_t)meta16_avx512(keep, &sel));
        /* Filled positions (§3.4) read +0 from the zeroed copy; sel has two bits per group. */
        __m512 v = _mm512_maskz_mov_ps(keep, x);
        _mm256_storeu_ps(values + i / 2,
                         _mm512_castps512_ps256(_mm512_maskz_compress_ps((__mmask16)sel, v)));
    }
    qs_sp24_compress_f32__ref(w + i, mask ? mask + i : NULL, n - i, values + i / 2,
                              meta + i / 16);
}

/* Two meta nibbles (one byte) -> the 8-bit expand mask 1 << i0 | 1 << i1 of each group. */
static const uint8_t select_of_nibbles8[256] = {
    0x11, 0x13, 0x15, 0x19, 0x13, 0x12, 0x16, 0x1A, 0x15, 0x16, 0x14, 0x1C, 0x19, 0x1A, 0x1C, 0x18,
    0x31, 0x33, 0x35, 0x39, 0x33, 0x32, 0x36, 0x3A, 0x35, 0x36, 0x34, 0x3C, 0x39, 0x3A, 0x3C, 0x38,
    0x51, 0x53, 0x55, 0x59, 0x53, 0x52, 0x56, 0x5A, 0x55, 0x56, 0x54, 0x5C, 0x59, 0x5A, 0x5C, 0x58,
    0x91, 0x93, 0x95, 0x99, 0x93, 0x92, 0x96, 0x9A, 0x95, 0x96, 0x94, 0x9C, 0x99, 0x9A, 0x9C, 0x98,
    0x31, 0x33, 0x35, 0x39, 0x33, 0x32, 0x36, 0x3A, 0x35, 0x36, 0x34, 0x3C, 0x39, 0x3A, 0x3C, 0x38,
    0x21, 0x23, 0x25, 0x29, 0x23, 0x22, 0x26, 0x2A, 0x25, 0x26, 0x24, 0x2C, 0x29, 0x2A, 0x2C, 0x28,
    0x61, 0x63, 0x65, 0x69, 0x63, 0x62, 0x66, 0x6A, 0x65, 0x66, 0x64, 0x6C, 0x69, 0x6A, 0x6C, 0x68,
    0xA1, 0xA3, 0xA5, 0xA9, 0xA3, 0xA2, 0xA6, 0xAA, 0xA5, 0xA6, 0xA4, 0xAC, 0xA9, 0xAA, 0xAC, 0xA8,
    0x51, 0x53, 0x55, 0x59, 0x53, 0x52, 0x56, 0x5A, 0x55, 0x56, 0x54, 0x5C, 0x59, 0x5A, 0x5C, 0x58,
    0x61, 0x63, 0x65, 0x69, 0x63, 0x62, 0x66, 0x6A, 0x65, 0x66, 0x64, 0x6C, 0x69, 0x6A, 0x6C, 0x68,
    0x41, 0x43, 0x45, 0x49, 0x43, 0x42, 0x46, 0x4A, 0x45, 0x46, 0x44, 0x4C, 0x49, 0x4A, 0x4C, 0x48,
    0xC1, 0xC3, 0xC5, 0xC9, 0xC3, 0xC2, 0xC6, 0xCA, 0xC5, 0xC6, 0xC4, 0xCC, 0xC9, 0xCA, 0xCC, 0xC8,
    0x91, 0x93, 0x95, 0x99, 0x93, 0x92, 0x96, 0x9A, 0x95, 0x96, 0x94, 0x9C, 0x99, 0x9A, 0x9C, 0x98,
    0xA1, 0xA3, 0xA5, 0xA9, 0xA3, 0xA2, 0xA6, 0xAA, 0xA5, 0xA6, 0xA4, 0xAC, 0xA9, 0xAA, 0xAC, 0xA8,
    0xC1, 0xC3, 0xC5, 0xC9, 0xC3, 0xC2, 0xC6, 0xCA, 0xC5, 0xC6, 0xC4, 0xCC, 0xC9, 0xCA, 0xCC, 0xC8,
    0x81, 0x83, 0x85, 0x89, 0x83, 0x82, 0x86, 0x8A, 0x85, 0x86, 0x84, 0x8C, 0x89, 0x8A, 0x8C, 0x88,
};

void qs_sp24_decompress_f32__avx512(const float *values, const uint16_t *meta, int64_t n,
                                    float *dst)
{
    int64_t i = 0;
    for (; i + 16 <= n; i += 16) {
        unsigned word = qs_ld_u16(meta + i / 16);
        unsigned sel =
            select_of_nibbles8[word & 0xFFu] | (unsigned)select_of_nibbles8[word >> 8] << 8;
        __m512 v = _mm512_castps256_ps512(_mm256_loadu_ps(values + i / 2));
        _mm512_storeu_ps(dst + i, _mm512_maskz_expand_ps((__mmask16)sel, v));
    }
    qs_sp24_decompress_f32__ref(values + i / 2, meta + i / 16, n - i, dst + i);
}
