/* SPDX-License-Identifier: MIT */
/*
 * No alignment is required of caller buffers (include/qsparse.h; a safetensors tensor may start at
 * any byte of the file). Every entry point that reads or writes f32/f16/bf16 tensor data runs
 * here once with 16-byte-aligned buffers and once with every data pointer 1, 2 and 3 bytes past
 * that alignment, for f32, f16 and bf16 data, and the two runs must give the same bytes: quantize
 * and dequantize of every format (their scale planes shifted too), conversions, observers, dynamic
 * quantization, activation statistics, N:M masks, 2:4 compression and decompression, SR-STE.
 * The sanitizer build (-fsanitize=undefined, which includes alignment, without recovery) turns a
 * misaligned f32 or u16 access anywhere on these paths into a failure.
 */
#include "common.h"
#include "qsparse/calib.h"
#include "qsparse/sparse.h"

#define ROWS 4
#define COLS 100 /* not a multiple of 16 or 32: every kernel runs a tail */
#define N (ROWS * COLS)

/* ---- shifted buffers and the byte record of one run ------------------------------------------ */

/* `bytes` bytes at 16-byte alignment plus `off` (malloc gives 16-byte alignment on the hosts
 * the suite runs on; the +16 keeps it, the offset breaks it). */
typedef struct {
    uint8_t *base;
    void *p;
} ubuf;

static ubuf ub_new(size_t bytes, int off)
{
    ubuf b;
    b.base = malloc(bytes + 64);
    assert_non_null(b.base);
    memset(b.base, 0x5A, bytes + 64);
    b.p = b.base + 16 + off;
    return b;
}

static ubuf ub_copy(const void *src, size_t bytes, int off)
{
    ubuf b = ub_new(bytes, off);
    memcpy(b.p, src, bytes);
    return b;
}

static void ub_free(ubuf *b)
{
    free(b->base);
    b->base = NULL;
}

/* Everything a run writes, appended in order, so that two runs compare with one memcmp. */
typedef struct {
    uint8_t *d;
    size_t n, cap;
} blob;

static void blob_add(blob *b, const void *p, size_t n)
{
    if (b->n + n > b->cap) {
        b->cap = 2 * (b->n + n);
        b->d = realloc(b->d, b->cap);
        assert_non_null(b->d);
    }
    memcpy(b->d + b->n, p, n);
    b->n += n;
}

typedef void scenario_fn(qs_ctx *ctx, int32_t dtype, int off, blob *out);

/* The scenario with aligned buffers, then shifted by 1, 2 and 3 bytes: the same bytes each time. */
static void run_shifted(const char *what, scenario_fn *fn, int32_t dtype)
{
    qs_ctx *ctx = t_ctx();
    blob want = {0};

    fn(ctx, dtype, 0, &want);
    assert_true(want.n > 0);
    for (int off = 1; off <= 3; off++) {
        blob got = {0};
        char name[96];
        fn(ctx, dtype, off, &got);
        snprintf(name, sizeof name, "%s %s offset %d", what, qs_dtype_name(dtype), off);
        assert_int_equal(got.n, want.n);
        T_ASSERT_BYTES(name, got.d, want.d, want.n);
        free(got.d);
    }
    free(want.d);
    qs_ctx_destroy(ctx);
}

/* ---- input data ------------------------------------------------------------------------------ */

/* rows x cols values of `dtype` (seeded, with the adversarial values, NaN and Inf included when
 * `specials`), as bytes in `raw` (N * 4 bytes of room). */
static void make_input(qs_ctx *ctx, int32_t dtype, int specials, uint64_t seed, void *raw)
{
    t_rng r = {seed};
    float x[N];

    if (specials)
        t_fill_mixed(&r, x, N, 0.05);
    else
        for (int i = 0; i < N; i++)
            x[i] = (float)t_normal(&r);
    if (dtype == QS_DTYPE_F32)
        memcpy(raw, x, sizeof x);
    else
        assert_int_equal(qs_convert(ctx, x, QS_DTYPE_F32, raw, dtype, N, N * 2), QS_OK);
}

/* ---- quantize and dequantize ----------------------------------------------------------------- */

static qs_quant_params variant_params(int v)
{
    qs_quant_params p;
    static const int32_t fmt[] = {
        QS_FORMAT_NF4,      QS_FORMAT_NF4,   QS_FORMAT_FP4,      QS_FORMAT_INT8,
        QS_FORMAT_INT8,     QS_FORMAT_INT8,  QS_FORMAT_LLM_INT8, QS_FORMAT_FP8_E4M3,
        QS_FORMAT_FP8_E5M2, QS_FORMAT_MXFP4, QS_FORMAT_MXFP8,    QS_FORMAT_NVFP4,
    };

    qs_quant_params_init(&p, fmt[v]);
    switch (v) {
    case 0: p.block_size = 64; break;                     /* NF4, a partial last block */
    case 1: p.block_size = 64, p.double_quant = 1; break; /* NF4 with double quant */
    case 2: p.block_size = 32; break;                     /* FP4 */
    case 3: p.granularity = QS_GRAN_ROW; break;           /* INT8 per row, symmetric */
    case 4: p.granularity = QS_GRAN_GROUP, p.block_size = 20, p.symmetric = 0; break;
    case 5: p.granularity = QS_GRAN_TENSOR, p.symmetric = 0; break;
    case 10: p.scale_rounding = QS_MX_SCALE_RCEIL; break; /* MXFP8 */
    default: break;
    }
    return p;
}
#define N_VARIANTS 12

static int g_variant;

static void quant_scenario(qs_ctx *ctx, int32_t dtype, int off, blob *out)
{
    qs_quant_params p = variant_params(g_variant);
    uint8_t raw[N * 4];
    size_t es = (size_t)qs_dtype_size(dtype);
    ubuf src, plane[QS_PLANE_COUNT], dst;
    qs_qtensor q = {0};
    void **ptr[QS_PLANE_COUNT] = {&q.data, &q.scale, &q.zero_point, &q.nested_scale};
    int64_t *cap[QS_PLANE_COUNT] = {&q.data_bytes, &q.scale_bytes, &q.zero_point_bytes,
                                    &q.nested_scale_bytes};

    make_input(ctx, dtype, 1, 11 + (uint64_t)g_variant, raw);
    src = ub_copy(raw, N * es, off);
    for (int i = 0; i < QS_PLANE_COUNT; i++) {
        int64_t bytes = 0;
        assert_int_equal(qs_quant_size(&p, ROWS, COLS, i, &bytes), QS_OK);
        plane[i] = ub_new((size_t)bytes, off);
        *ptr[i] = bytes > 0 ? plane[i].p : NULL;
        *cap[i] = bytes;
    }
    assert_int_equal(qs_quantize(ctx, &p, src.p, dtype, ROWS, COLS, &q), QS_OK);
    for (int i = 0; i < QS_PLANE_COUNT; i++)
        blob_add(out, plane[i].p, (size_t)*cap[i]);
    blob_add(out, &q.global_scale, sizeof q.global_scale);
    blob_add(out, &q.nested_offset, sizeof q.nested_offset);

    dst = ub_new(N * es, off);
    assert_int_equal(qs_dequantize(ctx, &p, &q, ROWS, COLS, dst.p, dtype, (int64_t)(N * es)),
                     QS_OK);
    blob_add(out, dst.p, N * es);

    ub_free(&dst);
    for (int i = 0; i < QS_PLANE_COUNT; i++)
        ub_free(&plane[i]);
    ub_free(&src);
}

static void test_quantize_dequantize(void **state)
{
    static const int32_t dts[] = {QS_DTYPE_F32, QS_DTYPE_F16, QS_DTYPE_BF16};
    (void)state;
    for (g_variant = 0; g_variant < N_VARIANTS; g_variant++)
        for (int d = 0; d < 3; d++) {
            char what[64];
            snprintf(what, sizeof what, "%s variant %d",
                     qs_format_name(variant_params(g_variant).format), g_variant);
            run_shifted(what, quant_scenario, dts[d]);
        }
}

/* ---- conversions ----------------------------------------------------------------------------- */

static void convert_scenario(qs_ctx *ctx, int32_t dtype, int off, blob *out)
{
    uint8_t raw[N * 4];
    size_t es = (size_t)qs_dtype_size(dtype);

    make_input(ctx, QS_DTYPE_F32, 1, 3, raw);
    ubuf a = ub_copy(raw, N * 4, off), h = ub_new(N * es, off), b = ub_new(N * 4, off);
    assert_int_equal(qs_convert(ctx, a.p, QS_DTYPE_F32, h.p, dtype, N, (int64_t)(N * es)), QS_OK);
    assert_int_equal(qs_convert(ctx, h.p, dtype, b.p, QS_DTYPE_F32, N, N * 4), QS_OK);
    blob_add(out, h.p, N * es);
    blob_add(out, b.p, N * 4);
    ub_free(&a);
    ub_free(&h);
    ub_free(&b);
}

static void test_convert(void **state)
{
    (void)state;
    run_shifted("convert", convert_scenario, QS_DTYPE_F16);
    run_shifted("convert", convert_scenario, QS_DTYPE_BF16);
    run_shifted("convert", convert_scenario, QS_DTYPE_F32);
}

/* ---- calibration ----------------------------------------------------------------------------- */

static void observer_scenario(qs_ctx *ctx, int32_t dtype, int off, blob *out)
{
    static const int32_t methods[] = {QS_OBSERVER_MINMAX, QS_OBSERVER_MOVING_AVERAGE,
                                      QS_OBSERVER_PERCENTILE, QS_OBSERVER_ENTROPY, QS_OBSERVER_MSE};
    uint8_t raw[N * 4];
    size_t es = (size_t)qs_dtype_size(dtype);

    make_input(ctx, dtype, 1, 5, raw);
    ubuf src = ub_copy(raw, N * es, off);
    for (int m = 0; m < 5; m++)
        for (int axis = -1; axis <= 1; axis++) {
            qs_observer_params op;
            qs_observer *obs = NULL;
            float amax[COLS], lo[COLS], hi[COLS];
            int64_t ch = 0;

            qs_observer_params_init(&op, methods[m]);
            op.axis = axis;
            op.num_bins = 256;
            op.start_bin = 16;
            op.num_levels = 16;
            assert_int_equal(qs_observer_create(ctx, &op, &obs), QS_OK);
            assert_int_equal(qs_observer_update(ctx, obs, src.p, dtype, ROWS, COLS), QS_OK);
            assert_int_equal(qs_observer_channels(obs, &ch), QS_OK);
            assert_int_equal(qs_observer_amax(ctx, obs, amax, COLS), QS_OK);
            assert_int_equal(qs_observer_range(ctx, obs, lo, hi, COLS), QS_OK);
            blob_add(out, amax, (size_t)ch * 4);
            blob_add(out, lo, (size_t)ch * 4);
            blob_add(out, hi, (size_t)ch * 4);
            if (m == QS_OBSERVER_MINMAX - 1) { /* apply the calibration to the same data */
                ubuf data = ub_new(N, off), scale = ub_new((size_t)ch * 4, off);
                qs_qtensor q = {0};
                q.data = data.p;
                q.data_bytes = N;
                q.scale = scale.p;
                q.scale_bytes = ch * 4;
                assert_int_equal(
                    qs_observer_quantize(ctx, obs, QS_CALIB_INT8_SYM, src.p, dtype, ROWS, COLS, &q),
                    QS_OK);
                blob_add(out, data.p, N);
                blob_add(out, scale.p, (size_t)ch * 4);
                ub_free(&data);
                ub_free(&scale);
            }
            qs_observer_destroy(obs);
        }
    ub_free(&src);
}

static void dynamic_scenario(qs_ctx *ctx, int32_t dtype, int off, blob *out)
{
    uint8_t raw[N * 4];
    size_t es = (size_t)qs_dtype_size(dtype);
    double sumsq[COLS];

    make_input(ctx, dtype, 1, 7, raw);
    ubuf src = ub_copy(raw, N * es, off), d8 = ub_new(N, off), scales = ub_new(ROWS * 4, off);
    ubuf f8 = ub_new(N, off), fscale = ub_new(4, off);
    assert_int_equal(
        qs_quantize_dynamic_int8_per_token(ctx, src.p, dtype, ROWS, COLS, d8.p, N, scales.p, ROWS),
        QS_OK);
    assert_int_equal(
        qs_quantize_dynamic_fp8(ctx, QS_FORMAT_FP8_E4M3, src.p, dtype, N, f8.p, N, fscale.p),
        QS_OK);
    memset(sumsq, 0, sizeof sumsq);
    assert_int_equal(qs_act_sumsq_update(ctx, src.p, dtype, ROWS, COLS, sumsq, COLS), QS_OK);
    blob_add(out, d8.p, N);
    blob_add(out, scales.p, ROWS * 4);
    blob_add(out, f8.p, N);
    blob_add(out, fscale.p, 4);
    blob_add(out, sumsq, sizeof sumsq);
    ub_free(&src);
    ub_free(&d8);
    ub_free(&scales);
    ub_free(&f8);
    ub_free(&fscale);
}

static void test_calibration(void **state)
{
    static const int32_t dts[] = {QS_DTYPE_F32, QS_DTYPE_F16, QS_DTYPE_BF16};
    (void)state;
    for (int d = 0; d < 3; d++) {
        run_shifted("observers", observer_scenario, dts[d]);
        run_shifted("dynamic", dynamic_scenario, dts[d]);
    }
}

/* ---- sparsity -------------------------------------------------------------------------------- */

static void sparse_scenario(qs_ctx *ctx, int32_t dtype, int off, blob *out)
{
    uint8_t raw[N * 4];
    size_t es = (size_t)qs_dtype_size(dtype);
    int64_t vbytes = 0, mcount = 0;
    float nrm[COLS];
    uint8_t mask[N];
    t_rng r = {9};

    make_input(ctx, dtype, 0, 13, raw);
    for (int j = 0; j < COLS; j++)
        nrm[j] = (float)t_unif(&r) * 4.0f;
    assert_int_equal(qs_sp24_size(dtype, ROWS, COLS, &vbytes, &mcount), QS_OK);
    ubuf w = ub_copy(raw, N * es, off), norms = ub_copy(nrm, sizeof nrm, off);
    ubuf values = ub_new((size_t)vbytes, off), back = ub_new(N * es, off);
    uint16_t *meta = calloc((size_t)mcount, 2); /* metadata words stay aligned */
    int64_t bad = -2;
    assert_non_null(meta);

    /* masks: magnitude and Wanda (norms shifted too), and the 2-D tile search */
    assert_int_equal(
        qs_nm_mask(ctx, w.p, dtype, ROWS, COLS, 2, 4, QS_PRUNE_WANDA, norms.p, mask, N), QS_OK);
    blob_add(out, mask, N);
    assert_int_equal(qs_sp24_tile_mask(ctx, w.p, dtype, ROWS, COLS, norms.p, QS_TILE_BEST, mask, N),
                     QS_OK);
    blob_add(out, mask, N);
    assert_int_equal(
        qs_nm_mask(ctx, w.p, dtype, ROWS, COLS, 2, 4, QS_PRUNE_MAGNITUDE, NULL, mask, N), QS_OK);
    blob_add(out, mask, N);

    /* compress with that mask, decompress, check */
    assert_int_equal(
        qs_sp24_compress(ctx, w.p, dtype, ROWS, COLS, mask, values.p, vbytes, meta, mcount), QS_OK);
    blob_add(out, values.p, (size_t)vbytes);
    blob_add(out, meta, (size_t)mcount * 2);
    assert_int_equal(qs_sp24_decompress(ctx, values.p, dtype, meta, mcount, ROWS, COLS, back.p,
                                        (int64_t)(N * es)),
                     QS_OK);
    blob_add(out, back.p, N * es);
    assert_int_equal(qs_nm_check(ctx, back.p, dtype, ROWS, COLS, 2, 4, 0, &bad), QS_OK);
    blob_add(out, &bad, sizeof bad);
    assert_int_equal(qs_sp24_prune_compress(ctx, w.p, dtype, ROWS, COLS, norms.p, values.p, vbytes,
                                            meta, mcount, mask, N),
                     QS_OK);
    blob_add(out, values.p, (size_t)vbytes);
    blob_add(out, meta, (size_t)mcount * 2);
    blob_add(out, mask, N);
    assert_int_equal(qs_nm_apply_mask(ctx, w.p, dtype, mask, N, back.p, (int64_t)(N * es)), QS_OK);
    blob_add(out, back.p, N * es);

    free(meta);
    ub_free(&w);
    ub_free(&norms);
    ub_free(&values);
    ub_free(&back);
}

/* SR-STE takes f32 only: weights, gradients and both outputs shifted. */
static void srste_scenario(qs_ctx *ctx, int32_t dtype, int off, blob *out)
{
    uint8_t raw[N * 4], graw[N * 4], mask[N];

    (void)dtype;
    make_input(ctx, QS_DTYPE_F32, 1, 17, raw);
    make_input(ctx, QS_DTYPE_F32, 1, 19, graw);
    ubuf w = ub_copy(raw, N * 4, off), g = ub_copy(graw, N * 4, off);
    ubuf wm = ub_new(N * 4, off), go = ub_new(N * 4, off);
    assert_int_equal(qs_nm_srste(ctx, w.p, g.p, ROWS, COLS, 2, 4, 0.5f, wm.p, go.p, mask, N),
                     QS_OK);
    blob_add(out, wm.p, N * 4);
    blob_add(out, go.p, N * 4);
    blob_add(out, mask, N);
    ub_free(&w);
    ub_free(&g);
    ub_free(&wm);
    ub_free(&go);
}

static void test_sparsity(void **state)
{
    static const int32_t dts[] = {QS_DTYPE_F32, QS_DTYPE_F16, QS_DTYPE_BF16};
    (void)state;
    for (int d = 0; d < 3; d++)
        run_shifted("sparse", sparse_scenario, dts[d]);
    run_shifted("srste", srste_scenario, QS_DTYPE_F32);
}

/* The comparison can fail: a run whose output depends on the offset is caught. */
static void shifted_output(qs_ctx *ctx, int32_t dtype, int off, blob *out)
{
    (void)ctx;
    (void)dtype;
    blob_add(out, &off, sizeof off);
}

static void test_comparison_fails(void **state)
{
    blob a = {0}, b = {0};
    (void)state;
    shifted_output(NULL, QS_DTYPE_F32, 0, &a);
    shifted_output(NULL, QS_DTYPE_F32, 1, &b);
    assert_int_equal(t_check_bytes("negative", a.d, b.d, a.n, 0), 0);
    free(a.d);
    free(b.d);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_quantize_dequantize), cmocka_unit_test(test_convert),
        cmocka_unit_test(test_calibration),         cmocka_unit_test(test_sparsity),
        cmocka_unit_test(test_comparison_fails),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
