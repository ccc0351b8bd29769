/* SPDX-License-Identifier: MIT */
/* What the quantize and dequantize drivers share: the job description and the plane checks. */
#ifndef QS_CORE_QUANT_COMMON_H
#define QS_CORE_QUANT_COMMON_H

#include <math.h>

#include "format_traits.h"
#include "parallel.h"

/* Absmax values per nested-quantization task: a multiple of the nested block of 256. */
#define QS_DQ_CHUNK (256 * 64)

struct qs_qjob {
    const qs_ctx *ctx;
    const struct qs_format_traits *t;
    void (*quant)(void);   /* the format's element kernels (cast to the driver family's type) */
    void (*dequant)(void);
    int32_t dtype, block, unit_rule, rounding, symmetric, zero, qmin;
    int64_t rows, cols, n, units, chunk, chunks_per_row, scales_per_row, row_bytes, unit_len;
    const void *src;  /* quantize: the tensor; dequantize: the codes */
    void *dst;        /* dequantize: the output tensor */
    uint8_t *data;    /* quantize: the codes */
    float *absmax;    /* NF4/FP4 f32 absmax (plane or scratch) */
    float *fscale;    /* INT8 scales */
    int8_t *zp;       /* INT8 zero points */
    uint8_t *scales;  /* byte scales (MX, NVFP4) or nested codes */
    float *nested;    /* double quantization: absmax2 */
    float scale, mul, offset;
    int32_t stream;   /* dequantize: decode into the tile, then copy_stream_f32 it to dst */
};

/* The work of a quantize or dequantize job for the threading policy (parallel.h): every element
 * read or written in its float dtype, plus about a byte of codes and scales. */
static inline int64_t qs_qjob_work(const struct qs_qjob *j)
{
    return qs_work(j->n, qs_dtype_size(j->dtype) + 1);
}

/* Fill the fields every driver uses. */
QS_INTERNAL void qs_qjob_init(struct qs_qjob *j, const qs_ctx *ctx, const struct qs_layout *l,
                              int32_t dtype, const qs_qtensor *q);
/* Every plane the layout uses must be non-NULL and large enough; reserved fields zero. */
QS_INTERNAL qs_status qs_check_planes(qs_ctx *ctx, const struct qs_layout *l, const qs_qtensor *q);

/* MX and NVFP4 drivers: where every row holds whole blocks (cols a multiple of the block), each
 * row's codes and scales follow the previous row's with nothing between them, so the tensor is
 * one row of n values and its spans of QS_TILE may run across rows. Fewer, longer kernel calls:
 * a 1024-column matrix makes a quarter as many, and a call's fixed costs (the span's offsets, the
 * kernel's first group) were a tenth of NVFP4's and MXFP4's in-cache dequantize time. */
static inline void qs_qjob_flatten_rows(struct qs_qjob *j)
{
    if (j->rows > 1 && j->block > 0 && j->cols % j->block == 0) {
        j->rows = 1;
        j->cols = j->n;
        j->chunks_per_row = qs_ceil_div(j->n, QS_TILE);
        j->scales_per_row = j->n / j->block;
        j->row_bytes = j->n * j->t->bits / 8;
    }
}

#endif /* QS_CORE_QUANT_COMMON_H */
