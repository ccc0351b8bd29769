/* SPDX-License-Identifier: MIT */
/*
 * libqsparse calibration: observers that collect range statistics of activations or weights
 * (min-max, moving-average min-max, and the |x| histogram behind the percentile, entropy and MSE
 * searches), per tensor or per channel; exact merging of observers fed different shards; a
 * versioned, endian-stable serialization of their state; the scales and zero points they imply
 * for INT8, FP8 and NVFP4; dynamic (run-time) INT8 per-token and FP8 per-tensor quantization; and
 * the per-input-channel sums of squares that Wanda pruning needs. docs/calibration.md is the
 * definition; section numbers below refer to it.
 *
 * Conventions (in addition to those of qsparse.h):
 * - Non-finite inputs (§0 rule 5): NaN and +-Inf never enter a statistic. They are counted
 *   (qs_observer_counts) and otherwise ignored, so one bad value cannot poison a range. The
 *   context's QS_NONFINITE_REJECT policy does not apply to observers; it does apply to the
 *   dynamic quantizers, which then return QS_ERR_NONFINITE before writing.
 * - -0.0 is recorded as +0.0.
 * - Per-channel observers take 2-D row-major inputs (rows x cols) and keep one state per channel:
 *   axis 0 means a channel is a row, axis 1 that a channel is a column (an input feature of
 *   activations shaped [tokens, features]). The channel count is fixed by the first update.
 * - The histogram (§3): |x| on a grid of N bins of width 2^k anchored at 0, uint64 counts, k the
 *   smallest integer with max|x| < N * 2^k, growing by exact pair merges. Its state depends only on
 *   the multiset of values seen: any split of the data into batches or shards, in any order, merged
 *   in any order, gives the same bits as one update with all the data.
 * - Searches (percentile, entropy, MSE) run once, when a result is asked for, in double precision
 *   in scalar code; histogram sums are exact while a channel has seen fewer than 2^53 values.
 * - Every result is identical for every ISA and thread count.
 * - An observer is used by one thread at a time. Its memory comes from the allocator of the
 *   context that created (or deserialized) it; the observer keeps a copy of those allocator
 *   hooks, so the allocator must outlive it while any context may be passed to the other calls.
 */
#ifndef QSPARSE_CALIB_H
#define QSPARSE_CALIB_H

#include "../qsparse.h"

#ifdef __cplusplus
extern "C" {
#endif

/* ---------------------------------------------------------------------------------------------
 * Observers
 * ------------------------------------------------------------------------------------------- */

/* Methods (§1). */
#define QS_OBSERVER_MINMAX         1 /* observed range; exact merge */
#define QS_OBSERVER_MOVING_AVERAGE 2 /* EMA of per-update min and max (§2); cannot be merged */
#define QS_OBSERVER_PERCENTILE     3 /* histogram; left edge of the bin where the CDF reaches p */
#define QS_OBSERVER_ENTROPY        4 /* histogram; TensorRT KL-divergence search (§5) */
#define QS_OBSERVER_MSE            5 /* histogram; bin centre minimising the target's error (§6) */

/** "minmax", "moving_average", "percentile", "entropy", "mse", or NULL for an unknown method. */
QS_API const char *qs_observer_method_name(int32_t method);
/** The method code for a name above, or -1. */
QS_API int32_t qs_observer_method_from_name(const char *name);

/* Targets: the formats an observer computes a scale (and zero point) for (§2, formats.md §9, §10,
 * §14). */
#define QS_CALIB_INT8_SYM  1 /* scale = fl(amax / 127), zero point 0; codes rne(x * fl(127/amax)) */
#define QS_CALIB_INT8_ASYM 2 /* formats.md §9 on [max(lo, -amax), min(hi, amax)]; int8 zero pt */
#define QS_CALIB_FP8_E4M3  3 /* scale = fl(amax / 448) */
#define QS_CALIB_FP8_E5M2  4 /* scale = fl(amax / 57344) */
#define QS_CALIB_NVFP4     5 /* NVFP4 per-tensor scale fl(amax / 2688) (formats.md §14) */

/** "int8", "int8_asym", "fp8_e4m3", "fp8_e5m2", "nvfp4", or NULL for an unknown target. */
QS_API const char *qs_calib_target_name(int32_t target);
/** The target code for a name above (also "int8_sym"), or -1. */
QS_API int32_t qs_calib_target_from_name(const char *name);

/*
 * Most histogram bins of an entropy or MSE observer. Both searches try every candidate bin against
 * the whole histogram, so their time grows with the square of num_bins (about 15 s per channel at
 * 2^16 bins); 4096 bins keep the worst case of one channel at a few tenths of a second. The bound
 * is enforced by qs_observer_create (QS_ERR_INVALID_ARG) and qs_observer_deserialize
 * (QS_ERR_BAD_DATA), so a search never runs on more. Percentile (linear) and the other methods
 * take up to 2^20 bins.
 */
#define QS_OBSERVER_SEARCH_MAX_BINS 4096

/**
 * Observer parameters. Initialise with qs_observer_params_init(), then change what differs.
 * Histogram fields are validated for every method, so keep their defaults when unused.
 */
typedef struct qs_observer_params {
    int32_t method;           /* QS_OBSERVER_* */
    int32_t axis;             /* -1: per tensor (default); 0: channel = row; 1: channel = column */
    int32_t num_bins;         /* histogram bins N: a power of two in [4, 2^20], default 2048;
                                 entropy and MSE: at most QS_OBSERVER_SEARCH_MAX_BINS */
    int32_t num_levels;       /* entropy: quantized levels Q in [1, start_bin], default 128 */
    int32_t start_bin;        /* entropy and MSE: first candidate bin, >= 1, 2 * start_bin <= N;
                                 default 128 */
    int32_t target;           /* MSE: the format whose error is minimised: QS_CALIB_INT8_SYM
                                 (default), QS_CALIB_FP8_E4M3 or QS_CALIB_FP8_E5M2 */
    float averaging_constant; /* moving average: c in (0, 1], default 0.01 */
    int32_t reserved0;        /* must be zero */
    double percentile;        /* percentile: p in (0, 100], default 99.99 */
    int64_t reserved[6];      /* must be zero */
} qs_observer_params;

typedef struct qs_observer qs_observer;

/** Fill *params with the defaults for `method` (also for an unknown one: checked later). */
QS_API void qs_observer_params_init(qs_observer_params *params, int32_t method);

/**
 * Create an empty observer. Its state lives in memory from ctx's allocator; a histogram observer
 * holds N uint64 counts per channel (16 KiB for N = 2048), allocated per tensor at creation and
 * per channel at the first update. Returns QS_ERR_INVALID_ARG for a null pointer or bad
 * parameters, QS_ERR_OUT_OF_MEMORY. *out is written only on success.
 */
QS_API qs_status qs_observer_create(qs_ctx *ctx, const qs_observer_params *params,
                                    qs_observer **out);
/** Free an observer and its state (NULL is accepted). */
QS_API void qs_observer_destroy(qs_observer *obs);
/** Copy the parameters the observer was created with into *params. */
QS_API qs_status qs_observer_get_params(const qs_observer *obs, qs_observer_params *params);

/**
 * Add a rows x cols row-major tensor of `dtype` (QS_DTYPE_*) elements to the statistics. A
 * per-tensor observer sees rows * cols values (any shape may be passed flattened). A per-channel
 * observer takes its channel count from the first update (rows for axis 0, cols for axis 1) and
 * returns QS_ERR_SHAPE when a later update disagrees. rows * cols = 0 is a no-op, except that it
 * fixes the channel count. A moving-average observer treats one call as one batch (an all-NaN
 * batch leaves the average unchanged).
 *
 * Returns QS_OK, QS_ERR_INVALID_ARG (null pointer, negative size, unknown dtype), QS_ERR_SHAPE,
 * QS_ERR_OVERFLOW (size overflow, or a channel that would count more than 2^64 - 1 values: a
 * state read back from bytes can be that close), QS_ERR_OUT_OF_MEMORY (first per-channel update).
 * On error the observer is unchanged.
 */
QS_API qs_status qs_observer_update(qs_ctx *ctx, qs_observer *obs, const void *src,
                                    int32_t dtype, int64_t rows, int64_t cols);

/**
 * dst += src: merge the statistics of src into dst (§9). Both must have identical parameters and,
 * per channel, the same channel count (an observer that has seen no update adopts the other's).
 * The result is bit-identical to one observer fed both data sets, in any order.
 * Returns QS_ERR_UNSUPPORTED for moving-average observers (order-dependent, §2),
 * QS_ERR_INVALID_ARG for differing parameters, QS_ERR_SHAPE for differing channel counts,
 * QS_ERR_OVERFLOW when a channel would count more than 2^64 - 1 values, QS_ERR_OUT_OF_MEMORY.
 * dst is unchanged on error. dst == src doubles every count.
 */
QS_API qs_status qs_observer_merge(qs_ctx *ctx, qs_observer *dst, const qs_observer *src);

/** Number of channels: 1 per tensor; per channel 0 until the first update. */
QS_API qs_status qs_observer_channels(const qs_observer *obs, int64_t *channels);

/**
 * The clipping threshold chosen by the observer's method, one f32 per channel, into amax[0 ...
 * channels) (count = capacity). min-max: max(|lo|, |hi|); moving average: the same of the
 * averages; percentile: idx * 2^k (§4); entropy: i* * 2^k (§5); MSE: (j* + 0.5) * 2^k (§6). A
 * channel without a non-zero finite value gives 0. Returns QS_ERR_BUFFER_TOO_SMALL when count <
 * channels, QS_ERR_OUT_OF_MEMORY (the entropy search needs 3 N doubles of scratch).
 */
QS_API qs_status qs_observer_amax(qs_ctx *ctx, const qs_observer *obs, float *amax, int64_t count);

/**
 * The observed finite range per channel, lo[c] <= hi[c] (moving average: the averages). A channel
 * without finite values gives lo = hi = 0.
 */
QS_API qs_status qs_observer_range(qs_ctx *ctx, const qs_observer *obs, float *lo, float *hi,
                                   int64_t count);

/**
 * Counters of channel `channel` (or of all channels for channel = -1): finite values, NaN and
 * +-Inf seen. Any pointer may be NULL.
 */
QS_API qs_status qs_observer_counts(const qs_observer *obs, int64_t channel, uint64_t *finite,
                                    uint64_t *nan, uint64_t *inf);

#define QS_HIST_NO_WIDTH INT32_MIN /* log2 width of a histogram that has seen only zeros */

/**
 * Copy the histogram of one channel: counts[0 ... N) and the log2 of its bin width into
 * *log2_width (QS_HIST_NO_WIDTH while only zeros have been seen; they are then in counts[0]).
 * Returns QS_ERR_UNSUPPORTED for a method without histogram, QS_ERR_BUFFER_TOO_SMALL when count
 * < N, QS_ERR_INVALID_ARG for a channel out of range.
 */
QS_API qs_status qs_observer_histogram(const qs_observer *obs, int64_t channel, uint64_t *counts,
                                       int64_t count, int32_t *log2_width);

/* ---------------------------------------------------------------------------------------------
 * Serialization
 * ------------------------------------------------------------------------------------------- */

/* Format version written by qs_observer_serialize. Readers accept exactly this version. */
#define QS_OBSERVER_FORMAT_VERSION 1

/**
 * Bytes qs_observer_serialize writes for this observer: 64 + 56 per channel + 8 N per channel
 * (histogram methods) + 8.
 */
QS_API qs_status qs_observer_serialized_size(const qs_observer *obs, int64_t *bytes);

/**
 * Write the observer's parameters and state to dst (capacity `capacity`) as a little-endian byte
 * string, the same on every platform: magic "QSOB", version, parameters, per-channel counters,
 * histogram counts, and a 64-bit FNV-1a checksum of everything before it. *written receives the
 * size. Returns QS_ERR_BUFFER_TOO_SMALL (nothing written) when capacity is short.
 */
QS_API qs_status qs_observer_serialize(qs_ctx *ctx, const qs_observer *obs, void *dst,
                                       int64_t capacity, int64_t *written);

/**
 * Create an observer from a byte string written by qs_observer_serialize (any platform). The
 * string is checked completely before anything is allocated: QS_ERR_UNSUPPORTED for another
 * format version, QS_ERR_BAD_DATA for a wrong magic, a wrong length (truncated or trailing
 * bytes), a checksum mismatch, invalid parameters (among them an entropy or MSE observer with
 * more than QS_OBSERVER_SEARCH_MAX_BINS bins) or an inconsistent state (counts that do not
 * add up, a bin width that does not fit the range, ...). *out is written only on success.
 */
QS_API qs_status qs_observer_deserialize(qs_ctx *ctx, const void *src, int64_t bytes,
                                         qs_observer **out);

/* ---------------------------------------------------------------------------------------------
 * Targets: scales, zero points, and applying them
 * ------------------------------------------------------------------------------------------- */

/**
 * Scale (and zero point) per channel for `target`, from qs_observer_amax (and, for
 * QS_CALIB_INT8_ASYM, the observed range clipped to [-amax, amax]). zero_point may be NULL; it
 * receives 0 for symmetric targets. amax = 0 gives scale 1 and zero point 0 (formats.md §9, §10,
 * §14 conventions). Returns QS_ERR_INVALID_ARG for an unknown target, QS_ERR_BUFFER_TOO_SMALL.
 */
QS_API qs_status qs_observer_qparams(qs_ctx *ctx, const qs_observer *obs, int32_t target,
                                     float *scale, int32_t *zero_point, int64_t count);

/**
 * Quantize a rows x cols row-major tensor of `dtype` elements with the observer's calibrated
 * scales, in one call. Planes of *q, by target:
 *
 * | target          | data              | scale          | zero_point             |
 * |-----------------|-------------------|----------------|------------------------|
 * | INT8_SYM / ASYM | int8 [rows*cols]  | f32 [channels] | int8 [channels] (ASYM) |
 * | FP8_E4M3 / E5M2 | uint8 [rows*cols] | f32 [channels] | -                      |
 * | NVFP4           | as qs_quantize: packed data, E4M3 block scales, q->global_scale;  |
 * |                 | per-tensor observers only                                         |
 *
 * Per-channel observers quantize channel c (row c for axis 0, column c for axis 1) with scale[c];
 * the channel count must match the tensor. Codes outside the calibrated range saturate: INT8
 * clamps, FP8 and NVFP4 saturate to the largest finite code. Element rules: formats.md §9
 * (INT8; NaN -> code of 0), §10 (FP8), §14 (NVFP4 with the calibrated s_global).
 * Returns QS_ERR_INVALID_ARG, QS_ERR_SHAPE, QS_ERR_BUFFER_TOO_SMALL (planes in bytes, as
 * qs_qtensor), QS_ERR_UNSUPPORTED (NVFP4 per channel), QS_ERR_NONFINITE (reject policy).
 * Nothing is written on error.
 */
QS_API qs_status qs_observer_quantize(qs_ctx *ctx, const qs_observer *obs, int32_t target,
                                      const void *src, int32_t dtype, int64_t rows, int64_t cols,
                                      qs_qtensor *q);

/* ---------------------------------------------------------------------------------------------
 * Dynamic quantization (§8): the range is computed at run time, no observer
 * ------------------------------------------------------------------------------------------- */

/**
 * Per-token (row-wise) symmetric INT8 for activations: for each row t, amax_t = max |x| (NaN
 * ignored), scales[t] = fl(amax_t / 127) (1 when amax_t = 0), dst = rne(x * fl(127 / amax_t))
 * clamped to [-127, 127] (all zero when amax_t = 0), NaN -> 0 (formats.md §8, §9). Each row is
 * measured and quantized in one visit while it is in cache. Identical to qs_quantize with
 * QS_FORMAT_INT8, QS_GRAN_ROW, symmetric. dst holds rows*cols bytes, scales rows floats.
 * Returns QS_ERR_INVALID_ARG, QS_ERR_OVERFLOW, QS_ERR_BUFFER_TOO_SMALL, QS_ERR_NONFINITE (reject
 * policy). Nothing is written on error.
 */
QS_API qs_status qs_quantize_dynamic_int8_per_token(qs_ctx *ctx, const void *src, int32_t dtype,
                                                    int64_t rows, int64_t cols, int8_t *dst,
                                                    int64_t dst_bytes, float *scales,
                                                    int64_t scales_count);

/**
 * Per-tensor FP8 for activations: *scale = fl(amax / 448) (E4M3) or fl(amax / 57344) (E5M2), 1
 * for amax 0, and dst[i] = saturating cvt(fl(x / scale)) (formats.md §10). A per-tensor range
 * needs the whole tensor before the first code, so the input is read twice: once for amax, once
 * to encode. format is QS_FORMAT_FP8_E4M3 or QS_FORMAT_FP8_E5M2; dst holds n bytes.
 * Identical to qs_quantize with that format and scale 0.
 */
QS_API qs_status qs_quantize_dynamic_fp8(qs_ctx *ctx, int32_t format, const void *src,
                                         int32_t dtype, int64_t n, uint8_t *dst,
                                         int64_t dst_bytes, float *scale);

/* ---------------------------------------------------------------------------------------------
 * Activation statistics for pruning (Wanda)
 * ------------------------------------------------------------------------------------------- */

/**
 * sumsq[j] += sum over rows of x[r][j]^2 for a rows x cols activation matrix [tokens, features],
 * in double, rows in order, non-finite elements skipped (count = capacity >= cols). The products
 * are exact; each column is summed in row order whatever the ISA and thread count, so feeding the
 * same rows in the same order in any number of calls gives the same bits. Shards merge by adding
 * their arrays (qs_act_sumsq_merge), exact up to the order of those additions (§9).
 * A backend operation (qsparse.h "Backends"): QS_ERR_UNSUPPORTED, sumsq untouched, on a context
 * whose backend has none.
 */
QS_API qs_status qs_act_sumsq_update(qs_ctx *ctx, const void *src, int32_t dtype, int64_t rows,
                                     int64_t cols, double *sumsq, int64_t count);
/** dst[j] += src[j] for j < count (merging two shards' sums of squares). */
QS_API qs_status qs_act_sumsq_merge(qs_ctx *ctx, double *dst, const double *src, int64_t count);
/** norms[j] = fl(sqrt(sumsq[j])): the ||X_j||_2 that QS_PRUNE_WANDA takes. */
QS_API qs_status qs_act_norms(qs_ctx *ctx, const double *sumsq, int64_t count, float *norms);

#ifdef __cplusplus
}
#endif

#endif /* QSPARSE_CALIB_H */
