/* SPDX-License-Identifier: MIT */
/*
 * The device API of the CUDA backend: quantize, dequantize, the NF4 / INT8 GEMV and 2:4 on tensors
 * that live in GPU memory, on the caller's CUDA stream. These entry points are in libqsparse
 * itself, which links no CUDA library: they check every argument in the core, then call the
 * CUDA plugin (libqsparse-cuda.so, loaded as qs_backend_load describes). Without a usable plugin
 * they return QS_ERR_BACKEND with the reason in qs_ctx_last_error (the same text as
 * qs_backend_message(QS_BACKEND_CUDA)).
 *
 * Common rules:
 * - ctx may be any context (its backend does not matter); it holds the message of a failure and
 *   its QS_PARAM_NONFINITE policy applies (the reject policy scans the input on the device).
 * - Every tensor pointer (src, dst, x, y and the planes of the qs_qtensor) is a device pointer
 *   in the current device's memory, aligned for its element type (4 bytes for f32 data and f32
 *   planes, 2 for f16/bf16). The qs_qtensor struct itself, params and the scalar fields
 *   (global_scale, nested_offset) are in host memory.
 * - `stream` is a cudaStream_t passed as void * (NULL: the legacy default stream). Work is
 *   enqueued on it and the call returns without waiting, except where a value must come back to
 *   the host: NF4/FP4 double quantization (the mean of the absmax vector, formats.md §6.1), NVFP4
 *   without a given scale (qs_qtensor.global_scale) and the reject policy, which synchronize the
 *   stream. Scratch memory is stream-ordered (cudaMallocAsync).
 * - Results are bit-identical to the CPU backend (src/ref): the same codes, scales and decoded
 *   floats, and for the GEMV the same sum in the reference's order (include/qsparse/matmul.h).
 * - Statuses as qs_quantize / qs_dequantize, plus QS_ERR_BACKEND for a missing plugin or a CUDA
 *   error (its text in the message) and QS_ERR_INVALID_ARG for a misaligned pointer.
 */
#ifndef QSPARSE_CUDA_H
#define QSPARSE_CUDA_H

#include "../qsparse.h"

#ifdef __cplusplus
extern "C" {
#endif

/** qs_quantize on the GPU: src (rows x cols of src_dtype) and the planes of *q on the device. */
QS_API qs_status qs_cuda_quantize(qs_ctx *ctx, const qs_quant_params *params, const void *src,
                                  int32_t src_dtype, int64_t rows, int64_t cols, qs_qtensor *q,
                                  void *stream);

/** qs_dequantize on the GPU: the planes of *q and dst (dst_bytes capacity) on the device. */
QS_API qs_status qs_cuda_dequantize(qs_ctx *ctx, const qs_quant_params *params,
                                    const qs_qtensor *q, int64_t rows, int64_t cols, void *dst,
                                    int32_t dst_dtype, int64_t dst_bytes, void *stream);

/**
 * y = W x on the GPU for a rows x cols weight W quantized as NF4 (double quantization allowed)
 * or INT8 (any granularity, symmetric or not) in the planes of *w: x holds cols f32 values, y
 * receives rows f32 values, each the reference dot product of its row (bit for bit).
 * QS_ERR_UNSUPPORTED for another format.
 */
QS_API qs_status qs_cuda_gemv(qs_ctx *ctx, const qs_quant_params *params, const qs_qtensor *w,
                              int64_t rows, int64_t cols, const float *x, float *y,
                              void *stream);

/*
 * 2:4 on the GPU for f32 tensors (docs/sparsity.md), the device twins of qs_sp24_prune_compress,
 * qs_sp24_compress and qs_sp24_decompress (qsparse/sparse.h): the same layouts (values rows x
 * cols/2, meta rows x ceil(cols/16) uint16 words, the optional mask rows x cols bytes), the same
 * results bit for bit, the same statuses. compress and decompress validate first (a group
 * keeping more than two, an invalid meta nibble: QS_ERR_BAD_DATA, nothing written), which
 * synchronizes the stream. norms (cols f32, Wanda scores) and mask may be NULL.
 */
QS_API qs_status qs_cuda_sp24_prune_compress(qs_ctx *ctx, const float *w, int64_t rows,
                                             int64_t cols, const float *norms, float *values,
                                             int64_t values_bytes, uint16_t *meta,
                                             int64_t meta_count, uint8_t *mask,
                                             int64_t mask_bytes, void *stream);
QS_API qs_status qs_cuda_sp24_compress(qs_ctx *ctx, const float *w, int64_t rows, int64_t cols,
                                       const uint8_t *mask, float *values, int64_t values_bytes,
                                       uint16_t *meta, int64_t meta_count, void *stream);
QS_API qs_status qs_cuda_sp24_decompress(qs_ctx *ctx, const float *values, const uint16_t *meta,
                                         int64_t meta_count, int64_t rows, int64_t cols,
                                         float *dst, int64_t dst_bytes, void *stream);

#ifdef __cplusplus
}
#endif

#endif /* QSPARSE_CUDA_H */
