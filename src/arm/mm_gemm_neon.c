/* SPDX-License-Identifier: MIT */
/*
 * The tiled GEMM step (slot mm_gemm_f32, src/ref/mm_gemm_ref.c) for NEON: a register tile of 16
 * activation rows (one packed panel, four vectors) by 4 W rows, 16 accumulators that live through
 * the whole slice. Per four columns p: one vector load of W[r, p..p+3] for each tile row (the
 * rows sit at the fixed stride QS_MM_GEMM_LDW), then per column four loads of the panel and 16
 * FMLA by element (lane p of the row's vector), so W costs 4 loads per 64 multiply-adds instead of
 * a broadcast per column. Each accumulator lane is the reference's fmaf chain for its (row,
 * column) pair, in ascending p, so the result is the reference's bit for bit; a NaN is made
 * canonical at the store. The last k % 4 columns take W one value at a time. Tails (fewer than 4
 * W rows) run through the same code, instantiated for their sizes.
 * Why 4 rows: GCC 12 loads the panel vectors of the next columns early, and with 6 rows (24
 * accumulators, 6 W vectors) that spilled 43 vectors to the stack, with 5 rows 2; with 4 none.
 * 4 also divides the driver's 12-row task bounds, so no task ends in a short tile.
 */
#include <arm_neon.h>

#include "../core/kernels.h"
#include "neon_common.h"

#define NR 4 /* W rows per register tile */

/* Column p + L of the slice: the panel's four vectors against lane L of each row's W vector. */
#define GEMM_COLUMN_NEON(L)                                                                        \
    do {                                                                                           \
        const float *xp = x + 16 * (p + (L));                                                      \
        for (int j = 0; j < 4; j++) {                                                              \
            float32x4_t a = vld1q_f32(xp + 4 * j);                                                 \
            for (int r = 0; r < NR; r++)                                                           \
                if (r < nr)                                                                        \
                    s[r][j] = vfmaq_laneq_f32(s[r][j], a, b[r], (L));                              \
        }                                                                                          \
    } while (0)

static inline __attribute__((always_inline)) void tile_neon(const float *x, int64_t k,
                                                            const float *w, const int nr, float *c,
                                                            int64_t ldc, int32_t acc)
{
    float32x4_t s[NR][4];
    int64_t p = 0;

    for (int r = 0; r < NR; r++)
        for (int j = 0; j < 4; j++)
            s[r][j] = vdupq_n_f32(0.0f);
    for (; p + 4 <= k; p += 4) {
        float32x4_t b[NR];
        for (int r = 0; r < NR; r++)
            if (r < nr)
                b[r] = vld1q_f32(w + r * QS_MM_GEMM_LDW + p);
        GEMM_COLUMN_NEON(0);
        GEMM_COLUMN_NEON(1);
        GEMM_COLUMN_NEON(2);
        GEMM_COLUMN_NEON(3);
    }
    for (; p < k; p++)
        for (int j = 0; j < 4; j++) {
            float32x4_t a = vld1q_f32(x + 16 * p + 4 * j);
            for (int r = 0; r < NR; r++)
                if (r < nr)
                    s[r][j] = vfmaq_n_f32(s[r][j], a, w[r * QS_MM_GEMM_LDW + p]);
        }
    for (int r = 0; r < NR; r++) {
        if (r < nr) {
            float *cr = c + r * ldc;
            for (int j = 0; j < 4; j++) {
                float32x4_t v = acc ? vaddq_f32(vld1q_f32(cr + 4 * j), s[r][j]) : s[r][j];
                vst1q_f32(cr + 4 * j, nan_canon_neon(v));
            }
        }
    }
}

#define TILE_CASE(n)                                                                               \
    case n: tile_neon(x, k, wr, n, cr, ldc, acc); break;

void qs_mm_gemm_f32__neon_16x4x1(const float *xt, int64_t xs, int64_t mp, int64_t k, const float *w,
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
            default: break;
            }
        }
    }
}
