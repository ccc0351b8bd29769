/* SPDX-License-Identifier: MIT */
/*
 * The tiled GEMM step (slot mm_gemm_f32, src/ref/mm_gemm_ref.c) for AVX-512: a register tile of
 * 32 activation rows (two packed panels of 16, one vector each) by 12 W rows, 24 accumulators
 * that live through the whole slice. Per column p: two vector loads of the panels, twelve
 * broadcasts of W[r, p] (the tile rows sit at the fixed stride QS_MM_GEMM_LDW, so one pointer and
 * constant displacements reach them all) and 24 fused multiply-adds. Each accumulator lane is the
 * reference's fmaf chain for its (row, column) pair, so the result is the reference's bit for bit;
 * a NaN is made canonical at the store. The 12 W rows of a tile stay in L1 while the panels of
 * the slice stream past them from L2. Tails (fewer than 12 W rows, one last panel) run through
 * the same code, instantiated for their sizes.
 */
#include <immintrin.h>

#include "../core/kernels.h"
#include "nan_avx512.h"

#define NR 12 /* W rows per register tile */

static inline __attribute__((always_inline)) void tile_avx512(const float *xt, int64_t xs,
                                                              const int np, int64_t k,
                                                              const float *w, const int nr,
                                                              float *c, int64_t ldc, int32_t acc)
{
    __m512 s0[NR], s1[NR];
    const float *x1 = xt + xs;

#pragma GCC unroll 12
    for (int r = 0; r < NR; r++) {
        s0[r] = _mm512_setzero_ps();
        s1[r] = _mm512_setzero_ps();
    }
    for (int64_t p = 0; p < k; p++) {
        __m512 a0 = _mm512_loadu_ps(xt + 16 * p);
        __m512 a1 = np == 2 ? _mm512_loadu_ps(x1 + 16 * p) : a0;
#pragma GCC unroll 12
        for (int r = 0; r < NR; r++) {
            if (r < nr) {
                __m512 b = _mm512_set1_ps(w[r * QS_MM_GEMM_LDW + p]);
                s0[r] = _mm512_fmadd_ps(a0, b, s0[r]);
                if (np == 2)
                    s1[r] = _mm512_fmadd_ps(a1, b, s1[r]);
            }
        }
    }
#pragma GCC unroll 12
    for (int r = 0; r < NR; r++) {
        if (r < nr) {
            float *cr = c + r * ldc;
            if (acc) {
                s0[r] = _mm512_add_ps(_mm512_loadu_ps(cr), s0[r]);
                if (np == 2)
                    s1[r] = _mm512_add_ps(_mm512_loadu_ps(cr + 16), s1[r]);
            }
            _mm512_storeu_ps(cr, nan_canon_avx512(s0[r]));
            if (np == 2)
                _mm512_storeu_ps(cr + 16, nan_canon_avx512(s1[r]));
        }
    }
}

#define TILE_CASE(n)                                                                               \
    case n:                                                                                        \
        if (np == 2)                                                                               \
            tile_avx512(x, xs, 2, k, wr, n, cr, ldc, acc);                                         \
        else                                                                                       \
            tile_avx512(x, xs, 1, k, wr, n, cr, ldc, acc);                                         \
        break;

void qs_mm_gemm_f32__avx512_32x12x1(const float *xt, int64_t xs, int64_t mp, int64_t k,
                                    const float *w, int64_t rows, float *c, int64_t ldc,
                                    int32_t acc)
{
    for (int64_t r0 = 0; r0 < rows; r0 += NR) {
        int nr = rows - r0 < NR ? (int)(rows - r0) : NR;
        for (int64_t q = 0; q < mp; q += 2) {
            int np = mp - q < 2 ? 1 : 2;
            const float *x = xt + q * xs;
            const float *wr = w + r0 * QS_MM_GEMM_LDW;
            float *cr = c + r0 * ldc + 16 * q;
            switch (nr) {
                TILE_CASE(1)
                TILE_CASE(2)
                TILE_CASE(3)
                TILE_CASE(4)
                TILE_CASE(5)
                TILE_CASE(6)
                TILE_CASE(7)
                TILE_CASE(8)
                TILE_CASE(9)
                TILE_CASE(10)
                TILE_CASE(11)
                TILE_CASE(12)
            default: break;
            }
        }
    }
}
