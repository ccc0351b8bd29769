/* SPDX-License-Identifier: MIT */
/*
 * GEMV over dense f16 and bf16 weights with f32 activations for AVX-512 F/BW/DQ/VL
 * (include/qsparse/matmul.h; the reference is src/ref/matmul_ref.c): weights widen exactly in
 * registers (vcvtph2ps; bf16 shifted into the high half), one segment per row with no scale.
 * Tiles and tails: mm_gemv_avx512.h.
 */
#include <immintrin.h>

#include "../core/kernels.h"
#include "../ref/ref.h"
#include "mm_gemv_avx512.h"

static inline __m256i half16_avx512(const uint8_t *row, int64_t c, __mmask16 mask)
{
    const uint16_t *p = (const uint16_t *)row + c;
    return mask == 0xFFFF ? _mm256_loadu_si256((const __m256i *)p) : _mm256_maskz_loadu_epi16(mask, p);
}

static inline __m512 f16_dec_avx512(const uint8_t *row, int64_t c, int32_t aux, __mmask16 mask,
                                    const void *fmt)
{
    (void)aux;
    (void)fmt;
    return _mm512_cvtph_ps(half16_avx512(row, c, mask));
}

static inline __m512 bf16_dec_avx512(const uint8_t *row, int64_t c, int32_t aux, __mmask16 mask,
                                     const void *fmt)
{
    (void)aux;
    (void)fmt;
    return _mm512_castsi512_ps(_mm512_slli_epi32(_mm512_cvtepu16_epi32(half16_avx512(row, c, mask)), 16));
}

static inline float one_scl_avx512(const uint8_t *srow, int64_t row, int64_t s, int32_t *aux,
                                   const void *fmt)
{
    (void)srow;
    (void)row;
    (void)s;
    (void)fmt;
    *aux = 0;
    return 1.0f;
}

void qs_mm_gemv_f16__avx512_1x4x16(const qs_mm_weight *w, int64_t r0, int64_t rows, const float *x,
                                   int64_t ldx, int64_t m, float *y, int64_t ldy)
{
    const int64_t k = w->k;
    gemv_rows_avx512 wr = gemv_view_rows_avx512(w, r0, 0, k > 0 ? k : 1);
    gemv_avx512(x, ldx, m, k, &wr, rows, f16_dec_avx512, one_scl_avx512, NULL, y, ldy);
}

void qs_mm_gemv_bf16__avx512_1x4x16(const qs_mm_weight *w, int64_t r0, int64_t rows, const float *x,
                                    int64_t ldx, int64_t m, float *y, int64_t ldy)
{
    const int64_t k = w->k;
    gemv_rows_avx512 wr = gemv_view_rows_avx512(w, r0, 0, k > 0 ? k : 1);
    gemv_avx512(x, ldx, m, k, &wr, rows, bf16_dec_avx512, one_scl_avx512, NULL, y, ldy);
}
