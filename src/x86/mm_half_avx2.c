/* SPDX-License-Identifier: MIT */
/*
 * GEMV over dense f16 and bf16 weights with f32 activations for AVX2 + FMA + F16C
 * (include/qsparse/matmul.h; the reference is src/ref/matmul_ref.c): weights widen exactly in
 * registers (vcvtph2ps; bf16 shifted into the high half), one segment per row with no scale.
 * Tiles and tails: mm_gemv_avx2.h.
 */
#include <immintrin.h>

#include "../core/kernels.h"
#include "../ref/ref.h"
#include "mm_gemv_avx2.h"

static inline __m256 f16_dec_avx2(const uint8_t *p, int32_t aux, const void *fmt)
{
    (void)aux;
    (void)fmt;
    return _mm256_cvtph_ps(_mm_loadu_si128((const __m128i *)p));
}

static inline __m256 bf16_dec_avx2(const uint8_t *p, int32_t aux, const void *fmt)
{
    (void)aux;
    (void)fmt;
    return _mm256_castsi256_ps(
        _mm256_slli_epi32(_mm256_cvtepu16_epi32(_mm_loadu_si128((const __m128i *)p)), 16));
}

static inline float one_scl_avx2(const uint8_t *srow, int64_t row, int64_t s, int32_t *aux,
                                 const void *fmt)
{
    (void)srow;
    (void)row;
    (void)s;
    (void)fmt;
    *aux = 0;
    return 1.0f;
}

void qs_mm_gemv_f16__avx2_1x4x8(const qs_mm_weight *w, int64_t r0, int64_t rows, const float *x,
                                int64_t ldx, int64_t m, float *y, int64_t ldy)
{
    const int64_t k = w->k;
    gemv_rows_avx2 wr = gemv_view_rows_avx2(w, r0, 0, k > 0 ? k : 1, NULL, 0, 0);
    gemv_avx2(x, ldx, m, k, 16, &wr, rows, f16_dec_avx2, one_scl_avx2, NULL, y, ldy);
}

void qs_mm_gemv_bf16__avx2_1x4x8(const qs_mm_weight *w, int64_t r0, int64_t rows, const float *x,
                                 int64_t ldx, int64_t m, float *y, int64_t ldy)
{
    const int64_t k = w->k;
    gemv_rows_avx2 wr = gemv_view_rows_avx2(w, r0, 0, k > 0 ? k : 1, NULL, 0, 0);
    gemv_avx2(x, ldx, m, k, 16, &wr, rows, bf16_dec_avx2, one_scl_avx2, NULL, y, ldy);
}
