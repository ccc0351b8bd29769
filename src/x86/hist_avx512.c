/* SPDX-License-Identifier: MIT */
/*
 * Calibration statistics for AVX-512 (F/BW/DQ/VL): finite range scan with NaN / Inf counts,
 * power-of-two histogram binning and per-channel sum of squares. Same steps and bits as
 * src/ref/hist_ref.c and src/x86/hist_avx2.c (docs/calibration.md §3); tails use masked loads,
 * so nothing past src + n is read.
 */
#include <immintrin.h>
#include <math.h>
#include <string.h>

#include "../core/kernels.h"
#include "prefetch_x86.h"

#define ABS_MASK 0x7FFFFFFF
#define INF_BITS 0x7F800000

static inline __mmask16 tail_mask_avx512(int64_t left)
{
    return left >= 16 ? (__mmask16)0xFFFF : (__mmask16)((1u << left) - 1u);
}

void qs_hist_scan__avx512(const float *src, int64_t n, float *lo, float *hi, uint64_t *n_nan,
                          uint64_t *n_inf)
{
    const __m512i absm = _mm512_set1_epi32(ABS_MASK), inf = _mm512_set1_epi32(INF_BITS);
    const __m512 zero = _mm512_setzero_ps();
    __m512 vlo = _mm512_set1_ps(INFINITY), vhi = _mm512_set1_ps(-INFINITY);
    uint64_t nn = 0, ni = 0;

    for (int64_t i = 0; i < n; i += 16) {
        __mmask16 m = tail_mask_avx512(n - i);
        __m512 x = _mm512_maskz_loadu_ps(m, src + i);
        __m512i u = _mm512_and_si512(_mm512_castps_si512(x), absm);
        __mmask16 fin = _mm512_mask_cmplt_epu32_mask(m, u, inf);
        if (fin != m) {
            nn += (uint64_t)__builtin_popcount(_mm512_mask_cmpgt_epu32_mask(m, u, inf));
            ni += (uint64_t)__builtin_popcount(_mm512_mask_cmpeq_epu32_mask(m, u, inf));
        }
        __m512 v = _mm512_add_ps(x, zero); /* -0 -> +0, as the reference */
        vlo = _mm512_mask_min_ps(vlo, fin, vlo, v);
        vhi = _mm512_mask_max_ps(vhi, fin, vhi, v);
    }
    /* min and max of non-NaN values with a single zero sign are exact in any order */
    float l = _mm512_reduce_min_ps(vlo), h = _mm512_reduce_max_ps(vhi);
    if (l < *lo)
        *lo = l;
    if (h > *hi)
        *hi = h;
    *n_nan += nn;
    *n_inf += ni;
}

/* Bin indices from |x| bits u (see hist_avx2.c), clamped to the top bin. */
static inline __m512i bin_index_avx512(__m512i u, __m512i shift0, __m512i top)
{
    const __m512i mmask = _mm512_set1_epi32(0x7FFFFF), hidden = _mm512_set1_epi32(0x800000);
    const __m512i one = _mm512_set1_epi32(1), zero = _mm512_setzero_si512();
    __m512i e = _mm512_srli_epi32(u, 23);
    __m512i mant = _mm512_mask_or_epi32(_mm512_and_si512(u, mmask),
                                        _mm512_cmpgt_epi32_mask(e, zero),
                                        _mm512_and_si512(u, mmask), hidden);
    __m512i s = _mm512_sub_epi32(shift0, _mm512_max_epi32(e, one));
    __m512i b = _mm512_srlv_epi32(mant, s);
    b = _mm512_mask_mov_epi32(b, _mm512_cmplt_epi32_mask(s, zero), top);
    return _mm512_min_epu32(b, top);
}

/* Bin indices of the lanes in m; *fin gets the finite lanes of m. */
static inline __m512i bins_avx512(const float *src, __mmask16 m, __m512i shift0, __m512i top,
                                  __mmask16 *fin)
{
    const __m512i absm = _mm512_set1_epi32(ABS_MASK), inf = _mm512_set1_epi32(INF_BITS);
    __m512i u = _mm512_and_si512(_mm512_maskz_loadu_epi32(m, src), absm);
    *fin = _mm512_mask_cmplt_epu32_mask(m, u, inf);
    return bin_index_avx512(u, shift0, top);
}

/* Eight private uint32 copies of the histogram, lane j feeding copy j % 8, so that runs of one
 * bin do not serialise on one counter (see hist_avx2.c). */
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

static void update_sub_avx512(const float *src, int64_t n, __m512i shift0, __m512i top,
                              int32_t nbins, uint64_t *counts)
{
    uint32_t sub[SUB_COPIES * SUB_MAX_BINS] __attribute__((aligned(64)));
    const __m512i lane_off = _mm512_setr_epi32(0, nbins, 2 * nbins, 3 * nbins, 4 * nbins,
                                               5 * nbins, 6 * nbins, 7 * nbins, 0, nbins,
                                               2 * nbins, 3 * nbins, 4 * nbins, 5 * nbins,
                                               6 * nbins, 7 * nbins);
    uint32_t idx[16] __attribute__((aligned(64)));
    __m512i vmax = _mm512_setzero_si512();

    memset(sub, 0, (size_t)SUB_COPIES * (size_t)nbins * sizeof sub[0]);
    for (int64_t i = 0; i + 16 <= n; i += 16) {
        __mmask16 fin;
        __m512i b = bins_avx512(src + i, 0xFFFF, shift0, top, &fin);
        vmax = _mm512_max_epu32(vmax, b);
        _mm512_store_si512(idx, _mm512_add_epi32(b, lane_off));
        if (fin == 0xFFFF) {
            for (int j = 0; j < 16; j++)
                sub[idx[j]]++;
        } else {
            uint32_t f = fin;
            while (f) {
                sub[idx[__builtin_ctz(f)]]++;
                f &= f - 1;
            }
        }
    }
    uint32_t used = _mm512_reduce_max_epu32(vmax);
    for (uint32_t j = 0; j <= used; j++)
        counts[j] += sub_sum(sub, nbins, j);
}

void qs_hist_update__avx512(const float *src, int64_t n, int32_t k, int32_t nbins,
                            uint64_t *counts)
{
    if (k < -149) { /* sub-normal maximum: see hist_avx2.c */
        qs_hist_update__ref(src, n, k, nbins, counts);
        return;
    }
    if (k > 200)
        k = 200;
    const __m512i shift0 = _mm512_set1_epi32(150 + k), top = _mm512_set1_epi32(nbins - 1);
    uint32_t idx[16] __attribute__((aligned(64)));
    int64_t i = 0;

    if (nbins <= SUB_MAX_BINS && n >= SUB_MIN_N) {
        while (n - i >= 16) {
            int64_t len = (n - i) / 16 * 16;
            len = len < SUB_CHUNK ? len : SUB_CHUNK;
            update_sub_avx512(src + i, len, shift0, top, nbins, counts);
            i += len;
        }
    }
    for (; i < n; i += 16) {
        __mmask16 m = tail_mask_avx512(n - i), fin;
        _mm512_store_si512(idx, bins_avx512(src + i, m, shift0, top, &fin));
        uint32_t f = fin;
        if (f == 0xFFFF) {
            for (int j = 0; j < 16; j++)
                counts[idx[j]]++;
        } else {
            while (f) {
                counts[idx[__builtin_ctz(f)]]++;
                f &= f - 1;
            }
        }
    }
}

void qs_hist_sumsq__avx512(const float *src, int64_t n, double *acc)
{
    const __m256i absm = _mm256_set1_epi32(ABS_MASK), inf = _mm256_set1_epi32(INF_BITS);

    for (int64_t j = 0; j < n; j += 8) {
        __mmask8 m = n - j >= 8 ? (__mmask8)0xFF : (__mmask8)((1u << (n - j)) - 1u);
        __m256 x = _mm256_maskz_loadu_ps(m, src + j);
        __m256i u = _mm256_and_si256(_mm256_castps_si256(x), absm);
        /* non-finite elements become +0.0: acc + 0.0 is what the reference adds */
        x = _mm256_and_ps(x, _mm256_castsi256_ps(_mm256_cmpgt_epi32(inf, u)));
        __m512d d = _mm512_cvtps_pd(x);
        __m512d a = _mm512_maskz_loadu_pd(m, acc + j);
        _mm512_mask_storeu_pd(acc + j, m, _mm512_add_pd(a, _mm512_mul_pd(d, d)));
    }
}

/* One pass: the scan of qs_hist_scan__avx512 and the binning of update_sub_avx512 into private
 * counters, committed only when the span's maximum fits the grid (the reference's rule). */
int32_t qs_hist_scan_update__avx512(const float *src, int64_t n, int32_t k, int32_t nbins,
                                    uint64_t *counts, float *lo, float *hi, uint64_t *n_nan,
                                    uint64_t *n_inf)
{
    float l = INFINITY, h = -INFINITY;
    int32_t fits;

    /* the one-pass loop scales by 2^-k, a normal f32 for k in [-126, 126] */
    if (k < -126 || k > 126 || nbins > SUB_MAX_BINS || n < SUB_MIN_N || n > SUB_CHUNK) {
        qs_hist_scan__avx512(src, n, &l, &h, n_nan, n_inf);
        fits = (double)(-l > h ? -l : h) < ldexp((double)nbins, k);
        if (fits)
            qs_hist_update__avx512(src, n, k, nbins, counts);
    } else {
        const __m512i absm = _mm512_set1_epi32(ABS_MASK), inf = _mm512_set1_epi32(INF_BITS);
        const __m512i top = _mm512_set1_epi32(nbins - 1);
        const __m512 scale = _mm512_set1_ps(ldexpf(1.0f, -k));
        const __m512i lane_off = _mm512_setr_epi32(0, nbins, 2 * nbins, 3 * nbins, 4 * nbins,
                                                   5 * nbins, 6 * nbins, 7 * nbins, 0, nbins,
                                                   2 * nbins, 3 * nbins, 4 * nbins, 5 * nbins,
                                                   6 * nbins, 7 * nbins);
        const __m512 zero = _mm512_setzero_ps();
        uint32_t sub[SUB_COPIES * SUB_MAX_BINS] __attribute__((aligned(64)));
        uint32_t idx[16] __attribute__((aligned(64)));
        __m512 vlo = _mm512_set1_ps(INFINITY), vhi = _mm512_set1_ps(-INFINITY);
        uint64_t nn = 0, ni = 0;

        memset(sub, 0, (size_t)SUB_COPIES * (size_t)nbins * sizeof sub[0]);
        for (int64_t i = 0; i < n; i += 16) {
            __mmask16 m = tail_mask_avx512(n - i);
            /* a hint only (never faults): memory latency overlaps the counter updates */
            qs_prefetch_l1(src + i, PREFETCH_BYTES);
            __m512 x = _mm512_maskz_loadu_ps(m, src + i);
            __m512i u = _mm512_and_si512(_mm512_castps_si512(x), absm);
            __mmask16 fin = _mm512_mask_cmplt_epu32_mask(m, u, inf);
            if (fin != m) {
                nn += (uint64_t)__builtin_popcount(_mm512_mask_cmpgt_epu32_mask(m, u, inf));
                ni += (uint64_t)__builtin_popcount(_mm512_mask_cmpeq_epu32_mask(m, u, inf));
            }
            __m512 v = _mm512_add_ps(x, zero);
            vlo = _mm512_mask_min_ps(vlo, fin, vlo, v);
            vhi = _mm512_mask_max_ps(vhi, fin, vhi, v);
            /* floor(|x| * 2^-k), exact; out-of-range and non-finite lanes convert to
             * 0x80000000 and the unsigned min sends them to the top bin (see hist_avx2.c) */
            __m512i b = _mm512_cvttps_epi32(_mm512_mul_ps(_mm512_castsi512_ps(u), scale));
            b = _mm512_min_epu32(b, top);
            _mm512_store_si512((void *)idx, _mm512_add_epi32(b, lane_off));
            if (fin == 0xFFFF) {
                for (int j = 0; j < 16; j++)
                    sub[idx[j]]++;
            } else {
                uint32_t f = fin;
                while (f) {
                    sub[idx[__builtin_ctz(f)]]++;
                    f &= f - 1;
                }
            }
        }
        l = _mm512_reduce_min_ps(vlo);
        h = _mm512_reduce_max_ps(vhi);
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

