/* SPDX-License-Identifier: MIT */
/*
 * The multi-row GEMV with bf16 activations (include/qsparse/matmul.h, "bf16 activations"): the
 * f32 GEMV definition of matmul_ref.c run on x^ (the bf16 activations, widened exactly) and on
 * the unscaled element values rounded to bf16. Every value but an NF4 / FP4 codebook entry is
 * exact in bf16 (INT8 q - zp in [-255, 255], FP8, E2M1 and bf16 weights), so only the two
 * codebooks are rounded here; each product x^_k * v_k of two bf16 values is exact in f32.
 *
 * The reference keeps the f32 GEMV's order (segments of one scale, 16 lanes, the fixed tree,
 * acc = acc + fl(segment sum * scale) from +0, mm_lanes_ref.h) and flushes nothing. The SIMD
 * kernels (vdpbf16ps) sum in pairs, in their own lanes, and flush denormals: the definition
 * leaves the order open, and they are compared with this reference within the bound the header
 * states. The unscaled values come from the formats' own dequantize kernels called with a unit
 * scale, as in matmul_ref.c, so no element rule is repeated.
 */
#include "../core/kernels.h"
#include "mm_lanes_ref.h"
#include "ref.h"

/* Elements per decode call: a multiple of MM_LANES and of 2 (nibbles). */
#define PIECE 64

static const uint8_t e8m0_one[2] = {127, 127};               /* 2^0; a piece spans <= 2 MX blocks */
static const uint8_t e4m3_one[4] = {0x38, 0x38, 0x38, 0x38}; /* 1.0; up to 4 NVFP4 blocks */

/* One W row of the view: what a decoder and a scale rule need. */
typedef struct {
    const qs_mm_weight *w;
    int64_t r;         /* the row */
    const float *book; /* NF4 / FP4: the codebook rounded to bf16 */
} row_ref;

/* The unscaled values of row elements [i, i + len) (never crossing a segment) and the scale of
 * segment s of the row. */
typedef void dec_ref_fn(const row_ref *rr, int64_t i, int64_t len, float *v);
typedef float scl_ref_fn(const row_ref *rr, int64_t s);

static float bf16_round(float v)
{
    return qs_ref_bf16_to_f32(qs_ref_f32_to_bf16(v));
}

static const uint8_t *row_bytes(const row_ref *rr)
{
    return (const uint8_t *)rr->w->data + rr->r * rr->w->row_bytes;
}

/* The dot product of x^ (n bf16 values) with one row: segments of seg elements, the first one of
 * `first` (a bitsandbytes row may start inside a block); scl == NULL: plain weights, whose single
 * segment sum is returned as it is (no scale, no +0 added), as in matmul_ref.c. */
static float dot_row(const uint16_t *x, int64_t n, int64_t first, int64_t seg, dec_ref_fn *dec,
                     scl_ref_fn *scl, const row_ref *rr)
{
    float acc = 0.0f, v[PIECE], xf[PIECE];
    int64_t i = 0;

    for (int64_t s = 0; i < n; s++) {
        int64_t end = i + (s == 0 ? first : seg);
        struct mm_lanes l;

        end = end > n || !scl ? n : end;
        mm_lanes_reset(&l);
        while (i < end) {
            int64_t len = end - i < PIECE ? end - i : PIECE;
            dec(rr, i, len, v);
            qs_cvt_bf16_f32__ref(x + i, len, xf); /* exact */
            mm_lanes_feed(&l, xf, v, len);
            i += len;
        }
        if (!scl)
            return qs_ref_nan_canon(mm_lanes_sum(&l));
        acc = acc + mm_lanes_sum(&l) * scl(rr, s);
    }
    return qs_ref_nan_canon(acc);
}

/* ---- decoders and scale rules -------------------------------------------------------------- */

/* bitsandbytes: row element i is flat element r * k + i, the high nibble for an even one. */
static void dec_bnb4(const row_ref *rr, int64_t i, int64_t len, float *v)
{
    const uint8_t *data = rr->w->data;
    for (int64_t t = 0; t < len; t++) {
        int64_t f = rr->r * rr->w->k + i + t;
        v[t] = rr->book[(f & 1) ? data[f / 2] & 0xF : data[f / 2] >> 4];
    }
}

static float scl_bnb4(const row_ref *rr, int64_t s)
{
    return qs_ld_f32((const float *)rr->w->scale + (rr->r * rr->w->k) / rr->w->group + s);
}

static void dec_int8(const row_ref *rr, int64_t i, int64_t len, float *v)
{
    const qs_mm_weight *w = rr->w;
    int32_t zp = w->zp ? w->zp[rr->r * w->sstride + i / w->group] : 0;
    qs_int8_dequant__ref((const int8_t *)row_bytes(rr) + i, len, 1.0f, zp, v); /* q - zp */
}

/* Each unit scale applied as fl(scale * scale_mul) (fl(1/127) for LLM.int8), as the f32 GEMV. */
static float scl_int8(const row_ref *rr, int64_t s)
{
    const qs_mm_weight *w = rr->w;
    return qs_ld_f32((const float *)w->scale + rr->r * w->sstride + s) * w->scale_mul;
}

static void dec_e4m3(const row_ref *rr, int64_t i, int64_t len, float *v)
{
    qs_e4m3_dequant__ref(row_bytes(rr) + i, len, 1.0f, v);
}

static void dec_e5m2(const row_ref *rr, int64_t i, int64_t len, float *v)
{
    qs_e5m2_dequant__ref(row_bytes(rr) + i, len, 1.0f, v);
}

static float scl_tensor(const row_ref *rr, int64_t s)
{
    (void)s;
    return qs_ld_f32(rr->w->scale);
}

static void dec_mxfp4(const row_ref *rr, int64_t i, int64_t len, float *v)
{
    qs_mxfp4_dequant__ref(row_bytes(rr) + i / 2, e8m0_one, len, v);
}

static void dec_mxfp8(const row_ref *rr, int64_t i, int64_t len, float *v)
{
    qs_mxfp8_dequant__ref(row_bytes(rr) + i, e8m0_one, len, v);
}

static float scl_mx(const row_ref *rr, int64_t s)
{
    return qs_ref_e8m0_decode(((const uint8_t *)rr->w->scale)[rr->r * rr->w->sstride + s]);
}

static void dec_nvfp4(const row_ref *rr, int64_t i, int64_t len, float *v)
{
    qs_nvfp4_dequant__ref(row_bytes(rr) + i / 2, e4m3_one, len, 1.0f, v);
}

/* The block's den as the dequantize rule forms it: fl(value(S & 0x7F) * s_global). */
static float scl_nvfp4(const row_ref *rr, int64_t s)
{
    uint8_t sb = ((const uint8_t *)rr->w->scale)[rr->r * rr->w->sstride + s];
    return qs_ref_e4m3_decode(sb & 0x7F) * rr->w->s_global;
}

static void dec_bf16(const row_ref *rr, int64_t i, int64_t len, float *v)
{
    qs_cvt_bf16_f32__ref((const uint16_t *)(const void *)row_bytes(rr) + i, len, v);
}

/* ---- the kernels ----------------------------------------------------------------------------- */

/* Every (x row, W row) pair of the call; seg: the segment length (0: plain weights, one
 * segment). A bitsandbytes row r starts at flat element r * k, inside block (r * k) / group. */
static void gemv_bf16(const qs_mm_weight *w, int64_t r0, int64_t rows, const uint16_t *x,
                      int64_t ldx, int64_t m, float *y, int64_t ldy, int64_t seg, int flat,
                      const float *book, dec_ref_fn *dec, scl_ref_fn *scl)
{
    float b16[16];

    for (int c = 0; book && c < 16; c++)
        b16[c] = bf16_round(book[c]);
    for (int64_t i = 0; i < m; i++)
        for (int64_t r = 0; r < rows; r++) {
            row_ref rr = {w, r0 + r, b16};
            int64_t first = flat ? seg - ((r0 + r) * w->k) % seg : seg;
            qs_st_f32(y + i * ldy + r, dot_row(x + i * ldx, w->k, first, seg > 0 ? seg : 1, dec,
                                               seg > 0 ? scl : NULL, &rr));
        }
}

void qs_mm_nf4abf16__ref(const qs_mm_weight *w, int64_t r0, int64_t rows, const uint16_t *x,
                         int64_t ldx, int64_t m, float *y, int64_t ldy)
{
    gemv_bf16(w, r0, rows, x, ldx, m, y, ldy, w->group, 1, qs_nf4_codebook, dec_bnb4, scl_bnb4);
}

void qs_mm_fp4abf16__ref(const qs_mm_weight *w, int64_t r0, int64_t rows, const uint16_t *x,
                         int64_t ldx, int64_t m, float *y, int64_t ldy)
{
    gemv_bf16(w, r0, rows, x, ldx, m, y, ldy, w->group, 1, qs_fp4_codebook, dec_bnb4, scl_bnb4);
}

void qs_mm_int8abf16__ref(const qs_mm_weight *w, int64_t r0, int64_t rows, const uint16_t *x,
                          int64_t ldx, int64_t m, float *y, int64_t ldy)
{
    gemv_bf16(w, r0, rows, x, ldx, m, y, ldy, w->group, 0, NULL, dec_int8, scl_int8);
}

/* One segment per row: the tensor scale (a K of 0 reads no element and no scale). */
void qs_mm_e4m3abf16__ref(const qs_mm_weight *w, int64_t r0, int64_t rows, const uint16_t *x,
                          int64_t ldx, int64_t m, float *y, int64_t ldy)
{
    gemv_bf16(w, r0, rows, x, ldx, m, y, ldy, w->k > 0 ? w->k : 1, 0, NULL, dec_e4m3, scl_tensor);
}

void qs_mm_e5m2abf16__ref(const qs_mm_weight *w, int64_t r0, int64_t rows, const uint16_t *x,
                          int64_t ldx, int64_t m, float *y, int64_t ldy)
{
    gemv_bf16(w, r0, rows, x, ldx, m, y, ldy, w->k > 0 ? w->k : 1, 0, NULL, dec_e5m2, scl_tensor);
}

void qs_mm_mxfp4abf16__ref(const qs_mm_weight *w, int64_t r0, int64_t rows, const uint16_t *x,
                           int64_t ldx, int64_t m, float *y, int64_t ldy)
{
    gemv_bf16(w, r0, rows, x, ldx, m, y, ldy, 32, 0, NULL, dec_mxfp4, scl_mx);
}

void qs_mm_mxfp8abf16__ref(const qs_mm_weight *w, int64_t r0, int64_t rows, const uint16_t *x,
                           int64_t ldx, int64_t m, float *y, int64_t ldy)
{
    gemv_bf16(w, r0, rows, x, ldx, m, y, ldy, 32, 0, NULL, dec_mxfp8, scl_mx);
}

void qs_mm_nvfp4abf16__ref(const qs_mm_weight *w, int64_t r0, int64_t rows, const uint16_t *x,
                           int64_t ldx, int64_t m, float *y, int64_t ldy)
{
    gemv_bf16(w, r0, rows, x, ldx, m, y, ldy, 16, 0, NULL, dec_nvfp4, scl_nvfp4);
}

void qs_mm_bf16abf16__ref(const qs_mm_weight *w, int64_t r0, int64_t rows, const uint16_t *x,
                          int64_t ldx, int64_t m, float *y, int64_t ldy)
{
    gemv_bf16(w, r0, rows, x, ldx, m, y, ldy, 0, 0, NULL, dec_bf16, NULL);
}
