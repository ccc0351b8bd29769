/* SPDX-License-Identifier: MIT */
/*
 * GEMV over dense bf16 weights with bf16 activations for AVX512-BF16 (include/qsparse/matmul.h;
 * the reference is src/ref/mm_abf16_ref.c): the weights are already what vdpbf16ps multiplies,
 * one segment per row with no scale. Tiles and tails: mm_gemv_avx512bf16.h.
 */
#include <immintrin.h>

#include "../core/kernels.h"
#include "../ref/ref.h"
#include "mm_abf16_fmt_avx512bf16.h"

void qs_mm_bf16abf16__avx512bf16_1x4x32(const qs_mm_weight *w, int64_t r0, int64_t rows,
                                        const uint16_t *x, int64_t ldx, int64_t m, float *y,
                                        int64_t ldy)
{
    const int64_t k = w->k;
    gemv_rows_avx512 wr = gemv_view_rows_avx512(w, r0, 0, k > 0 ? k : 1);
    gemv_avx512bf16(x, ldx, m, k, &wr, rows, bf16_dec_avx512bf16, NULL, one_scl_avx512bf16, NULL, 0,
                    y, ldy);
}
