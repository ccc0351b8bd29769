/* SPDX-License-Identifier: MIT */
/*
 * The backend seam (include/qsparse.h "Backends", src/core/backend.h): the default plugin search
 * beside the library, every way a plugin can be broken (no file, not a shared object, no init
 * symbol, another ABI version, an init that refuses, a backend without a device), each leaving
 * the named message and a working CPU path; then a good plugin through QS_PLUGIN_PATH, which
 * takes the calls of a CUDA context only after the core's checks, and AUTO staying on the CPU.
 * The registry is per process, so the tests run in this order and build on each other.
 */
#define _GNU_SOURCE /* RTLD_NOLOAD */
#include <dlfcn.h>

#include "common.h"
#include "quant_helpers.h"
#include "../src/core/backend.h"

enum { ROWS = 4, COLS = 64 };

static float src[ROWS * COLS];

static const char *plugin(const char *variant)
{
    char name[64];
    const char *p;

    snprintf(name, sizeof name, "QS_TEST_PLUGIN_%s", variant);
    p = getenv(name);
    if (!p) {
        print_error("%s is not set (run through meson test)\n", name);
        fail();
    }
    return p;
}

/* The message names the file and contains the cause. */
static void expect_message(const char *path, const char *cause)
{
    const char *m = qs_backend_message(QS_BACKEND_CUDA);

    if (!strstr(m, path) || !strstr(m, cause)) {
        print_error("message \"%s\": want the file %s and \"%s\"\n", m, path, cause);
        fail();
    }
}

/* A context for `backend` fails with QS_ERR_BACKEND and leaves *out alone. */
static void expect_no_ctx(int32_t backend)
{
    qs_ctx_params cp;
    qs_ctx *ctx = (qs_ctx *)&cp; /* a sentinel the failed call must not overwrite */

    qs_ctx_params_init(&cp);
    cp.backend = backend;
    assert_int_equal(qs_ctx_create(&cp, &ctx), QS_ERR_BACKEND);
    assert_ptr_equal(ctx, (qs_ctx *)&cp);
}

static qs_ctx *ctx_for(int32_t backend)
{
    qs_ctx_params cp;
    qs_ctx *ctx = NULL;

    qs_ctx_params_init(&cp);
    cp.backend = backend;
    assert_int_equal(qs_ctx_create(&cp, &ctx), QS_OK);
    return ctx;
}

/* The CPU path still quantizes: an AUTO context without a usable plugin runs on the CPU and
 * gives the same bytes as an explicit CPU context. */
static void expect_cpu_path_works(void)
{
    qs_ctx *a = ctx_for(QS_BACKEND_AUTO), *c = ctx_for(QS_BACKEND_CPU);
    qs_quant_params p = params(QS_FORMAT_NF4);
    tq ta, tc;

    assert_int_equal(qs_ctx_backend(a), QS_BACKEND_CPU);
    assert_int_equal(qs_ctx_backend(c), QS_BACKEND_CPU);
    quant(a, &p, src, QS_DTYPE_F32, ROWS, COLS, &ta);
    quant(c, &p, src, QS_DTYPE_F32, ROWS, COLS, &tc);
    assert_memory_equal(ta.q.data, tc.q.data, (size_t)ta.q.data_bytes);
    assert_memory_equal(ta.q.scale, tc.q.scale, (size_t)ta.q.scale_bytes);
    assert_int_not_equal(((uint8_t *)ta.q.data)[0] | ((uint8_t *)ta.q.data)[1], 0);
    tq_free(&ta);
    tq_free(&tc);
    qs_ctx_destroy(a);
    qs_ctx_destroy(c);
}

static int setup(void **state)
{
    t_rng rng = {5};
    (void)state;
    for (int i = 0; i < ROWS * COLS; i++)
        src[i] = (float)t_normal(&rng);
    return 0;
}

static void test_names(void **state)
{
    (void)state;
    assert_string_equal(qs_backend_name(QS_BACKEND_AUTO), "auto");
    assert_string_equal(qs_backend_name(QS_BACKEND_CPU), "cpu");
    assert_string_equal(qs_backend_name(QS_BACKEND_CUDA), "cuda");
    assert_null(qs_backend_name(3));
    assert_null(qs_backend_name(-1));
    for (int32_t b = 0; b <= QS_BACKEND_CUDA; b++)
        assert_int_equal(qs_backend_from_name(qs_backend_name(b)), b);
    assert_int_equal(qs_backend_from_name("gpu"), -1);
    assert_int_equal(qs_backend_from_name(NULL), -1);
    assert_int_equal(qs_backend_available(QS_BACKEND_CPU), 1);
    assert_int_equal(qs_backend_available(7), 0);
    assert_string_equal(qs_backend_message(QS_BACKEND_CPU), "");
    {
        qs_ctx_params cp;
        qs_ctx *ctx = NULL;
        qs_ctx_params_init(&cp);
        cp.backend = 3;
        assert_int_equal(qs_ctx_create(&cp, &ctx), QS_ERR_INVALID_ARG);
        assert_null(ctx);
        assert_int_equal(qs_ctx_backend(NULL), -1);
    }
}

/* No QS_PLUGIN_PATH: the plugin is looked for beside the library (here the test executable,
 * which links the library statically) and is not there. */
static void test_default_search_beside_library(void **state)
{
    char exe[4096], want[4200];
    ssize_t len;
    (void)state;

    unsetenv("QS_PLUGIN_PATH");
    len = readlink("/proc/self/exe", exe, sizeof exe - 1);
    assert_true(len > 0);
    exe[len] = '\0';
    *strrchr(exe, '/') = '\0';
    snprintf(want, sizeof want, "%s/libqsparse-cuda.so", exe);

    assert_string_equal(qs_backend_message(QS_BACKEND_CUDA), ""); /* nothing tried yet */
    assert_int_equal(qs_backend_available(QS_BACKEND_CUDA), 0);
    expect_message(want, "no such file");
    expect_no_ctx(QS_BACKEND_CUDA);
    expect_cpu_path_works();
    assert_int_equal(qs_backend_load(NULL), QS_ERR_BACKEND);
    expect_message(want, "no such file");
}

static void test_broken_plugins(void **state)
{
    char junk[4200], missing[4200];
    const char *scratch = getenv("QS_TEST_SCRATCH");
    FILE *f;
    (void)state;

    assert_non_null(scratch);
    snprintf(missing, sizeof missing, "%s/no-such-plugin.so", scratch);
    assert_int_equal(qs_backend_load(missing), QS_ERR_BACKEND);
    expect_message(missing, "no such file");
    expect_no_ctx(QS_BACKEND_CUDA);
    expect_cpu_path_works();

    snprintf(junk, sizeof junk, "%s/qs-test-plugin-junk.so", scratch);
    assert_non_null(f = fopen(junk, "wb"));
    fputs("this is not a shared object\n", f);
    fclose(f);
    assert_int_equal(qs_backend_load(junk), QS_ERR_BACKEND);
    expect_message(junk, "cannot be loaded");
    remove(junk);
    expect_no_ctx(QS_BACKEND_CUDA);
    expect_cpu_path_works();

    assert_int_equal(qs_backend_load(plugin("NO_SYMBOL")), QS_ERR_BACKEND);
    expect_message(plugin("NO_SYMBOL"), "does not export qs_backend_plugin_init");
    expect_no_ctx(QS_BACKEND_CUDA);
    expect_cpu_path_works();

    assert_int_equal(qs_backend_load(plugin("WRONG_ABI")), QS_ERR_BACKEND);
    {
        char want[96];
        snprintf(want, sizeof want, "built for backend ABI version %d, this library has %d",
                 QS_BACKEND_ABI_VERSION + 1, QS_BACKEND_ABI_VERSION);
        expect_message(plugin("WRONG_ABI"), want);
    }
    expect_no_ctx(QS_BACKEND_CUDA);
    expect_cpu_path_works();

    assert_int_equal(qs_backend_load(plugin("REFUSE")), QS_ERR_BACKEND);
    {
        char want[64];
        snprintf(want, sizeof want, "refused backend ABI version %d", QS_BACKEND_ABI_VERSION);
        expect_message(plugin("REFUSE"), want);
    }
    expect_no_ctx(QS_BACKEND_CUDA);
    expect_cpu_path_works();
    assert_int_equal(qs_backend_available(QS_BACKEND_CUDA), 0);

    assert_int_equal(qs_backend_load(NULL), QS_ERR_BACKEND);
}

/* A plugin that loads but has no device: registered, not available, AUTO stays on the CPU. */
static void test_plugin_without_device(void **state)
{
    (void)state;
    assert_int_equal(qs_backend_load(plugin("UNAVAILABLE")), QS_OK);
    assert_int_equal(qs_backend_available(QS_BACKEND_CUDA), 0);
    expect_message(plugin("UNAVAILABLE"), "test backend not available: no device");
    expect_no_ctx(QS_BACKEND_CUDA);
    expect_cpu_path_works();
}

/* The good plugin through QS_PLUGIN_PATH: CUDA contexts run on it, after the core's checks. */
static void test_good_plugin(void **state)
{
    const char *good = plugin("GOOD");
    qs_quant_params p = params(QS_FORMAT_NF4);
    int32_t *calls;
    void *h;
    tq t;
    (void)state;

    setenv("QS_PLUGIN_PATH", good, 1);
    assert_int_equal(qs_backend_load(NULL), QS_OK);
    unsetenv("QS_PLUGIN_PATH");
    assert_int_equal(qs_backend_available(QS_BACKEND_CUDA), 1);
    assert_string_equal(qs_backend_message(QS_BACKEND_CUDA), "");
    assert_non_null(h = dlopen(good, RTLD_NOW | RTLD_NOLOAD));
    assert_non_null(calls = (int32_t *)dlsym(h, "qs_test_plugin_calls"));

    qs_ctx *ctx = ctx_for(QS_BACKEND_CUDA);
    assert_int_equal(qs_ctx_backend(ctx), QS_BACKEND_CUDA);
    tq_new(&t, &p, ROWS, COLS);

    /* checks happen in the core: a short plane never reaches the plugin */
    t.q.scale_bytes--;
    assert_int_equal(qs_quantize(ctx, &p, src, QS_DTYPE_F32, ROWS, COLS, &t.q),
                     QS_ERR_BUFFER_TOO_SMALL);
    t.q.scale_bytes++;
    assert_int_equal(qs_quantize(ctx, &p, NULL, QS_DTYPE_F32, ROWS, COLS, &t.q),
                     QS_ERR_INVALID_ARG);
    assert_int_equal(*calls, 0);
    assert_true(t_buf_untouched(&t.plane[QS_PLANE_DATA]));

    /* a valid call is the plugin's: its mark in the first byte, nothing else written */
    assert_int_equal(qs_quantize(ctx, &p, src, QS_DTYPE_F32, ROWS, COLS, &t.q), QS_OK);
    assert_int_equal(*calls, 1);
    assert_int_equal(((uint8_t *)t.q.data)[0], 0xC5);
    assert_true(t_buf_untouched(&t.plane[QS_PLANE_SCALE]));
    assert_string_equal(qs_ctx_last_error(ctx), "");

    /* the plugin's failure and its message come back unchanged */
    {
        t_buf dst = t_buf_new(ROWS * COLS * 4);
        assert_int_equal(qs_dequantize(ctx, &p, &t.q, ROWS, COLS, dst.p, QS_DTYPE_F32,
                                       ROWS * COLS * 4),
                         QS_ERR_UNSUPPORTED);
        assert_string_equal(qs_ctx_last_error(ctx), "test backend: dequantize of 4 x 64");
        assert_true(t_buf_untouched(&dst));
        t_buf_free(&dst);
    }
    tq_free(&t);
    qs_ctx_destroy(ctx);

    /* AUTO stays on the CPU even with a usable plugin (host arrays never go to a GPU behind
     * the caller's back); CPU stays the CPU and computes as before */
    ctx = ctx_for(QS_BACKEND_AUTO);
    assert_int_equal(qs_ctx_backend(ctx), QS_BACKEND_CPU);
    qs_ctx_destroy(ctx);
    ctx = ctx_for(QS_BACKEND_CPU);
    {
        tq c;
        quant(ctx, &p, src, QS_DTYPE_F32, ROWS, COLS, &c);
        assert_int_equal(*calls, 1);
        tq_free(&c);
    }
    qs_ctx_destroy(ctx);

    /* a broken plugin loaded later is refused and keeps the good one registered */
    assert_int_equal(qs_backend_load(plugin("WRONG_ABI")), QS_ERR_BACKEND);
    expect_message(plugin("WRONG_ABI"), "built for backend ABI version");
    dlclose(h);
}

/* The device API (include/qsparse/cuda.h): the core's checks come first, and a plugin without
 * device entry points (the test plugin has none) is a status with a message, never a call. */
static void test_device_api(void **state)
{
    qs_quant_params p = params(QS_FORMAT_NF4);
    qs_ctx *ctx = ctx_for(QS_BACKEND_CPU);
    float x[COLS] = {0}, y[ROWS];
    tq t;
    (void)state;

    tq_new(&t, &p, ROWS, COLS);
    assert_int_equal(qs_cuda_quantize(NULL, &p, src, QS_DTYPE_F32, ROWS, COLS, &t.q, NULL),
                     QS_ERR_INVALID_ARG);
    assert_int_equal(qs_cuda_quantize(ctx, &p, (const char *)src + 1, QS_DTYPE_F32, ROWS, COLS,
                                      &t.q, NULL),
                     QS_ERR_INVALID_ARG);
    assert_non_null(strstr(qs_ctx_last_error(ctx), "not aligned"));
    t.q.data_bytes--;
    assert_int_equal(qs_cuda_quantize(ctx, &p, src, QS_DTYPE_F32, ROWS, COLS, &t.q, NULL),
                     QS_ERR_BUFFER_TOO_SMALL);
    t.q.data_bytes++;
    assert_int_equal(qs_cuda_quantize(ctx, &p, src, QS_DTYPE_F32, ROWS, COLS, &t.q, NULL),
                     QS_ERR_BACKEND);
    assert_non_null(strstr(qs_ctx_last_error(ctx), "no device entry point"));
    assert_int_equal(qs_cuda_dequantize(ctx, &p, &t.q, ROWS, COLS, y, QS_DTYPE_F32, 4, NULL),
                     QS_ERR_BUFFER_TOO_SMALL);
    assert_int_equal(qs_cuda_gemv(ctx, &p, &t.q, ROWS, COLS, x, y, NULL), QS_ERR_BACKEND);
    p = params(QS_FORMAT_MXFP4);
    assert_int_equal(qs_cuda_gemv(ctx, &p, &t.q, ROWS, COLS, x, y, NULL), QS_ERR_UNSUPPORTED);
    {
        float vals[ROWS * COLS / 2], dense[ROWS * COLS];
        uint16_t meta[ROWS * COLS / 16];
        assert_int_equal(qs_cuda_sp24_prune_compress(ctx, src, ROWS, 6, NULL, vals, sizeof vals,
                                                     meta, 64, NULL, 0, NULL),
                         QS_ERR_SHAPE); /* cols % 4 */
        assert_int_equal(qs_cuda_sp24_compress(ctx, src, ROWS, COLS, NULL, vals, 8, meta,
                                               ROWS * COLS / 16, NULL),
                         QS_ERR_BUFFER_TOO_SMALL);
        assert_int_equal(qs_cuda_sp24_decompress(ctx, vals, meta, ROWS * COLS / 16, ROWS, COLS,
                                                 dense, sizeof dense, NULL),
                         QS_ERR_BACKEND);
        assert_non_null(strstr(qs_ctx_last_error(ctx), "no device entry point"));
    }
    assert_true(t_buf_untouched(&t.plane[QS_PLANE_DATA]));
    tq_free(&t);
    qs_ctx_destroy(ctx);
}

/* The real CUDA plugin when the build made one (QS_TEST_CUDA_PLUGIN): it loads without a GPU
 * (its CUDA runtime is static, the driver is only opened when asked), and without a device it
 * is not available, with a message naming the file and the cause; the device API then fails
 * with that message and the CPU path works. A truncated copy is refused with its name. On a
 * machine with a usable GPU only the loading is checked here (tests/cuda/run.sh does the rest). */
static void test_cuda_plugin(void **state)
{
    const char *path = getenv("QS_TEST_CUDA_PLUGIN");
    const char *scratch = getenv("QS_TEST_SCRATCH");
    char cut[4096], buf[4096];
    FILE *in, *out;
    size_t got;
    (void)state;

    if (!path || !*path)
        skip();
    assert_int_equal(qs_backend_load(path), QS_OK);
    if (!qs_backend_available(QS_BACKEND_CUDA)) {
        qs_quant_params p = params(QS_FORMAT_NF4);
        qs_ctx *ctx = ctx_for(QS_BACKEND_AUTO);
        tq t;
        expect_message(path, "cuda backend not available: ");
        expect_no_ctx(QS_BACKEND_CUDA);
        assert_int_equal(qs_ctx_backend(ctx), QS_BACKEND_CPU);
        tq_new(&t, &p, ROWS, COLS);
        assert_int_equal(qs_cuda_quantize(ctx, &p, src, QS_DTYPE_F32, ROWS, COLS, &t.q, NULL),
                         QS_ERR_BACKEND);
        assert_non_null(strstr(qs_ctx_last_error(ctx), path));
        assert_true(t_buf_untouched(&t.plane[QS_PLANE_DATA]));
        tq_free(&t);
        qs_ctx_destroy(ctx);
        expect_cpu_path_works();
    }

    /* the first 4 KiB of the plugin: an ELF header whose sections are missing */
    snprintf(cut, sizeof cut, "%s/libqsparse-cuda-truncated.so", scratch);
    assert_non_null(in = fopen(path, "rb"));
    assert_non_null(out = fopen(cut, "wb"));
    got = fread(buf, 1, sizeof buf, in);
    assert_int_equal(fwrite(buf, 1, got, out), got);
    fclose(in);
    fclose(out);
    assert_int_equal(qs_backend_load(cut), QS_ERR_BACKEND);
    expect_message(cut, "cannot be loaded");
    remove(cut);
    expect_cpu_path_works();
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_names),
        cmocka_unit_test(test_default_search_beside_library),
        cmocka_unit_test(test_broken_plugins),
        cmocka_unit_test(test_plugin_without_device),
        cmocka_unit_test(test_good_plugin),
        cmocka_unit_test(test_device_api),
        cmocka_unit_test(test_cuda_plugin),
    };
    return cmocka_run_group_tests(tests, setup, NULL);
}
