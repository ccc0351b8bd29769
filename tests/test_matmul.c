/* SPDX-License-Identifier: MIT */
/*
 * qs_matmul (include/qsparse/matmul.h) through the public API: every weight kind (every format and
 * option of qs_quantize, 2:4 of f32/f16/bf16 values, 2:4 + quantized) against the float64 product
 * of x and the weight as qs_dequantize / qs_sp24_decompress / qs_sp24_dequantize decode it, over
 * tails in M, N, K on the GEMV and GEMM paths, with bias and f16/bf16 activations; int8
 * activations within the documented bound; the LLM.int8 outlier split against a model written
 * here from bitsandbytes' definition; bit-identical results for 1 and 2 threads; and bad
 * arguments returning a status with y untouched (canaries).
 */
#include "common.h"
#include "quant_helpers.h"
#include "matmul_weights.h"

/* float64 x . W^T (+ bias) and the sum of |x| |W| per output (for bounds). */
static void ref_product(const float *x, const float *w, const float *bias, int64_t M, int64_t K,
                        int64_t N, double *y, double *absy)
{
    for (int64_t m = 0; m < M; m++)
        for (int64_t n = 0; n < N; n++) {
            double s = bias ? bias[n] : 0.0, a = 0.0;
            for (int64_t k = 0; k < K; k++) {
                s += (double)x[m * K + k] * w[n * K + k];
                a += fabs((double)x[m * K + k] * w[n * K + k]);
            }
            y[m * N + n] = s;
            if (absy)
                absy[m * N + n] = a;
        }
}

static double rel_frobenius(const float *got, const double *want, int64_t n)
{
    double e = 0.0, r = 0.0;
    for (int64_t i = 0; i < n; i++) {
        e += (got[i] - want[i]) * (got[i] - want[i]);
        r += want[i] * want[i];
    }
    return r > 0.0 ? sqrt(e / r) : sqrt(e);
}

static qs_status run(qs_ctx *ctx, const qs_matmul_params *p, const void *x, int32_t dt, int64_t M,
                     int64_t K, const wobj *o, int64_t N, const float *bias, t_buf *y)
{
    return qs_matmul(ctx, p, x, dt, M, K, &o->w, N, bias, y->p, (int64_t)y->bytes);
}

/* ---- every kind, f32 / f16 / bf16 activations ----------------------------------------------- */

static void test_kinds_f32(void **state)
{
    /* tails: 1, odd, just over block multiples; M on both sides of QS_MATMUL_GEMM_MIN_M */
    static const int64_t Ms[] = {1, 3, QS_MATMUL_GEMM_MIN_M, 37};
    static const int64_t Ns[] = {1, 5, 33, 530}; /* 530: more than one GEMM panel */
    static const int64_t Ks[] = {4, 68, 132, 36};
    static const int64_t Ks_odd[] = {1, 7, 65, 97};
    qs_ctx *ctx = t_ctx();
    t_rng r = {11};

    (void)state;
    for (int s = 0; s < NSPECS; s++)
        for (int c = 0; c < 4; c++) {
            const wspec *sp = &specs[s];
            int64_t M = Ms[c], N = Ns[(c + s) % 4];
            int64_t K = is_sparse(sp) || sp->format == QS_FORMAT_INT8 ? Ks[(c + s) % 4]
                                                                      : Ks_odd[(c + s) % 4];
            int32_t dt = (c + s) % 3; /* f32, f16, bf16 activations */
            float *w0 = malloc((size_t)(N * K) * 4), *x = malloc((size_t)(M * K) * 4);
            float *xw = malloc((size_t)(M * K) * 4), *bias = malloc((size_t)N * 4);
            uint16_t *xh = malloc((size_t)(M * K) * 2);
            double *want = malloc((size_t)(M * N) * 8);
            t_buf y = t_buf_new((size_t)(M * N) * 4);
            wobj o;

            fill(&r, w0, N * K, 0.05);
            fill(&r, x, M * K, 1.0);
            fill(&r, bias, N, 0.1);
            wobj_make(ctx, sp, w0, N, K, &o);
            if (dt == QS_DTYPE_F32)
                memcpy(xw, x, (size_t)(M * K) * 4);
            else
                round_16(ctx, x, M * K, dt, xh, xw);
            ref_product(xw, o.dense, c & 1 ? bias : NULL, M, K, N, want, NULL);
            assert_int_equal(run(ctx, NULL, dt == QS_DTYPE_F32 ? (const void *)x : xh, dt, M, K, &o,
                                 N, c & 1 ? bias : NULL, &y),
                             QS_OK);
            assert_string_equal(qs_ctx_last_error(ctx), "");
            assert_true(t_buf_guards_ok(&y));
            double e = rel_frobenius(y.p, want, M * N);
            if (!(e <= 1e-5)) {
                print_error("%s M=%lld N=%lld K=%lld dtype %d: relative error %g\n", sp->name,
                            (long long)M, (long long)N, (long long)K, dt, e);
                fail();
            }
            wobj_free(&o);
            t_buf_free(&y);
            free(w0);
            free(x);
            free(xw);
            free(bias);
            free(xh);
            free(want);
        }
    qs_ctx_destroy(ctx);
}

/* ---- the fused GEMV kernels: every quantized format and f16/bf16 weights ------------------- */

/* Shapes the multi-row GEMV kernels take their fast paths on (K a multiple of the NF4/FP4 block,
 * of 32 and of 16) and around them: M = 1 (the 4-row tiles), 2...15 (tiles of up to 8 rows of x
 * decoding each block once), N tails of the 4-row tiles and of the 16-row tasks, K with a short
 * last MX / NVFP4 block. Relative Frobenius error <= 1e-5 against float64 on the dequantized
 * weight, at whatever tier the suite forces. */
static void test_gemv_fused(void **state)
{
    static const int64_t Ms[] = {1, 2, 3, 4, 5, 8, 15};
    static const int64_t Ks[] = {128, 320, 4096, 112, 80};
    wspec f16 = {"f16", QS_WEIGHT_DENSE, 0, QS_DTYPE_F16, 0, 0, 0, 0};
    qs_ctx *ctx = t_ctx();
    t_rng r = {23};

    (void)state;
    for (int s = -1; s < NSPECS; s++) {
        const wspec *sp = s < 0 ? &f16 : &specs[s];
        if (is_sparse(sp) || (sp->kind == QS_WEIGHT_DENSE && sp->dtype == QS_DTYPE_F32))
            continue;
        for (int c = 0; c < 7; c++) {
            int64_t M = Ms[c], N = c == 2 ? 1 : 1 + (M * 7 + s) % 37;
            int64_t K = Ks[(c + s + 1) % 5];
            if (K == 4096)
                N = 3; /* one long row per tile slot, cheap to check */
            if (sp->format == QS_FORMAT_INT8 && sp->gran == QS_GRAN_GROUP && K % 32 != 0)
                K = 128;
            float *w0 = malloc((size_t)(N * K) * 4), *x = malloc((size_t)(M * K) * 4);
            float *bias = malloc((size_t)N * 4);
            double *want = malloc((size_t)(M * N) * 8);
            t_buf y = t_buf_new((size_t)(M * N) * 4);
            wobj o;

            fill(&r, w0, N * K, 0.05);
            fill(&r, x, M * K, 1.0);
            fill(&r, bias, N, 0.1);
            wobj_make(ctx, sp, w0, N, K, &o);
            ref_product(x, o.dense, c & 1 ? bias : NULL, M, K, N, want, NULL);
            assert_int_equal(run(ctx, NULL, x, QS_DTYPE_F32, M, K, &o, N, c & 1 ? bias : NULL, &y),
                             QS_OK);
            assert_true(t_buf_guards_ok(&y));
            double e = rel_frobenius(y.p, want, M * N);
            if (!(e <= 1e-5)) {
                print_error("%s M=%lld N=%lld K=%lld: relative error %g\n", sp->name,
                            (long long)M, (long long)N, (long long)K, e);
                fail();
            }
            wobj_free(&o);
            t_buf_free(&y);
            free(w0);
            free(x);
            free(bias);
            free(want);
        }
    }
    qs_ctx_destroy(ctx);
}

/* NaN and Inf in x through the fused GEMV: a row of x with a NaN gives canonical NaNs; a row with
 * one +Inf at column j gives +-Inf by the sign of W[n, j], and NaN where W[n, j] dequantizes to
 * 0 (0 * Inf); the other rows stay finite and accurate (within 1e-6 of sum |x w|). */
static void test_gemv_nonfinite_x(void **state)
{
    const int64_t M = 3, N = 9, K = 256, j = 77;
    qs_ctx *ctx = t_ctx();
    t_rng r = {31};

    (void)state;
    for (int s = 0; s < NSPECS; s++) {
        const wspec *sp = &specs[s];
        if (is_sparse(sp) || sp->kind == QS_WEIGHT_DENSE)
            continue;
        float w0[9 * 256], x[3 * 256], y[3 * 9];
        double want[3 * 9], absy[3 * 9];
        wobj o;
        fill(&r, w0, N * K, 0.05);
        fill(&r, x, M * K, 1.0);
        x[0 * K + 5] = NAN;
        x[1 * K + j] = INFINITY;
        wobj_make(ctx, sp, w0, N, K, &o);
        assert_int_equal(qs_matmul(ctx, NULL, x, QS_DTYPE_F32, M, K, &o.w, N, NULL, y, sizeof y),
                         QS_OK);
        ref_product(x + 2 * K, o.dense, NULL, 1, K, N, want, absy);
        for (int64_t n = 0; n < N; n++) {
            float wj = o.dense[n * K + j];
            assert_int_equal(t_bits(y[n]), 0x7FC00000u);
            if (wj == 0.0f)
                assert_int_equal(t_bits(y[N + n]), 0x7FC00000u);
            else
                assert_true(y[N + n] == (wj > 0 ? INFINITY : -INFINITY));
            assert_true(fabs(y[2 * N + n] - want[n]) <= 1e-6 * absy[n]);
        }
        wobj_free(&o);
    }
    qs_ctx_destroy(ctx);
}

/* An infinite scale (an f32 scale plane's first value) multiplies its segment's total, as the
 * reference does (matmul.h): with one nonzero term in x the total is
 * v and y is +-Inf by the code value's sign (NaN where v = 0), never the NaN of 0 * Inf
 * that a SIMD kernel scaling its partial sums lane by lane would give. Rows whose scales stay
 * finite give their one product (within two ulps: LLM.int8 scales by SCB / 127). Every tier runs
 * this (QS_FORCE_ISA). */
static void test_gemv_infinite_scale(void **state)
{
    enum { N = 6, K = 256, C = 3 }; /* column C lies in the first block, group and segment */
    qs_ctx *ctx = t_ctx();
    t_rng r = {57};
    int checked = 0;

    (void)state;
    for (int s = 0; s < NSPECS; s++) {
        const wspec *sp = &specs[s];
        qs_plane_info pi;
        float w0[N * K], x[K], y[N];
        int per_tensor;
        wobj o;

        if (sp->kind != QS_WEIGHT_QUANT)
            continue;
        fill(&r, w0, N * K, 0.05);
        wobj_make(ctx, sp, w0, N, K, &o);
        assert_int_equal(qs_quant_plane_info(ctx, &o.p, N, K, QS_PLANE_SCALE, &pi), QS_OK);
        if (pi.elem == QS_ELEM_F32) {
            ((float *)o.t.q.scale)[0] = INFINITY;
            per_tensor = pi.values == 1;
        } else { /* E8M0, E4M3 (NVFP4) or double-quantized scales: never infinite */
            wobj_free(&o);
            continue;
        }
        memset(x, 0, sizeof x);
        x[C] = 1.0f;
        for (int m = 1; m <= 2; m++) { /* the 1-row and the multi-row tiles */
            float xm[2 * K], ym[2 * N];
            memcpy(xm, x, sizeof x);
            memcpy(xm + K, x, sizeof x);
            assert_int_equal(qs_matmul(ctx, NULL, xm, QS_DTYPE_F32, m, K, &o.w, N, NULL, ym,
                                       (int64_t)(m * N * sizeof(float))),
                             QS_OK);
            memcpy(y, ym + (m - 1) * N, sizeof y);
            for (int n = 0; n < N; n++) {
                float v = o.dense[n * K + C]; /* the finite scale's value: its sign is the code's */
                if (n == 0 || per_tensor) {
                    uint32_t want = v > 0 ? 0x7F800000u : v < 0 ? 0xFF800000u : 0x7FC00000u;
                    if (t_bits(y[n]) != want)
                        fail_msg("%s, M = %d, row %d: y = %a (0x%08x), want 0x%08x", sp->name, m,
                                 n, (double)y[n], t_bits(y[n]), want);
                } else {
                    if (!(fabsf(y[n] - v) <= 0x1p-21f * fabsf(v))) /* LLM.int8: SCB / 127 */
                        fail_msg("%s, M = %d, row %d: y = %a, want %a", sp->name, m, n,
                                 (double)y[n], (double)v);
                }
            }
        }
        checked++;
        wobj_free(&o);
    }
    assert_true(checked >= 8);
    qs_ctx_destroy(ctx);
}

/* The GEMV summation order of matmul.h, restated: 16 partial sums by position in the segment,
 * the pairwise tree, acc = acc + fl(sum * scale) per segment. Plain f32 (one segment per row,
 * K not a multiple of 16) and NF4 with blocks of 32 over the flattened tensor, so that row 1
 * (K = 70) starts 6 elements into block 2 and its first segment is 26 elements long. */
static float restated_sum(const float *x, const float *v, int64_t n)
{
    float p[16] = {0};
    for (int64_t k = 0; k < n; k++)
        p[k % 16] += x[k] * v[k];
    for (int h = 8; h >= 1; h /= 2)
        for (int i = 0; i < h; i++)
            p[i] = p[i] + p[i + h];
    return p[0];
}

static void test_summation_order(void **state)
{
    qs_ctx *ctx = t_ctx();
    t_rng r = {99};
    const int64_t K = 70, N = 2;
    float w0[2 * 70], x[70], bias[2] = {0.25f, -1.0f}, y[2], book[16], v[70];
    wobj o;

    (void)state;
    fill(&r, w0, N * K, 1.0);
    for (int64_t k = 0; k < K; k++) /* magnitudes far apart, so the order shows in the bits */
        x[k] = (float)(t_normal(&r) * ldexp(1.0, (int)(k % 23) - 11));
    wobj_make(ctx, &specs[0], w0, N, K, &o);
    assert_int_equal(qs_matmul(ctx, NULL, x, QS_DTYPE_F32, 1, K, &o.w, N, bias, y, 8), QS_OK);
    for (int64_t n = 0; n < N; n++)
        assert_true(t_bits(y[n]) == t_bits(restated_sum(x, w0 + n * K, K) + bias[n]));
    wobj_free(&o);

    wspec nf4 = specs[2];
    nf4.block = 32;
    wobj_make(ctx, &nf4, w0, N, K, &o);
    assert_int_equal(qs_matmul(ctx, NULL, x, QS_DTYPE_F32, 1, K, &o.w, N, NULL, y, 8), QS_OK);
    assert_int_equal(qs_codebook(QS_CODEBOOK_NF4, book, 16), QS_OK);
    const uint8_t *d = o.t.q.data;
    const float *absmax = o.t.q.scale;
    for (int64_t n = 0; n < N; n++) {
        float acc = 0.0f;
        int64_t k = 0;
        while (k < K) {
            int64_t f = n * K + k, b = f / 32, end = (b + 1) * 32 - n * K;
            if (end > K)
                end = K;
            for (int64_t j = k; j < end; j++) {
                int64_t e = n * K + j;
                v[j - k] = book[(e & 1) ? d[e / 2] & 0xF : d[e / 2] >> 4];
            }
            acc = acc + restated_sum(x + k, v, end - k) * absmax[b];
            k = end;
        }
        assert_true(t_bits(y[n]) == t_bits(acc));
    }
    wobj_free(&o);
    qs_ctx_destroy(ctx);
}

/*
 * The cross-tier bound of matmul.h in the subnormal range (the fuzz finding "reorder",
 * tests/fuzz/corpus/fuzz_matmul/quant_mxfp4_act8_subnormal_y): MXFP4 blocks with the E8M0 scale
 * 2^-119 and x = 1.5 2^-31, so x * 0.5 * 2^-119 = 0.375 2^-149 per element of row 0 (every value
 * 0.5). The reference scales each block's total once (32 x 0.375 = 12 subnormal ulps, exact; 24
 * for the row); a kernel that scales each lane's partial sum rounds every lane on its own (16
 * lanes of 2 elements: 0.75 -> 1 ulp; 8 lanes of 4: 1.5 -> 2 ulps; 16 per block either way), 8
 * ulps apart over the row. No relative bound covers that; the documented underflow term
 * (2 K + 32) 2^-149 (1 + s_max) does. Every tier against the scalar one (a context with ISA mask
 * 0), f32 and int8 activations, rows of varied codes; the scalar tier is also checked bit for bit
 * against the restated order.
 */
static void test_gemv_subnormal_bound(void **state)
{
    enum { N = 4, K = 64 };
    static const float e2m1[16] = {0.0f,  0.5f,  1.0f,  1.5f,  2.0f,  3.0f,  4.0f,  6.0f,
                                   -0.0f, -0.5f, -1.0f, -1.5f, -2.0f, -3.0f, -4.0f, -6.0f};
    const float scale = 0x1p-119f;
    uint8_t data[N * K / 2], sc[N * K / 32];
    float x[K], v[K];
    uint32_t lcg = 12345;
    qs_quant_params p = params(QS_FORMAT_MXFP4);
    qs_qtensor q;
    qs_weight w;
    qs_ctx *ctx = t_ctx(), *ref = NULL;
    qs_ctx_params cp;

    (void)state;
    qs_ctx_params_init(&cp);
    cp.num_threads = 1;
    cp.isa_mask = 0;
    assert_int_equal(qs_ctx_create(&cp, &ref), QS_OK);
    for (int64_t i = 0; i < N * K / 2; i++) {
        lcg = lcg * 1103515245u + 12345u;
        data[i] = i < K / 2 ? 0x11 : (uint8_t)(lcg >> 16); /* row 0: every value 0.5 */
    }
    memset(sc, 8, sizeof sc); /* E8M0 8: 2^-119 */
    for (int64_t k = 0; k < K; k++)
        x[k] = 0x1.8p-31f;
    memset(&q, 0, sizeof q);
    q.data = data, q.data_bytes = sizeof data;
    q.scale = sc, q.scale_bytes = sizeof sc;
    memset(&w, 0, sizeof w);
    w.kind = QS_WEIGHT_QUANT;
    w.quant = &p;
    w.q = &q;
    for (int act = 0; act < 2; act++) {
        qs_matmul_params mp;
        float y[N], y0[N];
        qs_matmul_params_init(&mp);
        mp.activations = act ? QS_MATMUL_ACT_INT8 : QS_MATMUL_ACT_F32;
        assert_int_equal(qs_matmul(ctx, &mp, x, QS_DTYPE_F32, 1, K, &w, N, NULL, y, sizeof y),
                         QS_OK);
        assert_int_equal(qs_matmul(ref, &mp, x, QS_DTYPE_F32, 1, K, &w, N, NULL, y0, sizeof y0),
                         QS_OK);
        for (int64_t n = 0; n < N; n++) {
            double sxw = 0.0, vmax = 0.0;
            float acc = 0.0f;
            for (int64_t k = 0; k < K; k++) {
                uint8_t b = data[n * K / 2 + k / 2];
                v[k] = e2m1[k % 2 ? b >> 4 : b & 15];
                sxw += fabs((double)x[k] * v[k] * scale);
                vmax = fabs((double)v[k]) > vmax ? fabs((double)v[k]) : vmax;
            }
            for (int64_t s0 = 0; s0 < K; s0 += 32)
                acc = acc + restated_sum(x + s0, v + s0, 32) * scale;
            if (!act)
                assert_true(t_bits(y0[n]) == t_bits(acc));
            assert_true(fabs((double)y0[n]) < 0x1p-126); /* the case: a subnormal result */
            double rel = 2.0 * (K / 16.0 + 8.0) * 0x1p-23 * sxw * (act ? 1.01 : 1.0);
            double bound = rel + (2.0 * K + 32.0) * 0x1p-149 * (1.0 + scale);
            assert_true(rel < 0x1p-149); /* a one-ulp subnormal difference is beyond it */
            if (!(fabs((double)y[n] - (double)y0[n]) <= bound)) {
                print_error("act %d row %lld: %a vs scalar %a, bound %a\n", act, (long long)n,
                            (double)y[n], (double)y0[n], bound);
                fail();
            }
        }
        /* row 0 exactly: 24 subnormal ulps in the reference's order */
        if (!act)
            assert_true(y0[0] == 24.0f * 0x1p-149f);
    }
    qs_ctx_destroy(ref);
    qs_ctx_destroy(ctx);
}

/* K = 0: y is the bias (or 0); M = 0 or N = 0: nothing to write. */
static void test_empty(void **state)
{
    qs_ctx *ctx = t_ctx();
    float w0[1] = {0}, bias[3] = {1.5f, -2.0f, 0.25f}, x[1] = {0};
    wobj o;
    t_buf y = t_buf_new(2 * 3 * 4);

    (void)state;
    wobj_make(ctx, &specs[0], w0, 3, 0, &o);
    assert_int_equal(run(ctx, NULL, x, QS_DTYPE_F32, 2, 0, &o, 3, bias, &y), QS_OK);
    for (int i = 0; i < 6; i++)
        assert_true(((float *)y.p)[i] == bias[i % 3]);
    assert_int_equal(run(ctx, NULL, x, QS_DTYPE_F32, 2, 0, &o, 3, NULL, &y), QS_OK);
    for (int i = 0; i < 6; i++)
        assert_true(((float *)y.p)[i] == 0.0f);
    wobj_free(&o);
    t_buf_free(&y);
    qs_ctx_destroy(ctx);
}

/* Found by fuzz_matmul: K = 0 reads nothing of x or W (NULL planes: the old code added n * 0 to
 * them, undefined behaviour that UBSan reports), and y is the bias or +0 on every path. The old
 * int8 path scaled the empty sum of an LLM.int8 weight by fl(0 * SCB[n]): NaN for a NaN SCB,
 * -0 for a negative one. */
static void test_empty_k_llm_int8(void **state)
{
    qs_ctx *ctx = t_ctx();
    const float scb[3] = {NAN, -1.0f, 2.0f}, bias[3] = {1.5f, -0.0f, NAN};
    qs_quant_params p;
    qs_qtensor q;
    qs_weight w;
    qs_matmul_params mp;
    float y[2 * 3];

    (void)state;
    qs_quant_params_init(&p, QS_FORMAT_LLM_INT8);
    memset(&q, 0, sizeof q);
    q.scale = (void *)scb, q.scale_bytes = sizeof scb;
    memset(&w, 0, sizeof w);
    w.kind = QS_WEIGHT_QUANT, w.quant = &p, w.q = &q;
    qs_matmul_params_init(&mp);
    mp.activations = QS_MATMUL_ACT_INT8;
    for (int b = 0; b < 2; b++) {
        memset(y, 0x55, sizeof y);
        assert_int_equal(qs_matmul(ctx, &mp, NULL, QS_DTYPE_F32, 2, 0, &w, 3, b ? bias : NULL, y,
                                   sizeof y),
                         QS_OK);
        for (int i = 0; i < 6; i++) {
            uint32_t bits;
            memcpy(&bits, &y[i], 4);
            /* +0 + -0 = +0; the NaN bias gives the canonical NaN */
            const uint32_t want[3] = {0x3FC00000u, 0, 0x7FC00000u};
            assert_int_equal(bits, b ? want[i % 3] : 0u);
        }
    }
    qs_ctx_destroy(ctx);
}

/* Found by fuzz_matmul: a 2:4 weight of 2^62 x 0 (M = 0) is checked without a loop over its
 * empty rows; the old check of the meta nibbles walked all 2^62 of them (a hang). */
static void test_empty_k_huge_n_sp24(void **state)
{
    qs_ctx *ctx = t_ctx();
    const float x[1] = {0.0f};
    float y[1] = {-1.0f};
    qs_weight w;

    (void)state;
    memset(&w, 0, sizeof w);
    w.kind = QS_WEIGHT_SP24;
    w.dtype = QS_DTYPE_F32;
    assert_int_equal(qs_matmul(ctx, NULL, x, QS_DTYPE_F32, 0, 0, &w, INT64_C(1) << 62, NULL, y, 0),
                     QS_OK);
    assert_true(y[0] == -1.0f);
    qs_ctx_destroy(ctx);
}

/* ---- int8 activations ----------------------------------------------------------------------- */

static void test_int8_bound(void **state)
{
    static const int idx[] = {8, 9, 11, 12, 13, 2, 18, 19, 22, 23};
    qs_ctx *ctx = t_ctx();
    t_rng r = {5};

    (void)state;
    for (int i = 0; i < (int)(sizeof idx / sizeof idx[0]); i++)
        for (int c = 0; c < 2; c++) {
            const wspec *sp = &specs[idx[i]];
            int64_t M = c ? 20 : 3, N = 17, K = 136;
            float *w0 = malloc((size_t)(N * K) * 4), *x = malloc((size_t)(M * K) * 4);
            double *want = malloc((size_t)(M * N) * 8), *absy = malloc((size_t)(M * N) * 8);
            t_buf y = t_buf_new((size_t)(M * N) * 4), y32 = t_buf_new((size_t)(M * N) * 4);
            qs_matmul_params p;
            wobj o;

            fill(&r, w0, N * K, 0.05);
            fill(&r, x, M * K, 1.0);
            wobj_make(ctx, sp, w0, N, K, &o);
            qs_matmul_params_init(&p);
            p.activations = QS_MATMUL_ACT_INT8;
            assert_int_equal(run(ctx, &p, x, QS_DTYPE_F32, M, K, &o, N, NULL, &y), QS_OK);
            assert_int_equal(run(ctx, NULL, x, QS_DTYPE_F32, M, K, &o, N, NULL, &y32), QS_OK);
            ref_product(x, o.dense, NULL, M, K, N, want, absy);
            int exact = 0;
            for (int64_t m = 0; m < M; m++) {
                double amax = 0.0;
                for (int64_t k = 0; k < K; k++)
                    amax = fmax(amax, fabs(x[m * K + k]));
                for (int64_t n = 0; n < N; n++) {
                    double wsum = 0.0, got = ((float *)y.p)[m * N + n];
                    for (int64_t k = 0; k < K; k++)
                        wsum += fabs(o.dense[n * K + k]);
                    double bound = 1.001 * amax / 254.0 * wsum + 1e-5 * absy[m * N + n];
                    if (sp->kind == QS_WEIGHT_QUANT && sp->format == QS_FORMAT_NF4) {
                        /* the int8 codebook's rounding (include/qsparse/matmul.h) */
                        const float *am = o.t.q.scale;
                        for (int64_t k = 0; k < K; k++)
                            bound += 1.001 / 254.0 * am[(n * K + k) / sp->block] *
                                     (fabs(x[m * K + k]) + amax / 254.0);
                    }
                    double err = fabs(got - ((float *)y32.p)[m * N + n]);
                    if (!(err <= bound)) {
                        print_error("%s m=%lld n=%lld: |y8 - y32| = %g > bound %g\n", sp->name,
                                    (long long)m, (long long)n, err, bound);
                        fail();
                    }
                    exact += got == ((float *)y32.p)[m * N + n];
                }
            }
            /* the bound is not vacuous: int8 activations change most outputs */
            assert_true(exact < M * N / 2);
            wobj_free(&o);
            t_buf_free(&y);
            t_buf_free(&y32);
            free(w0);
            free(x);
            free(want);
            free(absy);
        }
    qs_ctx_destroy(ctx);
}

/* qs_int8_vectorwise_quant on a hand-worked input (bitsandbytes' rules): threshold 6, the
 * outliers 7 (row 0, col 1) and -6 (row 1, col 3; >= counts); row 0's absmax skips the 7 but
 * counts the other elements of outlier columns. */
static void test_vectorwise_hand(void **state)
{
    qs_ctx *ctx = t_ctx();
    const float x[2 * 5] = {1.0f, 7.0f, -2.0f, 0.5f, 0.0f, /* */ 0.0f, 3.0f, 1.0f, -6.0f, -4.0f};
    int8_t codes[10];
    float stats[2];
    int64_t cols[5] = {-1, -1, -1, -1, -1}, n = -1;
    /* row 0: absmax 2 (7 skipped), mul 63.5: 1 -> 64 (63.5 ties to even), -2 -> -127, 0.5 ->
     * 32 (31.75); row 1: absmax 4 (-6 skipped; 3 in an outlier column counts), mul 31.75 */
    const int8_t want[10] = {64, 0, -127, 0, 0, /* */ 0, 0, 32, 0, -127};

    (void)state;
    assert_int_equal(qs_int8_vectorwise_quant(ctx, x, QS_DTYPE_F32, 2, 5, 6.0f, codes, 10, stats, 2,
                                              cols, 5, &n),
                     QS_OK);
    assert_int_equal(n, 2);
    assert_int_equal(cols[0], 1);
    assert_int_equal(cols[1], 3);
    assert_true(stats[0] == 2.0f && stats[1] == 4.0f);
    assert_memory_equal(codes, want, 10);
    /* too small a column list: the count is reported, nothing else written */
    int8_t c2[10];
    memset(c2, 0x55, sizeof c2);
    assert_int_equal(
        qs_int8_vectorwise_quant(ctx, x, QS_DTYPE_F32, 2, 5, 6.0f, c2, 10, stats, 2, cols, 1, &n),
        QS_ERR_BUFFER_TOO_SMALL);
    assert_int_equal(n, 2);
    for (int i = 0; i < 10; i++)
        assert_int_equal((uint8_t)c2[i], 0x55);
    /* threshold 0: no outliers, plain per-row absmax */
    assert_int_equal(qs_int8_vectorwise_quant(ctx, x, QS_DTYPE_F32, 2, 5, 0.0f, codes, 10, stats, 2,
                                              NULL, 0, &n),
                     QS_OK);
    assert_int_equal(n, 0);
    assert_true(stats[0] == 7.0f && stats[1] == 6.0f);
    assert_int_equal(codes[1], 127);
    assert_int_equal(codes[8], -127);
    assert_int_equal(qs_int8_vectorwise_quant(ctx, x, QS_DTYPE_F32, 2, 5, -1.0f, codes, 10, stats,
                                              2, cols, 5, &n),
                     QS_ERR_INVALID_ARG);
    qs_ctx_destroy(ctx);
}

/* Found by fuzz_matmul: an empty x (M = 0 or K = 0) quantizes to nothing whatever the other
 * dimension, without scratch or work that grows with it. The old code allocated and scanned K
 * column flags for a 0 x K input: 0 x 2^62 returned QS_ERR_OUT_OF_MEMORY, 0 x 5e8 took seconds. */
static void test_vectorwise_empty(void **state)
{
    qs_ctx *ctx = t_ctx();
    const float x[1] = {7.0f};
    int8_t codes[1] = {0x55};
    float stats[3] = {-1.0f, -1.0f, -1.0f};
    int64_t cols[1] = {-1}, n = -1;

    (void)state;
    for (int i = 0; i < 2; i++) {
        n = -1;
        assert_int_equal(qs_int8_vectorwise_quant(ctx, x, QS_DTYPE_F32, 0, INT64_MAX / 2,
                                                  i ? 6.0f : 0.0f, codes, 0, stats, 0, cols, 1, &n),
                         QS_OK);
        assert_int_equal(n, 0);
    }
    assert_int_equal(codes[0], 0x55);
    assert_int_equal(cols[0], -1);
    assert_true(stats[0] == -1.0f);
    /* M rows of K = 0: every statistic 0, no codes, no outliers */
    assert_int_equal(qs_int8_vectorwise_quant(ctx, x, QS_DTYPE_BF16, 3, 0, 6.0f, codes, 0, stats, 3,
                                              cols, 1, &n),
                     QS_OK);
    assert_int_equal(n, 0);
    for (int m = 0; m < 3; m++)
        assert_true(stats[m] == 0.0f && !signbit(stats[m]));
    assert_int_equal(codes[0], 0x55);
    assert_int_equal(cols[0], -1);
    qs_ctx_destroy(ctx);
}

/* LLM.int8 matmul with outliers against bitsandbytes' definition restated here: int32 sums of
 * codes, fl(fl(acc * fl(r * SCB)) * fl(1/127^2)), plus the outlier columns in f32 against
 * fl(fl(q * SCB) * fl(1/127)), plus bias. Bit for bit. */
static void test_llm_int8_outliers(void **state)
{
    qs_ctx *ctx = t_ctx();
    t_rng r = {77};
    const int64_t M = 5, K = 40, N = 9;
    float w0[9 * 40], x[5 * 40], bias[9], stats[5];
    int8_t codes[5 * 40];
    int64_t cols[40], nout = 0;
    t_buf y = t_buf_new(M * N * 4);
    qs_matmul_params p;
    wobj o;

    (void)state;
    fill(&r, w0, N * K, 0.05);
    fill(&r, x, M * K, 1.0);
    fill(&r, bias, N, 0.1);
    x[0 * K + 3] = 9.0f; /* outlier columns 3, 17 and 30 */
    x[2 * K + 17] = -12.0f;
    x[4 * K + 30] = 6.0f;
    wobj_make(ctx, &specs[13], w0, N, K, &o);
    qs_matmul_params_init(&p);
    p.activations = QS_MATMUL_ACT_INT8;
    p.threshold = QS_LLM_INT8_THRESHOLD;
    assert_int_equal(run(ctx, &p, x, QS_DTYPE_F32, M, K, &o, N, bias, &y), QS_OK);
    assert_int_equal(qs_int8_vectorwise_quant(ctx, x, QS_DTYPE_F32, M, K, 6.0f, codes, M * K, stats,
                                              M, cols, K, &nout),
                     QS_OK);
    assert_int_equal(nout, 3);
    const int8_t *wq = o.t.q.data;
    const float *scb = o.t.q.scale;
    for (int64_t m = 0; m < M; m++)
        for (int64_t n = 0; n < N; n++) {
            int32_t acc = 0;
            float out = 0.0f;
            for (int64_t k = 0; k < K; k++)
                acc += codes[m * K + k] * wq[n * K + k];
            float v = (((float)acc * stats[m]) * scb[n]) * (1.0f / 16129.0f);
            for (int64_t c = 0; c < nout; c++) {
                float wd = ((float)wq[n * K + cols[c]] * scb[n]) * (1.0f / 127.0f);
                out = out + x[m * K + cols[c]] * wd;
            }
            v = v + out;
            v = v + bias[n];
            assert_true(t_bits(((float *)y.p)[m * N + n]) == t_bits(v));
        }
    /* the outlier split matters: without it the error against float64 is far larger */
    double want[5 * 9], e_split, e_plain;
    ref_product(x, o.dense, bias, M, K, N, want, NULL);
    e_split = rel_frobenius(y.p, want, M * N);
    p.threshold = 0.0f;
    assert_int_equal(run(ctx, &p, x, QS_DTYPE_F32, M, K, &o, N, bias, &y), QS_OK);
    e_plain = rel_frobenius(y.p, want, M * N);
    assert_true(e_split * 2.0 < e_plain);
    wobj_free(&o);
    t_buf_free(&y);
    qs_ctx_destroy(ctx);
}

/* int8 activations against INT8 weights (tensor / row / group, symmetric or not) restated:
 * exact integer sums per scale unit, t = sum fl(a_s * scale_s), y = fl(t * fl(r / 127)), bit for
 * bit; the codes and r are qs_int8_vectorwise_quant's with threshold 0. */
static void test_w8a8_exact(void **state)
{
    static const int idx[] = {7, 8, 9, 10, 11, 12};
    qs_ctx *ctx = t_ctx();
    t_rng r = {21};
    const int64_t M = 3, K = 48, N = 7;
    float w0[7 * 48], x[3 * 48], stats[3];
    int8_t codes[3 * 48];
    int64_t nout = -1;
    t_buf y = t_buf_new(M * N * 4);
    qs_matmul_params p;

    (void)state;
    qs_matmul_params_init(&p);
    p.activations = QS_MATMUL_ACT_INT8;
    for (int i = 0; i < (int)(sizeof idx / sizeof idx[0]); i++) {
        wobj o;
        fill(&r, w0, N * K, 0.05);
        fill(&r, x, M * K, 1.0);
        wobj_make(ctx, &specs[idx[i]], w0, N, K, &o);
        assert_int_equal(run(ctx, &p, x, QS_DTYPE_F32, M, K, &o, N, NULL, &y), QS_OK);
        assert_int_equal(qs_int8_vectorwise_quant(ctx, x, QS_DTYPE_F32, M, K, 0.0f, codes, M * K,
                                                  stats, M, NULL, 0, &nout),
                         QS_OK);
        const int8_t *wq = o.t.q.data, *zp = o.t.q.zero_point;
        const float *sc = o.t.q.scale;
        int64_t g = o.p.granularity == QS_GRAN_GROUP ? o.p.block_size : K;
        for (int64_t m = 0; m < M; m++)
            for (int64_t n = 0; n < N; n++) {
                float t = 0.0f;
                for (int64_t s0 = 0; s0 < K; s0 += g) {
                    int64_t u = o.p.granularity == QS_GRAN_TENSOR ? 0
                                : o.p.granularity == QS_GRAN_ROW  ? n
                                                                  : (n * K + s0) / g;
                    int32_t a = 0, z = o.p.symmetric ? 0 : zp[u];
                    for (int64_t k = s0; k < s0 + g; k++)
                        a += codes[m * K + k] * (wq[n * K + k] - z);
                    t = t + (float)a * sc[u];
                }
                float want = t * (stats[m] / 127.0f);
                if (t_bits(((float *)y.p)[m * N + n]) != t_bits(want)) {
                    print_error("%s m=%lld n=%lld: got %a want %a\n", specs[idx[i]].name,
                                (long long)m, (long long)n, (double)((float *)y.p)[m * N + n],
                                (double)want);
                    fail();
                }
            }
        wobj_free(&o);
    }
    t_buf_free(&y);
    qs_ctx_destroy(ctx);
}

/* ---- threads -------------------------------------------------------------------------------- */

static void test_threads(void **state)
{
    static const int idx[] = {0, 2, 3, 8, 13, 16, 19, 22};
    qs_ctx *ctx = t_ctx();
    t_rng r = {3};

    (void)state;
    for (int i = 0; i < (int)(sizeof idx / sizeof idx[0]); i++)
        for (int c = 0; c < 3; c++) {
            int64_t M = c == 0 ? 2 : 40, N = 600, K = 260; /* two GEMM panels */
            float *w0 = malloc((size_t)(N * K) * 4), *x = malloc((size_t)(M * K) * 4);
            t_buf y1 = t_buf_new((size_t)(M * N) * 4), y2 = t_buf_new((size_t)(M * N) * 4);
            qs_matmul_params p;
            wobj o;

            fill(&r, w0, N * K, 0.05);
            fill(&r, x, M * K, 2.0);
            wobj_make(ctx, &specs[idx[i]], w0, N, K, &o);
            qs_matmul_params_init(&p);
            if (c == 2) {
                p.activations = QS_MATMUL_ACT_INT8;
                p.threshold = 6.0f;
            }
            assert_int_equal(qs_ctx_set(ctx, QS_PARAM_NUM_THREADS, 1), QS_OK);
            assert_int_equal(run(ctx, &p, x, QS_DTYPE_F32, M, K, &o, N, NULL, &y1), QS_OK);
            assert_int_equal(qs_ctx_set(ctx, QS_PARAM_NUM_THREADS, 2), QS_OK);
            assert_int_equal(run(ctx, &p, x, QS_DTYPE_F32, M, K, &o, N, NULL, &y2), QS_OK);
            T_ASSERT_BYTES(specs[idx[i]].name, y1.p, y2.p, y1.bytes);
            wobj_free(&o);
            t_buf_free(&y1);
            t_buf_free(&y2);
            free(w0);
            free(x);
        }
    qs_ctx_destroy(ctx);
}

/* The GEMV paths hand their tasks of rows to whichever thread is free (a different split from
 * run to run): every weight kind, M = 1 and 3, f32 and int8 activations (with outlier columns),
 * an odd N whose last task is partial, give the bits of one thread on 2 and 3 threads, call
 * after call. */
static void test_gemv_threads(void **state)
{
    const int64_t N = 1001, K = 192;
    qs_ctx *ctx = t_ctx();
    t_rng r = {17};
    float *w0 = malloc((size_t)(N * K) * 4), x[3 * 192];
    t_buf y1 = t_buf_new((size_t)(3 * N) * 4), y2 = t_buf_new((size_t)(3 * N) * 4);

    (void)state;
    assert_non_null(w0);
    fill(&r, w0, N * K, 0.05);
    fill(&r, x, 3 * K, 2.0);
    x[5] = 9.0f; /* an outlier column for the LLM.int8 split */
    for (int i = 0; i < NSPECS; i++) {
        wobj o;
        wobj_make(ctx, &specs[i], w0, N, K, &o);
        for (int c = 0; c < 4; c++) {
            int64_t M = c % 2 == 0 ? 1 : 3;
            qs_matmul_params p;
            char what[96];
            qs_matmul_params_init(&p);
            if (c >= 2) {
                p.activations = QS_MATMUL_ACT_INT8;
                p.threshold = 6.0f;
            }
            assert_int_equal(qs_ctx_set(ctx, QS_PARAM_NUM_THREADS, 1), QS_OK);
            assert_int_equal(run(ctx, &p, x, QS_DTYPE_F32, M, K, &o, N, NULL, &y1), QS_OK);
            for (int t = 2; t <= 3; t++)
                for (int rep = 0; rep < 3; rep++) {
                    snprintf(what, sizeof what, "%s, M = %lld, %s activations, %d threads",
                             specs[i].name, (long long)M, c >= 2 ? "int8" : "f32", t);
                    memset(y2.p, 0xA5, y2.bytes);
                    assert_int_equal(qs_ctx_set(ctx, QS_PARAM_NUM_THREADS, t), QS_OK);
                    assert_int_equal(run(ctx, &p, x, QS_DTYPE_F32, M, K, &o, N, NULL, &y2), QS_OK);
                    T_ASSERT_BYTES(what, y1.p, y2.p, (size_t)(M * N) * 4);
                }
        }
        wobj_free(&o);
    }
    t_buf_free(&y1);
    t_buf_free(&y2);
    free(w0);
    qs_ctx_destroy(ctx);
}

/* ---- no alignment, the NaN rule ----------------------------------------------------------- */

/* A copy of `bytes` bytes at 16-byte alignment plus `off`; *base is what to free. */
static void *shifted(const void *src, size_t bytes, int off, void **base)
{
    uint8_t *b = malloc(bytes + 32);
    assert_non_null(b);
    if (bytes)
        memcpy(b + 16 + off, src, bytes);
    *base = b;
    return b + 16 + off;
}

/* x, bias, y, the dense or 2:4 values, the meta words and every scale plane 1, 2 or 3 bytes past
 * 16-byte alignment give the bytes of the aligned run (the sanitizer build traps a misaligned
 * access), on the GEMV, GEMM and int8 paths. */
static void test_unaligned(void **state)
{
    static const int idx[] = {0, 2, 3, 8, 12, 13, 14, 19, 22};
    qs_ctx *ctx = t_ctx();
    t_rng r = {41};
    const int64_t K = 64, N = 24;
    float w0[24 * 64], x[20 * 64], bias[24];

    (void)state;
    fill(&r, w0, N * K, 0.1);
    fill(&r, x, 20 * K, 1.0);
    fill(&r, bias, N, 0.1);
    for (int i = 0; i < (int)(sizeof idx / sizeof idx[0]); i++)
        for (int c = 0; c < 3; c++) {
            int64_t M = c == 1 ? 20 : 2;
            int off = 1 + (i + c) % 3;
            float want[20 * 24];
            void *bx, *bb, *by, *bd = NULL, *bm = NULL, *bs = NULL, *bz = NULL;
            qs_matmul_params p;
            wobj o;

            wobj_make(ctx, &specs[idx[i]], w0, N, K, &o);
            qs_matmul_params_init(&p);
            if (c == 2) {
                p.activations = QS_MATMUL_ACT_INT8;
                p.threshold = 2.5f;
            }
            assert_int_equal(qs_matmul(ctx, &p, x, QS_DTYPE_F32, M, K, &o.w, N, bias, want,
                                       (int64_t)sizeof want),
                             QS_OK);
            qs_weight w = o.w;
            qs_qtensor q = o.t.q;
            if (w.data)
                w.data = shifted(w.data, (size_t)w.data_bytes, off, &bd);
            if (w.meta)
                w.meta = shifted(w.meta, (size_t)w.meta_count * 2, off, &bm);
            if (w.q) {
                if (q.scale)
                    q.scale = shifted(q.scale, (size_t)q.scale_bytes, off, &bs);
                if (q.nested_scale)
                    q.nested_scale =
                        shifted(q.nested_scale, (size_t)q.nested_scale_bytes, off, &bz);
                w.q = &q;
            }
            const void *xs = shifted(x, (size_t)(M * K) * 4, off, &bx);
            const float *bs_ = shifted(bias, sizeof bias, off, &bb);
            float *ys = shifted(want, (size_t)(M * N) * 4, off, &by);
            memset(ys, 0x55, (size_t)(M * N) * 4);
            assert_int_equal(qs_matmul(ctx, &p, xs, QS_DTYPE_F32, M, K, &w, N, bs_, ys, M * N * 4),
                             QS_OK);
            T_ASSERT_BYTES(specs[idx[i]].name, ys, want, (size_t)(M * N) * 4);
            free(bx);
            free(bb);
            free(by);
            free(bd);
            free(bm);
            free(bs);
            free(bz);
            wobj_free(&o);
        }
    qs_ctx_destroy(ctx);
}

/* A NaN in y is the canonical quiet NaN 0x7FC00000, whatever NaN went in (here one with the sign
 * bit and a payload), on the GEMV, GEMM, 2:4 and int8 paths; other outputs stay finite. */
static void test_nan_rule(void **state)
{
    static const int idx[] = {0, 2, 8, 19, 22};
    qs_ctx *ctx = t_ctx();
    t_rng r = {43};
    const int64_t K = 32, N = 5, M = 20;
    float w0[5 * 32], x[20 * 32], y[20 * 5];

    (void)state;
    fill(&r, w0, N * K, 0.1);
    fill(&r, x, M * K, 1.0);
    x[3 * K + 7] = t_f32_from_bits(0xFFC01234u); /* row 3 */
    for (int i = 0; i < (int)(sizeof idx / sizeof idx[0]); i++)
        for (int c = 0; c < 2; c++) {
            int64_t m_rows = c ? M : 4; /* GEMM and GEMV */
            wobj o;
            wobj_make(ctx, &specs[idx[i]], w0, N, K, &o);
            assert_int_equal(qs_matmul(ctx, NULL, x, QS_DTYPE_F32, m_rows, K, &o.w, N, NULL, y,
                                       (int64_t)sizeof y),
                             QS_OK);
            for (int64_t m = 0; m < m_rows; m++)
                for (int64_t n = 0; n < N; n++) {
                    float v = y[m * N + n];
                    if (m == 3 && o.dense[n * K + 7] != 0.0f)
                        assert_int_equal(t_bits(v), 0x7FC00000u);
                    else if (m != 3)
                        assert_true(isfinite(v));
                }
            wobj_free(&o);
        }
    qs_ctx_destroy(ctx);
}

/* ---- bad arguments: a status and y untouched ---------------------------------------------- */

static void expect(qs_ctx *ctx, qs_status want, const qs_matmul_params *p, const void *x,
                   int32_t dt, int64_t M, int64_t K, const qs_weight *w, int64_t N, int64_t ybytes)
{
    t_buf y = t_buf_new(64 * 64 * 4);

    assert_int_equal(qs_matmul(ctx, p, x, dt, M, K, w, N, NULL, y.p, ybytes), want);
    assert_true(t_buf_untouched(&y));
    assert_true(strlen(qs_ctx_last_error(ctx)) > 0);
    t_buf_free(&y);
}

static void test_errors(void **state)
{
    qs_ctx *ctx = t_ctx();
    t_rng r = {9};
    float w0[16 * 32], x[4 * 64];
    qs_matmul_params p;
    wobj nf4, sp, i8;
    qs_weight w;

    (void)state;
    fill(&r, w0, 16 * 32, 1.0);
    fill(&r, x, 4 * 64, 1.0);
    wobj_make(ctx, &specs[2], w0, 16, 32, &nf4);
    wobj_make(ctx, &specs[19], w0, 16, 32, &sp);
    wobj_make(ctx, &specs[8], w0, 16, 32, &i8);
    qs_matmul_params_init(&p);

    assert_int_equal(qs_matmul(NULL, NULL, x, 0, 1, 32, &nf4.w, 16, NULL, NULL, 0),
                     QS_ERR_INVALID_ARG);
    expect(ctx, QS_ERR_INVALID_ARG, NULL, NULL, 0, 4, 32, &nf4.w, 16, 4 * 16 * 4);
    expect(ctx, QS_ERR_INVALID_ARG, NULL, x, 0, 4, 32, NULL, 16, 4 * 16 * 4);
    expect(ctx, QS_ERR_INVALID_ARG, NULL, x, 7, 4, 32, &nf4.w, 16, 4 * 16 * 4);
    expect(ctx, QS_ERR_INVALID_ARG, NULL, x, 0, -1, 32, &nf4.w, 16, 4 * 16 * 4);
    expect(ctx, QS_ERR_OVERFLOW, NULL, x, 0, INT64_MAX / 2, 32, &nf4.w, 16, INT64_MAX);
    expect(ctx, QS_ERR_BUFFER_TOO_SMALL, NULL, x, 0, 4, 32, &nf4.w, 16, 4 * 16 * 4 - 1);
    /* a weight made for 16 x 32 used as 17 x 32 or 16 x 64: its planes are too short */
    expect(ctx, QS_ERR_BUFFER_TOO_SMALL, NULL, x, 0, 2, 32, &nf4.w, 17, 64 * 64 * 4);
    expect(ctx, QS_ERR_BUFFER_TOO_SMALL, NULL, x, 0, 2, 64, &nf4.w, 16, 64 * 64 * 4);
    expect(ctx, QS_ERR_BUFFER_TOO_SMALL, NULL, x, 0, 2, 64, &i8.w, 16, 64 * 64 * 4);
    expect(ctx, QS_ERR_BUFFER_TOO_SMALL, NULL, x, 0, 2, 64, &sp.w, 16, 64 * 64 * 4);
    expect(ctx, QS_ERR_SHAPE, NULL, x, 0, 2, 30, &sp.w, 16, 64 * 64 * 4);
    /* params */
    p.activations = 5;
    expect(ctx, QS_ERR_INVALID_ARG, &p, x, 0, 2, 32, &nf4.w, 16, 64 * 64 * 4);
    qs_matmul_params_init(&p);
    p.threshold = 6.0f; /* needs int8 activations */
    expect(ctx, QS_ERR_INVALID_ARG, &p, x, 0, 2, 32, &nf4.w, 16, 64 * 64 * 4);
    p.activations = QS_MATMUL_ACT_INT8;
    p.threshold = -1.0f;
    expect(ctx, QS_ERR_INVALID_ARG, &p, x, 0, 2, 32, &nf4.w, 16, 64 * 64 * 4);
    p.threshold = INFINITY;
    expect(ctx, QS_ERR_INVALID_ARG, &p, x, 0, 2, 32, &nf4.w, 16, 64 * 64 * 4);
    qs_matmul_params_init(&p);
    p.reserved[3] = 1;
    expect(ctx, QS_ERR_INVALID_ARG, &p, x, 0, 2, 32, &nf4.w, 16, 64 * 64 * 4);
    /* weight fields */
    w = nf4.w;
    w.kind = 9;
    expect(ctx, QS_ERR_INVALID_ARG, NULL, x, 0, 2, 32, &w, 16, 64 * 64 * 4);
    w = nf4.w;
    w.reserved[0] = 1;
    expect(ctx, QS_ERR_INVALID_ARG, NULL, x, 0, 2, 32, &w, 16, 64 * 64 * 4);
    w = nf4.w;
    w.meta = sp.meta;
    expect(ctx, QS_ERR_INVALID_ARG, NULL, x, 0, 2, 32, &w, 16, 64 * 64 * 4);
    w = nf4.w;
    w.q = NULL;
    expect(ctx, QS_ERR_INVALID_ARG, NULL, x, 0, 2, 32, &w, 16, 64 * 64 * 4);
    w = sp.w;
    w.meta = NULL;
    expect(ctx, QS_ERR_INVALID_ARG, NULL, x, 0, 2, 32, &w, 16, 64 * 64 * 4);
    w.meta = sp.meta;
    w.dtype = 3;
    expect(ctx, QS_ERR_INVALID_ARG, NULL, x, 0, 2, 32, &w, 16, 64 * 64 * 4);
    /* invalid meta nibble (0x5: indices 1, 1) in the last row */
    {
        uint16_t *m = malloc((size_t)sp.w.meta_count * 2);
        memcpy(m, sp.meta, (size_t)sp.w.meta_count * 2);
        m[sp.w.meta_count - 1] = (uint16_t)((m[sp.w.meta_count - 1] & 0xFFF0u) | 0x5u);
        w = sp.w;
        w.meta = m;
        expect(ctx, QS_ERR_BAD_DATA, NULL, x, 0, 2, 32, &w, 16, 64 * 64 * 4);
        free(m);
    }
    /* int8 activations with INT8 weights: K beyond the exact int32 range */
    {
        int64_t K = QS_MATMUL_INT8_MAX_K + 1;
        int8_t *q = calloc((size_t)K, 1);
        float s = 1.0f, *xb = calloc((size_t)K, 4);
        qs_quant_params qp = params(QS_FORMAT_INT8);
        qs_qtensor qt = qt_over(q, K, &s, 4);
        w = (qs_weight){0};
        w.kind = QS_WEIGHT_QUANT;
        w.quant = &qp;
        w.q = &qt;
        qs_matmul_params_init(&p);
        p.activations = QS_MATMUL_ACT_INT8;
        expect(ctx, QS_ERR_UNSUPPORTED, &p, xb, 0, 1, K, &w, 1, 64 * 64 * 4);
        /* f32 activations take it */
        t_buf y = t_buf_new(4);
        assert_int_equal(qs_matmul(ctx, NULL, xb, 0, 1, K, &w, 1, NULL, y.p, 4), QS_OK);
        t_buf_free(&y);
        free(q);
        free(xb);
    }
    wobj_free(&nf4);
    wobj_free(&sp);
    wobj_free(&i8);
    qs_ctx_destroy(ctx);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_kinds_f32),
        cmocka_unit_test(test_gemv_fused),
        cmocka_unit_test(test_gemv_nonfinite_x),
        cmocka_unit_test(test_gemv_infinite_scale),
        cmocka_unit_test(test_empty),
        cmocka_unit_test(test_empty_k_llm_int8),
        cmocka_unit_test(test_empty_k_huge_n_sp24),
        cmocka_unit_test(test_summation_order),
        cmocka_unit_test(test_gemv_subnormal_bound),
        cmocka_unit_test(test_int8_bound),
        cmocka_unit_test(test_vectorwise_hand),
        cmocka_unit_test(test_vectorwise_empty),
        cmocka_unit_test(test_llm_int8_outliers),
        cmocka_unit_test(test_w8a8_exact),
        cmocka_unit_test(test_threads),
        cmocka_unit_test(test_gemv_threads),
        cmocka_unit_test(test_unaligned),
        cmocka_unit_test(test_nan_rule),
        cmocka_unit_test(test_errors),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
