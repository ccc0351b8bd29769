/* SPDX-License-Identifier: MIT */
/*
 * The CUDA plugin's code on the host (src/cuda/cuda_items.h, cuda_pipeline.c): its drivers run
 * over a host executor that plays the GPU grid, items in a scrambled order, reductions with the
 * device's thread count and shared-memory tree, the GEMV with the device's half-warp lanes and
 * shuffle tree. Every plane, scale field and decoded value is compared bit for bit with the CPU
 * backend (qs_quantize / qs_dequantize on the scalar reference) and every GEMV output with the
 * reference dot products (docs/formats.md; include/qsparse/matmul.h for the summation order).
 * No GPU is needed: this is how the plugin's numerics are tested at every tier of the suite.
 */
#include "common.h"

#include "../src/core/backend.h"
#include "../src/core/kernels.h"
#include "../src/cuda/cuda_pipeline.h"
#include "../src/ref/ref.h"
#include "../src/ref/sp24_ref.h"

/* ---- the host executor ----------------------------------------------------------------------- */

struct host_exec {
    int64_t launches;
    int fail_at; /* > 0: the launch with this number fails (error-path tests) */
};

/* Index k of `count` in a scrambled order: items must not depend on running in index order. */
static int64_t scramble(int64_t k, int64_t count)
{
    const int64_t p = 7919;
    return count % p == 0 ? count - 1 - k : (k * p) % count;
}

static void run_reduce(const struct qs_cu_red *a, int64_t count)
{
    for (int64_t k = 0; k < count; k++) {
        int64_t i = scramble(k, count);
        struct qs_cu_pair p[QS_CU_RED_THREADS];
        for (int t = 0; t < QS_CU_RED_THREADS; t++)
            p[t] = qs_cu_red_thread(a, i, t);
        for (int s = QS_CU_RED_THREADS / 2; s > 0; s /= 2) /* the shared-memory tree */
            for (int t = 0; t < s; t++)
                p[t] = qs_cu_red_join(a->kind, p[t], p[t + s]);
        a->partial[i] = p[0];
    }
}

static void run_gemv(const struct qs_cu_gemv *a, int64_t count)
{
    for (int64_t k = 0; k < count; k++) {
        int64_t r = scramble(k, count), segs = qs_cu_gemv_segments(a, r);
        float acc = 0.0f;
        for (int64_t s = 0; s < segs; s++) {
            float t[16];
            for (int lane = 0; lane < 16; lane++)
                t[lane] = qs_cu_gemv_lane(a, r, s, lane);
            for (int h = 8; h >= 1; h /= 2) /* __shfl_down_sync by 8, 4, 2, 1 */
                for (int i = 0; i < h; i++)
                    t[i] = t[i] + t[i + h];
            acc = qs_cu_gemv_acc(acc, t[0], qs_cu_gemv_scale(a, r, s));
        }
        a->y[r] = qs_hd_nan_canon(acc);
    }
}

#define GRID(type, fn)                                                                             \
    for (int64_t k = 0; k < count; k++)                                                            \
        fn((const type *)args, scramble(k, count));                                                \
    break

static int host_launch(void *user, int32_t kernel, const void *args, int64_t count)
{
    struct host_exec *h = user;

    if (h->fail_at > 0 && ++h->launches == h->fail_at)
        return 1;
    switch (kernel) {
    case QS_CU_K_CVT_IN: GRID(struct qs_cu_cvt_in, qs_cu_cvt_in_item);
    case QS_CU_K_CVT_OUT: GRID(struct qs_cu_cvt_out, qs_cu_cvt_out_item);
    case QS_CU_K_REDUCE: run_reduce(args, count); break;
    case QS_CU_K_BNB4_QUANT: GRID(struct qs_cu_bnb4_quant, qs_cu_bnb4_quant_item);
    case QS_CU_K_DQ_CENTER: GRID(struct qs_cu_dq_quant, qs_cu_dq_center_item);
    case QS_CU_K_DQ_BLOCK: GRID(struct qs_cu_dq_quant, qs_cu_dq_block_item);
    case QS_CU_K_DQ_DEQUANT: GRID(struct qs_cu_dq_dequant, qs_cu_dq_dequant_item);
    case QS_CU_K_BNB4_DEQUANT: GRID(struct qs_cu_bnb4_dequant, qs_cu_bnb4_dequant_item);
    case QS_CU_K_INT8_PARAMS: GRID(struct qs_cu_int8_params, qs_cu_int8_params_item);
    case QS_CU_K_INT8_QUANT: GRID(struct qs_cu_int8_quant, qs_cu_int8_quant_item);
    case QS_CU_K_INT8_DEQUANT: GRID(struct qs_cu_int8_dequant, qs_cu_int8_dequant_item);
    case QS_CU_K_TENSOR_SCALE: GRID(struct qs_cu_tensor_scale, qs_cu_tensor_scale_item);
    case QS_CU_K_FP8_QUANT: GRID(struct qs_cu_fp8, qs_cu_fp8_quant_item);
    case QS_CU_K_FP8_DEQUANT: GRID(struct qs_cu_fp8, qs_cu_fp8_dequant_item);
    case QS_CU_K_ROWS_QUANT: GRID(struct qs_cu_rows, qs_cu_rows_quant_item);
    case QS_CU_K_ROWS_DEQUANT: GRID(struct qs_cu_rows, qs_cu_rows_dequant_item);
    case QS_CU_K_GEMV: run_gemv(args, count); break;
    case QS_CU_K_SP24_CHECK: {
        const struct qs_cu_sp24_check *c = args;
        for (int64_t k = 0; k < count; k++) { /* atomicMin on the device */
            int64_t i = scramble(k, count);
            if (qs_cu_sp24_bad_item(&c->a, i, c->decompress) && (unsigned long long)i < *c->first)
                *c->first = (unsigned long long)i;
        }
        break;
    }
    case QS_CU_K_SP24_COMPRESS: GRID(struct qs_cu_sp24, qs_cu_sp24_compress_item);
    case QS_CU_K_SP24_DECOMPRESS: GRID(struct qs_cu_sp24, qs_cu_sp24_decompress_item);
    default: return 1;
    }
    return 0;
}

static void *host_alloc(void *user, size_t bytes)
{
    (void)user;
    return malloc(bytes);
}

static void host_release(void *user, void *p)
{
    (void)user;
    free(p);
}

static int host_copy(void *user, void *dst, const void *src, size_t bytes)
{
    (void)user;
    memcpy(dst, src, bytes);
    return 0;
}

static struct qs_cu_exec make_exec(struct host_exec *h)
{
    struct qs_cu_exec x = {
        .user = h,
        .tables = {qs_nf4_codebook, qs_fp4_codebook, qs_dyn8_map, qs_e2m1_values},
        .launch = host_launch,
        .alloc = host_alloc,
        .release = host_release,
        .to_host = host_copy,
        .to_device = host_copy,
    };
    return x;
}

/* ---- one case: CPU backend vs the plugin's drivers on the host ------------------------------- */

struct qt {
    qs_qtensor q;
    void *plane[QS_PLANE_COUNT];
    int64_t bytes[QS_PLANE_COUNT];
};

static void qt_alloc(struct qt *t, const qs_quant_params *p, int64_t rows, int64_t cols,
                     uint8_t fill)
{
    memset(t, 0, sizeof *t);
    for (int k = 0; k < QS_PLANE_COUNT; k++) {
        assert_int_equal(qs_quant_size(p, rows, cols, k, &t->bytes[k]), QS_OK);
        t->plane[k] = t->bytes[k] ? malloc((size_t)t->bytes[k]) : NULL;
        if (t->plane[k])
            memset(t->plane[k], fill, (size_t)t->bytes[k]);
    }
    t->q.data = t->plane[0];
    t->q.data_bytes = t->bytes[0];
    t->q.scale = t->plane[1];
    t->q.scale_bytes = t->bytes[1];
    t->q.zero_point = t->plane[2];
    t->q.zero_point_bytes = t->bytes[2];
    t->q.nested_scale = t->plane[3];
    t->q.nested_scale_bytes = t->bytes[3];
}

static void qt_free(struct qt *t)
{
    for (int k = 0; k < QS_PLANE_COUNT; k++)
        free(t->plane[k]);
}

/* The plain layout the plugin's drivers get (include/qsparse/plugin.h), as the core makes it. */
static qs_status plain_layout(qs_ctx *ctx, const qs_quant_params *p, int64_t rows, int64_t cols,
                              qs_backend_layout *out)
{
    struct qs_layout l;
    qs_status st = qs_layout_compute(ctx, p, rows, cols, &l);

    if (st == QS_OK)
        qs_backend_layout_fill(&l, p, out);
    return st;
}

static qs_ctx *cpu_ctx(int32_t reject)
{
    qs_ctx_params cp;
    qs_ctx *ctx = NULL;

    qs_ctx_params_init(&cp);
    cp.backend = QS_BACKEND_CPU;
    cp.num_threads = 1;
    cp.nonfinite = reject ? QS_NONFINITE_REJECT : QS_NONFINITE_ENCODE;
    assert_int_equal(qs_ctx_create(&cp, &ctx), QS_OK);
    return ctx;
}

static int64_t n_cases;

/* Quantize and dequantize one tensor both ways; 1 when every byte agrees. */
static int check_case(const qs_quant_params *p, int64_t rows, int64_t cols, int32_t dtype,
                      uint64_t seed, int32_t reject)
{
    qs_ctx *ctx = cpu_ctx(reject);
    struct host_exec h = {0, 0};
    struct qs_cu_exec x = make_exec(&h);
    qs_backend_layout l;
    struct qt a, b;
    int64_t n = rows * cols, esz = qs_dtype_size(dtype);
    float *xf = malloc((size_t)(n > 0 ? n : 1) * sizeof(float));
    void *src = malloc((size_t)(n > 0 ? n : 1) * (size_t)esz);
    void *da = malloc((size_t)(n > 0 ? n : 1) * (size_t)esz);
    void *db = malloc((size_t)(n > 0 ? n : 1) * (size_t)esz);
    char err[256];
    t_rng rng = {seed};
    qs_status sa, sb;
    int ok = 1;

    t_fill_mixed(&rng, xf, n, reject ? 0.0 : 0.05);
    if (reject && n > 2)
        xf[n / 2] = INFINITY; /* one non-finite value: both must refuse */
    if (dtype == QS_DTYPE_F32) {
        memcpy(src, xf, (size_t)n * sizeof(float));
    } else {
        for (int64_t i = 0; i < n; i++)
            ((uint16_t *)src)[i] = dtype == QS_DTYPE_F16 ? qs_ref_f32_to_f16(xf[i])
                                                         : qs_ref_f32_to_bf16(xf[i]);
    }
    assert_int_equal(plain_layout(ctx, p, rows, cols, &l), QS_OK);
    qt_alloc(&a, p, rows, cols, 0x88);
    qt_alloc(&b, p, rows, cols, 0x88);
    sa = qs_quantize(ctx, p, src, dtype, rows, cols, &a.q);
    sb = qs_cu_quantize(&x, &l, p, src, dtype, &b.q, reject, err, sizeof err);
    n_cases++;
    if (sa != sb) {
        print_error("format %d %lldx%lld dtype %d: status cpu %d, cuda %d (%s)\n", p->format,
                    (long long)rows, (long long)cols, dtype, sa, sb, err);
        ok = 0;
    }
    for (int k = 0; ok && sa == QS_OK && k < QS_PLANE_COUNT; k++)
        if (a.bytes[k] && !t_check_bytes("plane", b.plane[k], a.plane[k], (size_t)a.bytes[k], 1)) {
            print_error("format %d %lldx%lld dtype %d: plane %d differs\n", p->format,
                        (long long)rows, (long long)cols, dtype, k);
            ok = 0;
        }
    if (ok && sa == QS_OK &&
        (t_bits(a.q.global_scale) != t_bits(b.q.global_scale) ||
         t_bits(a.q.nested_offset) != t_bits(b.q.nested_offset))) {
        print_error("format %d: global_scale or nested_offset differ\n", p->format);
        ok = 0;
    }
    if (ok && sa == QS_OK) {
        memset(da, 0x88, (size_t)(n * esz));
        memset(db, 0x77, (size_t)(n * esz));
        sa = qs_dequantize(ctx, p, &a.q, rows, cols, da, dtype, n * esz);
        sb = qs_cu_dequantize(&x, &l, p, &a.q, db, dtype, err, sizeof err);
        if (sa != QS_OK || sb != QS_OK ||
            !t_check_bytes("dequantized", db, da, (size_t)(n * esz), 1)) {
            print_error("format %d %lldx%lld dtype %d: dequantize differs (%d %d)\n", p->format,
                        (long long)rows, (long long)cols, dtype, sa, sb);
            ok = 0;
        }
    }
    qt_free(&a);
    qt_free(&b);
    free(xf);
    free(src);
    free(da);
    free(db);
    qs_ctx_destroy(ctx);
    return ok;
}

static const int64_t shapes[][2] = {
    {1, 1}, {1, 2}, {1, 7}, {3, 33}, {2, 64}, {5, 100}, {4, 257}, {7, 1000}, {1, 4097},
    {2, 16385}, {0, 8}, {3, 0},
};
#define NSHAPES ((int)(sizeof shapes / sizeof shapes[0]))

static void sweep(const qs_quant_params *p, uint64_t seed)
{
    for (int s = 0; s < NSHAPES; s++) {
        const int32_t dtypes[3] = {QS_DTYPE_F32, QS_DTYPE_F16, QS_DTYPE_BF16};
        for (int d = 0; d < 3; d++) {
            int64_t rows = shapes[s][0], cols = shapes[s][1];
            int64_t bytes;
            /* shapes the format refuses (INT8 groups must divide cols) are skipped */
            if (qs_quant_size(p, rows, cols, QS_PLANE_DATA, &bytes) != QS_OK)
                continue;
            assert_true(check_case(p, rows, cols, dtypes[d], seed + (uint64_t)(s * 3 + d), 0));
        }
    }
}

static void test_bnb4(void **state)
{
    const int32_t fmts[2] = {QS_FORMAT_NF4, QS_FORMAT_FP4};
    const int32_t blocks[4] = {64, 32, 4096, 6};
    (void)state;
    for (int f = 0; f < 2; f++)
        for (int b = 0; b < 4; b++)
            for (int dq = 0; dq < 2; dq++) {
                qs_quant_params p;
                qs_quant_params_init(&p, fmts[f]);
                p.block_size = blocks[b];
                p.double_quant = dq;
                sweep(&p, 100 + (uint64_t)(f * 8 + b * 2 + dq) * 1000);
            }
}

static void test_int8(void **state)
{
    (void)state;
    for (int g = 0; g < 3; g++)
        for (int sym = 0; sym < 2; sym++) {
            qs_quant_params p;
            qs_quant_params_init(&p, QS_FORMAT_INT8);
            p.granularity = g;
            p.symmetric = sym;
            if (g == QS_GRAN_GROUP)
                p.block_size = 1; /* divides every column count of the sweep */
            sweep(&p, 200 + (uint64_t)(g * 2 + sym) * 1000);
        }
    {
        qs_quant_params p;
        qs_quant_params_init(&p, QS_FORMAT_INT8);
        p.granularity = QS_GRAN_GROUP;
        p.block_size = 64; /* 2x64 and 1x... only where 64 divides cols */
        sweep(&p, 9000);
    }
    {
        qs_quant_params p;
        qs_quant_params_init(&p, QS_FORMAT_LLM_INT8);
        sweep(&p, 9100);
    }
}

static void test_fp8_mx_nvfp4(void **state)
{
    const int32_t fmts[5] = {QS_FORMAT_FP8_E4M3, QS_FORMAT_FP8_E5M2, QS_FORMAT_MXFP4,
                             QS_FORMAT_MXFP8, QS_FORMAT_NVFP4};
    (void)state;
    for (int f = 0; f < 5; f++)
        for (int opt = 0; opt < 2; opt++) {
            qs_quant_params p;
            qs_quant_params_init(&p, fmts[f]);
            if (fmts[f] == QS_FORMAT_MXFP4 || fmts[f] == QS_FORMAT_MXFP8)
                p.scale_rounding = opt;
            else if (opt)
                p.scale = fmts[f] == QS_FORMAT_NVFP4 ? 0.01f : 3.0f; /* a given scale */
            sweep(&p, 300 + (uint64_t)(f * 2 + opt) * 1000);
        }
}

/* The reject policy: the device scan must refuse exactly when the CPU does. */
static void test_reject(void **state)
{
    qs_quant_params p;
    (void)state;
    qs_quant_params_init(&p, QS_FORMAT_NF4);
    assert_true(check_case(&p, 3, 100, QS_DTYPE_F32, 1, 1));      /* holds an Inf: refused */
    assert_true(check_case(&p, 2, 20000, QS_DTYPE_F32, 2, 1));    /* over two chunks */
    assert_true(check_case(&p, 1, 2, QS_DTYPE_F32, 3, 1));        /* finite: accepted */
}

/* A failing launch is a status with a message, and the tensor's struct fields stay. */
static void test_launch_failure(void **state)
{
    qs_ctx *ctx = cpu_ctx(0);
    struct host_exec h = {0, 1};
    struct qs_cu_exec x = make_exec(&h);
    qs_backend_layout l;
    qs_quant_params p;
    struct qt t;
    float src[64] = {1.0f};
    char err[256];
    (void)state;

    qs_quant_params_init(&p, QS_FORMAT_NVFP4);
    assert_int_equal(plain_layout(ctx, &p, 1, 64, &l), QS_OK);
    qt_alloc(&t, &p, 1, 64, 0);
    t.q.global_scale = 5.0f;
    assert_int_equal(qs_cu_quantize(&x, &l, &p, src, QS_DTYPE_F32, &t.q, 0, err, sizeof err),
                     QS_ERR_BACKEND);
    assert_non_null(strstr(err, "cuda backend: kernel"));
    assert_true(t.q.global_scale == 5.0f);
    qt_free(&t);
    qs_ctx_destroy(ctx);
}

/* ---- GEMV against the reference dot products --------------------------------------------- */

static void gemv_case(const qs_quant_params *p, int64_t rows, int64_t cols, uint64_t seed)
{
    qs_ctx *ctx = cpu_ctx(0);
    struct host_exec h = {0, 0};
    struct qs_cu_exec x = make_exec(&h);
    qs_backend_layout l;
    struct qt t;
    int64_t n = rows * cols;
    float *w = malloc((size_t)(n > 0 ? n : 1) * sizeof(float));
    float *xv = malloc((size_t)(cols > 0 ? cols : 1) * sizeof(float));
    float *y = malloc((size_t)(rows > 0 ? rows : 1) * sizeof(float));
    float *want = malloc((size_t)(rows > 0 ? rows : 1) * sizeof(float));
    float *absmax = NULL;
    char err[256];
    t_rng rng = {seed};

    t_fill_mixed(&rng, w, n, 0.0);
    t_fill_mixed(&rng, xv, cols, 0.01);
    assert_int_equal(plain_layout(ctx, p, rows, cols, &l), QS_OK);
    qt_alloc(&t, p, rows, cols, 0);
    assert_int_equal(qs_quantize(ctx, p, w, QS_DTYPE_F32, rows, cols, &t.q), QS_OK);
    if (p->format == QS_FORMAT_NF4 && p->double_quant) { /* the decoded absmax, as the CPU */
        absmax = malloc((size_t)l.units * sizeof(float));
        qs_dyn8_dequant__ref(t.q.scale, t.q.nested_scale, l.units, 256, t.q.nested_offset,
                             absmax);
    }
    for (int64_t r = 0; r < rows; r++) {
        if (p->format == QS_FORMAT_NF4) {
            want[r] = qs_mm_dot_nf4__ref(xv, cols, t.q.data, r * cols,
                                         absmax ? absmax : (const float *)t.q.scale, l.block);
        } else {
            int64_t u = l.unit_rule == QS_BACKEND_UNITS_ROWS         ? r
                        : l.unit_rule == QS_BACKEND_UNITS_ROW_BLOCKS ? r * (cols / l.block)
                                                                     : 0;
            int64_t group = l.unit_rule == QS_BACKEND_UNITS_ROW_BLOCKS ? l.block : cols;
            const int8_t *zp = p->symmetric ? NULL : (const int8_t *)t.q.zero_point + u;
            want[r] = qs_mm_dot_int8__ref(xv, cols, (const int8_t *)t.q.data + r * cols,
                                          (const float *)t.q.scale + u, zp, group);
        }
    }
    memset(y, 0x77, (size_t)(rows > 0 ? rows : 1) * sizeof(float));
    assert_int_equal(qs_cu_gemv_run(&x, &l, p, &t.q, xv, y, err, sizeof err), QS_OK);
    assert_true(t_check_bytes("gemv", y, want, (size_t)rows * sizeof(float), 1));
    n_cases++;
    free(absmax);
    qt_free(&t);
    free(w);
    free(xv);
    free(y);
    free(want);
    qs_ctx_destroy(ctx);
}

static void test_gemv(void **state)
{
    const int64_t gshapes[][2] = {{1, 1}, {3, 7}, {5, 64}, {4, 100}, {17, 333}, {8, 1024},
                                  {2, 4099}};
    (void)state;
    for (int s = 0; s < 7; s++) {
        int64_t rows = gshapes[s][0], cols = gshapes[s][1];
        for (int v = 0; v < 4; v++) {
            qs_quant_params p;
            qs_quant_params_init(&p, QS_FORMAT_NF4);
            p.block_size = v == 0 ? 64 : v == 1 ? 32 : v == 2 ? 4096 : 6;
            p.double_quant = v == 1;
            gemv_case(&p, rows, cols, 500 + (uint64_t)(s * 4 + v));
        }
        for (int g = 0; g < 3; g++)
            for (int sym = 0; sym < 2; sym++) {
                qs_quant_params p;
                int64_t bytes;
                qs_quant_params_init(&p, QS_FORMAT_INT8);
                p.granularity = g;
                p.symmetric = sym;
                p.block_size = g == QS_GRAN_GROUP ? (cols % 32 == 0 ? 32 : 1) : p.block_size;
                if (qs_quant_size(&p, rows, cols, QS_PLANE_DATA, &bytes) != QS_OK)
                    continue;
                gemv_case(&p, rows, cols, 600 + (uint64_t)(s * 6 + g * 2 + sym));
            }
    }
}

/* ---- 2:4 against the CPU's qs_sp24_* ------------------------------------------------------- */

/* The computed nibble rule equals the reference's table for all 16 keep patterns. */
static void test_sp24_nibble_rule(void **state)
{
    (void)state;
    for (unsigned keep = 0; keep < 16; keep++)
        assert_int_equal(qs_hd_sp24_nibble(keep), qs_sp24_nibble_of_keep[keep]);
}

static int sp24_case(int64_t rows, int64_t cols, int use_norms, int use_mask, uint64_t seed,
                     int corrupt)
{
    qs_ctx *ctx = cpu_ctx(0);
    struct host_exec h = {0, 0};
    struct qs_cu_exec x = make_exec(&h);
    int64_t n = rows * cols, vbytes, mcount;
    float *w = malloc((size_t)(n ? n : 1) * 4), *norms = malloc((size_t)(cols ? cols : 1) * 4);
    float *va = malloc((size_t)(n ? n : 2) * 2), *vb = malloc((size_t)(n ? n : 2) * 2);
    float *da = malloc((size_t)(n ? n : 1) * 4), *db = malloc((size_t)(n ? n : 1) * 4);
    uint8_t *mask = malloc((size_t)(n ? n : 1)), *ma = malloc((size_t)(n ? n : 1));
    uint8_t *mb = malloc((size_t)(n ? n : 1));
    uint16_t *meta_a, *meta_b;
    struct qs_cu_sp24 a;
    char err[256];
    t_rng rng = {seed};
    qs_status sa, sb;
    int ok = 1;

    assert_int_equal(qs_sp24_size(QS_DTYPE_F32, rows, cols, &vbytes, &mcount), QS_OK);
    meta_a = malloc((size_t)(mcount ? mcount : 1) * 2);
    meta_b = malloc((size_t)(mcount ? mcount : 1) * 2);
    t_fill_mixed(&rng, w, n, 0.05);
    for (int64_t c = 0; c < cols; c++)
        norms[c] = (float)(t_unif(&rng) * 4.0);
    for (int64_t i = 0; i < n; i++) /* mostly two per group, sometimes fewer or (corrupt) more */
        mask[i] = (uint8_t)((i % 4 == (int64_t)(t_next(&rng) % 4)) || (i % 4 == 3 && corrupt &&
                                                                         i == n - 1) ||
                            (t_next(&rng) % 8 == 0 && i % 4 < 2));
    if (corrupt && n >= 4)
        mask[n - 1] = mask[n - 2] = mask[n - 3] = 1;
    memset(&a, 0, sizeof a);
    a.cols = cols;
    a.words = (cols + 15) / 16;
    a.w = w;
    memset(va, 0x11, (size_t)vbytes);
    memset(vb, 0x22, (size_t)vbytes);
    memset(meta_a, 0x33, (size_t)mcount * 2);
    memset(meta_b, 0x44, (size_t)mcount * 2);
    if (use_mask >= 0) { /* compress with the mask (1) or by non-zero values (0) */
        for (int64_t i = 0; !use_mask && i < n; i++)
            if (!mask[i])
                w[i] = 0.0f;
        a.op = QS_CU_SP24_COMPRESS;
        a.mask_in = use_mask ? mask : NULL;
        a.values = vb;
        a.meta = meta_b;
        sa = qs_sp24_compress(ctx, w, QS_DTYPE_F32, rows, cols, use_mask ? mask : NULL, va,
                              vbytes, meta_a, mcount);
    } else {
        a.op = QS_CU_SP24_PRUNE;
        a.norms = use_norms ? norms : NULL;
        a.values = vb;
        a.meta = meta_b;
        a.mask_out = mb;
        sa = qs_sp24_prune_compress(ctx, w, QS_DTYPE_F32, rows, cols, use_norms ? norms : NULL,
                                    va, vbytes, meta_a, mcount, ma, n);
    }
    sb = qs_cu_sp24_run(&x, &a, rows, err, sizeof err);
    n_cases++;
    if (corrupt && use_mask >= 0 && sa != QS_ERR_BAD_DATA) {
        print_error("2:4: the corrupt mask was accepted (%d)\n", sa);
        ok = 0;
    }
    if (sa != sb) {
        print_error("2:4 %lldx%lld: status cpu %d, cuda %d (%s)\n", (long long)rows,
                    (long long)cols, sa, sb, err);
        ok = 0;
    } else if (sa == QS_OK) {
        ok = t_check_bytes("2:4 values", vb, va, (size_t)vbytes, 1) &&
             t_check_bytes("2:4 meta", meta_b, meta_a, (size_t)mcount * 2, 1) &&
             (use_mask >= 0 || t_check_bytes("2:4 mask", mb, ma, (size_t)n, 1));
    } else {
        /* nothing written on error */
        for (int64_t i = 0; i < vbytes; i++)
            ok &= ((uint8_t *)vb)[i] == 0x22;
    }
    if (ok && sa == QS_OK) { /* decompress both ways; a corrupt nibble must be refused too */
        if (corrupt && mcount > 0)
            meta_a[mcount - 1] ^= 0x3; /* 0x4 <-> 0x7 and friends: invalid */
        memset(da, 0x55, (size_t)n * 4);
        memset(db, 0x66, (size_t)n * 4);
        sa = qs_sp24_decompress(ctx, va, QS_DTYPE_F32, meta_a, mcount, rows, cols, da, n * 4);
        memset(&a, 0, sizeof a);
        a.op = -1;
        a.cols = cols;
        a.words = (cols + 15) / 16;
        a.cvalues = va;
        a.cmeta = meta_a;
        a.dst = db;
        sb = qs_cu_sp24_run(&x, &a, rows, err, sizeof err);
        if (corrupt && sa != QS_ERR_BAD_DATA) {
            print_error("2:4: the corrupt meta was accepted (%d)\n", sa);
            ok = 0;
        }
        if (sa != sb || (sa == QS_OK && !t_check_bytes("2:4 decompressed", db, da, (size_t)n * 4,
                                                       1))) {
            print_error("2:4 decompress %lldx%lld: status cpu %d, cuda %d\n", (long long)rows,
                        (long long)cols, sa, sb);
            ok = 0;
        }
    }
    free(w), free(norms), free(va), free(vb), free(da), free(db), free(mask), free(ma), free(mb);
    free(meta_a), free(meta_b);
    qs_ctx_destroy(ctx);
    return ok;
}

static void test_sp24(void **state)
{
    const int64_t sshapes[][2] = {{1, 4}, {1, 16}, {3, 20}, {2, 36}, {5, 64}, {7, 100},
                                  {4, 1028}, {0, 8}, {3, 0}};
    (void)state;
    for (int s = 0; s < 9; s++)
        for (int v = 0; v < 4; v++) {
            int64_t rows = sshapes[s][0], cols = sshapes[s][1];
            uint64_t seed = 700 + (uint64_t)(s * 4 + v);
            /* prune |w|, prune Wanda, compress by mask, compress by non-zero values */
            assert_true(sp24_case(rows, cols, v == 1, v < 2 ? -1 : v == 2, seed, 0));
        }
    assert_true(sp24_case(3, 20, 0, 1, 9, 1)); /* a group of three kept: BAD_DATA both ways */
    assert_true(sp24_case(4, 64, 0, -1, 10, 1)); /* a corrupt meta nibble for decompress */
}

/* The comparison can fail: a flipped bit of one code is reported. */
static void test_negative(void **state)
{
    uint8_t a[4] = {1, 2, 3, 4}, b[4] = {1, 2, 3, 5};
    (void)state;
    assert_false(t_check_bytes("negative", a, b, 4, 0));
    assert_true(scramble(0, 10) != 0 || scramble(1, 10) != 1); /* the order is scrambled */
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_negative),     cmocka_unit_test(test_bnb4),
        cmocka_unit_test(test_int8),         cmocka_unit_test(test_fp8_mx_nvfp4),
        cmocka_unit_test(test_reject),       cmocka_unit_test(test_launch_failure),
        cmocka_unit_test(test_gemv),         cmocka_unit_test(test_sp24_nibble_rule),
        cmocka_unit_test(test_sp24),
    };
    int rc = cmocka_run_group_tests(tests, NULL, NULL);
    fprintf(stderr, "%lld cases compared\n", (long long)n_cases);
    return rc;
}
