/* SPDX-License-Identifier: MIT */
/*
 * Format queries, parameter validation and the exact layout of every plane of a quantized tensor
 * (the table in include/qsparse.h), all read from the format descriptors (format_traits.c). Every
 * size product is overflow-checked here, before any kernel runs.
 */
#include <string.h>

#include "format_traits.h"

QS_API int32_t qs_format_count(void)
{
    return qs_format_traits_count();
}

QS_API const char *qs_format_name(int32_t format)
{
    const struct qs_format_traits *t = qs_format_traits(format);

    return t ? t->name : NULL;
}

/* ASCII case-insensitive equality, locale-free: "NF4", "Fp8_E4M3" name their formats too. */
static int same_name(const char *a, const char *b)
{
    for (; *a && *b; a++, b++) {
        char x = *a >= 'A' && *a <= 'Z' ? (char)(*a - 'A' + 'a') : *a;
        if (x != *b)
            return 0;
    }
    return *a == *b;
}

QS_API int32_t qs_format_from_name(const char *name)
{
    if (!name)
        return -1;
    for (int32_t f = 1; f <= qs_format_traits_count(); f++)
        if (same_name(name, qs_format_traits(f)->name))
            return f;
    return -1;
}

QS_API int32_t qs_format_block_size(int32_t format)
{
    const struct qs_format_traits *t = qs_format_traits(format);

    return t ? t->block_default : 0;
}

QS_API int32_t qs_format_bits(int32_t format)
{
    const struct qs_format_traits *t = qs_format_traits(format);

    return t ? t->bits : 0;
}

QS_API qs_status qs_format_info_get(int32_t format, qs_format_info *info)
{
    const struct qs_format_traits *t = qs_format_traits(format);

    if (!t || !info)
        return QS_ERR_INVALID_ARG;
    memset(info, 0, sizeof *info);
    info->name = t->name;
    info->bits = t->bits;
    info->block_size = t->block_default;
    info->block_min = t->block_min;
    info->block_max = t->block_max;
    info->blocks = t->blocks;
    info->options = t->options;
    info->global_scale = (t->flags & QS_TRAIT_GLOBAL_SCALE) != 0;
    return QS_OK;
}

QS_API void qs_quant_params_init(qs_quant_params *params, int32_t format)
{
    if (!params)
        return;
    memset(params, 0, sizeof *params);
    params->format = format;
    params->block_size = qs_format_block_size(format);
    params->granularity = QS_GRAN_ROW;
    params->symmetric = 1;
    params->double_quant = 0;
    params->scale_rounding = QS_MX_SCALE_FLOOR;
    params->scale = 0.0f;
}

/* The format's descriptor once every field of *p that applies to it is valid; NULL on failure
 * (the message is in ctx). */
static const struct qs_format_traits *check_params(qs_ctx *ctx, const qs_quant_params *p,
                                                   qs_status *st)
{
    const struct qs_format_traits *t = qs_format_traits(p->format);

    *st = QS_ERR_INVALID_ARG;
    if (!t) {
        qs_fail(ctx, QS_ERR_INVALID_ARG, "unknown format %d", p->format);
        return NULL;
    }
    for (size_t i = 0; i < sizeof p->reserved / sizeof p->reserved[0]; i++)
        if (p->reserved[i] != 0 || p->reserved0 != 0) {
            qs_fail(ctx, QS_ERR_INVALID_ARG, "reserved parameter fields must be zero");
            return NULL;
        }
    if ((*st = t->check(ctx, t, p)) != QS_OK)
        return NULL;
    return t;
}

/* The one size helper of every layout: bytes of `count` elements of `bits` bits each (4: two per
 * byte, the odd one in a byte of its own; 8, 16, 32: whole bytes), or 1 when that overflows int64.
 * Every count a layout derives (blocks, units, rows * blocks per row) also goes through
 * qs_mul_overflow: with cols == 0 the element count n is 0 while rows may be near INT64_MAX, so no
 * per-row count is bounded by n. */
static int plane_bytes(int64_t count, int32_t bits, int64_t *bytes)
{
    if (count < 0)
        return 1;
    if (bits == 4) {
        *bytes = count / 2 + (count & 1);
        return 0;
    }
    return qs_mul_overflow(count, bits / 8, bytes);
}

#define CHECKED(expr)                                                                              \
    do {                                                                                           \
        if (expr)                                                                                  \
            return qs_fail(ctx, QS_ERR_OVERFLOW, "tensor of %lld x %lld: a size overflows int64", \
                           (long long)rows, (long long)cols);                                      \
    } while (0)

/* The first rule of a plane whose condition holds for *p (count QS_COUNT_NONE if none). */
static struct qs_plane_rule plane_rule(const struct qs_format_traits *t, const qs_quant_params *p,
                                       int plane)
{
    static const struct qs_plane_rule unused = {QS_COUNT_NONE, QS_WHEN_ALWAYS, QS_ELEM_NONE, 0};

    for (int i = 0; i < 2; i++) {
        struct qs_plane_rule r = t->plane[plane][i];
        int holds = r.when == QS_WHEN_ALWAYS ||
                    (r.when == QS_WHEN_SINGLE_QUANT && !p->double_quant) ||
                    (r.when == QS_WHEN_DOUBLE_QUANT && p->double_quant) ||
                    (r.when == QS_WHEN_ASYMMETRIC && !p->symmetric);
        if (r.count != QS_COUNT_NONE && holds)
            return r;
    }
    return unused;
}

qs_status qs_layout_compute(qs_ctx *ctx, const qs_quant_params *p, int64_t rows, int64_t cols,
                            struct qs_layout *out)
{
    const struct qs_format_traits *t;
    struct qs_layout l;
    qs_status st;
    int64_t n, per_row, units_per_row = 0;
    int32_t unit_rule;

    if (!p)
        return qs_fail(ctx, QS_ERR_INVALID_ARG, "params is NULL");
    if (rows < 0 || cols < 0)
        return qs_fail(ctx, QS_ERR_INVALID_ARG, "negative shape %lld x %lld", (long long)rows,
                       (long long)cols);
    if (!(t = check_params(ctx, p, &st)))
        return st;

    memset(&l, 0, sizeof l);
    l.format = p->format;
    l.traits = t;
    CHECKED(qs_mul_overflow(rows, cols, &n));
    CHECKED(qs_mul_overflow(n, 4, &per_row)); /* every f32 view of the tensor must fit, too */
    l.n = n;
    l.rows = rows;
    l.cols = cols;

    /* Scale units: the granularity of INT8 picks one of the fixed rules. */
    unit_rule = t->units;
    if (unit_rule == QS_UNITS_GRANULARITY)
        unit_rule = p->granularity == QS_GRAN_TENSOR ? QS_UNITS_TENSOR
                    : p->granularity == QS_GRAN_ROW  ? QS_UNITS_ROWS
                                                     : QS_UNITS_ROW_BLOCKS;
    l.unit_rule = unit_rule;
    switch (unit_rule) {
    case QS_UNITS_TENSOR: l.units = 1; break;
    case QS_UNITS_ROWS: l.units = rows; break;
    case QS_UNITS_FLAT_BLOCKS:
        l.block = p->block_size;
        l.units = qs_ceil_div(n, l.block);
        break;
    default: /* QS_UNITS_ROW_BLOCKS */
        l.block = p->block_size;
        if (t->units == QS_UNITS_GRANULARITY && cols % l.block != 0)
            return qs_fail(ctx, QS_ERR_SHAPE, "%s group size %d does not divide cols %lld",
                           t->name, l.block, (long long)cols);
        units_per_row = qs_ceil_div(cols, l.block);
        CHECKED(qs_mul_overflow(rows, units_per_row, &l.units));
        break;
    }

    for (int pl = 0; pl < QS_PLANE_COUNT; pl++) {
        struct qs_plane_rule r = plane_rule(t, p, pl);
        struct qs_plane_layout *o = &l.plane[pl];
        int64_t line = 0;

        o->shape[0] = o->shape[1] = 1;
        o->elem = r.elem;
        o->bits = r.bits;
        o->ndim = 1;
        switch (r.count) {
        case QS_COUNT_NONE: o->ndim = 0; o->shape[0] = 0; continue;
        case QS_COUNT_ELEMENTS: o->values = n; break;
        case QS_COUNT_ROW_ELEMENTS: o->values = n, o->ndim = 2, line = cols; break;
        case QS_COUNT_UNITS:
            o->values = l.units;
            if (unit_rule == QS_UNITS_ROW_BLOCKS)
                o->ndim = 2, line = units_per_row;
            break;
        default: /* QS_COUNT_NESTED */ o->values = qs_ceil_div(l.units, 256); break;
        }
        if (o->ndim == 2) {
            /* rows never share a byte: each row's values are packed on their own */
            CHECKED(plane_bytes(line, r.bits, &o->shape[1]));
            o->shape[0] = rows;
            CHECKED(qs_mul_overflow(rows, o->shape[1], &o->bytes));
            if (r.bits == 32)
                o->shape[1] = line;
        } else {
            CHECKED(plane_bytes(o->values, r.bits, &o->bytes));
            o->shape[0] = r.bits == 4 ? o->bytes : o->values;
        }
        l.bytes[pl] = o->bytes;
    }
    *out = l;
    return QS_OK;
}

#undef CHECKED

QS_API qs_status qs_quant_size(const qs_quant_params *params, int64_t rows, int64_t cols,
                               int32_t plane, int64_t *bytes)
{
    struct qs_layout l;
    qs_status st;

    if (!params || !bytes || plane < 0 || plane >= QS_PLANE_COUNT)
        return QS_ERR_INVALID_ARG;
    if ((st = qs_layout_compute(NULL, params, rows, cols, &l)) != QS_OK)
        return st;
    *bytes = l.bytes[plane];
    return QS_OK;
}

QS_API qs_status qs_quant_plane_info(qs_ctx *ctx, const qs_quant_params *params, int64_t rows,
                                     int64_t cols, int32_t plane, qs_plane_info *info)
{
    struct qs_layout l;
    qs_status st;

    if (!info || plane < 0 || plane >= QS_PLANE_COUNT)
        return qs_fail(ctx, QS_ERR_INVALID_ARG, "%s", !info ? "info is NULL" : "unknown plane");
    if ((st = qs_layout_compute(ctx, params, rows, cols, &l)) != QS_OK)
        return st;
    memset(info, 0, sizeof *info);
    info->elem = l.plane[plane].elem;
    info->bits = l.plane[plane].bits;
    info->ndim = l.plane[plane].ndim;
    info->shape[0] = l.plane[plane].shape[0];
    info->shape[1] = l.plane[plane].shape[1];
    info->values = l.plane[plane].values;
    info->bytes = l.plane[plane].bytes;
    return ctx ? qs_ok(ctx) : QS_OK;
}
