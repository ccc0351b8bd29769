/* SPDX-License-Identifier: MIT */
/*
 * The CUDA plugin's drivers, written in C over an executor: which items (cuda_items.h) run in
 * which order with which arguments, what scratch memory they need, and what comes back to the
 * host. The plugin's executor (cuda_plugin.cu) launches CUDA kernels on a stream; the test
 * executor (tests/test_cuda_items.c) runs the same items on the host over an emulated grid, so
 * the drivers, the index arithmetic and the item code are all checked without a GPU. Like the
 * rest of the plugin they see the library only through the plugin ABI (qsparse/plugin.h): the
 * layout of a call is its plain qs_backend_layout.
 */
#ifndef QS_CUDA_PIPELINE_H
#define QS_CUDA_PIPELINE_H

#include <stddef.h>
#include <stdint.h>

#include "qsparse/plugin.h"
#include "cuda_items.h"

/* The kernels an executor launches; `args` points to the item struct named in the comment. */
enum qs_cu_kernel {
    QS_CU_K_CVT_IN = 0,   /* qs_cu_cvt_in, count n */
    QS_CU_K_CVT_OUT,      /* qs_cu_cvt_out, count n */
    QS_CU_K_REDUCE,       /* qs_cu_red, count units * chunks (one CUDA block each) */
    QS_CU_K_BNB4_QUANT,   /* qs_cu_bnb4_quant, count blocks */
    QS_CU_K_DQ_CENTER,    /* qs_cu_dq_quant, count nb */
    QS_CU_K_DQ_BLOCK,     /* qs_cu_dq_quant, count ceil(nb / 256) */
    QS_CU_K_DQ_DEQUANT,   /* qs_cu_dq_dequant, count nb */
    QS_CU_K_BNB4_DEQUANT, /* qs_cu_bnb4_dequant, count n */
    QS_CU_K_INT8_PARAMS,  /* qs_cu_int8_params, count units */
    QS_CU_K_INT8_QUANT,   /* qs_cu_int8_quant, count n */
    QS_CU_K_INT8_DEQUANT, /* qs_cu_int8_dequant, count n */
    QS_CU_K_TENSOR_SCALE, /* qs_cu_tensor_scale, count 1 */
    QS_CU_K_FP8_QUANT,    /* qs_cu_fp8, count n */
    QS_CU_K_FP8_DEQUANT,  /* qs_cu_fp8, count n */
    QS_CU_K_ROWS_QUANT,   /* qs_cu_rows, count rows * spr */
    QS_CU_K_ROWS_DEQUANT, /* qs_cu_rows, count n */
    QS_CU_K_GEMV,         /* qs_cu_gemv, count rows (one warp each) */
    QS_CU_K_SP24_CHECK,   /* qs_cu_sp24_check, count rows * words: the first bad word */
    QS_CU_K_SP24_COMPRESS, /* qs_cu_sp24, count rows * words */
    QS_CU_K_SP24_DECOMPRESS, /* qs_cu_sp24, count rows * words */
    QS_CU_K_COUNT
};

/* The 2:4 validation: every bad word index i lowers *first (initially UINT64_MAX) to i. */
struct qs_cu_sp24_check {
    struct qs_cu_sp24 a;
    int32_t decompress;
    unsigned long long *first;
};

/* Device tables (device pointers in the plugin, the host tables in the test). */
struct qs_cu_tables {
    const float *nf4, *fp4, *dyn8, *e2m1;
};

/* Every call returns 0 on success, else nonzero with a message in the executor's own buffer. */
struct qs_cu_exec {
    void *user;
    struct qs_cu_tables tables;
    int (*launch)(void *user, int32_t kernel, const void *args, int64_t count);
    void *(*alloc)(void *user, size_t bytes); /* NULL on failure */
    void (*release)(void *user, void *p);
    int (*to_host)(void *user, void *dst, const void *src, size_t bytes);   /* waits */
    int (*to_device)(void *user, void *dst, const void *src, size_t bytes); /* waits */
};

/* Quantize / dequantize with every pointer (src, dst, the planes of q) in the executor's memory.
 * Arguments were checked by the core. reject: the context's QS_NONFINITE_REJECT. On failure the
 * message is in err. */
qs_status qs_cu_quantize(const struct qs_cu_exec *x, const qs_backend_layout *l,
                         const qs_quant_params *p, const void *src, int32_t dtype, qs_qtensor *q,
                         int32_t reject, char *err, size_t err_len);
qs_status qs_cu_dequantize(const struct qs_cu_exec *x, const qs_backend_layout *l,
                           const qs_quant_params *p, const qs_qtensor *q, void *dst, int32_t dtype,
                           char *err, size_t err_len);
/* y (rows f32) = W x (cols f32) for an NF4 or INT8 weight in the planes of q. */
qs_status qs_cu_gemv_run(const struct qs_cu_exec *x, const qs_backend_layout *l,
                         const qs_quant_params *p, const qs_qtensor *q, const float *xv, float *y,
                         char *err, size_t err_len);

/* 2:4 on f32 device arrays (rows x cols, cols % 4 == 0): op QS_CU_SP24_PRUNE or _COMPRESS fill
 * a->values, a->meta (and a->mask_out); op -1 decompresses a->cvalues / a->cmeta into a->dst.
 * Compress and decompress validate first (QS_ERR_BAD_DATA, nothing written). */
qs_status qs_cu_sp24_run(const struct qs_cu_exec *x, const struct qs_cu_sp24 *a, int64_t rows,
                         char *err, size_t err_len);

#endif /* QS_CUDA_PIPELINE_H */
