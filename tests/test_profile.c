/* SPDX-License-Identifier: MIT */
/*
 * Profiling counters (include/qsparse/profile.h): off by default; while on, the entries add up
 * to what the calls did (calls, elements, bytes from qs_quant_size, the kernel the context runs
 * for the slot); failed calls are not counted; the JSON export and its size query; the table's
 * bound; the run-time facts of `qsparse doctor`.
 */
#include "quant_helpers.h"

#include "qsparse/matmul.h"
#include "qsparse/profile.h"

enum { ROWS = 32, COLS = 128 };

static float *weights(void)
{
    float *w = malloc(ROWS * COLS * sizeof *w);
    t_rng r = {5};
    assert_non_null(w);
    for (int i = 0; i < ROWS * COLS; i++)
        w[i] = (float)t_normal(&r);
    return w;
}

static uint64_t planes_bytes(const qs_quant_params *p, int64_t rows, int64_t cols)
{
    uint64_t sum = 0;
    for (int i = 0; i < QS_PLANE_COUNT; i++) {
        int64_t b = 0;
        assert_int_equal(qs_quant_size(p, rows, cols, i, &b), QS_OK);
        sum += (uint64_t)b;
    }
    return sum;
}

/* The implementation name the context runs for a slot name. */
static const char *kernel_of(const qs_ctx *ctx, const char *slot)
{
    for (int32_t i = 0; i < qs_ctx_kernel_count(ctx); i++) {
        const char *s = NULL, *impl = NULL;
        assert_int_equal(qs_ctx_kernel_info(ctx, i, &s, &impl), QS_OK);
        if (strcmp(s, slot) == 0)
            return impl;
    }
    fail_msg("no slot %s", slot);
    return NULL;
}

static void test_off_by_default(void **state)
{
    (void)state;
    qs_ctx *ctx = t_ctx();
    float *w = weights();
    qs_quant_params p;
    tq t;
    int64_t on = -1, need = 0;
    char json[128];

    assert_int_equal(qs_ctx_get(ctx, QS_PARAM_PROFILE, &on), QS_OK);
    assert_int_equal(on, 0);
    qs_quant_params_init(&p, QS_FORMAT_NF4);
    quant(ctx, &p, w, QS_DTYPE_F32, ROWS, COLS, &t);
    assert_int_equal(qs_profile_count(ctx), 0);
    assert_int_equal(qs_profile_json(ctx, json, sizeof json, &need), QS_OK);
    assert_non_null(strstr(json, "\"dropped\": 0, \"entries\": []}"));
    assert_int_equal(need, (int64_t)strlen(json));
    tq_free(&t);
    free(w);
    qs_ctx_destroy(ctx);
}

static void test_counts_add_up(void **state)
{
    (void)state;
    qs_ctx *ctx = t_ctx();
    float *w = weights(), *back = malloc(ROWS * COLS * sizeof *back);
    qs_quant_params p;
    qs_profile_entry e, sentinel;
    tq t;
    int64_t on = 0;

    assert_int_equal(qs_ctx_set(ctx, QS_PARAM_PROFILE, 2), QS_ERR_INVALID_ARG);
    assert_int_equal(qs_ctx_set(ctx, QS_PARAM_PROFILE, 1), QS_OK);
    assert_int_equal(qs_ctx_get(ctx, QS_PARAM_PROFILE, &on), QS_OK);
    assert_int_equal(on, 1);
    qs_quant_params_init(&p, QS_FORMAT_NF4);
    quant(ctx, &p, w, QS_DTYPE_F32, ROWS, COLS, &t);
    assert_int_equal(qs_quantize(ctx, &p, w, QS_DTYPE_F32, ROWS, COLS, &t.q), QS_OK);
    assert_int_equal(qs_dequantize(ctx, &p, &t.q, ROWS, COLS, back, QS_DTYPE_F32,
                                   ROWS * COLS * 4),
                     QS_OK);
    /* a failed call (destination too small) is not counted */
    assert_int_equal(qs_dequantize(ctx, &p, &t.q, ROWS, COLS, back, QS_DTYPE_F32, 4),
                     QS_ERR_BUFFER_TOO_SMALL);
    assert_int_equal(qs_profile_count(ctx), 2);

    uint64_t planes = planes_bytes(&p, ROWS, COLS);
    assert_int_equal(qs_profile_get(ctx, 0, &e), QS_OK);
    assert_string_equal(e.op, "quantize");
    assert_string_equal(e.kernel, kernel_of(ctx, "nf4_quant"));
    assert_string_equal(e.isa, qs_ctx_isa_name(ctx));
    assert_int_equal(e.format, QS_FORMAT_NF4);
    assert_int_equal(e.calls, 2);
    assert_int_equal(e.elements, 2 * ROWS * COLS);
    assert_int_equal(e.bytes_in, 2 * ROWS * COLS * 4);
    assert_int_equal(e.bytes_out, 2 * planes);
    assert_true(e.ns > 0);
    assert_true(e.threads >= 1);
    assert_int_equal(qs_profile_get(ctx, 1, &e), QS_OK);
    assert_string_equal(e.op, "dequantize");
    assert_string_equal(e.kernel, kernel_of(ctx, "nf4_dequant"));
    assert_int_equal(e.calls, 1);
    assert_int_equal(e.bytes_in, planes);
    assert_int_equal(e.bytes_out, ROWS * COLS * 4);

    /* out of range: untouched */
    memset(&sentinel, 0x5A, sizeof sentinel);
    e = sentinel;
    assert_int_equal(qs_profile_get(ctx, 2, &e), QS_ERR_INVALID_ARG);
    assert_int_equal(qs_profile_get(ctx, -1, &e), QS_ERR_INVALID_ARG);
    assert_memory_equal(&e, &sentinel, sizeof e);

    /* matmul: M*N*K multiply-adds, x and the weight's planes in, y out */
    qs_weight wt = {0};
    wt.kind = QS_WEIGHT_QUANT;
    wt.quant = &p;
    wt.q = &t.q;
    float x[3 * COLS], y[3 * ROWS];
    for (int i = 0; i < 3 * COLS; i++)
        x[i] = (float)(i % 7) - 3.0f;
    assert_int_equal(qs_matmul(ctx, NULL, x, QS_DTYPE_F32, 3, COLS, &wt, ROWS, NULL, y, sizeof y),
                     QS_OK);
    assert_int_equal(qs_profile_count(ctx), 3);
    assert_int_equal(qs_profile_get(ctx, 2, &e), QS_OK);
    assert_string_equal(e.op, "matmul");
    assert_string_equal(e.kernel, kernel_of(ctx, "mm_gemv_nf4")); /* the fused GEMV (M < 16) */
    assert_int_equal(e.elements, 3 * ROWS * COLS);
    assert_int_equal(e.bytes_in, 3 * COLS * 4 + planes);
    assert_int_equal(e.bytes_out, 3 * ROWS * 4);

    /* convert f32 -> bf16 runs the narrowing kernel */
    uint16_t h[COLS];
    assert_int_equal(qs_convert(ctx, w, QS_DTYPE_F32, h, QS_DTYPE_BF16, COLS, sizeof h), QS_OK);
    assert_int_equal(qs_profile_get(ctx, 3, &e), QS_OK);
    assert_string_equal(e.op, "convert");
    assert_string_equal(e.kernel, kernel_of(ctx, "cvt_f32_bf16"));
    assert_int_equal(e.format, 0);
    assert_int_equal(e.bytes_in, COLS * 4);
    assert_int_equal(e.bytes_out, COLS * 2);

    /* reset keeps the counters on; off frees them and reads as empty */
    assert_int_equal(qs_profile_reset(ctx), QS_OK);
    assert_int_equal(qs_profile_count(ctx), 0);
    assert_int_equal(qs_quantize(ctx, &p, w, QS_DTYPE_F32, ROWS, COLS, &t.q), QS_OK);
    assert_int_equal(qs_profile_count(ctx), 1);
    assert_int_equal(qs_ctx_set(ctx, QS_PARAM_PROFILE, 0), QS_OK);
    assert_int_equal(qs_profile_count(ctx), 0);
    assert_int_equal(qs_quantize(ctx, &p, w, QS_DTYPE_F32, ROWS, COLS, &t.q), QS_OK);
    assert_int_equal(qs_profile_count(ctx), 0);
    tq_free(&t);
    free(back);
    free(w);
    qs_ctx_destroy(ctx);
}

/* The kernel names follow the tier: a scalar-only context reports the references. */
static void test_kernel_follows_tier(void **state)
{
    (void)state;
    qs_ctx_params cp;
    qs_ctx *ctx = NULL;
    float *w = weights();
    qs_quant_params p;
    qs_profile_entry e;
    tq t;

    qs_ctx_params_init(&cp);
    cp.isa_mask = 0;
    assert_int_equal(qs_ctx_create(&cp, &ctx), QS_OK);
    assert_int_equal(qs_ctx_set(ctx, QS_PARAM_PROFILE, 1), QS_OK);
    qs_quant_params_init(&p, QS_FORMAT_MXFP4);
    quant(ctx, &p, w, QS_DTYPE_F32, ROWS, COLS, &t);
    assert_int_equal(qs_profile_get(ctx, 0, &e), QS_OK);
    assert_string_equal(e.kernel, "qs_mxfp4_quant__ref");
    assert_string_equal(e.isa, "scalar");
    tq_free(&t);
    qs_ctx_destroy(ctx);

    /* the default context runs the best kernel of the tier QS_FORCE_ISA leaves */
    ctx = t_ctx();
    assert_int_equal(qs_ctx_set(ctx, QS_PARAM_PROFILE, 1), QS_OK);
    quant(ctx, &p, w, QS_DTYPE_F32, ROWS, COLS, &t);
    assert_int_equal(qs_profile_get(ctx, 0, &e), QS_OK);
    assert_string_equal(e.kernel, kernel_of(ctx, "mxfp4_quant"));
    if (qs_ctx_isa(ctx) != 0)
        assert_string_not_equal(e.kernel, "qs_mxfp4_quant__ref");
    tq_free(&t);
    free(w);
    qs_ctx_destroy(ctx);
}

/* More kinds than the table holds: the rest is counted as dropped, never written past it. */
static void test_table_bound(void **state)
{
    (void)state;
    qs_ctx *ctx = t_ctx();
    float *w = weights();
    int64_t calls = 0;

    assert_int_equal(qs_ctx_set(ctx, QS_PARAM_PROFILE, 1), QS_OK);
    for (int threads = 1; threads <= 8; threads++) {
        assert_int_equal(qs_ctx_set(ctx, QS_PARAM_NUM_THREADS, threads), QS_OK);
        for (int32_t f = 1; f <= qs_format_count(); f++) {
            qs_quant_params p;
            tq t;
            qs_quant_params_init(&p, f);
            quant(ctx, &p, w, QS_DTYPE_F32, ROWS, COLS, &t);
            calls++;
            tq_free(&t);
        }
    }
    int64_t n = qs_profile_count(ctx);
    uint64_t counted = 0;
    assert_true(calls > QS_PROFILE_MAX_ENTRIES);
    assert_int_equal(n, QS_PROFILE_MAX_ENTRIES);
    for (int64_t i = 0; i < n; i++) {
        qs_profile_entry e;
        assert_int_equal(qs_profile_get(ctx, i, &e), QS_OK);
        counted += e.calls;
    }
    assert_int_equal(counted + qs_profile_dropped(ctx), (uint64_t)calls);
    assert_true(qs_profile_dropped(ctx) > 0);
    free(w);
    qs_ctx_destroy(ctx);
}

static void test_json(void **state)
{
    (void)state;
    qs_ctx *ctx = t_ctx();
    float *w = weights();
    qs_quant_params p;
    tq t;
    int64_t need = -1, again = -1;

    assert_int_equal(qs_ctx_set(ctx, QS_PARAM_PROFILE, 1), QS_OK);
    qs_quant_params_init(&p, QS_FORMAT_INT8);
    quant(ctx, &p, w, QS_DTYPE_F32, ROWS, COLS, &t);
    assert_int_equal(qs_profile_json(ctx, NULL, 0, &need), QS_ERR_BUFFER_TOO_SMALL);
    assert_true(need > 0);
    t_buf small = t_buf_new((size_t)need);
    assert_int_equal(qs_profile_json(ctx, small.p, need, &again), QS_ERR_BUFFER_TOO_SMALL);
    assert_true(t_buf_untouched(&small));
    assert_int_equal(again, need);
    t_buf_free(&small);
    char *buf = malloc((size_t)need + 1);
    assert_int_equal(qs_profile_json(ctx, buf, need + 1, &again), QS_OK);
    assert_int_equal((int64_t)strlen(buf), need);
    assert_non_null(strstr(buf, "\"op\": \"quantize\""));
    assert_non_null(strstr(buf, "\"format\": \"int8\""));
    assert_non_null(strstr(buf, "\"calls\": 1,"));
    char elems[64];
    snprintf(elems, sizeof elems, "\"elements\": %d,", ROWS * COLS);
    assert_non_null(strstr(buf, elems));
    assert_int_equal(buf[0], '{');
    assert_int_equal(buf[need - 1], '}');
    assert_int_equal(qs_profile_json(NULL, buf, 8, &again), QS_ERR_INVALID_ARG);
    assert_int_equal(qs_profile_json(ctx, NULL, 8, &again), QS_ERR_INVALID_ARG);
    free(buf);
    tq_free(&t);
    free(w);
    qs_ctx_destroy(ctx);
}

static void test_runtime_info(void **state)
{
    (void)state;
    qs_ctx *ctx = t_ctx();
    const char *blas = qs_runtime_info(ctx, QS_RUNTIME_BLAS);
    const char *omp = qs_runtime_info(ctx, QS_RUNTIME_OPENMP);
    const char *cc = qs_runtime_info(ctx, QS_RUNTIME_COMPILER);

    /* answers for different keys are held together (one buffer per key) */
    assert_non_null(blas);
    assert_non_null(omp);
    assert_non_null(cc);
    assert_true(strcmp(blas, omp) != 0);
    if (qs_matmul_info() & QS_MATMUL_BLAS)
        assert_null(strstr(blas, "none"));
    assert_true(strstr(cc, "gcc") != NULL || strstr(cc, "clang") != NULL);
    assert_string_equal(qs_runtime_info(ctx, 99), "unknown key");
    assert_non_null(qs_runtime_info(NULL, QS_RUNTIME_OPENMP));
    qs_ctx_destroy(ctx);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_off_by_default),   cmocka_unit_test(test_counts_add_up),
        cmocka_unit_test(test_kernel_follows_tier), cmocka_unit_test(test_table_bound),
        cmocka_unit_test(test_json),             cmocka_unit_test(test_runtime_info),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
