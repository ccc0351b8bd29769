/* SPDX-License-Identifier: MIT */
/*
 * The one parallel loop of the library: OpenMP with a num_threads clause, a static
 * schedule over fixed chunks whose boundaries depend only on the problem size, and a private f32
 * staging tile per thread. Results never depend on the thread count.
 */
#ifndef QS_CORE_PARALLEL_H
#define QS_CORE_PARALLEL_H

#include "internal.h"

typedef void qs_task_fn(void *arg, int64_t index, float *tile);

/* Run fn(arg, i, tile) for every i in [0, count); tile holds QS_TILE floats. */
QS_INTERNAL void qs_parallel_for(const qs_ctx *ctx, int64_t count, qs_task_fn *fn, void *arg);

/* The same, then done(arg) once on every thread of the team after its last task and before the
 * loop returns (NULL: nothing): the place for what a thread must do once, not once per task,
 * such as the SFENCE after its non-temporal stores (dequantize.c). */
typedef void qs_done_fn(void *arg);
QS_INTERNAL void qs_parallel_for_done(const qs_ctx *ctx, int64_t count, qs_task_fn *fn,
                                      qs_done_fn *done, void *arg);

/* Reductions over `n` elements of src starting at element `start`, staged through `tile`
 * (sequential: for use inside a task). NaN is ignored (formats.md §5.2, §8). */
QS_INTERNAL float qs_span_amax(const qs_ctx *ctx, const void *src, int32_t dtype, int64_t start,
                               int64_t n, float *tile);
QS_INTERNAL void qs_span_minmax(const qs_ctx *ctx, const void *src, int32_t dtype, int64_t start,
                                int64_t n, float *tile, float *lo, float *hi);

/* The same over a whole tensor of n elements, in parallel. */
QS_INTERNAL float qs_tensor_amax(const qs_ctx *ctx, const void *src, int32_t dtype, int64_t n);
QS_INTERNAL void qs_tensor_minmax(const qs_ctx *ctx, const void *src, int32_t dtype, int64_t n,
                                  float *lo, float *hi);
/* 1 if any of the n elements is NaN or +-Inf. */
QS_INTERNAL int32_t qs_tensor_nonfinite(const qs_ctx *ctx, const void *src, int32_t dtype,
                                        int64_t n);

#endif /* QS_CORE_PARALLEL_H */
