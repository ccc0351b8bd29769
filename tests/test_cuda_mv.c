/* SPDX-License-Identifier: MIT */
/*
 * The CUDA plugin's matmul on the host (src/cuda/cuda_mv.h, cuda_matmul.c): the driver runs over
 * the host executor of cuda_exec.h, which plays one warp per output with the device's lanes and
 * butterfly. For every weight the CPU takes (plain f32 / f16 / bf16, every quantized format and
 * option, 2:4 plain and quantized) and f32 / f16 / bf16 activations, each y[m, n] must lie
 * within include/qsparse/matmul.h's bound of the double-precision product of x and the weight as
 * qs_dequantize / qs_sp24_dequantize give it; the path through byte loads (misaligned W and x)
 * must give the 16-byte-load path's bits; NaN must land where the CPU puts it, canonical; bad 2:4
 * meta is refused as the CPU refuses it, y untouched.
 */
#include "common.h"

#include "../src/core/backend.h"
#include "cuda_exec.h"
#include "qsparse/sparse.h"

static int64_t n_cases, n_outputs, n_gemm, n_gemv;

static qs_ctx *cpu_ctx(void)
{
    qs_ctx_params cp;
    qs_ctx *ctx = NULL;

    qs_ctx_params_init(&cp);
    cp.backend = QS_BACKEND_CPU;
    cp.num_threads = 1;
    assert_int_equal(qs_ctx_create(&cp, &ctx), QS_OK);
    return ctx;
}

/* A weight of one kind with everything the checks need. */
struct wcase {
    const char *name;
    int32_t kind;   /* QS_WEIGHT_* */
    int32_t dtype;  /* DENSE / SP24 values */
    int32_t format; /* QUANT / SP24_QUANT */
    int32_t block, dq, gran, sym;
};

struct wbuf {
    qs_weight w;
    qs_quant_params qp;
    qs_qtensor q;
    qs_backend_layout l;
    void *plane[QS_PLANE_COUNT], *data;
    uint16_t *meta;
    float *dense; /* N x K as the CPU decodes it */
    double smax;  /* the largest scale of a segment */
};

/* A copy of `bytes` bytes `shift` bytes past a 16-byte boundary (shift 1: no 16-byte loads). */
static void *copy_at(const void *src, int64_t bytes, int shift, void **base)
{
    *base = aligned_alloc(16, (size_t)(bytes + 32) / 16 * 16);
    memset(*base, 0x5A, (size_t)(bytes + 32) / 16 * 16);
    if (bytes > 0)
        memcpy((char *)*base + shift, src, (size_t)bytes);
    return (char *)*base + shift;
}

static void wbuf_free(struct wbuf *b)
{
    for (int k = 0; k < QS_PLANE_COUNT; k++)
        free(b->plane[k]);
    free(b->data);
    free(b->meta);
    free(b->dense);
}

/* Build the weight from w0 (N x K f32): planes with the data plane `shift` bytes off. */
static void make_weight(qs_ctx *ctx, const struct wcase *c, const float *w0, int64_t N, int64_t K,
                        int shift, struct wbuf *b)
{
    int sparse = c->kind == QS_WEIGHT_SP24 || c->kind == QS_WEIGHT_SP24_QUANT;
    int64_t n = N * K, cols = sparse ? K / 2 : K, vb = 0, mc = 0;
    float *vals = NULL;

    memset(b, 0, sizeof *b);
    b->dense = malloc((size_t)(n > 0 ? n : 1) * 4);
    b->w.kind = c->kind;
    b->smax = 1.0;
    if (sparse) {
        assert_int_equal(qs_sp24_size(QS_DTYPE_F32, N, K, &vb, &mc), QS_OK);
        vals = malloc((size_t)(vb > 0 ? vb : 4));
        b->meta = malloc((size_t)(mc > 0 ? mc : 1) * 2);
        assert_int_equal(qs_sp24_prune_compress(ctx, w0, QS_DTYPE_F32, N, K, NULL, vals, vb,
                                                b->meta, mc, NULL, 0),
                         QS_OK);
        b->w.meta = b->meta;
        b->w.meta_count = mc;
    }
    if (c->kind == QS_WEIGHT_DENSE || c->kind == QS_WEIGHT_SP24) {
        const float *src = sparse ? vals : w0;
        int64_t cnt = N * cols, esz = qs_dtype_size(c->dtype);
        void *conv = malloc((size_t)(cnt > 0 ? cnt : 1) * (size_t)esz);
        float *back = malloc((size_t)(cnt > 0 ? cnt : 1) * 4);
        assert_int_equal(qs_convert(ctx, src, QS_DTYPE_F32, conv, c->dtype, cnt, cnt * esz), QS_OK);
        assert_int_equal(qs_convert(ctx, conv, c->dtype, back, QS_DTYPE_F32, cnt, cnt * 4), QS_OK);
        b->w.dtype = c->dtype;
        /* off 16-byte alignment by one element: a device load must stay element-aligned */
        b->w.data = copy_at(conv, cnt * esz, (int)(shift * esz), &b->data);
        b->w.data_bytes = cnt * esz;
        if (sparse)
            assert_int_equal(qs_sp24_decompress(ctx, back, QS_DTYPE_F32, b->meta, mc, N, K,
                                                b->dense, n * 4),
                             QS_OK);
        else
            memcpy(b->dense, back, (size_t)n * 4);
        free(conv);
        free(back);
    } else {
        void **ptr[QS_PLANE_COUNT] = {&b->q.data, &b->q.scale, &b->q.zero_point,
                                      &b->q.nested_scale};
        int64_t *cap[QS_PLANE_COUNT] = {&b->q.data_bytes, &b->q.scale_bytes,
                                        &b->q.zero_point_bytes, &b->q.nested_scale_bytes};
        struct qs_layout lay;
        qs_quant_params_init(&b->qp, c->format);
        if (c->block)
            b->qp.block_size = c->block;
        b->qp.double_quant = c->dq;
        if (c->format == QS_FORMAT_INT8) {
            b->qp.granularity = c->gran;
            b->qp.symmetric = c->sym;
        }
        for (int k = 0; k < QS_PLANE_COUNT; k++) {
            int64_t bytes;
            assert_int_equal(qs_quant_size(&b->qp, N, cols, k, &bytes), QS_OK);
            if (!bytes)
                continue;
            b->plane[k] = aligned_alloc(16, (size_t)(bytes + 32) / 16 * 16);
            *ptr[k] = (char *)b->plane[k] + (k == 0 ? shift : 0);
            *cap[k] = bytes;
        }
        assert_int_equal(qs_quantize(ctx, &b->qp, sparse ? vals : w0, QS_DTYPE_F32, N, cols,
                                     &b->q),
                         QS_OK);
        if (sparse)
            assert_int_equal(qs_sp24_dequantize(ctx, &b->qp, &b->q, b->meta, mc, N, K, b->dense,
                                                QS_DTYPE_F32, n * 4),
                             QS_OK);
        else
            assert_int_equal(qs_dequantize(ctx, &b->qp, &b->q, N, K, b->dense, QS_DTYPE_F32,
                                           n * 4),
                             QS_OK);
        assert_int_equal(qs_layout_compute(ctx, &b->qp, N, cols, &lay), QS_OK);
        qs_backend_layout_fill(&lay, &b->qp, &b->l);
        b->w.quant = &b->qp;
        b->w.q = &b->q;
        b->smax = 1e6; /* scales of the test data stay far below */
    }
    free(vals);
}

/* x (M x K of dtype) from xf, `shift` elements off a 16-byte boundary. */
static void *make_x(qs_ctx *ctx, const float *xf, int64_t M, int64_t K, int32_t dtype, int shift,
                    void **base, float *widened)
{
    int64_t n = M * K, esz = qs_dtype_size(dtype);
    void *conv = malloc((size_t)(n > 0 ? n : 1) * (size_t)esz), *out;

    assert_int_equal(qs_convert(ctx, xf, QS_DTYPE_F32, conv, dtype, n, n * esz), QS_OK);
    assert_int_equal(qs_convert(ctx, conv, dtype, widened, QS_DTYPE_F32, n, n * 4), QS_OK);
    out = copy_at(conv, n * esz, (int)(shift * esz), base);
    free(conv);
    return out;
}

/* |got - exact| within matmul.h's bound: 2 (K/16 + 8) 2^-23 sum |x W| + (2K + 32) 2^-149 (1 +
 * s_max), plus the bias's rounding. */
static int within_bound(float got, double exact, double sabs, int64_t K, double smax)
{
    double tol = 2.0 * ((double)K / 16.0 + 8.0) * 0x1p-23 * sabs +
                 (2.0 * (double)K + 32.0) * 0x1p-149 * (1.0 + smax) + fabs(exact) * 0x1p-23;

    if (isnan(exact))
        return t_bits(got) == 0x7FC00000u;
    return fabs((double)got - exact) <= tol;
}

/* y of the plugin's driver on the host for one weight, x dtype and shape; checks it. */
static void mv_case(const struct wcase *c, int64_t M, int64_t N, int64_t K, int32_t x_dtype,
                    int with_bias, uint64_t seed)
{
    qs_ctx *ctx = cpu_ctx();
    struct host_exec h = {0};
    struct qs_cu_exec ex = make_exec(&h);
    qs_matmul_params mp;
    struct wbuf wa, wm;
    t_rng rng = {seed};
    float *w0 = malloc((size_t)(N * K > 0 ? N * K : 1) * 4);
    float *xf = malloc((size_t)(M * K > 0 ? M * K : 1) * 4), *xw = malloc((size_t)(M * K + 1) * 4);
    float *bias = malloc((size_t)(N > 0 ? N : 1) * 4);
    float *ya = malloc((size_t)(M * N + 1) * 4), *ym = malloc((size_t)(M * N + 1) * 4);
    void *xa_base, *xm_base, *xa, *xm;
    char err[256];

    for (int64_t i = 0; i < N * K; i++)
        w0[i] = (float)t_normal(&rng);
    for (int64_t i = 0; i < M * K; i++)
        xf[i] = (float)(t_normal(&rng) * 2.0);
    for (int64_t i = 0; i < N; i++)
        bias[i] = (float)t_normal(&rng);
    qs_matmul_params_init(&mp);
    make_weight(ctx, c, w0, N, K, 0, &wa);
    make_weight(ctx, c, w0, N, K, 1, &wm);
    xa = make_x(ctx, xf, M, K, x_dtype, 0, &xa_base, xw);
    xm = make_x(ctx, xf, M, K, x_dtype, 1, &xm_base, xw);
    memset(ya, 0x77, (size_t)(M * N + 1) * 4);
    memset(ym, 0x66, (size_t)(M * N + 1) * 4);
    assert_int_equal(qs_cu_matmul(&ex, &mp, xa, x_dtype, M, K, &wa.w,
                                  wa.w.q ? &wa.l : NULL, N, with_bias ? bias : NULL, ya, err,
                                  sizeof err),
                     QS_OK);
    assert_int_equal(qs_cu_matmul(&ex, &mp, xm, x_dtype, M, K, &wm.w,
                                  wm.w.q ? &wm.l : NULL, N, with_bias ? bias : NULL, ym, err,
                                  sizeof err),
                     QS_OK);
    /* the byte-load path sums in the same order: the same bits */
    if (!t_check_bytes("misaligned vs aligned", ym, ya, (size_t)(M * N) * 4, 1)) {
        print_error("%s M=%lld N=%lld K=%lld x dtype %d\n", c->name, (long long)M, (long long)N,
                    (long long)K, x_dtype);
        fail();
    }
    assert_true(t_bits(ya[M * N]) == 0x77777777u); /* nothing past y */
    for (int64_t m = 0; m < M; m++)
        for (int64_t r = 0; r < N; r++) {
            double exact = with_bias ? (double)bias[r] : 0.0, sabs = with_bias ? fabs(bias[r]) : 0;
            for (int64_t k = 0; k < K; k++) {
                double p = (double)xw[m * K + k] * (double)wa.dense[r * K + k];
                exact += p;
                sabs += fabs(p);
            }
            if (!within_bound(ya[m * N + r], exact, sabs, K, wa.smax)) {
                print_error("%s M=%lld N=%lld K=%lld x %d: y[%lld, %lld] = %.9g, exact %.9g, "
                            "sum |x w| %.9g\n",
                            c->name, (long long)M, (long long)N, (long long)K, x_dtype,
                            (long long)m, (long long)r, (double)ya[m * N + r], exact, sabs);
                fail();
            }
            n_outputs++;
        }
    n_cases++;
    n_gemm += h.kernels[QS_CU_K_MM];
    n_gemv += h.kernels[QS_CU_K_MV];
    wbuf_free(&wa);
    wbuf_free(&wm);
    free(xa_base);
    free(xm_base);
    free(w0), free(xf), free(xw), free(bias), free(ya), free(ym);
    qs_ctx_destroy(ctx);
}

static const struct wcase cases[] = {
    {"f32", QS_WEIGHT_DENSE, QS_DTYPE_F32, 0, 0, 0, 0, 0},
    {"f16", QS_WEIGHT_DENSE, QS_DTYPE_F16, 0, 0, 0, 0, 0},
    {"bf16", QS_WEIGHT_DENSE, QS_DTYPE_BF16, 0, 0, 0, 0, 0},
    {"nf4", QS_WEIGHT_QUANT, 0, QS_FORMAT_NF4, 64, 0, 0, 0},
    {"nf4-b32-dq", QS_WEIGHT_QUANT, 0, QS_FORMAT_NF4, 32, 1, 0, 0},
    {"nf4-b6", QS_WEIGHT_QUANT, 0, QS_FORMAT_NF4, 6, 0, 0, 0},
    {"fp4-b128", QS_WEIGHT_QUANT, 0, QS_FORMAT_FP4, 128, 0, 0, 0},
    {"fp4-dq", QS_WEIGHT_QUANT, 0, QS_FORMAT_FP4, 64, 1, 0, 0},
    {"int8-tensor", QS_WEIGHT_QUANT, 0, QS_FORMAT_INT8, 0, 0, QS_GRAN_TENSOR, 1},
    {"int8-row-asym", QS_WEIGHT_QUANT, 0, QS_FORMAT_INT8, 0, 0, QS_GRAN_ROW, 0},
    {"int8-group4", QS_WEIGHT_QUANT, 0, QS_FORMAT_INT8, 4, 0, QS_GRAN_GROUP, 1},
    {"int8-group4-asym", QS_WEIGHT_QUANT, 0, QS_FORMAT_INT8, 4, 0, QS_GRAN_GROUP, 0},
    {"llm-int8", QS_WEIGHT_QUANT, 0, QS_FORMAT_LLM_INT8, 0, 0, 0, 0},
    {"e4m3", QS_WEIGHT_QUANT, 0, QS_FORMAT_FP8_E4M3, 0, 0, 0, 0},
    {"e5m2", QS_WEIGHT_QUANT, 0, QS_FORMAT_FP8_E5M2, 0, 0, 0, 0},
    {"mxfp4", QS_WEIGHT_QUANT, 0, QS_FORMAT_MXFP4, 0, 0, 0, 0},
    {"mxfp8", QS_WEIGHT_QUANT, 0, QS_FORMAT_MXFP8, 0, 0, 0, 0},
    {"nvfp4", QS_WEIGHT_QUANT, 0, QS_FORMAT_NVFP4, 0, 0, 0, 0},
    {"sp24-f32", QS_WEIGHT_SP24, QS_DTYPE_F32, 0, 0, 0, 0, 0},
    {"sp24-f16", QS_WEIGHT_SP24, QS_DTYPE_F16, 0, 0, 0, 0, 0},
    {"sp24-bf16", QS_WEIGHT_SP24, QS_DTYPE_BF16, 0, 0, 0, 0, 0},
    {"sp24-nf4", QS_WEIGHT_SP24_QUANT, 0, QS_FORMAT_NF4, 64, 0, 0, 0},
    {"sp24-int8-row", QS_WEIGHT_SP24_QUANT, 0, QS_FORMAT_INT8, 0, 0, QS_GRAN_ROW, 1},
    {"sp24-mxfp4", QS_WEIGHT_SP24_QUANT, 0, QS_FORMAT_MXFP4, 0, 0, 0, 0},
    {"sp24-nvfp4", QS_WEIGHT_SP24_QUANT, 0, QS_FORMAT_NVFP4, 0, 0, 0, 0},
};
#define NCASES ((int)(sizeof cases / sizeof cases[0]))

/* Whether the weight takes this K (2:4: K % 4; INT8 groups divide the stored columns). */
static int takes(const struct wcase *c, int64_t K)
{
    int sparse = c->kind == QS_WEIGHT_SP24 || c->kind == QS_WEIGHT_SP24_QUANT;
    int64_t cols = sparse ? K / 2 : K;

    if (sparse && K % 4 != 0)
        return 0;
    return !(c->format == QS_FORMAT_INT8 && c->gran == QS_GRAN_GROUP && cols % c->block != 0);
}

static void test_every_weight(void **state)
{
    /* M < 16: the GEMV; M >= 16: the tensor-core GEMM (tile edges in every dimension) */
    const int64_t shapes[][3] = {{1, 3, 7},   {2, 5, 64},   {1, 17, 333}, {3, 8, 1024},
                                 {1, 4, 4100}, {16, 9, 96},  {0, 3, 8},    {2, 0, 8},
                                 {2, 3, 0},   {1, 2, 40},   {17, 65, 36}, {70, 3, 200},
                                 {20, 20, 0}};
    const int32_t xd[3] = {QS_DTYPE_F32, QS_DTYPE_F16, QS_DTYPE_BF16};
    (void)state;
    for (int c = 0; c < NCASES; c++)
        for (size_t s = 0; s < sizeof shapes / sizeof shapes[0]; s++)
            for (int d = 0; d < 3; d++)
                if (takes(&cases[c], shapes[s][2]))
                    mv_case(&cases[c], shapes[s][0], shapes[s][1], shapes[s][2], xd[d],
                            (int)((s + (size_t)d) % 2), 1000 + (uint64_t)(c * 100) + s * 3 + d);
    assert_true(n_gemm > 0 && n_gemv > 0);
}

/* The limbs carry every f32 exactly but NaN, Inf and values with bits below 2^-133, which the
 * scan must flag (those calls take the GEMV); random bit patterns cover both. */
static void test_limbs(void **state)
{
    t_rng rng = {3};
    (void)state;
    for (int i = 0; i < 100000; i++) {
        uint32_t u = (uint32_t)t_next(&rng);
        float v = t_f32_from_bits(u);
        uint16_t l[3];
        double sum;
        qs_cu_split3(v, l);
        sum = (double)qs_hd_bf16_to_f32(l[0]) + (double)qs_hd_bf16_to_f32(l[1]) +
              (double)qs_hd_bf16_to_f32(l[2]);
        if (qs_cu_tc_bad(v))
            continue;
        if (sum != (double)v) {
            print_error("0x%08X splits into %04X %04X %04X\n", u, l[0], l[1], l[2]);
            fail();
        }
    }
    assert_true(qs_cu_tc_bad(INFINITY) && qs_cu_tc_bad(NAN) && qs_cu_tc_bad(1e-42f) &&
                qs_cu_tc_bad(t_f32_from_bits(0x84A1EBD4u)));
    assert_false(qs_cu_tc_bad(0x1p-133f) || qs_cu_tc_bad(-0.0f) || qs_cu_tc_bad(3.4028235e38f) ||
                 qs_cu_tc_bad(0x1.fep-110f) || qs_cu_tc_bad(0x1.fffffep-100f));
    {
        uint16_t l[3];
        qs_cu_split3(3.4028235e38f, l); /* truncation: FLT_MAX's top limb stays finite */
        assert_true(l[0] == 0x7F7F);
    }
}

/* NaN in x reaches exactly the outputs the CPU gives NaN, as 0x7FC00000. */
static void test_nan(void **state)
{
    qs_ctx *ctx = cpu_ctx();
    struct host_exec h = {0};
    struct qs_cu_exec ex = make_exec(&h);
    const int64_t M = 18, N = 5, K = 96; /* the GEMM's size: its scan hands over to the GEMV */
    float w0[5 * 96], x[18 * 96], yc[90], yg[90];
    qs_matmul_params mp;
    struct wbuf b;
    char err[256];
    t_rng rng = {7};
    (void)state;

    for (int i = 0; i < N * K; i++)
        w0[i] = (float)t_normal(&rng);
    for (int i = 0; i < M * K; i++)
        x[i] = (float)t_normal(&rng);
    x[K + 5] = NAN;
    x[3 * K + 7] = INFINITY;
    qs_matmul_params_init(&mp);
    for (int c = 0; c < NCASES; c++) {
        make_weight(ctx, &cases[c], w0, N, K, 0, &b);
        assert_int_equal(qs_matmul(ctx, &mp, x, QS_DTYPE_F32, M, K, &b.w, N, NULL, yc,
                                   sizeof yc),
                         QS_OK);
        assert_int_equal(qs_cu_matmul(&ex, &mp, x, QS_DTYPE_F32, M, K, &b.w, b.w.q ? &b.l : NULL,
                                      N, NULL, yg, err, sizeof err),
                         QS_OK);
        for (int i = 0; i < M * N; i++) {
            assert_int_equal(isnan(yc[i]) != 0, isnan(yg[i]) != 0);
            assert_int_equal(isinf(yc[i]) != 0, isinf(yg[i]) != 0);
            if (isnan(yg[i]))
                assert_true(t_bits(yg[i]) == 0x7FC00000u);
        }
        wbuf_free(&b);
    }
    /* the GEMM stepped aside for the GEMV each time */
    assert_int_equal(h.kernels[QS_CU_K_MM], NCASES);
    assert_int_equal(h.kernels[QS_CU_K_MV], NCASES);
    qs_ctx_destroy(ctx);
}

/* Refusals: bad 2:4 meta (the CPU's message, y untouched), int8 activations, packed weights. */
static void test_refusals(void **state)
{
    qs_ctx *ctx = cpu_ctx();
    struct host_exec h = {0};
    struct qs_cu_exec ex = make_exec(&h);
    const int64_t M = 1, N = 3, K = 40;
    float w0[3 * 40], x[40], y[3], yc[3];
    qs_matmul_params mp;
    struct wbuf b;
    qs_weight packed;
    char err[256];
    t_rng rng = {9};
    (void)state;

    for (int i = 0; i < N * K; i++)
        w0[i] = (float)t_normal(&rng);
    for (int i = 0; i < K; i++)
        x[i] = (float)t_normal(&rng);
    qs_matmul_params_init(&mp);
    make_weight(ctx, &cases[21], w0, N, K, 0, &b); /* sp24-nf4 */
    b.meta[1 * 3 + 1] = (uint16_t)((b.meta[1 * 3 + 1] & ~0x0F00u) | 0x0700u); /* row 1, group 6 */
    memset(y, 0x5A, sizeof y);
    assert_int_equal(qs_matmul(ctx, &mp, x, QS_DTYPE_F32, M, K, &b.w, N, NULL, yc, sizeof yc),
                     QS_ERR_BAD_DATA);
    assert_int_equal(qs_cu_matmul(&ex, &mp, x, QS_DTYPE_F32, M, K, &b.w, &b.l, N, NULL, y, err,
                                  sizeof err),
                     QS_ERR_BAD_DATA);
    assert_string_equal(err, qs_ctx_last_error(ctx));
    for (int i = 0; i < 3; i++)
        assert_true(t_bits(y[i]) == 0x5A5A5A5Au);
    wbuf_free(&b);
    make_weight(ctx, &cases[3], w0, N, K, 0, &b); /* nf4 */
    mp.activations = QS_MATMUL_ACT_INT8;
    assert_int_equal(qs_cu_matmul(&ex, &mp, x, QS_DTYPE_F32, M, K, &b.w, &b.l, N, NULL, y, err,
                                  sizeof err),
                     QS_ERR_UNSUPPORTED);
    assert_non_null(strstr(err, "int8 activations"));
    mp.activations = QS_MATMUL_ACT_F32;
    memset(&packed, 0, sizeof packed);
    packed.kind = QS_WEIGHT_PACKED;
    assert_int_equal(qs_cu_matmul(&ex, &mp, x, QS_DTYPE_F32, M, K, &packed, NULL, N, NULL, y, err,
                                  sizeof err),
                     QS_ERR_UNSUPPORTED);
    assert_non_null(strstr(err, "packed"));
    for (int i = 0; i < 3; i++)
        assert_true(t_bits(y[i]) == 0x5A5A5A5Au);
    wbuf_free(&b);
    qs_ctx_destroy(ctx);
}

/* The bound check can fail: a result off by a thousandth of sum |x w| is caught. */
static void test_negative(void **state)
{
    (void)state;
    assert_true(within_bound(1.0f, 1.0, 1.0, 64, 1.0));
    assert_false(within_bound(1.001f, 1.0, 1.0, 64, 1.0));
    assert_false(within_bound(1.0f, NAN, 1.0, 64, 1.0));
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_negative),
        cmocka_unit_test(test_limbs),
        cmocka_unit_test(test_every_weight),
        cmocka_unit_test(test_nan),
        cmocka_unit_test(test_refusals),
    };
    int rc = cmocka_run_group_tests(tests, NULL, NULL);
    fprintf(stderr, "%lld cases (%lld GEMM, %lld GEMV launches), %lld outputs compared\n",
            (long long)n_cases, (long long)n_gemm, (long long)n_gemv, (long long)n_outputs);
    return rc;
}
