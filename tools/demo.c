/* SPDX-License-Identifier: MIT */
/*
 * `qsparse demo`: the README's main job on built-in data. A deterministic, heavy-tailed weight
 * matrix (per-row log-normal scales, Student-t-like tails and a few outlier columns, like the
 * linear layers of a transformer) is quantized into every format and decoded again; the table
 * gives bits per weight (scales included), size, the error of the round trip and the time of a
 * quantize and a dequantize: the best of TIMED calls after one untimed call, so that no row pays
 * for the first touch of the output buffers. A format the shape does not fit (int8 groups of 128
 * need cols a multiple of 128, MX blocks 32, NVFP4 16) gets a row saying why.
 */
#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "qsparse.h"
#include "tool_ctx.h"
#include "commands.h"
#include "heap.h"

/* splitmix64: the same seed gives the same matrix on every machine. */
static uint64_t next_u64(uint64_t *s)
{
    uint64_t z = (*s += 0x9E3779B97F4A7C15ull);
    z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ull;
    z = (z ^ (z >> 27)) * 0x94D049BB133111EBull;
    return z ^ (z >> 31);
}

static double unif(uint64_t *s)
{
    return ((double)(next_u64(s) >> 11) + 0.5) * 0x1p-53;
}

static double normal(uint64_t *s)
{
    return sqrt(-2.0 * log(unif(s))) * cos(6.283185307179586 * unif(s));
}

static void make_weights(float *w, int64_t rows, int64_t cols)
{
    uint64_t s = 20261202;

    for (int64_t r = 0; r < rows; r++) {
        double row_scale = 0.02 * exp(0.3 * normal(&s));
        for (int64_t c = 0; c < cols; c++) {
            /* Student-t with 5 degrees of freedom: normal / sqrt(chi2_5 / 5) */
            double chi2 = 0.0;
            for (int k = 0; k < 5; k++) {
                double g = normal(&s);
                chi2 += g * g;
            }
            double v = normal(&s) / sqrt(chi2 / 5.0) * row_scale;
            if (c % 509 == 7) /* outlier input channels */
                v *= 12.0;
            w[r * cols + c] = (float)v;
        }
    }
}

struct row {
    const char *label;
    int32_t format;
    int32_t block, granularity, symmetric, double_quant;
};

#define TIMED 3 /* timed calls per operation, after one untimed call */

static double now_ms(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec * 1e3 + (double)ts.tv_nsec * 1e-6;
}

static int run_row(qs_ctx *ctx, const struct row *r, const float *w, float *back, int64_t rows,
                   int64_t cols)
{
    qs_quant_params p;
    qs_qtensor q;
    void *planes[QS_PLANE_COUNT] = {NULL};
    int64_t bytes[QS_PLANE_COUNT], total = 0;
    int64_t n = rows * cols;
    double err2 = 0.0, sig2 = 0.0, maxerr = 0.0, tq = 1e300, td = 1e300;
    int ok = 1;

    qs_quant_params_init(&p, r->format);
    if (r->block)
        p.block_size = r->block;
    p.granularity = r->granularity;
    p.symmetric = r->symmetric;
    p.double_quant = r->double_quant;
    for (int i = 0; i < QS_PLANE_COUNT; i++) {
        qs_plane_info info;
        if (qs_quant_plane_info(ctx, &p, rows, cols, i, &info) != QS_OK) {
            /* the shape does not fit this format: say so and go on with the others */
            printf("%-22s n/a: %s\n", r->label, qs_ctx_last_error(ctx));
            for (int k = 0; k < i; k++)
                qs_heap_free(planes[k]);
            return 1;
        }
        bytes[i] = info.bytes;
        planes[i] = bytes[i] ? qs_heap_malloc((size_t)bytes[i]) : NULL;
        if (bytes[i] && !planes[i])
            ok = 0;
        total += bytes[i];
    }
    memset(&q, 0, sizeof q);
    q.data = planes[0], q.data_bytes = bytes[0];
    q.scale = planes[1], q.scale_bytes = bytes[1];
    q.zero_point = planes[2], q.zero_point_bytes = bytes[2];
    q.nested_scale = planes[3], q.nested_scale_bytes = bytes[3];
    if (r->format == QS_FORMAT_NVFP4)
        total += 4; /* the f32 per-tensor scale */
    if (r->double_quant)
        total += 4; /* the f32 mean offset */

    for (int k = 0; ok && k <= TIMED; k++) {
        double t0 = now_ms(), t1, t2;
        if (qs_quantize(ctx, &p, w, QS_DTYPE_F32, rows, cols, &q) != QS_OK) {
            ok = 0;
            break;
        }
        t1 = now_ms();
        if (qs_dequantize(ctx, &p, &q, rows, cols, back, QS_DTYPE_F32, n * 4) != QS_OK)
            ok = 0;
        t2 = now_ms();
        if (k > 0) { /* the first call of each pays for first touches: untimed */
            tq = t1 - t0 < tq ? t1 - t0 : tq;
            td = t2 - t1 < td ? t2 - t1 : td;
        }
    }
    if (!ok) {
        fprintf(stderr, "qsparse demo: %s failed: %s\n", r->label, qs_ctx_last_error(ctx));
    } else {
        for (int64_t i = 0; i < n; i++) {
            double e = (double)back[i] - (double)w[i];
            err2 += e * e;
            sig2 += (double)w[i] * (double)w[i];
            if (fabs(e) > maxerr)
                maxerr = fabs(e);
        }
        printf("%-22s %6.3f %9.1f %10.3e %10.3e %7.2f %8.2f %8.2f\n", r->label,
               (double)total * 8.0 / (double)n, (double)total / 1024.0, sqrt(err2 / (double)n),
               maxerr, 10.0 * log10(sig2 / err2), tq, td);
    }
    for (int i = 0; i < QS_PLANE_COUNT; i++)
        qs_heap_free(planes[i]);
    return ok;
}

int qs_cmd_demo(int argc, char **argv)
{
    static const struct row table[] = {
        {"nf4 (block 64)", QS_FORMAT_NF4, 64, 0, 1, 0},
        {"nf4 + double quant", QS_FORMAT_NF4, 64, 0, 1, 1},
        {"fp4 (bnb, block 64)", QS_FORMAT_FP4, 64, 0, 1, 0},
        {"int8 row symmetric", QS_FORMAT_INT8, 0, QS_GRAN_ROW, 1, 0},
        {"int8 group 128 asym", QS_FORMAT_INT8, 128, QS_GRAN_GROUP, 0, 0},
        {"int8 tensor", QS_FORMAT_INT8, 0, QS_GRAN_TENSOR, 1, 0},
        {"llm.int8 (row absmax)", QS_FORMAT_LLM_INT8, 0, 0, 1, 0},
        {"fp8 e4m3", QS_FORMAT_FP8_E4M3, 0, 0, 1, 0},
        {"fp8 e5m2", QS_FORMAT_FP8_E5M2, 0, 0, 1, 0},
        {"mxfp4", QS_FORMAT_MXFP4, 0, 0, 1, 0},
        {"mxfp8 (e4m3)", QS_FORMAT_MXFP8, 0, 0, 1, 0},
        {"nvfp4", QS_FORMAT_NVFP4, 0, 0, 1, 0},
    };
    int64_t rows = 1024, cols = 4096;
    qs_ctx *ctx;
    float *w, *back;
    int ok = 1;

    for (int i = 1; i < argc; i++) {
        if (strcmp(argv[i], "--help") == 0) {
            printf("usage: qsparse demo [--rows N] [--cols N]\n\n"
                   "Quantizes a built-in, deterministic, heavy-tailed weight matrix (default 1024 x "
                   "4096)\ninto every format, decodes it and prints bits per weight, size, error "
                   "and the\nbest of %d timed calls after an untimed one. A format the shape does "
                   "not fit says why.\n",
                   TIMED);
            return 0;
        } else if (strcmp(argv[i], "--rows") == 0 && i + 1 < argc) {
            rows = atoll(argv[++i]);
        } else if (strcmp(argv[i], "--cols") == 0 && i + 1 < argc) {
            cols = atoll(argv[++i]);
        } else {
            fprintf(stderr, "qsparse demo: unknown option '%s'\n", argv[i]);
            return 2;
        }
    }
    if (rows < 1 || cols < 1 || rows > 65536 || cols > 65536) {
        fprintf(stderr, "qsparse demo: rows and cols must be in 1...65536\n");
        return 2;
    }
    if (qs_tool_ctx_create(NULL, &ctx) != QS_OK) {
        fprintf(stderr, "qsparse demo: cannot create a context\n");
        return 1;
    }
    w = qs_heap_malloc((size_t)(rows * cols) * sizeof *w);
    back = qs_heap_malloc((size_t)(rows * cols) * sizeof *back);
    if (!w || !back) {
        fprintf(stderr, "qsparse demo: out of memory\n");
        qs_heap_free(w);
        qs_heap_free(back);
        qs_tool_ctx_done(ctx);
        return 1;
    }
    make_weights(w, rows, cols);
    printf("libqsparse %s demo: %lld x %lld heavy-tailed f32 weights (%.1f MiB), backend %s\n\n",
           qs_version_string(), (long long)rows, (long long)cols,
           (double)(rows * cols) * 4.0 / 1048576.0, qs_ctx_isa_name(ctx));
    printf("%-22s %6s %9s %10s %10s %7s %8s %8s\n", "format", "bits/w", "size KiB", "rmse",
           "max |err|", "SQNR dB", "quant ms", "deq ms");
    for (size_t i = 0; i < sizeof table / sizeof table[0]; i++)
        ok &= run_row(ctx, &table[i], w, back, rows, cols);
    printf("%-22s %6.3f %9.1f %10s %10s %7s\n", "f32 (original)", 32.0,
           (double)(rows * cols) * 4.0 / 1024.0, "0", "0", "inf");
    qs_heap_free(w);
    qs_heap_free(back);
    qs_tool_ctx_done(ctx);
    return ok ? 0 : 1;
}
