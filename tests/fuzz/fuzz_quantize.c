/* SPDX-License-Identifier: MIT */
/*
 * qs_quantize under every ISA tier. The input chooses the format, the options (some invalid on
 * purpose), a small shape, the source dtype, its alignment, which plane is one byte short and
 * the data. Checked: the status is a known one and the same on every tier; a failing call wrote
 * nothing (planes, global_scale, nested_offset); a successful one gave identical bytes on every
 * tier, and dequantizing its result gives identical bits on every tier.
 *
 * Input layout: format, flags, block-size choice, rows, cols, dtype, scale choice, short-plane
 * choice, [4-byte scale], then the source elements (zeros past the end of the input). rows = 255
 * selects a huge shape with one zero dimension (unless QS_FUZZ_KNOWN has "empty"): the planes
 * are then capped at 64 KiB, so a size computation that overflows shows up as a write past them.
 */
#include "fuzz_common.h"

#define MAX_ROWS 8
#define MAX_COLS 96
#define PLANE_CAP (64 * 1024)

static const int32_t block_choices[] = {32, 64, 128, 4096, 2, 6, 16, 4, 8, 1, 0, -32, 17, 3, 5, 8192};

struct plane_set {
    uint8_t *p[QS_PLANE_COUNT];
    size_t cap[QS_PLANE_COUNT];
};

static void planes_new(struct plane_set *s, const int64_t *sizes, int short_plane)
{
    for (int k = 0; k < QS_PLANE_COUNT; k++) {
        size_t cap = sizes[k] > PLANE_CAP ? PLANE_CAP : (size_t)sizes[k];
        if (k == short_plane && cap > 0)
            cap--;
        s->cap[k] = cap;
        s->p[k] = sizes[k] > 0 ? fz_canary_new(cap) : NULL;
    }
}

static void planes_free(struct plane_set *s)
{
    for (int k = 0; k < QS_PLANE_COUNT; k++)
        free(s->p[k]);
}

static qs_qtensor qt_of(const struct plane_set *s)
{
    qs_qtensor q;
    memset(&q, 0, sizeof q);
    q.data = s->p[0], q.data_bytes = (int64_t)s->cap[0];
    q.scale = s->p[1], q.scale_bytes = (int64_t)s->cap[1];
    q.zero_point = s->p[2], q.zero_point_bytes = (int64_t)s->cap[2];
    q.nested_scale = s->p[3], q.nested_scale_bytes = (int64_t)s->cap[3];
    memset(&q.global_scale, FZ_CANARY, sizeof q.global_scale);
    memset(&q.nested_offset, FZ_CANARY, sizeof q.nested_offset);
    return q;
}

/* Dequantize a successful result on every tier (f32 and the source dtype) and compare. */
static void check_roundtrip(const qs_quant_params *p, const qs_qtensor *q, int64_t rows,
                            int64_t cols, int dtype)
{
    fz_tiers *t = fz_tiers_get();
    int64_t n = rows * cols;
    int esz = qs_dtype_size(dtype);
    size_t bytes = (size_t)n * (size_t)esz;
    uint8_t *ref = fz_canary_new(bytes), *out = fz_canary_new(bytes);

    for (int i = 0; i < t->count; i++) {
        uint8_t *dst = i == 0 ? ref : out;
        memset(dst, FZ_CANARY, bytes);
        qs_status st = qs_dequantize(t->ctx[i], p, q, rows, cols, dst, dtype, (int64_t)bytes);
        fz_check(st == QS_OK, "dequantize of a quantized tensor failed on tier %d: %s", i,
                 qs_status_str(st));
        int64_t d = i == 0 ? -1 : fz_float_diff(ref, out, n, dtype);
        fz_check(d < 0, "dequantize tier %s differs from scalar at element %lld",
                 fz_tier_name(t->ctx[i]), (long long)d);
    }
    free(ref);
    free(out);
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    fz_in in = {data, size};
    fz_tiers *t = fz_tiers_get();

    int32_t format = fz_u8(&in) % 11; /* 0 and 10 are invalid */
    uint8_t flags = fz_u8(&in), bsel = fz_u8(&in), rsel = fz_u8(&in), csel = fz_u8(&in);
    int dtype = fz_u8(&in) % 4; /* 3 is invalid */
    uint8_t ssel = fz_u8(&in), short_sel = fz_u8(&in);

    qs_quant_params p;
    qs_quant_params_init(&p, format);
    p.double_quant = flags & 1;
    p.symmetric = !(flags & 2);
    p.granularity = (flags >> 2) & 3; /* 3 is invalid */
    p.scale_rounding = (flags >> 4) & 1;
    int reject = (flags >> 5) & 1;
    int misalign = (flags >> 6) & 1 && !fz_known("align");
    if (bsel >= 128)
        p.block_size = block_choices[bsel % (sizeof block_choices / sizeof block_choices[0])];
    if (ssel & 1) {
        uint32_t bits = fz_u32(&in);
        memcpy(&p.scale, &bits, 4);
    }
    if (ssel & 2)
        p.reserved[ssel >> 5 & 3] = 1; /* a reserved field that must stay zero */

    int64_t rows = rsel % MAX_ROWS, cols = csel % MAX_COLS;
    fz_huge_shape(&in, rsel, csel, &rows, &cols);

    /* Plane sizes; a plane whose size query fails gets a small buffer, and the call must fail. */
    int64_t sizes[QS_PLANE_COUNT];
    int size_ok = 1;
    for (int k = 0; k < QS_PLANE_COUNT; k++) {
        qs_status st = qs_quant_size(&p, rows, cols, k, &sizes[k]);
        fz_check(fz_status_known(st), "qs_quant_size returned unknown status %d", st);
        if (st != QS_OK) {
            size_ok = 0;
            sizes[k] = 64;
        }
        fz_check(sizes[k] >= 0, "qs_quant_size gave a negative size %lld", (long long)sizes[k]);
    }
    int short_plane = short_sel < 4 ? short_sel : -1;

    /* The source: n elements of dtype at an offset of 1 byte when misaligned. */
    int esz = dtype < 3 ? qs_dtype_size(dtype) : 4;
    int64_t n = rows * cols;
    size_t src_bytes = rows <= MAX_ROWS && cols <= MAX_COLS ? (size_t)n * (size_t)esz : 0;
    uint8_t *src_mem = fz_canary_new(src_bytes + (size_t)misalign);
    fz_fill(&in, src_mem + misalign, src_bytes);
    const void *src = src_mem + misalign;

    struct plane_set ref, cur;
    qs_qtensor qref;
    qs_status st0 = 0;
    planes_new(&ref, sizes, short_plane);
    for (int i = 0; i < t->count; i++) {
        qs_ctx_set(t->ctx[i], QS_PARAM_NONFINITE, reject ? QS_NONFINITE_REJECT : QS_NONFINITE_ENCODE);
        struct plane_set *s = i == 0 ? &ref : &cur;
        if (i > 0)
            planes_new(&cur, sizes, short_plane);
        qs_qtensor q = qt_of(s);
        qs_status st = qs_quantize(t->ctx[i], &p, src, dtype, rows, cols, &q);
        fz_check(fz_status_known(st), "qs_quantize returned unknown status %d", st);
        if (!size_ok)
            fz_check(st != QS_OK, "qs_quantize succeeded where qs_quant_size failed");
        if (i == 0) {
            st0 = st;
            qref = q;
        } else {
            fz_check(st == st0, "status %s on tier %s, %s on scalar", qs_status_str(st),
                     fz_tier_name(t->ctx[i]), qs_status_str(st0));
        }
        if (st != QS_OK) {
            for (int k = 0; k < QS_PLANE_COUNT; k++)
                fz_check(!s->p[k] || fz_untouched(s->p[k], s->cap[k]),
                         "plane %d written by a failing qs_quantize (%s)", k, qs_status_str(st));
            fz_check(fz_untouched((const uint8_t *)&q.global_scale, 4) &&
                         fz_untouched((const uint8_t *)&q.nested_offset, 4),
                     "global_scale / nested_offset written by a failing qs_quantize");
        } else if (i > 0) {
            for (int k = 0; k < QS_PLANE_COUNT; k++) {
                int64_t d = s->p[k] ? fz_byte_diff(ref.p[k], s->p[k], s->cap[k]) : -1;
                fz_check(d < 0, "plane %d differs at byte %lld: tier %s vs scalar", k,
                         (long long)d, fz_tier_name(t->ctx[i]));
            }
            fz_check(fz_float_diff(&q.global_scale, &qref.global_scale, 1, QS_DTYPE_F32) < 0 &&
                         fz_float_diff(&q.nested_offset, &qref.nested_offset, 1, QS_DTYPE_F32) < 0,
                     "global_scale / nested_offset differ: tier %s vs scalar",
                     fz_tier_name(t->ctx[i]));
        }
        if (i > 0)
            planes_free(&cur);
    }
    if (st0 == QS_OK && n > 0 && (dtype == QS_DTYPE_F32 || dtype == QS_DTYPE_F16 ||
                                  dtype == QS_DTYPE_BF16))
        check_roundtrip(&p, &qref, rows, cols, dtype);
    planes_free(&ref);
    free(src_mem);
    return 0;
}
