/* SPDX-License-Identifier: MIT */
/*
 * The CUDA plugin's drivers, written in C over an executor: which items (cuda_items.h,
 * cuda_vec.h, cuda_mv.h) run in which order with which arguments, what scratch memory they need,
 * and what comes back to the host. The plugin's executor (cuda_plugin.cu) launches CUDA kernels
 * on a stream; the test executor (tests/test_cuda_items.c) runs the same items on the host over
 * an emulated grid, so the drivers, the index arithmetic and the item code are all checked
 * without a GPU. Like the rest of the plugin they see the library only through the plugin ABI
 * (qsparse/plugin.h): the layout of a call is its plain qs_backend_layout.
 *
 * Host waits: a driver copies a value back to the host (and so waits for the stream) only where
 * the call's result is a host value: the reject policy's verdict, NF4 / FP4 double
 * quantization's offset (qs_qtensor.nested_offset), NVFP4's computed tensor scale
 * (qs_qtensor.global_scale), the 2:4 validations' verdict. qs_cu_quantize_waits and
 * qs_cu_matmul_waits say beforehand whether a call will, so that the plugin can refuse it during
 * CUDA graph capture instead of breaking the capture.
 */
#ifndef QS_CUDA_PIPELINE_H
#define QS_CUDA_PIPELINE_H

#include <stddef.h>
#include <stdint.h>

#include "qsparse/plugin.h"
#include "cuda_mm.h"

/* The kernels an executor launches; `args` points to the item struct named in the comment and
 * `count` counts the items (the executor picks the grid). */
enum qs_cu_kernel {
    QS_CU_K_CVT_IN = 0,      /* qs_cu_cvt_in, count n */
    QS_CU_K_REDUCE,          /* qs_cu_red, count units * chunks (one CUDA block each) */
    QS_CU_K_FLAG,            /* qs_cu_flag, count 1 */
    QS_CU_K_BNB4_QUANT,      /* qs_cu_bnb4_quant, count blocks (one thread each) */
    QS_CU_K_DQ_STATS,        /* qs_cu_dq_stats, count chunks (one CUDA block each) */
    QS_CU_K_DQ_OFFSET,       /* qs_cu_dq_offset, count 1 */
    QS_CU_K_DQ_CENTER,       /* qs_cu_dq_quant, count nb */
    QS_CU_K_DQ_BLOCK,        /* qs_cu_dq_quant, count dyn8 blocks (one thread each) */
    QS_CU_K_INT8_PARAMS,     /* qs_cu_int8_params, count units */
    QS_CU_K_TENSOR_SCALE,    /* qs_cu_tensor_scale, count 1 */
    QS_CU_K_ROWS_QUANT,      /* qs_cu_rows, count rows * spr */
    QS_CU_K_BQ,              /* qs_cu_bq, count blocks (a group of lanes each) */
    QS_CU_K_EWQ_TILE,        /* qs_cu_ewq, count tiles */
    QS_CU_K_EWQ_ELEM,        /* qs_cu_ewq, count elements */
    QS_CU_K_DEQ_TILE,        /* qs_cu_deq, count tiles */
    QS_CU_K_DEQ_ELEM,        /* qs_cu_deq, count elements */
    QS_CU_K_MV,              /* qs_cu_mv, count M * N (one warp per output) */
    QS_CU_K_MM,              /* qs_cu_mm, count 64 x 64 tiles of y (one CTA of 4 warps each) */
    QS_CU_K_SP24_CHECK,      /* qs_cu_sp24_check, count rows * words: the first bad word */
    QS_CU_K_SP24_COMPRESS,   /* qs_cu_sp24, count rows * words */
    QS_CU_K_SP24_DECOMPRESS, /* qs_cu_sp24, count rows * words */
    QS_CU_K_COUNT
};

/* The 2:4 validation: every bad word index i lowers *first (initially UINT64_MAX) to i. */
struct qs_cu_sp24_check {
    struct qs_cu_sp24 a;
    int32_t decompress;
    unsigned long long *first;
};

/* Every call returns 0 on success, else nonzero (the executor keeps its own error). */
struct qs_cu_exec {
    void *user;
    /* the QS_CU_TAB_* tables for items that look codes up (host: src/ref's values; device:
     * NULL, the kernels read constant memory) */
    const float *tab;
    int (*launch)(void *user, int32_t kernel, const void *args, int64_t count);
    void *(*alloc)(void *user, size_t bytes); /* NULL on failure */
    void (*release)(void *user, void *p);
    int (*to_host)(void *user, void *dst, const void *src, size_t bytes);   /* waits */
    int (*to_device)(void *user, void *dst, const void *src, size_t bytes); /* waits */
};

/* Whether qs_cu_quantize will wait for the stream (a host value comes back). */
int qs_cu_quantize_waits(const qs_backend_layout *l, const qs_quant_params *p, int32_t reject);

/* Quantize / dequantize with every pointer (src, dst, the planes of q) in the executor's memory.
 * Arguments were checked by the core. reject: the context's QS_NONFINITE_REJECT. On failure the
 * message is in err. */
qs_status qs_cu_quantize(const struct qs_cu_exec *x, const qs_backend_layout *l,
                         const qs_quant_params *p, const void *src, int32_t dtype, qs_qtensor *q,
                         int32_t reject, char *err, size_t err_len);
qs_status qs_cu_dequantize(const struct qs_cu_exec *x, const qs_backend_layout *l,
                           const qs_quant_params *p, const qs_qtensor *q, void *dst, int32_t dtype,
                           char *err, size_t err_len);

/* 2:4 on f32 device arrays (rows x cols, cols % 4 == 0): op QS_CU_SP24_PRUNE or _COMPRESS fill
 * a->values, a->meta (and a->mask_out); op -1 decompresses a->cvalues / a->cmeta into a->dst.
 * Compress and decompress validate first (QS_ERR_BAD_DATA, nothing written). */
qs_status qs_cu_sp24_run(const struct qs_cu_exec *x, const struct qs_cu_sp24 *a, int64_t rows,
                         char *err, size_t err_len);

/* The dequantize rule of a tensor of layout l in the planes of q (dst, dtype and the offsets
 * left to the caller). */
void qs_cu_deq_setup(const qs_backend_layout *l, const qs_qtensor *q, const float *tab,
                     struct qs_cu_deq *a);

/* ---- matmul (cuda_matmul.c) ------------------------------------------------------------------ */

/* The GEMV description of a weight (every pointer in the executor's memory): a weight of the
 * plugin ABI (w, and wl for quantized kinds) for an N x K product. QS_ERR_UNSUPPORTED for a
 * packed weight. */
qs_status qs_cu_mv_setup(const qs_weight *w, const qs_backend_layout *wl, int64_t N, int64_t K,
                         struct qs_cu_mv *mv, char *err, size_t err_len);

/* Whether qs_cu_matmul will wait for the stream (2:4 meta is validated first). */
int qs_cu_matmul_waits(const qs_weight *w, int64_t M, int64_t N, int64_t K);

/* y (M x N f32) = x (M x K of x_dtype) . W^T + bias within qs_matmul's bound: the GEMV of
 * cuda_mv.h below QS_MATMUL_GEMM_MIN_M rows of x, the tensor-core GEMM of cuda_mm.h from there
 * (the GEMV where a value cannot go through it), every pointer in the executor's memory.
 * Arguments were checked by the core but the 2:4 meta, checked here (QS_ERR_BAD_DATA, y
 * untouched). int8 activations are QS_ERR_UNSUPPORTED. */
qs_status qs_cu_matmul(const struct qs_cu_exec *x, const qs_matmul_params *p, const void *xv,
                       int32_t x_dtype, int64_t M, int64_t K, const qs_weight *w,
                       const qs_backend_layout *wl, int64_t N, const float *bias, float *y,
                       char *err, size_t err_len);

#endif /* QS_CUDA_PIPELINE_H */
