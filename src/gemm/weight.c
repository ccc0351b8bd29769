/* SPDX-License-Identifier: MIT */
/*
 * The weight of a matmul call: the public qs_weight checked against an N x K product and turned
 * into the view every matmul kernel reads (qs_mm_weight, src/core/kernels.h). The geometry comes
 * from the format's layout (formats.c) and descriptor (format_traits.c), never from a switch on
 * the format code: a new format of an existing driver family needs nothing here.
 */
#include <string.h>

#ifdef _OPENMP
#include <omp.h>
#endif

#include "../ref/ref.h"
#include "../ref/sp24_ref.h"
#include "../core/parallel.h"
#include "../core/quant_common.h"
#include "gemm_internal.h"

/* The matmul kernels of plain (and 2:4) f32 / f16 / bf16 values, by QS_DTYPE_*: they have no
 * format descriptor, so this table is theirs. */
static const struct qs_mm_traits plain_mm[] = {
    [QS_DTYPE_F32] = {QS_SLOT_mm_gemv_f32, QS_SLOT_mm_gemv_sp24_f32, -1, QS_A8_NONE},
    [QS_DTYPE_F16] = {QS_SLOT_mm_gemv_f16, QS_SLOT_mm_gemv_sp24_f16, -1, QS_A8_NONE},
    [QS_DTYPE_BF16] = {QS_SLOT_mm_gemv_bf16, QS_SLOT_mm_gemv_sp24_bf16, -1, QS_A8_NONE},
};

/* Words per piece of the parallel meta check (fixed, so the pieces never depend on threads). */
#define META_PIECE 32768

/* Whether the four nibbles of every word w[0 .. n) are valid codes: the table's
 * mm_sp24_meta_bad over pieces of META_PIECE words on the context's threads (the check reads
 * every meta word once per call, as the GEMV kernels do, so it must run at their speed). */
static int words_valid(const qs_ctx *ctx, const uint16_t *w, int64_t n)
{
    int64_t pieces = qs_ceil_div(n, META_PIECE);
    int32_t threads = pieces > 1 ? qs_parallel_threads(ctx, qs_work(n, 2)) : 1;
    uint64_t bad = 0;

    (void)threads;
#ifdef _OPENMP
#pragma omp parallel for num_threads(threads) schedule(static)                                     \
    reduction(|                                                                                    \
              : bad) if (threads > 1 && pieces > 1)
#endif
    for (int64_t p = 0; p < pieces; p++) {
        int64_t len = n - p * META_PIECE < META_PIECE ? n - p * META_PIECE : META_PIECE;
        bad |= (uint64_t)(ctx->k.mm_sp24_meta_bad(w + p * META_PIECE, len) != 0);
    }
    return bad == 0;
}

/* The full words of every row are checked word-parallel first; a failure (or a row's partial
 * last word) is located nibble by nibble for the message. */
qs_status qs_mm_check_meta(qs_ctx *ctx, const uint16_t *meta, int64_t N, int64_t K, int64_t words)
{
    if (words == 0)
        return QS_OK; /* K = 0: no meta; N may be huge (M = 0), so no loop over empty rows */
    if (K % 16 == 0 && words_valid(ctx, meta, N * words))
        return QS_OK;
    for (int64_t r = 0; r < N; r++)
        for (int64_t g = 0; g < 4 * words; g++) {
            unsigned nib = (qs_ld_u16(meta + r * words + g / 4) >> (4 * (g % 4))) & 15u;
            if (g < K / 4 ? !qs_sp24_nibble_valid(nib) : nib != 0)
                return qs_fail(ctx, QS_ERR_BAD_DATA,
                               "2:4 meta of row %lld, group %lld holds the invalid nibble 0x%X",
                               (long long)r, (long long)g, nib);
        }
    return QS_OK;
}

/* A quantized weight of rows x cols (cols = K, or K / 2 kept values): its planes checked against
 * the layout, the view filled from the layout and the descriptor. */
static qs_status quant_view(qs_ctx *ctx, struct qs_mm_job *j, const qs_weight *w, int64_t rows,
                            int64_t cols)
{
    const qs_quant_params *p = w->quant;
    const qs_qtensor *q = w->q;
    const struct qs_plane_layout *data, *scale;
    struct qs_layout l;
    qs_status st;

    if (!p || !q)
        return qs_fail(ctx, QS_ERR_INVALID_ARG, "weight %s is NULL", p ? "q" : "quant");
    if (w->data || w->data_bytes || w->dtype)
        return qs_fail(ctx, QS_ERR_INVALID_ARG, "a quantized weight has no data / dtype fields");
    if ((st = qs_layout_compute(ctx, p, rows, cols, &l)) != QS_OK)
        return st;
    if ((st = qs_check_planes(ctx, &l, q)) != QS_OK)
        return st;
    data = &l.plane[QS_PLANE_DATA];
    scale = &l.plane[QS_PLANE_SCALE];
    j->t = l.traits;
    j->mt = &l.traits->mm;
    j->bits = l.traits->bits;
    /* double-quantized absmax is decoded to f32 before the kernels run (matmul.c) */
    j->scale_bytes = scale->elem == QS_ELEM_F32 || l.bytes[QS_PLANE_NESTED_SCALE] > 0 ? 4 : 1;
    j->w.data = q->data;
    j->w.row_bytes = data->ndim == 2 ? data->shape[1] : 0;
    j->w.scale = q->scale;
    switch (l.unit_rule) {
    case QS_UNITS_TENSOR: j->w.sstride = 0, j->w.group = cols; break;
    case QS_UNITS_ROWS: j->w.sstride = 1, j->w.group = cols; break;
    case QS_UNITS_ROW_BLOCKS:
        j->w.sstride = qs_ceil_div(cols, l.block), j->w.group = l.block;
        break;
    default: j->w.sstride = 0, j->w.group = l.block; break; /* blocks of the flattened tensor */
    }
    j->w.zp = l.bytes[QS_PLANE_ZERO_POINT] > 0 ? q->zero_point : NULL;
    j->w.scale_mul = l.traits->flags & QS_TRAIT_ROWSTAT ? QS_MM_INV127 : 1.0f;
    j->w.s_global = l.traits->flags & QS_TRAIT_GLOBAL_SCALE ? q->global_scale : 0.0f;
    if (l.bytes[QS_PLANE_NESTED_SCALE] > 0) {
        j->dq_codes = q->scale;
        j->dq_nested = q->nested_scale;
        j->dq_offset = q->nested_offset;
    }
    return QS_OK;
}

/* Plain or 2:4 values of w->dtype, rows x cols of them. */
static qs_status plain_view(qs_ctx *ctx, struct qs_mm_job *j, const qs_weight *w, int64_t cols)
{
    int64_t size = qs_dtype_size(w->dtype), need = j->N * cols * size; /* N * K * 4 checked */

    if (size == 0)
        return qs_fail(ctx, QS_ERR_INVALID_ARG, "unknown weight dtype %d", w->dtype);
    if (w->quant || w->q)
        return qs_fail(ctx, QS_ERR_INVALID_ARG, "a plain or 2:4 weight has no quant / q");
    if (!w->data && need > 0)
        return qs_fail(ctx, QS_ERR_INVALID_ARG, "weight data is NULL");
    if (w->data_bytes < need)
        return qs_fail(ctx, QS_ERR_BUFFER_TOO_SMALL,
                       "weight data holds %lld bytes, an %lld x %lld weight needs %lld",
                       (long long)w->data_bytes, (long long)j->N, (long long)j->K, (long long)need);
    j->t = NULL;
    j->mt = &plain_mm[w->dtype];
    j->dtype = w->dtype;
    j->bits = (int32_t)(8 * size);
    j->w.data = w->data;
    j->w.row_bytes = cols * size;
    j->w.group = cols;
    j->w.scale_mul = 1.0f;
    return QS_OK;
}

qs_status qs_mm_weight_build(qs_ctx *ctx, const qs_weight *w, struct qs_mm_job *j)
{
    int sparse;
    int64_t cols = j->K, need;
    qs_status st;
    qs_weight unpacked;
    qs_quant_params quant;
    qs_qtensor q;

    for (size_t i = 0; i < sizeof w->reserved / sizeof w->reserved[0]; i++)
        if (w->reserved[i] != 0)
            return qs_fail(ctx, QS_ERR_INVALID_ARG, "qs_weight reserved fields must be zero");
    if (w->kind == QS_WEIGHT_PACKED) {
        /* the view points into the packed buffer; quant and q are only read below */
        if ((st = qs_mm_packed_weight(ctx, w, j->N, j->K, &unpacked, &quant, &q)) != QS_OK)
            return st;
        w = &unpacked;
    }
    sparse = w->kind == QS_WEIGHT_SP24 || w->kind == QS_WEIGHT_SP24_QUANT;
    if (w->kind < QS_WEIGHT_DENSE || w->kind > QS_WEIGHT_SP24_QUANT)
        return qs_fail(ctx, QS_ERR_INVALID_ARG, "unknown weight kind %d", w->kind);
    j->kind = w->kind;
    if (sparse) {
        if (j->K % 4 != 0)
            return qs_fail(ctx, QS_ERR_SHAPE, "K = %lld is not a multiple of 4 (2:4 weight)",
                           (long long)j->K);
        cols = j->K / 2;
    } else if (w->meta || w->meta_count) {
        return qs_fail(ctx, QS_ERR_INVALID_ARG, "a %s weight has no meta",
                       w->kind == QS_WEIGHT_DENSE ? "plain" : "quantized dense");
    }
    if (w->kind == QS_WEIGHT_DENSE || w->kind == QS_WEIGHT_SP24)
        st = plain_view(ctx, j, w, cols);
    else
        st = quant_view(ctx, j, w, j->N, cols);
    if (st != QS_OK)
        return st;
    j->w.n = j->N;
    j->w.k = cols;
    if (sparse) {
        j->w.words = qs_ceil_div(j->K, 16);
        need = j->N * j->w.words;
        if (!w->meta && need > 0)
            return qs_fail(ctx, QS_ERR_INVALID_ARG, "weight meta is NULL");
        if (w->meta_count < need)
            return qs_fail(ctx, QS_ERR_BUFFER_TOO_SMALL,
                           "weight meta holds %lld words, an %lld x %lld weight needs %lld",
                           (long long)w->meta_count, (long long)j->N, (long long)j->K,
                           (long long)need);
        j->w.meta = w->meta;
        if (!j->meta_bad && (st = qs_mm_check_meta(ctx, w->meta, j->N, j->K, j->w.words)) != QS_OK)
            return st;
    }
    return QS_OK;
}
