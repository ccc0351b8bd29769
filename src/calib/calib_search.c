/* SPDX-License-Identifier: MIT */
/*
 * Range searches on one channel's power-of-two histogram (docs/calibration.md §4 percentile,
 * §5 entropy / KL divergence as TensorRT's calibrator, §6 histogram MSE). They run once per
 * result, in double, in scalar code, with sums in index order; every tie rule is the one §10
 * pins. Counts are converted to double, which is exact below 2^53, so every sum of counts is
 * exact and only the normalisations and logarithms of the KL divergence round.
 */
#include <math.h>

#include "../ref/ref.h"
#include "calib_internal.h"

int64_t qs_calib_percentile(const uint64_t *counts, int64_t n_used, uint64_t total, double p)
{
    const double target = p / 100.0;
    uint64_t cum = 0;

    /* the first bin whose integer CDF reaches p / 100; its left edge is the result (§4) */
    for (int64_t i = 0; i < n_used; i++) {
        cum += counts[i];
        if ((double)cum / (double)total >= target)
            return i;
    }
    return n_used - 1;
}

/* KL divergence of candidate i (§5 step 3): b[0 .. n) the counts with b[0] = b[1], `all` their
 * sum, `prefix` the sum of b[0 .. i), qd scratch of i doubles. */
static double kl_candidate(const double *b, int64_t i, int32_t levels, double all, double prefix,
                           double *qd)
{
    const double tail = all - prefix; /* sum of b[j >= i], folded into P[i - 1] */
    double sum_q = 0.0, kl = 0.0;

    /* group j into level g(j) = floor(j * Q / i); level g holds j in [ceil(g i / Q),
     * ceil((g + 1) i / Q)); expand each level's sum over its non-zero bins of b only */
    for (int64_t j = 0; j < i;) {
        int64_t g = j * levels / i;
        int64_t e = ((g + 1) * i + levels - 1) / levels;
        double sum = 0.0;
        int64_t nz = 0;
        if (e > i)
            e = i;
        for (int64_t m = j; m < e; m++) {
            if (b[m] != 0.0) {
                sum += b[m];
                nz++;
            }
        }
        for (int64_t m = j; m < e; m++)
            qd[m] = b[m] != 0.0 ? sum / (double)nz : 0.0;
        j = e;
    }
    for (int64_t j = 0; j < i; j++)
        sum_q += qd[j];
    /* normalise both to 1 and sum p ln(p / q) over p > 0 (scipy.stats.entropy) */
    for (int64_t j = 0; j < i; j++) {
        double pj = j == i - 1 ? b[j] + tail : b[j];
        if (pj <= 0.0)
            continue;
        if (qd[j] == 0.0)
            return INFINITY;
        double p = pj / all, q = qd[j] / sum_q;
        kl += p * log(p / q);
    }
    return kl;
}

int64_t qs_calib_entropy(const uint64_t *counts, int64_t n_used, int32_t levels,
                         int32_t start_bin, double *work)
{
    double *b = work, *qd = work + n_used;
    double all = 0.0, prefix = 0.0, best = INFINITY;
    int64_t best_i = n_used;

    for (int64_t j = 0; j < n_used; j++)
        b[j] = (double)counts[j];
    if (n_used > 1)
        b[0] = b[1]; /* §5 step 1: suppress the spike of exact zeros */
    for (int64_t j = 0; j < n_used; j++)
        all += b[j];
    for (int64_t j = 0; j < start_bin && j < n_used; j++)
        prefix += b[j];
    /* candidates start_bin ... n_used inclusive (§5 step 2, libqsparse grid) */
    for (int64_t i = start_bin; i <= n_used; i++) {
        double kl = kl_candidate(b, i, levels, all, prefix, qd);
        if (kl <= best) { /* the last candidate attaining the minimum (§5 step 4) */
            best = kl;
            best_i = i;
        }
        if (i < n_used)
            prefix += b[i];
    }
    return best_i;
}

/* The fake quantizer of the MSE target at clip value a, in bin units (scale-free: the bin width
 * is a power of two, so the search's argmin does not depend on it). */
static double fake_quant(double c, double a, int32_t target)
{
    if (target == QS_CALIB_INT8_SYM) {
        double q = nearbyint(c * (127.0 / a));
        return (q > 127.0 ? 127.0 : q) * (a / 127.0);
    }
    double emax = target == QS_CALIB_FP8_E4M3 ? 448.0 : 57344.0, s = a / emax;
    float v = (float)(c / s);
    if (target == QS_CALIB_FP8_E4M3)
        return (double)qs_ref_e4m3_decode(qs_ref_e4m3_encode(v)) * s;
    return (double)qs_ref_e5m2_decode(qs_ref_e5m2_encode(v)) * s;
}

int64_t qs_calib_mse(const uint64_t *counts, int64_t nbins, int32_t start_bin, int32_t target,
                     double *work)
{
    double *centre = work, *weight = work + nbins, total = 0.0, best = INFINITY;
    int64_t used = 0, best_k = start_bin;

    for (int64_t j = 0; j < nbins; j++) {
        if (counts[j] == 0)
            continue;
        centre[used] = (double)j + 0.5;
        weight[used] = (double)counts[j];
        total += weight[used];
        used++;
    }
    if (used == 0)
        return best_k;
    /* candidates: the centres of bins start_bin ... N - 1; the first argmin wins (§6) */
    for (int64_t k = start_bin; k < nbins; k++) {
        double a = (double)k + 0.5, err = 0.0;
        for (int64_t j = 0; j < used; j++) {
            double d = fake_quant(centre[j], a, target) - centre[j];
            err += weight[j] * d * d;
        }
        err /= total;
        if (err < best) {
            best = err;
            best_k = k;
        }
    }
    return best_k;
}
