/* SPDX-License-Identifier: MIT */
/*
 * 2:4 sparse matmul (include/qsparse/matmul.h, docs/sparsity.md §3): the two kernel slots of
 * the 2:4 paths, every registered implementation the CPU runs against its reference, and the
 * GEMM path of qs_matmul against the outer-product definition restated here.
 *
 * - mm_sp24_axpy (the GEMM step) keeps the reference's operations and order, so every
 *   implementation must give the reference's bytes: accumulator lengths 0 ... 130 (tails of the
 *   64-row register blocks and of the 16- and 8-lane vectors), a row stride larger than the
 *   length, every valid meta nibble at every position of a word, row lengths that end inside a
 *   word, values and x^T salted with NaN (signalling too), +-Inf, -0 and denormals, an
 *   accumulator that already holds such values.
 * - mm_gather_sp24 (the GEMV gather) only moves values: bytes equal to the reference's, NaN
 *   payloads included, over the same meta patterns and lengths.
 * - mm_gemv_sp24_f32 / f16 / bf16 and mm_dot_sp24_nf4 (the fused GEMV, one row) sum in their
 *   own order (FMA, lane-wise block scales): within the GEMV bound of the reference over
 *   lengths 0 ... 520 columns (every
 *   tail of the 32-column steps), every nibble at every position, f16 and bf16 values of every
 *   bit pattern, NF4 rows starting at and off a multiple of 16 kept values with blocks of
 *   2 ... 4096 (both the vector path and its fallback), NaN, Inf, denormal and huge values in x,
 *   values and block scales (Inf, NaN, denormal absmax), a NaN result always the canonical one.
 * - qs_matmul on the GEMM path (M >= QS_MATMUL_GEMM_MIN_M) for 2:4 f32/f16/bf16 and 2:4 + NF4
 *   weights: y[m, n] = canon(fl(acc + bias[n])), acc = fl(acc + fl(v_j * x[m, col_j])) over the
 *   kept values j of row n in ascending order from +0, bit for bit, over shapes with tails in M
 *   (more than one group of packed panels), N (tasks of rows) and K (slices of columns), with
 *   NaN and Inf in x, for 1 and 2 threads.
 * - the meta check of qs_matmul: every nibble value at every group, full and partial words.
 */
#include "common.h"
#include "core/internal.h"
#include "core/kernels.h"
#include "kernel_entries.h"
#include "quant_helpers.h"
#include "ref/ref.h"

static const uint8_t valid_nibbles[6] = {0x4, 0x8, 0xC, 0x9, 0xD, 0xE};

/* Meta of `groups` groups: group g takes nibble (g + shift) % 6 of the valid ones, so over the
 * six shifts every nibble sits at every position of a word. Leftover nibbles stay 0. */
static void make_meta(uint16_t *meta, int64_t groups, int shift)
{
    for (int64_t w = 0; w < (groups + 3) / 4; w++)
        meta[w] = 0;
    for (int64_t g = 0; g < groups; g++)
        meta[g / 4] |= (uint16_t)(valid_nibbles[(g + shift) % 6] << (4 * (g % 4)));
}

/* Run `check` for every entry of `slot` other than the reference that this CPU can run. */
static int for_each_impl(int32_t slot, void (*check)(const struct qs_kernel_entry *impl,
                                                     const struct qs_kernel_entry *ref))
{
    int32_t count, done = 0;
    const struct qs_kernel_entry *e = qs_kernel_entries(&count), *ref = test_ref_entry(slot);
    uint32_t cpu = qs_cpu_isa();

    assert_non_null(ref);
    for (int32_t i = 0; i < count; i++)
        if (e[i].slot == slot && e[i].isa != 0 && (e[i].isa & ~cpu) == 0) {
            check(&e[i], ref);
            done++;
        }
    return done;
}

/* ---- the kernels ------------------------------------------------------------------------------
 */

#define MAX_M 130
#define MAX_K 148

static void check_axpy(const struct qs_kernel_entry *impl, const struct qs_kernel_entry *ref)
{
    static const int64_t ks[] = {0, 4, 8, 12, 16, 20, 28, 32, 36, 64, 68, 132, 148};
    qs_mm_sp24_axpy_fn *f = (qs_mm_sp24_axpy_fn *)impl->fn, *fr = (qs_mm_sp24_axpy_fn *)ref->fn;
    t_rng r = {0x5A24};
    float *values = malloc(MAX_K / 2 * sizeof(float));
    float *xt = malloc((size_t)MAX_K * (MAX_M + 3) * sizeof(float));
    uint16_t meta[MAX_K / 16 + 1];
    int64_t checks = 0;

    assert_true(values && xt);
    for (int64_t m = 0; m <= MAX_M; m++)
        for (size_t ki = 0; ki < sizeof ks / sizeof ks[0]; ki++) {
            int64_t k = ks[ki], ld = m + 3;
            float acc0[MAX_M + 1], got[MAX_M + 1], want[MAX_M + 1];
            int special = (m + (int64_t)ki) % 3 == 0; /* a third of the runs get specials */

            make_meta(meta, k / 4, (int)((m + (int64_t)ki) % 6));
            t_fill_mixed(&r, values, k / 2, special ? 0.05 : 0.0);
            t_fill_mixed(&r, xt, k * ld, special ? 0.02 : 0.0);
            t_fill_mixed(&r, acc0, m + 1, special ? 0.05 : 0.0);
            memcpy(got, acc0, sizeof acc0);
            memcpy(want, acc0, sizeof acc0);
            f(values, meta, k, xt, ld, m, got);
            fr(values, meta, k, xt, ld, m, want);
            if (!T_ASSERT_BYTES(impl->name, got, want, (size_t)(m + 1) * sizeof(float)))
                fail_msg("%s: m = %lld, n = %lld", impl->name, (long long)m, (long long)k);
            checks++;
        }
    print_message("  %-36s bit-exact vs ref: %lld runs\n", impl->name, (long long)checks);
    free(values);
    free(xt);
}

static void test_axpy_kernels(void **state)
{
    (void)state;
    if (for_each_impl(QS_SLOT_mm_sp24_axpy, check_axpy) == 0)
        print_message("  no mm_sp24_axpy implementation runs here beside the reference\n");
}

static void check_gather(const struct qs_kernel_entry *impl, const struct qs_kernel_entry *ref)
{
    qs_mm_gather_sp24_fn *f = (qs_mm_gather_sp24_fn *)impl->fn;
    qs_mm_gather_sp24_fn *fr = (qs_mm_gather_sp24_fn *)ref->fn;
    t_rng r = {0x6A24};
    float x[260], got[131], want[131];
    uint16_t meta[260 / 16 + 1];

    for (int64_t k = 0; k <= 260; k += 4)
        for (int shift = 0; shift < 6; shift++) {
            make_meta(meta, k / 4, shift);
            t_fill_mixed(&r, x, k, 0.1);
            memset(got, 0x88, sizeof got); /* canary past the k / 2 outputs */
            memset(want, 0x88, sizeof want);
            f(x, meta, k, got);
            fr(x, meta, k, want);
            if (!T_ASSERT_BYTES(impl->name, got, want, sizeof got))
                fail_msg("%s: n = %lld, shift %d", impl->name, (long long)k, shift);
        }
    print_message("  %-36s bit-exact vs ref\n", impl->name);
}

static void test_gather_kernels(void **state)
{
    (void)state;
    if (for_each_impl(QS_SLOT_mm_gather_sp24, check_gather) == 0)
        print_message("  no mm_gather_sp24 implementation runs here beside the reference\n");
}

/* The fused GEMV dot products sum in another order than the reference (FMA, lane-wise block
 * scales: include/qsparse/matmul.h), so they are checked against the reference within the GEMV
 * bound: |got - want| <= (kept/16 + 8) 2^-23 sum_j |xg_j v_j| over the kept products, v_j the
 * value as the reference decodes it (NF4: codebook times the block's absmax). A non-finite
 * product (NaN or Inf in x, values or scales) asks for the same class: NaN meets NaN and an
 * infinity the same infinity; a sum that may overflow in one order (past 2^126, or a scale
 * near the f32 limit) only asks for a result. */
static int32_t g_dot_slot;

static int dot_within(float got, float want, const float *x, const uint16_t *meta, int64_t k,
                      const float *v, int overflow)
{
    float xg[260];
    double b = 0.0;
    int nonfinite = 0;

    qs_mm_gather_sp24__ref(x, meta, k, xg);
    for (int64_t j = 0; j < k / 2; j++) {
        double p = fabs((double)xg[j] * (double)v[j]);
        if (isfinite(p))
            b += p;
        else
            nonfinite = 1;
    }
    if (t_bits(got) == t_bits(want) || overflow || b > 0x1p126)
        return 1;
    if (nonfinite)
        return isnan(got) == isnan(want) && (!(isinf(got) || isinf(want)) || got == want);
    return isfinite(got) && fabs((double)got - (double)want) <=
                                ((double)(k / 2) / 16.0 + 8.0) * 0x1p-23 * b + 0x1p-140;
}

static void check_dot(const struct qs_kernel_entry *impl, const struct qs_kernel_entry *ref)
{
    static const int32_t blocks[] = {64, 16, 32, 128, 2, 6, 4096};
    static const int64_t starts[] = {0, 16, 64, 1, 6};
    /* absmax specials: Inf, NaN, a denormal, 2^-149, a huge scale */
    static const float amax_special[] = {INFINITY, NAN, 3e-39f, 0x1p-149f, 3e38f};
    t_rng r = {0x7A24};
    float x[520], w[260], v[260];
    uint16_t h[260], meta[520 / 16 + 1];
    uint8_t codes[200];
    int64_t runs = 0, exact = 0;

    for (int64_t k = 0; k <= 520; k += 4)
        for (int pv = 0; pv < 6; pv++) {
            float got, want;
            int overflow = 0;
            make_meta(meta, k / 4, pv);
            t_fill_mixed(&r, x, k, pv % 2 ? 0.02 : 0.0);
            t_fill_mixed(&r, w, k / 2, pv % 3 == 0 ? 0.02 : 0.0);
            for (int64_t i = 0; i < k / 2; i++)
                h[i] = (uint16_t)t_next(&r);
            for (size_t i = 0; i < sizeof codes; i++)
                codes[i] = (uint8_t)t_next(&r);
            switch (g_dot_slot) {
            case QS_SLOT_mm_gemv_sp24_f32:
            case QS_SLOT_mm_gemv_sp24_f16:
            case QS_SLOT_mm_gemv_sp24_bf16: { /* one row of the GEMV slot */
                int f32 = g_dot_slot == QS_SLOT_mm_gemv_sp24_f32;
                qs_mm_weight wv = {.n = 1,
                                   .k = k / 2,
                                   .data = f32 ? (const void *)w : (const void *)h,
                                   .row_bytes = k / 2 * (f32 ? 4 : 2),
                                   .scale_mul = 1.0f,
                                   .meta = meta,
                                   .words = (k + 15) / 16};
                assert_int_equal(((qs_mm_gemv_sp24_fn *)impl->fn)(&wv, 0, 1, x, &got), 0);
                assert_int_equal(((qs_mm_gemv_sp24_fn *)ref->fn)(&wv, 0, 1, x, &want), 0);
                if (f32)
                    memcpy(v, w, sizeof v);
                else
                    (g_dot_slot == QS_SLOT_mm_gemv_sp24_f16 ? qs_cvt_f16_f32__ref
                                                            : qs_cvt_bf16_f32__ref)(h, k / 2, v);
                break;
            }
            default: {
                int32_t b = blocks[(k / 4 + pv) % 7];
                int64_t st = starts[(k / 4 + pv) % 5];
                float amax[300];
                for (int i = 0; i < 300; i++)
                    amax[i] = i % 17 == 0 && pv >= 4 ? amax_special[(i / 17 + k) % 5]
                                                     : (float)t_unif(&r);
                got = ((qs_mm_dot_sp24_nf4_fn *)impl->fn)(x, meta, k, codes, st, amax, b);
                want = ((qs_mm_dot_sp24_nf4_fn *)ref->fn)(x, meta, k, codes, st, amax, b);
                for (int64_t j = 0; j < k / 2; j++) {
                    int64_t f = st + j;
                    float a = amax[f / b];
                    v[j] = qs_nf4_codebook[f & 1 ? codes[f / 2] & 15u : codes[f / 2] >> 4] * a;
                    overflow |= a > 0x1p120f; /* Inf too: lane-wise or whole-block scaling */
                }
                break;
            }
            }
            if (!dot_within(got, want, x, meta, k, v, overflow))
                fail_msg("%s: n = %lld, pattern %d: got %.9g (0x%08x), want %.9g (0x%08x)",
                         impl->name, (long long)k, pv, got, t_bits(got), want, t_bits(want));
            if (isnan(got)) /* the NaN rule: a computed NaN is the canonical one */
                assert_int_equal(t_bits(got), QS_NAN_F32_BITS);
            exact += t_bits(got) == t_bits(want);
            runs++;
        }
    print_message("  %-36s within the GEMV bound: %lld runs (%lld bit-identical)\n", impl->name,
                  (long long)runs, (long long)exact);
}

static void test_dot_kernels(void **state)
{
    static const int32_t slots[] = {QS_SLOT_mm_gemv_sp24_f32, QS_SLOT_mm_gemv_sp24_f16,
                                    QS_SLOT_mm_gemv_sp24_bf16, QS_SLOT_mm_dot_sp24_nf4};
    (void)state;
    for (size_t i = 0; i < sizeof slots / sizeof slots[0]; i++) {
        g_dot_slot = slots[i];
        if (for_each_impl(slots[i], check_dot) == 0)
            print_message("  no %s implementation runs here beside the reference\n",
                          qs_slot_name(slots[i]));
    }
}

/* mm_gemv_sp24_nf4 (several rows of 2:4 + NF4 per call): each row within the GEMV bound of the
 * one-row reference, over 1 ... 9 rows (the 4-row blocks of the AVX-512 version and the rows
 * left over), row lengths that are and are not a whole number of blocks (the one-row fallback),
 * blocks of 16 ... 256 and odd ones, a first row r0 of 0 ... 5 (its kept values on and off a
 * block), NaN / Inf / denormal x and Inf / NaN / denormal absmax in some blocks of some rows. */
static void check_gemv_rows(const struct qs_kernel_entry *impl, const struct qs_kernel_entry *ref)
{
    static const int64_t ks[] = {32, 64, 128, 256, 512, 96, 36, 0, 8};
    static const int32_t blocks[] = {64, 16, 32, 128, 256, 48, 6};
    static const int64_t r0s[] = {0, 1, 4, 2, 5};
    static const float amax_special[] = {INFINITY, NAN, 3e-39f, -INFINITY};
    qs_mm_gemv_sp24_nf4_fn *f = (qs_mm_gemv_sp24_nf4_fn *)impl->fn;
    t_rng r = {0x8A24};
    enum { ROWS = 9 + 5, KMAX = 512, WORDS = KMAX / 16 }; /* up to 9 rows from row 5 */
    static float x[KMAX], amax[ROWS * KMAX / 2 / 6 + 2], v[KMAX / 2];
    static uint16_t meta[ROWS * WORDS];
    static uint8_t codes[ROWS * KMAX / 4];
    int64_t runs = 0, exact = 0;

    for (size_t ki = 0; ki < sizeof ks / sizeof ks[0]; ki++)
        for (int64_t rows = 1; rows <= 9; rows++)
            for (int pv = 0; pv < 4; pv++) {
                int64_t k = ks[ki], words = (k + 15) / 16, kept = k / 2;
                int32_t b = blocks[(ki + (size_t)rows + (size_t)pv) % 7];
                int64_t r0 = r0s[(ki + (size_t)pv) % 5], st = r0 * kept;
                float got[ROWS + 1], want[ROWS];
                int special = pv == 3;
                qs_mm_weight wv = {.n = r0 + rows,
                                   .k = kept,
                                   .data = codes,
                                   .scale = amax,
                                   .group = b,
                                   .scale_mul = 1.0f,
                                   .meta = meta,
                                   .words = words};

                for (int64_t row = 0; row < r0 + rows; row++)
                    make_meta(meta + row * words, k / 4, (int)((row + pv) % 6));
                t_fill_mixed(&r, x, k, special ? 0.03 : 0.0);
                for (size_t i = 0; i < sizeof codes; i++)
                    codes[i] = (uint8_t)t_next(&r);
                for (size_t i = 0; i < sizeof amax / sizeof amax[0]; i++)
                    amax[i] = special && i % 7 == 2 ? amax_special[i / 7 % 4] : (float)t_unif(&r);
                got[rows] = 12345.0f; /* canary */
                assert_int_equal(f(&wv, r0, rows, x, got), 0);
                assert_true(got[rows] == 12345.0f);
                assert_int_equal(((qs_mm_gemv_sp24_nf4_fn *)ref->fn)(&wv, r0, rows, x, want), 0);
                for (int64_t row = 0; row < rows; row++) {
                    int overflow = 0;
                    double unscaled = 0.0; /* block sums before their scale (see test_kernels.c) */
                    float xg[KMAX / 2];
                    const uint16_t *mrow = meta + (r0 + row) * words;
                    qs_mm_gather_sp24__ref(x, mrow, k, xg);
                    for (int64_t j = 0; j < kept; j++) {
                        int64_t fl = st + row * kept + j;
                        float a = amax[fl / b];
                        float cv =
                            qs_nf4_codebook[fl & 1 ? codes[fl / 2] & 15u : codes[fl / 2] >> 4];
                        v[j] = cv * a;
                        overflow |= !(fabsf(a) < 0x1p120f) && !isnan(a);
                        double u = fabs((double)xg[j] * (double)cv);
                        unscaled += isfinite(u) ? u : 0.0;
                    }
                    overflow |= unscaled > 0x1p126;
                    /* the reference slot is the one-row reference, row by row */
                    assert_int_equal(t_bits(want[row]),
                                     t_bits(qs_mm_dot_sp24_nf4__ref(x, mrow, k, codes,
                                                                    st + row * kept, amax, b)));
                    if (!dot_within(got[row], want[row], x, mrow, k, v, overflow))
                        fail_msg("%s: n = %lld, rows %lld from %lld, row %lld, block %d: got "
                                 "%.9g, want %.9g",
                                 impl->name, (long long)k, (long long)rows, (long long)r0,
                                 (long long)row, b, got[row], want[row]);
                    if (isnan(got[row]))
                        assert_int_equal(t_bits(got[row]), QS_NAN_F32_BITS);
                    exact += t_bits(got[row]) == t_bits(want[row]);
                    runs++;
                }
            }
    print_message("  %-36s within the GEMV bound: %lld rows (%lld bit-identical)\n", impl->name,
                  (long long)runs, (long long)exact);
}

static void test_gemv_rows_kernels(void **state)
{
    (void)state;
    if (for_each_impl(QS_SLOT_mm_gemv_sp24_nf4, check_gemv_rows) == 0)
        print_message("  no mm_gemv_sp24_nf4 implementation runs here beside the reference\n");
}

/* The 2:4 GEMV slots' own meta check (mm_gemv_sp24_f32 / f16 / bf16 / nf4): over 1 ... 9 rows
 * from row 0 or 1, of row lengths with and without a partial last word (its unused nibbles 0, as
 * qs_sp24_compress writes them) and NF4 blocks that take the 4-row path and the one-row one,
 * valid meta gives 0 and any one used nibble of any row made invalid gives nonzero (the first, a
 * middle and the last nibble of every row). */
static int32_t g_meta_slot;

static void check_gemv_rows_meta(const struct qs_kernel_entry *impl)
{
    static const int64_t ks[] = {128, 256, 36, 32, 100, 8};
    static const int32_t blocks[] = {64, 16, 48};
    static const uint8_t bad[10] = {0x0, 0x1, 0x2, 0x3, 0x5, 0x6, 0x7, 0xA, 0xB, 0xF};
    enum { ROWS = 9 + 1, KMAX = 256, WORDS = KMAX / 16 };
    qs_mm_gemv_sp24_fn *f = (qs_mm_gemv_sp24_fn *)impl->fn;
    static float x[KMAX], amax[ROWS * KMAX / 2 / 16 + 1], y[ROWS], vals[ROWS * KMAX / 2];
    static uint16_t meta[ROWS * WORDS], half[ROWS * KMAX / 2];
    static uint8_t codes[ROWS * KMAX / 4];
    int64_t runs = 0;

    for (int64_t i = 0; i < KMAX; i++)
        x[i] = (float)(i % 7) - 3.0f;
    for (size_t i = 0; i < sizeof amax / sizeof amax[0]; i++)
        amax[i] = 0.5f;
    for (size_t i = 0; i < sizeof codes; i++)
        codes[i] = (uint8_t)(i * 37);
    for (size_t i = 0; i < sizeof vals / sizeof vals[0]; i++) {
        vals[i] = (float)(i % 5) - 2.0f;
        half[i] = (uint16_t)(0x3C00 + i % 64);
    }
    for (size_t ki = 0; ki < sizeof ks / sizeof ks[0]; ki++)
        for (size_t bi = 0; bi < sizeof blocks / sizeof blocks[0]; bi++)
            for (int64_t rows = 1; rows <= 9; rows++) {
                int64_t k = ks[ki], words = (k + 15) / 16, groups = k / 4, r0 = (ki + bi) % 2;
                qs_mm_weight wv = {
                    .n = r0 + rows, .k = k / 2, .scale_mul = 1.0f, .meta = meta, .words = words};
                if (g_meta_slot == QS_SLOT_mm_gemv_sp24_nf4) {
                    wv.data = codes;
                    wv.scale = amax;
                    wv.group = blocks[bi];
                } else if (g_meta_slot == QS_SLOT_mm_gemv_sp24_f32) {
                    wv.data = vals;
                    wv.row_bytes = k / 2 * 4;
                } else {
                    wv.data = half;
                    wv.row_bytes = k / 2 * 2;
                }
                for (int64_t row = 0; row < r0 + rows; row++)
                    make_meta(meta + row * words, groups, (int)(row % 6));
                assert_int_equal(f(&wv, r0, rows, x, y), 0);
                for (int64_t row = r0; row < r0 + rows; row++) {
                    const int64_t at3[3] = {0, groups / 2, groups - 1};
                    for (int a = 0; a < 3; a++) {
                        uint16_t *w = meta + row * words + at3[a] / 4, keep = *w;
                        int sh = (int)(4 * (at3[a] % 4));
                        *w = (uint16_t)((keep & ~(15u << sh)) |
                                        (unsigned)bad[(row + a) % 10] << sh);
                        if (f(&wv, r0, rows, x, y) == 0)
                            fail_msg("%s: k = %lld, block %d, %lld rows from %lld: invalid "
                                     "nibble %lld of row %lld not seen",
                                     impl->name, (long long)k, blocks[bi], (long long)rows,
                                     (long long)r0, (long long)at3[a], (long long)row);
                        *w = keep;
                        runs++;
                    }
                }
            }
    print_message("  %-36s %lld invalid nibbles found, valid meta passes\n", impl->name,
                  (long long)runs);
}

static void gemv_rows_meta_impl(const struct qs_kernel_entry *impl,
                                const struct qs_kernel_entry *ref)
{
    (void)ref;
    check_gemv_rows_meta(impl);
}

static void test_gemv_rows_meta(void **state)
{
    static const int32_t slots[] = {QS_SLOT_mm_gemv_sp24_nf4, QS_SLOT_mm_gemv_sp24_f32,
                                    QS_SLOT_mm_gemv_sp24_f16, QS_SLOT_mm_gemv_sp24_bf16};
    (void)state;
    for (size_t i = 0; i < sizeof slots / sizeof slots[0]; i++) {
        g_meta_slot = slots[i];
        check_gemv_rows_meta(test_ref_entry(slots[i]));
        for_each_impl(slots[i], gemv_rows_meta_impl);
    }
}

/* mm_sp24_meta_bad: 0 over words of valid nibbles only (every code at every position), 1 with
 * any one nibble made any invalid value, at every position of 0 ... 70 words (the 32- and
 * 16-word steps and every tail), and words past n never read as bad. */
static void check_meta_bad(const struct qs_kernel_entry *impl, const struct qs_kernel_entry *ref)
{
    static const uint8_t bad[10] = {0x0, 0x1, 0x2, 0x3, 0x5, 0x6, 0x7, 0xA, 0xB, 0xF};
    qs_mm_sp24_meta_bad_fn *f = (qs_mm_sp24_meta_bad_fn *)impl->fn;
    uint16_t w[71];
    int64_t runs = 0;

    for (int64_t n = 0; n <= 70; n++) {
        make_meta(w, 4 * n, (int)(n % 6));
        w[n] = 0; /* an invalid word just past the end */
        assert_int_equal(f(w, n) != 0, 0);
        assert_int_equal(((qs_mm_sp24_meta_bad_fn *)ref->fn)(w, n) != 0, 0);
        for (int64_t at = 0; at < 4 * n; at++) {
            uint16_t keep = w[at / 4];
            w[at / 4] = (uint16_t)((keep & ~(15u << (4 * (at % 4)))) |
                                   (unsigned)bad[(at + n) % 10] << (4 * (at % 4)));
            if (f(w, n) == 0)
                fail_msg("%s: n = %lld, invalid nibble %lld not seen", impl->name, (long long)n,
                         (long long)at);
            w[at / 4] = keep;
            runs++;
        }
    }
    print_message("  %-36s %lld invalid nibbles found, valid meta passes\n", impl->name,
                  (long long)runs);
}

static void test_meta_bad_kernels(void **state)
{
    (void)state;
    if (for_each_impl(QS_SLOT_mm_sp24_meta_bad, check_meta_bad) == 0)
        print_message("  no mm_sp24_meta_bad implementation runs here beside the reference\n");
}

/* mm_transpose_f32 (the 2:4 GEMM's x^T packing and y write-back) only moves bits: every rows x
 * cols block of 0 ... 40 (the 16 x 16 register blocks and every edge) at strides with gaps,
 * values salted with NaN payloads, Inf and -0, bytes equal to the reference's, the gaps between
 * output columns untouched. */
static void check_transpose(const struct qs_kernel_entry *impl, const struct qs_kernel_entry *ref)
{
    enum { D = 40, LD = D + 3 };
    static float src[D * LD], got[D * LD], want[D * LD];
    t_rng r = {0x9A24};
    int64_t runs = 0;

    t_fill_mixed(&r, src, D * LD, 0.1);
    for (int64_t rows = 0; rows <= D; rows++)
        for (int64_t cols = 0; cols <= D; cols++) {
            int64_t lds = cols + rows % 3, ldd = rows + cols % 2;
            memset(got, 0x5A, sizeof got);
            memset(want, 0x5A, sizeof want);
            ((qs_mm_transpose_f32_fn *)impl->fn)(src, lds, rows, cols, got, ldd);
            ((qs_mm_transpose_f32_fn *)ref->fn)(src, lds, rows, cols, want, ldd);
            if (!T_ASSERT_BYTES(impl->name, got, want, sizeof got))
                fail_msg("%s: %lld x %lld", impl->name, (long long)rows, (long long)cols);
            runs++;
        }
    /* the reference itself: element (r, c) lands at c * ldd + r */
    ((qs_mm_transpose_f32_fn *)ref->fn)(src, 7, 5, 7, want, 6);
    for (int i = 0; i < 5; i++)
        for (int c = 0; c < 7; c++)
            assert_int_equal(t_bits(want[c * 6 + i]), t_bits(src[i * 7 + c]));
    print_message("  %-36s bit-exact vs ref: %lld blocks\n", impl->name, (long long)runs);
}

static void test_transpose_kernels(void **state)
{
    (void)state;
    if (for_each_impl(QS_SLOT_mm_transpose_f32, check_transpose) == 0)
        print_message("  no mm_transpose_f32 implementation runs here beside the reference\n");
}

/* The reference kernel itself against a hand-worked row: the example of docs/sparsity.md §3.3
 * (nibbles 4, 9, C, E; kept columns 0 1 | 5 6 | 8 11 | 14 15) with x^T row c holding c + 1. */
static void test_axpy_hand(void **state)
{
    const float values[8] = {1, 2, 3, 4, 5, 6, 7, 8};
    const uint16_t meta[1] = {0xEC94};
    float xt[16], acc[1] = {0.5f}, xg[8];
    const float cols[8] = {0, 1, 5, 6, 8, 11, 14, 15};
    float want = 0.5f;

    (void)state;
    for (int c = 0; c < 16; c++)
        xt[c] = (float)(c + 1);
    for (int j = 0; j < 8; j++)
        want = want + values[j] * (cols[j] + 1.0f);
    qs_mm_sp24_axpy__ref(values, meta, 16, xt, 1, 1, acc);
    assert_true(acc[0] == want);
    qs_mm_gather_sp24__ref(xt, meta, 16, xg);
    for (int j = 0; j < 8; j++)
        assert_true(xg[j] == cols[j] + 1.0f);
}

/* ---- qs_matmul, GEMM path ----------------------------------------------------------------------
 */

/* y by the outer-product definition from the dense dequantized weight (kept positions read
 * from meta, so a kept zero still multiplies its x). */
static void gemm_definition(const float *x, const float *dense, const uint16_t *meta,
                            const float *bias, int64_t M, int64_t K, int64_t N, float *y)
{
    int64_t words = (K + 15) / 16;
    for (int64_t m = 0; m < M; m++)
        for (int64_t n = 0; n < N; n++) {
            float acc = 0.0f;
            for (int64_t g = 0; g < K / 4; g++) {
                unsigned nib = (meta[n * words + g / 4] >> (4 * (g % 4))) & 15u;
                int64_t c0 = 4 * g + (nib & 3u), c1 = 4 * g + (nib >> 2);
                acc = acc + dense[n * K + c0] * x[m * K + c0];
                acc = acc + dense[n * K + c1] * x[m * K + c1];
            }
            if (bias)
                acc = acc + bias[n];
            y[m * N + n] = acc != acc ? t_f32_from_bits(QS_NAN_F32_BITS) : acc;
        }
}

typedef struct {
    int32_t kind, dtype;
} sp_kind;

/* The weight of one kind from f32 w0 (N x K): kept values as stored, meta, dense decode. */
static void make_weight(qs_ctx *ctx, sp_kind k, const float *w0, int64_t N, int64_t K, qs_weight *w,
                        void **vals, uint16_t **meta, tq *t, qs_quant_params *p, float *dense)
{
    int64_t vb = 0, mc = 0, n = N * K;
    float *v32, *pruned = malloc((size_t)n * 4);

    assert_int_equal(qs_sp24_size(QS_DTYPE_F32, N, K, &vb, &mc), QS_OK);
    v32 = malloc((size_t)vb);
    *meta = malloc((size_t)mc * 2);
    assert_true(v32 && pruned && *meta);
    assert_int_equal(
        qs_sp24_prune_compress(ctx, w0, QS_DTYPE_F32, N, K, NULL, v32, vb, *meta, mc, NULL, 0),
        QS_OK);
    memset(w, 0, sizeof *w);
    w->kind = k.kind;
    w->meta = *meta;
    w->meta_count = mc;
    *vals = NULL;
    if (k.kind == QS_WEIGHT_SP24) {
        int64_t bytes = n / 2 * qs_dtype_size(k.dtype);
        *vals = malloc((size_t)bytes);
        assert_int_equal(qs_convert(ctx, v32, QS_DTYPE_F32, *vals, k.dtype, n / 2, bytes), QS_OK);
        if (k.dtype == QS_DTYPE_F32) {
            assert_int_equal(
                qs_sp24_decompress(ctx, v32, QS_DTYPE_F32, *meta, mc, N, K, dense, n * 4), QS_OK);
        } else {
            uint16_t *h = malloc((size_t)n * 2);
            assert_int_equal(qs_sp24_decompress(ctx, *vals, k.dtype, *meta, mc, N, K, h, n * 2),
                             QS_OK);
            assert_int_equal(qs_convert(ctx, h, k.dtype, dense, QS_DTYPE_F32, n, n * 4), QS_OK);
            free(h);
        }
        w->dtype = k.dtype;
        w->data = *vals;
        w->data_bytes = bytes;
    } else {
        assert_int_equal(qs_sp24_decompress(ctx, v32, QS_DTYPE_F32, *meta, mc, N, K, pruned, n * 4),
                         QS_OK);
        *p = params(QS_FORMAT_NF4);
        tq_new(t, p, N, K / 2);
        assert_int_equal(
            qs_sp24_quantize(ctx, p, pruned, QS_DTYPE_F32, N, K, NULL, &t->q, *meta, mc), QS_OK);
        assert_int_equal(
            qs_sp24_dequantize(ctx, p, &t->q, *meta, mc, N, K, dense, QS_DTYPE_F32, n * 4), QS_OK);
        w->quant = p;
        w->q = &t->q;
    }
    free(v32);
    free(pruned);
}

static void test_gemm_definition(void **state)
{
    static const sp_kind kinds[] = {{QS_WEIGHT_SP24, QS_DTYPE_F32},
                                    {QS_WEIGHT_SP24, QS_DTYPE_F16},
                                    {QS_WEIGHT_SP24, QS_DTYPE_BF16},
                                    {QS_WEIGHT_SP24_QUANT, 0}};
    /* M: one panel, a group of panels plus a partial panel; N: under and over a task of rows;
     * K: one group, slices plus a tail that ends inside a meta word */
    static const int64_t shapes[][3] = {
        {QS_MATMUL_GEMM_MIN_M, 1, 4}, {17, 130, 36}, {300, 7, 260}, {65, 129, 132}};
    qs_ctx *ctx = t_ctx();
    t_rng r = {0x24};

    (void)state;
    for (size_t ki = 0; ki < sizeof kinds / sizeof kinds[0]; ki++)
        for (size_t s = 0; s < sizeof shapes / sizeof shapes[0]; s++) {
            int64_t M = shapes[s][0], N = shapes[s][1], K = shapes[s][2];
            float *w0 = malloc((size_t)(N * K) * 4), *dense = malloc((size_t)(N * K) * 4);
            float *x = malloc((size_t)(M * K) * 4), *bias = malloc((size_t)N * 4);
            float *want = malloc((size_t)(M * N) * 4);
            t_buf y1 = t_buf_new((size_t)(M * N) * 4), y2 = t_buf_new((size_t)(M * N) * 4);
            const float *b = s % 2 ? bias : NULL;
            qs_quant_params p;
            qs_weight w;
            uint16_t *meta;
            void *vals;
            tq t;

            for (int64_t i = 0; i < N * K; i++)
                w0[i] = (float)(t_normal(&r) * 0.05);
            for (int64_t i = 0; i < M * K; i++)
                x[i] = (float)t_normal(&r);
            if (s == 2) { /* NaN and Inf in x: a NaN row, an Inf against a kept value */
                x[5 * K + 3] = t_f32_from_bits(0x7FA00000u);
                x[9 * K] = INFINITY;
            }
            for (int64_t i = 0; i < N; i++)
                bias[i] = (float)(t_normal(&r) * 0.1);
            make_weight(ctx, kinds[ki], w0, N, K, &w, &vals, &meta, &t, &p, dense);
            gemm_definition(x, dense, meta, b, M, K, N, want);
            assert_int_equal(qs_ctx_set(ctx, QS_PARAM_NUM_THREADS, 1), QS_OK);
            assert_int_equal(
                qs_matmul(ctx, NULL, x, QS_DTYPE_F32, M, K, &w, N, b, y1.p, (int64_t)y1.bytes),
                QS_OK);
            assert_int_equal(qs_ctx_set(ctx, QS_PARAM_NUM_THREADS, 2), QS_OK);
            assert_int_equal(
                qs_matmul(ctx, NULL, x, QS_DTYPE_F32, M, K, &w, N, b, y2.p, (int64_t)y2.bytes),
                QS_OK);
            assert_true(t_buf_guards_ok(&y1) && t_buf_guards_ok(&y2));
            if (!T_ASSERT_BYTES("2:4 GEMM, 1 thread", y1.p, want, y1.bytes) ||
                !T_ASSERT_BYTES("2:4 GEMM, 2 threads", y2.p, want, y2.bytes))
                fail_msg("kind %zu, M = %lld, N = %lld, K = %lld", ki, (long long)M, (long long)N,
                         (long long)K);
            if (kinds[ki].kind == QS_WEIGHT_SP24_QUANT)
                tq_free(&t);
            free(vals);
            free(meta);
            t_buf_free(&y1);
            t_buf_free(&y2);
            free(w0);
            free(dense);
            free(x);
            free(bias);
            free(want);
        }
    qs_ctx_destroy(ctx);
}

/* The meta check of qs_matmul (word-parallel for K % 16 == 0, nibble by nibble otherwise; the
 * 2:4 + NF4 GEMV kernel's own check for K % 16 == 0): every one of the 16 nibble values at
 * every group of a middle row, for K = 32 and K = 40 (a partial last word, whose unused nibbles
 * must be 0), with f32 kept values and with NF4 ones: the ten invalid codes return
 * QS_ERR_BAD_DATA naming the row and group, with y untouched; the six valid ones run. */
static void test_meta_check(void **state)
{
    static const int64_t Ks[] = {32, 40};
    static const sp_kind kinds[] = {{QS_WEIGHT_SP24, QS_DTYPE_F32}, {QS_WEIGHT_SP24_QUANT, 0}};
    qs_ctx *ctx = t_ctx();
    float x[40], w0[3 * 40], dense[3 * 40];

    (void)state;
    for (int i = 0; i < 40; i++)
        x[i] = (float)i;
    for (int i = 0; i < 3 * 40; i++)
        w0[i] = 0.25f * (float)(i % 11) - 1.0f;
    for (size_t ki = 0; ki < sizeof kinds / sizeof kinds[0]; ki++)
        for (size_t c = 0; c < sizeof Ks / sizeof Ks[0]; c++) {
            int64_t K = Ks[c], words = (K + 15) / 16, groups = 4 * words;
            uint16_t *meta, good[3 * 3];
            qs_quant_params p;
            qs_weight w;
            void *vals;
            tq t;

            make_weight(ctx, kinds[ki], w0, 3, K, &w, &vals, &meta, &t, &p, dense);
            memcpy(good, meta, (size_t)(3 * words) * 2);
            for (int64_t g = 0; g < groups; g++)
                for (unsigned nib = 0; nib < 16; nib++) {
                    t_buf y = t_buf_new(3 * 4);
                    char want[96];
                    int valid = g < K / 4 ? (nib >> 2) > (nib & 3u) : nib == 0;

                    memcpy(meta, good, (size_t)(3 * words) * 2);
                    meta[words + g / 4] =
                        (uint16_t)((meta[words + g / 4] & ~(0xFu << (4 * (g % 4)))) |
                                   nib << (4 * (g % 4)));
                    qs_status st =
                        qs_matmul(ctx, NULL, x, QS_DTYPE_F32, 1, K, &w, 3, NULL, y.p, 12);
                    if (valid) {
                        assert_int_equal(st, QS_OK);
                    } else {
                        assert_int_equal(st, QS_ERR_BAD_DATA);
                        assert_true(t_buf_untouched(&y));
                        snprintf(want, sizeof want,
                                 "row 1, group %lld holds the invalid nibble 0x%X", (long long)g,
                                 nib);
                        assert_non_null(strstr(qs_ctx_last_error(ctx), want));
                    }
                    t_buf_free(&y);
                }
            if (kinds[ki].kind == QS_WEIGHT_SP24_QUANT)
                tq_free(&t);
            free(vals);
            free(meta);
        }
    qs_ctx_destroy(ctx);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_axpy_hand),       cmocka_unit_test(test_axpy_kernels),
        cmocka_unit_test(test_gather_kernels),  cmocka_unit_test(test_dot_kernels),
        cmocka_unit_test(test_gemv_rows_kernels), cmocka_unit_test(test_gemv_rows_meta),
        cmocka_unit_test(test_meta_bad_kernels),
        cmocka_unit_test(test_transpose_kernels),
        cmocka_unit_test(test_gemm_definition), cmocka_unit_test(test_meta_check),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
