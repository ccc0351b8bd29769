/* SPDX-License-Identifier: MIT */
/*
 * libqsparse structured sparsity: N:M masks (magnitude, Wanda, caller scores), the transposable
 * 2:4 TILE mask, N:M validity checks, the plain compressed 2:4 format (kept values + one nibble
 * of metadata per group of 4) with compress and decompress, the converter to the interleaved
 * metadata order of CUTLASS / PyTorch sparse tensor cores and to the compressed-tensors bitmask,
 * 2:4 weights whose kept values are quantized in any format of qsparse.h, SR-STE training
 * helpers, and the channel permutation search. docs/sparsity.md is the definition; section numbers below refer to it.
 *
 * Conventions (in addition to those of qsparse.h):
 * - A weight is a rows x cols row-major matrix whose rows run along the reduction axis K (a
 *   PyTorch Linear weight [out, in]). Groups are M consecutive columns starting at a multiple of
 *   M; cols must be a multiple of M (QS_ERR_SHAPE otherwise, nothing written).
 * - A mask is one byte per element, row-major like the weight: written masks hold 1 (kept) or 0
 *   (pruned); masks read from the caller count any non-zero byte as kept.
 * - Rank order of scores (§2.2): larger first; equal scores keep the lower index; a NaN score,
 *   of either sign, ranks above +Inf and two NaNs are equal; -0.0 equals +0.0.
 * - Every result is identical for every ISA and thread count.
 * - An empty tensor (rows * cols == 0, e.g. rows x 0) is valid everywhere: after the argument
 *   checks the call returns at once, whatever the other dimension, and writes nothing, except
 *   that qs_sp24_permute_search writes the identity order of its cols entries (kept fractions
 *   1.0).
 * - qs_sp24_prune_compress, qs_sp24_compress and qs_sp24_decompress (and qs_sp24_quantize /
 *   qs_sp24_dequantize through them) are backend operations (qsparse.h "Backends"): on a context
 *   whose backend has no 2:4 operation they return QS_ERR_UNSUPPORTED after the argument checks,
 *   empty tensors included, and write nothing. The other functions here run on the CPU.
 */
#ifndef QSPARSE_SPARSE_H
#define QSPARSE_SPARSE_H

#include "../qsparse.h"

#ifdef __cplusplus
extern "C" {
#endif

/* ---------------------------------------------------------------------------------------------
 * Masks (§2)
 * ------------------------------------------------------------------------------------------- */

/* Scores of the N:M mask. */
#define QS_PRUNE_MAGNITUDE 0 /* |w| (cuSPARSELt STRIP, NVIDIA ASP m4n2_1d) */
#define QS_PRUNE_WANDA     1 /* fl(|w| * norms[col]) with w widened exactly to f32 (§2.2) */
#define QS_PRUNE_SCORE     2 /* the tensor itself is the score (signed f32 values compared) */

/* Element type of a mask passed to qs_nm_check (besides the QS_DTYPE_* tensor types). */
#define QS_DTYPE_MASK_U8 100

/**
 * N:M mask along each row (STRIP, §2.2): in every group of M columns keep the N best scores.
 *
 * w is rows x cols of `dtype` (QS_DTYPE_F32/F16/BF16). method is QS_PRUNE_*; for
 * QS_PRUNE_WANDA, norms holds cols f32 values ||X_j||_2 (each >= 0 or +Inf, not NaN; from
 * calibration sums of squares, qs_act_norms of qsparse/calib.h computes them), otherwise
 * norms must be NULL (QS_PRUNE_SCORE needs dtype f32). 1 <= N < M <= 16. mask receives rows*cols
 * bytes (mask_bytes is its capacity).
 *
 * Returns QS_OK; QS_ERR_INVALID_ARG (null pointer, bad N/M/method/dtype, NaN or negative norm);
 * QS_ERR_SHAPE (cols % M != 0); QS_ERR_OVERFLOW; QS_ERR_BUFFER_TOO_SMALL. Nothing is written on
 * error.
 */
QS_API qs_status qs_nm_mask(qs_ctx *ctx, const void *w, int32_t dtype, int64_t rows, int64_t cols,
                            int32_t n, int32_t m, int32_t method, const float *norms,
                            uint8_t *mask, int64_t mask_bytes);

/* TILE search variants (§2.3). */
#define QS_TILE_BEST   0 /* the best of the 90 patterns with two kept per row and per column */
#define QS_TILE_GREEDY 1 /* ASP m4n2_2d_greedy: descending scores, row and column caps of 2 */

/**
 * Transposable 2:4 mask (§2.3): every 4x4 tile keeps two per row and two per column, so the mask
 * is 2:4 for W and for W^T. Scores are |w| (norms NULL) or Wanda scores (norms: cols values).
 * QS_TILE_BEST sums each pattern's kept scores in double in row-major order and takes the first
 * best pattern in the canonical order of §2.3; QS_TILE_GREEDY may keep fewer than 8 of a tile.
 * rows and cols must be multiples of 4 (QS_ERR_SHAPE). Other errors as qs_nm_mask.
 */
QS_API qs_status qs_sp24_tile_mask(qs_ctx *ctx, const void *w, int32_t dtype, int64_t rows,
                                   int64_t cols, const float *norms, int32_t variant,
                                   uint8_t *mask, int64_t mask_bytes);

/**
 * Check that a tensor (QS_DTYPE_F32/F16/BF16: kept = value != 0 in IEEE comparison, so NaN is
 * kept and +-0 are not) or a mask (QS_DTYPE_MASK_U8: kept = non-zero byte) is N:M along its rows
 * (§2.4); with `tile` != 0 (needs N = 2, M = 4, rows % 4 == 0), also that no column of a 4x4 tile
 * keeps more than 2.
 *
 * Returns QS_OK when valid (*first_bad = -1); QS_ERR_BAD_DATA when not, with *first_bad the
 * row-major element index (row * cols + col) of the first offending group's first element (row
 * groups are scanned first, in order) or, for a tile column, of its top element; QS_ERR_SHAPE
 * (cols % M, rows % 4 for tiles); QS_ERR_INVALID_ARG. first_bad may be NULL.
 */
QS_API qs_status qs_nm_check(qs_ctx *ctx, const void *x, int32_t dtype, int64_t rows,
                             int64_t cols, int32_t n, int32_t m, int32_t tile,
                             int64_t *first_bad);

/* ---------------------------------------------------------------------------------------------
 * The compressed 2:4 format (§3)
 * ------------------------------------------------------------------------------------------- */

/**
 * Sizes of the compressed 2:4 form of a rows x cols tensor of `dtype`: values rows * cols/2
 * elements (*values_bytes bytes) and meta rows * ceil(cols/16) uint16 words (*meta_count). Either
 * pointer may be NULL. QS_ERR_SHAPE if cols % 4 != 0, QS_ERR_OVERFLOW, QS_ERR_INVALID_ARG.
 */
QS_API qs_status qs_sp24_size(int32_t dtype, int64_t rows, int64_t cols, int64_t *values_bytes,
                              int64_t *meta_count);

/**
 * Compress w (rows x cols of `dtype`, f32/f16/bf16) to 2:4 (§3.5). With a mask, the kept
 * positions are its non-zero bytes; without (mask NULL), the non-zero values of w (NaN is
 * non-zero). values (same dtype, rows x cols/2) receive the kept elements bit for bit in
 * ascending position; meta (rows x ceil(cols/16) words) one nibble i0 | i1 << 2 per group, group
 * j of a row in bits 4(j%4)... of word j/4, unused nibbles 0. A group with fewer than two kept
 * positions is completed with the lowest unused indices and +0 values (§3.4).
 *
 * Returns QS_OK; QS_ERR_BAD_DATA if a group keeps more than 2 (nothing written; the message
 * names the row and column); QS_ERR_SHAPE (cols % 4); QS_ERR_INVALID_ARG; QS_ERR_OVERFLOW;
 * QS_ERR_BUFFER_TOO_SMALL.
 */
QS_API qs_status qs_sp24_compress(qs_ctx *ctx, const void *w, int32_t dtype, int64_t rows,
                                  int64_t cols, const uint8_t *mask, void *values,
                                  int64_t values_bytes, uint16_t *meta, int64_t meta_count);

/**
 * Prune and compress in one pass: the 2:4 STRIP mask of |w| (norms NULL) or of the Wanda scores
 * (norms: cols values), then the compressed form, as qs_nm_mask followed by qs_sp24_compress
 * would produce. mask (optional, NULL to skip) receives the rows*cols mask bytes. Errors as
 * qs_nm_mask and qs_sp24_compress.
 */
QS_API qs_status qs_sp24_prune_compress(qs_ctx *ctx, const void *w, int32_t dtype, int64_t rows,
                                        int64_t cols, const float *norms, void *values,
                                        int64_t values_bytes, uint16_t *meta, int64_t meta_count,
                                        uint8_t *mask, int64_t mask_bytes);

/**
 * Decompress (§3.5): dst (rows x cols of `dtype`) gets +0 everywhere except the two stored values
 * of each group, at i0 and i1. Every meta nibble must be one of the six valid codes and unused
 * nibbles must be 0 (QS_ERR_BAD_DATA otherwise, nothing written). decompress(compress(w, mask))
 * equals w * mask bit for bit.
 */
QS_API qs_status qs_sp24_decompress(qs_ctx *ctx, const void *values, int32_t dtype,
                                    const uint16_t *meta, int64_t meta_count, int64_t rows,
                                    int64_t cols, void *dst, int64_t dst_bytes);

/* Word size of CUTLASS / PyTorch metadata. */
#define QS_META_INT16 16 /* f16 / bf16 kernels: 4 groups per word, rows % 32 == 0 */
#define QS_META_INT32 32 /* int8 kernels: 8 groups per word (two of ours), rows % 16 == 0 */

/**
 * Reorder plain meta (rows x cols/16 words) into the interleaved layout of the CUTLASS SM80
 * sparse kernels as PyTorch's sparse_semi_structured_from_dense_cutlass writes it (§4): rows
 * permuted inside groups of 32 (16 for int32 words), 2x2 blocks of words swizzled, stored
 * column-major interleaved by 2. For QS_META_INT32 the 32-bit words are formed from two
 * consecutive plain words (low word first) and written as little-endian halves, so dst is the
 * byte image of PyTorch's int32 tensor. dst holds rows * cols / 16 uint16 (dst_count).
 * Shapes: rows % 32 (INT16) or % 16 (INT32), cols % 32 (INT16) or % 64 (INT32), else
 * QS_ERR_SHAPE. meta and dst must not overlap.
 */
QS_API qs_status qs_sp24_meta_to_cutlass(qs_ctx *ctx, const uint16_t *meta, int64_t rows,
                                         int64_t cols, int32_t word_bits, uint16_t *dst,
                                         int64_t dst_count);
/** The inverse of qs_sp24_meta_to_cutlass (same shapes and rules). */
QS_API qs_status qs_sp24_meta_from_cutlass(qs_ctx *ctx, const uint16_t *src, int64_t rows,
                                           int64_t cols, int32_t word_bits, uint16_t *meta,
                                           int64_t meta_count);

/**
 * Plain meta (rows x ceil(cols/16) words) -> the compressed-tensors `sparse-24-bitmask` mask (§5):
 * rows x ceil(cols/8) bytes, column c in byte c/8, bit c%8 (numpy.packbits bitorder="little"),
 * exactly the two positions of each group's nibble set, padding bits 0. Together with the values
 * (which that format also stores in ascending position) this is the interchange form. Meta must
 * be valid (QS_ERR_BAD_DATA otherwise); cols % 4 == 0 (QS_ERR_SHAPE).
 */
QS_API qs_status qs_sp24_meta_to_bitmask(qs_ctx *ctx, const uint16_t *meta, int64_t meta_count,
                                         int64_t rows, int64_t cols, uint8_t *bitmask,
                                         int64_t bitmask_bytes);
/**
 * The inverse: every group of the bitmask must hold exactly two set bits and padding bits must be
 * 0 (QS_ERR_BAD_DATA otherwise, nothing written); meta gets the nibbles of those pairs.
 */
QS_API qs_status qs_sp24_meta_from_bitmask(qs_ctx *ctx, const uint8_t *bitmask,
                                           int64_t bitmask_bytes, int64_t rows, int64_t cols,
                                           uint16_t *meta, int64_t meta_count);

/* ---------------------------------------------------------------------------------------------
 * Sparse + quantized (§3.6)
 * ------------------------------------------------------------------------------------------- */

/*
 * A 2:4 weight whose kept values are quantized: the rows x cols/2 matrix of compressed values is
 * quantized with qs_quantize (so scale blocks count kept values along the compressed row
 * [convention]: an MXFP4 block of 32 values covers 64 dense columns), and the plain meta words
 * are stored alongside.
 */

/** Size of one plane of the quantized values: qs_quant_size(params, rows, cols / 2, ...). */
QS_API qs_status qs_sp24_quant_size(const qs_quant_params *params, int64_t rows, int64_t cols,
                                    int32_t plane, int64_t *bytes);

/**
 * Compress w as qs_sp24_compress (mask NULL: the non-zero values of an already 2:4 tensor) and
 * quantize the kept values into *q with *params. meta receives rows * ceil(cols/16) words.
 * Errors as qs_sp24_compress and qs_quantize; nothing is written on error.
 * QS_ERR_OUT_OF_MEMORY if the scratch copy of the values cannot be allocated.
 */
QS_API qs_status qs_sp24_quantize(qs_ctx *ctx, const qs_quant_params *params, const void *w,
                                  int32_t dtype, int64_t rows, int64_t cols, const uint8_t *mask,
                                  qs_qtensor *q, uint16_t *meta, int64_t meta_count);

/**
 * Dequantize the kept values of *q and scatter them to dense rows x cols of dst_dtype (pruned
 * positions +0). Errors as qs_dequantize and qs_sp24_decompress.
 */
QS_API qs_status qs_sp24_dequantize(qs_ctx *ctx, const qs_quant_params *params,
                                    const qs_qtensor *q, const uint16_t *meta, int64_t meta_count,
                                    int64_t rows, int64_t cols, void *dst, int32_t dst_dtype,
                                    int64_t dst_bytes);

/* ---------------------------------------------------------------------------------------------
 * Training helpers (§6.4, §6.6)
 * ------------------------------------------------------------------------------------------- */

/**
 * One fused SR-STE pass over dense f32 master weights w (rows x cols): recompute the magnitude
 * N:M mask M(w), write w_masked = w * M (pruned positions +0.0) and
 * grad_out = fl(grad + fl(lambda * w)) where M is 0, grad where M is 1 (the decay term
 * lambda * (1 - M) * w of §6.4). Any of w_masked, grad_out, mask may be NULL to skip it; grad may
 * be NULL only when grad_out is NULL; grad_out may equal grad (in place) and w_masked may equal w.
 * n_out is the capacity, in elements, of every non-NULL output (each needs rows * cols).
 * Errors as qs_nm_mask; QS_ERR_INVALID_ARG also for a non-finite lambda or no output at all.
 */
QS_API qs_status qs_nm_srste(qs_ctx *ctx, const float *w, const float *grad, int64_t rows,
                             int64_t cols, int32_t n, int32_t m, float lambda, float *w_masked,
                             float *grad_out, uint8_t *mask, int64_t n_out);

/**
 * dst = x * mask for `count` elements of `dtype` (kept: bit copy; pruned: +0). Used for
 * out-of-place weight masking and ASP-style gradient masking; dst may equal x (in place).
 */
QS_API qs_status qs_nm_apply_mask(qs_ctx *ctx, const void *x, int32_t dtype, const uint8_t *mask,
                                  int64_t count, void *dst, int64_t dst_bytes);

/** Number of positions where masks a and b (count bytes each) disagree on kept/pruned. */
QS_API qs_status qs_nm_mask_flips(qs_ctx *ctx, const uint8_t *a, const uint8_t *b, int64_t count,
                                  int64_t *flips);

/* ---------------------------------------------------------------------------------------------
 * Channel permutation (§6.5)
 * ------------------------------------------------------------------------------------------- */

/**
 * Search a permutation of the input channels (columns) of w (rows x cols f32, cols % 4 == 0) that
 * raises the score kept by 2:4 STRIP pruning: scores |w| (norms NULL) or Wanda scores. Stripe-group
 * local search: for pairs of 4-column groups, every re-partition of their 8 columns into two
 * groups is tried and the best improvement applied, sweep after sweep until none is left, then up
 * to `escapes` random re-partitions that may lose (the best permutation seen is returned).
 * max_sweeps bounds the work (0: 16). seed fixes the random choices; the result is deterministic.
 *
 * perm (cols values): the permuted matrix is W[:, perm[j]] at column j. kept_before/kept_after
 * (optional): kept score / total score of the default and of the returned order (1.0 for an
 * all-zero matrix). QS_ERR_OUT_OF_MEMORY if scratch cannot be allocated.
 */
QS_API qs_status qs_sp24_permute_search(qs_ctx *ctx, const float *w, int64_t rows, int64_t cols,
                                        const float *norms, int32_t max_sweeps, int32_t escapes,
                                        uint64_t seed, int32_t *perm, int64_t perm_count,
                                        double *kept_before, double *kept_after);

#ifdef __cplusplus
}
#endif

#endif /* QSPARSE_SPARSE_H */
