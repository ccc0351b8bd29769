/* SPDX-License-Identifier: MIT */
/*
 * The public API contract (include/qsparse.h): every status code that the API can
 * return is provoked through it (null context / params / source / planes, negative sizes, unknown
 * formats and dtypes, non-zero reserved fields, each plane one byte short, sizes that overflow
 * int64, the non-finite reject policy, a failing allocator), with canary buffers proving that
 * nothing was written on error and a non-empty qs_ctx_last_error; qs_quant_size for every format
 * against sizes worked out by hand; names <-> codes round trips; qs_ctx_set / qs_ctx_get.
 * QS_ERR_UNSUPPORTED and QS_ERR_BAD_DATA come from the observer API (qsparse/calib.h), the only
 * public calls that return them; QS_ERR_BACKEND comes from qs_ctx_create (tests/test_backend.c).
 */
#include "common.h"
#include "quant_helpers.h"
#include "qsparse/profile.h"

/* A tensor of every format with its canary-guarded planes; rows x cols = 3 x 45. */
enum { ROWS = 3, COLS = 45, N = ROWS * COLS };

static float src_f32[N];

/* Every format and plane combination, built once by setup() (param_sets). */
static qs_quant_params sets[32];
static int n_sets;

/* Parameter sets covering every format and plane combination. */
static int param_sets(qs_quant_params *out)
{
    int k = 0;
    for (int32_t f = 1; f <= qs_format_count(); f++)
        out[k++] = params(f);
    out[k] = params(QS_FORMAT_NF4), out[k++].double_quant = 1;
    out[k] = params(QS_FORMAT_FP4), out[k++].double_quant = 1;
    out[k] = params(QS_FORMAT_INT8), out[k++].symmetric = 0;
    out[k] = params(QS_FORMAT_INT8), out[k].symmetric = 0, out[k].granularity = QS_GRAN_GROUP;
    out[k++].block_size = 15;
    out[k] = params(QS_FORMAT_INT8), out[k].symmetric = 0, out[k++].granularity = QS_GRAN_TENSOR;
    out[k] = params(QS_FORMAT_MXFP4), out[k++].scale_rounding = QS_MX_SCALE_RCEIL;
    out[k] = params(QS_FORMAT_NVFP4), out[k++].scale = 0.25f;
    return k;
}

static int all_untouched(const tq *t)
{
    for (int i = 0; i < QS_PLANE_COUNT; i++)
        if (!t_buf_untouched(&t->plane[i]))
            return 0;
    return 1;
}

/* The call failed with `want`, said why, and wrote nothing (planes, s_global, offset). */
static void expect_fail(qs_ctx *ctx, qs_status got, qs_status want, const tq *t)
{
    if (got != want) {
        print_error("status %d (%s), want %d (%s); last error \"%s\"\n", got, qs_status_str(got),
                    want, qs_status_str(want), qs_ctx_last_error(ctx));
        fail();
    }
    assert_true(strlen(qs_ctx_last_error(ctx)) > 0);
    if (t) {
        assert_true(all_untouched(t));
        assert_int_equal(t_bits(t->q.global_scale), 0x7FC00001u);
        assert_int_equal(t_bits(t->q.nested_offset), 0x7FC00001u);
    }
}

/* A ROWS x COLS tensor of `p` whose scalar fields hold sentinels that an error must leave. */
static void tq_new_marked(tq *t, const qs_quant_params *p)
{
    tq_new(t, p, ROWS, COLS);
    t->q.global_scale = t_f32_from_bits(0x7FC00001u); /* sentinels: must survive an error */
    t->q.nested_offset = t_f32_from_bits(0x7FC00001u);
}

/* The failed calls wrote nothing to dst either; then release dst and the tensor. */
static void free_untouched(t_buf *dst, tq *t)
{
    assert_true(t_buf_untouched(dst));
    t_buf_free(dst);
    tq_free(t);
}

static int setup(void **state)
{
    t_rng rng = {99};
    (void)state;
    for (int i = 0; i < N; i++)
        src_f32[i] = (float)t_normal(&rng);
    n_sets = param_sets(sets);
    return 0;
}

/* ---- sizes -------------------------------------------------------------------------------- */

static void test_quant_size(void **state)
{
    (void)state;
    /* 3 x 45, n = 135: expected bytes of data, scale, zero_point, nested_scale */
    static const struct {
        int32_t format, granularity, symmetric, double_quant, block;
        int64_t bytes[4];
    } cases[] = {
        {QS_FORMAT_NF4, 0, 1, 0, 64, {68, 12, 0, 0}}, /* 3 blocks of 64 over 135 */
        {QS_FORMAT_NF4, 0, 1, 1, 64, {68, 3, 0, 4}},  /* codes + one nested absmax */
        {QS_FORMAT_FP4, 0, 1, 0, 32, {68, 20, 0, 0}}, /* 5 blocks of 32 */
        {QS_FORMAT_FP4, 0, 1, 0, 2, {68, 272, 0, 0}}, /* 68 blocks of 2 */
        {QS_FORMAT_INT8, QS_GRAN_ROW, 1, 0, 0, {135, 12, 0, 0}},
        {QS_FORMAT_INT8, QS_GRAN_ROW, 0, 0, 0, {135, 12, 3, 0}},
        {QS_FORMAT_INT8, QS_GRAN_TENSOR, 1, 0, 0, {135, 4, 0, 0}},
        {QS_FORMAT_INT8, QS_GRAN_TENSOR, 0, 0, 0, {135, 4, 1, 0}},
        {QS_FORMAT_INT8, QS_GRAN_GROUP, 0, 0, 15, {135, 36, 9, 0}},
        {QS_FORMAT_INT8, QS_GRAN_GROUP, 1, 0, 45, {135, 12, 0, 0}},
        {QS_FORMAT_LLM_INT8, QS_GRAN_ROW, 1, 0, 0, {135, 12, 0, 0}},
        {QS_FORMAT_FP8_E4M3, QS_GRAN_ROW, 1, 0, 0, {135, 4, 0, 0}},
        {QS_FORMAT_FP8_E5M2, QS_GRAN_ROW, 1, 0, 0, {135, 4, 0, 0}},
        {QS_FORMAT_MXFP4, QS_GRAN_ROW, 1, 0, 32, {69, 6, 0, 0}}, /* 23 bytes, 2 blocks per row */
        {QS_FORMAT_MXFP8, QS_GRAN_ROW, 1, 0, 32, {135, 6, 0, 0}},
        {QS_FORMAT_NVFP4, QS_GRAN_ROW, 1, 0, 16, {69, 9, 0, 0}}, /* 3 blocks of 16 per row */
    };

    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
        qs_quant_params p = params(cases[i].format);
        p.granularity = cases[i].granularity;
        p.symmetric = cases[i].symmetric;
        p.double_quant = cases[i].double_quant;
        if (cases[i].block)
            p.block_size = cases[i].block;
        for (int pl = 0; pl < QS_PLANE_COUNT; pl++) {
            int64_t b = -7;
            assert_int_equal(qs_quant_size(&p, ROWS, COLS, pl, &b), QS_OK);
            if (b != cases[i].bytes[pl]) {
                print_error("case %zu plane %d: %lld bytes, want %lld\n", i, pl, (long long)b,
                            (long long)cases[i].bytes[pl]);
                fail();
            }
            /* an empty tensor has no codes; only per-tensor scales remain */
            assert_int_equal(qs_quant_size(&p, 0, COLS, pl, &b), QS_OK);
            if (pl == QS_PLANE_DATA || cases[i].bytes[pl] > 4)
                assert_int_equal(b, 0);
        }
    }
    /* 1-D and odd sizes of the block formats */
    {
        qs_quant_params p = params(QS_FORMAT_NF4);
        int64_t b;
        assert_int_equal(qs_quant_size(&p, 1, 1, QS_PLANE_DATA, &b), QS_OK);
        assert_int_equal(b, 1);
        assert_int_equal(qs_quant_size(&p, 1, 65, QS_PLANE_SCALE, &b), QS_OK);
        assert_int_equal(b, 8);
        p = params(QS_FORMAT_MXFP4);
        assert_int_equal(qs_quant_size(&p, 7, 1, QS_PLANE_DATA, &b), QS_OK);
        assert_int_equal(b, 7); /* one byte per row: rows never share a byte */
        assert_int_equal(qs_quant_size(&p, 7, 33, QS_PLANE_SCALE, &b), QS_OK);
        assert_int_equal(b, 14);
    }
    /* bad arguments of the query itself */
    {
        qs_quant_params p = params(QS_FORMAT_NF4);
        int64_t b = 5;
        assert_int_equal(qs_quant_size(NULL, 1, 1, 0, &b), QS_ERR_INVALID_ARG);
        assert_int_equal(qs_quant_size(&p, 1, 1, 0, NULL), QS_ERR_INVALID_ARG);
        assert_int_equal(qs_quant_size(&p, 1, 1, -1, &b), QS_ERR_INVALID_ARG);
        assert_int_equal(qs_quant_size(&p, 1, 1, QS_PLANE_COUNT, &b), QS_ERR_INVALID_ARG);
        assert_int_equal(qs_quant_size(&p, -1, 1, 0, &b), QS_ERR_INVALID_ARG);
        assert_int_equal(qs_quant_size(&p, 1, -1, 0, &b), QS_ERR_INVALID_ARG);
        assert_int_equal(qs_quant_size(&p, INT64_C(1) << 32, INT64_C(1) << 32, 0, &b),
                         QS_ERR_OVERFLOW);
        assert_int_equal(qs_quant_size(&p, INT64_C(1) << 31, INT64_C(1) << 31, 0, &b),
                         QS_ERR_OVERFLOW); /* n fits, 4 n does not */
        assert_int_equal(qs_quant_size(&p, INT64_MAX, 1, 0, &b), QS_ERR_OVERFLOW);
        assert_int_equal(b, 5);
        p.format = 0;
        assert_int_equal(qs_quant_size(&p, 1, 1, 0, &b), QS_ERR_INVALID_ARG);
        p.format = qs_format_count() + 1;
        assert_int_equal(qs_quant_size(&p, 1, 1, 0, &b), QS_ERR_INVALID_ARG);
    }
}

/* qs_quant_plane_info: element type, shape and size of each plane, worked by hand for 3 x 45,
 * always equal to qs_quant_size; failures leave *info alone and say why in the context. */
static void test_plane_info(void **state)
{
    (void)state;
#define INFO(elem, bits, ndim, s0, s1, values, bytes)                                              \
    {QS_ELEM_##elem, bits, ndim, 0, {s0, s1}, values, bytes, {0}}
    enum { T = QS_GRAN_TENSOR, R = QS_GRAN_ROW, G = QS_GRAN_GROUP };
    enum { D = QS_PLANE_DATA, S = QS_PLANE_SCALE, Z = QS_PLANE_ZERO_POINT };
    enum { N = QS_PLANE_NESTED_SCALE };
    static const struct {
        int32_t format, granularity, symmetric, double_quant, block, plane;
        qs_plane_info want;
    } cases[] = {
        {QS_FORMAT_NF4, R, 1, 0, 64, D, INFO(U8, 4, 1, 68, 1, 135, 68)},
        {QS_FORMAT_NF4, R, 1, 0, 64, S, INFO(F32, 32, 1, 3, 1, 3, 12)},
        {QS_FORMAT_NF4, R, 1, 0, 64, N, INFO(NONE, 0, 0, 0, 1, 0, 0)},
        {QS_FORMAT_FP4, R, 1, 1, 64, S, INFO(U8, 8, 1, 3, 1, 3, 3)},
        {QS_FORMAT_FP4, R, 1, 1, 64, N, INFO(F32, 32, 1, 1, 1, 1, 4)},
        {QS_FORMAT_INT8, G, 0, 0, 15, D, INFO(I8, 8, 2, 3, 45, 135, 135)},
        {QS_FORMAT_INT8, G, 0, 0, 15, S, INFO(F32, 32, 2, 3, 3, 9, 36)},
        {QS_FORMAT_INT8, G, 0, 0, 15, Z, INFO(I8, 8, 2, 3, 3, 9, 9)},
        {QS_FORMAT_INT8, R, 1, 0, 0, Z, INFO(NONE, 0, 0, 0, 1, 0, 0)},
        {QS_FORMAT_INT8, T, 0, 0, 0, Z, INFO(I8, 8, 1, 1, 1, 1, 1)},
        {QS_FORMAT_LLM_INT8, R, 1, 0, 0, S, INFO(F32, 32, 1, 3, 1, 3, 12)},
        {QS_FORMAT_FP8_E5M2, R, 1, 0, 0, D, INFO(U8, 8, 2, 3, 45, 135, 135)},
        {QS_FORMAT_FP8_E4M3, R, 1, 0, 0, S, INFO(F32, 32, 1, 1, 1, 1, 4)},
        {QS_FORMAT_MXFP4, R, 1, 0, 32, D, INFO(U8, 4, 2, 3, 23, 135, 69)},
        {QS_FORMAT_MXFP4, R, 1, 0, 32, S, INFO(U8, 8, 2, 3, 2, 6, 6)},
        {QS_FORMAT_MXFP8, R, 1, 0, 32, D, INFO(U8, 8, 2, 3, 45, 135, 135)},
        {QS_FORMAT_NVFP4, R, 1, 0, 16, S, INFO(U8, 8, 2, 3, 3, 9, 9)},
    };
#undef INFO
    qs_ctx *ctx = t_ctx();

    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
        qs_quant_params p = params(cases[i].format);
        qs_plane_info got;
        int64_t bytes;
        p.granularity = cases[i].granularity;
        p.symmetric = cases[i].symmetric;
        p.double_quant = cases[i].double_quant;
        if (cases[i].block)
            p.block_size = cases[i].block;
        memset(&got, 0xA5, sizeof got);
        assert_int_equal(qs_quant_plane_info(ctx, &p, ROWS, COLS, cases[i].plane, &got), QS_OK);
        if (memcmp(&got, &cases[i].want, sizeof got) != 0) {
            print_error("case %zu: elem %d bits %d ndim %d shape %lld x %lld values %lld bytes "
                        "%lld\n", i, got.elem, got.bits, got.ndim, (long long)got.shape[0],
                        (long long)got.shape[1], (long long)got.values, (long long)got.bytes);
            fail();
        }
        assert_int_equal(qs_quant_size(&p, ROWS, COLS, cases[i].plane, &bytes), QS_OK);
        assert_int_equal(bytes, got.bytes);
    }
    /* every set and plane: bytes agree with qs_quant_size and with the shape */
    for (int k = 0; k < n_sets; k++)
        for (int pl = 0; pl < QS_PLANE_COUNT; pl++) {
            static const int64_t elem_size[] = {0, 1, 1, 4};
            qs_plane_info got;
            int64_t bytes;
            assert_int_equal(qs_quant_plane_info(NULL, &sets[k], ROWS, COLS, pl, &got), QS_OK);
            assert_int_equal(qs_quant_size(&sets[k], ROWS, COLS, pl, &bytes), QS_OK);
            assert_int_equal(got.bytes, bytes);
            assert_int_equal(got.shape[0] * got.shape[1] * elem_size[got.elem], bytes);
        }
    /* failures: the reason is in the context, *info untouched */
    {
        qs_quant_params p = params(QS_FORMAT_INT8);
        qs_plane_info got, before;
        p.granularity = QS_GRAN_GROUP;
        p.block_size = 7;
        memset(&got, 0x5A, sizeof got);
        before = got;
        assert_int_equal(qs_quant_plane_info(ctx, &p, ROWS, COLS, 0, &got), QS_ERR_SHAPE);
        assert_non_null(strstr(qs_ctx_last_error(ctx), "does not divide cols 45"));
        p = params(QS_FORMAT_LLM_INT8);
        assert_int_equal(qs_quant_plane_info(ctx, &p, INT64_MAX, 0, 1, &got), QS_ERR_OVERFLOW);
        assert_non_null(strstr(qs_ctx_last_error(ctx), "overflows int64"));
        assert_int_equal(qs_quant_plane_info(ctx, &p, 1, 1, QS_PLANE_COUNT, &got),
                         QS_ERR_INVALID_ARG);
        assert_true(strlen(qs_ctx_last_error(ctx)) > 0);
        assert_int_equal(qs_quant_plane_info(ctx, &p, 1, 1, 0, NULL), QS_ERR_INVALID_ARG);
        assert_int_equal(qs_quant_plane_info(ctx, NULL, 1, 1, 0, &got), QS_ERR_INVALID_ARG);
        assert_memory_equal(&got, &before, sizeof got);
        assert_int_equal(qs_quant_plane_info(ctx, &p, 2, 3, 0, &got), QS_OK);
        assert_string_equal(qs_ctx_last_error(ctx), "");
    }
    qs_ctx_destroy(ctx);
}

/* qs_format_info_get agrees with the single-answer queries and states the options; the struct
 * layout queries report the compiled sizes and offsets. */
static void test_format_info(void **state)
{
    (void)state;
    qs_format_info fi;

    for (int32_t f = 1; f <= qs_format_count(); f++) {
        assert_int_equal(qs_format_info_get(f, &fi), QS_OK);
        assert_string_equal(fi.name, qs_format_name(f));
        assert_int_equal(fi.bits, qs_format_bits(f));
        assert_int_equal(fi.block_size, qs_format_block_size(f));
        assert_true(fi.block_min <= fi.block_max);
    }
    assert_int_equal(qs_format_info_get(QS_FORMAT_NF4, &fi), QS_OK);
    assert_int_equal(fi.blocks, QS_BLOCKS_FLAT);
    assert_int_equal(fi.options, QS_OPT_BLOCK_SIZE | QS_OPT_DOUBLE_QUANT);
    assert_int_equal(fi.block_min, 2);
    assert_int_equal(fi.block_max, 4096);
    assert_int_equal(qs_format_info_get(QS_FORMAT_NVFP4, &fi), QS_OK);
    assert_int_equal(fi.blocks, QS_BLOCKS_ROWS);
    assert_int_equal(fi.options, QS_OPT_BLOCK_SIZE | QS_OPT_SCALE);
    assert_int_equal(fi.global_scale, 1);
    assert_int_equal(fi.block_min, 16);
    assert_int_equal(fi.block_max, 16);
    assert_int_equal(qs_format_info_get(QS_FORMAT_INT8, &fi), QS_OK);
    assert_int_equal(fi.options, QS_OPT_BLOCK_SIZE | QS_OPT_GRANULARITY | QS_OPT_SYMMETRIC);
    assert_int_equal(qs_format_info_get(QS_FORMAT_LLM_INT8, &fi), QS_OK);
    assert_int_equal(fi.options, 0);
    assert_int_equal(fi.blocks, QS_BLOCKS_NONE);
    assert_int_equal(fi.global_scale, 0);
    assert_int_equal(qs_format_info_get(QS_FORMAT_MXFP8, &fi), QS_OK);
    assert_int_equal(fi.options, QS_OPT_BLOCK_SIZE | QS_OPT_SCALE_ROUNDING);
    assert_int_equal(qs_format_info_get(0, &fi), QS_ERR_INVALID_ARG);
    assert_int_equal(qs_format_info_get(qs_format_count() + 1, &fi), QS_ERR_INVALID_ARG);
    assert_int_equal(qs_format_info_get(QS_FORMAT_NF4, NULL), QS_ERR_INVALID_ARG);

    /* the layout queries bindings check their struct mirrors with */
    assert_int_equal(qs_struct_size(QS_STRUCT_QUANT_PARAMS), sizeof(qs_quant_params));
    assert_int_equal(qs_struct_size(QS_STRUCT_QTENSOR), sizeof(qs_qtensor));
    assert_int_equal(qs_struct_size(QS_STRUCT_CTX_PARAMS), sizeof(qs_ctx_params));
    assert_int_equal(qs_struct_size(QS_STRUCT_PLANE_INFO), sizeof(qs_plane_info));
    assert_int_equal(qs_struct_size(QS_STRUCT_OBSERVER_PARAMS), sizeof(qs_observer_params));
    assert_int_equal(qs_struct_size(QS_STRUCT_ISA_TIER), sizeof(qs_isa_tier));
    assert_int_equal(qs_struct_size(QS_STRUCT_MATMUL_PARAMS), sizeof(qs_matmul_params));
    assert_int_equal(qs_struct_size(QS_STRUCT_WEIGHT), sizeof(qs_weight));
    assert_int_equal(qs_struct_offset(QS_STRUCT_MATMUL_PARAMS, "threshold"),
                     offsetof(qs_matmul_params, threshold));
    assert_int_equal(qs_struct_offset(QS_STRUCT_MATMUL_PARAMS, "reserved"),
                     offsetof(qs_matmul_params, reserved));
    assert_int_equal(qs_struct_offset(QS_STRUCT_WEIGHT, "meta_count"),
                     offsetof(qs_weight, meta_count));
    assert_int_equal(qs_struct_offset(QS_STRUCT_WEIGHT, "q"), offsetof(qs_weight, q));
    assert_int_equal(qs_struct_offset(QS_STRUCT_WEIGHT, "reserved"), offsetof(qs_weight, reserved));
    assert_int_equal(qs_struct_offset(QS_STRUCT_ISA_TIER, "available"),
                     offsetof(qs_isa_tier, available));
    assert_int_equal(qs_struct_offset(QS_STRUCT_QUANT_PARAMS, "scale"),
                     offsetof(qs_quant_params, scale));
    assert_int_equal(qs_struct_offset(QS_STRUCT_QTENSOR, "nested_offset"),
                     offsetof(qs_qtensor, nested_offset));
    assert_int_equal(qs_struct_offset(QS_STRUCT_FORMAT_INFO, "options"),
                     offsetof(qs_format_info, options));
    assert_int_equal(qs_struct_offset(QS_STRUCT_QTENSOR, "no_such_field"), -1);
    assert_int_equal(qs_struct_offset(QS_STRUCT_QTENSOR, NULL), -1);
    assert_int_equal(qs_struct_size(0), -1);
    assert_int_equal(qs_struct_size(QS_STRUCT_PROFILE_ENTRY), sizeof(qs_profile_entry));
    assert_int_equal(qs_struct_offset(QS_STRUCT_PROFILE_ENTRY, "ns"), offsetof(qs_profile_entry, ns));
    assert_int_equal(qs_struct_size(QS_STRUCT_SPARSEGPT_PARAMS + 1), -1);
}

/* ---- argument errors of qs_quantize / qs_dequantize ---------------------------------------- */

static void test_null_and_negative(void **state)
{
    (void)state;
    qs_ctx *ctx = t_ctx();

    for (int k = 0; k < n_sets; k++) {
        const qs_quant_params *p = &sets[k];
        tq t;
        tq_new_marked(&t, p);
        t_buf dst = t_buf_new(N * 4);

        assert_int_equal(qs_quantize(NULL, p, src_f32, QS_DTYPE_F32, ROWS, COLS, &t.q),
                         QS_ERR_INVALID_ARG);
        assert_true(all_untouched(&t));
        expect_fail(ctx, qs_quantize(ctx, NULL, src_f32, QS_DTYPE_F32, ROWS, COLS, &t.q),
                    QS_ERR_INVALID_ARG, &t);
        expect_fail(ctx, qs_quantize(ctx, p, src_f32, QS_DTYPE_F32, ROWS, COLS, NULL),
                    QS_ERR_INVALID_ARG, &t);
        expect_fail(ctx, qs_quantize(ctx, p, NULL, QS_DTYPE_F32, ROWS, COLS, &t.q),
                    QS_ERR_INVALID_ARG, &t);
        expect_fail(ctx, qs_quantize(ctx, p, src_f32, QS_DTYPE_F32, -1, COLS, &t.q),
                    QS_ERR_INVALID_ARG, &t);
        expect_fail(ctx, qs_quantize(ctx, p, src_f32, QS_DTYPE_F32, ROWS, -COLS, &t.q),
                    QS_ERR_INVALID_ARG, &t);
        expect_fail(ctx, qs_quantize(ctx, p, src_f32, 3, ROWS, COLS, &t.q), QS_ERR_INVALID_ARG, &t);
        expect_fail(ctx, qs_quantize(ctx, p, src_f32, -1, ROWS, COLS, &t.q), QS_ERR_INVALID_ARG,
                    &t);

        assert_int_equal(qs_dequantize(NULL, p, &t.q, ROWS, COLS, dst.p, QS_DTYPE_F32, N * 4),
                         QS_ERR_INVALID_ARG);
        expect_fail(ctx, qs_dequantize(ctx, NULL, &t.q, ROWS, COLS, dst.p, QS_DTYPE_F32, N * 4),
                    QS_ERR_INVALID_ARG, &t);
        expect_fail(ctx, qs_dequantize(ctx, p, NULL, ROWS, COLS, dst.p, QS_DTYPE_F32, N * 4),
                    QS_ERR_INVALID_ARG, &t);
        expect_fail(ctx, qs_dequantize(ctx, p, &t.q, ROWS, COLS, NULL, QS_DTYPE_F32, N * 4),
                    QS_ERR_INVALID_ARG, &t);
        expect_fail(ctx, qs_dequantize(ctx, p, &t.q, -ROWS, COLS, dst.p, QS_DTYPE_F32, N * 4),
                    QS_ERR_INVALID_ARG, &t);
        expect_fail(ctx, qs_dequantize(ctx, p, &t.q, ROWS, COLS, dst.p, 7, N * 4),
                    QS_ERR_INVALID_ARG, &t);
        assert_true(t_buf_untouched(&dst));

        /* a NULL plane that the format uses */
        void **ptr[QS_PLANE_COUNT] = {&t.q.data, &t.q.scale, &t.q.zero_point, &t.q.nested_scale};
        for (int pl = 0; pl < QS_PLANE_COUNT; pl++) {
            void *save = *ptr[pl];
            if (!save)
                continue;
            *ptr[pl] = NULL;
            expect_fail(ctx, qs_quantize(ctx, p, src_f32, QS_DTYPE_F32, ROWS, COLS, &t.q),
                        QS_ERR_INVALID_ARG, &t);
            expect_fail(ctx, qs_dequantize(ctx, p, &t.q, ROWS, COLS, dst.p, QS_DTYPE_F32, N * 4),
                        QS_ERR_INVALID_ARG, &t);
            *ptr[pl] = save;
        }
        assert_true(t_buf_untouched(&dst));

        /* the same calls succeed with everything in place, and clear the last error */
        assert_int_equal(qs_quantize(ctx, p, src_f32, QS_DTYPE_F32, ROWS, COLS, &t.q), QS_OK);
        assert_string_equal(qs_ctx_last_error(ctx), "");
        tq_guards(&t);
        assert_int_equal(qs_dequantize(ctx, p, &t.q, ROWS, COLS, dst.p, QS_DTYPE_F32, N * 4),
                         QS_OK);
        assert_true(t_buf_guards_ok(&dst));
        t_buf_free(&dst);
        tq_free(&t);
    }
    /* an empty tensor needs no source and no planes */
    {
        qs_quant_params p = params(QS_FORMAT_NF4);
        qs_qtensor q;
        memset(&q, 0, sizeof q);
        assert_int_equal(qs_quantize(ctx, &p, NULL, QS_DTYPE_F32, 0, 5, &q), QS_OK);
        assert_int_equal(qs_dequantize(ctx, &p, &q, 5, 0, NULL, QS_DTYPE_F32, 0), QS_OK);
    }
    qs_ctx_destroy(ctx);
}

/* Unknown formats and parameter values, and non-zero reserved fields. */
static void test_bad_params(void **state)
{
    (void)state;
    qs_ctx *ctx = t_ctx();
    qs_quant_params good = params(QS_FORMAT_NF4);
    tq t;

    tq_new_marked(&t, &good);
    t_buf dst = t_buf_new(N * 4);

    static const int32_t bad_formats[] = {0, -1, 10, 1000, INT32_MIN};
    for (size_t i = 0; i < sizeof bad_formats / sizeof bad_formats[0]; i++) {
        qs_quant_params p = good;
        p.format = bad_formats[i];
        assert_null(qs_format_name(p.format));
        expect_fail(ctx, qs_quantize(ctx, &p, src_f32, QS_DTYPE_F32, ROWS, COLS, &t.q),
                    QS_ERR_INVALID_ARG, &t);
        expect_fail(ctx, qs_dequantize(ctx, &p, &t.q, ROWS, COLS, dst.p, QS_DTYPE_F32, N * 4),
                    QS_ERR_INVALID_ARG, &t);
    }
    /* reserved fields of the parameters */
    for (int i = 0; i < 7; i++) {
        qs_quant_params p = good;
        if (i < 6)
            p.reserved[i] = 1;
        else
            p.reserved0 = -1;
        expect_fail(ctx, qs_quantize(ctx, &p, src_f32, QS_DTYPE_F32, ROWS, COLS, &t.q),
                    QS_ERR_INVALID_ARG, &t);
        expect_fail(ctx, qs_dequantize(ctx, &p, &t.q, ROWS, COLS, dst.p, QS_DTYPE_F32, N * 4),
                    QS_ERR_INVALID_ARG, &t);
    }
    /* reserved fields of the tensor */
    for (int i = 0; i < 4; i++) {
        t.q.reserved[i] = INT64_MIN;
        expect_fail(ctx, qs_quantize(ctx, &good, src_f32, QS_DTYPE_F32, ROWS, COLS, &t.q),
                    QS_ERR_INVALID_ARG, NULL);
        expect_fail(ctx, qs_dequantize(ctx, &good, &t.q, ROWS, COLS, dst.p, QS_DTYPE_F32, N * 4),
                    QS_ERR_INVALID_ARG, NULL);
        t.q.reserved[i] = 0;
        t.q.reserved[i] = 0;
        assert_true(all_untouched(&t));
    }
    /* per-format fields out of range */
    {
        struct {
            int32_t format;
            int field; /* 0 block_size, 1 granularity, 2 symmetric, 3 double_quant, 4 rounding */
            int32_t value;
        } bad[] = {
            {QS_FORMAT_NF4, 0, 0},    {QS_FORMAT_NF4, 0, 3},   {QS_FORMAT_NF4, 0, 8192},
            {QS_FORMAT_FP4, 0, -64},  {QS_FORMAT_NF4, 3, 2},   {QS_FORMAT_INT8, 1, 3},
            {QS_FORMAT_INT8, 1, -1},  {QS_FORMAT_INT8, 2, 2},  {QS_FORMAT_MXFP4, 0, 16},
            {QS_FORMAT_MXFP8, 0, 64}, {QS_FORMAT_MXFP4, 4, 2}, {QS_FORMAT_NVFP4, 0, 32},
        };
        for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) {
            qs_quant_params p = params(bad[i].format);
            int32_t *f[5] = {&p.block_size, &p.granularity, &p.symmetric, &p.double_quant,
                             &p.scale_rounding};
            int64_t b = 3;
            *f[bad[i].field] = bad[i].value;
            assert_int_equal(qs_quant_size(&p, ROWS, COLS, 0, &b), QS_ERR_INVALID_ARG);
            assert_int_equal(b, 3);
            expect_fail(ctx, qs_quantize(ctx, &p, src_f32, QS_DTYPE_F32, ROWS, COLS, &t.q),
                        QS_ERR_INVALID_ARG, &t);
        }
        /* INT8 groups: zero group size is invalid, one that does not divide cols a shape error */
        qs_quant_params p = params(QS_FORMAT_INT8);
        p.granularity = QS_GRAN_GROUP;
        p.block_size = 0;
        expect_fail(ctx, qs_quantize(ctx, &p, src_f32, QS_DTYPE_F32, ROWS, COLS, &t.q),
                    QS_ERR_INVALID_ARG, &t);
        p.block_size = 7;
        expect_fail(ctx, qs_quantize(ctx, &p, src_f32, QS_DTYPE_F32, ROWS, COLS, &t.q),
                    QS_ERR_SHAPE, &t);
        expect_fail(ctx, qs_dequantize(ctx, &p, &t.q, ROWS, COLS, dst.p, QS_DTYPE_F32, N * 4),
                    QS_ERR_SHAPE, &t);
        /* FP8 / NVFP4 scales must be 0 or finite and > 0 */
        static const float bad_scales[] = {-1.0f, NAN, INFINITY, -INFINITY, -1e-45f};
        for (size_t i = 0; i < sizeof bad_scales / sizeof bad_scales[0]; i++) {
            static const int32_t sf[3] = {QS_FORMAT_FP8_E4M3, QS_FORMAT_FP8_E5M2, QS_FORMAT_NVFP4};
            for (int k = 0; k < 3; k++) {
                qs_quant_params q8 = params(sf[k]);
                q8.scale = bad_scales[i];
                expect_fail(ctx, qs_quantize(ctx, &q8, src_f32, QS_DTYPE_F32, ROWS, COLS, &t.q),
                            QS_ERR_INVALID_ARG, &t);
            }
        }
    }
    free_untouched(&dst, &t);
    qs_ctx_destroy(ctx);
}

/* Each plane, and dst, one byte short; sizes that overflow int64. */
static void test_short_and_overflow(void **state)
{
    (void)state;
    qs_ctx *ctx = t_ctx();

    for (int k = 0; k < n_sets; k++) {
        const qs_quant_params *p = &sets[k];
        tq t;
        int64_t *cap[QS_PLANE_COUNT];
        int planes = 0;
        tq_new_marked(&t, p);
        cap[0] = &t.q.data_bytes, cap[1] = &t.q.scale_bytes, cap[2] = &t.q.zero_point_bytes;
        cap[3] = &t.q.nested_scale_bytes;
        for (int pl = 0; pl < QS_PLANE_COUNT; pl++) {
            if (*cap[pl] == 0)
                continue;
            planes++;
            (*cap[pl])--;
            expect_fail(ctx, qs_quantize(ctx, p, src_f32, QS_DTYPE_F32, ROWS, COLS, &t.q),
                        QS_ERR_BUFFER_TOO_SMALL, &t);
            (*cap[pl])++;
        }
        assert_true(planes >= 2);

        /* quantize for real, then every plane short for dequantize, and dst short */
        assert_int_equal(qs_quantize(ctx, p, src_f32, QS_DTYPE_F32, ROWS, COLS, &t.q), QS_OK);
        for (int32_t dt = QS_DTYPE_F32; dt <= QS_DTYPE_BF16; dt++) {
            int64_t need = (int64_t)N * qs_dtype_size(dt);
            t_buf dst = t_buf_new((size_t)need);
            for (int pl = 0; pl < QS_PLANE_COUNT; pl++) {
                if (*cap[pl] == 0)
                    continue;
                (*cap[pl])--;
                expect_fail(ctx, qs_dequantize(ctx, p, &t.q, ROWS, COLS, dst.p, dt, need),
                            QS_ERR_BUFFER_TOO_SMALL, NULL);
                (*cap[pl])++;
            }
            expect_fail(ctx, qs_dequantize(ctx, p, &t.q, ROWS, COLS, dst.p, dt, need - 1),
                        QS_ERR_BUFFER_TOO_SMALL, NULL);
            assert_true(t_buf_untouched(&dst));
            assert_int_equal(qs_dequantize(ctx, p, &t.q, ROWS, COLS, dst.p, dt, need), QS_OK);
            assert_true(t_buf_guards_ok(&dst));
            t_buf_free(&dst);
        }
        tq_free(&t);

        /* overflowing shapes: rows * cols, and 4 * rows * cols */
        static const int64_t big[][2] = {{INT64_C(1) << 32, INT64_C(1) << 32},
                                         {INT64_C(1) << 31, INT64_C(1) << 31},
                                         {INT64_MAX, 2},
                                         {3, INT64_MAX / 2}};
        tq_new_marked(&t, p);
        t_buf dst = t_buf_new(16);
        for (size_t b = 0; b < sizeof big / sizeof big[0]; b++) {
            int64_t bytes;
            if (p->granularity == QS_GRAN_GROUP && p->format == QS_FORMAT_INT8)
                continue; /* the group size divides none of these */
            assert_int_equal(qs_quant_size(p, big[b][0], big[b][1], 0, &bytes), QS_ERR_OVERFLOW);
            expect_fail(ctx, qs_quantize(ctx, p, src_f32, QS_DTYPE_F32, big[b][0], big[b][1], &t.q),
                        QS_ERR_OVERFLOW, &t);
            expect_fail(
                ctx,
                qs_dequantize(ctx, p, &t.q, big[b][0], big[b][1], dst.p, QS_DTYPE_F32, INT64_MAX),
                QS_ERR_OVERFLOW, &t);
        }
        free_untouched(&dst, &t);
    }
    qs_ctx_destroy(ctx);
}

/* cols == 0 with rows above 2^61: n = 0, but INT8 by row and LLM.int8 keep one f32 scale per
 * row, and 4 * rows overflows int64. The size query must say QS_ERR_OVERFLOW (it once returned a
 * wrapped, tiny size), and quantize / dequantize must fail before writing: the planes are real
 * canary-guarded buffers whose capacities claim INT64_MAX, so no capacity check can save a wrong
 * size. Formats without per-row units have nothing to store and keep their small sizes. */
static void test_cols_zero_rows_overflow(void **state)
{
    (void)state;
    qs_ctx *ctx = t_ctx();
    static const int64_t huge_rows[] = {(INT64_C(1) << 61) + 1, INT64_C(1) << 62,
                                        (INT64_C(1) << 62) + 1, INT64_MAX / 4 + 1, INT64_MAX};

    for (int k = 0; k < n_sets; k++) {
        const qs_quant_params *p = &sets[k];
        int per_row = p->format == QS_FORMAT_LLM_INT8 ||
                      (p->format == QS_FORMAT_INT8 && p->granularity == QS_GRAN_ROW);
        for (size_t r = 0; r < sizeof huge_rows / sizeof huge_rows[0]; r++) {
            int64_t rows = huge_rows[r];
            for (int pl = 0; pl < QS_PLANE_COUNT; pl++) {
                int64_t bytes = -7;
                qs_status st = qs_quant_size(p, rows, 0, pl, &bytes);
                if (per_row) {
                    assert_int_equal(st, QS_ERR_OVERFLOW);
                    assert_int_equal(bytes, -7);
                } else {
                    assert_int_equal(st, QS_OK);
                    assert_true(bytes >= 0 && bytes <= 4); /* per-tensor scales only */
                }
            }
            if (!per_row)
                continue;
            tq t;
            t_buf dst = t_buf_new(16);
            tq_new_marked(&t, p);
            t.q.data_bytes = t.q.scale_bytes = INT64_MAX;
            if (t.q.zero_point)
                t.q.zero_point_bytes = INT64_MAX;
            expect_fail(ctx, qs_quantize(ctx, p, src_f32, QS_DTYPE_F32, rows, 0, &t.q),
                        QS_ERR_OVERFLOW, &t);
            expect_fail(ctx, qs_dequantize(ctx, p, &t.q, rows, 0, dst.p, QS_DTYPE_F32, 16),
                        QS_ERR_OVERFLOW, &t);
            free_untouched(&dst, &t);
        }
    }
    qs_ctx_destroy(ctx);
}

/* QS_NONFINITE_REJECT: NaN or Inf anywhere (f32, f16, bf16) -> QS_ERR_NONFINITE, nothing
 * written; finite input still works; the default policy encodes. */
static void test_nonfinite_reject(void **state)
{
    (void)state;
    qs_ctx_params cp;
    qs_ctx *ctx = NULL, *ctx2 = t_ctx();
    float x[N];
    uint16_t h[N], b[N];
    int64_t v = -1;

    qs_ctx_params_init(&cp);
    cp.nonfinite = QS_NONFINITE_REJECT;
    assert_int_equal(qs_ctx_create(&cp, &ctx), QS_OK);
    assert_int_equal(qs_ctx_get(ctx, QS_PARAM_NONFINITE, &v), QS_OK);
    assert_int_equal(v, QS_NONFINITE_REJECT);
    assert_int_equal(qs_ctx_set(ctx2, QS_PARAM_NONFINITE, QS_NONFINITE_REJECT), QS_OK);

    for (int k = 0; k < n_sets; k++) {
        const qs_quant_params *p = &sets[k];
        for (int which = 0; which < 3; which++) {
            tq t;
            memcpy(x, src_f32, sizeof x);
            x[N - 1 - which * 40] = which == 0 ? NAN : which == 1 ? INFINITY : -INFINITY;
            for (int i = 0; i < N; i++) {
                uint32_t u = t_bits(x[i]);
                b[i] = (uint16_t)(u >> 16); /* truncation keeps NaN / Inf */
                h[i] = isnan(x[i])   ? 0x7E00
                       : isinf(x[i]) ? (uint16_t)((u >> 16 & 0x8000) | 0x7C00)
                                     : 0x3C00;
            }
            tq_new_marked(&t, p);
            expect_fail(ctx, qs_quantize(ctx, p, x, QS_DTYPE_F32, ROWS, COLS, &t.q),
                        QS_ERR_NONFINITE, &t);
            expect_fail(ctx2, qs_quantize(ctx2, p, x, QS_DTYPE_F32, ROWS, COLS, &t.q),
                        QS_ERR_NONFINITE, &t);
            expect_fail(ctx, qs_quantize(ctx, p, h, QS_DTYPE_F16, ROWS, COLS, &t.q),
                        QS_ERR_NONFINITE, &t);
            expect_fail(ctx, qs_quantize(ctx, p, b, QS_DTYPE_BF16, ROWS, COLS, &t.q),
                        QS_ERR_NONFINITE, &t);
            tq_free(&t);
        }
        tq t;
        tq_new(&t, p, ROWS, COLS);
        assert_int_equal(qs_quantize(ctx, p, src_f32, QS_DTYPE_F32, ROWS, COLS, &t.q), QS_OK);
        tq_free(&t);
    }
    /* back to the default policy: NaN is encoded */
    assert_int_equal(qs_ctx_set(ctx2, QS_PARAM_NONFINITE, QS_NONFINITE_ENCODE), QS_OK);
    {
        tq t;
        qs_quant_params p = params(QS_FORMAT_FP8_E4M3);
        x[0] = NAN;
        tq_new(&t, &p, ROWS, COLS);
        assert_int_equal(qs_quantize(ctx2, &p, x, QS_DTYPE_F32, ROWS, COLS, &t.q), QS_OK);
        tq_free(&t);
    }
    qs_ctx_destroy(ctx);
    qs_ctx_destroy(ctx2);
}

/* ---- allocator ------------------------------------------------------------------------------ */

typedef struct {
    int allocs, frees, fail_after; /* allocations beyond fail_after return NULL */
} counting;

static void *count_alloc(void *user, size_t size, size_t align)
{
    counting *c = user;
    void *p = NULL;
    if (c->allocs >= c->fail_after)
        return NULL;
    if (posix_memalign(&p, align < sizeof(void *) ? sizeof(void *) : align, size ? size : 1))
        return NULL;
    c->allocs++;
    return p;
}

static void count_free(void *user, void *p)
{
    counting *c = user;
    c->frees++;
    free(p);
}

/* Double quantization needs scratch from the context's allocator: a failing allocator gives
 * QS_ERR_OUT_OF_MEMORY with nothing written; a working one is used and balanced. */
static void test_allocator(void **state)
{
    (void)state;
    counting c = {0, 0, 1}; /* the context itself, then nothing */
    qs_ctx_params cp;
    qs_ctx *ctx = NULL;

    qs_ctx_params_init(&cp);
    cp.allocator.alloc = count_alloc;
    cp.allocator.free = count_free;
    cp.allocator.user = &c;
    assert_int_equal(qs_ctx_create(&cp, &ctx), QS_OK);
    assert_int_equal(c.allocs, 1);

    for (int32_t f = QS_FORMAT_NF4; f <= QS_FORMAT_FP4; f++) {
        qs_quant_params p = params(f);
        tq t;
        p.double_quant = 1;
        tq_new_marked(&t, &p);
        expect_fail(ctx, qs_quantize(ctx, &p, src_f32, QS_DTYPE_F32, ROWS, COLS, &t.q),
                    QS_ERR_OUT_OF_MEMORY, &t);
        /* with memory: works, then dequantize fails again without it */
        c.fail_after = 1000;
        assert_int_equal(qs_quantize(ctx, &p, src_f32, QS_DTYPE_F32, ROWS, COLS, &t.q), QS_OK);
        assert_true(c.allocs > 1);
        assert_int_equal(c.allocs - c.frees, 1);
        c.fail_after = c.allocs;
        t_buf dst = t_buf_new(N * 4);
        expect_fail(ctx, qs_dequantize(ctx, &p, &t.q, ROWS, COLS, dst.p, QS_DTYPE_F32, N * 4),
                    QS_ERR_OUT_OF_MEMORY, NULL);
        assert_true(t_buf_untouched(&dst));
        c.fail_after = 1000;
        assert_int_equal(qs_dequantize(ctx, &p, &t.q, ROWS, COLS, dst.p, QS_DTYPE_F32, N * 4),
                         QS_OK);
        assert_int_equal(c.allocs - c.frees, 1);
        c.fail_after = c.allocs;
        t_buf_free(&dst);
        tq_free(&t);
    }
    qs_ctx_destroy(ctx);
    assert_int_equal(c.allocs, c.frees);

    /* a context that cannot be allocated */
    c.fail_after = c.allocs;
    ctx = (qs_ctx *)&c;
    assert_int_equal(qs_ctx_create(&cp, &ctx), QS_ERR_OUT_OF_MEMORY);
    assert_ptr_equal(ctx, (qs_ctx *)&c);
}

/* ---- context ------------------------------------------------------------------------------- */

static void test_ctx(void **state)
{
    (void)state;
    qs_ctx_params cp;
    qs_ctx *ctx = NULL, *sentinel = (qs_ctx *)&cp;
    int64_t v = 42;

    assert_int_equal(qs_ctx_create(NULL, NULL), QS_ERR_INVALID_ARG);
    for (int i = 0; i < 7; i++) {
        qs_ctx_params_init(&cp);
        switch (i) {
        case 0: cp.num_threads = -1; break;
        case 1: cp.backend = 9; break;
        case 2: cp.nonfinite = 2; break;
        case 3: cp.allocator.alloc = count_alloc; break; /* alloc without free */
        case 4: cp.allocator.free = count_free; break;
        case 5: cp.reserved[0] = 1; break;
        default: cp.reserved[7] = -1; break;
        }
        ctx = sentinel;
        assert_int_equal(qs_ctx_create(&cp, &ctx), QS_ERR_INVALID_ARG);
        assert_ptr_equal(ctx, sentinel);
    }
    qs_ctx_destroy(NULL);
    assert_non_null(qs_ctx_last_error(NULL));

    ctx = t_ctx();
    assert_string_equal(qs_ctx_last_error(ctx), "");
    assert_int_equal(qs_ctx_set(NULL, QS_PARAM_NUM_THREADS, 1), QS_ERR_INVALID_ARG);
    assert_int_equal(qs_ctx_get(NULL, QS_PARAM_NUM_THREADS, &v), QS_ERR_INVALID_ARG);
    assert_int_equal(qs_ctx_get(ctx, QS_PARAM_NUM_THREADS, NULL), QS_ERR_INVALID_ARG);
    assert_int_equal(qs_ctx_get(ctx, QS_PARAM_NUM_THREADS, &v), QS_OK);
    assert_int_equal(v, 0);
    assert_int_equal(qs_ctx_set(ctx, QS_PARAM_NUM_THREADS, 3), QS_OK);
    assert_int_equal(qs_ctx_get(ctx, QS_PARAM_NUM_THREADS, &v), QS_OK);
    assert_int_equal(v, 3);
    expect_fail(ctx, qs_ctx_set(ctx, QS_PARAM_NUM_THREADS, -1), QS_ERR_INVALID_ARG, NULL);
    expect_fail(ctx, qs_ctx_set(ctx, QS_PARAM_NUM_THREADS, INT64_MAX), QS_ERR_INVALID_ARG, NULL);
    assert_int_equal(qs_ctx_get(ctx, QS_PARAM_NUM_THREADS, &v), QS_OK);
    assert_int_equal(v, 3); /* unchanged by the failed sets */
    assert_int_equal(qs_ctx_set(ctx, QS_PARAM_NUM_THREADS, 1), QS_OK);
    assert_string_equal(qs_ctx_last_error(ctx), "");
    expect_fail(ctx, qs_ctx_set(ctx, QS_PARAM_NONFINITE, 7), QS_ERR_INVALID_ARG, NULL);
    assert_int_equal(qs_ctx_get(ctx, QS_PARAM_NONFINITE, &v), QS_OK);
    assert_int_equal(v, QS_NONFINITE_ENCODE);
    expect_fail(ctx, qs_ctx_set(ctx, QS_PARAM_ISA, 0), QS_ERR_INVALID_ARG, NULL); /* read only */
    expect_fail(ctx, qs_ctx_set(ctx, 999, 0), QS_ERR_INVALID_ARG, NULL);
    assert_int_equal(qs_ctx_get(ctx, 999, &v), QS_ERR_INVALID_ARG);
    assert_int_equal(qs_ctx_get(ctx, QS_PARAM_ISA, &v), QS_OK);
    assert_int_equal((uint32_t)v, qs_ctx_isa(ctx));
    /* the context's ISA is a subset of the CPU's, and its name is one of the tiers */
    assert_int_equal(qs_ctx_isa(ctx) & ~qs_cpu_isa(), 0);
    {
        const char *b = qs_ctx_isa_name(ctx);
        assert_non_null(b);
        int known = 0; /* a name of the tier table */
        for (int32_t i = 0; i < qs_isa_tier_count(); i++) {
            qs_isa_tier t;
            assert_int_equal(qs_isa_tier_info(i, &t), QS_OK);
            known |= !strcmp(b, t.name);
        }
        assert_true(known);
        const char *force = getenv("QS_FORCE_ISA");
        if (force && !strcmp(force, "scalar"))
            assert_string_equal(b, "scalar");
    }
    /* the isa_mask parameter restricts the table; 0 means the reference only */
    {
        qs_ctx *c0 = NULL;
        qs_ctx_params_init(&cp);
        cp.isa_mask = 0;
        assert_int_equal(qs_ctx_create(&cp, &c0), QS_OK);
        assert_int_equal(qs_ctx_isa(c0), 0);
        assert_string_equal(qs_ctx_isa_name(c0), "scalar");
        for (int32_t i = 0; i < qs_ctx_kernel_count(c0); i++) {
            const char *slot = NULL, *impl = NULL;
            assert_int_equal(qs_ctx_kernel_info(c0, i, &slot, &impl), QS_OK);
            assert_non_null(slot);
            assert_non_null(impl);
            size_t li = strlen(impl);
            assert_true(li > 5 && strcmp(impl + li - 5, "__ref") == 0);
        }
        const char *s, *im;
        assert_int_equal(qs_ctx_kernel_info(c0, -1, &s, &im), QS_ERR_INVALID_ARG);
        assert_int_equal(qs_ctx_kernel_info(c0, qs_ctx_kernel_count(c0), &s, &im),
                         QS_ERR_INVALID_ARG);
        assert_int_equal(qs_ctx_kernel_info(c0, 0, NULL, &im), QS_ERR_INVALID_ARG);
        qs_ctx_destroy(c0);
    }
    qs_ctx_destroy(ctx);
}

/* ---- names and codes ---------------------------------------------------------------------- */

static void test_names(void **state)
{
    (void)state;
    static const char *const fnames[] = {NULL,       "nf4",      "fp4",   "int8",  "llm_int8",
                                         "fp8_e4m3", "fp8_e5m2", "mxfp4", "mxfp8", "nvfp4"};
    static const int32_t fblock[] = {0, 64, 64, 0, 0, 0, 0, 32, 32, 16};
    static const int32_t fbits[] = {0, 4, 4, 8, 8, 8, 8, 4, 8, 4};

    assert_int_equal(qs_format_count(), 9);
    for (int32_t f = 1; f <= qs_format_count(); f++) {
        assert_string_equal(qs_format_name(f), fnames[f]);
        assert_int_equal(qs_format_from_name(fnames[f]), f);
        assert_int_equal(qs_format_block_size(f), fblock[f]);
        assert_int_equal(qs_format_bits(f), fbits[f]);
        qs_quant_params p;
        qs_quant_params_init(&p, f);
        assert_int_equal(p.format, f);
        assert_int_equal(p.block_size, fblock[f]);
    }
    assert_null(qs_format_name(0));
    assert_null(qs_format_name(qs_format_count() + 1));
    assert_int_equal(qs_format_block_size(0), 0);
    assert_int_equal(qs_format_bits(-3), 0);
    assert_int_equal(qs_format_from_name(NULL), -1);
    assert_int_equal(qs_format_from_name(""), -1);
    assert_int_equal(qs_format_from_name("NF4x"), -1);
    assert_int_equal(qs_format_from_name("nf"), -1);
    /* any letter case names a format; the name given back is the lower-case one */
    assert_int_equal(qs_format_from_name("NF4"), QS_FORMAT_NF4);
    assert_int_equal(qs_format_from_name("Fp8_E4M3"), QS_FORMAT_FP8_E4M3);
    assert_int_equal(qs_format_from_name("LLM_INT8"), QS_FORMAT_LLM_INT8);
    assert_int_equal(qs_format_from_name("NVFP4 "), -1);
    qs_quant_params_init(NULL, 1); /* accepted, does nothing */

    static const char *const dnames[] = {"float32", "float16", "bfloat16"};
    static const char *const dshort[] = {"f32", "f16", "bf16"};
    for (int32_t d = 0; d < 3; d++) {
        assert_string_equal(qs_dtype_name(d), dnames[d]);
        assert_int_equal(qs_dtype_from_name(dnames[d]), d);
        assert_int_equal(qs_dtype_from_name(dshort[d]), d);
        assert_int_equal(qs_dtype_size(d), d == 0 ? 4 : 2);
    }
    assert_null(qs_dtype_name(3));
    assert_null(qs_dtype_name(-1));
    assert_int_equal(qs_dtype_size(3), 0);
    assert_int_equal(qs_dtype_from_name("float64"), -1);
    assert_int_equal(qs_dtype_from_name(NULL), -1);

    /* status strings: never NULL, distinct for every defined code, named after the macro */
    static const struct {
        qs_status s;
        const char *prefix;
    } st[] = {
        {QS_OK, "QS_OK"},
        {QS_ERR_INVALID_ARG, "QS_ERR_INVALID_ARG"},
        {QS_ERR_BUFFER_TOO_SMALL, "QS_ERR_BUFFER_TOO_SMALL"},
        {QS_ERR_OVERFLOW, "QS_ERR_OVERFLOW"},
        {QS_ERR_UNSUPPORTED, "QS_ERR_UNSUPPORTED"},
        {QS_ERR_NONFINITE, "QS_ERR_NONFINITE"},
        {QS_ERR_OUT_OF_MEMORY, "QS_ERR_OUT_OF_MEMORY"},
        {QS_ERR_BAD_DATA, "QS_ERR_BAD_DATA"},
        {QS_ERR_SHAPE, "QS_ERR_SHAPE"},
        {QS_ERR_BACKEND, "QS_ERR_BACKEND"},
    };
    const size_t ns = sizeof st / sizeof st[0];
    for (size_t i = 0; i < ns; i++) {
        const char *s = qs_status_str(st[i].s);
        assert_non_null(s);
        assert_int_equal(strncmp(s, st[i].prefix, strlen(st[i].prefix)), 0);
        assert_true(s[strlen(st[i].prefix)] == ':');
        for (size_t j = 0; j < i; j++)
            assert_true(strcmp(s, qs_status_str(st[j].s)) != 0);
    }
    static const qs_status odd[] = {1, -10, -11, 100, -100, INT32_MIN, INT32_MAX};
    for (size_t i = 0; i < sizeof odd / sizeof odd[0]; i++) {
        const char *s = qs_status_str(odd[i]);
        assert_non_null(s);
        assert_true(strlen(s) > 0);
        for (size_t j = 0; j < ns; j++)
            assert_true(strcmp(s, qs_status_str(st[j].s)) != 0);
    }

    /* ISA names: one per bit, "scalar" for 0, NULL for unknown bits and combinations */
    static const struct {
        uint32_t bit;
        const char *name;
    } isa[] = {
        {0, "scalar"},
        {QS_ISA_AVX2, "avx2"},
        {QS_ISA_AVX512, "avx512"},
        {QS_ISA_AVX512_VNNI, "avx512-vnni"},
        {QS_ISA_AVX512_BF16, "avx512-bf16"},
        {QS_ISA_NEON, "neon"},
        {QS_ISA_NEON_DOTPROD, "neon-dotprod"},
        {QS_ISA_NEON_FP16, "neon-fp16"},
        {QS_ISA_NEON_BF16, "neon-bf16"},
        {QS_ISA_SVE, "sve"},
        {QS_ISA_AVX_VNNI, "avx-vnni"},
        {QS_ISA_AVX512_FP16, "avx512-fp16"},
        {QS_ISA_AMX_TILE, "amx-tile"},
        {QS_ISA_AMX_INT8, "amx-int8"},
        {QS_ISA_AMX_BF16, "amx-bf16"},
        {QS_ISA_NEON_I8MM, "neon-i8mm"},
    };
    for (size_t i = 0; i < sizeof isa / sizeof isa[0]; i++)
        assert_string_equal(qs_isa_name(isa[i].bit), isa[i].name);
    assert_null(qs_isa_name(QS_ISA_AVX2 | QS_ISA_AVX512));
    assert_null(qs_isa_name(1u << 31));
    for (int b = 0; b < 32; b++)
        if (qs_cpu_isa() & (1u << b))
            assert_non_null(qs_isa_name(1u << b)); /* every detected bit has a name */

    /* version */
    char want[32];
    snprintf(want, sizeof want, "%d.%d.%d", QS_VERSION_MAJOR, QS_VERSION_MINOR, QS_VERSION_PATCH);
    assert_string_equal(qs_version_string(), want);
    assert_int_equal(qs_version_number(),
                     QS_VERSION_MAJOR * 10000 + QS_VERSION_MINOR * 100 + QS_VERSION_PATCH);
}

/* qs_convert and qs_codebook argument errors, with canaries. */
static void test_convert_codebook_errors(void **state)
{
    (void)state;
    qs_ctx *ctx = t_ctx();
    t_buf dst = t_buf_new(N * 2);

    assert_int_equal(qs_convert(NULL, src_f32, QS_DTYPE_F32, dst.p, QS_DTYPE_F16, N, N * 2),
                     QS_ERR_INVALID_ARG);
    expect_fail(ctx, qs_convert(ctx, src_f32, 5, dst.p, QS_DTYPE_F16, N, N * 2), QS_ERR_INVALID_ARG,
                NULL);
    expect_fail(ctx, qs_convert(ctx, src_f32, QS_DTYPE_F32, dst.p, -1, N, N * 2),
                QS_ERR_INVALID_ARG, NULL);
    expect_fail(ctx, qs_convert(ctx, src_f32, QS_DTYPE_F32, dst.p, QS_DTYPE_F16, -1, N * 2),
                QS_ERR_INVALID_ARG, NULL);
    expect_fail(ctx, qs_convert(ctx, NULL, QS_DTYPE_F32, dst.p, QS_DTYPE_F16, N, N * 2),
                QS_ERR_INVALID_ARG, NULL);
    expect_fail(ctx, qs_convert(ctx, src_f32, QS_DTYPE_F32, NULL, QS_DTYPE_F16, N, N * 2),
                QS_ERR_INVALID_ARG, NULL);
    expect_fail(ctx, qs_convert(ctx, src_f32, QS_DTYPE_F32, dst.p, QS_DTYPE_F16, N, N * 2 - 1),
                QS_ERR_BUFFER_TOO_SMALL, NULL);
    expect_fail(
        ctx, qs_convert(ctx, src_f32, QS_DTYPE_F32, dst.p, QS_DTYPE_F16, INT64_MAX / 2, INT64_MAX),
        QS_ERR_OVERFLOW, NULL);
    assert_true(t_buf_untouched(&dst));
    assert_int_equal(qs_convert(ctx, src_f32, QS_DTYPE_F32, dst.p, QS_DTYPE_F16, N, N * 2), QS_OK);
    assert_true(t_buf_guards_ok(&dst));
    assert_int_equal(qs_convert(ctx, NULL, QS_DTYPE_F32, NULL, QS_DTYPE_F16, 0, 0), QS_OK);

    /* codebooks: sizes, unknown ids, short capacity (nothing written) */
    static const struct {
        int32_t id;
        int64_t size;
    } books[] = {{QS_CODEBOOK_NF4, 16},  {QS_CODEBOOK_FP4, 16},   {QS_CODEBOOK_DYN8, 256},
                 {QS_CODEBOOK_E2M1, 16}, {QS_CODEBOOK_E4M3, 256}, {QS_CODEBOOK_E5M2, 256}};
    for (size_t i = 0; i < sizeof books / sizeof books[0]; i++) {
        t_buf cb = t_buf_new((size_t)books[i].size * 4);
        assert_int_equal(qs_codebook_size(books[i].id), books[i].size);
        assert_int_equal(qs_codebook(books[i].id, cb.p, books[i].size - 1),
                         QS_ERR_BUFFER_TOO_SMALL);
        assert_int_equal(qs_codebook(books[i].id, NULL, books[i].size), QS_ERR_INVALID_ARG);
        assert_true(t_buf_untouched(&cb));
        assert_int_equal(qs_codebook(books[i].id, cb.p, books[i].size), QS_OK);
        assert_true(t_buf_guards_ok(&cb));
        t_buf_free(&cb);
    }
    assert_int_equal(qs_codebook_size(0), 0);
    assert_int_equal(qs_codebook_size(7), 0);
    float one[256];
    assert_int_equal(qs_codebook(0, one, 256), QS_ERR_INVALID_ARG);
    assert_int_equal(qs_codebook(7, one, 256), QS_ERR_INVALID_ARG);
    t_buf_free(&dst);
    qs_ctx_destroy(ctx);
}

/* The two statuses that the quantization API never returns come from other families of the same
 * public API: QS_ERR_UNSUPPORTED (merging moving-average observers) and QS_ERR_BAD_DATA (a byte
 * string that is not a serialized observer). QS_ERR_BACKEND comes from a context that asks for
 * the CUDA backend when no plugin is beside the library (test_backend.c tests the plugins). */
static void test_status_other_families(void **state)
{
    (void)state;
    qs_ctx *ctx = t_ctx();
    {
        qs_ctx_params cp;
        qs_ctx *none = (qs_ctx *)&cp;
        qs_ctx_params_init(&cp);
        cp.backend = QS_BACKEND_CUDA;
        assert_int_equal(qs_ctx_create(&cp, &none), QS_ERR_BACKEND);
        assert_ptr_equal(none, (qs_ctx *)&cp);
        assert_non_null(strstr(qs_backend_message(QS_BACKEND_CUDA), "libqsparse-cuda.so"));
        assert_int_equal(qs_ctx_backend(ctx), QS_BACKEND_CPU);
    }
    qs_observer_params op;
    qs_observer *a = NULL, *b = NULL, *sentinel = (qs_observer *)&op, *out = sentinel;
    uint8_t junk[256];

    qs_observer_params_init(&op, QS_OBSERVER_MOVING_AVERAGE);
    assert_int_equal(qs_observer_create(ctx, &op, &a), QS_OK);
    assert_int_equal(qs_observer_create(ctx, &op, &b), QS_OK);
    assert_int_equal(qs_observer_update(ctx, a, src_f32, QS_DTYPE_F32, ROWS, COLS), QS_OK);
    expect_fail(ctx, qs_observer_merge(ctx, b, a), QS_ERR_UNSUPPORTED, NULL);

    memset(junk, 0x5A, sizeof junk);
    expect_fail(ctx, qs_observer_deserialize(ctx, junk, sizeof junk, &out), QS_ERR_BAD_DATA, NULL);
    assert_ptr_equal(out, sentinel);
    qs_observer_destroy(a);
    qs_observer_destroy(b);
    qs_ctx_destroy(ctx);
}

/* 1 if the `off` bytes before dst and the T_GUARD + 64 - off after its `bytes` kept the canary. */
static int around_untouched(const t_buf *b, size_t off, size_t bytes)
{
    for (size_t i = 0; i < T_GUARD + off; i++)
        if (b->base[i] != T_CANARY)
            return 0;
    for (size_t i = T_GUARD + off + bytes; i < b->bytes + 2 * T_GUARD; i++)
        if (b->base[i] != T_CANARY)
            return 0;
    return 1;
}

/* An f32 output of 32 MiB or more is decoded in pieces and written with non-temporal stores in
 * whole 64-byte lines, a line buffer carrying the values a piece leaves unfinished
 * (src/core/dequantize.c). For every parameter set (and NF4 / FP4 blocks of 2048 and 4096, whose
 * pieces start inside a block), the output is the scalar reference's bit for bit: into a dst on a
 * 64-byte boundary and 4, 16 and 60 bytes past one (partial first and last lines in every task),
 * on 1, 2 and 3 threads, at a shape whose rows end in partial MX/NVFP4 blocks and are no multiple
 * of the streaming piece; f16 or bf16 outputs of the same size (never streamed) match too.
 * Nothing is written outside dst. */
static void test_stream_dequant(void **state)
{
    enum { SR = 2100, SC = 4020 }; /* 8442000 values: 33.8 MB of f32 */
    const size_t bytes = (size_t)SR * SC * sizeof(float);
    /* (threads, byte offset of dst past a 64-byte boundary). Each set runs the first and one
     * other in turn (1 + s % 4), so every run meets at least five sets and every driver: what
     * the threads and the offset change is the driver's cutting into tasks and lines, which is
     * the same for every format of a driver, while each format's decode kernels are checked at
     * every tier by test_kernels. Every run for every set cost twice the time under qemu and
     * valgrind, where this test was the longest of the suite. */
    static const int runs[][2] = {{2, 0}, {2, 4}, {2, 60}, {1, 16}, {3, 16}};
    float *x = malloc(bytes);
    t_buf want = t_buf_new(bytes), got = t_buf_new(bytes + 64);
    t_buf want16 = t_buf_new(bytes / 2), got16 = t_buf_new(bytes / 2);
    qs_quant_params ps[40];
    qs_ctx_params cp;
    qs_ctx *ref, *ctx[4];
    t_rng rng = {7};
    int np = 0;

    (void)state;
    assert_non_null(x);
    for (size_t i = 0; i < (size_t)SR * SC; i++)
        x[i] = (float)(t_normal(&rng) * ldexp(1.0, (int)(i % 29) - 14));
    qs_ctx_params_init(&cp);
    cp.isa_mask = 0;
    cp.num_threads = 1;
    assert_int_equal(qs_ctx_create(&cp, &ref), QS_OK);
    for (int t = 1; t <= 3; t++) {
        qs_ctx_params_init(&cp);
        cp.num_threads = t;
        assert_int_equal(qs_ctx_create(&cp, &ctx[t]), QS_OK);
    }
    for (int s = 0; s < n_sets; s++)
        ps[np++] = sets[s];
    ps[np] = params(QS_FORMAT_NF4), ps[np++].block_size = 4096;
    ps[np] = params(QS_FORMAT_FP4), ps[np++].block_size = 2048;
    ps[np] = params(QS_FORMAT_NF4), ps[np].block_size = 2048, ps[np++].double_quant = 1;
    for (int s = 0; s < np; s++) {
        tq t;
        quant(ctx[2], &ps[s], x, QS_DTYPE_F32, SR, SC, &t);
        assert_int_equal(qs_dequantize(ref, &ps[s], &t.q, SR, SC, want.p, QS_DTYPE_F32,
                                       (int64_t)bytes),
                         QS_OK);
        for (int k = 0; k < 2; k++) {
            const int r = k ? 1 + s % 4 : 0;
            const size_t off = (size_t)runs[r][1];
            /* t_buf's p is T_GUARD past malloc's 16-byte aligned block: find a line boundary */
            const size_t line = (64 - (uintptr_t)got.p % 64) % 64;
            char *d = (char *)got.p + line + off;
            memset(got.base, T_CANARY, got.bytes + 2 * T_GUARD);
            assert_int_equal(qs_dequantize(ctx[runs[r][0]], &ps[s], &t.q, SR, SC, d,
                                           QS_DTYPE_F32, (int64_t)bytes),
                             QS_OK);
            if (memcmp(want.p, d, bytes) != 0)
                fail_msg("format %d block %d (set %d), %d threads, dst 64n+%zu: output differs "
                         "from the scalar reference's",
                         ps[s].format, ps[s].block_size, s, runs[r][0], off);
            assert_true(around_untouched(&got, line + off, bytes));
        }
        {
            const int32_t dt = s % 2 ? QS_DTYPE_BF16 : QS_DTYPE_F16;
            assert_int_equal(qs_dequantize(ref, &ps[s], &t.q, SR, SC, want16.p, dt,
                                           (int64_t)bytes / 2),
                             QS_OK);
            assert_int_equal(qs_dequantize(ctx[2], &ps[s], &t.q, SR, SC, got16.p, dt,
                                           (int64_t)bytes / 2),
                             QS_OK);
            assert_memory_equal(want16.p, got16.p, bytes / 2);
            assert_true(t_buf_guards_ok(&got16));
        }
        tq_free(&t);
    }
    for (int t = 1; t <= 3; t++)
        qs_ctx_destroy(ctx[t]);
    qs_ctx_destroy(ref);
    t_buf_free(&want);
    t_buf_free(&got);
    t_buf_free(&want16);
    t_buf_free(&got16);
    free(x);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_quant_size),
        cmocka_unit_test(test_plane_info),
        cmocka_unit_test(test_format_info),
        cmocka_unit_test(test_null_and_negative),
        cmocka_unit_test(test_bad_params),
        cmocka_unit_test(test_short_and_overflow),
        cmocka_unit_test(test_cols_zero_rows_overflow),
        cmocka_unit_test(test_nonfinite_reject),
        cmocka_unit_test(test_allocator),
        cmocka_unit_test(test_ctx),
        cmocka_unit_test(test_names),
        cmocka_unit_test(test_convert_codebook_errors),
        cmocka_unit_test(test_status_other_families),
        cmocka_unit_test(test_stream_dequant),
    };
    return cmocka_run_group_tests(tests, setup, NULL);
}
