/* SPDX-License-Identifier: MIT */
/*
 * The CUDA plugin's drivers over an executor (cuda_pipeline.h): the same steps as the CPU
 * drivers of src/core/quantize.c and dequantize.c, as launches of the items of cuda_items.h.
 * Reductions (absmax, min/max, the non-finite scan) are order-independent, so any grid gives
 * the CPU's bits; the two sequential steps, the double-quantization mean (§6.1) and a GEMV row's
 * sum over its segments, run as the reference runs them (on the host, and in one thread per row).
 * What a format is comes from the call's plain layout (family, unit rule, flags, elem_max), never
 * from a switch on the format code beyond the element kind.
 */
#include <stdarg.h>
#include <stdio.h>
#include <string.h>

#include "cuda_pipeline.h"

static int64_t ceil_div(int64_t a, int64_t b)
{
    return a / b + (a % b != 0);
}

/* Scratch buffers of one call, released together. */
#define MAX_SCRATCH 6

struct run {
    const struct qs_cu_exec *x;
    void *scratch[MAX_SCRATCH];
    int n_scratch;
    char *err;
    size_t err_len;
};

static qs_status fail(struct run *r, qs_status st, const char *fmt, ...)
    __attribute__((format(printf, 3, 4)));
static qs_status fail(struct run *r, qs_status st, const char *fmt, ...)
{
    va_list ap;

    if (r->err[0] == '\0') { /* keep the executor's own message when it gave one */
        va_start(ap, fmt);
        vsnprintf(r->err, r->err_len, fmt, ap);
        va_end(ap);
    }
    return st;
}

static void *scratch(struct run *r, size_t bytes)
{
    void *p;

    if (r->n_scratch == MAX_SCRATCH)
        return NULL;
    p = r->x->alloc(r->x->user, bytes > 0 ? bytes : 4);
    if (p)
        r->scratch[r->n_scratch++] = p;
    return p;
}

static void release_all(struct run *r)
{
    while (r->n_scratch > 0)
        r->x->release(r->x->user, r->scratch[--r->n_scratch]);
}

#define LAUNCH(r, k, args, count)                                                                  \
    do {                                                                                           \
        if ((count) > 0 && (r)->x->launch((r)->x->user, (k), (args), (count)) != 0)                \
            return fail((r), QS_ERR_BACKEND, "cuda backend: kernel %d failed", (int)(k));          \
    } while (0)

#define NEED(r, ptr)                                                                               \
    do {                                                                                           \
        if (!(ptr))                                                                                \
            return fail((r), QS_ERR_OUT_OF_MEMORY, "cuda backend: no device memory for scratch");  \
    } while (0)

/* Reduce `units` units of unit_len f32 elements; *partial gets units * *chunks results. */
static qs_status reduce(struct run *r, const float *src, int64_t units, int64_t unit_len,
                        int32_t kind, struct qs_cu_pair **partial, int64_t *chunks)
{
    struct qs_cu_red a;

    *chunks = unit_len > 0 ? ceil_div(unit_len, QS_CU_CHUNK) : 1;
    *partial = scratch(r, (size_t)(units * *chunks) * sizeof(struct qs_cu_pair));
    NEED(r, *partial);
    a.src = src;
    a.unit_len = unit_len;
    a.chunks = *chunks;
    a.kind = kind;
    a.partial = *partial;
    LAUNCH(r, QS_CU_K_REDUCE, &a, units * *chunks);
    return QS_OK;
}

/* ---- quantize ------------------------------------------------------------------------------- */

static qs_status quant_bnb4(struct run *r, const qs_backend_layout *l, const qs_quant_params *p,
                            const float *src, qs_qtensor *q)
{
    struct qs_cu_bnb4_quant a;
    int64_t nb = l->units;

    a.src = src;
    a.n = l->n;
    a.block = l->block;
    a.fp4 = l->element == QS_BACKEND_ELEM_FP4;
    a.data = q->data;
    a.absmax = q->scale;
    if (p->double_quant) {
        a.absmax = scratch(r, (size_t)nb * sizeof(float));
        NEED(r, a.absmax);
    }
    LAUNCH(r, QS_CU_K_BNB4_QUANT, &a, nb);
    if (p->double_quant) {
        struct qs_cu_dq_quant d;
        float buf[1024];
        double sum = 0.0;

        /* §6.1's mean is a sequential double sum: the host computes it in index order, as
         * qs_hd_dq_offset does, from the absmax values copied back (n / block floats). */
        for (int64_t i = 0; i < nb; i += 1024) {
            int64_t len = nb - i < 1024 ? nb - i : 1024;
            if (r->x->to_host(r->x->user, buf, a.absmax + i, (size_t)len * sizeof(float)))
                return fail(r, QS_ERR_BACKEND, "cuda backend: copy to the host failed");
            for (int64_t k = 0; k < len; k++)
                sum += (double)buf[k];
        }
        d.offset = nb > 0 ? (float)(sum / (double)nb) : 0.0f;
        d.absmax = a.absmax;
        d.nb = nb;
        d.map = r->x->tables.dyn8;
        d.codes = q->scale;
        d.nested = q->nested_scale;
        LAUNCH(r, QS_CU_K_DQ_CENTER, &d, nb);
        LAUNCH(r, QS_CU_K_DQ_BLOCK, &d, ceil_div(nb, 256));
        q->nested_offset = d.offset;
    }
    return QS_OK;
}

static qs_status quant_int8(struct run *r, const qs_backend_layout *l, const qs_quant_params *p,
                            const float *src, qs_qtensor *q)
{
    int symmetric = !(l->flags & QS_BACKEND_LAYOUT_ZERO_POINT);
    int64_t units = 1, unit_len = l->n, chunks;
    struct qs_cu_pair *partial;
    struct qs_cu_int8_params pa;
    struct qs_cu_int8_quant qa;
    qs_status st;

    (void)p;
    if (l->unit_rule == QS_BACKEND_UNITS_ROWS) {
        units = l->rows;
        unit_len = l->cols;
    } else if (l->unit_rule == QS_BACKEND_UNITS_ROW_BLOCKS) {
        units = l->units;
        unit_len = l->block;
    }
    pa.rule = (l->flags & QS_BACKEND_LAYOUT_ROWSTAT) ? QS_CU_INT8_ROWSTAT
              : symmetric                   ? QS_CU_INT8_SYM
                                            : QS_CU_INT8_ASYM;
    st = reduce(r, src, units, unit_len,
                pa.rule == QS_CU_INT8_ASYM ? QS_CU_RED_MINMAX : QS_CU_RED_AMAX, &partial, &chunks);
    if (st != QS_OK)
        return st;
    pa.partial = partial;
    pa.chunks = chunks;
    pa.scale = q->scale;
    pa.zero_point = q->zero_point;
    pa.mul = scratch(r, (size_t)units * sizeof(float));
    pa.zp = scratch(r, (size_t)units * sizeof(int32_t));
    NEED(r, pa.mul);
    NEED(r, pa.zp);
    LAUNCH(r, QS_CU_K_INT8_PARAMS, &pa, units);
    qa.src = src;
    qa.unit_len = unit_len > 0 ? unit_len : 1;
    qa.mul = pa.mul;
    qa.zp = pa.zp;
    qa.qmin = pa.rule == QS_CU_INT8_ASYM ? -128 : -127;
    qa.dst = q->data;
    LAUNCH(r, QS_CU_K_INT8_QUANT, &qa, l->n);
    return QS_OK;
}

/* The per-tensor scale (FP8 or NVFP4) into *out (device); a given scale > 0 wins. */
static qs_status tensor_scale(struct run *r, const qs_backend_layout *l, const float *src,
                              float given, int nvfp4, float *out)
{
    struct qs_cu_tensor_scale a;
    struct qs_cu_pair *partial = NULL;
    int64_t chunks = 0;
    qs_status st;

    if (!(given > 0.0f) && (st = reduce(r, src, 1, l->n, QS_CU_RED_AMAX, &partial, &chunks)))
        return st;
    a.partial = partial;
    a.chunks = chunks;
    a.given = given;
    a.elem_max = l->elem_max;
    a.nvfp4 = nvfp4;
    a.out = out;
    LAUNCH(r, QS_CU_K_TENSOR_SCALE, &a, 1);
    return QS_OK;
}

static qs_status quant_fp8(struct run *r, const qs_backend_layout *l, const qs_quant_params *p,
                           const float *src, qs_qtensor *q)
{
    struct qs_cu_fp8 a;
    qs_status st;

    if ((st = tensor_scale(r, l, src, p->scale, 0, q->scale)) != QS_OK)
        return st;
    memset(&a, 0, sizeof a);
    a.src = src;
    a.scale = q->scale;
    a.e5m2 = l->element == QS_BACKEND_ELEM_E5M2;
    a.dst_codes = q->data;
    LAUNCH(r, QS_CU_K_FP8_QUANT, &a, l->n);
    return QS_OK;
}

static void rows_init(struct qs_cu_rows *a, const struct run *r, const qs_backend_layout *l,
                      const qs_quant_params *p)
{
    memset(a, 0, sizeof *a);
    a->kind = l->family == QS_BACKEND_FAMILY_NV      ? QS_CU_ROW_NVFP4
              : l->element == QS_BACKEND_ELEM_E2M1 ? QS_CU_ROW_MXFP4
                                                   : QS_CU_ROW_MXFP8;
    a->block = l->block;
    a->rounding = p->scale_rounding;
    a->cols = l->cols;
    a->row_bytes = l->plane[QS_PLANE_DATA].shape[1];
    a->spr = ceil_div(l->cols, l->block);
    a->e2m1 = r->x->tables.e2m1;
}

static qs_status quant_rows(struct run *r, const qs_backend_layout *l, const qs_quant_params *p,
                            const float *src, qs_qtensor *q)
{
    struct qs_cu_rows a;

    rows_init(&a, r, l, p);
    if (a.kind == QS_CU_ROW_NVFP4) {
        float *dev = scratch(r, sizeof(float));
        qs_status st;
        NEED(r, dev);
        if ((st = tensor_scale(r, l, src, p->scale, 1, dev)) != QS_OK)
            return st;
        /* the tensor scale is a field of the host struct: one float comes back */
        if (r->x->to_host(r->x->user, &a.s_global, dev, sizeof(float)))
            return fail(r, QS_ERR_BACKEND, "cuda backend: copy to the host failed");
        q->global_scale = a.s_global;
    }
    a.src = src;
    a.data = q->data;
    a.scales = q->scale;
    LAUNCH(r, QS_CU_K_ROWS_QUANT, &a, l->rows * a.spr);
    return QS_OK;
}

qs_status qs_cu_quantize(const struct qs_cu_exec *x, const qs_backend_layout *l,
                         const qs_quant_params *p, const void *src, int32_t dtype, qs_qtensor *q,
                         int32_t reject, char *err, size_t err_len)
{
    struct run r = {.x = x, .err = err, .err_len = err_len};
    const float *f = src;
    qs_qtensor out = *q; /* struct fields are written only on success */
    qs_status st = QS_OK;

    err[0] = '\0';
    if (dtype != QS_DTYPE_F32 && l->n > 0) {
        struct qs_cu_cvt_in c = {src, NULL, dtype == QS_DTYPE_BF16};
        c.dst = scratch(&r, (size_t)l->n * sizeof(float));
        if (!c.dst) {
            st = fail(&r, QS_ERR_OUT_OF_MEMORY,
                      "cuda backend: no device memory to stage %lld "
                      "elements",
                      (long long)l->n);
            goto done;
        }
        if (x->launch(x->user, QS_CU_K_CVT_IN, &c, l->n)) {
            st = fail(&r, QS_ERR_BACKEND, "cuda backend: dtype conversion failed");
            goto done;
        }
        f = c.dst;
    }
    if (reject && l->n > 0) {
        struct qs_cu_pair *partial, host[64];
        int64_t chunks, bad = 0;
        if ((st = reduce(&r, f, 1, l->n, QS_CU_RED_NONFINITE, &partial, &chunks)) != QS_OK)
            goto done;
        for (int64_t c = 0; c < chunks && !bad; c += 64) {
            int64_t len = chunks - c < 64 ? chunks - c : 64;
            if (x->to_host(x->user, host, partial + c, (size_t)len * sizeof *host)) {
                st = fail(&r, QS_ERR_BACKEND, "cuda backend: copy to the host failed");
                goto done;
            }
            for (int64_t k = 0; k < len; k++)
                bad |= host[k].a != 0.0f;
        }
        if (bad) {
            st = fail(&r, QS_ERR_NONFINITE,
                      "input holds NaN or Inf and the context rejects non-finite values");
            goto done;
        }
    }
    switch (l->family) {
    case QS_BACKEND_FAMILY_BNB4: st = quant_bnb4(&r, l, p, f, &out); break;
    case QS_BACKEND_FAMILY_INT8: st = quant_int8(&r, l, p, f, &out); break;
    case QS_BACKEND_FAMILY_FP8: st = quant_fp8(&r, l, p, f, &out); break;
    default: st = quant_rows(&r, l, p, f, &out); break;
    }
    if (st == QS_OK) {
        q->global_scale = out.global_scale;
        q->nested_offset = out.nested_offset;
    }
done:
    release_all(&r);
    return st;
}

/* ---- dequantize ----------------------------------------------------------------------------- */

static qs_status dequant_bnb4(struct run *r, const qs_backend_layout *l, const qs_quant_params *p,
                              const qs_qtensor *q, float *dst)
{
    struct qs_cu_bnb4_dequant a;

    a.data = q->data;
    a.absmax = q->scale;
    a.book = l->element == QS_BACKEND_ELEM_FP4 ? r->x->tables.fp4 : r->x->tables.nf4;
    a.block = l->block;
    a.dst = dst;
    if (p->double_quant) {
        struct qs_cu_dq_dequant d;
        float *tmp = scratch(r, (size_t)l->units * sizeof(float));
        NEED(r, tmp);
        d.codes = q->scale;
        d.nested = q->nested_scale;
        d.offset = q->nested_offset;
        d.map = r->x->tables.dyn8;
        d.absmax = tmp;
        LAUNCH(r, QS_CU_K_DQ_DEQUANT, &d, l->units);
        a.absmax = tmp;
    }
    LAUNCH(r, QS_CU_K_BNB4_DEQUANT, &a, l->n);
    return QS_OK;
}

static qs_status dequant_units(struct run *r, const qs_backend_layout *l, const qs_quant_params *p,
                               const qs_qtensor *q, float *dst)
{
    (void)p;
    if (l->family == QS_BACKEND_FAMILY_FP8) {
        struct qs_cu_fp8 a;
        memset(&a, 0, sizeof a);
        a.codes = q->data;
        a.scale = q->scale;
        a.e5m2 = l->element == QS_BACKEND_ELEM_E5M2;
        a.dst = dst;
        LAUNCH(r, QS_CU_K_FP8_DEQUANT, &a, l->n);
    } else {
        struct qs_cu_int8_dequant a;
        a.src = q->data;
        a.unit_len = l->unit_rule == QS_BACKEND_UNITS_ROWS         ? l->cols
                     : l->unit_rule == QS_BACKEND_UNITS_ROW_BLOCKS ? l->block
                                                                   : l->n;
        if (a.unit_len <= 0)
            a.unit_len = 1;
        a.scale = q->scale;
        a.zero_point = (l->flags & QS_BACKEND_LAYOUT_ZERO_POINT) ? q->zero_point : NULL;
        a.rowstat = (l->flags & QS_BACKEND_LAYOUT_ROWSTAT) != 0;
        a.dst = dst;
        LAUNCH(r, QS_CU_K_INT8_DEQUANT, &a, l->n);
    }
    return QS_OK;
}

qs_status qs_cu_dequantize(const struct qs_cu_exec *x, const qs_backend_layout *l,
                           const qs_quant_params *p, const qs_qtensor *q, void *dst, int32_t dtype,
                           char *err, size_t err_len)
{
    struct run r = {.x = x, .err = err, .err_len = err_len};
    float *f = dst;
    qs_status st = QS_OK;

    err[0] = '\0';
    if (dtype != QS_DTYPE_F32 && l->n > 0) {
        f = scratch(&r, (size_t)l->n * sizeof(float));
        if (!f) {
            st = fail(&r, QS_ERR_OUT_OF_MEMORY,
                      "cuda backend: no device memory to stage %lld "
                      "elements",
                      (long long)l->n);
            goto done;
        }
    }
    switch (l->family) {
    case QS_BACKEND_FAMILY_BNB4: st = dequant_bnb4(&r, l, p, q, f); break;
    case QS_BACKEND_FAMILY_INT8:
    case QS_BACKEND_FAMILY_FP8: st = dequant_units(&r, l, p, q, f); break;
    default: {
        struct qs_cu_rows a;
        rows_init(&a, &r, l, p);
        a.cdata = q->data;
        a.cscales = q->scale;
        a.s_global = q->global_scale;
        a.dst = f;
        if (l->n > 0 && x->launch(x->user, QS_CU_K_ROWS_DEQUANT, &a, l->n))
            st = fail(&r, QS_ERR_BACKEND, "cuda backend: kernel %d failed", QS_CU_K_ROWS_DEQUANT);
        break;
    }
    }
    if (st == QS_OK && f != dst) {
        struct qs_cu_cvt_out c = {f, dst, dtype == QS_DTYPE_BF16};
        if (x->launch(x->user, QS_CU_K_CVT_OUT, &c, l->n))
            st = fail(&r, QS_ERR_BACKEND, "cuda backend: dtype conversion failed");
    }
done:
    release_all(&r);
    return st;
}

/* ---- 2:4 ------------------------------------------------------------------------------------- */

qs_status qs_cu_sp24_run(const struct qs_cu_exec *x, const struct qs_cu_sp24 *a, int64_t rows,
                         char *err, size_t err_len)
{
    struct run r = {.x = x, .err = err, .err_len = err_len};
    int64_t count = rows * a->words;
    int decompress = a->op < 0;
    qs_status st = QS_OK;

    err[0] = '\0';
    if (count == 0)
        return QS_OK;
    if (a->op != QS_CU_SP24_PRUNE) {
        struct qs_cu_sp24_check c = {*a, decompress, NULL};
        unsigned long long first = ~0ull;
        c.first = scratch(&r, sizeof first);
        if (!c.first) {
            st = fail(&r, QS_ERR_OUT_OF_MEMORY, "cuda backend: no device memory for scratch");
            goto done;
        }
        if (x->to_device(x->user, c.first, &first, sizeof first) ||
            x->launch(x->user, QS_CU_K_SP24_CHECK, &c, count) ||
            x->to_host(x->user, &first, c.first, sizeof first)) {
            st = fail(&r, QS_ERR_BACKEND, "cuda backend: 2:4 validation failed");
            goto done;
        }
        if (first != ~0ull) {
            int64_t row = (int64_t)first / a->words, col = (int64_t)first % a->words * 16;
            st = fail(&r, QS_ERR_BAD_DATA,
                      decompress ? "2:4 meta word at row %lld, column %lld holds an invalid "
                                   "nibble"
                                 : "a 2:4 group at row %lld, columns %lld.. keeps more than 2",
                      (long long)row, (long long)col);
            goto done;
        }
    }
    if (x->launch(x->user, decompress ? QS_CU_K_SP24_DECOMPRESS : QS_CU_K_SP24_COMPRESS, a,
                  count))
        st = fail(&r, QS_ERR_BACKEND, "cuda backend: 2:4 kernel failed");
done:
    release_all(&r);
    return st;
}

/* ---- GEMV ----------------------------------------------------------------------------------- */

qs_status qs_cu_gemv_run(const struct qs_cu_exec *x, const qs_backend_layout *l,
                         const qs_quant_params *p, const qs_qtensor *q, const float *xv, float *y,
                         char *err, size_t err_len)
{
    struct run r = {.x = x, .err = err, .err_len = err_len};
    struct qs_cu_gemv g;
    qs_status st = QS_OK;

    err[0] = '\0';
    memset(&g, 0, sizeof g);
    g.rows = l->rows;
    g.cols = l->cols;
    g.x = xv;
    g.w = q->data;
    g.y = y;
    if (l->element == QS_BACKEND_ELEM_NF4) {
        g.kind = QS_CU_GEMV_NF4;
        g.book = x->tables.nf4;
        g.block = l->block;
        g.absmax = q->scale;
        if (p->double_quant) {
            struct qs_cu_dq_dequant d;
            float *tmp = scratch(&r, (size_t)l->units * sizeof(float));
            if (!tmp) {
                st = fail(&r, QS_ERR_OUT_OF_MEMORY, "cuda backend: no device memory for scratch");
                goto done;
            }
            d.codes = q->scale;
            d.nested = q->nested_scale;
            d.offset = q->nested_offset;
            d.map = x->tables.dyn8;
            d.absmax = tmp;
            if (l->units > 0 && x->launch(x->user, QS_CU_K_DQ_DEQUANT, &d, l->units)) {
                st = fail(&r, QS_ERR_BACKEND, "cuda backend: kernel %d failed", QS_CU_K_DQ_DEQUANT);
                goto done;
            }
            g.absmax = tmp;
        }
    } else {
        g.kind = QS_CU_GEMV_INT8;
        g.scale = q->scale;
        g.gran = l->unit_rule == QS_BACKEND_UNITS_ROWS         ? QS_GRAN_ROW
                 : l->unit_rule == QS_BACKEND_UNITS_ROW_BLOCKS ? QS_GRAN_GROUP
                                                               : QS_GRAN_TENSOR;
        g.group = g.gran == QS_GRAN_GROUP ? l->block : (l->cols > 0 ? l->cols : 1);
        g.zero_point = p->symmetric ? NULL : q->zero_point;
    }
    if (l->rows > 0 && x->launch(x->user, QS_CU_K_GEMV, &g, l->rows))
        st = fail(&r, QS_ERR_BACKEND, "cuda backend: kernel %d failed", QS_CU_K_GEMV);
done:
    release_all(&r);
    return st;
}
