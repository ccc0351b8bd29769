/* SPDX-License-Identifier: MIT */
/* What the matmul driver (matmul.c) and its int8-activation part (matmul_act8.c) share. */
#ifndef QS_CORE_MATMUL_INTERNAL_H
#define QS_CORE_MATMUL_INTERNAL_H

#include "qsparse/matmul.h"
#include "internal.h"

/* A validated weight and one call's inputs, outputs and scratch. */
struct qs_mm_job {
    const qs_ctx *ctx;
    int32_t kind, format, wdtype, gran;
    int64_t M, K, N;
    int64_t wcols;          /* columns of the stored matrix: K, or K/2 for 2:4 kinds */
    int64_t words;          /* 2:4 meta words per row */
    int64_t group;          /* INT8 scale unit along a row (K for tensor/row) */
    int64_t spr, row_bytes; /* MX/NVFP4 scales per row and data bytes per row */
    int32_t block;          /* NF4/FP4 block */
    const void *wdata;      /* DENSE, SP24 values; QUANT data plane */
    const uint16_t *meta;
    /* 2:4 GEMV with f32 activations: the meta check runs inside the tasks, on each task's rows
     * just before its kernel reads them (no pass of its own over the meta), y goes to scratch
     * and reaches the caller's y only if every row passed; a task that finds a bad word sets
     * *meta_bad (NULL: checked before the call) */
    int *meta_bad;
    const float *fscale;   /* INT8, LLM_INT8, FP8 scale plane */
    const int8_t *zp;      /* INT8 asymmetric zero points, else NULL */
    const uint8_t *bscale; /* MX / NVFP4 scale bytes */
    const float *absmax;   /* NF4/FP4: plane or decoded double quantization */
    float s_global;
    const float *x; /* M x K f32 activations (the caller's, converted, or x^) */
    const float *bias;
    float *y;
    /* int8 activations against INT8 weights */
    const int8_t *xq;      /* M x K codes */
    const float *rstat;    /* M row statistics */
    const int32_t *xsum;   /* sums of each row's codes per group / 64 elements (kernels.h) */
    int64_t nout;          /* outlier columns */
    const float *xo, *wo;  /* M x nout activations, N x nout dequantized weight columns */
    const int64_t *ocols;  /* the nout outlier column indices, ascending */
    const uint8_t *oflags; /* K flags, 1 for an outlier column; NULL without a threshold */
    float *xhat;           /* M x K dequantized activations (non-integer weights) */
    /* scratch */
    float *scratch; /* per-thread scratch, `per_thread` floats each */
    int64_t per_thread;
    float *panel;    /* GEMM: dequantized rows of W */
    const float *xt; /* 2:4 GEMM: K x M transpose of x */
    int64_t n0, nb;  /* GEMM: the panel's first row and row count */
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

/* Dequantize row n of the stored matrix (wcols columns of a QUANT / SP24_QUANT weight, or a
 * DENSE / SP24 row of f16/bf16/f32 values) into out; tmp holds QS_TILE floats. */
QS_INTERNAL void qs_mm_row_dequant(const struct qs_mm_job *j, int64_t n, float *out, float *tmp);

/* The f32 path of qs_matmul on j->x (any M): GEMV, tiled GEMM or the 2:4 outer product. The
 * scratch it needs was sized by qs_mm_f32_scratch and allocated by the caller. */
QS_INTERNAL void qs_mm_run_f32(struct qs_mm_job *j);

/* Scratch of qs_mm_run_f32: per-thread floats, panel floats and transpose floats. */
QS_INTERNAL void qs_mm_f32_scratch(const struct qs_mm_job *j, int64_t *per_thread, int64_t *panel,
                                   int64_t *xt);

/* The tiled GEMM path (matmul_gemm.c): whether it runs this job (quantized and f16/bf16 weights
 * where the build has a SIMD mm_gemm_f32 kernel or no BLAS; plain f32 without BLAS), its scratch
 * (per-thread floats, packed-x floats) and the run itself (M >= QS_MATMUL_GEMM_MIN_M, K > 0). */
QS_INTERNAL int qs_mm_gemm_tiled(const struct qs_mm_job *j);
QS_INTERNAL void qs_mm_gemm_scratch(const struct qs_mm_job *j, int64_t *per_thread, int64_t *xt);
QS_INTERNAL void qs_mm_gemm_run(struct qs_mm_job *j);

/* LLM.int8 quantization of M x K f32 x (matmul_act8.c): flags[k] = 1 for outlier columns,
 * row statistics and codes as qs_int8_vectorwise_quant defines them. flags NULL: threshold 0. */
QS_INTERNAL void qs_mm_outlier_flags(const qs_ctx *ctx, const float *x, int64_t M, int64_t K,
                                     float threshold, uint8_t *flags);
QS_INTERNAL void qs_mm_quantize_rows(const qs_ctx *ctx, const float *x, int64_t M, int64_t K,
                                     float threshold, const uint8_t *flags, int8_t *codes,
                                     float *rstat);

/* The int8-activation part of qs_matmul (matmul_act8.c): everything validated, j->x is the f32
 * activation. Allocates its own scratch; returns QS_OK or QS_ERR_OUT_OF_MEMORY before y is
 * written. */
QS_INTERNAL qs_status qs_mm_run_int8(qs_ctx *ctx, struct qs_mm_job *j, float threshold);

/* Whether int8 activations use the integer path for this weight (INT8, LLM_INT8, and NF4 / FP4
 * through their int8 codebooks). */
static inline int qs_mm_integer_weight(const struct qs_mm_job *j)
{
    return j->kind == QS_WEIGHT_QUANT &&
           (j->format == QS_FORMAT_INT8 || j->format == QS_FORMAT_LLM_INT8 ||
            j->format == QS_FORMAT_NF4 || j->format == QS_FORMAT_FP4);
}

/* fl(1/127), the LLM.int8 dequantize constant, and bitsandbytes' fl(1/(127*127)). */
#define QS_MM_INV127 0x1.020408p-7f
#define QS_MM_INV127SQ 6.200124e-05f

/* NF4/FP4 elements [f, f + len) of the flattened weight into out (matmul_f32.c): a first partial
 * block is decoded whole into tmp (one block of floats), the rest straight into out. */
QS_INTERNAL void qs_mm_bnb4_span(const struct qs_mm_job *j, int64_t f, int64_t len, float *out,
                                 float *tmp);

#endif /* QS_CORE_MATMUL_INTERNAL_H */
