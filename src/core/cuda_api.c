/* SPDX-License-Identifier: MIT */
/*
 * The device API (include/qsparse/cuda.h): the same checks as qs_quantize / qs_dequantize /
 * qs_matmul, made without touching device memory, then the CUDA plugin's device operations
 * (include/qsparse/plugin.h), which check what needs the device (where each pointer lives, the
 * 2:4 meta nibbles). This file knows no CUDA type: a stream is a void *.
 */
#include <stdint.h>
#include <string.h>

#include "backend.h"
#include "format_traits.h"
#include "quant_common.h"
#include "qsparse/matmul.h"
#include "qsparse/sparse.h"

/* The CUDA plugin's operations, or NULL with the reason in ctx. */
static const qs_backend_ops *cuda_ops(qs_ctx *ctx, const char *what)
{
    const qs_backend_ops *ops = qs_backend_select(QS_BACKEND_CUDA);

    if (!ops) {
        qs_fail(ctx, QS_ERR_BACKEND, "%s", qs_backend_message(QS_BACKEND_CUDA));
        return NULL;
    }
    if (!ops->quantize_dev || !ops->dequantize_dev || !ops->matmul_dev || !ops->sp24_dev) {
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

/* ---- matmul ---------------------------------------------------------------------------------- */

/* qs_matmul's parameter rules, and the activation modes the GPU does not run. */
static qs_status check_mm_params(qs_ctx *ctx, const qs_matmul_params *p)
{
    qs_status st = qs_matmul_check_params(ctx, p);

    if (st == QS_OK && p->activations == QS_MATMUL_ACT_BF16)
        return qs_fail(ctx, QS_ERR_UNSUPPORTED,
                       "cuda backend: bf16 activations are not implemented (QS_MATMUL_ACT_F32 "
                       "reads a bf16 x as it is)");
    return st;
}

/* A device weight for an N x K product: its fields and capacities (qs_matmul's rules), its
 * pointers' alignment, and for quantized kinds the plain layout *bl (rows N, K or K / 2 columns).
 * Nothing of device memory is read: the 2:4 meta nibbles are the plugin's to check. */
static qs_status check_mm_weight(qs_ctx *ctx, const qs_weight *w, int64_t N, int64_t K,
                                 qs_backend_layout *bl, int *has_layout)
{
    int sparse = w->kind == QS_WEIGHT_SP24 || w->kind == QS_WEIGHT_SP24_QUANT;
    int64_t cols = K, words = (K + 15) / 16;
    qs_status st;

    *has_layout = 0;
    for (size_t i = 0; i < sizeof w->reserved / sizeof w->reserved[0]; i++)
        if (w->reserved[i] != 0)
            return qs_fail(ctx, QS_ERR_INVALID_ARG, "qs_weight reserved fields must be zero");
    if (w->kind == QS_WEIGHT_PACKED)
        return qs_fail(ctx, QS_ERR_UNSUPPORTED,
                       "a packed weight (qs_matmul_pack) is for the CPU backend that packed it; "
                       "qs_cuda_matmul takes the weight it was packed from");
    if (w->kind < QS_WEIGHT_DENSE || w->kind > QS_WEIGHT_SP24_QUANT)
        return qs_fail(ctx, QS_ERR_INVALID_ARG, "unknown weight kind %d", w->kind);
    if (sparse) {
        if (K % 4 != 0)
            return qs_fail(ctx, QS_ERR_SHAPE, "K = %lld is not a multiple of 4 (2:4 weight)",
                           (long long)K);
        cols = K / 2;
        if (!w->meta && N * words > 0)
            return qs_fail(ctx, QS_ERR_INVALID_ARG, "weight meta is NULL");
        if (w->meta_count < N * words)
            return qs_fail(ctx, QS_ERR_BUFFER_TOO_SMALL,
                           "weight meta holds %lld words, an %lld x %lld weight needs %lld",
                           (long long)w->meta_count, (long long)N, (long long)K,
                           (long long)(N * words));
        if (misaligned(w->meta, 2))
            return qs_fail(ctx, QS_ERR_INVALID_ARG, "device pointer meta is not 2-byte aligned");
    } else if (w->meta || w->meta_count) {
        return qs_fail(ctx, QS_ERR_INVALID_ARG, "a %s weight has no meta",
                       w->kind == QS_WEIGHT_DENSE ? "plain" : "quantized dense");
    }
    if (w->kind == QS_WEIGHT_DENSE || w->kind == QS_WEIGHT_SP24) {
        int64_t need;
        if (qs_dtype_size(w->dtype) == 0)
            return qs_fail(ctx, QS_ERR_INVALID_ARG, "unknown weight dtype %d", w->dtype);
        if (w->quant || w->q)
            return qs_fail(ctx, QS_ERR_INVALID_ARG, "a plain or 2:4 weight has no quant / q");
        need = N * cols * qs_dtype_size(w->dtype); /* N * K * 4 was overflow-checked */
        if (!w->data && need > 0)
            return qs_fail(ctx, QS_ERR_INVALID_ARG, "weight data is NULL");
        if (w->data_bytes < need)
            return qs_fail(ctx, QS_ERR_BUFFER_TOO_SMALL,
                           "weight data holds %lld bytes, an %lld x %lld weight needs %lld",
                           (long long)w->data_bytes, (long long)N, (long long)K, (long long)need);
        return check_dtype_ptr(ctx, w->data, w->dtype, "weight data");
    }
    {
        struct qs_layout l;
        if (!w->quant || !w->q)
            return qs_fail(ctx, QS_ERR_INVALID_ARG, "weight %s is NULL", w->quant ? "q" : "quant");
        if (w->data || w->data_bytes || w->dtype)
            return qs_fail(ctx, QS_ERR_INVALID_ARG,
                           "a quantized weight has no data / dtype fields");
        if ((st = qs_layout_compute(ctx, w->quant, N, cols, &l)) != QS_OK ||
            (st = qs_check_planes(ctx, &l, w->q)) != QS_OK ||
            (st = check_plane_alignment(ctx, &l, w->q)) != QS_OK)
            return st;
        qs_backend_layout_fill(&l, w->quant, bl);
        *has_layout = 1;
    }
    return QS_OK;
}

QS_API qs_status qs_cuda_matmul(qs_ctx *ctx, const qs_matmul_params *params, const void *x,
                                int32_t x_dtype, int64_t M, int64_t K, const qs_weight *w,
                                int64_t N, const float *bias, float *y, int64_t y_bytes,
                                void *stream)
{
    const qs_backend_ops *ops;
    qs_matmul_params defaults;
    qs_backend_layout bl;
    int64_t mk, nk, mn;
    int has_layout;
    qs_status st;

    if (!ctx)
        return QS_ERR_INVALID_ARG;
    if (!params) {
        qs_matmul_params_init(&defaults);
        params = &defaults;
    }
    if ((st = check_mm_params(ctx, params)) != QS_OK)
        return st;
    if (!w)
        return qs_fail(ctx, QS_ERR_INVALID_ARG, "w is NULL");
    if (qs_dtype_size(x_dtype) == 0)
        return qs_fail(ctx, QS_ERR_INVALID_ARG, "unknown activation dtype %d", x_dtype);
    if (M < 0 || K < 0 || N < 0)
        return qs_fail(ctx, QS_ERR_INVALID_ARG, "negative shape M=%lld K=%lld N=%lld",
                       (long long)M, (long long)K, (long long)N);
    if (qs_mul_overflow(M, K, &mk) || qs_mul_overflow(N, K, &nk) || qs_mul_overflow(M, N, &mn) ||
        qs_mul_overflow(mk, 4, &mk) || qs_mul_overflow(nk, 4, &nk) || qs_mul_overflow(mn, 4, &mn))
        return qs_fail(ctx, QS_ERR_OVERFLOW, "shape M=%lld K=%lld N=%lld overflows", (long long)M,
                       (long long)K, (long long)N);
    if (!x && mk > 0)
        return qs_fail(ctx, QS_ERR_INVALID_ARG, "x is NULL");
    if (!y && mn > 0)
        return qs_fail(ctx, QS_ERR_INVALID_ARG, "y is NULL");
    if (y_bytes < mn)
        return qs_fail(ctx, QS_ERR_BUFFER_TOO_SMALL, "y holds %lld bytes, %lld needed",
                       (long long)y_bytes, (long long)mn);
    if ((st = check_dtype_ptr(ctx, x, x_dtype, "x")) != QS_OK ||
        (st = check_dtype_ptr(ctx, y, QS_DTYPE_F32, "y")) != QS_OK ||
        (st = check_dtype_ptr(ctx, bias, QS_DTYPE_F32, "bias")) != QS_OK ||
        (st = check_mm_weight(ctx, w, N, K, &bl, &has_layout)) != QS_OK)
        return st;
    if (!(ops = cuda_ops(ctx, "matmul")))
        return QS_ERR_BACKEND;
    ctx->last_error[0] = '\0';
    if ((st = ops->matmul_dev(qs_backend_handle(ctx), params, x, x_dtype, M, K, w,
                              has_layout ? &bl : NULL, N, bias, y, stream)) != QS_OK)
        return ctx->last_error[0] ? st : qs_fail(ctx, st, "cuda backend: matmul failed");
    return qs_ok(ctx);
}

QS_API qs_status qs_cuda_gemv(qs_ctx *ctx, const qs_quant_params *params, const qs_qtensor *w,
                              int64_t rows, int64_t cols, const float *x, float *y, void *stream)
{
    qs_weight wt;

    if (!ctx)
        return QS_ERR_INVALID_ARG;
    if (!params || !w)
        return qs_fail(ctx, QS_ERR_INVALID_ARG, "%s is NULL", params ? "w" : "params");
    memset(&wt, 0, sizeof wt);
    wt.kind = QS_WEIGHT_QUANT;
    wt.quant = params;
    wt.q = w;
    /* y as a 1 x rows product: its capacity is what rows says (the caller's promise) */
    return qs_cuda_matmul(ctx, NULL, x, QS_DTYPE_F32, 1, cols, &wt, rows, NULL, y,
                          rows > INT64_MAX / 4 ? INT64_MAX : rows * 4, stream);
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
