/* SPDX-License-Identifier: MIT */
/*
 * The work items of every CUDA kernel of the plugin, as C functions that compile for the host
 * and, under nvcc, for the device (QS_HD). A CUDA kernel in this folder is a grid-stride loop
 * that calls one item per index (or, for reductions and the GEMV, a few lines of shared-memory
 * or shuffle code around the items' combine rules); tests/test_cuda_items.c runs the same items
 * over an emulated grid on the host, in a scrambled order, and compares every byte with
 * src/ref. The element and block rules inside the items are src/ref's own (element_hd.h).
 *
 * Device pointers are aligned for their element type (the core checks); indices are int64_t.
 */
#ifndef QS_CUDA_ITEMS_H
#define QS_CUDA_ITEMS_H

#include <stdint.h>

#include "qsparse.h"
#include "../ref/element_hd.h"

/* Elements per reduction chunk (one CUDA block reduces one chunk of one unit). */
#define QS_CU_CHUNK 16384
/* Threads per CUDA block of the reductions; the host emulation uses the same count and tree. */
#define QS_CU_RED_THREADS 256

/* ---- dtype staging ------------------------------------------------------------------------ */

/* src holds f16 (is_bf16 0) or bf16 (1) bits; dst f32. */
struct qs_cu_cvt_in {
    const uint16_t *src;
    float *dst;
    int32_t is_bf16;
};

QS_HD static inline void qs_cu_cvt_in_item(const struct qs_cu_cvt_in *a, int64_t i)
{
    a->dst[i] = a->is_bf16 ? qs_hd_bf16_to_f32(a->src[i]) : qs_hd_f16_to_f32(a->src[i]);
}

struct qs_cu_cvt_out {
    const float *src;
    uint16_t *dst;
    int32_t is_bf16;
};

QS_HD static inline void qs_cu_cvt_out_item(const struct qs_cu_cvt_out *a, int64_t i)
{
    a->dst[i] = a->is_bf16 ? qs_hd_f32_to_bf16(a->src[i]) : qs_hd_f32_to_f16(a->src[i]);
}

/* ---- reductions ------------------------------------------------------------------------------ */

/* What a reduction computes over a unit: the absolute maximum (NaN ignored), min and max (NaN
 * ignored, -0 < +0), or whether a NaN or Inf occurs (1.0 / 0.0 in `a`). All three are
 * associative and commutative, so every grid shape gives the bits of the sequential loop. */
#define QS_CU_RED_AMAX 0
#define QS_CU_RED_MINMAX 1
#define QS_CU_RED_NONFINITE 2

struct qs_cu_pair {
    float a, b; /* amax or flag in a; min in a and max in b */
};

QS_HD static inline struct qs_cu_pair qs_cu_red_init(int32_t kind)
{
    struct qs_cu_pair p;

    p.a = kind == QS_CU_RED_MINMAX ? qs_hd_float(0x7F800000u) : 0.0f;
    p.b = kind == QS_CU_RED_MINMAX ? qs_hd_float(0xFF800000u) : 0.0f;
    return p;
}

QS_HD static inline struct qs_cu_pair qs_cu_red_feed(int32_t kind, struct qs_cu_pair p, float x)
{
    if (kind == QS_CU_RED_AMAX) {
        p.a = qs_hd_absmax_step(p.a, x);
    } else if (kind == QS_CU_RED_MINMAX) {
        p.a = qs_hd_min(p.a, x);
        p.b = qs_hd_max(p.b, x);
    } else if ((qs_hd_bits(x) & 0x7F800000u) == 0x7F800000u) {
        p.a = 1.0f;
    }
    return p;
}

/* Combine two partial results (never NaN themselves). */
QS_HD static inline struct qs_cu_pair qs_cu_red_join(int32_t kind, struct qs_cu_pair p,
                                                     struct qs_cu_pair q)
{
    if (kind == QS_CU_RED_MINMAX) {
        p.a = qs_hd_min(p.a, q.a);
        p.b = qs_hd_max(p.b, q.b);
    } else {
        p.a = q.a > p.a ? q.a : p.a;
    }
    return p;
}

/* One unit of unit_len elements per scale (a row, a group, or the whole tensor), cut into
 * chunks of QS_CU_CHUNK; partial[u * chunks + c] is the result of chunk c of unit u. */
struct qs_cu_red {
    const float *src;
    int64_t unit_len, chunks; /* chunks per unit */
    int32_t kind;
    struct qs_cu_pair *partial;
};

/* Thread `t` of the CUDA block that reduces chunk `i` (= u * chunks + c): its strided share. */
QS_HD static inline struct qs_cu_pair qs_cu_red_thread(const struct qs_cu_red *a, int64_t i,
                                                       int32_t t)
{
    int64_t u = i / a->chunks, c = i % a->chunks;
    int64_t c0 = c * QS_CU_CHUNK;
    int64_t len = a->unit_len - c0 < QS_CU_CHUNK ? a->unit_len - c0 : QS_CU_CHUNK;
    const float *v = a->src + u * a->unit_len + c0;
    struct qs_cu_pair p = qs_cu_red_init(a->kind);

    for (int64_t k = t; k < len; k += QS_CU_RED_THREADS)
        p = qs_cu_red_feed(a->kind, p, v[k]);
    return p;
}

/* ---- NF4 / FP4 (formats.md §5, §6) ------------------------------------------------------------ */

struct qs_cu_bnb4_quant {
    const float *src;
    int64_t n;
    int32_t block, fp4;
    uint8_t *data;
    float *absmax;
};

/* Item b: block b of the flattened tensor, by the reference's own block rule. */
QS_HD static inline void qs_cu_bnb4_quant_item(const struct qs_cu_bnb4_quant *a, int64_t b)
{
    int64_t start = b * a->block;
    int64_t len = a->n - start < a->block ? a->n - start : a->block;

    a->absmax[b] = qs_hd_bnb4_block(a->src + start, len, a->data + start / 2, a->fp4);
}

/* Double quantization (§6.1): centre the absmax vector, then dyn8 blocks of 256. */
struct qs_cu_dq_quant {
    float *absmax; /* nb values, centred in place */
    int64_t nb;
    float offset;
    const float *map; /* the dynamic map (device copy of qs_dyn8_map) */
    uint8_t *codes;
    float *nested;
};

QS_HD static inline void qs_cu_dq_center_item(const struct qs_cu_dq_quant *a, int64_t i)
{
    a->absmax[i] = qs_hd_nan_canon(a->absmax[i] - a->offset); /* Inf - Inf: canonical NaN */
}

QS_HD static inline void qs_cu_dq_block_item(const struct qs_cu_dq_quant *a, int64_t b)
{
    int64_t start = b * 256, len = a->nb - start < 256 ? a->nb - start : 256;

    a->nested[b] = qs_hd_dyn8_block(a->absmax + start, len, a->codes + start, a->map);
}

struct qs_cu_dq_dequant {
    const uint8_t *codes;
    const float *nested;
    float offset;
    const float *map;
    float *absmax; /* out: nb decoded values */
};

QS_HD static inline void qs_cu_dq_dequant_item(const struct qs_cu_dq_dequant *a, int64_t u)
{
    a->absmax[u] = qs_hd_dyn8_decode(a->map, a->codes[u], a->nested[u / 256], a->offset);
}

struct qs_cu_bnb4_dequant {
    const uint8_t *data;
    const float *absmax;
    const float *book; /* the format's 16-entry codebook */
    int32_t block;
    float *dst;
};

QS_HD static inline void qs_cu_bnb4_dequant_item(const struct qs_cu_bnb4_dequant *a, int64_t i)
{
    uint8_t byte = a->data[i / 2];
    uint8_t code = (i & 1) ? (byte & 0xF) : (byte >> 4);

    a->dst[i] = qs_hd_bnb4_decode(a->book, code, a->absmax[i / a->block]);
}

/* ---- INT8 and LLM.int8 (§8, §9) -------------------------------------------------------------- */

#define QS_CU_INT8_SYM 0
#define QS_CU_INT8_ASYM 1
#define QS_CU_INT8_ROWSTAT 2

/* Item u: the scale rule of unit u from the reduction partials (combined in chunk order). */
struct qs_cu_int8_params {
    const struct qs_cu_pair *partial;
    int64_t chunks;
    int32_t rule;       /* QS_CU_INT8_* */
    float *scale;       /* the scale plane: scale (SYM, ASYM) or row absmax (ROWSTAT) */
    int8_t *zero_point; /* ASYM: the zero-point plane */
    float *mul;         /* scratch: the multiplier of each unit */
    int32_t *zp;        /* scratch: the zero point of each unit */
};

QS_HD static inline void qs_cu_int8_params_item(const struct qs_cu_int8_params *a, int64_t u)
{
    int32_t kind = a->rule == QS_CU_INT8_ASYM ? QS_CU_RED_MINMAX : QS_CU_RED_AMAX;
    struct qs_cu_pair p = qs_cu_red_init(kind);
    float scale, mul;
    int32_t zp = 0;

    for (int64_t c = 0; c < a->chunks; c++)
        p = qs_cu_red_join(kind, p, a->partial[u * a->chunks + c]);
    if (a->rule == QS_CU_INT8_ROWSTAT) {
        scale = p.a;
        mul = qs_hd_llm_int8_mul(p.a);
    } else if (a->rule == QS_CU_INT8_SYM) {
        qs_hd_int8_symmetric(p.a, &scale, &mul);
    } else {
        qs_hd_int8_asymmetric(p.a, p.b, &scale, &mul, &zp);
        a->zero_point[u] = (int8_t)zp;
    }
    a->scale[u] = scale;
    a->mul[u] = mul;
    a->zp[u] = zp;
}

struct qs_cu_int8_quant {
    const float *src;
    int64_t unit_len; /* elements per scale unit (n for one tensor scale) */
    const float *mul;
    const int32_t *zp;
    int32_t qmin;
    int8_t *dst;
};

QS_HD static inline void qs_cu_int8_quant_item(const struct qs_cu_int8_quant *a, int64_t i)
{
    int64_t u = i / a->unit_len;

    a->dst[i] = qs_hd_int8_encode(a->src[i], a->mul[u], a->zp[u], a->qmin);
}

struct qs_cu_int8_dequant {
    const int8_t *src;
    int64_t unit_len;
    const float *scale;
    const int8_t *zero_point; /* NULL: symmetric */
    int32_t rowstat;
    float *dst;
};

QS_HD static inline void qs_cu_int8_dequant_item(const struct qs_cu_int8_dequant *a, int64_t i)
{
    int64_t u = i / a->unit_len;

    if (a->rowstat)
        a->dst[i] = qs_hd_int8_rowstat_decode(a->src[i], a->scale[u]);
    else
        a->dst[i] = qs_hd_int8_decode(a->src[i], a->scale[u], a->zero_point ? a->zero_point[u] : 0);
}

/* ---- FP8 (§10) and the NVFP4 tensor scale (§14) ------------------------------------------------ */

/* The per-tensor scale from the partials of a one-unit amax reduction: FP8 (nvfp4 0) or NVFP4's
 * s_global (nvfp4 1); a given scale > 0 wins. Written to out[0]. One item. */
struct qs_cu_tensor_scale {
    const struct qs_cu_pair *partial;
    int64_t chunks;
    float given, elem_max;
    int32_t nvfp4;
    float *out;
};

QS_HD static inline void qs_cu_tensor_scale_item(const struct qs_cu_tensor_scale *a, int64_t i)
{
    struct qs_cu_pair p = qs_cu_red_init(QS_CU_RED_AMAX);

    (void)i;
    if (a->given > 0.0f) {
        a->out[0] = a->given;
        return;
    }
    for (int64_t c = 0; c < a->chunks; c++)
        p = qs_cu_red_join(QS_CU_RED_AMAX, p, a->partial[c]);
    a->out[0] = a->nvfp4 ? qs_hd_nvfp4_global_scale(p.a) : qs_hd_fp8_scale(p.a, a->elem_max);
}

struct qs_cu_fp8 {
    const float *src; /* quantize: f32 input; dequantize: unused */
    const uint8_t *codes;
    const float *scale; /* device pointer to the one f32 scale */
    int32_t e5m2;
    uint8_t *dst_codes;
    float *dst;
};

QS_HD static inline void qs_cu_fp8_quant_item(const struct qs_cu_fp8 *a, int64_t i)
{
    float x = a->src[i] / a->scale[0]; /* divided, as the reference does (§10) */

    a->dst_codes[i] = a->e5m2 ? qs_hd_e5m2_encode(x) : qs_hd_e4m3_encode(x);
}

QS_HD static inline void qs_cu_fp8_dequant_item(const struct qs_cu_fp8 *a, int64_t i)
{
    float v = a->e5m2 ? qs_hd_e5m2_decode(a->codes[i]) : qs_hd_e4m3_decode(a->codes[i]);

    a->dst[i] = qs_hd_nan_canon(v * a->scale[0]);
}

/* ---- MXFP4, MXFP8, NVFP4 (§13, §14): blocks along each row ------------------------------------ */

#define QS_CU_ROW_MXFP4 0
#define QS_CU_ROW_MXFP8 1
#define QS_CU_ROW_NVFP4 2

struct qs_cu_rows {
    int32_t kind;     /* QS_CU_ROW_* */
    int32_t block;    /* 32 or 16 */
    int32_t rounding; /* MX scale rounding */
    int64_t cols, row_bytes, spr; /* scales per row */
    const float *src;
    uint8_t *data;
    uint8_t *scales;
    float s_global;                 /* NVFP4: the tensor scale */
    const uint8_t *cdata, *cscales; /* dequantize inputs */
    const float *e2m1;              /* the 16 E2M1 values */
    float *dst;
};

/* Item i: block i % spr of row i / spr, as the reference's quantize loops do. */
QS_HD static inline void qs_cu_rows_quant_item(const struct qs_cu_rows *a, int64_t i)
{
    int64_t r = i / a->spr, b = i % a->spr, c0 = b * a->block;
    int64_t len = a->cols - c0 < a->block ? a->cols - c0 : a->block;
    const float *v = a->src + r * a->cols + c0;
    uint8_t *row = a->data + r * a->row_bytes;

    if (a->kind == QS_CU_ROW_MXFP8) {
        uint8_t s = qs_hd_mx_scale(v, len, a->rounding, 8, 448.0f);
        int shift = 127 - (int)s;
        a->scales[r * a->spr + b] = s;
        for (int64_t k = 0; k < len; k++)
            row[c0 + k] = s == 0xFF ? 0 : qs_hd_e4m3_encode(ldexpf(v[k], shift));
    } else if (a->kind == QS_CU_ROW_MXFP4) {
        uint8_t s = qs_hd_mx_scale(v, len, a->rounding, 2, 6.0f);
        int shift = 127 - (int)s;
        a->scales[r * a->spr + b] = s;
        for (int64_t k = 0; k < len; k += 2) {
            uint8_t lo = 0, hi = 0; /* NaN block: element codes 0 [convention] */
            if (s != 0xFF) {
                lo = qs_hd_e2m1_encode(ldexpf(v[k], shift));
                hi = k + 1 < len ? qs_hd_e2m1_encode(ldexpf(v[k + 1], shift)) : 0;
            }
            row[(c0 + k) / 2] = (uint8_t)(lo | hi << 4);
        }
    } else {
        float sg = a->s_global;
        uint8_t s = qs_hd_nvfp4_block_scale(v, len, sg);
        float den = qs_hd_e4m3_decode(s) * sg;
        a->scales[r * a->spr + b] = s;
        for (int64_t k = 0; k < len; k += 2) {
            uint8_t lo = 0, hi = 0; /* den == 0 (subnormal s_global): every code 0 */
            if (den != 0.0f) {
                lo = qs_hd_e2m1_encode(v[k] / den);
                hi = k + 1 < len ? qs_hd_e2m1_encode(v[k + 1] / den) : 0;
            }
            row[(c0 + k) / 2] = (uint8_t)(lo | hi << 4);
        }
    }
}

/* Item i: element i of the rows x cols output. */
QS_HD static inline void qs_cu_rows_dequant_item(const struct qs_cu_rows *a, int64_t i)
{
    int64_t r = i / a->cols, c = i % a->cols;
    const uint8_t *row = a->cdata + r * a->row_bytes;
    uint8_t sb = a->cscales[r * a->spr + c / a->block];
    float v;

    if (a->kind == QS_CU_ROW_MXFP8) {
        v = qs_hd_e4m3_decode(row[c]) * qs_hd_e8m0_decode(sb);
    } else {
        uint8_t code = (c & 1) ? (row[c / 2] >> 4) : (row[c / 2] & 0xF);
        if (a->kind == QS_CU_ROW_MXFP4)
            v = a->e2m1[code] * qs_hd_e8m0_decode(sb);
        else /* UE4M3: readers ignore the sign bit (§14) */
            v = a->e2m1[code] * (qs_hd_e4m3_decode(sb & 0x7F) * a->s_global);
    }
    a->dst[i] = qs_hd_nan_canon(v);
}

/* ---- GEMV y = W x for NF4 and INT8 weights (include/qsparse/matmul.h order) ------------------ */

/* The reference's summation order: the elements sharing one scale form a segment; inside it,
 * element k goes to lane (k - segment start) mod 16, each lane summing in ascending k from +0;
 * the segment sum is the tree p[i] += p[i + 8], + 4, + 2, + 1; then acc = acc + fl(sum * scale)
 * over ascending segments. On the GPU the 16 lanes of a segment are 16 threads (a half warp),
 * the tree is four shuffles, and one thread adds the segment products of a row in order, so the
 * result is the reference's, bit for bit. */
#define QS_CU_GEMV_NF4 0
#define QS_CU_GEMV_INT8 1

struct qs_cu_gemv {
    int32_t kind;
    int64_t rows, cols;
    const float *x;
    const uint8_t *w;    /* NF4 codes of the flattened matrix, or INT8 codes */
    const float *absmax; /* NF4: decoded absmax, one per block of the flattened matrix */
    const float *book;   /* NF4 codebook */
    int32_t block;       /* NF4 block */
    const float *scale;  /* INT8: scale plane */
    const int8_t *zero_point;
    int32_t gran;        /* INT8: QS_GRAN_* */
    int64_t group;       /* INT8: segment length (cols for tensor and row) */
    float *y;
};

/* Segments of row r: NF4 blocks of the flattened matrix clipped to the row, or INT8 groups. */
QS_HD static inline int64_t qs_cu_gemv_segments(const struct qs_cu_gemv *a, int64_t r)
{
    if (a->kind == QS_CU_GEMV_NF4) {
        int64_t first = r * a->cols / a->block, last = (r * a->cols + a->cols - 1) / a->block;
        return a->cols > 0 ? last - first + 1 : 0;
    }
    return (a->cols + a->group - 1) / a->group;
}

/* Column range [*c0, *c1) of segment s of row r. */
QS_HD static inline void qs_cu_gemv_segment(const struct qs_cu_gemv *a, int64_t r, int64_t s,
                                            int64_t *c0, int64_t *c1)
{
    int64_t e;

    if (a->kind == QS_CU_GEMV_NF4) {
        int64_t start = r * a->cols, b = start / a->block + s;
        *c0 = b * a->block - start;
        if (*c0 < 0)
            *c0 = 0;
        e = (b + 1) * a->block - start;
    } else {
        *c0 = s * a->group;
        e = *c0 + a->group;
    }
    *c1 = e < a->cols ? e : a->cols;
}

/* Lane `lane` (0..15) of segment s of row r: the partial sum of its elements. */
QS_HD static inline float qs_cu_gemv_lane(const struct qs_cu_gemv *a, int64_t r, int64_t s,
                                          int lane)
{
    int64_t c0, c1;
    float p = 0.0f;

    qs_cu_gemv_segment(a, r, s, &c0, &c1);
    for (int64_t c = c0 + lane; c < c1; c += 16) {
        int64_t f = r * a->cols + c;
        float v;
        if (a->kind == QS_CU_GEMV_NF4) {
            uint8_t byte = a->w[f / 2];
            v = a->book[(f & 1) ? byte & 0xF : byte >> 4];
        } else {
            int64_t u = a->gran == QS_GRAN_TENSOR ? 0
                        : a->gran == QS_GRAN_ROW  ? r
                                                  : r * (a->cols / a->group) + s;
            int32_t zp = a->zero_point ? a->zero_point[u] : 0;
            v = qs_hd_nan_canon((float)((int32_t)(int8_t)a->w[f] - zp) * 1.0f); /* exact */
        }
        p = p + a->x[c] * v;
    }
    return p;
}

/* The scale of segment s of row r. */
QS_HD static inline float qs_cu_gemv_scale(const struct qs_cu_gemv *a, int64_t r, int64_t s)
{
    if (a->kind == QS_CU_GEMV_NF4)
        return a->absmax[r * a->cols / a->block + s];
    if (a->gran == QS_GRAN_TENSOR)
        return a->scale[0];
    if (a->gran == QS_GRAN_ROW)
        return a->scale[r];
    return a->scale[r * (a->cols / a->group) + s];
}

/* acc = acc + fl(segment sum * scale), the step one thread takes per segment in order. */
QS_HD static inline float qs_cu_gemv_acc(float acc, float seg_sum, float scale)
{
    return acc + seg_sum * scale;
}

/* ---- 2:4 prune, compress, decompress (docs/sparsity.md §2.2, §3) ------------------------------ */

/* Item i: meta word i % words of row i / words (up to 4 groups of 4 columns). */
#define QS_CU_SP24_PRUNE 0    /* keep the STRIP mask of |w| or of |w| * norms[col] */
#define QS_CU_SP24_COMPRESS 1 /* keep mask_in's non-zero bytes, or w's non-zero values */

struct qs_cu_sp24 {
    int32_t op;
    int64_t cols, words;          /* words = ceil(cols / 16) per row */
    const float *w, *norms;       /* prune / compress input; norms NULL: |w| */
    const uint8_t *mask_in;       /* compress: the mask, NULL for w's non-zero values */
    float *values;                /* rows x cols / 2 */
    uint16_t *meta;               /* rows x words */
    uint8_t *mask_out;            /* prune: rows x cols mask bytes, or NULL */
    const float *cvalues;         /* decompress input */
    const uint16_t *cmeta;        /* decompress (and check) input */
    float *dst;                   /* decompress output, rows x cols */
};

QS_HD static inline unsigned qs_cu_sp24_group_keep(const struct qs_cu_sp24 *a, int64_t r,
                                                   int64_t c0)
{
    const float *w = a->w + r * a->cols + c0;
    unsigned keep = 0;

    if (a->op == QS_CU_SP24_PRUNE) {
        uint32_t k[4];
        for (int i = 0; i < 4; i++) {
            float s = fabsf(w[i]);
            k[i] = qs_hd_sp_key_abs(a->norms ? s * a->norms[c0 + i] : s);
        }
        return qs_hd_sp24_keep(k);
    }
    for (int i = 0; i < 4; i++)
        keep |= (a->mask_in ? a->mask_in[r * a->cols + c0 + i] != 0 : w[i] != 0.0f) << i;
    return keep; /* NaN != 0 is true: NaN is kept */
}

/* Compress: 1 when a group of word i keeps more than two (the driver then writes nothing).
 * Decompress: 1 when a used nibble is not one of the six codes or an unused one is not 0. */
QS_HD static inline int qs_cu_sp24_bad_item(const struct qs_cu_sp24 *a, int64_t i, int decomp)
{
    int64_t r = i / a->words, wd = i % a->words;

    for (int j = 0; j < 4; j++) {
        int64_t c0 = (wd * 4 + j) * 4;
        if (decomp) {
            unsigned nib = (a->cmeta[i] >> (4 * j)) & 15u;
            if (c0 >= a->cols ? nib != 0
                              : !(nib == 0x4 || nib == 0x8 || nib == 0xC || nib == 0x9 ||
                                  nib == 0xD || nib == 0xE))
                return 1;
        } else if (c0 < a->cols) {
            unsigned keep = qs_cu_sp24_group_keep(a, r, c0);
            if (((keep & 1u) + (keep >> 1 & 1u) + (keep >> 2 & 1u) + (keep >> 3 & 1u)) > 2)
                return 1;
        }
    }
    return 0;
}

QS_HD static inline void qs_cu_sp24_compress_item(const struct qs_cu_sp24 *a, int64_t i)
{
    int64_t r = i / a->words, wd = i % a->words;
    unsigned word = 0; /* unused nibbles stay 0 (§3.1) */

    for (int j = 0; j < 4; j++) {
        int64_t g = wd * 4 + j, c0 = g * 4;
        const float *w = a->w + r * a->cols + c0;
        float *v = a->values + r * (a->cols / 2) + 2 * g;
        unsigned keep, nib, i0, i1;
        if (c0 >= a->cols)
            break;
        keep = qs_cu_sp24_group_keep(a, r, c0);
        nib = qs_hd_sp24_nibble(keep);
        i0 = nib & 3u;
        i1 = nib >> 2;
        v[0] = (keep >> i0) & 1u ? w[i0] : 0.0f; /* fill positions (§3.4) are +0 */
        v[1] = (keep >> i1) & 1u ? w[i1] : 0.0f;
        word |= nib << (4 * j);
        if (a->mask_out)
            for (int k = 0; k < 4; k++)
                a->mask_out[r * a->cols + c0 + k] = (uint8_t)((keep >> k) & 1u);
    }
    a->meta[i] = (uint16_t)word;
}

QS_HD static inline void qs_cu_sp24_decompress_item(const struct qs_cu_sp24 *a, int64_t i)
{
    int64_t r = i / a->words, wd = i % a->words;

    for (int j = 0; j < 4; j++) {
        int64_t g = wd * 4 + j, c0 = g * 4;
        unsigned nib = (a->cmeta[i] >> (4 * j)) & 15u;
        float *d = a->dst + r * a->cols + c0;
        const float *v = a->cvalues + r * (a->cols / 2) + 2 * g;
        if (c0 >= a->cols)
            break;
        for (int k = 0; k < 4; k++)
            d[k] = 0.0f;
        d[nib & 3u] = v[0];
        d[nib >> 2] = v[1];
    }
}

#endif /* QS_CUDA_ITEMS_H */
