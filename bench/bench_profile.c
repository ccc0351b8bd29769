/* SPDX-License-Identifier: MIT */
/*
 * The cost of the profiling counters (include/qsparse/profile.h): the same calls with the
 * counters off and on, interleaved in one run, minimum of repetitions, one thread. Two sizes:
 * a 4 MiB NF4 quantize / dequantize (the counters must stay under 2% there) and a 256-value call,
 * where the fixed cost of a call shows (two clock reads and a table lookup).
 *
 *   bench_profile [--reps N]
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "bench_util.h"
#include "qsparse.h"
#include "qsparse/profile.h"

static double time_calls(qs_ctx *ctx, const qs_quant_params *p, const float *w, int64_t rows,
                         int64_t cols, qs_qtensor *q, float *back, int calls, int dequant)
{
    double t0 = now();
    for (int i = 0; i < calls; i++) {
        qs_status st = dequant ? qs_dequantize(ctx, p, q, rows, cols, back, QS_DTYPE_F32,
                                               rows * cols * 4)
                               : qs_quantize(ctx, p, w, QS_DTYPE_F32, rows, cols, q);
        if (st != QS_OK) {
            fprintf(stderr, "bench_profile: %s\n", qs_ctx_last_error(ctx));
            exit(1);
        }
    }
    return (now() - t0) / calls;
}

int main(int argc, char **argv)
{
    int reps = 15;
    qs_ctx_params cp;
    qs_ctx *ctx = NULL;
    char cpu[128];

    for (int i = 1; i < argc; i++) {
        if (strcmp(argv[i], "--reps") == 0 && i + 1 < argc)
            reps = atoi(argv[++i]);
        else {
            fprintf(stderr, "usage: bench_profile [--reps N]\n");
            return 2;
        }
    }
    if (reps < 1)
        reps = 1;
    qs_ctx_params_init(&cp);
    cp.num_threads = 1;
    if (qs_ctx_create(&cp, &ctx) != QS_OK)
        return 1;
    cpu_model(cpu, sizeof cpu);
    printf("profiling counters, off vs on, 1 thread, isa %s, %s; min of %d reps, interleaved\n",
           qs_ctx_isa_name(ctx), cpu, reps);
    printf("%-24s %12s %12s %9s %12s\n", "call", "off ns/call", "on ns/call", "on/off",
           "on-off ns");

    static const struct {
        const char *label;
        int64_t rows, cols;
        int calls, dequant;
    } cases[] = {
        {"nf4 quantize 4 MiB", 1024, 1024, 3, 0},
        {"nf4 dequantize 4 MiB", 1024, 1024, 3, 1},
        {"nf4 quantize 256 values", 1, 256, 20000, 0},
        {"nf4 dequantize 256", 1, 256, 20000, 1},
    };
    for (size_t c = 0; c < sizeof cases / sizeof cases[0]; c++) {
        int64_t rows = cases[c].rows, cols = cases[c].cols, n = rows * cols;
        qs_quant_params p;
        qs_qtensor q;
        int64_t db = 0, sb = 0;
        qs_quant_params_init(&p, QS_FORMAT_NF4);
        qs_quant_size(&p, rows, cols, QS_PLANE_DATA, &db);
        qs_quant_size(&p, rows, cols, QS_PLANE_SCALE, &sb);
        float *w = malloc((size_t)n * sizeof *w), *back = malloc((size_t)n * sizeof *back);
        memset(&q, 0, sizeof q);
        q.data = malloc((size_t)db);
        q.data_bytes = db;
        q.scale = malloc((size_t)sb);
        q.scale_bytes = sb;
        if (!w || !back || !q.data || !q.scale)
            return 1;
        for (int64_t i = 0; i < n; i++)
            w[i] = (float)((i * 2654435761u) % 1000) / 500.0f - 1.0f;
        qs_quantize(ctx, &p, w, QS_DTYPE_F32, rows, cols, &q);
        double off = 1e30, on = 1e30;
        for (int r = 0; r < reps; r++) {
            qs_ctx_set(ctx, QS_PARAM_PROFILE, 0);
            double t = time_calls(ctx, &p, w, rows, cols, &q, back, cases[c].calls,
                                  cases[c].dequant);
            off = t < off ? t : off;
            qs_ctx_set(ctx, QS_PARAM_PROFILE, 1);
            t = time_calls(ctx, &p, w, rows, cols, &q, back, cases[c].calls, cases[c].dequant);
            on = t < on ? t : on;
        }
        printf("%-24s %12.0f %12.0f %9.4f %12.1f\n", cases[c].label, off * 1e9, on * 1e9,
               on / off, (on - off) * 1e9);
        free(w);
        free(back);
        free(q.data);
        free(q.scale);
    }
    qs_ctx_destroy(ctx);
    return 0;
}
