/* SPDX-License-Identifier: MIT */
/*
 * The 2:4 decompress and the metadata converters (qsparse/sparse.h) under every ISA tier, on
 * arbitrary values, meta words and bitmasks: qs_sp24_decompress, qs_sp24_meta_to_bitmask /
 * _from_bitmask, qs_sp24_meta_to_cutlass / _from_cutlass. Checked: known statuses, the same on
 * every tier; nothing written on error; identical bits on every tier; and the round trips that
 * the header promises: from_cutlass(to_cutlass(m)) = m, from_bitmask(to_bitmask(m)) = m, and
 * to_bitmask(m) agrees with the non-zero pattern of decompress(values, m) for values without zero.
 *
 * Input layout: operation, flags, rows, cols, dtype, short choice, then the source bytes (zeros
 * past the end). rows = 255 selects a huge shape with a zero dimension (unless QS_FUZZ_KNOWN has
 * "empty"): every buffer is then tiny, so a loop over the empty rows is the only way to be slow.
 */
#include "fuzz_common.h"

#define MAX_ROWS 64
#define MAX_COLS 132

enum { OP_DECOMPRESS, OP_TO_BITMASK, OP_FROM_BITMASK, OP_TO_CUTLASS, OP_FROM_CUTLASS, OP_COUNT };

static int64_t cdiv(int64_t a, int64_t b)
{
    return (a + b - 1) / b;
}

/* Run one operation on ctx: src of src_bytes bytes -> dst (dst_bytes, in the unit the API takes). */
static qs_status run_op(qs_ctx *ctx, int op, const uint8_t *src, int64_t src_units, int64_t rows,
                        int64_t cols, int dtype, int word_bits, uint8_t *dst, int64_t dst_units,
                        const uint16_t *meta, int64_t meta_count)
{
    switch (op) {
    case OP_DECOMPRESS:
        return qs_sp24_decompress(ctx, src, dtype, meta, meta_count, rows, cols, dst, dst_units);
    case OP_TO_BITMASK:
        return qs_sp24_meta_to_bitmask(ctx, (const uint16_t *)src, src_units, rows, cols, dst,
                                       dst_units);
    case OP_FROM_BITMASK:
        return qs_sp24_meta_from_bitmask(ctx, src, src_units, rows, cols, (uint16_t *)dst,
                                         dst_units);
    case OP_TO_CUTLASS:
        return qs_sp24_meta_to_cutlass(ctx, (const uint16_t *)src, rows, cols, word_bits,
                                       (uint16_t *)dst, dst_units);
    default:
        return qs_sp24_meta_from_cutlass(ctx, (const uint16_t *)src, rows, cols, word_bits,
                                         (uint16_t *)dst, dst_units);
    }
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    fz_in in = {data, size};
    fz_tiers *t = fz_tiers_get();

    int op = fz_u8(&in) % OP_COUNT;
    uint8_t flags = fz_u8(&in), rsel = fz_u8(&in), csel = fz_u8(&in);
    int dtype = fz_u8(&in) % 4; /* 3 is invalid */
    uint8_t short_sel = fz_u8(&in);
    int word_bits = (flags & 3) == 0 ? QS_META_INT16 : (flags & 3) == 1 ? QS_META_INT32 : 8;
    /* Only void * data may sit at any address; uint16_t meta arrays are aligned by type. */
    int misalign = op == OP_DECOMPRESS && (flags >> 6) & 1 && !fz_known("align");

    int64_t rows = rsel % MAX_ROWS, cols = csel % MAX_COLS;
    if (flags & 4) /* shapes the converters accept are the interesting ones: align them */
        rows = rows / 16 * 16, cols = cols / 32 * 32;
    int huge = fz_huge_shape(&in, rsel, csel, &rows, &cols);
    if (huge)
        rows &= ~(int64_t)31, cols &= ~(int64_t)63;
    int esz = dtype < 3 ? qs_dtype_size(dtype) : 4;

    /* Units (what the API counts) and bytes of the source and destination of each operation. */
    int64_t meta_count = 0, src_units, dst_units, src_esz, dst_esz;
    int64_t mw = huge ? 0 : rows * cdiv(cols, 16); /* plain meta words */
    int64_t bm = huge ? 0 : rows * cdiv(cols, 8);  /* bitmask bytes */
    int64_t cw = huge ? 0 : rows * cols / 16;      /* CUTLASS words */
    switch (op) {
    case OP_DECOMPRESS:
        src_units = huge ? 0 : rows * (cols / 2), src_esz = esz;
        dst_units = huge ? 0 : rows * cols * esz, dst_esz = 1;
        meta_count = mw;
        break;
    case OP_TO_BITMASK:
        src_units = mw, src_esz = 2, dst_units = bm, dst_esz = 1;
        break;
    case OP_FROM_BITMASK:
        src_units = bm, src_esz = 1, dst_units = mw, dst_esz = 2;
        break;
    case OP_TO_CUTLASS:
        src_units = mw, src_esz = 2, dst_units = cw, dst_esz = 2;
        break;
    default:
        src_units = cw, src_esz = 2, dst_units = mw, dst_esz = 2;
        break;
    }
    /* Only the bitmask converters take the source's size; the others derive it from the shape. */
    if (short_sel == 0 && src_units > 0 && (op == OP_TO_BITMASK || op == OP_FROM_BITMASK))
        src_units--;
    if (short_sel == 1 && dst_units > 0)
        dst_units--;
    if (short_sel == 2 && meta_count > 0)
        meta_count--;

    size_t src_bytes = (size_t)(src_units * src_esz), dst_bytes = (size_t)(dst_units * dst_esz);
    size_t meta_bytes = (size_t)meta_count * 2;
    uint8_t *src_mem = fz_canary_new(src_bytes + (size_t)misalign);
    uint8_t *meta_mem = fz_canary_new(meta_bytes);
    fz_fill(&in, meta_mem, meta_bytes);
    fz_fill(&in, src_mem + misalign, src_bytes);
    const uint8_t *src = src_mem + misalign;
    const uint16_t *meta = (const uint16_t *)(void *)meta_mem;
    uint8_t *ref = fz_canary_new(dst_bytes + (size_t)misalign);
    uint8_t *out = fz_canary_new(dst_bytes + (size_t)misalign);

    qs_status st0 = 0;
    for (int i = 0; i < t->count; i++) {
        uint8_t *dst = (i == 0 ? ref : out) + misalign;
        memset(dst, FZ_CANARY, dst_bytes);
        qs_status st = run_op(t->ctx[i], op, src, src_units, rows, cols, dtype, word_bits, dst,
                              dst_units, meta, meta_count);
        fz_check(fz_status_known(st), "op %d returned unknown status %d", op, st);
        if (i == 0)
            st0 = st;
        else
            fz_check(st == st0, "op %d: status %s on tier %s, %s on scalar", op,
                     qs_status_str(st), fz_tier_name(t->ctx[i]), qs_status_str(st0));
        if (st != QS_OK) {
            fz_check(fz_untouched(dst, dst_bytes), "op %d wrote its output and failed (%s)", op,
                     qs_status_str(st));
        } else if (i > 0) {
            int64_t d = fz_byte_diff(ref + misalign, dst, dst_bytes);
            fz_check(d < 0, "op %d: byte %lld differs between scalar and %s", op, (long long)d,
                     fz_tier_name(t->ctx[i]));
        }
    }

    /* Round trips on the scalar tier, full-size buffers only. */
    qs_ctx *c = t->ctx[0];
    if (st0 == QS_OK && short_sel > 2 && !huge && rows > 0 && cols > 0) {
        const uint8_t *res = ref + misalign;
        if (op == OP_TO_CUTLASS || op == OP_TO_BITMASK) {
            uint16_t *back = (uint16_t *)(void *)fz_canary_new(src_bytes);
            qs_status st = op == OP_TO_CUTLASS
                               ? qs_sp24_meta_from_cutlass(c, (const uint16_t *)(const void *)res,
                                                           rows, cols, word_bits, back, src_units)
                               : qs_sp24_meta_from_bitmask(c, res, dst_units, rows, cols, back,
                                                           src_units);
            fz_check(st == QS_OK && fz_byte_diff(back, src, src_bytes) < 0,
                     "op %d: the inverse does not give the meta back (%s)", op,
                     qs_status_str(st));
            free(back);
        }
        if (op == OP_TO_BITMASK) {
            /* Decompress all-ones f32 values with the same meta: non-zero exactly at the bits. */
            int64_t nv = rows * (cols / 2), n = rows * cols;
            float *ones = malloc((size_t)nv * 4), *dense = malloc((size_t)n * 4);
            if (!ones || !dense)
                fz_fail("out of memory");
            for (int64_t k = 0; k < nv; k++)
                ones[k] = 1.0f;
            qs_status st = qs_sp24_decompress(c, ones, QS_DTYPE_F32, (const uint16_t *)src,
                                              src_units, rows, cols, dense, n * 4);
            fz_check(st == QS_OK, "decompress rejects meta that to_bitmask accepted (%s)",
                     qs_status_str(st));
            for (int64_t r = 0; r < rows; r++)
                for (int64_t k = 0; k < cols; k++) {
                    int bit = res[r * cdiv(cols, 8) + k / 8] >> (k % 8) & 1;
                    fz_check(bit == (dense[r * cols + k] != 0.0f),
                             "bitmask and decompress disagree at row %lld col %lld",
                             (long long)r, (long long)k);
                }
            free(ones);
            free(dense);
        }
    }
    free(src_mem);
    free(meta_mem);
    free(ref);
    free(out);
    return 0;
}
