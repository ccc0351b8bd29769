/* SPDX-License-Identifier: MIT */
/*
 * The tiled GEMM path of qs_matmul with f32 activations (plan.c: where an mm_gemm_f32 entry takes
 * the shape) for quantized and f16/bf16 weights: the chosen mm_gemm_f32 kernel on tiles of
 * dequantized W, no BLAS.
 *
 * x is taken in blocks of at most block_rows_max() rows (by the L2's size), packed once per block
 * into panels of 16 rows, column by column (j->xt, zero rows past M). A task owns about GM_NT rows
 * of W: slice after slice of QS_MM_GEMM_KC columns it dequantizes its rows of the slice into a tile
 * in its own scratch (qs_mm_span_dequant, qs_dequantize's values: the tile stays in
 * L1/L2, so the dequantization costs a few percent of the multiply and nothing of memory
 * bandwidth), and runs the kernel over every panel of the block, accumulating into a per-task block
 * of y^T; the last slice done, it adds the bias (NaN rule) while writing its columns of y. Each
 * thread works on its own W rows and its own scratch (the packing of x is split over the threads
 * too): no BLAS threads nested under OpenMP, nothing serial.
 *
 * Every y element is the kernel's fused multiply-add chain per slice, slices added in ascending
 * order (src/ref/mm_gemm_ref.c): fixed by the shape, so the bits are the same for any thread
 * count and on every ISA tier of a build that runs this path.
 */
#include <string.h>

#include "../ref/ref.h"
#include "gemm_internal.h"

#define GM_NT 96                              /* rows of W per task, about */
#define GM_NT_MAX (GM_NT + QS_MM_GEMM_NR_MAX) /* the most a task gets (rounding to the nr) */
#define GM_KC QS_MM_GEMM_KC
#define GM_LDW QS_MM_GEMM_LDW

/* Rows of x per block, at most: the block's packed slice of x (rows x GM_KC floats), a task's
 * y^T block (GM_NT_MAX x rows) and its W tile stay in the core's L2 while the kernel runs over
 * them. 512 on a 1 MiB L2 (Zen 4); 256 on a 512 KiB one: there 512 rows spilled to the L3 and
 * M = 512 GEMMs ran at 0.85-0.96 x sgemm against 0.95-1.03 (Zen 2, bench_matmul, same session).
 * The blocking never changes a bit of y (each element is its slices' chains, added in order). */
static int64_t block_rows_max(void)
{
    int64_t l2 = qs_cpu_l2_bytes();

    if (l2 <= 0)
        return 512;
    for (int64_t mb = 512; mb > 128; mb /= 2)
        if ((mb * (GM_KC + GM_NT_MAX) + GM_NT_MAX * GM_LDW) * (int64_t)sizeof(float) <= l2)
            return mb;
    return 128;
}

/* Rows of x per block: the blocks of one call are equal (a multiple of 16, the last shorter), so
 * M = 600 runs as 304 + 296 rather than 512 + 88. */
static int64_t block_rows_pad(const struct qs_mm_job *j)
{
    int64_t blocks = qs_ceil_div(j->M, block_rows_max());
    return qs_ceil_div(qs_ceil_div(j->M, blocks), 16) * 16;
}

/* The tasks over W rows: a multiple of the thread count, so that the static schedule gives every
 * thread the same share of rows, each about GM_NT rows with bounds on multiples of the kernel's
 * nr (whole register tiles, from the chosen entry's tile). The bits do not depend on this split
 * (each y element is its own fma chain), only the speed does. */
static int64_t task_count(const struct qs_mm_job *j)
{
    int64_t threads = qs_threads(j->ctx), min = qs_ceil_div(j->N, GM_NT);
    int64_t tasks = qs_ceil_div(min, threads) * threads;
    return tasks < min ? min : tasks;
}

static int64_t task_row(const struct qs_mm_job *j, int64_t tasks, int64_t t)
{
    int64_t q = j->N / tasks, r = j->N % tasks; /* t * q + min(t, r): no overflow */
    int64_t nr = j->plan.entry->tile.nr > 0 ? j->plan.entry->tile.nr : 1;
    return t >= tasks ? j->N : (t * q + (t < r ? t : r)) / nr * nr;
}

void qs_mm_gemm_tiled_scratch(const struct qs_mm_job *j, int64_t *per_thread, int64_t *xt)
{
    /* W tile, y^T block, NF4/FP4 first partial block */
    *per_thread = GM_NT_MAX * GM_LDW + GM_NT_MAX * (block_rows_pad(j) + 16) + QS_TILE;
    *xt = block_rows_pad(j) * j->K;
}

/* ---- tasks ----------------------------------------------------------------------------------- */

/* Panel t of the block of x rows starting at j->n0 (j->nb rows): 16 rows, column by column, zero
 * rows past the block; 16 columns at a time (16 lines of x in, 1 KiB out). */
static void pack_task(const struct qs_mm_job *j, int64_t t, float *scratch)
{
    float *xt = (float *)j->xt + t * 16 * j->K;
    int64_t m0 = j->n0 + 16 * t, mb = j->nb - 16 * t < 16 ? j->nb - 16 * t : 16;

    (void)scratch;
    for (int64_t k0 = 0; k0 < j->K; k0 += 16) {
        int64_t kb = j->K - k0 < 16 ? j->K - k0 : 16;
        for (int64_t i = 0; i < mb; i++) {
            const float *xr = j->x + (m0 + i) * j->K + k0;
            for (int64_t kk = 0; kk < kb; kk++)
                xt[(k0 + kk) * 16 + i] = qs_ld_f32(xr + kk);
        }
        for (int64_t i = mb; i < 16; i++)
            for (int64_t kk = 0; kk < kb; kk++)
                xt[(k0 + kk) * 16 + i] = 0.0f;
    }
}

/* The W rows of task t against the block of x: y^T block in scratch, then y. */
static void gemm_task(const struct qs_mm_job *j, int64_t t, float *scratch)
{
    qs_mm_gemm_f32_fn *kern = (qs_mm_gemm_f32_fn *)j->plan.entry->fn;
    int64_t tasks = task_count(j), n0 = task_row(j, tasks, t);
    int64_t nr = task_row(j, tasks, t + 1) - n0;
    int64_t mp = qs_ceil_div(j->nb, 16), ldc = 16 * mp + 16; /* rows of y^T off 2^k strides */
    float *wt = scratch, *cb = wt + GM_NT_MAX * GM_LDW, *tmp = cb + GM_NT_MAX * ldc;

    for (int64_t k0 = 0; k0 < j->K; k0 += GM_KC) {
        int64_t kc = j->K - k0 < GM_KC ? j->K - k0 : GM_KC;
        for (int64_t r = 0; r < nr; r++)
            qs_mm_span_dequant(j, n0 + r, k0, kc, wt + r * GM_LDW, tmp);
        if (k0 + GM_KC < j->K)
            for (int64_t r = 0; r < nr; r++)
                qs_mm_span_prefetch(j, n0 + r, k0 + GM_KC,
                                    j->K - k0 - GM_KC < GM_KC ? j->K - k0 - GM_KC : GM_KC);
        kern(j->xt + k0 * 16, 16 * j->K, mp, kc, wt, nr, cb, ldc, k0 > 0);
    }
    for (int64_t i = 0; i < j->nb; i++) {
        float *yr = j->y + (j->n0 + i) * j->N + n0;
        /* y is written once, far from any cache: ask for the lines of a later row early, so the
         * stores do not wait for each line in turn */
        if (i + 4 < j->nb)
            for (int64_t r = 0; r < nr; r += 16)
                __builtin_prefetch(yr + 4 * j->N + r, 1);
        for (int64_t r = 0; r < nr; r++) {
            float v = cb[r * ldc + i];
            qs_st_f32(yr + r, qs_ref_nan_canon(j->bias ? v + qs_ld_f32(j->bias + n0 + r) : v));
        }
    }
}

void qs_mm_gemm_tiled_run(struct qs_mm_job *j)
{
    int64_t mb = block_rows_pad(j);

    for (j->n0 = 0; j->n0 < j->M; j->n0 += mb) {
        j->nb = j->M - j->n0 < mb ? j->M - j->n0 : mb;
        qs_mm_parallel(j, qs_ceil_div(j->nb, 16), pack_task);
        qs_mm_parallel(j, task_count(j), gemm_task);
    }
}
