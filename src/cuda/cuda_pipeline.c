/* SPDX-License-Identifier: MIT */
/*
 * The CUDA plugin's quantize, dequantize and 2:4 drivers over an executor (cuda_pipeline.h): the
 * same steps as the CPU drivers of src/core/quantize.c and dequantize.c, as launches of the
 * items of cuda_items.h and cuda_vec.h. Bulk work takes the 16-byte tile items wherever the
 * pointers are aligned and a block is a whole number of tiles, the scalar items otherwise (and
 * for the tail); f16 / bf16 are read and written directly except by the scalar block items of
 * the misaligned fallback, which read a staged f32 copy. Reductions are order-independent, so any
 * grid gives the CPU's bits; the two sequential steps keep their order (the double-quantization
 * mean, cuda_items.h; a GEMV's sum, cuda_mv.h). What a format is comes from the call's plain
 * layout (family, unit rule, flags, elem_max), never from a switch on the format code.
 */
#include "cuda_run.h"

/* Lanes sharing a block of `tiles` tiles: the largest power of two <= tiles, at most 32. */
static int32_t lanes_for(int64_t tiles)
{
    int32_t l = 1;

    while (l < 32 && 2 * l <= tiles)
        l *= 2;
    return l;
}

/* Reduce `units` units of unit_len elements; *partial gets units * *chunks results. */
qs_status qs_cu_reduce(struct qs_cu_run *r, const void *src, int32_t dtype, int64_t units,
                        int64_t unit_len, int32_t kind, struct qs_cu_pair **partial,
                        int64_t *chunks)
{
    struct qs_cu_red a;

    *chunks = unit_len > 0 ? qs_cu_ceil_div(unit_len, QS_CU_CHUNK) : 1;
    *partial = qs_cu_scratch(r, (size_t)(units * *chunks) * sizeof(struct qs_cu_pair));
    QS_CU_NEED(r, *partial);
    a.src = src;
    a.dtype = dtype;
    a.vec = qs_cu_aligned(src, 16) && unit_len % (16 / qs_cu_dsize(dtype)) == 0;
    a.unit_len = unit_len;
    a.chunks = *chunks;
    a.kind = kind;
    a.partial = *partial;
    QS_CU_LAUNCH(r, QS_CU_K_REDUCE, &a, units * *chunks);
    return QS_OK;
}

/* An f32 view of n elements of src: src itself, or a staged copy (the scalar block items). */
static qs_status as_f32(struct qs_cu_run *r, const void *src, int32_t dtype, int64_t n,
                        const float **out)
{
    struct qs_cu_cvt_in c;

    if (dtype == QS_DTYPE_F32 || n == 0) {
        *out = src;
        return QS_OK;
    }
    c.src = src;
    c.is_bf16 = dtype == QS_DTYPE_BF16;
    c.dst = qs_cu_scratch(r, (size_t)n * sizeof(float));
    if (!c.dst)
        return qs_cu_fail(r, QS_ERR_OUT_OF_MEMORY,
                          "cuda backend: no device memory to stage %lld elements", (long long)n);
    QS_CU_LAUNCH(r, QS_CU_K_CVT_IN, &c, n);
    *out = c.dst;
    return QS_OK;
}

/* The reject policy (one host wait): QS_ERR_NONFINITE when src holds a NaN or Inf. */
static qs_status scan(struct qs_cu_run *r, const void *src, int32_t dtype, int64_t n)
{
    struct qs_cu_pair *partial;
    struct qs_cu_flag f;
    int64_t chunks;
    int32_t bad = 0;
    qs_status st;

    if ((st = qs_cu_reduce(r, src, dtype, 1, n, QS_CU_RED_NONFINITE, &partial, &chunks)) != QS_OK)
        return st;
    f.partial = partial;
    f.count = chunks;
    f.combine = 0;
    f.out = qs_cu_scratch(r, sizeof(int32_t));
    QS_CU_NEED(r, f.out);
    QS_CU_LAUNCH(r, QS_CU_K_FLAG, &f, 1);
    QS_CU_TO_HOST(r, &bad, f.out, sizeof bad);
    if (bad)
        return qs_cu_fail(r, QS_ERR_NONFINITE,
                          "input holds NaN or Inf and the context rejects non-finite values");
    return QS_OK;
}

/* A blockwise quantize over `blocks` full blocks with the tile items. */
static void bq_init(struct qs_cu_bq *a, int32_t rule, int32_t dtype, const void *src, int64_t block,
                    int64_t blocks, uint8_t *data)
{
    memset(a, 0, sizeof *a);
    a->rule = rule;
    a->dtype = dtype;
    a->block = block;
    a->tiles = block / (16 / qs_cu_dsize(dtype));
    a->lanes = lanes_for(a->tiles);
    a->blocks = blocks;
    a->src = src;
    a->data = data;
}

/* ---- quantize ------------------------------------------------------------------------------- */

/* §6.1 on the device: the offset (cuda_items.h), the centring, dyn8 blocks of 256, and the
 * offset back to the host for qs_qtensor.nested_offset (one host wait). */
static qs_status double_quant(struct qs_cu_run *r, float *absmax, int64_t nb, qs_qtensor *q)
{
    struct qs_cu_dq_stats s;
    struct qs_cu_dq_offset o;
    struct qs_cu_dq_quant d;
    int64_t full = nb / 256;
    float offset = 0.0f;

    s.absmax = absmax;
    s.nb = nb;
    o.chunks = nb > 0 ? qs_cu_ceil_div(nb, QS_CU_CHUNK) : 0;
    s.partial = qs_cu_scratch(r, (size_t)(o.chunks > 0 ? o.chunks : 1) * sizeof *s.partial);
    o.out = qs_cu_scratch(r, sizeof(float));
    QS_CU_NEED(r, s.partial);
    QS_CU_NEED(r, o.out);
    o.partial = s.partial;
    o.nb = nb;
    o.absmax = absmax;
    QS_CU_LAUNCH(r, QS_CU_K_DQ_STATS, &s, o.chunks);
    QS_CU_LAUNCH(r, QS_CU_K_DQ_OFFSET, &o, 1);
    d.absmax = absmax;
    d.nb = nb;
    d.offset = o.out;
    d.tab = r->x->tab;
    d.codes = q->scale;
    d.nested = q->nested_scale;
    QS_CU_LAUNCH(r, QS_CU_K_DQ_CENTER, &d, nb);
    if (full > 0 && qs_cu_aligned(q->scale, 8)) {
        struct qs_cu_bq a;
        bq_init(&a, QS_CU_BQ_DYN8, QS_DTYPE_F32, absmax, 256, full, q->scale);
        a.fscale = q->nested_scale;
        a.tab = r->x->tab;
        QS_CU_LAUNCH(r, QS_CU_K_BQ, &a, full);
        d.absmax = absmax + full * 256;
        d.nb = nb - full * 256;
        d.codes = (uint8_t *)q->scale + full * 256;
        d.nested = (float *)q->nested_scale + full;
    }
    QS_CU_LAUNCH(r, QS_CU_K_DQ_BLOCK, &d, qs_cu_ceil_div(d.nb, 256));
    if (nb > 0) /* empty: the mean of nothing is 0 (qs_hd_dq_offset), no need to ask */
        QS_CU_TO_HOST(r, &offset, o.out, sizeof offset);
    q->nested_offset = offset;
    return QS_OK;
}

static qs_status quant_bnb4(struct qs_cu_run *r, const qs_backend_layout *l,
                            const qs_quant_params *p, const void *src, int32_t dtype,
                            qs_qtensor *q)
{
    int64_t nb = l->units, per = 16 / qs_cu_dsize(dtype), full = l->n / l->block;
    int32_t fp4 = l->element == QS_BACKEND_ELEM_FP4;
    float *absmax = q->scale;
    struct qs_cu_bnb4_quant t;
    qs_status st;

    if (p->double_quant) {
        absmax = qs_cu_scratch(r, (size_t)nb * sizeof(float));
        QS_CU_NEED(r, absmax);
    }
    t.block = l->block;
    t.fp4 = fp4;
    /* an empty tensor's planes may be NULL: no offset is taken from them (l->n > 0) */
    if (l->n > 0 && qs_cu_aligned(src, 16) && qs_cu_aligned(q->data, 8) && l->block % per == 0) {
        struct qs_cu_bq a;
        int64_t start = full * l->block;
        bq_init(&a, QS_CU_BQ_BNB4, dtype, src, l->block, full, q->data);
        a.sub = fp4;
        a.fscale = absmax;
        QS_CU_LAUNCH(r, QS_CU_K_BQ, &a, full);
        /* the last, short block: one scalar item on its (staged) elements */
        if ((st = as_f32(r, (const char *)src + start * qs_cu_dsize(dtype), dtype, l->n - start,
                         &t.src)) != QS_OK)
            return st;
        t.n = l->n - start;
        t.data = (uint8_t *)q->data + start / 2;
        t.absmax = absmax + full;
        QS_CU_LAUNCH(r, QS_CU_K_BNB4_QUANT, &t, t.n > 0);
    } else {
        if ((st = as_f32(r, src, dtype, l->n, &t.src)) != QS_OK)
            return st;
        t.n = l->n;
        t.data = q->data;
        t.absmax = absmax;
        QS_CU_LAUNCH(r, QS_CU_K_BNB4_QUANT, &t, nb);
    }
    return p->double_quant ? double_quant(r, absmax, nb, q) : QS_OK;
}

static qs_status quant_int8(struct qs_cu_run *r, const qs_backend_layout *l, const void *src,
                            int32_t dtype, qs_qtensor *q)
{
    int64_t units = 1, unit_len = l->n, per = 16 / qs_cu_dsize(dtype), chunks;
    int32_t rule = (l->flags & QS_BACKEND_LAYOUT_ROWSTAT)     ? QS_CU_INT8_ROWSTAT
                   : (l->flags & QS_BACKEND_LAYOUT_ZERO_POINT) ? QS_CU_INT8_ASYM
                                                                : QS_CU_INT8_SYM;
    int vec = qs_cu_aligned(src, 16) && qs_cu_aligned(q->data, 8) && l->n > 0;
    struct qs_cu_pair *partial;
    struct qs_cu_int8_params pa;
    struct qs_cu_ewq e;
    qs_status st;

    if (l->unit_rule == QS_BACKEND_UNITS_ROWS) {
        units = l->rows;
        unit_len = l->cols;
    } else if (l->unit_rule == QS_BACKEND_UNITS_ROW_BLOCKS) {
        units = l->units;
        unit_len = l->block;
    }
    vec = vec && unit_len % per == 0;
    /* Many units or short ones: a group of lanes quantizes each unit in one pass. Few long ones
     * (a tensor scale, a handful of long rows) need the whole grid: reduce, scale, encode. */
    if (vec && (unit_len <= 4096 || units >= 1024)) {
        struct qs_cu_bq a;
        bq_init(&a, QS_CU_BQ_INT8, dtype, src, unit_len, units, q->data);
        a.sub = rule;
        a.fscale = q->scale;
        a.zero_point = q->zero_point;
        QS_CU_LAUNCH(r, QS_CU_K_BQ, &a, units);
        return QS_OK;
    }
    st = qs_cu_reduce(r, src, dtype, units, unit_len,
                rule == QS_CU_INT8_ASYM ? QS_CU_RED_MINMAX : QS_CU_RED_AMAX, &partial, &chunks);
    if (st != QS_OK)
        return st;
    pa.partial = partial;
    pa.chunks = chunks;
    pa.rule = rule;
    pa.scale = q->scale;
    pa.zero_point = q->zero_point;
    pa.mul = qs_cu_scratch(r, (size_t)units * sizeof(float));
    pa.zp = qs_cu_scratch(r, (size_t)units * sizeof(int32_t));
    QS_CU_NEED(r, pa.mul);
    QS_CU_NEED(r, pa.zp);
    QS_CU_LAUNCH(r, QS_CU_K_INT8_PARAMS, &pa, units);
    memset(&e, 0, sizeof e);
    e.dtype = dtype;
    e.qmin = rule == QS_CU_INT8_ASYM ? -128 : -127;
    e.unit_len = unit_len > 0 ? unit_len : 1;
    e.src = src;
    e.mul = pa.mul;
    e.zp = pa.zp;
    e.data = q->data;
    if (vec)
        QS_CU_LAUNCH(r, QS_CU_K_EWQ_TILE, &e, l->n / per);
    e.first = vec ? l->n / per * per : 0;
    QS_CU_LAUNCH(r, QS_CU_K_EWQ_ELEM, &e, l->n - e.first);
    return QS_OK;
}

/* The per-tensor scale (FP8 or NVFP4) into *out (device); a given scale > 0 wins. */
static qs_status tensor_scale(struct qs_cu_run *r, const qs_backend_layout *l, const void *src,
                              int32_t dtype, float given, int nvfp4, float *out)
{
    struct qs_cu_tensor_scale a;
    struct qs_cu_pair *partial = NULL;
    int64_t chunks = 0;
    qs_status st;

    if (!(given > 0.0f) &&
        (st = qs_cu_reduce(r, src, dtype, 1, l->n, QS_CU_RED_AMAX, &partial, &chunks)) != QS_OK)
        return st;
    a.partial = partial;
    a.chunks = chunks;
    a.given = given;
    a.elem_max = l->elem_max;
    a.nvfp4 = nvfp4;
    a.out = out;
    QS_CU_LAUNCH(r, QS_CU_K_TENSOR_SCALE, &a, 1);
    return QS_OK;
}

static qs_status quant_fp8(struct qs_cu_run *r, const qs_backend_layout *l,
                           const qs_quant_params *p, const void *src, int32_t dtype, qs_qtensor *q)
{
    int64_t per = 16 / qs_cu_dsize(dtype);
    int vec = qs_cu_aligned(src, 16) && qs_cu_aligned(q->data, 8);
    struct qs_cu_ewq e;
    qs_status st;

    if ((st = tensor_scale(r, l, src, dtype, p->scale, 0, q->scale)) != QS_OK)
        return st;
    memset(&e, 0, sizeof e);
    e.fp8 = 1;
    e.e5m2 = l->element == QS_BACKEND_ELEM_E5M2;
    e.dtype = dtype;
    e.unit_len = 1;
    e.src = src;
    e.scale = q->scale;
    e.data = q->data;
    if (vec)
        QS_CU_LAUNCH(r, QS_CU_K_EWQ_TILE, &e, l->n / per);
    e.first = vec ? l->n / per * per : 0;
    QS_CU_LAUNCH(r, QS_CU_K_EWQ_ELEM, &e, l->n - e.first);
    return QS_OK;
}

static qs_status quant_rows(struct qs_cu_run *r, const qs_backend_layout *l,
                            const qs_quant_params *p, const void *src, int32_t dtype,
                            qs_qtensor *q)
{
    int nv = l->family == QS_BACKEND_FAMILY_NV;
    float *sg = NULL;
    qs_status st;

    if (nv) {
        sg = qs_cu_scratch(r, sizeof(float));
        QS_CU_NEED(r, sg);
        if ((st = tensor_scale(r, l, src, dtype, p->scale, 1, sg)) != QS_OK)
            return st;
    }
    if (qs_cu_aligned(src, 16) && qs_cu_aligned(q->data, 8) && l->cols % l->block == 0 &&
        l->block % (16 / qs_cu_dsize(dtype)) == 0) {
        struct qs_cu_bq a;
        bq_init(&a, nv ? QS_CU_BQ_NV : QS_CU_BQ_MX, dtype, src, l->block, l->n / l->block,
                q->data);
        a.sub = l->element == QS_BACKEND_ELEM_E4M3;
        a.rounding = p->scale_rounding;
        a.bscale = q->scale;
        a.s_global = sg;
        QS_CU_LAUNCH(r, QS_CU_K_BQ, &a, a.blocks);
    } else {
        struct qs_cu_rows a;
        memset(&a, 0, sizeof a);
        if ((st = as_f32(r, src, dtype, l->n, &a.src)) != QS_OK)
            return st;
        a.kind = nv ? QS_CU_ROW_NVFP4
                    : l->element == QS_BACKEND_ELEM_E2M1 ? QS_CU_ROW_MXFP4 : QS_CU_ROW_MXFP8;
        a.block = l->block;
        a.rounding = p->scale_rounding;
        a.cols = l->cols;
        a.row_bytes = l->plane[QS_PLANE_DATA].shape[1];
        a.spr = qs_cu_ceil_div(l->cols, l->block);
        a.data = q->data;
        a.scales = q->scale;
        a.s_global = sg;
        QS_CU_LAUNCH(r, QS_CU_K_ROWS_QUANT, &a, l->rows * a.spr);
    }
    if (nv) {
        /* computed on the device: the tensor's field needs it (a host wait); an empty tensor's
         * amax is 0, whose scale is 1 (qs_hd_nvfp4_global_scale) */
        float s = p->scale > 0.0f ? p->scale : 1.0f;
        if (!(p->scale > 0.0f) && l->n > 0)
            QS_CU_TO_HOST(r, &s, sg, sizeof s);
        q->global_scale = s;
    }
    return QS_OK;
}

int qs_cu_quantize_waits(const qs_backend_layout *l, const qs_quant_params *p, int32_t reject)
{
    if (l->n == 0)
        return 0;
    return reject || (l->family == QS_BACKEND_FAMILY_BNB4 && p->double_quant) ||
           (l->family == QS_BACKEND_FAMILY_NV && !(p->scale > 0.0f));
}

qs_status qs_cu_quantize(const struct qs_cu_exec *x, const qs_backend_layout *l,
                         const qs_quant_params *p, const void *src, int32_t dtype, qs_qtensor *q,
                         int32_t reject, char *err, size_t err_len)
{
    struct qs_cu_run r = {.x = x, .err = err, .err_len = err_len};
    qs_qtensor out = *q; /* struct fields are written only on success */
    qs_status st = QS_OK;

    err[0] = '\0';
    if (reject && l->n > 0 && (st = scan(&r, src, dtype, l->n)) != QS_OK)
        goto done;
    switch (l->family) {
    case QS_BACKEND_FAMILY_BNB4: st = quant_bnb4(&r, l, p, src, dtype, &out); break;
    case QS_BACKEND_FAMILY_INT8: st = quant_int8(&r, l, src, dtype, &out); break;
    case QS_BACKEND_FAMILY_FP8: st = quant_fp8(&r, l, p, src, dtype, &out); break;
    default: st = quant_rows(&r, l, p, src, dtype, &out); break;
    }
    if (st == QS_OK) {
        q->global_scale = out.global_scale;
        q->nested_offset = out.nested_offset;
    }
done:
    qs_cu_release_all(&r);
    return st;
}

/* ---- dequantize ----------------------------------------------------------------------------- */

void qs_cu_deq_setup(const qs_backend_layout *l, const qs_qtensor *q, const float *tab,
                     struct qs_cu_deq *a)
{
    memset(a, 0, sizeof *a);
    a->data = q->data;
    a->tab = tab;
    a->cols = l->cols > 0 ? l->cols : 1;
    a->unit = 1;
    switch (l->family) {
    case QS_BACKEND_FAMILY_BNB4:
        a->rule = QS_CU_DQ_BNB4;
        a->sub = l->element == QS_BACKEND_ELEM_FP4;
        a->unit = l->block;
        a->dq = (l->flags & QS_BACKEND_LAYOUT_DOUBLE_QUANT) != 0;
        a->fscale = q->scale;
        a->bscale = q->scale;
        a->nested = q->nested_scale;
        a->offset = q->nested_offset;
        break;
    case QS_BACKEND_FAMILY_INT8:
        a->rule = QS_CU_DQ_INT8;
        a->sub = (l->flags & QS_BACKEND_LAYOUT_ROWSTAT) != 0;
        a->unit = l->unit_rule == QS_BACKEND_UNITS_ROWS         ? l->cols
                  : l->unit_rule == QS_BACKEND_UNITS_ROW_BLOCKS ? l->block
                                                                : l->n;
        a->fscale = q->scale;
        a->zero_point = (l->flags & QS_BACKEND_LAYOUT_ZERO_POINT) ? q->zero_point : NULL;
        break;
    case QS_BACKEND_FAMILY_FP8:
        a->rule = QS_CU_DQ_FP8;
        a->sub = l->element == QS_BACKEND_ELEM_E5M2;
        a->unit = l->n;
        a->fscale = q->scale;
        break;
    default:
        a->rule = l->family == QS_BACKEND_FAMILY_NV ? QS_CU_DQ_NV : QS_CU_DQ_MX;
        a->sub = l->element == QS_BACKEND_ELEM_E4M3;
        a->unit = l->block;
        a->bscale = q->scale;
        a->s_global = q->global_scale;
        a->row_bytes = l->plane[QS_PLANE_DATA].shape[1];
        a->spr = qs_cu_ceil_div(l->cols, l->block);
        break;
    }
    if (a->unit <= 0)
        a->unit = 1;
}

qs_status qs_cu_dequantize(const struct qs_cu_exec *x, const qs_backend_layout *l,
                           const qs_quant_params *p, const qs_qtensor *q, void *dst, int32_t dtype,
                           char *err, size_t err_len)
{
    struct qs_cu_run r = {.x = x, .err = err, .err_len = err_len};
    struct qs_cu_deq a;
    int64_t per, tiles = 0;
    int vec;

    err[0] = '\0';
    qs_cu_deq_setup(l, q, x->tab, &a);
    a.dtype = dtype;
    a.dst = dst;
    per = qs_cu_deq_bits(&a) == 4 ? 32 : 16;
    vec = qs_cu_aligned(q->data, 16) && qs_cu_aligned(dst, 16);
    if (a.rule == QS_CU_DQ_MX || a.rule == QS_CU_DQ_NV) /* flat only where rows are whole tiles */
        vec = vec && l->cols % l->block == 0 && l->cols % per == 0;
    if (vec) {
        tiles = l->n / per;
        QS_CU_LAUNCH(&r, QS_CU_K_DEQ_TILE, &a, tiles);
    }
    a.first = tiles * per;
    QS_CU_LAUNCH(&r, QS_CU_K_DEQ_ELEM, &a, l->n - a.first);
    (void)p;
    return QS_OK;
}

/* ---- 2:4 ------------------------------------------------------------------------------------- */

qs_status qs_cu_sp24_run(const struct qs_cu_exec *x, const struct qs_cu_sp24 *a, int64_t rows,
                         char *err, size_t err_len)
{
    struct qs_cu_run r = {.x = x, .err = err, .err_len = err_len};
    int64_t count = rows * a->words;
    int decompress = a->op < 0;
    qs_status st = QS_OK;

    err[0] = '\0';
    if (count == 0)
        return QS_OK;
    if (a->op != QS_CU_SP24_PRUNE) {
        struct qs_cu_sp24_check c = {*a, decompress, NULL};
        unsigned long long first = ~0ull;
        c.first = qs_cu_scratch(&r, sizeof first);
        if (!c.first) {
            st = qs_cu_fail(&r, QS_ERR_OUT_OF_MEMORY, "cuda backend: no device memory for scratch");
            goto done;
        }
        if (x->to_device(x->user, c.first, &first, sizeof first) ||
            x->launch(x->user, QS_CU_K_SP24_CHECK, &c, count) ||
            x->to_host(x->user, &first, c.first, sizeof first)) {
            st = qs_cu_fail(&r, QS_ERR_BACKEND, "cuda backend: 2:4 validation failed");
            goto done;
        }
        if (first != ~0ull) {
            int64_t row = (int64_t)first / a->words, col = (int64_t)first % a->words * 16;
            st = qs_cu_fail(&r, QS_ERR_BAD_DATA,
                            decompress ? "2:4 meta word at row %lld, column %lld holds an invalid "
                                         "nibble"
                                       : "a 2:4 group at row %lld, columns %lld.. keeps more "
                                         "than 2",
                            (long long)row, (long long)col);
            goto done;
        }
    }
    if (x->launch(x->user, decompress ? QS_CU_K_SP24_DECOMPRESS : QS_CU_K_SP24_COMPRESS, a,
                  count))
        st = qs_cu_fail(&r, QS_ERR_BACKEND, "cuda backend: 2:4 kernel failed");
done:
    qs_cu_release_all(&r);
    return st;
}
