/* SPDX-License-Identifier: MIT */
/*
 * The kernel suite (STYLE.md §12): every implementation listed in src/core/kernels.inc whose ISA
 * this CPU has is run beside its slot's __ref kernel on the same inputs, for every length 0...1100
 * and a few large ones, on random data salted with the adversarial values, and the outputs are
 * compared bit for bit. Inputs end at a guard page (over-reads fault), outputs sit between canary
 * bytes (over-writes are caught). Also: the table's structure and the dispatch rules.
 */
#include "common.h"
#include "core/kernels.h"
#include "ref/ref.h"

#define MAX_N 20000
#define OUT_BYTES (MAX_N * 8 + 4096)

/* Inputs shared by every slot runner, regenerated per length. */
typedef struct {
    const float *x;        /* n floats */
    const uint8_t *codes;  /* n random bytes */
    const uint8_t *sbytes; /* n random scale bytes (E8M0 / E4M3), with 0x00, 0xFF, 0x7F */
    const uint16_t *half;  /* n random 16-bit patterns */
    const float *absmax;   /* n positive scales (with specials) */
    int variant;
} k_in;

typedef void k_fn(void);

/* Runners of the sparsity slots (spec/sparsity.md): lengths are cut to whole groups, masks given
 * to compress keep at most two per group (one of the 11 such patterns, from the random codes)
 * and meta given to decompress holds valid nibbles only, as the drivers guarantee. */
static size_t run_sparse_slot(int32_t slot, void (*fn)(void), const k_in *in, int64_t n,
                              uint8_t *out)
{
    static const uint8_t keeps[11] = {0x0, 0x1, 0x2, 0x4, 0x8, 0x3, 0x5, 0x6, 0x9, 0xA, 0xC};
    static const uint8_t nibs[6] = {0x4, 0x8, 0xC, 0x9, 0xD, 0xE};
    static uint8_t mask[MAX_N];
    static uint16_t meta[MAX_N / 16 + 1], hz[MAX_N];
    static float xz[MAX_N];
    int64_t n4 = n & ~(int64_t)3, words = (n4 + 15) / 16;
    const float *norm = in->variant & 1 ? in->absmax : NULL;

    for (int64_t g = 0; g < n4 / 4; g++)
        for (int i = 0; i < 4; i++) {
            int k = (keeps[in->codes[4 * g] % 11] >> i) & 1;
            mask[4 * g + i] = (uint8_t)(k ? 1 + in->codes[4 * g + i] % 200 : 0);
            xz[4 * g + i] = k ? in->x[4 * g + i] : (i & 1 ? -0.0f : 0.0f);
            hz[4 * g + i] = (uint16_t)(k ? in->half[4 * g + i] : (i & 1 ? 0x8000u : 0u));
        }
    for (int64_t wd = 0; wd < words; wd++) {
        meta[wd] = 0;
        for (int64_t g = 4 * wd; g < 4 * wd + 4 && g < n4 / 4; g++)
            meta[wd] = (uint16_t)(meta[wd] | nibs[in->codes[4 * g + 1] % 6] << (4 * (g % 4)));
    }
    switch (slot) {
    case QS_SLOT_sp24_mask_f32: ((qs_sp24_mask_f32_fn *)fn)(in->x, norm, n4, out); return n4;
    case QS_SLOT_sp24_prune_f32:
        ((qs_sp24_prune_f32_fn *)fn)(in->x, norm, n4, (float *)out,
                                     (uint16_t *)(out + 2 * n4));
        return 2 * n4 + 2 * words;
    case QS_SLOT_sp24_compress_f32:
        ((qs_sp24_compress_f32_fn *)fn)(in->variant & 2 ? xz : in->x,
                                        in->variant & 2 ? NULL : mask, n4, (float *)out,
                                        (uint16_t *)(out + 2 * n4));
        return 2 * n4 + 2 * words;
    case QS_SLOT_sp24_compress_u16:
        ((qs_sp24_compress_u16_fn *)fn)(in->variant & 2 ? hz : in->half,
                                        in->variant & 2 ? NULL : mask, n4, (uint16_t *)out,
                                        (uint16_t *)(out + n4));
        return n4 + 2 * words;
    case QS_SLOT_sp24_decompress_f32:
        ((qs_sp24_decompress_f32_fn *)fn)(in->x, meta, n4, (float *)out);
        return 4 * n4;
    case QS_SLOT_sp24_decompress_u16:
        ((qs_sp24_decompress_u16_fn *)fn)(in->half, meta, n4, (uint16_t *)out);
        return 2 * n4;
    case QS_SLOT_sp24_tile_f32: {
        int64_t cols = (n / 16) * 4;
        ((qs_sp24_tile_f32_fn *)fn)(in->x, cols, norm, cols, (in->variant >> 1) & 1, out, cols);
        return 4 * cols;
    }
    case QS_SLOT_nm_mask_f32: {
        int32_t m = 2 + in->variant % 15, nk = 1 + (in->variant * 7) % (m - 1);
        int32_t method = in->variant % 3;
        ((qs_nm_mask_f32_fn *)fn)(in->x, method == 1 ? in->absmax : NULL, n - n % m, nk, m,
                                  method, out);
        return n - n % m;
    }
    default: {
        int32_t m = 2 + (in->variant * 5) % 15, nk = 1 + in->variant % (m - 1);
        int64_t len = n < 16000 ? n : 16000; /* 9 output bytes per element fit OUT_BYTES */
        len -= len % m;
        ((qs_nm_srste_f32_fn *)fn)(in->x, in->absmax, len, nk, m,
                                   in->variant & 1 ? 2e-4f : 0.37f, (float *)out,
                                   (float *)(out + 4 * len), out + 8 * len);
        return 9 * len;
    }
    }
}

/* Run `fn` of `slot` on `in` with length n, writing every output into out; return bytes used. */
static size_t run_slot(int32_t slot, k_fn *fn, const k_in *in, int64_t n, uint8_t *out)
{
    static const int32_t blocks[] = {64, 2, 32, 4096, 6, 256};
    /* NaN scales (one with a payload and the sign set) meet NaN codes and NaN block scales:
     * every kernel must give the canonical NaN there (docs/nan.md) */
    const float scales[] = {1.0f, 0.037f, 3.0e-39f, 1e30f, t_f32_from_bits(0xFFC00005u), NAN};
    int32_t block = blocks[in->variant % 6];
    float scale = scales[in->variant % 6];
    size_t nb = n > 0 ? (size_t)((n + block - 1) / block) : 0;

    switch (slot) {
    case QS_SLOT_cvt_f16_f32: ((qs_cvt_f16_f32_fn *)fn)(in->half, n, (float *)out); return 4 * n;
    case QS_SLOT_cvt_bf16_f32: ((qs_cvt_bf16_f32_fn *)fn)(in->half, n, (float *)out); return 4 * n;
    case QS_SLOT_cvt_f32_f16: ((qs_cvt_f32_f16_fn *)fn)(in->x, n, (uint16_t *)out); return 2 * n;
    case QS_SLOT_cvt_f32_bf16: ((qs_cvt_f32_bf16_fn *)fn)(in->x, n, (uint16_t *)out); return 2 * n;
    case QS_SLOT_amax_f32: {
        float m = ((qs_amax_f32_fn *)fn)(in->x, n);
        memcpy(out, &m, 4);
        return 4;
    }
    case QS_SLOT_minmax_f32: {
        float lh[2] = {in->variant & 1 ? INFINITY : -2.0f, in->variant & 1 ? -INFINITY : 2.0f};
        ((qs_minmax_f32_fn *)fn)(in->x, n, &lh[0], &lh[1]);
        memcpy(out, lh, 8);
        /* Zeros of one sign with a single zero of the other at a moving position: the result's
         * sign (-0 < +0 in the reference) must not depend on which lane the odd zero lands in. */
        float z[48], zlh[2] = {1.0f, -1.0f};
        int64_t zn = n < 48 ? n : 48;
        for (int64_t k = 0; k < zn; k++)
            z[k] = in->variant & 1 ? -0.0f : 0.0f;
        if (zn > 0)
            z[(n * 7 + in->variant) % zn] = in->variant & 1 ? 0.0f : -0.0f;
        ((qs_minmax_f32_fn *)fn)(z, zn, &zlh[0], &zlh[1]);
        memcpy(out + 8, zlh, 8);
        return 16;
    }
    case QS_SLOT_nonfinite_f32: {
        /* variant 1: only the finite prefix, so both answers are exercised */
        int64_t m = n;
        if (in->variant & 1)
            for (m = 0; m < n && isfinite(in->x[m]); m++)
                ;
        int32_t r = ((qs_nonfinite_f32_fn *)fn)(in->x, m);
        memcpy(out, &r, 4);
        return 4;
    }
    case QS_SLOT_nf4_quant:
    case QS_SLOT_fp4_quant:
    case QS_SLOT_dyn8_quant: {
        size_t data = slot == QS_SLOT_dyn8_quant ? (size_t)n : (size_t)(n + 1) / 2;
        ((qs_nf4_quant_fn *)fn)(in->x, n, block, out, (float *)(out + ((data + 3) & ~(size_t)3)));
        return ((data + 3) & ~(size_t)3) + 4 * nb;
    }
    case QS_SLOT_nf4_dequant:
    case QS_SLOT_fp4_dequant:
        ((qs_nf4_dequant_fn *)fn)(in->codes, in->absmax, n, block, (float *)out);
        return 4 * n;
    case QS_SLOT_dyn8_dequant:
        ((qs_dyn8_dequant_fn *)fn)(in->codes, in->absmax, n, 256, in->variant & 1 ? 0.37f : 0.0f,
                                   (float *)out);
        return 4 * n;
    case QS_SLOT_int8_quant: {
        static const float muls[] = {127.0f / 3.5f, INFINITY, 0.0f, 1.0f / 0.02f, 1e-3f};
        int32_t zp = in->variant % 3 == 0 ? 0 : (int32_t)(in->variant * 37 % 256) - 128;
        ((qs_int8_quant_fn *)fn)(in->x, n, muls[in->variant % 5], zp, zp ? -128 : -127,
                                 (int8_t *)out);
        return n;
    }
    case QS_SLOT_int8_dequant:
        ((qs_int8_dequant_fn *)fn)((const int8_t *)in->codes, n, scale,
                                   (int32_t)(in->variant * 53 % 256) - 128, (float *)out);
        return 4 * n;
    case QS_SLOT_int8_dequant_rowstat:
        ((qs_int8_dequant_rowstat_fn *)fn)((const int8_t *)in->codes, n, scale * 3.0f,
                                           (float *)out);
        return 4 * n;
    case QS_SLOT_e4m3_quant:
    case QS_SLOT_e5m2_quant: ((qs_e4m3_quant_fn *)fn)(in->x, n, scale, out); return n;
    case QS_SLOT_e4m3_dequant:
    case QS_SLOT_e5m2_dequant:
        ((qs_e4m3_dequant_fn *)fn)(in->codes, n, scale, (float *)out);
        return 4 * n;
    case QS_SLOT_mxfp4_quant:
    case QS_SLOT_mxfp8_quant: {
        size_t data = slot == QS_SLOT_mxfp8_quant ? (size_t)n : (size_t)(n + 1) / 2;
        size_t nsb = n > 0 ? (size_t)(n + 31) / 32 : 0;
        ((qs_mxfp4_quant_fn *)fn)(in->x, n, in->variant & 1, out, out + data);
        return data + nsb;
    }
    case QS_SLOT_mxfp4_dequant:
    case QS_SLOT_mxfp8_dequant:
        ((qs_mxfp4_dequant_fn *)fn)(in->codes, in->sbytes, n, (float *)out);
        return 4 * n;
    case QS_SLOT_nvfp4_quant: {
        size_t data = (size_t)(n + 1) / 2, nsb = n > 0 ? (size_t)(n + 15) / 16 : 0;
        ((qs_nvfp4_quant_fn *)fn)(in->x, n, scale, out, out + data);
        return data + nsb;
    }
    case QS_SLOT_nvfp4_dequant:
        ((qs_nvfp4_dequant_fn *)fn)(in->codes, in->sbytes, n, scale, (float *)out);
        return 4 * n;
    case QS_SLOT_sp24_mask_f32:
    case QS_SLOT_sp24_prune_f32:
    case QS_SLOT_sp24_compress_f32:
    case QS_SLOT_sp24_compress_u16:
    case QS_SLOT_sp24_decompress_f32:
    case QS_SLOT_sp24_decompress_u16:
    case QS_SLOT_sp24_tile_f32:
    case QS_SLOT_nm_mask_f32:
    case QS_SLOT_nm_srste_f32: return run_sparse_slot(slot, fn, in, n, out);
    case QS_SLOT_hist_scan: {
        /* calibration range scan: the caller's values are kept unless beaten (strictly) */
        float lh[2] = {in->variant & 1 ? INFINITY : -0.0f, in->variant & 1 ? -INFINITY : 0.0f};
        uint64_t c[2] = {(uint64_t)in->variant, 7};
        ((qs_hist_scan_fn *)fn)(in->x, n, &lh[0], &lh[1], &c[0], &c[1]);
        memcpy(out, lh, 8);
        memcpy(out + 8, c, 16);
        return 24;
    }
    case QS_SLOT_hist_update: {
        /* k from the finite maximum (spec/calibration.md §3) plus 0-2 spare binades; variants
         * 5 and 11 scale the data down to a maximum near 2^-140, where subnormals need the
         * widest shifts and k drops below -149 for the larger bin counts */
        static const int32_t bins[] = {2048, 16, 4, 8192};
        static float tiny[MAX_N];
        int32_t nb = bins[in->variant % 4], lb = 0, e;
        const float *x = in->x;
        float amax = 0.0f;
        while ((1 << lb) < nb)
            lb++;
        for (int64_t i = 0; i < n; i++)
            if (isfinite(x[i]) && fabsf(x[i]) > amax)
                amax = fabsf(x[i]);
        if (in->variant % 6 == 5 && amax > 0.0f) {
            (void)frexpf(amax, &e);
            for (int64_t i = 0; i < n; i++)
                tiny[i] = ldexpf(in->x[i], -140 - e);
            x = tiny;
            amax = ldexpf(amax, -140 - e);
        }
        (void)frexpf(amax, &e);
        int32_t k = amax > 0.0f ? e - lb + in->variant % 3 : in->variant - 5;
        uint64_t *c = (uint64_t *)out;
        for (int32_t j = 0; j < nb; j++)
            c[j] = in->variant & 1 ? (uint64_t)j * 3 : 0;
        ((qs_hist_update_fn *)fn)(x, n, k, nb, c);
        return (size_t)nb * 8;
    }
    case QS_SLOT_hist_scan_update: {
        /* k fits the data (even variants), or is one binade short (odd: must return 0 and
         * leave the counts alone); bin counts as for hist_update */
        static const int32_t bins[] = {2048, 16, 4, 8192, 64, 2048};
        int32_t nb = bins[in->variant % 6], lb = 0, e;
        float amax = 0.0f;
        while ((1 << lb) < nb)
            lb++;
        for (int64_t i = 0; i < n; i++)
            if (isfinite(in->x[i]) && fabsf(in->x[i]) > amax)
                amax = fabsf(in->x[i]);
        (void)frexpf(amax, &e);
        int32_t k = amax > 0.0f ? e - lb - (in->variant & 1) : in->variant - 5;
        uint64_t *c = (uint64_t *)out;
        for (int32_t j = 0; j < nb; j++)
            c[j] = (uint64_t)j * 5;
        float lh[2] = {in->variant & 2 ? INFINITY : -0.0f, in->variant & 2 ? -INFINITY : 0.0f};
        uint64_t cnt[2] = {3, (uint64_t)in->variant};
        int32_t r = ((qs_hist_scan_update_fn *)fn)(in->x, n, k, nb, c, &lh[0], &lh[1], &cnt[0],
                                                   &cnt[1]);
        uint8_t *tail = out + (size_t)nb * 8;
        memcpy(tail, lh, 8);
        memcpy(tail + 8, cnt, 16);
        memcpy(tail + 24, &r, 4);
        return (size_t)nb * 8 + 28;
    }
    case QS_SLOT_hist_sumsq: {
        double *acc = (double *)out;
        for (int64_t j = 0; j < n; j++)
            acc[j] = in->variant & 1 ? (double)j * 0.37 : 0.0;
        ((qs_hist_sumsq_fn *)fn)(in->x, n, acc);
        return 8 * (size_t)n;
    }
    default: fail_msg("slot %d has no runner in test_kernels.c", slot); return 0;
    }
}

/* ---- the bit-exactness sweep ------------------------------------------------------------------ */

typedef struct {
    t_page_buf x, codes, sbytes, half, absmax;
} k_inputs;

/* Inputs that random data almost never produces (STYLE.md §12). Lengths n % 14 == 3: every
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

static k_in view(const k_inputs *b, int64_t n, int variant)
{
    k_in in;
    in.x = (const float *)((const uint8_t *)b->x.p + (MAX_N - n) * 4);
    in.absmax = (const float *)((const uint8_t *)b->absmax.p + (MAX_N - n) * 4);
    in.codes = (const uint8_t *)b->codes.p + (MAX_N - n);
    in.sbytes = (const uint8_t *)b->sbytes.p + (MAX_N - n);
    in.half = (const uint16_t *)((const uint8_t *)b->half.p + (MAX_N - n) * 2);
    in.variant = variant;
    return in;
}

static const struct qs_kernel_entry *ref_of(int32_t slot)
{
    int32_t count;
    const struct qs_kernel_entry *e = qs_kernel_entries(&count);
    for (int32_t i = 0; i < count; i++)
        if (e[i].slot == slot && e[i].isa == 0)
            return &e[i];
    return NULL;
}

/* Compare one implementation with its reference over all lengths and variants; returns the
 * number of comparisons made. */
static int64_t sweep(const struct qs_kernel_entry *impl, k_inputs *bufs, t_buf *o_ref,
                     t_buf *o_impl, int quick)
{
    const struct qs_kernel_entry *ref = ref_of(impl->slot);
    static const int64_t big[] = {2047, 2048, 4095, 4096, 4097, 8191, 12345, MAX_N};
    t_rng r = {0x5EED0000ull + (uint64_t)impl->slot};
    int64_t compared = 0;

    assert_non_null(ref);
    for (int64_t k = 0; k <= 1100 + (int64_t)(sizeof big / sizeof big[0]); k++) {
        int64_t n = k <= 1100 ? k : big[k - 1101];
        if (quick && !(n < 4 || n == 33 || n == 1025 || n == MAX_N))
            continue;
        make_inputs(bufs, &r, n, (int)(k % 3 != 0));
        /* Three of the twelve parameter variants per length, rotating, and all of them for the
         * first lengths; together every (variant, tail) pair class is covered. */
        for (int j = 0; j < (n < 40 || quick ? 12 : 3); j++) {
            int variant = (int)((n * 5 + j) % 12);
            k_in in = view(bufs, n, variant);
            memset(o_ref->base, T_CANARY, o_ref->bytes + 2 * T_GUARD);
            memset(o_impl->base, T_CANARY, o_impl->bytes + 2 * T_GUARD);
            size_t used_r = run_slot(ref->slot, ref->fn, &in, n, o_ref->p);
            size_t used_i = run_slot(impl->slot, impl->fn, &in, n, o_impl->p);
            assert_int_equal(used_r, used_i);
            if (t_first_diff(o_impl->p, o_ref->p, o_ref->bytes) >= 0) {
                int64_t d = t_first_diff(o_impl->p, o_ref->p, o_ref->bytes);
                fail_msg("%s vs %s: n=%lld variant=%d: first differing output byte %lld "
                         "(got 0x%02x, want 0x%02x); x[%lld]=0x%08x",
                         impl->name, ref->name, (long long)n, variant, (long long)d,
                         ((uint8_t *)o_impl->p)[d], ((uint8_t *)o_ref->p)[d],
                         (long long)(d / 4 < n ? d / 4 : 0),
                         n ? t_bits(in.x[d / 4 < n ? d / 4 : 0]) : 0u);
            }
            assert_true(t_buf_guards_ok(o_impl));
            compared++;
        }
    }
    return compared;
}

static void test_every_kernel_matches_ref(void **state)
{
    (void)state;
    int32_t count;
    const struct qs_kernel_entry *e = qs_kernel_entries(&count);
    uint32_t cpu = qs_cpu_isa(), allowed = cpu, below = 0;
    k_inputs bufs;

    /* Under QS_FORCE_ISA=<tier> (one registration per tier), compare the kernels of that tier
     * only; run directly, compare every kernel the CPU can execute. */
    if (getenv("QS_FORCE_ISA")) {
        qs_ctx *ctx = t_ctx();
        allowed = qs_ctx_isa(ctx);
        qs_ctx_destroy(ctx);
        if (allowed & QS_ISA_AVX512)
            below = QS_ISA_AVX2;
        else if (allowed & QS_ISA_NEON_DOTPROD)
            below = QS_ISA_NEON | QS_ISA_NEON_FP16 | QS_ISA_NEON_BF16;
    }
    t_buf o_ref = t_buf_new(OUT_BYTES), o_impl = t_buf_new(OUT_BYTES);
    int tested = 0;

    bufs.x = t_page_buf_new(MAX_N * 4);
    bufs.absmax = t_page_buf_new(MAX_N * 4);
    bufs.codes = t_page_buf_new(MAX_N);
    bufs.sbytes = t_page_buf_new(MAX_N);
    bufs.half = t_page_buf_new(MAX_N * 2);
    for (int32_t i = 0; i < count; i++) {
        if (e[i].isa == 0 || (e[i].isa & ~allowed) != 0 || (e[i].isa & ~below) == 0)
            continue;
        int64_t c = sweep(&e[i], &bufs, &o_ref, &o_impl, 0);
        print_message("  %-34s bit-exact vs ref: %lld comparisons\n", e[i].name, (long long)c);
        tested++;
    }
    /* The reference against itself exercises every runner and the guard pages. */
    for (int32_t i = 0; i < count; i++)
        if (e[i].isa == 0)
            assert_true(sweep(&e[i], &bufs, &o_ref, &o_impl, 1) > 0);
    print_message("  %d SIMD kernels compared on this CPU (isa 0x%x)\n", tested, cpu);
    t_page_buf_free(&bufs.x);
    t_page_buf_free(&bufs.absmax);
    t_page_buf_free(&bufs.codes);
    t_page_buf_free(&bufs.sbytes);
    t_page_buf_free(&bufs.half);
    t_buf_free(&o_ref);
    t_buf_free(&o_impl);
}

/* The comparison routine must be able to fail: one flipped bit is reported at its index. */
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
        assert_int_equal(t_check_bytes("negative test", a, b, sizeof a, 0), 0);
        b[i] ^= 0x10;
    }
}

/* kernels.inc: every slot has exactly one __ref entry, names follow qs_<slot>__<isa>, and the
 * tiers of a slot appear lowest first. */
static void test_table_structure(void **state)
{
    (void)state;
    int32_t count;
    const struct qs_kernel_entry *e = qs_kernel_entries(&count);
    int refs[QS_SLOT_COUNT] = {0};
    uint32_t last_isa[QS_SLOT_COUNT] = {0};

    for (int32_t i = 0; i < count; i++) {
        char prefix[64];
        assert_true(e[i].slot >= 0 && e[i].slot < QS_SLOT_COUNT);
        snprintf(prefix, sizeof prefix, "qs_%s__", qs_slot_name(e[i].slot));
        assert_memory_equal(e[i].name, prefix, strlen(prefix));
        if (e[i].isa == 0) {
            refs[e[i].slot]++;
            assert_string_equal(e[i].name + strlen(prefix), "ref");
        }
        assert_true(e[i].isa >= last_isa[e[i].slot]); /* best last */
        last_isa[e[i].slot] = e[i].isa;
    }
    for (int s = 0; s < QS_SLOT_COUNT; s++)
        assert_int_equal(refs[s], 1);
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
    assert_string_equal(qs_ctx_backend_name(ctx), "scalar");
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

    /* QS_FORCE_ISA above the machine: clamped, never honoured. */
    const char *saved = getenv("QS_FORCE_ISA");
    char keep[64] = "";
    if (saved)
        snprintf(keep, sizeof keep, "%s", saved);
    static const char *const levels[] = {"avx512", "avx2", "neon-dotprod", "neon", "scalar", "bogus"};
    for (size_t i = 0; i < sizeof levels / sizeof levels[0]; i++) {
        setenv("QS_FORCE_ISA", levels[i], 1);
        assert_int_equal(qs_ctx_create(NULL, &ctx), QS_OK);
        assert_int_equal(qs_ctx_isa(ctx) & ~cpu, 0);
        if (strcmp(levels[i], "scalar") == 0)
            assert_int_equal(qs_ctx_isa(ctx), 0);
        if (strcmp(levels[i], "avx2") == 0)
            assert_int_equal(qs_ctx_isa(ctx) & QS_ISA_AVX512, 0);
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
        cmocka_unit_test(test_table_structure),
        cmocka_unit_test(test_dispatch_and_clamping),
        cmocka_unit_test(test_every_kernel_matches_ref),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
