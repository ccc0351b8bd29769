/* SPDX-License-Identifier: MIT */
/*
 * Weights of every kind qs_matmul takes, for the matmul tests (test_matmul, test_matmul_pack):
 * one spec per kind, format and option, built from f32 values through the public API together
 * with the f32 matrix they stand for (qs_dequantize / qs_sp24_decompress / qs_sp24_dequantize).
 * Header-only; include it after common.h and quant_helpers.h.
 */
#ifndef QS_TESTS_MATMUL_WEIGHTS_H
#define QS_TESTS_MATMUL_WEIGHTS_H

#include "common.h"
#include "quant_helpers.h"

/* A weight of one kind for an N x K matrix, with its dequantized f32 form. */
typedef struct {
    const char *name;
    int32_t kind, format, dtype; /* dtype: DENSE / SP24 values */
    int32_t gran, sym, dq, block;
} wspec;

typedef struct {
    qs_weight w;
    qs_quant_params p;
    tq t;
    t_buf values;
    uint16_t *meta;
    float *dense; /* N x K dequantized */
} wobj;

static const wspec specs[] = {
    {"f32", QS_WEIGHT_DENSE, 0, QS_DTYPE_F32, 0, 0, 0, 0},
    {"bf16", QS_WEIGHT_DENSE, 0, QS_DTYPE_BF16, 0, 0, 0, 0},
    {"nf4", QS_WEIGHT_QUANT, QS_FORMAT_NF4, 0, 0, 0, 0, 64},
    {"nf4-dq-b32", QS_WEIGHT_QUANT, QS_FORMAT_NF4, 0, 0, 0, 1, 32},
    {"nf4-b6", QS_WEIGHT_QUANT, QS_FORMAT_NF4, 0, 0, 0, 0, 6},
    {"fp4", QS_WEIGHT_QUANT, QS_FORMAT_FP4, 0, 0, 0, 0, 64},
    {"fp4-dq", QS_WEIGHT_QUANT, QS_FORMAT_FP4, 0, 0, 0, 1, 64},
    {"int8-tensor", QS_WEIGHT_QUANT, QS_FORMAT_INT8, 0, QS_GRAN_TENSOR, 1, 0, 0},
    {"int8-row", QS_WEIGHT_QUANT, QS_FORMAT_INT8, 0, QS_GRAN_ROW, 1, 0, 0},
    {"int8-row-asym", QS_WEIGHT_QUANT, QS_FORMAT_INT8, 0, QS_GRAN_ROW, 0, 0, 0},
    {"int8-tensor-asym", QS_WEIGHT_QUANT, QS_FORMAT_INT8, 0, QS_GRAN_TENSOR, 0, 0, 0},
    {"int8-group", QS_WEIGHT_QUANT, QS_FORMAT_INT8, 0, QS_GRAN_GROUP, 1, 0, -1},
    {"int8-group-asym", QS_WEIGHT_QUANT, QS_FORMAT_INT8, 0, QS_GRAN_GROUP, 0, 0, -1},
    {"llm_int8", QS_WEIGHT_QUANT, QS_FORMAT_LLM_INT8, 0, 0, 0, 0, 0},
    {"e4m3", QS_WEIGHT_QUANT, QS_FORMAT_FP8_E4M3, 0, 0, 0, 0, 0},
    {"e5m2", QS_WEIGHT_QUANT, QS_FORMAT_FP8_E5M2, 0, 0, 0, 0, 0},
    {"mxfp4", QS_WEIGHT_QUANT, QS_FORMAT_MXFP4, 0, 0, 0, 0, 0},
    {"mxfp8", QS_WEIGHT_QUANT, QS_FORMAT_MXFP8, 0, 0, 0, 0, 0},
    {"nvfp4", QS_WEIGHT_QUANT, QS_FORMAT_NVFP4, 0, 0, 0, 0, 0},
    {"sp24-f32", QS_WEIGHT_SP24, 0, QS_DTYPE_F32, 0, 0, 0, 0},
    {"sp24-f16", QS_WEIGHT_SP24, 0, QS_DTYPE_F16, 0, 0, 0, 0},
    {"sp24-bf16", QS_WEIGHT_SP24, 0, QS_DTYPE_BF16, 0, 0, 0, 0},
    {"sp24-nf4", QS_WEIGHT_SP24_QUANT, QS_FORMAT_NF4, 0, 0, 0, 0, 64},
    {"sp24-int8-row", QS_WEIGHT_SP24_QUANT, QS_FORMAT_INT8, 0, QS_GRAN_ROW, 1, 0, 0},
    {"sp24-mxfp4", QS_WEIGHT_SP24_QUANT, QS_FORMAT_MXFP4, 0, 0, 0, 0, 0},
    {"sp24-nvfp4", QS_WEIGHT_SP24_QUANT, QS_FORMAT_NVFP4, 0, 0, 0, 0, 0},
    {"sp24-e4m3", QS_WEIGHT_SP24_QUANT, QS_FORMAT_FP8_E4M3, 0, 0, 0, 0, 0},
};
#define NSPECS ((int)(sizeof specs / sizeof specs[0]))

static inline int is_sparse(const wspec *s)
{
    return s->kind == QS_WEIGHT_SP24 || s->kind == QS_WEIGHT_SP24_QUANT;
}

static inline void fill(t_rng *r, float *x, int64_t n, double scale)
{
    for (int64_t i = 0; i < n; i++)
        x[i] = (float)(t_normal(r) * scale);
}

/* Build the weight of spec s for N x K from f32 values w0; K must suit the spec. */
static inline void wobj_make(qs_ctx *ctx, const wspec *s, const float *w0, int64_t N, int64_t K, wobj *o)
{
    int64_t n = N * K, vb = 0, mc = 0;

    memset(o, 0, sizeof *o);
    o->w.kind = s->kind;
    o->dense = malloc((size_t)(n > 0 ? n : 1) * sizeof(float));
    assert_non_null(o->dense);
    if (s->kind == QS_WEIGHT_QUANT || s->kind == QS_WEIGHT_SP24_QUANT) {
        o->p = params(s->format);
        if (s->format == QS_FORMAT_NF4 || s->format == QS_FORMAT_FP4) {
            o->p.block_size = s->block;
            o->p.double_quant = s->dq;
        }
        if (s->format == QS_FORMAT_INT8) {
            o->p.granularity = s->gran;
            o->p.symmetric = s->sym;
            if (s->gran == QS_GRAN_GROUP) { /* a group dividing the stored columns */
                int64_t cols = is_sparse(s) ? K / 2 : K;
                o->p.block_size = cols % 8 == 0 ? 8 : cols % 2 == 0 ? 2 : 1;
            }
        }
        o->w.quant = &o->p;
        o->w.q = &o->t.q;
    }
    if (!is_sparse(s)) {
        if (s->kind == QS_WEIGHT_DENSE) {
            o->w.dtype = s->dtype;
            o->values = t_buf_new((size_t)(n * qs_dtype_size(s->dtype)));
            assert_int_equal(qs_convert(ctx, w0, QS_DTYPE_F32, o->values.p, s->dtype, n,
                                        (int64_t)o->values.bytes),
                             QS_OK);
            assert_int_equal(
                qs_convert(ctx, o->values.p, s->dtype, o->dense, QS_DTYPE_F32, n, n * 4), QS_OK);
            o->w.data = o->values.p;
            o->w.data_bytes = (int64_t)o->values.bytes;
        } else {
            quant(ctx, &o->p, w0, QS_DTYPE_F32, N, K, &o->t);
            assert_int_equal(
                qs_dequantize(ctx, &o->p, &o->t.q, N, K, o->dense, QS_DTYPE_F32, n * 4), QS_OK);
        }
        return;
    }
    /* 2:4: prune by magnitude, then keep the values in the spec's form. */
    assert_int_equal(qs_sp24_size(QS_DTYPE_F32, N, K, &vb, &mc), QS_OK);
    float *vals = malloc((size_t)(vb > 0 ? vb : 4));
    float *pruned = malloc((size_t)(n > 0 ? n : 1) * sizeof(float));
    o->meta = malloc((size_t)(mc > 0 ? mc : 1) * sizeof(uint16_t));
    assert_true(vals && pruned && o->meta);
    assert_int_equal(
        qs_sp24_prune_compress(ctx, w0, QS_DTYPE_F32, N, K, NULL, vals, vb, o->meta, mc, NULL, 0),
        QS_OK);
    assert_int_equal(qs_sp24_decompress(ctx, vals, QS_DTYPE_F32, o->meta, mc, N, K, pruned, n * 4),
                     QS_OK);
    o->w.meta = o->meta;
    o->w.meta_count = mc;
    if (s->kind == QS_WEIGHT_SP24) {
        int64_t nv = n / 2;
        o->w.dtype = s->dtype;
        o->values = t_buf_new((size_t)(nv * qs_dtype_size(s->dtype)));
        assert_int_equal(qs_convert(ctx, vals, QS_DTYPE_F32, o->values.p, s->dtype, nv,
                                    (int64_t)o->values.bytes),
                         QS_OK);
        o->w.data = o->values.p;
        o->w.data_bytes = (int64_t)o->values.bytes;
        if (s->dtype == QS_DTYPE_F32) {
            memcpy(o->dense, pruned, (size_t)n * sizeof(float));
        } else { /* decompress in the values' dtype, then widen */
            uint16_t *h = malloc((size_t)(n > 0 ? n : 1) * 2);
            assert_int_equal(
                qs_sp24_decompress(ctx, o->values.p, s->dtype, o->meta, mc, N, K, h, n * 2), QS_OK);
            assert_int_equal(qs_convert(ctx, h, s->dtype, o->dense, QS_DTYPE_F32, n, n * 4), QS_OK);
            free(h);
        }
    } else {
        tq_new(&o->t, &o->p, N, K / 2);
        assert_int_equal(
            qs_sp24_quantize(ctx, &o->p, pruned, QS_DTYPE_F32, N, K, NULL, &o->t.q, o->meta, mc),
            QS_OK);
        assert_int_equal(qs_sp24_dequantize(ctx, &o->p, &o->t.q, o->meta, mc, N, K, o->dense,
                                            QS_DTYPE_F32, n * 4),
                         QS_OK);
    }
    free(vals);
    free(pruned);
}

static inline void wobj_free(wobj *o)
{
    if (o->w.q)
        tq_free(&o->t);
    if (o->values.base)
        t_buf_free(&o->values);
    free(o->meta);
    free(o->dense);
}

#endif /* QS_TESTS_MATMUL_WEIGHTS_H */
