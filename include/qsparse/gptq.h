/* SPDX-License-Identifier: MIT */
/*
 * libqsparse second-order calibration: Hessian statistics H = 2 X^T X of a linear layer's input
 * activations, GPTQ quantization to every 4- and 8-bit grid of qsparse.h that has per-block or
 * per-row scales (NF4, FP4, INT8 by tensor, row or group, MXFP4, NVFP4), and SparseGPT pruning
 * (N:M, 2:4 and unstructured at a density), alone or jointly with a quantization format.
 * docs/calibration.md §14-§16 is the definition.
 *
 * Conventions (in addition to those of qsparse.h):
 * - A weight is rows x cols row-major f32 (a PyTorch Linear weight [out, in]); cols = K, the
 *   Hessian's dimension. Activations are [tokens, K].
 * - The Hessian keeps S = X^T X in double; H = 2 S. Matrix products go through OpenBLAS (ssyrk,
 *   sgemm; the Cholesky factorization through LAPACK dpotrf/dtrtri) when the build found it, so
 *   their last bits depend on the BLAS build and its threads: these results are not under the
 *   bit-identical promise of qsparse.h. Without OpenBLAS the library uses plain C loops.
 * - Outputs are ordinary: a GPTQ result is the planes of qs_quantize (qs_dequantize, qs_matmul
 *   and the tool read it), a SparseGPT result a dense pruned weight (compress it with
 *   qs_sp24_compress) or the planes and meta of qs_sp24_quantize.
 * - A Hessian is used by one thread at a time; its memory comes from the allocator of the context
 *   that created it (a copy of the hooks is kept, as for observers).
 */
#ifndef QSPARSE_GPTQ_H
#define QSPARSE_GPTQ_H

#include "../qsparse.h"

#ifdef __cplusplus
extern "C" {
#endif

/* ---------------------------------------------------------------------------------------------
 * Hessian statistics (§14)
 * ------------------------------------------------------------------------------------------- */

typedef struct qs_hessian qs_hessian;

/* Largest K of a Hessian (its K x K doubles: 8 GiB at this bound). */
#define QS_HESSIAN_MAX_K 32768

/**
 * Create an empty K x K Hessian (1 <= k <= QS_HESSIAN_MAX_K): K * K doubles from ctx's
 * allocator. Returns QS_ERR_INVALID_ARG, QS_ERR_OUT_OF_MEMORY; *out is written only on success.
 */
QS_API qs_status qs_hessian_create(qs_ctx *ctx, int64_t k, qs_hessian **out);
/** Free a Hessian (NULL is accepted). */
QS_API void qs_hessian_destroy(qs_hessian *h);
/** K and the number of activation rows (tokens) seen; either pointer may be NULL. */
QS_API qs_status qs_hessian_info(const qs_hessian *h, int64_t *k, int64_t *tokens);

/**
 * S += X^T X for `rows` activation rows of width `cols` (= K) of `dtype` (f32, f16, bf16).
 * Rows are taken in chunks of 2048: each chunk's X^T X is one f32 ssyrk (f32 products summed in
 * f32 over at most 2048 rows), and the chunks are added in double. When an f32 sum could
 * overflow (chunk rows x amax^2 >= FLT_MAX / 2: activations from about 4e17), the call sums in
 * double instead (exact products, token order), so S, and H = 2 S, stay finite for every finite
 * input. Returns QS_ERR_INVALID_ARG,
 * QS_ERR_SHAPE (cols != K), QS_ERR_NONFINITE (a NaN or Inf activation: nothing is added),
 * QS_ERR_OVERFLOW, QS_ERR_OUT_OF_MEMORY (f16/bf16 and misaligned data are staged). The Hessian
 * is unchanged on error.
 */
QS_API qs_status qs_hessian_update(qs_ctx *ctx, qs_hessian *h, const void *x, int32_t dtype,
                                   int64_t rows, int64_t cols);

/**
 * dst += src (same K, else QS_ERR_SHAPE): statistics of two shards; dst == src doubles them.
 * QS_ERR_OVERFLOW (dst unchanged) when a sum would make H = 2 S pass DBL_MAX, which only
 * matrices given near the double range (qs_hessian_from_matrix, a serialized one) can reach.
 */
QS_API qs_status qs_hessian_merge(qs_ctx *ctx, qs_hessian *dst, const qs_hessian *src);

/** H = 2 X^T X, all K * K doubles row-major (symmetric) into dst (capacity `count`). */
QS_API qs_status qs_hessian_get(qs_ctx *ctx, const qs_hessian *h, double *dst, int64_t count);

/**
 * Create a Hessian from a given symmetric K x K matrix H (row-major doubles: its upper triangle
 * is read) and a token count: the statistics of FILE inputs that hold H instead of activations,
 * and of tests. Every value must be finite and the diagonal >= 0 (QS_ERR_INVALID_ARG).
 */
QS_API qs_status qs_hessian_from_matrix(qs_ctx *ctx, const double *hm, int64_t k, int64_t tokens,
                                        qs_hessian **out);

/* Format version written by qs_hessian_serialize. Readers accept exactly this version. */
#define QS_HESSIAN_FORMAT_VERSION 1

/** Bytes qs_hessian_serialize writes: 32 + 8 K (K + 1) / 2 + 8. */
QS_API qs_status qs_hessian_serialized_size(const qs_hessian *h, int64_t *bytes);

/**
 * Write the Hessian as a little-endian byte string, the same on every platform: magic "QSHS",
 * u32 version, u32 header bytes (32), u64 K, u64 tokens, the upper triangle of S row by row as
 * IEEE doubles, and a 64-bit FNV-1a checksum of everything before it (the conventions of
 * qs_observer_serialize). Returns QS_ERR_BUFFER_TOO_SMALL (nothing written) when capacity is
 * short.
 */
QS_API qs_status qs_hessian_serialize(qs_ctx *ctx, const qs_hessian *h, void *dst,
                                      int64_t capacity, int64_t *written);

/**
 * Create a Hessian from a byte string of qs_hessian_serialize. The string is checked completely
 * before anything is allocated: QS_ERR_UNSUPPORTED for another version, QS_ERR_BAD_DATA for a
 * wrong magic, header size, K out of range, length (truncated or trailing bytes), checksum, a
 * value whose H = 2 S is not finite, or a negative diagonal. *out is written only on success.
 */
QS_API qs_status qs_hessian_deserialize(qs_ctx *ctx, const void *src, int64_t bytes,
                                        qs_hessian **out);

/* ---------------------------------------------------------------------------------------------
 * GPTQ (§15)
 * ------------------------------------------------------------------------------------------- */

/** GPTQ parameters. Initialise with qs_gptq_params_init(), then change what differs. */
typedef struct qs_gptq_params {
    double percdamp;       /* dampening: H += percdamp * mean(diag H) * I; default 0.01, >= 0 */
    int32_t block_size;    /* lazy-update block (columns), 1 ... 4096, default 128 */
    int32_t act_order;     /* 1: columns in order of decreasing diag H (implies static_groups) */
    int32_t static_groups; /* 0 (default): a group's scale is chosen, by the format's own rule,
                              from the updated weights when GPTQ reaches the group's first
                              column; 1: from the original weights (the RTN scales) */
    int32_t scale_search;  /* MXFP4 with dynamic groups: 1 (default) takes each 32-block's E8M0
                              scale from {2^e, 2^(e+1)}, e the OCP floor exponent of the block's
                              current values, whichever gives the smaller GPTQ loss over the
                              block (ties: the scale_rounding rule's); 0: the rule's scale.
                              0 or 1; other formats ignore it */
    int64_t reserved[6];   /* must be zero */
} qs_gptq_params;

/** Fill *params with the defaults. */
QS_API void qs_gptq_params_init(qs_gptq_params *params);

/**
 * Quantize w (rows x cols f32, row-major, cols = K of h) with GPTQ into the planes of *q, as
 * qs_quantize(qparams) lays them out, so qs_dequantize and qs_matmul read the result. Formats:
 * NF4 and FP4 (without double quantization; cols must be a multiple of block_size so that blocks
 * stay inside rows), INT8 (tensor, row or group; symmetric or not), LLM_INT8 (row absmax from
 * w), MXFP4, NVFP4 (per-tensor scale: qparams->scale, or amax / 2688 of w). Scales by tensor
 * or row are fixed from w before the first column; block and group scales as
 * gparams->static_groups (and for MXFP4 gparams->scale_search) say. Every element is rounded
 * with the format's own element rule to its fixed scale, so with H = c * I the result is
 * qs_quantize's bit for bit (MXFP4: with scale_search 0; -0.0 weights are taken as +0.0: later
 * updates could not keep the sign of a zero anyway).
 *
 * *loss (optional) receives sum over rows and columns of (w - q)^2 / [H^-1]_jj / 2 (GPTQ's own
 * objective). Returns QS_OK; QS_ERR_INVALID_ARG (null pointer, bad parameters, non-finite w);
 * QS_ERR_UNSUPPORTED (another format, double quantization); QS_ERR_SHAPE (cols != K, blocks
 * that do not divide cols); QS_ERR_BUFFER_TOO_SMALL; QS_ERR_BAD_DATA (H not positive definite
 * after dampening: raise percdamp; or U, the inverse's f32 Cholesky factor, not finite with a
 * positive normal diagonal, as for a Hessian near either end of the double range; or a loss
 * that is not finite: an error out of float range, e.g. an asymmetric INT8 range past
 * FLT_MAX); QS_ERR_OUT_OF_MEMORY. Nothing is written on error: a QS_OK result has a finite loss
 * and planes the sweep computed from finite values. rows = 0 is a valid call (loss 0).
 */
QS_API qs_status qs_gptq_quantize(qs_ctx *ctx, const qs_gptq_params *gparams,
                                  const qs_quant_params *qparams, const float *w, int64_t rows,
                                  int64_t cols, const qs_hessian *h, qs_qtensor *q, double *loss);

/* ---------------------------------------------------------------------------------------------
 * SparseGPT (§16)
 * ------------------------------------------------------------------------------------------- */

/** SparseGPT parameters. Initialise with qs_sparsegpt_params_init(), then change what differs. */
typedef struct qs_sparsegpt_params {
    double percdamp;     /* as GPTQ, default 0.01 */
    double density;      /* unstructured (m = 0): fraction of weights kept, (0, 1]; default 0.5 */
    int32_t block_size;  /* lazy-update block, default 128; N:M needs a multiple of m */
    int32_t n, m;        /* keep n of every m consecutive columns (1 <= n < m <= 16), default
                            2:4; m = 0: unstructured, per block, at `density` */
    int32_t reserved0;   /* must be zero */
    int64_t reserved[6]; /* must be zero */
} qs_sparsegpt_params;

/** Fill *params with the defaults (2:4). */
QS_API void qs_sparsegpt_params_init(qs_sparsegpt_params *params);

/**
 * Prune w (rows x cols f32, cols = K of h) with SparseGPT: the mask is chosen column group by
 * column group from w^2 / [H^-1]_jj^2 of the updated weights, and the error of each pruned (and,
 * with qparams, quantized) column is spread over the columns not yet visited.
 *
 * Without qparams (NULL): w_out (capacity w_out_count >= rows * cols) receives the dense pruned
 * weight; q and meta must be NULL. With qparams (2:4 only): the kept values are quantized as
 * qs_sp24_quantize would store them (its scale blocks count kept values along the compressed
 * row), into *q and meta (rows * ceil(cols / 16) words); the mask of a scale block's columns is
 * chosen when SparseGPT reaches the block's first column. w_out, if not NULL, then receives the
 * dense dequantized weight. *loss as qs_gptq_quantize.
 *
 * The saliency uses U's diagonal scaled by one power of two when its squares would leave the
 * float range (same ranking); a diagonal spanning more than that range is QS_ERR_BAD_DATA.
 *
 * Returns the statuses of qs_gptq_quantize, and QS_ERR_SHAPE (cols % m, or cols / 2 not a
 * multiple of an NF4/FP4 block), QS_ERR_UNSUPPORTED (qparams with other than 2:4). Nothing (w_out,
 * planes, meta, *loss) is written on error.
 */
QS_API qs_status qs_sparsegpt(qs_ctx *ctx, const qs_sparsegpt_params *sparams,
                              const qs_quant_params *qparams, const float *w, int64_t rows,
                              int64_t cols, const qs_hessian *h, float *w_out, int64_t w_out_count,
                              qs_qtensor *q, uint16_t *meta, int64_t meta_count, double *loss);

#ifdef __cplusplus
}
#endif

#endif /* QSPARSE_GPTQ_H */
