/* SPDX-License-Identifier: MIT */
/*
 * Exact E2M1 encoding without a division. The NVFP4 quantize kernels replace the reference's division fl(v / den) by comparisons of |v|
 * against exact per-den thresholds (src/x86/nvfp4_rows.h: F_k, the largest f32 on the wrong side
 * of M_k * den for the E2M1 midpoints M_k). These tests are the proof that the codes stay those of
 * the division, run against every registry entry of nvfp4_quant this CPU has, bit for bit against
 * qs_nvfp4_quant__ref:
 * - thresholds: every UE4M3 scale byte (1 ... 126) under 40 tensor scales (powers of two from
 *   2^-149 to 2^110, short mantissas that make M_k * den an f32 and so give exact ties, random
 *   mantissas, subnormal ones whose den is subnormal or 0, the largest whose den is Inf), each
 *   with every f32 within 4 ulps of each of the seven M_k * den, both signs, in blocks whose first
 *   element fixes the scale byte;
 * - dense: every f32 q in [2^-4, 6.25) (six and a half binades, 55.1 million values: every E2M1
 *   midpoint and tie with all their neighbours), as fl(q * den), under two dens, 1 and the §14 example's fl(value(0x6B) *
 *   3cd2ef15), in blocks of 15 with a fixed first element;
 * - NaN, Inf, signed zeros and subnormals inside blocks of the fast path;
 * - the E2M1 encoder of the MXFP4 kernels (comparisons against the constant midpoints, for an
 *   element already scaled by a power of two): every f32 in [2^-4, 6), both signs, in blocks whose
 *   lead 4.0 makes the scale 2^0, against qs_mxfp4_quant__ref.
 */
#include "common.h"

#include "core/kernels.h"
#include "kernel_entries.h"
#include "ref/ref.h"

/* Quantize x[0..n) with every entry this CPU runs and with the reference; 0 entries: skip. */
static int compare_all(const float *x, int64_t n, float s_global, const char *what)
{
    const struct qs_kernel_entry *ref = test_ref_entry(QS_SLOT_nvfp4_quant);
    int32_t count;
    const struct qs_kernel_entry *e = qs_kernel_entries(&count);
    const size_t data = (size_t)(n + 1) / 2, nsb = (size_t)(n + 15) / 16;
    uint8_t *d0 = malloc(data), *d1 = malloc(data), *s0 = malloc(nsb), *s1 = malloc(nsb);
    int tested = 0;

    assert_non_null(ref);
    assert_true(d0 && d1 && s0 && s1);
    ((qs_nvfp4_quant_fn *)ref->fn)(x, n, s_global, d0, s0);
    for (int32_t i = 0; i < count; i++) {
        if (e[i].slot != QS_SLOT_nvfp4_quant || e[i].isa == 0 ||
            (e[i].isa & ~qs_cpu_isa()) != 0)
            continue;
        tested++;
        memset(d1, 0xAB, data);
        memset(s1, 0xAB, nsb);
        ((qs_nvfp4_quant_fn *)e[i].fn)(x, n, s_global, d1, s1);
        if (memcmp(s0, s1, nsb) != 0)
            fail_msg("%s: scale bytes differ from %s (%s, s_global %08x)", e[i].name, ref->name,
                     what, t_bits(s_global));
        for (size_t j = 0; j < data; j++)
            if (d0[j] != d1[j])
                fail_msg("%s: byte %zu is %02x, %s has %02x (%s, s_global %08x, values %08x "
                         "%08x, block scale %02x)",
                         e[i].name, j, d1[j], ref->name, d0[j], what, t_bits(s_global),
                         t_bits(x[2 * j]), (int64_t)(2 * j + 1) < n ? t_bits(x[2 * j + 1]) : 0u,
                         s0[j / 8]);
    }
    free(d0);
    free(d1);
    free(s0);
    free(s1);
    return tested;
}

/* The E2M1 midpoints M_k as the kernels define them (nvfp4_rows.h). */
static const double mids[7] = {0x1.000001p-2, 0x1.7fffffp-1, 0x1.400001p+0, 0x1.bfffffp+0,
                               0x1.400001p+1, 0x1.bfffffp+1, 0x1.400001p+2};

/* A block of 16 whose first element gives scale byte s under s_global (or near it). */
static float block_lead(int s, float s_global)
{
    float lead = qs_ue4m3_values[s] * (6.0f * s_global);
    return lead == lead && lead <= 0x1.fffffep127f ? lead : 0x1.fffffep127f;
}

static void test_thresholds_every_scale(void **state)
{
    float sg[40];
    int nsg = 0;
    t_rng r = {0x4E5F4u};
    (void)state;

    for (int e = -149; e <= 110; e += 13) /* powers of two: ties wherever M_k * den is an f32 */
        sg[nsg++] = ldexpf(1.0f, e);
    sg[nsg++] = 1.5f;
    sg[nsg++] = 0x1.8p-100f;
    sg[nsg++] = 0x1.4p20f;
    sg[nsg++] = t_f32_from_bits(0x3cd2ef15u); /* §14's example */
    sg[nsg++] = 10.0f / 2688.0f;
    sg[nsg++] = 0x1p-140f * 3.0f; /* subnormal: some dens are 0 or subnormal */
    sg[nsg++] = 0x1.fffffep127f / 2688.0f; /* the largest automatic s_global */
    sg[nsg++] = 1e36f;                     /* dens past FLT_MAX: Inf */
    while (nsg < 40) /* random mantissas over a wide exponent range */
        sg[nsg++] = t_f32_from_bits((uint32_t)(0x08000000u + t_next(&r) % 0x68000000u));

    for (int gi = 0; gi < nsg; gi++) {
        const float s_global = sg[gi];
        /* per scale byte: 7 thresholds x 9 ulps x 2 signs = 126 probes, in 9 blocks of 16 */
        const int64_t n = 126 * 9 * 16;
        float *x = malloc((size_t)n * sizeof(float));
        int64_t i = 0;

        assert_non_null(x);
        for (int s = 1; s <= 126; s++) {
            const float lead = block_lead(s, s_global);
            float probe[126];
            int np = 0;
            uint8_t sb, d[8];
            float blk[16] = {lead};

            /* the block's actual scale byte, hence its den */
            qs_nvfp4_quant__ref(blk, 16, s_global, d, &sb);
            const double den = (double)(qs_ue4m3_values[sb & 0x7F] * s_global);
            for (int k = 0; k < 7; k++) {
                double b = mids[k] * den;
                float f = (float)b;
                uint32_t u = t_bits(f);
                for (int dlt = -4; dlt <= 4; dlt++) {
                    float p = t_f32_from_bits(u + (uint32_t)dlt);
                    /* stay inside the block's amax; NaN / beyond: the lead itself */
                    if (!(p <= lead) || (int64_t)u + dlt < 0)
                        p = lead;
                    probe[np++] = p;
                    probe[np++] = -p;
                }
            }
            for (int b2 = 0; b2 < 9; b2++) {
                x[i++] = lead;
                for (int j = 0; j < 15; j++)
                    x[i++] = probe[(b2 * 15 + j) % np];
            }
        }
        assert_int_equal(i, n);
        if (!compare_all(x, n, s_global, "thresholds")) {
            free(x);
            skip();
        }
        free(x);
    }
}

static void test_dense_binades(void **state)
{
    /* s_global 1, lead 6: S = 1, den 1; s_global 3cd2ef15, lead fl(88 * fl(6 s_global)): 0x6B */
    const float sgs[2] = {1.0f, t_f32_from_bits(0x3cd2ef15u)};
    const int64_t chunk = 1 << 20; /* values per call, 65536 blocks */
    float *x = malloc((size_t)chunk * sizeof(float));
    (void)state;

    assert_non_null(x);
    for (int gi = 0; gi < 2; gi++) {
        const float s_global = sgs[gi];
        const float den = qs_ue4m3_values[gi ? 0x6B : 0x38] * s_global;
        const float lead = (gi ? 88.0f : 1.0f) * (6.0f * s_global);
        /* every f32 q in [2^-4, 6.25) times den: for den 1 every bit pattern of the quotient's
         * range (above 6.25 all is code 7, and the block amax would move the scale byte) */
        uint32_t u = t_bits(0x1p-4f), end = t_bits(6.25f);
        while (u < end) {
            int64_t i = 0;
            for (; i < chunk && u < end; i += 16) {
                x[i] = lead;
                for (int j = 1; j < 16; j++)
                    x[i + j] = u < end ? t_f32_from_bits(u++) * den : 0.0f;
            }
            if (!compare_all(x, i, s_global, "dense")) {
                free(x);
                skip();
            }
        }
    }
    free(x);
}

static void test_specials_in_fast_blocks(void **state)
{
    static const float sp[] = {NAN, -NAN, INFINITY, -INFINITY, 0.0f, -0.0f, 0x1p-149f,
                               -0x1p-149f, 0x1.fffffep-127f, -0x1p-126f};
    const int64_t n = 16 * 64;
    float x[16 * 64];
    t_rng r = {0x5BEC1u};
    (void)state;

    for (int trial = 0; trial < 200; trial++) {
        float s_global = trial % 3 == 0 ? 1.0f : (float)ldexp(1.0 + t_unif(&r), trial % 60 - 30);
        for (int64_t i = 0; i < n; i++) {
            uint64_t v = t_next(&r);
            x[i] = v % 5 == 0 ? sp[(v >> 8) % (sizeof sp / sizeof sp[0])]
                              : (float)(t_normal(&r) * ldexp(1.0, trial % 50 - 25));
        }
        if (!compare_all(x, n, s_global, "specials"))
            skip();
    }
}

/* MXFP4 over x[0..n) (n a multiple of 32) with every entry against the reference. */
static int compare_mxfp4(const float *x, int64_t n, int32_t rounding)
{
    const struct qs_kernel_entry *ref = test_ref_entry(QS_SLOT_mxfp4_quant);
    int32_t count;
    const struct qs_kernel_entry *e = qs_kernel_entries(&count);
    const size_t data = (size_t)n / 2, nsb = (size_t)n / 32;
    uint8_t *d0 = malloc(data), *d1 = malloc(data), *s0 = malloc(nsb), *s1 = malloc(nsb);
    int tested = 0;

    assert_non_null(ref);
    assert_true(d0 && d1 && s0 && s1);
    ((qs_mxfp4_quant_fn *)ref->fn)(x, n, rounding, d0, s0);
    for (int32_t i = 0; i < count; i++) {
        if (e[i].slot != QS_SLOT_mxfp4_quant || e[i].isa == 0 ||
            (e[i].isa & ~qs_cpu_isa()) != 0)
            continue;
        tested++;
        ((qs_mxfp4_quant_fn *)e[i].fn)(x, n, rounding, d1, s1);
        if (memcmp(s0, s1, nsb) != 0)
            fail_msg("%s: scale bytes differ from %s", e[i].name, ref->name);
        for (size_t j = 0; j < data; j++)
            if (d0[j] != d1[j])
                fail_msg("%s: byte %zu is %02x, %s has %02x (values %08x %08x, rounding %d)",
                         e[i].name, j, d1[j], ref->name, d0[j], t_bits(x[2 * j]),
                         t_bits(x[2 * j + 1]), rounding);
    }
    free(d0);
    free(d1);
    free(s0);
    free(s1);
    return tested;
}

static void test_mxfp4_dense_binades(void **state)
{
    const int64_t chunk = 1 << 20;
    float *x = malloc((size_t)chunk * sizeof(float));
    (void)state;

    assert_non_null(x);
    for (int32_t rounding = 0; rounding < 1; rounding++) {
        /* amax in [4, 6): FLOOR gives 2^0 (RCEIL would too; the element rule is the same) */
        uint32_t u = t_bits(0x1p-4f), end = t_bits(6.0f);
        while (u < end) {
            int64_t i = 0;
            for (; i < chunk; i += 32) {
                x[i] = 4.0f;
                for (int j = 1; j < 32; j++) {
                    float v = u < end ? t_f32_from_bits(u++) : 0.0f;
                    x[i + j] = (j & 1) ? v : -v;
                }
            }
            if (!compare_mxfp4(x, i, rounding)) {
                free(x);
                skip();
            }
        }
    }
    free(x);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_thresholds_every_scale),
        cmocka_unit_test(test_dense_binades),
        cmocka_unit_test(test_specials_in_fast_blocks),
        cmocka_unit_test(test_mxfp4_dense_binades),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
