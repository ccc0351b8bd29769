/* SPDX-License-Identifier: MIT */
/*
 * qs_dequantize of arbitrary planes under every ISA tier: any codes, any scale bytes (NaN, Inf,
 * subnormal, E8M0 0xFF, E4M3 NaN), any global_scale and nested_offset, a small shape, an output
 * dtype, and optionally one plane or the output one byte short or misaligned. Checked: the status
 * is a known one and the same on every tier; a failing call wrote nothing; a successful one gave
 * identical output bits on every tier (NaN included: the canonical NaN rule).
 *
 * Input layout: format, flags, block-size choice, rows, cols, dtype, short choice, 4-byte
 * global_scale, 4-byte nested_offset, then the planes in order (data, scale, zero point, nested
 * scale), zeros past the end of the input. rows = 255 selects a huge shape with a zero dimension
 * (unless QS_FUZZ_KNOWN has "empty"); the buffers are then capped at 64 KiB.
 */
#include "fuzz_common.h"

#define MAX_ROWS 8
#define MAX_COLS 96
#define CAP (64 * 1024)

static const int32_t block_choices[] = {32, 64, 128, 4096, 2, 6, 16, 4, 8, 1, 0, -32, 17, 3, 5, 8192};

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    fz_in in = {data, size};
    fz_tiers *t = fz_tiers_get();

    int32_t format = fz_u8(&in) % 11;
    uint8_t flags = fz_u8(&in), bsel = fz_u8(&in), rsel = fz_u8(&in), csel = fz_u8(&in);
    int dtype = fz_u8(&in) % 4;
    uint8_t short_sel = fz_u8(&in);
    uint32_t gbits = fz_u32(&in), obits = fz_u32(&in);

    qs_quant_params p;
    qs_quant_params_init(&p, format);
    p.double_quant = flags & 1;
    p.symmetric = !(flags & 2);
    p.granularity = (flags >> 2) & 3;
    p.scale_rounding = (flags >> 4) & 1;
    int misalign = (flags >> 6) & 1 && !fz_known("align");
    if (bsel >= 128)
        p.block_size = block_choices[bsel % (sizeof block_choices / sizeof block_choices[0])];
    if (flags & 0x80)
        p.reserved[bsel & 3] = 1;

    int64_t rows = rsel % MAX_ROWS, cols = csel % MAX_COLS;
    fz_huge_shape(&in, rsel, csel, &rows, &cols);

    /* Planes filled from the input, at the sizes the query gives (capped; one maybe short). */
    uint8_t *mem[QS_PLANE_COUNT];
    size_t cap[QS_PLANE_COUNT];
    int size_ok = 1;
    for (int k = 0; k < QS_PLANE_COUNT; k++) {
        int64_t b = 0;
        qs_status st = qs_quant_size(&p, rows, cols, k, &b);
        fz_check(fz_status_known(st), "qs_quant_size returned unknown status %d", st);
        if (st != QS_OK)
            size_ok = 0, b = 64;
        fz_check(b >= 0, "qs_quant_size gave a negative size %lld", (long long)b);
        cap[k] = b > CAP ? CAP : (size_t)b;
        if (short_sel == k && cap[k] > 0)
            cap[k]--;
        mem[k] = fz_canary_new(cap[k] + (size_t)misalign); /* exact: ASan sees a byte past */
        fz_fill(&in, mem[k] + misalign, cap[k]);
    }
    qs_qtensor q;
    memset(&q, 0, sizeof q);
    q.data = mem[0] + misalign, q.data_bytes = (int64_t)cap[0];
    q.scale = mem[1] + misalign, q.scale_bytes = (int64_t)cap[1];
    q.zero_point = mem[2] + misalign, q.zero_point_bytes = (int64_t)cap[2];
    q.nested_scale = mem[3] + misalign, q.nested_scale_bytes = (int64_t)cap[3];
    memcpy(&q.global_scale, &gbits, 4);
    memcpy(&q.nested_offset, &obits, 4);

    /* The output: n elements of dtype (an invalid dtype gets 4 bytes per element). */
    int esz = dtype < 3 ? qs_dtype_size(dtype) : 4;
    int64_t n = rows * cols;
    size_t dst_bytes = rows <= MAX_ROWS && cols <= MAX_COLS ? (size_t)n * (size_t)esz : 0;
    if (dst_bytes > CAP)
        dst_bytes = CAP;
    if (short_sel == 4 && dst_bytes > 0)
        dst_bytes--;
    uint8_t *ref = fz_canary_new(dst_bytes + (size_t)misalign);
    uint8_t *out = fz_canary_new(dst_bytes + (size_t)misalign);

    qs_status st0 = 0;
    for (int i = 0; i < t->count; i++) {
        uint8_t *dst = (i == 0 ? ref : out) + misalign;
        memset(dst, FZ_CANARY, dst_bytes);
        qs_status st = qs_dequantize(t->ctx[i], &p, &q, rows, cols, dst, dtype,
                                     (int64_t)dst_bytes);
        fz_check(fz_status_known(st), "qs_dequantize returned unknown status %d", st);
        if (!size_ok)
            fz_check(st != QS_OK, "qs_dequantize succeeded where qs_quant_size failed");
        if (i == 0)
            st0 = st;
        else
            fz_check(st == st0, "status %s on tier %s, %s on scalar", qs_status_str(st),
                     fz_tier_name(t->ctx[i]), qs_status_str(st0));
        if (st != QS_OK) {
            fz_check(fz_untouched(dst, dst_bytes), "output written by a failing qs_dequantize (%s)",
                     qs_status_str(st));
        } else if (i > 0) {
            int64_t d = fz_float_diff(ref + misalign, dst, n, dtype);
            if (d >= 0) {
                uint32_t a = 0, b = 0;
                memcpy(&a, ref + misalign + d * esz, (size_t)esz);
                memcpy(&b, dst + d * esz, (size_t)esz);
                fz_fail("format %s: element %lld is %#x on scalar, %#x on %s",
                        qs_format_name(format), (long long)d, a, b,
                        fz_tier_name(t->ctx[i]));
            }
        }
    }
    for (int k = 0; k < QS_PLANE_COUNT; k++)
        free(mem[k]);
    free(ref);
    free(out);
    return 0;
}
