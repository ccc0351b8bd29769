/* SPDX-License-Identifier: MIT */
/*
 * The per-slot kernel calls of tests/test_kernels.c and bench/qsparse_bench.c (kernel_call.h).
 *
 * A slot's entry is one row of `entries` at the end: its slot, its comparison rule, an optional
 * setup (parameters and derived inputs, once per input set) and its call (the kernel call and the
 * in-out state it starts from). Slots of one signature share their functions. A new slot adds its
 * row, and a setup and call of its own if no existing one fits. In variant mode the parameters
 * cover what the drivers pass and the corners around it (odd blocks, NaN scales, rows off a block,
 * tails); in typical mode (the benchmark) they are the common shapes (blocks of 64, one x row
 * against four W rows of n / 4, ...), where n is a multiple of 16.
 */
#include "kernel_call.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "core/internal.h"
#include "ref/ref.h"

typedef int kc_setup_fn(kc_case *c);
typedef size_t kc_call_fn(const kc_case *c, kc_fn *fn, uint8_t *out);

struct kc_entry {
    int32_t slot;
    kc_rule rule;
    kc_setup_fn *setup; /* NULL: the call derives what it needs */
    kc_call_fn *call;
};

/* Zeroed scratch owned by the case; NULL when out of memory. */
static void *scratch(kc_case *c, size_t bytes)
{
    void *p;

    if (c->nmem == (int)(sizeof c->mem / sizeof c->mem[0]))
        return NULL;
    p = calloc(bytes ? bytes : 1, 1);
    if (p)
        c->mem[c->nmem++] = p;
    return p;
}

static float f32_bits(uint32_t u)
{
    float f;
    memcpy(&f, &u, 4);
    return f;
}

static int64_t min64(int64_t a, int64_t b)
{
    return a < b ? a : b;
}

/* The variant's block size and scale of the element formats; NaN scales (one with a payload and
 * the sign set) meet NaN codes and NaN block scales, where every kernel gives the canonical NaN. */
static int32_t elem_block(const kc_case *c)
{
    static const int32_t blocks[] = {64, 2, 32, 4096, 6, 256};
    return c->in.typical ? (c->slot == QS_SLOT_dyn8_quant ? 256 : 64) : blocks[c->in.variant % 6];
}

static float elem_scale(const kc_case *c, float typical)
{
    const float scales[] = {1.0f, 0.037f, 3.0e-39f, 1e30f, f32_bits(0xFFC00005u), NAN};
    return c->in.typical ? typical : scales[c->in.variant % 6];
}

/* ---- conversions and reductions -------------------------------------------------------------- */

static size_t call_cvt_to_f32(const kc_case *c, kc_fn *fn, uint8_t *out)
{
    ((qs_cvt_f16_f32_fn *)fn)(c->in.half, c->in.n, (float *)out);
    return 4 * (size_t)c->in.n;
}

static size_t call_cvt_from_f32(const kc_case *c, kc_fn *fn, uint8_t *out)
{
    ((qs_cvt_f32_f16_fn *)fn)(c->in.x, c->in.n, (uint16_t *)out);
    return 2 * (size_t)c->in.n;
}

/* dst 0, 4, ..., 40 bytes into the buffer (head lengths before the first 32- or 64-byte line) and
 * once 2 bytes in, where no float alignment exists; NaN payloads move as bits. */
static size_t call_copy_stream(const kc_case *c, kc_fn *fn, uint8_t *out)
{
    int v = c->in.variant;
    size_t off = c->in.typical ? 0 : v == 11 ? 2 : (size_t)v * 4;
    ((qs_copy_stream_f32_fn *)fn)(c->in.x, c->in.n, (float *)(void *)(out + off),
                                  c->in.typical || (v & 1));
    return off + 4 * (size_t)c->in.n;
}

static size_t call_amax(const kc_case *c, kc_fn *fn, uint8_t *out)
{
    float m = ((qs_amax_f32_fn *)fn)(c->in.x, c->in.n);
    memcpy(out, &m, 4);
    return 4;
}

static size_t call_minmax(const kc_case *c, kc_fn *fn, uint8_t *out)
{
    int v = c->in.variant, odd = !c->in.typical && (v & 1);
    float lh[2] = {odd ? INFINITY : -2.0f, odd ? -INFINITY : 2.0f};
    int64_t n = c->in.n;

    if (c->in.typical)
        lh[0] = lh[1] = 0.0f;
    ((qs_minmax_f32_fn *)fn)(c->in.x, n, &lh[0], &lh[1]);
    memcpy(out, lh, 8);
    if (c->in.typical)
        return 8;
    /* Zeros of one sign with a single zero of the other at a moving position: the result's sign
     * (-0 < +0 in the reference) must not depend on which lane the odd zero lands in. */
    float z[48], zlh[2] = {1.0f, -1.0f};
    int64_t zn = n < 48 ? n : 48;
    for (int64_t k = 0; k < zn; k++)
        z[k] = v & 1 ? -0.0f : 0.0f;
    if (zn > 0)
        z[(n * 7 + v) % zn] = v & 1 ? 0.0f : -0.0f;
    ((qs_minmax_f32_fn *)fn)(z, zn, &zlh[0], &zlh[1]);
    memcpy(out + 8, zlh, 8);
    return 16;
}

/* variant 1 (odd): only the finite prefix, so both answers are exercised */
static int setup_nonfinite(kc_case *c)
{
    c->len = c->in.n;
    if (!c->in.typical && (c->in.variant & 1))
        for (c->len = 0; c->len < c->in.n && isfinite(c->in.x[c->len]); c->len++)
            ;
    return 0;
}

static size_t call_nonfinite(const kc_case *c, kc_fn *fn, uint8_t *out)
{
    int32_t r = ((qs_nonfinite_f32_fn *)fn)(c->in.x, c->len);
    memcpy(out, &r, 4);
    return 4;
}

/* ---- element formats: quantize and dequantize ------------------------------------------------ */

static size_t call_block_quant(const kc_case *c, kc_fn *fn, uint8_t *out)
{
    int64_t n = c->in.n;
    int32_t block = elem_block(c);
    size_t data = c->slot == QS_SLOT_dyn8_quant ? (size_t)n : (size_t)(n + 1) / 2;
    size_t nb = n > 0 ? (size_t)((n + block - 1) / block) : 0;
    ((qs_nf4_quant_fn *)fn)(c->in.x, n, block, out, (float *)(out + ((data + 3) & ~(size_t)3)));
    return ((data + 3) & ~(size_t)3) + 4 * nb;
}

static size_t call_bnb4_dequant(const kc_case *c, kc_fn *fn, uint8_t *out)
{
    ((qs_nf4_dequant_fn *)fn)(c->in.codes, c->in.absmax, c->in.n, elem_block(c), (float *)out);
    return 4 * (size_t)c->in.n;
}

static size_t call_dyn8_dequant(const kc_case *c, kc_fn *fn, uint8_t *out)
{
    float offset = !c->in.typical && (c->in.variant & 1) ? 0.37f : 0.0f;
    ((qs_dyn8_dequant_fn *)fn)(c->in.codes, c->in.absmax, c->in.n, 256, offset, (float *)out);
    return 4 * (size_t)c->in.n;
}

static size_t call_int8_quant(const kc_case *c, kc_fn *fn, uint8_t *out)
{
    static const float muls[] = {127.0f / 3.5f, INFINITY, 0.0f, 1.0f / 0.02f, 1e-3f};
    int v = c->in.variant;
    int32_t zp = c->in.typical || v % 3 == 0 ? 0 : (int32_t)(v * 37 % 256) - 128;
    float mul = c->in.typical ? 127.0f / 7.0f : muls[v % 5];
    ((qs_int8_quant_fn *)fn)(c->in.x, c->in.n, mul, zp, zp ? -128 : -127, (int8_t *)out);
    return (size_t)c->in.n;
}

static size_t call_int8_dequant(const kc_case *c, kc_fn *fn, uint8_t *out)
{
    int32_t zp = c->in.typical ? 0 : (int32_t)(c->in.variant * 53 % 256) - 128;
    ((qs_int8_dequant_fn *)fn)((const int8_t *)c->in.codes, c->in.n, elem_scale(c, 0.05f), zp,
                               (float *)out);
    return 4 * (size_t)c->in.n;
}

static size_t call_int8_rowstat(const kc_case *c, kc_fn *fn, uint8_t *out)
{
    float s = c->in.typical ? 7.0f : elem_scale(c, 0.0f) * 3.0f;
    ((qs_int8_dequant_rowstat_fn *)fn)((const int8_t *)c->in.codes, c->in.n, s, (float *)out);
    return 4 * (size_t)c->in.n;
}

static size_t call_fp8_quant(const kc_case *c, kc_fn *fn, uint8_t *out)
{
    ((qs_e4m3_quant_fn *)fn)(c->in.x, c->in.n, elem_scale(c, 7.0f / 448.0f), out);
    return (size_t)c->in.n;
}

static size_t call_fp8_dequant(const kc_case *c, kc_fn *fn, uint8_t *out)
{
    ((qs_e4m3_dequant_fn *)fn)(c->in.codes, c->in.n, elem_scale(c, 7.0f / 448.0f), (float *)out);
    return 4 * (size_t)c->in.n;
}

static size_t call_mx_quant(const kc_case *c, kc_fn *fn, uint8_t *out)
{
    int64_t n = c->in.n;
    size_t data = c->slot == QS_SLOT_mxfp8_quant ? (size_t)n : (size_t)(n + 1) / 2;
    size_t nsb = n > 0 ? (size_t)(n + 31) / 32 : 0;
    ((qs_mxfp4_quant_fn *)fn)(c->in.x, n, !c->in.typical && (c->in.variant & 1), out, out + data);
    return data + nsb;
}

static size_t call_mx_dequant(const kc_case *c, kc_fn *fn, uint8_t *out)
{
    ((qs_mxfp4_dequant_fn *)fn)(c->in.codes, c->in.sbytes, c->in.n, (float *)out);
    return 4 * (size_t)c->in.n;
}

static size_t call_nvfp4_quant(const kc_case *c, kc_fn *fn, uint8_t *out)
{
    int64_t n = c->in.n;
    size_t data = (size_t)(n + 1) / 2, nsb = n > 0 ? (size_t)(n + 15) / 16 : 0;
    ((qs_nvfp4_quant_fn *)fn)(c->in.x, n, elem_scale(c, 7.0f / 2688.0f), out, out + data);
    return data + nsb;
}

static size_t call_nvfp4_dequant(const kc_case *c, kc_fn *fn, uint8_t *out)
{
    ((qs_nvfp4_dequant_fn *)fn)(c->in.codes, c->in.sbytes, c->in.n, elem_scale(c, 7.0f / 2688.0f),
                                (float *)out);
    return 4 * (size_t)c->in.n;
}

/* ---- sparsity (docs/sparsity.md) --------------------------------------------------------------
 * Lengths cut to whole groups. Variant mode: masks given to compress keep at most two per group
 * (one of the 11 such patterns, from the random codes), with x (f32 / 16-bit) zeroed where the
 * mask drops for the mask-free form; meta given to decompress holds valid nibbles only, as the
 * drivers guarantee. Typical mode: two of every four kept, mask and meta of the same pattern. */

static const uint8_t valid_nibbles[6] = {0x4, 0x8, 0xC, 0x9, 0xD, 0xE};

static int setup_sparse(kc_case *c)
{
    static const uint8_t keeps[11] = {0x0, 0x1, 0x2, 0x4, 0x8, 0x3, 0x5, 0x6, 0x9, 0xA, 0xC};
    static const uint8_t keep2[6] = {0x3, 0x5, 0x6, 0x9, 0xA, 0xC}; /* as valid_nibbles */
    const uint8_t *codes = c->in.codes;
    int64_t n4 = c->in.n & ~(int64_t)3;

    c->len = n4;
    c->words = (n4 + 15) / 16;
    c->mask = scratch(c, (size_t)n4);
    c->fa = scratch(c, (size_t)n4 * 4);
    c->h16 = scratch(c, (size_t)n4 * 2);
    c->meta = scratch(c, (size_t)c->words * 2);
    if (!c->mask || !c->fa || !c->h16 || !c->meta)
        return -1;
    for (int64_t g = 0; g < n4 / 4; g++) {
        int p = codes[4 * g] % 6;
        for (int i = 0; i < 4; i++) {
            int k = c->in.typical ? (keep2[p] >> i) & 1 : (keeps[codes[4 * g] % 11] >> i) & 1;
            c->mask[4 * g + i] = (uint8_t)(c->in.typical ? k : k ? 1 + codes[4 * g + i] % 200 : 0);
            c->fa[4 * g + i] = k ? c->in.x[4 * g + i] : (i & 1 ? -0.0f : 0.0f);
            c->h16[4 * g + i] = (uint16_t)(k ? c->in.half[4 * g + i] : (i & 1 ? 0x8000u : 0u));
        }
        c->meta[g / 4] =
            (uint16_t)(c->meta[g / 4] | valid_nibbles[c->in.typical ? p : codes[4 * g + 1] % 6]
                                            << (4 * (g % 4)));
    }
    return 0;
}

static const float *sparse_norm(const kc_case *c)
{
    return !c->in.typical && (c->in.variant & 1) ? c->in.absmax : NULL;
}

static size_t call_sp24_mask(const kc_case *c, kc_fn *fn, uint8_t *out)
{
    ((qs_sp24_mask_f32_fn *)fn)(c->in.x, sparse_norm(c), c->len, out);
    return (size_t)c->len;
}

static size_t call_sp24_prune(const kc_case *c, kc_fn *fn, uint8_t *out)
{
    int64_t n4 = c->len;
    ((qs_sp24_prune_f32_fn *)fn)(c->in.x, sparse_norm(c), n4, (float *)out,
                                 (uint16_t *)(out + 2 * n4));
    return (size_t)(2 * n4 + 2 * c->words);
}

static size_t call_sp24_compress_f32(const kc_case *c, kc_fn *fn, uint8_t *out)
{
    int64_t n4 = c->len;
    int free_form = !c->in.typical && (c->in.variant & 2);
    ((qs_sp24_compress_f32_fn *)fn)(free_form ? c->fa : c->in.x, free_form ? NULL : c->mask, n4,
                                    (float *)out, (uint16_t *)(out + 2 * n4));
    return (size_t)(2 * n4 + 2 * c->words);
}

static size_t call_sp24_compress_u16(const kc_case *c, kc_fn *fn, uint8_t *out)
{
    int64_t n4 = c->len;
    int free_form = !c->in.typical && (c->in.variant & 2);
    ((qs_sp24_compress_u16_fn *)fn)(free_form ? c->h16 : c->in.half, free_form ? NULL : c->mask, n4,
                                    (uint16_t *)out, (uint16_t *)(out + n4));
    return (size_t)(n4 + 2 * c->words);
}

static size_t call_sp24_decompress_f32(const kc_case *c, kc_fn *fn, uint8_t *out)
{
    ((qs_sp24_decompress_f32_fn *)fn)(c->in.x, c->meta, c->len, (float *)out);
    return 4 * (size_t)c->len;
}

static size_t call_sp24_decompress_u16(const kc_case *c, kc_fn *fn, uint8_t *out)
{
    ((qs_sp24_decompress_u16_fn *)fn)(c->in.half, c->meta, c->len, (uint16_t *)out);
    return 2 * (size_t)c->len;
}

/* 4 rows of (n / 16) * 4 columns; typical: the greedy variant (1) */
static size_t call_sp24_tile(const kc_case *c, kc_fn *fn, uint8_t *out)
{
    int64_t cols = (c->in.n / 16) * 4;
    int greedy = c->in.typical ? 1 : (c->in.variant >> 1) & 1;
    ((qs_sp24_tile_f32_fn *)fn)(c->in.x, cols, sparse_norm(c), cols, greedy, out, cols);
    return 4 * (size_t)cols;
}

static size_t call_nm_mask(const kc_case *c, kc_fn *fn, uint8_t *out)
{
    int v = c->in.variant;
    int32_t m = c->in.typical ? 8 : 2 + v % 15, nk = c->in.typical ? 2 : 1 + (v * 7) % (m - 1);
    int32_t method = c->in.typical ? 0 : v % 3;
    int64_t n = c->in.n - c->in.n % m;
    ((qs_nm_mask_f32_fn *)fn)(c->in.x, method == 1 ? c->in.absmax : NULL, n, nk, m, method, out);
    return (size_t)n;
}

/* 9 output bytes per element: the length is cut to what the output buffer holds */
static size_t call_nm_srste(const kc_case *c, kc_fn *fn, uint8_t *out)
{
    int v = c->in.variant;
    int32_t m = c->in.typical ? 4 : 2 + (v * 5) % 15, nk = c->in.typical ? 2 : 1 + v % (m - 1);
    int64_t len = min64(c->in.n, (int64_t)(c->in.out_bytes / 9));
    float decay = c->in.typical || (v & 1) ? 2e-4f : 0.37f;
    len -= len % m;
    ((qs_nm_srste_f32_fn *)fn)(c->in.x, c->in.absmax, len, nk, m, decay, (float *)out,
                               (float *)(out + 4 * len), out + 8 * len);
    return 9 * (size_t)len;
}

/* ---- calibration statistics (docs/calibration.md) -------------------------------------------- */

/* calibration range scan: the caller's values are kept unless beaten (strictly) */
static size_t call_hist_scan(const kc_case *c, kc_fn *fn, uint8_t *out)
{
    int v = c->in.variant, odd = c->in.typical || (v & 1);
    float lh[2] = {odd ? INFINITY : -0.0f, odd ? -INFINITY : 0.0f};
    uint64_t cnt[2] = {c->in.typical ? 0 : (uint64_t)v, c->in.typical ? 0 : 7};
    ((qs_hist_scan_fn *)fn)(c->in.x, c->in.n, &lh[0], &lh[1], &cnt[0], &cnt[1]);
    memcpy(out, lh, 8);
    memcpy(out + 8, cnt, 16);
    return 24;
}

/* The bin count (c->len), its log2 and the bin width 2^k from the finite maximum of x (or of c->fa,
 * x scaled down, for hist_update's tiny variants); `spare` binades added to k. */
static void hist_k(kc_case *c, const float *x, int32_t nb, int32_t spare, int32_t empty)
{
    int32_t lb = 0, e;
    float amax = 0.0f;

    while ((1 << lb) < nb)
        lb++;
    for (int64_t i = 0; i < c->in.n; i++)
        if (isfinite(x[i]) && fabsf(x[i]) > amax)
            amax = fabsf(x[i]);
    (void)frexpf(amax, &e);
    c->len = nb;
    c->k = amax > 0.0f || c->in.typical ? e - lb + spare : empty;
}

/* k from the finite maximum (docs/calibration.md §3) plus 0-2 spare binades; variants 5 and 11
 * scale the data down to a maximum near 2^-140, where subnormals need the widest shifts and k
 * drops below -149 for the larger bin counts. Typical: 2048 bins that just hold the data. */
static int setup_hist_update(kc_case *c)
{
    static const int32_t bins[] = {2048, 16, 4, 8192};
    int v = c->in.variant;
    int32_t nb = c->in.typical ? 2048 : bins[v % 4];
    float amax = 0.0f;
    int e;

    c->xsrc = c->in.x;
    if (!c->in.typical && v % 6 == 5) {
        for (int64_t i = 0; i < c->in.n; i++)
            if (isfinite(c->in.x[i]) && fabsf(c->in.x[i]) > amax)
                amax = fabsf(c->in.x[i]);
        if (amax > 0.0f) {
            c->fa = scratch(c, (size_t)c->in.n * 4);
            if (!c->fa)
                return -1;
            (void)frexpf(amax, &e);
            for (int64_t i = 0; i < c->in.n; i++)
                c->fa[i] = ldexpf(c->in.x[i], -140 - e);
            c->xsrc = c->fa;
        }
    }
    hist_k(c, c->xsrc, nb, c->in.typical ? 0 : v % 3, v - 5);
    return 0;
}

static size_t call_hist_update(const kc_case *c, kc_fn *fn, uint8_t *out)
{
    uint64_t *cnt = (uint64_t *)out;
    int odd = !c->in.typical && (c->in.variant & 1);
    for (int64_t j = 0; j < c->len; j++)
        cnt[j] = odd ? (uint64_t)j * 3 : 0;
    ((qs_hist_update_fn *)fn)(c->xsrc, c->in.n, (int32_t)c->k, (int32_t)c->len, cnt);
    return (size_t)c->len * 8;
}

/* k fits the data (even variants), or is one binade short (odd: must return 0 and leave the
 * counts alone); bin counts as for hist_update */
static int setup_hist_scan_update(kc_case *c)
{
    static const int32_t bins[] = {2048, 16, 4, 8192, 64, 2048};
    int v = c->in.variant;
    hist_k(c, c->in.x, c->in.typical ? 2048 : bins[v % 6], c->in.typical ? 0 : -(v & 1), v - 5);
    return 0;
}

static size_t call_hist_scan_update(const kc_case *c, kc_fn *fn, uint8_t *out)
{
    int v = c->in.variant, wide = c->in.typical || (v & 2);
    uint64_t *cnt = (uint64_t *)out;
    for (int64_t j = 0; j < c->len; j++)
        cnt[j] = c->in.typical ? 0 : (uint64_t)j * 5;
    float lh[2] = {wide ? INFINITY : -0.0f, wide ? -INFINITY : 0.0f};
    uint64_t nan_inf[2] = {c->in.typical ? 0 : 3, c->in.typical ? 0 : (uint64_t)v};
    int32_t r = ((qs_hist_scan_update_fn *)fn)(c->in.x, c->in.n, (int32_t)c->k, (int32_t)c->len,
                                               cnt, &lh[0], &lh[1], &nan_inf[0], &nan_inf[1]);
    uint8_t *tail = out + (size_t)c->len * 8;
    memcpy(tail, lh, 8);
    memcpy(tail + 8, nan_inf, 16);
    memcpy(tail + 24, &r, 4);
    return (size_t)c->len * 8 + 28;
}

/* Variant mode starts the sums at 0 or j * 0.37; typical mode adds onto what the buffer holds. */
static size_t call_hist_sumsq(const kc_case *c, kc_fn *fn, uint8_t *out)
{
    double *acc = (double *)out;
    if (!c->in.typical)
        for (int64_t j = 0; j < c->in.n; j++)
            acc[j] = c->in.variant & 1 ? (double)j * 0.37 : 0.0;
    ((qs_hist_sumsq_fn *)fn)(c->in.x, c->in.n, acc);
    return 8 * (size_t)c->in.n;
}

/* ---- matmul: one-row dot products (include/qsparse/matmul.h) ----------------------------------
 * One f32 result per call (the int8 group sums stay far below 2^31), NF4/FP4 rows starting on
 * either nibble, INT8 groups of 1 ... n. Typical: blocks of 64, one scale per row, no zero
 * points, tensor scale 0.5. */

static const int32_t dot_blocks[] = {64, 2, 32, 6};

static int32_t dot_block(const kc_case *c)
{
    return c->in.typical ? 64 : dot_blocks[c->in.variant % 4];
}

static const int8_t *dot_zp(const kc_case *c)
{
    return !c->in.typical && (c->in.variant & 1) ? (const int8_t *)c->in.half : NULL;
}

static int64_t dot_group(const kc_case *c)
{
    int64_t n = c->in.n;
    return c->in.typical || c->in.variant % 4 == 0 ? (n > 0 ? n : 1) : 1 + (c->in.variant * 7) % 40;
}

static size_t put_f32(uint8_t *out, float r)
{
    memcpy(out, &r, 4);
    return 4;
}

static size_t call_dot_f32(const kc_case *c, kc_fn *fn, uint8_t *out)
{
    return put_f32(out, ((qs_mm_dot_f32_fn *)fn)(c->in.x, c->in.absmax, c->in.n));
}

static size_t call_dot_half(const kc_case *c, kc_fn *fn, uint8_t *out)
{
    return put_f32(out, ((qs_mm_dot_f16_fn *)fn)(c->in.x, c->in.half, c->in.n));
}

static size_t call_dot_bnb4(const kc_case *c, kc_fn *fn, uint8_t *out)
{
    int64_t n = c->in.n, start = !c->in.typical && n > 1 ? c->in.variant & 1 : 0;
    /* (start + n + 1) / 2 <= n bytes */
    return put_f32(out, ((qs_mm_dot_nf4_fn *)fn)(c->in.x, n - start, c->in.codes, start,
                                                 c->in.absmax, dot_block(c)));
}

static size_t call_dot_int8(const kc_case *c, kc_fn *fn, uint8_t *out)
{
    return put_f32(out, ((qs_mm_dot_int8_fn *)fn)(c->in.x, c->in.n, (const int8_t *)c->in.codes,
                                                  c->in.absmax, dot_zp(c), dot_group(c)));
}

static size_t call_dot_fp8(const kc_case *c, kc_fn *fn, uint8_t *out)
{
    float s = c->in.typical ? 0.5f : 0.037f;
    return put_f32(out, ((qs_mm_dot_e4m3_fn *)fn)(c->in.x, c->in.n, c->in.codes, s));
}

static size_t call_dot_mx(const kc_case *c, kc_fn *fn, uint8_t *out)
{
    return put_f32(out, ((qs_mm_dot_mxfp4_fn *)fn)(c->in.x, c->in.n, c->in.codes, c->in.sbytes));
}

static size_t call_dot_nvfp4(const kc_case *c, kc_fn *fn, uint8_t *out)
{
    float s = c->in.typical ? 0.5f : 0.37f;
    return put_f32(out, ((qs_mm_dot_nvfp4_fn *)fn)(c->in.x, c->in.n, c->in.codes, c->in.sbytes, s));
}

static size_t call_dot_w8a8(const kc_case *c, kc_fn *fn, uint8_t *out)
{
    return put_f32(out, ((qs_mm_dot_w8a8_fn *)fn)((const int8_t *)c->in.codes,
                                                  (const int8_t *)c->in.sbytes, c->in.n,
                                                  c->in.absmax, dot_zp(c), dot_group(c)));
}

/* ---- matmul: 2:4 -------------------------------------------------------------------------------
 * Meta of valid nibbles only, as the drivers guarantee (the same pattern in typical mode as in
 * variant mode), for n & ~3 dense columns; a second copy after it serves a 2:4 + NF4 GEMV from
 * row 1. The GEMV slots run one row (test_matmul_sp24 takes several): f32 / f16 / bf16 kept values
 * from absmax / half, 2:4 + NF4 from row 0 or 1 of a weight whose two rows share the meta; in
 * typical mode the 2:4 + NF4 GEMV runs four rows of n / 4 columns, blocks of 64. */

static int setup_sp24_mm(kc_case *c)
{
    int64_t n = c->in.n, n4 = n & ~(int64_t)3;
    int s = c->slot;

    c->len = n4;
    c->words = (n4 + 15) / 16;
    c->meta = scratch(c, (size_t)(2 * c->words) * 2);
    if (!c->meta)
        return -1;
    for (int64_t g = 0; g < n4 / 4; g++)
        c->meta[g / 4] |= (uint16_t)(valid_nibbles[c->in.codes[4 * g] % 6] << (4 * (g % 4)));
    memcpy(c->meta + c->words, c->meta, (size_t)c->words * 2);
    if (s == QS_SLOT_mm_sp24_axpy && !c->in.typical) {
        c->fa = scratch(c, (size_t)(2 * n4) * 4);
        if (!c->fa)
            return -1;
        for (int64_t i = 0; i < n4; i++) {
            c->fa[2 * i] = c->in.absmax[i];
            c->fa[2 * i + 1] = c->in.x[n - 1 - i];
        }
    }
    c->block = dot_block(c);
    c->start = !c->in.typical ? c->in.variant & 1 : 0;
    c->r0 = 0;
    c->rows = 1;
    c->w =
        (qs_mm_weight){.n = 1, .k = n4 / 2, .scale_mul = 1.0f, .meta = c->meta, .words = c->words};
    if (s == QS_SLOT_mm_gemv_sp24_f32) {
        c->w.data = c->in.absmax;
        c->w.row_bytes = n4 / 2 * 4;
    } else if (s == QS_SLOT_mm_gemv_sp24_f16 || s == QS_SLOT_mm_gemv_sp24_bf16) {
        c->w.data = c->in.half;
        c->w.row_bytes = n4 / 2 * 2;
    } else if (s == QS_SLOT_mm_gemv_sp24_nf4) {
        c->w.data = c->in.codes;
        c->w.scale = c->in.absmax;
        c->w.group = c->block;
        if (c->in.typical) { /* four rows of n / 4 columns */
            c->rows = 4;
            c->w.n = 4;
            c->w.k = n / 8;
            c->w.words = n / 64;
        } else {
            c->r0 = c->start;
            c->w.n = c->r0 + 1;
            c->start = c->r0 * (n4 / 2);
        }
    }
    if (c->rule != KC_RULE_SP24 || c->in.typical)
        return 0;

    /* The 2:4 rule's data: x gathered by the reference and each kept value decoded as the
     * reference decodes it (NF4: codebook times its block's absmax, with the block sums formed
     * before their scale: one that passes 2^126 unscaled may overflow in one order and not
     * another, however small the scale). */
    int64_t kept = n4 / 2;
    double unscaled = 0.0;
    c->fa = scratch(c, (size_t)kept * 4);
    c->fb = scratch(c, (size_t)kept * 4);
    if (!c->fa || !c->fb)
        return -1;
    qs_mm_gather_sp24__ref(c->in.x, c->meta, n4, c->fa);
    if (s == QS_SLOT_mm_gemv_sp24_f32)
        memcpy(c->fb, c->in.absmax, (size_t)kept * sizeof(float));
    else if (s == QS_SLOT_mm_gemv_sp24_f16)
        qs_cvt_f16_f32__ref(c->in.half, kept, c->fb);
    else if (s == QS_SLOT_mm_gemv_sp24_bf16)
        qs_cvt_bf16_f32__ref(c->in.half, kept, c->fb);
    else
        for (int64_t j = 0; j < kept; j++) {
            int64_t f = c->start + j;
            uint8_t q = f & 1 ? c->in.codes[f / 2] & 15u : c->in.codes[f / 2] >> 4;
            float a = c->in.absmax[f / c->block];
            c->fb[j] = qs_nf4_codebook[q] * a;
            c->gemv.overflow |= isinf(a) || fabsf(a) > 0x1p120f;
            double u = fabs((double)c->fa[j] * (double)qs_nf4_codebook[q]);
            unscaled += isfinite(u) ? u : 0.0;
        }
    c->gemv.overflow |= unscaled > 0x1p126;
    c->gemv.m = c->gemv.rows = c->gemv.ldy = 1;
    c->gemv.k = c->gemv.ldx = kept;
    c->gemv.x = c->fa;
    c->gemv.w = c->fb;
    return 0;
}

static size_t call_gather_sp24(const kc_case *c, kc_fn *fn, uint8_t *out)
{
    ((qs_mm_gather_sp24_fn *)fn)(c->in.x, c->meta, c->len, (float *)out);
    return (size_t)c->len * 2;
}

/* Variant mode: two x^T columns (absmax and x reversed) into an accumulator that already holds
 * values; typical: one column (absmax) into 0. */
static size_t call_sp24_axpy(const kc_case *c, kc_fn *fn, uint8_t *out)
{
    if (c->in.typical) {
        memset(out, 0, 4);
        ((qs_mm_sp24_axpy_fn *)fn)(c->in.x, c->meta, c->len, c->in.absmax, 1, 1, (float *)out);
        return 4;
    }
    memcpy(out, (const float[2]){0.5f, -0.0f}, 8); /* acc is accumulated into */
    ((qs_mm_sp24_axpy_fn *)fn)(c->in.x, c->meta, c->len, c->fa, 2, 2, (float *)out);
    return 8;
}

/* valid meta here: a nonzero return is a mismatch (-12345 in y) */
static size_t call_gemv_sp24(const kc_case *c, kc_fn *fn, uint8_t *out)
{
    float y[4];
    if (((qs_mm_gemv_sp24_fn *)fn)(&c->w, c->r0, c->rows, c->in.x, y) != 0)
        y[0] = -12345.0f;
    memcpy(out, y, (size_t)c->rows * 4);
    return (size_t)c->rows * 4;
}

/* rows starting on either nibble, at a block or not */
static size_t call_dot_sp24_nf4(const kc_case *c, kc_fn *fn, uint8_t *out)
{
    return put_f32(out, ((qs_mm_dot_sp24_nf4_fn *)fn)(c->in.x, c->meta, c->len, c->in.codes,
                                                      c->start, c->in.absmax, c->block));
}

/* n words of valid nibbles (typical: the meta of n columns, n / 16 words); in two variants of
 * three one nibble made invalid */
static int setup_meta_bad(kc_case *c)
{
    static const uint8_t bad[10] = {0x0, 0x1, 0x2, 0x3, 0x5, 0x6, 0x7, 0xA, 0xB, 0xF};
    int64_t n = c->in.n, words = c->in.typical ? n / 16 : n;
    const uint8_t *codes = c->in.codes;

    c->words = words;
    c->meta = scratch(c, (size_t)words * 2);
    if (!c->meta)
        return -1;
    for (int64_t i = 0; i < words; i++)
        for (int t = 0; t < 4; t++)
            c->meta[i] |= (uint16_t)(valid_nibbles[codes[(4 * i + t) % n] % 6] << (4 * t));
    if (!c->in.typical && c->in.variant % 3 != 0 && n > 0) {
        int64_t at = ((int64_t)codes[0] * 977 + c->in.variant * 131) % (4 * n);
        c->meta[at / 4] = (uint16_t)((c->meta[at / 4] & ~(15u << (4 * (at % 4)))) |
                                     (unsigned)bad[codes[n - 1] % 10] << (4 * (at % 4)));
    }
    return 0;
}

static size_t call_meta_bad(const kc_case *c, kc_fn *fn, uint8_t *out)
{
    int32_t v = ((qs_mm_sp24_meta_bad_fn *)fn)(c->meta, c->words) != 0;
    memcpy(out, &v, 4);
    return 4;
}

/* a block of 0 ... 47 rows and columns of the salted x (NaN payloads, Inf, -0 move as they are)
 * at strides with and without gaps; the gaps of the output stay untouched. Typical: 64 rows of
 * n / 64. */
static int setup_transpose(kc_case *c)
{
    int64_t n = c->in.n;
    int v = c->in.variant;

    if (c->in.typical) {
        c->rows = 64;
        c->k = n / 64;
        c->len = n / 64;
        c->ldy = 64;
        return 0;
    }
    c->rows = n % 48;
    c->k = (n / 48 + v * 5) % 48;
    c->len = c->k + v % 3;
    c->ldy = c->rows + (v / 3) % 2;
    if (c->rows * c->len > n)
        c->rows = c->len > 0 ? n / c->len : 0;
    return 0;
}

static size_t call_transpose(const kc_case *c, kc_fn *fn, uint8_t *out)
{
    ((qs_mm_transpose_f32_fn *)fn)(c->in.x, c->len, c->rows, c->k, (float *)out, c->ldy);
    return (size_t)(c->k * c->ldy) * 4;
}

/* ---- matmul: the tiled GEMM step -------------------------------------------------------------
 * Variant mode: 1...3 panels of 16 activation rows (the AVX-512 pair and its single tail) at a
 * panel stride with or without a gap, 1...14 W rows (whole register tiles of 12 and 6 and every
 * tail), k = n mod 257 columns (0 ... QS_MM_GEMM_KC), the first slice or one accumulated onto
 * earlier values (the output, gaps between rows untouched). Inputs cycle over the salted x values,
 * so NaN, Inf and signed zeros reach both the products and the sums. Typical: one slice, 12 W
 * rows (absmax) against up to 32 panels (x), written fresh. */
static int setup_gemm(kc_case *c)
{
    int v = c->in.variant;
    int64_t n = c->in.n;

    if (c->in.typical) {
        c->k = n >= 12 * QS_MM_GEMM_LDW ? QS_MM_GEMM_KC : 0;
        c->m = c->k > 0 ? min64(n / (16 * QS_MM_GEMM_KC), 32) : 0;
        c->len = 16 * QS_MM_GEMM_KC;
        c->rows = 12;
        c->ldy = 16 * c->m;
        c->flag = 0;
        return 0;
    }
    c->m = 1 + v % 3;
    c->rows = 1 + (v * 5) % 14;
    c->k = n % (QS_MM_GEMM_KC + 1);
    c->len = 16 * c->k + (v & 1 ? 16 : 0);
    c->ldy = 16 * c->m + 3;
    c->flag = (v >> 1) & 1;
    c->fa = scratch(c, (size_t)(c->m * c->len) * 4);
    c->fb = scratch(c, (size_t)(14 * QS_MM_GEMM_LDW) * 4);
    if (!c->fa || !c->fb)
        return -1;
    for (int64_t i = 0; i < c->m * c->len; i++)
        c->fa[i] = n > 0 ? c->in.x[i % n] : 0.0f;
    for (int64_t i = 0; i < 14 * QS_MM_GEMM_LDW; i++)
        c->fb[i] = n > 0 ? c->in.x[n - 1 - (i * 7) % n] : 0.0f;
    return 0;
}

static size_t call_gemm(const kc_case *c, kc_fn *fn, uint8_t *out)
{
    float *y = (float *)out;
    int64_t n = c->in.n;

    if (c->in.typical) {
        ((qs_mm_gemm_f32_fn *)fn)(c->in.x, c->len, c->m, c->k, c->in.absmax, c->rows, y, c->ldy, 0);
        return (size_t)(c->rows * c->ldy) * 4;
    }
    for (int64_t i = 0; i < c->rows * c->ldy; i++)
        y[i] = n > 0 ? c->in.x[(i * 3) % n] : 1.0f;
    ((qs_mm_gemm_f32_fn *)fn)(c->fa, c->len, c->m, c->k, c->fb, c->rows, y, c->ldy, c->flag);
    return (size_t)(c->rows * c->ldy) * 4;
}

/* ---- matmul: multi-row GEMV ------------------------------------------------------------------
 * Variant mode: m rows of x (1...8) against `rows` W rows (1...6, so the 4-row tiles and their
 * tails run) with k = n / max(m, rows) columns, every format parameter the drivers pass (NF4/FP4
 * blocks that do and do not divide k, INT8 groups of 1...40 or the row, one tensor scale or scales
 * per row, zero points or none, LLM.int8's scale multiplier fl(1/127) or 1), from the weight's
 * row 0 or, where the buffers hold one more row, row 1 (NF4/FP4 rows then start past the first
 * block). y is m x rows at a row stride of rows + 1, so a stray write between rows shows in the
 * gap. The GEMV rule gets the weight rows as the reference dequantizes them. Typical: one x row
 * against 4 W rows of n / 4 columns, blocks of 64, one scale per row, tensor scale 0.5. */

static const float fp8_tensor_scale[2] = {0.037f, 0.5f};

static int setup_gemv(kc_case *c)
{
    static const int32_t ms[12] = {1, 2, 3, 1, 4, 1, 5, 8, 1, 2, 1, 7};
    static const int32_t blocks[6] = {64, 32, 128, 16, 6, 2};
    const kc_in *in = &c->in;
    int s = c->slot, v = in->variant, typ = in->typical;
    int bnb4 = s == QS_SLOT_mm_gemv_nf4 || s == QS_SLOT_mm_gemv_fp4;
    int64_t n = in->n, m = typ ? 1 : ms[v % 12], rows = typ ? 4 : 1 + (v * 5) % 6;
    int64_t k = typ ? n / 4 : n / (m > rows ? m : rows);
    int32_t block = typ ? 64 : blocks[v % 6];
    float mul = !typ && v % 5 == 2 ? 1.0f / 127.0f : 1.0f;

    if (!typ && (v & 2) && s != QS_SLOT_mm_gemv_int8)
        k -= k % (bnb4 ? block : 32);
    int64_t group = typ || v % 4 == 0 ? (k > 0 ? k : 1) : 1 + (v * 7) % 40;
    int64_t spg = k > 0 ? (k + group - 1) / group : 0, sstride = typ ? 1 : v % 3 == 0 ? 0 : spg;
    int64_t rb4 = (k + 1) / 2, spr32 = (k + 31) / 32, spr16 = (k + 15) / 16;
    /* one more row than the call reads: nibbles of the flat 4-bit tensor, else whole rows of at
     * most k bytes, halves or floats in buffers of n */
    int64_t r0 = !typ && (v & 4) && (bnb4 ? k * (rows + 1) <= 2 * n : k * (rows + 1) <= n);
    qs_mm_weight *w = &c->w;

    c->m = m;
    c->rows = rows;
    c->k = k;
    c->r0 = r0;
    c->ldy = typ ? rows : rows + 1;
    *w = (qs_mm_weight){.n = r0 + rows, .k = k, .data = in->codes, .scale_mul = 1.0f};
    switch (s) {
    case QS_SLOT_mm_gemv_f32:
        w->data = in->absmax;
        w->row_bytes = 4 * k;
        break;
    case QS_SLOT_mm_gemv_f16:
    case QS_SLOT_mm_gemv_bf16:
        w->data = in->half;
        w->row_bytes = 2 * k;
        break;
    case QS_SLOT_mm_gemv_nf4:
    case QS_SLOT_mm_gemv_fp4:
        w->scale = in->absmax;
        w->group = block;
        break;
    case QS_SLOT_mm_gemv_int8:
        w->row_bytes = k;
        w->scale = in->absmax;
        w->sstride = sstride;
        w->group = group;
        w->zp = !typ && (v & 1) ? (const int8_t *)in->half : NULL;
        w->scale_mul = mul;
        break;
    case QS_SLOT_mm_gemv_e4m3:
    case QS_SLOT_mm_gemv_e5m2:
        w->row_bytes = k;
        w->scale = &fp8_tensor_scale[typ ? 1 : 0];
        break;
    case QS_SLOT_mm_gemv_mxfp4:
    case QS_SLOT_mm_gemv_mxfp8:
        w->row_bytes = s == QS_SLOT_mm_gemv_mxfp4 ? rb4 : k;
        w->scale = in->sbytes;
        w->sstride = spr32;
        w->group = 32;
        break;
    default: /* NVFP4 */
        w->row_bytes = rb4;
        w->scale = in->sbytes;
        w->sstride = spr16;
        w->group = 16;
        w->s_global = typ ? 0.5f : 0.37f;
        break;
    }
    if (typ)
        return 0;

    /* The GEMV rule's data: the call's W rows as the reference dequantizes them, and the largest
     * unscaled element value (a segment's f32 sum before its scale can reach sum|x| * vmax even
     * where the scaled sum is small: a tiny block scale). */
    float *wv = c->fa = scratch(c, (size_t)((r0 + rows) * k + 256) * 4);
    if (!wv)
        return -1;
    switch (s) {
    case QS_SLOT_mm_gemv_f32:
        memcpy(wv, in->absmax + r0 * k, (size_t)(rows * k) * sizeof(float));
        break;
    case QS_SLOT_mm_gemv_f16:
    case QS_SLOT_mm_gemv_bf16:
        (s == QS_SLOT_mm_gemv_f16 ? qs_cvt_f16_f32__ref : qs_cvt_bf16_f32__ref)(in->half + r0 * k,
                                                                                rows * k, wv);
        break;
    case QS_SLOT_mm_gemv_nf4:
    case QS_SLOT_mm_gemv_fp4:
        (s == QS_SLOT_mm_gemv_nf4 ? qs_nf4_dequant__ref : qs_fp4_dequant__ref)(
            in->codes, in->absmax, (r0 + rows) * k, block, wv);
        memmove(wv, wv + r0 * k, (size_t)(rows * k) * sizeof(float));
        break;
    case QS_SLOT_mm_gemv_int8: {
        const int8_t *q = (const int8_t *)in->codes;
        for (int64_t r = 0; r < rows; r++)
            for (int64_t col = 0; col < k; col++) {
                int64_t u = (r0 + r) * sstride + col / group;
                float sc = in->absmax[u] * mul;
                wv[r * k + col] = (float)(q[(r0 + r) * k + col] - (w->zp ? w->zp[u] : 0)) * sc;
            }
        break;
    }
    case QS_SLOT_mm_gemv_e4m3:
    case QS_SLOT_mm_gemv_e5m2:
        (s == QS_SLOT_mm_gemv_e4m3 ? qs_e4m3_dequant__ref : qs_e5m2_dequant__ref)(
            in->codes + r0 * k, rows * k, fp8_tensor_scale[0], wv);
        break;
    case QS_SLOT_mm_gemv_mxfp4:
    case QS_SLOT_mm_gemv_mxfp8:
        for (int64_t r = 0; r < rows; r++)
            (s == QS_SLOT_mm_gemv_mxfp4 ? qs_mxfp4_dequant__ref : qs_mxfp8_dequant__ref)(
                in->codes + (r0 + r) * w->row_bytes, in->sbytes + (r0 + r) * spr32, k, wv + r * k);
        break;
    default:
        for (int64_t r = 0; r < rows; r++)
            qs_nvfp4_dequant__ref(in->codes + (r0 + r) * rb4, in->sbytes + (r0 + r) * spr16, k,
                                  0.37f, wv + r * k);
        break;
    }
    c->gemv.vmax = s == QS_SLOT_mm_gemv_nf4                                   ? 1.0
                   : s == QS_SLOT_mm_gemv_fp4                                 ? 12.0
                   : s == QS_SLOT_mm_gemv_int8                                ? 255.0
                   : s == QS_SLOT_mm_gemv_e4m3 || s == QS_SLOT_mm_gemv_mxfp8  ? 448.0
                   : s == QS_SLOT_mm_gemv_e5m2                                ? 57344.0
                   : s == QS_SLOT_mm_gemv_mxfp4 || s == QS_SLOT_mm_gemv_nvfp4 ? 6.0
                                                                              : 0.0;
    c->gemv.m = m;
    c->gemv.rows = rows;
    c->gemv.k = k;
    c->gemv.ldy = c->ldy;
    c->gemv.x = in->x;
    c->gemv.ldx = k;
    c->gemv.w = wv;
    return 0;
}

static size_t call_gemv(const kc_case *c, kc_fn *fn, uint8_t *out)
{
    ((qs_mm_gemv_fn *)fn)(&c->w, c->r0, c->rows, c->in.x, c->k, c->m, (float *)out, c->ldy);
    return (size_t)(c->m * c->ldy) * 4;
}

/* ---- matmul: multi-row GEMV with bf16 activations ---------------------------------------------
 * The f32 GEMV's cases (setup_gemv: shapes, weights, parameters) with x rounded to bf16. The GEMV
 * rule gets x^ and the weights as the bf16 definition takes them (the NF4 / FP4 codebooks rounded
 * to bf16) and each element's scale for the flush term. */

static int32_t f32_gemv_slot(int32_t s)
{
    switch (s) {
    case QS_SLOT_mm_nf4abf16: return QS_SLOT_mm_gemv_nf4;
    case QS_SLOT_mm_fp4abf16: return QS_SLOT_mm_gemv_fp4;
    case QS_SLOT_mm_int8abf16: return QS_SLOT_mm_gemv_int8;
    case QS_SLOT_mm_e4m3abf16: return QS_SLOT_mm_gemv_e4m3;
    case QS_SLOT_mm_e5m2abf16: return QS_SLOT_mm_gemv_e5m2;
    case QS_SLOT_mm_mxfp4abf16: return QS_SLOT_mm_gemv_mxfp4;
    case QS_SLOT_mm_mxfp8abf16: return QS_SLOT_mm_gemv_mxfp8;
    case QS_SLOT_mm_nvfp4abf16: return QS_SLOT_mm_gemv_nvfp4;
    default: return QS_SLOT_mm_gemv_bf16;
    }
}

/* The scale of element (r, col) of the case's weight (row r of the call), as the f32 GEMV
 * applies it. */
static float gemv_elem_scale(const kc_case *c, int64_t r, int64_t col)
{
    const qs_mm_weight *w = &c->w;
    int64_t row = c->r0 + r;

    switch (c->slot) {
    case QS_SLOT_mm_nf4abf16:
    case QS_SLOT_mm_fp4abf16: return c->in.absmax[(row * w->k + col) / w->group];
    case QS_SLOT_mm_int8abf16:
        return c->in.absmax[row * w->sstride + col / w->group] * w->scale_mul;
    case QS_SLOT_mm_e4m3abf16:
    case QS_SLOT_mm_e5m2abf16: return *(const float *)w->scale;
    case QS_SLOT_mm_mxfp4abf16:
    case QS_SLOT_mm_mxfp8abf16:
        return qs_ref_e8m0_decode(c->in.sbytes[row * w->sstride + col / 32]);
    case QS_SLOT_mm_nvfp4abf16:
        return qs_ref_e4m3_decode(c->in.sbytes[row * w->sstride + col / 16] & 0x7F) * w->s_global;
    default: return 1.0f;
    }
}

static int setup_gemv_bf16(kc_case *c)
{
    const kc_in *in = &c->in;
    int32_t s = c->slot;
    int64_t n = in->n;
    int st;

    c->slot = f32_gemv_slot(s);
    st = setup_gemv(c);
    c->slot = s;
    if (st != 0)
        return st;
    if (!(c->h16 = scratch(c, (size_t)n * 2)))
        return -1;
    for (int64_t i = 0; i < n; i++)
        c->h16[i] = qs_ref_f32_to_bf16(in->x[i]);
    if (in->typical)
        return 0;

    float *xf = c->fb = scratch(c, (size_t)n * 4 + 4);
    float *ws = scratch(c, (size_t)(c->rows * c->k) * 4 + 4);
    if (!xf || !ws)
        return -1;
    qs_cvt_bf16_f32__ref(c->h16, n, xf);
    for (int64_t r = 0; r < c->rows; r++)
        for (int64_t col = 0; col < c->k; col++)
            ws[r * c->k + col] = gemv_elem_scale(c, r, col);
    if (s == QS_SLOT_mm_nf4abf16 || s == QS_SLOT_mm_fp4abf16) {
        /* the weights again, from the codebook rounded to bf16 */
        const float *book = s == QS_SLOT_mm_nf4abf16 ? qs_nf4_codebook : qs_fp4_codebook;
        for (int64_t r = 0; r < c->rows; r++)
            for (int64_t col = 0; col < c->k; col++) {
                int64_t f = (c->r0 + r) * c->k + col;
                uint8_t q = f & 1 ? in->codes[f / 2] & 0xF : in->codes[f / 2] >> 4;
                c->fa[r * c->k + col] =
                    qs_ref_bf16_to_f32(qs_ref_f32_to_bf16(book[q])) * ws[r * c->k + col];
            }
    }
    c->gemv.x = xf;
    c->gemv.ws = ws;
    return 0;
}

static size_t call_gemv_bf16(const kc_case *c, kc_fn *fn, uint8_t *out)
{
    ((qs_mm_gemv_xbf16_fn *)fn)(&c->w, c->r0, c->rows, c->h16, c->k, c->m, (float *)out, c->ldy);
    return (size_t)(c->m * c->ldy) * 4;
}

/* ---- matmul: int8 activations (src/ref/mm8_ref.c) ---------------------------------------------
 * Variant mode: m x rows outputs over rows of length kk cut from the n inputs, x codes in
 * [-127, 127] (the quantizer's range; -128 becomes -127) with their sums per xsum unit, INT8
 * groups of 1 ... kk from row 0 or 1 where the buffers hold it, NF4/FP4 from row 0, 1, 2 (rows on
 * whole blocks) or, with an odd row length, from row 1 (rows starting on the low nibble: the
 * reference fallback); MXFP4 / NVFP4 rows with random scale bytes (E8M0 0x00, 0x01, 0xFE, NaN
 * 0xFF; E4M3 zero, subnormal, NaN 0x7F) and NVFP4 tensor scales of every class; FP8 E4M3 rows
 * with NaN codes in one variant of three and tensor scales of every class. Typical: one x row
 * against 4 W rows of n / 4, one scale per row, blocks of 64. */
static int setup_mm8(kc_case *c)
{
    static const int32_t blocks[] = {64, 128, 32, 6, 256, 64};
    const float tscales[] = {1.0f, 0.037f, 3.0e-39f, 1e30f, INFINITY, NAN, 0.0f, -2.5f};
    const kc_in *in = &c->in;
    int v = in->variant, typ = in->typical;
    int32_t s = c->slot;
    int64_t n = in->n, m = typ ? 1 : 1 + v % 5, rows = typ ? 4 : 1 + (v * 5) % 7;
    int64_t kk = typ ? min64(n / 4, (int64_t)1 << 22) : n / (m > rows ? m : rows) / 2;
    int64_t unit, r0 = 0;

    c->xq = scratch(c, (size_t)(m * kk) + 1);
    c->xs = scratch(c, (size_t)(m * kk + 1) * 4);
    if (!c->xq || !c->xs)
        return -1;
    for (int64_t i = 0; i < m * kk; i++)
        c->xq[i] = (int8_t)(in->sbytes[i] == 0x80 ? 0x81 : in->sbytes[i]);
    if (s == QS_SLOT_mm_w8a8) {
        int64_t group = typ || v % 3 == 0 ? (kk > 0 ? kk : 1) : 1 + (v * 37) % 130;
        int64_t ng = kk > 0 ? (kk + group - 1) / group : 0;
        r0 = !typ && ((v >> 2) & 1) && (rows + 1) * kk <= n;
        unit = group;
        c->w = (qs_mm_weight){.n = r0 + rows,
                              .k = kk,
                              .data = in->codes,
                              .row_bytes = kk,
                              .scale = in->absmax,
                              .sstride = typ          ? 1
                                         : v % 4 == 1 ? 0
                                                      : ng,
                              .group = group,
                              .zp = !typ && (v & 1) ? (const int8_t *)in->half : NULL,
                              .scale_mul = 1.0f};
    } else if (s == QS_SLOT_mm_mxfp4a8 || s == QS_SLOT_mm_nvfp4a8) {
        int64_t block = s == QS_SLOT_mm_mxfp4a8 ? 32 : 16, rb = (kk + 1) / 2;
        r0 = !typ && (v & 1) && (rows + 1) * rb <= n / 2;
        unit = block;
        c->w = (qs_mm_weight){.n = r0 + rows,
                              .k = kk,
                              .data = in->codes,
                              .row_bytes = rb,
                              .scale = in->sbytes + n / 2,
                              .sstride = (kk + block - 1) / block,
                              .group = block,
                              .scale_mul = 1.0f,
                              .s_global = typ ? 0.37f : tscales[v % 8]};
    } else if (s == QS_SLOT_mm_e4m3a8) {
        uint8_t *codes = scratch(c, (size_t)n + 1);
        if (!codes)
            return -1;
        /* NaN codes (0x7F, 0xFF) make their segment NaN: kept in one variant of three */
        for (int64_t i = 0; i < n; i++)
            codes[i] = !typ && v % 3 == 2              ? in->codes[i]
                       : (in->codes[i] & 0x7F) == 0x7F ? in->codes[i] ^ 0x01
                                                       : in->codes[i];
        c->scale = typ ? 0.01f : tscales[v % 8];
        r0 = !typ && (v & 1) && (rows + 1) * kk <= n;
        unit = QS_MM_E4M3A8_SEG;
        c->w = (qs_mm_weight){.n = r0 + rows,
                              .k = kk,
                              .data = codes,
                              .row_bytes = kk,
                              .scale = &c->scale,
                              .group = kk > 0 ? kk : 1,
                              .scale_mul = 1.0f};
    } else {
        r0 = typ ? 0 : v % 6 == 5 ? 1 : v % 3;
        if (!typ && v % 6 == 5 && kk % 2 == 0 && kk > 1)
            kk--; /* odd rows: row 1 starts on a low nibble */
        unit = 64;
        c->w = (qs_mm_weight){.n = r0 + rows,
                              .k = kk,
                              .data = in->codes,
                              .scale = in->absmax,
                              .group = typ ? 64 : blocks[v % 6],
                              .scale_mul = 1.0f};
    }
    int64_t nu = kk > 0 ? (kk + unit - 1) / unit : 0;
    for (int64_t i = 0; i < m; i++)
        for (int64_t u = 0; u < nu; u++) {
            int32_t a = 0;
            for (int64_t k = u * unit; k < (u + 1) * unit && k < kk; k++)
                a += c->xq[i * kk + k];
            c->xs[i * nu + u] = a;
        }
    c->m = m;
    c->rows = rows;
    c->r0 = r0;
    return 0;
}

static size_t call_mm8(const kc_case *c, kc_fn *fn, uint8_t *out)
{
    ((qs_mm_a8_fn *)fn)(c->xq, c->xs, c->m, &c->w, c->r0, c->rows, (float *)out, c->rows);
    return (size_t)(c->m * c->rows) * 4;
}

/* ---- the entries: one row per slot ----------------------------------------------------------- */

#define FAM KC_RULE_FAMILY
static const struct kc_entry entries[] = {
    {QS_SLOT_cvt_f16_f32, FAM, NULL, call_cvt_to_f32},
    {QS_SLOT_cvt_bf16_f32, FAM, NULL, call_cvt_to_f32},
    {QS_SLOT_cvt_f32_f16, FAM, NULL, call_cvt_from_f32},
    {QS_SLOT_cvt_f32_bf16, FAM, NULL, call_cvt_from_f32},
    {QS_SLOT_copy_stream_f32, FAM, NULL, call_copy_stream},
    {QS_SLOT_amax_f32, FAM, NULL, call_amax},
    {QS_SLOT_minmax_f32, FAM, NULL, call_minmax},
    {QS_SLOT_nonfinite_f32, FAM, setup_nonfinite, call_nonfinite},
    {QS_SLOT_nf4_quant, FAM, NULL, call_block_quant},
    {QS_SLOT_fp4_quant, FAM, NULL, call_block_quant},
    {QS_SLOT_dyn8_quant, FAM, NULL, call_block_quant},
    {QS_SLOT_nf4_dequant, FAM, NULL, call_bnb4_dequant},
    {QS_SLOT_fp4_dequant, FAM, NULL, call_bnb4_dequant},
    {QS_SLOT_dyn8_dequant, FAM, NULL, call_dyn8_dequant},
    {QS_SLOT_int8_quant, FAM, NULL, call_int8_quant},
    {QS_SLOT_int8_dequant, FAM, NULL, call_int8_dequant},
    {QS_SLOT_int8_dequant_rowstat, FAM, NULL, call_int8_rowstat},
    {QS_SLOT_e4m3_quant, FAM, NULL, call_fp8_quant},
    {QS_SLOT_e5m2_quant, FAM, NULL, call_fp8_quant},
    {QS_SLOT_e4m3_dequant, FAM, NULL, call_fp8_dequant},
    {QS_SLOT_e5m2_dequant, FAM, NULL, call_fp8_dequant},
    {QS_SLOT_mxfp4_quant, FAM, NULL, call_mx_quant},
    {QS_SLOT_mxfp8_quant, FAM, NULL, call_mx_quant},
    {QS_SLOT_mxfp4_dequant, FAM, NULL, call_mx_dequant},
    {QS_SLOT_mxfp8_dequant, FAM, NULL, call_mx_dequant},
    {QS_SLOT_nvfp4_quant, FAM, NULL, call_nvfp4_quant},
    {QS_SLOT_nvfp4_dequant, FAM, NULL, call_nvfp4_dequant},
    {QS_SLOT_sp24_mask_f32, FAM, setup_sparse, call_sp24_mask},
    {QS_SLOT_sp24_prune_f32, FAM, setup_sparse, call_sp24_prune},
    {QS_SLOT_sp24_compress_f32, FAM, setup_sparse, call_sp24_compress_f32},
    {QS_SLOT_sp24_compress_u16, FAM, setup_sparse, call_sp24_compress_u16},
    {QS_SLOT_sp24_decompress_f32, FAM, setup_sparse, call_sp24_decompress_f32},
    {QS_SLOT_sp24_decompress_u16, FAM, setup_sparse, call_sp24_decompress_u16},
    {QS_SLOT_sp24_tile_f32, FAM, NULL, call_sp24_tile},
    {QS_SLOT_nm_mask_f32, FAM, NULL, call_nm_mask},
    {QS_SLOT_nm_srste_f32, FAM, NULL, call_nm_srste},
    {QS_SLOT_hist_scan, FAM, NULL, call_hist_scan},
    {QS_SLOT_hist_update, FAM, setup_hist_update, call_hist_update},
    {QS_SLOT_hist_scan_update, FAM, setup_hist_scan_update, call_hist_scan_update},
    {QS_SLOT_hist_sumsq, FAM, NULL, call_hist_sumsq},
    {QS_SLOT_mm_dot_f32, FAM, NULL, call_dot_f32},
    {QS_SLOT_mm_dot_f16, FAM, NULL, call_dot_half},
    {QS_SLOT_mm_dot_bf16, FAM, NULL, call_dot_half},
    {QS_SLOT_mm_dot_nf4, FAM, NULL, call_dot_bnb4},
    {QS_SLOT_mm_dot_fp4, FAM, NULL, call_dot_bnb4},
    {QS_SLOT_mm_dot_int8, FAM, NULL, call_dot_int8},
    {QS_SLOT_mm_dot_e4m3, FAM, NULL, call_dot_fp8},
    {QS_SLOT_mm_dot_e5m2, FAM, NULL, call_dot_fp8},
    {QS_SLOT_mm_dot_mxfp4, FAM, NULL, call_dot_mx},
    {QS_SLOT_mm_dot_mxfp8, FAM, NULL, call_dot_mx},
    {QS_SLOT_mm_dot_nvfp4, FAM, NULL, call_dot_nvfp4},
    {QS_SLOT_mm_dot_w8a8, FAM, NULL, call_dot_w8a8},
    {QS_SLOT_mm_gather_sp24, FAM, setup_sp24_mm, call_gather_sp24},
    {QS_SLOT_mm_sp24_axpy, FAM, setup_sp24_mm, call_sp24_axpy},
    {QS_SLOT_mm_gemv_f32, KC_RULE_GEMV, setup_gemv, call_gemv},
    {QS_SLOT_mm_gemv_f16, KC_RULE_GEMV, setup_gemv, call_gemv},
    {QS_SLOT_mm_gemv_bf16, KC_RULE_GEMV, setup_gemv, call_gemv},
    {QS_SLOT_mm_gemv_nf4, KC_RULE_GEMV, setup_gemv, call_gemv},
    {QS_SLOT_mm_gemv_fp4, KC_RULE_GEMV, setup_gemv, call_gemv},
    {QS_SLOT_mm_gemv_int8, KC_RULE_GEMV, setup_gemv, call_gemv},
    {QS_SLOT_mm_gemv_e4m3, KC_RULE_GEMV, setup_gemv, call_gemv},
    {QS_SLOT_mm_gemv_e5m2, KC_RULE_GEMV, setup_gemv, call_gemv},
    {QS_SLOT_mm_gemv_mxfp4, KC_RULE_GEMV, setup_gemv, call_gemv},
    {QS_SLOT_mm_gemv_mxfp8, KC_RULE_GEMV, setup_gemv, call_gemv},
    {QS_SLOT_mm_gemv_nvfp4, KC_RULE_GEMV, setup_gemv, call_gemv},
    {QS_SLOT_mm_w8a8, KC_RULE_EXACT, setup_mm8, call_mm8},
    {QS_SLOT_mm_nf4a8, KC_RULE_EXACT, setup_mm8, call_mm8},
    {QS_SLOT_mm_fp4a8, KC_RULE_EXACT, setup_mm8, call_mm8},
    {QS_SLOT_mm_mxfp4a8, KC_RULE_EXACT, setup_mm8, call_mm8},
    {QS_SLOT_mm_nvfp4a8, KC_RULE_EXACT, setup_mm8, call_mm8},
    {QS_SLOT_mm_e4m3a8, KC_RULE_EXACT, setup_mm8, call_mm8},
    {QS_SLOT_mm_nf4abf16, KC_RULE_GEMV, setup_gemv_bf16, call_gemv_bf16},
    {QS_SLOT_mm_fp4abf16, KC_RULE_GEMV, setup_gemv_bf16, call_gemv_bf16},
    {QS_SLOT_mm_int8abf16, KC_RULE_GEMV, setup_gemv_bf16, call_gemv_bf16},
    {QS_SLOT_mm_e4m3abf16, KC_RULE_GEMV, setup_gemv_bf16, call_gemv_bf16},
    {QS_SLOT_mm_e5m2abf16, KC_RULE_GEMV, setup_gemv_bf16, call_gemv_bf16},
    {QS_SLOT_mm_mxfp4abf16, KC_RULE_GEMV, setup_gemv_bf16, call_gemv_bf16},
    {QS_SLOT_mm_mxfp8abf16, KC_RULE_GEMV, setup_gemv_bf16, call_gemv_bf16},
    {QS_SLOT_mm_nvfp4abf16, KC_RULE_GEMV, setup_gemv_bf16, call_gemv_bf16},
    {QS_SLOT_mm_bf16abf16, KC_RULE_GEMV, setup_gemv_bf16, call_gemv_bf16},
    {QS_SLOT_mm_dot_sp24_nf4, KC_RULE_SP24, setup_sp24_mm, call_dot_sp24_nf4},
    {QS_SLOT_mm_gemm_f32, FAM, setup_gemm, call_gemm},
    {QS_SLOT_mm_gemv_sp24_f32, KC_RULE_SP24, setup_sp24_mm, call_gemv_sp24},
    {QS_SLOT_mm_gemv_sp24_f16, KC_RULE_SP24, setup_sp24_mm, call_gemv_sp24},
    {QS_SLOT_mm_gemv_sp24_bf16, KC_RULE_SP24, setup_sp24_mm, call_gemv_sp24},
    {QS_SLOT_mm_gemv_sp24_nf4, KC_RULE_SP24, setup_sp24_mm, call_gemv_sp24},
    {QS_SLOT_mm_sp24_meta_bad, FAM, setup_meta_bad, call_meta_bad},
    {QS_SLOT_mm_transpose_f32, FAM, setup_transpose, call_transpose},
};
#undef FAM

static const struct kc_entry *entry_of(int32_t slot)
{
    for (size_t i = 0; i < sizeof entries / sizeof entries[0]; i++)
        if (entries[i].slot == slot)
            return &entries[i];
    return NULL;
}

kc_rule kc_slot_rule(int32_t slot)
{
    const struct kc_entry *e = entry_of(slot);
    return e ? e->rule : KC_RULE_FAMILY;
}

int kc_setup(kc_case *c, int32_t slot, const kc_in *in)
{
    const struct kc_entry *e = entry_of(slot);

    memset(c, 0, sizeof *c);
    if (!e)
        return 0;
    c->in = *in;
    c->slot = slot;
    c->rule = e->rule;
    c->entry = e;
    if (e->setup && e->setup(c) != 0) {
        kc_release(c);
        return -1;
    }
    return 1;
}

size_t kc_call(const kc_case *c, kc_fn *fn, uint8_t *out)
{
    return c->entry->call(c, fn, out);
}

void kc_release(kc_case *c)
{
    for (int i = 0; i < c->nmem; i++)
        free(c->mem[i]);
    c->nmem = 0;
}

int kc_entry_runs(const struct qs_kernel_entry *e)
{
    if ((e->isa & ~qs_cpu_isa()) != 0)
        return 0;
#if defined(__x86_64__)
    if ((e->isa & (QS_ISA_AMX_TILE | QS_ISA_AMX_INT8 | QS_ISA_AMX_BF16)) && !qs_x86_amx_request())
        return 0;
#endif
    return 1;
}
