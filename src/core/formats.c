/* SPDX-License-Identifier: MIT */
/*
 * Format descriptors: names, defaults, parameter validation and the exact byte size of every
 * plane of a quantized tensor (the table in include/qsparse.h; spec/formats.md §5.1, §8, §9, §10,
 * §13, §14). Every size product is overflow-checked here, before any kernel runs.
 */
#include <math.h>
#include <string.h>

#include "internal.h"

static const struct {
    const char *name;
    int32_t block;
    int32_t bits;
} formats[] = {
    [QS_FORMAT_NF4] = {"nf4", 64, 4},           [QS_FORMAT_FP4] = {"fp4", 64, 4},
    [QS_FORMAT_INT8] = {"int8", 0, 8},          [QS_FORMAT_LLM_INT8] = {"llm_int8", 0, 8},
    [QS_FORMAT_FP8_E4M3] = {"fp8_e4m3", 0, 8},  [QS_FORMAT_FP8_E5M2] = {"fp8_e5m2", 0, 8},
    [QS_FORMAT_MXFP4] = {"mxfp4", 32, 4},       [QS_FORMAT_MXFP8] = {"mxfp8", 32, 8},
    [QS_FORMAT_NVFP4] = {"nvfp4", 16, 4},
};

#define FORMAT_MAX QS_FORMAT_NVFP4

static int format_valid(int32_t f)
{
    return f >= 1 && f <= FORMAT_MAX;
}

QS_API int32_t qs_format_count(void)
{
    return FORMAT_MAX;
}

QS_API const char *qs_format_name(int32_t format)
{
    return format_valid(format) ? formats[format].name : NULL;
}

QS_API int32_t qs_format_from_name(const char *name)
{
    if (!name)
        return -1;
    for (int32_t f = 1; f <= FORMAT_MAX; f++)
        if (strcmp(name, formats[f].name) == 0)
            return f;
    return -1;
}

QS_API int32_t qs_format_block_size(int32_t format)
{
    return format_valid(format) ? formats[format].block : 0;
}

QS_API int32_t qs_format_bits(int32_t format)
{
    return format_valid(format) ? formats[format].bits : 0;
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

/* Check the fields that apply to p->format. */
static qs_status check_params(qs_ctx *ctx, const qs_quant_params *p)
{
    if (!format_valid(p->format))
        return qs_fail(ctx, QS_ERR_INVALID_ARG, "unknown format %d", p->format);
    for (size_t i = 0; i < sizeof p->reserved / sizeof p->reserved[0]; i++)
        if (p->reserved[i] != 0 || p->reserved0 != 0)
            return qs_fail(ctx, QS_ERR_INVALID_ARG, "reserved parameter fields must be zero");

    switch (p->format) {
    case QS_FORMAT_NF4:
    case QS_FORMAT_FP4:
        /* bitsandbytes sizes are the powers of two 32...4096; other even sizes are an extension
         * (§5.1), capped at 4096 so that one staging tile always holds whole blocks. */
        if (p->block_size < 2 || p->block_size > QS_TILE || (p->block_size & 1))
            return qs_fail(ctx, QS_ERR_INVALID_ARG,
                           "%s block_size %d: must be even, 2...4096 (bitsandbytes: 32...4096, "
                           "powers of two)", formats[p->format].name, p->block_size);
        if (p->double_quant != 0 && p->double_quant != 1)
            return qs_fail(ctx, QS_ERR_INVALID_ARG, "double_quant must be 0 or 1");
        break;
    case QS_FORMAT_INT8:
        if (p->granularity < QS_GRAN_TENSOR || p->granularity > QS_GRAN_GROUP)
            return qs_fail(ctx, QS_ERR_INVALID_ARG, "unknown granularity %d", p->granularity);
        if (p->symmetric != 0 && p->symmetric != 1)
            return qs_fail(ctx, QS_ERR_INVALID_ARG, "symmetric must be 0 or 1");
        if (p->granularity == QS_GRAN_GROUP && p->block_size < 1)
            return qs_fail(ctx, QS_ERR_INVALID_ARG, "int8 group size %d must be >= 1",
                           p->block_size);
        break;
    case QS_FORMAT_FP8_E4M3:
    case QS_FORMAT_FP8_E5M2:
    case QS_FORMAT_NVFP4:
        if (!(p->scale == 0.0f || (p->scale > 0.0f && isfinite(p->scale))))
            return qs_fail(ctx, QS_ERR_INVALID_ARG,
                           "%s scale %g: must be 0 (from the data) or finite and > 0",
                           formats[p->format].name, (double)p->scale);
        if (p->format == QS_FORMAT_NVFP4 && p->block_size != 16)
            return qs_fail(ctx, QS_ERR_INVALID_ARG, "nvfp4 block_size is 16, got %d",
                           p->block_size);
        break;
    case QS_FORMAT_MXFP4:
    case QS_FORMAT_MXFP8:
        if (p->block_size != 32)
            return qs_fail(ctx, QS_ERR_INVALID_ARG, "%s block_size is 32, got %d",
                           formats[p->format].name, p->block_size);
        if (p->scale_rounding != QS_MX_SCALE_FLOOR && p->scale_rounding != QS_MX_SCALE_RCEIL)
            return qs_fail(ctx, QS_ERR_INVALID_ARG, "unknown MX scale rounding %d",
                           p->scale_rounding);
        break;
    default:
        break;
    }
    return QS_OK;
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

#define PLANE(plane, count, bits) CHECKED(plane_bytes((count), (bits), &l.bytes[plane]))

qs_status qs_layout_compute(qs_ctx *ctx, const qs_quant_params *p, int64_t rows, int64_t cols,
                            struct qs_layout *out)
{
    struct qs_layout l;
    qs_status st;
    int64_t n, per_row;

    if (!p)
        return qs_fail(ctx, QS_ERR_INVALID_ARG, "params is NULL");
    if (rows < 0 || cols < 0)
        return qs_fail(ctx, QS_ERR_INVALID_ARG, "negative shape %lld x %lld", (long long)rows,
                       (long long)cols);
    if ((st = check_params(ctx, p)) != QS_OK)
        return st;

    memset(&l, 0, sizeof l);
    l.format = p->format;
    CHECKED(qs_mul_overflow(rows, cols, &n));
    CHECKED(qs_mul_overflow(n, 4, &per_row)); /* every f32 view of the tensor must fit, too */
    l.n = n;

    switch (p->format) {
    case QS_FORMAT_NF4:
    case QS_FORMAT_FP4:
        l.block = p->block_size;
        l.units = qs_ceil_div(n, l.block);
        PLANE(QS_PLANE_DATA, n, 4);
        if (p->double_quant) {
            PLANE(QS_PLANE_SCALE, l.units, 8);
            PLANE(QS_PLANE_NESTED_SCALE, qs_ceil_div(l.units, 256), 32);
        } else {
            PLANE(QS_PLANE_SCALE, l.units, 32);
        }
        break;
    case QS_FORMAT_INT8:
        PLANE(QS_PLANE_DATA, n, 8);
        if (p->granularity == QS_GRAN_TENSOR) {
            l.block = 0;
            l.units = 1;
        } else if (p->granularity == QS_GRAN_ROW) {
            l.block = 0;
            l.units = rows;
        } else {
            if (cols % p->block_size != 0)
                return qs_fail(ctx, QS_ERR_SHAPE, "int8 group size %d does not divide cols %lld",
                               p->block_size, (long long)cols);
            l.block = p->block_size;
            CHECKED(qs_mul_overflow(rows, cols / p->block_size, &l.units));
        }
        PLANE(QS_PLANE_SCALE, l.units, 32);
        PLANE(QS_PLANE_ZERO_POINT, p->symmetric ? 0 : l.units, 8);
        break;
    case QS_FORMAT_LLM_INT8:
        l.units = rows;
        PLANE(QS_PLANE_DATA, n, 8);
        PLANE(QS_PLANE_SCALE, rows, 32);
        break;
    case QS_FORMAT_FP8_E4M3:
    case QS_FORMAT_FP8_E5M2:
        l.units = 1;
        PLANE(QS_PLANE_DATA, n, 8);
        PLANE(QS_PLANE_SCALE, 1, 32);
        break;
    case QS_FORMAT_MXFP4:
    case QS_FORMAT_MXFP8:
    case QS_FORMAT_NVFP4: {
        int64_t row_data;
        l.block = p->format == QS_FORMAT_NVFP4 ? 16 : 32;
        CHECKED(qs_mul_overflow(rows, qs_ceil_div(cols, l.block), &l.units));
        PLANE(QS_PLANE_SCALE, l.units, 8);
        /* rows never share a byte: each row's codes are packed on their own */
        CHECKED(plane_bytes(cols, p->format == QS_FORMAT_MXFP8 ? 8 : 4, &row_data));
        CHECKED(qs_mul_overflow(rows, row_data, &l.bytes[QS_PLANE_DATA]));
        break;
    }
    default:
        break;
    }
    *out = l;
    return QS_OK;
}

#undef PLANE
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
