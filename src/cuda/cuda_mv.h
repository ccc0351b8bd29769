/* SPDX-License-Identifier: MIT */
/*
 * The GEMV items of the CUDA backend's matmul: y[m, n] = x[m, :] . W[n, :] (+ bias[n]) for every
 * weight the CPU takes (plain f32 / f16 / bf16, every quantized format, 2:4 of either), with
 * f32, f16 or bf16 activations. One warp computes a row of W against a row of x (on the device a
 * warp takes two rows of W and shares the loaded x between them):
 *
 * - the stored row is cut into 16-byte tiles (32 4-bit codes, 16 8-bit ones, 8 f16 / bf16 or 4
 *   f32 values); lane l takes tiles l, l + 32, ... in ascending order, each with one 128-bit
 *   load of codes (where the row is 16-byte aligned; otherwise the same bytes one by one) and
 *   the matching x values (128-bit loads where aligned; gathered at the kept columns for 2:4);
 * - inside a tile, the elements of one scale unit (an NF4 / FP4 block of the flattened matrix, an
 *   INT8 group, an MX or NVFP4 block, the row or the tensor) are summed in ascending order with
 *   fused multiply-adds, s = fma(x_k, v_k, s) from +0, with the unscaled element values v_k (the
 *   codebook or E2M1 value, q - zero point, the FP8 value, the plain value); the lane's
 *   accumulator then takes acc = fma(s, scale, acc) (plain weights: acc + s);
 * - the 32 accumulators are added by the butterfly v_i = v_i + v_(i xor h), h = 16, 8, 4, 2, 1
 *   (the device's shuffles); lane 0's sum, plus the bias, is y, NaN made canonical.
 *
 * The order depends only on the shape, never on the grid, so results are deterministic, and they
 * stay within include/qsparse/matmul.h's bound: a chain of at most 32 products per segment, K /
 * (32 * tile) tiles per lane, five butterfly steps. tests/test_cuda_items.c runs these items with
 * the butterfly on the host and checks the bound against a double-precision product, and that
 * the misaligned (byte-load) path gives the aligned path's bits.
 */
#ifndef QS_CUDA_MV_H
#define QS_CUDA_MV_H

#include "cuda_items.h"

/* Element rules of the weight (what one stored value is). */
#define QS_CU_MV_F32 0
#define QS_CU_MV_F16 1
#define QS_CU_MV_BF16 2
#define QS_CU_MV_NF4 3
#define QS_CU_MV_FP4 4
#define QS_CU_MV_INT8 5
#define QS_CU_MV_E4M3 6
#define QS_CU_MV_E5M2 7
#define QS_CU_MV_MXFP4 8
#define QS_CU_MV_MXFP8 9
#define QS_CU_MV_NVFP4 10
#define QS_CU_MV_KINDS 11

struct qs_cu_mv {
    int32_t kind, x_dtype; /* QS_CU_MV_*; QS_DTYPE_* of x */
    int32_t flat;          /* NF4 / FP4: codes and blocks run over the flattened N x cols matrix */
    int32_t dq;            /* NF4 / FP4: absmax double-quantized */
    int32_t vec;           /* every full tile of W may be loaded with one 16-byte load */
    int32_t xvec;          /* every full tile's x values may be loaded in 16-byte loads */
    int64_t M, N, K;       /* x M x K, W N x K, y M x N */
    int64_t cols;          /* stored values per row: K, or K / 2 for 2:4 */
    int64_t row_bytes;     /* bytes per stored row (not flat) */
    int64_t unit;          /* elements per scale unit along the row (flat: the block) */
    int64_t sstride;       /* scale units per row; 0: one for the tensor */
    const void *w;
    const float *fscale;   /* absmax, INT8 scale or row absmax, FP8 scale */
    const uint8_t *bscale; /* E8M0 / E4M3 scale bytes; dyn8 codes of double-quantized absmax */
    const float *nested;
    float offset;
    float scale_mul;       /* INT8 scale multiplier: fl(1/127) for LLM.int8, else 1 */
    float s_global;        /* NVFP4 */
    const int8_t *zp;      /* INT8 zero points, or NULL */
    const uint16_t *meta;  /* 2:4: words per row of meta; NULL for dense weights */
    int64_t words;
    const void *x;
    const float *bias;
    float *y;
    const float *tab;
    const int32_t *only_if; /* non-NULL: run only where *only_if is 1 (the GEMM's fallback) */
};

QS_HD static inline int qs_cu_mv_bits(int32_t kind)
{
    switch (kind) {
    case QS_CU_MV_F32: return 32;
    case QS_CU_MV_F16:
    case QS_CU_MV_BF16: return 16;
    case QS_CU_MV_NF4:
    case QS_CU_MV_FP4:
    case QS_CU_MV_MXFP4:
    case QS_CU_MV_NVFP4: return 4;
    default: return 8;
    }
}

/* Stored values per 16-byte tile. */
QS_HD static inline int32_t qs_cu_mv_per(int32_t kind)
{
    return 128 / qs_cu_mv_bits(kind);
}

QS_HD static inline int64_t qs_cu_mv_tiles(const struct qs_cu_mv *a)
{
    int64_t per = qs_cu_mv_per(a->kind);
    return (a->cols + per - 1) / per;
}

/* The 16 bytes of tile t of row r, codes in the format's own order (bitsandbytes: the high
 * nibble first; OCP: the low one first); beyond the row's end, zeros. */
QS_HD static inline struct qs_cu_v16 qs_cu_mv_codes(const struct qs_cu_mv *a, int64_t r, int64_t t)
{
    int32_t per = qs_cu_mv_per(a->kind), bits = qs_cu_mv_bits(a->kind);
    int64_t c0 = t * per, n = a->cols - c0 < per ? a->cols - c0 : per;
    struct qs_cu_v16 v = qs_cu_v16_zero();

    if (a->flat) {
        int64_t f0 = r * a->cols + c0;
        const uint8_t *w = (const uint8_t *)a->w;
        if (a->vec && n == per)
            return qs_cu_ld16(w + f0 / 2); /* f0 is a multiple of 32 */
        QS_CU_UNROLL
        for (int k = 0; k < 32; k++) { /* constant trips: v stays in registers */
            int64_t f = f0 + k;
            if (k < n)
                qs_cu_tile_or_byte(&v, k >> 1,
                                   ((f & 1) ? w[f / 2] & 0xFu : (uint32_t)w[f / 2] >> 4)
                                       << ((k & 1) ? 0 : 4));
        }
        return v;
    } else {
        const uint8_t *base = (const uint8_t *)a->w + r * a->row_bytes + c0 * bits / 8;
        if (a->vec && n == per)
            return qs_cu_ld16(base);
        QS_CU_UNROLL
        for (int j = 0; j < 16; j++)
            if (j < (n * bits + 7) / 8)
                qs_cu_tile_or_byte(&v, j, base[j]);
        return v;
    }
}

/* Column of stored value j of row r: j itself, or for 2:4 the kept column its meta names. */
QS_HD static inline int64_t qs_cu_mv_col(const struct qs_cu_mv *a, int64_t r, int64_t j)
{
    int64_t g = j / 2;
    unsigned nib;

    if (!a->meta)
        return j;
    nib = (a->meta[r * a->words + g / 4] >> (4 * (g % 4))) & 15u;
    return 4 * g + ((j & 1) ? nib >> 2 : nib & 3u);
}

/* xv[0 .. per) from 16-byte loads of x at xr + c0 (xper values per load: a constant where
 * this is inlined, so that xv stays in registers). */
QS_HD static inline void qs_cu_mv_x16(const char *xr, int64_t c0, int32_t per, int32_t dtype,
                                      int32_t xper, float *xv)
{
    struct qs_cu_v16 v = qs_cu_v16_zero();

    QS_CU_UNROLL
    for (int k = 0; k < 32; k++) {
        if (k >= per)
            break;
        if (k % xper == 0)
            v = qs_cu_ld16(xr + (c0 + k) * qs_cu_dsize(dtype));
        xv[k] = qs_cu_tile_elem(&v, dtype, k % xper);
    }
}

/* The x values of tile t of row r against row m of x (xv[k] for stored value c0 + k). */
QS_HD static inline void qs_cu_mv_x(const struct qs_cu_mv *a, int64_t m, int64_t r, int64_t t,
                                    float *xv)
{
    int32_t per = qs_cu_mv_per(a->kind), xper = 16 / qs_cu_dsize(a->x_dtype);
    int64_t c0 = t * per, n = a->cols - c0 < per ? a->cols - c0 : per;
    const char *xr = (const char *)a->x + m * a->K * qs_cu_dsize(a->x_dtype);

    if (a->xvec && n == per && !a->meta && per >= xper) {
        if (a->x_dtype == QS_DTYPE_F32)
            qs_cu_mv_x16(xr, c0, per, QS_DTYPE_F32, 4, xv);
        else if (a->x_dtype == QS_DTYPE_F16)
            qs_cu_mv_x16(xr, c0, per, QS_DTYPE_F16, 8, xv);
        else
            qs_cu_mv_x16(xr, c0, per, QS_DTYPE_BF16, 8, xv);
        return;
    }
    QS_CU_UNROLL
    for (int k = 0; k < 32; k++)
        if (k < n)
            xv[k] = qs_cu_ld_elem(xr, a->x_dtype, qs_cu_mv_col(a, r, c0 + k));
}

/* Scale unit u's scale. */
QS_HD static inline float qs_cu_mv_scale(const struct qs_cu_mv *a, int64_t u)
{
    switch (a->kind) {
    case QS_CU_MV_NF4:
    case QS_CU_MV_FP4:
        return a->dq ? qs_hd_dyn8_decode(a->tab + QS_CU_TAB_DYN8, a->bscale[u], a->nested[u / 256],
                                         a->offset)
                     : a->fscale[u];
    case QS_CU_MV_INT8: return a->fscale[u] * a->scale_mul;
    case QS_CU_MV_E4M3:
    case QS_CU_MV_E5M2: return a->fscale[0];
    case QS_CU_MV_MXFP4:
    case QS_CU_MV_MXFP8: return qs_hd_e8m0_decode(a->bscale[u]);
    case QS_CU_MV_NVFP4: return qs_hd_e4m3_decode(a->bscale[u] & 0x7F) * a->s_global;
    default: return 1.0f;
    }
}

/* The unscaled value of stored value k of a tile (unit u: the INT8 zero point's). */
QS_HD static inline float qs_cu_mv_value(const struct qs_cu_mv *a, const struct qs_cu_v16 *v,
                                         int k, int64_t u)
{
    uint32_t b, c;

    switch (a->kind) {
    case QS_CU_MV_F32: return qs_hd_float(v->w[k]);
    case QS_CU_MV_F16: return qs_cu_tile_elem(v, QS_DTYPE_F16, k);
    case QS_CU_MV_BF16: return qs_cu_tile_elem(v, QS_DTYPE_BF16, k);
    default: break;
    }
    if (qs_cu_mv_bits(a->kind) == 8) {
        c = qs_cu_tile_byte(v, k);
        switch (a->kind) {
        case QS_CU_MV_INT8: return (float)((int32_t)(int8_t)c - (a->zp ? a->zp[u] : 0));
        case QS_CU_MV_E5M2: return qs_hd_e5m2_decode((uint8_t)c);
        default: return qs_hd_e4m3_decode((uint8_t)c); /* E4M3, MXFP8 */
        }
    }
    b = qs_cu_tile_byte(v, k >> 1);
    if (a->kind == QS_CU_MV_NF4 || a->kind == QS_CU_MV_FP4) {
        c = (k & 1) ? b & 0xFu : b >> 4;
        return a->tab[(a->kind == QS_CU_MV_FP4 ? QS_CU_TAB_FP4 : QS_CU_TAB_NF4) + c];
    }
    c = (k & 1) ? b >> 4 : b & 0xFu;
    return a->tab[QS_CU_TAB_E2M1 + c];
}

QS_HD static inline float qs_cu_mv_flush(const struct qs_cu_mv *a, float acc, float s, int64_t u)
{
    if (a->kind <= QS_CU_MV_BF16)
        return acc + s;
    return fmaf(s, qs_cu_mv_scale(a, u), acc);
}

/* acc plus tile t of row r: one fma chain per scale unit inside the tile, then its scale. */
QS_HD static inline float qs_cu_mv_tile(const struct qs_cu_mv *a, int64_t r, int64_t t,
                                        const struct qs_cu_v16 *codes, const float *xv, float acc)
{
    int32_t per = qs_cu_mv_per(a->kind);
    int64_t c0 = t * per, n = a->cols - c0 < per ? a->cols - c0 : per, u, next;
    float s = 0.0f;

    if (a->flat) {
        u = qs_cu_div(r * a->cols + c0, a->unit);
        next = (u + 1) * a->unit - r * a->cols;
    } else {
        int64_t s = qs_cu_div(c0, a->unit);
        u = r * a->sstride + s;
        next = (s + 1) * a->unit;
    }
    QS_CU_UNROLL
    for (int k = 0; k < 32; k++) { /* constant trips: xv stays in registers */
        if (k >= n)
            break;
        if (c0 + k == next) {
            acc = qs_cu_mv_flush(a, acc, s, u);
            s = 0.0f;
            u++;
            next += a->unit;
        }
        s = fmaf(xv[k], qs_cu_mv_value(a, codes, k, u), s);
    }
    return qs_cu_mv_flush(a, acc, s, u);
}

/* Lane `lane`'s accumulator for row r of W against row m of x. */
QS_HD static inline float qs_cu_mv_lane(const struct qs_cu_mv *a, int64_t m, int64_t r, int lane)
{
    float acc = 0.0f, xv[32];

    for (int64_t t = lane; t < qs_cu_mv_tiles(a); t += 32) {
        struct qs_cu_v16 codes = qs_cu_mv_codes(a, r, t);
        qs_cu_mv_x(a, m, r, t, xv);
        acc = qs_cu_mv_tile(a, r, t, &codes, xv, acc);
    }
    return acc;
}

/* y[m, r] from the butterfly's sum. */
QS_HD static inline void qs_cu_mv_store(const struct qs_cu_mv *a, int64_t m, int64_t r, float sum)
{
    if (a->bias)
        sum = sum + a->bias[r];
    a->y[m * a->N + r] = qs_hd_nan_canon(sum);
}

#endif /* QS_CUDA_MV_H */
