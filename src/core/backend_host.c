/* SPDX-License-Identifier: MIT */
/*
 * The core's half of the plugin ABI (include/qsparse/plugin.h): the host services a plugin
 * reaches the calling context through, the plain layout handed to the operations, and the steps
 * every entry point takes around a backend operation (a missing one refused by name, a failure's
 * message kept or supplied).
 */
#include <stdio.h>
#include <string.h>

#include "backend.h"
#include "format_traits.h"

/* The plain codes are the core's own values: the layout is copied, not translated. */
_Static_assert(QS_DRIVER_BNB4 == QS_BACKEND_FAMILY_BNB4 && QS_DRIVER_INT8 == QS_BACKEND_FAMILY_INT8 &&
                   QS_DRIVER_FP8 == QS_BACKEND_FAMILY_FP8 && QS_DRIVER_MX == QS_BACKEND_FAMILY_MX &&
                   QS_DRIVER_NV == QS_BACKEND_FAMILY_NV,
               "enum qs_driver and QS_BACKEND_FAMILY_* differ: map them in qs_backend_layout_fill");
_Static_assert(QS_UNITS_TENSOR == QS_BACKEND_UNITS_TENSOR &&
                   QS_UNITS_ROWS == QS_BACKEND_UNITS_ROWS &&
                   QS_UNITS_FLAT_BLOCKS == QS_BACKEND_UNITS_FLAT_BLOCKS &&
                   QS_UNITS_ROW_BLOCKS == QS_BACKEND_UNITS_ROW_BLOCKS,
               "enum qs_unit_rule and QS_BACKEND_UNITS_* differ: map them in qs_backend_layout_fill");
_Static_assert(QS_ELEMENT_NF4 == QS_BACKEND_ELEM_NF4 && QS_ELEMENT_FP4 == QS_BACKEND_ELEM_FP4 &&
                   QS_ELEMENT_INT8 == QS_BACKEND_ELEM_INT8 &&
                   QS_ELEMENT_E4M3 == QS_BACKEND_ELEM_E4M3 &&
                   QS_ELEMENT_E5M2 == QS_BACKEND_ELEM_E5M2 && QS_ELEMENT_E2M1 == QS_BACKEND_ELEM_E2M1,
               "enum qs_element and QS_BACKEND_ELEM_* differ: map them in qs_backend_layout_fill");

/* ---- host services --------------------------------------------------------------------------- */

static void host_set_error(qs_backend_ctx *handle, const char *message)
{
    qs_ctx *ctx = qs_backend_context(handle);

    if (ctx && message != ctx->last_error) /* the message may be the context's own already */
        snprintf(ctx->last_error, sizeof ctx->last_error, "%s", message ? message : "");
}

static void *host_scratch_alloc(qs_backend_ctx *handle, size_t bytes)
{
    return qs_scratch_alloc(qs_backend_context(handle), bytes);
}

static void host_scratch_free(qs_backend_ctx *handle, void *p)
{
    qs_scratch_free(qs_backend_context(handle), p);
}

static int32_t host_num_threads(const qs_backend_ctx *handle)
{
    return qs_threads((const qs_ctx *)handle);
}

static int32_t host_nonfinite(const qs_backend_ctx *handle)
{
    return ((const qs_ctx *)handle)->nonfinite;
}

static const qs_backend_host host = {
    .abi_version = QS_BACKEND_ABI_VERSION,
    .set_error = host_set_error,
    .scratch_alloc = host_scratch_alloc,
    .scratch_free = host_scratch_free,
    .num_threads = host_num_threads,
    .nonfinite = host_nonfinite,
};

const qs_backend_host *qs_backend_host_services(void)
{
    return &host;
}

/* ---- the plain layout ------------------------------------------------------------------------ */

void qs_backend_layout_fill(const struct qs_layout *l, const qs_quant_params *p,
                            qs_backend_layout *out)
{
    const struct qs_format_traits *t = l->traits;

    memset(out, 0, sizeof *out);
    out->format = l->format;
    out->family = t->driver;
    out->element = t->element;
    out->unit_rule = l->unit_rule;
    out->block = l->block;
    out->rows = l->rows;
    out->cols = l->cols;
    out->n = l->n;
    out->units = l->units;
    out->elem_max = t->elem_max;
    if (t->flags & QS_TRAIT_ROWSTAT)
        out->flags |= QS_BACKEND_LAYOUT_ROWSTAT;
    if (t->flags & QS_TRAIT_GLOBAL_SCALE)
        out->flags |= QS_BACKEND_LAYOUT_GLOBAL_SCALE;
    if ((t->options & QS_OPT_SYMMETRIC) && !p->symmetric)
        out->flags |= QS_BACKEND_LAYOUT_ZERO_POINT;
    if ((t->options & QS_OPT_DOUBLE_QUANT) && p->double_quant)
        out->flags |= QS_BACKEND_LAYOUT_DOUBLE_QUANT;
    for (int k = 0; k < QS_PLANE_COUNT; k++) {
        const struct qs_plane_layout *s = &l->plane[k];
        qs_plane_info *d = &out->plane[k];
        d->elem = s->elem;
        d->bits = s->bits;
        d->ndim = s->ndim;
        d->shape[0] = s->shape[0];
        d->shape[1] = s->shape[1];
        d->values = s->values;
        d->bytes = l->bytes[k];
    }
}

/* ---- around an operation --------------------------------------------------------------------- */

qs_status qs_backend_unsupported(qs_ctx *ctx, const char *op)
{
    return qs_fail(ctx, QS_ERR_UNSUPPORTED,
                   "%s backend: %s is not implemented (the context was created for this backend, "
                   "so the call runs nowhere else; a CPU or AUTO context runs it on the CPU)",
                   ctx->ops->name, op);
}

qs_status qs_backend_result(qs_ctx *ctx, qs_status st, const char *op)
{
    if (st == QS_OK)
        return qs_ok(ctx);
    if (ctx->last_error[0])
        return st;
    return qs_fail(ctx, st, "%s backend: %s failed", ctx->ops->name, op);
}

qs_status qs_backend_matmul(qs_ctx *ctx, const struct qs_mm_job *job, const qs_matmul_params *p,
                            const void *x, int32_t x_dtype, int64_t M, int64_t K,
                            const qs_weight *w, int64_t N, const float *bias, float *y)
{
    struct qs_call_matmul c;
    struct qs_layout l;
    const qs_backend_layout *wl = &c.plain;
    qs_status st;

    if (!ctx->ops->matmul)
        return qs_backend_unsupported(ctx, "matmul (qs_matmul)");
    c.core = job;
    if (ctx->backend != QS_BACKEND_CPU) { /* the CPU reads the job; a plugin the plain layout */
        if (w->kind == QS_WEIGHT_QUANT || w->kind == QS_WEIGHT_SP24_QUANT) {
            /* checked by qs_matmul already; computed again for the plugin's plain copy */
            st = qs_layout_compute(ctx, w->quant, N,
                                   w->kind == QS_WEIGHT_SP24_QUANT ? K / 2 : K, &l);
            if (st != QS_OK)
                return st;
            qs_backend_layout_fill(&l, w->quant, &c.plain);
        } else {
            wl = NULL;
        }
    }
    ctx->last_error[0] = '\0';
    st = ctx->ops->matmul(qs_backend_handle(ctx), p, x, x_dtype, M, K, w, wl, N, bias, y);
    return qs_backend_result(ctx, st, "matmul (qs_matmul)");
}
