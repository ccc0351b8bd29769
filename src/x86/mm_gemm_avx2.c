/* SPDX-License-Identifier: MIT */
/*
 * The tiled GEMM step (slot mm_gemm_f32, src/ref/mm_gemm_ref.c) for AVX2: a register tile of 16
 * activation rows (one packed panel, two vectors) by 6 W rows, 12 accumulators that live through
 * the whole slice. Per column p: two vector loads of the panel, six broadcasts of W[r, p] (the
 * tile rows sit at the fixed stride QS_MM_GEMM_LDW: one pointer, constant displacements) and 12
 * fused multiply-adds. Each accumulator lane is the reference's fmaf chain for its (row, column)
 * pair, so the result is the reference's bit for bit; a NaN is made canonical at the store. Tails
 * (fewer than 6 W rows) run through the same code, instantiated for their sizes.
 */
#include <immintrin.h>

#include "../core/kernels.h"
#include "nan_avx2.h"

#define NR 6 /* W rows per register tile */

static inline __attribute__((always_inline)) void tile_avx2(const float *xt, int64_t k,
                                                            const float *w, const int nr, float *c,
                                                            int64_t ldc, int32_t acc)
{
    __m256 s0[NR], s1[NR];

#pragma GCC unroll 6
    for (int r = 0; r < NR; r++) {
        s0[r] = _mm256_setzero_ps();
        s1[r] = _mm256_setzero_ps();
    }
    for (int64_t p = 0; p < k; p++) {
        __m256 a0 = _mm256_loadu_ps(xt + 16 * p), a1 = _mm256_loadu_ps(xt + 16 * p + 8);
#pragma GCC unroll 6
        for (int r = 0; r < NR; r++) {
            if (r < nr) {
                __m256 b = _mm256_broadcast_ss(w + r * QS_MM_GEMM_LDW + p);
                s0[r] = _mm256_fmadd_ps(a0, b, s0[r]);
                s1[r] = _mm256_fmadd_ps(a1, b, s1[r]);
            }
        }
    }
#pragma GCC unroll 6
    for (int r = 0; r < NR; r++) {
        if (r < nr) {
            float *cr = c + r * ldc;
            if (acc) {
                s0[r] = _mm256_add_ps(_mm256_loadu_ps(cr), s0[r]);
                s1[r] = _mm256_add_ps(_mm256_loadu_ps(cr + 8), s1[r]);
            }
            _mm256_storeu_ps(cr, nan_canon_avx2(s0[r]));
            _mm256_storeu_ps(cr + 8, nan_canon_avx2(s1[r]));
        }
    }
}

#define TILE_CASE(n)                                                                               \
    case n: tile_avx2(x, k, wr, n, cr, ldc, acc); break;

void qs_mm_gemm_f32__avx2_16x6x1(const float *xt, int64_t xs, int64_t mp, int64_t k, const float *w,
                                 int64_t rows, float *c, int64_t ldc, int32_t acc)
{
    for (int64_t r0 = 0; r0 < rows; r0 += NR) {
        int nr = rows - r0 < NR ? (int)(rows - r0) : NR;
        for (int64_t q = 0; q < mp; q++) {
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
            default: break;
            }
        }
    }
}
