/* SPDX-License-Identifier: MIT */
/*
 * libqsparse format recommendation: for one weight (and optionally the activations it sees),
 * measure every candidate compressed form on this machine — its output error on the data, its
 * size, and its speed in a short probe of the real matmul kernels against dense float32 (OpenBLAS
 * where the build has it) — and rank them.
 *
 * Candidates: NF4 (block 64, with and without double quantization), FP4, INT8 row symmetric and
 * group-128 asymmetric, LLM.int8 with f32 and with int8 activations, INT8 row with int8
 * activations (W8A8), FP8 E4M3 and E5M2, MXFP4, MXFP8, NVFP4, and (params->sparse24) 2:4 with f32
 * values and 2:4 with NF4 values. Each is quantized with qs_quantize (2:4: magnitude pruning,
 * qs_sp24_prune_compress) exactly as a user would.
 *
 * Error: with activations x (xrows x cols), the relative Frobenius error of y = x . W^T against
 * the f32 weight's, both through qs_matmul (so int8 activations count, and the figure is what the
 * caller gets by quantizing and multiplying with the library); without, the relative Frobenius
 * error of the dequantized (2:4: decompressed) weight against w.
 *
 * Speed: the GEMV (1 row of x) with one thread and with the context's threads, and the GEMM
 * (params->gemm_rows rows of x, the tiled path) with the context's threads, each the minimum
 * over repetitions, as the ratio of the dense f32 time (cblas_sgemv / cblas_sgemm, or the
 * library's dense f32 matmul without BLAS) to the candidate's: above 1 is faster than dense.
 * `kernel` names the kernel the GEMV probe ran (the profiling counters' kernel); a candidate whose
 * GEMV runs a scalar reference kernel on a CPU that has SIMD, or int8 activations without integer
 * dot-product instructions (VNNI, dotprod), is marked slow with the reason.
 */
#ifndef QSPARSE_RECOMMEND_H
#define QSPARSE_RECOMMEND_H

#include "../qsparse.h"

#ifdef __cplusplus
extern "C" {
#endif

#define QS_RECOMMEND_SPEED 0 /* rank by GEMV speed among the candidates within max_error */
#define QS_RECOMMEND_SIZE  1 /* rank by bits per weight among the candidates within max_error */

#define QS_RECOMMEND_MAX_CANDIDATES 32

typedef struct qs_recommend_params {
    int32_t objective; /* QS_RECOMMEND_SPEED (default) or QS_RECOMMEND_SIZE */
    float max_error;   /* relative error bound (> 0); default 0.1 */
    int32_t sparse24;  /* 1 (default): also 2:4 candidates (needs cols % 4 == 0) */
    int32_t gemm_rows; /* rows of x in the GEMM probe (>= 16), default 64; 0: no GEMM probe */
    double probe_seconds; /* time per speed measurement (> 0), default 0.02 */
    int64_t reserved[6];  /* must be zero */
} qs_recommend_params;

typedef struct qs_candidate {
    char label[48];            /* "nf4 b64 + dq", "int8 row / int8 act", "2:4 + nf4", ... */
    int32_t format;            /* QS_FORMAT_* of the values, 0 for 2:4 with f32 values */
    int32_t sparse24;          /* 1 for a 2:4 weight */
    int32_t int8_activations;  /* 1 when the matmul quantizes x to int8 (QS_MATMUL_ACT_INT8) */
    int32_t within_error;      /* error <= max_error */
    double bits_per_weight;    /* every byte of the weight (planes, 2:4 metadata) * 8 / (rows*cols) */
    int64_t bytes;
    double error;              /* relative Frobenius error (output with x, else weight) */
    double gemv_speedup;       /* dense f32 GEMV time / this GEMV time, 1 thread */
    double gemv_speedup_mt;    /* the same with the context's threads */
    double gemm_speedup;       /* dense f32 GEMM / this GEMM, context's threads; 0 if not probed */
    const char *kernel;        /* the GEMV probe's kernel function (static string) */
    int32_t slow;              /* 1 when the hardware has no fast path for it (see reason) */
    int32_t rank;              /* 1 = best for the objective; candidates over max_error follow */
    char reason[96];           /* why slow, or "" */
    int64_t reserved[4];
} qs_candidate;

/** Fill *params with the defaults. */
QS_API void qs_recommend_params_init(qs_recommend_params *params);

/**
 * Measure every candidate for the rows x cols f32 weight w (x: xrows x cols f32 activations, or
 * NULL with xrows 0) and write them, best first, to out[0 ... *count). capacity must be at least
 * QS_RECOMMEND_MAX_CANDIDATES. Takes a few seconds for a 4096 x 4096 weight (the probe's time is
 * params->probe_seconds per measurement).
 * Returns QS_OK; QS_ERR_INVALID_ARG (NULL pointers, sizes < 1, bad params); QS_ERR_NONFINITE
 * (NaN or Inf in w or x); QS_ERR_BUFFER_TOO_SMALL (capacity); QS_ERR_OUT_OF_MEMORY. out and
 * *count are written only on success.
 */
QS_API qs_status qs_recommend(qs_ctx *ctx, const qs_recommend_params *params, const float *w,
                              int64_t rows, int64_t cols, const float *x, int64_t xrows,
                              qs_candidate *out, int64_t capacity, int64_t *count);

#ifdef __cplusplus
}
#endif

#endif /* QSPARSE_RECOMMEND_H */
