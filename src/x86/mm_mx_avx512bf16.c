/* SPDX-License-Identifier: MIT */
/*
 * MXFP4, MXFP8 and NVFP4 GEMV with bf16 activations for AVX512-BF16 (include/qsparse/matmul.h;
 * the reference is src/ref/mm_abf16_ref.c). E2M1 codes (element 2i in the low nibble of byte i)
 * look up their bf16 value with one vpermw per 32, E4M3 codes decode with integer steps
 * (mm_gemv_avx512bf16.h); both are exact in bf16. Each block's lane sums get the block scale once:
 * the E8M0 power of two (NaN for 0xFF) for MX, fl(E4M3(S & 0x7F) * s_global) for NVFP4, from
 * tables formed once per call as in mm_mx_avx512.c; NVFP4's blocks of 16 go two to a step. An
 * E8M0 scale is never infinite, an NVFP4 one only where the table holds an infinity (a huge
 * s_global): only then does the driver test block by block.
 */
#include <immintrin.h>

#include "../core/kernels.h"
#include "../ref/ref.h"
#include "mm_gemv_avx512bf16.h"

/* fmt of the E2M1 formats: the vpermw table first (then the scale table) */
typedef struct {
    uint16_t book[32];
    float scale[256];
} e2m1_fmt_avx512bf16;

static inline __m512i e2m1_dec_avx512bf16(const uint8_t *row, int64_t c, int32_t aux,
                                          __mmask32 mask, const void *fmt)
{
    (void)aux;
    /* the low nibble (element 2i) in the low half of each 32-bit lane */
    return _mm512_permutexvar_epi16(
        nibble_idx_avx512bf16(row + c / 2, mask, _mm512_set1_epi32(4 << 16)),
        _mm512_loadu_si512(fmt));
}

static inline __m512i e4m3_dec_avx512bf16(const uint8_t *row, int64_t c, int32_t aux,
                                          __mmask32 mask, const void *fmt)
{
    (void)aux;
    (void)fmt;
    return e4m3_bf16_avx512bf16(row + c, mask, e4m3_spec_avx512bf16());
}

/* The E8M0 value of the block's scale byte, from the 256-entry table. */
static inline float mx_scl_avx512bf16(const uint8_t *srow, int64_t row, int64_t s, int32_t *aux,
                                      const void *fmt)
{
    (void)row;
    *aux = 0;
    return ((const e2m1_fmt_avx512bf16 *)fmt)->scale[srow[s]];
}

static inline float nvfp4_scl_avx512bf16(const uint8_t *srow, int64_t row, int64_t s, int32_t *aux,
                                         const void *fmt)
{
    (void)row;
    *aux = 0;
    return ((const e2m1_fmt_avx512bf16 *)fmt)->scale[srow[s] & 0x7F];
}

static void e8m0_fmt_avx512bf16(e2m1_fmt_avx512bf16 *f)
{
    _mm512_storeu_si512((void *)f->book, book_table_avx512bf16(qs_e2m1_values));
    for (int i = 0; i < 256; i++)
        f->scale[i] = gemv_e8m0_avx512((uint8_t)i);
}

void qs_mm_mxfp4abf16__avx512bf16_1x4x32(const qs_mm_weight *w, int64_t r0, int64_t rows,
                                         const uint16_t *x, int64_t ldx, int64_t m, float *y,
                                         int64_t ldy)
{
    gemv_rows_avx512 wr = gemv_view_rows_avx512(w, r0, 1, 32);
    e2m1_fmt_avx512bf16 f;
    e8m0_fmt_avx512bf16(&f);
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
    gemv_avx512bf16(x, ldx, m, w->k, &wr, rows, e2m1_dec_avx512bf16, NULL, nvfp4_scl_avx512bf16, &f,
                    flags, y, ldy);
}
