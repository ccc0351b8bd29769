/* SPDX-License-Identifier: MIT */
/*
 * 2:4 kernels for AVX2: STRIP mask, fused prune + compress, compress with a mask or by non-zero
 * values, and decompress, 16 floats (four groups, one meta word) per step in two 8-float halves.
 * Same rules as src/ref/sp24_ref.c (docs/sparsity.md §2.2, §3): rank keys are the magnitude bits
 * of the score with NaN clamped above +Inf (below 2^31, so signed compares order them), compared
 * inside each 128-bit lane (one group) with rotations, ties going to the lower position. Values
 * move with vpermilps under per-group controls from small tables. Tails of fewer than 16
 * elements call the reference kernels.
 */
#include <immintrin.h>

#include "../core/kernels.h"
#include "../ref/ref.h"
#include "../ref/sp24_ref.h"

/* vpermilps control of a group: the positions (i0, i1) of its nibble first. */
static const int32_t gather_ctrl[16][4] = {
    {0, 0, 0, 0}, {1, 0, 0, 0}, {2, 0, 0, 0}, {3, 0, 0, 0}, {0, 1, 0, 0}, {1, 1, 0, 0},
    {2, 1, 0, 0}, {3, 1, 0, 0}, {0, 2, 0, 0}, {1, 2, 0, 0}, {2, 2, 0, 0}, {3, 2, 0, 0},
    {0, 3, 0, 0}, {1, 3, 0, 0}, {2, 3, 0, 0}, {3, 3, 0, 0},
};

/* Keep vector (all ones where kept) of two groups: lane i loses to lane (i + r) % 4 when that
 * key is larger, or equal at a lower position (i >= 4 - r). */
static inline __m256i keep8_avx2(__m256i k)
{
    const __m256i t1 = _mm256_setr_epi32(0, 0, 0, -1, 0, 0, 0, -1);
    const __m256i t2 = _mm256_setr_epi32(0, 0, -1, -1, 0, 0, -1, -1);
    const __m256i t3 = _mm256_setr_epi32(0, -1, -1, -1, 0, -1, -1, -1);
    __m256i r1 = _mm256_shuffle_epi32(k, 0x39), r2 = _mm256_shuffle_epi32(k, 0x4E);
    __m256i r3 = _mm256_shuffle_epi32(k, 0x93);
    __m256i b1 = _mm256_or_si256(_mm256_cmpgt_epi32(r1, k),
                                 _mm256_and_si256(_mm256_cmpeq_epi32(r1, k), t1));
    __m256i b2 = _mm256_or_si256(_mm256_cmpgt_epi32(r2, k),
                                 _mm256_and_si256(_mm256_cmpeq_epi32(r2, k), t2));
    __m256i b3 = _mm256_or_si256(_mm256_cmpgt_epi32(r3, k),
                                 _mm256_and_si256(_mm256_cmpeq_epi32(r3, k), t3));
    /* Each beat adds -1: kept when fewer than two beat it, i.e. the sum is above -2. */
    __m256i rank = _mm256_add_epi32(_mm256_add_epi32(b1, b2), b3);
    return _mm256_cmpgt_epi32(rank, _mm256_set1_epi32(-2));
}

static inline __m256i keys8_avx2(__m256 x, const float *norm)
{
    __m256i k = _mm256_and_si256(_mm256_castps_si256(x), _mm256_set1_epi32(0x7FFFFFFF));
    if (norm) {
        __m256 a = _mm256_mul_ps(_mm256_castsi256_ps(k), _mm256_loadu_ps(norm));
        k = _mm256_and_si256(_mm256_castps_si256(a), _mm256_set1_epi32(0x7FFFFFFF));
    }
    return _mm256_min_epu32(k, _mm256_set1_epi32((int)QS_SP_KEY_NAN));
}

/* Four kept values of two groups (zeroed where not kept) -> 128 bits, in ascending position. */
static inline __m128 gather8_avx2(__m256 v, unsigned nib0, unsigned nib1)
{
    __m256i ctrl = _mm256_inserti128_si256(
        _mm256_castsi128_si256(_mm_loadu_si128((const __m128i *)gather_ctrl[nib0])),
        _mm_loadu_si128((const __m128i *)gather_ctrl[nib1]), 1);
    __m256 p = _mm256_permutevar_ps(v, ctrl);
    return _mm256_castps256_ps128(
        _mm256_castpd_ps(_mm256_permute4x64_pd(_mm256_castps_pd(p), 0x08)));
}

/* Meta word of 16 elements and their values, from the keep bits of each half (§3.2, §3.4). */
static inline uint16_t put16_avx2(__m256 x0, __m256 x1, __m256i k0, __m256i k1, float *values)
{
    unsigned m0 = (unsigned)_mm256_movemask_ps(_mm256_castsi256_ps(k0));
    unsigned m1 = (unsigned)_mm256_movemask_ps(_mm256_castsi256_ps(k1));
    unsigned p0 = qs_sp24_nibbles_of_keep8[m0], p1 = qs_sp24_nibbles_of_keep8[m1];
    unsigned n0 = p0 & 15u, n1 = p0 >> 4, n2 = p1 & 15u, n3 = p1 >> 4;
    __m256 v0 = _mm256_and_ps(x0, _mm256_castsi256_ps(k0));
    __m256 v1 = _mm256_and_ps(x1, _mm256_castsi256_ps(k1));

    _mm_storeu_ps(values, gather8_avx2(v0, n0, n1));
    _mm_storeu_ps(values + 4, gather8_avx2(v1, n2, n3));
    return (uint16_t)(p0 | p1 << 8);
}

static inline void store_mask8_avx2(uint8_t *mask, __m256i keep)
{
    __m128i p = _mm_packs_epi32(_mm256_castsi256_si128(keep), _mm256_extracti128_si256(keep, 1));
    p = _mm_packs_epi16(p, p);
    _mm_storel_epi64((__m128i *)mask, _mm_and_si128(p, _mm_set1_epi8(1)));
}

void qs_sp24_mask_f32__avx2(const float *w, const float *norm, int64_t n, uint8_t *mask)
{
    int64_t i = 0;
    for (; i + 8 <= n; i += 8)
        store_mask8_avx2(mask + i, keep8_avx2(keys8_avx2(_mm256_loadu_ps(w + i),
                                                         norm ? norm + i : NULL)));
    qs_sp24_mask_f32__ref(w + i, norm ? norm + i : NULL, n - i, mask + i);
}

void qs_sp24_prune_f32__avx2(const float *w, const float *norm, int64_t n, float *values,
                             uint16_t *meta)
{
    int64_t i = 0;
    for (; i + 16 <= n; i += 16) {
        __m256 x0 = _mm256_loadu_ps(w + i), x1 = _mm256_loadu_ps(w + i + 8);
        __m256i k0 = keep8_avx2(keys8_avx2(x0, norm ? norm + i : NULL));
        __m256i k1 = keep8_avx2(keys8_avx2(x1, norm ? norm + i + 8 : NULL));
        qs_st_u16(meta + i / 16, put16_avx2(x0, x1, k0, k1, values + i / 2));
    }
    qs_sp24_prune_f32__ref(w + i, norm ? norm + i : NULL, n - i, values + i / 2, meta + i / 16);
}

static inline __m256i mask_keep8_avx2(const uint8_t *mask)
{
    __m128i b = _mm_cmpeq_epi8(_mm_loadl_epi64((const __m128i *)mask), _mm_setzero_si128());
    /* bytes -> int32 lanes, then invert: kept where the byte is non-zero */
    return _mm256_xor_si256(_mm256_cvtepi8_epi32(b), _mm256_set1_epi32(-1));
}

void qs_sp24_compress_f32__avx2(const float *w, const uint8_t *mask, int64_t n, float *values,
                                uint16_t *meta)
{
    int64_t i = 0;
    for (; i + 16 <= n; i += 16) {
        __m256 x0 = _mm256_loadu_ps(w + i), x1 = _mm256_loadu_ps(w + i + 8);
        __m256i k0, k1;
        if (mask) {
            k0 = mask_keep8_avx2(mask + i);
            k1 = mask_keep8_avx2(mask + i + 8);
        } else { /* NaN != 0 is true (unordered): NaN is kept */
            k0 = _mm256_castps_si256(_mm256_cmp_ps(x0, _mm256_setzero_ps(), _CMP_NEQ_UQ));
            k1 = _mm256_castps_si256(_mm256_cmp_ps(x1, _mm256_setzero_ps(), _CMP_NEQ_UQ));
        }
        qs_st_u16(meta + i / 16, put16_avx2(x0, x1, k0, k1, values + i / 2));
    }
    qs_sp24_compress_f32__ref(w + i, mask ? mask + i : NULL, n - i, values + i / 2,
                              meta + i / 16);
}

/* Decompress of one group by nibble: the vpermilps control (output position i0 takes stored
 * value 0, i1 value 1) and the mask that zeroes the other two positions. Only the six valid
 * nibbles occur (drivers validate meta first). */
static const int32_t scatter_ctrl[16][4] = {
    {0, 0, 0, 0}, {0, 0, 0, 0}, {0, 0, 0, 0}, {0, 0, 0, 0}, {0, 1, 0, 0}, {0, 0, 0, 0},
    {0, 0, 0, 0}, {0, 0, 0, 0}, {0, 0, 1, 0}, {0, 0, 1, 0}, {0, 0, 0, 0}, {0, 0, 0, 0},
    {0, 0, 0, 1}, {0, 0, 0, 1}, {0, 0, 0, 1}, {0, 0, 0, 0},
};
static const int32_t scatter_keep[16][4] = {
    {0, 0, 0, 0}, {0, 0, 0, 0}, {0, 0, 0, 0}, {0, 0, 0, 0}, {-1, -1, 0, 0}, {0, 0, 0, 0},
    {0, 0, 0, 0}, {0, 0, 0, 0}, {-1, 0, -1, 0}, {0, -1, -1, 0}, {0, 0, 0, 0}, {0, 0, 0, 0},
    {-1, 0, 0, -1}, {0, -1, 0, -1}, {0, 0, -1, -1}, {0, 0, 0, 0},
};

/* Eight outputs (two groups) from four stored values, broadcast to both lanes; the upper group's
 * values sit at 2 and 3, hence the +2 on its control. */
static inline __m256 scatter8_avx2(const float *values, unsigned nib0, unsigned nib1)
{
    __m256i ctrl = _mm256_inserti128_si256(
        _mm256_castsi128_si256(_mm_loadu_si128((const __m128i *)scatter_ctrl[nib0])),
        _mm_loadu_si128((const __m128i *)scatter_ctrl[nib1]), 1);
    __m256i keep = _mm256_inserti128_si256(
        _mm256_castsi128_si256(_mm_loadu_si128((const __m128i *)scatter_keep[nib0])),
        _mm_loadu_si128((const __m128i *)scatter_keep[nib1]), 1);
    ctrl = _mm256_add_epi32(ctrl, _mm256_setr_epi32(0, 0, 0, 0, 2, 2, 2, 2));
    __m256 p = _mm256_permutevar_ps(_mm256_broadcast_ps((const __m128 *)values), ctrl);
    return _mm256_and_ps(p, _mm256_castsi256_ps(keep));
}

void qs_sp24_decompress_f32__avx2(const float *values, const uint16_t *meta, int64_t n,
                                  float *dst)
{
    int64_t i = 0;
    for (; i + 16 <= n; i += 16) {
        unsigned word = qs_ld_u16(meta + i / 16);
        _mm256_storeu_ps(dst + i, scatter8_avx2(values + i / 2, word & 15u, (word >> 4) & 15u));
        _mm256_storeu_ps(dst + i + 8,
                         scatter8_avx2(values + i / 2 + 4, (word >> 8) & 15u, word >> 12));
    }
    qs_sp24_decompress_f32__ref(values + i / 2, meta + i / 16, n - i, dst + i);
}
