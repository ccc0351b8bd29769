/* SPDX-License-Identifier: MIT */
/*
 * The compressed 2:4 format and what is built on it (docs/sparsity.md §3, §4, §3.6, §6.4, §6.5):
 * the spec's hand-worked rows and fill table, decompress(compress(w, mask)) == w * mask bit for
 * bit for f32/f16/bf16 with NaN, -0 and degenerate groups, prune + compress equal to mask then
 * compress, inputs against guard pages, the CUTLASS metadata order at positions derived from
 * PyTorch's gather pattern, sparse + quantized weights equal to quantizing the compressed values,
 * the SR-STE step against a scalar oracle, mask helpers, the permutation search, and every error
 * status with canaries.
 */
#include "common.h"

/* w * mask with pruned positions +0, as 32- or 16-bit patterns. */
static void masked_copy(const void *w, int esize, const uint8_t *mask, int64_t n, void *out)
{
    for (int64_t i = 0; i < n; i++) {
        if (esize == 4)
            ((uint32_t *)out)[i] = mask[i] ? ((const uint32_t *)w)[i] : 0u;
        else
            ((uint16_t *)out)[i] = mask[i] ? ((const uint16_t *)w)[i] : 0u;
    }
}

/* ---- hand-worked (§3.2 - §3.4) --------------------------------------------------------------- */

static void test_spec_examples(void **state)
{
    (void)state;
    qs_ctx *ctx = t_ctx();
    /* §3.3: [a, b, 0, 0 | 0, c, d, 0 | e, 0, 0, f | 0, 0, g, h] -> values a..h, word 0xEC94. */
    float row[16] = {1, 2, 0, 0, 0, 3, 4, 0, 5, 0, 0, 6, 0, 0, 7, 8};
    float vals[8], back[16];
    uint16_t meta[1];
    assert_int_equal(qs_sp24_compress(ctx, row, QS_DTYPE_F32, 1, 16, NULL, vals, 32, meta, 1),
                     QS_OK);
    for (int i = 0; i < 8; i++)
        assert_true(vals[i] == (float)(i + 1));
    assert_int_equal(meta[0], 0xEC94);
    assert_int_equal(((uint8_t *)meta)[0], 0x94); /* little-endian bytes 94 EC */
    assert_int_equal(qs_sp24_decompress(ctx, vals, QS_DTYPE_F32, meta, 1, 1, 16, back, 64),
                     QS_OK);
    T_ASSERT_BYTES("round trip", back, row, 64);

    /* hipSPARSELt: [1, 2, 0, 0] -> [1, 2], (0, 1); [0, 6, 0, 8] -> [6, 8], (1, 3). The f16 bits
     * go through the 16-bit path. */
    uint16_t h[8] = {0x3C00, 0x4000, 0, 0, 0, 0x4600, 0x8000, 0x4800}, hv[4];
    assert_int_equal(qs_sp24_compress(ctx, h, QS_DTYPE_F16, 1, 8, NULL, hv, 8, meta, 1), QS_OK);
    assert_int_equal(hv[0], 0x3C00);
    assert_int_equal(hv[1], 0x4000);
    assert_int_equal(hv[2], 0x4600);
    assert_int_equal(hv[3], 0x4800);
    assert_int_equal(meta[0], 0x4 | 0xD << 4); /* unused nibbles 0 */

    /* §3.4 fill table: none -> 0x4 [+0, +0]; {0} -> 0x4; {1} -> 0x4; {2} -> 0x8; {3} -> 0xC. */
    float g[20] = {0, 0, 0, 0, -1.5f, 0, 0, 0, 0, -0.0f, 0, 0, 0, 0, 9, 0, 0, 0, 0, NAN};
    uint8_t mk[20] = {0, 0, 0, 0, 1, 0, 0, 0, 0, 1, 0, 0, 0, 0, 1, 0, 0, 0, 0, 1};
    float v[10];
    uint16_t m2[2];
    assert_int_equal(qs_sp24_compress(ctx, g, QS_DTYPE_F32, 1, 20, mk, v, 40, m2, 2), QS_OK);
    assert_int_equal(m2[0], 0x4 | 0x4 << 4 | 0x4 << 8 | 0x8 << 12);
    assert_int_equal(m2[1], 0xC);
    static const uint32_t want[10] = {0, 0, 0xBFC00000u, 0, 0, 0x80000000u, 0, 0x41100000u, 0,
                                      0x7FC00000u};
    for (int i = 0; i < 9; i++)
        assert_int_equal(t_bits(v[i]), want[i]); /* a kept -0.0 stays -0.0 */
    assert_true(isnan(v[9]));
    qs_ctx_destroy(ctx);
}

/* ---- round trips ----------------------------------------------------------------------------- */

static void random_mask(t_rng *r, uint8_t *m, int64_t n)
{
    static const uint8_t keeps[11] = {0x0, 0x1, 0x2, 0x4, 0x8, 0x3, 0x5, 0x6, 0x9, 0xA, 0xC};
    for (int64_t g = 0; g < n / 4; g++) {
        uint8_t k = keeps[t_next(r) % 20 < 3 ? t_next(r) % 5 : 5 + t_next(r) % 6];
        for (int i = 0; i < 4; i++)
            m[4 * g + i] = (uint8_t)(((k >> i) & 1) ? 1 + t_next(r) % 255 : 0);
    }
}

static void test_round_trip(void **state)
{
    (void)state;
    static const int64_t cols_list[] = {4, 8, 12, 16, 20, 28, 32, 44, 64, 68, 1028, 4112, 4100};
    static const int32_t dtypes[] = {QS_DTYPE_F32, QS_DTYPE_F16, QS_DTYPE_BF16};
    t_rng r = {1234};
    qs_ctx *ctx = t_ctx();

    for (size_t c = 0; c < sizeof cols_list / sizeof cols_list[0]; c++)
        for (int d = 0; d < 3; d++) {
            int64_t rows = 1 + (int64_t)(t_next(&r) % 5), cols = cols_list[c], n = rows * cols;
            int es = qs_dtype_size(dtypes[d]);
            int64_t vb, mc;
            assert_int_equal(qs_sp24_size(dtypes[d], rows, cols, &vb, &mc), QS_OK);
            assert_int_equal(vb, n / 2 * es);
            assert_int_equal(mc, rows * ((cols + 15) / 16));
            /* w sits against a guard page (over-reads fault); outputs between canaries. */
            t_page_buf wp = t_page_buf_new((size_t)(n * es));
            uint8_t *mask = malloc((size_t)n);
            void *want = malloc((size_t)(n * es));
            t_buf vals = t_buf_new((size_t)vb), meta = t_buf_new((size_t)mc * 2);
            t_buf back = t_buf_new((size_t)(n * es));
            float *wf = malloc((size_t)n * 4);
            t_fill_mixed(&r, wf, n, 0.1);
            for (int64_t i = 0; i < n; i++) {
                if (es == 4)
                    ((float *)wp.p)[i] = wf[i];
                else
                    ((uint16_t *)wp.p)[i] = (uint16_t)(t_next(&r) & 0xFFFF);
            }
            random_mask(&r, mask, n);
            masked_copy(wp.p, es, mask, n, want);
            assert_int_equal(qs_sp24_compress(ctx, wp.p, dtypes[d], rows, cols, mask, vals.p,
                                              vb, meta.p, mc), QS_OK);
            assert_true(t_buf_guards_ok(&vals) && t_buf_guards_ok(&meta));
            assert_int_equal(qs_sp24_decompress(ctx, vals.p, dtypes[d], meta.p, mc, rows, cols,
                                                back.p, n * es), QS_OK);
            T_ASSERT_BYTES("decompress(compress(w, mask)) vs w * mask", back.p, want,
                           (size_t)(n * es));
            assert_true(t_buf_guards_ok(&back));
            /* compress of the pruned tensor itself (no mask) gives the same meta for groups
             * with two non-zeros, and decompresses to the same values as well. */
            memcpy(wp.p, want, (size_t)(n * es));
            assert_int_equal(qs_sp24_compress(ctx, wp.p, dtypes[d], rows, cols, NULL, vals.p,
                                              vb, meta.p, mc), QS_OK);
            assert_int_equal(qs_sp24_decompress(ctx, vals.p, dtypes[d], meta.p, mc, rows, cols,
                                                back.p, n * es), QS_OK);
            /* -0 kept by the mask turns into +0 when the tensor is compressed by value. */
            for (int64_t i = 0; i < n; i++) {
                if (es == 4 && ((uint32_t *)want)[i] == 0x80000000u)
                    ((uint32_t *)want)[i] = 0;
                if (es == 2 && ((uint16_t *)want)[i] == 0x8000u)
                    ((uint16_t *)want)[i] = 0;
            }
            T_ASSERT_BYTES("round trip by value", back.p, want, (size_t)(n * es));
            t_page_buf_free(&wp);
            t_buf_free(&vals);
            t_buf_free(&meta);
            t_buf_free(&back);
            free(mask);
            free(want);
            free(wf);
        }
    qs_ctx_destroy(ctx);
}

/* prune + compress equals qs_nm_mask followed by qs_sp24_compress, for every dtype, magnitude
 * and Wanda, with the optional mask output. */
static void test_prune_compress(void **state)
{
    (void)state;
    static const int32_t dtypes[] = {QS_DTYPE_F32, QS_DTYPE_F16, QS_DTYPE_BF16};
    t_rng r = {77};
    qs_ctx *ctx = t_ctx();
    int64_t rows = 5, cols = 4096 + 160 + 4, n = rows * cols;
    float *wf = malloc((size_t)n * 4), *norms = malloc((size_t)cols * 4);
    uint16_t *h = malloc((size_t)n * 2);
    uint8_t *mask = malloc((size_t)n), *mask2 = malloc((size_t)n);
    uint8_t *v1 = malloc((size_t)n * 2), *v2 = malloc((size_t)n * 2);
    uint16_t *m1 = malloc((size_t)(rows * 300) * 2), *m2 = malloc((size_t)(rows * 300) * 2);
    int64_t mc = rows * ((cols + 15) / 16);

    t_fill_mixed(&r, wf, n, 0.05);
    for (int64_t i = 0; i < n; i++)
        h[i] = (uint16_t)t_next(&r);
    for (int64_t j = 0; j < cols; j++)
        norms[j] = (float)t_unif(&r) * 3;
    for (int d = 0; d < 3; d++)
        for (int wanda = 0; wanda < 2; wanda++) {
            const void *w = dtypes[d] == QS_DTYPE_F32 ? (const void *)wf : (const void *)h;
            const float *nn = wanda ? norms : NULL;
            int64_t vb = n / 2 * qs_dtype_size(dtypes[d]);
            assert_int_equal(qs_nm_mask(ctx, w, dtypes[d], rows, cols, 2, 4, wanda, nn, mask,
                                        n), QS_OK);
            assert_int_equal(qs_sp24_compress(ctx, w, dtypes[d], rows, cols, mask, v1, vb, m1,
                                              mc), QS_OK);
            assert_int_equal(qs_sp24_prune_compress(ctx, w, dtypes[d], rows, cols, nn, v2, vb,
                                                    m2, mc, mask2, n), QS_OK);
            T_ASSERT_BYTES("prune_compress values", v2, v1, (size_t)vb);
            T_ASSERT_BYTES("prune_compress meta", m2, m1, (size_t)mc * 2);
            T_ASSERT_BYTES("prune_compress mask", mask2, mask, (size_t)n);
            assert_int_equal(qs_sp24_prune_compress(ctx, w, dtypes[d], rows, cols, nn, v2, vb,
                                                    m2, mc, NULL, 0), QS_OK);
            T_ASSERT_BYTES("prune_compress values, no mask", v2, v1, (size_t)vb);
            /* the same bytes with 3 threads (fixed row chunks) */
            assert_int_equal(qs_ctx_set(ctx, QS_PARAM_NUM_THREADS, 3), QS_OK);
            assert_int_equal(qs_sp24_prune_compress(ctx, w, dtypes[d], rows, cols, nn, v2, vb,
                                                    m2, mc, NULL, 0), QS_OK);
            assert_int_equal(qs_ctx_set(ctx, QS_PARAM_NUM_THREADS, 1), QS_OK);
            T_ASSERT_BYTES("prune_compress values, 3 threads", v2, v1, (size_t)vb);
            T_ASSERT_BYTES("prune_compress meta, 3 threads", m2, m1, (size_t)mc * 2);
        }
    free(wf);
    free(norms);
    free(h);
    free(mask);
    free(mask2);
    free(v1);
    free(v2);
    free(m1);
    free(m2);
    qs_ctx_destroy(ctx);
}

/* ---- errors ---------------------------------------------------------------------------------- */

static void test_format_errors(void **state)
{
    (void)state;
    qs_ctx *ctx = t_ctx();
    float w[2 * 8] = {1, 2, 3, 0, 0, 0, 0, 0, 1, 0, 0, 0, 0, 0, 0, 1};
    uint8_t ok_mask[16] = {1, 1, 0, 0, 0, 0, 1, 1, 1, 0, 0, 1, 0, 0, 0, 1};
    t_buf vals = t_buf_new(32), meta = t_buf_new(4), dst = t_buf_new(64);

    /* more than two non-zeros in row 0, group 0 */
    assert_int_equal(qs_sp24_compress(ctx, w, QS_DTYPE_F32, 2, 8, NULL, vals.p, 32, meta.p, 2),
                     QS_ERR_BAD_DATA);
    assert_non_null(strstr(qs_ctx_last_error(ctx), "row 0, columns 0..3"));
    /* a mask keeping 3 in row 1, group 1 */
    uint8_t bad_mask[16] = {1, 1, 0, 0, 0, 0, 1, 1, 1, 0, 0, 1, 0, 1, 1, 1};
    assert_int_equal(qs_sp24_compress(ctx, w, QS_DTYPE_F32, 2, 8, bad_mask, vals.p, 32, meta.p,
                                      2), QS_ERR_BAD_DATA);
    assert_non_null(strstr(qs_ctx_last_error(ctx), "row 1, columns 4..7"));
    /* shapes and capacities */
    assert_int_equal(qs_sp24_compress(ctx, w, QS_DTYPE_F32, 2, 6, ok_mask, vals.p, 32, meta.p,
                                      2), QS_ERR_SHAPE);
    assert_int_equal(qs_sp24_compress(ctx, w, QS_DTYPE_F32, 2, 8, ok_mask, vals.p, 31, meta.p,
                                      2), QS_ERR_BUFFER_TOO_SMALL);
    assert_int_equal(qs_sp24_compress(ctx, w, QS_DTYPE_F32, 2, 8, ok_mask, vals.p, 32, meta.p,
                                      1), QS_ERR_BUFFER_TOO_SMALL);
    assert_int_equal(qs_sp24_compress(ctx, w, 5, 2, 8, ok_mask, vals.p, 32, meta.p, 2),
                     QS_ERR_INVALID_ARG);
    assert_int_equal(qs_sp24_compress(ctx, NULL, QS_DTYPE_F32, 2, 8, ok_mask, vals.p, 32,
                                      meta.p, 2), QS_ERR_INVALID_ARG);
    assert_int_equal(qs_sp24_prune_compress(ctx, w, QS_DTYPE_F32, 2, 10, NULL, vals.p, 32,
                                            meta.p, 2, NULL, 0), QS_ERR_SHAPE);
    assert_int_equal(qs_sp24_prune_compress(ctx, w, QS_DTYPE_F32, 2, 8, NULL, vals.p, 32,
                                            meta.p, 2, dst.p, 15), QS_ERR_BUFFER_TOO_SMALL);
    assert_int_equal(qs_sp24_size(QS_DTYPE_F32, 1, 5, NULL, NULL), QS_ERR_SHAPE);
    assert_int_equal(qs_sp24_size(QS_DTYPE_F32, INT64_MAX, 8, NULL, NULL), QS_ERR_OVERFLOW);
    assert_true(t_buf_untouched(&vals) && t_buf_untouched(&meta) && t_buf_untouched(&dst));

    /* invalid meta: a bad code (0x5), and a non-zero unused nibble (cols = 8: 2 of 4 used) */
    float v[4] = {1, 2, 3, 4};
    uint16_t bad1[1] = {0x54}, bad2[1] = {0x1E4}, good[1] = {0xE4};
    assert_int_equal(qs_sp24_decompress(ctx, v, QS_DTYPE_F32, bad1, 1, 1, 8, dst.p, 32),
                     QS_ERR_BAD_DATA);
    assert_non_null(strstr(qs_ctx_last_error(ctx), "0x5"));
    assert_int_equal(qs_sp24_decompress(ctx, v, QS_DTYPE_F32, bad2, 1, 1, 8, dst.p, 32),
                     QS_ERR_BAD_DATA);
    assert_non_null(strstr(qs_ctx_last_error(ctx), "unused"));
    assert_int_equal(qs_sp24_decompress(ctx, v, QS_DTYPE_F32, good, 1, 1, 8, dst.p, 31),
                     QS_ERR_BUFFER_TOO_SMALL);
    assert_int_equal(qs_sp24_decompress(ctx, v, QS_DTYPE_F32, good, 0, 1, 8, dst.p, 32),
                     QS_ERR_BUFFER_TOO_SMALL);
    assert_true(t_buf_untouched(&dst));
    assert_int_equal(qs_sp24_decompress(ctx, v, QS_DTYPE_F32, good, 1, 1, 8, dst.p, 32), QS_OK);
    float want[8] = {1, 2, 0, 0, 0, 0, 3, 4};
    T_ASSERT_BYTES("decompress", dst.p, want, 32);
    t_buf_free(&vals);
    t_buf_free(&meta);
    t_buf_free(&dst);
    qs_ctx_destroy(ctx);
}

/* ---- CUTLASS / PyTorch meta order (§4) ------------------------------------------------------- */

static void test_cutlass_meta(void **state)
{
    (void)state;
    qs_ctx *ctx = t_ctx();
    int64_t rows = 64, cols = 128, count = rows * cols / 16;
    uint16_t *meta = malloc((size_t)count * 2), *inter = malloc((size_t)count * 2);
    uint16_t *back = malloc((size_t)count * 2);

    for (int64_t i = 0; i < count; i++)
        meta[i] = (uint16_t)(i * 7 + 1);
    assert_int_equal(qs_sp24_meta_to_cutlass(ctx, meta, rows, cols, QS_META_INT16, inter,
                                             count), QS_OK);
    /* Positions from PyTorch's gather form of the same order (int16, k = cols): interleaved
     * element 0 is plain (0, 0), 1 is (8, 0), 2 is (0, 1), 3 is (8, 1), 8 is (1, 0). */
    int64_t nc = cols / 16;
    assert_int_equal(inter[0], meta[0]);
    assert_int_equal(inter[1], meta[8 * nc]);
    assert_int_equal(inter[2], meta[1]);
    assert_int_equal(inter[3], meta[8 * nc + 1]);
    assert_int_equal(inter[8], meta[1 * nc]);
    /* column pair 1 starts after all rows of pair 0 (column-major, interleave 2) */
    assert_int_equal(inter[2 * rows], meta[2]);
    /* it is a permutation, and the inverse restores the plain order */
    assert_int_equal(qs_sp24_meta_from_cutlass(ctx, inter, rows, cols, QS_META_INT16, back,
                                               count), QS_OK);
    T_ASSERT_BYTES("cutlass int16 inverse", back, meta, (size_t)count * 2);
    assert_int_equal(qs_sp24_meta_to_cutlass(ctx, meta, rows, cols, QS_META_INT32, inter,
                                             count), QS_OK);
    /* int32 words: plain (0, 0) = halves 0, 1; interleaved 1 = row 8 (group 16, interweave 2) */
    assert_int_equal(inter[0], meta[0]);
    assert_int_equal(inter[1], meta[1]);
    assert_int_equal(inter[2], meta[8 * nc]);
    assert_int_equal(inter[3], meta[8 * nc + 1]);
    assert_int_equal(qs_sp24_meta_from_cutlass(ctx, inter, rows, cols, QS_META_INT32, back,
                                               count), QS_OK);
    T_ASSERT_BYTES("cutlass int32 inverse", back, meta, (size_t)count * 2);
    /* shapes */
    t_buf out = t_buf_new((size_t)count * 2);
    assert_int_equal(qs_sp24_meta_to_cutlass(ctx, meta, 16, cols, QS_META_INT16, out.p, count),
                     QS_ERR_SHAPE);
    assert_int_equal(qs_sp24_meta_to_cutlass(ctx, meta, rows, 32, QS_META_INT32, out.p, count),
                     QS_ERR_SHAPE);
    assert_int_equal(qs_sp24_meta_to_cutlass(ctx, meta, rows, cols, 8, out.p, count),
                     QS_ERR_INVALID_ARG);
    assert_int_equal(qs_sp24_meta_to_cutlass(ctx, meta, rows, cols, 16, out.p, count - 1),
                     QS_ERR_BUFFER_TOO_SMALL);
    assert_true(t_buf_untouched(&out));
    t_buf_free(&out);
    free(meta);
    free(inter);
    free(back);
    qs_ctx_destroy(ctx);
}

/* ---- compressed-tensors bitmask (§5) --------------------------------------------------------- */

static void test_bitmask(void **state)
{
    (void)state;
    qs_ctx *ctx = t_ctx();
    /* The §3.3 row: kept columns 0, 1, 5, 6 | 8, 11, 14, 15 -> bytes 0x63, 0xC9 (packbits,
     * bitorder little). */
    uint16_t meta[3] = {0xEC94}, back[3];
    uint8_t bm[6];
    assert_int_equal(qs_sp24_meta_to_bitmask(ctx, meta, 1, 1, 16, bm, 2), QS_OK);
    assert_int_equal(bm[0], 0x63);
    assert_int_equal(bm[1], 0xC9);
    assert_int_equal(qs_sp24_meta_from_bitmask(ctx, bm, 2, 1, 16, back, 1), QS_OK);
    assert_int_equal(back[0], 0xEC94);
    /* cols = 20: 5 groups, 3 bytes per row with a padding nibble, 2 meta words per row */
    static const uint8_t nibs[6] = {0x4, 0x8, 0xC, 0x9, 0xD, 0xE};
    t_rng r = {3};
    uint16_t m2[2 * 2], b2[2 * 2];
    for (int row = 0; row < 2; row++) {
        m2[2 * row] = 0;
        for (int g = 0; g < 4; g++)
            m2[2 * row] = (uint16_t)(m2[2 * row] | nibs[t_next(&r) % 6] << (4 * g));
        m2[2 * row + 1] = nibs[t_next(&r) % 6];
    }
    assert_int_equal(qs_sp24_meta_to_bitmask(ctx, m2, 4, 2, 20, bm, 6), QS_OK);
    assert_int_equal(bm[2] >> 4, 0);
    assert_int_equal(qs_sp24_meta_from_bitmask(ctx, bm, 6, 2, 20, b2, 4), QS_OK);
    T_ASSERT_BYTES("bitmask round trip", b2, m2, sizeof m2);
    /* errors: three bits in a group, one bit, a padding bit; bad meta; shapes and capacity */
    t_buf out = t_buf_new(8);
    uint8_t bad[3] = {0x37, 0x00, 0x00};
    assert_int_equal(qs_sp24_meta_from_bitmask(ctx, bad, 3, 1, 20, out.p, 2), QS_ERR_BAD_DATA);
    bad[0] = 0x33;
    bad[1] = 0x31;
    assert_int_equal(qs_sp24_meta_from_bitmask(ctx, bad, 3, 1, 20, out.p, 2), QS_ERR_BAD_DATA);
    assert_non_null(strstr(qs_ctx_last_error(ctx), "exactly 2"));
    bad[1] = 0x33;
    bad[2] = 0x13;
    assert_int_equal(qs_sp24_meta_from_bitmask(ctx, bad, 3, 1, 20, out.p, 2), QS_ERR_BAD_DATA);
    assert_non_null(strstr(qs_ctx_last_error(ctx), "padding"));
    assert_int_equal(qs_sp24_meta_from_bitmask(ctx, bad, 3, 1, 22, out.p, 2), QS_ERR_SHAPE);
    assert_int_equal(qs_sp24_meta_from_bitmask(ctx, bad, 2, 1, 20, out.p, 2),
                     QS_ERR_BUFFER_TOO_SMALL);
    uint16_t badm[2] = {0x1444, 0};
    assert_int_equal(qs_sp24_meta_to_bitmask(ctx, badm, 2, 1, 20, out.p, 3), QS_ERR_BAD_DATA);
    assert_true(t_buf_untouched(&out));
    t_buf_free(&out);
    qs_ctx_destroy(ctx);
}

/* ---- sparse + quantized (§3.6) --------------------------------------------------------------- */

static void test_sparse_quant(void **state)
{
    (void)state;
    static const int32_t formats[] = {QS_FORMAT_NF4, QS_FORMAT_FP4, QS_FORMAT_INT8,
                                      QS_FORMAT_FP8_E4M3, QS_FORMAT_MXFP4, QS_FORMAT_NVFP4};
    t_rng r = {5};
    qs_ctx *ctx = t_ctx();
    int64_t rows = 8, cols = 128, n = rows * cols, mc = rows * cols / 16;
    float *w = malloc((size_t)n * 4), *vals = malloc((size_t)n * 2), *d1 = malloc((size_t)n * 4);
    float *d2 = malloc((size_t)n * 4), *dv = malloc((size_t)n * 2);
    uint16_t *meta = malloc((size_t)mc * 2), *meta2 = malloc((size_t)mc * 2);

    for (int64_t i = 0; i < n; i++)
        w[i] = (float)t_normal(&r);
    assert_int_equal(qs_sp24_prune_compress(ctx, w, QS_DTYPE_F32, rows, cols, NULL, vals, n * 2,
                                            meta, mc, NULL, 0), QS_OK);
    assert_int_equal(qs_sp24_decompress(ctx, vals, QS_DTYPE_F32, meta, mc, rows, cols, w, n * 4),
                     QS_OK); /* w is now 2:4 */
    for (size_t f = 0; f < sizeof formats / sizeof formats[0]; f++) {
        qs_quant_params p;
        qs_qtensor q1, q2;
        void *planes1[QS_PLANE_COUNT] = {0}, *planes2[QS_PLANE_COUNT] = {0};
        int64_t sz[QS_PLANE_COUNT];
        qs_quant_params_init(&p, formats[f]);
        memset(&q1, 0, sizeof q1);
        memset(&q2, 0, sizeof q2);
        for (int pl = 0; pl < QS_PLANE_COUNT; pl++) {
            assert_int_equal(qs_sp24_quant_size(&p, rows, cols, pl, &sz[pl]), QS_OK);
            int64_t direct;
            assert_int_equal(qs_quant_size(&p, rows, cols / 2, pl, &direct), QS_OK);
            assert_int_equal(sz[pl], direct);
            if (sz[pl] > 0) {
                planes1[pl] = calloc(1, (size_t)sz[pl]);
                planes2[pl] = calloc(1, (size_t)sz[pl]);
            }
        }
        q1.data = planes1[0], q1.data_bytes = sz[0], q1.scale = planes1[1], q1.scale_bytes = sz[1];
        q1.zero_point = planes1[2], q1.zero_point_bytes = sz[2];
        q1.nested_scale = planes1[3], q1.nested_scale_bytes = sz[3];
        q2 = q1;
        q2.data = planes2[0], q2.scale = planes2[1], q2.zero_point = planes2[2];
        q2.nested_scale = planes2[3];
        memset(meta2, 0xAB, (size_t)mc * 2);
        assert_int_equal(qs_sp24_quantize(ctx, &p, w, QS_DTYPE_F32, rows, cols, NULL, &q1, meta2,
                                          mc), QS_OK);
        T_ASSERT_BYTES("sparse-quant meta", meta2, meta, (size_t)mc * 2);
        assert_int_equal(qs_quantize(ctx, &p, vals, QS_DTYPE_F32, rows, cols / 2, &q2), QS_OK);
        for (int pl = 0; pl < QS_PLANE_COUNT; pl++)
            if (sz[pl] > 0)
                T_ASSERT_BYTES("sparse-quant plane", planes1[pl], planes2[pl], (size_t)sz[pl]);
        assert_int_equal(qs_sp24_dequantize(ctx, &p, &q1, meta2, mc, rows, cols, d1,
                                            QS_DTYPE_F32, n * 4), QS_OK);
        assert_int_equal(qs_dequantize(ctx, &p, &q2, rows, cols / 2, dv, QS_DTYPE_F32, n * 2),
                         QS_OK);
        assert_int_equal(qs_sp24_decompress(ctx, dv, QS_DTYPE_F32, meta, mc, rows, cols, d2,
                                            n * 4), QS_OK);
        T_ASSERT_BYTES("sparse-dequant", d1, d2, (size_t)n * 4);
        for (int64_t i = 0; i < n; i++) /* pruned positions decode to +0 */
            if (w[i] == 0.0f)
                assert_int_equal(t_bits(d1[i]), 0);
        /* a 3-in-4 tensor is rejected and meta stays untouched */
        float saved = w[2];
        w[0] = w[1] = w[2] = 1.0f;
        memset(meta2, 0xAB, (size_t)mc * 2);
        assert_int_equal(qs_sp24_quantize(ctx, &p, w, QS_DTYPE_F32, rows, cols, NULL, &q1, meta2,
                                          mc), QS_ERR_BAD_DATA);
        assert_int_equal(meta2[0], 0xABAB);
        w[2] = saved;
        assert_int_equal(qs_sp24_prune_compress(ctx, w, QS_DTYPE_F32, rows, cols, NULL, vals,
                                                n * 2, meta, mc, NULL, 0), QS_OK);
        assert_int_equal(qs_sp24_decompress(ctx, vals, QS_DTYPE_F32, meta, mc, rows, cols, w,
                                            n * 4), QS_OK);
        for (int pl = 0; pl < QS_PLANE_COUNT; pl++) {
            free(planes1[pl]);
            free(planes2[pl]);
        }
    }
    free(w);
    free(vals);
    free(d1);
    free(d2);
    free(dv);
    free(meta);
    free(meta2);
    qs_ctx_destroy(ctx);
}

/* ---- SR-STE and mask helpers (§6.4, §6.6) ---------------------------------------------------- */

static void test_srste(void **state)
{
    (void)state;
    t_rng r = {8};
    qs_ctx *ctx = t_ctx();
    int64_t rows = 6, cols = 48, n = rows * cols;
    float w[6 * 48], g[6 * 48], wm[6 * 48], go[6 * 48], g2[6 * 48], w2[6 * 48];
    uint8_t mask[6 * 48], want_mask[6 * 48];
    float lambda = 2e-4f;

    for (int nm = 0; nm < 2; nm++) {
        int32_t nk = nm ? 4 : 2, m = nm ? 8 : 4;
        t_fill_mixed(&r, w, n, 0.05);
        for (int64_t i = 0; i < n; i++)
            g[i] = (float)t_normal(&r);
        assert_int_equal(qs_nm_mask(ctx, w, QS_DTYPE_F32, rows, cols, nk, m, 0, NULL, want_mask,
                                    n), QS_OK);
        assert_int_equal(qs_nm_srste(ctx, w, g, rows, cols, nk, m, lambda, wm, go, mask, n),
                         QS_OK);
        T_ASSERT_BYTES("srste mask", mask, want_mask, (size_t)n);
        for (int64_t i = 0; i < n; i++) {
            float decay = lambda * w[i];
            float want_g = mask[i] ? g[i] : g[i] + decay;
            uint32_t want_w = mask[i] ? t_bits(w[i]) : 0u;
            assert_int_equal(t_bits(go[i]), t_bits(want_g));
            assert_int_equal(t_bits(wm[i]), want_w);
        }
        /* in place: grad_out == grad, w_masked == w */
        memcpy(g2, g, sizeof g);
        memcpy(w2, w, sizeof w);
        assert_int_equal(qs_nm_srste(ctx, w2, g2, rows, cols, nk, m, lambda, w2, g2, NULL, n),
                         QS_OK);
        T_ASSERT_BYTES("srste in place g", g2, go, sizeof go);
        T_ASSERT_BYTES("srste in place w", w2, wm, sizeof wm);
    }
    /* apply_mask and flips */
    float out[6 * 48];
    assert_int_equal(qs_nm_apply_mask(ctx, w, QS_DTYPE_F32, mask, n, out, n * 4), QS_OK);
    T_ASSERT_BYTES("apply_mask", out, wm, sizeof out);
    int64_t flips = -1;
    assert_int_equal(qs_nm_mask_flips(ctx, mask, want_mask, n, &flips), QS_OK);
    assert_int_equal(flips, 0);
    want_mask[3] ^= 1;
    want_mask[40] = want_mask[40] ? 0 : 7;
    assert_int_equal(qs_nm_mask_flips(ctx, mask, want_mask, n, &flips), QS_OK);
    assert_int_equal(flips, 2);
    /* errors */
    t_buf o = t_buf_new(sizeof wm);
    assert_int_equal(qs_nm_srste(ctx, w, g, rows, cols, 2, 4, NAN, o.p, NULL, NULL, n),
                     QS_ERR_INVALID_ARG);
    assert_int_equal(qs_nm_srste(ctx, w, NULL, rows, cols, 2, 4, lambda, NULL, o.p, NULL, n),
                     QS_ERR_INVALID_ARG);
    assert_int_equal(qs_nm_srste(ctx, w, g, rows, 46, 2, 4, lambda, o.p, NULL, NULL, n),
                     QS_ERR_SHAPE);
    assert_int_equal(qs_nm_srste(ctx, w, g, rows, cols, 2, 4, lambda, o.p, NULL, NULL, n - 1),
                     QS_ERR_BUFFER_TOO_SMALL);
    assert_int_equal(qs_nm_apply_mask(ctx, w, QS_DTYPE_F32, mask, n, o.p, n * 4 - 1),
                     QS_ERR_BUFFER_TOO_SMALL);
    assert_true(t_buf_untouched(&o));
    t_buf_free(&o);
    qs_ctx_destroy(ctx);
}

/* ---- channel permutation (§6.5) -------------------------------------------------------------- */

/* Kept score of 2:4 STRIP pruning of w with columns in order perm. */
static double kept_score(const float *w, int64_t rows, int64_t cols, const int32_t *perm)
{
    double s = 0.0;
    for (int64_t r = 0; r < rows; r++)
        for (int64_t c = 0; c < cols; c += 4) {
            float a[4];
            for (int i = 0; i < 4; i++)
                a[i] = fabsf(w[r * cols + perm[c + i]]);
            for (int k = 0; k < 2; k++) {
                int b = 0;
                for (int i = 1; i < 4; i++)
                    if (a[i] > a[b])
                        b = i;
                s += a[b];
                a[b] = -1.0f;
            }
        }
    return s;
}

static void test_permutation(void **state)
{
    (void)state;
    qs_ctx *ctx = t_ctx();
    /* Hand example: the four large columns sit in one group, so default 2:4 drops two of them in
     * every row; a permutation spreading them over both groups keeps all four. */
    float w[2 * 8] = {9, 9, 9, 9, 1, 1, 1, 1, 8, 8, 8, 8, 1, 1, 1, 1};
    int32_t perm[64];
    double before, after;
    assert_int_equal(qs_sp24_permute_search(ctx, w, 2, 8, NULL, 0, 0, 1, perm, 8, &before,
                                            &after), QS_OK);
    assert_true(fabs(before - (18 + 2 + 16 + 2) / 76.0) < 1e-12);
    assert_true(fabs(after - (36 + 32) / 76.0) < 1e-12);

    /* Random 32 x 64: the result is a permutation, keeps at least as much, its kept fraction is
     * what the returned order gives, and the same seed gives the same answer. */
    t_rng r = {31};
    float big[32 * 64];
    int32_t p2[64], seen[64] = {0};
    double total = 0.0;
    for (int i = 0; i < 32 * 64; i++) {
        big[i] = (float)t_normal(&r);
        total += fabs(big[i]);
    }
    assert_int_equal(qs_sp24_permute_search(ctx, big, 32, 64, NULL, 0, 3, 7, perm, 64, &before,
                                            &after), QS_OK);
    for (int i = 0; i < 64; i++) {
        assert_true(perm[i] >= 0 && perm[i] < 64);
        seen[perm[i]]++;
    }
    for (int i = 0; i < 64; i++)
        assert_int_equal(seen[i], 1);
    assert_true(after > before);
    int32_t ident[64];
    for (int i = 0; i < 64; i++)
        ident[i] = i;
    assert_true(fabs(before - kept_score(big, 32, 64, ident) / total) < 1e-6);
    assert_true(fabs(after - kept_score(big, 32, 64, perm) / total) < 1e-6);
    assert_int_equal(qs_sp24_permute_search(ctx, big, 32, 64, NULL, 0, 3, 7, p2, 64, NULL,
                                            NULL), QS_OK);
    T_ASSERT_BYTES("deterministic permutation", p2, perm, sizeof p2);
    /* errors */
    assert_int_equal(qs_sp24_permute_search(ctx, big, 32, 62, NULL, 0, 0, 1, perm, 64, NULL,
                                            NULL), QS_ERR_SHAPE);
    assert_int_equal(qs_sp24_permute_search(ctx, big, 32, 64, NULL, 0, 0, 1, perm, 63, NULL,
                                            NULL), QS_ERR_BUFFER_TOO_SMALL);
    big[5] = NAN;
    assert_int_equal(qs_sp24_permute_search(ctx, big, 32, 64, NULL, 0, 0, 1, perm, 64, NULL,
                                            NULL), QS_ERR_NONFINITE);
    qs_ctx_destroy(ctx);
}

/* rows x 0 and 0 x cols (issue: hangs on empty shapes): with nothing to read or write, every
 * entry point returns at once, whatever the other dimension. 2^62 rows would take centuries at
 * one empty row per nanosecond, so a loop over them shows as the test's timeout; outputs of zero
 * capacity stay untouched. */
static void test_empty_shapes_return_at_once(void **state)
{
    (void)state;
    qs_ctx *ctx = t_ctx();
    const int64_t huge = (int64_t)1 << 62;
    t_buf a = t_buf_new(64), b = t_buf_new(64);
    double before = -1.0, after = -1.0;

    assert_int_equal(qs_sp24_meta_to_bitmask(ctx, a.p, 0, huge, 0, b.p, 0), QS_OK);
    assert_int_equal(qs_sp24_meta_from_bitmask(ctx, a.p, 0, huge, 0, b.p, 0), QS_OK);
    for (int32_t bits = QS_META_INT16; bits <= QS_META_INT32; bits += 16) {
        assert_int_equal(qs_sp24_meta_to_cutlass(ctx, a.p, huge, 0, bits, b.p, 0), QS_OK);
        assert_int_equal(qs_sp24_meta_from_cutlass(ctx, a.p, huge, 0, bits, b.p, 0), QS_OK);
    }
    assert_int_equal(qs_sp24_compress(ctx, a.p, QS_DTYPE_F32, huge, 0, NULL, b.p, 0, b.p, 0),
                     QS_OK);
    assert_int_equal(qs_sp24_prune_compress(ctx, a.p, QS_DTYPE_F16, huge, 0, NULL, b.p, 0, b.p, 0,
                                            b.p, 0), QS_OK);
    assert_int_equal(qs_sp24_decompress(ctx, a.p, QS_DTYPE_BF16, a.p, 0, huge, 0, b.p, 0), QS_OK);
    assert_int_equal(qs_sp24_permute_search(ctx, a.p, huge, 0, NULL, 0, 5, 1, b.p, 0, &before,
                                            &after), QS_OK);
    assert_true(before == 1.0 && after == 1.0); /* all of nothing is kept */
    assert_true(t_buf_untouched(&a) && t_buf_untouched(&b));

    /* 0 rows x 2^20 columns: no score at all, so no stripe pair is worth visiting (2^37 pairs,
     * with escapes); the identity order comes back. */
    const int64_t cols = (int64_t)1 << 20;
    int32_t *perm = malloc((size_t)cols * sizeof *perm);
    assert_non_null(perm);
    before = after = -1.0;
    assert_int_equal(qs_sp24_permute_search(ctx, a.p, 0, cols, NULL, 0, 3, 9, perm, cols,
                                            &before, &after), QS_OK);
    for (int64_t c = 0; c < cols; c++)
        if (perm[c] != (int32_t)c)
            fail_msg("perm[%lld] = %d, want the identity", (long long)c, perm[c]);
    assert_true(before == 1.0 && after == 1.0);
    free(perm);
    t_buf_free(&a);
    t_buf_free(&b);
    qs_ctx_destroy(ctx);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_spec_examples),
        cmocka_unit_test(test_round_trip),
        cmocka_unit_test(test_prune_compress),
        cmocka_unit_test(test_format_errors),
        cmocka_unit_test(test_cutlass_meta),
        cmocka_unit_test(test_bitmask),
        cmocka_unit_test(test_sparse_quant),
        cmocka_unit_test(test_srste),
        cmocka_unit_test(test_permutation),
        cmocka_unit_test(test_empty_shapes_return_at_once),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
