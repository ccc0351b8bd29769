/* SPDX-License-Identifier: MIT */
/*
 * INT8 GEMV with bf16 activations for AVX512-BF16 (include/qsparse/matmul.h; the reference is
 * src/ref/mm_abf16_ref.c): every granularity (tensor, row, group; symmetric or with zero points)
 * and LLM.int8 rows (unit scales applied as fl(scale * scale_mul)). q - zp lies in [-255, 255],
 * which bf16 holds exactly, but no instruction makes bf16 of an integer: the codes widen to 32
 * bits, the segment's zero point is subtracted and VCVTDQ2PS converts them exactly. Tiles of up
 * to 4 x rows multiply these f32 values with x widened to f32 by FMA (the same exact products as
 * vdpbf16ps; packing them to bf16, a vpermt2w per 32 columns, made the M = 1 kernel 1.7x
 * slower); tiles of 8 x rows pack them for vdpbf16ps, whose products the x rows share. Tiles and
 * tails: mm_gemv_avx512bf16.h.
 */
#include <immintrin.h>

#include "../core/kernels.h"
#include "../ref/ref.h"
#include "mm_abf16_fmt_avx512bf16.h"

void qs_mm_int8abf16__avx512bf16_1x4x32(const qs_mm_weight *w, int64_t r0, int64_t rows,
                                        const uint16_t *x, int64_t ldx, int64_t m, float *y,
                                        int64_t ldy)
{
    int8_fmt_avx512bf16 f = {w->zp ? w->zp + r0 * w->sstride : NULL, w->sstride, w->scale_mul};
    gemv_rows_avx512 wr = gemv_view_rows_avx512(w, r0, 4, w->group > 0 ? w->group : 1);
    gemv_avx512bf16(x, ldx, m, w->k, &wr, rows, int8_dec16_avx512bf16, int8_dec_avx512bf16,
                    int8_scl_avx512bf16, &f, GEMV_BF16_SCAN_F32, y, ldy);
}
