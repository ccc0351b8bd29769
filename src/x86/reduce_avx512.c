/* SPDX-License-Identifier: MIT */
/*
 * Reductions for AVX-512 F/BW/DQ/VL (docs/formats.md §5.2 step 1, §8 step 1), bit for bit as
 * src/ref/reduce_ref.c. fmaxf/fminf ignore NaN; VMAXPS/VMINPS return their second operand when
 * either is NaN, so the data goes first and the accumulator second. Max and min are exact, so lane
 * order does not matter: zeros are ordered -0 < +0 as the reference orders them (min0_avx512,
 * max0_avx512), which keeps min and max associative. Tails use masked loads
 * (masked-off lanes keep the accumulator), so nothing past n is read.
 */
#include <math.h>

#include <immintrin.h>

#include "../core/kernels.h"
#include "../ref/ref.h"

static inline __mmask16 tail_mask_avx512(int64_t left)
{
    return left >= 16 ? (__mmask16)0xFFFF : (__mmask16)((1u << left) - 1u);
}

float qs_amax_f32__avx512(const float *src, int64_t n)
{
    __m512 a0 = _mm512_setzero_ps(), a1 = a0, a2 = a0, a3 = a0;
    int64_t i = 0;

    for (; i + 64 <= n; i += 64) {
        a0 = _mm512_max_ps(_mm512_abs_ps(_mm512_loadu_ps(src + i)), a0);
        a1 = _mm512_max_ps(_mm512_abs_ps(_mm512_loadu_ps(src + i + 16)), a1);
        a2 = _mm512_max_ps(_mm512_abs_ps(_mm512_loadu_ps(src + i + 32)), a2);
        a3 = _mm512_max_ps(_mm512_abs_ps(_mm512_loadu_ps(src + i + 48)), a3);
    }
    for (; i < n; i += 16) {
        __m512 v = _mm512_maskz_loadu_ps(tail_mask_avx512(n - i), src + i); /* zeros: no effect */
        a0 = _mm512_max_ps(_mm512_abs_ps(v), a0);
    }
    /* no NaN and no -0 in the accumulators: combining them is exact */
    return _mm512_reduce_max_ps(_mm512_max_ps(_mm512_max_ps(a0, a1), _mm512_max_ps(a2, a3)));
}

/* VMINPS/VMAXPS with the reference's order on zeros (-0 < +0): see min0_avx2 in
 * reduce_avx2.c. Lanes outside `k` keep the accumulator. */
static inline __m512 min0_avx512(__m512 acc, __mmask16 k, __m512 x)
{
    __m512 m = _mm512_mask_min_ps(acc, k, x, acc);
    __mmask16 eq = _mm512_mask_cmp_ps_mask(k, x, m, _CMP_EQ_OQ);
    return _mm512_mask_or_ps(m, eq, m, x);
}

static inline __m512 max0_avx512(__m512 acc, __mmask16 k, __m512 x)
{
    __m512 m = _mm512_mask_max_ps(acc, k, x, acc);
    __mmask16 eq = _mm512_mask_cmp_ps_mask(k, x, m, _CMP_EQ_OQ);
    return _mm512_mask_and_ps(m, eq, m, x);
}

void qs_minmax_f32__avx512(const float *src, int64_t n, float *lo, float *hi)
{
    float l = *lo, h = *hi;
    int64_t i = 0;

    /* A NaN accumulator would stick in VMINPS/VMAXPS; the reference replaces it by the first
     * non-NaN element, so run the reference until both are numbers. */
    for (; i < n && (l != l || h != h); i++) {
        l = qs_ref_min(l, qs_ld_f32(src + i));
        h = qs_ref_max(h, qs_ld_f32(src + i));
    }
    if (i < n) {
        __m512 l0 = _mm512_set1_ps(l), l1 = l0, h0 = _mm512_set1_ps(h), h1 = h0;
        float tl[32], th[32];
        for (; i + 32 <= n; i += 32) {
            __m512 a = _mm512_loadu_ps(src + i), b = _mm512_loadu_ps(src + i + 16);
            l0 = min0_avx512(l0, 0xFFFF, a);
            h0 = max0_avx512(h0, 0xFFFF, a);
            l1 = min0_avx512(l1, 0xFFFF, b);
            h1 = max0_avx512(h1, 0xFFFF, b);
        }
        for (; i < n; i += 16) {
            __mmask16 m = tail_mask_avx512(n - i);
            __m512 a = _mm512_maskz_loadu_ps(m, src + i);
            l0 = min0_avx512(l0, m, a);
            h0 = max0_avx512(h0, m, a);
        }
        /* min and max with this zero order are associative: fold the lanes in any order */
        _mm512_storeu_ps(tl, l0);
        _mm512_storeu_ps(tl + 16, l1);
        _mm512_storeu_ps(th, h0);
        _mm512_storeu_ps(th + 16, h1);
        for (int j = 0; j < 32; j++) {
            l = qs_ref_min(l, tl[j]);
            h = qs_ref_max(h, th[j]);
        }
    }
    *lo = l;
    *hi = h;
}

int32_t qs_nonfinite_f32__avx512(const float *src, int64_t n)
{
    const __m512i e = _mm512_set1_epi32(0x7F800000);
    int64_t i = 0;

    for (; i + 64 <= n; i += 64) {
        __m512i a = _mm512_loadu_si512(src + i), b = _mm512_loadu_si512(src + i + 16);
        __m512i c = _mm512_loadu_si512(src + i + 32), d = _mm512_loadu_si512(src + i + 48);
        /* one compare per vector: a lane whose exponent field is all ones */
        __mmask16 hit = _mm512_cmpeq_epi32_mask(_mm512_and_si512(a, e), e) |
                        _mm512_cmpeq_epi32_mask(_mm512_and_si512(b, e), e) |
                        _mm512_cmpeq_epi32_mask(_mm512_and_si512(c, e), e) |
                        _mm512_cmpeq_epi32_mask(_mm512_and_si512(d, e), e);
        if (hit)
            return 1;
    }
    for (; i < n; i += 16) {
        __mmask16 m = tail_mask_avx512(n - i);
        __m512i a = _mm512_maskz_loadu_epi32(m, src + i);
        if (_mm512_mask_cmpeq_epi32_mask(m, _mm512_and_si512(a, e), e))
            return 1;
    }
    return 0;
}
