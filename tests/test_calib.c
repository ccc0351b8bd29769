/* SPDX-License-Identifier: MIT */
/*
 * Calibration (docs/calibration.md): the power-of-two histogram on hand-worked values (§3),
 * exact and order-independent merges across shards, batchings, ISAs and thread counts (§3, §9),
 * serialization round trips and the rejection of every corrupt or truncated byte string, the
 * percentile (§4), entropy (§5, TensorRT's KL search on hand-worked histograms) and MSE (§6)
 * searches, non-finite inputs (§0 rule 5), the moving average (§2), scales for every target and
 * applying them, dynamic quantization (§8), Wanda sums of squares, the SQNR of each method on
 * Laplace activations with outlier channels, and every error status with canaries.
 */
#include "common.h"
#include "qsparse/calib.h"

/* ---- helpers --------------------------------------------------------------------------------- */

static qs_ctx *ctx_with(uint32_t isa, int32_t threads)
{
    qs_ctx_params p;
    qs_ctx *ctx = NULL;
    qs_ctx_params_init(&p);
    p.isa_mask = isa;
    p.num_threads = threads;
    assert_int_equal(qs_ctx_create(&p, &ctx), QS_OK);
    return ctx;
}

static qs_observer *obs_new(qs_ctx *ctx, int32_t method, int32_t axis, int32_t bins)
{
    qs_observer_params p;
    qs_observer *o = NULL;
    qs_observer_params_init(&p, method);
    p.axis = axis;
    if (bins) {
        p.num_bins = bins;
        p.start_bin = bins / 2 < 128 ? bins / 2 : 128;
        p.num_levels = p.start_bin;
    }
    assert_int_equal(qs_observer_create(ctx, &p, &o), QS_OK);
    return o;
}

/* The serialized state: the bit-exact fingerprint of an observer. Caller frees. */
static uint8_t *state_of(qs_ctx *ctx, const qs_observer *o, int64_t *size)
{
    int64_t w = 0;
    assert_int_equal(qs_observer_serialized_size(o, size), QS_OK);
    uint8_t *b = malloc((size_t)*size);
    assert_non_null(b);
    assert_int_equal(qs_observer_serialize(ctx, o, b, *size, &w), QS_OK);
    assert_int_equal(w, *size);
    return b;
}

static void assert_same_state(qs_ctx *ctx, const qs_observer *a, const qs_observer *b,
                              const char *what)
{
    int64_t sa, sb;
    uint8_t *x = state_of(ctx, a, &sa), *y = state_of(ctx, b, &sb);
    assert_int_equal(sa, sb);
    T_ASSERT_BYTES(what, x, y, (size_t)sa);
    free(x);
    free(y);
}

static float obs_amax(qs_ctx *ctx, const qs_observer *o)
{
    float a = -1.0f;
    assert_int_equal(qs_observer_amax(ctx, o, &a, 1), QS_OK);
    return a;
}

static void update(qs_ctx *ctx, qs_observer *o, const float *x, int64_t rows, int64_t cols)
{
    assert_int_equal(qs_observer_update(ctx, o, x, QS_DTYPE_F32, rows, cols), QS_OK);
}

/* Laplace(0, 1) activations [tokens, channels] with `nout` outlier channels scaled by `big`. */
static void laplace_acts(t_rng *r, float *x, int64_t rows, int64_t cols, int nout, double big)
{
    for (int64_t i = 0; i < rows * cols; i++) {
        double u = t_unif(r) - 0.5;
        double v = (u < 0 ? 1.0 : -1.0) * log(1.0 - 2.0 * fabs(u) + 1e-300);
        int64_t c = i % cols;
        x[i] = (float)(c * 37 % cols < nout ? big * v : v);
    }
}

static uint64_t fnv1a(const uint8_t *p, int64_t n)
{
    uint64_t h = 0xCBF29CE484222325ull;
    for (int64_t i = 0; i < n; i++) {
        h ^= p[i];
        h *= 0x100000001B3ull;
    }
    return h;
}

/* ---- §3: the power-of-two grid, by hand ------------------------------------------------------ */

static void test_hist_hand(void **state)
{
    (void)state;
    qs_ctx *ctx = t_ctx();
    qs_observer *o = obs_new(ctx, QS_OBSERVER_PERCENTILE, -1, 8);
    uint64_t c[8], fin, nan, inf;
    int32_t k;

    /* amax 7.9 = 0.9875 * 2^3: k = 3 - log2(8) = 0, width 1; -0 and 0 in bin 0 */
    const float a[] = {0.5f, 1.5f, 3.0f, 0.0f, -0.0f, 7.9f, NAN, INFINITY, -INFINITY};
    update(ctx, o, a, 1, 9);
    assert_int_equal(qs_observer_histogram(o, 0, c, 8, &k), QS_OK);
    assert_int_equal(k, 0);
    const uint64_t want1[8] = {3, 1, 0, 1, 0, 0, 0, 1};
    T_ASSERT_BYTES("hist k=0", c, want1, sizeof want1);
    assert_int_equal(qs_observer_counts(o, -1, &fin, &nan, &inf), QS_OK);
    assert_int_equal(fin, 6);
    assert_int_equal(nan, 1);
    assert_int_equal(inf, 2);
    float lo, hi;
    assert_int_equal(qs_observer_range(ctx, o, &lo, &hi, 1), QS_OK);
    assert_true(lo == 0.0f && !signbit(lo) && hi == 7.9f);

    /* 8.0 = 0.5 * 2^4 needs k = 1: bins merge pairwise, [3+1, 0+1, 0+0, 0+1], then 8 -> bin 4 */
    const float b[] = {8.0f};
    update(ctx, o, b, 1, 1);
    assert_int_equal(qs_observer_histogram(o, 0, c, 8, &k), QS_OK);
    assert_int_equal(k, 1);
    const uint64_t want2[8] = {4, 1, 0, 1, 1, 0, 0, 0};
    T_ASSERT_BYTES("hist k=1", c, want2, sizeof want2);
    /* the comparison can fail: the old histogram is not the new one */
    assert_int_equal(t_check_bytes("negative", c, want1, sizeof want1, 0), 0);
    qs_observer_destroy(o);

    /* zeros only: no width yet; they join bin 0 when the first non-zero value sets k */
    o = obs_new(ctx, QS_OBSERVER_ENTROPY, -1, 8);
    const float z[] = {0.0f, -0.0f, 0.0f};
    update(ctx, o, z, 3, 1);
    assert_int_equal(qs_observer_histogram(o, 0, c, 8, &k), QS_OK);
    assert_int_equal(k, QS_HIST_NO_WIDTH);
    assert_int_equal(c[0], 3);
    assert_true(obs_amax(ctx, o) == 0.0f);
    const float q[] = {0.25f}; /* 0.5 * 2^-1: k = -4, 0.25 / 2^-4 = 4 */
    update(ctx, o, q, 1, 1);
    assert_int_equal(qs_observer_histogram(o, 0, c, 8, &k), QS_OK);
    assert_int_equal(k, -4);
    const uint64_t want3[8] = {3, 0, 0, 0, 1, 0, 0, 0};
    T_ASSERT_BYTES("hist zeros", c, want3, sizeof want3);

    /* extreme magnitudes: FLT_MAX (k = 128 - 3) and the smallest subnormal (k = -148 - 3) */
    qs_observer_destroy(o);
    o = obs_new(ctx, QS_OBSERVER_PERCENTILE, -1, 8);
    const float big[] = {3.4028235e38f, 1.0f};
    update(ctx, o, big, 1, 2);
    assert_int_equal(qs_observer_histogram(o, 0, c, 8, &k), QS_OK);
    assert_int_equal(k, 125);
    assert_int_equal(c[7], 1);
    assert_int_equal(c[0], 1);
    qs_observer_destroy(o);
    o = obs_new(ctx, QS_OBSERVER_PERCENTILE, -1, 8);
    const float tiny[] = {1e-45f, -1e-45f, 0.0f};
    update(ctx, o, tiny, 1, 3);
    assert_int_equal(qs_observer_histogram(o, 0, c, 8, &k), QS_OK);
    assert_int_equal(k, -151);
    assert_int_equal(c[4], 2);
    assert_int_equal(c[0], 1);
    qs_observer_destroy(o);
    qs_ctx_destroy(ctx);
}

/* ---- §3, §9: exact merges -------------------------------------------------------------------- */

static void test_merge_exact_any_order(void **state)
{
    (void)state;
    const int64_t rows = 600, cols = 96, n = rows * cols;
    float *x = malloc((size_t)n * sizeof *x), *part = malloc((size_t)n * sizeof *x);
    t_rng r = {42};
    qs_ctx *ctx = t_ctx(), *ref = ctx_with(0, 1), *thr = ctx_with(QS_ISA_ALL, 2);
    static const int32_t methods[] = {QS_OBSERVER_MINMAX, QS_OBSERVER_PERCENTILE,
                                      QS_OBSERVER_ENTROPY, QS_OBSERVER_MSE};

    laplace_acts(&r, x, rows, cols, 3, 40.0);
    x[5] = NAN;
    x[77] = -INFINITY;
    x[1000] = 0.0f;
    x[cols * 10] = 1e-30f; /* a tiny value in an early shard, a huge one in a late shard */
    x[n - 3] = 900.0f;
    for (size_t m = 0; m < sizeof methods / sizeof methods[0]; m++) {
        for (int axis = -1; axis <= 1; axis++) {
            /* one shot, scalar reference, one thread */
            /* 2048 bins per tensor; 256 per channel keeps 600 channels' states small */
            const int32_t nb = axis < 0 ? 0 : 256;
            qs_observer *whole = obs_new(ref, methods[m], axis, nb);
            update(ref, whole, x, rows, cols);
            /* three shards fed in uneven batches: rows [0, 100), [100, 350), [350, 600), or
             * for axis 0 (a channel is a row) columns [0, 16), [16, 56), [56, 96) */
            const int64_t rcut[] = {0, 100, 350, 600}, ccut[] = {0, 16, 56, 96};
            const int64_t *cut = axis == 0 ? ccut : rcut;
            qs_observer *sh[3];
            for (int s = 0; s < 3; s++) {
                sh[s] = obs_new(thr, methods[m], axis, nb);
                for (int64_t u0 = cut[s]; u0 < cut[s + 1];) {
                    int64_t nu = 1 + (u0 * 7) % (axis == 0 ? 13 : 45);
                    if (u0 + nu > cut[s + 1])
                        nu = cut[s + 1] - u0;
                    if (axis == 0) {
                        for (int64_t rr = 0; rr < rows; rr++)
                            memcpy(part + rr * nu, x + rr * cols + u0, (size_t)nu * 4);
                        update(thr, sh[s], part, rows, nu);
                    } else {
                        update(thr, sh[s], x + u0 * cols, nu, cols);
                    }
                    u0 += nu;
                }
            }
            /* (2 + 0) + 1 and 1 + (0 + 2), against one shot */
            qs_observer *a = obs_new(ctx, methods[m], axis, nb);
            qs_observer *b = obs_new(ctx, methods[m], axis, nb);
            assert_int_equal(qs_observer_merge(ctx, a, sh[2]), QS_OK);
            assert_int_equal(qs_observer_merge(ctx, a, sh[0]), QS_OK);
            assert_int_equal(qs_observer_merge(ctx, a, sh[1]), QS_OK);
            assert_int_equal(qs_observer_merge(ctx, sh[0], sh[2]), QS_OK);
            assert_int_equal(qs_observer_merge(ctx, b, sh[1]), QS_OK);
            assert_int_equal(qs_observer_merge(ctx, b, sh[0]), QS_OK);
            assert_same_state(ctx, a, whole, "merge order A vs one shot");
            assert_same_state(ctx, b, whole, "merge order B vs one shot");
            if (axis < 0) {
                float fa = obs_amax(ctx, a), fw = obs_amax(ref, whole);
                assert_int_equal(t_bits(fa), t_bits(fw));
            }
            /* a different split gives a different partial state: the check can fail */
            if (methods[m] != QS_OBSERVER_MINMAX) {
                int64_t s0, s1;
                uint8_t *p0 = state_of(ctx, sh[1], &s0), *p1 = state_of(ctx, whole, &s1);
                assert_int_equal(t_first_diff(p0, p1, (size_t)s0) >= 0, 1);
                free(p0);
                free(p1);
            }
            for (int s = 0; s < 3; s++)
                qs_observer_destroy(sh[s]);
            qs_observer_destroy(a);
            qs_observer_destroy(b);
            qs_observer_destroy(whole);
        }
    }
    qs_ctx_destroy(ctx);
    qs_ctx_destroy(ref);
    qs_ctx_destroy(thr);
    free(x);
    free(part);
}

/* Large per-tensor updates split into private per-thread states: the same bits as one thread */
static void test_threads_per_tensor(void **state)
{
    (void)state;
    const int64_t n = (int64_t)2200000;
    float *x = malloc((size_t)n * 4);
    t_rng r = {31};
    qs_ctx *one = ctx_with(QS_ISA_ALL, 1), *two = ctx_with(QS_ISA_ALL, 2);
    laplace_acts(&r, x, n / 100, 100, 2, 20.0);
    x[n - 1] = 5000.0f; /* the last chunk holds the maximum: chunk states have different k */
    x[17] = NAN;
    static const int32_t methods[] = {QS_OBSERVER_MOVING_AVERAGE, QS_OBSERVER_ENTROPY};
    for (size_t m = 0; m < 2; m++) {
        qs_observer *a = obs_new(one, methods[m], -1, 0), *b = obs_new(two, methods[m], -1, 0);
        for (int rep = 0; rep < 2; rep++) {
            update(one, a, x + rep, 1, n - rep);
            update(two, b, x + rep, 1, n - rep);
        }
        assert_same_state(one, a, b, "1 vs 2 threads");
        qs_observer_destroy(a);
        qs_observer_destroy(b);
    }
    /* per-channel searches run in parallel tasks: the same results as one thread */
    for (int32_t m = QS_OBSERVER_ENTROPY; m <= QS_OBSERVER_MSE; m++) {
        qs_observer *a = obs_new(one, m, 1, 256);
        float r1[100], r2[100];
        update(one, a, x, 2000, 100);
        assert_int_equal(qs_observer_amax(one, a, r1, 100), QS_OK);
        assert_int_equal(qs_observer_amax(two, a, r2, 100), QS_OK);
        T_ASSERT_BYTES("per-channel search, 1 vs 2 threads", r2, r1, sizeof r1);
        qs_observer_destroy(a);
    }
    qs_ctx_destroy(one);
    qs_ctx_destroy(two);
    free(x);
}

/* f16 / bf16 inputs give the state of their exact f32 values */
static void test_half_inputs(void **state)
{
    (void)state;
    qs_ctx *ctx = t_ctx();
    const int64_t n = 5000;
    uint16_t *h = malloc((size_t)n * 2);
    float *f = malloc((size_t)n * 4);
    t_rng r = {3};
    for (int32_t dt = QS_DTYPE_F16; dt <= QS_DTYPE_BF16; dt++) {
        for (int64_t i = 0; i < n; i++)
            h[i] = (uint16_t)t_next(&r);
        assert_int_equal(qs_convert(ctx, h, dt, f, QS_DTYPE_F32, n, n * 4), QS_OK);
        for (int axis = -1; axis <= 1; axis++) {
            qs_observer *a = obs_new(ctx, QS_OBSERVER_ENTROPY, axis, 0);
            qs_observer *b = obs_new(ctx, QS_OBSERVER_ENTROPY, axis, 0);
            assert_int_equal(qs_observer_update(ctx, a, h, dt, 50, 100), QS_OK);
            update(ctx, b, f, 50, 100);
            assert_same_state(ctx, a, b, "half input");
            qs_observer_destroy(a);
            qs_observer_destroy(b);
        }
    }
    free(h);
    free(f);
    qs_ctx_destroy(ctx);
}

/* ---- serialization --------------------------------------------------------------------------- */

static void test_serialize_roundtrip_and_corruption(void **state)
{
    (void)state;
    qs_ctx *ctx = t_ctx();
    t_rng r = {9};
    float x[400];
    laplace_acts(&r, x, 20, 20, 2, 30.0);
    x[3] = NAN;

    for (int32_t m = QS_OBSERVER_MINMAX; m <= QS_OBSERVER_MSE; m++) {
        qs_observer *o = obs_new(ctx, m, m == QS_OBSERVER_ENTROPY ? 1 : -1, 16);
        update(ctx, o, x, 20, 20);
        update(ctx, o, x + 7, 2, 20);
        int64_t size, w;
        uint8_t *b = state_of(ctx, o, &size);
        qs_observer *back = NULL;
        assert_int_equal(qs_observer_deserialize(ctx, b, size, &back), QS_OK);
        assert_same_state(ctx, o, back, "round trip");
        float a1[20], a2[20];
        assert_int_equal(qs_observer_amax(ctx, o, a1, 20), QS_OK);
        assert_int_equal(qs_observer_amax(ctx, back, a2, 20), QS_OK);
        T_ASSERT_BYTES("amax after round trip", a1, a2, 4);
        qs_observer_destroy(back);

        /* the header is little-endian whatever the host: magic, then version 1 */
        assert_memory_equal(b, "QSOB\x01\x00\x00\x00", 8);

        /* every single-byte change is rejected; *out is never written */
        qs_observer *sentinel = (qs_observer *)(uintptr_t)0x1234;
        for (int64_t i = 0; i < size; i++) {
            for (int bit = 0; bit < 8; bit += 3) {
                b[i] ^= (uint8_t)(1u << bit);
                qs_observer *out = sentinel;
                qs_status st = qs_observer_deserialize(ctx, b, size, &out);
                if (i >= 4 && i < 8)
                    assert_int_equal(st, QS_ERR_UNSUPPORTED);
                else
                    assert_int_equal(st, QS_ERR_BAD_DATA);
                assert_ptr_equal(out, sentinel);
                b[i] ^= (uint8_t)(1u << bit);
            }
        }
        /* every truncation, and one trailing byte */
        for (int64_t len = 0; len < size; len++) {
            qs_observer *out = sentinel;
            assert_int_equal(qs_observer_deserialize(ctx, b, len, &out), QS_ERR_BAD_DATA);
            assert_ptr_equal(out, sentinel);
        }
        uint8_t *longer = calloc((size_t)size + 1, 1);
        memcpy(longer, b, (size_t)size);
        assert_int_equal(qs_observer_deserialize(ctx, longer, size + 1, &back), QS_ERR_BAD_DATA);
        free(longer);

        /* a valid checksum over an inconsistent state: an unknown flag of channel 0, then
         * (histograms) a total that does not match the counts */
        b[64 + 52] ^= 4;
        uint64_t h0 = fnv1a(b, size - 8);
        for (int i = 0; i < 8; i++)
            b[size - 8 + i] = (uint8_t)(h0 >> (8 * i));
        assert_int_equal(qs_observer_deserialize(ctx, b, size, &back), QS_ERR_BAD_DATA);
        b[64 + 52] ^= 4;
        if (m >= QS_OBSERVER_PERCENTILE)
            b[64] ^= 1;
        else
            memset(b + 64 + 32, 0xFF, 4); /* lo becomes a NaN */
        uint64_t h = fnv1a(b, size - 8);
        for (int i = 0; i < 8; i++)
            b[size - 8 + i] = (uint8_t)(h >> (8 * i));
        qs_observer *out = sentinel;
        assert_int_equal(qs_observer_deserialize(ctx, b, size, &out), QS_ERR_BAD_DATA);
        assert_ptr_equal(out, sentinel);
        assert_non_null(strstr(qs_ctx_last_error(ctx), "channel"));

        /* short destination: BUFFER_TOO_SMALL and not a byte written */
        t_buf small = t_buf_new((size_t)size - 1);
        w = -5;
        assert_int_equal(qs_observer_serialize(ctx, o, small.p, size - 1, &w),
                         QS_ERR_BUFFER_TOO_SMALL);
        assert_true(t_buf_untouched(&small));
        assert_int_equal(w, -5);
        t_buf_free(&small);
        free(b);
        qs_observer_destroy(o);
    }
    qs_ctx_destroy(ctx);
}

/* ---- §4, §5, §6: searches -------------------------------------------------------------------- */

/* Feed counts[j] values at the centre of bin j of a width-1 grid (k = 0 when the last bin is
 * non-empty and N is 8 or 16). */
static qs_observer *hist_from_counts(qs_ctx *ctx, qs_observer_params *p, const int *counts,
                                     int nb)
{
    qs_observer *o = NULL;
    float v[64];
    assert_int_equal(qs_observer_create(ctx, p, &o), QS_OK);
    for (int j = 0; j < nb; j++) {
        for (int i = 0; i < counts[j]; i++)
            v[i] = (float)j + 0.5f;
        update(ctx, o, v, 1, counts[j]);
    }
    uint64_t c[16];
    int32_t k;
    assert_int_equal(qs_observer_histogram(o, 0, c, 16, &k), QS_OK);
    assert_int_equal(k, 0);
    for (int j = 0; j < nb; j++)
        assert_int_equal(c[j], counts[j]);
    return o;
}

static void test_entropy_hand(void **state)
{
    (void)state;
    qs_ctx *ctx = t_ctx();
    qs_observer_params p;

    /* N = 8, start_bin 2, Q = 2, b = [9, 6, 3, 2, 1, 1, 0, 1]. With b[0] <- b[1] = 6:
     * i = 4: P = [6, 6, 3, 2 + (1 + 1 + 0 + 1)] = [6, 6, 3, 5] / 20; groups floor(2j/4) =
     * {0, 1}, {2, 3}: Q = [6, 6, 2.5, 2.5] / 17; KL = 0.6 ln(0.3 / (6/17)) + 0.15 ln(0.15 /
     * (2.5/17)) + 0.25 ln(0.25 / (2.5/17)) = 0.038116. The other candidates (TensorRT /
     * pytorch-quantization algorithm): i = 2: 0.082283, 3: 0.104650, 5: 0.060149, 6: 0.048185,
     * 7: inf (b[6] = 0 under a non-empty tail), 8: 0.079281. Minimum at i = 4: amax = 4 * 1. */
    static const int b1[8] = {9, 6, 3, 2, 1, 1, 0, 1};
    qs_observer_params_init(&p, QS_OBSERVER_ENTROPY);
    p.num_bins = 8;
    p.start_bin = 2;
    p.num_levels = 2;
    qs_observer *o = hist_from_counts(ctx, &p, b1, 8);
    assert_true(obs_amax(ctx, o) == 4.0f);
    qs_observer_destroy(o);

    /* N = 16, start_bin 4, Q = 3 (uneven groups): the reference algorithm's KL values for
     * i = 4 ... 16 are 0.3831, inf, 1.646, 0.7857, 0.3704, 0.3199, 0.4350, 0.4391, 0.2862,
     * 0.2152, 0.1696, 0.1286, 0.1461: amax = 15 */
    static const int b2[16] = {5, 6, 9, 11, 0, 1, 9, 11, 2, 3, 10, 5, 3, 9, 3, 4};
    p.num_bins = 16;
    p.start_bin = 4;
    p.num_levels = 3;
    o = hist_from_counts(ctx, &p, b2, 16);
    assert_true(obs_amax(ctx, o) == 15.0f);
    qs_observer_destroy(o);

    /* ties go to the last candidate: a flat histogram has KL 0 for every i */
    static const int flat[8] = {2, 2, 2, 2, 2, 2, 2, 2};
    p.num_bins = 8;
    p.start_bin = 2;
    p.num_levels = 2;
    o = hist_from_counts(ctx, &p, flat, 8);
    assert_true(obs_amax(ctx, o) == 8.0f);
    qs_observer_destroy(o);
    qs_ctx_destroy(ctx);
}

static void test_percentile_hand(void **state)
{
    (void)state;
    qs_ctx *ctx = t_ctx();
    qs_observer_params p;
    /* 100 values: 90 in bin 0, 9 in bin 1, 1 in bin 7 (N = 8, width 1) */
    static const int b[8] = {45, 9, 0, 0, 0, 0, 0, 1};
    static const struct {
        double p;
        float amax;
    } cases[] = {{50.0, 0.0f}, {90.0, 0.0f}, {90.01, 1.0f}, {99.0, 1.0f}, {99.01, 7.0f},
                 {100.0, 7.0f}};
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
        qs_observer_params_init(&p, QS_OBSERVER_PERCENTILE);
        p.num_bins = 8;
        p.start_bin = 2;
        p.num_levels = 2;
        p.percentile = cases[i].p;
        qs_observer *o = hist_from_counts(ctx, &p, b, 8);
        update(ctx, o, (const float[]){0.25f, 0.75f, 0.1f, 0.2f, 0.3f, 0.4f, 0.6f, 0.7f, 0.8f,
                                       0.9f, 0.15f, 0.25f, 0.35f, 0.45f, 0.55f, 0.65f, 0.85f,
                                       0.95f, 0.05f, 0.5f, 0.12f, 0.22f, 0.32f, 0.42f, 0.52f,
                                       0.62f, 0.72f, 0.82f, 0.92f, 0.02f, 0.13f, 0.23f, 0.33f,
                                       0.43f, 0.53f, 0.63f, 0.73f, 0.83f, 0.93f, 0.03f, 0.14f,
                                       0.24f, 0.34f, 0.44f, 0.54f},
               1, 45);
        assert_true(obs_amax(ctx, o) == cases[i].amax);
        qs_observer_destroy(o);
    }
    qs_ctx_destroy(ctx);
}

/* Histogram MSE (§6) against a direct evaluation of every candidate in this test. */
static void test_mse_matches_direct_search(void **state)
{
    (void)state;
    qs_ctx *ctx = t_ctx();
    const int64_t n = 20000;
    float *x = malloc((size_t)n * 4);
    t_rng r = {77};
    laplace_acts(&r, x, n / 64, 64, 2, 25.0);
    qs_observer *o = obs_new(ctx, QS_OBSERVER_MSE, -1, 256);
    update(ctx, o, x, 1, n);
    uint64_t c[256];
    int32_t k;
    assert_int_equal(qs_observer_histogram(o, 0, c, 256, &k), QS_OK);
    double best = INFINITY;
    int best_j = -1;
    for (int a = 128; a < 256; a++) {
        double amax = a + 0.5, err = 0.0, tot = 0.0;
        for (int j = 0; j < 256; j++) {
            double cj = j + 0.5, q = nearbyint(cj * (127.0 / amax));
            q = q > 127 ? 127 : q;
            double d = q * (amax / 127.0) - cj;
            err += (double)c[j] * d * d;
            tot += (double)c[j];
        }
        if (err / tot < best) {
            best = err / tot;
            best_j = a;
        }
    }
    assert_true(obs_amax(ctx, o) == (float)ldexp(best_j + 0.5, k));
    qs_observer_destroy(o);
    free(x);
    qs_ctx_destroy(ctx);
}

/* ---- the acceptance check: SQNR on activations with outlier channels -------------- */

/* SQNR in dB of per-tensor symmetric INT8 with the observer's scale, over all elements and over
 * the channels that are not outliers (column c is an outlier when c * 37 % cols < nout). */
static void int8_sqnr(qs_ctx *ctx, const qs_observer *o, const float *x, int64_t rows,
                      int64_t cols, int nout, double *all, double *normal)
{
    const int64_t n = rows * cols;
    int8_t *q = malloc((size_t)n);
    float s;
    qs_qtensor t;
    memset(&t, 0, sizeof t);
    t.data = q;
    t.data_bytes = n;
    t.scale = &s;
    t.scale_bytes = 4;
    assert_int_equal(qs_observer_quantize(ctx, o, QS_CALIB_INT8_SYM, x, QS_DTYPE_F32, 1, n, &t),
                     QS_OK);
    double sig = 0.0, err = 0.0, sig_n = 0.0, err_n = 0.0;
    for (int64_t i = 0; i < n; i++) {
        double d = (double)q[i] * s - x[i], e = (double)x[i] * x[i];
        sig += e;
        err += d * d;
        if ((i % cols) * 37 % cols >= nout) {
            sig_n += e;
            err_n += d * d;
        }
    }
    free(q);
    *all = 10.0 * log10(sig / err);
    *normal = 10.0 * log10(sig_n / err_n);
}

static void test_sqnr_outlier_channels(void **state)
{
    (void)state;
    qs_ctx *ctx = t_ctx();
    const int64_t rows = 512, cols = 512, n = rows * cols;
    float *x = malloc((size_t)n * 4);
    static const int32_t methods[] = {QS_OBSERVER_MINMAX, QS_OBSERVER_PERCENTILE,
                                      QS_OBSERVER_ENTROPY, QS_OBSERVER_MSE};
    static const double scale[] = {4.0, 10.0};

    /* Laplace(0, 1) over 512 channels, 4 of them `scale` times larger (outlier features) */
    for (int cfg = 0; cfg < 2; cfg++) {
        t_rng r = {2024};
        double all[4], normal[4];
        laplace_acts(&r, x, rows, cols, 4, scale[cfg]);
        for (int m = 0; m < 4; m++) {
            qs_observer *o = obs_new(ctx, methods[m], -1, 0);
            update(ctx, o, x, rows, cols);
            int8_sqnr(ctx, o, x, rows, cols, 4, &all[m], &normal[m]);
            print_message("  outliers x%-3g INT8 SQNR %-10s amax %8.4f: %6.2f dB, "
                          "non-outlier channels %6.2f dB\n",
                          scale[cfg], qs_observer_method_name(methods[m]),
                          (double)obs_amax(ctx, o), all[m], normal[m]);
            qs_observer_destroy(o);
        }
        /* percentile and MSE beat min-max on the whole tensor in both settings. Entropy
         * minimises the KL divergence of the histogram, which ignores how far the clipped tail
         * lies: it clips the outlier channels hardest and wins on the other channels, while on
         * the whole tensor, whose energy the outliers dominate, it lands near or below min-max
         * (figures printed above) */
        assert_true(normal[2] > normal[0]);
    }
    free(x);
    qs_ctx_destroy(ctx);
}

/* ---- §0 rule 5, §2 --------------------------------------------------------------------------- */

static void test_nonfinite_ignored_and_counted(void **state)
{
    (void)state;
    qs_ctx *ctx = t_ctx();
    float x[1000], clean[1000];
    t_rng r = {5};
    int64_t m = 0;
    laplace_acts(&r, x, 10, 100, 1, 5.0);
    for (int i = 0; i < 1000; i += 7)
        x[i] = i % 3 == 0 ? NAN : i % 3 == 1 ? INFINITY : -INFINITY;
    for (int i = 0; i < 1000; i++)
        if (isfinite(x[i]))
            clean[m++] = x[i];
    for (int32_t meth = QS_OBSERVER_MINMAX; meth <= QS_OBSERVER_MSE; meth++) {
        qs_observer *a = obs_new(ctx, meth, -1, 0), *b = obs_new(ctx, meth, -1, 0);
        update(ctx, a, x, 10, 100);
        update(ctx, b, clean, 1, m);
        float fa = obs_amax(ctx, a), fb = obs_amax(ctx, b);
        assert_int_equal(t_bits(fa), t_bits(fb));
        assert_true(isfinite(fa) && fa > 0.0f);
        uint64_t fin, nan, inf;
        assert_int_equal(qs_observer_counts(a, 0, &fin, &nan, &inf), QS_OK);
        assert_int_equal(fin, (uint64_t)m);
        assert_int_equal(nan + inf, 1000 - (uint64_t)m);
        assert_true(nan > 0 && inf > 0);
        qs_observer_destroy(a);
        qs_observer_destroy(b);
    }
    /* an all-NaN batch leaves everything at "nothing seen" */
    qs_observer *o = obs_new(ctx, QS_OBSERVER_MOVING_AVERAGE, -1, 0);
    float nn[3] = {NAN, NAN, -NAN};
    update(ctx, o, nn, 1, 3);
    assert_true(obs_amax(ctx, o) == 0.0f);
    qs_observer_destroy(o);
    qs_ctx_destroy(ctx);
}

static void test_moving_average(void **state)
{
    (void)state;
    qs_ctx *ctx = t_ctx();
    qs_observer *o = obs_new(ctx, QS_OBSERVER_MOVING_AVERAGE, -1, 0);
    const float b1[] = {1.0f, -1.0f, 0.5f}, b2[] = {3.0f, -2.0f}, b3[] = {NAN, 0.25f};
    update(ctx, o, b1, 1, 3);
    update(ctx, o, b2, 1, 2);
    update(ctx, o, b3, 1, 2);
    /* v <- v + 0.01 * (batch - v), in f32 (PyTorch MovingAverageMinMaxObserver) */
    volatile float c = 0.01f, lo = -1.0f, hi = 1.0f;
    lo = lo + c * (-2.0f - lo);
    hi = hi + c * (3.0f - hi);
    lo = lo + c * (0.25f - lo);
    hi = hi + c * (0.25f - hi);
    float l, h;
    assert_int_equal(qs_observer_range(ctx, o, &l, &h, 1), QS_OK);
    assert_int_equal(t_bits(l), t_bits(lo));
    assert_int_equal(t_bits(h), t_bits(hi));
    assert_int_equal(t_bits(obs_amax(ctx, o)), t_bits(fabsf(lo) > hi ? fabsf(lo) : hi));
    /* order-dependent: merging is refused and leaves dst unchanged */
    qs_observer *p = obs_new(ctx, QS_OBSERVER_MOVING_AVERAGE, -1, 0);
    assert_int_equal(qs_observer_merge(ctx, p, o), QS_ERR_UNSUPPORTED);
    assert_true(obs_amax(ctx, p) == 0.0f);
    qs_observer_destroy(p);
    qs_observer_destroy(o);
    qs_ctx_destroy(ctx);
}

/* ---- targets --------------------------------------------------------------------------------- */

static void test_qparams_hand(void **state)
{
    (void)state;
    qs_ctx *ctx = t_ctx();
    qs_observer *o = obs_new(ctx, QS_OBSERVER_MINMAX, -1, 0);
    const float x[] = {-1.0f, 3.0f, 0.5f};
    float s;
    int32_t zp = 99;
    update(ctx, o, x, 1, 3);
    volatile float a = 3.0f;
    assert_int_equal(qs_observer_qparams(ctx, o, QS_CALIB_INT8_SYM, &s, &zp, 1), QS_OK);
    assert_int_equal(t_bits(s), t_bits(a / 127.0f));
    assert_int_equal(zp, 0);
    assert_int_equal(qs_observer_qparams(ctx, o, QS_CALIB_FP8_E4M3, &s, NULL, 1), QS_OK);
    assert_int_equal(t_bits(s), t_bits(a / 448.0f));
    assert_int_equal(qs_observer_qparams(ctx, o, QS_CALIB_FP8_E5M2, &s, NULL, 1), QS_OK);
    assert_int_equal(t_bits(s), t_bits(a / 57344.0f));
    assert_int_equal(qs_observer_qparams(ctx, o, QS_CALIB_NVFP4, &s, NULL, 1), QS_OK);
    assert_int_equal(t_bits(s), t_bits(a / 2688.0f));
    /* asymmetric: s = 4/255, zp = -128 - rne(-1 / s) = -128 + 64 = -64 (formats.md §9) */
    volatile float w = 4.0f;
    assert_int_equal(qs_observer_qparams(ctx, o, QS_CALIB_INT8_ASYM, &s, &zp, 1), QS_OK);
    assert_int_equal(t_bits(s), t_bits(w / 255.0f));
    assert_int_equal(zp, -64);
    qs_observer_destroy(o);

    /* nothing seen: scale 1, zero point 0 (formats.md §9, §10 conventions) */
    o = obs_new(ctx, QS_OBSERVER_PERCENTILE, -1, 0);
    assert_int_equal(qs_observer_qparams(ctx, o, QS_CALIB_INT8_ASYM, &s, &zp, 1), QS_OK);
    assert_true(s == 1.0f && zp == 0);
    assert_int_equal(qs_observer_qparams(ctx, o, QS_CALIB_FP8_E4M3, &s, NULL, 1), QS_OK);
    assert_true(s == 1.0f);
    assert_int_equal(qs_observer_qparams(ctx, o, 99, &s, NULL, 1), QS_ERR_INVALID_ARG);
    qs_observer_destroy(o);
    qs_ctx_destroy(ctx);
}

/* Applying a min-max observer's scales equals quantizing with the range from the data. */
static void test_apply_matches_quantize(void **state)
{
    (void)state;
    qs_ctx *ctx = t_ctx();
    const int64_t rows = 37, cols = 70, n = rows * cols;
    float *x = malloc((size_t)n * 4);
    uint8_t *q1 = malloc((size_t)n), *q2 = malloc((size_t)n);
    float s1[70], s2[70];
    int8_t z1[70], z2[70];
    t_rng r = {11};
    qs_quant_params qp;
    qs_qtensor a, b;

    t_fill_mixed(&r, x, n, 0.0);
    static const struct {
        int32_t target, format, gran, sym, axis;
    } cases[] = {
        {QS_CALIB_INT8_SYM, QS_FORMAT_INT8, QS_GRAN_TENSOR, 1, -1},
        {QS_CALIB_INT8_ASYM, QS_FORMAT_INT8, QS_GRAN_TENSOR, 0, -1},
        {QS_CALIB_INT8_SYM, QS_FORMAT_INT8, QS_GRAN_ROW, 1, 0},
        {QS_CALIB_INT8_ASYM, QS_FORMAT_INT8, QS_GRAN_ROW, 0, 0},
        {QS_CALIB_FP8_E4M3, QS_FORMAT_FP8_E4M3, 0, 1, -1},
        {QS_CALIB_FP8_E5M2, QS_FORMAT_FP8_E5M2, 0, 1, -1},
    };
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
        qs_observer *o = obs_new(ctx, QS_OBSERVER_MINMAX, cases[i].axis, 0);
        update(ctx, o, x, rows, cols);
        qs_quant_params_init(&qp, cases[i].format);
        if (cases[i].format == QS_FORMAT_INT8) {
            qp.granularity = cases[i].gran;
            qp.symmetric = cases[i].sym;
        }
        memset(&a, 0, sizeof a);
        memset(&b, 0, sizeof b);
        a.data = q1;
        a.data_bytes = n;
        a.scale = s1;
        a.scale_bytes = sizeof s1;
        a.zero_point = z1;
        a.zero_point_bytes = sizeof z1;
        b = a;
        b.data = q2;
        b.scale = s2;
        b.zero_point = z2;
        memset(z1, 0, sizeof z1);
        memset(z2, 0, sizeof z2);
        assert_int_equal(qs_quantize(ctx, &qp, x, QS_DTYPE_F32, rows, cols, &a), QS_OK);
        assert_int_equal(qs_observer_quantize(ctx, o, cases[i].target, x, QS_DTYPE_F32, rows,
                                              cols, &b),
                         QS_OK);
        T_ASSERT_BYTES("codes", q2, q1, (size_t)n);
        int64_t ns = cases[i].axis == 0 ? rows : 1;
        T_ASSERT_BYTES("scales", s2, s1, (size_t)ns * 4);
        if (!cases[i].sym)
            T_ASSERT_BYTES("zero points", z2, z1, (size_t)ns);
        qs_observer_destroy(o);
    }

    /* per column (axis 1): codes rne(x * fl(127 / amax_c)) with each column's own scale */
    qs_observer *o = obs_new(ctx, QS_OBSERVER_MINMAX, 1, 0);
    update(ctx, o, x, rows, cols);
    memset(&b, 0, sizeof b);
    b.data = q2;
    b.data_bytes = n;
    b.scale = s2;
    b.scale_bytes = sizeof s2;
    assert_int_equal(qs_observer_quantize(ctx, o, QS_CALIB_INT8_SYM, x, QS_DTYPE_F32, rows, cols,
                                          &b),
                     QS_OK);
    for (int64_t c = 0; c < cols; c++) {
        float am = 0.0f;
        for (int64_t rr = 0; rr < rows; rr++)
            am = fmaxf(am, fabsf(x[rr * cols + c]));
        volatile float mul = 127.0f / am;
        assert_int_equal(t_bits(s2[c]), t_bits(am / 127.0f));
        for (int64_t rr = 0; rr < rows; rr++) {
            float v = nearbyintf(x[rr * cols + c] * mul);
            v = v > 127.0f ? 127.0f : v < -127.0f ? -127.0f : v;
            assert_int_equal((int8_t)q2[rr * cols + c], (int8_t)v);
        }
    }
    /* NVFP4 with the observer's per-tensor scale equals the automatic one of the same data */
    qs_observer_destroy(o);
    o = obs_new(ctx, QS_OBSERVER_MINMAX, -1, 0);
    update(ctx, o, x, rows, cols);
    qs_quant_params_init(&qp, QS_FORMAT_NVFP4);
    int64_t db, sb;
    assert_int_equal(qs_quant_size(&qp, rows, cols, QS_PLANE_DATA, &db), QS_OK);
    assert_int_equal(qs_quant_size(&qp, rows, cols, QS_PLANE_SCALE, &sb), QS_OK);
    uint8_t *d1 = malloc((size_t)(db + sb)), *d2 = malloc((size_t)(db + sb));
    memset(&a, 0, sizeof a);
    a.data = d1;
    a.data_bytes = db;
    a.scale = d1 + db;
    a.scale_bytes = sb;
    b = a;
    b.data = d2;
    b.scale = d2 + db;
    assert_int_equal(qs_quantize(ctx, &qp, x, QS_DTYPE_F32, rows, cols, &a), QS_OK);
    assert_int_equal(qs_observer_quantize(ctx, o, QS_CALIB_NVFP4, x, QS_DTYPE_F32, rows, cols, &b),
                     QS_OK);
    T_ASSERT_BYTES("nvfp4", d2, d1, (size_t)(db + sb));
    assert_int_equal(t_bits(a.global_scale), t_bits(b.global_scale));
    free(d1);
    free(d2);

    /* errors leave every plane untouched */
    t_buf out = t_buf_new((size_t)n), sc = t_buf_new(4);
    memset(&b, 0, sizeof b);
    b.data = out.p;
    b.data_bytes = n - 1;
    b.scale = sc.p;
    b.scale_bytes = 4;
    assert_int_equal(qs_observer_quantize(ctx, o, QS_CALIB_INT8_SYM, x, QS_DTYPE_F32, rows, cols,
                                          &b),
                     QS_ERR_BUFFER_TOO_SMALL);
    b.data_bytes = n;
    assert_int_equal(qs_observer_quantize(ctx, o, QS_CALIB_INT8_ASYM, x, QS_DTYPE_F32, rows, cols,
                                          &b),
                     QS_ERR_INVALID_ARG); /* no zero-point plane */
    assert_int_equal(qs_ctx_set(ctx, QS_PARAM_NONFINITE, QS_NONFINITE_REJECT), QS_OK);
    x[n / 2] = NAN;
    assert_int_equal(qs_observer_quantize(ctx, o, QS_CALIB_FP8_E4M3, x, QS_DTYPE_F32, rows, cols,
                                          &b),
                     QS_ERR_NONFINITE);
    assert_true(t_buf_untouched(&out) && t_buf_untouched(&sc));
    qs_observer_destroy(o);
    o = obs_new(ctx, QS_OBSERVER_MINMAX, 0, 0);
    update(ctx, o, x, 5, 7);
    assert_int_equal(qs_observer_quantize(ctx, o, QS_CALIB_FP8_E4M3, x, QS_DTYPE_F32, rows, cols,
                                          &b),
                     QS_ERR_SHAPE);
    assert_int_equal(qs_observer_quantize(ctx, o, QS_CALIB_NVFP4, x, QS_DTYPE_F32, 5, 7, &b),
                     QS_ERR_UNSUPPORTED);
    assert_true(t_buf_untouched(&out) && t_buf_untouched(&sc));
    t_buf_free(&out);
    t_buf_free(&sc);
    qs_observer_destroy(o);
    free(x);
    free(q1);
    free(q2);
    qs_ctx_destroy(ctx);
}

/* ---- §8: dynamic quantization ---------------------------------------------------------------- */

static void test_dynamic(void **state)
{
    (void)state;
    qs_ctx *ctx = t_ctx();
    /* row 0: amax 2, fl(127/2) = 63.5: [63.5 -> 64, -127, 31.75 -> 32, 0]; row 1 all zero */
    const float x[8] = {1.0f, -2.0f, 0.5f, 0.0f, 0.0f, -0.0f, 0.0f, 0.0f};
    int8_t q[8];
    float s[2];
    assert_int_equal(qs_quantize_dynamic_int8_per_token(ctx, x, QS_DTYPE_F32, 2, 4, q, 8, s, 2),
                     QS_OK);
    const int8_t want[8] = {64, -127, 32, 0, 0, 0, 0, 0};
    T_ASSERT_BYTES("per-token codes", q, want, 8);
    volatile float two = 2.0f;
    assert_int_equal(t_bits(s[0]), t_bits(two / 127.0f));
    assert_true(s[1] == 1.0f);

    /* large random input: same bytes as the static row-wise and per-tensor FP8 paths */
    const int64_t rows = 33, cols = 1000, n = rows * cols;
    float *y = malloc((size_t)n * 4);
    int8_t *c1 = malloc((size_t)n), *c2 = malloc((size_t)n);
    float sc1[33], sc2[33];
    t_rng r = {8};
    t_fill_mixed(&r, y, n, 0.01);
    qs_quant_params qp;
    qs_qtensor t;
    qs_quant_params_init(&qp, QS_FORMAT_INT8);
    qp.granularity = QS_GRAN_ROW;
    memset(&t, 0, sizeof t);
    t.data = c1;
    t.data_bytes = n;
    t.scale = sc1;
    t.scale_bytes = sizeof sc1;
    assert_int_equal(qs_quantize(ctx, &qp, y, QS_DTYPE_F32, rows, cols, &t), QS_OK);
    assert_int_equal(qs_quantize_dynamic_int8_per_token(ctx, y, QS_DTYPE_F32, rows, cols, c2, n,
                                                        sc2, rows),
                     QS_OK);
    T_ASSERT_BYTES("per-token vs row-wise", c2, c1, (size_t)n);
    T_ASSERT_BYTES("per-token scales", sc2, sc1, sizeof sc1);
    for (int32_t f = QS_FORMAT_FP8_E4M3; f <= QS_FORMAT_FP8_E5M2; f++) {
        float fs1, fs2;
        qs_quant_params_init(&qp, f);
        t.scale = &fs1;
        t.scale_bytes = 4;
        assert_int_equal(qs_quantize(ctx, &qp, y, QS_DTYPE_F32, 1, n, &t), QS_OK);
        assert_int_equal(qs_quantize_dynamic_fp8(ctx, f, y, QS_DTYPE_F32, n, (uint8_t *)c2, n,
                                                 &fs2),
                         QS_OK);
        T_ASSERT_BYTES("dynamic fp8", c2, c1, (size_t)n);
        assert_int_equal(t_bits(fs1), t_bits(fs2));
    }
    /* errors: nothing written */
    t_buf o = t_buf_new(8), sb = t_buf_new(8);
    assert_int_equal(qs_quantize_dynamic_int8_per_token(ctx, x, QS_DTYPE_F32, 2, 4, o.p, 7,
                                                        sb.p, 2),
                     QS_ERR_BUFFER_TOO_SMALL);
    assert_int_equal(qs_quantize_dynamic_int8_per_token(ctx, x, QS_DTYPE_F32, 2, 4, o.p, 8,
                                                        sb.p, 1),
                     QS_ERR_BUFFER_TOO_SMALL);
    assert_int_equal(qs_quantize_dynamic_fp8(ctx, QS_FORMAT_INT8, x, QS_DTYPE_F32, 8, o.p, 8,
                                             sb.p),
                     QS_ERR_INVALID_ARG);
    assert_int_equal(qs_ctx_set(ctx, QS_PARAM_NONFINITE, QS_NONFINITE_REJECT), QS_OK);
    const float bad[4] = {1.0f, INFINITY, 0.0f, 2.0f};
    assert_int_equal(qs_quantize_dynamic_int8_per_token(ctx, bad, QS_DTYPE_F32, 1, 4, o.p, 8,
                                                        sb.p, 2),
                     QS_ERR_NONFINITE);
    assert_true(t_buf_untouched(&o) && t_buf_untouched(&sb));
    t_buf_free(&o);
    t_buf_free(&sb);
    free(y);
    free(c1);
    free(c2);
    qs_ctx_destroy(ctx);
}

/* ---- Wanda sums of squares ------------------------------------------------------------------- */

static void test_sumsq(void **state)
{
    (void)state;
    const int64_t rows = 57, cols = 1500, n = rows * cols;
    float *x = malloc((size_t)n * 4);
    double *a = calloc((size_t)cols, 8), *b = calloc((size_t)cols, 8), *w = calloc((size_t)cols, 8);
    t_rng r = {13};
    qs_ctx *ctx = t_ctx(), *two = ctx_with(QS_ISA_ALL, 2);

    t_fill_mixed(&r, x, n, 0.02);
    for (int64_t rr = 0; rr < rows; rr++)
        for (int64_t c = 0; c < cols; c++) {
            float v = x[rr * cols + c];
            w[c] = w[c] + (isfinite(v) ? (double)v * (double)v : 0.0);
        }
    /* one call, and 3 calls over consecutive row blocks on 2 threads: the same bits */
    assert_int_equal(qs_act_sumsq_update(ctx, x, QS_DTYPE_F32, rows, cols, a, cols), QS_OK);
    assert_int_equal(qs_act_sumsq_update(two, x, QS_DTYPE_F32, 20, cols, b, cols), QS_OK);
    assert_int_equal(qs_act_sumsq_update(two, x + 20 * cols, QS_DTYPE_F32, 30, cols, b, cols),
                     QS_OK);
    assert_int_equal(qs_act_sumsq_update(two, x + 50 * cols, QS_DTYPE_F32, 7, cols, b, cols),
                     QS_OK);
    T_ASSERT_BYTES("sumsq one call", a, w, (size_t)cols * 8);
    T_ASSERT_BYTES("sumsq chunked", b, w, (size_t)cols * 8);
    /* merging shards: exact up to the order of one addition per column */
    double *s1 = calloc((size_t)cols, 8), *s2 = calloc((size_t)cols, 8);
    assert_int_equal(qs_act_sumsq_update(ctx, x, QS_DTYPE_F32, 30, cols, s1, cols), QS_OK);
    assert_int_equal(qs_act_sumsq_update(ctx, x + 30 * cols, QS_DTYPE_F32, 27, cols, s2, cols),
                     QS_OK);
    assert_int_equal(qs_act_sumsq_merge(ctx, s1, s2, cols), QS_OK);
    for (int64_t c = 0; c < cols; c++)
        assert_true(fabs(s1[c] - w[c]) <= 1e-12 * w[c]);
    float *nrm = malloc((size_t)cols * 4);
    assert_int_equal(qs_act_norms(ctx, a, cols, nrm), QS_OK);
    for (int64_t c = 0; c < cols; c++)
        assert_int_equal(t_bits(nrm[c]), t_bits((float)sqrt(w[c])));
    /* errors: nothing written */
    t_buf o = t_buf_new((size_t)cols * 8);
    assert_int_equal(qs_act_sumsq_update(ctx, x, QS_DTYPE_F32, rows, cols, o.p, cols - 1),
                     QS_ERR_BUFFER_TOO_SMALL);
    assert_int_equal(qs_act_sumsq_update(ctx, x, 7, rows, cols, o.p, cols), QS_ERR_INVALID_ARG);
    assert_int_equal(qs_act_sumsq_update(ctx, x, QS_DTYPE_F32, -1, cols, o.p, cols),
                     QS_ERR_INVALID_ARG);
    assert_true(t_buf_untouched(&o));
    t_buf_free(&o);
    free(nrm);
    free(s1);
    free(s2);
    free(x);
    free(a);
    free(b);
    free(w);
    qs_ctx_destroy(ctx);
    qs_ctx_destroy(two);
}

/* ---- errors ---------------------------------------------------------------------------------- */

static void test_errors(void **state)
{
    (void)state;
    qs_ctx *ctx = t_ctx();
    qs_observer_params p;
    qs_observer *o = (qs_observer *)(uintptr_t)0x99, *keep = o;

    qs_observer_params_init(&p, QS_OBSERVER_ENTROPY);
    p.num_bins = 3000;
    assert_int_equal(qs_observer_create(ctx, &p, &o), QS_ERR_INVALID_ARG);
    qs_observer_params_init(&p, QS_OBSERVER_ENTROPY);
    p.start_bin = 1025;
    assert_int_equal(qs_observer_create(ctx, &p, &o), QS_ERR_INVALID_ARG);
    qs_observer_params_init(&p, QS_OBSERVER_ENTROPY);
    p.num_levels = 129;
    assert_int_equal(qs_observer_create(ctx, &p, &o), QS_ERR_INVALID_ARG);
    qs_observer_params_init(&p, QS_OBSERVER_PERCENTILE);
    p.percentile = 0.0;
    assert_int_equal(qs_observer_create(ctx, &p, &o), QS_ERR_INVALID_ARG);
    qs_observer_params_init(&p, QS_OBSERVER_MSE);
    p.target = QS_CALIB_NVFP4;
    assert_int_equal(qs_observer_create(ctx, &p, &o), QS_ERR_INVALID_ARG);
    qs_observer_params_init(&p, 17);
    assert_int_equal(qs_observer_create(ctx, &p, &o), QS_ERR_INVALID_ARG);
    qs_observer_params_init(&p, QS_OBSERVER_MINMAX);
    p.reserved[2] = 1;
    assert_int_equal(qs_observer_create(ctx, &p, &o), QS_ERR_INVALID_ARG);
    qs_observer_params_init(&p, QS_OBSERVER_MINMAX);
    p.axis = 2;
    assert_int_equal(qs_observer_create(ctx, &p, &o), QS_ERR_INVALID_ARG);
    assert_ptr_equal(o, keep);

    /* per-channel shape rules; the observer is unchanged by a failed update */
    qs_observer *a = obs_new(ctx, QS_OBSERVER_PERCENTILE, 1, 0);
    qs_observer *b = obs_new(ctx, QS_OBSERVER_PERCENTILE, 1, 0);
    qs_observer *c = obs_new(ctx, QS_OBSERVER_ENTROPY, 1, 0);
    float x[12] = {1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12};
    update(ctx, a, x, 3, 4);
    update(ctx, b, x, 4, 3);
    int64_t ch;
    assert_int_equal(qs_observer_channels(a, &ch), QS_OK);
    assert_int_equal(ch, 4);
    int64_t s0;
    uint8_t *before = state_of(ctx, a, &s0);
    assert_int_equal(qs_observer_update(ctx, a, x, QS_DTYPE_F32, 4, 3), QS_ERR_SHAPE);
    assert_int_equal(qs_observer_update(ctx, a, x, 9, 3, 4), QS_ERR_INVALID_ARG);
    assert_int_equal(qs_observer_update(ctx, a, NULL, QS_DTYPE_F32, 3, 4), QS_ERR_INVALID_ARG);
    assert_int_equal(qs_observer_update(ctx, a, x, QS_DTYPE_F32, -1, 4), QS_ERR_INVALID_ARG);
    assert_int_equal(qs_observer_update(ctx, a, x, QS_DTYPE_F32, INT64_MAX, 4), QS_ERR_OVERFLOW);
    assert_int_equal(qs_observer_merge(ctx, a, b), QS_ERR_SHAPE);
    assert_int_equal(qs_observer_merge(ctx, a, c), QS_ERR_INVALID_ARG);
    int64_t s1;
    uint8_t *after = state_of(ctx, a, &s1);
    assert_int_equal(s0, s1);
    T_ASSERT_BYTES("unchanged after errors", after, before, (size_t)s0);
    free(before);
    free(after);

    float am[4];
    assert_int_equal(qs_observer_amax(ctx, a, am, 3), QS_ERR_BUFFER_TOO_SMALL);
    uint64_t counts[2048];
    int32_t k;
    assert_int_equal(qs_observer_histogram(a, 0, counts, 100, &k), QS_ERR_BUFFER_TOO_SMALL);
    assert_int_equal(qs_observer_histogram(a, 4, counts, 2048, &k), QS_ERR_INVALID_ARG);
    qs_observer *mm = obs_new(ctx, QS_OBSERVER_MINMAX, -1, 0);
    assert_int_equal(qs_observer_histogram(mm, 0, counts, 2048, &k), QS_ERR_UNSUPPORTED);
    assert_int_equal(qs_observer_counts(mm, 1, NULL, NULL, NULL), QS_ERR_INVALID_ARG);
    /* an empty per-channel observer adopts the other's channels in a merge */
    qs_observer *e = obs_new(ctx, QS_OBSERVER_PERCENTILE, 1, 0);
    assert_int_equal(qs_observer_merge(ctx, e, a), QS_OK);
    assert_same_state(ctx, e, a, "merge into empty");
    /* self-merge doubles every count */
    assert_int_equal(qs_observer_merge(ctx, e, e), QS_OK);
    uint64_t fin;
    assert_int_equal(qs_observer_counts(e, -1, &fin, NULL, NULL), QS_OK);
    assert_int_equal(fin, 24);

    assert_string_equal(qs_observer_method_name(QS_OBSERVER_ENTROPY), "entropy");
    assert_int_equal(qs_observer_method_from_name("moving_average"), QS_OBSERVER_MOVING_AVERAGE);
    assert_int_equal(qs_observer_method_from_name("bogus"), -1);
    assert_null(qs_observer_method_name(0));
    assert_int_equal(qs_calib_target_from_name("fp8_e5m2"), QS_CALIB_FP8_E5M2);
    assert_int_equal(qs_calib_target_from_name("int8_sym"), QS_CALIB_INT8_SYM);
    assert_string_equal(qs_calib_target_name(QS_CALIB_NVFP4), "nvfp4");
    qs_observer_destroy(NULL);
    qs_observer_destroy(a);
    qs_observer_destroy(b);
    qs_observer_destroy(c);
    qs_observer_destroy(e);
    qs_observer_destroy(mm);
    qs_ctx_destroy(ctx);
}

/* The allocator of the creating context serves all of an observer's memory. */
static int64_t live_allocs;
static void *count_alloc(void *user, size_t size, size_t align)
{
    void *p = NULL;
    (void)user;
    if (posix_memalign(&p, align < sizeof(void *) ? sizeof(void *) : align, size))
        return NULL;
    live_allocs++;
    return p;
}
static void count_free(void *user, void *p)
{
    (void)user;
    live_allocs--;
    free(p);
}

static void test_allocator(void **state)
{
    (void)state;
    qs_ctx_params cp;
    qs_ctx *ctx;
    qs_ctx_params_init(&cp);
    cp.allocator.alloc = count_alloc;
    cp.allocator.free = count_free;
    assert_int_equal(qs_ctx_create(&cp, &ctx), QS_OK);
    int64_t base = live_allocs;
    qs_observer *o = obs_new(ctx, QS_OBSERVER_ENTROPY, 0, 0);
    float x[64];
    for (int i = 0; i < 64; i++)
        x[i] = (float)i - 20.0f;
    update(ctx, o, x, 8, 8);
    assert_true(live_allocs >= base + 3);
    float am[8];
    assert_int_equal(qs_observer_amax(ctx, o, am, 8), QS_OK);
    qs_observer_destroy(o);
    assert_int_equal(live_allocs, base);
    qs_ctx_destroy(ctx);
}

/* ---- the search bound: at most QS_OBSERVER_SEARCH_MAX_BINS bins for entropy and MSE ---------- */

/* An entropy or MSE observer with more bins than the bound is refused at creation; percentile
 * keeps the whole range. */
static void test_search_bins_bound_create(void **state)
{
    (void)state;
    qs_ctx *ctx = t_ctx();
    qs_observer_params p;
    qs_observer *o = (qs_observer *)(uintptr_t)0x77, *keep = o;

    for (int32_t m = QS_OBSERVER_ENTROPY; m <= QS_OBSERVER_MSE; m++) {
        qs_observer_params_init(&p, m);
        p.num_bins = 2 * QS_OBSERVER_SEARCH_MAX_BINS;
        assert_int_equal(qs_observer_create(ctx, &p, &o), QS_ERR_INVALID_ARG);
        assert_ptr_equal(o, keep);
        assert_non_null(strstr(qs_ctx_last_error(ctx), "at most 4096 bins"));
        p.num_bins = QS_OBSERVER_SEARCH_MAX_BINS;
        assert_int_equal(qs_observer_create(ctx, &p, &o), QS_OK);
        qs_observer_destroy(o);
        o = keep;
    }
    qs_observer_params_init(&p, QS_OBSERVER_PERCENTILE);
    p.num_bins = 1 << 20;
    assert_int_equal(qs_observer_create(ctx, &p, &o), QS_OK);
    qs_observer_destroy(o);
    qs_ctx_destroy(ctx);
}

/* A crafted byte string: a valid per-channel percentile observer with twice the bound's bins
 * whose method field says entropy (or MSE), checksum resealed. Everything else is consistent, so
 * only the bound refuses it; without the bound its amax would be a quadratic search chosen by the
 * bytes. */
static void test_search_bins_bound_deserialize(void **state)
{
    (void)state;
    qs_ctx *ctx = t_ctx();
    const int32_t bins = 2 * QS_OBSERVER_SEARCH_MAX_BINS;
    qs_observer *o = obs_new(ctx, QS_OBSERVER_PERCENTILE, 0, bins), *sentinel = o;
    float x[2 * 64];
    int64_t size;

    for (int i = 0; i < 2 * 64; i++)
        x[i] = (float)(i % 64) * 0.25f - 3.0f;
    update(ctx, o, x, 2, 64);
    uint8_t *b = state_of(ctx, o, &size);
    for (int32_t m = QS_OBSERVER_ENTROPY; m <= QS_OBSERVER_MSE; m++) {
        for (int i = 0; i < 4; i++) /* method: little-endian i32 at byte 12 */
            b[12 + i] = (uint8_t)((uint32_t)m >> (8 * i));
        uint64_t h = fnv1a(b, size - 8);
        for (int i = 0; i < 8; i++)
            b[size - 8 + i] = (uint8_t)(h >> (8 * i));
        qs_observer *out = sentinel;
        assert_int_equal(qs_observer_deserialize(ctx, b, size, &out), QS_ERR_BAD_DATA);
        assert_ptr_equal(out, sentinel);
        assert_non_null(strstr(qs_ctx_last_error(ctx), "at most 4096 bins"));
    }
    free(b);
    qs_observer_destroy(o);
    qs_ctx_destroy(ctx);
}

/* An observer read back from bytes whose channel 2 has counted 2^64 - 2 finite values (found by
 * fuzz_observer): an update or merge adding two more used to wrap the counter to 0, and the
 * serialized result was then refused ("empty channel with a range"). Now both are refused with
 * QS_ERR_OVERFLOW and the state stays as it was; adding exactly one value less still works. */
static uint8_t *with_total(const uint8_t *b, int64_t size, int64_t chan, uint64_t total)
{
    uint8_t *c = malloc((size_t)size);
    assert_non_null(c);
    memcpy(c, b, (size_t)size);
    for (int i = 0; i < 8; i++) /* channel records start at 64, 56 bytes each, total first */
        c[64 + 56 * chan + i] = (uint8_t)(total >> (8 * i));
    uint64_t h = fnv1a(c, size - 8);
    for (int i = 0; i < 8; i++)
        c[size - 8 + i] = (uint8_t)(h >> (8 * i));
    return c;
}

static void test_counter_wrap_refused(void **state)
{
    (void)state;
    qs_ctx *ctx = t_ctx();
    const float x[6] = {1.0f, -2.0f, 3.0f, 0.5f, 4.0f, -6.0f};
    const int64_t chans[2] = {3, 1}; /* per-channel (axis 1) and per-tensor */

    for (int t = 0; t < 2; t++) {
        int32_t axis = t == 0 ? 1 : -1;
        int64_t ch = chans[t], size, size2;
        qs_observer *fresh = obs_new(ctx, QS_OBSERVER_MINMAX, axis, 0);
        update(ctx, fresh, x, 2, 3);
        uint8_t *b = state_of(ctx, fresh, &size);
        uint8_t *near = with_total(b, size, ch - 1, UINT64_MAX - 1);
        qs_observer *o = NULL;
        assert_int_equal(qs_observer_deserialize(ctx, near, size, &o), QS_OK);

        /* 2 more values per channel (per-tensor: 6) pass 2^64 - 1 */
        assert_int_equal(qs_observer_update(ctx, o, x, QS_DTYPE_F32, 2, 3), QS_ERR_OVERFLOW);
        assert_non_null(strstr(qs_ctx_last_error(ctx), "2^64"));
        uint8_t *after = state_of(ctx, o, &size2);
        assert_int_equal(size2, size);
        assert_memory_equal(after, near, (size_t)size);
        free(after);
        assert_int_equal(qs_observer_merge(ctx, o, fresh), QS_ERR_OVERFLOW);
        after = state_of(ctx, o, &size2);
        assert_memory_equal(after, near, (size_t)size);
        free(after);
        /* the other direction overflows the same way, and leaves the fresh observer alone */
        assert_int_equal(qs_observer_merge(ctx, fresh, o), QS_ERR_OVERFLOW);
        after = state_of(ctx, fresh, &size2);
        assert_memory_equal(after, b, (size_t)size);
        free(after);
        qs_observer_destroy(o);

        /* room for exactly one more update: it lands at 2^64 - 2, the next one is refused */
        uint8_t *edge = with_total(b, size, ch - 1, UINT64_MAX - (t == 0 ? 3 : 7));
        o = NULL;
        assert_int_equal(qs_observer_deserialize(ctx, edge, size, &o), QS_OK);
        update(ctx, o, x, 2, 3);
        uint64_t finite = 0, nan = 0, inf = 0;
        assert_int_equal(qs_observer_counts(o, ch - 1, &finite, &nan, &inf), QS_OK);
        assert_true(finite == UINT64_MAX - 1);
        uint8_t *full = state_of(ctx, o, &size2);
        qs_observer *back = NULL;
        assert_int_equal(qs_observer_deserialize(ctx, full, size2, &back), QS_OK);
        assert_int_equal(qs_observer_update(ctx, o, x, QS_DTYPE_F32, 2, 3), QS_ERR_OVERFLOW);
        qs_observer_destroy(back);
        qs_observer_destroy(o);
        free(full);
        free(edge);
        free(near);
        free(b);
        qs_observer_destroy(fresh);
    }
    qs_ctx_destroy(ctx);
}

/* Per-channel searches at the bound, on the worst inputs (every bin filled, the first candidate
 * at bin 1, the FP8 E4M3 target whose fake quantizer is the slowest). They only have to finish;
 * the results are still checked. Channel 0 holds one value at the centre of each bin (k = 0):
 * entropy's last candidate has P = Q exactly, KL = 0, so it returns N; MSE INT8 is compared with
 * a direct evaluation of every candidate. */
static void test_search_at_max_bins(void **state)
{
    (void)state;
    qs_ctx *ctx = t_ctx();
    const int32_t nb = QS_OBSERVER_SEARCH_MAX_BINS;
    float *x = malloc((size_t)2 * nb * sizeof *x);
    t_rng r = {5};
    assert_non_null(x);
    for (int32_t j = 0; j < nb; j++) {
        x[j] = (float)j + 0.5f;
        x[nb + j] = (float)(t_unif(&r) * nb);
    }
    static const int32_t targets[] = {QS_CALIB_INT8_SYM, QS_CALIB_INT8_SYM, QS_CALIB_FP8_E4M3};
    for (int t = 0; t < 3; t++) {
        qs_observer_params p;
        qs_observer *o = NULL;
        float am[2];
        qs_observer_params_init(&p, t == 0 ? QS_OBSERVER_ENTROPY : QS_OBSERVER_MSE);
        p.axis = 0;
        p.num_bins = nb;
        p.start_bin = 1;
        p.num_levels = 1;
        p.target = targets[t];
        assert_int_equal(qs_observer_create(ctx, &p, &o), QS_OK);
        update(ctx, o, x, 2, nb);
        assert_int_equal(qs_observer_amax(ctx, o, am, 2), QS_OK);
        for (int c = 0; c < 2; c++)
            assert_true(am[c] > 0.0f && am[c] <= (float)nb);
        if (t == 0)
            assert_true(am[0] == (float)nb);
        if (t == 1) {
            double best = INFINITY;
            int best_a = -1;
            for (int a = 1; a < nb; a++) {
                double amax = a + 0.5, err = 0.0;
                for (int j = 0; j < nb; j++) {
                    double cj = j + 0.5, q = nearbyint(cj * (127.0 / amax));
                    double d = (q > 127 ? 127 : q) * (amax / 127.0) - cj;
                    err += d * d;
                }
                if (err / nb < best) {
                    best = err / nb;
                    best_a = a;
                }
            }
            assert_true(am[0] == (float)best_a + 0.5f);
        }
        qs_observer_destroy(o);
    }
    free(x);
    qs_ctx_destroy(ctx);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_hist_hand),
        cmocka_unit_test(test_merge_exact_any_order),
        cmocka_unit_test(test_threads_per_tensor),
        cmocka_unit_test(test_half_inputs),
        cmocka_unit_test(test_serialize_roundtrip_and_corruption),
        cmocka_unit_test(test_entropy_hand),
        cmocka_unit_test(test_percentile_hand),
        cmocka_unit_test(test_mse_matches_direct_search),
        cmocka_unit_test(test_sqnr_outlier_channels),
        cmocka_unit_test(test_nonfinite_ignored_and_counted),
        cmocka_unit_test(test_moving_average),
        cmocka_unit_test(test_qparams_hand),
        cmocka_unit_test(test_apply_matches_quantize),
        cmocka_unit_test(test_dynamic),
        cmocka_unit_test(test_sumsq),
        cmocka_unit_test(test_errors),
        cmocka_unit_test(test_search_bins_bound_create),
        cmocka_unit_test(test_search_bins_bound_deserialize),
        cmocka_unit_test(test_counter_wrap_refused),
        cmocka_unit_test(test_search_at_max_bins),
        cmocka_unit_test(test_allocator),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
