/* SPDX-License-Identifier: MIT */
/*
 * Fused MXFP4, MXFP8 and NVFP4 GEMV with f32 activations for AVX-512 F/BW/DQ/VL
 * (include/qsparse/matmul.h; the reference is src/ref/matmul_ref.c). E2M1 codes (element 2i in
 * the low nibble of byte i) look up their value in a 16-entry register table with vpermps, E4M3
 * codes decode through VCVTPH2PS (an f16 of value * 2^-8, times 2^8); each block's 16-lane sum
 * gets the block scale once: the E8M0 power of two (NaN for 0xFF) for MX, fl(E4M3(S & 0x7F) *
 * s_global) for NVFP4, as the reference forms it (both from a table formed once per call).
 * Tiles and tails: mm_gemv_avx512.h.
 */
#include <immintrin.h>

#include "../core/kernels.h"
#include "../ref/ref.h"
#include "minifloat_avx512.h"
#include "mm_gemv_avx512.h"

static inline __m512 e2m1_dec_avx512(const uint8_t *row, int64_t c, int32_t aux, __mmask16 mask,
                                     const void *fmt)
{
    (void)aux;
    (void)fmt;
    return _mm512_permutexvar_ps(gemv_nibbles_avx512(row + c / 2, mask, 0),
                                 _mm512_loadu_ps(qs_e2m1_values));
}

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

/* fmt: the 256 E8M0 values, formed once per call (a load per block, no compares). */
static inline float mx_scl_avx512(const uint8_t *srow, int64_t row, int64_t s, int32_t *aux,
                                  const void *fmt)
{
    (void)row;
    *aux = 0;
    return ((const float *)fmt)[srow[s]];
}

static void e8m0_table_avx512(float *t)
{
    for (int i = 0; i < 256; i++)
        t[i] = gemv_e8m0_avx512((uint8_t)i);
}

/* fmt: the 128 block scales fl(E4M3(i) * s_global), formed once per call (a load per block
 * instead of a decode and a multiply; the same bits). */
static inline float nvfp4_scl_avx512(const uint8_t *srow, int64_t row, int64_t s, int32_t *aux,
                                     const void *fmt)
{
    (void)row;
    *aux = 0;
    return ((const float *)fmt)[srow[s] & 0x7F];
}

void qs_mm_gemv_mxfp4__avx512_1x4x16(const qs_mm_weight *w, int64_t r0, int64_t rows,
                                     const float *x, int64_t ldx, int64_t m, float *y, int64_t ldy)
{
    gemv_rows_avx512 wr = gemv_view_rows_avx512(w, r0, 1, 32);
    float e8m0[256];
    e8m0_table_avx512(e8m0);
    gemv_avx512(x, ldx, m, w->k, &wr, rows, e2m1_dec_avx512, mx_scl_avx512, e8m0, y, ldy);
}

void qs_mm_gemv_mxfp8__avx512_1x4x16(const qs_mm_weight *w, int64_t r0, int64_t rows,
                                     const float *x, int64_t ldx, int64_t m, float *y, int64_t ldy)
{
    gemv_rows_avx512 wr = gemv_view_rows_avx512(w, r0, 1, 32);
    float e8m0[256];
    e8m0_table_avx512(e8m0);
    gemv_avx512(x, ldx, m, w->k, &wr, rows, e4m3_dec_avx512, mx_scl_avx512, e8m0, y, ldy);
}

void qs_mm_gemv_nvfp4__avx512_1x4x16(const qs_mm_weight *w, int64_t r0, int64_t rows,
                                     const float *x, int64_t ldx, int64_t m, float *y, int64_t ldy)
{
    gemv_rows_avx512 wr = gemv_view_rows_avx512(w, r0, 1, 16);
    float den[128];
    for (int i = 0; i < 128; i++)
        den[i] = gemv_e4m3_pos_avx512((uint8_t)i) * w->s_global;
    gemv_avx512(x, ldx, m, w->k, &wr, rows, e2m1_dec_avx512, nvfp4_scl_avx512, den, y, ldy);
}
