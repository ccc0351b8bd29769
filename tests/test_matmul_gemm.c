/* SPDX-License-Identifier: MIT */
/*
 * The tiled GEMM path of qs_matmul with f32 activations (include/qsparse/matmul.h, M >=
 * QS_MATMUL_GEMM_MIN_M; src/gemm/gemm_tiled.c, src/ref/mm_gemm_ref.c):
 *
 * - mm_gemm_f32 (the GEMM step): every implementation the CPU runs gives the reference's bytes,
 *   over 0 ... 3 panels of 16 activation rows (the AVX-512 pair and its single tail), 0 ... 25 W
 *   rows (two whole register tiles of 12 and of 6, and every tail), k = 0 ... QS_MM_GEMM_KC, a
 *   first slice and one added onto earlier sums, panel strides with and without a gap, and x, W
 *   and the earlier sums salted with NaN (signalling too), +-Inf, -0 and denormals.
 * - qs_matmul on the GEMM path: y[m, n] equals the definition restated here bit for bit: per
 *   slice of QS_MM_GEMM_KC columns a chain of fmaf over x and the dequantized weight (as
 *   qs_dequantize gives it) from +0, slices added in ascending order, then fl(acc + bias[n]) and
 *   the canonical NaN. Every quantized format family (NF4/FP4 with blocks that straddle rows and
 *   slices, double quantization, INT8 tensor / row / group with groups across slice edges, zero
 *   points, LLM.int8, FP8, MXFP4, MXFP8, NVFP4 with short last blocks) and f16 / bf16 weights;
 *   M at the GEMM threshold and just over it, odd, and past one block of 512 x rows; N tails of
 *   the 96-row tasks and of the register tiles; K tails of the slices; with and without bias;
 *   NaN and Inf in x.
 * - the bits are the same for 1, 2 and 3 threads.
 * - the profile names the GEMM path's kernel.
 * A build that runs OpenBLAS on this path (no SIMD GEMM kernel in its table: -Dsimd=false) is held
 * to the float64 bound of the header instead of the restated bits.
 */
#include "common.h"
#include "core/internal.h"
#include "core/kernels.h"
#include "kernel_entries.h"
#include "qsparse/profile.h"
#include "quant_helpers.h"
#include "ref/ref.h"

/* ---- the kernels ------------------------------------------------------------------------------
 */

#define KMAX_ROWS 25
#define KMAX_MP 3

static void check_gemm_kernel(const struct qs_kernel_entry *impl, const struct qs_kernel_entry *ref)
{
    static const int64_t ks[] = {0, 1, 2, 15, 16, 17, 100, 255, QS_MM_GEMM_KC};
    qs_mm_gemm_f32_fn *f = (qs_mm_gemm_f32_fn *)impl->fn, *fr = (qs_mm_gemm_f32_fn *)ref->fn;
    int64_t xs_max = 16 * QS_MM_GEMM_KC + 16, ldc = 16 * KMAX_MP + 5;
    float *xt = malloc((size_t)(KMAX_MP * xs_max) * sizeof(float));
    float *w = malloc((size_t)(KMAX_ROWS * QS_MM_GEMM_LDW) * sizeof(float));
    float *c0 = malloc((size_t)(KMAX_ROWS * ldc) * sizeof(float));
    float *got = malloc((size_t)(KMAX_ROWS * ldc) * sizeof(float));
    float *want = malloc((size_t)(KMAX_ROWS * ldc) * sizeof(float));
    t_rng r = {0x6E33};
    int64_t checks = 0;

    assert_true(xt && w && c0 && got && want);
    for (int64_t rows = 0; rows <= KMAX_ROWS; rows++)
        for (int64_t mp = 0; mp <= KMAX_MP; mp++)
            for (size_t ki = 0; ki < sizeof ks / sizeof ks[0]; ki++) {
                int64_t k = ks[ki], v = rows + mp + (int64_t)ki;
                int64_t xs = 16 * k + (v & 1 ? 16 : 0);
                int32_t acc = (int32_t)((v >> 1) & 1);
                double special = v % 3 == 0 ? 0.03 : 0.0;

                t_fill_mixed(&r, xt, mp * xs, special);
                t_fill_mixed(&r, w, rows * QS_MM_GEMM_LDW, special);
                t_fill_mixed(&r, c0, rows * ldc, special);
                memcpy(got, c0, (size_t)(rows * ldc) * sizeof(float));
                memcpy(want, c0, (size_t)(rows * ldc) * sizeof(float));
                f(xt, xs, mp, k, w, rows, got, ldc, acc);
                fr(xt, xs, mp, k, w, rows, want, ldc, acc);
                if (!T_ASSERT_BYTES(impl->name, got, want, (size_t)(rows * ldc) * sizeof(float)))
                    fail_msg("%s: rows %lld, panels %lld, k %lld, acc %d", impl->name,
                             (long long)rows, (long long)mp, (long long)k, acc);
                checks++;
            }
    print_message("  %-36s bit-exact vs ref: %lld runs\n", impl->name, (long long)checks);
    free(xt);
    free(w);
    free(c0);
    free(got);
    free(want);
}

static void test_gemm_kernels(void **state)
{
    int32_t count, done = 0;
    const struct qs_kernel_entry *e = qs_kernel_entries(&count);
    const struct qs_kernel_entry *ref = test_ref_entry(QS_SLOT_mm_gemm_f32);
    uint32_t cpu = qs_cpu_isa();

    (void)state;
    assert_non_null(ref);
    for (int32_t i = 0; i < count; i++)
        if (e[i].slot == QS_SLOT_mm_gemm_f32 && e[i].isa != 0 && (e[i].isa & ~cpu) == 0) {
            check_gemm_kernel(&e[i], ref);
            done++;
        }
    if (done == 0)
        print_message("  no mm_gemm_f32 implementation runs here beside the reference\n");
}

/* ---- qs_matmul against the restated definition ----------------------------------------------
 */

typedef struct {
    const char *name;
    int32_t kind, format, dtype, gran, sym, dq, block;
} gspec;

static const gspec gspecs[] = {
    {"nf4", QS_WEIGHT_QUANT, QS_FORMAT_NF4, 0, 0, 1, 0, 64},
    {"nf4-dq-b256", QS_WEIGHT_QUANT, QS_FORMAT_NF4, 0, 0, 1, 1, 256},
    {"fp4-b6", QS_WEIGHT_QUANT, QS_FORMAT_FP4, 0, 0, 1, 0, 6},
    {"int8-tensor-asym", QS_WEIGHT_QUANT, QS_FORMAT_INT8, 0, QS_GRAN_TENSOR, 0, 0, 0},
    {"int8-row", QS_WEIGHT_QUANT, QS_FORMAT_INT8, 0, QS_GRAN_ROW, 1, 0, 0},
    {"int8-group-asym", QS_WEIGHT_QUANT, QS_FORMAT_INT8, 0, QS_GRAN_GROUP, 0, 0, -1},
    {"llm_int8", QS_WEIGHT_QUANT, QS_FORMAT_LLM_INT8, 0, 0, 1, 0, 0},
    {"e4m3", QS_WEIGHT_QUANT, QS_FORMAT_FP8_E4M3, 0, 0, 1, 0, 0},
    {"e5m2", QS_WEIGHT_QUANT, QS_FORMAT_FP8_E5M2, 0, 0, 1, 0, 0},
    {"mxfp4", QS_WEIGHT_QUANT, QS_FORMAT_MXFP4, 0, 0, 1, 0, 0},
    {"mxfp8", QS_WEIGHT_QUANT, QS_FORMAT_MXFP8, 0, 0, 1, 0, 0},
    {"nvfp4", QS_WEIGHT_QUANT, QS_FORMAT_NVFP4, 0, 0, 1, 0, 0},
    {"f16", QS_WEIGHT_DENSE, 0, QS_DTYPE_F16, 0, 0, 0, 0},
    {"bf16", QS_WEIGHT_DENSE, 0, QS_DTYPE_BF16, 0, 0, 0, 0},
    {"f32", QS_WEIGHT_DENSE, 0, QS_DTYPE_F32, 0, 0, 0, 0},
};
#define NGSPECS ((int)(sizeof gspecs / sizeof gspecs[0]))

/* A weight of spec s for N x K, its planes and its dequantized values (qs_dequantize). */
typedef struct {
    qs_weight w;
    qs_quant_params p;
    tq t;
    t_buf values;
    float *dense;
} gobj;

static void gobj_make(qs_ctx *ctx, const gspec *s, const float *w0, int64_t N, int64_t K, gobj *o)
{
    int64_t n = N * K;

    memset(o, 0, sizeof *o);
    o->w.kind = s->kind;
    o->dense = malloc((size_t)n * sizeof(float));
    assert_non_null(o->dense);
    if (s->kind == QS_WEIGHT_DENSE) {
        o->w.dtype = s->dtype;
        o->values = t_buf_new((size_t)(n * qs_dtype_size(s->dtype)));
        assert_int_equal(
            qs_convert(ctx, w0, QS_DTYPE_F32, o->values.p, s->dtype, n, (int64_t)o->values.bytes),
            QS_OK);
        assert_int_equal(qs_convert(ctx, o->values.p, s->dtype, o->dense, QS_DTYPE_F32, n, n * 4),
                         QS_OK);
        o->w.data = o->values.p;
        o->w.data_bytes = (int64_t)o->values.bytes;
        return;
    }
    o->p = params(s->format);
    if (s->format == QS_FORMAT_NF4 || s->format == QS_FORMAT_FP4) {
        o->p.block_size = s->block;
        o->p.double_quant = s->dq;
    }
    if (s->format == QS_FORMAT_INT8) {
        o->p.granularity = s->gran;
        o->p.symmetric = s->sym;
        if (s->gran == QS_GRAN_GROUP) /* 24 straddles the slice edges of K = 600 */
            o->p.block_size = K % 24 == 0 ? 24 : K % 8 == 0 ? 8 : K % 3 == 0 ? 3 : 1;
    }
    o->w.quant = &o->p;
    o->w.q = &o->t.q;
    quant(ctx, &o->p, w0, QS_DTYPE_F32, N, K, &o->t);
    assert_int_equal(qs_dequantize(ctx, &o->p, &o->t.q, N, K, o->dense, QS_DTYPE_F32, n * 4),
                     QS_OK);
}

static void gobj_free(gobj *o)
{
    if (o->w.kind == QS_WEIGHT_QUANT)
        tq_free(&o->t);
    t_buf_free(&o->values);
    free(o->dense);
}

/* Whether this build runs the tiled kernel path for a weight of spec s (else OpenBLAS panels,
 * or sgemm on a plain f32 weight). */
static int tiled_here(const gspec *s)
{
    int32_t count;
    const struct qs_kernel_entry *e = qs_kernel_entries(&count);
    int simd = 0;

    if (!(qs_matmul_info() & QS_MATMUL_BLAS))
        return 1;
    if (s->kind == QS_WEIGHT_DENSE && s->dtype == QS_DTYPE_F32)
        return 0;
    for (int32_t i = 0; i < count; i++)
        simd |= e[i].slot == QS_SLOT_mm_gemm_f32 && e[i].rank > 0;
    return simd;
}

/* The definition of the GEMM path restated: slices of QS_MM_GEMM_KC columns, an fmaf chain per
 * slice from +0, slices added in ascending order, then the bias and the NaN rule. */
static float restated(const float *x, const float *w, int64_t K, const float *bias)
{
    float acc = 0.0f;
    for (int64_t k0 = 0; k0 < K; k0 += QS_MM_GEMM_KC) {
        float s = 0.0f;
        for (int64_t p = k0; p < K && p < k0 + QS_MM_GEMM_KC; p++)
            s = fmaf(x[p], w[p], s);
        acc = k0 == 0 ? s : acc + s;
    }
    return qs_ref_nan_canon(bias ? acc + *bias : acc);
}

static void fill(t_rng *r, float *x, int64_t n, double scale)
{
    for (int64_t i = 0; i < n; i++)
        x[i] = (float)(t_normal(r) * scale);
}

/* Shapes: M at the threshold, just over it, odd, past one block of x rows; N tails of the tasks
 * (96 rows) and register tiles (12, 6); K tails of the slices. */
static const int64_t shapes[][3] = {
    {QS_MATMUL_GEMM_MIN_M, 13, 257},
    {QS_MATMUL_GEMM_MIN_M + 1, 97, 256},
    {33, 25, 600},
    {600, 11, 255},
    {31, 200, 1},
    {47, 1, 513},
};
#define NSHAPES ((int)(sizeof shapes / sizeof shapes[0]))

static void check_case(qs_ctx *ctx, const gspec *s, int64_t M, int64_t N, int64_t K, int with_bias,
                       int specials, t_rng *r)
{
    float *w0 = malloc((size_t)(N * K) * 4), *x = malloc((size_t)(M * K) * 4);
    float *bias = malloc((size_t)N * 4);
    t_buf y = t_buf_new((size_t)(M * N) * 4);
    gobj o;

    assert_true(w0 && x && bias);
    fill(r, w0, N * K, 0.05);
    if (specials)
        t_fill_mixed(r, x, M * K, 0.002);
    else
        fill(r, x, M * K, 1.0);
    fill(r, bias, N, 0.1);
    gobj_make(ctx, s, w0, N, K, &o);
    assert_int_equal(qs_matmul(ctx, NULL, x, QS_DTYPE_F32, M, K, &o.w, N, with_bias ? bias : NULL,
                               y.p, (int64_t)y.bytes),
                     QS_OK);
    assert_true(t_buf_guards_ok(&y));
    const float *got = y.p;
    if (tiled_here(s)) {
        for (int64_t m = 0; m < M; m++)
            for (int64_t n = 0; n < N; n++) {
                float want = restated(x + m * K, o.dense + n * K, K, with_bias ? bias + n : NULL);
                if (t_bits(got[m * N + n]) != t_bits(want))
                    fail_msg("%s M=%lld N=%lld K=%lld: y[%lld, %lld] = %a (0x%08X), the "
                             "definition gives %a (0x%08X)",
                             s->name, (long long)M, (long long)N, (long long)K, (long long)m,
                             (long long)n, (double)got[m * N + n], t_bits(got[m * N + n]),
                             (double)want, t_bits(want));
            }
    } else if (!specials) { /* OpenBLAS: the float64 bound of the header */
        double e = 0.0, ref = 0.0;
        for (int64_t m = 0; m < M; m++)
            for (int64_t n = 0; n < N; n++) {
                double v = with_bias ? bias[n] : 0.0;
                for (int64_t k = 0; k < K; k++)
                    v += (double)x[m * K + k] * o.dense[n * K + k];
                e += (got[m * N + n] - v) * (got[m * N + n] - v);
                ref += v * v;
            }
        assert_true(sqrt(e) <= 1e-5 * sqrt(ref));
    }
    gobj_free(&o);
    t_buf_free(&y);
    free(w0);
    free(x);
    free(bias);
}

static void test_gemm_definition(void **state)
{
    qs_ctx *ctx = t_ctx();
    t_rng r = {0x6E34};

    (void)state;
    for (int s = 0; s < NGSPECS; s++)
        for (int i = 0; i < 2; i++) {
            int c = (s + 3 * i) % NSHAPES;
            check_case(ctx, &gspecs[s], shapes[c][0], shapes[c][1], shapes[c][2], (s + i) & 1,
                       c == 3, &r);
        }
    qs_ctx_destroy(ctx);
}

/* ---- threads ----------------------------------------------------------------------------------
 */

static void test_gemm_threads(void **state)
{
    static const int idx[] = {0, 5, 9, 13};
    const int64_t M = 530, N = 40, K = 300; /* two blocks of x, a task per thread, two slices */
    qs_ctx *ctx = t_ctx();
    t_rng r = {0x6E35};

    (void)state;
    for (int i = 0; i < (int)(sizeof idx / sizeof idx[0]); i++) {
        float *w0 = malloc((size_t)(N * K) * 4), *x = malloc((size_t)(M * K) * 4);
        float *bias = malloc((size_t)N * 4);
        t_buf y[3];
        gobj o;

        assert_true(w0 && x && bias);
        fill(&r, w0, N * K, 0.05);
        fill(&r, x, M * K, 2.0);
        fill(&r, bias, N, 0.1);
        gobj_make(ctx, &gspecs[idx[i]], w0, N, K, &o);
        for (int t = 0; t < 3; t++) {
            y[t] = t_buf_new((size_t)(M * N) * 4);
            assert_int_equal(qs_ctx_set(ctx, QS_PARAM_NUM_THREADS, t + 1), QS_OK);
            assert_int_equal(qs_matmul(ctx, NULL, x, QS_DTYPE_F32, M, K, &o.w, N, bias, y[t].p,
                                       (int64_t)y[t].bytes),
                             QS_OK);
        }
        T_ASSERT_BYTES(gspecs[idx[i]].name, y[1].p, y[0].p, y[0].bytes);
        T_ASSERT_BYTES(gspecs[idx[i]].name, y[2].p, y[0].p, y[0].bytes);
        for (int t = 0; t < 3; t++)
            t_buf_free(&y[t]);
        gobj_free(&o);
        free(w0);
        free(x);
        free(bias);
    }
    qs_ctx_destroy(ctx);
}

/* ---- profiling --------------------------------------------------------------------------- */

/* The profile names the kernel of the GEMM path's inner loop: the context's mm_gemm_f32 entry
 * where the tiled path runs, else the dequantize kernel that makes OpenBLAS's panels. */
static void test_gemm_profile(void **state)
{
    const int64_t M = QS_MATMUL_GEMM_MIN_M, N = 20, K = 64;
    qs_ctx *ctx = t_ctx();
    t_rng r = {0x6E36};
    float w0[20 * 64], x[16 * 64], y[16 * 20];
    const char *want = NULL;
    qs_profile_entry e;
    gobj o;

    (void)state;
    fill(&r, w0, N * K, 0.05);
    fill(&r, x, M * K, 1.0);
    gobj_make(ctx, &gspecs[0], w0, N, K, &o);
    for (int32_t i = 0; i < qs_ctx_kernel_count(ctx); i++) {
        const char *slot = NULL, *impl = NULL;
        assert_int_equal(qs_ctx_kernel_info(ctx, i, &slot, &impl), QS_OK);
        if (strcmp(slot, tiled_here(&gspecs[0]) ? "mm_gemm_f32" : "nf4_dequant") == 0)
            want = impl;
    }
    assert_non_null(want);
    assert_int_equal(qs_ctx_set(ctx, QS_PARAM_PROFILE, 1), QS_OK);
    assert_int_equal(qs_matmul(ctx, NULL, x, QS_DTYPE_F32, M, K, &o.w, N, NULL, y, sizeof y),
                     QS_OK);
    assert_int_equal(qs_profile_count(ctx), 1);
    assert_int_equal(qs_profile_get(ctx, 0, &e), QS_OK);
    assert_string_equal(e.op, "matmul");
    assert_string_equal(e.kernel, want);
    gobj_free(&o);
    qs_ctx_destroy(ctx);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_gemm_kernels),
        cmocka_unit_test(test_gemm_definition),
        cmocka_unit_test(test_gemm_threads),
        cmocka_unit_test(test_gemm_profile),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
