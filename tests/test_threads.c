/* SPDX-License-Identifier: MIT */
/*
 * Contexts per thread, OpenMP inside: several POSIX threads, each with its own context of two
 * OpenMP threads, run the same work at the same time (quantize and dequantize in every format,
 * 2:4 prune-compress and decompress, the N:M mask, an entropy observer) and must produce the
 * bits a single-threaded context produces. Run under ThreadSanitizer by .ci/hardening.sh, where
 * it shows that contexts share no mutable state; here it checks that the results do not depend
 * on the thread count or on what other threads do meanwhile.
 */
#include "common.h" /* first: it sets the feature macros */

#include <pthread.h>
#include "qsparse/calib.h"
#include "qsparse/sparse.h"

#define N_THREADS 4
#define ROUNDS 2
#define ROWS 48
#define COLS 256 /* 48 x 256 = 12288 elements: several 4096-element chunks per call */
#define MAX_OUT (128 * 1024)

static float src[ROWS * COLS];

/* One piece of work and the bytes it produces into out (returns the count, or -1 on failure). */
typedef int64_t (*job_fn)(qs_ctx *ctx, int arg, uint8_t *out);

static int64_t job_quant(qs_ctx *ctx, int format, uint8_t *out)
{
    qs_quant_params p;
    qs_quant_params_init(&p, format);
    qs_qtensor q;
    memset(&q, 0, sizeof q);
    void **ptr[QS_PLANE_COUNT] = {&q.data, &q.scale, &q.zero_point, &q.nested_scale};
    int64_t *cap[QS_PLANE_COUNT] = {&q.data_bytes, &q.scale_bytes, &q.zero_point_bytes,
                                    &q.nested_scale_bytes};
    int64_t used = 0;
    for (int k = 0; k < QS_PLANE_COUNT; k++) {
        int64_t b = 0;
        if (qs_quant_size(&p, ROWS, COLS, k, &b) != QS_OK)
            return -1;
        *ptr[k] = b > 0 ? out + used : NULL;
        *cap[k] = b;
        used += b;
    }
    if (qs_quantize(ctx, &p, src, QS_DTYPE_F32, ROWS, COLS, &q) != QS_OK)
        return -1;
    /* The dequantized tensor follows the planes. */
    if (used + ROWS * COLS * 4 > MAX_OUT ||
        qs_dequantize(ctx, &p, &q, ROWS, COLS, out + used, QS_DTYPE_F32, ROWS * COLS * 4) != QS_OK)
        return -1;
    used += ROWS * COLS * 4;
    memcpy(out + used, &q.global_scale, 4);
    memcpy(out + used + 4, &q.nested_offset, 4);
    return used + 8;
}

static int64_t job_sp24(qs_ctx *ctx, int arg, uint8_t *out)
{
    (void)arg;
    int64_t vb = 0, mc = 0;
    if (qs_sp24_size(QS_DTYPE_F32, ROWS, COLS, &vb, &mc) != QS_OK)
        return -1;
    uint8_t *values = out, *mask = out + vb + mc * 2, *dense = mask + ROWS * COLS;
    uint16_t *meta = (uint16_t *)(void *)(out + vb);
    if (vb + mc * 2 + ROWS * COLS * 5 > MAX_OUT)
        return -1;
    if (qs_sp24_prune_compress(ctx, src, QS_DTYPE_F32, ROWS, COLS, NULL, values, vb, meta, mc,
                               mask, ROWS * COLS) != QS_OK)
        return -1;
    if (qs_sp24_decompress(ctx, values, QS_DTYPE_F32, meta, mc, ROWS, COLS, dense,
                           ROWS * COLS * 4) != QS_OK)
        return -1;
    return vb + mc * 2 + ROWS * COLS * 5;
}

static int64_t job_nm_mask(qs_ctx *ctx, int m, uint8_t *out)
{
    return qs_nm_mask(ctx, src, QS_DTYPE_F32, ROWS, COLS, m / 2, m, QS_PRUNE_MAGNITUDE, NULL,
                      out, ROWS * COLS) == QS_OK
               ? ROWS * COLS
               : -1;
}

static int64_t job_observer(qs_ctx *ctx, int method, uint8_t *out)
{
    qs_observer_params p;
    qs_observer_params_init(&p, method);
    p.axis = 0;
    p.num_bins = 128; /* 48 channels x 128 bins serialize in about 50 KiB */
    p.start_bin = 32;
    p.num_levels = 32;
    qs_observer *o = NULL;
    if (qs_observer_create(ctx, &p, &o) != QS_OK)
        return -1;
    int64_t bytes = 0, written = 0;
    int ok = qs_observer_update(ctx, o, src, QS_DTYPE_F32, ROWS, COLS) == QS_OK &&
             qs_observer_amax(ctx, o, (float *)(void *)out, ROWS) == QS_OK &&
             qs_observer_serialized_size(o, &bytes) == QS_OK && ROWS * 4 + bytes <= MAX_OUT &&
             qs_observer_serialize(ctx, o, out + ROWS * 4, bytes, &written) == QS_OK;
    qs_observer_destroy(o);
    return ok ? ROWS * 4 + written : -1;
}

static const struct {
    job_fn fn;
    int arg;
} jobs[] = {
    {job_quant, QS_FORMAT_NF4},        {job_quant, QS_FORMAT_FP4},
    {job_quant, QS_FORMAT_INT8},       {job_quant, QS_FORMAT_LLM_INT8},
    {job_quant, QS_FORMAT_FP8_E4M3},   {job_quant, QS_FORMAT_FP8_E5M2},
    {job_quant, QS_FORMAT_MXFP4},      {job_quant, QS_FORMAT_MXFP8},
    {job_quant, QS_FORMAT_NVFP4},      {job_sp24, 0},
    {job_nm_mask, 4},                  {job_nm_mask, 8},
    {job_observer, QS_OBSERVER_ENTROPY}, {job_observer, QS_OBSERVER_PERCENTILE},
};
#define N_JOBS ((int)(sizeof jobs / sizeof jobs[0]))

static uint8_t *expect[N_JOBS];
static int64_t expect_len[N_JOBS];
static pthread_barrier_t start;

struct worker {
    int id;
    int mismatches; /* jobs whose bytes differ from the single-threaded run, or that failed */
    int first_bad;
};

static void *worker_main(void *arg)
{
    struct worker *w = arg;
    qs_ctx_params p;
    qs_ctx_params_init(&p);
    p.num_threads = 2;
    qs_ctx *ctx = NULL;
    uint8_t *out = malloc(MAX_OUT);
    w->first_bad = -1;
    /* every call in parallel, however small, and whatever else runs on the machine: the
     * threading policy (parallel.h) would run these small calls on one thread */
    if (qs_ctx_create(&p, &ctx) != QS_OK || !out ||
        qs_ctx_set(ctx, QS_PARAM_PARALLEL_GRAIN, 0) != QS_OK ||
        qs_ctx_set(ctx, QS_PARAM_PARALLEL_BACKOFF, 0) != QS_OK) {
        w->mismatches = -1;
        pthread_barrier_wait(&start);
        qs_ctx_destroy(ctx);
        free(out);
        return NULL;
    }
    pthread_barrier_wait(&start);
    for (int r = 0; r < ROUNDS; r++)
        for (int k = 0; k < N_JOBS; k++) {
            /* Each thread walks the jobs from a different place, so different work overlaps. */
            int j = (k + w->id * 3) % N_JOBS;
            memset(out, 0xA5, MAX_OUT);
            int64_t len = jobs[j].fn(ctx, jobs[j].arg, out);
            if (len != expect_len[j] || memcmp(out, expect[j], (size_t)len) != 0) {
                if (w->first_bad < 0)
                    w->first_bad = j;
                w->mismatches++;
            }
        }
    qs_ctx_destroy(ctx);
    free(out);
    return NULL;
}

static void test_contexts_per_thread(void **state)
{
    (void)state;
    t_rng rng = {20261203};
    t_fill_mixed(&rng, src, ROWS * COLS, 0.01);

    qs_ctx_params p;
    qs_ctx_params_init(&p);
    p.num_threads = 1;
    qs_ctx *one = NULL;
    assert_int_equal(qs_ctx_create(&p, &one), QS_OK);
    for (int j = 0; j < N_JOBS; j++) {
        expect[j] = malloc(MAX_OUT);
        assert_non_null(expect[j]);
        memset(expect[j], 0xA5, MAX_OUT);
        expect_len[j] = jobs[j].fn(one, jobs[j].arg, expect[j]);
        if (expect_len[j] <= 0)
            fail_msg("job %d fails single-threaded: %s", j, qs_ctx_last_error(one));
    }
    qs_ctx_destroy(one);

    pthread_t th[N_THREADS];
    struct worker w[N_THREADS];
    assert_int_equal(pthread_barrier_init(&start, NULL, N_THREADS), 0);
    for (int i = 0; i < N_THREADS; i++) {
        memset(&w[i], 0, sizeof w[i]);
        w[i].id = i;
        assert_int_equal(pthread_create(&th[i], NULL, worker_main, &w[i]), 0);
    }
    for (int i = 0; i < N_THREADS; i++)
        assert_int_equal(pthread_join(th[i], NULL), 0);
    pthread_barrier_destroy(&start);
    for (int i = 0; i < N_THREADS; i++)
        if (w[i].mismatches != 0)
            fail_msg("thread %d: %d results differ from the single-threaded run (first: job %d)",
                     i, w[i].mismatches, w[i].first_bad);
    for (int j = 0; j < N_JOBS; j++)
        free(expect[j]);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_contexts_per_thread),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
