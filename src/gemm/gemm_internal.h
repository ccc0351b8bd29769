/* SPDX-License-Identifier: MIT */
/*
 * What the matmul drivers of src/gemm share: one call's job (the weight view, the plan, the
 * inputs, outputs and scratch), the weight builder (weight.c), the one place that chooses a path
 * and its kernels (plan.c), the per-path runners and the row-span helpers (span.c).
 *
 * How a call flows (matmul.c): check the parameters and shapes; build the weight view from the
 * public qs_weight and the format's descriptor (weight.c: every plane checked, geometry resolved,
 * no format switch); plan the call (plan.c: path, kernel entries and task sizes from the kernel
 * registry's metadata); allocate the scratch the plan asks for; then convert x, decode
 * double-quantized scales and run the plan's path. Nothing is written to y before all of that
 * succeeded.
 */
#ifndef QS_GEMM_INTERNAL_H
#define QS_GEMM_INTERNAL_H

#include "../core/format_traits.h"
#include "../core/internal.h"
#include "qsparse/matmul.h"

/* The paths of qs_matmul (plan.c chooses one per call). */
enum qs_mm_path {
    QS_MM_GEMV,             /* rows of W through the descriptor's gemv kernel, every x row */
    QS_MM_GEMV_SP24,        /* 2:4: the descriptor's fused 2:4 GEMV kernel, x row by x row */
    QS_MM_GEMV_SP24_GATHER, /* 2:4 without one: x gathered per W row, then the gemv kernel */
    QS_MM_GEMM_TILED,       /* mm_gemm_f32 on tiles of W dequantized in cache (gemm_tiled.c) */
    QS_MM_GEMM_BLAS,        /* cblas_sgemm on W or on dequantized panels (gemm_blas.c) */
    QS_MM_GEMM_SP24,        /* 2:4 outer product over rows of x^T (gemm_sp24.c) */
    QS_MM_A8,               /* int8 activations, the descriptor's integer kernel (act8.c) */
    QS_MM_GEMV_BF16,        /* bf16 activations, the descriptor's bf16 GEMV kernel (gemv.c) */
    QS_MM_PATH_COUNT
};

/* One call's plan: what runs (the registry entry, chosen by qs_ctx_kernel_select for the call's
 * shape) and how the work is cut. */
struct qs_mm_plan {
    int32_t path;                        /* enum qs_mm_path */
    int32_t slot;                        /* the inner loop's kernel slot (profiling), or -1 */
    const struct qs_kernel_entry *entry; /* its entry (NULL for sgemm on the caller's W) */
    int64_t task_rows;                   /* rows of W per task (GEMV, A8 paths) */
    int64_t x_rows;                      /* rows of x per kernel call (A8 path) */
};

/* A validated weight and one call's inputs, outputs and scratch. */
struct qs_mm_job {
    const qs_ctx *ctx;
    const struct qs_format_traits *t; /* the format's descriptor; NULL for plain values */
    const struct qs_mm_traits *mt;    /* its matmul kernels (plain values: weight.c's table) */
    int32_t kind;                     /* QS_WEIGHT_* */
    int32_t dtype;                    /* plain and 2:4 values: QS_DTYPE_* */
    int32_t bits;                     /* bits of one stored value (code or plain element) */
    int32_t scale_bytes;              /* bytes of one scale (4: f32, 1: E8M0 / E4M3 byte) */
    int64_t M, K, N;
    int64_t work; /* bytes of work for the threading policy (core/parallel.h), saturating */
    qs_mm_weight w; /* the view (kernels.h); w.k = K or K / 2 (2:4) */
    /* double-quantized absmax (NF4/FP4): the codes, their scales and offset, decoded to f32
     * before the kernels run (dq_codes NULL: w.scale is f32 already) */
    const uint8_t *dq_codes;
    const float *dq_nested;
    float dq_offset;
    struct qs_mm_plan plan;
    /* 2:4 GEMV with f32 activations: the meta check runs inside the tasks, on each task's rows
     * just before its kernel reads them (no pass of its own over the meta), y goes to scratch
     * and reaches the caller's y only if every row passed; a task that finds a bad word sets
     * *meta_bad (NULL: checked before the call) */
    int *meta_bad;
    const float *x;     /* M x K f32 activations (the caller's, converted, or x^) */
    const uint16_t *xb; /* QS_MM_GEMV_BF16: M x K bf16 activations (the caller's or rounded) */
    const float *bias;
    float *y;
    /* int8 activations against a weight with an integer kernel */
    const int8_t *xq;      /* M x K codes */
    const float *rstat;    /* M row statistics */
    const int32_t *xsum;   /* sums of each row's codes per xsum unit (kernels.h) */
    int64_t xsum_unit;     /* elements per x sum */
    int64_t nout;          /* outlier columns */
    const float *xo, *wo;  /* M x nout activations, N x nout dequantized weight columns */
    const int64_t *ocols;  /* the nout outlier column indices, ascending */
    const uint8_t *oflags; /* K flags, 1 for an outlier column; NULL without a threshold */
    float *xhat;           /* M x K dequantized activations (weights without an integer kernel) */
    /* scratch */
    float *scratch; /* per-thread scratch, `per_thread` floats each */
    int64_t per_thread;
    float *panel;    /* GEMM: dequantized rows of W */
    const float *xt; /* GEMM: packed x (tiled), K x M transpose of x (2:4) */
    int64_t n0, nb;  /* GEMM: the current block's first row and row count */
};

typedef void qs_mm_task_fn(const struct qs_mm_job *j, int64_t index, float *scratch);

/* Run fn(j, i, scratch of the running thread) for i in [0, count): fixed tasks, static schedule,
 * j->scratch holding qs_threads(ctx) blocks of j->per_thread floats. */
QS_INTERNAL void qs_mm_parallel(const struct qs_mm_job *j, int64_t count, qs_mm_task_fn *fn);

/* The same, runs of consecutive tasks (about four per thread) handed to the next free thread
 * (schedule(dynamic)): for the GEMV tasks, equal and independent, whose call is over when the
 * slowest thread is done. A static split gives each thread half the rows however fast it runs;
 * on a machine where one core is taken for a while (an interrupt, another process, the
 * hypervisor) the other thread waited with nothing to do. The bounds of the tasks stay fixed, so
 * the bits do not depend on which thread runs one. */
QS_INTERNAL void qs_mm_parallel_dynamic(const struct qs_mm_job *j, int64_t count,
                                        qs_mm_task_fn *fn);

/* ---- weight.c ---------------------------------------------------------------------------------
 */

/* Check the public weight against an N x K product and fill j->t, j->mt, j->kind, j->dtype,
 * j->bits, j->scale_bytes and the view j->w (scales as stored: the caller decodes
 * double-quantized absmax into scratch and points j->w.scale there). 2:4 meta is checked here
 * unless j->meta_bad is set (the GEMV tasks check it then). */
QS_INTERNAL qs_status qs_mm_weight_build(qs_ctx *ctx, const qs_weight *w, struct qs_mm_job *j);

/* A packed weight (pack.c): its header checked against this context and an N x K call, and
 * *plain (with *quant and *q) made to point at its planes, ready for qs_mm_weight_build. */
QS_INTERNAL qs_status qs_mm_packed_weight(qs_ctx *ctx, const qs_weight *w, int64_t N, int64_t K,
                                          qs_weight *plain, qs_quant_params *quant, qs_qtensor *q);

/* Whether every nibble of the N rows' meta words is valid (used ones one of the six codes,
 * unused ones 0); QS_ERR_BAD_DATA naming the first bad nibble otherwise. */
QS_INTERNAL qs_status qs_mm_check_meta(qs_ctx *ctx, const uint16_t *meta, int64_t N, int64_t K,
                                       int64_t words);

/* ---- plan.c ------------------------------------------------------------------------------------
 */

/* Choose the path and kernels of a call with `activations` (QS_MATMUL_ACT_*) for j's weight and
 * shape; the only place that does (the profiler reports what it chose). */
QS_INTERNAL void qs_mm_plan_make(const qs_ctx *ctx, struct qs_mm_job *j, int32_t activations);

/* The f32-activation plan of j (used for int8 and bf16 activations on weights without an
 * integer or bf16 kernel, on x^). */
QS_INTERNAL void qs_mm_plan_f32(const qs_ctx *ctx, struct qs_mm_job *j);

/* Scratch of the plan's f32 path: per-thread floats, panel floats and x^T / packed-x floats. */
QS_INTERNAL void qs_mm_f32_scratch(const struct qs_mm_job *j, int64_t *per_thread, int64_t *panel,
                                   int64_t *xt);

/* Run the plan's f32 path on j->x (every scratch allocated). */
QS_INTERNAL void qs_mm_run_f32(struct qs_mm_job *j);

/* ---- the paths ---------------------------------------------------------------------------------
 */

QS_INTERNAL void qs_mm_gemv_run(struct qs_mm_job *j); /* gemv.c */
QS_INTERNAL void qs_mm_gemm_tiled_scratch(const struct qs_mm_job *j, int64_t *per_thread,
                                          int64_t *xt); /* gemm_tiled.c */
QS_INTERNAL void qs_mm_gemm_tiled_run(struct qs_mm_job *j);
QS_INTERNAL void qs_mm_gemm_blas_scratch(const struct qs_mm_job *j, int64_t *per_thread,
                                         int64_t *panel); /* gemm_blas.c */
QS_INTERNAL void qs_mm_gemm_blas_run(struct qs_mm_job *j);
QS_INTERNAL void qs_mm_gemm_sp24_scratch(const struct qs_mm_job *j, int64_t *per_thread,
                                         int64_t *panel, int64_t *xt); /* gemm_sp24.c */
QS_INTERNAL void qs_mm_gemm_sp24_run(struct qs_mm_job *j);

/* bf16 activations (act_bf16.c): dst = the n elements of x (QS_DTYPE_* dtype) rounded to bf16
 * (round to nearest even; f16 widened exactly first), as bf16 bits, or x^ = that widened back
 * to f32 (the f32 path's input where no bf16 kernel runs); in parallel, fixed chunks. */
QS_INTERNAL void qs_mm_x_to_bf16(const qs_ctx *ctx, const void *x, int32_t dtype, int64_t n,
                                 uint16_t *dst);
QS_INTERNAL void qs_mm_x_to_bf16_f32(const qs_ctx *ctx, const void *x, int32_t dtype, int64_t n,
                                     float *dst);

/* The int8-activation part of qs_matmul (act8.c): everything validated, j->x is the f32
 * activation. Allocates its own scratch; returns QS_OK or QS_ERR_OUT_OF_MEMORY before y is
 * written. */
QS_INTERNAL qs_status qs_mm_run_int8(qs_ctx *ctx, struct qs_mm_job *j, float threshold);

/* LLM.int8 quantization of M x K f32 x (act8.c): flags[k] = 1 for outlier columns, row
 * statistics and codes as qs_int8_vectorwise_quant defines them. flags NULL: threshold 0. */
QS_INTERNAL void qs_mm_outlier_flags(const qs_ctx *ctx, const float *x, int64_t M, int64_t K,
                                     float threshold, uint8_t *flags);
QS_INTERNAL void qs_mm_quantize_rows(const qs_ctx *ctx, const float *x, int64_t M, int64_t K,
                                     float threshold, const uint8_t *flags, int8_t *codes,
                                     float *rstat);

/* ---- span.c ------------------------------------------------------------------------------------
 */

/* Columns [c0, c0 + len) of stored row r of W (w.k columns), dequantized as qs_dequantize gives
 * them, into out; tmp holds QS_TILE floats (a first partial NF4/FP4 block is decoded whole there).
 * Row-block formats need c0 at a block boundary. */
QS_INTERNAL void qs_mm_span_dequant(const struct qs_mm_job *j, int64_t r, int64_t c0, int64_t len,
                                    float *out, float *tmp);

/* Prefetch the stored bytes of columns [c0, c0 + len) of row r (data and, where they are per
 * block or group, its last scale). */
QS_INTERNAL void qs_mm_span_prefetch(const struct qs_mm_job *j, int64_t r, int64_t c0, int64_t len);

/* y = fl(acc + bias[n]) under the NaN rule: a computed NaN is the canonical quiet NaN. */
QS_INTERNAL float qs_mm_finish(const struct qs_mm_job *j, float acc, int64_t n);

/* fl(1/127), the LLM.int8 dequantize constant, and fl(1/16129) = 6.200012e-05, bitsandbytes'
 * MM_DEQUANT_CONST of its CUDA int8 matmul (its CPU backend's 6.200124e-05 is a typo). */
#define QS_MM_INV127 0x1.020408p-7f
#define QS_MM_INV16129 0x1.040c2p-14f

#endif /* QS_GEMM_INTERNAL_H */
