/* SPDX-License-Identifier: MIT */
/*
 * Reductions for AVX-512 F/BW/DQ/VL (spec/formats.md §5.2 step 1, §8 step 1), bit for bit as
 * src/ref/reduce_ref.c. fmaxf/fminf ignore NaN; VMAXPS/VMINPS return their second operand when
 * either is NaN, so the data goes first and the accumulator second. Max and min are exact, so lane
 * order does not matter, except for the sign of a zero result, which is recomputed by replaying
 * the reference kernel over the zero elements only (see zero_fold_avx512). Tails use masked loads
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

/* Zero elements queued for the replay, flushed through the reference kernel 64 at a time. */
typedef struct {
    float buf[64], l, h;
    int k;
} zero_replay_avx512;

static inline void zero_push_avx512(zero_replay_avx512 *z, float v)
{
    z->buf[z->k++] = v;
    if (z->k == 64) {
        qs_minmax_f32__ref(z->buf, z->k, &z->l, &z->h);
        z->k = 0;
    }
}

/* The exact result, sign included, of the reference when its fold ends at +-0. The reference
 * orders -0 below +0, but MINPS/MAXPS return their second operand for a -0/+0 pair, so the lanes
 * may have kept either zero. The reference kernel itself is replayed over the zero elements only;
 * every other element leaves a zero accumulator unchanged, so this reproduces its bits. */
static float zero_fold_avx512(const float *src, int64_t n, float init, int is_max)
{
    zero_replay_avx512 z;

    z.l = z.h = init;
    z.k = 0;
    for (int64_t i = 0; i < n; i += 16) {
        __mmask16 m = tail_mask_avx512(n - i);
        __m512 v = _mm512_maskz_loadu_ps(m, src + i);
        unsigned bits = _mm512_mask_cmp_ps_mask(m, v, _mm512_setzero_ps(), _CMP_EQ_OQ);
        for (; bits; bits &= bits - 1)
            zero_push_avx512(&z, src[i + __builtin_ctz(bits)]);
    }
    qs_minmax_f32__ref(z.buf, z.k, &z.l, &z.h);
    return is_max ? z.h : z.l;
}

void qs_minmax_f32__avx512(const float *src, int64_t n, float *lo, float *hi)
{
    float l = *lo, h = *hi;
    int64_t i = 0;

    /* A NaN accumulator would stick in VMINPS/VMAXPS; the reference replaces it by the first
     * non-NaN element, so run the reference until both are numbers. */
    for (; i < n && (l != l || h != h); i++) {
        l = qs_ref_min(l, src[i]);
        h = qs_ref_max(h, src[i]);
    }
    if (i < n) {
        __m512 l0 = _mm512_set1_ps(l), l1 = l0, h0 = _mm512_set1_ps(h), h1 = h0;
        for (; i + 32 <= n; i += 32) {
            __m512 a = _mm512_loadu_ps(src + i), b = _mm512_loadu_ps(src + i + 16);
            l0 = _mm512_min_ps(a, l0);
            h0 = _mm512_max_ps(a, h0);
            l1 = _mm512_min_ps(b, l1);
            h1 = _mm512_max_ps(b, h1);
        }
        for (; i < n; i += 16) {
            __mmask16 m = tail_mask_avx512(n - i);
            __m512 a = _mm512_maskz_loadu_ps(m, src + i);
            l0 = _mm512_mask_min_ps(l0, m, a, l0);
            h0 = _mm512_mask_max_ps(h0, m, a, h0);
        }
        l = _mm512_reduce_min_ps(_mm512_min_ps(l0, l1));
        h = _mm512_reduce_max_ps(_mm512_max_ps(h0, h1));
    }
    if (l == 0.0f)
        l = zero_fold_avx512(src, n, *lo, 0);
    if (h == 0.0f)
        h = zero_fold_avx512(src, n, *hi, 1);
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
