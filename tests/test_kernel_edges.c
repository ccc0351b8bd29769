/* SPDX-License-Identifier: MIT */
/*
 * The fast paths of the quantize / dequantize kernels against src/ref, on inputs built to reach
 * them (tests/test_kernels.c salts its random data so densely that most four-block groups hold a
 * NaN or Inf and take the block-by-block path):
 * - the inline E8M0 decoder and the UE4M3 scale table, exhaustively (all 256 and 128 codes) against
 *   qs_ref_e8m0_decode / qs_ref_e4m3_decode;
 * - MXFP4 / MXFP8 quantize, FLOOR and RCEIL, on groups of four finite blocks full of adversarial
 *   finite values (f32 subnormals, the largest finite, amax just below a power of two, E2M1 and
 *   E4M3 ties after scaling, signed zeros, all-zero blocks) with one NaN or Inf block placed in
 *   each position of some groups, lengths that end inside a group and inside a block;
 * - NF4 / FP4 dequantize with finite, infinite, NaN, zero and subnormal absmax per block (the NaN
 *   blend is skipped only for a finite absmax), block sizes 64 and 4096 and odd lengths;
 * - E4M3 dequantize of all 256 codes at scales around the point where 2^8 * scale overflows (the
 *   F16C decode multiplies by it), Inf, NaN, subnormal and negative scales, and MXFP8 dequantize
 *   of all 256 codes under all 256 scale bytes (exhaustive);
 * - NF4 / FP4 / dynamic 8-bit quantize with blocks of 64 over lengths of several groups, with and
 *   without a NaN;
 * - NVFP4 quantize over sequences of groups that take different paths (test_nvfp4_quant_groups).
 * Every registry entry of the slot that this CPU runs is compared bit for bit with the slot's
 * __ref entry, so each run covers every tier the machine has.
 */
#include "common.h"

#include "core/kernels.h"
#include "kernel_entries.h"
#include "ref/ref.h"

static void test_e8m0_inline_all(void **state)
{
    (void)state;
    for (int e = 0; e < 256; e++)
        assert_int_equal(t_bits(qs_e8m0_decode_inline((uint8_t)e)),
                         t_bits(qs_ref_e8m0_decode((uint8_t)e)));
}

static void test_ue4m3_table_all(void **state)
{
    (void)state;
    for (int c = 0; c < 128; c++) {
        float want = qs_ref_e4m3_decode((uint8_t)c);
        if (want != want) /* 0x7F: NaN in both */
            assert_true(qs_ue4m3_values[c] != qs_ue4m3_values[c]);
        else
            assert_int_equal(t_bits(qs_ue4m3_values[c]), t_bits(want));
    }
    assert_int_equal(t_bits(qs_ue4m3_values[0x38]), t_bits(1.0f));
    assert_int_equal(t_bits(qs_ue4m3_values[0x7E]), t_bits(448.0f));
    assert_int_equal(t_bits(qs_ue4m3_values[0x01]), t_bits(0x1p-9f));
}

/* A finite value chosen to hit an edge of the MX encoders. */
static float mx_edge_value(t_rng *r)
{
    static const float edge[] = {
        0.0f,         -0.0f,        0x1p-149f,   -0x1p-149f,   0x1.fffffep-127f, 0x1p-126f,
        0x1.fffffep127f, -0x1.fffffep127f, 7.9999995f, 0x1.fffffep-1f, 6.0f, -6.0f,
        448.0f,       464.0f,       0.25f,       0.75f,        1.25f,      1.75f,
        2.5f,         3.5f,         5.0f,        -5.0f,        0x1.1p-9f,  0x1p-10f,
    };
    uint64_t u = t_next(r);
    float v = edge[u % (sizeof edge / sizeof edge[0])];
    /* the tie values also scaled by a power of two, so that they stay ties after the block scale */
    return (u >> 8) % 3 == 0 ? v * (float)(1 << ((u >> 16) % 8)) : v;
}

static void fill_mx(t_rng *r, float *x, int64_t n, int special_block)
{
    for (int64_t i = 0; i < n; i++) {
        uint64_t u = t_next(r);
        if (u % 4 == 0)
            x[i] = mx_edge_value(r);
        else if (u % 4 == 1)
            x[i] = 0.0f; /* makes all-zero and nearly-zero blocks likely */
        else
            x[i] = (float)t_normal(r) * ldexpf(1.0f, (int)((u >> 8) % 60) - 30);
    }
    if (special_block >= 0 && (special_block + 1) * 32 <= n) {
        uint64_t u = t_next(r);
        x[special_block * 32 + (int64_t)(u % 32)] = u & 32 ? NAN : (u & 64 ? INFINITY : -INFINITY);
    }
}

static void check_mx_slot(int32_t slot)
{
    const struct qs_kernel_entry *ref = test_ref_entry(slot);
    int32_t count;
    const struct qs_kernel_entry *e = qs_kernel_entries(&count);
    const int per_byte = slot == QS_SLOT_mxfp4_quant ? 2 : 1;
    static const int64_t lengths[] = {128, 256, 512, 4096, 127, 129, 160, 200, 255, 97, 33, 1};
    t_rng r = {0x5EEDu + (uint64_t)slot};
    int tested = 0;

    assert_non_null(ref);
    for (int32_t i = 0; i < count; i++) {
        if (e[i].slot != slot || e[i].isa == 0 || (e[i].isa & ~qs_cpu_isa()) != 0)
            continue;
        tested++;
        for (size_t li = 0; li < sizeof lengths / sizeof lengths[0]; li++) {
            const int64_t n = lengths[li], nb = (n + 31) / 32, bytes = (n + per_byte - 1) / per_byte;
            float *x = malloc((size_t)n * sizeof(float));
            uint8_t *d0 = malloc((size_t)bytes + 1), *d1 = malloc((size_t)bytes + 1);
            uint8_t *s0 = malloc((size_t)nb), *s1 = malloc((size_t)nb);
            for (int trial = 0; trial < 40; trial++) {
                /* trials 0..7: a NaN/Inf block in position trial % 4 of some group */
                int special = trial < 8 ? (int)(trial % 4 + 4 * (trial / 4)) : -1;
                int32_t rounding = trial & 1;
                fill_mx(&r, x, n, special);
                memset(d0, 0xAB, (size_t)bytes + 1);
                memset(d1, 0xAB, (size_t)bytes + 1);
                ((qs_mxfp4_quant_fn *)ref->fn)(x, n, rounding, d0, s0);
                ((qs_mxfp4_quant_fn *)e[i].fn)(x, n, rounding, d1, s1);
                if (memcmp(d0, d1, (size_t)bytes + 1) != 0 || memcmp(s0, s1, (size_t)nb) != 0)
                    fail_msg("%s: n %lld trial %d rounding %d differs from %s", e[i].name,
                             (long long)n, trial, rounding, ref->name);
            }
            free(x);
            free(d0);
            free(d1);
            free(s0);
            free(s1);
        }
    }
    if (!tested)
        skip();
}

static void test_mxfp4_quant_groups(void **state)
{
    (void)state;
    check_mx_slot(QS_SLOT_mxfp4_quant);
}

static void test_mxfp8_quant_groups(void **state)
{
    (void)state;
    check_mx_slot(QS_SLOT_mxfp8_quant);
}

static void check_bnb4_dequant_slot(int32_t slot)
{
    const struct qs_kernel_entry *ref = test_ref_entry(slot);
    int32_t count;
    const struct qs_kernel_entry *e = qs_kernel_entries(&count);
    static const float absmax_edge[] = {INFINITY, -INFINITY, NAN, 0.0f, -0.0f, 0x1p-149f,
                                        0x1.fffffep127f, 1.0f, 0.37f, 3.0e-39f};
    static const int32_t blocks[] = {64, 4096, 32};
    static const int64_t lengths[] = {4096, 8192, 4095, 4097, 63, 65, 1, 2, 31};
    t_rng r = {0xB17Eu + (uint64_t)slot};
    int tested = 0;

    assert_non_null(ref);
    for (int32_t i = 0; i < count; i++) {
        if (e[i].slot != slot || e[i].isa == 0 || (e[i].isa & ~qs_cpu_isa()) != 0)
            continue;
        tested++;
        for (size_t bi = 0; bi < sizeof blocks / sizeof blocks[0]; bi++)
            for (size_t li = 0; li < sizeof lengths / sizeof lengths[0]; li++) {
                const int64_t n = lengths[li], nb = (n + blocks[bi] - 1) / blocks[bi];
                uint8_t *codes = malloc((size_t)(n + 1) / 2);
                float *absmax = malloc((size_t)nb * sizeof(float));
                float *o0 = malloc((size_t)(n + 1) * sizeof(float));
                float *o1 = malloc((size_t)(n + 1) * sizeof(float));
                for (int64_t k = 0; k < (n + 1) / 2; k++)
                    codes[k] = (uint8_t)t_next(&r);
                for (int64_t b = 0; b < nb; b++) {
                    uint64_t u = t_next(&r);
                    absmax[b] = u % 3 ? absmax_edge[(u >> 8) % (sizeof absmax_edge /
                                                               sizeof absmax_edge[0])]
                                      : (float)t_unif(&r) * 4.0f;
                }
                memset(o0, 0xCD, (size_t)(n + 1) * sizeof(float));
                memset(o1, 0xCD, (size_t)(n + 1) * sizeof(float));
                ((qs_nf4_dequant_fn *)ref->fn)(codes, absmax, n, blocks[bi], o0);
                ((qs_nf4_dequant_fn *)e[i].fn)(codes, absmax, n, blocks[bi], o1);
                if (memcmp(o0, o1, (size_t)(n + 1) * sizeof(float)) != 0)
                    fail_msg("%s: n %lld block %d differs from %s", e[i].name, (long long)n,
                             blocks[bi], ref->name);
                free(codes);
                free(absmax);
                free(o0);
                free(o1);
            }
    }
    if (!tested)
        skip();
}

static void test_nf4_dequant_absmax_edges(void **state)
{
    (void)state;
    check_bnb4_dequant_slot(QS_SLOT_nf4_dequant);
}

static void test_fp4_dequant_absmax_edges(void **state)
{
    (void)state;
    check_bnb4_dequant_slot(QS_SLOT_fp4_dequant);
}

/* All 256 codes, each at 3 positions so that the vector body and the masked tail both see it. */
static void all_codes(uint8_t *c, int64_t n)
{
    for (int64_t i = 0; i < n; i++)
        c[i] = (uint8_t)(i * 7 + i / 256);
}

static void test_e4m3_dequant_scales(void **state)
{
    static const float scales[] = {1.0f, 0x1p119f, 0x1.fffffep119f, 0x1p120f, 0x1.8p125f,
                                   0x1.fffffep127f, -0x1p120f, INFINITY, -INFINITY, NAN,
                                   0x1p-149f, 0x1p-127f, 0.0f, -0.0f, -1.5f, 7.0f / 448.0f};
    const struct qs_kernel_entry *ref = test_ref_entry(QS_SLOT_e4m3_dequant);
    int32_t count;
    const struct qs_kernel_entry *e = qs_kernel_entries(&count);
    const int64_t n = 256 * 3 + 5;
    uint8_t c[256 * 3 + 5];
    float o0[256 * 3 + 6], o1[256 * 3 + 6];

    (void)state;
    all_codes(c, n);
    for (int32_t i = 0; i < count; i++) {
        if (e[i].slot != QS_SLOT_e4m3_dequant || e[i].isa == 0 ||
            (e[i].isa & ~qs_cpu_isa()) != 0)
            continue;
        for (size_t k = 0; k < sizeof scales / sizeof scales[0]; k++) {
            memset(o0, 0xCD, sizeof o0);
            memset(o1, 0xCD, sizeof o1);
            ((qs_e4m3_dequant_fn *)ref->fn)(c, n, scales[k], o0);
            ((qs_e4m3_dequant_fn *)e[i].fn)(c, n, scales[k], o1);
            if (memcmp(o0, o1, sizeof o0) != 0)
                fail_msg("%s: scale %a differs from %s", e[i].name, (double)scales[k], ref->name);
        }
    }
}

static void test_mxfp8_dequant_all(void **state)
{
    const struct qs_kernel_entry *ref = test_ref_entry(QS_SLOT_mxfp8_dequant);
    int32_t count;
    const struct qs_kernel_entry *e = qs_kernel_entries(&count);
    const int64_t n = 256 * 256 + 17; /* every code in every block, a partial last block */
    uint8_t *c = malloc((size_t)n), *s = malloc((size_t)(n + 31) / 32);
    float *o0 = malloc((size_t)(n + 1) * sizeof(float)), *o1 = malloc((size_t)(n + 1) * sizeof(float));

    (void)state;
    for (int64_t b = 0; b < (n + 31) / 32; b++)
        s[b] = (uint8_t)b;
    for (int32_t i = 0; i < count; i++) {
        if (e[i].slot != QS_SLOT_mxfp8_dequant || e[i].isa == 0 ||
            (e[i].isa & ~qs_cpu_isa()) != 0)
            continue;
        for (int shift = 0; shift < 8; shift++) { /* each scale byte meets every code */
            for (int64_t i2 = 0; i2 < n; i2++)
                c[i2] = (uint8_t)(i2 % 256 + 32 * shift);
            memset(o0, 0xCD, (size_t)(n + 1) * sizeof(float));
            memset(o1, 0xCD, (size_t)(n + 1) * sizeof(float));
            ((qs_mxfp4_dequant_fn *)ref->fn)(c, s, n, o0);
            ((qs_mxfp4_dequant_fn *)e[i].fn)(c, s, n, o1);
            if (memcmp(o0, o1, (size_t)(n + 1) * sizeof(float)) != 0)
                fail_msg("%s differs from %s (shift %d)", e[i].name, ref->name, shift);
        }
    }
    free(c);
    free(s);
    free(o0);
    free(o1);
}

/* NF4 / FP4 / dynamic 8-bit quantize with blocks of 64 over several of the AVX-512 driver's groups
 * (absmaxes of 2048 elements, then codes): finite data at random scales with zeros, subnormals and
 * Inf, and in some trials a NaN (quiet or signaling, either sign) at a random place; lengths that
 * end inside a group and inside a block. */
static void check_bnb_quant_groups(int32_t slot)
{
    const struct qs_kernel_entry *ref = test_ref_entry(slot);
    int32_t count;
    const struct qs_kernel_entry *e = qs_kernel_entries(&count);
    static const int64_t lengths[] = {1024, 2048, 4096 + 64, 3000, 1024 + 37};
    static const uint32_t nans[] = {0x7FC00000u, 0xFFC00000u, 0x7FA00000u, 0xFFA00001u};
    const int per_byte = slot == QS_SLOT_dyn8_quant ? 1 : 2;
    t_rng r = {0xB1B4u + (uint64_t)slot};
    int tested = 0;

    assert_non_null(ref);
    for (int32_t i = 0; i < count; i++) {
        if (e[i].slot != slot || e[i].isa == 0 || (e[i].isa & ~qs_cpu_isa()) != 0)
            continue;
        tested++;
        for (size_t li = 0; li < sizeof lengths / sizeof lengths[0]; li++) {
            const int64_t n = lengths[li], nb = (n + 63) / 64, bytes = (n + per_byte - 1) / per_byte;
            float *x = malloc((size_t)n * sizeof(float)), *a0 = malloc((size_t)nb * 4),
                  *a1 = malloc((size_t)nb * 4);
            uint8_t *d0 = malloc((size_t)bytes), *d1 = malloc((size_t)bytes);
            for (int trial = 0; trial < 12; trial++) {
                for (int64_t j = 0; j < n; j++) {
                    uint64_t u = t_next(&r);
                    x[j] = u % 16 == 0   ? 0.0f
                           : u % 16 == 1 ? t_f32_from_bits((uint32_t)(u >> 8) & 0x807FFFFFu)
                           : u % 64 == 2 ? ((u >> 7) & 1 ? INFINITY : -INFINITY)
                                         : (float)(t_normal(&r) * ldexp(1.0, trial * 7 - 40));
                }
                if (trial % 3 == 2)
                    x[t_next(&r) % (uint64_t)n] = t_f32_from_bits(nans[trial / 3 % 4]);
                ((qs_nf4_quant_fn *)ref->fn)(x, n, 64, d0, a0);
                ((qs_nf4_quant_fn *)e[i].fn)(x, n, 64, d1, a1);
                if (memcmp(d0, d1, (size_t)bytes) != 0 || memcmp(a0, a1, (size_t)nb * 4) != 0)
                    fail_msg("%s: n %lld trial %d differs from %s", e[i].name, (long long)n, trial,
                             ref->name);
            }
            free(x);
            free(a0);
            free(a1);
            free(d0);
            free(d1);
        }
    }
    if (!tested)
        skip();
}

static void test_bnb_quant_groups(void **state)
{
    (void)state;
    check_bnb_quant_groups(QS_SLOT_nf4_quant);
    check_bnb_quant_groups(QS_SLOT_fp4_quant);
    check_bnb_quant_groups(QS_SLOT_dyn8_quant);
}

/*
 * NVFP4 quantize over several groups of 16 blocks (the AVX2 and AVX-512 kernels compute a group's
 * block scales while the previous group's codes are made): each group of 256 values is, at random,
 * ordinary finite data (mx_edge_value ties included), data holding a NaN, data holding an Inf, all
 * zeros, or values near the smallest subnormal; under tensor scales for which the dens stay finite
 * (0.37, 1), overflow where a block holds Inf (1e36: 448 * 1e36), round to zero for tiny blocks
 * (the smallest subnormal) or are all NaN. So groups that take the thresholds, the division and the
 * NaN amax path follow each other in every order; lengths end at, inside and past a group.
 */
static void test_nvfp4_quant_groups(void **state)
{
    (void)state;
    const struct qs_kernel_entry *ref = test_ref_entry(QS_SLOT_nvfp4_quant);
    int32_t count;
    const struct qs_kernel_entry *e = qs_kernel_entries(&count);
    static const int64_t lengths[] = {256, 512, 1280, 4096, 1287, 255, 257, 4095, 2053, 17, 1};
    const float sgs[] = {0.37f, 1.0f, 1e36f, 0x1p-149f, NAN};
    t_rng r = {0x5EED4u};
    int tested = 0;

    assert_non_null(ref);
    for (int32_t i = 0; i < count; i++) {
        if (e[i].slot != QS_SLOT_nvfp4_quant || e[i].isa == 0 || (e[i].isa & ~qs_cpu_isa()) != 0)
            continue;
        tested++;
        for (size_t li = 0; li < sizeof lengths / sizeof lengths[0]; li++) {
            const int64_t n = lengths[li], nb = (n + 15) / 16, bytes = (n + 1) / 2;
            float *x = malloc((size_t)n * sizeof(float));
            uint8_t *d0 = malloc((size_t)(bytes + nb) + 1), *d1 = malloc((size_t)(bytes + nb) + 1);
            assert_true(x && d0 && d1);
            for (int trial = 0; trial < 30; trial++) {
                float sg = sgs[trial % (int)(sizeof sgs / sizeof sgs[0])];
                for (int64_t g = 0; g * 256 < n; g++) {
                    int kind = (int)(t_next(&r) % 5);
                    int64_t end = (g + 1) * 256 < n ? (g + 1) * 256 : n;
                    for (int64_t k = g * 256; k < end; k++) {
                        uint64_t u = t_next(&r);
                        x[k] = kind == 3    ? 0.0f
                               : kind == 4  ? (float)(int)(u % 7) * 0x1p-149f * (u & 8 ? -1 : 1)
                               : u % 3 == 0 ? mx_edge_value(&r)
                                            : (float)t_normal(&r) * ldexpf(1.0f, (int)(u >> 8) % 9);
                    }
                    if (kind == 1 || kind == 2) { /* one NaN or +-Inf somewhere in the group */
                        uint64_t u = t_next(&r);
                        x[g * 256 + (int64_t)(u % (uint64_t)(end - g * 256))] =
                            kind == 1 ? NAN : (u & 256 ? INFINITY : -INFINITY);
                    }
                }
                memset(d0, 0xAB, (size_t)(bytes + nb) + 1);
                memset(d1, 0xAB, (size_t)(bytes + nb) + 1);
                ((qs_nvfp4_quant_fn *)ref->fn)(x, n, sg, d0, d0 + bytes);
                ((qs_nvfp4_quant_fn *)e[i].fn)(x, n, sg, d1, d1 + bytes);
                if (memcmp(d0, d1, (size_t)(bytes + nb) + 1) != 0)
                    fail_msg("%s: n %lld trial %d s_global %g differs from %s", e[i].name,
                             (long long)n, trial, (double)sg, ref->name);
            }
            free(x);
            free(d0);
            free(d1);
        }
    }
    if (!tested)
        skip();
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_e8m0_inline_all),
        cmocka_unit_test(test_ue4m3_table_all),
        cmocka_unit_test(test_mxfp4_quant_groups),
        cmocka_unit_test(test_mxfp8_quant_groups),
        cmocka_unit_test(test_nf4_dequant_absmax_edges),
        cmocka_unit_test(test_fp4_dequant_absmax_edges),
        cmocka_unit_test(test_e4m3_dequant_scales),
        cmocka_unit_test(test_mxfp8_dequant_all),
        cmocka_unit_test(test_bnb_quant_groups),
        cmocka_unit_test(test_nvfp4_quant_groups),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
