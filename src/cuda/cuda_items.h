/* SPDX-License-Identifier: MIT */
/*
 * What every CUDA kernel of the plugin shares, as C that compiles for the host and, under nvcc,
 * for the device (QS_HD): typed element access, the 16-byte tile (one 128-bit load or store on
 * the device), the reductions' combine rules, and the scalar work items (one block, one
 * reduction chunk's thread, one 2:4 word) that run the tails, the fallbacks for pointers that
 * are not 16-byte aligned, and the steps that are not bulk work. The bulk kernels' items are in
 * cuda_vec.h (quantize, dequantize) and cuda_mv.h (matmul). A CUDA kernel of this folder is a
 * loop over items (plus, for a group of lanes, shuffles around their combine rules);
 * tests/test_cuda_items.c runs the same items over an emulated grid on the host, in a scrambled
 * order, and compares every byte with src/ref. The element and block rules inside the items are
 * src/ref's own (element_hd.h).
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

/* The tables of the element rules, one array of QS_CU_TAB_FLOATS floats: in constant memory on
 * the device (copied into shared memory by the kernels that look codes up), the C tables of
 * src/ref on the host. Items take the array's base and add these offsets. */
#define QS_CU_TAB_NF4 0
#define QS_CU_TAB_FP4 16
#define QS_CU_TAB_DYN8 32
#define QS_CU_TAB_E2M1 288
#define QS_CU_TAB_FLOATS 304

/* ---- index arithmetic, typed elements and 16-byte tiles -------------------------------------- */

/* Unroll a loop of constant trip count on the device, so that the arrays it indexes stay in
 * registers (an array indexed by a variable goes to local memory). */
#if defined(__CUDACC__)
#define QS_CU_UNROLL _Pragma("unroll")
#else
#define QS_CU_UNROLL
#endif

/* a / b for a >= 0, b > 0: 32-bit division on the device where both fit (a 64-bit one is a
 * long subroutine there); the same quotient either way. */
QS_HD static inline int64_t qs_cu_div(int64_t a, int64_t b)
{
#if defined(__CUDA_ARCH__)
    if (((uint64_t)a | (uint64_t)b) >> 31 == 0)
        return (int64_t)((uint32_t)a / (uint32_t)b);
#endif
    return a / b;
}

QS_HD static inline int32_t qs_cu_dsize(int32_t dtype)
{
    return dtype == QS_DTYPE_F32 ? 4 : 2;
}

/* Element i of an f32, f16 or bf16 array, widened exactly as the CPU's conversions do. */
QS_HD static inline float qs_cu_ld_elem(const void *p, int32_t dtype, int64_t i)
{
    if (dtype == QS_DTYPE_F32)
        return ((const float *)p)[i];
    if (dtype == QS_DTYPE_BF16)
        return qs_hd_bf16_to_f32(((const uint16_t *)p)[i]);
    return qs_hd_f16_to_f32(((const uint16_t *)p)[i]);
}

/* Store v as element i of an f32, f16 or bf16 array (the CPU's rounding to f16 / bf16). */
QS_HD static inline void qs_cu_st_elem(void *p, int32_t dtype, int64_t i, float v)
{
    if (dtype == QS_DTYPE_F32)
        ((float *)p)[i] = v;
    else if (dtype == QS_DTYPE_BF16)
        ((uint16_t *)p)[i] = qs_hd_f32_to_bf16(v);
    else
        ((uint16_t *)p)[i] = qs_hd_f32_to_f16(v);
}

/* 16 bytes as four little-endian words: one 128-bit global load or store on the device (the
 * caller guarantees 16-byte alignment), a memcpy on the host. */
struct qs_cu_v16 {
    uint32_t w[4];
};

QS_HD static inline struct qs_cu_v16 qs_cu_v16_zero(void)
{
    struct qs_cu_v16 v = {{0u, 0u, 0u, 0u}};
    return v;
}

QS_HD static inline struct qs_cu_v16 qs_cu_ld16(const void *p)
{
    struct qs_cu_v16 v;
#if defined(__CUDA_ARCH__)
    uint4 u = __ldg((const uint4 *)p);
    v.w[0] = u.x;
    v.w[1] = u.y;
    v.w[2] = u.z;
    v.w[3] = u.w;
#else
    memcpy(&v, p, sizeof v);
#endif
    return v;
}

QS_HD static inline void qs_cu_st16(void *p, const struct qs_cu_v16 *v)
{
#if defined(__CUDA_ARCH__)
    *(uint4 *)p = make_uint4(v->w[0], v->w[1], v->w[2], v->w[3]);
#else
    memcpy(p, v, sizeof *v);
#endif
}

/* Store the first `bytes` (2, 4, 8 or 16) bytes of v at p, aligned to `bytes`: one store. */
QS_HD static inline void qs_cu_st_bytes(void *p, const struct qs_cu_v16 *v, int bytes)
{
#if defined(__CUDA_ARCH__)
    if (bytes == 2)
        *(uint16_t *)p = (uint16_t)v->w[0];
    else if (bytes == 4)
        *(uint32_t *)p = v->w[0];
    else if (bytes == 8)
        *(uint2 *)p = make_uint2(v->w[0], v->w[1]);
    else
        *(uint4 *)p = make_uint4(v->w[0], v->w[1], v->w[2], v->w[3]);
#else
    memcpy(p, v, (size_t)bytes);
#endif
}

/* Element k of a tile of f32 (k < 4) or f16 / bf16 (k < 8) values, widened. */
QS_HD static inline float qs_cu_tile_elem(const struct qs_cu_v16 *v, int32_t dtype, int k)
{
    uint16_t h;

    if (dtype == QS_DTYPE_F32)
        return qs_hd_float(v->w[k]);
    h = (uint16_t)(v->w[k >> 1] >> (16 * (k & 1)));
    return dtype == QS_DTYPE_BF16 ? qs_hd_bf16_to_f32(h) : qs_hd_f16_to_f32(h);
}

/* Put value x as element k of a zeroed output tile of f32, f16 or bf16. */
QS_HD static inline void qs_cu_tile_put(struct qs_cu_v16 *v, int32_t dtype, int k, float x)
{
    if (dtype == QS_DTYPE_F32)
        v->w[k] = qs_hd_bits(x);
    else
        v->w[k >> 1] |= (uint32_t)(dtype == QS_DTYPE_BF16 ? qs_hd_f32_to_bf16(x)
                                                          : qs_hd_f32_to_f16(x))
                        << (16 * (k & 1));
}

/* Byte k of a tile, and byte k or'ed into a tile. */
QS_HD static inline uint32_t qs_cu_tile_byte(const struct qs_cu_v16 *v, int k)
{
    return (v->w[k >> 2] >> (8 * (k & 3))) & 0xFFu;
}

QS_HD static inline void qs_cu_tile_or_byte(struct qs_cu_v16 *v, int k, uint32_t byte)
{
    v->w[k >> 2] |= byte << (8 * (k & 3));
}

/* ---- dtype staging (only the fallback of a misaligned f16 / bf16 input stages) --------------- */

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

/* ---- reductions ------------------------------------------------------------------------------ */

/* What a reduction computes over a unit: the absolute maximum (NaN ignored), min and max (NaN
 * ignored, -0 < +0), whether a NaN or Inf occurs (1.0 / 0.0 in `a`), or the MX pair (absolute
 * maximum in `a`, a non-finite flag in `b`). All are associative and commutative, so every grid
 * shape gives the bits of the sequential loop. */
#define QS_CU_RED_AMAX 0
#define QS_CU_RED_MINMAX 1
#define QS_CU_RED_NONFINITE 2
#define QS_CU_RED_MX 3
#define QS_CU_RED_TC 4 /* 1.0 in `a` for a value the GEMM cannot split (qs_cu_tc_bad) */

struct qs_cu_pair {
    float a, b; /* amax or flag in a; min in a and max in b; MX: amax in a, flag in b */
};

QS_HD static inline struct qs_cu_pair qs_cu_red_init(int32_t kind)
{
    struct qs_cu_pair p;

    p.a = kind == QS_CU_RED_MINMAX ? qs_hd_float(0x7F800000u) : 0.0f;
    p.b = kind == QS_CU_RED_MINMAX ? qs_hd_float(0xFF800000u) : 0.0f;
    return p;
}

QS_HD static inline int qs_cu_nonfinite(float x)
{
    return (qs_hd_bits(x) & 0x7F800000u) == 0x7F800000u;
}

/* Whether a value cannot go through the GEMM's three bf16 limbs exactly (cuda_mm.h): NaN, Inf
 * (0 * Inf in a limb product would make NaN of an Inf result), or a value with bits below
 * 2^-133, bf16's smallest subnormal (those of exponent field E < 17: its low 17 - E
 * significand bits, the low 16 of a subnormal). */
QS_HD static inline int qs_cu_tc_bad(float v)
{
    uint32_t u = qs_hd_bits(v), e = (u >> 23) & 0xFFu;

    if (e == 0xFFu)
        return 1;
    if (e >= 17u)
        return 0;
    return (u & ((1u << (e == 0 ? 16u : 17u - e)) - 1u)) != 0;
}

QS_HD static inline struct qs_cu_pair qs_cu_red_feed(int32_t kind, struct qs_cu_pair p, float x)
{
    if (kind == QS_CU_RED_AMAX) {
        p.a = qs_hd_absmax_step(p.a, x);
    } else if (kind == QS_CU_RED_MINMAX) {
        p.a = qs_hd_min(p.a, x);
        p.b = qs_hd_max(p.b, x);
    } else if (kind == QS_CU_RED_MX) {
        p.a = qs_hd_absmax_step(p.a, x);
        if (qs_cu_nonfinite(x))
            p.b = 1.0f;
    } else if (kind == QS_CU_RED_TC) {
        if (qs_cu_tc_bad(x))
            p.a = 1.0f;
    } else if (qs_cu_nonfinite(x)) {
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
        p.b = q.b > p.b ? q.b : p.b;
    }
    return p;
}

/* One unit of unit_len elements per scale (a row, a group, or the whole tensor), cut into
 * chunks of QS_CU_CHUNK; partial[u * chunks + c] is the result of chunk c of unit u. With `vec`
 * (src 16-byte aligned, unit_len a multiple of the 16-byte tile) each thread reads whole tiles. */
struct qs_cu_red {
    const void *src;
    int32_t dtype, vec;
    int64_t unit_len, chunks; /* chunks per unit */
    int32_t kind;
    struct qs_cu_pair *partial;
};

/* Thread `t` of the CUDA block that reduces chunk `i` (= u * chunks + c): its strided share,
 * tile t, t + 256, ... of the chunk (elements t, t + 256, ... without vec). */
QS_HD static inline struct qs_cu_pair qs_cu_red_thread(const struct qs_cu_red *a, int64_t i,
                                                       int32_t t)
{
    int64_t u = i / a->chunks, c = i % a->chunks;
    int64_t c0 = c * QS_CU_CHUNK;
    int64_t len = a->unit_len - c0 < QS_CU_CHUNK ? a->unit_len - c0 : QS_CU_CHUNK;
    int64_t base = u * a->unit_len + c0;
    struct qs_cu_pair p = qs_cu_red_init(a->kind);

    if (a->vec) {
        int32_t per = 16 / qs_cu_dsize(a->dtype);
        const char *s = (const char *)a->src + base * qs_cu_dsize(a->dtype);
        for (int64_t j = t; j < len / per; j += QS_CU_RED_THREADS) {
            struct qs_cu_v16 v = qs_cu_ld16(s + 16 * j);
            QS_CU_UNROLL
            for (int k = 0; k < 8; k++) /* 4 f32 or 8 f16 / bf16: constant trips */
                if (k < per)
                    p = qs_cu_red_feed(a->kind, p, qs_cu_tile_elem(&v, a->dtype, k));
        }
        return p;
    }
    for (int64_t k = t; k < len; k += QS_CU_RED_THREADS)
        p = qs_cu_red_feed(a->kind, p, qs_cu_ld_elem(a->src, a->dtype, base + k));
    return p;
}

/* A scan's verdict: out[0] = 1 if any partial found what it looks for (with `combine`, out[0]
 * keeps a 1 it holds already). One item. */
struct qs_cu_flag {
    const struct qs_cu_pair *partial;
    int64_t count;
    int32_t combine;
    int32_t *out;
};

QS_HD static inline void qs_cu_flag_item(const struct qs_cu_flag *a, int64_t i)
{
    int32_t bad = a->combine ? a->out[0] : 0;

    (void)i;
    for (int64_t c = 0; c < a->count; c++)
        bad |= a->partial[c].a != 0.0f;
    a->out[0] = bad;
}

/* ---- NF4 / FP4 blocks, one per item (formats.md §5, §6) -------------------------------------- */

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

/* ---- double quantization (§6.1) on the device ------------------------------------------------ */

/* The mean of the absmax vector is the reference's sequential double sum. A parallel sum has its
 * bits whenever every partial sum is exact in double: the values are non-negative multiples of
 * the quantum q of the smallest non-zero one (2^(floor(log2 v) - 23), 2^-149 for subnormals),
 * so every partial sum is a multiple of q no larger than nb * max, exact while that is below
 * 2^53 q; the check asks for 2^52 q (a factor 2 for the rounding of nb * max itself). Otherwise
 * one thread sums in index order (slow, still no host round trip). Inf makes the mean Inf both
 * ways; absmax is never NaN. */
struct qs_cu_dqstat {
    double sum;
    float max, minnz; /* the largest value and the smallest non-zero one (+Inf: none) */
    int32_t inf;
};

QS_HD static inline struct qs_cu_dqstat qs_cu_dqstat_init(void)
{
    struct qs_cu_dqstat s;

    s.sum = 0.0;
    s.max = 0.0f;
    s.minnz = qs_hd_float(0x7F800000u);
    s.inf = 0;
    return s;
}

QS_HD static inline struct qs_cu_dqstat qs_cu_dqstat_feed(struct qs_cu_dqstat s, float v)
{
    if (qs_cu_nonfinite(v)) {
        s.inf = 1;
        return s;
    }
    s.sum += (double)v;
    s.max = v > s.max ? v : s.max;
    if (v > 0.0f && v < s.minnz)
        s.minnz = v;
    return s;
}

QS_HD static inline struct qs_cu_dqstat qs_cu_dqstat_join(struct qs_cu_dqstat s,
                                                          struct qs_cu_dqstat t)
{
    s.sum += t.sum;
    s.max = t.max > s.max ? t.max : s.max;
    s.minnz = t.minnz < s.minnz ? t.minnz : s.minnz;
    s.inf |= t.inf;
    return s;
}

/* Thread t of the block of chunk i of the nb absmax values (one unit, QS_CU_CHUNK per chunk). */
struct qs_cu_dq_stats {
    const float *absmax;
    int64_t nb;
    struct qs_cu_dqstat *partial;
};

QS_HD static inline struct qs_cu_dqstat qs_cu_dq_stats_thread(const struct qs_cu_dq_stats *a,
                                                              int64_t i, int32_t t)
{
    int64_t c0 = i * QS_CU_CHUNK, len = a->nb - c0 < QS_CU_CHUNK ? a->nb - c0 : QS_CU_CHUNK;
    struct qs_cu_dqstat s = qs_cu_dqstat_init();

    for (int64_t k = t; k < len; k += QS_CU_RED_THREADS)
        s = qs_cu_dqstat_feed(s, a->absmax[c0 + k]);
    return s;
}

/* The offset into out[0] from the chunks' partials (or the sequential sum). One item. */
struct qs_cu_dq_offset {
    const struct qs_cu_dqstat *partial;
    int64_t chunks, nb;
    const float *absmax;
    float *out;
};

QS_HD static inline int qs_cu_dq_exact(const struct qs_cu_dqstat *s, int64_t nb)
{
    int e;

    if (s->max == 0.0f)
        return 1; /* every value 0: the sum is 0 */
    e = qs_hd_floor_log2(s->minnz);
    if (e < -126)
        e = -126; /* subnormals: quantum 2^-149 */
    return (double)nb * (double)s->max <= ldexp(1.0, 52 + e - 23);
}

QS_HD static inline void qs_cu_dq_offset_item(const struct qs_cu_dq_offset *a, int64_t i)
{
    struct qs_cu_dqstat s = qs_cu_dqstat_init();

    (void)i;
    for (int64_t c = 0; c < a->chunks; c++)
        s = qs_cu_dqstat_join(s, a->partial[c]);
    if (a->nb == 0)
        a->out[0] = 0.0f;
    else if (s.inf)
        a->out[0] = qs_hd_float(0x7F800000u); /* (float)(Inf / nb) */
    else if (qs_cu_dq_exact(&s, a->nb))
        a->out[0] = (float)(s.sum / (double)a->nb);
    else
        a->out[0] = qs_hd_dq_offset(a->absmax, a->nb);
}

/* Centre the absmax vector, then dyn8 blocks of 256 (the scalar block rule). */
struct qs_cu_dq_quant {
    float *absmax; /* nb values, centred in place */
    int64_t nb;
    const float *offset; /* device scalar */
    const float *tab;
    uint8_t *codes;
    float *nested;
};

QS_HD static inline void qs_cu_dq_center_item(const struct qs_cu_dq_quant *a, int64_t i)
{
    a->absmax[i] = qs_hd_nan_canon(a->absmax[i] - a->offset[0]); /* Inf - Inf: canonical NaN */
}

QS_HD static inline void qs_cu_dq_block_item(const struct qs_cu_dq_quant *a, int64_t b)
{
    int64_t start = b * 256, len = a->nb - start < 256 ? a->nb - start : 256;

    a->nested[b] = qs_hd_dyn8_block(a->absmax + start, len, a->codes + start,
                                    a->tab + QS_CU_TAB_DYN8);
}

/* ---- INT8 and LLM.int8 scale rules (§8, §9) ------------------------------------------------- */

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

/* ---- the per-tensor scale: FP8 (§10) and NVFP4's s_global (§14) ----------------------------- */

/* From the partials of a one-unit amax reduction: FP8 (nvfp4 0) or NVFP4's s_global (nvfp4 1);
 * a given scale > 0 wins. Written to out[0] (device memory). One item. */
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

/* ---- MXFP4, MXFP8, NVFP4 blocks along rows, one per item (§13, §14) ------------------------- */

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
    const float *s_global; /* NVFP4: the tensor scale, device scalar */
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
        float sg = a->s_global[0];
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

/* ---- 2:4 prune, compress, decompress (docs/sparsity.md §2.2, §3) ----------------------------- */

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
