/* SPDX-License-Identifier: MIT */
/*
 * Fused MXFP4, MXFP8 and NVFP4 GEMV with f32 activations for AVX2 + FMA
 * (include/qsparse/matmul.h; the reference is src/ref/matmul_ref.c): E2M1 codes (element 2i in
 * the low nibble of byte i) look up a 16-entry table, 32 codes a step by the byte planes of
 * lut16_avx2.h (two NVFP4 blocks a step), a short last piece by two vpermps and a blend; E4M3
 * codes decode through VCVTPH2PS (an f16 of value * 2^-8, times 2^8), 16 a step; each block's
 * sum gets the block
 * scale once: the E8M0 power of two (NaN for 0xFF) for MX, fl(E4M3(S & 0x7F) * s_global) for
 * NVFP4, as the reference forms it (both from a table formed once per call). Tiles and tails:
 * mm_gemv_avx2.h.
 */
#include <immintrin.h>

#include "../core/kernels.h"
#include "../ref/ref.h"
#include "minifloat_avx2.h"
#include "mm_gemv_avx2.h"

static inline __m256 e2m1_dec_avx2(const uint8_t *p, int32_t aux, const void *fmt)
{
    (void)aux;
    (void)fmt;
    return gemv_lut16_avx2(gemv_nibbles_avx2(p, 0), _mm256_loadu_ps(qs_e2m1_values),
                           _mm256_loadu_ps(qs_e2m1_values + 8));
}

static inline __m256 e4m3_dec_avx2(const uint8_t *p, int32_t aux, const void *fmt)
{
    (void)aux;
    (void)fmt;
    return gemv_e4m3_f16_avx2(p);
}

/* fmt: the 256 E8M0 values, formed once per call (a load per block, no compares). */
static inline float mx_scl_avx2(const uint8_t *srow, int64_t row, int64_t s, int32_t *aux,
                                const void *fmt)
{
    (void)row;
    *aux = 0;
    return ((const float *)fmt)[srow[s]];
}

static void e8m0_table_avx2(float *t)
{
    for (int i = 0; i < 256; i++)
        t[i] = gemv_e8m0_avx2((uint8_t)i);
}

/* fmt: the 128 block scales fl(E4M3(i) * s_global), formed once per call (the same bits). */
static inline float nvfp4_scl_avx2(const uint8_t *srow, int64_t row, int64_t s, int32_t *aux,
                                   const void *fmt)
{
    (void)row;
    *aux = 0;
    return ((const float *)fmt)[srow[s] & 0x7F];
}

void qs_mm_gemv_mxfp4__avx2_1x4x8(const qs_mm_weight *w, int64_t r0, int64_t rows, const float *x,
                                  int64_t ldx, int64_t m, float *y, int64_t ldy)
{
    const lut16_avx2 lut = lut16_avx2_load(qs_e2m1_values);
    gemv_rows_avx2 wr = gemv_view_rows_avx2(w, r0, 1, 32, &lut, 0, 0);
    float e8m0[256];
    e8m0_table_avx2(e8m0);
    gemv_avx2(x, ldx, m, w->k, 4, &wr, rows, e2m1_dec_avx2, mx_scl_avx2, e8m0, y, ldy);
}

void qs_mm_gemv_mxfp8__avx2_1x4x8(const qs_mm_weight *w, int64_t r0, int64_t rows, const float *x,
                                  int64_t ldx, int64_t m, float *y, int64_t ldy)
{
    gemv_rows_avx2 wr = gemv_view_rows_avx2(w, r0, 1, 32, NULL, 0, 1);
    float e8m0[256];
    e8m0_table_avx2(e8m0);
    gemv_avx2(x, ldx, m, w->k, 8, &wr, rows, e4m3_dec_avx2, mx_scl_avx2, e8m0, y, ldy);
}

void qs_mm_gemv_nvfp4__avx2_1x4x8(const qs_mm_weight *w, int64_t r0, int64_t rows, const float *x,
                                  int64_t ldx, int64_t m, float *y, int64_t ldy)
{
    const lut16_avx2 lut = lut16_avx2_load(qs_e2m1_values);
    gemv_rows_avx2 wr = gemv_view_rows_avx2(w, r0, 1, 16, &lut, 0, 0);
    float den[128];
    for (int i = 0; i < 128; i++)
        den[i] = gemv_e4m3_pos_avx2((uint8_t)i) * w->s_global;
    gemv_avx2(x, ldx, m, w->k, 4, &wr, rows, e2m1_dec_avx2, nvfp4_scl_avx2, den, y, ldy);
}
