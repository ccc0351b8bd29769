/* SPDX-License-Identifier: MIT */
/*
 * Calibration statistics for AVX2: finite range scan with NaN / Inf counts, power-of-two histogram
 * binning and per-channel sum of squares. Same results as src/ref/hist_ref.c bit for bit
 * (docs/calibration.md §3): min and max are exact once zeros are made +0, the bin index is read
 * from the exponent and mantissa bits (floor(|x| * 2^-k) is a right shift of the 24-bit
 * significand), and every sum of squares is one double product and one addition per element, as
 * in the reference. Tails use the reference's scalar steps.
 */
#include <immintrin.h>
#include <math.h>
#include <string.h>

#include "../core/kernels.h"
#include "../ref/ref.h"
#include "prefetch_x86.h"

#define ABS_MASK 0x7FFFFFFF
#define INF_BITS 0x7F800000

static inline uint32_t bits_avx2(float f)
{
    uint32_t u;
    memcpy(&u, &f, sizeof u);
    return u;
}

void qs_hist_scan__avx2(const float *src, int64_t n, float *lo, float *hi, uint64_t *n_nan,
                        uint64_t *n_inf)
{
    const __m256i absm = _mm256_set1_epi32(ABS_MASK), inf = _mm256_set1_epi32(INF_BITS);
    const __m256 pinf = _mm256_set1_ps(INFINITY), minf = _mm256_set1_ps(-INFINITY);
    const __m256 zero = _mm256_setzero_ps();
    __m256 vlo = pinf, vhi = minf;
    uint64_t nn = 0, ni = 0;
    int64_t i = 0;

    for (; i + 8 <= n; i += 8) {
        __m256 x = _mm256_loadu_ps(src + i);
        __m256i u = _mm256_and_si256(_mm256_castps_si256(x), absm);
        __m256i fin = _mm256_cmpgt_epi32(inf, u);
        if (_mm256_movemask_ps(_mm256_castsi256_ps(fin)) != 0xFF) {
            nn += (uint64_t)__builtin_popcount(
                _mm256_movemask_ps(_mm256_castsi256_ps(_mm256_cmpgt_epi32(u, inf))));
            ni += (uint64_t)__builtin_popcount(
                _mm256_movemask_ps(_mm256_castsi256_ps(_mm256_cmpeq_epi32(u, inf))));
        }
        __m256 v = _mm256_add_ps(x, zero); /* -0 -> +0, as the reference */
        __m256 f = _mm256_castsi256_ps(fin);
        vlo = _mm256_min_ps(vlo, _mm256_blendv_ps(pinf, v, f));
        vhi = _mm256_max_ps(vhi, _mm256_blendv_ps(minf, v, f));
    }
    float tl[8], th[8], l, h;
    _mm256_storeu_ps(tl, vlo);
    _mm256_storeu_ps(th, vhi);
    l = tl[0];
    h = th[0];
    for (int j = 1; j < 8; j++) {
        l = tl[j] < l ? tl[j] : l;
        h = th[j] > h ? th[j] : h;
    }
    for (; i < n; i++) {
        float x = qs_ld_f32(src + i);
        uint32_t a = bits_avx2(x) & ABS_MASK;
        if (a > INF_BITS) {
            nn++;
        } else if (a == INF_BITS) {
            ni++;
        } else {
            float v = x + 0.0f;
            l = v < l ? v : l;
            h = v > h ? v : h;
        }
    }
    /* strict comparisons against the caller's values, exactly as the reference's loop ends */
    if (l < *lo)
        *lo = l;
    if (h > *hi)
        *hi = h;
    *n_nan += nn;
    *n_inf += ni;
}

/* Bin indices from |x| bits u, clamped to the top bin. */
static inline __m256i bin_index_avx2(__m256i u, __m256i shift0, __m256i top)
{
    const __m256i mmask = _mm256_set1_epi32(0x7FFFFF), hidden = _mm256_set1_epi32(0x800000);
    const __m256i one = _mm256_set1_epi32(1), zero = _mm256_setzero_si256();
    __m256i e = _mm256_srli_epi32(u, 23);
    __m256i normal = _mm256_cmpgt_epi32(e, zero);
    __m256i mant = _mm256_or_si256(_mm256_and_si256(u, mmask), _mm256_and_si256(normal, hidden));
    /* |x| = mant * 2^(max(e, 1) - 150), so floor(|x| / 2^k) = mant >> (150 + k - max(e, 1)) */
    __m256i s = _mm256_sub_epi32(shift0, _mm256_max_epi32(e, one));
    __m256i b = _mm256_srlv_epi32(mant, s);
    /* a negative shift means |x| >= 2^24 * 2^k: clamp to the top bin as the reference does */
    b = _mm256_or_si256(b, _mm256_cmpgt_epi32(zero, s));
    return _mm256_min_epu32(b, top);
}

/* Bin indices of 8 values; *fin gets the finite-lane bits. */
static inline __m256i bins_avx2(const float *src, __m256i shift0, __m256i top, int *fin)
{
    const __m256i absm = _mm256_set1_epi32(ABS_MASK), inf = _mm256_set1_epi32(INF_BITS);
    __m256i u = _mm256_and_si256(_mm256_loadu_si256((const __m256i *)src), absm);
    *fin = _mm256_movemask_ps(_mm256_castsi256_ps(_mm256_cmpgt_epi32(inf, u)));
    return bin_index_avx2(u, shift0, top);
}

/* Many values in few bins (activations whose range is set by outliers) make consecutive
 * increments of one counter wait for each other; eight private uint32 copies of the histogram,
 * lane j feeding copy j % 8, break that chain. At most SUB_CHUNK values per round keep the
 * uint32 counters from wrapping. */
#define SUB_COPIES 8
#define SUB_MAX_BINS 2048
#define SUB_MIN_N 16384
#define SUB_CHUNK ((int64_t)1 << 30)
#define PREFETCH_BYTES 4096

/* Sum of bin j over the SUB_COPIES private copies. */
static inline uint64_t sub_sum(const uint32_t *sub, int32_t nbins, uint32_t j)
{
    uint64_t t = 0;
    for (int c = 0; c < SUB_COPIES; c++)
        t += sub[c * nbins + j];
    return t;
}

/* Count the eight bins of idx into the private counters; `fin` has bit j set when lane j held a
 * finite value (non-finite values are counted elsewhere and never binned). */
static inline void bump8_avx2(uint32_t *sub, const uint32_t *idx, int fin)
{
    if (fin == 0xFF) {
        sub[idx[0]]++;
        sub[idx[1]]++;
        sub[idx[2]]++;
        sub[idx[3]]++;
        sub[idx[4]]++;
        sub[idx[5]]++;
        sub[idx[6]]++;
        sub[idx[7]]++;
        return;
    }
    for (int j = 0; j < 8; j++)
        if (fin & (1 << j))
            sub[idx[j]]++;
}

static void update_sub_avx2(const float *src, int64_t n, __m256i shift0, __m256i top,
                            int32_t nbins, uint64_t *counts)
{
    uint32_t sub[SUB_COPIES * SUB_MAX_BINS] __attribute__((aligned(64)));
    const __m256i lane_off = _mm256_setr_epi32(0, nbins, 2 * nbins, 3 * nbins, 4 * nbins,
                                               5 * nbins, 6 * nbins, 7 * nbins);
    uint32_t idx[8] __attribute__((aligned(32)));
    __m256i vmax = _mm256_setzero_si256();
    int64_t i = 0;

    memset(sub, 0, (size_t)SUB_COPIES * (size_t)nbins * sizeof sub[0]);
    for (; i + 8 <= n; i += 8) {
        int fin;
        __m256i b = bins_avx2(src + i, shift0, top, &fin);
        vmax = _mm256_max_epu32(vmax, b);
        _mm256_store_si256((__m256i *)idx, _mm256_add_epi32(b, lane_off));
        bump8_avx2(sub, idx, fin);
    }
    _mm256_store_si256((__m256i *)idx, vmax);
    uint32_t used = 0;
    for (int j = 0; j < 8; j++)
        used = idx[j] > used ? idx[j] : used;
    for (uint32_t j = 0; j <= used; j++)
        counts[j] += sub_sum(sub, nbins, j);
}

void qs_hist_update__avx2(const float *src, int64_t n, int32_t k, int32_t nbins, uint64_t *counts)
{
    /* k < -149 only for a sub-normal maximum: subnormal significands would need a left shift */
    if (k < -149) {
        qs_hist_update__ref(src, n, k, nbins, counts);
        return;
    }
    if (k > 200)
        k = 200; /* every finite |x| < 2^128 lands in bin 0 either way */
    const __m256i shift0 = _mm256_set1_epi32(150 + k), top = _mm256_set1_epi32(nbins - 1);
    uint32_t idx[8] __attribute__((aligned(32)));
    int64_t i = 0;

    if (nbins <= SUB_MAX_BINS && n >= SUB_MIN_N) {
        for (; n - i >= 8; ) {
            int64_t len = (n - i) / 8 * 8;
            len = len < SUB_CHUNK ? len : SUB_CHUNK;
            update_sub_avx2(src + i, len, shift0, top, nbins, counts);
            i += len;
        }
    }
    for (; i + 8 <= n; i += 8) {
        int fin;
        _mm256_store_si256((__m256i *)idx, bins_avx2(src + i, shift0, top, &fin));
        if (fin == 0xFF) {
            counts[idx[0]]++;
            counts[idx[1]]++;
            counts[idx[2]]++;
            counts[idx[3]]++;
            counts[idx[4]]++;
            counts[idx[5]]++;
            counts[idx[6]]++;
            counts[idx[7]]++;
        } else {
            for (int j = 0; j < 8; j++)
                if (fin & (1 << j))
                    counts[idx[j]]++;
        }
    }
    qs_hist_update__ref(src + i, n - i, k, nbins, counts);
}

/* One pass: the scan of qs_hist_scan__avx2 and the binning of update_sub_avx2 into private
 * counters, committed only when the span's maximum fits the grid (the reference's rule). */
int32_t qs_hist_scan_update__avx2(const float *src, int64_t n, int32_t k, int32_t nbins,
                                  uint64_t *counts, float *lo, float *hi, uint64_t *n_nan,
                                  uint64_t *n_inf)
{
    float l = INFINITY, h = -INFINITY;
    int32_t fits;

    /* the one-pass loop scales by 2^-k, a normal f32 for k in [-126, 126] */
    if (k < -126 || k > 126 || nbins > SUB_MAX_BINS || n < SUB_MIN_N || n > SUB_CHUNK) {
        qs_hist_scan__avx2(src, n, &l, &h, n_nan, n_inf);
        fits = (double)(-l > h ? -l : h) < ldexp((double)nbins, k);
        if (fits)
            qs_hist_update__avx2(src, n, k, nbins, counts);
    } else {
        const __m256i absm = _mm256_set1_epi32(ABS_MASK), inf = _mm256_set1_epi32(INF_BITS);
        const __m256i top = _mm256_set1_epi32(nbins - 1);
        const __m256 scale = _mm256_set1_ps(ldexpf(1.0f, -k));
        const __m256i lane_off = _mm256_setr_epi32(0, nbins, 2 * nbins, 3 * nbins, 4 * nbins,
                                                   5 * nbins, 6 * nbins, 7 * nbins);
        const __m256 pinf = _mm256_set1_ps(INFINITY), minf = _mm256_set1_ps(-INFINITY);
        const __m256 zero = _mm256_setzero_ps();
        uint32_t sub[SUB_COPIES * SUB_MAX_BINS] __attribute__((aligned(64)));
        uint32_t idx[8] __attribute__((aligned(32)));
        __m256 vlo = pinf, vhi = minf;
        uint64_t nn = 0, ni = 0;
        int64_t i = 0;

        memset(sub, 0, (size_t)SUB_COPIES * (size_t)nbins * sizeof sub[0]);
        for (; i + 8 <= n; i += 8) {
            /* the loop is bound by its counter updates, not by loads: ask for the data early so
             * memory latency overlaps that work (a hint only, it never faults) */
            qs_prefetch_l1(src + i, PREFETCH_BYTES);
            __m256 x = _mm256_loadu_ps(src + i);
            __m256i u = _mm256_and_si256(_mm256_castps_si256(x), absm);
            __m256i finv = _mm256_cmpgt_epi32(inf, u);
            int fin = _mm256_movemask_ps(_mm256_castsi256_ps(finv));
            if (fin != 0xFF) {
                nn += (uint64_t)__builtin_popcount(
                    _mm256_movemask_ps(_mm256_castsi256_ps(_mm256_cmpgt_epi32(u, inf))));
                ni += (uint64_t)__builtin_popcount(
                    _mm256_movemask_ps(_mm256_castsi256_ps(_mm256_cmpeq_epi32(u, inf))));
            }
            __m256 v = _mm256_add_ps(x, zero);
            __m256 f = _mm256_castsi256_ps(finv);
            vlo = _mm256_min_ps(vlo, _mm256_blendv_ps(pinf, v, f));
            vhi = _mm256_max_ps(vhi, _mm256_blendv_ps(minf, v, f));
            /* floor(|x| * 2^-k): the product is exact (a power of two, and results that
             * round as subnormals are below 1); out-of-range and non-finite values convert
             * to 0x80000000, which the unsigned min sends to the top bin */
            __m256i b = _mm256_cvttps_epi32(_mm256_mul_ps(_mm256_castsi256_ps(u), scale));
            b = _mm256_min_epu32(b, top);
            _mm256_store_si256((__m256i *)idx, _mm256_add_epi32(b, lane_off));
            bump8_avx2(sub, idx, fin);
        }
        float tl[8], th[8];
        _mm256_storeu_ps(tl, vlo);
        _mm256_storeu_ps(th, vhi);
        for (int j = 0; j < 8; j++) {
            l = tl[j] < l ? tl[j] : l;
            h = th[j] > h ? th[j] : h;
        }
        /* the tail (< 8 values) with the reference's scalar steps, into copy 0 */
        for (; i < n; i++) {
            float x = qs_ld_f32(src + i);
            uint32_t a = bits_avx2(x) & ABS_MASK;
            if (a > INF_BITS) {
                nn++;
            } else if (a == INF_BITS) {
                ni++;
            } else {
                float v = x + 0.0f;
                double bi = floor(ldexp((double)fabsf(x), -k));
                uint32_t j = bi < (double)(nbins - 1) ? (uint32_t)bi : (uint32_t)nbins - 1;
                l = v < l ? v : l;
                h = v > h ? v : h;
                sub[j]++;
            }
        }
        *n_nan += nn;
        *n_inf += ni;
        float amax = -l > h ? -l : h;
        fits = (double)amax < ldexp((double)nbins, k);
        if (fits) {
            /* the highest bin in use is the one holding the maximum (0 for an empty span) */
            uint32_t used = amax > 0.0f ? (uint32_t)floor(ldexp((double)amax, -k)) : 0;
            for (uint32_t j = 0; j <= used; j++)
                counts[j] += sub_sum(sub, nbins, j);
        }
    }
    if (l < *lo)
        *lo = l;
    if (h > *hi)
        *hi = h;
    return fits;
}

void qs_hist_sumsq__avx2(const float *src, int64_t n, double *acc)
{
    const __m128i absm = _mm_set1_epi32(ABS_MASK), inf = _mm_set1_epi32(INF_BITS);
    int64_t j = 0;

    for (; j + 4 <= n; j += 4) {
        __m128 x = _mm_loadu_ps(src + j);
        __m128i u = _mm_and_si128(_mm_castps_si128(x), absm);
        /* non-finite elements become +0.0: acc + 0.0 is what the reference adds */
        x = _mm_and_ps(x, _mm_castsi128_ps(_mm_cmpgt_epi32(inf, u)));
        __m256d d = _mm256_cvtps_pd(x);
        _mm256_storeu_pd(acc + j, _mm256_add_pd(_mm256_loadu_pd(acc + j), _mm256_mul_pd(d, d)));
    }
    qs_hist_sumsq__ref(src + j, n - j, acc + j);
}
