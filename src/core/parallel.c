/* SPDX-License-Identifier: MIT */
/* The parallel loop (parallel.h). */
#include "parallel.h"

void qs_parallel_for(const qs_ctx *ctx, int64_t count, qs_task_fn *fn, void *arg)
{
    qs_parallel_for_done(ctx, count, fn, NULL, arg);
}

void qs_parallel_for_done(const qs_ctx *ctx, int64_t count, qs_task_fn *fn, qs_done_fn *done,
                          void *arg)
{
    int32_t threads = qs_threads(ctx);

    if (count <= 1 || threads <= 1) {
        float tile[QS_TILE];
        for (int64_t i = 0; i < count; i++)
            fn(arg, i, tile);
        if (done)
            done(arg);
        return;
    }
#ifdef _OPENMP
#pragma omp parallel num_threads(threads)
    {
        float tile[QS_TILE];
#pragma omp for schedule(static) nowait
        for (int64_t i = 0; i < count; i++)
            fn(arg, i, tile);
        if (done) /* before the region's closing barrier, on every thread of the team */
            done(arg);
    }
#endif
}
