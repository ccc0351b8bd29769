/* SPDX-License-Identifier: MIT */
/*
 * FP8 (E4M3, E5M2) GEMV with bf16 activations for AVX512-BF16 (include/qsparse/matmul.h; the
 * reference is src/ref/mm_abf16_ref.c): 32 codes a step decode to bf16 exactly with integer steps
 * (mm_gemv_avx512bf16.h), vdpbf16ps multiplies them with x, and the whole row is one segment whose
 * lane sums the per-tensor scale multiplies once.
 */
#include <immintrin.h>

#include "../core/kernels.h"
#include "../ref/ref.h"
#include "mm_abf16_fmt_avx512bf16.h"

/* The tensor scale: w->scale (sstride 0). */
void qs_mm_e4m3abf16__avx512bf16_1x4x32(const qs_mm_weight *w, int64_t r0, int64_t rows,
                                        const uint16_t *x, int64_t ldx, int64_t m, float *y,
                                        int64_t ldy)
{
    const int64_t k = w->k;
    const float scale = qs_ld_f32((const float *)w->scale);
    gemv_rows_avx512 wr = gemv_view_rows_avx512(w, r0, 0, k > 0 ? k : 1);
    gemv_avx512bf16(x, ldx, m, k, &wr, rows, e4m3_dec_avx512bf16, NULL, fp8_scl_avx512bf16, &scale,
                    GEMV_BF16_SCAN_F32, y, ldy);
}

void qs_mm_e5m2abf16__avx512bf16_1x4x32(const qs_mm_weight *w, int64_t r0, int64_t rows,
                                        const uint16_t *x, int64_t ldx, int64_t m, float *y,
                                        int64_t ldy)
{
    const int64_t k = w->k;
    const float scale = qs_ld_f32((const float *)w->scale);
    gemv_rows_avx512 wr = gemv_view_rows_avx512(w, r0, 0, k > 0 ? k : 1);
    gemv_avx512bf16(x, ldx, m, k, &wr, rows, e5m2_dec_avx512bf16, NULL, fp8_scl_avx512bf16, &scale,
                    GEMV_BF16_SCAN_F32, y, ldy);
}
