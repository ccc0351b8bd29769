// SPDX-License-Identifier: MIT
//
// The CUDA kernels of the plugin: loops over the items of cuda_items.h, cuda_vec.h and cuda_mv.h
// plus the shared-memory and shuffle steps that tests/test_cuda_items.c and test_cuda_mv.c
// emulate on the host (a block's reduction tree, a blockwise group's xor joins, the GEMV's
// butterfly). The bulk kernels are templates on the element rule and dtype, so that the items'
// switches fold away and every loop over a tile has a constant trip count (registers, not local
// memory); each reads and writes in 16-byte tiles. Included by cuda_plugin.cu only.
#ifndef QS_CUDA_KERNELS_CUH
#define QS_CUDA_KERNELS_CUH

#include <cstddef>

#include <cuda_runtime.h>

extern "C" {
#include "cuda_pipeline.h"
}

#define QS_CU_THREADS 256

// The element rules' tables (QS_CU_TAB_*, the literals src/ref's tables are made of): module
// data, in place before any kernel runs, so no copy is ever enqueued for them (on any stream).
struct qs_cu_tables {
    float nf4[16], fp4[16], dyn8[256], e2m1[16];
};
static_assert(sizeof(qs_cu_tables) == QS_CU_TAB_FLOATS * sizeof(float), "flat tables");
static_assert(offsetof(qs_cu_tables, fp4) == QS_CU_TAB_FP4 * sizeof(float), "QS_CU_TAB_FP4");
static_assert(offsetof(qs_cu_tables, dyn8) == QS_CU_TAB_DYN8 * sizeof(float), "QS_CU_TAB_DYN8");
static_assert(offsetof(qs_cu_tables, e2m1) == QS_CU_TAB_E2M1 * sizeof(float), "QS_CU_TAB_E2M1");
__constant__ qs_cu_tables qs_cu_const_tab = {QS_NF4_CODEBOOK_INIT, QS_FP4_CODEBOOK_INIT,
                                             QS_DYN8_MAP_INIT, QS_E2M1_VALUES_INIT};

// Kernels that look codes up copy the tables into shared memory first: a codebook lookup with a
// different index in every lane is serialized by the constant cache, not by shared memory.
__device__ __forceinline__ void qs_cu_load_tab(float *tab)
{
    for (int i = threadIdx.x; i < QS_CU_TAB_FLOATS; i += blockDim.x)
        tab[i] = ((const float *)&qs_cu_const_tab)[i];
    __syncthreads();
}

__device__ __forceinline__ int64_t qs_cu_gtid()
{
    return (int64_t)blockIdx.x * blockDim.x + threadIdx.x;
}

__device__ __forceinline__ int64_t qs_cu_gthreads()
{
    return (int64_t)gridDim.x * blockDim.x;
}

// ---- scalar items ---------------------------------------------------------------------------

// A grid-stride loop over the items; TAB: the item reads the tables through a->tab.
template <typename A, void (*F)(const A *, int64_t), bool TAB>
__global__ void __launch_bounds__(QS_CU_THREADS) grid_kernel(A a, int64_t count)
{
    if constexpr (TAB) {
        __shared__ float tab[QS_CU_TAB_FLOATS];
        qs_cu_load_tab(tab);
        a.tab = tab;
    }
    for (int64_t i = qs_cu_gtid(); i < count; i += qs_cu_gthreads())
        F(&a, i);
}

// One block per chunk: each thread its strided share (16-byte tiles where a.vec), then the tree
// the host test emulates.
__global__ void __launch_bounds__(QS_CU_RED_THREADS) reduce_kernel(qs_cu_red a, int64_t count)
{
    __shared__ qs_cu_pair p[QS_CU_RED_THREADS];
    for (int64_t i = blockIdx.x; i < count; i += gridDim.x) {
        p[threadIdx.x] = qs_cu_red_thread(&a, i, threadIdx.x);
        __syncthreads();
        for (int s = QS_CU_RED_THREADS / 2; s > 0; s /= 2) {
            if ((int)threadIdx.x < s)
                p[threadIdx.x] = qs_cu_red_join(a.kind, p[threadIdx.x], p[threadIdx.x + s]);
            __syncthreads();
        }
        if (threadIdx.x == 0)
            a.partial[i] = p[0];
        __syncthreads();
    }
}

// The double-quantization statistics, the same tree in double.
__global__ void __launch_bounds__(QS_CU_RED_THREADS) dq_stats_kernel(qs_cu_dq_stats a,
                                                                     int64_t count)
{
    __shared__ qs_cu_dqstat s[QS_CU_RED_THREADS];
    for (int64_t i = blockIdx.x; i < count; i += gridDim.x) {
        s[threadIdx.x] = qs_cu_dq_stats_thread(&a, i, threadIdx.x);
        __syncthreads();
        for (int h = QS_CU_RED_THREADS / 2; h > 0; h /= 2) {
            if ((int)threadIdx.x < h)
                s[threadIdx.x] = qs_cu_dqstat_join(s[threadIdx.x], s[threadIdx.x + h]);
            __syncthreads();
        }
        if (threadIdx.x == 0)
            a.partial[i] = s[0];
        __syncthreads();
    }
}

// Validation of 2:4 inputs: the lowest bad word index wins, as the host emulation's minimum.
__global__ void __launch_bounds__(QS_CU_THREADS) sp24_check_kernel(qs_cu_sp24_check c,
                                                                   int64_t count)
{
    for (int64_t i = qs_cu_gtid(); i < count; i += qs_cu_gthreads())
        if (qs_cu_sp24_bad_item(&c.a, i, c.decompress))
            atomicMin(c.first, (unsigned long long)i);
}

// ---- blockwise quantize: a group of a.lanes lanes per block ----------------------------------

template <int RULE, int DT>
__global__ void __launch_bounds__(QS_CU_THREADS) bq_kernel(qs_cu_bq a, int64_t blocks)
{
    const unsigned full = 0xFFFFFFFFu;
    if constexpr (RULE == QS_CU_BQ_DYN8) {
        __shared__ float tab[QS_CU_TAB_FLOATS];
        qs_cu_load_tab(tab);
        a.tab = tab;
    }
    a.rule = RULE;
    a.dtype = DT;
    const int lane = threadIdx.x & 31, L = a.lanes, sub = lane & (L - 1), G = 32 / L;
    const int32_t kind = qs_cu_bq_kind(&a);
    const int64_t warps = qs_cu_gthreads() >> 5;
    // the loop bound is the same for the whole warp: every lane reaches every shuffle
    for (int64_t w = qs_cu_gtid() >> 5; w * G < blocks; w += warps) {
        const int64_t b = w * G + lane / L;
        const bool on = b < blocks;
        qs_cu_pair p = qs_cu_red_init(kind);
        qs_cu_v16 first = qs_cu_v16_zero();
        if (on) { // lanes <= tiles: every lane has a first tile, kept for the encoding
            first = qs_cu_ld16(qs_cu_bq_tile(&a, b, sub));
            p = qs_cu_bq_reduce_rest(&a, b, sub, qs_cu_bq_feed(&a, p, &first));
        }
        for (int off = L / 2; off > 0; off >>= 1) {
            qs_cu_pair q;
            q.a = __shfl_xor_sync(full, p.a, off);
            q.b = __shfl_xor_sync(full, p.b, off);
            p = qs_cu_red_join(kind, p, q);
        }
        if (on) {
            const qs_cu_bq_par r = qs_cu_bq_params(&a, p);
            if (sub == 0)
                qs_cu_bq_store_scale(&a, b, &r);
            qs_cu_bq_encode(&a, b, sub, &first, &r);
            for (int64_t t = sub + L; t < a.tiles; t += L) {
                const qs_cu_v16 v = qs_cu_ld16(qs_cu_bq_tile(&a, b, t));
                qs_cu_bq_encode(&a, b, t, &v, &r);
            }
        }
    }
}

// ---- elementwise quantize and dequantize tiles -----------------------------------------------

template <int FP8, int DT>
__global__ void __launch_bounds__(QS_CU_THREADS) ewq_kernel(qs_cu_ewq a, int64_t tiles)
{
    a.fp8 = FP8;
    a.dtype = DT;
    for (int64_t t = qs_cu_gtid(); t < tiles; t += qs_cu_gthreads())
        qs_cu_ewq_tile(&a, t);
}

// SUB: the rule's variant (FP4 / NF4, LLM.int8, E5M2, MXFP8) as a constant, so that the tile's
// width (32 or 16 codes) is one too.
template <int RULE, int SUB, int DT>
__global__ void __launch_bounds__(QS_CU_THREADS) deq_kernel(qs_cu_deq a, int64_t tiles)
{
    if constexpr (RULE == QS_CU_DQ_BNB4 || RULE == QS_CU_DQ_MX || RULE == QS_CU_DQ_NV) {
        __shared__ float tab[QS_CU_TAB_FLOATS];
        qs_cu_load_tab(tab);
        a.tab = tab;
    }
    a.rule = RULE;
    a.sub = SUB;
    a.dtype = DT;
    for (int64_t t = qs_cu_gtid(); t < tiles; t += qs_cu_gthreads())
        qs_cu_deq_tile(&a, t);
}

// ---- GEMV: a warp takes two rows of W against one row of x ------------------------------------

__device__ __forceinline__ float qs_cu_butterfly(float v)
{
    for (int off = 16; off > 0; off >>= 1)
        v = v + __shfl_xor_sync(0xFFFFFFFFu, v, off);
    return v;
}

// items = M * ceil(N / 2). For dense weights the x tile is loaded once for both rows; 2:4
// gathers x at each row's own kept columns.
template <int KIND>
__global__ void __launch_bounds__(QS_CU_THREADS, 2) mv_kernel(qs_cu_mv a, int64_t items)
{
    __shared__ float tab[QS_CU_TAB_FLOATS];
    qs_cu_load_tab(tab);
    a.tab = tab;
    a.kind = KIND;
    const int lane = threadIdx.x & 31;
    const int64_t pairs = (a.N + 1) / 2, tiles = qs_cu_mv_tiles(&a), warps = qs_cu_gthreads() >> 5;
    if (a.only_if && !*a.only_if)
        return; // the GEMM's fallback, and the GEMM ran
    for (int64_t w = qs_cu_gtid() >> 5; w < items; w += warps) {
        const int64_t m = w / pairs, r0 = (w - m * pairs) * 2;
        const bool two = r0 + 1 < a.N;
        float acc0 = 0.0f, acc1 = 0.0f, xv[32];
        for (int64_t t = lane; t < tiles; t += 32) {
            const qs_cu_v16 c0 = qs_cu_mv_codes(&a, r0, t);
            qs_cu_v16 c1 = qs_cu_v16_zero();
            if (two)
                c1 = qs_cu_mv_codes(&a, r0 + 1, t);
            qs_cu_mv_x(&a, m, r0, t, xv);
            acc0 = qs_cu_mv_tile(&a, r0, t, &c0, xv, acc0);
            if (two) {
                if (a.meta)
                    qs_cu_mv_x(&a, m, r0 + 1, t, xv);
                acc1 = qs_cu_mv_tile(&a, r0 + 1, t, &c1, xv, acc1);
            }
        }
        acc0 = qs_cu_butterfly(acc0);
        acc1 = qs_cu_butterfly(acc1);
        if (lane == 0) {
            qs_cu_mv_store(&a, m, r0, acc0);
            if (two)
                qs_cu_mv_store(&a, m, r0 + 1, acc1);
        }
    }
}

// ---- GEMM on tensor cores (cuda_mm.h) ----------------------------------------------------------

__device__ __forceinline__ void qs_cu_mma(float c[4], const uint32_t a[4], const uint32_t b[2])
{
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 800
    asm volatile("mma.sync.aligned.m16n8k16.row.col.f32.bf16.bf16.f32 "
                 "{%0, %1, %2, %3}, {%4, %5, %6, %7}, {%8, %9}, {%0, %1, %2, %3};\n"
                 : "+f"(c[0]), "+f"(c[1]), "+f"(c[2]), "+f"(c[3])
                 : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "r"(b[0]), "r"(b[1]));
#endif
}

// One CTA per 64 x 64 tile of y (grid-stride); the next K step's values are loaded into
// registers while the tensor cores work on this one's limbs in shared memory.
__global__ void __launch_bounds__(QS_CU_MM_THREADS) mm_kernel(qs_cu_mm a, int64_t tiles)
{
    __shared__ qs_cu_mm_smem s;
    __shared__ float tab[QS_CU_TAB_FLOATS];
    if (*a.bad)
        return; // a value the limbs cannot carry: the GEMV computes every output
    qs_cu_load_tab(tab);
    a.w.tab = tab;
    a.mv.tab = tab;
    const int tid = threadIdx.x, lane = tid & 31, warp = tid >> 5, wm = warp & 1, wn = warp >> 1;
    // 32-bit tile indices (the driver keeps tiles <= INT32_MAX): a 64-bit division is a call
    // whose caller-saved registers go to local memory
    const uint32_t tn = (uint32_t)((a.mv.N + QS_CU_MM_BN - 1) / QS_CU_MM_BN);
    for (uint32_t t = blockIdx.x; t < (uint32_t)tiles; t += gridDim.x) {
        const int64_t m0 = (int64_t)(t / tn) * QS_CU_MM_BM, n0 = (int64_t)(t % tn) * QS_CU_MM_BN;
        float acc[2][4][4] = {}, xa[QS_CU_MM_PER];
        qs_cu_mm_load(&a, m0, 0, tid, xa);
        for (int64_t k0 = 0; k0 < a.mv.K; k0 += QS_CU_MM_BK) {
            __syncthreads(); // every warp is done with the previous step's limbs
            qs_cu_mm_store(&s, &a, n0, k0, tid, xa);
            __syncthreads();
            if (k0 + QS_CU_MM_BK < a.mv.K)
                qs_cu_mm_load(&a, m0, k0 + QS_CU_MM_BK, tid, xa);
#pragma unroll
            for (int ks = 0; ks < QS_CU_MM_BK / 16; ks++) {
#pragma unroll
                for (int p = 0; p < 6; p++) {
                    int i, j;
                    uint32_t fa[2][4], fb[4][2];
                    if (!qs_cu_mm_pair(&a, p, &i, &j))
                        continue;
#pragma unroll
                    for (int mt = 0; mt < 2; mt++)
                        qs_cu_mm_frag_a(&s, i, wm, mt, ks, lane, fa[mt]);
#pragma unroll
                    for (int nt = 0; nt < 4; nt++)
                        qs_cu_mm_frag_b(&s, j, wn, nt, ks, lane, fb[nt]);
#pragma unroll
                    for (int mt = 0; mt < 2; mt++)
#pragma unroll
                        for (int nt = 0; nt < 4; nt++)
                            qs_cu_mma(acc[mt][nt], fa[mt], fb[nt]);
                }
            }
        }
        qs_cu_mm_epilogue(&a, m0, n0, wm, wn, lane, acc);
    }
}

#endif // QS_CUDA_KERNELS_CUH
