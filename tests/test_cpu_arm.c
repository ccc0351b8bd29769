/* SPDX-License-Identifier: MIT */
/*
 * AArch64 CPU detection and NEON edge cases (docs/formats.md §3, §4, §10,
 * §11).
 * Detection: qs_cpu_isa() reports NEON on every AArch64 system, never an x86 bit, and, when the
 * caller sets QS_EXPECT_ISA (the .ci/arm.sh qemu -cpu runs), exactly the expected bits; each
 * Arm tier of the tier table, forced, gives its mask clamped to the CPU and NEON kernel names. Edge cases: every NEON kernel
 * in kernels.inc is compared bit for bit with its reference on inputs that sit exactly on, and
 * one ulp either side of, every decision threshold and rounding midpoint of NF4, FP4, E4M3,
 * E5M2 and E2M1 (where random data almost never lands). Skipped on other architectures.
 */
#include "common.h"
#include "core/internal.h"
#include "core/kernels.h"
#include "ref/ref.h"

#if defined(__aarch64__)

#define ARM_BITS QS_ISA_ARM_ALL

static void test_detection(void **state)
{
    (void)state;
    uint32_t isa = qs_cpu_isa();
    const char *want = getenv("QS_EXPECT_ISA");

    print_message("  qs_cpu_isa() = 0x%x\n", isa);
    assert_true(isa & QS_ISA_NEON); /* Advanced SIMD is baseline on AArch64 */
    assert_int_equal(isa & ~ARM_BITS, 0);
    if (want && *want)
        assert_int_equal(isa, (uint32_t)strtoul(want, NULL, 0));
}

/* Kernel names the context chose, checked against the tier. */
static void check_tier(const char *force, uint32_t want_isa, const char *want_suffix)
{
    qs_ctx *ctx;
    const char *slot, *impl;
    int neon = 0;

    setenv("QS_FORCE_ISA", force, 1);
    assert_int_equal(qs_ctx_create(NULL, &ctx), QS_OK);
    assert_int_equal(qs_ctx_isa(ctx), want_isa);
    for (int32_t i = 0; i < qs_ctx_kernel_count(ctx); i++) {
        assert_int_equal(qs_ctx_kernel_info(ctx, i, &slot, &impl), QS_OK);
        if (strcmp(slot, "nf4_quant") == 0 || strcmp(slot, "e4m3_quant") == 0)
            assert_non_null(strstr(impl, want_suffix));
        neon += strstr(impl, "__neon") != NULL;
    }
    if (want_isa == 0)
        assert_int_equal(neon, 0);
    qs_ctx_destroy(ctx);
}

static void test_forced_tiers(void **state)
{
    (void)state;
    uint32_t isa = qs_cpu_isa();
    const char *saved = getenv("QS_FORCE_ISA");
    char keep[64] = "";

    if (saved)
        snprintf(keep, sizeof keep, "%s", saved);
    /* every tier of the table that an AArch64 machine can have: its mask, clamped to the CPU */
    for (int32_t i = 0; i < qs_isa_tier_count(); i++) {
        qs_isa_tier t;
        assert_int_equal(qs_isa_tier_info(i, &t), QS_OK);
        if (strcmp(t.arch, "aarch64") == 0)
            check_tier(t.name, isa & t.allowed, "__neon");
        else if (strcmp(t.arch, "any") == 0)
            check_tier(t.name, isa & t.allowed, "__ref");
    }
    if (saved)
        setenv("QS_FORCE_ISA", keep, 1);
    else
        unsetenv("QS_FORCE_ISA");
}

/* ---- edge values ----------------------------------------------------------------------------- */

#define EDGE_MAX 4096

static float next_up(float f)
{
    return nextafterf(f, INFINITY);
}

static float next_down(float f)
{
    return nextafterf(f, -INFINITY);
}

/* Append v, its neighbours and the negations of all three. */
static int64_t push3(float *x, int64_t n, float v)
{
    float c[3] = {v, next_up(v), next_down(v)};
    for (int k = 0; k < 3 && n + 2 <= EDGE_MAX; k++) {
        x[n++] = c[k];
        x[n++] = -c[k];
    }
    return n;
}

/* Values in the normalized domain of one format (scale 1 in pass 0 maps them 1:1): every
 * threshold and midpoint between consecutive codes, every code value, and their neighbours. The
 * format's largest magnitude starts every block, so that block scales are 1. */
static int64_t edge_values(int32_t slot, float *x)
{
    int64_t n = 0, every = 0;
    float top = 1.0f;

    switch (slot) {
    case QS_SLOT_nf4_quant:
        for (int k = 0; k < 15; k++)
            n = push3(x, n, qs_nf4_thresholds[k]);
        for (int k = 0; k < 16; k++)
            n = push3(x, n, qs_nf4_codebook[k]);
        every = 64;
        break;
    case QS_SLOT_fp4_quant:
        for (int k = 0; k < 7; k++)
            n = push3(x, n, qs_fp4_thresholds[k]);
        for (int k = 0; k < 8; k++)
            n = push3(x, n, qs_fp4_codebook[k]);
        every = 64;
        break;
    case QS_SLOT_e4m3_quant:
    case QS_SLOT_mxfp8_quant:
    case QS_SLOT_e5m2_quant: {
        int e5 = slot == QS_SLOT_e5m2_quant;
        for (int c = 1; c < 0x7F; c++) {
            float a = e5 ? qs_ref_e5m2_decode((uint8_t)c) : qs_ref_e4m3_decode((uint8_t)c);
            float b = e5 ? qs_ref_e5m2_decode((uint8_t)(c + 1))
                         : qs_ref_e4m3_decode((uint8_t)(c + 1));
            float p = e5 ? qs_ref_e5m2_decode((uint8_t)(c - 1))
                         : qs_ref_e4m3_decode((uint8_t)(c - 1));
            if (!isfinite(a))
                break;
            if (!isfinite(b))
                b = 2.0f * a - p; /* the step past the largest finite code */
            n = push3(x, n, a);
            n = push3(x, n, (a + b) * 0.5f); /* exact: one more mantissa bit */
        }
        top = e5 ? 57344.0f : 448.0f;
        every = 32;
        break;
    }
    case QS_SLOT_mxfp4_quant:
    case QS_SLOT_nvfp4_quant:
        for (int c = 0; c < 8; c++) {
            float a = qs_e2m1_values[c], b = c < 7 ? qs_e2m1_values[c + 1] : 8.0f;
            n = push3(x, n, a);
            n = push3(x, n, (a + b) * 0.5f);
        }
        top = 6.0f;
        every = 16;
        break;
    default: return 0;
    }
    for (int64_t i = 0; i < n; i += every)
        x[i] = top;
    return n;
}

/* Run `e` and its reference over the edge values of its slot: pass 0 at unit scales, pass 1
 * with other scales and the specials appended; compare every output byte. */
static void check_edges(const struct qs_kernel_entry *e, const struct qs_kernel_entry *ref)
{
    static const float specials[] = {NAN, -NAN, INFINITY, -INFINITY, 0.0f, -0.0f, 1e-45f,
                                     -1e-45f, 1e-39f, 0x1p-126f, 3.4028235e38f};
    static float x[EDGE_MAX];
    static uint8_t out[2][EDGE_MAX * 2];
    static float sc[2][EDGE_MAX];
    int64_t n = edge_values(e->slot, x);

    if (n == 0)
        return;
    for (int pass = 0; pass < 2; pass++) {
        if (pass == 1)
            for (size_t k = 0; k < sizeof specials / sizeof specials[0]; k++)
                x[n++] = specials[k];
        for (int w = 0; w < 2; w++) {
            const struct qs_kernel_entry *k = w ? e : ref;
            memset(out[w], 0x88, sizeof out[w]);
            memset(sc[w], 0x88, sizeof sc[w]);
            switch (e->slot) {
            case QS_SLOT_nf4_quant:
            case QS_SLOT_fp4_quant:
                ((qs_nf4_quant_fn *)k->fn)(x, n, 64, out[w], sc[w]);
                break;
            case QS_SLOT_e4m3_quant:
            case QS_SLOT_e5m2_quant:
                ((qs_e4m3_quant_fn *)k->fn)(x, n, pass ? 0.5f : 1.0f, out[w]);
                break;
            case QS_SLOT_mxfp4_quant:
            case QS_SLOT_mxfp8_quant:
                ((qs_mxfp4_quant_fn *)k->fn)(x, n, pass, out[w], (uint8_t *)sc[w]);
                break;
            case QS_SLOT_nvfp4_quant:
                ((qs_nvfp4_quant_fn *)k->fn)(x, n, pass ? 0.25f : 1.0f, out[w],
                                             (uint8_t *)sc[w]);
                break;
            default: return;
            }
        }
        int64_t d = t_first_diff(out[1], out[0], sizeof out[0]);
        if (d >= 0)
            fail_msg("%s pass %d (n=%lld): byte %lld got 0x%02x want 0x%02x", e->name, pass,
                     (long long)n, (long long)d, out[1][d], out[0][d]);
        assert_int_equal(t_first_diff(sc[1], sc[0], sizeof sc[0]), -1);
    }
}

static void test_neon_edges(void **state)
{
    (void)state;
    int32_t count;
    const struct qs_kernel_entry *e = qs_kernel_entries(&count);
    int checked = 0;

    for (int32_t i = 0; i < count; i++) {
        if (!(e[i].isa & QS_ISA_NEON) || (e[i].isa & ~qs_cpu_isa()) != 0)
            continue;
        for (int32_t j = 0; j < count; j++)
            if (e[j].slot == e[i].slot && e[j].isa == 0)
                check_edges(&e[i], &e[j]);
        checked++;
    }
    print_message("  %d NEON kernels checked on edge values\n", checked);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_detection),
        cmocka_unit_test(test_forced_tiers),
        cmocka_unit_test(test_neon_edges),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}

#else /* not AArch64 */

static void test_not_arm(void **state)
{
    (void)state;
    skip();
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_not_arm),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}

#endif
