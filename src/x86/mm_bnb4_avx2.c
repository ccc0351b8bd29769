/* SPDX-License-Identifier: MIT */
/*
 * Fused NF4 / FP4 GEMV for AVX2 + FMA (include/qsparse/matmul.h; the reference is
 * src/ref/matmul_ref.c): codes (element 2i in the high nibble of byte i) widen in element order
 * and look up the 16-entry codebook (32 codes a step by the byte planes of lut16_avx2.h, the
 * last columns of a block by two vpermps and a blend); each block's 8-lane sum of code value * x
 * gets the block's absmax once. Tiles and tails: mm_gemv_avx2.h. The fast path
 * needs rows that start on a block (start and k multiples of the block) and blocks of a multiple
 * of 8; other shapes (odd blocks, rows that cut blocks) run the reference.
 */
#include <immintrin.h>

#include "../core/kernels.h"
#include "../ref/ref.h"
#include "mm_gemv_avx2.h"

static inline __m256 bnb4_dec_avx2(const uint8_t *p, int32_t aux, const void *fmt)
{
    const float *book = fmt;
    (void)aux;
    return gemv_lut16_avx2(gemv_nibbles_avx2(p, 1), _mm256_loadu_ps(book),
                           _mm256_loadu_ps(book + 8));
}

static inline float bnb4_scl_avx2(const uint8_t *srow, int64_t row, int64_t s, int32_t *aux,
                                  const void *fmt)
{
    (void)row;
    (void)fmt;
    *aux = 0;
    return qs_ld_f32((const float *)srow + s);
}

/* Rows r0 ... of the view: flat elements from start = r0 * k, absmax in blocks of w->group. */
static inline __attribute__((always_inline)) void
bnb4_gemv_avx2(const float *book, qs_mm_gemv_fn *ref, const qs_mm_weight *wv, int64_t r0,
               int64_t rows, const float *x, int64_t ldx, int64_t m, float *y, int64_t ldy)
{
    const int64_t k = wv->k, start = r0 * k;
    const int32_t block = (int32_t)wv->group;
    const uint8_t *data = wv->data;
    const float *absmax = wv->scale;

    if (block % 8 != 0 || k % block != 0 || start % block != 0) {
        ref(wv, r0, rows, x, ldx, m, y, ldy);
        return;
    }
    const lut16_avx2 lut = lut16_avx2_load(book);
    gemv_rows_avx2 w = {data + start / 2, k / 2, (const uint8_t *)(absmax + start / block),
                        (k / block) * 4, block, &lut, 1, 0};
    gemv_avx2(x, ldx, m, k, 4, &w, rows, bnb4_dec_avx2, bnb4_scl_avx2, book, y, ldy);
}

void qs_mm_gemv_nf4__avx2_1x4x8(const qs_mm_weight *w, int64_t r0, int64_t rows, const float *x,
                                int64_t ldx, int64_t m, float *y, int64_t ldy)
{
    bnb4_gemv_avx2(qs_nf4_codebook, qs_mm_gemv_nf4__ref, w, r0, rows, x, ldx, m, y, ldy);
}

void qs_mm_gemv_fp4__avx2_1x4x8(const qs_mm_weight *w, int64_t r0, int64_t rows, const float *x,
                                int64_t ldx, int64_t m, float *y, int64_t ldy)
{
    bnb4_gemv_avx2(qs_fp4_codebook, qs_mm_gemv_fp4__ref, w, r0, rows, x, ldx, m, y, ldy);
}
