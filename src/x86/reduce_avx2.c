/* SPDX-License-Identifier: MIT */
/*
 * Reductions for AVX2 (spec/formats.md §5.2 step 1, §8 step 1), bit for bit as
 * src/ref/reduce_ref.c. fmaxf/fminf ignore NaN; x86 MAXPS/MINPS return their second operand when
 * either is NaN, so the data goes first and the accumulator second. Max and min are exact, so lane
 * order does not matter, except for the sign of a zero result, which is recomputed by replaying
 * the reference kernel over the zero elements only (see zero_fold_avx2).
 */
#include <math.h>

#include <immintrin.h>

#include "../core/kernels.h"
#include "../ref/ref.h"

static inline float hmax_avx2(__m256 v)
{
    __m128 m = _mm_max_ps(_mm256_castps256_ps128(v), _mm256_extractf128_ps(v, 1));
    m = _mm_max_ps(m, _mm_movehl_ps(m, m));
    m = _mm_max_ss(m, _mm_movehdup_ps(m));
    return _mm_cvtss_f32(m);
}

static inline float hmin_avx2(__m256 v)
{
    __m128 m = _mm_min_ps(_mm256_castps256_ps128(v), _mm256_extractf128_ps(v, 1));
    m = _mm_min_ps(m, _mm_movehl_ps(m, m));
    m = _mm_min_ss(m, _mm_movehdup_ps(m));
    return _mm_cvtss_f32(m);
}

float qs_amax_f32__avx2(const float *src, int64_t n)
{
    const __m256 abs = _mm256_castsi256_ps(_mm256_set1_epi32(0x7FFFFFFF));
    __m256 a0 = _mm256_setzero_ps(), a1 = a0, a2 = a0, a3 = a0;
    int64_t i = 0;
    float m;

    for (; i + 32 <= n; i += 32) {
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
        m = qs_ref_absmax_step(m, src[i]);
    return m;
}

/* Zero elements queued for the replay, flushed through the reference kernel 64 at a time. */
typedef struct {
    float buf[64], l, h;
    int k;
} zero_replay_avx2;

static inline void zero_push_avx2(zero_replay_avx2 *z, float v)
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
static float zero_fold_avx2(const float *src, int64_t n, float init, int is_max)
{
    zero_replay_avx2 z;

    z.l = z.h = init;
    z.k = 0;
    const __m256 zero = _mm256_setzero_ps();
    int64_t i = 0;

    for (; i + 8 <= n; i += 8) {
        unsigned bits = (unsigned)_mm256_movemask_ps(
            _mm256_cmp_ps(_mm256_loadu_ps(src + i), zero, _CMP_EQ_OQ));
        for (; bits; bits &= bits - 1)
            zero_push_avx2(&z, src[i + __builtin_ctz(bits)]);
    }
    for (; i < n; i++)
        if (src[i] == 0.0f)
            zero_push_avx2(&z, src[i]);
    qs_minmax_f32__ref(z.buf, z.k, &z.l, &z.h);
    return is_max ? z.h : z.l;
}

void qs_minmax_f32__avx2(const float *src, int64_t n, float *lo, float *hi)
{
    float l = *lo, h = *hi;
    int64_t i = 0;

    /* A NaN accumulator would stick in MINPS/MAXPS; the reference replaces it by the first
     * non-NaN element, so run the reference until both are numbers. */
    for (; i < n && (l != l || h != h); i++) {
        l = qs_ref_min(l, src[i]);
        h = qs_ref_max(h, src[i]);
    }
    if (i + 8 <= n) {
        __m256 l0 = _mm256_set1_ps(l), l1 = l0, h0 = _mm256_set1_ps(h), h1 = h0;
        for (; i + 16 <= n; i += 16) {
            __m256 a = _mm256_loadu_ps(src + i), b = _mm256_loadu_ps(src + i + 8);
            l0 = _mm256_min_ps(a, l0);
            h0 = _mm256_max_ps(a, h0);
            l1 = _mm256_min_ps(b, l1);
            h1 = _mm256_max_ps(b, h1);
        }
        for (; i + 8 <= n; i += 8) {
            __m256 a = _mm256_loadu_ps(src + i);
            l0 = _mm256_min_ps(a, l0);
            h0 = _mm256_max_ps(a, h0);
        }
        l = hmin_avx2(_mm256_min_ps(l0, l1));
        h = hmax_avx2(_mm256_max_ps(h0, h1));
    }
    for (; i < n; i++) {
        l = qs_ref_min(l, src[i]);
        h = qs_ref_max(h, src[i]);
    }
    if (l == 0.0f)
        l = zero_fold_avx2(src, n, *lo, 0);
    if (h == 0.0f)
        h = zero_fold_avx2(src, n, *hi, 1);
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
        if ((qs_f32_bits(src[i]) & 0x7F800000u) == 0x7F800000u)
            return 1;
    return 0;
}
