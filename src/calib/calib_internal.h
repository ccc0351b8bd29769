/* SPDX-License-Identifier: MIT */
/*
 * Private declarations of the calibration drivers (docs/calibration.md): the observer state, the
 * power-of-two histogram operations (§3) and the range searches (§4-§6). Portable C, no
 * intrinsics; the hot loops are the hist_* kernel-table entries.
 */
#ifndef QS_CALIB_INTERNAL_H
#define QS_CALIB_INTERNAL_H

#include "../core/internal.h"
#include "qsparse/calib.h"

#define QS_HIST_MIN_BINS 4
#define QS_HIST_MAX_BINS (1 << 20)
/* Bin-width exponents stay in [K_MIN, K_MAX]: max|x| of an f32 lies in [2^-149, 2^128). */
#define QS_HIST_K_MIN (-149 - 20 - 1)
#define QS_HIST_K_MAX 128

/* One channel's state. lo/hi: finite min and max (+Inf / -Inf while empty). */
struct qs_calib_chan {
    uint64_t total;         /* finite values seen */
    uint64_t n_nan, n_inf;
    uint64_t zeros_pending; /* histogram: zeros seen while k is unset (§3 "empty start") */
    float lo, hi;
    float ema_lo, ema_hi;   /* moving average */
    int32_t k;              /* histogram bin width 2^k, valid when has_k */
    int32_t has_k;
    int32_t ema_init;
    float batch_lo, batch_hi; /* range of the current update (moving average) */
};

struct qs_observer {
    qs_allocator alloc;
    qs_observer_params p;
    int32_t log2_bins;
    int64_t channels;             /* 0 until known */
    struct qs_calib_chan *ch;     /* [channels] */
    uint64_t *counts;             /* [channels * num_bins], histogram methods only */
};

static inline int qs_calib_has_hist(int32_t method)
{
    return method == QS_OBSERVER_PERCENTILE || method == QS_OBSERVER_ENTROPY ||
           method == QS_OBSERVER_MSE;
}

/* calib_observer.c */
QS_INTERNAL const char *qs_calib_params_error(const qs_observer_params *p);
QS_INTERNAL void qs_calib_chan_init(struct qs_calib_chan *c);
QS_INTERNAL void *qs_calib_alloc(const qs_allocator *a, size_t bytes);
QS_INTERNAL void qs_calib_free(const qs_allocator *a, void *p);
/* Allocate (zeroed) state for `channels` channels; 0 or QS_ERR_OUT_OF_MEMORY / OVERFLOW. */
QS_INTERNAL qs_status qs_calib_alloc_state(const qs_allocator *a, const qs_observer_params *p,
                                           int64_t channels, struct qs_calib_chan **ch,
                                           uint64_t **counts);
/* The smallest k with amax < nbins * 2^k, for finite amax > 0. */
QS_INTERNAL int32_t qs_calib_fit_k(float amax, int32_t log2_bins);
/* Coarsen a histogram from width 2^k to 2^k2 (k2 >= k) by exact pair merges. */
QS_INTERNAL void qs_calib_hist_coarsen(uint64_t *counts, int32_t nbins, int32_t k, int32_t k2);
/* max(-lo, hi) of a non-empty channel, 0 for an empty one. */
QS_INTERNAL float qs_calib_chan_amax(const struct qs_calib_chan *c);

/* calib_search.c: searches on one channel's histogram, in double (§4-§6). `n_used` is the
 * number of bins up to the one holding amax. Results are bin indices (percentile, entropy) or
 * the bin whose centre wins (MSE). */
QS_INTERNAL int64_t qs_calib_percentile(const uint64_t *counts, int64_t n_used, uint64_t total,
                                        double p);
QS_INTERNAL int64_t qs_calib_entropy(const uint64_t *counts, int64_t n_used, int32_t levels,
                                     int32_t start_bin, double *work);
QS_INTERNAL int64_t qs_calib_mse(const uint64_t *counts, int64_t nbins, int32_t start_bin,
                                 int32_t target, double *work);

#endif /* QS_CALIB_INTERNAL_H */
