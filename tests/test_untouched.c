/* SPDX-License-Identifier: MIT */
/*
 * "Nothing is written on error" for the public functions whose other tests check only the status:
 * every output of a failing call (buffers, out-parameters, the observer's state) still holds its
 * canary afterwards. SECURITY.md's audit table points here for these functions; the others are
 * covered where their features are tested (test_api, test_calib, test_sparse, test_sparse_format)
 * and by the fuzz targets.
 */
#include "common.h"
#include "qsparse/calib.h"
#include "qsparse/sparse.h"

static qs_ctx *new_ctx(void)
{
    qs_ctx *ctx = NULL;
    assert_int_equal(qs_ctx_create(NULL, &ctx), QS_OK);
    return ctx;
}

/* A status check plus "every listed canary buffer untouched". */
#define EXPECT_UNTOUCHED(call, want, ...)                                                        \
    do {                                                                                         \
        assert_int_equal((call), (want));                                                        \
        const t_buf *bufs_[] = {__VA_ARGS__};                                                    \
        for (size_t i_ = 0; i_ < sizeof bufs_ / sizeof bufs_[0]; i_++)                           \
            if (!t_buf_untouched(bufs_[i_]))                                                     \
                fail_msg("%s wrote output %zu and failed", #call, i_);                          \
    } while (0)

#define OUT(type, name) t_buf name = t_buf_new(sizeof(type))
#define P(b, type) ((type *)(b).p)

static void test_context_queries(void **state)
{
    (void)state;
    qs_ctx *ctx = new_ctx();
    OUT(qs_ctx *, out);
    OUT(int64_t, value);
    OUT(const char *, slot);
    OUT(const char *, impl);
    qs_ctx_params p;
    qs_ctx_params_init(&p);
    p.reserved[3] = 1;
    EXPECT_UNTOUCHED(qs_ctx_create(&p, P(out, qs_ctx *)), QS_ERR_INVALID_ARG, &out);
    qs_ctx_params_init(&p);
    p.num_threads = -2;
    EXPECT_UNTOUCHED(qs_ctx_create(&p, P(out, qs_ctx *)), QS_ERR_INVALID_ARG, &out);
    EXPECT_UNTOUCHED(qs_ctx_get(ctx, 999, P(value, int64_t)), QS_ERR_INVALID_ARG, &value);
    EXPECT_UNTOUCHED(qs_ctx_get(NULL, QS_PARAM_NUM_THREADS, P(value, int64_t)),
                     QS_ERR_INVALID_ARG, &value);
    int32_t n = qs_ctx_kernel_count(ctx);
    EXPECT_UNTOUCHED(qs_ctx_kernel_info(ctx, n, P(slot, const char *), P(impl, const char *)),
                     QS_ERR_INVALID_ARG, &slot, &impl);
    EXPECT_UNTOUCHED(qs_ctx_kernel_info(ctx, -1, P(slot, const char *), P(impl, const char *)),
                     QS_ERR_INVALID_ARG, &slot, &impl);
    t_buf_free(&out), t_buf_free(&value), t_buf_free(&slot), t_buf_free(&impl);
    qs_ctx_destroy(ctx);
}

static void test_size_queries(void **state)
{
    (void)state;
    OUT(int64_t, bytes);
    OUT(int64_t, vb);
    OUT(int64_t, mc);
    qs_quant_params p;
    qs_quant_params_init(&p, QS_FORMAT_NF4);
    EXPECT_UNTOUCHED(qs_quant_size(&p, -1, 8, QS_PLANE_DATA, P(bytes, int64_t)),
                     QS_ERR_INVALID_ARG, &bytes);
    EXPECT_UNTOUCHED(qs_quant_size(&p, INT64_MAX, INT64_MAX, QS_PLANE_DATA, P(bytes, int64_t)),
                     QS_ERR_OVERFLOW, &bytes);
    EXPECT_UNTOUCHED(qs_quant_size(&p, 1, 8, QS_PLANE_COUNT, P(bytes, int64_t)),
                     QS_ERR_INVALID_ARG, &bytes);
    qs_quant_params_init(&p, QS_FORMAT_INT8);
    p.granularity = QS_GRAN_GROUP;
    p.block_size = 3;
    EXPECT_UNTOUCHED(qs_quant_size(&p, 2, 8, QS_PLANE_SCALE, P(bytes, int64_t)), QS_ERR_SHAPE,
                     &bytes);
    EXPECT_UNTOUCHED(qs_sp24_quant_size(&p, 2, 16, QS_PLANE_SCALE, P(bytes, int64_t)),
                     QS_ERR_SHAPE, &bytes);
    qs_quant_params_init(&p, QS_FORMAT_NF4);
    EXPECT_UNTOUCHED(qs_sp24_quant_size(&p, 2, 6, QS_PLANE_DATA, P(bytes, int64_t)),
                     QS_ERR_SHAPE, &bytes);
    EXPECT_UNTOUCHED(qs_sp24_size(QS_DTYPE_F32, 2, 6, P(vb, int64_t), P(mc, int64_t)),
                     QS_ERR_SHAPE, &vb, &mc);
    EXPECT_UNTOUCHED(qs_sp24_size(QS_DTYPE_F32, INT64_MAX, 8, P(vb, int64_t), P(mc, int64_t)),
                     QS_ERR_OVERFLOW, &vb, &mc);
    EXPECT_UNTOUCHED(qs_sp24_size(7, 2, 8, P(vb, int64_t), P(mc, int64_t)), QS_ERR_INVALID_ARG,
                     &vb, &mc);
    t_buf_free(&bytes), t_buf_free(&vb), t_buf_free(&mc);
}

/* A per-channel histogram observer of 4 channels that has seen 12 values. */
static qs_observer *observer4(qs_ctx *ctx, int32_t method)
{
    qs_observer_params p;
    qs_observer_params_init(&p, method);
    p.axis = 1;
    p.num_bins = 16;
    p.start_bin = 4;
    p.num_levels = 4;
    qs_observer *o = NULL;
    assert_int_equal(qs_observer_create(ctx, &p, &o), QS_OK);
    float x[12] = {1, -2, 3, 4, 5, -6, 7, 8, 0.5f, 10, 11, -12};
    assert_int_equal(qs_observer_update(ctx, o, x, QS_DTYPE_F32, 3, 4), QS_OK);
    return o;
}

static void test_observer_outputs(void **state)
{
    (void)state;
    qs_ctx *ctx = new_ctx();
    qs_observer *o = observer4(ctx, QS_OBSERVER_PERCENTILE);
    qs_observer *mm = observer4(ctx, QS_OBSERVER_MINMAX);
    t_buf f = t_buf_new(4 * 4), g = t_buf_new(4 * 4), zp = t_buf_new(4 * 4);
    t_buf counts = t_buf_new(16 * 8);
    OUT(int32_t, width);
    OUT(qs_observer_params, params);
    OUT(int64_t, i64);
    OUT(uint64_t, u1);
    OUT(uint64_t, u2);
    OUT(uint64_t, u3);
    OUT(qs_observer *, out);

    EXPECT_UNTOUCHED(qs_observer_get_params(NULL, P(params, qs_observer_params)),
                     QS_ERR_INVALID_ARG, &params);
    EXPECT_UNTOUCHED(qs_observer_channels(NULL, P(i64, int64_t)), QS_ERR_INVALID_ARG, &i64);
    EXPECT_UNTOUCHED(qs_observer_serialized_size(NULL, P(i64, int64_t)), QS_ERR_INVALID_ARG, &i64);
    EXPECT_UNTOUCHED(qs_observer_amax(ctx, o, P(f, float), 3), QS_ERR_BUFFER_TOO_SMALL, &f);
    EXPECT_UNTOUCHED(qs_observer_range(ctx, o, P(f, float), P(g, float), 3),
                     QS_ERR_BUFFER_TOO_SMALL, &f, &g);
    EXPECT_UNTOUCHED(qs_observer_counts(o, 4, P(u1, uint64_t), P(u2, uint64_t), P(u3, uint64_t)),
                     QS_ERR_INVALID_ARG, &u1, &u2, &u3);
    EXPECT_UNTOUCHED(qs_observer_histogram(o, 0, P(counts, uint64_t), 15, P(width, int32_t)),
                     QS_ERR_BUFFER_TOO_SMALL, &counts, &width);
    EXPECT_UNTOUCHED(qs_observer_histogram(o, 4, P(counts, uint64_t), 16, P(width, int32_t)),
                     QS_ERR_INVALID_ARG, &counts, &width);
    EXPECT_UNTOUCHED(qs_observer_histogram(mm, 0, P(counts, uint64_t), 16, P(width, int32_t)),
                     QS_ERR_UNSUPPORTED, &counts, &width);
    EXPECT_UNTOUCHED(qs_observer_qparams(ctx, o, 99, P(f, float), P(zp, int32_t), 4),
                     QS_ERR_INVALID_ARG, &f, &zp);
    EXPECT_UNTOUCHED(qs_observer_qparams(ctx, o, QS_CALIB_INT8_ASYM, P(f, float), P(zp, int32_t),
                                         3), QS_ERR_BUFFER_TOO_SMALL, &f, &zp);
    uint8_t junk[72] = {'Q', 'S', 'O', 'B', 1}; /* version 1, bad checksum */
    EXPECT_UNTOUCHED(qs_observer_deserialize(ctx, junk, sizeof junk, P(out, qs_observer *)),
                     QS_ERR_BAD_DATA, &out);
    EXPECT_UNTOUCHED(qs_observer_deserialize(ctx, junk, -1, P(out, qs_observer *)),
                     QS_ERR_INVALID_ARG, &out);

    t_buf_free(&f), t_buf_free(&g), t_buf_free(&zp), t_buf_free(&counts), t_buf_free(&width);
    t_buf_free(&params), t_buf_free(&i64), t_buf_free(&u1), t_buf_free(&u2), t_buf_free(&u3);
    t_buf_free(&out);
    qs_observer_destroy(o);
    qs_observer_destroy(mm);
    qs_ctx_destroy(ctx);
}

static void test_activation_stats(void **state)
{
    (void)state;
    qs_ctx *ctx = new_ctx();
    double src[4] = {1, 2, 3, 4};
    t_buf d = t_buf_new(4 * 8), n = t_buf_new(4 * 4);
    EXPECT_UNTOUCHED(qs_act_sumsq_merge(ctx, P(d, double), NULL, 4), QS_ERR_INVALID_ARG, &d);
    EXPECT_UNTOUCHED(qs_act_sumsq_merge(ctx, P(d, double), src, -1), QS_ERR_INVALID_ARG, &d);
    EXPECT_UNTOUCHED(qs_act_norms(ctx, NULL, 4, P(n, float)), QS_ERR_INVALID_ARG, &n);
    EXPECT_UNTOUCHED(qs_act_norms(ctx, src, -1, P(n, float)), QS_ERR_INVALID_ARG, &n);
    t_buf_free(&d), t_buf_free(&n);
    qs_ctx_destroy(ctx);
}

static void test_sparse_outputs(void **state)
{
    (void)state;
    qs_ctx *ctx = new_ctx();
    float w[2 * 8] = {1, 2, 0, 0, 0, 3, 0, 4, 5, 0, 6, 0, 0, 0, 7, 8};
    float w3[8] = {1, 2, 3, 0, 0, 0, 1, 1}; /* three kept in the first group: not 2:4 */
    uint8_t a[16] = {1}, b[16] = {0};
    OUT(int64_t, first_bad);
    OUT(int64_t, flips);
    t_buf perm = t_buf_new(8 * 4), before = t_buf_new(8), after = t_buf_new(8);
    t_buf dst = t_buf_new(16 * 4), meta = t_buf_new(2 * 2);

    EXPECT_UNTOUCHED(qs_nm_check(ctx, w, QS_DTYPE_F32, 2, 6, 2, 4, 0, P(first_bad, int64_t)),
                     QS_ERR_SHAPE, &first_bad);
    EXPECT_UNTOUCHED(qs_nm_check(ctx, w, QS_DTYPE_F32, 2, 8, 2, 4, 1, P(first_bad, int64_t)),
                     QS_ERR_SHAPE, &first_bad);
    EXPECT_UNTOUCHED(qs_nm_check(ctx, NULL, QS_DTYPE_F32, 2, 8, 2, 4, 0, P(first_bad, int64_t)),
                     QS_ERR_INVALID_ARG, &first_bad);
    EXPECT_UNTOUCHED(qs_nm_mask_flips(ctx, a, NULL, 16, P(flips, int64_t)), QS_ERR_INVALID_ARG,
                     &flips);
    EXPECT_UNTOUCHED(qs_nm_mask_flips(ctx, a, b, -1, P(flips, int64_t)), QS_ERR_INVALID_ARG,
                     &flips);
    EXPECT_UNTOUCHED(qs_sp24_permute_search(ctx, w, 2, 6, NULL, 0, 0, 1, P(perm, int32_t), 6,
                                            P(before, double), P(after, double)),
                     QS_ERR_SHAPE, &perm, &before, &after);
    EXPECT_UNTOUCHED(qs_sp24_permute_search(ctx, w, 2, 8, NULL, 0, 0, 1, P(perm, int32_t), 7,
                                            P(before, double), P(after, double)),
                     QS_ERR_BUFFER_TOO_SMALL, &perm, &before, &after);
    EXPECT_UNTOUCHED(qs_nm_apply_mask(ctx, w, 9, a, 16, P(dst, float), 64), QS_ERR_INVALID_ARG,
                     &dst);

    /* sp24 quantize: a tensor that is not 2:4, then a short plane; sp24 dequantize: bad meta. */
    qs_quant_params p;
    qs_quant_params_init(&p, QS_FORMAT_FP8_E4M3);
    int64_t db = 0, sb = 0;
    assert_int_equal(qs_sp24_quant_size(&p, 1, 8, QS_PLANE_DATA, &db), QS_OK);
    assert_int_equal(qs_sp24_quant_size(&p, 1, 8, QS_PLANE_SCALE, &sb), QS_OK);
    t_buf qd = t_buf_new((size_t)db), qsb = t_buf_new((size_t)sb);
    qs_qtensor q;
    memset(&q, 0, sizeof q);
    q.data = qd.p, q.data_bytes = db, q.scale = qsb.p, q.scale_bytes = sb;
    EXPECT_UNTOUCHED(qs_sp24_quantize(ctx, &p, w3, QS_DTYPE_F32, 1, 8, NULL, &q,
                                      P(meta, uint16_t), 1),
                     QS_ERR_BAD_DATA, &qd, &qsb, &meta);
    q.scale_bytes = sb - 1;
    EXPECT_UNTOUCHED(qs_sp24_quantize(ctx, &p, w, QS_DTYPE_F32, 1, 8, NULL, &q,
                                      P(meta, uint16_t), 1),
                     QS_ERR_BUFFER_TOO_SMALL, &qd, &qsb, &meta);
    q.scale_bytes = sb;
    assert_int_equal(qs_sp24_quantize(ctx, &p, w, QS_DTYPE_F32, 1, 8, NULL, &q, P(meta, uint16_t),
                                      1), QS_OK);
    uint16_t bad_meta[1] = {0x55}; /* code 5 is not one of the six */
    EXPECT_UNTOUCHED(qs_sp24_dequantize(ctx, &p, &q, bad_meta, 1, 1, 8, P(dst, float),
                                        QS_DTYPE_F32, 32),
                     QS_ERR_BAD_DATA, &dst);
    EXPECT_UNTOUCHED(qs_sp24_dequantize(ctx, &p, &q, P(meta, uint16_t), 1, 1, 8, P(dst, float),
                                        QS_DTYPE_F32, 31),
                     QS_ERR_BUFFER_TOO_SMALL, &dst);

    t_buf_free(&first_bad), t_buf_free(&flips), t_buf_free(&perm), t_buf_free(&before);
    t_buf_free(&after), t_buf_free(&dst), t_buf_free(&meta), t_buf_free(&qd), t_buf_free(&qsb);
    qs_ctx_destroy(ctx);
}

/* The descriptive queries that came with the format traits, the tier table and the backend
 * seam: a refused index, format, shape or plane leaves the struct the caller passed untouched. */
static void test_info_queries(void **state)
{
    (void)state;
    qs_ctx *ctx = new_ctx();
    OUT(qs_format_info, fi);
    OUT(qs_isa_tier, tier);
    OUT(qs_plane_info, plane);
    OUT(qs_ctx *, out);

    EXPECT_UNTOUCHED(qs_format_info_get(0, P(fi, qs_format_info)), QS_ERR_INVALID_ARG, &fi);
    EXPECT_UNTOUCHED(qs_format_info_get(qs_format_count() + 1, P(fi, qs_format_info)),
                     QS_ERR_INVALID_ARG, &fi);
    EXPECT_UNTOUCHED(qs_isa_tier_info(-1, P(tier, qs_isa_tier)), QS_ERR_INVALID_ARG, &tier);
    EXPECT_UNTOUCHED(qs_isa_tier_info(qs_isa_tier_count(), P(tier, qs_isa_tier)),
                     QS_ERR_INVALID_ARG, &tier);

    qs_quant_params p;
    qs_quant_params_init(&p, QS_FORMAT_INT8);
    p.granularity = QS_GRAN_GROUP;
    p.block_size = 3; /* does not divide 8 */
    EXPECT_UNTOUCHED(qs_quant_plane_info(ctx, &p, 2, 8, QS_PLANE_SCALE, P(plane, qs_plane_info)),
                     QS_ERR_SHAPE, &plane);
    EXPECT_UNTOUCHED(qs_quant_plane_info(NULL, &p, 2, 8, QS_PLANE_DATA, P(plane, qs_plane_info)),
                     QS_ERR_SHAPE, &plane);
    qs_quant_params_init(&p, QS_FORMAT_NF4);
    EXPECT_UNTOUCHED(qs_quant_plane_info(ctx, &p, INT64_MAX, INT64_MAX, QS_PLANE_DATA,
                                         P(plane, qs_plane_info)),
                     QS_ERR_OVERFLOW, &plane);
    EXPECT_UNTOUCHED(qs_quant_plane_info(ctx, &p, -1, 8, QS_PLANE_DATA, P(plane, qs_plane_info)),
                     QS_ERR_INVALID_ARG, &plane);
    EXPECT_UNTOUCHED(qs_quant_plane_info(ctx, &p, 2, 8, QS_PLANE_COUNT, P(plane, qs_plane_info)),
                     QS_ERR_INVALID_ARG, &plane);
    EXPECT_UNTOUCHED(qs_quant_plane_info(ctx, NULL, 2, 8, QS_PLANE_DATA, P(plane, qs_plane_info)),
                     QS_ERR_INVALID_ARG, &plane);

    /* A backend that cannot run here: only where no CUDA plugin is usable (the usual case; the
     * plugins themselves are test_backend.c's). */
    if (!qs_backend_available(QS_BACKEND_CUDA)) {
        qs_ctx_params cp;
        qs_ctx_params_init(&cp);
        cp.backend = QS_BACKEND_CUDA;
        EXPECT_UNTOUCHED(qs_ctx_create(&cp, P(out, qs_ctx *)), QS_ERR_BACKEND, &out);
    }
    qs_ctx_params cp;
    qs_ctx_params_init(&cp);
    cp.backend = 7; /* no such backend */
    EXPECT_UNTOUCHED(qs_ctx_create(&cp, P(out, qs_ctx *)), QS_ERR_INVALID_ARG, &out);

    t_buf_free(&fi), t_buf_free(&tier), t_buf_free(&plane), t_buf_free(&out);
    qs_ctx_destroy(ctx);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_context_queries),
        cmocka_unit_test(test_size_queries),
        cmocka_unit_test(test_info_queries),
        cmocka_unit_test(test_observer_outputs),
        cmocka_unit_test(test_activation_stats),
        cmocka_unit_test(test_sparse_outputs),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
