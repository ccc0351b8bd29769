/* SPDX-License-Identifier: MIT */
/*
 * The NaN rule (docs/nan.md): a NaN that the library computes into a float output is the
 * canonical quiet NaN, f32 0x7FC00000, f16 0x7E00, bf16 0x7FC0, whatever the ISA, the compiler,
 * and the signs and payloads of the NaNs that went in. The tests walk the NaN x NaN corners of
 * every dequantize path through the public API with hand-made planes: NaN scales and absmax values
 * with payloads and both signs (signaling ones too), NaN element codes (E4M3 0x7F/0xFF, E5M2
 * 0x7D-0x7F/0xFD-0xFF), E8M0 0xFF, E4M3 0x7F/0xFF block scales, a NaN per-tensor scale, a NaN
 * nested offset and nested scale of double quantization; then SR-STE's computed gradients, and
 * the calibration results and scales that NaN input must never turn into NaN. Registered per ISA
 * tier, so the scalar, AVX2, AVX-512 and NEON kernels all answer the same.
 */
#include "common.h"
#include "qsparse/calib.h"
#include "qsparse/sparse.h"

#define QNAN_F32 0x7FC00000u
#define QNAN_F16 0x7E00u
#define QNAN_BF16 0x7FC0u

/* NaNs of every kind that may come in: quiet and signaling, both signs, with payloads. */
static const uint32_t nan_in[] = {0x7FC00000u, 0xFFC00000u, 0x7FC00123u, 0xFFFFFFFFu,
                                  0x7F800001u, 0xFFA00000u, 0x7FBFFFFFu};
#define N_NAN_IN ((int)(sizeof nan_in / sizeof nan_in[0]))

static float nanv(int k)
{
    return t_f32_from_bits(nan_in[k % N_NAN_IN]);
}

/* ---- the check: dequantize to every dtype, NaN exactly where expected, and canonical ----------
 */

/* Index of the first element of out (n elements of dt) that breaks the rule: NaN where want_nan
 * is set but not the canonical bits, or NaN where it is not set; -1 when all is well. */
static int64_t first_bad(const void *out, int32_t dt, int64_t n, const uint8_t *want_nan,
                         uint32_t *got)
{
    for (int64_t i = 0; i < n; i++) {
        uint32_t bits, canon;
        int is_nan;
        if (dt == QS_DTYPE_F32) {
            memcpy(&bits, (const uint8_t *)out + 4 * i, 4);
            canon = QNAN_F32;
            is_nan = (bits & 0x7FFFFFFFu) > 0x7F800000u;
        } else {
            uint16_t h;
            memcpy(&h, (const uint8_t *)out + 2 * i, 2);
            bits = h;
            canon = dt == QS_DTYPE_F16 ? QNAN_F16 : QNAN_BF16;
            is_nan = dt == QS_DTYPE_F16 ? (h & 0x7FFFu) > 0x7C00u : (h & 0x7FFFu) > 0x7F80u;
        }
        if (want_nan[i] ? bits != canon : is_nan) {
            *got = bits;
            return i;
        }
    }
    return -1;
}

static void check_dtype(qs_ctx *ctx, const char *what, const qs_quant_params *p,
                        const qs_qtensor *q, int64_t rows, int64_t cols, const uint8_t *want_nan,
                        int32_t dt)
{
    int64_t n = rows * cols, bad;
    uint32_t got = 0;
    t_buf out = t_buf_new((size_t)(n * qs_dtype_size(dt)));

    assert_int_equal(qs_dequantize(ctx, p, q, rows, cols, out.p, dt, (int64_t)out.bytes), QS_OK);
    assert_true(t_buf_guards_ok(&out));
    if ((bad = first_bad(out.p, dt, n, want_nan, &got)) >= 0) {
        print_error("%s to %s, element %lld: got 0x%08x, want %s\n", what, qs_dtype_name(dt),
                    (long long)bad, got, want_nan[bad] ? "the canonical NaN" : "a number");
        fail();
    }
    t_buf_free(&out);
}

static void check_all(qs_ctx *ctx, const char *what, const qs_quant_params *p, const qs_qtensor *q,
                      int64_t rows, int64_t cols, const uint8_t *want_nan)
{
    check_dtype(ctx, what, p, q, rows, cols, want_nan, QS_DTYPE_F32);
    check_dtype(ctx, what, p, q, rows, cols, want_nan, QS_DTYPE_F16);
    check_dtype(ctx, what, p, q, rows, cols, want_nan, QS_DTYPE_BF16);
}

/* Planes sized by qs_quant_size, zero-filled, in one allocation per plane. */
typedef struct {
    void *plane[QS_PLANE_COUNT];
    qs_qtensor q;
} planes;

static void planes_new(planes *t, const qs_quant_params *p, int64_t rows, int64_t cols)
{
    memset(t, 0, sizeof *t);
    void **ptr[QS_PLANE_COUNT] = {&t->q.data, &t->q.scale, &t->q.zero_point, &t->q.nested_scale};
    int64_t *cap[QS_PLANE_COUNT] = {&t->q.data_bytes, &t->q.scale_bytes, &t->q.zero_point_bytes,
                                    &t->q.nested_scale_bytes};
    for (int i = 0; i < QS_PLANE_COUNT; i++) {
        int64_t bytes = 0;
        assert_int_equal(qs_quant_size(p, rows, cols, i, &bytes), QS_OK);
        t->plane[i] = bytes > 0 ? calloc((size_t)bytes, 1) : NULL;
        *ptr[i] = t->plane[i];
        *cap[i] = bytes;
    }
}

static void planes_free(planes *t)
{
    for (int i = 0; i < QS_PLANE_COUNT; i++)
        free(t->plane[i]);
}

static void set_f32(void *plane, int64_t i, float v)
{
    memcpy((uint8_t *)plane + 4 * i, &v, 4);
}

/* ---- NF4 / FP4: NaN absmax, and double quantization ------------------------------------------ */

static void bnb4_case(int32_t format)
{
    qs_ctx *ctx = t_ctx();
    qs_quant_params p;
    planes t;
    const int64_t rows = 3, cols = 64, n = rows * cols; /* block 32: six blocks */
    uint8_t want[3 * 64];

    qs_quant_params_init(&p, format);
    p.block_size = 32;
    planes_new(&t, &p, rows, cols);
    for (int64_t i = 0; i < n / 2; i++)
        ((uint8_t *)t.q.data)[i] = (uint8_t)(i * 37); /* every code in both nibbles */
    for (int64_t b = 0; b < n / 32; b++) /* blocks 0, 2, 4 NaN (three kinds), 1, 3, 5 numbers */
        set_f32(t.q.scale, b, b % 2 == 0 ? nanv((int)b + 1) : 0.75f);
    for (int64_t i = 0; i < n; i++)
        want[i] = (uint8_t)((i / 32) % 2 == 0);
    check_all(ctx, qs_format_name(format), &p, &t.q, rows, cols, want);
    planes_free(&t);

    /* double quantization: absmax = fl(dyn8[code] * nested) + offset, with NaN offsets and NaN
     * nested scales, so that the NaN x NaN products and sums of §6.2 all occur */
    p.double_quant = 1;
    for (int k = 0; k < N_NAN_IN; k++) {
        planes_new(&t, &p, rows, cols);
        for (int64_t i = 0; i < n / 2; i++)
            ((uint8_t *)t.q.data)[i] = (uint8_t)(i * 53 + k);
        for (int64_t b = 0; b < n / 32; b++)
            ((uint8_t *)t.q.scale)[b] = (uint8_t)(b * 41 + 3);
        set_f32(t.q.nested_scale, 0, k % 2 ? nanv(k + 3) : 0.5f);
        t.q.nested_offset = nanv(k);
        memset(want, 1, sizeof want);
        check_all(ctx, "double quantization", &p, &t.q, rows, cols, want);
        planes_free(&t);
    }
    qs_ctx_destroy(ctx);
}

static void test_nf4(void **state)
{
    (void)state;
    bnb4_case(QS_FORMAT_NF4);
}

static void test_fp4(void **state)
{
    (void)state;
    bnb4_case(QS_FORMAT_FP4);
}

/* ---- INT8 and LLM.int8: NaN scales and row statistics ---------------------------------------- */

static void int8_case(int32_t format, int32_t symmetric)
{
    qs_ctx *ctx = t_ctx();
    qs_quant_params p;
    planes t;
    const int64_t rows = 7, cols = 37, n = rows * cols;
    uint8_t want[7 * 37];

    qs_quant_params_init(&p, format);
    if (format == QS_FORMAT_INT8)
        p.granularity = QS_GRAN_ROW, p.symmetric = symmetric;
    planes_new(&t, &p, rows, cols);
    for (int64_t i = 0; i < n; i++)
        ((int8_t *)t.q.data)[i] = (int8_t)(i * 29 - 128); /* 0 included: 0 * NaN is NaN */
    for (int64_t r = 0; r < rows; r++) {
        set_f32(t.q.scale, r, r == rows - 1 ? 0.25f : nanv((int)r));
        if (t.q.zero_point)
            ((int8_t *)t.q.zero_point)[r] = (int8_t)(r * 19 - 60);
        for (int64_t c = 0; c < cols; c++)
            want[r * cols + c] = (uint8_t)(r != rows - 1);
    }
    check_all(ctx, qs_format_name(format), &p, &t.q, rows, cols, want);
    planes_free(&t);
    qs_ctx_destroy(ctx);
}

static void test_int8(void **state)
{
    (void)state;
    int8_case(QS_FORMAT_INT8, 1);
    int8_case(QS_FORMAT_INT8, 0);
    int8_case(QS_FORMAT_LLM_INT8, 1);
}

/* ---- FP8: NaN codes times a number, every code times NaN scales ------------------------------ */

static int fp8_code_is_nan(int32_t format, int c)
{
    return format == QS_FORMAT_FP8_E4M3 ? (c & 0x7F) == 0x7F : (c & 0x7F) > 0x7C;
}

static void fp8_case(int32_t format)
{
    qs_ctx *ctx = t_ctx();
    qs_quant_params p;
    planes t;
    uint8_t want[256];

    qs_quant_params_init(&p, format);
    for (int k = -1; k < N_NAN_IN; k++) {
        planes_new(&t, &p, 1, 256);
        for (int c = 0; c < 256; c++) {
            ((uint8_t *)t.q.data)[c] = (uint8_t)c;
            want[c] = (uint8_t)(k >= 0 || fp8_code_is_nan(format, c));
        }
        set_f32(t.q.scale, 0, k < 0 ? 1.5f : nanv(k)); /* k = -1: the NaN codes alone */
        check_all(ctx, qs_format_name(format), &p, &t.q, 1, 256, want);
        planes_free(&t);
    }
    qs_ctx_destroy(ctx);
}

static void test_fp8(void **state)
{
    (void)state;
    fp8_case(QS_FORMAT_FP8_E4M3);
    fp8_case(QS_FORMAT_FP8_E5M2);
}

/* ---- MX: E8M0 0xFF blocks, NaN E4M3 elements ------------------------------------------------- */

static void mx_case(int32_t format)
{
    qs_ctx *ctx = t_ctx();
    qs_quant_params p;
    planes t;
    const int64_t rows = 2, cols = 200, n = rows * cols; /* 7 blocks per row, the last partial */
    const int64_t spr = (cols + 31) / 32;
    uint8_t want[2 * 200];

    qs_quant_params_init(&p, format);
    planes_new(&t, &p, rows, cols);
    for (int64_t i = 0; i < t.q.data_bytes; i++)
        ((uint8_t *)t.q.data)[i] = (uint8_t)(i * 7 + i / 32); /* 0x7F and 0xFF codes included */
    for (int64_t r = 0; r < rows; r++)
        for (int64_t b = 0; b < spr; b++)
            ((uint8_t *)t.q.scale)[r * spr + b] = (b + r) % 2 ? 0xFF : (uint8_t)(120 + b);
    for (int64_t i = 0; i < n; i++) {
        int64_t r = i / cols, c = i % cols;
        int nan_scale = ((c / 32) + r) % 2 == 1;
        int nan_code = 0;
        if (format == QS_FORMAT_MXFP8)
            nan_code = (((const uint8_t *)t.q.data)[i] & 0x7F) == 0x7F;
        want[i] = (uint8_t)(nan_scale || nan_code);
    }
    check_all(ctx, qs_format_name(format), &p, &t.q, rows, cols, want);
    planes_free(&t);
    qs_ctx_destroy(ctx);
}

static void test_mx(void **state)
{
    (void)state;
    mx_case(QS_FORMAT_MXFP4);
    mx_case(QS_FORMAT_MXFP8);
}

/* ---- NVFP4: NaN tensor scale x NaN block scale ---------------------------------------------- */

static void test_nvfp4(void **state)
{
    qs_ctx *ctx = t_ctx();
    qs_quant_params p;
    planes t;
    const int64_t rows = 3, cols = 90, n = rows * cols; /* 6 blocks per row, the last partial */
    const int64_t spr = (cols + 15) / 16;
    static const uint8_t bscale[] = {0x7F, 0xFF, 0x38, 0xB8, 0x01, 0x7E};
    uint8_t want[3 * 90];

    (void)state;
    qs_quant_params_init(&p, QS_FORMAT_NVFP4);
    for (int k = -1; k < N_NAN_IN; k++) {
        planes_new(&t, &p, rows, cols);
        for (int64_t i = 0; i < t.q.data_bytes; i++)
            ((uint8_t *)t.q.data)[i] = (uint8_t)(i * 23);
        for (int64_t s = 0; s < rows * spr; s++)
            ((uint8_t *)t.q.scale)[s] = bscale[(s + (uint64_t)(k + 1)) % 6];
        t.q.global_scale = k < 0 ? 0.5f : nanv(k); /* k = -1: the NaN block scales alone */
        for (int64_t i = 0; i < n; i++) {
            int64_t r = i / cols, c = i % cols;
            uint8_t s = ((const uint8_t *)t.q.scale)[r * spr + c / 16];
            want[i] = (uint8_t)(k >= 0 || (s & 0x7F) == 0x7F);
        }
        check_all(ctx, "nvfp4", &p, &t.q, rows, cols, want);
        planes_free(&t);
    }
    qs_ctx_destroy(ctx);
}

/* ---- SR-STE: a computed gradient is canonical, a kept one is moved as it is ------------------ */

static void test_srste(void **state)
{
    qs_ctx *ctx = t_ctx();
    float w[8] = {4.0f, 0.1f, 3.0f, -0.2f, -5.0f, 6.0f, 0.01f, 0.02f}, g[8], wo[8], go[8];
    uint8_t mask[8];

    (void)state;
    for (int i = 0; i < 8; i++)
        g[i] = nanv(i + 2); /* NaN gradients with payloads and both signs */
    assert_int_equal(qs_nm_srste(ctx, w, g, 1, 8, 2, 4, 0.5f, wo, go, mask, 8), QS_OK);
    for (int i = 0; i < 8; i++) {
        uint32_t want = mask[i] ? nan_in[(i + 2) % N_NAN_IN] : QNAN_F32;
        assert_int_equal(mask[i], i == 0 || i == 2 || i == 4 || i == 5);
        if (t_bits(go[i]) != want) {
            print_error("srste gradient %d: got 0x%08x, want 0x%08x\n", i, t_bits(go[i]), want);
            fail();
        }
    }
    qs_ctx_destroy(ctx);
}

/* ---- NaN input never makes a NaN scale or calibration result --------------------------------- */

static void test_results_of_nan_data(void **state)
{
    qs_ctx *ctx = t_ctx();
    float x[64], amax[4], lo[4], hi[4], scale[4], s8[2];
    int8_t d8[64];
    uint8_t f8[64];

    (void)state;
    for (int i = 0; i < 64; i++)
        x[i] = nanv(i);
    for (int32_t m = QS_OBSERVER_MINMAX; m <= QS_OBSERVER_MSE; m++) {
        qs_observer_params op;
        qs_observer *obs = NULL;
        qs_observer_params_init(&op, m);
        assert_int_equal(qs_observer_create(ctx, &op, &obs), QS_OK);
        assert_int_equal(qs_observer_update(ctx, obs, x, QS_DTYPE_F32, 2, 32), QS_OK);
        assert_int_equal(qs_observer_amax(ctx, obs, amax, 4), QS_OK);
        assert_int_equal(qs_observer_range(ctx, obs, lo, hi, 4), QS_OK);
        assert_int_equal(qs_observer_qparams(ctx, obs, QS_CALIB_INT8_SYM, scale, NULL, 4), QS_OK);
        assert_true(amax[0] == 0.0f && lo[0] == 0.0f && hi[0] == 0.0f);
        assert_true(scale[0] == 1.0f); /* amax 0: scale 1 (formats.md §9) */
        qs_observer_destroy(obs);
    }
    assert_int_equal(qs_quantize_dynamic_int8_per_token(ctx, x, QS_DTYPE_F32, 2, 32, d8, 64, s8, 2),
                     QS_OK);
    assert_true(s8[0] == 1.0f && s8[1] == 1.0f);
    assert_int_equal(
        qs_quantize_dynamic_fp8(ctx, QS_FORMAT_FP8_E4M3, x, QS_DTYPE_F32, 64, f8, 64, scale),
        QS_OK);
    assert_true(scale[0] == 1.0f);

    /* quantize: absmax of an all-NaN block is 0, the NVFP4 tensor scale 1, MX scale 0xFF */
    for (int32_t f = QS_FORMAT_NF4; f <= QS_FORMAT_NVFP4; f++) {
        qs_quant_params p;
        planes t;
        qs_quant_params_init(&p, f);
        planes_new(&t, &p, 2, 32);
        assert_int_equal(qs_quantize(ctx, &p, x, QS_DTYPE_F32, 2, 32, &t.q), QS_OK);
        if (f != QS_FORMAT_MXFP4 && f != QS_FORMAT_MXFP8 && f != QS_FORMAT_NVFP4)
            for (int64_t i = 0; i < t.q.scale_bytes / 4; i++) {
                float v;
                memcpy(&v, (uint8_t *)t.q.scale + 4 * i, 4);
                assert_false(isnan(v));
            }
        assert_false(isnan(t.q.global_scale));
        planes_free(&t);
    }
    qs_ctx_destroy(ctx);
}

/* The check can fail: a NaN with a payload, a negative NaN, a NaN where a number is due, and a
 * number where a NaN is due are each reported, in every dtype. */
static void test_check_catches_payload(void **state)
{
    const uint32_t f32[4] = {0x7FC00001u, 0xFFC00000u, 0x7FC00000u, 0x3F800000u};
    const uint16_t f16[4] = {0x7E01u, 0xFE00u, 0x7E00u, 0x3C00u};
    const uint16_t bf16[4] = {0x7FC1u, 0xFFC0u, 0x7FC0u, 0x3F80u};
    const uint8_t want[4] = {1, 1, 0, 1};
    const uint8_t one[1] = {1};
    uint32_t got = 0;

    (void)state;
    for (int k = 0; k < 2; k++) {
        assert_int_equal(first_bad(f32 + k, QS_DTYPE_F32, 1, one, &got), 0);
        assert_int_equal(first_bad(f16 + k, QS_DTYPE_F16, 1, one, &got), 0);
        assert_int_equal(first_bad(bf16 + k, QS_DTYPE_BF16, 1, one, &got), 0);
    }
    assert_int_equal(first_bad(f32 + 2, QS_DTYPE_F32, 1, want + 2, &got), 0);
    assert_int_equal(first_bad(f32 + 3, QS_DTYPE_F32, 1, want + 3, &got), 0);
    assert_int_equal(first_bad(f16 + 3, QS_DTYPE_F16, 1, want + 3, &got), 0);
    assert_int_equal(first_bad(bf16 + 2, QS_DTYPE_BF16, 1, one, &got), -1);
    assert_int_equal(first_bad(f16 + 2, QS_DTYPE_F16, 1, one, &got), -1);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_nf4),
        cmocka_unit_test(test_fp4),
        cmocka_unit_test(test_int8),
        cmocka_unit_test(test_fp8),
        cmocka_unit_test(test_mx),
        cmocka_unit_test(test_nvfp4),
        cmocka_unit_test(test_srste),
        cmocka_unit_test(test_results_of_nan_data),
        cmocka_unit_test(test_check_catches_payload),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
