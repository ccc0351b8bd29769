/* SPDX-License-Identifier: MIT */
/*
 * The GEMM of the CUDA backend's matmul (M >= QS_MATMUL_GEMM_MIN_M) on tensor cores:
 * mma.sync m16n8k16 with bf16 inputs and f32 accumulators (sm_80 and newer), exact inputs so
 * that the result stays within include/qsparse/matmul.h's bound:
 *
 * - Every operand value v (x as given, W as qs_dequantize / qs_sp24_dequantize give it) is cut
 *   into bf16 limbs by truncation, v = l0 + l1 + l2 exactly (8 significand bits each; a bf16 x
 *   is one limb, an f16 x two, MX weights one, plain bf16 / f16 weights one / two); a limb
 *   product is exact, and the products of x limb i and W limb j with i + j <= 2 are summed, the
 *   smallest first: what is left out is below 2^-23 of |x w|. Values the limbs cannot carry
 *   exactly (NaN, Inf, tiny values with bits below 2^-133) are found by a scan on the device
 *   first; then the GEMM does nothing and the GEMV kernel (cuda_mv.h) computes every output,
 *   with the CPU's NaN and Inf semantics. No host wait either way.
 * - A CTA of four warps computes a 64 x 64 tile of y, K in steps of 32: each thread loads 16
 *   values of x (in 16-byte loads where x's rows are aligned; the next step's while the tensor
 *   cores work on this one: register double buffering) and decodes 16 of W element by element,
 *   splits them into limbs in shared memory; each warp owns 32 x 32 of the
 *   tile (2 x 4 mma tiles) and reads its fragments in the PTX ISA's m16n8k16 layout
 *   (qs_cu_mma_a_pos, _b_pos, _c_pos).
 * - y = fl(acc + bias), NaN canonical.
 *
 * The functions below are the kernel's steps; tests/test_cuda_mv.c runs them on the host with
 * every lane's fragments and an emulated mma (exact products, one rounding per step), so the
 * layouts, the tiling and the limb arithmetic are checked against the bound without a GPU.
 */
#ifndef QS_CUDA_MM_H
#define QS_CUDA_MM_H

#include "cuda_mv.h"
#include "cuda_vec.h"

#define QS_CU_MM_BM 64
#define QS_CU_MM_BN 64
#define QS_CU_MM_BK 32
#define QS_CU_MM_THREADS 128
#define QS_CU_MM_LD (QS_CU_MM_BK + 8) /* bf16 per smem row: fragment reads fall in all banks */
#define QS_CU_MM_PER (QS_CU_MM_BM * QS_CU_MM_BK / QS_CU_MM_THREADS) /* values per thread */

struct qs_cu_mm {
    struct qs_cu_mv mv;  /* x, W, y, bias and the shapes, as the GEMV has them */
    struct qs_cu_deq w;  /* quantized W: the dequantize rule of the stored N x cols tensor */
    int32_t xl, wl;      /* bf16 limbs of x and of W, 1 ... 3 */
    const int32_t *bad;  /* the scan's verdict (device): 1 leaves every output to the GEMV */
};

/* One CTA's shared memory: the limb planes of the x tile (rows m) and the W tile (rows n). */
struct qs_cu_mm_smem {
    uint16_t a[3][QS_CU_MM_BM][QS_CU_MM_LD];
    uint16_t b[3][QS_CU_MM_BN][QS_CU_MM_LD];
};

/* m16n8k16 fragment layouts (PTX ISA, mma .bf16): lane `lane`, register r. */
QS_HD static inline void qs_cu_mma_a_pos(int lane, int r, int *row, int *col)
{
    *row = (lane >> 2) + 8 * (r & 1); /* A 16 x 16: (row, col) and (row, col + 1) */
    *col = 2 * (lane & 3) + 8 * (r >> 1);
}

QS_HD static inline void qs_cu_mma_b_pos(int lane, int r, int *k, int *n)
{
    *k = 2 * (lane & 3) + 8 * r; /* B 16 x 8: (k, n) and (k + 1, n) */
    *n = lane >> 2;
}

QS_HD static inline void qs_cu_mma_c_pos(int lane, int r, int *row, int *col)
{
    *row = (lane >> 2) + 8 * (r >> 1); /* C 16 x 8: one f32 each */
    *col = 2 * (lane & 3) + (r & 1);
}

/* v = limb[0] + limb[1] + limb[2] exactly for finite v without bits below 2^-133
 * (!qs_cu_tc_bad), by truncation (never rounding up to Inf); NaN and Inf go whole into limb 0. */
QS_HD static inline void qs_cu_split3(float v, uint16_t limb[3])
{
    uint32_t u = qs_hd_bits(v), h;
    float r;

    if ((u & 0x7F800000u) == 0x7F800000u) {
        limb[0] = (uint16_t)((u & 0x7FFFFFFFu) > 0x7F800000u ? 0x7FC0u | (u >> 16 & 0x8000u)
                                                              : u >> 16);
        limb[1] = limb[2] = 0;
        return;
    }
    h = u & 0xFFFF0000u;
    limb[0] = (uint16_t)(h >> 16);
    r = v - qs_hd_float(h); /* exact: v's low 16 significand bits */
    h = qs_hd_bits(r) & 0xFFFF0000u;
    limb[1] = (uint16_t)(h >> 16);
    r = r - qs_hd_float(h); /* exact: the last 8 bits */
    limb[2] = (uint16_t)(qs_hd_bits(r) >> 16);
}

/* Limbs of a dtype (x) or a weight kind (W): as many as its values need. */
QS_HD static inline int32_t qs_cu_mm_x_limbs(int32_t dtype)
{
    return dtype == QS_DTYPE_BF16 ? 1 : dtype == QS_DTYPE_F16 ? 2 : 3;
}

QS_HD static inline int32_t qs_cu_mm_w_limbs(int32_t kind)
{
    switch (kind) {
    case QS_CU_MV_BF16:
    case QS_CU_MV_MXFP4: /* E2M1 or E4M3 times a power of two: at most 4 significand bits */
    case QS_CU_MV_MXFP8: return 1;
    case QS_CU_MV_F16: return 2;
    default: return 3;
    }
}

/* x[m, k] (0 outside the shape). */
QS_HD static inline float qs_cu_mm_x(const struct qs_cu_mm *a, int64_t m, int64_t k)
{
    if (m >= a->mv.M || k >= a->mv.K)
        return 0.0f;
    return qs_cu_ld_elem(a->mv.x, a->mv.x_dtype, m * a->mv.K + k);
}

/* W[n, k] as qs_dequantize / qs_sp24_dequantize give it (0 outside the shape). */
QS_HD static inline float qs_cu_mm_w(const struct qs_cu_mm *a, int64_t n, int64_t k)
{
    const struct qs_cu_mv *m = &a->mv;
    int64_t j = k;

    if (n >= m->N || k >= m->K)
        return 0.0f;
    if (m->meta) { /* 2:4: a kept value or +0 (docs/sparsity.md §3) */
        int64_t g = k >> 2;
        unsigned nib = (m->meta[n * m->words + (g >> 2)] >> (4 * (g & 3))) & 15u;
        if ((unsigned)(k & 3) == (nib & 3u))
            j = 2 * g;
        else if ((unsigned)(k & 3) == nib >> 2)
            j = 2 * g + 1;
        else
            return 0.0f;
    }
    switch (m->kind) {
    case QS_CU_MV_F32: return ((const float *)m->w)[n * m->cols + j];
    case QS_CU_MV_F16: return qs_cu_ld_elem(m->w, QS_DTYPE_F16, n * m->cols + j);
    case QS_CU_MV_BF16: return qs_cu_ld_elem(m->w, QS_DTYPE_BF16, n * m->cols + j);
    default: return qs_cu_deq_f32(&a->w, n * m->cols + j);
    }
}

/* Thread tid's share of a tile: x value i is in 16-byte chunk tid + 128 (i / xper) of the x
 * tile (32 / xper chunks per row, xper = 4 f32 or 8 f16 / bf16 values per chunk), W value i is
 * row tid / 32 + 4 i, column tid % 32 of the W tile, so a warp reads consecutive k. */
QS_HD static inline void qs_cu_mm_slot_x(int tid, int i, int xper, int *row, int *col)
{
    int c = tid + QS_CU_MM_THREADS * (i / xper);

    *row = c / (QS_CU_MM_BK / xper);
    *col = c % (QS_CU_MM_BK / xper) * xper + i % xper;
}

/* x values of the tile at (m0, k0): one 16-byte load per chunk where x's rows allow it. */
QS_HD static inline void qs_cu_mm_load_x(const struct qs_cu_mm *a, int64_t m0, int64_t k0,
                                         int tid, int xper, float *xa)
{
    QS_CU_UNROLL
    for (int j = 0; j < QS_CU_MM_PER / 4; j++) {
        int row, col;
        if (j >= QS_CU_MM_PER / xper)
            break;
        qs_cu_mm_slot_x(tid, j * xper, xper, &row, &col);
        if (a->mv.xvec && m0 + row < a->mv.M && k0 + col + xper <= a->mv.K) {
            struct qs_cu_v16 v = qs_cu_ld16((const char *)a->mv.x +
                                            ((m0 + row) * a->mv.K + k0 + col) * (16 / xper));
            QS_CU_UNROLL
            for (int k = 0; k < 8; k++)
                if (k < xper)
                    xa[j * xper + k] = qs_cu_tile_elem(&v, a->mv.x_dtype, k);
        } else {
            QS_CU_UNROLL
            for (int k = 0; k < 8; k++)
                if (k < xper)
                    xa[j * xper + k] = qs_cu_mm_x(a, m0 + row, k0 + col + k);
        }
    }
}

/* The x values of the tile at (m0, k0) into registers (the next step's, during the mma). */
QS_HD static inline void qs_cu_mm_load(const struct qs_cu_mm *a, int64_t m0, int64_t k0, int tid,
                                       float *xa)
{
    if (a->mv.x_dtype == QS_DTYPE_F32) /* constant chunk widths where this is inlined */
        qs_cu_mm_load_x(a, m0, k0, tid, 4, xa);
    else
        qs_cu_mm_load_x(a, m0, k0, tid, 8, xa);
}

/* The limbs of the step at (n0, k0): x's from the registers, W's decoded now (one element at a
 * time: the decoding of every format is one copy of code, not sixteen). */
QS_HD static inline void qs_cu_mm_store(struct qs_cu_mm_smem *s, const struct qs_cu_mm *a,
                                        int64_t n0, int64_t k0, int tid, const float *xa)
{
    int xper = a->mv.x_dtype == QS_DTYPE_F32 ? 4 : 8;

    QS_CU_UNROLL
    for (int i = 0; i < QS_CU_MM_PER; i++) {
        int row, col;
        uint16_t l[3];
        qs_cu_mm_slot_x(tid, i, xper, &row, &col);
        qs_cu_split3(xa[i], l);
        for (int j = 0; j < 3; j++)
            s->a[j][row][col] = l[j];
    }
#if defined(__CUDA_ARCH__)
#pragma unroll 1
#endif
    for (int i = 0; i < QS_CU_MM_PER; i++) {
        uint16_t l[3];
        qs_cu_split3(qs_cu_mm_w(a, n0 + tid / 32 + 4 * i, k0 + tid % 32), l);
        for (int j = 0; j < 3; j++)
            s->b[j][tid / 32 + 4 * i][tid % 32] = l[j];
    }
}

/* The A fragment (limb `limb`, 16-row tile mt of warp row wm, k step ks) of a lane. */
QS_HD static inline void qs_cu_mm_frag_a(const struct qs_cu_mm_smem *s, int limb, int wm, int mt,
                                         int ks, int lane, uint32_t r[4])
{
    for (int q = 0; q < 4; q++) {
        int row, col;
        const uint16_t *p;
        qs_cu_mma_a_pos(lane, q, &row, &col);
        p = &s->a[limb][wm * 32 + mt * 16 + row][ks * 16 + col];
        r[q] = (uint32_t)p[0] | (uint32_t)p[1] << 16; /* the lower column in the low half */
    }
}

QS_HD static inline void qs_cu_mm_frag_b(const struct qs_cu_mm_smem *s, int limb, int wn, int nt,
                                         int ks, int lane, uint32_t r[2])
{
    for (int q = 0; q < 2; q++) {
        int k, n;
        const uint16_t *p;
        qs_cu_mma_b_pos(lane, q, &k, &n);
        p = &s->b[limb][wn * 32 + nt * 8 + n][ks * 16 + k];
        r[q] = (uint32_t)p[0] | (uint32_t)p[1] << 16;
    }
}

/* The limb products of one k step, smallest first: pair p (0 ... 5) is x limb *i, W limb *j,
 * or 0 when the call's limbs do not have it. */
QS_HD static inline int qs_cu_mm_pair(const struct qs_cu_mm *a, int p, int *i, int *j)
{
    int s = p < 3 ? 2 : p < 5 ? 1 : 0; /* (2,0) (1,1) (0,2) (1,0) (0,1) (0,0): i + j = s */

    *i = p < 3 ? 2 - p : p < 5 ? 4 - p : 0;
    *j = s - *i;
    return *i < a->xl && *j < a->wl;
}

/* y from a lane's accumulators acc[mt][nt][r] of warp (wm, wn) of the tile at (m0, n0). */
QS_HD static inline void qs_cu_mm_epilogue(const struct qs_cu_mm *a, int64_t m0, int64_t n0,
                                           int wm, int wn, int lane, const float acc[2][4][4])
{
    for (int mt = 0; mt < 2; mt++)
        for (int nt = 0; nt < 4; nt++)
            for (int q = 0; q < 4; q++) {
                int row, col;
                int64_t m, n;
                float v = acc[mt][nt][q];
                qs_cu_mma_c_pos(lane, q, &row, &col);
                m = m0 + wm * 32 + mt * 16 + row;
                n = n0 + wn * 32 + nt * 8 + col;
                if (m >= a->mv.M || n >= a->mv.N)
                    continue;
                if (a->mv.bias)
                    v = v + a->mv.bias[n];
                a->mv.y[m * a->mv.N + n] = qs_hd_nan_canon(v);
            }
}

#endif /* QS_CUDA_MM_H */
