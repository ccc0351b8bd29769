/* SPDX-License-Identifier: MIT */
/*
 * 2:4 and N:M sparsity throughput (docs/sparsity.md): prune + compress, masks,
 * compress with a mask, decompress and the TILE mask on a large f32 weight matrix, single-threaded
 * by default, each next to the memory read bandwidth measured in the same run on the same array.
 * Throughput counts the dense input bytes (rows x cols x 4) per second. The goal:
 * magnitude 2:4 prune + compress at >= 50% of single-thread read bandwidth on large f32 matrices.
 *
 * Usage: bench_sparse [--rows R] [--cols C] [--reps N] [--threads T]
 *                     [--isa TIER[,TIER...]|all]
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

struct bench {
    qs_ctx *ctx;
    const float *w, *norms;
    int64_t rows, cols;
    float *values, *dense;
    uint16_t *meta;
    uint8_t *mask;
};

enum { OP_PRUNE_COMPRESS, OP_PRUNE_COMPRESS_WANDA, OP_MASK_24, OP_MASK_48, OP_COMPRESS_MASK,
       OP_DECOMPRESS, OP_TILE, OP_COUNT };

static const char *const op_names[OP_COUNT] = {
    "prune+compress 2:4 magnitude", "prune+compress 2:4 Wanda", "mask 2:4 magnitude",
    "mask 4:8 magnitude", "compress with mask", "decompress (writes dense)", "TILE mask (90)",
};

static qs_status run_op(struct bench *b, int op)
{
    int64_t n = b->rows * b->cols, mc = b->rows * ((b->cols + 15) / 16);
    switch (op) {
    case OP_PRUNE_COMPRESS:
        return qs_sp24_prune_compress(b->ctx, b->w, QS_DTYPE_F32, b->rows, b->cols, NULL,
                                      b->values, n * 2, b->meta, mc, NULL, 0);
    case OP_PRUNE_COMPRESS_WANDA:
        return qs_sp24_prune_compress(b->ctx, b->w, QS_DTYPE_F32, b->rows, b->cols, b->norms,
                                      b->values, n * 2, b->meta, mc, NULL, 0);
    case OP_MASK_24:
        return qs_nm_mask(b->ctx, b->w, QS_DTYPE_F32, b->rows, b->cols, 2, 4,
                          QS_PRUNE_MAGNITUDE, NULL, b->mask, n);
    case OP_MASK_48:
        return qs_nm_mask(b->ctx, b->w, QS_DTYPE_F32, b->rows, b->cols, 4, 8,
                          QS_PRUNE_MAGNITUDE, NULL, b->mask, n);
    case OP_COMPRESS_MASK:
        return qs_sp24_compress(b->ctx, b->w, QS_DTYPE_F32, b->rows, b->cols, b->mask, b->values,
                                n * 2, b->meta, mc);
    case OP_DECOMPRESS:
        return qs_sp24_decompress(b->ctx, b->values, QS_DTYPE_F32, b->meta, mc, b->rows, b->cols,
                                  b->dense, n * 4);
    default:
        return qs_sp24_tile_mask(b->ctx, b->w, QS_DTYPE_F32, b->rows, b->cols, NULL,
                                 QS_TILE_BEST, b->mask, n);
    }
}

int main(int argc, char **argv)
{
    int64_t rows = 4096, cols = 4096;
    int reps = 5, threads = 1;
    const char *isa_opt = "all";
    char model[200];

    for (int i = 1; i < argc; i++) {
        if (!strcmp(argv[i], "--rows") && i + 1 < argc)
            rows = atoll(argv[++i]);
        else if (!strcmp(argv[i], "--cols") && i + 1 < argc)
            cols = atoll(argv[++i]);
        else if (!strcmp(argv[i], "--reps") && i + 1 < argc)
            reps = atoi(argv[++i]);
        else if (!strcmp(argv[i], "--threads") && i + 1 < argc)
            threads = atoi(argv[++i]);
        else if (!strcmp(argv[i], "--isa") && i + 1 < argc)
            isa_opt = argv[++i];
        else {
            printf("usage: %s [--rows R] [--cols C] [--reps N] [--threads T] "
                   "[--isa TIER[,TIER...]|all]\n", argv[0]);
            return strcmp(argv[i], "--help") ? 2 : 0;
        }
    }
    reps = reps < 1 ? 1 : reps > 31 ? 31 : reps;
    threads = threads < 1 ? 1 : threads;
    rows = rows < 4 ? 4 : rows / 4 * 4;
    cols = cols < 16 ? 16 : cols / 16 * 16;

    int64_t n = rows * cols;
    struct bench b = {0};
    float *w = malloc((size_t)n * 4), *norms = malloc((size_t)cols * 4);
    b.values = malloc((size_t)n * 2);
    b.dense = malloc((size_t)n * 4);
    b.meta = malloc((size_t)(n / 16) * 2);
    b.mask = malloc((size_t)n);
    if (!w || !norms || !b.values || !b.dense || !b.meta || !b.mask)
        return 99;
    uint64_t s = 0x5EEDull;
    for (int64_t i = 0; i < n; i++) { /* uniform in (-1, 1): no ties to speak of */
        s = s * 6364136223846793005ull + 1442695040888963407ull;
        w[i] = (float)((double)(s >> 11) * 0x1p-53 * 2.0 - 1.0);
    }
    for (int64_t j = 0; j < cols; j++)
        norms[j] = 0.5f + (float)(j % 13) * 0.25f;
    b.w = w;
    b.norms = norms;
    b.rows = rows;
    b.cols = cols;

    cpu_model(model, sizeof model);
    printf("bench_sparse: cpu \"%s\", %d thread(s), f32 %lld x %lld (%.0f MiB), %d reps, median\n",
           model, threads, (long long)rows, (long long)cols, (double)n * 4 / 1048576.0, reps);
    double bytes = (double)n * 4, t[32];
    read_pass(w, (size_t)n * 4);
    for (int r = 0; r < reps; r++)
        t[r] = read_pass(w, (size_t)n * 4);
    double bw = bytes / median(t, reps) / 1e9;
    printf("read bandwidth (4 x u64 sum loop, 1 thread): %.2f GB/s\n\n", bw);

    bench_tier tiers[BENCH_MAX_TIERS];
    int ntiers = bench_tiers(tiers, BENCH_MAX_TIERS, isa_opt);
    printf("%-8s %-30s %10s %9s %12s\n", "isa", "operation", "GB/s", "vs read", "Gelem/s");
    for (int k = 0; k < ntiers; k++) {
        qs_ctx_params p;
        qs_ctx_params_init(&p);
        p.isa_mask = tiers[k].mask;
        p.num_threads = threads;
        if (qs_ctx_create(&p, &b.ctx) != QS_OK)
            return 99;
        for (int op = 0; op < OP_COUNT; op++) {
            /* compress / decompress need the mask and values of the previous ops */
            if (op == OP_COMPRESS_MASK && run_op(&b, OP_MASK_24) != QS_OK)
                return 99;
            if (op == OP_DECOMPRESS && run_op(&b, OP_PRUNE_COMPRESS) != QS_OK)
                return 99;
            int rr = op == OP_TILE ? 1 : reps; /* the exhaustive TILE search is slow */
            if (run_op(&b, op) != QS_OK) {
                printf("%s failed: %s\n", op_names[op], qs_ctx_last_error(b.ctx));
                return 99;
            }
            for (int r = 0; r < rr; r++) {
                double t0 = now();
                run_op(&b, op);
                t[r] = now() - t0;
            }
            double sec = median(t, rr);
            printf("%-8s %-30s %10.2f %8.0f%% %12.3f\n", tiers[k].name, op_names[op],
                   bytes / sec / 1e9, 100.0 * bytes / sec / 1e9 / bw, (double)n / sec / 1e9);
        }
        qs_ctx_destroy(b.ctx);
        printf("\n");
    }
    free(w);
    free(norms);
    free(b.values);
    free(b.dense);
    free(b.meta);
    free(b.mask);
    return 0;
}
