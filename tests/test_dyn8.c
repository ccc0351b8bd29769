/* SPDX-License-Identifier: MIT */
/*
 * Spec tests of the bitsandbytes signed dynamic 8-bit map and its quantizer (docs/formats.md
 * §6.3, §6.4), the nested level of NF4/FP4 double quantization. The 256 map entries are restated
 * from the spec's hex table and also rebuilt independently from the §6.3 construction (torch's f32
 * linspace rule); the quantizer's tie rule is checked at all 255 midpoints and one ulp either side,
 * against explicit expectations and against an emulation of the CUDA binary search that §6.3
 * describes; the blockwise quant and dequant kernels (src/ref and the context's table entry of the
 * forced ISA tier) are pinned on hand-worked vectors, including the §6.2 example.
 */
#include "common.h"
#include "core/internal.h"
#include "ref/ref.h"

/* §6.3: "The map, f32 hex, index 0...255", eight entries per row as in the spec. */
static const uint32_t map_hex[256] = {
    0xbf7e3333, 0xbf7a999a, 0xbf770000, 0xbf736666, 0xbf6fcccd, 0xbf6c3333, 0xbf68999a, 0xbf650000,
    0xbf616666, 0xbf5dcccd, 0xbf5a3333, 0xbf56999a, 0xbf530000, 0xbf4f6666, 0xbf4bcccd, 0xbf483333,
    0xbf44999a, 0xbf410000, 0xbf3d6666, 0xbf39cccd, 0xbf363334, 0xbf32999a, 0xbf2f0000, 0xbf2b6666,
    0xbf27cccd, 0xbf243334, 0xbf20999a, 0xbf1d0000, 0xbf196666, 0xbf15cccd, 0xbf123334, 0xbf0e999a,
    0xbf0b0000, 0xbf076666, 0xbf03cccc, 0xbf003333, 0xbef93332, 0xbef20000, 0xbeeacccc, 0xbee3999a,
    0xbedc6666, 0xbed53333, 0xbece0000, 0xbec6cccc, 0xbebf999a, 0xbeb86666, 0xbeb13333, 0xbeaa0000,
    0xbea2cccc, 0xbe9b999a, 0xbe946666, 0xbe8d3334, 0xbe860000, 0xbe7d9999, 0xbe6f3333, 0xbe60cccd,
    0xbe526666, 0xbe440000, 0xbe35999a, 0xbe273333, 0xbe18cccd, 0xbe0a6666, 0xbdf80000, 0xbddb3334,
    0xbdc9eb85, 0xbdc428f7, 0xbdbe6667, 0xbdb8a3d7, 0xbdb2e148, 0xbdad1eb8, 0xbda75c2a, 0xbda1999a,
    0xbd9bd70a, 0xbd96147b, 0xbd9051eb, 0xbd8a8f5d, 0xbd84cccd, 0xbd7e147b, 0xbd728f5d, 0xbd670a3d,
    0xbd5b851f, 0xbd500000, 0xbd447ae1, 0xbd38f5c3, 0xbd2d70a3, 0xbd21eb85, 0xbd166667, 0xbd0ae148,
    0xbcfeb852, 0xbce7ae15, 0xbcd0a3d7, 0xbcb9999a, 0xbca28f5d, 0xbc8b851f, 0xbc68f5c3, 0xbc3ae148,
    0xbc1f3b64, 0xbc160418, 0xbc0ccccd, 0xbc039581, 0xbbf4bc6a, 0xbbe24dd3, 0xbbcfdf3b, 0xbbbd70a4,
    0xbbab020d, 0xbb989374, 0xbb8624dd, 0xbb676c8a, 0xbb428f5c, 0xbb1db22d, 0xbaf1a9fc, 0xbaa7ef9d,
    0xba7765ff, 0xba59e83e, 0xba3c6a80, 0xba1eecc1, 0xba016f01, 0xb9c7e283, 0xb98ce705, 0xb923d70b,
    0xb8ba1f4b, 0xb88aefb3, 0xb8378034, 0xb7b24206, 0xb70205ff, 0xb65a1a94, 0xb513a3b7, 0x00000000,
    0x3513a3b7, 0x365a1a94, 0x370205ff, 0x37b24206, 0x38378034, 0x388aefb3, 0x38ba1f4b, 0x3923d70b,
    0x398ce705, 0x39c7e283, 0x3a016f01, 0x3a1eecc1, 0x3a3c6a80, 0x3a59e83e, 0x3a7765ff, 0x3aa7ef9d,
    0x3af1a9fc, 0x3b1db22d, 0x3b428f5c, 0x3b676c8a, 0x3b8624dd, 0x3b989374, 0x3bab020d, 0x3bbd70a4,
    0x3bcfdf3b, 0x3be24dd3, 0x3bf4bc6a, 0x3c039581, 0x3c0ccccd, 0x3c160418, 0x3c1f3b64, 0x3c3ae148,
    0x3c68f5c3, 0x3c8b851f, 0x3ca28f5d, 0x3cb9999a, 0x3cd0a3d7, 0x3ce7ae15, 0x3cfeb852, 0x3d0ae148,
    0x3d166667, 0x3d21eb85, 0x3d2d70a3, 0x3d38f5c3, 0x3d447ae1, 0x3d500000, 0x3d5b851f, 0x3d670a3d,
    0x3d728f5d, 0x3d7e147b, 0x3d84cccd, 0x3d8a8f5d, 0x3d9051eb, 0x3d96147b, 0x3d9bd70a, 0x3da1999a,
    0x3da75c2a, 0x3dad1eb8, 0x3db2e148, 0x3db8a3d7, 0x3dbe6667, 0x3dc428f7, 0x3dc9eb85, 0x3ddb3334,
    0x3df80000, 0x3e0a6666, 0x3e18cccd, 0x3e273333, 0x3e35999a, 0x3e440000, 0x3e526666, 0x3e60cccd,
    0x3e6f3333, 0x3e7d9999, 0x3e860000, 0x3e8d3334, 0x3e946666, 0x3e9b999a, 0x3ea2cccc, 0x3eaa0000,
    0x3eb13333, 0x3eb86666, 0x3ebf999a, 0x3ec6cccc, 0x3ece0000, 0x3ed53333, 0x3edc6666, 0x3ee3999a,
    0x3eeacccc, 0x3ef20000, 0x3ef93332, 0x3f003333, 0x3f03cccc, 0x3f076666, 0x3f0b0000, 0x3f0e999a,
    0x3f123334, 0x3f15cccd, 0x3f196666, 0x3f1d0000, 0x3f20999a, 0x3f243334, 0x3f27cccd, 0x3f2b6666,
    0x3f2f0000, 0x3f32999a, 0x3f363334, 0x3f39cccd, 0x3f3d6666, 0x3f410000, 0x3f44999a, 0x3f483333,
    0x3f4bcccd, 0x3f4f6666, 0x3f530000, 0x3f56999a, 0x3f5a3333, 0x3f5dcccd, 0x3f616666, 0x3f650000,
    0x3f68999a, 0x3f6c3333, 0x3f6fcccd, 0x3f736666, 0x3f770000, 0x3f7a999a, 0x3f7e3333, 0x3f800000,
};

static float H(uint32_t u)
{
    return t_f32_from_bits(u);
}

static float map_at(int i)
{
    return H(map_hex[i]);
}

/* m_j = fl(map[j] + map[j+1]) * 0.5 (§6.3), from the spec's hex. */
static float midpoint(int j)
{
    return (map_at(j) + map_at(j + 1)) * 0.5f;
}

static void assert_bits(const char *what, int index, float got, uint32_t want)
{
    if (t_bits(got) != want) {
        print_error("%s[%d]: got %08x, want %08x\n", what, index, t_bits(got), want);
        fail();
    }
}

/* The quantizer as §6.3 describes bitsandbytes' CUDA one: a binary search from pivot 127 with
 * steps 64, 32, ..., 1, remembering the last pivots passed on each side, then one midpoint test
 * against the neighbour on the side of x. Written from the spec text as a second oracle. */
static int search_emulation(float x)
{
    int pivot = 127, above = 255, below = 0;
    float lower = -1.0f, upper = 1.0f, val = map_at(pivot);

    for (int step = 64; step > 0; step >>= 1) {
        if (x > val) {
            below = pivot;
            lower = val;
            pivot += step;
        } else {
            above = pivot;
            upper = val;
            pivot -= step;
        }
        val = map_at(pivot);
    }
    if (above == 255)
        upper = map_at(255);
    if (below == 0)
        lower = map_at(0);
    if (x > val)
        return x > (upper + val) * 0.5f ? above : pivot;
    return x < (lower + val) * 0.5f ? below : pivot;
}

/* ---- the map --------------------------------------------------------------------------------- */

static void test_map_hex(void **state)
{
    (void)state;
    float cb[256];

    assert_int_equal(qs_codebook_size(QS_CODEBOOK_DYN8), 256);
    assert_int_equal(qs_codebook(QS_CODEBOOK_DYN8, cb, 256), QS_OK);
    for (int i = 0; i < 256; i++) {
        assert_bits("qs_codebook(DYN8)", i, cb[i], map_hex[i]);
        assert_bits("qs_dyn8_map", i, qs_dyn8_map[i], map_hex[i]);
    }
    /* §6.3 properties. */
    assert_true(map_at(0) == -0.99296875f && map_at(127) == 0.0f && map_at(255) == 1.0f);
    assert_int_equal(map_hex[128], 0x3513a3b7);
    for (int i = 0; i < 255; i++)
        assert_true(map_at(i) < map_at(i + 1));
    for (int i = 0; i < 127; i++) /* antisymmetric around index 127 */
        assert_int_equal(map_hex[i], map_hex[254 - i] | 0x80000000u);
}

static int cmp_float(const void *a, const void *b)
{
    float x = *(const float *)a, y = *(const float *)b;
    return (x > y) - (x < y);
}

/* §6.3 construction with torch's f32 linspace rule (a fused product and sum, rounded once:
 * fmaf), which must reproduce the hex table exactly. */
static void test_map_construction(void **state)
{
    (void)state;
    static const float decade[7] = {1e-6f, 1e-5f, 1e-4f, 1e-3f, 1e-2f, 1e-1f, 1e0f};
    float v[256], b[65];
    int count = 0;

    for (int i = 0; i < 7; i++) {
        int n = (1 << i) + 1;
        float step = (1.0f - 0.1f) / (float)(n - 1);
        for (int k = 0; k < n; k++)
            b[k] = 2 * k < n ? fmaf(step, (float)k, 0.1f) : fmaf(-step, (float)(n - 1 - k), 1.0f);
        for (int k = 0; k + 1 < n; k++) {
            float mean = (b[k] + b[k + 1]) / 2.0f;
            float s = decade[i] * mean;
            v[count++] = s;
            v[count++] = -s;
        }
    }
    v[count++] = 0.0f;
    v[count++] = 1.0f;
    assert_int_equal(count, 256);
    qsort(v, 256, sizeof v[0], cmp_float);
    for (int i = 0; i < 256; i++)
        assert_bits("constructed map", i, v[i], map_hex[i]);
}

/* ---- the quantizer -------------------------------------------------------------------------- */

/* All 255 midpoints: an exact tie takes the even index of {j, j+1}, one ulp above takes j+1, one
 * ulp below takes j; the emulated CUDA search agrees at every one of these 765 points. */
static void test_tie_rule_all_midpoints(void **state)
{
    (void)state;
    for (int j = 0; j < 255; j++) {
        float m = midpoint(j);
        float up = nextafterf(m, INFINITY), down = nextafterf(m, -INFINITY);
        int even = (j & 1) ? j + 1 : j;

        assert_true(map_at(j) < down && up < map_at(j + 1));
        if (qs_ref_dyn8_encode(m) != even || qs_ref_dyn8_encode(up) != j + 1 ||
            qs_ref_dyn8_encode(down) != j) {
            print_error("midpoint %d (%08x): got %d %d %d, want %d %d %d\n", j, t_bits(m),
                        qs_ref_dyn8_encode(down), qs_ref_dyn8_encode(m), qs_ref_dyn8_encode(up),
                        j, even, j + 1);
            fail();
        }
        assert_int_equal(search_emulation(m), even);
        assert_int_equal(search_emulation(up), j + 1);
        assert_int_equal(search_emulation(down), j);
    }
    /* The spec's named examples. */
    assert_int_equal(qs_ref_dyn8_encode(midpoint(1)), 2);
    assert_int_equal(qs_ref_dyn8_encode(midpoint(2)), 2);
}

static void test_named_values(void **state)
{
    (void)state;
    assert_int_equal(qs_ref_dyn8_encode(0.0f), 127);
    assert_int_equal(qs_ref_dyn8_encode(-0.0f), 127);
    assert_int_equal(qs_ref_dyn8_encode(1.0f), 255);
    assert_int_equal(qs_ref_dyn8_encode(-1.0f), 0);
    assert_int_equal(qs_ref_dyn8_encode(NAN), 0);
    assert_int_equal(qs_ref_dyn8_encode(-NAN), 0);
    assert_int_equal(qs_ref_dyn8_encode(INFINITY), 255);
    assert_int_equal(qs_ref_dyn8_encode(-INFINITY), 0);
    assert_int_equal(qs_ref_dyn8_encode(0.5f), 219);
    assert_int_equal(qs_ref_dyn8_encode(-0.5f), 35);
    assert_int_equal(search_emulation(NAN), 0);
    assert_int_equal(search_emulation(0.0f), 127);
    /* encode(decode(c)) == c for every index. */
    for (int i = 0; i < 256; i++) {
        assert_int_equal(qs_ref_dyn8_encode(map_at(i)), i);
        assert_int_equal(search_emulation(map_at(i)), i);
    }
}

/* 200,000 seeded inputs: uniform in [-1.05, 1.05], log-uniform magnitudes down to 1e-9, and
 * points within 3 ulp of a midpoint; the reference quantizer equals the emulated search. */
static void test_random_vs_emulation(void **state)
{
    (void)state;
    t_rng r = {0xD1A8};

    for (int i = 0; i < 200000; i++) {
        float x;
        switch (i % 3) {
        case 0: x = (float)(t_unif(&r) * 2.1 - 1.05); break;
        case 1:
            x = (float)(exp(-t_unif(&r) * 21.0) * (t_next(&r) & 1 ? 1.0 : -1.0));
            break;
        default: {
            uint32_t u = t_bits(midpoint((int)(t_next(&r) % 255)));
            x = H(u + (uint32_t)(t_next(&r) % 7) - 3u);
            break;
        }
        }
        if (qs_ref_dyn8_encode(x) != search_emulation(x)) {
            print_error("x = %a (%08x): ref %d, emulation %d\n", (double)x, t_bits(x),
                        qs_ref_dyn8_encode(x), search_emulation(x));
            fail();
        }
    }
}

/* ---- blockwise kernels (§6.4) ---------------------------------------------------------------- */

/* Run the reference kernel and the context's table entry (the forced ISA tier) on the same input
 * and require identical bytes; return the reference results in codes / absmax. */
static void quant_both(qs_ctx *ctx, const float *src, int64_t n, int32_t block, uint8_t *codes,
                       float *absmax)
{
    uint8_t c2[1024];
    float a2[512];
    int64_t nb = (n + block - 1) / block;

    assert_true(n <= 1024 && nb <= 512);
    qs_dyn8_quant__ref(src, n, block, codes, absmax);
    ctx->k.dyn8_quant(src, n, block, c2, a2);
    T_ASSERT_BYTES("dyn8_quant table entry vs ref (codes)", c2, codes, (size_t)n);
    T_ASSERT_BYTES("dyn8_quant table entry vs ref (absmax)", a2, absmax, (size_t)nb * 4);
}

static void dequant_both(qs_ctx *ctx, const uint8_t *codes, const float *absmax, int64_t n,
                         int32_t block, float offset, float *out)
{
    float o2[1024];

    assert_true(n <= 1024);
    qs_dyn8_dequant__ref(codes, absmax, n, block, offset, out);
    ctx->k.dyn8_dequant(codes, absmax, n, block, offset, o2);
    T_ASSERT_BYTES("dyn8_dequant table entry vs ref", o2, out, (size_t)n * 4);
}

/* §6.2 at the nested level: c = [-0.125, 0.375, -0.375, 0.125] has absmax2 0.375 (inv2 = 402aaaab)
 * and codes [47, 255, 0, 207]; with offset 0.625 they decode to the spec's four values. */
static void test_spec_example(void **state)
{
    (void)state;
    qs_ctx *ctx = t_ctx();
    const float c[4] = {-0.125f, 0.375f, -0.375f, 0.125f};
    static const uint8_t want_codes[4] = {47, 255, 0, 207};
    static const uint32_t want_dec[4] = {0x3f002000, 0x3f800000, 0x3e81599a, 0x3f3fe000};
    uint8_t codes[4];
    float absmax2, dec[4];

    assert_bits("1 / absmax2", 0, 1.0f / 0.375f, 0x402aaaab);
    quant_both(ctx, c, 4, 256, codes, &absmax2);
    assert_bits("absmax2", 0, absmax2, 0x3ec00000);
    T_ASSERT_BYTES("§6.2 codes", codes, want_codes, 4);
    dequant_both(ctx, codes, &absmax2, 4, 256, 0.625f, dec);
    for (int i = 0; i < 4; i++)
        assert_bits("§6.2 decoded absmax", i, dec[i], want_dec[i]);
    qs_ctx_destroy(ctx);
}

/* All-zero and all-NaN blocks: codes 0, absmax 0; decoding map[0] * 0 = -0 plus an offset gives
 * exactly the offset. NaN elements are ignored by the absmax and encode as 0. */
static void test_zero_nan_blocks(void **state)
{
    (void)state;
    qs_ctx *ctx = t_ctx();
    const float zeros[5] = {0.0f, -0.0f, 0.0f, 0.0f, 0.0f};
    const float nans[3] = {NAN, -NAN, NAN};
    const float mixed[3] = {NAN, 0.5f, -1.0f};
    static const uint8_t want_mixed[3] = {0, 219, 0};
    uint8_t codes[5];
    float absmax, out[5];

    quant_both(ctx, zeros, 5, 256, codes, &absmax);
    assert_bits("absmax of zeros", 0, absmax, 0);
    for (int i = 0; i < 5; i++)
        assert_int_equal(codes[i], 0);
    dequant_both(ctx, codes, &absmax, 5, 256, 0.37f, out);
    for (int i = 0; i < 5; i++)
        assert_bits("offset only", i, out[i], t_bits(0.37f));
    dequant_both(ctx, codes, &absmax, 5, 256, -0.0f, out);
    for (int i = 0; i < 5; i++)
        assert_bits("map[0] * 0 + -0", i, out[i], 0x80000000u);

    quant_both(ctx, nans, 3, 256, codes, &absmax);
    assert_bits("absmax of NaNs", 0, absmax, 0);
    assert_true(codes[0] == 0 && codes[1] == 0 && codes[2] == 0);

    quant_both(ctx, mixed, 3, 256, codes, &absmax);
    assert_bits("absmax ignores NaN", 0, absmax, 0x3f800000);
    T_ASSERT_BYTES("NaN -> 0, 0.5 -> 219, -1 -> 0", codes, want_mixed, 3);
    qs_ctx_destroy(ctx);
}

/* Several blocks and a partial one (n = 600, block 256) with power-of-two block scales, so that
 * x = v * (1/absmax) is exact and every element must come back as the map index it was built
 * from; block sizes 64 and 2 run the same data. */
static void test_multi_block(void **state)
{
    (void)state;
    qs_ctx *ctx = t_ctx();
    static const float scale[3] = {2.0f, 0.25f, 0x1p-100f};
    float src[600], absmax[300], out[600];
    uint8_t codes[600], want[600];

    for (int i = 0; i < 600; i++) {
        int b = i / 256, k = i % 256 == 0 ? 255 : (i * 37 + b) % 256;
        src[i] = map_at(k) * scale[b];
        want[i] = (uint8_t)k;
    }
    quant_both(ctx, src, 600, 256, codes, absmax);
    for (int b = 0; b < 3; b++)
        assert_bits("block absmax", b, absmax[b], t_bits(scale[b]));
    T_ASSERT_BYTES("codes of map values", codes, want, 600);
    dequant_both(ctx, codes, absmax, 600, 256, 0.0f, out);
    for (int i = 0; i < 600; i++) /* power-of-two scales: the decode is exact */
        assert_bits("decoded", i, out[i], t_bits(src[i] + 0.0f));

    /* Other block sizes over the same data: the kernels still agree with each other, and with
     * block 2 every pair's larger magnitude is the block absmax. */
    quant_both(ctx, src, 600, 64, codes, absmax);
    quant_both(ctx, src, 512, 2, codes, absmax);
    for (int i = 0; i < 2; i++) {
        float a = fmaxf(fabsf(src[2 * i]), fabsf(src[2 * i + 1]));
        assert_bits("block-2 absmax", i, absmax[i], t_bits(a));
    }
    qs_ctx_destroy(ctx);
}

/* Dequantize every code with a normal, a subnormal and a huge absmax and three offsets:
 * fl(fl(map[q] * absmax) + offset), a multiply then a separate add (§6.2). */
static void test_dequant_all_codes(void **state)
{
    (void)state;
    qs_ctx *ctx = t_ctx();
    static const float am[3] = {0.375f, 3.0e-39f, 1e30f};
    static const float off[3] = {0.625f, 0.0f, -0.1f};
    uint8_t codes[768];
    float absmax[3], out[768];

    for (int i = 0; i < 768; i++)
        codes[i] = (uint8_t)i;
    for (int o = 0; o < 3; o++) {
        memcpy(absmax, am, sizeof am);
        dequant_both(ctx, codes, absmax, 768, 256, off[o], out);
        for (int i = 0; i < 768; i++) {
            volatile float prod = map_at(i % 256) * am[i / 256];
            assert_bits("dyn8 decode", i, out[i], t_bits(prod + off[o]));
        }
    }
    qs_ctx_destroy(ctx);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_map_hex),
        cmocka_unit_test(test_map_construction),
        cmocka_unit_test(test_tie_rule_all_midpoints),
        cmocka_unit_test(test_named_values),
        cmocka_unit_test(test_random_vs_emulation),
        cmocka_unit_test(test_spec_example),
        cmocka_unit_test(test_zero_nan_blocks),
        cmocka_unit_test(test_multi_block),
        cmocka_unit_test(test_dequant_all_codes),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
