/* SPDX-License-Identifier: MIT */
/*
 * MXFP4, MXFP8 and NVFP4 GEMV with bf16 activations for AVX512-BF16 (include/qsparse/matmul.h;
 * the reference is src/ref/mm_abf16_ref.c). E2M1 codes (element 2i in the low nibble of byte i)
 * look up their bf16 value with one vpermw per 32, E4M3 codes decode with integer steps
 * (mm_gemv_avx512bf16.h); both are exact in bf16. Each block's lane sums get the block scale once:
 * the E8M0 power of two (NaN for 0xFF) for MX, fl(E4M3(S & 0x7F) * s_global) for NVFP4, from
 * tables formed once per call as in mm_mx_avx512.c; NVFP4's blocks of 16 go two to a step. An
 * E8M0 scale is never infinite, an NVFP4 one only where the table holds an infinity (a huge
 * s_global): only then does the driver test block by block. One x row takes the 64-column steps
 * of mm_gemv4_avx512bf16.h (MXFP4, and NVFP4 without an infinite block scale).
 */
#include <immintrin.h>

#include "../core/kernels.h"
#include "../ref/ref.h"
#include "mm_abf16_fmt_avx512bf16.h"
#include "mm_gemv4_avx512bf16.h"

void qs_mm_mxfp4abf16__avx512bf16_1x4x32(const qs_mm_weight *w, int64_t r0, int64_t rows,
                                         const uint16_t *x, int64_t ldx, int64_t m, float *y,
                                         int64_t ldy)
{
    gemv_rows_avx512 wr = gemv_view_rows_avx512(w, r0, 1, 32);
    e2m1_fmt_avx512bf16 f;
    e8m0_fmt_avx512bf16(&f);
    if (m == 1) {
        gemv4_m1_avx512bf16(x, w->k, &wr, rows, _mm512_loadu_si512((const void *)f.book), 0,
                            GEMV4_MX, 0.0f, y);
        return;
    }
    gemv_avx512bf16(x, ldx, m, w->k, &wr, rows, e2m1_dec_avx512bf16, NULL, mx_scl_avx512bf16, &f, 0,
                    y, ldy);
}

void qs_mm_mxfp8abf16__avx512bf16_1x4x32(const qs_mm_weight *w, int64_t r0, int64_t rows,
                                         const uint16_t *x, int64_t ldx, int64_t m, float *y,
                                         int64_t ldy)
{
    gemv_rows_avx512 wr = gemv_view_rows_avx512(w, r0, 1, 32);
    e2m1_fmt_avx512bf16 f;
    e8m0_fmt_avx512bf16(&f);
    gemv_avx512bf16(x, ldx, m, w->k, &wr, rows, e4m3_dec_avx512bf16, NULL, mx_scl_avx512bf16, &f, 0,
                    y, ldy);
}

void qs_mm_nvfp4abf16__avx512bf16_1x4x32(const qs_mm_weight *w, int64_t r0, int64_t rows,
                                         const uint16_t *x, int64_t ldx, int64_t m, float *y,
                                         int64_t ldy)
{
    gemv_rows_avx512 wr = gemv_view_rows_avx512(w, r0, 1, 16);
    e2m1_fmt_avx512bf16 f;
    _mm512_storeu_si512((void *)f.book, book_table_avx512bf16(qs_e2m1_values));
    unsigned flags = GEMV_BF16_PAIRS;
    for (int i = 0; i < 128; i++) {
        f.scale[i] = gemv_e4m3_pos_avx512((uint8_t)i) * w->s_global;
        if (f.scale[i] - f.scale[i] != 0.0f && f.scale[i] == f.scale[i])
            flags |= GEMV_BF16_CHECK; /* an infinite block scale: tested block by block */
    }
    if (m == 1 && !(flags & GEMV_BF16_CHECK)) {
        gemv4_m1_avx512bf16(x, w->k, &wr, rows, _mm512_loadu_si512((const void *)f.book), 0,
                            GEMV4_NV, w->s_global, y);
        return;
    }
    gemv_avx512bf16(x, ldx, m, w->k, &wr, rows, e2m1_dec_avx512bf16, NULL, nvfp4_scl_avx512bf16, &f,
                    flags, y, ldy);
}
