/* SPDX-License-Identifier: MIT */
/*
 * Hessian statistics, GPTQ and SparseGPT (docs/calibration.md §14-§16): the Hessian against a
 * double-precision reference (exactly for small-integer activations, where every sum is exact),
 * merges against one update over the concatenation, f16/bf16 inputs against f32, the serialized
 * form round trip and every kind of corruption; GPTQ with H = I against qs_quantize bit for bit in
 * every supported format (the strongest check of the fixed-scale grid: same scales, same codes,
 * same planes); GPTQ below round-to-nearest on a correlated synthetic layer; SparseGPT's output a
 * valid 2:4 weight with less output error than magnitude pruning, and its joint 2:4 + format
 * planes decoding to the dense weight it reports; every error status with untouched outputs.
 */
#include "common.h"

#define K 128
#define R 48
#define T 600

static void gen_acts(t_rng *rng, float *x, int64_t rows, int64_t k)
{
    /* correlated inputs: a shared low-rank part plus noise, scales varying per feature */
    float basis[4][K];
    for (int i = 0; i < 4; i++)
        for (int64_t j = 0; j < k; j++)
            basis[i][j] = (float)t_normal(rng);
    for (int64_t t = 0; t < rows; t++) {
        double z[4];
        for (int i = 0; i < 4; i++)
            z[i] = t_normal(rng);
        for (int64_t j = 0; j < k; j++) {
            double v = 0.3 * t_normal(rng);
            for (int i = 0; i < 4; i++)
                v += z[i] * basis[i][j];
            x[t * k + j] = (float)(v * (0.2 + (double)(j % 7)));
        }
    }
}

static void gen_weight(t_rng *rng, float *w, int64_t n)
{
    for (int64_t i = 0; i < n; i++)
        w[i] = (float)(0.05 * t_normal(rng));
}

/* ||X W^T - X V^T||_F^2 in double. */
static double out_err(const float *x, int64_t t, const float *w, const float *v, int64_t rows,
                      int64_t k)
{
    double e = 0.0;
    for (int64_t a = 0; a < t; a++)
        for (int64_t r = 0; r < rows; r++) {
            double d = 0.0;
            for (int64_t j = 0; j < k; j++)
                d += (double)x[a * k + j] * ((double)w[r * k + j] - (double)v[r * k + j]);
            e += d * d;
        }
    return e;
}

static qs_hessian *hessian_of(qs_ctx *ctx, const float *x, int64_t t, int64_t k)
{
    qs_hessian *h = NULL;
    assert_int_equal(qs_hessian_create(ctx, k, &h), QS_OK);
    assert_int_equal(qs_hessian_update(ctx, h, x, QS_DTYPE_F32, t, k), QS_OK);
    return h;
}

/* ---- Hessian ----------------------------------------------------------------------------------- */

static void test_hessian_reference(void **state)
{
    (void)state;
    qs_ctx *ctx = t_ctx();
    t_rng rng = {11};
    const int64_t t = 4500, k = 40; /* three chunks of 2048 rows, the last partial */
    float *x = malloc((size_t)(t * k) * sizeof(float));
    double *ref = calloc((size_t)(k * k), sizeof(double)), *got = malloc((size_t)(k * k) * 8);
    double *mag = calloc((size_t)(k * k), sizeof(double));
    for (int64_t i = 0; i < t * k; i++)
        x[i] = (float)t_normal(&rng);
    for (int64_t a = 0; a < t; a++)
        for (int64_t r = 0; r < k; r++)
            for (int64_t c = 0; c < k; c++) {
                double p = (double)x[a * k + r] * (double)x[a * k + c];
                ref[r * k + c] += 2.0 * p;
                mag[r * k + c] += 2.0 * fabs(p);
            }
    qs_hessian *h = hessian_of(ctx, x, t, k);
    int64_t kk, tok;
    assert_int_equal(qs_hessian_info(h, &kk, &tok), QS_OK);
    assert_int_equal(kk, k);
    assert_int_equal(tok, t);
    assert_int_equal(qs_hessian_get(ctx, h, got, k * k), QS_OK);
    for (int64_t i = 0; i < k * k; i++) {
        /* the documented bound (calibration.md §14): f32 sums over at most 2048 rows, so within
         * 2050 * 2^-24 of the sum of |products| (the chunks' double additions add nothing
         * visible); and in practice far inside 1e-5 of the diagonal scale (~2 t) */
        if (fabs(got[i] - ref[i]) > 2050.0 * 0x1p-24 * mag[i])
            fail_msg("H[%lld] = %.9g, reference %.9g: outside the f32 bound %.3g", (long long)i,
                     got[i], ref[i], 2050.0 * 0x1p-24 * mag[i]);
        if (fabs(got[i] - ref[i]) > 1e-5 * 2.0 * (double)t)
            fail_msg("H[%lld] = %.9g, reference %.9g", (long long)i, got[i], ref[i]);
        assert_true(got[i] == got[(i % k) * k + i / k]); /* symmetric */
    }
    /* a wrong element must be caught by the same comparison */
    assert_true(fabs((got[3] + 1.0) - ref[3]) > 1e-5 * 2.0 * (double)t);
    qs_hessian_destroy(h);
    free(x);
    free(ref);
    free(mag);
    free(got);
    qs_ctx_destroy(ctx);
}

/* Small integers: every product and sum is exact in f32 and double, so merges, chunkings and
 * dtypes must agree bit for bit. */
static void test_hessian_exact_merge_dtypes(void **state)
{
    (void)state;
    qs_ctx *ctx = t_ctx();
    t_rng rng = {12};
    const int64_t t = 2600, k = 24; /* two chunks of rows; the f16 shard spans two as well */
    float *x = malloc((size_t)(t * k) * sizeof(float));
    uint16_t *xh = malloc((size_t)(t * k) * 2), *xb = malloc((size_t)(t * k) * 2);
    double *a = malloc((size_t)(k * k) * 8), *b = malloc((size_t)(k * k) * 8);
    double *ref = calloc((size_t)(k * k), 8);
    for (int64_t i = 0; i < t * k; i++)
        x[i] = (float)((int)(t_next(&rng) % 9) - 4);
    for (int64_t s = 0; s < t; s++)
        for (int64_t r = 0; r < k; r++)
            for (int64_t c = 0; c < k; c++)
                ref[r * k + c] += 2.0 * (double)x[s * k + r] * (double)x[s * k + c];
    assert_int_equal(qs_convert(ctx, x, QS_DTYPE_F32, xh, QS_DTYPE_F16, t * k, t * k * 2), QS_OK);
    assert_int_equal(qs_convert(ctx, x, QS_DTYPE_F32, xb, QS_DTYPE_BF16, t * k, t * k * 2), QS_OK);

    qs_hessian *whole = hessian_of(ctx, x, t, k), *p1 = hessian_of(ctx, x, 300, k), *p2;
    assert_int_equal(qs_hessian_create(ctx, k, &p2), QS_OK);
    assert_int_equal(qs_hessian_update(ctx, p2, xh + 300 * k, QS_DTYPE_F16, 2100, k), QS_OK);
    assert_int_equal(qs_hessian_update(ctx, p2, xb + 2400 * k, QS_DTYPE_BF16, 200, k), QS_OK);
    assert_int_equal(qs_hessian_merge(ctx, p1, p2), QS_OK);
    assert_int_equal(qs_hessian_get(ctx, whole, a, k * k), QS_OK);
    assert_int_equal(qs_hessian_get(ctx, p1, b, k * k), QS_OK);
    T_ASSERT_BYTES("whole vs reference", a, ref, (size_t)(k * k) * 8);
    T_ASSERT_BYTES("merged shards vs whole", b, a, (size_t)(k * k) * 8);
    int64_t tok;
    assert_int_equal(qs_hessian_info(p1, NULL, &tok), QS_OK);
    assert_int_equal(tok, t);
    /* misaligned f32 input is staged, same result */
    float *mis = malloc((size_t)(t * k) * sizeof(float) + 4);
    memcpy((char *)mis + 2, x, (size_t)(t * k) * sizeof(float));
    qs_hessian *hm;
    assert_int_equal(qs_hessian_create(ctx, k, &hm), QS_OK);
    assert_int_equal(qs_hessian_update(ctx, hm, (char *)mis + 2, QS_DTYPE_F32, t, k), QS_OK);
    assert_int_equal(qs_hessian_get(ctx, hm, b, k * k), QS_OK);
    T_ASSERT_BYTES("misaligned vs aligned", b, a, (size_t)(k * k) * 8);
    /* merge with itself doubles */
    assert_int_equal(qs_hessian_merge(ctx, hm, hm), QS_OK);
    assert_int_equal(qs_hessian_get(ctx, hm, b, k * k), QS_OK);
    for (int64_t i = 0; i < k * k; i++)
        assert_true(b[i] == 2.0 * a[i]);

    qs_hessian_destroy(whole);
    qs_hessian_destroy(p1);
    qs_hessian_destroy(p2);
    qs_hessian_destroy(hm);
    free(mis);
    free(x);
    free(xh);
    free(xb);
    free(a);
    free(b);
    free(ref);
    qs_ctx_destroy(ctx);
}

static void test_hessian_errors(void **state)
{
    (void)state;
    qs_ctx *ctx = t_ctx();
    qs_hessian *h = NULL, *h2 = NULL, *keep = (qs_hessian *)0x1;
    float x[2 * 8] = {0};
    double m[4] = {1, 0, 0, -1};
    double before[64], after[64];

    assert_int_equal(qs_hessian_create(ctx, 0, &keep), QS_ERR_INVALID_ARG);
    assert_int_equal(qs_hessian_create(ctx, QS_HESSIAN_MAX_K + 1, &keep), QS_ERR_INVALID_ARG);
    assert_ptr_equal(keep, (qs_hessian *)0x1);
    assert_int_equal(qs_hessian_create(ctx, 8, NULL), QS_ERR_INVALID_ARG);
    assert_int_equal(qs_hessian_create(ctx, 8, &h), QS_OK);
    assert_int_equal(qs_hessian_create(ctx, 7, &h2), QS_OK);
    for (int i = 0; i < 16; i++)
        x[i] = (float)(i + 1);
    assert_int_equal(qs_hessian_update(ctx, h, x, QS_DTYPE_F32, 2, 8), QS_OK);
    assert_int_equal(qs_hessian_get(ctx, h, before, 64), QS_OK);
    assert_int_equal(qs_hessian_update(ctx, h, x, QS_DTYPE_F32, 2, 7), QS_ERR_SHAPE);
    assert_int_equal(qs_hessian_update(ctx, h, x, 9, 2, 8), QS_ERR_INVALID_ARG);
    assert_int_equal(qs_hessian_update(ctx, h, NULL, QS_DTYPE_F32, 2, 8), QS_ERR_INVALID_ARG);
    assert_int_equal(qs_hessian_update(ctx, h, x, QS_DTYPE_F32, -1, 8), QS_ERR_INVALID_ARG);
    x[13] = NAN;
    assert_int_equal(qs_hessian_update(ctx, h, x, QS_DTYPE_F32, 2, 8), QS_ERR_NONFINITE);
    x[13] = INFINITY;
    assert_int_equal(qs_hessian_update(ctx, h, x, QS_DTYPE_F32, 2, 8), QS_ERR_NONFINITE);
    assert_int_equal(qs_hessian_merge(ctx, h, h2), QS_ERR_SHAPE);
    assert_int_equal(qs_hessian_get(ctx, h, after, 63), QS_ERR_BUFFER_TOO_SMALL);
    assert_int_equal(qs_hessian_get(ctx, h, after, 64), QS_OK);
    T_ASSERT_BYTES("unchanged after errors", after, before, sizeof before);
    assert_int_equal(qs_hessian_update(ctx, h, x, QS_DTYPE_F32, 0, 8), QS_OK); /* no-op */
    keep = (qs_hessian *)0x1;
    assert_int_equal(qs_hessian_from_matrix(ctx, m, 2, 0, &keep), QS_ERR_INVALID_ARG);
    m[3] = NAN;
    assert_int_equal(qs_hessian_from_matrix(ctx, m, 2, 0, &keep), QS_ERR_INVALID_ARG);
    assert_ptr_equal(keep, (qs_hessian *)0x1);
    qs_hessian_destroy(h);
    qs_hessian_destroy(h2);
    qs_hessian_destroy(NULL);
    qs_ctx_destroy(ctx);
}

static uint64_t fnv(const uint8_t *p, int64_t n)
{
    uint64_t h = 0xCBF29CE484222325ull;
    for (int64_t i = 0; i < n; i++) {
        h ^= p[i];
        h *= 0x100000001B3ull;
    }
    return h;
}

static void reseal(uint8_t *p, int64_t n)
{
    uint64_t h = fnv(p, n - 8);
    for (int i = 0; i < 8; i++)
        p[n - 8 + i] = (uint8_t)(h >> (8 * i));
}

static void test_hessian_serialize(void **state)
{
    (void)state;
    qs_ctx *ctx = t_ctx();
    t_rng rng = {13};
    const int64_t t = 50, k = 9;
    float x[50 * 9];
    double a[81], b[81];
    for (int i = 0; i < t * k; i++)
        x[i] = (float)t_normal(&rng);
    qs_hessian *h = hessian_of(ctx, x, t, k), *back = NULL, *keep = (qs_hessian *)0x1;
    int64_t size, written;
    assert_int_equal(qs_hessian_serialized_size(h, &size), QS_OK);
    assert_int_equal(size, 32 + 8 * 45 + 8);
    uint8_t *buf = malloc((size_t)size + 1), *bad = malloc((size_t)size + 1);
    assert_int_equal(qs_hessian_serialize(ctx, h, buf, size - 1, &written), QS_ERR_BUFFER_TOO_SMALL);
    assert_int_equal(qs_hessian_serialize(ctx, h, buf, size, &written), QS_OK);
    assert_int_equal(written, size);
    assert_memory_equal(buf, "QSHS", 4);
    assert_int_equal(buf[4], QS_HESSIAN_FORMAT_VERSION);
    assert_int_equal(qs_hessian_deserialize(ctx, buf, size, &back), QS_OK);
    assert_int_equal(qs_hessian_get(ctx, h, a, 81), QS_OK);
    assert_int_equal(qs_hessian_get(ctx, back, b, 81), QS_OK);
    T_ASSERT_BYTES("round trip", b, a, sizeof a);
    int64_t tok;
    assert_int_equal(qs_hessian_info(back, NULL, &tok), QS_OK);
    assert_int_equal(tok, t);

    /* every single-bit flip anywhere is rejected (checksum, or the header checks first) */
    for (int64_t i = 0; i < size; i++)
        for (int bit = 0; bit < 8; bit += 3) {
            memcpy(bad, buf, (size_t)size);
            bad[i] ^= (uint8_t)(1u << bit);
            qs_status st = qs_hessian_deserialize(ctx, bad, size, &keep);
            if (st != QS_ERR_BAD_DATA && st != QS_ERR_UNSUPPORTED)
                fail_msg("flip of byte %lld bit %d: status %d", (long long)i, bit, st);
        }
    /* truncated and trailing bytes */
    for (int64_t n = 0; n < size; n += 7)
        assert_int_equal(qs_hessian_deserialize(ctx, buf, n, &keep), QS_ERR_BAD_DATA);
    memcpy(bad, buf, (size_t)size);
    bad[size] = 0;
    assert_int_equal(qs_hessian_deserialize(ctx, bad, size + 1, &keep), QS_ERR_BAD_DATA);
    /* another version, resealed: unsupported */
    memcpy(bad, buf, (size_t)size);
    bad[4] = 2;
    reseal(bad, size);
    assert_int_equal(qs_hessian_deserialize(ctx, bad, size, &keep), QS_ERR_UNSUPPORTED);
    /* valid checksum, hostile contents: K huge (length then mismatches), NaN, negative diagonal */
    memcpy(bad, buf, (size_t)size);
    bad[23] = 0x7F;
    reseal(bad, size);
    assert_int_equal(qs_hessian_deserialize(ctx, bad, size, &keep), QS_ERR_BAD_DATA);
    memcpy(bad, buf, (size_t)size);
    memset(bad + 32 + 8, 0xFF, 8); /* S[0][1] = NaN */
    reseal(bad, size);
    assert_int_equal(qs_hessian_deserialize(ctx, bad, size, &keep), QS_ERR_BAD_DATA);
    memcpy(bad, buf, (size_t)size);
    bad[32 + 7] |= 0x80; /* S[0][0] negative */
    reseal(bad, size);
    assert_int_equal(qs_hessian_deserialize(ctx, bad, size, &keep), QS_ERR_BAD_DATA);
    assert_ptr_equal(keep, (qs_hessian *)0x1);
    /* the resealing helper itself produces an accepted string when nothing changed */
    memcpy(bad, buf, (size_t)size);
    reseal(bad, size);
    assert_int_equal(qs_hessian_deserialize(ctx, bad, size, &keep), QS_OK);
    qs_hessian_destroy(keep);
    qs_hessian_destroy(h);
    qs_hessian_destroy(back);
    free(buf);
    free(bad);
    qs_ctx_destroy(ctx);
}

/* ---- GPTQ -------------------------------------------------------------------------------------- */

struct fmt_case {
    const char *name;
    int32_t format, gran, block, symmetric, rounding;
};

static const struct fmt_case FORMATS[] = {
    {"nf4", QS_FORMAT_NF4, 0, 64, 1, 0},
    {"nf4/32", QS_FORMAT_NF4, 0, 32, 1, 0},
    {"fp4", QS_FORMAT_FP4, 0, 64, 1, 0},
    {"int8 row", QS_FORMAT_INT8, QS_GRAN_ROW, 0, 1, 0},
    {"int8 tensor", QS_FORMAT_INT8, QS_GRAN_TENSOR, 0, 1, 0},
    {"int8 group 32", QS_FORMAT_INT8, QS_GRAN_GROUP, 32, 1, 0},
    {"int8 row asym", QS_FORMAT_INT8, QS_GRAN_ROW, 0, 0, 0},
    {"int8 group asym", QS_FORMAT_INT8, QS_GRAN_GROUP, 64, 0, 0},
    {"mxfp4", QS_FORMAT_MXFP4, 0, 0, 1, QS_MX_SCALE_FLOOR},
    {"mxfp4 rceil", QS_FORMAT_MXFP4, 0, 0, 1, QS_MX_SCALE_RCEIL},
    {"nvfp4", QS_FORMAT_NVFP4, 0, 0, 1, 0},
    {"llm_int8", QS_FORMAT_LLM_INT8, 0, 0, 1, 0},
};
#define NFMT (sizeof FORMATS / sizeof FORMATS[0])

static void params_of(const struct fmt_case *f, qs_quant_params *p)
{
    qs_quant_params_init(p, f->format);
    if (f->format == QS_FORMAT_LLM_INT8)
        return;
    if (f->format == QS_FORMAT_INT8) {
        p->granularity = f->gran;
        p->symmetric = f->symmetric;
        if (f->gran == QS_GRAN_GROUP)
            p->block_size = f->block;
    } else if (f->block) {
        p->block_size = f->block;
    }
    if (f->format == QS_FORMAT_MXFP4)
        p->scale_rounding = f->rounding;
}

/* The planes of one quantized tensor, allocated from the size queries. */
struct planes {
    qs_qtensor q;
    uint8_t *buf[QS_PLANE_COUNT];
};

static void planes_new(const qs_quant_params *p, int64_t rows, int64_t cols, struct planes *o,
                       uint8_t fill)
{
    memset(o, 0, sizeof *o);
    for (int pl = 0; pl < QS_PLANE_COUNT; pl++) {
        int64_t bytes;
        assert_int_equal(qs_quant_size(p, rows, cols, pl, &bytes), QS_OK);
        o->buf[pl] = bytes ? malloc((size_t)bytes) : NULL;
        if (bytes)
            memset(o->buf[pl], fill, (size_t)bytes);
        void **ptr[] = {&o->q.data, &o->q.scale, &o->q.zero_point, &o->q.nested_scale};
        int64_t *len[] = {&o->q.data_bytes, &o->q.scale_bytes, &o->q.zero_point_bytes,
                          &o->q.nested_scale_bytes};
        *ptr[pl] = o->buf[pl];
        *len[pl] = bytes;
    }
}

static void planes_free(struct planes *o)
{
    for (int pl = 0; pl < QS_PLANE_COUNT; pl++)
        free(o->buf[pl]);
}

static void planes_equal(const char *what, const struct planes *a, const struct planes *b)
{
    T_ASSERT_BYTES(what, a->q.data, b->q.data, (size_t)a->q.data_bytes);
    T_ASSERT_BYTES(what, a->q.scale, b->q.scale, (size_t)a->q.scale_bytes);
    if (a->q.zero_point_bytes)
        T_ASSERT_BYTES(what, a->q.zero_point, b->q.zero_point, (size_t)a->q.zero_point_bytes);
    assert_true(a->q.global_scale == b->q.global_scale);
}

static void test_gptq_identity_is_rtn(void **state)
{
    (void)state;
    qs_ctx *ctx = t_ctx();
    t_rng rng = {21};
    const int64_t rows = 20, cols = 192;
    float *w = malloc((size_t)(rows * cols) * sizeof(float));
    double *eye = calloc((size_t)(cols * cols), sizeof(double));
    for (int64_t i = 0; i < cols; i++)
        eye[i * cols + i] = 3.0; /* any c * I: no error is ever propagated */
    gen_weight(&rng, w, rows * cols);
    w[5] = 0.0f;
    w[7] = -0.0f;
    for (int64_t c = 64; c < 128; c++) /* an all-zero block and group */
        w[3 * cols + c] = 0.0f;
    /* GPTQ takes -0.0 as +0.0 (gptq.h): RTN of that weight is the reference */
    float *w0 = malloc((size_t)(rows * cols) * sizeof(float));
    for (int64_t i = 0; i < rows * cols; i++)
        w0[i] = w[i] + 0.0f;
    qs_hessian *h;
    assert_int_equal(qs_hessian_from_matrix(ctx, eye, cols, 1, &h), QS_OK);
    for (size_t f = 0; f < NFMT; f++)
        for (int variant = 0; variant < 3; variant++) {
            qs_quant_params p;
            qs_gptq_params g;
            struct planes rtn, gq;
            params_of(&FORMATS[f], &p);
            qs_gptq_params_init(&g);
            g.static_groups = variant == 1;
            g.act_order = variant == 2;
            g.scale_search = 0; /* the MXFP4 search: test_gptq_mx_scale_search */
            planes_new(&p, rows, cols, &rtn, 0);
            planes_new(&p, rows, cols, &gq, 0x5A);
            assert_int_equal(qs_quantize(ctx, &p, w0, QS_DTYPE_F32, rows, cols, &rtn.q), QS_OK);
            double loss = -1.0;
            qs_status st = qs_gptq_quantize(ctx, &g, &p, w, rows, cols, h, &gq.q, &loss);
            if (st != QS_OK)
                fail_msg("%s: %s", FORMATS[f].name, qs_ctx_last_error(ctx));
            assert_true(loss >= 0.0);
            planes_equal(FORMATS[f].name, &gq, &rtn);
            planes_free(&rtn);
            planes_free(&gq);
        }
    qs_hessian_destroy(h);
    free(w);
    free(w0);
    free(eye);
    qs_ctx_destroy(ctx);
}

/* The MXFP4 scale search with H = c I, where no error is propagated and GPTQ's block loss is
 * the block's squared rounding error over U_jj^2 = 1 / c: each 32-block must be qs_quantize's
 * block under the FLOOR rule or under RCEIL (the only other exponent the search tries, since
 * RCEIL is floor + 1 exactly when floor clips), whichever has the smaller squared error, ties to
 * the rule asked for. Both choices must occur, and the planes are compared byte for byte. */
static void test_gptq_mx_scale_search(void **state)
{
    (void)state;
    qs_ctx *ctx = t_ctx();
    t_rng rng = {23};
    const int64_t rows = 24, cols = 224, nb = cols / 32, rb = cols / 2;
    float *w = malloc((size_t)(rows * cols) * sizeof(float));
    float *v[2], *got = malloc((size_t)(rows * cols) * sizeof(float));
    double *hm = calloc((size_t)(cols * cols), sizeof(double));
    for (int64_t i = 0; i < cols; i++)
        hm[i * cols + i] = 0.25; /* U_jj = 2: the loss is the squared error times 1/4, exactly */
    gen_weight(&rng, w, rows * cols);
    for (int64_t c = 0; c < 32; c++) {
        w[1 * cols + 32 + c] = 0.0f;                           /* all zero: byte 0 both ways */
        w[2 * cols + 64 + c] = (float)(c % 7) - 3.0f;          /* on the grid: a tie */
        w[3 * cols + c] = c == 5 ? 7.9f : 0.01f * (float)c;    /* one outlier: RCEIL wins */
        w[4 * cols + 96 + c] = c == 9 ? 6.5f : 5.5f - 0.1f * (float)c; /* clipping vs a coarse step */
    }
    w[5 * cols + 3] = 0x1p-140f; /* a subnormal block maximum (the E8M0 floor clamps) */
    qs_hessian *h;
    assert_int_equal(qs_hessian_from_matrix(ctx, hm, cols, 1, &h), QS_OK);
    for (int rule = 0; rule < 2; rule++) {
        qs_quant_params p[2];
        struct planes cand[2], want, gq;
        qs_gptq_params g;
        int64_t chosen[2] = {0, 0};
        for (int c = 0; c < 2; c++) { /* c = 0: FLOOR, 1: RCEIL */
            qs_quant_params_init(&p[c], QS_FORMAT_MXFP4);
            p[c].scale_rounding = c;
            planes_new(&p[c], rows, cols, &cand[c], 0);
            assert_int_equal(qs_quantize(ctx, &p[c], w, QS_DTYPE_F32, rows, cols, &cand[c].q),
                             QS_OK);
            v[c] = malloc((size_t)(rows * cols) * sizeof(float));
            assert_int_equal(qs_dequantize(ctx, &p[c], &cand[c].q, rows, cols, v[c], QS_DTYPE_F32,
                                           rows * cols * 4), QS_OK);
        }
        planes_new(&p[rule], rows, cols, &want, 0);
        planes_new(&p[rule], rows, cols, &gq, 0x5A);
        for (int64_t r = 0; r < rows; r++)
            for (int64_t b = 0; b < nb; b++) {
                double sse[2] = {0.0, 0.0};
                for (int c = 0; c < 2; c++)
                    for (int64_t j = b * 32; j < b * 32 + 32; j++) {
                        double d = (double)w[r * cols + j] - (double)v[c][r * cols + j];
                        sse[c] += d * d;
                    }
                int pick = sse[!rule] < sse[rule] ? !rule : rule;
                chosen[pick != rule] += cand[0].buf[1][r * nb + b] != cand[1].buf[1][r * nb + b];
                want.buf[1][r * nb + b] = cand[pick].buf[1][r * nb + b];
                memcpy(want.buf[0] + r * rb + b * 16, cand[pick].buf[0] + r * rb + b * 16, 16);
            }
        qs_gptq_params_init(&g);
        g.percdamp = 0.0;
        assert_int_equal(g.scale_search, 1); /* the default */
        double loss = -1.0;
        assert_int_equal(qs_gptq_quantize(ctx, &g, &p[rule], w, rows, cols, h, &gq.q, &loss),
                         QS_OK);
        print_message("mxfp4 rule %d: %lld blocks keep the rule's exponent, %lld take the other "
                      "(where they differ)\n", rule, (long long)chosen[0], (long long)chosen[1]);
        assert_true(chosen[0] > 0 && chosen[1] > 0);
        planes_equal(rule ? "mxfp4 search, rceil" : "mxfp4 search, floor", &gq, &want);
        /* the loss is sum (w - q)^2 / U_jj^2 / 2 (gptq.h) with U_jj = 2 */
        assert_int_equal(qs_dequantize(ctx, &p[rule], &gq.q, rows, cols, got, QS_DTYPE_F32,
                                       rows * cols * 4), QS_OK);
        double sse = 0.0;
        for (int64_t i = 0; i < rows * cols; i++)
            sse += ((double)w[i] - got[i]) * ((double)w[i] - got[i]);
        assert_true(fabs(loss - sse / 8.0) <= 1e-6 * sse);
        /* without the search, the rule's own planes */
        g.scale_search = 0;
        assert_int_equal(qs_gptq_quantize(ctx, &g, &p[rule], w, rows, cols, h, &gq.q, NULL),
                         QS_OK);
        planes_equal("mxfp4 no search", &gq, &cand[rule]);
        for (int c = 0; c < 2; c++) {
            planes_free(&cand[c]);
            free(v[c]);
        }
        planes_free(&want);
        planes_free(&gq);
    }
    qs_hessian_destroy(h);
    free(w);
    free(got);
    free(hm);
    qs_ctx_destroy(ctx);
}

static void test_gptq_beats_rtn(void **state)
{
    (void)state;
    qs_ctx *ctx = t_ctx();
    t_rng rng = {22};
    float *x = malloc((size_t)(T * K) * sizeof(float)), *w = malloc((size_t)(R * K) * 4);
    float *v = malloc((size_t)(R * K) * 4);
    gen_acts(&rng, x, T, K);
    gen_weight(&rng, w, R * K);
    qs_hessian *h = hessian_of(ctx, x, T, K);
    for (size_t f = 0; f < NFMT; f++)
        for (int act = 0; act < 2; act++) {
            qs_quant_params p;
            qs_gptq_params g;
            struct planes rtn, gq;
            params_of(&FORMATS[f], &p);
            qs_gptq_params_init(&g);
            g.act_order = act;
            planes_new(&p, R, K, &rtn, 0);
            planes_new(&p, R, K, &gq, 0);
            assert_int_equal(qs_quantize(ctx, &p, w, QS_DTYPE_F32, R, K, &rtn.q), QS_OK);
            assert_int_equal(qs_gptq_quantize(ctx, &g, &p, w, R, K, h, &gq.q, NULL), QS_OK);
            assert_int_equal(qs_dequantize(ctx, &p, &rtn.q, R, K, v, QS_DTYPE_F32, R * K * 4),
                             QS_OK);
            double e_rtn = out_err(x, T, w, v, R, K);
            assert_int_equal(qs_dequantize(ctx, &p, &gq.q, R, K, v, QS_DTYPE_F32, R * K * 4),
                             QS_OK);
            double e_gptq = out_err(x, T, w, v, R, K);
            print_message("%-16s act_order %d: output error RTN %.4g, GPTQ %.4g (%.2fx)\n",
                          FORMATS[f].name, act, e_rtn, e_gptq, e_rtn / e_gptq);
            if (!(e_gptq < 0.9 * e_rtn))
                fail_msg("%s: GPTQ %.6g is not below 0.9 x RTN %.6g", FORMATS[f].name, e_gptq,
                         e_rtn);
            planes_free(&rtn);
            planes_free(&gq);
        }
    qs_hessian_destroy(h);
    free(x);
    free(w);
    free(v);
    qs_ctx_destroy(ctx);
}

static void test_gptq_errors(void **state)
{
    (void)state;
    qs_ctx *ctx = t_ctx();
    float w[4 * 64];
    double bad[4] = {1.0, 2.0, 2.0, 1.0}; /* indefinite */
    qs_hessian *h, *h2;
    qs_quant_params p;
    qs_gptq_params g;
    struct planes o;
    for (int i = 0; i < 4 * 64; i++)
        w[i] = (float)(i % 13) - 6.0f;
    double *eye = calloc(64 * 64, sizeof(double));
    for (int i = 0; i < 64; i++)
        eye[i * 64 + i] = 1.0;
    assert_int_equal(qs_hessian_from_matrix(ctx, eye, 64, 0, &h), QS_OK);
    assert_int_equal(qs_hessian_from_matrix(ctx, bad, 2, 0, &h2), QS_OK);
    qs_gptq_params_init(&g);
    qs_quant_params_init(&p, QS_FORMAT_NF4);
    planes_new(&p, 4, 64, &o, T_CANARY);
    uint8_t *d0 = malloc((size_t)o.q.data_bytes);
    memset(d0, T_CANARY, (size_t)o.q.data_bytes);

    assert_int_equal(qs_gptq_quantize(ctx, NULL, &p, w, 4, 64, h, &o.q, NULL), QS_ERR_INVALID_ARG);
    assert_int_equal(qs_gptq_quantize(ctx, &g, &p, w, 4, 63, h, &o.q, NULL), QS_ERR_SHAPE);
    g.percdamp = -1.0;
    assert_int_equal(qs_gptq_quantize(ctx, &g, &p, w, 4, 64, h, &o.q, NULL), QS_ERR_INVALID_ARG);
    qs_gptq_params_init(&g);
    g.reserved[2] = 1;
    assert_int_equal(qs_gptq_quantize(ctx, &g, &p, w, 4, 64, h, &o.q, NULL), QS_ERR_INVALID_ARG);
    qs_gptq_params_init(&g);
    g.block_size = 0;
    assert_int_equal(qs_gptq_quantize(ctx, &g, &p, w, 4, 64, h, &o.q, NULL), QS_ERR_INVALID_ARG);
    qs_gptq_params_init(&g);
    g.scale_search = 2;
    assert_int_equal(qs_gptq_quantize(ctx, &g, &p, w, 4, 64, h, &o.q, NULL), QS_ERR_INVALID_ARG);
    qs_gptq_params_init(&g);
    w[17] = NAN;
    assert_int_equal(qs_gptq_quantize(ctx, &g, &p, w, 4, 64, h, &o.q, NULL), QS_ERR_INVALID_ARG);
    w[17] = 1.0f;
    p.double_quant = 1;
    assert_int_equal(qs_gptq_quantize(ctx, &g, &p, w, 4, 64, h, &o.q, NULL), QS_ERR_UNSUPPORTED);
    p.double_quant = 0;
    p.block_size = 128; /* blocks would span rows */
    assert_int_equal(qs_gptq_quantize(ctx, &g, &p, w, 4, 64, h, &o.q, NULL), QS_ERR_SHAPE);
    p.block_size = 64;
    o.q.data_bytes -= 1;
    assert_int_equal(qs_gptq_quantize(ctx, &g, &p, w, 4, 64, h, &o.q, NULL),
                     QS_ERR_BUFFER_TOO_SMALL);
    o.q.data_bytes += 1;
    qs_quant_params f8;
    qs_quant_params_init(&f8, QS_FORMAT_FP8_E4M3);
    assert_int_equal(qs_gptq_quantize(ctx, &g, &f8, w, 4, 64, h, &o.q, NULL), QS_ERR_UNSUPPORTED);
    g.percdamp = 0.0;
    assert_int_equal(qs_gptq_quantize(ctx, &g, &p, w, 4, 2, h2, &o.q, NULL), QS_ERR_SHAPE);
    qs_quant_params i8;
    struct planes o8;
    qs_quant_params_init(&i8, QS_FORMAT_INT8);
    planes_new(&i8, 4, 2, &o8, T_CANARY);
    assert_int_equal(qs_gptq_quantize(ctx, &g, &i8, w, 4, 2, h2, &o8.q, NULL), QS_ERR_BAD_DATA);
    for (int64_t i = 0; i < o8.q.data_bytes; i++)
        assert_int_equal(((uint8_t *)o8.q.data)[i], T_CANARY);
    T_ASSERT_BYTES("planes untouched", o.q.data, d0, (size_t)o.q.data_bytes);
    planes_free(&o8);
    planes_free(&o);
    free(d0);
    free(eye);
    qs_hessian_destroy(h);
    qs_hessian_destroy(h2);
    qs_ctx_destroy(ctx);
}

/* ---- SparseGPT --------------------------------------------------------------------------------- */

static void test_sparsegpt(void **state)
{
    (void)state;
    qs_ctx *ctx = t_ctx();
    t_rng rng = {31};
    float *x = malloc((size_t)(T * K) * 4), *w = malloc((size_t)(R * K) * 4);
    float *v = malloc((size_t)(R * K) * 4), *d = malloc((size_t)(R * K) * 4);
    uint8_t *mask = malloc((size_t)(R * K));
    gen_acts(&rng, x, T, K);
    gen_weight(&rng, w, R * K);
    qs_hessian *h = hessian_of(ctx, x, T, K);
    qs_sparsegpt_params sp;
    qs_sparsegpt_params_init(&sp);
    double loss;

    /* magnitude baseline */
    assert_int_equal(qs_nm_mask(ctx, w, QS_DTYPE_F32, R, K, 2, 4, QS_PRUNE_MAGNITUDE, NULL, mask,
                                R * K), QS_OK);
    for (int64_t i = 0; i < R * K; i++)
        v[i] = mask[i] ? w[i] : 0.0f;
    double e_mag = out_err(x, T, w, v, R, K);
    assert_int_equal(qs_sparsegpt(ctx, &sp, NULL, w, R, K, h, d, R * K, NULL, NULL, 0, &loss),
                     QS_OK);
    int64_t first_bad = 0;
    assert_int_equal(qs_nm_check(ctx, d, QS_DTYPE_F32, R, K, 2, 4, 0, &first_bad), QS_OK);
    double e_sg = out_err(x, T, w, d, R, K);
    print_message("2:4 output error: magnitude %.4g, SparseGPT %.4g\n", e_mag, e_sg);
    assert_true(e_sg < 0.8 * e_mag);
    /* the check that guards the assertion above can fail: a dense weight is not 2:4 */
    assert_int_equal(qs_nm_check(ctx, w, QS_DTYPE_F32, R, K, 2, 4, 0, &first_bad),
                     QS_ERR_BAD_DATA);

    /* 1:4 and unstructured 30 % */
    sp.n = 1;
    assert_int_equal(qs_sparsegpt(ctx, &sp, NULL, w, R, K, h, d, R * K, NULL, NULL, 0, NULL),
                     QS_OK);
    assert_int_equal(qs_nm_check(ctx, d, QS_DTYPE_F32, R, K, 1, 4, 0, NULL), QS_OK);
    sp.n = 0;
    sp.m = 0;
    sp.density = 0.3;
    assert_int_equal(qs_sparsegpt(ctx, &sp, NULL, w, R, K, h, d, R * K, NULL, NULL, 0, NULL),
                     QS_OK);
    int64_t kept = 0;
    for (int64_t i = 0; i < R * K; i++)
        kept += d[i] != 0.0f;
    assert_int_equal(kept, (int64_t)(R * K - floor(0.7 * R * K + 0.5)));

    /* jointly with every format: the planes decode (qs_sp24_dequantize) to the dense output */
    qs_sparsegpt_params_init(&sp);
    for (size_t f = 0; f < NFMT; f++) {
        qs_quant_params p;
        struct planes o;
        params_of(&FORMATS[f], &p);
        if (FORMATS[f].format == QS_FORMAT_NF4 || FORMATS[f].format == QS_FORMAT_FP4)
            p.block_size = 32; /* K / 2 = 64 kept values per row */
        planes_new(&p, R, K / 2, &o, 0);
        uint16_t *meta = malloc((size_t)(R * (K / 16)) * 2);
        qs_status st = qs_sparsegpt(ctx, &sp, &p, w, R, K, h, d, R * K, &o.q, meta, R * (K / 16),
                                    NULL);
        if (st != QS_OK)
            fail_msg("%s: %s", FORMATS[f].name, qs_ctx_last_error(ctx));
        assert_int_equal(qs_sp24_dequantize(ctx, &p, &o.q, meta, R * (K / 16), R, K, v,
                                            QS_DTYPE_F32, R * K * 4), QS_OK);
        T_ASSERT_BYTES(FORMATS[f].name, v, d, (size_t)(R * K) * 4);
        double e = out_err(x, T, w, d, R, K);
        print_message("2:4 + %-16s SparseGPT %.4g (magnitude alone %.4g)\n", FORMATS[f].name, e,
                      e_mag);
        assert_true(e < e_mag);
        free(meta);
        planes_free(&o);
    }

    /* errors */
    assert_int_equal(qs_sparsegpt(ctx, &sp, NULL, w, R, K - 2, h, d, R * K, NULL, NULL, 0, NULL),
                     QS_ERR_SHAPE);
    assert_int_equal(qs_sparsegpt(ctx, &sp, NULL, w, R, K, h, d, R * K - 1, NULL, NULL, 0, NULL),
                     QS_ERR_BUFFER_TOO_SMALL);
    assert_int_equal(qs_sparsegpt(ctx, &sp, NULL, w, R, K, h, NULL, 0, NULL, NULL, 0, NULL),
                     QS_ERR_INVALID_ARG);
    sp.n = 1;
    qs_quant_params p8;
    qs_quant_params_init(&p8, QS_FORMAT_INT8);
    struct planes o8;
    planes_new(&p8, R, K / 2, &o8, 0);
    uint16_t meta8[R * (K / 16)];
    assert_int_equal(qs_sparsegpt(ctx, &sp, &p8, w, R, K, h, NULL, 0, &o8.q, meta8, R * (K / 16),
                                  NULL), QS_ERR_UNSUPPORTED);
    sp.n = 4;
    assert_int_equal(qs_sparsegpt(ctx, &sp, NULL, w, R, K, h, d, R * K, NULL, NULL, 0, NULL),
                     QS_ERR_INVALID_ARG);
    qs_sparsegpt_params_init(&sp);
    sp.m = 0;
    sp.density = 0.0;
    assert_int_equal(qs_sparsegpt(ctx, &sp, NULL, w, R, K, h, d, R * K, NULL, NULL, 0, NULL),
                     QS_ERR_INVALID_ARG);
    planes_free(&o8);

    qs_hessian_destroy(h);
    free(x);
    free(w);
    free(v);
    free(d);
    free(mask);
    qs_ctx_destroy(ctx);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_hessian_reference),
        cmocka_unit_test(test_hessian_exact_merge_dtypes),
        cmocka_unit_test(test_hessian_errors),
        cmocka_unit_test(test_hessian_serialize),
        cmocka_unit_test(test_gptq_identity_is_rtn),
        cmocka_unit_test(test_gptq_mx_scale_search),
        cmocka_unit_test(test_gptq_beats_rtn),
        cmocka_unit_test(test_gptq_errors),
        cmocka_unit_test(test_sparsegpt),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
