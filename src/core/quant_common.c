/* SPDX-License-Identifier: MIT */
/* Shared pieces of the quantize and dequantize drivers (quant_common.h). */
#include <string.h>

#include "quant_common.h"

void qs_qjob_init(struct qs_qjob *j, const qs_ctx *ctx, const struct qs_layout *l, int32_t dtype,
                  const qs_qtensor *q)
{
    memset(j, 0, sizeof *j);
    j->ctx = ctx;
    j->t = l->traits;
    j->quant = qs_kernel_get(&ctx->k, l->traits->quant_slot);
    j->dequant = qs_kernel_get(&ctx->k, l->traits->dequant_slot);
    j->dtype = dtype;
    j->block = l->block;
    j->unit_rule = l->unit_rule;
    j->rows = l->rows;
    j->cols = l->cols;
    j->n = l->n;
    j->units = l->units;
    j->data = q->data;
    j->chunks_per_row = qs_ceil_div(l->cols, QS_TILE);
    if (l->block > 0)
        j->scales_per_row = qs_ceil_div(l->cols, l->block);
    /* bytes of one row's codes where each row is packed on its own */
    j->row_bytes = l->plane[QS_PLANE_DATA].ndim == 2 ? l->plane[QS_PLANE_DATA].shape[1] : 0;
}

static const char *const plane_names[QS_PLANE_COUNT] = {"data", "scale", "zero_point",
                                                        "nested_scale"};

qs_status qs_check_planes(qs_ctx *ctx, const struct qs_layout *l, const qs_qtensor *q)
{
    void *const ptr[QS_PLANE_COUNT] = {q->data, q->scale, q->zero_point, q->nested_scale};
    const int64_t cap[QS_PLANE_COUNT] = {q->data_bytes, q->scale_bytes, q->zero_point_bytes,
                                         q->nested_scale_bytes};

    for (size_t i = 0; i < sizeof q->reserved / sizeof q->reserved[0]; i++)
        if (q->reserved[i] != 0)
            return qs_fail(ctx, QS_ERR_INVALID_ARG, "qs_qtensor reserved fields must be zero");
    for (int p = 0; p < QS_PLANE_COUNT; p++) {
        if (l->bytes[p] == 0)
            continue;
        if (!ptr[p])
            return qs_fail(ctx, QS_ERR_INVALID_ARG, "plane %s is NULL (%lld bytes needed)",
                           plane_names[p], (long long)l->bytes[p]);
        if (cap[p] < l->bytes[p])
            return qs_fail(ctx, QS_ERR_BUFFER_TOO_SMALL,
                           "plane %s holds %lld bytes, %lld needed", plane_names[p],
                           (long long)cap[p], (long long)l->bytes[p]);
    }
    return QS_OK;
}
