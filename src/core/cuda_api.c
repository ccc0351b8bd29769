/* SPDX-License-Identifier: MIT */
/*
 * The device API (include/qsparse/cuda.h): the same checks as qs_quantize / qs_dequantize and the
 * matmul's shape rules, made without touching device memory, then the CUDA plugin's device
 * operations (include/qsparse/plugin.h). This file knows no CUDA type: a stream is a void *.
 */
#include <stdint.h>

#include "backend.h"
#include "format_traits.h"
#include "quant_common.h"
#include "qsparse/sparse.h"

/* The CUDA plugin's operations, or NULL with the reason in ctx. */
static const qs_backend_ops *cuda_ops(qs_ctx *ctx, const char *what)
{
    const qs_backend_ops *ops = qs_backend_select(QS_BACKEND_CUDA);

    if (!ops) {
        qs_fail(ctx, QS_ERR_BACKEND, "%s", qs_backend_message(QS_BACKEND_CUDA));
        return NULL;
    }
    if (!ops->quantize_dev || !ops->dequantize_dev || !ops->gemv_dev || !ops->sp24_dev) {
        qs_fail(ctx, QS_ERR_BACKEND, "%s backend: the plugin has no device entry point for %s",
                ops->name, what);
        return NULL;
    }
    return ops;
}

static int misaligned(const void *p, size_t align)
{
    return ((uintptr_t)p & (align - 1)) != 0;
}

/* Device planes must be aligned for their element type (f32 planes: 4 bytes). */
static qs_status check_plane_alignment(qs_ctx *ctx, const struct qs_layout *l, const qs_qtensor *q)
{
    const void *const ptr[QS_PLANE_COUNT] = {q->data, q->scale, q->zero_point, q->nested_scale};

    for (int k = 0; k < QS_PLANE_COUNT; k++)
        if (l->bytes[k] > 0 && l->plane[k].elem == QS_ELEM_F32 && misaligned(ptr[k], 4))
            return qs_fail(ctx, QS_ERR_INVALID_ARG,
                           "device plane %d is not 4-byte aligned", k);
    return QS_OK;
}

static qs_status check_dtype_ptr(qs_ctx *ctx, const void *p, int32_t dtype, const char *name)
{
    if (misaligned(p, (size_t)qs_dtype_size(dtype)))
        return qs_fail(ctx, QS_ERR_INVALID_ARG, "device pointer %s is not aligned for %s", name,
                       qs_dtype_name(dtype));
    return QS_OK;
}

QS_API qs_status qs_cuda_quantize(qs_ctx *ctx, const qs_quant_params *params, const void *src,
                                  int32_t src_dtype, int64_t rows, int64_t cols, qs_qtensor *q,
                                  void *stream)
{
    const qs_backend_ops *ops;
    struct qs_layout l;
    qs_backend_layout bl;
    qs_status st;

    if (!ctx)
        return QS_ERR_INVALID_ARG;
    if (!params || !q)
        return qs_fail(ctx, QS_ERR_INVALID_ARG, "%s is NULL", params ? "q" : "params");
    if (qs_dtype_size(src_dtype) == 0)
        return qs_fail(ctx, QS_ERR_INVALID_ARG, "unknown source dtype %d", src_dtype);
    if ((st = qs_layout_compute(ctx, params, rows, cols, &l)) != QS_OK)
        return st;
    if (!src && l.n > 0)
        return qs_fail(ctx, QS_ERR_INVALID_ARG, "src is NULL");
    if ((st = qs_check_planes(ctx, &l, q)) != QS_OK ||
        (st = check_plane_alignment(ctx, &l, q)) != QS_OK ||
        (st = check_dtype_ptr(ctx, src, src_dtype, "src")) != QS_OK)
        return st;
    if (!(ops = cuda_ops(ctx, "quantize")))
        return QS_ERR_BACKEND;
    qs_backend_layout_fill(&l, params, &bl);
    ctx->last_error[0] = '\0';
    if ((st = ops->quantize_dev(qs_backend_handle(ctx), &bl, params, src, src_dtype, q,
                                stream)) != QS_OK)
        return ctx->last_error[0] ? st : qs_fail(ctx, st, "cuda backend: quantize failed");
    return qs_ok(ctx);
}

QS_API qs_status qs_cuda_dequantize(qs_ctx *ctx, const qs_quant_params *params,
                                    const qs_qtensor *q, int64_t rows, int64_t cols, void *dst,
                                    int32_t dst_dtype, int64_t dst_bytes, void *stream)
{
    const qs_backend_ops *ops;
    struct qs_layout l;
    qs_backend_layout bl;
    qs_status st;
    int64_t need;

    if (!ctx)
        return QS_ERR_INVALID_ARG;
    if (!params || !q)
        return qs_fail(ctx, QS_ERR_INVALID_ARG, "%s is NULL", params ? "q" : "params");
    if (qs_dtype_size(dst_dtype) == 0)
        return qs_fail(ctx, QS_ERR_INVALID_ARG, "unknown destination dtype %d", dst_dtype);
    if ((st = qs_layout_compute(ctx, params, rows, cols, &l)) != QS_OK)
        return st;
    if ((st = qs_check_planes(ctx, &l, q)) != QS_OK ||
        (st = check_plane_alignment(ctx, &l, q)) != QS_OK)
        return st;
    need = l.n * qs_dtype_size(dst_dtype); /* l.n * 4 was overflow-checked */
    if (!dst && need > 0)
        return qs_fail(ctx, QS_ERR_INVALID_ARG, "dst is NULL");
    if (dst_bytes < need)
        return qs_fail(ctx, QS_ERR_BUFFER_TOO_SMALL, "dst holds %lld bytes, %lld needed",
                       (long long)dst_bytes, (long long)need);
    if ((st = check_dtype_ptr(ctx, dst, dst_dtype, "dst")) != QS_OK)
        return st;
    if (!(ops = cuda_ops(ctx, "dequantize")))
        return QS_ERR_BACKEND;
    qs_backend_layout_fill(&l, params, &bl);
    ctx->last_error[0] = '\0';
    if ((st = ops->dequantize_dev(qs_backend_handle(ctx), &bl, params, q, dst, dst_dtype,
                                  stream)) != QS_OK)
        return ctx->last_error[0] ? st : qs_fail(ctx, st, "cuda backend: dequantize failed");
    return qs_ok(ctx);
}

QS_API qs_status qs_cuda_gemv(qs_ctx *ctx, const qs_quant_params *params, const qs_qtensor *w,
                              int64_t rows, int64_t cols, const float *x, float *y, void *stream)
{
    const qs_backend_ops *ops;
    struct qs_layout l;
    qs_backend_layout bl;
    qs_status st;

    if (!ctx)
        return QS_ERR_INVALID_ARG;
    if (!params || !w)
        return qs_fail(ctx, QS_ERR_INVALID_ARG, "%s is NULL", params ? "w" : "params");
    if (params->format != QS_FORMAT_NF4 && params->format != QS_FORMAT_INT8)
        return qs_fail(ctx, QS_ERR_UNSUPPORTED, "qs_cuda_gemv: format %d is not NF4 or INT8",
                       params->format);
    if ((st = qs_layout_compute(ctx, params, rows, cols, &l)) != QS_OK)
        return st;
    if ((st = qs_check_planes(ctx, &l, w)) != QS_OK ||
        (st = check_plane_alignment(ctx, &l, w)) != QS_OK)
        return st;
    if ((!x && cols > 0) || (!y && rows > 0))
        return qs_fail(ctx, QS_ERR_INVALID_ARG, "%s is NULL", !y && rows > 0 ? "y" : "x");
    if ((st = check_dtype_ptr(ctx, x, QS_DTYPE_F32, "x")) != QS_OK ||
        (st = check_dtype_ptr(ctx, y, QS_DTYPE_F32, "y")) != QS_OK)
        return st;
    if (!(ops = cuda_ops(ctx, "gemv")))
        return QS_ERR_BACKEND;
    qs_backend_layout_fill(&l, params, &bl);
    ctx->last_error[0] = '\0';
    if ((st = ops->gemv_dev(qs_backend_handle(ctx), &bl, params, w, x, y, stream)) != QS_OK)
        return ctx->last_error[0] ? st : qs_fail(ctx, st, "cuda backend: gemv failed");
    return qs_ok(ctx);
}

/* ---- 2:4 ------------------------------------------------------------------------------------- */

/* Shape, sizes and capacities of a 2:4 call; the pointers' alignment. */
static qs_status sp24_check(qs_ctx *ctx, const qs_backend_sp24 *a, int64_t values_bytes,
                            int64_t meta_count, int64_t dense_bytes, int64_t mask_bytes)
{
    int64_t vb, mc;
    qs_status st;

    if ((st = qs_sp24_size(QS_DTYPE_F32, a->rows, a->cols, &vb, &mc)) != QS_OK)
        return qs_fail(ctx, st, "2:4 needs rows, cols >= 0 and cols %% 4 == 0 (got %lld x %lld)",
                       (long long)a->rows, (long long)a->cols);
    if (values_bytes < vb || meta_count < mc)
        return qs_fail(ctx, QS_ERR_BUFFER_TOO_SMALL,
                       "values hold %lld bytes and meta %lld words; %lld and %lld needed",
                       (long long)values_bytes, (long long)meta_count, (long long)vb,
                       (long long)mc);
    if (dense_bytes < a->rows * a->cols * 4)
        return qs_fail(ctx, QS_ERR_BUFFER_TOO_SMALL, "the dense tensor holds %lld bytes, %lld "
                       "needed", (long long)dense_bytes, (long long)(a->rows * a->cols * 4));
    if (a->mask_out && mask_bytes < a->rows * a->cols)
        return qs_fail(ctx, QS_ERR_BUFFER_TOO_SMALL, "mask holds %lld bytes, %lld needed",
                       (long long)mask_bytes, (long long)(a->rows * a->cols));
    if (a->rows * a->cols > 0) {
        int dec = a->op == QS_BACKEND_SP24_DECOMPRESS;
        const void *need[3] = {dec ? (const void *)a->values_in : (const void *)a->w,
                               dec ? (const void *)a->meta_in : (const void *)a->meta,
                               dec ? (const void *)a->dst : (const void *)a->values};
        for (int i = 0; i < 3; i++)
            if (!need[i])
                return qs_fail(ctx, QS_ERR_INVALID_ARG, "a 2:4 buffer is NULL");
    }
    if (misaligned(a->w, 4) || misaligned(a->norms, 4) || misaligned(a->values, 4) ||
        misaligned(a->values_in, 4) || misaligned(a->dst, 4) || misaligned(a->meta, 2) ||
        misaligned(a->meta_in, 2))
        return qs_fail(ctx, QS_ERR_INVALID_ARG, "a 2:4 device pointer is not aligned");
    return QS_OK;
}

static qs_status sp24_call(qs_ctx *ctx, const qs_backend_sp24 *a, int64_t values_bytes,
                           int64_t meta_count, int64_t dense_bytes, int64_t mask_bytes,
                           void *stream)
{
    const qs_backend_ops *ops;
    qs_status st;

    if ((st = sp24_check(ctx, a, values_bytes, meta_count, dense_bytes, mask_bytes)) != QS_OK)
        return st;
    if (!(ops = cuda_ops(ctx, "2:4")))
        return QS_ERR_BACKEND;
    ctx->last_error[0] = '\0';
    if ((st = ops->sp24_dev(qs_backend_handle(ctx), a, stream)) != QS_OK)
        return ctx->last_error[0] ? st : qs_fail(ctx, st, "cuda backend: 2:4 failed");
    return qs_ok(ctx);
}

QS_API qs_status qs_cuda_sp24_prune_compress(qs_ctx *ctx, const float *w, int64_t rows,
                                             int64_t cols, const float *norms, float *values,
                                             int64_t values_bytes, uint16_t *meta,
                                             int64_t meta_count, uint8_t *mask,
                                             int64_t mask_bytes, void *stream)
{
    qs_backend_sp24 a = {.op = QS_BACKEND_SP24_PRUNE, .dtype = QS_DTYPE_F32, .rows = rows,
                         .cols = cols, .w = w, .norms = norms, .values = values, .meta = meta,
                         .mask_out = mask};

    if (!ctx)
        return QS_ERR_INVALID_ARG;
    return sp24_call(ctx, &a, values_bytes, meta_count, INT64_MAX, mask_bytes, stream);
}

QS_API qs_status qs_cuda_sp24_compress(qs_ctx *ctx, const float *w, int64_t rows, int64_t cols,
                                       const uint8_t *mask, float *values, int64_t values_bytes,
                                       uint16_t *meta, int64_t meta_count, void *stream)
{
    qs_backend_sp24 a = {.op = QS_BACKEND_SP24_COMPRESS, .dtype = QS_DTYPE_F32, .rows = rows,
                         .cols = cols, .w = w, .mask_in = mask, .values = values, .meta = meta};

    if (!ctx)
        return QS_ERR_INVALID_ARG;
    return sp24_call(ctx, &a, values_bytes, meta_count, INT64_MAX, 0, stream);
}

QS_API qs_status qs_cuda_sp24_decompress(qs_ctx *ctx, const float *values, const uint16_t *meta,
                                         int64_t meta_count, int64_t rows, int64_t cols,
                                         float *dst, int64_t dst_bytes, void *stream)
{
    qs_backend_sp24 a = {.op = QS_BACKEND_SP24_DECOMPRESS, .dtype = QS_DTYPE_F32, .rows = rows,
                         .cols = cols, .values_in = values, .meta_in = meta, .dst = dst};

    if (!ctx)
        return QS_ERR_INVALID_ARG;
    return sp24_call(ctx, &a, INT64_MAX, meta_count, dst_bytes, 0, stream);
}
