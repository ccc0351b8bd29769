/* SPDX-License-Identifier: MIT */
/*
 * The threading policy (src/core/parallel.h): a call whose work is below the grain per thread
 * never opens an OpenMP parallel region, so it never waits for a thread another process holds
 * off its CPU; a large call does use the threads; after a region that took longer than one
 * thread would have, the context backs off to the calling thread for a while. The first test
 * must run first: it checks that a small call leaves the process without any OpenMP worker
 * thread (GNU OpenMP starts them at the first region), which only a fresh process can show.
 * Timing is never asserted: the back-off is driven through qs_parallel_note with given times.
 */
#include "common.h" /* first: it sets the feature macros */

#include <dirent.h>

#ifdef _OPENMP
#include <omp.h>
#endif

#include "../src/core/parallel.h"

#define SMALL_ROWS 64
#define SMALL_COLS 256
#define LARGE_ROWS 1024
#define LARGE_COLS 1024 /* 4 MiB of f32 read: four grains of 1 MiB */

static float *weights; /* LARGE_ROWS x LARGE_COLS, the small calls use the first rows */

/* A context of `threads` threads with the library's default policy, whatever the environment
 * says (the suite runs with QS_PARALLEL_GRAIN=0: tests/meson.build). */
static qs_ctx *policy_ctx(int32_t threads)
{
    qs_ctx_params p;
    qs_ctx *ctx = NULL;

    qs_ctx_params_init(&p);
    p.num_threads = threads;
    assert_int_equal(qs_ctx_create(&p, &ctx), QS_OK);
    assert_int_equal(qs_ctx_set(ctx, QS_PARAM_PARALLEL_GRAIN, QS_PARALLEL_GRAIN_DEFAULT), QS_OK);
    assert_int_equal(qs_ctx_set(ctx, QS_PARAM_PARALLEL_BACKOFF, 1), QS_OK);
    return ctx;
}

/* NF4 of the first rows x cols values: the planes in `buf` (enough bytes for 1024 x 1024). */
static void quantize_nf4(qs_ctx *ctx, int64_t rows, int64_t cols, uint8_t *buf)
{
    qs_quant_params p;
    qs_qtensor q;
    int64_t db, sb;

    qs_quant_params_init(&p, QS_FORMAT_NF4);
    assert_int_equal(qs_quant_size(&p, rows, cols, QS_PLANE_DATA, &db), QS_OK);
    assert_int_equal(qs_quant_size(&p, rows, cols, QS_PLANE_SCALE, &sb), QS_OK);
    memset(&q, 0, sizeof q);
    q.data = buf;
    q.data_bytes = db;
    q.scale = buf + db;
    q.scale_bytes = sb;
    assert_int_equal(qs_quantize(ctx, &p, weights, QS_DTYPE_F32, rows, cols, &q), QS_OK);
}

/* Threads of this process (Linux: the entries of /proc/self/task), -1 where unknown. */
static int process_threads(void)
{
    DIR *d = opendir("/proc/self/task");
    struct dirent *e;
    int n = 0;

    if (!d)
        return -1;
    while ((e = readdir(d)) != NULL)
        n += e->d_name[0] != '.';
    closedir(d);
    return n;
}

/* y = x . W^T for M x K ones against the first N x K of `weights` quantized to NF4. */
static void matmul_nf4(qs_ctx *ctx, int64_t M, int64_t N, int64_t K)
{
    qs_quant_params p;
    qs_qtensor q;
    qs_weight w;
    int64_t db, sb;
    float *x = malloc(sizeof(float) * (size_t)(M * K)), *y = malloc(sizeof(float) * (size_t)(M * N));

    assert_true(N * K <= LARGE_ROWS * LARGE_COLS && x && y);
    qs_quant_params_init(&p, QS_FORMAT_NF4);
    memset(&q, 0, sizeof q);
    assert_int_equal(qs_quant_size(&p, N, K, QS_PLANE_DATA, &db), QS_OK);
    assert_int_equal(qs_quant_size(&p, N, K, QS_PLANE_SCALE, &sb), QS_OK);
    q.data = malloc((size_t)db), q.data_bytes = db;
    q.scale = malloc((size_t)sb), q.scale_bytes = sb;
    assert_true(q.data && q.scale);
    /* quantized on a one-thread context: only the matmul counts */
    {
        qs_ctx_params cp;
        qs_ctx *one;
        qs_ctx_params_init(&cp);
        cp.num_threads = 1;
        assert_int_equal(qs_ctx_create(&cp, &one), QS_OK);
        assert_int_equal(qs_quantize(one, &p, weights, QS_DTYPE_F32, N, K, &q), QS_OK);
        qs_ctx_destroy(one);
    }
    for (int64_t i = 0; i < M * K; i++)
        x[i] = 1.0f;
    memset(&w, 0, sizeof w);
    w.kind = QS_WEIGHT_QUANT;
    w.quant = &p;
    w.q = &q;
    assert_int_equal(qs_matmul(ctx, NULL, x, QS_DTYPE_F32, M, K, &w, N, NULL, y, M * N * 4),
                     QS_OK);
    free(q.data);
    free(q.scale);
    free(x);
    free(y);
}

static int setup(void **state)
{
    t_rng rng = {20261207};

    (void)state;
    weights = malloc(sizeof(float) * LARGE_ROWS * LARGE_COLS);
    if (!weights)
        return -1;
    for (int64_t i = 0; i < LARGE_ROWS * LARGE_COLS; i++)
        weights[i] = (float)t_normal(&rng);
    return 0;
}

static int teardown(void **state)
{
    (void)state;
    free(weights);
    return 0;
}

/* The README's 64 x 256 call on a context of four threads: no region, no thread started. */
static void test_small_call_wakes_no_thread(void **state)
{
    uint8_t *buf = malloc(1 << 20);
    int before = process_threads();
    qs_ctx *ctx = policy_ctx(4);

    (void)state;
    assert_non_null(buf);
    for (int i = 0; i < 20; i++)
        quantize_nf4(ctx, SMALL_ROWS, SMALL_COLS, buf);
    /* and a small matmul: M = 1 against a 256 x 256 NF4 weight (several GEMV tasks, 100 KiB of
     * work) runs on the calling thread too */
    for (int i = 0; i < 20; i++)
        matmul_nf4(ctx, 1, 256, 256);
    assert_int_equal(qs_parallel_regions(ctx), 0);
    if (before > 0)
        assert_int_equal(process_threads(), before); /* no OpenMP worker was ever started */
    qs_ctx_destroy(ctx);
    free(buf);
}

/* Above the grain the threads are used (with OpenMP, and while nothing made the context back
 * off: the back-off is switched off here so that a busy machine cannot change the count). */
static void test_large_call_uses_threads(void **state)
{
    uint8_t *buf = malloc(1 << 20);
    qs_ctx *ctx = policy_ctx(2);

    (void)state;
    assert_non_null(buf);
    assert_int_equal(qs_ctx_set(ctx, QS_PARAM_PARALLEL_BACKOFF, 0), QS_OK);
    quantize_nf4(ctx, LARGE_ROWS, LARGE_COLS, buf);
#ifdef _OPENMP
    assert_true(qs_parallel_regions(ctx) >= 1);
#else
    assert_int_equal(qs_parallel_regions(ctx), 0);
#endif
    qs_ctx_destroy(ctx);
    free(buf);
}

/* The matmul drivers' own regions follow the policy: 4 rows of x against a 1024 x 1024 NF4
 * weight (4.5 MiB of work: multiply-adds count a byte each) open one on a context of two
 * threads, one row against 256 x 256 (100 KiB) does not. */
static void test_matmul_follows_the_policy(void **state)
{
    qs_ctx *ctx = policy_ctx(2);

    (void)state;
    assert_int_equal(qs_ctx_set(ctx, QS_PARAM_PARALLEL_BACKOFF, 0), QS_OK);
    matmul_nf4(ctx, 1, 256, 256);
    assert_int_equal(qs_parallel_regions(ctx), 0);
    matmul_nf4(ctx, 4, 1024, 1024);
#ifdef _OPENMP
    assert_true(qs_parallel_regions(ctx) >= 1);
#else
    assert_int_equal(qs_parallel_regions(ctx), 0);
#endif
    qs_ctx_destroy(ctx);
}

/* Grain 0: any call of two chunks or more opens a region (the behaviour before the policy). */
static void test_grain_zero_opens_regions(void **state)
{
    uint8_t *buf = malloc(1 << 20);
    qs_ctx *ctx = policy_ctx(2);

    (void)state;
    assert_non_null(buf);
    assert_int_equal(qs_ctx_set(ctx, QS_PARAM_PARALLEL_GRAIN, 0), QS_OK);
    assert_int_equal(qs_ctx_set(ctx, QS_PARAM_PARALLEL_BACKOFF, 0), QS_OK);
    quantize_nf4(ctx, SMALL_ROWS, SMALL_COLS, buf);
#ifdef _OPENMP
    assert_int_equal(qs_parallel_regions(ctx), 1);
#endif
    qs_ctx_destroy(ctx);
    free(buf);
}

/* The size rule: one thread per grain of work, at most the context's threads. */
static void test_threads_follow_the_work(void **state)
{
    qs_ctx *ctx = policy_ctx(4);
    const int64_t g = QS_PARALLEL_GRAIN_DEFAULT;

    (void)state;
#ifdef _OPENMP
    assert_int_equal(qs_parallel_threads(ctx, 0), 1);
    assert_int_equal(qs_parallel_threads(ctx, 2 * g - 1), 1);
    assert_int_equal(qs_parallel_threads(ctx, 2 * g), 2);
    assert_int_equal(qs_parallel_threads(ctx, 3 * g + g / 2), 3);
    assert_int_equal(qs_parallel_threads(ctx, 100 * g), 4);
    assert_int_equal(qs_parallel_threads(ctx, INT64_MAX), 4);
    assert_int_equal(qs_parallel_threads(ctx, QS_WORK_UNKNOWN), 4); /* no size rule */
    assert_int_equal(qs_ctx_set(ctx, QS_PARAM_PARALLEL_GRAIN, 0), QS_OK);
    assert_int_equal(qs_parallel_threads(ctx, 1), 4);
    assert_int_equal(qs_ctx_set(ctx, QS_PARAM_NUM_THREADS, 1), QS_OK);
    assert_int_equal(qs_parallel_threads(ctx, 100 * g), 1);
    /* inside a parallel region (the caller's): one thread, no nested region */
    assert_int_equal(qs_ctx_set(ctx, QS_PARAM_NUM_THREADS, 4), QS_OK);
    int inside = 0, team = 0;
#pragma omp parallel num_threads(2) reduction(+ : inside, team)
    {
        inside = qs_parallel_threads(ctx, 100 * g);
        team = 1;
    }
    assert_int_equal(inside, team);
#else
    assert_int_equal(qs_parallel_threads(ctx, 100 * g), 1);
#endif
    qs_ctx_destroy(ctx);
}

/* A region slower than one thread would have been sends the context's calls to the calling
 * thread; the wait doubles while that repeats and halves after a region that won. */
static void test_backoff_after_a_lost_region(void **state)
{
    qs_ctx *ctx = policy_ctx(2);
    const int64_t big = 100 * QS_PARALLEL_GRAIN_DEFAULT;

    (void)state;
#ifdef _OPENMP
    assert_int_equal(qs_parallel_threads(ctx, big), 2);
    /* a region that beat one thread, and one within the margin: nothing changes */
    qs_parallel_note(ctx, 0.010, 0.019);
    qs_parallel_note(ctx, 0.010 + QS_PARALLEL_LATE / 2, 0.010);
    assert_int_equal(qs_parallel_threads(ctx, big), 2);
    assert_true(ctx->par.window == 0.01);
    /* the other thread came 12 ms late to 1 ms of work: lost */
    qs_parallel_note(ctx, 0.013, 0.001);
    assert_int_equal(qs_parallel_threads(ctx, big), 1);
    assert_true(ctx->par.window == 0.02);
    qs_parallel_note(ctx, 0.013, 0.001);
    qs_parallel_note(ctx, 0.013, 0.001);
    assert_true(ctx->par.window == 0.08);
    for (int i = 0; i < 20; i++)
        qs_parallel_note(ctx, 0.013, 0.001);
    assert_true(ctx->par.window == 1.0); /* at most a second */
    qs_parallel_note(ctx, 0.001, 0.002);
    assert_true(ctx->par.window == 0.5);
    assert_int_equal(qs_parallel_regions(ctx), 26);
    /* the wait is a time: it ends (serial_until is a point of omp_get_wtime) */
    ctx->par.serial_until = omp_get_wtime() - 1.0;
    assert_int_equal(qs_parallel_threads(ctx, big), 2);
    /* switched off: a lost region changes nothing; switching it on starts afresh */
    assert_int_equal(qs_ctx_set(ctx, QS_PARAM_PARALLEL_BACKOFF, 0), QS_OK);
    qs_parallel_note(ctx, 0.013, 0.001);
    assert_int_equal(qs_parallel_threads(ctx, big), 2);
    qs_parallel_note(ctx, 0.013, 0.001);
    assert_int_equal(qs_ctx_set(ctx, QS_PARAM_PARALLEL_BACKOFF, 1), QS_OK);
    assert_int_equal(qs_parallel_threads(ctx, big), 2);
#endif
    qs_ctx_destroy(ctx);
}

/* Whatever the policy decides, the bits are those of one thread. */
static void test_same_bits_every_policy(void **state)
{
    uint8_t *ref = malloc(1 << 20), *got = malloc(1 << 20);
    qs_ctx *one = policy_ctx(1), *many = policy_ctx(3);
    static const int64_t grains[] = {0, 4096, QS_PARALLEL_GRAIN_DEFAULT};

    (void)state;
    assert_non_null(ref);
    assert_non_null(got);
    memset(ref, 0, 1 << 20);
    quantize_nf4(one, LARGE_ROWS, LARGE_COLS, ref);
    for (size_t i = 0; i < sizeof grains / sizeof grains[0]; i++) {
        memset(got, 0, 1 << 20);
        assert_int_equal(qs_ctx_set(many, QS_PARAM_PARALLEL_GRAIN, grains[i]), QS_OK);
        quantize_nf4(many, LARGE_ROWS, LARGE_COLS, got);
        assert_memory_equal(ref, got, 1 << 20);
    }
    qs_ctx_destroy(one);
    qs_ctx_destroy(many);
    free(ref);
    free(got);
}

static void test_params_and_environment(void **state)
{
    qs_ctx *ctx = NULL;
    int64_t v = -1;
    const char *old_grain = getenv("QS_PARALLEL_GRAIN");
    char *saved = old_grain ? strdup(old_grain) : NULL;

    (void)state;
    assert_int_equal(qs_ctx_create(NULL, &ctx), QS_OK);
    assert_int_equal(qs_ctx_set(ctx, QS_PARAM_PARALLEL_GRAIN, -1), QS_ERR_INVALID_ARG);
    assert_non_null(strstr(qs_ctx_last_error(ctx), "negative"));
    assert_int_equal(qs_ctx_set(ctx, QS_PARAM_PARALLEL_BACKOFF, 2), QS_ERR_INVALID_ARG);
    assert_int_equal(qs_ctx_set(ctx, QS_PARAM_PARALLEL_GRAIN, 12345), QS_OK);
    assert_int_equal(qs_ctx_get(ctx, QS_PARAM_PARALLEL_GRAIN, &v), QS_OK);
    assert_int_equal(v, 12345);
    assert_int_equal(qs_ctx_set(ctx, QS_PARAM_PARALLEL_BACKOFF, 0), QS_OK);
    assert_int_equal(qs_ctx_get(ctx, QS_PARAM_PARALLEL_BACKOFF, &v), QS_OK);
    assert_int_equal(v, 0);
    qs_ctx_destroy(ctx);

    /* the environment gives a new context its defaults; a value it cannot parse is ignored */
    setenv("QS_PARALLEL_GRAIN", "65536", 1);
    assert_int_equal(qs_ctx_create(NULL, &ctx), QS_OK);
    assert_int_equal(qs_ctx_get(ctx, QS_PARAM_PARALLEL_GRAIN, &v), QS_OK);
    assert_int_equal(v, 65536);
    qs_ctx_destroy(ctx);
    setenv("QS_PARALLEL_GRAIN", "64k", 1);
    assert_int_equal(qs_ctx_create(NULL, &ctx), QS_OK);
    assert_int_equal(qs_ctx_get(ctx, QS_PARAM_PARALLEL_GRAIN, &v), QS_OK);
    assert_int_equal(v, QS_PARALLEL_GRAIN_DEFAULT);
    qs_ctx_destroy(ctx);
    if (saved)
        setenv("QS_PARALLEL_GRAIN", saved, 1);
    else
        unsetenv("QS_PARALLEL_GRAIN");
    free(saved);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_small_call_wakes_no_thread), /* first: a fresh process */
        cmocka_unit_test(test_large_call_uses_threads),
        cmocka_unit_test(test_matmul_follows_the_policy),
        cmocka_unit_test(test_grain_zero_opens_regions),
        cmocka_unit_test(test_threads_follow_the_work),
        cmocka_unit_test(test_backoff_after_a_lost_region),
        cmocka_unit_test(test_same_bits_every_policy),
        cmocka_unit_test(test_params_and_environment),
    };
    return cmocka_run_group_tests(tests, setup, teardown);
}
