/* SPDX-License-Identifier: MIT */
/*
 * The bulk items of quantize and dequantize, shaped for memory bandwidth: every input or output
 * moves in 16-byte tiles (one 128-bit load or store on the device), f16 / bf16 are read and
 * written as they are (widened and rounded in registers, no f32 pass through memory), and a
 * scale block is reduced by a group of lanes, so one warp quantizes several blocks at once:
 *
 * - qs_cu_bq: blockwise quantize (NF4 / FP4 absmax, INT8 per unit, MX, NVFP4, the dyn8 blocks of
 *   double quantization). A block of `block` elements is `tiles` input tiles; `lanes` lanes (a
 *   power of two, at most 32) share it, lane l taking tiles l, l + lanes, ...; the lanes' partial
 *   reductions are joined (the join is order-independent, so any shuffle tree gives the same
 *   bits), every lane derives the block's scale with the reference's rule, and each encodes its
 *   own tiles and stores their codes with one store per tile.
 * - qs_cu_ewq: elementwise quantize once the scales exist (FP8, INT8 with few large units).
 * - qs_cu_deq: dequantize, one 16-byte tile of codes per item (32 4-bit or 16 8-bit codes), its
 *   values written as 16-byte tiles of the output dtype; the same struct's element item runs the
 *   tail and the fallback.
 *
 * The element and block rules are element_hd.h's (src/ref's), so results are bit-identical to the
 * CPU. The drivers (cuda_pipeline.c) take these paths when the pointers are 16-byte aligned (and
 * the code plane 8-byte aligned) and the block is a whole number of tiles; otherwise the scalar
 * items of cuda_items.h run.
 */
#ifndef QS_CUDA_VEC_H
#define QS_CUDA_VEC_H

#include "cuda_items.h"

/* ---- blockwise quantize ---------------------------------------------------------------------- */

#define QS_CU_BQ_BNB4 0 /* NF4 / FP4 (sub 1: FP4): f32 absmax, element 2j in the high nibble */
#define QS_CU_BQ_INT8 1 /* sub: QS_CU_INT8_*: f32 scale (row absmax), int8 zero point */
#define QS_CU_BQ_MX 2   /* sub 0: MXFP4, 1: MXFP8; E8M0 scale byte; low nibble first */
#define QS_CU_BQ_NV 3   /* NVFP4: E4M3 scale byte with the device tensor scale; low nibble first */
#define QS_CU_BQ_DYN8 4 /* the dyn8 blocks of 256 centred absmax values (f32 input) */

struct qs_cu_bq {
    int32_t rule, dtype; /* QS_CU_BQ_*; the input's QS_DTYPE_* */
    int32_t sub, rounding;
    int32_t lanes;       /* lanes per block: a power of two, 1 ... 32 */
    int64_t block;       /* elements per block, a multiple of the tile */
    int64_t tiles;       /* 16-byte input tiles per block */
    int64_t blocks;      /* blocks to quantize, all of them full */
    const void *src;
    uint8_t *data;         /* codes */
    float *fscale;         /* BNB4 absmax, INT8 scale or row absmax, DYN8 nested absmax */
    uint8_t *bscale;       /* MX and NVFP4 scale bytes */
    int8_t *zero_point;    /* INT8 asymmetric */
    const float *s_global; /* NVFP4: device scalar */
    const float *tab;      /* DYN8: the tables (QS_CU_TAB_*) */
};

/* A block's scale rule, as every lane of its group computes it. */
struct qs_cu_bq_par {
    float f;        /* BNB4 / DYN8: 1 / absmax; INT8: multiplier; NVFP4: the divisor */
    float scale;    /* what the f32 scale plane gets */
    int32_t zp, qmin;
    int32_t shift;  /* MX: 127 - E8M0 byte */
    uint32_t sbyte; /* MX / NVFP4 scale byte */
    int32_t zero;   /* every code of the block is 0 */
};

QS_HD static inline int32_t qs_cu_bq_kind(const struct qs_cu_bq *a)
{
    if (a->rule == QS_CU_BQ_INT8 && a->sub == QS_CU_INT8_ASYM)
        return QS_CU_RED_MINMAX;
    return a->rule == QS_CU_BQ_MX ? QS_CU_RED_MX : QS_CU_RED_AMAX;
}

QS_HD static inline int qs_cu_bq_bits(const struct qs_cu_bq *a)
{
    return a->rule == QS_CU_BQ_BNB4 || a->rule == QS_CU_BQ_NV ||
                   (a->rule == QS_CU_BQ_MX && a->sub == 0)
               ? 4
               : 8;
}

/* Tile t of block b. */
QS_HD static inline const void *qs_cu_bq_tile(const struct qs_cu_bq *a, int64_t b, int64_t t)
{
    return (const char *)a->src + b * a->block * qs_cu_dsize(a->dtype) + 16 * t;
}

QS_HD static inline struct qs_cu_pair qs_cu_bq_feed(const struct qs_cu_bq *a, struct qs_cu_pair p,
                                                    const struct qs_cu_v16 *v)
{
    int32_t kind = qs_cu_bq_kind(a), per = 16 / qs_cu_dsize(a->dtype);

    QS_CU_UNROLL
    for (int k = 0; k < 8; k++)
        if (k < per)
            p = qs_cu_red_feed(kind, p, qs_cu_tile_elem(v, a->dtype, k));
    return p;
}

/* Lane `lane` of block b: its tiles after the first (the caller feeds tile `lane` itself, which
 * the device kernel keeps in registers for the encoding). */
QS_HD static inline struct qs_cu_pair qs_cu_bq_reduce_rest(const struct qs_cu_bq *a, int64_t b,
                                                           int lane, struct qs_cu_pair p)
{
    for (int64_t t = lane + a->lanes; t < a->tiles; t += a->lanes) {
        struct qs_cu_v16 v = qs_cu_ld16(qs_cu_bq_tile(a, b, t));
        p = qs_cu_bq_feed(a, p, &v);
    }
    return p;
}

QS_HD static inline struct qs_cu_bq_par qs_cu_bq_params(const struct qs_cu_bq *a,
                                                        struct qs_cu_pair p)
{
    struct qs_cu_bq_par r;

    r.f = 0.0f;
    r.scale = 0.0f;
    r.zp = 0;
    r.qmin = -127;
    r.shift = 0;
    r.sbyte = 0;
    r.zero = 0;
    if (a->rule == QS_CU_BQ_BNB4 || a->rule == QS_CU_BQ_DYN8) {
        r.scale = p.a;
        r.zero = p.a == 0.0f; /* all-zero (or all-NaN) block: codes 0 (§5.2, §6.4) */
        r.f = 1.0f / p.a;
    } else if (a->rule == QS_CU_BQ_INT8) {
        if (a->sub == QS_CU_INT8_ROWSTAT) {
            r.scale = p.a;
            r.f = qs_hd_llm_int8_mul(p.a);
        } else if (a->sub == QS_CU_INT8_SYM) {
            qs_hd_int8_symmetric(p.a, &r.scale, &r.f);
        } else {
            qs_hd_int8_asymmetric(p.a, p.b, &r.scale, &r.f, &r.zp);
            r.qmin = -128;
        }
    } else if (a->rule == QS_CU_BQ_MX) {
        r.sbyte = p.b != 0.0f ? 0xFFu
                              : qs_hd_mx_scale_from_amax(p.a, a->rounding, a->sub ? 8 : 2,
                                                         a->sub ? 448.0f : 6.0f);
        r.shift = 127 - (int32_t)r.sbyte;
        r.zero = r.sbyte == 0xFFu; /* a NaN or Inf in the block: codes 0 [convention] */
    } else {
        float sg = a->s_global[0];
        r.sbyte = qs_hd_nvfp4_scale_from_amax(p.a, sg);
        r.f = qs_hd_e4m3_decode((uint8_t)r.sbyte) * sg;
        r.zero = r.f == 0.0f; /* subnormal s_global: every code 0 */
    }
    return r;
}

/* The block's entries of the scale planes (lane 0 of the group writes them). */
QS_HD static inline void qs_cu_bq_store_scale(const struct qs_cu_bq *a, int64_t b,
                                              const struct qs_cu_bq_par *r)
{
    if (a->rule == QS_CU_BQ_MX || a->rule == QS_CU_BQ_NV)
        a->bscale[b] = (uint8_t)r->sbyte;
    else
        a->fscale[b] = r->scale;
    if (a->rule == QS_CU_BQ_INT8 && a->sub == QS_CU_INT8_ASYM)
        a->zero_point[b] = (int8_t)r->zp;
}

QS_HD static inline uint32_t qs_cu_bq_code(const struct qs_cu_bq *a, const struct qs_cu_bq_par *r,
                                           float v)
{
    if (a->rule == QS_CU_BQ_INT8)
        return (uint8_t)qs_hd_int8_encode(v, r->f, r->zp, r->qmin);
    if (r->zero)
        return 0;
    if (a->rule == QS_CU_BQ_BNB4)
        return a->sub ? qs_hd_fp4_encode(v * r->f) : qs_hd_nf4_encode(v * r->f);
    if (a->rule == QS_CU_BQ_DYN8)
        return qs_hd_dyn8_encode(v * r->f, a->tab + QS_CU_TAB_DYN8);
    if (a->rule == QS_CU_BQ_MX)
        return a->sub ? qs_hd_e4m3_encode(ldexpf(v, r->shift))
                      : qs_hd_e2m1_encode(ldexpf(v, r->shift));
    return qs_hd_e2m1_encode(v / r->f);
}

/* Encode tile t of block b (its 16 bytes in v) and store its codes with one store. */
QS_HD static inline void qs_cu_bq_encode(const struct qs_cu_bq *a, int64_t b, int64_t t,
                                         const struct qs_cu_v16 *v, const struct qs_cu_bq_par *r)
{
    int32_t per = 16 / qs_cu_dsize(a->dtype), four = qs_cu_bq_bits(a) == 4;
    int64_t e0 = b * a->block + t * per;
    struct qs_cu_v16 o = qs_cu_v16_zero();

    QS_CU_UNROLL
    for (int k = 0; k < 8; k++) {
        uint32_t c;
        if (k >= per)
            break;
        c = qs_cu_bq_code(a, r, qs_cu_tile_elem(v, a->dtype, k));
        if (four) {
            /* bitsandbytes: element 2j in the high nibble; OCP: the low nibble first */
            int high = a->rule == QS_CU_BQ_BNB4 ? !(k & 1) : (k & 1);
            qs_cu_tile_or_byte(&o, k >> 1, c << (4 * high));
        } else {
            qs_cu_tile_or_byte(&o, k, c);
        }
    }
    qs_cu_st_bytes(a->data + (four ? e0 / 2 : e0), &o, four ? per / 2 : per);
}

/* ---- elementwise quantize (scales already on the device) ------------------------------------- */

struct qs_cu_ewq {
    int32_t fp8, e5m2; /* fp8 1: the FP8 rule with scale[0]; 0: INT8 with mul / zp per unit */
    int32_t dtype, qmin;
    int64_t unit_len;  /* INT8: elements per unit (tile items: a multiple of the tile) */
    int64_t first;     /* element items: index offset (the tail after the tiles) */
    const void *src;
    const float *scale;                 /* FP8: device scalar */
    const float *mul;                   /* INT8: per unit */
    const int32_t *zp;
    uint8_t *data;
};

/* The code of x in unit u (INT8; FP8 has one scale). */
QS_HD static inline uint8_t qs_cu_ewq_code(const struct qs_cu_ewq *a, float x, int64_t u)
{
    if (a->fp8) {
        float y = x / a->scale[0]; /* divided, as the reference does (§10) */
        return a->e5m2 ? qs_hd_e5m2_encode(y) : qs_hd_e4m3_encode(y);
    }
    return (uint8_t)qs_hd_int8_encode(x, a->mul[u], a->zp[u], a->qmin);
}

/* Tile t: 16 input bytes (inside one unit: unit_len is a multiple of the tile), their codes with
 * one store. */
QS_HD static inline void qs_cu_ewq_tile(const struct qs_cu_ewq *a, int64_t t)
{
    int32_t per = 16 / qs_cu_dsize(a->dtype);
    int64_t u = a->fp8 ? 0 : qs_cu_div(t * per, a->unit_len);
    struct qs_cu_v16 v = qs_cu_ld16((const char *)a->src + 16 * t), o = qs_cu_v16_zero();

    QS_CU_UNROLL
    for (int k = 0; k < 8; k++)
        if (k < per)
            qs_cu_tile_or_byte(&o, k, qs_cu_ewq_code(a, qs_cu_tile_elem(&v, a->dtype, k), u));
    qs_cu_st_bytes(a->data + t * per, &o, per);
}

QS_HD static inline void qs_cu_ewq_elem(const struct qs_cu_ewq *a, int64_t i)
{
    int64_t e = a->first + i, u = a->fp8 ? 0 : qs_cu_div(e, a->unit_len);

    a->data[e] = qs_cu_ewq_code(a, qs_cu_ld_elem(a->src, a->dtype, e), u);
}

/* ---- dequantize ------------------------------------------------------------------------------ */

#define QS_CU_DQ_BNB4 0 /* sub 1: FP4; absmax f32, or double-quantized (dq) */
#define QS_CU_DQ_INT8 1 /* sub 1: LLM.int8 row statistics */
#define QS_CU_DQ_FP8 2  /* sub 1: E5M2 */
#define QS_CU_DQ_MX 3   /* sub 0: MXFP4, 1: MXFP8 */
#define QS_CU_DQ_NV 4

struct qs_cu_deq {
    int32_t rule, sub, dtype; /* QS_CU_DQ_*; the output's QS_DTYPE_* */
    int32_t dq;               /* BNB4: absmax as dyn8 codes (bscale), nested, offset */
    int64_t unit;             /* elements per scale (BNB4 block, INT8 unit, MX / NV block) */
    int64_t first;            /* element items: index offset (the tail after the tiles) */
    int64_t cols, row_bytes, spr; /* MX / NV element items: the row layout (a row's last block
                                     may be short, rows may be padded to whole bytes) */
    const uint8_t *data;
    const float *fscale;      /* BNB4 absmax; INT8 scale or row absmax; FP8 scale[0] */
    const uint8_t *bscale;    /* MX / NV scale bytes; BNB4 dq codes */
    const float *nested;
    float offset, s_global;
    const int8_t *zero_point; /* INT8: NULL when symmetric */
    const float *tab;
    void *dst;                /* NULL: scan only, *flag = 1 for a value the tensor-core GEMM
                                 cannot split exactly (qs_cu_tc_bad) */
    int32_t *flag;
};

QS_HD static inline int qs_cu_deq_bits(const struct qs_cu_deq *a)
{
    return a->rule == QS_CU_DQ_BNB4 || a->rule == QS_CU_DQ_NV ||
                   (a->rule == QS_CU_DQ_MX && a->sub == 0)
               ? 4
               : 8;
}

/* The scale of unit u: absmax (decoded from its dyn8 code with double quantization, §6.2), the
 * INT8 scale, the FP8 scale, the E8M0 value, or NVFP4's fl(value(S & 0x7F) * s_global). */
QS_HD static inline float qs_cu_deq_scale(const struct qs_cu_deq *a, int64_t u)
{
    switch (a->rule) {
    case QS_CU_DQ_BNB4:
        return a->dq ? qs_hd_dyn8_decode(a->tab + QS_CU_TAB_DYN8, a->bscale[u], a->nested[u / 256],
                                         a->offset)
                     : a->fscale[u];
    case QS_CU_DQ_INT8: return a->fscale[u];
    case QS_CU_DQ_FP8: return a->fscale[0];
    case QS_CU_DQ_MX: return qs_hd_e8m0_decode(a->bscale[u]);
    default: return qs_hd_e4m3_decode(a->bscale[u] & 0x7F) * a->s_global;
    }
}

/* The value of code c (a 4-bit nibble or a byte) of unit u, with the unit's scale s. */
QS_HD static inline float qs_cu_deq_value(const struct qs_cu_deq *a, uint32_t c, int64_t u, float s)
{
    switch (a->rule) {
    case QS_CU_DQ_BNB4:
        return qs_hd_bnb4_decode(a->tab + (a->sub ? QS_CU_TAB_FP4 : QS_CU_TAB_NF4), (uint8_t)c, s);
    case QS_CU_DQ_INT8:
        return a->sub ? qs_hd_int8_rowstat_decode((int8_t)c, s)
                      : qs_hd_int8_decode((int8_t)c, s, a->zero_point ? a->zero_point[u] : 0);
    case QS_CU_DQ_FP8:
        return qs_hd_nan_canon((a->sub ? qs_hd_e5m2_decode((uint8_t)c)
                                       : qs_hd_e4m3_decode((uint8_t)c)) *
                               s);
    case QS_CU_DQ_MX:
        return qs_hd_nan_canon((a->sub ? qs_hd_e4m3_decode((uint8_t)c)
                                       : a->tab[QS_CU_TAB_E2M1 + c]) *
                               s);
    default: return qs_hd_nan_canon(a->tab[QS_CU_TAB_E2M1 + c] * s);
    }
}

/* Code k of a tile of 16 code bytes (4-bit: bitsandbytes high nibble first, OCP low first). */
QS_HD static inline uint32_t qs_cu_deq_code(const struct qs_cu_deq *a, const struct qs_cu_v16 *v,
                                            int k)
{
    uint32_t byte;

    if (qs_cu_deq_bits(a) == 8)
        return qs_cu_tile_byte(v, k);
    byte = qs_cu_tile_byte(v, k >> 1);
    if (a->rule == QS_CU_DQ_BNB4)
        return (k & 1) ? byte & 0xFu : byte >> 4;
    return (k & 1) ? byte >> 4 : byte & 0xFu;
}

/* Tile t: 16 code bytes in, their 32 or 16 values out in 16-byte stores. The scale is fetched
 * once per unit the tile crosses. */
QS_HD static inline void qs_cu_deq_tile(const struct qs_cu_deq *a, int64_t t)
{
    int32_t per = qs_cu_deq_bits(a) == 4 ? 32 : 16, oper = 16 / qs_cu_dsize(a->dtype);
    int64_t e0 = t * per, u = qs_cu_div(e0, a->unit), next = (u + 1) * a->unit;
    struct qs_cu_v16 v = qs_cu_ld16(a->data + 16 * t), o = qs_cu_v16_zero();
    float s = qs_cu_deq_scale(a, u);
    /* a scan has no dst: no offset is taken from NULL */
    char *dst = a->dst ? (char *)a->dst + e0 * qs_cu_dsize(a->dtype) : NULL;

    int bad = 0;

    QS_CU_UNROLL
    for (int k = 0; k < 32; k++) {
        float x;
        if (k >= per)
            break;
        if (e0 + k == next) {
            u++;
            next += a->unit;
            s = qs_cu_deq_scale(a, u);
        }
        x = qs_cu_deq_value(a, qs_cu_deq_code(a, &v, k), u, s);
        if (!a->dst) {
            bad |= qs_cu_tc_bad(x);
            continue;
        }
        qs_cu_tile_put(&o, a->dtype, k % oper, x);
        if (k % oper == oper - 1) {
            qs_cu_st16(dst + 16 * (k / oper), &o);
            o = qs_cu_v16_zero();
        }
    }
    if (bad)
        a->flag[0] = 1;
}

/* The value of element e (qs_dequantize's, before the output's rounding). Codes and scales
 * run over the flattened tensor, except MX / NVFP4 rows: element c of row r is code c of the
 * row's bytes, its scale r * spr + c / unit. */
QS_HD static inline float qs_cu_deq_f32(const struct qs_cu_deq *a, int64_t e)
{
    int64_t u = qs_cu_div(e, a->unit), byte_at = qs_cu_deq_bits(a) == 4 ? e / 2 : e;
    int64_t pos = e; /* position of the code inside its row of bytes, for the nibble */
    uint32_t c;

    if (a->rule == QS_CU_DQ_MX || a->rule == QS_CU_DQ_NV) {
        int64_t r = qs_cu_div(e, a->cols);
        pos = e - r * a->cols;
        u = r * a->spr + qs_cu_div(pos, a->unit);
        byte_at = r * a->row_bytes + (qs_cu_deq_bits(a) == 4 ? pos / 2 : pos);
    }
    if (qs_cu_deq_bits(a) == 8) {
        c = a->data[byte_at];
    } else {
        uint32_t byte = a->data[byte_at];
        int high = a->rule == QS_CU_DQ_BNB4 ? !(pos & 1) : (int)(pos & 1);
        c = high ? byte >> 4 : byte & 0xFu;
    }
    return qs_cu_deq_value(a, c, u, qs_cu_deq_scale(a, u));
}

QS_HD static inline void qs_cu_deq_elem(const struct qs_cu_deq *a, int64_t i)
{
    float x = qs_cu_deq_f32(a, a->first + i);

    if (a->dst)
        qs_cu_st_elem(a->dst, a->dtype, a->first + i, x);
    else if (qs_cu_tc_bad(x))
        a->flag[0] = 1;
}

#endif /* QS_CUDA_VEC_H */
