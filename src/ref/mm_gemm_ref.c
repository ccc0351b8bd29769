/* SPDX-License-Identifier: MIT */
/*
 * The tiled GEMM step of the f32-activation GEMM path (slot mm_gemm_f32, src/core/kernels.h):
 * for every W row r of the tile and every packed activation row i, one chain of fused
 * multiply-adds over the k columns of the slice in ascending order from +0, added to the running
 * result of the earlier slices (or stored, for the first slice). The driver
 * (src/gemm/gemm_tiled.c) calls it slice after slice of QS_MM_GEMM_KC columns, so
 *   y[m, n] = (...((s_0 + s_1) + s_2) ...) + s_last,  s_j = fma chain over slice j,
 * which depends on the shape alone: not on the thread count, the tile a SIMD version keeps in
 * registers, or the ISA tier (fused multiply-add is one correctly rounded operation, the same in
 * every lane). A NaN result is stored as the canonical quiet NaN (the rule of ref.h).
 */
#include <math.h>

#include "../core/kernels.h"
#include "ref.h"

void qs_mm_gemm_f32__ref(const float *xt, int64_t xs, int64_t mp, int64_t k, const float *w,
                         int64_t rows, float *c, int64_t ldc, int32_t acc)
{
    for (int64_t r = 0; r < rows; r++)
        for (int64_t i = 0; i < 16 * mp; i++) {
            const float *xi = xt + (i / 16) * xs + i % 16;
            float s = 0.0f;
            for (int64_t p = 0; p < k; p++)
                s = fmaf(qs_ld_f32(xi + 16 * p), qs_ld_f32(w + r * QS_MM_GEMM_LDW + p), s);
            if (acc)
                s = qs_ld_f32(c + r * ldc + i) + s;
            qs_st_f32(c + r * ldc + i, qs_ref_nan_canon(s));
        }
}
