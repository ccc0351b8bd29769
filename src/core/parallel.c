/* SPDX-License-Identifier: MIT */
/* The parallel loop and the threading policy (parallel.h). */
#include <stdlib.h>
#include <string.h>

#ifdef _OPENMP
#include <omp.h>
#endif

#include "parallel.h"

#define BACKOFF_MIN 0.01 /* seconds on the calling thread after the first lost region */
#define BACKOFF_MAX 1.0

/* The policy's state changes as calls run. A context is used by one thread at a time
 * (qsparse.h), and only the thread that called the library writes it, outside any region. */
static struct qs_par_state *state(const qs_ctx *ctx)
{
    return (struct qs_par_state *)&ctx->par;
}

void qs_parallel_init(qs_ctx *ctx)
{
    const char *grain = getenv("QS_PARALLEL_GRAIN"), *backoff = getenv("QS_PARALLEL_BACKOFF");
    char *end;

    ctx->par.grain = QS_PARALLEL_GRAIN_DEFAULT;
    ctx->par.backoff = 1;
    ctx->par.window = BACKOFF_MIN;
    if (grain && *grain) {
        long long v = strtoll(grain, &end, 10);
        if (*end == '\0' && v >= 0)
            ctx->par.grain = v;
    }
    if (backoff && (strcmp(backoff, "0") == 0 || strcmp(backoff, "1") == 0))
        ctx->par.backoff = backoff[0] == '1';
}

int64_t qs_parallel_regions(const qs_ctx *ctx)
{
    return ctx->par.regions;
}

int32_t qs_parallel_threads(const qs_ctx *ctx, int64_t work)
{
#ifdef _OPENMP
    int32_t threads = qs_threads(ctx);

    /* a region inside a region would run on one thread anyway (nesting is off by default),
     * and the state below belongs to the thread that called the library */
    if (threads <= 1 || omp_in_parallel())
        return 1;
    if (work >= 0 && ctx->par.grain > 0 && work / ctx->par.grain < threads)
        threads = work / ctx->par.grain < 1 ? 1 : (int32_t)(work / ctx->par.grain);
    if (threads > 1 && ctx->par.backoff && ctx->par.serial_until > 0.0 &&
        omp_get_wtime() < ctx->par.serial_until)
        threads = 1;
    return threads;
#else
    (void)ctx;
    (void)work;
    return 1;
#endif
}

void qs_parallel_note(const qs_ctx *ctx, double wall, double busy)
{
#ifdef _OPENMP
    struct qs_par_state *s = state(ctx);

    s->regions++;
    if (!s->backoff)
        return;
    if (wall > busy + QS_PARALLEL_LATE) {
        /* one thread would have been faster by more than the margin: the others were late */
        s->serial_until = omp_get_wtime() + s->window;
        s->window = s->window * 2.0 < BACKOFF_MAX ? s->window * 2.0 : BACKOFF_MAX;
    } else if (wall < busy) {
        s->window = s->window * 0.5 > BACKOFF_MIN ? s->window * 0.5 : BACKOFF_MIN;
    }
#else
    (void)ctx;
    (void)wall;
    (void)busy;
#endif
}

void qs_parallel_run(const qs_ctx *ctx, int64_t count, int64_t work, qs_task_fn *fn,
                     qs_done_fn *done, void *arg)
{
    int32_t threads = count > 1 ? qs_parallel_threads(ctx, work) : 1;

    if (threads > count)
        threads = (int32_t)count;
    if (threads <= 1) {
        float tile[QS_TILE];
        for (int64_t i = 0; i < count; i++)
            fn(arg, i, tile);
        if (done)
            done(arg);
        return;
    }
#ifdef _OPENMP
    double t0 = omp_get_wtime(), busy = 0.0;
#pragma omp parallel num_threads(threads) reduction(+ : busy)
    {
        float tile[QS_TILE];
        double start = omp_get_wtime();
#pragma omp for schedule(guided) nowait
        for (int64_t i = 0; i < count; i++)
            fn(arg, i, tile);
        if (done) /* before the region's closing barrier, on every thread of the team */
            done(arg);
        busy = omp_get_wtime() - start;
    }
    qs_parallel_note(ctx, omp_get_wtime() - t0, busy);
#endif
}

void qs_parallel_for(const qs_ctx *ctx, int64_t count, qs_task_fn *fn, void *arg)
{
    qs_parallel_run(ctx, count, QS_WORK_UNKNOWN, fn, NULL, arg);
}

void qs_parallel_for_done(const qs_ctx *ctx, int64_t count, qs_task_fn *fn, qs_done_fn *done,
                          void *arg)
{
    qs_parallel_run(ctx, count, QS_WORK_UNKNOWN, fn, done, arg);
}
