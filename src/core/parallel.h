/* SPDX-License-Identifier: MIT */
/*
 * The one parallel loop of the library and its threading policy: OpenMP with a num_threads
 * clause over fixed chunks whose boundaries depend only on the problem size, and a private f32
 * staging tile per thread. Results never depend on the thread count or on which thread ran a
 * chunk.
 *
 * How many threads a loop gets (qs_parallel_threads):
 *   - at most the context's (QS_PARAM_NUM_THREADS, 0: OpenMP's default), at most one per chunk;
 *   - a loop whose work is known gets one thread per QS_PARAM_PARALLEL_GRAIN bytes of it (1 MiB
 *     by default: about 100 us of a kernel's time, against the 5-50 us it takes to wake a
 *     sleeping thread), so a small call never opens a parallel region and never waits for a
 *     thread that another process holds off its CPU;
 *   - after a region that took longer than its threads' work would have taken on one thread
 *     plus QS_PARALLEL_LATE (the other threads got no CPU in time: the machine is busy), the
 *     context's calls run on the calling thread for a while (QS_PARAM_PARALLEL_BACKOFF), 10 ms
 *     at first and twice as long after each further loss, up to 1 s; a region that beats one
 *     thread halves the wait again. So on a busy machine a call costs about what its work
 *     costs on one thread, and on a quiet one large calls use every thread.
 * Chunks are claimed dynamically (guided), so a thread that starts late finds less to do instead
 * of holding up the others; which thread runs which chunk never changes a result.
 *
 * Work is counted in bytes: what a loop reads plus what it writes (a streaming kernel's memory
 * traffic). A loop bound by arithmetic counts one multiply-add as one byte.
 */
#ifndef QS_CORE_PARALLEL_H
#define QS_CORE_PARALLEL_H

#include "internal.h"

typedef void qs_task_fn(void *arg, int64_t index, float *tile);
/* What a thread does once after its last task and before the loop returns (see below). */
typedef void qs_done_fn(void *arg);

/* A loop whose work is not known: no size rule, only the context's thread count and the busy
 * machine's back-off. */
#define QS_WORK_UNKNOWN (-1)

/* The default QS_PARAM_PARALLEL_GRAIN: bytes of work per thread. */
#define QS_PARALLEL_GRAIN_DEFAULT ((int64_t)1 << 20)
/* Seconds a region may exceed its one-thread estimate before it counts as lost. */
#define QS_PARALLEL_LATE 200e-6

/* n elements of `bytes` each (read plus written per element), saturating instead of wrapping. */
static inline int64_t qs_work(int64_t n, int64_t bytes)
{
    int64_t r;
    return n <= 0 ? 0 : qs_mul_overflow(n, bytes, &r) ? INT64_MAX : r;
}

/* Run fn(arg, i, tile) for every i in [0, count) on qs_parallel_threads(ctx, work) threads
 * (no more than count); tile holds QS_TILE floats. Then done(arg) once on every thread that
 * took part, after its last task and before the loop returns (NULL: nothing): the place for
 * what a thread must do once, not once per task, such as the SFENCE after its non-temporal
 * stores (dequantize.c). */
QS_INTERNAL void qs_parallel_run(const qs_ctx *ctx, int64_t count, int64_t work, qs_task_fn *fn,
                                 qs_done_fn *done, void *arg);

/* The same with the work unknown (QS_WORK_UNKNOWN). */
QS_INTERNAL void qs_parallel_for(const qs_ctx *ctx, int64_t count, qs_task_fn *fn, void *arg);
QS_INTERNAL void qs_parallel_for_done(const qs_ctx *ctx, int64_t count, qs_task_fn *fn,
                                      qs_done_fn *done, void *arg);

/*
 * The policy alone, for a driver that opens its own parallel region (the matmul drivers): the
 * threads a region of `work` bytes (or QS_WORK_UNKNOWN) should use; 1 means "run it on the
 * calling thread, open no region". Inside a parallel region (the caller's or the library's)
 * always 1. After the region the driver reports what it saw with qs_parallel_note: `wall`, the
 * region's wall seconds (omp_get_wtime before and after), and `busy`, the seconds its threads
 * spent working, summed over the threads (each thread's time from entering the region to
 * finishing its last chunk, before the closing barrier: a reduction(+) clause).
 */
QS_INTERNAL int32_t qs_parallel_threads(const qs_ctx *ctx, int64_t work);
QS_INTERNAL void qs_parallel_note(const qs_ctx *ctx, double wall, double busy);

/* The policy's defaults for a new context: QS_PARALLEL_GRAIN and QS_PARALLEL_BACKOFF from the
 * environment (read here, once per context, like QS_FORCE_ISA), else the built-in ones. */
QS_INTERNAL void qs_parallel_init(qs_ctx *ctx);
/* Parallel regions this context has opened (tests). */
QS_INTERNAL int64_t qs_parallel_regions(const qs_ctx *ctx);

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
