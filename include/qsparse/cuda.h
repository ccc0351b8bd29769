/* SPDX-License-Identifier: MIT */
/*
 * The device API of the CUDA backend: quantize, dequantize, matmul and 2:4 on tensors that live
 * in GPU memory, on the caller's CUDA stream. These entry points are in libqsparse itself, which
 * links no CUDA library: they check every argument in the core, then call the CUDA plugin
 * (libqsparse-cuda.so, loaded as qs_backend_load describes). Without a usable plugin they return
 * QS_ERR_BACKEND with the reason in qs_ctx_last_error (the same text as
 * qs_backend_message(QS_BACKEND_CUDA)).
 *
 * Common rules:
 * - ctx may be any context (its backend does not matter); it holds the message of a failure and
 *   its QS_PARAM_NONFINITE policy applies (the reject policy scans the input on the device).
 * - Every tensor pointer (src, dst, x, y, bias, the weight's data and meta and the planes of a
 *   qs_qtensor) is GPU-accessible memory of the current device (cudaMalloc, cudaMallocAsync,
 *   managed or pinned host memory), aligned for its element type (4 bytes for f32 data and f32
 *   planes, 2 for f16/bf16 and 2:4 meta). The plugin asks CUDA where each pointer lives: pageable
 *   host memory or memory of another device is QS_ERR_INVALID_ARG, naming the argument. The
 *   qs_qtensor and qs_weight structs, params and the scalar fields (global_scale, nested_offset)
 *   are in host memory. Kernels read 16 bytes at a time where a pointer is 16-byte aligned
 *   (cudaMalloc's pointers are) and fall back to narrower loads, with the same results,
 *   elsewhere.
 * - `stream` is a cudaStream_t passed as void * (NULL: the legacy default stream). Work is
 *   enqueued on it and the call returns without waiting, with four exceptions, which wait for the
 *   stream once because the result is a host value: NF4/FP4 double quantization (the offset
 *   qs_qtensor.nested_offset, formats.md §6.1; computed on the device), NVFP4 without a given
 *   scale (qs_qtensor.global_scale; computed on the device), the QS_NONFINITE_REJECT policy (the
 *   status), and the 2:4 validations (compress, decompress and matmul with a 2:4 weight: the
 *   status). Those calls are not capture-safe: on a stream that is capturing a CUDA graph they
 *   return QS_ERR_UNSUPPORTED before enqueueing anything, saying why; every other call may be
 *   captured. Scratch memory is stream-ordered (cudaMallocAsync); on a device or driver without
 *   memory pools it falls back to cudaMalloc / cudaFree (which wait) and such a device refuses
 *   calls during capture. Tables (codebooks, the dynamic map) live in the plugin's constant
 *   memory: nothing is copied before a first call on any stream.
 * - Errors: a CUDA error of a launch or a copy made by the call is reported as the call's
 *   (QS_ERR_BACKEND, with CUDA's text); an error the application left pending is neither cleared
 *   nor taken for the call's, and a context already broken by earlier work (a sticky error) is
 *   reported as such.
 * - Results of quantize, dequantize and 2:4 are bit-identical to the CPU backend (src/ref): the
 *   same codes, scales and decoded floats. Matmul follows include/qsparse/matmul.h's definition
 *   within its bound, deterministically (the order of the sum depends on the shape only): see
 *   qs_cuda_matmul.
 * - Statuses as qs_quantize / qs_dequantize / qs_matmul, plus QS_ERR_BACKEND for a missing plugin
 *   or a CUDA error (its text in the message) and QS_ERR_INVALID_ARG for a misaligned pointer or
 *   one that is not memory of the current device.
 */
#ifndef QSPARSE_CUDA_H
#define QSPARSE_CUDA_H

#include "../qsparse.h"
#include "matmul.h"

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
 * qs_matmul on the GPU: y (M x N f32, capacity y_bytes) = x (M x K of x_dtype) . W^T + bias for a
 * weight of any kind qs_matmul takes but QS_WEIGHT_PACKED (plain f32 / f16 / bf16, quantized in
 * every format and option, 2:4 plain or quantized), with every pointer of x, y, bias and w on
 * the device (the qs_weight, its quant params and qtensor struct in host memory). params may be
 * NULL for the defaults; int8 and bf16 activations (QS_MATMUL_ACT_INT8, QS_MATMUL_ACT_BF16) are
 * QS_ERR_UNSUPPORTED on the GPU (a bf16 x is read as it is with QS_MATMUL_ACT_F32). The same checks and statuses as qs_matmul (2:4 meta nibbles on the device, with one wait:
 * QS_ERR_BAD_DATA, y untouched).
 *
 * The sum (the plugin's src/cuda/cuda_mv.h): each stored row is cut into 16-byte tiles, lane l
 * of a warp takes tiles l, l + 32, ...; inside a tile the elements of one scale unit are summed
 * in ascending order with fused multiply-adds on the unscaled element values, then scaled into
 * the lane's accumulator with one fused multiply-add; the 32 lanes are added by a butterfly;
 * y = fl(sum + bias). That is within include/qsparse/matmul.h's bound of the exact product
 * (tested on the host by emulating the lanes and the butterfly), deterministic for a shape, and
 * not the CPU's order, so the last bits may differ from qs_matmul's. Every M runs this GEMV
 * kernel (one warp per output row and weight row, x rows re-reading W from the GPU's caches).
 */
QS_API qs_status qs_cuda_matmul(qs_ctx *ctx, const qs_matmul_params *params, const void *x,
                                int32_t x_dtype, int64_t M, int64_t K, const qs_weight *w,
                                int64_t N, const float *bias, float *y, int64_t y_bytes,
                                void *stream);

/**
 * y = W x on the GPU for a rows x cols weight W quantized in any format (the planes of *w, on
 * the device): x holds cols f32 values, y receives rows f32 values. qs_cuda_matmul with M = 1,
 * K = cols, N = rows, f32 activations and no bias, so within matmul.h's bound, not bit-identical
 * to the CPU.
 */
QS_API qs_status qs_cuda_gemv(qs_ctx *ctx, const qs_quant_params *params, const qs_qtensor *w,
                              int64_t rows, int64_t cols, const float *x, float *y,
                              void *stream);

/*
 * 2:4 on the GPU for f32 tensors (docs/sparsity.md), the device twins of qs_sp24_prune_compress,
 * qs_sp24_compress and qs_sp24_decompress (qsparse/sparse.h): the same layouts (values rows x
 * cols/2, meta rows x ceil(cols/16) uint16 words, the optional mask rows x cols bytes), the same
 * results bit for bit, the same statuses. compress and decompress validate first (a group
 * keeping more than two, an invalid meta nibble: QS_ERR_BAD_DATA, nothing written), which waits
 * for the stream (not capture-safe). norms (cols f32, Wanda scores) and mask may be NULL.
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
