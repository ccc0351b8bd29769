/* SPDX-License-Identifier: MIT */
/*
 * Fused FP8 (E4M3, E5M2) GEMV with f32 activations for AVX-512 F/BW/DQ/VL
 * (include/qsparse/matmul.h; the reference is src/ref/matmul_ref.c). The codes decode exactly
 * in registers (E4M3 as an f16 of value * 2^-8 through VCVTPH2PS, times 2^8; E5M2 as the high
 * byte of an f16), the whole row is one segment and the per-tensor scale multiplies the row's 16-lane
 * sum once. M = 1 over whole 64-column steps: mm_e4m3_avx512.h; other tiles and tails:
 * mm_gemv_avx512.h.
 */
#include <immintrin.h>

#include "../core/kernels.h"
#include "../ref/ref.h"
#include "minifloat_avx512.h"
#include "mm_gemv_avx512.h"
#include "mm_e4m3_avx512.h"

static inline __m512 e4m3_dec_avx512(const uint8_t *row, int64_t c, int32_t aux, __mmask16 mask,
                                     const void *fmt)
{
    (void)aux;
    (void)fmt;
    /* value * 2^-8 through VCVTPH2PS (minifloat_avx512.h), times 2^8: exact, and fewer
     * operations than the integer field moves on 16 32-bit lanes */
    __m128i b = mask == 0xFFFF ? _mm_loadu_si128((const __m128i *)(row + c))
                               : _mm_maskz_loadu_epi8(mask, row + c);
    return _mm512_mul_ps(e4m3_decode16_f16_avx512(b), _mm512_set1_ps(256.0f));
}

/* E5M2 is the upper byte of the binary16 of the same value (NaN and Inf included). */
static inline __m512 e5m2_dec_avx512(const uint8_t *row, int64_t c, int32_t aux, __mmask16 mask,
                                     const void *fmt)
{
    __m128i b = mask == 0xFFFF ? _mm_loadu_si128((const __m128i *)(row + c))
                               : _mm_maskz_loadu_epi8(mask, row + c);
    (void)aux;
    (void)fmt;
    return _mm512_cvtph_ps(_mm256_slli_epi16(_mm256_cvtepu8_epi16(b), 8));
}

static inline float fp8_scl_avx512(const uint8_t *srow, int64_t row, int64_t s, int32_t *aux,
                                   const void *fmt)
{
    (void)srow;
    (void)row;
    (void)s;
    *aux = 0;
    return *(const float *)fmt;
}

/* The tensor scale: w->scale (sstride 0). */
void qs_mm_gemv_e4m3__avx512_1x4x16(const qs_mm_weight *w, int64_t r0, int64_t rows, const float *x,
                                    int64_t ldx, int64_t m, float *y, int64_t ldy)
{
    const int64_t k = w->k;
    const float scale = qs_ld_f32((const float *)w->scale);
    gemv_rows_avx512 wr = gemv_view_rows_avx512(w, r0, 0, k > 0 ? k : 1);
    if (m == 1 && k % 64 == 0 && k > 0) {
        e4m3_m1_rows_avx512(x, k, &wr, rows, 0, NULL, scale, y);
        return;
    }
    gemv_avx512(x, ldx, m, k, &wr, rows, e4m3_dec_avx512, fp8_scl_avx512, &scale, y, ldy);
}

void qs_mm_gemv_e5m2__avx512_1x4x16(const qs_mm_weight *w, int64_t r0, int64_t rows, const float *x,
                                    int64_t ldx, int64_t m, float *y, int64_t ldy)
{
    const int64_t k = w->k;
    const float scale = qs_ld_f32((const float *)w->scale);
    gemv_rows_avx512 wr = gemv_view_rows_avx512(w, r0, 0, k > 0 ? k : 1);
    gemv_avx512(x, ldx, m, k, &wr, rows, e5m2_dec_avx512, fp8_scl_avx512, &scale, y, ldy);
}
