/* SPDX-License-Identifier: MIT */
/*
 * Private helpers of the sparsity drivers (src/sparse/): argument checks shared by the mask,
 * compression and permutation entry points, the fixed row chunking of their parallel loops, and
 * the "kept" test of a tensor element or mask byte (docs/sparsity.md §2.4, §3.5).
 */
#ifndef QS_SPARSE_INTERNAL_H
#define QS_SPARSE_INTERNAL_H

#include "../core/parallel.h"
#include "../ref/ref.h"

/* Elements per parallel task: whole rows, at least one. The split depends on the shape only, and
 * every row is computed independently, so results never depend on the thread count. */
#define QS_SP_TASK_ELEMS (1 << 16)

static inline int64_t qs_sp_rows_per_task(int64_t cols)
{
    return cols >= QS_SP_TASK_ELEMS || cols == 0 ? 1 : QS_SP_TASK_ELEMS / cols;
}

/* rows, cols >= 0 and rows * cols fits in int64 (also times 4 bytes); *n = rows * cols. */
QS_INTERNAL qs_status qs_sp_check_shape(qs_ctx *ctx, int64_t rows, int64_t cols, int64_t *n);
/* 1 <= n < m <= 16, and cols % m == 0 (QS_ERR_SHAPE). */
QS_INTERNAL qs_status qs_sp_check_nm(qs_ctx *ctx, int32_t n, int32_t m, int64_t cols);
/* Wanda norms: non-NULL, every value >= 0 or +Inf, none NaN. */
QS_INTERNAL qs_status qs_sp_check_norms(qs_ctx *ctx, const float *norms, int64_t cols);
/* Byte capacity check of one output. */
QS_INTERNAL qs_status qs_sp_check_capacity(qs_ctx *ctx, const char *what, int64_t have,
                                           int64_t need);

/* 1 if element i of x (a QS_DTYPE_* tensor or a QS_DTYPE_MASK_U8 mask) is kept: a non-zero value
 * in IEEE comparison (NaN kept, +-0 not) or a non-zero byte. */
static inline int qs_sp_kept(const void *x, int32_t dtype, int64_t i)
{
    switch (dtype) {
    /* the caller's tensor may sit at any byte: memcpy loads (ref.h) */
    case QS_DTYPE_F32: return qs_ld_f32((const float *)x + i) != 0.0f;
    case QS_DTYPE_F16:
    case QS_DTYPE_BF16: return (qs_ld_u16((const uint16_t *)x + i) & 0x7FFFu) != 0;
    default: return ((const uint8_t *)x)[i] != 0;
    }
}

/* Index (row * cols + col) of the first group of M with more than N kept, or -1. Scans rows
 * [r0, r1). */
QS_INTERNAL int64_t qs_sp_first_bad_group(const void *x, int32_t dtype, int64_t r0, int64_t r1,
                                          int64_t cols, int32_t n, int32_t m);

#endif /* QS_SPARSE_INTERNAL_H */
