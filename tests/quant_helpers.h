/* SPDX-License-Identifier: MIT */
/*
 * Helpers of the C format tests (test_api, test_fp8, test_int8, test_mx, test_nvfp4, test_bnb4,
 * test_spec_tables) kept in one place so that every test drives the public API the same way:
 * quantized tensors whose planes are canary-guarded buffers sized by qs_quant_size,
 * quantize / dequantize wrappers that check status, error text and guards, a tensor over caller
 * memory, and the element formats restated from docs/formats.md §10 (E2M1, E4M3) with the
 * brute-force nearest-code search that the independent encoders of the tests use. Header-only;
 * include it after common.h.
 */
#ifndef QS_TESTS_QUANT_HELPERS_H
#define QS_TESTS_QUANT_HELPERS_H

#include "common.h"

/* ---- quantized tensors with canary-guarded planes -------------------------------------------- */

/* A quantized tensor whose planes are canary-guarded buffers sized by qs_quant_size. */
typedef struct {
    t_buf plane[QS_PLANE_COUNT];
    qs_qtensor q;
} tq;

static inline void tq_new(tq *t, const qs_quant_params *p, int64_t rows, int64_t cols)
{
    memset(t, 0, sizeof *t);
    void **ptr[QS_PLANE_COUNT] = {&t->q.data, &t->q.scale, &t->q.zero_point, &t->q.nested_scale};
    int64_t *cap[QS_PLANE_COUNT] = {&t->q.data_bytes, &t->q.scale_bytes, &t->q.zero_point_bytes,
                                    &t->q.nested_scale_bytes};

    for (int i = 0; i < QS_PLANE_COUNT; i++) {
        int64_t bytes = -1;
        assert_int_equal(qs_quant_size(p, rows, cols, i, &bytes), QS_OK);
        assert_true(bytes >= 0);
        t->plane[i] = t_buf_new((size_t)bytes);
        *ptr[i] = bytes > 0 ? t->plane[i].p : NULL; /* unused planes stay NULL */
        *cap[i] = bytes;
    }
}

static inline void tq_free(tq *t)
{
    for (int i = 0; i < QS_PLANE_COUNT; i++)
        t_buf_free(&t->plane[i]);
}

static inline void tq_guards(const tq *t)
{
    for (int i = 0; i < QS_PLANE_COUNT; i++)
        assert_true(t_buf_guards_ok(&t->plane[i]));
}

/* Quantize into a fresh tq (caller frees); success must leave no error text and intact guards. */
static inline void quant(qs_ctx *ctx, const qs_quant_params *p, const void *src, int32_t dt,
                         int64_t rows, int64_t cols, tq *t)
{
    tq_new(t, p, rows, cols);
    assert_int_equal(qs_quantize(ctx, p, src, dt, rows, cols, &t->q), QS_OK);
    assert_string_equal(qs_ctx_last_error(ctx), "");
    tq_guards(t);
}

/* Dequantize into a fresh canary-guarded buffer of `dt` elements (caller frees). */
static inline t_buf dequant(qs_ctx *ctx, const qs_quant_params *p, const tq *t, int64_t rows,
                            int64_t cols, int32_t dt)
{
    t_buf out = t_buf_new((size_t)(rows * cols * qs_dtype_size(dt)));
    assert_int_equal(qs_dequantize(ctx, p, &t->q, rows, cols, out.p, dt, (int64_t)out.bytes),
                     QS_OK);
    assert_true(t_buf_guards_ok(&out));
    return out;
}

/* Quantize then dequantize to f32 (both checked as above), for tests that look only at the
 * decoded values; the caller frees the returned buffer. */
static inline t_buf quant_dequant_f32(qs_ctx *ctx, const qs_quant_params *p, const void *src,
                                      int64_t rows, int64_t cols)
{
    tq t;
    quant(ctx, p, src, QS_DTYPE_F32, rows, cols, &t);
    t_buf out = dequant(ctx, p, &t, rows, cols, QS_DTYPE_F32);
    tq_free(&t);
    return out;
}

/* The 16-bit dequantization of t is its f32 one (`f32`, rows * cols values) rounded once
 * (docs/formats.md §0 rule 4), not a second decode path. `h` is scratch for rows * cols values. */
static inline void assert_dequant_16(qs_ctx *ctx, const char *what, const qs_quant_params *p,
                                     const tq *t, int64_t rows, int64_t cols, int32_t dt,
                                     const void *f32, uint16_t *h)
{
    int64_t n = rows * cols;
    t_buf o16 = dequant(ctx, p, t, rows, cols, dt);
    assert_int_equal(qs_convert(ctx, f32, QS_DTYPE_F32, h, dt, n, n * 2), QS_OK);
    T_ASSERT_BYTES(what, o16.p, h, (size_t)n * 2);
    t_buf_free(&o16);
}

/* Round x to `dt` into h and widen that back into xw: a 16-bit input must give the planes of
 * exactly these f32 values. */
static inline void round_16(qs_ctx *ctx, const float *x, int64_t n, int32_t dt, uint16_t *h,
                            float *xw)
{
    assert_int_equal(qs_convert(ctx, x, QS_DTYPE_F32, h, dt, n, n * 2), QS_OK);
    assert_int_equal(qs_convert(ctx, h, dt, xw, QS_DTYPE_F32, n, n * 4), QS_OK);
}

/* A decoded element against the restated decoder: bit for bit, except that any NaN matches any
 * NaN (the restated decoders make theirs with the C NAN macro, not with the library's bits). */
static inline void assert_decoded(const char *what, int64_t r, int64_t c, float got, float want)
{
    if (t_bits(got) != t_bits(want) && !(isnan(got) && isnan(want))) {
        print_error("%s %lld,%lld: got %a want %a\n", what, (long long)r, (long long)c, (double)got,
                    (double)want);
        fail();
    }
}

static inline qs_quant_params params(int32_t format)
{
    qs_quant_params p;
    qs_quant_params_init(&p, format);
    return p;
}

/* A tensor over caller memory: a data plane and a scale plane, the others empty. For the
 * hand-built inputs that no quantize call produced (fixed codes, a chosen scale). */
static inline qs_qtensor qt_over(void *data, int64_t data_bytes, void *scale, int64_t scale_bytes)
{
    qs_qtensor q = {0};
    q.data = data;
    q.data_bytes = data_bytes;
    q.scale = scale;
    q.scale_bytes = scale_bytes;
    return q;
}

/* ---- element formats, restated from docs/formats.md §10 -------------------------------------- */

static inline float e2m1_value(int c)
{
    static const float mag[8] = {0.0f, 0.5f, 1.0f, 1.5f, 2.0f, 3.0f, 4.0f, 6.0f};
    return (c & 8) ? -mag[c & 7] : mag[c & 7];
}

static inline float e4m3_value(int c)
{
    int e = (c >> 3) & 0xF, m = c & 7;
    float v;
    if ((c & 0x7F) == 0x7F)
        v = NAN;
    else
        v = e == 0 ? (float)ldexp(m, -9) : (float)ldexp(8 + m, e - 10);
    return (c & 0x80) ? -v : v;
}

/* Nearest code by brute force, ties to the even code, saturating; the sign bit is copied (so
 * -0.0 keeps it). `sbit` is the sign bit of the format (0x8 or 0x80), `maxc` the top finite
 * code. NaN is the caller's business: the formats disagree on its code. */
static inline int nearest(float x, int maxc, int sbit, float (*value)(int))
{
    int sign = (t_bits(x) >> 31) ? sbit : 0, best = 0;
    double a = fabs((double)x), bestd = INFINITY;

    if (a >= (double)value(maxc)) /* saturate; also keeps huge distances out of the ties */
        return sign | maxc;
    for (int c = 0; c <= maxc; c++) {
        double d = fabs(a - (double)value(c));
        if (d < bestd || (d == bestd && !(c & 1))) {
            bestd = d;
            best = c;
        }
    }
    return sign | best;
}

#endif /* QS_TESTS_QUANT_HELPERS_H */
