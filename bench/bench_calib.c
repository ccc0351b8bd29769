/* SPDX-License-Identifier: MIT */
/*
 * Calibration throughput (docs/calibration.md §3): observer updates on a large f32
 * array (Laplace activations with a few outlier channels), single-threaded, next to the memory
 * read bandwidth measured in the same run on the same array. The goal the issue sets: min-max
 * and histogram updates at >= 50% of single-thread read bandwidth. Also the per-token dynamic
 * INT8 quantizer, the Wanda sum of squares and the time of each range search.
 *
 * Usage: bench_calib [--size FLOATS] [--reps R] [--isa TIER[,TIER...]|all]
 */
#define _POSIX_C_SOURCE 200809L
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "qsparse.h"
#include "bench_tiers.h"
#include "bench_util.h"

static uint64_t rng_state = 0x1234567ull;
static double unif(void)
{
    uint64_t z = (rng_state += 0x9E3779B97F4A7C15ull);
    z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ull;
    z = (z ^ (z >> 27)) * 0x94D049BB133111EBull;
    return ((double)((z ^ (z >> 31)) >> 11) + 0.5) * 0x1p-53;
}

static qs_ctx *make_ctx(uint32_t isa)
{
    qs_ctx_params p;
    qs_ctx *ctx = NULL;
    qs_ctx_params_init(&p);
    p.num_threads = 1;
    p.isa_mask = isa;
    if (qs_ctx_create(&p, &ctx) != QS_OK) {
        fprintf(stderr, "qs_ctx_create failed\n");
        exit(99);
    }
    return ctx;
}

/* One measured operation; `arg` is the bench state. */
struct bench {
    qs_ctx *ctx;
    const float *x;
    int64_t rows, cols;
    int32_t method;
    int axis;
    int8_t *q;
    float *sc;
    double *ss;
};

static double run_op(struct bench *b, int op)
{
    double t0;
    if (op == 0) { /* observer update */
        qs_observer_params p;
        qs_observer *o;
        qs_observer_params_init(&p, b->method);
        p.axis = b->axis;
        qs_observer_create(b->ctx, &p, &o);
        t0 = now();
        if (qs_observer_update(b->ctx, o, b->x, QS_DTYPE_F32, b->rows, b->cols) != QS_OK) {
            fprintf(stderr, "update failed: %s\n", qs_ctx_last_error(b->ctx));
            exit(99);
        }
        t0 = now() - t0;
        qs_observer_destroy(o);
        return t0;
    }
    t0 = now();
    if (op == 1)
        qs_quantize_dynamic_int8_per_token(b->ctx, b->x, QS_DTYPE_F32, b->rows, b->cols, b->q,
                                           b->rows * b->cols, b->sc, b->rows);
    else
        qs_act_sumsq_update(b->ctx, b->x, QS_DTYPE_F32, b->rows, b->cols, b->ss, b->cols);
    return now() - t0;
}

/* Each repetition times a read pass over the same array right before the operation, so the
 * ratio compares both under the same machine load; the medians of the ratios and of the
 * operation's throughput are printed. */
static void measure(struct bench *b, int op, int reps, const char *isa, const char *name)
{
    double ratio[32], gbs[32], bytes = (double)b->rows * (double)b->cols * 4.0;
    for (int r = 0; r < reps; r++) {
        double tr = read_pass(b->x, (size_t)bytes);
        double to = run_op(b, op);
        ratio[r] = tr / to;
        gbs[r] = bytes / to / 1e9;
    }
    printf("%-8s %-34s %10.2f %9.0f%%\n", isa, name, median(gbs, reps),
           100.0 * median(ratio, reps));
}

int main(int argc, char **argv)
{
    int64_t n = 16 << 20, cols = 4096;
    int reps = 5;
    const char *isa_opt = "all";
    char model[200];

    for (int i = 1; i < argc; i++) {
        if (!strcmp(argv[i], "--size") && i + 1 < argc)
            n = atoll(argv[++i]);
        else if (!strcmp(argv[i], "--reps") && i + 1 < argc)
            reps = atoi(argv[++i]);
        else if (!strcmp(argv[i], "--isa") && i + 1 < argc)
            isa_opt = argv[++i];
        else {
            printf("usage: %s [--size FLOATS] [--reps R] [--isa TIER[,TIER...]|all]\n",
                   argv[0]);
            return strcmp(argv[i], "--help") ? 2 : 0;
        }
    }
    if (reps < 1)
        reps = 1;
    if (reps > 31)
        reps = 31;
    n = n / cols * cols;
    if (n < cols)
        n = cols;
    float *x = malloc((size_t)n * sizeof *x);
    if (!x)
        return 99;
    /* Laplace(0, 1) activations; channels 7, 100 and 2000 of every row are 50x outliers */
    for (int64_t i = 0; i < n; i++) {
        double u = unif() - 0.5;
        double v = (u < 0 ? 1.0 : -1.0) * log(1.0 - 2.0 * fabs(u));
        int64_t c = i % cols;
        x[i] = (float)(c == 7 || c == 100 || c == 2000 ? 50.0 * v : v);
    }
    cpu_model(model, sizeof model);
    printf("bench_calib: cpu \"%s\", 1 thread, %lld floats (%.0f MiB), %d reps, median\n", model,
           (long long)n, (double)n * 4 / 1048576.0, reps);

    double bytes = (double)n * 4, tr[32];
    read_pass(x, (size_t)n * 4); /* warm up: fault the pages in */
    for (int r = 0; r < reps; r++)
        tr[r] = read_pass(x, (size_t)n * 4);
    printf("read bandwidth (4 x u64 sum loop): %.2f GB/s; \"vs read\" below is the median of\n"
           "per-repetition ratios, each against a read pass timed just before\n\n",
           bytes / median(tr, reps) / 1e9);

    bench_tier tiers[BENCH_MAX_TIERS];
    int ntiers = bench_tiers(tiers, BENCH_MAX_TIERS, isa_opt);
    printf("%-8s %-34s %10s %10s\n", "isa", "operation", "GB/s", "vs read");
    for (int t = 0; t < ntiers; t++) {
        qs_ctx *ctx = make_ctx(tiers[t].mask);
        static const struct {
            const char *name;
            int32_t method;
            int axis;
        } ops[] = {
            {"minmax update, per tensor", QS_OBSERVER_MINMAX, -1},
            {"histogram update, per tensor", QS_OBSERVER_PERCENTILE, -1},
            {"minmax update, per row (axis 0)", QS_OBSERVER_MINMAX, 0},
            {"histogram update, per row", QS_OBSERVER_ENTROPY, 0},
            {"histogram update, per column", QS_OBSERVER_ENTROPY, 1},
        };
        struct bench b = {ctx, x, n / cols, cols, 0, -1, malloc((size_t)n),
                          malloc((size_t)(n / cols) * sizeof(float)),
                          calloc((size_t)cols, sizeof(double))};
        for (size_t o = 0; o < sizeof ops / sizeof ops[0]; o++) {
            b.method = ops[o].method;
            b.axis = ops[o].axis;
            int r = ops[o].axis == 1 || (ops[o].axis == 0 && ops[o].method != QS_OBSERVER_MINMAX)
                        ? (reps > 3 ? 3 : reps) : reps;
            measure(&b, 0, r, tiers[t].name, ops[o].name);
        }
        measure(&b, 1, reps, tiers[t].name, "dynamic int8 per token");
        measure(&b, 2, reps, tiers[t].name, "wanda sum of squares");
        free(b.q);
        free(b.sc);
        free(b.ss);
        qs_ctx_destroy(ctx);
    }

    /* searches, once per result, on a per-tensor histogram of the whole array */
    qs_ctx *ctx = make_ctx(QS_ISA_ALL);
    printf("\nsearch on a 2048-bin histogram (per tensor):\n");
    static const int32_t methods[] = {QS_OBSERVER_MINMAX, QS_OBSERVER_PERCENTILE,
                                      QS_OBSERVER_ENTROPY, QS_OBSERVER_MSE};
    for (size_t m = 0; m < sizeof methods / sizeof methods[0]; m++) {
        qs_observer_params p;
        qs_observer *o;
        float amax;
        qs_observer_params_init(&p, methods[m]);
        qs_observer_create(ctx, &p, &o);
        qs_observer_update(ctx, o, x, QS_DTYPE_F32, 1, n);
        double t0 = now();
        qs_observer_amax(ctx, o, &amax, 1);
        printf("  %-16s amax %-12g %8.2f ms\n", qs_observer_method_name(methods[m]), amax,
               1e3 * (now() - t0));
        qs_observer_destroy(o);
    }
    qs_ctx_destroy(ctx);
    free(x);
    return 0;
}
