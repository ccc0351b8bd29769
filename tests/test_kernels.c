/* SPDX-License-Identifier: MIT */
/*
 * The kernel harness (dav1d's checkasm): one cmocka test per registry entry, named
 * "<slot>/<isa>" ("nf4_quant/avx512"), generated from src/core/kernels.inc, so a failure is named
 * and the sweep goes on. Each runs the implementation beside its slot's __ref kernel on the same
 * inputs (the slot's call and its parameter variants: its entry in tests/harness/kernel_call.c,
 * which qsparse-bench times too), for every length 0...1100 and a few large ones, on random data
 * salted with the
 * adversarial values, and compares the outputs with its family's rule: bit for bit for every
 * family but matmul, which gets a tolerance (compare_matmul). Inputs end at a guard page
 * (over-reads fault), outputs sit between canary bytes (over-writes are caught). Under
 * QS_FORCE_ISA=<tier> (tests/meson.build registers the suite once per tier) the group holds the
 * entries whose home tier is that one: the first tier of the tier table whose mask allows all the
 * entry's bits; an entry the CPU cannot run is reported as skipped. Run directly, the group holds
 * every entry. Also: the registry's structure, the selection rule, the tier table, dispatch.
 */
#include "common.h"
#include "core/internal.h"
#include "core/kernels.h"
#include "harness/kernel_call.h"
#include "kernel_entries.h"
#include "ref/ref.h"

#define MAX_N 20000
#define OUT_BYTES (MAX_N * 8 + 4096)

/* ---- the GEMV and 2:4 tolerance rules ----------------------------------------------------------
 * Every slot's call (its parameters over the KC_VARIANTS variants, derived inputs, in-out state)
 * is its entry in tests/harness/kernel_call.c, shared with qsparse-bench. The multi-row GEMV and
 * fused 2:4 slots sum in another order than the reference (FMA, lane-wise block scales), so their
 * output is laid out for compare_gemv: a header (the number of y slots, k), y as the call wrote
 * it, and per y slot its error scale sum_k |x_k w_k| in double, over the weights as the reference
 * decodes them (the entry's kc_gemv). */

#define GEMV_HDR 16

/* Multi-row GEMV: y is m x rows at a row stride ldy (gaps between rows keep the canary).
 * bf16 activations (g->ws): flush[] gets each slot's flush term (kernel_call.h). */
static void gemv_bounds(const kc_gemv *g, float *bound, float *flush)
{
    for (int64_t i = 0; i < g->m; i++)
        for (int64_t r = 0; r < g->ldy; r++) {
            double b = 0.0, xs = 0.0, fl = 0.0;
            int nonfinite = 0, overflow = 0;
            for (int64_t c = 0; r < g->rows && c < g->k; c++) {
                float xv = g->x[i * g->ldx + c], wv = g->w[r * g->k + c];
                double p = fabs((double)xv * (double)wv);
                overflow |= isinf(wv); /* a huge scale (or an infinite one) */
                if (isfinite(p))
                    b += p;
                else
                    nonfinite = 1;
                if (isfinite(xv))
                    xs += fabs((double)xv);
                if (g->ws) {
                    double sc = fabs((double)g->ws[r * g->k + c]);
                    /* a flushed denormal x^ against an infinite value (or the other way round)
                     * is 0 * Inf, a NaN where the reference has an infinity */
                    overflow |= (isinf(wv) || isinf(xv)) &&
                                (fpclassify(xv) == FP_SUBNORMAL || fpclassify(wv) == FP_SUBNORMAL);
                    if (isfinite(sc) && isfinite(xv) && isfinite(wv))
                        fl += fabs((double)wv) + sc * (1.0 + fabs((double)xv));
                }
            }
            if (flush)
                flush[i * g->ldy + r] = (float)(0x1p-125 * fl);
            /* 2^127 marks a sum that may overflow in one order and not the other (an infinite
             * dequantized weight: a scale near the f32 limit, or an infinite one), infinity one
             * with a non-finite input or a NaN weight */
            bound[i * g->ldy + r] = b > 0x1p126 || xs * g->vmax > 0x1p126 || overflow ? 0x1p127f
                                    : nonfinite                                       ? INFINITY
                                                                                      : (float)b;
        }
}

/* One 2:4 row: the bound over its k kept products, x gathered by the reference. */
static void sp24_bound(const kc_gemv *g, float *bound)
{
    double b = 0.0;
    int nonfinite = 0;

    for (int64_t j = 0; j < g->k; j++) {
        double p = fabs((double)g->x[j] * (double)g->w[j]);
        if (isfinite(p))
            b += p;
        else
            nonfinite = 1;
    }
    bound[0] = b > 0x1p126 || g->overflow ? 0x1p127f : nonfinite ? INFINITY : (float)b;
}

/* Call fn as the case says, into out; for the GEMV and 2:4 rules in compare_gemv's layout.
 * Returns the bytes used. */
static size_t run_case(const kc_case *c, kc_fn *fn, uint8_t *out)
{
    if (c->rule == KC_RULE_FAMILY || c->rule == KC_RULE_EXACT)
        return kc_call(c, fn, out);

    const kc_gemv *g = &c->gemv;
    int64_t slots = g->m * g->ldy;
    uint32_t hdr = (uint32_t)slots, kk = (uint32_t)g->k, has_flush = g->ws != NULL;
    size_t used = kc_call(c, fn, out + GEMV_HDR);
    float *bound = (float *)(out + GEMV_HDR + (size_t)slots * 4);

    assert_int_equal(used, (size_t)slots * 4);
    if (c->rule == KC_RULE_GEMV)
        gemv_bounds(g, bound, has_flush ? bound + slots : NULL);
    else
        sp24_bound(g, bound);
    memcpy(out, &hdr, 4);
    memcpy(out + 4, &kk, 4);
    memcpy(out + 8, &has_flush, 4);
    memset(out + 12, 0, GEMV_HDR - 12);
    return GEMV_HDR + (size_t)slots * (has_flush ? 12 : 8);
}

/* ---- the bit-exactness sweep ------------------------------------------------------------------ */

typedef struct {
    t_page_buf x, codes, sbytes, half, absmax;
} k_inputs;

/* Inputs that random data almost never produces. Lengths n % 14 == 3: every
 * even element is +-1, so each block's absmax is exactly 1 and x = v * inv is v itself; the odd
 * elements sit on an NF4 or FP4 threshold or a dyn8 midpoint (formats.md §3, §4, §6.3), or one
 * ulp either side of it. Other n % 7 == 3 lengths: runs of +0, -0 and NaN with a few values of one
 * sign, so that minmax ends at a zero whose sign the reference decides. */
static void fill_boundaries(t_rng *r, float *x, int64_t n)
{
    float sign = (n / 7) % 4 < 2 ? 1.0f : -1.0f;

    for (int64_t i = 0; i < n; i++) {
        uint64_t v = t_next(r);
        if (n % 14 != 3) {
            x[i] = v % 8 < 3 ? 0.0f : v % 8 < 6 ? -0.0f : v % 8 == 6 ? NAN : sign * 1.5f;
            continue;
        }
        if (i % 2 == 0) {
            x[i] = v & 1 ? 1.0f : -1.0f;
            continue;
        }
        float t;
        int j = (int)((v >> 8) % 255);
        switch ((v >> 1) % 3) {
        case 0: t = qs_nf4_thresholds[j % 15]; break;
        case 1: t = (v >> 20) & 1 ? -qs_fp4_thresholds[j % 7] : qs_fp4_thresholds[j % 7]; break;
        default: t = (qs_dyn8_map[j] + qs_dyn8_map[j + 1]) * 0.5f; break;
        }
        x[i] = (v >> 24) % 3 == 0 ? t : nextafterf(t, (v >> 24) % 3 == 1 ? -2.0f : 2.0f);
    }
}

static void make_inputs(k_inputs *b, t_rng *r, int64_t n, int salt)
{
    float *x = b->x.p, *am = b->absmax.p;
    uint8_t *c = b->codes.p, *s = b->sbytes.p;
    uint16_t *h = b->half.p;

    /* Inputs are placed so that element n-1 is the last byte before the guard page. */
    x = (float *)((uint8_t *)b->x.p + (MAX_N - n) * 4);
    am = (float *)((uint8_t *)b->absmax.p + (MAX_N - n) * 4);
    c += MAX_N - n;
    s += MAX_N - n;
    h = (uint16_t *)((uint8_t *)b->half.p + (MAX_N - n) * 2);
    t_fill_mixed(r, x, n, salt ? 0.08 : 0.0);
    if (n % 7 == 3)
        fill_boundaries(r, x, n);
    for (int64_t i = 0; i < n; i++) {
        uint64_t v = t_next(r);
        c[i] = (uint8_t)v;
        s[i] = (v >> 8) % 16 == 0 ? (uint8_t)((v >> 16) % 2 ? 0xFF : 0x00)
               : (v >> 8) % 16 == 1 ? 0x7F : (uint8_t)(100 + (v >> 24) % 40);
        h[i] = (uint16_t)(v >> 32);
        am[i] = (v >> 48) % 32 == 0 ? t_special[(v >> 53) % T_NSPECIAL]
                                    : (float)ldexp(1.0 + t_unif(r), (int)((v >> 40) % 20) - 10);
    }
}

static kc_in view(const k_inputs *b, int64_t n, int variant)
{
    kc_in in;
    in.x = (const float *)((const uint8_t *)b->x.p + (MAX_N - n) * 4);
    in.absmax = (const float *)((const uint8_t *)b->absmax.p + (MAX_N - n) * 4);
    in.codes = (const uint8_t *)b->codes.p + (MAX_N - n);
    in.sbytes = (const uint8_t *)b->sbytes.p + (MAX_N - n);
    in.half = (const uint16_t *)((const uint8_t *)b->half.p + (MAX_N - n) * 2);
    in.n = n;
    in.variant = variant;
    in.typical = 0;
    in.out_bytes = OUT_BYTES;
    return in;
}

/* ---- comparison rules per family ---------------------------------------------------------------- */

/* A family's comparison: the index of the first output byte outside the rule, or -1. */
typedef int64_t k_compare_fn(const uint8_t *got, const uint8_t *want, size_t bytes);

static int64_t compare_exact(const uint8_t *got, const uint8_t *want, size_t bytes)
{
    return t_first_diff(got, want, bytes);
}

/* The tolerance hook of the matmul family: outputs are f32, and a kernel may accumulate a tile in
 * another order than the reference. An element passes if it is bit-identical (NaN payloads and
 * zero signs included), or both are finite with the same sign and either at most MATMUL_MAX_ULP
 * units in the last place apart or within MATMUL_REL relative to the reference (the reference's
 * magnitude, at least MATMUL_ABS_FLOOR, so sums that cancel to near zero compare absolutely).
 * A NaN against a number, or an infinity against anything else, fails. */
#define MATMUL_MAX_ULP 4
#define MATMUL_REL 1e-5
#define MATMUL_ABS_FLOOR 1e-30

static int f32_within(float got, float want)
{
    uint32_t g = t_bits(got), w = t_bits(want);
    if (g == w)
        return 1;
    if (!isfinite(got) || !isfinite(want))
        return 0;
    if ((g ^ w) >> 31) /* opposite signs: only +0 vs -0 or two tiny values */
        return fabs((double)got - (double)want) <= MATMUL_ABS_FLOOR;
    uint32_t ulps = g > w ? g - w : w - g;
    double ref = fabs((double)want) > MATMUL_ABS_FLOOR ? fabs((double)want) : MATMUL_ABS_FLOOR;
    return ulps <= MATMUL_MAX_ULP || fabs((double)got - (double)want) <= MATMUL_REL * ref;
}

static int64_t compare_matmul(const uint8_t *got, const uint8_t *want, size_t bytes)
{
    size_t i = 0;
    for (; i + 4 <= bytes; i += 4) {
        float g, w;
        memcpy(&g, got + i, 4);
        memcpy(&w, want + i, 4);
        if (!f32_within(g, w))
            return (int64_t)i;
    }
    int64_t d = t_first_diff(got + i, want + i, bytes - i); /* a byte tail is exact */
    return d < 0 ? -1 : (int64_t)i + d;
}

/* The GEMV slots' rule (run_case's layout): y within its error scale of the reference,
 * |got - want| <= (k/16 + 8) * 2^-23 * sum|x w| (+ the flush term of bf16 activations, stored
 * after the scales where the header's third word is 1): both sum k products in 16 lanes of about
 * k/16 terms plus a short tree and one scale per segment, in different orders and with or without
 * FMA, each within about (k/16 + 4) * 2^-24 of that scale. A NaN matches only a NaN and an
 * infinity only itself; where the scale is past 2^126 (an f32 partial sum may overflow in one
 * order and not in the other) anything passes, and where it is not finite (an infinite or NaN
 * input) NaN must meet NaN, infinity the same infinity, and two finite results pass. The
 * header, the scales and every byte after them must be identical (canaries included). */
static int64_t compare_gemv(const uint8_t *got, const uint8_t *want, size_t bytes)
{
    uint32_t slots, k, has_flush;
    memcpy(&slots, want, 4);
    memcpy(&k, want + 4, 4);
    memcpy(&has_flush, want + 8, 4);
    if (memcmp(got, want, GEMV_HDR) != 0)
        return 0;
    for (uint32_t i = 0; i < slots; i++) {
        float g, w, b, fl = 0.0f;
        size_t at = GEMV_HDR + (size_t)i * 4;
        memcpy(&g, got + at, 4);
        memcpy(&w, want + at, 4);
        memcpy(&b, want + GEMV_HDR + (size_t)slots * 4 + (size_t)i * 4, 4);
        if (has_flush)
            memcpy(&fl, want + GEMV_HDR + (size_t)slots * 8 + (size_t)i * 4, 4);
        if (t_bits(g) == t_bits(w) || (isfinite(b) && b > 0x1p126f))
            continue;
        if (!isfinite(b)) {
            if (isnan(g) != isnan(w) || ((isinf(g) || isinf(w)) && g != w)) {
                print_message("  y slot %u: got %g, want %g (an input is not finite)\n", i, g, w);
                return (int64_t)at;
            }
            continue;
        }
        if (!isfinite(g) || !isfinite(w) ||
            fabs((double)g - (double)w) >
                ((double)k / 16.0 + 8.0) * 0x1p-23 * (double)b + 0x1p-140 + (double)fl) {
            print_message("  y slot %u: got %.9g, want %.9g, sum|x w| %.9g, k %u\n", i, g, w, b, k);
            return (int64_t)at;
        }
    }
    size_t tail = GEMV_HDR + (size_t)slots * 4;
    int64_t d = t_first_diff(got + tail, want + tail, bytes - tail);
    return d < 0 ? -1 : (int64_t)tail + d;
}

static k_compare_fn *const family_compare[QS_FAMILY_COUNT] = {
    [QS_FAMILY_QUANT] = compare_exact,  [QS_FAMILY_REDUCE] = compare_exact,
    [QS_FAMILY_HIST] = compare_exact,   [QS_FAMILY_SPARSE] = compare_exact,
    [QS_FAMILY_MATMUL] = compare_matmul,
};

/* ---- the sweep ---------------------------------------------------------------------------------- */

/* Canary bytes compared past a call's output: an overrun shows in that call's comparison. */
#define OUT_MARGIN 256

/* The output bytes a call compares and the next call resets: what it used and OUT_MARGIN, at most
 * the buffer. Not the whole OUT_BYTES buffer for every call: under qemu that made up two thirds
 * of test_kernels' time. A stray write farther out stays in bytes never reset, which the sweep
 * checks at its end. */
static size_t out_window(size_t used, size_t bytes)
{
    return used + OUT_MARGIN < bytes ? used + OUT_MARGIN : bytes;
}

/* 1 if bytes [from, bytes) of b and its rear guard still hold the canary. */
static int canary_from(const t_buf *b, size_t from)
{
    for (size_t i = T_GUARD + from; i < b->bytes + 2 * T_GUARD; i++)
        if (b->base[i] != T_CANARY)
            return 0;
    return 1;
}

/* Compare one implementation with its reference over all lengths and variants; returns the
 * number of comparisons made. */
static int64_t sweep(const struct qs_kernel_entry *impl, k_inputs *bufs, t_buf *o_ref,
                     t_buf *o_impl, int quick)
{
    const struct qs_kernel_entry *ref = test_ref_entry(impl->slot);
    static const int64_t big[] = {2047, 2048, 4095, 4096, 4097, 8191, 12345, MAX_N};
    t_rng r = {0x5EED0000ull + (uint64_t)impl->slot};
    size_t dirty = o_ref->bytes, win = 0; /* the bytes the last call may have written */
    kc_rule rule = kc_slot_rule(impl->slot);
    k_compare_fn *compare = rule == KC_RULE_EXACT    ? compare_exact
                            : rule != KC_RULE_FAMILY ? compare_gemv
                                                     : family_compare[impl->family];
    int64_t compared = 0;

    assert_non_null(ref);
    for (int64_t k = 0; k <= 1100 + (int64_t)(sizeof big / sizeof big[0]); k++) {
        int64_t n = k <= 1100 ? k : big[k - 1101];
        if (quick && !(n < 4 || n == 33 || n == 1025 || n == MAX_N))
            continue;
        /* a GEMV call does up to 8 x 6 dot products of n / 8 ... n: above 160, every 7th length
         * (the tails mod 16 and 64 still all come round) and the large ones */
        if (rule == KC_RULE_GEMV && n > 160 && k <= 1100 && n % 7 != 0)
            continue;
        make_inputs(bufs, &r, n, (int)(k % 3 != 0));
        /* Three of the twelve parameter variants per length, rotating, and all of them for the
         * first lengths; together every (variant, tail) pair class is covered. */
        for (int j = 0; j < (n < 40 || quick ? KC_VARIANTS : 3); j++) {
            int variant = (int)((n * 5 + j) % KC_VARIANTS);
            kc_in in = view(bufs, n, variant);
            kc_case c;
            int set = kc_setup(&c, impl->slot, &in);
            if (set == 0)
                fail_msg("slot %s has no entry in tests/harness/kernel_call.c",
                         qs_slot_name(impl->slot));
            assert_int_equal(set, 1);
            memset(o_ref->base, T_CANARY, T_GUARD + dirty);
            memset(o_impl->base, T_CANARY, T_GUARD + dirty);
            size_t used_r = run_case(&c, ref->fn, o_ref->p);
            size_t used_i = run_case(&c, impl->fn, o_impl->p);
            kc_release(&c);
            assert_int_equal(used_r, used_i);
            dirty = win = out_window(used_r, o_ref->bytes);
            /* the margin too: bytes past `used` must stay canary in both */
            int64_t d = compare(o_impl->p, o_ref->p, win);
            if (d >= 0)
                fail_msg("%s vs %s: n=%lld variant=%d: first differing output byte %lld "
                         "(got 0x%02x, want 0x%02x); x[%lld]=0x%08x",
                         impl->name, ref->name, (long long)n, variant, (long long)d,
                         ((uint8_t *)o_impl->p)[d], ((uint8_t *)o_ref->p)[d],
                         (long long)(d / 4 < n ? d / 4 : 0),
                         n ? t_bits(in.x[d / 4 < n ? d / 4 : 0]) : 0u);
            assert_true(t_buf_guards_ok(o_impl));
            compared++;
        }
    }
    /* past the last window: a stray write of any call beyond its margin is still there */
    assert_true(canary_from(o_ref, win));
    assert_true(canary_from(o_impl, win));
    return compared;
}

/* Buffers shared by the tests of the kernel group (allocated by its setup). */
static k_inputs g_bufs;
static t_buf g_out_ref, g_out_impl;

static int kernels_setup(void **state)
{
    (void)state;
    g_bufs.x = t_page_buf_new(MAX_N * 4);
    g_bufs.absmax = t_page_buf_new(MAX_N * 4);
    g_bufs.codes = t_page_buf_new(MAX_N);
    g_bufs.sbytes = t_page_buf_new(MAX_N);
    g_bufs.half = t_page_buf_new(MAX_N * 2);
    g_out_ref = t_buf_new(OUT_BYTES);
    g_out_impl = t_buf_new(OUT_BYTES);
    return 0;
}

static int kernels_teardown(void **state)
{
    (void)state;
    t_page_buf_free(&g_bufs.x);
    t_page_buf_free(&g_bufs.absmax);
    t_page_buf_free(&g_bufs.codes);
    t_page_buf_free(&g_bufs.sbytes);
    t_page_buf_free(&g_bufs.half);
    t_buf_free(&g_out_ref);
    t_buf_free(&g_out_impl);
    return 0;
}

/* One registry entry (the test's initial state): an implementation against its reference, or the
 * reference against itself (a quick sweep that exercises its call and the guard pages). */
/* ---- exhaustive dequantize proofs ----------------------------------------------------------- */

/* The i-th of the 254 E4M3 codes that are not NaN (0x7F, 0xFF excluded), cyclically. */
static uint8_t nonnan_e4m3(int64_t i)
{
    int64_t k = i % 254;
    return (uint8_t)(k < 127 ? k : k + 1);
}

/* Compare n floats of impl and ref bit for bit; fail with the first differing value. */
static void exh_compare(const struct qs_kernel_entry *e, const float *got, const float *want,
                        int64_t n, const char *what, double param)
{
    for (int64_t i = 0; i < n; i++)
        if (t_bits(got[i]) != t_bits(want[i]))
            fail_msg("%s: %s %g: value %lld: got 0x%08x, want 0x%08x", e->name, what, param,
                     (long long)i, t_bits(got[i]), t_bits(want[i]));
}

/*
 * The dequantize kernels that leave out the NaN fix-up on some paths (the result is canonical
 * without it) or decode block scales in vectors, proven over every input they can see: MXFP8 and
 * MXFP4 every code (byte) under every scale byte, NVFP4 every code byte under every scale byte for
 * a list of tensor scales (finite, huge, subnormal, zero, Inf, NaN with a payload), E4M3 every
 * code under scales of every f32 exponent, both signs, and the special ones. Blocks are laid out so
 * that the vector groups of 16 blocks hold both ordinary and rare scale bytes.
 */
static void exhaustive_dequant(const struct qs_kernel_entry *e)
{
    const struct qs_kernel_entry *ref = test_ref_entry(e->slot);
    enum { N = 256 * 512 };
    uint8_t *codes = malloc(N), *sb = malloc(N / 16);
    float *got = malloc(N * sizeof(float)), *want = malloc(N * sizeof(float));

    assert_true(codes && sb && got && want);
    switch (e->slot) {
    case QS_SLOT_mxfp8_dequant:
        /* 8 blocks of 32 = all 256 codes, per scale byte; then the 254 non-NaN codes in 8 blocks
         * (none of 0x7F, 0xFF in a 64-byte step: the kernels' path without the NaN-code fix-up) */
        for (int nonan = 0; nonan < 2; nonan++) {
            for (int64_t i = 0; i < 65536; i++)
                codes[i] = nonan ? nonnan_e4m3(i) : (uint8_t)i;
            for (int64_t b = 0; b < 2048; b++)
                sb[b] = (uint8_t)(b / 8);
            ((qs_mxfp8_dequant_fn *)e->fn)(codes, sb, 65536, got);
            ((qs_mxfp8_dequant_fn *)ref->fn)(codes, sb, 65536, want);
            exh_compare(e, got, want, 65536, "codes x scale bytes, without NaN codes", nonan);
        }
        break;
    case QS_SLOT_mxfp4_dequant: /* 16 blocks of 16 bytes = all 256 code pairs, per scale byte */
        for (int64_t i = 0; i < 65536; i++)
            codes[i] = (uint8_t)i;
        for (int64_t b = 0; b < 4096; b++)
            sb[b] = (uint8_t)(b / 16);
        ((qs_mxfp4_dequant_fn *)e->fn)(codes, sb, 131072, got);
        ((qs_mxfp4_dequant_fn *)ref->fn)(codes, sb, 131072, want);
        exh_compare(e, got, want, 131072, "all codes x scale bytes", 0.0);
        break;
    case QS_SLOT_nvfp4_dequant: { /* 32 blocks of 8 bytes = all 256 code pairs, per scale byte */
        const float sg[] = {1.0f, 1.0f / 2688.0f, 3.0e-39f, 1e30f, 0x1.fffffep127f, 0.0f,
                            -2.0f, INFINITY, t_f32_from_bits(0xFFC00005u), NAN, 0x1p-149f};
        for (int64_t i = 0; i < 65536; i++)
            codes[i] = (uint8_t)i;
        for (int64_t b = 0; b < 8192; b++)
            sb[b] = (uint8_t)(b / 32);
        for (size_t k = 0; k < sizeof sg / sizeof sg[0]; k++) {
            ((qs_nvfp4_dequant_fn *)e->fn)(codes, sb, 131072, sg[k], got);
            ((qs_nvfp4_dequant_fn *)ref->fn)(codes, sb, 131072, sg[k], want);
            exh_compare(e, got, want, 131072, "all codes x scale bytes, s_global", sg[k]);
        }
        break;
    }
    case QS_SLOT_e4m3_dequant: /* all 256 codes (twice, so a 64-value step sees every code), then
                                  * the 254 non-NaN ones (steps without a NaN code) */
        for (int64_t i = 0; i < 1024; i++)
            codes[i] = i < 512 ? (uint8_t)(i * 7) : nonnan_e4m3(i - 512);
        for (uint32_t x = 0; x < (256 * 2 + 8) * 2; x++) {
            static const uint32_t special[] = {0x00000000u, 0x80000000u, 0x7F800000u, 0xFF800000u,
                                               0x7FC00000u, 0xFFC00005u, 0x7F7FFFFFu, 0x00000001u};
            uint32_t y = x % 520, half = x / 520;
            uint32_t bits = y < 512 ? (y & 1u) << 31 | (y >> 1) << 23 | 0x2AAAAAu : special[y - 512];
            float scale = t_f32_from_bits(bits);
            ((qs_e4m3_dequant_fn *)e->fn)(codes + 512 * half, 512, scale, got);
            ((qs_e4m3_dequant_fn *)ref->fn)(codes + 512 * half, 512, scale, want);
            exh_compare(e, got, want, 512, half ? "non-NaN codes, scale" : "all codes, scale", scale);
        }
        break;
    default: break;
    }
    free(codes);
    free(sb);
    free(got);
    free(want);
}

static void test_entry(void **state)
{
    const struct qs_kernel_entry *e = *state;
    uint32_t cpu = qs_cpu_isa();

    if (!kc_entry_runs(e)) {
        print_message("  %s needs ISA bits 0x%x, this CPU has 0x%x (AMX: the OS may refuse the "
                      "tile state)\n",
                      e->name, e->isa, cpu);
        skip();
    }
    int64_t c = sweep(e, &g_bufs, &g_out_ref, &g_out_impl, e->isa == 0);
    assert_true(c > 0);
    if (e->isa != 0)
        exhaustive_dequant(e);
    print_message("  %-34s %s vs ref: %lld comparisons\n", e->name,
                  e->family == QS_FAMILY_MATMUL && kc_slot_rule(e->slot) != KC_RULE_EXACT
                      ? "within tolerance"
                      : "bit-exact",
                  (long long)c);
}

/* ---- the tier table ----------------------------------------------------------------------------- */

static int tier_by_name(const char *name, qs_isa_tier *out)
{
    for (int32_t i = 0; i < qs_isa_tier_count(); i++) {
        assert_int_equal(qs_isa_tier_info(i, out), QS_OK);
        if (strcmp(out->name, name) == 0)
            return i;
    }
    return -1;
}

/* The entry's home tier: the first tier whose `allowed` holds all its bits (-1: none). */
static int home_tier(const struct qs_kernel_entry *e)
{
    qs_isa_tier t;
    for (int32_t i = 0; i < qs_isa_tier_count(); i++) {
        assert_int_equal(qs_isa_tier_info(i, &t), QS_OK);
        if ((e->isa & ~t.allowed) == 0)
            return i;
    }
    return -1;
}

/* 1 if `name` is an item of the comma-separated `list`. */
static int in_list(const char *list, const char *name)
{
    size_t len = strlen(name);
    for (const char *p = list; p && *p;) {
        size_t l = strcspn(p, ",");
        if (l == len && strncmp(p, name, len) == 0)
            return 1;
        p += l + (p[l] == ',');
    }
    return 0;
}

/* The id isa_tiers.inc's header promises for a tier name: the name without its dashes and dots
 * ("armv82dotprod" for "armv8.2-dotprod"), "ref" for scalar. */
static void id_of_name(const char *name, char *id, size_t size)
{
    size_t k = 0;
    if (strcmp(name, "scalar") == 0)
        name = "ref";
    for (const char *c = name; *c && k + 1 < size; c++)
        if (*c != '-' && *c != '.')
            id[k++] = *c;
    id[k] = '\0';
}

#if defined(QS_HAVE_X86_KERNELS)
#define HERE_ARCH "x86_64"
#elif defined(QS_HAVE_ARM_KERNELS)
#define HERE_ARCH "aarch64"
#else
#define HERE_ARCH "any"
#endif

/* Every tier: a unique name, a known arch, required within allowed, bits of its own architecture
 * only, availability as the CPU's bits say, forcing it applies exactly its mask (clamped to the
 * CPU) and a context forced to an available tier is named after it. */
static void test_tier_table(void **state)
{
    (void)state;
    uint32_t cpu = qs_cpu_isa();
    qs_isa_tier t, u;
    const char *saved = getenv("QS_FORCE_ISA");
    char keep[64] = "";

    if (saved)
        snprintf(keep, sizeof keep, "%s", saved);
    assert_true(qs_isa_tier_count() >= 2);
    assert_int_equal(qs_isa_tier_info(0, &t), QS_OK);
    assert_string_equal(t.name, "scalar");
    assert_int_equal(t.required, 0);
    assert_int_equal(t.allowed, 0);
    assert_int_equal(t.available, 1);
    assert_int_equal(qs_isa_tier_info(-1, &t), QS_ERR_INVALID_ARG);
    assert_int_equal(qs_isa_tier_info(qs_isa_tier_count(), &t), QS_ERR_INVALID_ARG);
    assert_int_equal(qs_isa_tier_info(0, NULL), QS_ERR_INVALID_ARG);
    for (int32_t i = 0; i < qs_isa_tier_count(); i++) {
        assert_int_equal(qs_isa_tier_info(i, &t), QS_OK);
        for (int32_t j = 0; j < i; j++) {
            assert_int_equal(qs_isa_tier_info(j, &u), QS_OK);
            assert_string_not_equal(t.name, u.name);
        }
        assert_int_equal(t.required & ~t.allowed, 0);
        assert_int_equal(t.reserved, 0);
        if (strcmp(t.arch, "x86_64") == 0)
            assert_int_equal(t.allowed & ~QS_ISA_X86_ALL, 0);
        else if (strcmp(t.arch, "aarch64") == 0)
            assert_int_equal(t.allowed & ~QS_ISA_ARM_ALL, 0);
        else
            assert_string_equal(t.arch, "any");
        assert_int_equal(t.available, (cpu & t.required) == t.required);
        for (int b = 0; b < 32; b++)
            if (t.allowed & (1u << b))
                assert_non_null(qs_isa_name(1u << b));

        qs_ctx *ctx;
        setenv("QS_FORCE_ISA", t.name, 1);
        assert_int_equal(qs_ctx_create(NULL, &ctx), QS_OK);
        assert_int_equal(qs_ctx_isa(ctx), cpu & t.allowed);
        if (t.available)
            assert_string_equal(qs_ctx_isa_name(ctx), t.name);
        qs_ctx_destroy(ctx);
    }
    if (saved)
        setenv("QS_FORCE_ISA", keep, 1);
    else
        unsetenv("QS_FORCE_ISA");

    /* What tests/meson.build parsed from isa_tiers.inc agrees with the C table. */
    if (saved)
        assert_true(tier_by_name(keep, &t) >= 0);
    const char *reg = getenv("QS_TEST_TIERS");
    if (reg) {
        char list[256], *tok, *save = NULL;
        snprintf(list, sizeof list, "%s", reg);
        for (tok = strtok_r(list, ",", &save); tok; tok = strtok_r(NULL, ",", &save))
            assert_true(tier_by_name(tok, &t) >= 0);
        /* ... and is exactly the list the table gives for this build: the tiers with suite 1 whose
         * arch is "any" or the one whose kernels are compiled in */
        static const struct {
            const char *name, *arch;
            int suite;
        } rows[] = {
#define QS_TIER(name, id, arch, suite, required, allowed) {name, arch, suite},
#include "core/isa_tiers.inc"
#undef QS_TIER
        };
        const char *here = HERE_ARCH;
        char want[256] = "";
        for (size_t i = 0; i < sizeof rows / sizeof rows[0]; i++)
            if (rows[i].suite && (!strcmp(rows[i].arch, "any") || !strcmp(rows[i].arch, here)))
                snprintf(want + strlen(want), sizeof want - strlen(want), "%s%s",
                         *want ? "," : "", rows[i].name);
        assert_string_equal(reg, want);
    }
#if defined(__x86_64__)
    /* The AMX permission helper agrees with detection (XCR0 tile state implies a kernel that
     * grants it). */
    assert_int_equal(qs_x86_amx_request(), (cpu & QS_ISA_AMX_TILE) != 0);
#endif
}

/* Every tier's id (isa_tiers.inc): [a-z0-9] only, unique, its name without dashes and dots
 * ("ref" for scalar), and the key by which a kernel's name finds the tier; the kernel libraries
 * the build made (QS_TEST_TIER_LIBS: src/x86/meson.build, src/arm/meson.build) are named by ids of
 * tiers of this build's architecture. */
static void test_tier_ids(void **state)
{
    (void)state;
    char want[64], name[96];

    id_of_name("armv8.2-dotprod", want, sizeof want); /* a dotted name, as the rule reads it */
    assert_string_equal(want, "armv82dotprod");
    assert_null(qs_isa_tier_id(-1));
    assert_null(qs_isa_tier_id(qs_isa_tier_count()));
    assert_string_equal(qs_isa_tier_id(0), "ref");
    for (int32_t i = 0; i < qs_isa_tier_count(); i++) {
        qs_isa_tier t;
        const char *id = qs_isa_tier_id(i);
        assert_int_equal(qs_isa_tier_info(i, &t), QS_OK);
        assert_non_null(id);
        assert_true(*id != '\0');
        for (const char *c = id; *c; c++)
            if (!((*c >= 'a' && *c <= 'z') || (*c >= '0' && *c <= '9')))
                fail_msg("tier %s: id '%s' has '%c' (isa_tiers.inc: [a-z0-9] only)", t.name, id,
                         *c);
        id_of_name(t.name, want, sizeof want);
        if (strcmp(id, want) != 0)
            fail_msg("tier %s: id '%s', but its name says '%s' (isa_tiers.inc)", t.name, id, want);
        for (int32_t j = 0; j < i; j++)
            assert_string_not_equal(id, qs_isa_tier_id(j));
        snprintf(name, sizeof name, "qs_nf4_quant__%s", id);
        assert_int_equal(qs_isa_tier_of_kernel(name), i);
        snprintf(name, sizeof name, "qs_mm_w8a8__%s_4x4x64", id);
        assert_int_equal(qs_isa_tier_of_kernel(name), i);
        snprintf(name, sizeof name, "qs_nf4_quant__%sx", id); /* an id plus more is no id */
        assert_int_equal(qs_isa_tier_of_kernel(name), -1);
    }
    assert_int_equal(qs_isa_tier_of_kernel("qs_mm_w8a8__avx512vnn_4x4x64"), -1);
    assert_int_equal(qs_isa_tier_of_kernel("qs_nf4_quant__"), -1);
    assert_int_equal(qs_isa_tier_of_kernel("qs_nf4_quant_avx2"), -1);
    assert_int_equal(qs_isa_tier_of_kernel(NULL), -1);

    const char *libs = getenv("QS_TEST_TIER_LIBS");
    if (libs) {
        char list[256], *tok, *save = NULL;
        snprintf(list, sizeof list, "%s", libs);
        for (tok = strtok_r(list, ",", &save); tok; tok = strtok_r(NULL, ",", &save)) {
            qs_isa_tier t;
            snprintf(name, sizeof name, "qs_x__%s", tok);
            int32_t i = qs_isa_tier_of_kernel(name);
            if (i <= 0)
                fail_msg("the build made kernel library qs_%s, but no tier has the id '%s'", tok,
                         tok);
            assert_int_equal(qs_isa_tier_info(i, &t), QS_OK);
            if (strcmp(t.arch, HERE_ARCH) != 0)
                fail_msg("the build made kernel library qs_%s, but tier %s is for %s, not %s",
                         tok, t.name, t.arch, HERE_ARCH);
        }
    }
}

/* ---- the registry --------------------------------------------------------------------------- */

/* Every slot has exactly one __ref entry (rank 0, no bits, no shape minimums); names follow
 * qs_<slot>__<tier id>[_<tile>] with the tier's bits: required <= bits <= allowed, and the build
 * made that tier's kernel library; other entries rank above 0; ranks are unique per slot; a
 * slot's entries share a family; only matmul entries carry tile metadata; and every entry has a
 * home tier that tests/meson.build registers. */
static void test_registry_structure(void **state)
{
    (void)state;
    int32_t count;
    const struct qs_kernel_entry *e = qs_kernel_entries(&count);
    int refs[QS_SLOT_COUNT] = {0};
    const char *reg = getenv("QS_TEST_TIERS"), *libs = getenv("QS_TEST_TIER_LIBS");

    for (int32_t i = 0; i < count; i++) {
        char prefix[64];
        qs_isa_tier t;
        assert_true(e[i].slot >= 0 && e[i].slot < QS_SLOT_COUNT);
        assert_true(e[i].family >= 0 && e[i].family < QS_FAMILY_COUNT);
        assert_int_equal(e[i].family, qs_slot_family(e[i].slot));
        snprintf(prefix, sizeof prefix, "qs_%s__", qs_slot_name(e[i].slot));
        assert_memory_equal(e[i].name, prefix, strlen(prefix));
        int32_t named = qs_isa_tier_of_kernel(e[i].name);
        if (named < 0)
            fail_msg("%s: the suffix after '__' is the id of no tier (src/core/isa_tiers.inc)",
                     e[i].name);
        assert_int_equal(qs_isa_tier_info(named, &t), QS_OK);
        if ((t.required & ~e[i].isa) != 0 || (e[i].isa & ~t.allowed) != 0)
            fail_msg("%s: bits 0x%x do not fit tier %s (required 0x%x, allowed 0x%x)", e[i].name,
                     e[i].isa, t.name, t.required, t.allowed);
        if (e[i].isa == 0) {
            refs[e[i].slot]++;
            assert_string_equal(e[i].name + strlen(prefix), "ref");
            assert_int_equal(e[i].rank, 0);
        } else {
            assert_true(e[i].rank > 0);
            if (libs && !in_list(libs, qs_isa_tier_id(named)))
                fail_msg("%s: the build made no kernel library qs_%s for tier %s (its sources "
                         "go in src/x86/meson.build or src/arm/meson.build under '%s')",
                         e[i].name, qs_isa_tier_id(named), t.name, qs_isa_tier_id(named));
        }
        /* the reference qualifies wherever another entry of its slot does, so a slot never
         * runs out of kernels for a shape (mm_gemm_f32: every entry's min_m is the GEMM path's
         * QS_MATMUL_GEMM_MIN_M, which plan.c reads from the registry) */
        for (int32_t j = 0; j < count; j++)
            if (e[j].slot == e[i].slot && e[i].isa == 0)
                assert_true(e[i].tile.min_m <= e[j].tile.min_m &&
                            e[i].tile.min_n <= e[j].tile.min_n &&
                            e[i].tile.min_k <= e[j].tile.min_k);
        if (e[i].slot == QS_SLOT_mm_gemm_f32) {
            assert_int_equal(e[i].tile.min_m, QS_MATMUL_GEMM_MIN_M);
            assert_true(e[i].tile.nr >= 1 && e[i].tile.nr <= QS_MM_GEMM_NR_MAX);
        }
        if (e[i].family != QS_FAMILY_MATMUL)
            assert_true(e[i].tile.mr == 0 && e[i].tile.nr == 0 && e[i].tile.kr == 0 &&
                        e[i].tile.min_m == 0 && e[i].tile.min_n == 0 && e[i].tile.min_k == 0);
        for (int32_t j = 0; j < i; j++)
            if (e[j].slot == e[i].slot && e[j].rank == e[i].rank)
                fail_msg("%s and %s share rank %d", e[j].name, e[i].name, e[i].rank);
        int home = home_tier(&e[i]);
        if (home < 0)
            fail_msg("%s: no tier allows bits 0x%x; add one to src/core/isa_tiers.inc",
                     e[i].name, e[i].isa);
        assert_int_equal(qs_isa_tier_info(home, &t), QS_OK);
        if (reg && !in_list(reg, t.name))
            fail_msg("%s would be tested under tier %s, which tests/meson.build does not "
                     "register (suite 0 in src/core/isa_tiers.inc)", e[i].name, t.name);
    }
    for (int s = 0; s < QS_SLOT_COUNT; s++)
        assert_int_equal(refs[s], 1);
}

/* The selection rule on a made-up matmul list with non-nested features and shape minimums. */
static void test_selection_rule(void **state)
{
    (void)state;
    static const struct qs_kernel_entry list[] = {
        {0, QS_FAMILY_MATMUL, 0, 0, NULL, "mm__ref", {1, 1, 1, 0, 0, 0, QS_PACK_NONE, QS_ACT_F32}},
        {0, QS_FAMILY_MATMUL, 20, QS_ISA_AVX2, NULL, "mm__avx2_1x8x1",
         {1, 8, 1, 1, 0, 0, QS_PACK_NONE, QS_ACT_F32}},
        {0, QS_FAMILY_MATMUL, 25, QS_ISA_AVX2 | QS_ISA_AVX_VNNI, NULL, "mm__avxvnni_4x8x4",
         {4, 8, 4, 4, 0, 0, QS_PACK_B, QS_ACT_INT8}},
        {0, QS_FAMILY_MATMUL, 30, QS_ISA_AVX2 | QS_ISA_AVX512, NULL, "mm__avx512_1x16x1",
         {1, 16, 1, 1, 0, 0, QS_PACK_NONE, QS_ACT_F32}},
        {0, QS_FAMILY_MATMUL, 32, QS_ISA_AVX2 | QS_ISA_AVX512, NULL, "mm__avx512_8x32x1",
         {8, 32, 1, 8, 32, 0, QS_PACK_B, QS_ACT_F32}},
        {0, QS_FAMILY_MATMUL, 40, QS_ISA_AVX2 | QS_ISA_AVX512 | QS_ISA_AMX_TILE | QS_ISA_AMX_INT8,
         NULL, "mm__amx_16x16x64", {16, 16, 64, 16, 16, 64, QS_PACK_AB, QS_ACT_INT8}},
        {1, QS_FAMILY_MATMUL, 0, 0, NULL, "other__ref", {0, 0, 0, 0, 0, 0, 0, 0}},
    };
    const int32_t n = (int32_t)(sizeof list / sizeof list[0]);
    const uint32_t avx512 = QS_ISA_AVX2 | QS_ISA_AVX512, amx = avx512 | QS_ISA_AMX_TILE |
                                                              QS_ISA_AMX_INT8;
    static const struct {
        uint32_t isa;
        int64_t m, nn, k;
        const char *want;
    } cases[] = {
        {0, 1000, 1000, 1000, "mm__ref"},
        {QS_ISA_AVX2, 0, 9, 9, "mm__ref"}, /* M = 0 meets only the reference */
        {QS_ISA_AVX2, 1, 9, 9, "mm__avx2_1x8x1"},
        {QS_ISA_AVX2 | QS_ISA_AVX_VNNI, 3, 9, 9, "mm__avx2_1x8x1"},
        {QS_ISA_AVX2 | QS_ISA_AVX_VNNI, 4, 9, 9, "mm__avxvnni_4x8x4"},
        {QS_ISA_AVX_VNNI, 4, 9, 9, "mm__ref"}, /* a set: VNNI bits without AVX2 do not do */
        {avx512, 1, 100, 100, "mm__avx512_1x16x1"},
        {avx512, 8, 31, 100, "mm__avx512_1x16x1"}, /* N below the tiled kernel's minimum */
        {avx512, 8, 32, 100, "mm__avx512_8x32x1"},
        {avx512 | QS_ISA_AVX_VNNI, 8, 32, 100, "mm__avx512_8x32x1"}, /* rank decides */
        {amx, 16, 16, 63, "mm__avx512_1x16x1"},                     /* K too small for AMX */
        {amx, 16, 16, 64, "mm__amx_16x16x64"},
        {amx & ~QS_ISA_AMX_INT8, 16, 16, 64, "mm__avx512_1x16x1"},
        {QS_ISA_ALL, 1, 1, 1, "mm__avx512_1x16x1"},
    };
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
        const struct qs_kernel_entry *got =
            qs_kernel_select(list, n, 0, cases[i].isa, cases[i].m, cases[i].nn, cases[i].k);
        assert_non_null(got);
        if (strcmp(got->name, cases[i].want) != 0)
            fail_msg("case %zu: isa 0x%x m=%lld n=%lld k=%lld: got %s, want %s", i, cases[i].isa,
                     (long long)cases[i].m, (long long)cases[i].nn, (long long)cases[i].k,
                     got->name, cases[i].want);
    }
    assert_string_equal(qs_kernel_select(list, n, 1, QS_ISA_ALL, 5, 5, 5)->name, "other__ref");
    assert_null(qs_kernel_select(list, n, 2, QS_ISA_ALL, 5, 5, 5));
    assert_null(qs_kernel_select(list, 0, 0, QS_ISA_ALL, 5, 5, 5));
}

/* A context's table is the selection rule applied to the registry, for every tier's mask. */
static void test_context_table_follows_rule(void **state)
{
    (void)state;
    int32_t count;
    const struct qs_kernel_entry *e = qs_kernel_entries(&count);
    qs_isa_tier t;

    for (int32_t i = 0; i <= qs_isa_tier_count(); i++) {
        qs_ctx_params p;
        qs_ctx *ctx;
        qs_ctx_params_init(&p);
        if (i < qs_isa_tier_count()) {
            assert_int_equal(qs_isa_tier_info(i, &t), QS_OK);
            p.isa_mask = t.allowed;
        }
        assert_int_equal(qs_ctx_create(&p, &ctx), QS_OK);
        for (int32_t s = 0; s < qs_ctx_kernel_count(ctx); s++) {
            const char *slot, *impl;
            assert_int_equal(qs_ctx_kernel_info(ctx, s, &slot, &impl), QS_OK);
            const struct qs_kernel_entry *want =
                qs_kernel_select(e, count, s, qs_ctx_isa(ctx), INT64_MAX, INT64_MAX, INT64_MAX);
            assert_non_null(want);
            assert_string_equal(impl, want->name);
            /* the smallest problem the chosen entry takes gets it too */
            assert_ptr_equal(qs_ctx_kernel_select(ctx, s,
                                                  want->tile.min_m > 1 ? want->tile.min_m : 1,
                                                  want->tile.min_n > 1 ? want->tile.min_n : 1,
                                                  want->tile.min_k > 1 ? want->tile.min_k : 1),
                             want);
        }
        qs_ctx_destroy(ctx);
    }
}

/* The comparison routines must be able to fail: one flipped bit is reported at its index. */
static void test_comparison_detects_one_bit(void **state)
{
    (void)state;
    uint8_t a[300], b[300];
    for (int i = 0; i < 300; i++)
        a[i] = b[i] = (uint8_t)i;
    assert_int_equal(t_first_diff(a, b, sizeof a), -1);
    for (int i = 0; i < 300; i += 37) {
        b[i] ^= 0x10;
        assert_int_equal(t_first_diff(a, b, sizeof a), i);
        assert_int_equal(compare_exact(a, b, sizeof a), i);
        assert_int_equal(t_check_bytes("negative test", a, b, sizeof a, 0), 0);
        b[i] ^= 0x10;
    }
}

/* The matmul tolerance: what passes and what fails, at the element it fails. */
static void test_matmul_tolerance(void **state)
{
    (void)state;
    float want[8] = {1.0f, -3.5f, 1e-38f, 0.0f, 1e30f, INFINITY, NAN, 2.0f};
    float got[8];
    uint8_t tail_a[9] = {0}, tail_b[9] = {0};

    memcpy(got, want, sizeof got);
    assert_int_equal(compare_matmul((uint8_t *)got, (uint8_t *)want, sizeof got), -1);
    got[0] = t_f32_from_bits(t_bits(1.0f) + MATMUL_MAX_ULP); /* at the ulp bound */
    got[1] = -3.5f * (1.0f + 5e-6f);                          /* inside the relative bound */
    got[3] = -0.0f;                                           /* zero sign */
    assert_int_equal(compare_matmul((uint8_t *)got, (uint8_t *)want, sizeof got), -1);
    static const struct {
        int at;
        float v;
    } bad[] = {
        {1, -3.5f * (1.0f + 1e-4f)}, /* beyond both bounds */
        {4, -1e30f},                 /* sign */
        {5, 3.4e38f},                /* an infinity against a number */
        {6, 0.0f},                   /* a NaN against a number */
        {7, NAN},
    };
    for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) {
        float g[8];
        memcpy(g, want, sizeof g);
        g[bad[i].at] = bad[i].v;
        assert_int_equal(compare_matmul((uint8_t *)g, (uint8_t *)want, sizeof g), 4 * bad[i].at);
    }
    got[0] = t_f32_from_bits(t_bits(1.0f) + 200); /* 200 ulp of 1.0 is 2.4e-5 relative */
    assert_int_equal(compare_matmul((uint8_t *)got, (uint8_t *)want, sizeof got), 0);
    tail_b[8] = 1; /* bytes after the last whole f32 compare exactly */
    assert_int_equal(compare_matmul(tail_a, tail_b, sizeof tail_a), 8);
}

/* The context runs the best kernel its ISA allows; forcing a level above the CPU is clamped. */
static void test_dispatch_and_clamping(void **state)
{
    (void)state;
    uint32_t cpu = qs_cpu_isa();
    qs_ctx_params p;
    qs_ctx *ctx;
    const char *slot, *impl;

    qs_ctx_params_init(&p);
    p.isa_mask = 0;
    assert_int_equal(qs_ctx_create(&p, &ctx), QS_OK);
    assert_int_equal(qs_ctx_isa(ctx), 0);
    assert_string_equal(qs_ctx_isa_name(ctx), "scalar");
    for (int32_t i = 0; i < qs_ctx_kernel_count(ctx); i++) {
        assert_int_equal(qs_ctx_kernel_info(ctx, i, &slot, &impl), QS_OK);
        assert_non_null(strstr(impl, "__ref"));
    }
    assert_int_equal(qs_ctx_kernel_info(ctx, qs_ctx_kernel_count(ctx), &slot, &impl),
                     QS_ERR_INVALID_ARG);
    qs_ctx_destroy(ctx);

    /* A mask with every bit (including ISAs of other architectures) is clamped to the CPU. */
    p.isa_mask = QS_ISA_ALL;
    assert_int_equal(qs_ctx_create(&p, &ctx), QS_OK);
    assert_int_equal(qs_ctx_isa(ctx) & ~cpu, 0);
    qs_ctx_destroy(ctx);

    /* QS_FORCE_ISA above the machine: clamped, never honoured; unknown names force nothing. */
    const char *saved = getenv("QS_FORCE_ISA");
    char keep[64] = "";
    if (saved)
        snprintf(keep, sizeof keep, "%s", saved);
    static const char *const levels[] = {"avx512", "avx2", "neon-dotprod", "neon", "scalar",
                                         "none", "bogus"};
    for (size_t i = 0; i < sizeof levels / sizeof levels[0]; i++) {
        setenv("QS_FORCE_ISA", levels[i], 1);
        assert_int_equal(qs_ctx_create(NULL, &ctx), QS_OK);
        assert_int_equal(qs_ctx_isa(ctx) & ~cpu, 0);
        if (strcmp(levels[i], "scalar") == 0 || strcmp(levels[i], "none") == 0)
            assert_int_equal(qs_ctx_isa(ctx), 0);
        if (strcmp(levels[i], "avx2") == 0)
            assert_int_equal(qs_ctx_isa(ctx) & QS_ISA_AVX512, 0);
        if (strcmp(levels[i], "bogus") == 0)
            assert_int_equal(qs_ctx_isa(ctx), cpu);
        qs_ctx_destroy(ctx);
    }
    if (saved)
        setenv("QS_FORCE_ISA", keep, 1);
    else
        unsetenv("QS_FORCE_ISA");
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_comparison_detects_one_bit),
        cmocka_unit_test(test_matmul_tolerance),
        cmocka_unit_test(test_tier_table),
        cmocka_unit_test(test_tier_ids),
        cmocka_unit_test(test_registry_structure),
        cmocka_unit_test(test_selection_rule),
        cmocka_unit_test(test_context_table_follows_rule),
        cmocka_unit_test(test_dispatch_and_clamping),
    };
    int failed = cmocka_run_group_tests_name("registry", tests, NULL, NULL);

    /* The kernel group: the entries of this registration's tier (all of them when run directly),
     * one named test each. */
    int32_t count, n = 0;
    const struct qs_kernel_entry *e = qs_kernel_entries(&count);
    const char *force = getenv("QS_FORCE_ISA");
    qs_isa_tier t;
    int forced = force && *force ? tier_by_name(force, &t) : -1;
    struct CMUnitTest *group = calloc((size_t)count + 1, sizeof *group);
    char(*names)[64] = calloc((size_t)count + 1, sizeof *names);

    if (!group || !names)
        return 1;
    for (int32_t i = 0; i < count; i++) {
        if (forced >= 0 && home_tier(&e[i]) != forced)
            continue;
        const char *id = qs_isa_tier_id(qs_isa_tier_of_kernel(e[i].name));
        snprintf(names[n], sizeof names[n], "%s/%s", qs_slot_name(e[i].slot), id ? id : "?");
        group[n].name = names[n];
        group[n].test_func = test_entry;
        group[n].initial_state = (void *)&e[i];
        n++;
    }
    print_message("%d registry entries belong to tier %s\n", n,
                  forced >= 0 ? t.name : "(any: QS_FORCE_ISA unset)");
    if (n > 0)
        failed += _cmocka_run_group_tests("kernels", group, (size_t)n, kernels_setup,
                                          kernels_teardown);
    free(group);
    free(names);
    return failed;
}
