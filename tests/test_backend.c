/* SPDX-License-Identifier: MIT */
/*
 * The backend seam (include/qsparse.h "Backends", include/qsparse/plugin.h, src/core/backend.h):
 * the default plugin search beside the library, every way a plugin can be broken (no file, not a
 * shared object, no init symbol, another ABI version, an init that refuses, a reserved or bad
 * name, a backend without a device), each leaving the named message and a working CPU path;
 * then a good plugin through QS_PLUGIN_PATH, which takes the calls of a CUDA context only after
 * the core's checks and refuses by name the operations it lacks, AUTO staying on the CPU; then a
 * second plugin registered beside it under a name of its own, whose matmul, 2:4 and calibration
 * operations are called with the checked arguments and the host services. The registry is per
 * process, so the tests run in this order and build on each other.
 */
#define _GNU_SOURCE /* RTLD_NOLOAD */
#include <dlfcn.h>

#include "common.h"
#include "quant_helpers.h"
#include "plugins/test_plugin.h"
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

/* A context from params, with an allocator that counts its calls. */
static int64_t allocs, frees;

static void *counting_alloc(void *user, size_t size, size_t align)
{
    void *p = NULL;
    (void)user;
    if (posix_memalign(&p, align < sizeof(void *) ? sizeof(void *) : align, size ? size : 1))
        return NULL;
    allocs++;
    return p;
}

static void counting_free(void *user, void *p)
{
    (void)user;
    frees++;
    free(p);
}

/* The message of the last call names the backend and the operation it lacks. */
static void expect_refused(qs_ctx *ctx, const char *backend, const char *op)
{
    char want[160];

    snprintf(want, sizeof want, "%s backend: %s is not implemented", backend, op);
    if (!strstr(qs_ctx_last_error(ctx), want)) {
        print_error("message \"%s\": want \"%s\"\n", qs_ctx_last_error(ctx), want);
        fail();
    }
}

/* A plain f32 weight over src (ROWS x COLS). */
static qs_weight dense_weight(void)
{
    qs_weight w;

    memset(&w, 0, sizeof w);
    w.kind = QS_WEIGHT_DENSE;
    w.dtype = QS_DTYPE_F32;
    w.data = src;
    w.data_bytes = sizeof src;
    return w;
}

/* A context whose backend lacks matmul, 2:4 and act_sumsq: each call is QS_ERR_UNSUPPORTED with
 * the backend and the operation named, after the core's own checks, and writes nothing. */
static void expect_missing_ops(qs_ctx *ctx, const char *backend)
{
    qs_weight w = dense_weight();
    qs_quant_params p = params(QS_FORMAT_NF4);
    t_buf y = t_buf_new(2 * ROWS * 4), vals = t_buf_new(ROWS * COLS / 2 * 4);
    t_buf meta = t_buf_new(ROWS * COLS / 16 * 2), dense = t_buf_new(ROWS * COLS * 4);
    double acc[COLS] = {0}, before[COLS];
    tq t;

    /* the core's checks come first */
    assert_int_equal(qs_matmul(ctx, NULL, src, QS_DTYPE_F32, 2, COLS, &w, ROWS, NULL, y.p,
                               (int64_t)y.bytes - 1),
                     QS_ERR_BUFFER_TOO_SMALL);
    assert_int_equal(qs_matmul(ctx, NULL, src, QS_DTYPE_F32, 2, COLS, &w, ROWS, NULL, y.p,
                               (int64_t)y.bytes),
                     QS_ERR_UNSUPPORTED);
    expect_refused(ctx, backend, "matmul (qs_matmul)");
    /* whether the backend runs a call does not depend on its shape */
    assert_int_equal(qs_matmul(ctx, NULL, NULL, QS_DTYPE_F32, 0, COLS, &w, ROWS, NULL, NULL, 0),
                     QS_ERR_UNSUPPORTED);
    assert_true(t_buf_untouched(&y));

    assert_int_equal(qs_sp24_prune_compress(ctx, src, QS_DTYPE_F32, ROWS, 6, NULL, vals.p,
                                            (int64_t)vals.bytes, meta.p, ROWS * COLS / 16, NULL,
                                            0),
                     QS_ERR_SHAPE);
    assert_int_equal(qs_sp24_prune_compress(ctx, src, QS_DTYPE_F32, ROWS, COLS, NULL, vals.p,
                                            (int64_t)vals.bytes, meta.p, ROWS * COLS / 16, NULL,
                                            0),
                     QS_ERR_UNSUPPORTED);
    expect_refused(ctx, backend, "sp24 (qs_sp24_prune_compress)");
    assert_int_equal(qs_sp24_compress(ctx, src, QS_DTYPE_F32, ROWS, COLS, NULL, vals.p,
                                      (int64_t)vals.bytes, meta.p, ROWS * COLS / 16),
                     QS_ERR_UNSUPPORTED);
    expect_refused(ctx, backend, "sp24 (qs_sp24_compress)");
    assert_int_equal(qs_sp24_decompress(ctx, vals.p, QS_DTYPE_F32, meta.p, ROWS * COLS / 16,
                                        ROWS, COLS, dense.p, (int64_t)dense.bytes),
                     QS_ERR_UNSUPPORTED);
    expect_refused(ctx, backend, "sp24 (qs_sp24_decompress)");
    /* 2:4 with quantized values is compress, then quantize: refused at the first */
    tq_new(&t, &p, ROWS, COLS / 2);
    assert_int_equal(qs_sp24_quantize(ctx, &p, src, QS_DTYPE_F32, ROWS, COLS, NULL, &t.q, meta.p,
                                      ROWS * COLS / 16),
                     QS_ERR_UNSUPPORTED);
    expect_refused(ctx, backend, "sp24 (qs_sp24_compress)");
    for (int i = 0; i < QS_PLANE_COUNT; i++)
        assert_true(t_buf_untouched(&t.plane[i]));
    tq_free(&t);
    assert_true(t_buf_untouched(&vals));
    assert_true(t_buf_untouched(&meta));
    assert_true(t_buf_untouched(&dense));

    memcpy(before, acc, sizeof acc);
    assert_int_equal(qs_act_sumsq_update(ctx, src, QS_DTYPE_F32, ROWS, COLS, acc, COLS - 1),
                     QS_ERR_BUFFER_TOO_SMALL);
    assert_int_equal(qs_act_sumsq_update(ctx, src, QS_DTYPE_F32, ROWS, COLS, acc, COLS),
                     QS_ERR_UNSUPPORTED);
    expect_refused(ctx, backend, "act_sumsq (qs_act_sumsq_update)");
    assert_memory_equal(acc, before, sizeof acc);

    t_buf_free(&y);
    t_buf_free(&vals);
    t_buf_free(&meta);
    t_buf_free(&dense);
}

/* The same matmul on two contexts gives the same bytes (AUTO and CPU run the CPU backend). */
static void expect_same_matmul(qs_ctx *a, qs_ctx *b)
{
    qs_weight w = dense_weight();
    float ya[2 * ROWS], yb[2 * ROWS];

    assert_int_equal(qs_matmul(a, NULL, src, QS_DTYPE_F32, 2, COLS, &w, ROWS, NULL, ya,
                               sizeof ya),
                     QS_OK);
    assert_int_equal(qs_matmul(b, NULL, src, QS_DTYPE_F32, 2, COLS, &w, ROWS, NULL, yb,
                               sizeof yb),
                     QS_OK);
    assert_memory_equal(ya, yb, sizeof ya);
    assert_true(ya[0] != QS_TEST_Y(0, 0) || ya[1] != QS_TEST_Y(0, 1));
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
        /* the CPU backend implements every host operation, and no device one */
        const qs_backend_ops *cpu = qs_backend_cpu();
        assert_int_equal(cpu->abi_version, QS_BACKEND_ABI_VERSION);
        assert_string_equal(cpu->name, "cpu");
        assert_non_null(cpu->available);
        assert_non_null(cpu->quantize);
        assert_non_null(cpu->dequantize);
        assert_non_null(cpu->matmul);
        assert_non_null(cpu->sp24);
        assert_non_null(cpu->act_sumsq);
        assert_null(cpu->quantize_dev);
        assert_null(cpu->dequantize_dev);
        assert_null(cpu->matmul_dev);
        assert_null(cpu->sp24_dev);
    }
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

    /* a backend name is the registry's key: the library's own and malformed ones are refused */
    assert_int_equal(qs_backend_load(plugin("RESERVED")), QS_ERR_BACKEND);
    expect_message(plugin("RESERVED"), "the backend name \"cpu\" is the library's own");
    expect_no_ctx(QS_BACKEND_CUDA);
    assert_int_equal(qs_backend_load(plugin("BAD_NAME")), QS_ERR_BACKEND);
    expect_message(plugin("BAD_NAME"), "its backend name is missing or not 1 to 31 characters");
    assert_int_equal(qs_backend_from_name("Big GPU"), -1);
    assert_null(qs_backend_name(QS_BACKEND_CUDA + 1));
    expect_cpu_path_works();

    assert_int_equal(qs_backend_load(NULL), QS_ERR_BACKEND);
}

/* A plugin that loads but has no device: registered, not available, AUTO stays on the CPU. */
static void test_plugin_without_device(void **state)
{
    (void)state;
    assert_int_equal(qs_backend_load(plugin("UNAVAILABLE")), QS_OK);
    assert_int_equal(qs_backend_available(QS_BACKEND_CUDA), 0);
    expect_message(plugin("UNAVAILABLE"), "cuda backend not available: no device");
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

    /* what the plugin does not implement is refused on its context, never run on the CPU */
    expect_missing_ops(ctx, "cuda");
    assert_int_equal(*calls, 1);
    qs_ctx_destroy(ctx);

    /* AUTO stays on the CPU even with a usable plugin (host arrays never go to a GPU behind
     * the caller's back); CPU stays the CPU and computes as before */
    ctx = ctx_for(QS_BACKEND_AUTO);
    assert_int_equal(qs_ctx_backend(ctx), QS_BACKEND_CPU);
    {
        qs_ctx *cpu = ctx_for(QS_BACKEND_CPU);
        expect_same_matmul(ctx, cpu);
        qs_ctx_destroy(cpu);
    }
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
    assert_int_equal(qs_backend_available(QS_BACKEND_CUDA), 1);
    dlclose(h);
}

/* A second plugin beside the good one: its own name and code, its own contexts; matmul, 2:4 and
 * act_sumsq reach it with the core's checks done, the weight's plain layout and the host
 * services of the calling context. */
static void test_two_plugins(void **state)
{
    const char *rec = plugin("RECORDER");
    qs_quant_params p = params(QS_FORMAT_NF4);
    struct qs_test_plugin_log *log;
    int32_t *good_calls, code, before;
    qs_ctx_params cp;
    qs_ctx *cu, *rc, *cpu;
    void *hg, *hr;
    (void)state;

    assert_int_equal(qs_backend_from_name("recorder"), -1);
    assert_int_equal(qs_backend_load(rec), QS_OK);
    code = qs_backend_from_name("recorder");
    assert_true(code > QS_BACKEND_CUDA);
    assert_string_equal(qs_backend_name(code), "recorder");
    assert_int_equal(qs_backend_available(code), 1);
    assert_string_equal(qs_backend_message(code), "");
    assert_int_equal(qs_backend_available(QS_BACKEND_CUDA), 1); /* both registered */
    assert_int_equal(qs_backend_load(rec), QS_OK);              /* again: the same entry */
    assert_int_equal(qs_backend_from_name("recorder"), code);
    assert_null(qs_backend_name(code + 1));
    assert_non_null(hr = dlopen(rec, RTLD_NOW | RTLD_NOLOAD));
    assert_non_null(log = (struct qs_test_plugin_log *)dlsym(hr, "qs_test_plugin_log"));
    assert_non_null(hg = dlopen(plugin("GOOD"), RTLD_NOW | RTLD_NOLOAD));
    assert_non_null(good_calls = (int32_t *)dlsym(hg, "qs_test_plugin_calls"));

    qs_ctx_params_init(&cp);
    cp.backend = code;
    cp.num_threads = 3;
    cp.nonfinite = QS_NONFINITE_REJECT;
    cp.allocator.alloc = counting_alloc;
    cp.allocator.free = counting_free;
    assert_int_equal(qs_ctx_create(&cp, &rc), QS_OK);
    assert_int_equal(qs_ctx_backend(rc), code);
    cu = ctx_for(QS_BACKEND_CUDA);
    cpu = ctx_for(QS_BACKEND_CPU);

    /* each context reaches its own plugin */
    before = *good_calls;
    {
        tq a, b;
        tq_new(&a, &p, ROWS, COLS);
        tq_new(&b, &p, ROWS, COLS);
        assert_int_equal(qs_quantize(cu, &p, src, QS_DTYPE_F32, ROWS, COLS, &a.q), QS_OK);
        assert_int_equal(*good_calls, before + 1);
        assert_int_equal(log->quantize, 0);
        assert_int_equal(qs_quantize(rc, &p, src, QS_DTYPE_F32, ROWS, COLS, &b.q), QS_OK);
        assert_int_equal(log->quantize, 1);
        assert_int_equal(*good_calls, before + 1);
        assert_int_equal(((uint8_t *)b.q.data)[0], 0xC5);
        /* the context's non-finite policy is the core's check, before the plugin */
        float keep = src[5];
        src[5] = NAN;
        assert_int_equal(qs_quantize(rc, &p, src, QS_DTYPE_F32, ROWS, COLS, &b.q),
                         QS_ERR_NONFINITE);
        src[5] = keep;
        assert_int_equal(log->quantize, 1);
        tq_free(&a);
        tq_free(&b);
    }

    /* matmul: the core's checks, then the recorder with the weight's plain layout */
    {
        tq t;
        qs_weight w;
        float bias[ROWS] = {0};
        t_buf y = t_buf_new(2 * ROWS * 4);

        quant(cpu, &p, src, QS_DTYPE_F32, ROWS, COLS, &t);
        memset(&w, 0, sizeof w);
        w.kind = QS_WEIGHT_QUANT;
        w.quant = &p;
        w.q = &t.q;
        assert_int_equal(qs_matmul(rc, NULL, src, QS_DTYPE_F32, 2, COLS, &w, ROWS, bias, y.p,
                                   (int64_t)y.bytes - 4),
                         QS_ERR_BUFFER_TOO_SMALL);
        t.q.scale_bytes--;
        assert_int_equal(qs_matmul(rc, NULL, src, QS_DTYPE_F32, 2, COLS, &w, ROWS, bias, y.p,
                                   (int64_t)y.bytes),
                         QS_ERR_BUFFER_TOO_SMALL);
        t.q.scale_bytes++;
        assert_int_equal(log->matmul, 0);
        assert_true(t_buf_untouched(&y));
        assert_int_equal(qs_matmul(rc, NULL, src, QS_DTYPE_F32, 2, COLS, &w, ROWS, bias, y.p,
                                   (int64_t)y.bytes),
                         QS_OK);
        assert_string_equal(qs_ctx_last_error(rc), "");
        assert_int_equal(log->matmul, 1);
        assert_int_equal(log->M, 2);
        assert_int_equal(log->K, COLS);
        assert_int_equal(log->N, ROWS);
        assert_int_equal(log->x_dtype, QS_DTYPE_F32);
        assert_int_equal(log->activations, QS_MATMUL_ACT_F32);
        assert_int_equal(log->kind, QS_WEIGHT_QUANT);
        assert_int_equal(log->has_bias, 1);
        assert_int_equal(log->has_layout, 1);
        assert_int_equal(log->layout.format, QS_FORMAT_NF4);
        assert_int_equal(log->layout.family, QS_BACKEND_FAMILY_BNB4);
        assert_int_equal(log->layout.unit_rule, QS_BACKEND_UNITS_FLAT_BLOCKS);
        assert_int_equal(log->layout.block, 64);
        assert_int_equal(log->layout.rows, ROWS);
        assert_int_equal(log->layout.cols, COLS);
        assert_int_equal(log->layout.n, ROWS * COLS);
        assert_int_equal(log->layout.units, ROWS * COLS / 64);
        assert_int_equal(log->layout.flags, 0);
        assert_int_equal(log->layout.plane[QS_PLANE_DATA].bytes, t.q.data_bytes);
        assert_int_equal(log->layout.plane[QS_PLANE_SCALE].elem, QS_ELEM_F32);
        assert_int_equal(log->layout.plane[QS_PLANE_SCALE].bytes, t.q.scale_bytes);
        for (int m = 0; m < 2; m++)
            for (int n = 0; n < ROWS; n++)
                assert_true(((float *)y.p)[m * ROWS + n] == QS_TEST_Y(m, n));
        assert_true(t_buf_guards_ok(&y));

        /* a plain weight comes without a layout; the defaults stand for NULL params */
        w = dense_weight();
        assert_int_equal(qs_matmul(rc, NULL, src, QS_DTYPE_F32, 1, COLS, &w, ROWS, NULL, y.p,
                                   (int64_t)y.bytes),
                         QS_OK);
        assert_int_equal(log->matmul, 2);
        assert_int_equal(log->has_layout, 0);
        assert_int_equal(log->has_bias, 0);
        assert_int_equal(log->kind, QS_WEIGHT_DENSE);
        t_buf_free(&y);
        tq_free(&t);
    }

    /* 2:4: the data is the core's check (a group keeping three, a bad meta nibble), then the
     * recorder gets the call */
    {
        enum { W = ROWS * COLS, V = W / 2, MW = W / 16 };
        float dense[W], vals[V], out[W];
        uint16_t meta[MW];
        uint8_t mask[W];

        for (int i = 0; i < W; i++) {
            mask[i] = i % 4 < 2;
            dense[i] = mask[i] ? src[i] : 0.0f;
        }
        assert_int_equal(qs_sp24_compress(rc, src, QS_DTYPE_F32, ROWS, COLS, NULL, vals,
                                          sizeof vals, meta, MW),
                         QS_ERR_BAD_DATA); /* src keeps four of four */
        assert_int_equal(log->sp24, 0);
        assert_int_equal(qs_sp24_prune_compress(rc, src, QS_DTYPE_F32, ROWS, COLS, NULL, vals,
                                                sizeof vals, meta, MW, mask, sizeof mask),
                         QS_OK);
        assert_int_equal(log->sp24, 1);
        assert_int_equal(log->sp24_call.op, QS_BACKEND_SP24_PRUNE);
        assert_int_equal(log->sp24_call.dtype, QS_DTYPE_F32);
        assert_int_equal(log->sp24_call.rows, ROWS);
        assert_int_equal(log->sp24_call.cols, COLS);
        assert_ptr_equal(log->sp24_call.w, src);
        assert_null(log->sp24_call.norms);
        assert_ptr_equal(log->sp24_call.values, vals);
        assert_ptr_equal(log->sp24_call.meta, meta);
        assert_ptr_equal(log->sp24_call.mask_out, mask);
        assert_null(log->sp24_call.dst);
        assert_int_equal(meta[0], QS_TEST_META_MARK);

        assert_int_equal(qs_sp24_compress(rc, dense, QS_DTYPE_F32, ROWS, COLS, mask, vals,
                                          sizeof vals, meta, MW),
                         QS_OK);
        assert_int_equal(log->sp24, 2);
        assert_int_equal(log->sp24_call.op, QS_BACKEND_SP24_COMPRESS);
        assert_ptr_equal(log->sp24_call.mask_in, mask);
        assert_null(log->sp24_call.mask_out);

        /* valid meta from the CPU, then a decompress on the recorder */
        assert_int_equal(qs_sp24_compress(cpu, dense, QS_DTYPE_F32, ROWS, COLS, NULL, vals,
                                          sizeof vals, meta, MW),
                         QS_OK);
        assert_int_equal(qs_sp24_decompress(rc, vals, QS_DTYPE_F32, meta, MW, ROWS, COLS, out,
                                            sizeof out),
                         QS_OK);
        assert_int_equal(log->sp24, 3);
        assert_int_equal(log->sp24_call.op, QS_BACKEND_SP24_DECOMPRESS);
        assert_ptr_equal(log->sp24_call.values_in, vals);
        assert_ptr_equal(log->sp24_call.meta_in, meta);
        assert_ptr_equal(log->sp24_call.dst, out);
        assert_true(out[0] == QS_TEST_DST_MARK);
        meta[1] = 0x0003; /* nibble 3 keeps two equal positions: not one of the six codes */
        assert_int_equal(qs_sp24_decompress(rc, vals, QS_DTYPE_F32, meta, MW, ROWS, COLS, out,
                                            sizeof out),
                         QS_ERR_BAD_DATA);
        assert_int_equal(log->sp24, 3);
    }

    /* calibration: the recorder's act_sumsq, with the context's threads, policy and allocator */
    {
        double acc[COLS];
        int64_t a0 = allocs, f0 = frees;

        for (int j = 0; j < COLS; j++)
            acc[j] = 0.5;
        assert_int_equal(qs_act_sumsq_update(rc, src, QS_DTYPE_F32, ROWS, COLS, acc, COLS),
                         QS_OK);
        assert_int_equal(log->act_sumsq, 1);
        for (int j = 0; j < COLS; j++)
            assert_true(acc[j] == 0.5 + (double)(j + 1));
        assert_int_equal(log->threads, 3);
        assert_int_equal(log->nonfinite, QS_NONFINITE_REJECT);
        assert_int_equal(log->scratch_ok, 1);
        assert_int_equal(allocs - a0, 1);
        assert_int_equal(frees - f0, 1);
        /* an empty batch changes nothing and does not reach the backend */
        assert_int_equal(qs_act_sumsq_update(rc, NULL, QS_DTYPE_F32, 0, COLS, acc, COLS), QS_OK);
        assert_int_equal(log->act_sumsq, 1);
    }

    /* what the recorder lacks is refused by name */
    {
        tq t;
        t_buf dst = t_buf_new(ROWS * COLS * 4);
        quant(cpu, &p, src, QS_DTYPE_F32, ROWS, COLS, &t);
        assert_int_equal(qs_dequantize(rc, &p, &t.q, ROWS, COLS, dst.p, QS_DTYPE_F32,
                                       (int64_t)dst.bytes),
                         QS_ERR_UNSUPPORTED);
        expect_refused(rc, "recorder", "dequantize (qs_dequantize)");
        assert_true(t_buf_untouched(&dst));
        t_buf_free(&dst);
        tq_free(&t);
    }

    /* the CPU context reached neither plugin */
    assert_int_equal(*good_calls, before + 1);
    assert_int_equal(log->quantize + log->matmul + log->sp24 + log->act_sumsq, 1 + 2 + 3 + 1);
    qs_ctx_destroy(cu);
    qs_ctx_destroy(rc);
    qs_ctx_destroy(cpu);
    dlclose(hr);
    dlclose(hg);
}

/* The plain layout a plugin gets says what the core's layout says, for every format: the
 * planes as qs_quant_plane_info gives them, the family, unit rule and flags. */
static void test_plain_layout(void **state)
{
    qs_ctx *ctx = ctx_for(QS_BACKEND_CPU);
    (void)state;

    for (int32_t f = 1; f <= qs_format_count(); f++) {
        for (int variant = 0; variant < 2; variant++) {
            qs_quant_params p;
            struct qs_layout l;
            qs_backend_layout bl;
            uint32_t want = 0;

            qs_quant_params_init(&p, f);
            if (variant && f == QS_FORMAT_NF4)
                p.double_quant = 1;
            if (variant && f == QS_FORMAT_INT8)
                p.symmetric = 0;
            assert_int_equal(qs_layout_compute(ctx, &p, 3, 64, &l), QS_OK);
            qs_backend_layout_fill(&l, &p, &bl);
            assert_int_equal(bl.format, f);
            assert_int_equal(bl.rows, 3);
            assert_int_equal(bl.cols, 64);
            assert_int_equal(bl.n, 3 * 64);
            for (int k = 0; k < QS_PLANE_COUNT; k++) {
                qs_plane_info info;
                assert_int_equal(qs_quant_plane_info(ctx, &p, 3, 64, k, &info), QS_OK);
                assert_int_equal(bl.plane[k].elem, info.elem);
                assert_int_equal(bl.plane[k].bits, info.bits);
                assert_int_equal(bl.plane[k].ndim, info.ndim);
                assert_int_equal(bl.plane[k].shape[0], info.shape[0]);
                assert_int_equal(bl.plane[k].shape[1], info.shape[1]);
                assert_int_equal(bl.plane[k].values, info.values);
                assert_int_equal(bl.plane[k].bytes, info.bytes);
            }
            switch (f) {
            case QS_FORMAT_NF4:
            case QS_FORMAT_FP4:
                assert_int_equal(bl.family, QS_BACKEND_FAMILY_BNB4);
                assert_int_equal(bl.unit_rule, QS_BACKEND_UNITS_FLAT_BLOCKS);
                assert_int_equal(bl.units, 3);
                want = p.double_quant ? QS_BACKEND_LAYOUT_DOUBLE_QUANT : 0;
                break;
            case QS_FORMAT_INT8:
                assert_int_equal(bl.family, QS_BACKEND_FAMILY_INT8);
                assert_int_equal(bl.unit_rule, QS_BACKEND_UNITS_ROWS);
                want = p.symmetric ? 0 : QS_BACKEND_LAYOUT_ZERO_POINT;
                break;
            case QS_FORMAT_LLM_INT8:
                assert_int_equal(bl.family, QS_BACKEND_FAMILY_INT8);
                want = QS_BACKEND_LAYOUT_ROWSTAT;
                break;
            case QS_FORMAT_FP8_E4M3:
                assert_int_equal(bl.family, QS_BACKEND_FAMILY_FP8);
                assert_int_equal(bl.unit_rule, QS_BACKEND_UNITS_TENSOR);
                assert_true(bl.elem_max == 448.0f);
                break;
            case QS_FORMAT_FP8_E5M2: assert_int_equal(bl.family, QS_BACKEND_FAMILY_FP8); break;
            case QS_FORMAT_MXFP4:
            case QS_FORMAT_MXFP8:
                assert_int_equal(bl.family, QS_BACKEND_FAMILY_MX);
                assert_int_equal(bl.unit_rule, QS_BACKEND_UNITS_ROW_BLOCKS);
                assert_int_equal(bl.block, 32);
                assert_int_equal(bl.units, 3 * 2);
                break;
            case QS_FORMAT_NVFP4:
                assert_int_equal(bl.family, QS_BACKEND_FAMILY_NV);
                assert_int_equal(bl.units, 3 * 4);
                want = QS_BACKEND_LAYOUT_GLOBAL_SCALE;
                break;
            default: fail();
            }
            assert_int_equal(bl.flags, want);
        }
    }
    qs_ctx_destroy(ctx);
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
    p = params(QS_FORMAT_MXFP4); /* every format now: NF4's planes are large enough for it */
    assert_int_equal(qs_cuda_gemv(ctx, &p, &t.q, ROWS, COLS, x, y, NULL), QS_ERR_BACKEND);
    assert_non_null(strstr(qs_ctx_last_error(ctx), "no device entry point"));
    p = params(QS_FORMAT_NF4);
    { /* qs_cuda_matmul: qs_matmul's checks, before the plugin */
        qs_weight w;
        qs_matmul_params mp;
        memset(&w, 0, sizeof w);
        w.kind = QS_WEIGHT_DENSE;
        w.dtype = QS_DTYPE_F32;
        w.data = src;
        w.data_bytes = ROWS * COLS * 4;
        qs_matmul_params_init(&mp);
        assert_int_equal(qs_cuda_matmul(ctx, NULL, x, QS_DTYPE_F32, 1, COLS, &w, ROWS, NULL, y,
                                        sizeof y, NULL),
                         QS_ERR_BACKEND);
        assert_non_null(strstr(qs_ctx_last_error(ctx), "no device entry point"));
        assert_int_equal(qs_cuda_matmul(ctx, NULL, x, QS_DTYPE_F32, 1, COLS, &w, ROWS, NULL, y,
                                        sizeof y - 1, NULL),
                         QS_ERR_BUFFER_TOO_SMALL);
        assert_int_equal(qs_cuda_matmul(ctx, NULL, (const char *)x + 2, QS_DTYPE_F32, 1, COLS, &w,
                                        ROWS, NULL, y, sizeof y, NULL),
                         QS_ERR_INVALID_ARG);
        w.data_bytes--;
        assert_int_equal(qs_cuda_matmul(ctx, NULL, x, QS_DTYPE_F32, 1, COLS, &w, ROWS, NULL, y,
                                        sizeof y, NULL),
                         QS_ERR_BUFFER_TOO_SMALL);
        w.kind = QS_WEIGHT_SP24;
        assert_int_equal(qs_cuda_matmul(ctx, NULL, x, QS_DTYPE_F32, 1, 6, &w, ROWS, NULL, y,
                                        sizeof y, NULL),
                         QS_ERR_SHAPE);
        w.kind = QS_WEIGHT_PACKED;
        assert_int_equal(qs_cuda_matmul(ctx, NULL, x, QS_DTYPE_F32, 1, COLS, &w, ROWS, NULL, y,
                                        sizeof y, NULL),
                         QS_ERR_UNSUPPORTED);
        mp.activations = QS_MATMUL_ACT_BF16; /* a known mode the GPU does not run */
        assert_int_equal(qs_cuda_matmul(ctx, &mp, x, QS_DTYPE_F32, 1, COLS, &w, ROWS, NULL, y,
                                        sizeof y, NULL),
                         QS_ERR_UNSUPPORTED);
        assert_non_null(strstr(qs_ctx_last_error(ctx), "bf16 activations are not implemented"));
        mp.activations = 3;
        assert_int_equal(qs_cuda_matmul(ctx, &mp, x, QS_DTYPE_F32, 1, COLS, &w, ROWS, NULL, y,
                                        sizeof y, NULL),
                         QS_ERR_INVALID_ARG);
        mp.activations = QS_MATMUL_ACT_F32;
        mp.threshold = 6.0f; /* needs int8 activations */
        assert_int_equal(qs_cuda_matmul(ctx, &mp, x, QS_DTYPE_F32, 1, COLS, &w, ROWS, NULL, y,
                                        sizeof y, NULL),
                         QS_ERR_INVALID_ARG);
    }
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
        cmocka_unit_test(test_two_plugins),
        cmocka_unit_test(test_plain_layout),
        cmocka_unit_test(test_device_api),
        cmocka_unit_test(test_cuda_plugin),
    };
    return cmocka_run_group_tests(tests, setup, NULL);
}
