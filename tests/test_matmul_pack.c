/* SPDX-License-Identifier: MIT */
/*
 * Packed weights (qs_matmul_pack, include/qsparse/matmul.h): for every weight kind, format and
 * option, a packed weight gives the bits of the weight it came from, on the GEMV and GEMM paths,
 * with f32, int8 and bf16 activations, after the original planes are gone; the size query is
 * exact and nothing past it is written; and a packed buffer is refused, with y untouched, for
 * another tier, another shape, a damaged or short header, data that is no packed weight, and
 * misuse of the API.
 */
#include "common.h"
#include "quant_helpers.h"
#include "matmul_weights.h"

/* Shapes each spec accepts: K a multiple of 4 for 2:4, of the INT8 group (8) and of NF4's 64 for
 * GPTQ-like rows, so the fast kernels run; plus an odd K where the spec allows one. */
static int64_t spec_k(const wspec *s, int c)
{
    static const int64_t even[] = {64, 132, 256};
    static const int64_t odd[] = {97, 64, 130};
    return is_sparse(s) || s->format == QS_FORMAT_INT8 ? even[c % 3] : odd[c % 3];
}

static void pack(qs_ctx *ctx, const qs_weight *w, int64_t N, int64_t K, t_buf *out,
                 qs_weight *packed)
{
    int64_t bytes = -1;

    assert_int_equal(qs_matmul_pack_size(ctx, w, N, K, &bytes), QS_OK);
    assert_true(bytes > 0);
    *out = t_buf_new((size_t)bytes + 3);
    /* at an odd address: a packed buffer may sit anywhere (a file mapping) */
    assert_int_equal(qs_matmul_pack(ctx, w, N, K, out->p + 3, bytes), QS_OK);
    assert_true(t_buf_guards_ok(out));
    memset(packed, 0, sizeof *packed);
    packed->kind = QS_WEIGHT_PACKED;
    packed->data = out->p + 3;
    packed->data_bytes = bytes;
}

static void test_same_bits(void **state)
{
    static const int64_t Ms[] = {1, 3, QS_MATMUL_GEMM_MIN_M + 1};
    static const int64_t Ns[] = {1, 9, 70};
    static const int32_t acts[] = {QS_MATMUL_ACT_F32, QS_MATMUL_ACT_INT8, QS_MATMUL_ACT_BF16};
    qs_ctx *ctx = t_ctx();
    t_rng r = {31};

    (void)state;
    for (int s = 0; s < NSPECS; s++)
        for (int c = 0; c < 3; c++)
            for (int act = 0; act < 3; act++) {
                const wspec *sp = &specs[s];
                int64_t M = Ms[c], N = Ns[(c + s) % 3], K = spec_k(sp, c + s);
                float *w0 = malloc((size_t)(N * K) * 4), *x = malloc((size_t)(M * K) * 4);
                float *bias = malloc((size_t)N * 4);
                t_buf y0 = t_buf_new((size_t)(M * N) * 4), y1 = t_buf_new((size_t)(M * N) * 4);
                t_buf buf;
                qs_weight pw;
                qs_matmul_params mp;
                wobj o;

                qs_matmul_params_init(&mp);
                mp.activations = acts[act];
                fill(&r, w0, N * K, 0.05);
                fill(&r, x, M * K, 1.0);
                fill(&r, bias, N, 0.1);
                wobj_make(ctx, sp, w0, N, K, &o);
                assert_int_equal(qs_matmul(ctx, &mp, x, QS_DTYPE_F32, M, K, &o.w, N, bias, y0.p,
                                           (int64_t)y0.bytes),
                                 QS_OK);
                pack(ctx, &o.w, N, K, &buf, &pw);
                wobj_free(&o); /* the packed weight holds its own copy */
                assert_int_equal(qs_matmul(ctx, &mp, x, QS_DTYPE_F32, M, K, &pw, N, bias, y1.p,
                                           (int64_t)y1.bytes),
                                 QS_OK);
                assert_string_equal(qs_ctx_last_error(ctx), "");
                if (!T_ASSERT_BYTES(sp->name, y1.p, y0.p, (size_t)(M * N) * 4)) {
                    print_error("%s M=%lld N=%lld K=%lld act %d\n", sp->name, (long long)M,
                                (long long)N, (long long)K, act);
                    fail();
                }
                t_buf_free(&buf);
                t_buf_free(&y0);
                t_buf_free(&y1);
                free(w0);
                free(x);
                free(bias);
            }
    qs_ctx_destroy(ctx);
}

/* qs_matmul with a bad packed weight: `want`, y untouched. */
static void refused(qs_ctx *ctx, const qs_weight *pw, int64_t N, int64_t K, qs_status want,
                    const char *msg)
{
    float x[64 * 2] = {0};
    t_buf y = t_buf_new((size_t)(2 * N) * 4);

    assert_true(K <= 64);
    assert_int_equal(qs_matmul(ctx, NULL, x, QS_DTYPE_F32, 2, K, pw, N, NULL, y.p,
                               (int64_t)y.bytes),
                     want);
    assert_true(t_buf_untouched(&y));
    if (!strstr(qs_ctx_last_error(ctx), msg)) {
        print_error("message \"%s\" lacks \"%s\"\n", qs_ctx_last_error(ctx), msg);
        fail();
    }
    t_buf_free(&y);
}

static void test_refused(void **state)
{
    const int64_t N = 6, K = 64;
    qs_ctx *ctx = t_ctx();
    t_rng r = {7};
    float w0[6 * 64];
    t_buf buf;
    qs_weight pw, bad;
    int64_t bytes;
    wobj o;

    (void)state;
    fill(&r, w0, N * K, 0.05);
    wobj_make(ctx, &specs[2] /* nf4 */, w0, N, K, &o);
    pack(ctx, &o.w, N, K, &buf, &pw);
    uint8_t *b = (uint8_t *)(uintptr_t)pw.data;

    /* another shape */
    refused(ctx, &pw, N - 1, K, QS_ERR_SHAPE, "packed as 6 x 64");
    /* short: header only, planes cut */
    bad = pw;
    bad.data_bytes = pw.data_bytes - 64; /* into the last plane (planes are padded to 64) */
    refused(ctx, &bad, N, K, QS_ERR_BUFFER_TOO_SMALL, "reach past");
    bad.data_bytes = 10;
    refused(ctx, &bad, N, K, QS_ERR_INVALID_ARG, "needs data");
    /* a damaged header byte (the shape field, still in range) */
    for (int64_t i = 8; i < 64; i += 7) {
        b[i] ^= 0x10;
        refused(ctx, &pw, N, K, QS_ERR_BAD_DATA, "");
        b[i] ^= 0x10;
    }
    /* no packed weight at all */
    bad = pw;
    bad.data = w0;
    bad.data_bytes = (int64_t)sizeof w0;
    refused(ctx, &bad, N, K, QS_ERR_BAD_DATA, "no packed weight");
    /* fields a packed weight does not use */
    bad = pw;
    bad.quant = &o.p;
    refused(ctx, &bad, N, K, QS_ERR_INVALID_ARG, "only data");
    /* still good after all that */
    {
        float x[2 * 64] = {0};
        float y[2 * 6];
        assert_int_equal(qs_matmul(ctx, NULL, x, QS_DTYPE_F32, 2, K, &pw, N, NULL, y, sizeof y),
                         QS_OK);
    }
    /* another tier: a context forced to the reference refuses the buffer (where the CPU runs a
     * higher tier than the reference at all) */
    {
        qs_ctx_params p;
        qs_ctx *low;
        qs_ctx_params_init(&p);
        p.isa_mask = 0;
        assert_int_equal(qs_ctx_create(&p, &low), QS_OK);
        if (qs_ctx_isa(low) != qs_ctx_isa(ctx))
            refused(low, &pw, N, K, QS_ERR_BAD_DATA, "pack it again with this context");
        qs_ctx_destroy(low);
    }
    /* the API */
    assert_int_equal(qs_matmul_pack_size(ctx, &pw, N, K, &bytes), QS_ERR_INVALID_ARG);
    assert_int_equal(qs_matmul_pack_size(ctx, NULL, N, K, &bytes), QS_ERR_INVALID_ARG);
    assert_int_equal(qs_matmul_pack_size(ctx, &o.w, N, K, NULL), QS_ERR_INVALID_ARG);
    assert_int_equal(qs_matmul_pack_size(ctx, &o.w, -1, K, &bytes), QS_ERR_INVALID_ARG);
    assert_int_equal(qs_matmul_pack_size(NULL, &o.w, N, K, &bytes), QS_ERR_INVALID_ARG);
    assert_int_equal(qs_matmul_pack_size(ctx, &o.w, N + 1, K, &bytes), QS_ERR_BUFFER_TOO_SMALL);
    assert_int_equal(qs_matmul_pack_size(ctx, &o.w, N, K, &bytes), QS_OK);
    {
        t_buf d = t_buf_new((size_t)bytes);
        assert_int_equal(qs_matmul_pack(ctx, &o.w, N, K, d.p, bytes - 1),
                         QS_ERR_BUFFER_TOO_SMALL);
        assert_true(t_buf_untouched(&d));
        assert_int_equal(qs_matmul_pack(ctx, &pw, N, K, d.p, bytes), QS_ERR_INVALID_ARG);
        assert_int_equal(qs_matmul_pack(ctx, &o.w, N, K, NULL, bytes), QS_ERR_INVALID_ARG);
        assert_true(t_buf_untouched(&d));
        t_buf_free(&d);
    }
    wobj_free(&o);
    t_buf_free(&buf);
    qs_ctx_destroy(ctx);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_same_bits),
        cmocka_unit_test(test_refused),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
