/* SPDX-License-Identifier: MIT */
/*
 * NF4 / FP4 GEMV with bf16 activations for AVX512-BF16 (include/qsparse/matmul.h; the reference
 * is src/ref/mm_abf16_ref.c): the codebook rounded to bf16 sits twice in one register, and one
 * vpermw turns 32 codes (16 bytes, element 2i in the high nibble of byte i) into their bf16
 * values in column order, which vdpbf16ps multiplies with x as it is stored; each block's lane
 * sums get the block's absmax once (mm_gemv_avx512bf16.h). Blocks of 16 go two to a step. One
 * x row with blocks of a multiple of 64 takes the 64-column steps of mm_gemv4_avx512bf16.h.
 *
 * Rows must start on a block (k a multiple of the block) and blocks hold whole bytes (even);
 * other shapes run the reference, which is exact for them and rare (the default block is 64).
 */
#include <immintrin.h>

#include "../core/kernels.h"
#include "../ref/ref.h"
#include "mm_abf16_fmt_avx512bf16.h"
#include "mm_gemv4_avx512bf16.h"

static inline __attribute__((always_inline)) void
bnb4_avx512bf16(const float *book, qs_mm_gemv_xbf16_fn *ref, const qs_mm_weight *wv, int64_t r0,
                int64_t rows, const uint16_t *x, int64_t ldx, int64_t m, float *y, int64_t ldy)
{
    const int64_t k = wv->k, block = wv->group;
    uint16_t table[32];

    if (block % 2 != 0 || k % block != 0) {
        ref(wv, r0, rows, x, ldx, m, y, ldy);
        return;
    }
    _mm512_storeu_si512((void *)table, book_table_avx512bf16(book));
    gemv_rows_avx512 w = {(const uint8_t *)wv->data + r0 * k / 2, k / 2,
                          (const uint8_t *)((const float *)wv->scale + r0 * k / block),
                          (k / block) * 4, block};
    if (m == 1 && block % 64 == 0) {
        gemv4_m1_avx512bf16(x, k, &w, rows, _mm512_loadu_si512((const void *)table), 1,
                            GEMV4_BLOCK64, 0.0f, y);
        return;
    }
    gemv_avx512bf16(x, ldx, m, k, &w, rows, bnb4_dec_avx512bf16, NULL, bnb4_scl_avx512bf16, table,
                    GEMV_BF16_PAIRS | GEMV_BF16_SCAN_F32, y, ldy);
}

void qs_mm_nf4abf16__avx512bf16_1x4x32(const qs_mm_weight *w, int64_t r0, int64_t rows,
                                       const uint16_t *x, int64_t ldx, int64_t m, float *y,
                                       int64_t ldy)
{
    bnb4_avx512bf16(qs_nf4_codebook, qs_mm_nf4abf16__ref, w, r0, rows, x, ldx, m, y, ldy);
}

void qs_mm_fp4abf16__avx512bf16_1x4x32(const qs_mm_weight *w, int64_t r0, int64_t rows,
                                       const uint16_t *x, int64_t ldx, int64_t m, float *y,
                                       int64_t ldy)
{
    bnb4_avx512bf16(qs_fp4_codebook, qs_mm_fp4abf16__ref, w, r0, rows, x, ldx, m, y, ldy);
}
