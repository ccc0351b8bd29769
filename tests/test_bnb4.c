/* SPDX-License-Identifier: MIT */
/*
 * Spec tests of bitsandbytes NF4 and FP4 blockwise quantization and of double quantization
 * (docs/formats.md §5, §6.1, §6.2), through the public API (qs_quantize / qs_dequantize), so that
 * every ISA tier this test runs under is checked: the §5.4 vectors, the §6.2 example, ties exactly
 * on every threshold and one ulp above, ±Inf / NaN / all-zero / subnormal-absmax blocks, the pad
 * nibble of odd n, partial blocks, every accepted and several rejected block sizes, f16 / bf16
 * inputs and outputs, thread-count independence, and error bounds on random data. Random cases are
 * checked against an emulation of §5.2 written in this file from the spec's hex tables.
 */
#include <float.h>

#include "common.h"
#include "quant_helpers.h"

/* §3 NF4 thresholds t_0 ... t_14 and §4 FP4 thresholds t_1 ... t_7 (the hex columns). */
static const uint32_t nf4_thr_hex[15] = {
    0xbf591cd8, 0xbf1c5270, 0xbeeb8480, 0xbeadea76, 0xbe703cec, 0xbe0d38bc, 0xbd3a7871, 0x3d22faff,
    0x3df64862, 0x3e5067e0, 0x3e9582d4, 0x3ec753f9, 0x3f006d04, 0x3f248daf, 0x3f5c89da,
};
static const uint32_t fp4_thr_hex[7] = {
    0x3b2aaab9, 0x3db00000, 0x3e555555, 0x3e955555, 0x3ed55556, 0x3f155550, 0x3f555555,
};
/* §4 R[r]: the low three code bits of magnitude rank r. */
static const uint8_t fp4_rank[8] = {0x0, 0x1, 0x6, 0x7, 0x4, 0x5, 0x2, 0x3};

static float H(uint32_t u)
{
    return t_f32_from_bits(u);
}

static void assert_bits(const char *what, int64_t index, float got, uint32_t want)
{
    if (t_bits(got) != want) {
        print_error("%s[%lld]: got %08x, want %08x\n", what, (long long)index, t_bits(got), want);
        fail();
    }
}

/* ---- an emulation of §5.2 from the spec text (the oracle for random data) -------------------- */

static uint8_t emu_encode(int32_t format, float x)
{
    int r = 0;

    if (format == QS_FORMAT_NF4) {
        for (int k = 0; k < 15; k++)
            r += x > H(nf4_thr_hex[k]);
        return (uint8_t)r;
    }
    for (int k = 0; k < 7; k++)
        r += fabsf(x) > H(fp4_thr_hex[k]);
    return (uint8_t)((x < 0.0f ? 0x8 : 0x0) | fp4_rank[r]);
}

/* Quantize n f32 values: codes packed high nibble first into data, block absmax into absmax. */
static void emu_quant(int32_t format, const float *v, int64_t n, int32_t block, uint8_t *data,
                      float *absmax)
{
    memset(data, 0, (size_t)(n + 1) / 2);
    for (int64_t b = 0; b * block < n; b++) {
        int64_t start = b * block, end = start + block < n ? start + block : n;
        float m = 0.0f, inv;
        for (int64_t i = start; i < end; i++)
            if (fabsf(v[i]) > m) /* NaN compares false: ignored */
                m = fabsf(v[i]);
        absmax[b] = m;
        inv = 1.0f / m;
        /* the pad element of odd n (i == n) is the value 0.0 of the last block (§5.1) */
        for (int64_t i = start; i < end + ((end == n) & (n & 1)); i++) {
            uint8_t c = m == 0.0f ? 0 : emu_encode(format, (i < n ? v[i] : 0.0f) * inv);
            data[i / 2] |= (uint8_t)(i & 1 ? c : c << 4);
        }
    }
}

/* ---- API helpers ----------------------------------------------------------------------------- */

typedef struct {
    qs_quant_params p;
    qs_qtensor q;
    t_buf data, scale, nested;
} bq;

/* Canary-guarded planes of exactly qs_quant_size bytes for an n-element tensor. */
static void bq_init(bq *t, int32_t format, int32_t block, int32_t dq, int64_t n)
{
    int64_t bytes[QS_PLANE_COUNT];

    memset(t, 0, sizeof *t);
    qs_quant_params_init(&t->p, format);
    t->p.block_size = block;
    t->p.double_quant = dq;
    for (int32_t pl = 0; pl < QS_PLANE_COUNT; pl++)
        assert_int_equal(qs_quant_size(&t->p, 1, n, pl, &bytes[pl]), QS_OK);
    assert_int_equal(bytes[QS_PLANE_DATA], (n + 1) / 2);
    assert_int_equal(bytes[QS_PLANE_ZERO_POINT], 0);
    t->data = t_buf_new((size_t)bytes[QS_PLANE_DATA]);
    t->scale = t_buf_new((size_t)bytes[QS_PLANE_SCALE]);
    t->nested = t_buf_new((size_t)bytes[QS_PLANE_NESTED_SCALE]);
    t->q.data = t->data.p;
    t->q.data_bytes = bytes[QS_PLANE_DATA];
    t->q.scale = t->scale.p;
    t->q.scale_bytes = bytes[QS_PLANE_SCALE];
    t->q.nested_scale = dq ? t->nested.p : NULL;
    t->q.nested_scale_bytes = bytes[QS_PLANE_NESTED_SCALE];
}

static void bq_check_guards(const bq *t)
{
    assert_true(t_buf_guards_ok(&t->data));
    assert_true(t_buf_guards_ok(&t->scale));
    assert_true(t_buf_guards_ok(&t->nested));
}

static void bq_free(bq *t)
{
    t_buf_free(&t->data);
    t_buf_free(&t->scale);
    t_buf_free(&t->nested);
}

/* Quantize f32 x[n] (one row) and require QS_OK and intact guards. */
static void bq_quant(qs_ctx *ctx, bq *t, const void *x, int32_t dtype, int64_t n)
{
    qs_status st = qs_quantize(ctx, &t->p, x, dtype, 1, n, &t->q);
    if (st != QS_OK) {
        print_error("qs_quantize: %s (%s)\n", qs_status_str(st), qs_ctx_last_error(ctx));
        fail();
    }
    bq_check_guards(t);
}

/* Dequantize into f32 out[n] and check each value is codebook[code] * absmax[block] (§5.3). */
static void bq_dequant_check(qs_ctx *ctx, const bq *t, int64_t n, const float *absmax)
{
    float cb[16], *out = malloc((size_t)(n > 0 ? n : 1) * sizeof(float));
    const uint8_t *d = t->q.data;

    assert_non_null(out);
    assert_int_equal(qs_codebook(t->p.format == QS_FORMAT_NF4 ? QS_CODEBOOK_NF4 : QS_CODEBOOK_FP4,
                                 cb, 16),
                     QS_OK);
    assert_int_equal(qs_dequantize(ctx, &t->p, &t->q, 1, n, out, QS_DTYPE_F32, n * 4), QS_OK);
    for (int64_t i = 0; i < n; i++) {
        int c = i & 1 ? d[i / 2] & 0xF : d[i / 2] >> 4;
        volatile float want = cb[c] * absmax[i / t->p.block_size];
        if (t_bits(out[i]) != t_bits(want) && !(isnan(out[i]) && isnan(want))) {
            print_error("dequant[%lld] code %d: got %08x, want %08x\n", (long long)i, c,
                        t_bits(out[i]), t_bits(want));
            fail();
        }
    }
    free(out);
}

/* ---- §5.4 test vectors ----------------------------------------------------------------------- */

typedef struct {
    int32_t format;
    int n;
    float x[8];
    uint32_t absmax;
    uint8_t bytes[4];
} vec54;

static void run_vectors(const vec54 *v, size_t count)
{
    qs_ctx *ctx = t_ctx();

    for (size_t i = 0; i < count; i++) {
        bq t;
        char what[64];
        bq_init(&t, v[i].format, 64, 0, v[i].n);
        bq_quant(ctx, &t, v[i].x, QS_DTYPE_F32, v[i].n);
        snprintf(what, sizeof what, "vector %zu (%s)", i, qs_format_name(v[i].format));
        assert_bits(what, 0, *(float *)t.q.scale, v[i].absmax);
        T_ASSERT_BYTES(what, t.q.data, v[i].bytes, (size_t)(v[i].n + 1) / 2);
        bq_dequant_check(ctx, &t, v[i].n, t.q.scale);
        bq_free(&t);
    }
    qs_ctx_destroy(ctx);
}

static void test_spec_vectors(void **state)
{
    (void)state;
    /* t7 = 3d22faff, t0 = bf591cd8 */
    const vec54 v[] = {
        {QS_FORMAT_NF4, 7, {1.0f, -1.0f, 0.5f, H(0x3d22faff), H(0xbf591cd8), 0.0f, -0.25f},
         0x3f800000, {0xF0, 0xC7, 0x07, 0x47}},
        {QS_FORMAT_FP4, 7, {1.0f, -1.0f, 0.5f, H(0x3d22faff), H(0xbf591cd8), 0.0f, -0.25f},
         0x3f800000, {0x3B, 0x51, 0xB0, 0xF0}},
        {QS_FORMAT_NF4, 5, {0}, 0x00000000, {0x00, 0x00, 0x00}},
        {QS_FORMAT_FP4, 5, {0}, 0x00000000, {0x00, 0x00, 0x00}},
        {QS_FORMAT_NF4, 3, {NAN, 0.5f, -1.0f}, 0x3f800000, {0x0C, 0x07}},
        /* multiply by 1/absmax, not divide: x = bf591cd7 > t0 gives code 1 (dividing gives 0F) */
        {QS_FORMAT_NF4, 2, {H(0xbffa131c), H(0x40136ed4)}, 0x40136ed4, {0x1F}},
        /* subnormal absmax <= 2^-128: inv = +Inf, +-Inf -> 15 / 0, zeros -> NaN -> 0 */
        {QS_FORMAT_NF4, 6, {2.5e-39f, -1e-39f, 0.0f, 5e-40f, -0.0f, 1e-45f}, 0x001b38fc,
         {0xF0, 0x0F, 0x0F}},
        {QS_FORMAT_FP4, 6, {2.5e-39f, -1e-39f, 0.0f, 5e-40f, -0.0f, 1e-45f}, 0x001b38fc,
         {0x3B, 0x03, 0x03}},
        /* §5.2 FP4 zero sign: x = -0.0 -> 0x0, x = -1.4e-45 -> 0x8 */
        {QS_FORMAT_FP4, 2, {10.0f, -1e-45f}, 0x41200000, {0x30}},
        {QS_FORMAT_FP4, 2, {10.0f, -1e-44f}, 0x41200000, {0x38}},
        /* FP4 NaN -> 0x0, and the pad element of odd n */
        {QS_FORMAT_FP4, 3, {NAN, 0.5f, -1.0f}, 0x3f800000, {0x05, 0xB0}},
    };

    assert_true(2.5e-39f <= 0x1p-128f && t_bits(2.5e-39f) == 0x001b38fc);
    run_vectors(v, sizeof v / sizeof v[0]);
}

/* ---- ties at every threshold ----------------------------------------------------------------- */

/* One block [A, A t_k, A up(t_k), A down(t_k), ...] with a power-of-two absmax A, so x = v * (1/A)
 * is exact: a tie takes the lower code, one ulp above the higher (NF4 §3, FP4 §4 both signs). */
static void test_threshold_ties(void **state)
{
    (void)state;
    static const float scales[3] = {1.0f, 4.0f, 0x1p-100f};
    qs_ctx *ctx = t_ctx();

    for (int s = 0; s < 3; s++) {
        float A = scales[s], x[64];
        uint8_t want[64], packed[32];
        int n = 0;
        bq t;

        /* NF4: 1 + 15 * 3 = 46 elements */
        x[n] = A, want[n++] = 15;
        for (int k = 0; k < 15; k++) {
            float th = H(nf4_thr_hex[k]);
            x[n] = A * th, want[n++] = (uint8_t)k;
            x[n] = A * nextafterf(th, INFINITY), want[n++] = (uint8_t)(k + 1);
            x[n] = A * nextafterf(th, -INFINITY), want[n++] = (uint8_t)k;
        }
        for (int i = 0; i < n; i += 2)
            packed[i / 2] = (uint8_t)(want[i] << 4 | (i + 1 < n ? want[i + 1] : 7));
        bq_init(&t, QS_FORMAT_NF4, 64, 0, n);
        bq_quant(ctx, &t, x, QS_DTYPE_F32, n);
        assert_bits("NF4 tie block absmax", s, *(float *)t.q.scale, t_bits(A));
        T_ASSERT_BYTES("NF4 threshold ties", t.q.data, packed, (size_t)n / 2);
        bq_free(&t);

        /* FP4: 1 + 7 * 4 = 29 elements (odd: the pad nibble is 0x0) */
        n = 0;
        x[n] = A, want[n++] = 0x3;
        for (int k = 0; k < 7; k++) {
            float th = H(fp4_thr_hex[k]), up = nextafterf(th, INFINITY);
            x[n] = A * th, want[n++] = fp4_rank[k];
            x[n] = A * up, want[n++] = fp4_rank[k + 1];
            x[n] = -A * th, want[n++] = (uint8_t)(0x8 | fp4_rank[k]);
            x[n] = -A * up, want[n++] = (uint8_t)(0x8 | fp4_rank[k + 1]);
        }
        for (int i = 0; i < n; i += 2)
            packed[i / 2] = (uint8_t)(want[i] << 4 | (i + 1 < n ? want[i + 1] : 0));
        bq_init(&t, QS_FORMAT_FP4, 64, 0, n);
        bq_quant(ctx, &t, x, QS_DTYPE_F32, n);
        T_ASSERT_BYTES("FP4 threshold ties", t.q.data, packed, (size_t)(n + 1) / 2);
        bq_free(&t);
    }
    qs_ctx_destroy(ctx);
}

/* ---- non-finite input and special blocks ----------------------------------------------------- */

/* ±Inf element: absmax +Inf, inv 0, finite elements x = ±0 (NF4 7, FP4 0), the Inf itself
 * x = NaN (code 0); decoding gives -Inf for NF4 code 0 and NaN for code 7. With the reject policy
 * the call fails with QS_ERR_NONFINITE and writes nothing. */
static void test_inf_element(void **state)
{
    (void)state;
    qs_ctx *ctx = t_ctx();
    const float x[6] = {INFINITY, 0.5f, -0.5f, 1.0f, -INFINITY, NAN};
    static const uint8_t nf4_want[3] = {0x07, 0x77, 0x00}, fp4_want[3] = {0, 0, 0};
    float out[6];
    bq t;

    bq_init(&t, QS_FORMAT_NF4, 64, 0, 6);
    bq_quant(ctx, &t, x, QS_DTYPE_F32, 6);
    assert_bits("Inf absmax", 0, *(float *)t.q.scale, 0x7f800000);
    T_ASSERT_BYTES("NF4 with Inf", t.q.data, nf4_want, 3);
    assert_int_equal(qs_dequantize(ctx, &t.p, &t.q, 1, 6, out, QS_DTYPE_F32, sizeof out), QS_OK);
    assert_true(out[0] == -INFINITY && isnan(out[1]) && isnan(out[3]) && out[4] == -INFINITY);
    bq_free(&t);

    bq_init(&t, QS_FORMAT_FP4, 64, 0, 6);
    bq_quant(ctx, &t, x, QS_DTYPE_F32, 6);
    assert_bits("Inf absmax", 0, *(float *)t.q.scale, 0x7f800000);
    T_ASSERT_BYTES("FP4 with Inf", t.q.data, fp4_want, 3);
    bq_free(&t);

    assert_int_equal(qs_ctx_set(ctx, QS_PARAM_NONFINITE, QS_NONFINITE_REJECT), QS_OK);
    for (int f = QS_FORMAT_NF4; f <= QS_FORMAT_FP4; f++) {
        bq_init(&t, f, 64, 1, 6);
        assert_int_equal(qs_quantize(ctx, &t.p, x, QS_DTYPE_F32, 1, 6, &t.q), QS_ERR_NONFINITE);
        assert_true(t_buf_untouched(&t.data) && t_buf_untouched(&t.scale));
        assert_true(t_buf_untouched(&t.nested));
        bq_free(&t);
    }
    qs_ctx_destroy(ctx);
}

/* An all-NaN block stores absmax 0 and codes 0 [convention]; its neighbours are unaffected.
 * Blocks of 2 make the second byte a block of its own. */
static void test_nan_and_zero_blocks(void **state)
{
    (void)state;
    qs_ctx *ctx = t_ctx();
    float x[70];
    uint8_t data[35];
    float absmax[2];
    bq t;

    for (int i = 0; i < 64; i++)
        x[i] = i & 1 ? -NAN : NAN;
    for (int i = 64; i < 70; i++)
        x[i] = (float)(i - 66);
    for (int f = QS_FORMAT_NF4; f <= QS_FORMAT_FP4; f++) {
        bq_init(&t, f, 64, 0, 70);
        bq_quant(ctx, &t, x, QS_DTYPE_F32, 70);
        emu_quant(f, x, 70, 64, data, absmax);
        assert_bits("all-NaN block absmax", 0, ((float *)t.q.scale)[0], 0);
        assert_bits("next block absmax", 1, ((float *)t.q.scale)[1], 0x40400000);
        for (int j = 0; j < 32; j++)
            assert_int_equal(((uint8_t *)t.q.data)[j], 0x00);
        T_ASSERT_BYTES("partial block after the NaN block", t.q.data, data, 35);
        bq_dequant_check(ctx, &t, 70, absmax);
        bq_free(&t);
    }

    /* Readers accept bitsandbytes' CPU zero-block byte 0x77 as well as 0x00 (§5.2): with absmax
     * 0 they decode to +0 (code 7) and -0 (code 0, -1.0 * 0). */
    {
        uint8_t z[2] = {0x77, 0x00};
        float zero = 0.0f, out[4];
        qs_quant_params p = params(QS_FORMAT_NF4);
        qs_qtensor q = qt_over(z, 2, &zero, 4);
        assert_int_equal(qs_dequantize(ctx, &p, &q, 1, 4, out, QS_DTYPE_F32, sizeof out), QS_OK);
        assert_true(t_bits(out[0]) == 0 && t_bits(out[1]) == 0);
        assert_true(t_bits(out[2]) == 0x80000000u && t_bits(out[3]) == 0x80000000u);
    }

    /* Block size 2: [NaN, NaN] [0, -0] [3, NaN] [-0.5, 0.25] */
    {
        const float y[8] = {NAN, NAN, 0.0f, -0.0f, 3.0f, NAN, -0.5f, 0.25f};
        static const uint8_t nf4_want[4] = {0x00, 0x00, 0xF0, 0x0C};
        static const uint32_t am_want[4] = {0, 0, 0x40400000, 0x3f000000};
        bq_init(&t, QS_FORMAT_NF4, 2, 0, 8);
        bq_quant(ctx, &t, y, QS_DTYPE_F32, 8);
        T_ASSERT_BYTES("NF4 block 2", t.q.data, nf4_want, 4);
        for (int b = 0; b < 4; b++)
            assert_bits("block-2 absmax", b, ((float *)t.q.scale)[b], am_want[b]);
        bq_free(&t);
    }
    qs_ctx_destroy(ctx);
}

/* Odd n: the missing element of the last byte is 0.0 quantized in the last block (§5.1, §5.2):
 * NF4 0x7, or 0x0 when that block's inv is +Inf (absmax 0 or <= 2^-128); FP4 always 0x0. */
static void test_odd_n_pad(void **state)
{
    (void)state;
    qs_ctx *ctx = t_ctx();
    static const struct {
        int32_t format;
        float x[3];
        uint8_t bytes[2];
    } v[] = {
        {QS_FORMAT_NF4, {0.5f, -1.0f, 0.25f}, {0xC0, 0xA7}},
        {QS_FORMAT_NF4, {0.0f, 0.0f, -0.0f}, {0x00, 0x00}},
        {QS_FORMAT_NF4, {2.5e-39f, 0.0f, 1e-39f}, {0xF0, 0xF0}},
        {QS_FORMAT_FP4, {0.5f, -1.0f, 0.25f}, {0x5B, 0x70}},
    };

    for (size_t i = 0; i < sizeof v / sizeof v[0]; i++) {
        bq t;
        bq_init(&t, v[i].format, 64, 0, 3);
        bq_quant(ctx, &t, v[i].x, QS_DTYPE_F32, 3);
        T_ASSERT_BYTES("odd n", t.q.data, v[i].bytes, 2);
        bq_free(&t);
    }
    /* The pad belongs to the last, partial block: n = 64 + 3, the last block is [2.5e-39, 0, 0]
     * (inv = +Inf: pad 0x0), while the first block is ordinary. */
    {
        float x[67];
        uint8_t data[34];
        float absmax[2];
        bq t;
        for (int i = 0; i < 64; i++)
            x[i] = (float)(i - 32) / 32.0f;
        x[64] = 2.5e-39f, x[65] = 0.0f, x[66] = 0.0f;
        bq_init(&t, QS_FORMAT_NF4, 64, 0, 67);
        bq_quant(ctx, &t, x, QS_DTYPE_F32, 67);
        emu_quant(QS_FORMAT_NF4, x, 67, 64, data, absmax);
        assert_int_equal(data[33], 0x00);
        assert_int_equal(data[32], 0xF0);
        T_ASSERT_BYTES("odd n, two blocks", t.q.data, data, 34);
        bq_free(&t);
    }
    /* Inputs that end at a guard page: the pad element must be the value 0.0, never a read of
     * element n. f32 and f16 sources, n = 1 ... 9, blocks of 2 and 64. */
    for (int n = 1; n <= 9; n++)
        for (int f = QS_FORMAT_NF4; f <= QS_FORMAT_FP4; f++)
            for (int32_t block = 2; block <= 64; block += 62) {
                t_page_buf in = t_page_buf_new((size_t)n * 4), in16 = t_page_buf_new((size_t)n * 2);
                uint8_t data[5], data16[5];
                float absmax[5];
                bq t;
                for (int i = 0; i < n; i++) {
                    ((float *)in.p)[i] = (float)(i % 3) - 0.75f;
                    ((uint16_t *)in16.p)[i] = (uint16_t)(0x3C00 + 0x300 * (i % 3)); /* f16 */
                }
                emu_quant(f, in.p, n, block, data, absmax);
                bq_init(&t, f, block, 0, n);
                bq_quant(ctx, &t, in.p, QS_DTYPE_F32, n);
                T_ASSERT_BYTES("guard page f32", t.q.data, data, (size_t)(n + 1) / 2);
                bq_quant(ctx, &t, in16.p, QS_DTYPE_F16, n);
                memcpy(data16, t.q.data, (size_t)(n + 1) / 2);
                for (int i = 0; i < n; i++) /* the f16 values 1.0, 1.75, 3.0 */
                    ((float *)in.p)[i] = i % 3 == 0 ? 1.0f : i % 3 == 1 ? 1.75f : 3.0f;
                emu_quant(f, in.p, n, block, data, absmax);
                T_ASSERT_BYTES("guard page f16", data16, data, (size_t)(n + 1) / 2);
                bq_free(&t);
                t_page_buf_free(&in);
                t_page_buf_free(&in16);
            }
    qs_ctx_destroy(ctx);
}

/* ---- block sizes and sizes that are not a multiple of the block ------------------------------ */

static void test_block_sizes(void **state)
{
    (void)state;
    static const int32_t blocks[] = {2, 32, 64, 4096, 6, 128, 1000};
    static const int64_t sizes[] = {1, 2, 3, 31, 63, 64, 65, 129, 4095, 4097, 10001};
    qs_ctx *ctx = t_ctx();
    /* 308 calls: one thread keeps them cheap on a loaded machine (threads are tested below) */
    assert_int_equal(qs_ctx_set(ctx, QS_PARAM_NUM_THREADS, 1), QS_OK);
    t_rng r = {0xB10C};
    float *x = malloc(10001 * sizeof(float)), *absmax = malloc(5001 * sizeof(float));
    uint8_t *data = malloc(5001);

    assert_true(x && absmax && data);
    t_fill_mixed(&r, x, 10001, 0.01);
    for (size_t bi = 0; bi < sizeof blocks / sizeof blocks[0]; bi++)
        for (size_t si = 0; si < sizeof sizes / sizeof sizes[0]; si++)
            for (int f = QS_FORMAT_NF4; f <= QS_FORMAT_FP4; f++) {
                int64_t n = sizes[si], nb = (n + blocks[bi] - 1) / blocks[bi];
                bq t;
                bq_init(&t, f, blocks[bi], 0, n);
                bq_quant(ctx, &t, x, QS_DTYPE_F32, n);
                emu_quant(f, x, n, blocks[bi], data, absmax);
                T_ASSERT_BYTES("absmax vs emulation", t.q.scale, absmax, (size_t)nb * 4);
                T_ASSERT_BYTES("codes vs emulation", t.q.data, data, (size_t)(n + 1) / 2);
                bq_dequant_check(ctx, &t, n, absmax);
                bq_free(&t);
            }
    /* Blocks run over the flattened row-major tensor, ignoring rows (§5.1): 3 x 37 == 1 x 111. */
    for (int f = QS_FORMAT_NF4; f <= QS_FORMAT_FP4; f++) {
        bq a, b;
        bq_init(&a, f, 64, 0, 111);
        bq_init(&b, f, 64, 0, 111);
        assert_int_equal(qs_quantize(ctx, &a.p, x, QS_DTYPE_F32, 3, 37, &a.q), QS_OK);
        bq_quant(ctx, &b, x, QS_DTYPE_F32, 111);
        T_ASSERT_BYTES("3 x 37 vs 1 x 111: codes", a.q.data, b.q.data, 56);
        T_ASSERT_BYTES("3 x 37 vs 1 x 111: absmax", a.q.scale, b.q.scale, 8);
        bq_free(&a);
        bq_free(&b);
    }
    free(x);
    free(absmax);
    free(data);
    qs_ctx_destroy(ctx);
}

/* Rejected block sizes: odd, 0, 1, negative, above 4096. Nothing is written. */
static void test_invalid_block_sizes(void **state)
{
    (void)state;
    static const int32_t bad[] = {0, 1, 3, 63, 65, -2, -64, 4098, 8192, 1 << 30};
    qs_ctx *ctx = t_ctx();
    float x[64] = {1.0f}, out[64];
    t_buf data = t_buf_new(32), scale = t_buf_new(256), o = t_buf_new(sizeof out);

    for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++)
        for (int f = QS_FORMAT_NF4; f <= QS_FORMAT_FP4; f++) {
            qs_quant_params p;
            qs_qtensor q = {0};
            int64_t bytes = -1;
            qs_quant_params_init(&p, f);
            p.block_size = bad[i];
            q.data = data.p;
            q.data_bytes = 32;
            q.scale = scale.p;
            q.scale_bytes = 256;
            assert_int_equal(qs_quant_size(&p, 1, 64, QS_PLANE_SCALE, &bytes), QS_ERR_INVALID_ARG);
            assert_int_equal(bytes, -1);
            assert_int_equal(qs_quantize(ctx, &p, x, QS_DTYPE_F32, 1, 64, &q), QS_ERR_INVALID_ARG);
            assert_int_equal(qs_dequantize(ctx, &p, &q, 1, 64, o.p, QS_DTYPE_F32, sizeof out),
                             QS_ERR_INVALID_ARG);
            assert_true(qs_ctx_last_error(ctx)[0] != '\0');
        }
    assert_true(t_buf_untouched(&data) && t_buf_untouched(&scale) && t_buf_untouched(&o));
    t_buf_free(&data);
    t_buf_free(&scale);
    t_buf_free(&o);
    qs_ctx_destroy(ctx);
}

/* Short planes, a bad double_quant flag and null pointers are rejected before any write. */
static void test_errors(void **state)
{
    (void)state;
    qs_ctx *ctx = t_ctx();
    float x[100] = {0.5f};
    bq t;

    bq_init(&t, QS_FORMAT_NF4, 32, 1, 100);
    t.q.data_bytes--;
    assert_int_equal(qs_quantize(ctx, &t.p, x, QS_DTYPE_F32, 1, 100, &t.q),
                     QS_ERR_BUFFER_TOO_SMALL);
    t.q.data_bytes++;
    t.q.scale_bytes--;
    assert_int_equal(qs_quantize(ctx, &t.p, x, QS_DTYPE_F32, 1, 100, &t.q),
                     QS_ERR_BUFFER_TOO_SMALL);
    t.q.scale_bytes++;
    t.q.nested_scale_bytes--;
    assert_int_equal(qs_quantize(ctx, &t.p, x, QS_DTYPE_F32, 1, 100, &t.q),
                     QS_ERR_BUFFER_TOO_SMALL);
    t.q.nested_scale_bytes++;
    t.q.nested_scale = NULL;
    assert_int_equal(qs_quantize(ctx, &t.p, x, QS_DTYPE_F32, 1, 100, &t.q), QS_ERR_INVALID_ARG);
    t.q.nested_scale = t.nested.p;
    t.p.double_quant = 2;
    assert_int_equal(qs_quantize(ctx, &t.p, x, QS_DTYPE_F32, 1, 100, &t.q), QS_ERR_INVALID_ARG);
    t.p.double_quant = 1;
    assert_int_equal(qs_quantize(ctx, &t.p, NULL, QS_DTYPE_F32, 1, 100, &t.q),
                     QS_ERR_INVALID_ARG);
    assert_int_equal(qs_quantize(ctx, &t.p, x, 7, 1, 100, &t.q), QS_ERR_INVALID_ARG);
    assert_true(t_buf_untouched(&t.data) && t_buf_untouched(&t.scale));
    assert_true(t_buf_untouched(&t.nested));
    /* and the same planes are accepted once everything is right */
    bq_quant(ctx, &t, x, QS_DTYPE_F32, 100);
    bq_free(&t);

    /* An empty tensor needs no planes at all, with or without double quantization. */
    for (int dq = 0; dq <= 1; dq++) {
        qs_quant_params p;
        qs_qtensor q = {0};
        qs_quant_params_init(&p, QS_FORMAT_FP4);
        p.double_quant = dq;
        q.nested_offset = 5.0f;
        assert_int_equal(qs_quantize(ctx, &p, NULL, QS_DTYPE_F32, 0, 64, &q), QS_OK);
        assert_int_equal(qs_quantize(ctx, &p, x, QS_DTYPE_BF16, 1, 0, &q), QS_OK);
        assert_int_equal(qs_dequantize(ctx, &p, &q, 1, 0, NULL, QS_DTYPE_F16, 0), QS_OK);
    }
    qs_ctx_destroy(ctx);
}

/* ---- f16 and bf16 ---------------------------------------------------------------------------- */

/* 16-bit inputs give the codes of the f32 of the same values; 16-bit outputs are the RNE
 * conversion of the f32 output (§0 rule 4). Inputs: every finite f16 / bf16 bit pattern class
 * (random patterns, NaN and Inf excluded from the f32 comparison of outputs only). */
static void test_half_paths(void **state)
{
    (void)state;
    enum { N = 9001 };
    qs_ctx *ctx = t_ctx();
    t_rng r = {0x16B};
    uint16_t *h = malloc(N * 2), *o16 = malloc(N * 2), *c16 = malloc(N * 2);
    float *f = malloc(N * 4), *o32 = malloc(N * 4);

    assert_true(h && o16 && c16 && f && o32);
    for (int dt = QS_DTYPE_F16; dt <= QS_DTYPE_BF16; dt++)
        for (int fmt = QS_FORMAT_NF4; fmt <= QS_FORMAT_FP4; fmt++) {
            bq a, b;
            for (int i = 0; i < N; i++) {
                uint16_t u = (uint16_t)t_next(&r);
                if (i % 97 == 5) /* a few non-finite patterns */
                    u = (uint16_t)((u & 0x8000) | (dt == QS_DTYPE_F16 ? 0x7C00 : 0x7F80) |
                                   (i % 2 ? (u & 0x3F) : 0));
                else if (i % 3 == 0) /* mostly values of moderate size: exponents near 1.0 */
                    u = (uint16_t)((u & 0x83FF) | (dt == QS_DTYPE_F16 ? 0x3800 : 0x3F00));
                h[i] = u;
            }
            assert_int_equal(qs_convert(ctx, h, dt, f, QS_DTYPE_F32, N, N * 4), QS_OK);
            bq_init(&a, fmt, 64, 1, N);
            bq_init(&b, fmt, 64, 1, N);
            bq_quant(ctx, &a, h, dt, N);
            bq_quant(ctx, &b, f, QS_DTYPE_F32, N);
            T_ASSERT_BYTES("16-bit input: codes", a.q.data, b.q.data, (size_t)a.q.data_bytes);
            T_ASSERT_BYTES("16-bit input: nested codes", a.q.scale, b.q.scale,
                           (size_t)a.q.scale_bytes);
            T_ASSERT_BYTES("16-bit input: absmax2", a.q.nested_scale, b.q.nested_scale,
                           (size_t)a.q.nested_scale_bytes);
            assert_int_equal(t_bits(a.q.nested_offset), t_bits(b.q.nested_offset));

            assert_int_equal(qs_dequantize(ctx, &a.p, &a.q, 1, N, o16, dt, N * 2), QS_OK);
            assert_int_equal(qs_dequantize(ctx, &a.p, &a.q, 1, N, o32, QS_DTYPE_F32, N * 4),
                             QS_OK);
            assert_int_equal(qs_convert(ctx, o32, QS_DTYPE_F32, c16, dt, N, N * 2), QS_OK);
            T_ASSERT_BYTES("16-bit output", o16, c16, N * 2);
            bq_free(&a);
            bq_free(&b);
        }

    /* Hand-worked: NF4 codes 13 and 11, FP4 codes 1 and 6 with absmax 1.0 (§2, §4), as f16
     * (3880, 3568, 1d55, 3155) and bf16 (3f10, 3ead, 3bab, 3e2b). */
    {
        static const uint16_t want[2][4] = {{0x3880, 0x3568, 0x1d55, 0x3155},
                                            {0x3f10, 0x3ead, 0x3bab, 0x3e2b}};
        float one = 1.0f;
        uint8_t nf4[1] = {0xDB}, fp4[1] = {0x16};
        qs_quant_params p;
        qs_qtensor q = {0};
        for (int dt = QS_DTYPE_F16; dt <= QS_DTYPE_BF16; dt++) {
            uint16_t out[2];
            q.scale = &one;
            q.scale_bytes = 4;
            q.data_bytes = 1;
            for (int fmt = QS_FORMAT_NF4; fmt <= QS_FORMAT_FP4; fmt++) {
                qs_quant_params_init(&p, fmt);
                q.data = fmt == QS_FORMAT_NF4 ? nf4 : fp4;
                assert_int_equal(qs_dequantize(ctx, &p, &q, 1, 2, out, dt, 4), QS_OK);
                assert_int_equal(out[0], want[dt - 1][2 * (fmt - 1)]);
                assert_int_equal(out[1], want[dt - 1][2 * (fmt - 1) + 1]);
            }
        }
    }
    free(h);
    free(o16);
    free(c16);
    free(f);
    free(o32);
    qs_ctx_destroy(ctx);
}

/* ---- threads --------------------------------------------------------------------------------- */

/* 2^16 + 37 elements: 17 tiles of 4096; at block 4 there are 16394 absmax values, so the nested
 * level spans two chunks of 16384 too. One and two threads give identical planes and outputs. */
static void test_thread_independence(void **state)
{
    (void)state;
    enum { N = (1 << 16) + 37 };
    static const int32_t cfg[3][2] = {{4, 1}, {64, 0}, {64, 1}}; /* block, double_quant */
    qs_ctx *c1 = t_ctx(), *c2 = t_ctx();
    t_rng r = {0x7EAD};
    float *x = malloc((size_t)N * 4), *o1 = malloc((size_t)N * 4), *o2 = malloc((size_t)N * 4);

    assert_true(x && o1 && o2);
    assert_int_equal(qs_ctx_set(c1, QS_PARAM_NUM_THREADS, 1), QS_OK);
    assert_int_equal(qs_ctx_set(c2, QS_PARAM_NUM_THREADS, 2), QS_OK);
    t_fill_mixed(&r, x, N, 0.001);
    for (int fmt = QS_FORMAT_NF4; fmt <= QS_FORMAT_FP4; fmt++)
        for (int c = 0; c < 3; c++) {
            int32_t dq = cfg[c][1];
            bq a, b;
            bq_init(&a, fmt, cfg[c][0], dq, N);
            bq_init(&b, fmt, cfg[c][0], dq, N);
            bq_quant(c1, &a, x, QS_DTYPE_F32, N);
            bq_quant(c2, &b, x, QS_DTYPE_F32, N);
            T_ASSERT_BYTES("threads: data", a.q.data, b.q.data, (size_t)a.q.data_bytes);
            T_ASSERT_BYTES("threads: scale", a.q.scale, b.q.scale, (size_t)a.q.scale_bytes);
            if (dq) {
                T_ASSERT_BYTES("threads: nested", a.q.nested_scale, b.q.nested_scale,
                               (size_t)a.q.nested_scale_bytes);
                assert_int_equal(t_bits(a.q.nested_offset), t_bits(b.q.nested_offset));
            }
            assert_int_equal(qs_dequantize(c1, &a.p, &a.q, 1, N, o1, QS_DTYPE_F32, N * 4L),
                             QS_OK);
            assert_int_equal(qs_dequantize(c2, &a.p, &a.q, 1, N, o2, QS_DTYPE_F32, N * 4L),
                             QS_OK);
            T_ASSERT_BYTES("threads: dequantized", o1, o2, (size_t)N * 4);
            bq_free(&a);
            bq_free(&b);
        }
    free(x);
    free(o1);
    free(o2);
    qs_ctx_destroy(c1);
    qs_ctx_destroy(c2);
}

/* ---- double quantization (§6) ---------------------------------------------------------------- */

/* Decoded absmax through the public API: dequantizing all-"1.0" codes (NF4 15, FP4 3) with the
 * tensor's nested planes gives 1.0 * absmax_i = the decoded absmax of each block. */
static void decoded_absmax(qs_ctx *ctx, const bq *t, int64_t n, float *out_per_block)
{
    qs_qtensor q = t->q;
    uint8_t *ones = malloc((size_t)q.data_bytes);
    float *out = malloc((size_t)n * 4);
    int32_t block = t->p.block_size;

    assert_true(ones && out);
    memset(ones, t->p.format == QS_FORMAT_NF4 ? 0xFF : 0x33, (size_t)q.data_bytes);
    q.data = ones;
    assert_int_equal(qs_dequantize(ctx, &t->p, &q, 1, n, out, QS_DTYPE_F32, n * 4), QS_OK);
    for (int64_t i = 0; i < n; i++) {
        if (i % block == 0)
            out_per_block[i / block] = out[i];
        else
            assert_int_equal(t_bits(out[i]), t_bits(out_per_block[i / block]));
    }
    free(ones);
    free(out);
}

/* §6.2: block absmax [0.5, 1.0, 0.25, 0.75] -> offset 0.625, absmax2 0.375, codes
 * [47, 255, 0, 207], decoded [3f002000, 3f800000, 3e81599a, 3f3fe000]. */
static void test_double_quant_example(void **state)
{
    (void)state;
    static const float am[4] = {0.5f, 1.0f, 0.25f, 0.75f};
    static const uint8_t want_q[4] = {47, 255, 0, 207};
    static const uint32_t want_dec[4] = {0x3f002000, 0x3f800000, 0x3e81599a, 0x3f3fe000};
    qs_ctx *ctx = t_ctx();
    t_rng r = {0x62};
    float x[256], dec[4];

    for (int i = 0; i < 256; i++) /* element 0 of block b is its absmax; the rest are smaller */
        x[i] = i % 64 == 0 ? am[i / 64] : am[i / 64] * (float)(t_unif(&r) * 1.8 - 0.9);
    for (int fmt = QS_FORMAT_NF4; fmt <= QS_FORMAT_FP4; fmt++) {
        bq a, b;
        bq_init(&a, fmt, 64, 1, 256);
        bq_init(&b, fmt, 64, 0, 256);
        bq_quant(ctx, &a, x, QS_DTYPE_F32, 256);
        bq_quant(ctx, &b, x, QS_DTYPE_F32, 256);
        T_ASSERT_BYTES("plain absmax", b.q.scale, am, 16);
        T_ASSERT_BYTES("codes do not depend on double_quant", a.q.data, b.q.data, 128);
        assert_bits("nested_offset", 0, a.q.nested_offset, 0x3f200000);
        assert_bits("absmax2", 0, *(float *)a.q.nested_scale, 0x3ec00000);
        T_ASSERT_BYTES("nested codes", a.q.scale, want_q, 4);
        decoded_absmax(ctx, &a, 256, dec);
        for (int i = 0; i < 4; i++)
            assert_bits("decoded absmax", i, dec[i], want_dec[i]);
        bq_free(&a);
        bq_free(&b);
    }
    qs_ctx_destroy(ctx);
}

/* §6.1 step 2 [convention]: the mean is summed in double and rounded once. For block absmax
 * [2^24, 1, 1, 1] that is fl(4194304.75) = 4a800002; an f32 running sum would give 4a800000. All
 * blocks equal (absmax2 = 0, codes 0) decode to exactly the offset. */
static void test_double_quant_offset(void **state)
{
    (void)state;
    qs_ctx *ctx = t_ctx();
    float x[8] = {16777216.0f, 0.0f, 1.0f, -0.5f, -1.0f, 0.0f, 1.0f, 1.0f}, dec[4];
    bq t;

    bq_init(&t, QS_FORMAT_NF4, 2, 1, 8);
    bq_quant(ctx, &t, x, QS_DTYPE_F32, 8);
    assert_bits("nested_offset", 0, t.q.nested_offset, 0x4a800002);
    bq_free(&t);

    for (int i = 0; i < 8; i++)
        x[i] = i & 1 ? 0.25f : -3.0f;
    bq_init(&t, QS_FORMAT_FP4, 2, 1, 8);
    bq_quant(ctx, &t, x, QS_DTYPE_F32, 8);
    assert_bits("nested_offset", 0, t.q.nested_offset, 0x40400000);
    assert_bits("absmax2", 0, *(float *)t.q.nested_scale, 0);
    for (int i = 0; i < 4; i++)
        assert_int_equal(((uint8_t *)t.q.scale)[i], 0);
    decoded_absmax(ctx, &t, 8, dec);
    for (int i = 0; i < 4; i++)
        assert_bits("decoded = offset", i, dec[i], 0x40400000);
    bq_free(&t);
    qs_ctx_destroy(ctx);
}

static int cmp_float(const void *a, const void *b)
{
    float x = *(const float *)a, y = *(const float *)b;
    return (x > y) - (x < y);
}

/* Largest distance between neighbouring entries of a codebook. */
static double max_gap(int32_t which)
{
    float cb[256];
    int64_t size = qs_codebook_size(which);
    double g = 0.0;

    assert_int_equal(qs_codebook(which, cb, size), QS_OK);
    qsort(cb, (size_t)size, sizeof cb[0], cmp_float);
    for (int64_t i = 0; i + 1 < size; i++)
        g = fmax(g, (double)cb[i + 1] - (double)cb[i]);
    return g;
}

/* Random normal data with block scales spread over several decades (150,000 elements, 2344
 * blocks, 10 nested blocks, the last partial): every decoded absmax lies within half the largest
 * dyn8 map gap times its absmax2 (plus a few ulps of rounding) of the true absmax, and the data
 * codes equal those quantized without double quantization. */
static void test_double_quant_random(void **state)
{
    (void)state;
    enum { N = 150000, NB = (N + 63) / 64 };
    qs_ctx *ctx = t_ctx();
    t_rng r = {0xD0D0};
    float *x = malloc(N * 4), *dec = malloc(NB * 4);
    double half_gap = 0.5 * max_gap(QS_CODEBOOK_DYN8), worst = 0.0;

    assert_true(x && dec);
    assert_true(half_gap > 0.00703 && half_gap < 0.00704); /* 0.9 / 128, §6.3's top decade */
    for (int i = 0; i < N; i++)
        x[i] = (float)(t_normal(&r) * exp((double)((i / 64) % 23) / 4.0 - 2.0));
    for (int fmt = QS_FORMAT_NF4; fmt <= QS_FORMAT_FP4; fmt++) {
        bq a, b;
        bq_init(&a, fmt, 64, 1, N);
        bq_init(&b, fmt, 64, 0, N);
        bq_quant(ctx, &a, x, QS_DTYPE_F32, N);
        bq_quant(ctx, &b, x, QS_DTYPE_F32, N);
        T_ASSERT_BYTES("codes do not depend on double_quant", a.q.data, b.q.data,
                       (size_t)a.q.data_bytes);
        assert_int_equal(a.q.nested_scale_bytes, 10 * 4);
        decoded_absmax(ctx, &a, N, dec);
        for (int i = 0; i < NB; i++) {
            double am = ((float *)b.q.scale)[i], a2 = ((float *)a.q.nested_scale)[i / 256];
            double off = a.q.nested_offset, err = fabs((double)dec[i] - am);
            double tol = 4.0 * FLT_EPSILON * (fabs(am) + fabs(off) + a2);
            if (!(err <= half_gap * a2 + tol)) {
                print_error("block %d: absmax %a decoded %a (absmax2 %a, offset %a)\n", i, am,
                            (double)dec[i], a2, off);
                fail();
            }
            worst = fmax(worst, err / a2);
        }
        /* The bound is not vacuous: some block uses most of it. */
        assert_true(worst > 0.5 * half_gap);
        bq_free(&a);
        bq_free(&b);
    }
    free(x);
    free(dec);
    qs_ctx_destroy(ctx);
}

/* Random normal data (50,000 elements, block 64): |x - deq| <= half the largest codebook gap
 * times the block absmax, and no other code is closer than the chosen one (up to 2^-20 of absmax:
 * FP4's threshold literals sit a few ulps off the midpoints). */
static void test_dequant_error_bound(void **state)
{
    (void)state;
    enum { N = 50000 };
    qs_ctx *ctx = t_ctx();
    t_rng r = {0xE44};
    float *x = malloc(N * 4), *out = malloc(N * 4), cb[16];

    assert_true(x && out);
    for (int i = 0; i < N; i++)
        x[i] = (float)t_normal(&r);
    for (int fmt = QS_FORMAT_NF4; fmt <= QS_FORMAT_FP4; fmt++) {
        int32_t which = fmt == QS_FORMAT_NF4 ? QS_CODEBOOK_NF4 : QS_CODEBOOK_FP4;
        double half_gap = 0.5 * max_gap(which), worst = 0.0;
        bq t;
        assert_int_equal(qs_codebook(which, cb, 16), QS_OK);
        bq_init(&t, fmt, 64, 0, N);
        bq_quant(ctx, &t, x, QS_DTYPE_F32, N);
        assert_int_equal(qs_dequantize(ctx, &t.p, &t.q, 1, N, out, QS_DTYPE_F32, N * 4), QS_OK);
        for (int i = 0; i < N; i++) {
            double am = ((float *)t.q.scale)[i / 64], err = fabs((double)x[i] - out[i]);
            if (!(err <= half_gap * am * (1.0 + 0x1p-20))) {
                print_error("%s[%d]: x %a deq %a absmax %a\n", qs_format_name(fmt), i,
                            (double)x[i], (double)out[i], am);
                fail();
            }
            for (int c = 0; c < 16; c++)
                if (fabs((double)x[i] - (double)cb[c] * am) < err - 0x1p-20 * am) {
                    print_error("%s[%d]: x %a deq %a but code %d is closer\n",
                                qs_format_name(fmt), i, (double)x[i], (double)out[i], c);
                    fail();
                }
            worst = fmax(worst, err / am);
        }
        assert_true(worst > 0.5 * half_gap);
        bq_free(&t);
    }
    free(x);
    free(out);
    qs_ctx_destroy(ctx);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_spec_vectors),
        cmocka_unit_test(test_threshold_ties),
        cmocka_unit_test(test_inf_element),
        cmocka_unit_test(test_nan_and_zero_blocks),
        cmocka_unit_test(test_odd_n_pad),
        cmocka_unit_test(test_block_sizes),
        cmocka_unit_test(test_invalid_block_sizes),
        cmocka_unit_test(test_errors),
        cmocka_unit_test(test_half_paths),
        cmocka_unit_test(test_thread_independence),
        cmocka_unit_test(test_double_quant_example),
        cmocka_unit_test(test_double_quant_offset),
        cmocka_unit_test(test_double_quant_random),
        cmocka_unit_test(test_dequant_error_bound),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
