/* SPDX-License-Identifier: MIT */
/*
 * The compressed 2:4 format (docs/sparsity.md §3): sizes, compress (with a mask or by non-zero
 * values), the fused prune + compress, decompress, the CUTLASS / PyTorch metadata reordering
 * (§4) and 2:4 weights with quantized kept values (§3.6). Every entry point validates its
 * arguments and the data (groups keeping more than two, invalid meta nibbles) in a first pass,
 * so nothing is written on error. Compress, prune + compress and decompress then call the
 * context's backend (qs_backend_ops.sp24): the CPU's, qs_cpu_sp24, runs table kernels over fixed
 * chunks of whole rows.
 */
#include <string.h>

#include "../core/backend.h"
#include "../ref/sp24_ref.h"
#include "sparse_internal.h"

/* ---- sizes and shared checks ----------------------------------------------------------------- */

struct sp24_shape {
    int64_t n;            /* rows * cols */
    int64_t values;       /* rows * cols / 2 elements */
    int64_t values_bytes; /* values * element size */
    int64_t words;        /* meta words per row: ceil(cols / 16) */
    int64_t meta;         /* rows * words */
};

static qs_status sp24_shape(qs_ctx *ctx, int32_t dtype, int64_t rows, int64_t cols,
                            struct sp24_shape *s)
{
    qs_status st;

    if (qs_dtype_size(dtype) == 0)
        return qs_fail(ctx, QS_ERR_INVALID_ARG, "unknown dtype %d", dtype);
    if ((st = qs_sp_check_shape(ctx, rows, cols, &s->n)) != QS_OK)
        return st;
    if (cols % 4 != 0)
        return qs_fail(ctx, QS_ERR_SHAPE,
                       "cols = %lld is not a multiple of 4: 2:4 has no partial groups "
                       "(sparsity.md §3.1)",
                       (long long)cols);
    s->values = s->n / 2;
    s->values_bytes = s->values * qs_dtype_size(dtype);
    s->words = qs_ceil_div(cols, 16);
    s->meta = rows * s->words;
    return QS_OK;
}

QS_API qs_status qs_sp24_size(int32_t dtype, int64_t rows, int64_t cols, int64_t *values_bytes,
                              int64_t *meta_count)
{
    struct sp24_shape s;
    qs_status st;

    if ((st = sp24_shape(NULL, dtype, rows, cols, &s)) != QS_OK)
        return st;
    if (values_bytes)
        *values_bytes = s.values_bytes;
    if (meta_count)
        *meta_count = s.meta;
    return QS_OK;
}

/* Parallel first-pass validation: each task records the first bad index of its rows (or -1);
 * the first in task order wins, so the reported index does not depend on the thread count. */
struct scan_job {
    const void *x;
    int32_t dtype;
    const uint16_t *meta;
    int64_t rows, cols, words, rows_per_task;
    int64_t *bad;
};

static void group_scan_task(void *arg, int64_t t, float *tile)
{
    const struct scan_job *j = arg;
    int64_t r0 = t * j->rows_per_task, r1 = r0 + j->rows_per_task;

    (void)tile;
    j->bad[t] = qs_sp_first_bad_group(j->x, j->dtype, r0, r1 < j->rows ? r1 : j->rows, j->cols,
                                      2, 4);
}

/* First bad nibble of rows [r0, r1): an invalid code in a used nibble, or a non-zero unused one
 * (§3.2). Records r * (4 * words) + g for group (nibble) g of row r. */
static void meta_scan_task(void *arg, int64_t t, float *tile)
{
    const struct scan_job *j = arg;
    int64_t r0 = t * j->rows_per_task, r1 = r0 + j->rows_per_task, groups = j->cols / 4;

    (void)tile;
    j->bad[t] = -1;
    for (int64_t r = r0; r < r1 && r < j->rows; r++)
        for (int64_t g = 0; g < 4 * j->words; g++) {
            unsigned nib = (j->meta[r * j->words + g / 4] >> (4 * (g % 4))) & 15u;
            if (g < groups ? !qs_sp24_nibble_valid(nib) : nib != 0) {
                j->bad[t] = r * 4 * j->words + g;
                return;
            }
        }
}

static qs_status run_scan(qs_ctx *ctx, struct scan_job *j, qs_task_fn *task, int64_t *first_bad)
{
    int64_t tasks = qs_ceil_div(j->rows, j->rows_per_task), work;

    *first_bad = -1;
    if (tasks == 0)
        return QS_OK;
    j->bad = qs_scratch_alloc(ctx, (size_t)tasks * sizeof(int64_t));
    if (!j->bad)
        return qs_fail(ctx, QS_ERR_OUT_OF_MEMORY, "no memory for %lld scan results",
                       (long long)tasks);
    /* the bytes read: the meta words, or the tensor or mask */
    work = j->meta ? qs_work(j->rows * j->words, 2)
                   : qs_work(j->rows * j->cols,
                             j->dtype == QS_DTYPE_MASK_U8 ? 1 : qs_dtype_size(j->dtype));
    qs_parallel_run(ctx, tasks, work, task, NULL, j);
    for (int64_t t = 0; t < tasks && *first_bad < 0; t++)
        *first_bad = j->bad[t];
    qs_scratch_free(ctx, j->bad);
    return QS_OK;
}

/* ---- compress (§3.5 rules 1, 2) -------------------------------------------------------------- */

struct sp24_job {
    const qs_ctx *ctx;
    const void *w;
    int32_t dtype;
    const uint8_t *mask_in;
    const float *norms;
    int64_t rows, cols, words, rows_per_task;
    void *values;
    uint16_t *meta;
    uint8_t *mask_out;
};

static void compress_task(void *arg, int64_t t, float *tile)
{
    const struct sp24_job *j = arg;
    int64_t r0 = t * j->rows_per_task, r1 = r0 + j->rows_per_task;

    (void)tile;
    for (int64_t r = r0; r < r1 && r < j->rows; r++) {
        const uint8_t *mask = j->mask_in ? j->mask_in + r * j->cols : NULL;
        if (j->dtype == QS_DTYPE_F32)
            j->ctx->k.sp24_compress_f32((const float *)j->w + r * j->cols, mask, j->cols,
                                        (float *)j->values + r * j->cols / 2,
                                        j->meta + r * j->words);
        else
            j->ctx->k.sp24_compress_u16((const uint16_t *)j->w + r * j->cols, mask, j->cols,
                                        (uint16_t *)j->values + r * j->cols / 2,
                                        j->meta + r * j->words);
    }
}

/* Pointer and capacity checks shared by compress and prune_compress. */
static qs_status check_outputs(qs_ctx *ctx, const struct sp24_shape *s, const void *w,
                               const void *values, int64_t values_bytes, const uint16_t *meta,
                               int64_t meta_count)
{
    qs_status st;

    if (s->n > 0 && (!w || !values || !meta))
        return qs_fail(ctx, QS_ERR_INVALID_ARG, "%s is NULL",
                       !w ? "w" : !values ? "values" : "meta");
    if ((st = qs_sp_check_capacity(ctx, "values", values_bytes, s->values_bytes)) != QS_OK)
        return st;
    return qs_sp_check_capacity(ctx, "meta", meta_count, s->meta);
}

static qs_status bad_group(qs_ctx *ctx, int64_t bad, int64_t cols, const char *what)
{
    return qs_fail(ctx, QS_ERR_BAD_DATA,
                   "%s is not 2:4: row %lld, columns %lld..%lld keep more than 2 (sparsity.md "
                   "§3.5: nothing is dropped silently)",
                   what, (long long)(bad / cols), (long long)(bad % cols),
                   (long long)(bad % cols + 3));
}

/* A checked call on the context's backend. */
static qs_status sp24_call(qs_ctx *ctx, const qs_backend_sp24 *a, const char *what)
{
    ctx->last_error[0] = '\0';
    return qs_backend_result(ctx, ctx->ops->sp24(qs_backend_handle(ctx), a), what);
}

QS_API qs_status qs_sp24_compress(qs_ctx *ctx, const void *w, int32_t dtype, int64_t rows,
                                  int64_t cols, const uint8_t *mask, void *values,
                                  int64_t values_bytes, uint16_t *meta, int64_t meta_count)
{
    struct sp24_shape s;
    qs_backend_sp24 a;
    struct scan_job scan;
    int64_t bad;
    qs_status st;

    if (!ctx)
        return QS_ERR_INVALID_ARG;
    if ((st = sp24_shape(ctx, dtype, rows, cols, &s)) != QS_OK)
        return st;
    if ((st = check_outputs(ctx, &s, w, values, values_bytes, meta, meta_count)) != QS_OK)
        return st;
    if (!ctx->ops->sp24)
        return qs_backend_unsupported(ctx, "sp24 (qs_sp24_compress)");
    if (s.n == 0)
        return qs_ok(ctx);
    scan = (struct scan_job){mask ? (const void *)mask : w, mask ? QS_DTYPE_MASK_U8 : dtype,
                             NULL, rows, cols, s.words, qs_sp_rows_per_task(cols), NULL};
    if ((st = run_scan(ctx, &scan, group_scan_task, &bad)) != QS_OK)
        return st;
    if (bad >= 0)
        return bad_group(ctx, bad, cols, mask ? "the mask" : "the tensor");
    a = (qs_backend_sp24){.op = QS_BACKEND_SP24_COMPRESS, .dtype = dtype, .rows = rows,
                          .cols = cols, .w = w, .mask_in = mask, .values = values, .meta = meta};
    return sp24_call(ctx, &a, "sp24 (qs_sp24_compress)");
}

/* ---- prune + compress ------------------------------------------------------------------------ */

/* Mask bytes of one staged segment of a 16-bit row (the segment is at most QS_TILE long). */
static void prune_task(void *arg, int64_t t, float *tile)
{
    const struct sp24_job *j = arg;
    int64_t r0 = t * j->rows_per_task, r1 = r0 + j->rows_per_task;
    uint8_t seg_mask[QS_TILE];

    for (int64_t r = r0; r < r1 && r < j->rows; r++) {
        if (j->dtype == QS_DTYPE_F32) {
            const float *x = (const float *)j->w + r * j->cols;
            j->ctx->k.sp24_prune_f32(x, j->norms, j->cols, (float *)j->values + r * j->cols / 2,
                                     j->meta + r * j->words);
            if (j->mask_out)
                j->ctx->k.sp24_mask_f32(x, j->norms, j->cols, j->mask_out + r * j->cols);
            continue;
        }
        /* 16-bit: the mask from the exact f32 widening, then the values copied as bits.
         * Segments of QS_TILE columns start at multiples of 16, so meta words stay whole. */
        for (int64_t c = 0; c < j->cols; c += QS_TILE) {
            int64_t len = j->cols - c < QS_TILE ? j->cols - c : QS_TILE;
            const float *x = qs_stage_f32(j->ctx, j->w, j->dtype, r * j->cols + c, len, tile);
            uint8_t *m = j->mask_out ? j->mask_out + r * j->cols + c : seg_mask;
            j->ctx->k.sp24_mask_f32(x, j->norms ? j->norms + c : NULL, len, m);
            j->ctx->k.sp24_compress_u16((const uint16_t *)j->w + r * j->cols + c, m, len,
                                        (uint16_t *)j->values + (r * j->cols + c) / 2,
                                        j->meta + r * j->words + c / 16);
        }
    }
}

QS_API qs_status qs_sp24_prune_compress(qs_ctx *ctx, const void *w, int32_t dtype, int64_t rows,
                                        int64_t cols, const float *norms, void *values,
                                        int64_t values_bytes, uint16_t *meta, int64_t meta_count,
                                        uint8_t *mask, int64_t mask_bytes)
{
    struct sp24_shape s;
    qs_backend_sp24 a;
    qs_status st;

    if (!ctx)
        return QS_ERR_INVALID_ARG;
    if ((st = sp24_shape(ctx, dtype, rows, cols, &s)) != QS_OK)
        return st;
    if ((st = check_outputs(ctx, &s, w, values, values_bytes, meta, meta_count)) != QS_OK)
        return st;
    if (norms && (st = qs_sp_check_norms(ctx, norms, cols)) != QS_OK)
        return st;
    if (mask && (st = qs_sp_check_capacity(ctx, "mask", mask_bytes, s.n)) != QS_OK)
        return st;
    if (!ctx->ops->sp24)
        return qs_backend_unsupported(ctx, "sp24 (qs_sp24_prune_compress)");
    if (s.n == 0)
        return qs_ok(ctx);
    a = (qs_backend_sp24){.op = QS_BACKEND_SP24_PRUNE, .dtype = dtype, .rows = rows,
                          .cols = cols, .w = w, .norms = norms, .values = values, .meta = meta,
                          .mask_out = mask};
    return sp24_call(ctx, &a, "sp24 (qs_sp24_prune_compress)");
}

/* ---- decompress (§3.5 rule 3) ---------------------------------------------------------------- */

static void decompress_task(void *arg, int64_t t, float *tile)
{
    const struct sp24_job *j = arg;
    int64_t r0 = t * j->rows_per_task, r1 = r0 + j->rows_per_task;

    (void)tile;
    for (int64_t r = r0; r < r1 && r < j->rows; r++) {
        const uint16_t *meta = j->meta + r * j->words;
        if (j->dtype == QS_DTYPE_F32)
            j->ctx->k.sp24_decompress_f32((const float *)j->w + r * j->cols / 2, meta, j->cols,
                                          (float *)j->values + r * j->cols);
        else
            j->ctx->k.sp24_decompress_u16((const uint16_t *)j->w + r * j->cols / 2, meta,
                                          j->cols, (uint16_t *)j->values + r * j->cols);
    }
}

/* Validate meta words of a rows x cols tensor (§3.2); QS_ERR_BAD_DATA names the first bad one. */
static qs_status check_meta(qs_ctx *ctx, const uint16_t *meta, const struct sp24_shape *s,
                            int64_t rows, int64_t cols)
{
    struct scan_job scan = {NULL, 0, meta, rows, cols, s->words, qs_sp_rows_per_task(cols), NULL};
    int64_t bad;
    qs_status st;

    if ((st = run_scan(ctx, &scan, meta_scan_task, &bad)) != QS_OK)
        return st;
    if (bad >= 0) {
        int64_t r = bad / (4 * s->words), g = bad % (4 * s->words);
        unsigned nib = (meta[r * s->words + g / 4] >> (4 * (g % 4))) & 15u;
        return qs_fail(ctx, QS_ERR_BAD_DATA,
                       "invalid 2:4 metadata: row %lld, group %lld holds nibble 0x%X (%s)",
                       (long long)r, (long long)g, nib,
                       4 * g < cols ? "not one of 4, 8, 9, C, D, E" : "unused nibbles must be 0");
    }
    return QS_OK;
}

QS_API qs_status qs_sp24_decompress(qs_ctx *ctx, const void *values, int32_t dtype,
                                    const uint16_t *meta, int64_t meta_count, int64_t rows,
                                    int64_t cols, void *dst, int64_t dst_bytes)
{
    struct sp24_shape s;
    qs_backend_sp24 a;
    qs_status st;

    if (!ctx)
        return QS_ERR_INVALID_ARG;
    if ((st = sp24_shape(ctx, dtype, rows, cols, &s)) != QS_OK)
        return st;
    if (s.n > 0 && (!values || !meta || !dst))
        return qs_fail(ctx, QS_ERR_INVALID_ARG, "%s is NULL",
                       !values ? "values" : !meta ? "meta" : "dst");
    if ((st = qs_sp_check_capacity(ctx, "meta", meta_count, s.meta)) != QS_OK)
        return st;
    if ((st = qs_sp_check_capacity(ctx, "dst", dst_bytes, s.n * qs_dtype_size(dtype))) != QS_OK)
        return st;
    if (!ctx->ops->sp24)
        return qs_backend_unsupported(ctx, "sp24 (qs_sp24_decompress)");
    if (s.n == 0)
        return qs_ok(ctx);
    if ((st = check_meta(ctx, meta, &s, rows, cols)) != QS_OK)
        return st;
    a = (qs_backend_sp24){.op = QS_BACKEND_SP24_DECOMPRESS, .dtype = dtype, .rows = rows,
                          .cols = cols, .values_in = values, .meta_in = meta, .dst = dst};
    return sp24_call(ctx, &a, "sp24 (qs_sp24_decompress)");
}

/* ---- the CPU backend's 2:4 (qs_backend_ops.sp24) --------------------------------------------- */

qs_status qs_cpu_sp24(qs_ctx *ctx, const qs_backend_sp24 *a)
{
    struct sp24_job j = {ctx, a->w, a->dtype, a->mask_in, a->norms, a->rows, a->cols,
                         qs_ceil_div(a->cols, 16), qs_sp_rows_per_task(a->cols), a->values,
                         a->meta, a->mask_out};
    int64_t tasks = qs_ceil_div(a->rows, j.rows_per_task), n = a->rows * a->cols;
    int64_t esize = qs_dtype_size(a->dtype);

    /* the work: each element read and its kept value written (a mask byte more for prune);
     * rows * cols was checked for overflow by the entry point */
    switch (a->op) {
    case QS_BACKEND_SP24_COMPRESS:
        qs_parallel_run(ctx, tasks, qs_work(n, 2 * esize), compress_task, NULL, &j);
        break;
    case QS_BACKEND_SP24_PRUNE:
        qs_parallel_run(ctx, tasks, qs_work(n, 2 * esize + 1), prune_task, NULL, &j);
        break;
    case QS_BACKEND_SP24_DECOMPRESS:
        /* the job's names are compress's: its input in w, its output in values */
        j.w = a->values_in;
        j.meta = (uint16_t *)a->meta_in; /* read only by decompress_task */
        j.values = a->dst;
        qs_parallel_run(ctx, tasks, qs_work(n, 2 * esize), decompress_task, NULL, &j);
        break;
    default: return qs_fail(ctx, QS_ERR_INVALID_ARG, "unknown 2:4 operation %d", a->op);
    }
    return QS_OK;
}

/* ---- CUTLASS / PyTorch metadata order (§4) --------------------------------------------------- */

/* Position of plain word (r, c) of an m-row matrix of 16- or 32-bit meta words in the
 * interleaved layout: rows permuted inside groups of 32 (16 for int32), 2x2 blocks of words
 * swizzled, then column-major interleaved by 2 (PyTorch _calculate_meta_reordering_scatter_offsets,
 * which re-implements CUTLASS reorder_meta). */
static int64_t cutlass_offset(int64_t r, int64_t c, int64_t m, int32_t word_bits)
{
    int64_t group = word_bits == 16 ? 32 : 16, interweave = word_bits == 16 ? 4 : 2;
    int64_t dr = r / group * group + (r % 8) * interweave + (r % group) / 8, dc = c;

    if (dr % 2 == 0 && dc % 2 == 1) {
        dr++;
        dc--;
    } else if (dr % 2 == 1 && dc % 2 == 0) {
        dr--;
        dc++;
    }
    return dc / 2 * m * 2 + dr * 2 + dc % 2;
}

static qs_status check_cutlass(qs_ctx *ctx, const uint16_t *a, const uint16_t *b, int64_t rows,
                               int64_t cols, int32_t word_bits, int64_t have, int64_t *count)
{
    int64_t n;
    qs_status st;

    if (!ctx)
        return QS_ERR_INVALID_ARG;
    if (word_bits != QS_META_INT16 && word_bits != QS_META_INT32)
        return qs_fail(ctx, QS_ERR_INVALID_ARG, "meta word size %d is not 16 or 32", word_bits);
    if ((st = qs_sp_check_shape(ctx, rows, cols, &n)) != QS_OK)
        return st;
    if (rows % (word_bits == 16 ? 32 : 16) != 0 || cols % (word_bits == 16 ? 32 : 64) != 0)
        return qs_fail(ctx, QS_ERR_SHAPE,
                       "the CUTLASS %d-bit meta layout needs rows %% %d == 0 and cols %% %d == 0 "
                       "(got %lld x %lld)",
                       word_bits, word_bits == 16 ? 32 : 16, word_bits == 16 ? 32 : 64,
                       (long long)rows, (long long)cols);
    *count = n / 16;
    if (*count > 0 && (!a || !b))
        return qs_fail(ctx, QS_ERR_INVALID_ARG, "a meta pointer is NULL");
    return qs_sp_check_capacity(ctx, "meta output", have, *count);
}

/* Copy plain word(s) at (r, c) <-> interleaved position; `to` selects the direction. */
static void cutlass_move(const uint16_t *src, uint16_t *dst, int64_t rows, int64_t cols,
                         int32_t word_bits, int to)
{
    int64_t per_word = word_bits / 16, ncols = cols / 16 / per_word;

    for (int64_t r = 0; r < rows; r++)
        for (int64_t c = 0; c < ncols; c++) {
            int64_t plain = (r * ncols + c) * per_word;
            int64_t inter = cutlass_offset(r, c, rows, word_bits) * per_word;
            for (int64_t h = 0; h < per_word; h++) /* int32: low half first (little endian) */
                if (to)
                    dst[inter + h] = src[plain + h];
                else
                    dst[plain + h] = src[inter + h];
        }
}

QS_API qs_status qs_sp24_meta_to_cutlass(qs_ctx *ctx, const uint16_t *meta, int64_t rows,
                                         int64_t cols, int32_t word_bits, uint16_t *dst,
                                         int64_t dst_count)
{
    int64_t count = 0;
    qs_status st = check_cutlass(ctx, meta, dst, rows, cols, word_bits, dst_count, &count);

    if (st != QS_OK)
        return st;
    if (count > 0) /* rows x 0 has no word to move: return at once, not after `rows` empty rows */
        cutlass_move(meta, dst, rows, cols, word_bits, 1);
    return qs_ok(ctx);
}

QS_API qs_status qs_sp24_meta_from_cutlass(qs_ctx *ctx, const uint16_t *src, int64_t rows,
                                           int64_t cols, int32_t word_bits, uint16_t *meta,
                                           int64_t meta_count)
{
    int64_t count = 0;
    qs_status st = check_cutlass(ctx, src, meta, rows, cols, word_bits, meta_count, &count);

    if (st != QS_OK)
        return st;
    if (count > 0)
        cutlass_move(src, meta, rows, cols, word_bits, 0);
    return qs_ok(ctx);
}

/* ---- compressed-tensors sparse-24-bitmask (§5) ----------------------------------------------- */

static qs_status check_bitmask(qs_ctx *ctx, const void *a, const void *b, int64_t rows,
                               int64_t cols, int64_t meta_count, int64_t bitmask_bytes,
                               struct sp24_shape *s)
{
    qs_status st;

    if (!ctx)
        return QS_ERR_INVALID_ARG;
    if ((st = sp24_shape(ctx, QS_DTYPE_F32, rows, cols, s)) != QS_OK)
        return st;
    if (s->n > 0 && (!a || !b))
        return qs_fail(ctx, QS_ERR_INVALID_ARG, "a pointer is NULL");
    if ((st = qs_sp_check_capacity(ctx, "meta", meta_count, s->meta)) != QS_OK)
        return st;
    return qs_sp_check_capacity(ctx, "bitmask", bitmask_bytes, rows * qs_ceil_div(cols, 8));
}

QS_API qs_status qs_sp24_meta_to_bitmask(qs_ctx *ctx, const uint16_t *meta, int64_t meta_count,
                                         int64_t rows, int64_t cols, uint8_t *bitmask,
                                         int64_t bitmask_bytes)
{
    struct sp24_shape s;
    int64_t bpr = qs_ceil_div(cols, 8);
    qs_status st;

    if ((st = check_bitmask(ctx, meta, bitmask, rows, cols, meta_count, bitmask_bytes, &s)) !=
        QS_OK)
        return st;
    if (s.n == 0) /* rows x 0: no byte to write, and looping over the rows would take hours */
        return qs_ok(ctx);
    if ((st = check_meta(ctx, meta, &s, rows, cols)) != QS_OK)
        return st;
    for (int64_t r = 0; r < rows; r++) {
        uint8_t *row = bitmask + r * bpr;
        memset(row, 0, (size_t)bpr);
        for (int64_t g = 0; g < cols / 4; g++) {
            unsigned nib = (meta[r * s.words + g / 4] >> (4 * (g % 4))) & 15u;
            unsigned bits = (1u << (nib & 3u)) | (1u << (nib >> 2));
            row[g / 2] = (uint8_t)(row[g / 2] | bits << (4 * (g % 2)));
        }
    }
    return qs_ok(ctx);
}

QS_API qs_status qs_sp24_meta_from_bitmask(qs_ctx *ctx, const uint8_t *bitmask,
                                           int64_t bitmask_bytes, int64_t rows, int64_t cols,
                                           uint16_t *meta, int64_t meta_count)
{
    struct sp24_shape s;
    int64_t bpr = qs_ceil_div(cols, 8);
    qs_status st;

    if ((st = check_bitmask(ctx, bitmask, meta, rows, cols, meta_count, bitmask_bytes, &s)) !=
        QS_OK)
        return st;
    if (s.n == 0) /* rows x 0: no word to write (see qs_sp24_meta_to_bitmask) */
        return qs_ok(ctx);
    /* First pass: exactly two bits per group, zero padding (§5); nothing is written before. */
    for (int64_t r = 0; r < rows; r++)
        for (int64_t g = 0; g < 2 * bpr; g++) {
            unsigned bits = (bitmask[r * bpr + g / 2] >> (4 * (g % 2))) & 15u;
            int count = (int)(bits & 1u) + (int)((bits >> 1) & 1u) + (int)((bits >> 2) & 1u) +
                        (int)(bits >> 3);
            if (g < cols / 4 ? count != 2 : bits != 0)
                return qs_fail(ctx, QS_ERR_BAD_DATA,
                               "bitmask row %lld, columns %lld..%lld: %s", (long long)r,
                               (long long)(4 * g), (long long)(4 * g + 3),
                               g < cols / 4 ? "a group must keep exactly 2"
                                            : "padding bits must be 0");
        }
    for (int64_t r = 0; r < rows; r++) {
        const uint8_t *row = bitmask + r * bpr;
        uint16_t *mw = meta + r * s.words;
        for (int64_t g = 0; g < 4 * s.words; g++) {
            unsigned keep = g < cols / 4 ? (row[g / 2] >> (4 * (g % 2))) & 15u : 0u;
            unsigned nib = g < cols / 4 ? qs_sp24_nibble_of_keep[keep] : 0u;
            if (g % 4 == 0)
                mw[g / 4] = 0; /* unused nibbles of a last, partial word stay 0 */
            mw[g / 4] = (uint16_t)(mw[g / 4] | nib << (4 * (g % 4)));
        }
    }
    return qs_ok(ctx);
}

/* ---- sparse + quantized (§3.6) --------------------------------------------------------------- */

QS_API qs_status qs_sp24_quant_size(const qs_quant_params *params, int64_t rows, int64_t cols,
                                    int32_t plane, int64_t *bytes)
{
    if (cols < 0 || cols % 4 != 0)
        return cols < 0 ? QS_ERR_INVALID_ARG : QS_ERR_SHAPE;
    return qs_quant_size(params, rows, cols / 2, plane, bytes);
}

QS_API qs_status qs_sp24_quantize(qs_ctx *ctx, const qs_quant_params *params, const void *w,
                                  int32_t dtype, int64_t rows, int64_t cols, const uint8_t *mask,
                                  qs_qtensor *q, uint16_t *meta, int64_t meta_count)
{
    struct sp24_shape s;
    void *vals;
    uint16_t *mtmp;
    qs_status st;

    if (!ctx)
        return QS_ERR_INVALID_ARG;
    if ((st = sp24_shape(ctx, dtype, rows, cols, &s)) != QS_OK)
        return st;
    if (!params || !q || (s.n > 0 && (!w || !meta)))
        return qs_fail(ctx, QS_ERR_INVALID_ARG, "a pointer is NULL");
    if ((st = qs_sp_check_capacity(ctx, "meta", meta_count, s.meta)) != QS_OK)
        return st;
    /* Values and meta go to scratch first: qs_quantize may still reject its planes, and meta
     * must stay untouched then. */
    vals = qs_scratch_alloc(ctx, (size_t)(s.values_bytes > 0 ? s.values_bytes : 1));
    mtmp = qs_scratch_alloc(ctx, (size_t)(s.meta > 0 ? s.meta : 1) * sizeof(uint16_t));
    if (!vals || !mtmp) {
        qs_scratch_free(ctx, vals);
        qs_scratch_free(ctx, mtmp);
        return qs_fail(ctx, QS_ERR_OUT_OF_MEMORY, "no memory for %lld compressed values",
                       (long long)s.values);
    }
    st = qs_sp24_compress(ctx, w, dtype, rows, cols, mask, vals, s.values_bytes, mtmp, s.meta);
    if (st == QS_OK)
        st = qs_quantize(ctx, params, vals, dtype, rows, cols / 2, q);
    if (st == QS_OK && s.meta > 0)
        memcpy(meta, mtmp, (size_t)s.meta * sizeof(uint16_t));
    qs_scratch_free(ctx, vals);
    qs_scratch_free(ctx, mtmp);
    return st;
}

QS_API qs_status qs_sp24_dequantize(qs_ctx *ctx, const qs_quant_params *params,
                                    const qs_qtensor *q, const uint16_t *meta, int64_t meta_count,
                                    int64_t rows, int64_t cols, void *dst, int32_t dst_dtype,
                                    int64_t dst_bytes)
{
    struct sp24_shape s;
    void *vals;
    qs_status st;

    if (!ctx)
        return QS_ERR_INVALID_ARG;
    if ((st = sp24_shape(ctx, dst_dtype, rows, cols, &s)) != QS_OK)
        return st;
    if (!params || !q || (s.n > 0 && (!meta || !dst)))
        return qs_fail(ctx, QS_ERR_INVALID_ARG, "a pointer is NULL");
    if ((st = qs_sp_check_capacity(ctx, "meta", meta_count, s.meta)) != QS_OK)
        return st;
    if ((st = qs_sp_check_capacity(ctx, "dst", dst_bytes, s.n * qs_dtype_size(dst_dtype))) !=
        QS_OK)
        return st;
    if (s.n > 0 && (st = check_meta(ctx, meta, &s, rows, cols)) != QS_OK)
        return st;
    vals = qs_scratch_alloc(ctx, (size_t)(s.values_bytes > 0 ? s.values_bytes : 1));
    if (!vals)
        return qs_fail(ctx, QS_ERR_OUT_OF_MEMORY, "no memory for %lld compressed values",
                       (long long)s.values);
    st = qs_dequantize(ctx, params, q, rows, cols / 2, vals, dst_dtype, s.values_bytes);
    if (st == QS_OK)
        st = qs_sp24_decompress(ctx, vals, dst_dtype, meta, meta_count, rows, cols, dst,
                                dst_bytes);
    qs_scratch_free(ctx, vals);
    return st;
}
