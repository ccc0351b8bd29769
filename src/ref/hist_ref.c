/* SPDX-License-Identifier: MIT */
/*
 * Calibration statistics, scalar reference (docs/calibration.md §0 rule 5, §3, §9): the finite
 * range scan with NaN / Inf counts, the binning of |x| on the power-of-two histogram grid, and the
 * per-channel sum of squares that Wanda's ||X_j||_2 needs. Everything here is exact or a single
 * rounding per operation in a fixed order, so the SIMD versions can match it bit for bit.
 */
#include <math.h>

#include "../core/kernels.h"
#include "ref.h"

void qs_hist_scan__ref(const float *src, int64_t n, float *lo, float *hi, uint64_t *n_nan,
                       uint64_t *n_inf)
{
    float l = *lo, h = *hi;
    uint64_t nn = 0, ni = 0;

    for (int64_t i = 0; i < n; i++) {
        float x = qs_ld_f32(src + i);
        uint32_t a = qs_f32_bits(x) & 0x7FFFFFFFu;
        if (a > 0x7F800000u) {
            nn++;
        } else if (a == 0x7F800000u) {
            ni++;
        } else {
            /* -0 + +0 = +0: zeros are recorded as +0, so min and max never have to order
             * two zeros and every ISA finds the same bits */
            float v = x + 0.0f;
            if (v < l)
                l = v;
            if (v > h)
                h = v;
        }
    }
    *lo = l;
    *hi = h;
    *n_nan += nn;
    *n_inf += ni;
}

void qs_hist_update__ref(const float *src, int64_t n, int32_t k, int32_t nbins, uint64_t *counts)
{
    for (int64_t i = 0; i < n; i++) {
        float a = fabsf(qs_ld_f32(src + i));
        if (!isfinite(a))
            continue;
        /* i = floor(ldexp(|x|, -k)) in double: exact, and 2^-k cannot overflow (§3 binning) */
        double b = floor(ldexp((double)a, -k));
        int64_t idx = b < (double)(nbins - 1) ? (int64_t)b : (int64_t)nbins - 1;
        counts[idx]++;
    }
}

void qs_hist_sumsq__ref(const float *src, int64_t n, double *acc)
{
    for (int64_t j = 0; j < n; j++) {
        float v = qs_ld_f32(src + j);
        double x = isfinite(v) ? (double)v : 0.0;
        /* the product of two f32 values is exact in double; one rounding per addition */
        acc[j] = acc[j] + x * x;
    }
}

int32_t qs_hist_scan_update__ref(const float *src, int64_t n, int32_t k, int32_t nbins,
                                 uint64_t *counts, float *lo, float *hi, uint64_t *n_nan,
                                 uint64_t *n_inf)
{
    float l = INFINITY, h = -INFINITY;

    qs_hist_scan__ref(src, n, &l, &h, n_nan, n_inf);
    /* the span's own maximum decides; an empty or zero-only span always fits */
    int32_t fits = (double)(-l > h ? -l : h) < ldexp((double)nbins, k);
    if (l < *lo)
        *lo = l;
    if (h > *hi)
        *hi = h;
    if (fits)
        qs_hist_update__ref(src, n, k, nbins, counts);
    return fits;
}

