/* SPDX-License-Identifier: MIT */
/*
 * Reductions for AVX2 (docs/formats.md §5.2 step 1, §8 step 1), bit for bit as
 * src/ref/reduce_ref.c. fmaxf/fminf ignore NaN; x86 MAXPS/MINPS return their second operand when
 * either is NaN, so the data goes first and the accumulator second. Max and min are exact and,
 * with zeros ordered -0 < +0 as the reference orders them (min0_avx2, max0_avx2), associative,
 * so lane order does not matter.
 */
#include <math.h>

#include <immintrin.h>

#include "../core/kernels.h"
#include "../ref/ref.h"
#include "prefetch_x86.h"

static inline float hmax_avx2(__m256 v)
{
    __m128 m = _mm_max_ps(_mm256_castps256_ps128(v), _mm256_extractf128_ps(v, 1));
    m = _mm_max_ps(m, _mm_movehl_ps(m, m));
    m = _mm_max_ss(m, _mm_movehdup_ps(m));
    return _mm_cvtss_f32(m);
}

float qs_amax_f32__avx2(const float *src, int64_t n)
{
    const __m256 abs = _mm256_castsi256_ps(_mm256_set1_epi32(0x7FFFFFFF));
    __m256 a0 = _mm256_setzero_ps(), a1 = a0, a2 = a0, a3 = a0;
    int64_t i = 0;
    float m;

    for (; i + 32 <= n; i += 32) {
        /* 8 KiB ahead into L1, as the quantize kernels read (minifloat_avx2.h) */
        qs_prefetch_l1(src + i, 4 * 2048);
        qs_prefetch_l1(src + i, 4 * (2048 + 16));
        a0 = _mm256_max_ps(_mm256_and_ps(_mm256_loadu_ps(src + i), abs), a0);
        a1 = _mm256_max_ps(_mm256_and_ps(_mm256_loadu_ps(src + i + 8), abs), a1);
        a2 = _mm256_max_ps(_mm256_and_ps(_mm256_loadu_ps(src + i + 16), abs), a2);
        a3 = _mm256_max_ps(_mm256_and_ps(_mm256_loadu_ps(src + i + 24), abs), a3);
    }
    for (; i + 8 <= n; i += 8)
        a0 = _mm256_max_ps(_mm256_and_ps(_mm256_loadu_ps(src + i), abs), a0);
    /* accumulators hold no NaN and no -0, so combining them is exact */
    m = hmax_avx2(_mm256_max_ps(_mm256_max_ps(a0, a1), _mm256_max_ps(a2, a3)));
    for (; i < n; i++)
        m = qs_ref_absmax_step(m, qs_ld_f32(src + i));
    return m;
}

/* MINPS/MAXPS with the reference's order on zeros (-0 < +0). MINPS keeps the accumulator for an
 * equal pair; OR-ing in the equal datum turns a -0/+0 pair into -0, AND-ing into +0 for the max
 * (equal non-zero values have equal bits, so nothing else changes). A NaN datum compares unequal
 * and leaves the accumulator alone, as the reference ignores it. */
static inline __m256 min0_avx2(__m256 x, __m256 acc)
{
    __m256 m = _mm256_min_ps(x, acc);
    return _mm256_or_ps(m, _mm256_and_ps(x, _mm256_cmp_ps(x, m, _CMP_EQ_OQ)));
}

static inline __m256 max0_avx2(__m256 x, __m256 acc)
{
    __m256 m = _mm256_max_ps(x, acc);
    __m256 ne = _mm256_cmp_ps(x, m, _CMP_NEQ_UQ);
    return _mm256_and_ps(m, _mm256_or_ps(x, ne));
}

void qs_minmax_f32__avx2(const float *src, int64_t n, float *lo, float *hi)
{
    float l = *lo, h = *hi;
    int64_t i = 0;

    /* A NaN accumulator would stick in MINPS/MAXPS; the reference replaces it by the first
     * non-NaN element, so run the reference until both are numbers. */
    for (; i < n && (l != l || h != h); i++) {
        l = qs_ref_min(l, qs_ld_f32(src + i));
        h = qs_ref_max(h, qs_ld_f32(src + i));
    }
    if (i + 8 <= n) {
        __m256 l0 = _mm256_set1_ps(l), l1 = l0, h0 = _mm256_set1_ps(h), h1 = h0;
        float tl[16], th[16];
        for (; i + 16 <= n; i += 16) {
            __m256 a = _mm256_loadu_ps(src + i), b = _mm256_loadu_ps(src + i + 8);
            l0 = min0_avx2(a, l0);
            h0 = max0_avx2(a, h0);
            l1 = min0_avx2(b, l1);
            h1 = max0_avx2(b, h1);
        }
        for (; i + 8 <= n; i += 8) {
            __m256 a = _mm256_loadu_ps(src + i);
            l0 = min0_avx2(a, l0);
            h0 = max0_avx2(a, h0);
        }
        /* min and max with this zero order are associative: fold the lanes in any order */
        _mm256_storeu_ps(tl, l0);
        _mm256_storeu_ps(tl + 8, l1);
        _mm256_storeu_ps(th, h0);
        _mm256_storeu_ps(th + 8, h1);
        for (int j = 0; j < 16; j++) {
            l = qs_ref_min(l, tl[j]);
            h = qs_ref_max(h, th[j]);
        }
    }
    for (; i < n; i++) {
        l = qs_ref_min(l, qs_ld_f32(src + i));
        h = qs_ref_max(h, qs_ld_f32(src + i));
    }
    *lo = l;
    *hi = h;
}

int32_t qs_nonfinite_f32__avx2(const float *src, int64_t n)
{
    const __m256i e = _mm256_set1_epi32(0x7F800000);
    int64_t i = 0;

    for (; i + 32 <= n; i += 32) {
        __m256i a = _mm256_loadu_si256((const __m256i *)(src + i));
        __m256i b = _mm256_loadu_si256((const __m256i *)(src + i + 8));
        __m256i c = _mm256_loadu_si256((const __m256i *)(src + i + 16));
        __m256i d = _mm256_loadu_si256((const __m256i *)(src + i + 24));
        __m256i hit = _mm256_or_si256(
            _mm256_or_si256(_mm256_cmpeq_epi32(_mm256_and_si256(a, e), e),
                            _mm256_cmpeq_epi32(_mm256_and_si256(b, e), e)),
            _mm256_or_si256(_mm256_cmpeq_epi32(_mm256_and_si256(c, e), e),
                            _mm256_cmpeq_epi32(_mm256_and_si256(d, e), e)));
        if (!_mm256_testz_si256(hit, hit))
            return 1;
    }
    for (; i < n; i++)
        if ((qs_f32_bits(qs_ld_f32(src + i)) & 0x7F800000u) == 0x7F800000u)
            return 1;
    return 0;
}
