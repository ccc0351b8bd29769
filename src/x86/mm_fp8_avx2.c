/* SPDX-License-Identifier: MIT */
/*
 * Fused FP8 (E4M3, E5M2) GEMV with f32 activations for AVX2 + FMA + F16C
 * (include/qsparse/matmul.h; the reference is src/ref/matmul_ref.c): codes decode exactly in
 * registers (E4M3 as an f16 of value * 2^-8, times 2^8, 16 codes a step; E5M2 as the high byte
 * of an f16), the whole row is one segment and the per-tensor scale multiplies the row's sum
 * once. Tiles and tails: mm_gemv_avx2.h.
 */
#include <immintrin.h>

#include "../core/kernels.h"
#include "../ref/ref.h"
#include "minifloat_avx2.h"
#include "mm_gemv_avx2.h"

static inline __m256 e4m3_dec_avx2(const uint8_t *p, int32_t aux, const void *fmt)
{
    (void)aux;
    (void)fmt;
    return gemv_e4m3_f16_avx2(p);
}

static inline __m256 e5m2_dec_avx2(const uint8_t *p, int32_t aux, const void *fmt)
{
    (void)aux;
    (void)fmt;
    return _mm256_cvtph_ps(
        _mm_slli_epi16(_mm_cvtepu8_epi16(_mm_loadl_epi64((const __m128i *)p)), 8));
}

static inline float fp8_scl_avx2(const uint8_t *srow, int64_t row, int64_t s, int32_t *aux,
                                 const void *fmt)
{
    (void)srow;
    (void)row;
    (void)s;
    *aux = 0;
    return *(const float *)fmt;
}

/* The tensor scale: w->scale (sstride 0). */
void qs_mm_gemv_e4m3__avx2_1x4x8(const qs_mm_weight *w, int64_t r0, int64_t rows, const float *x,
                                 int64_t ldx, int64_t m, float *y, int64_t ldy)
{
    const int64_t k = w->k;
    const float scale = qs_ld_f32((const float *)w->scale);
    gemv_rows_avx2 wr = gemv_view_rows_avx2(w, r0, 0, k > 0 ? k : 1, NULL, 0, 1);
    gemv_avx2(x, ldx, m, k, 8, &wr, rows, e4m3_dec_avx2, fp8_scl_avx2, &scale, y, ldy);
}

void qs_mm_gemv_e5m2__avx2_1x4x8(const qs_mm_weight *w, int64_t r0, int64_t rows, const float *x,
                                 int64_t ldx, int64_t m, float *y, int64_t ldy)
{
    const int64_t k = w->k;
    const float scale = qs_ld_f32((const float *)w->scale);
    gemv_rows_avx2 wr = gemv_view_rows_avx2(w, r0, 0, k > 0 ? k : 1, NULL, 0, 0);
    gemv_avx2(x, ldx, m, k, 8, &wr, rows, e5m2_dec_avx2, fp8_scl_avx2, &scale, y, ldy);
}
