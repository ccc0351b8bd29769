/* SPDX-License-Identifier: MIT */
/*
 * The formats of the bf16-activation kernels (mm_*_avx512bf16.c and mm_abf16_amx.c): for each, the
 * decoder of 32 columns of a W row to bf16 in column order and the scale rule of a segment, in the
 * forms the drivers take (mm_gemv_avx512bf16.h: dec, dec32, scl and their fmt). Include only from
 * files compiled with the AVX512-BF16 flags.
 */
#ifndef QS_X86_MM_ABF16_FMT_AVX512BF16_H
#define QS_X86_MM_ABF16_FMT_AVX512BF16_H

#include "../ref/ref.h"
#include "mm_gemv_avx512bf16.h"

/* ---- NF4 / FP4: element 2i in the high nibble of byte i; fmt: the codebook table ---- */

static inline __m512i bnb4_dec_avx512bf16(const uint8_t *row, int64_t c, int32_t aux,
                                          __mmask32 mask, const void *fmt)
{
    (void)aux;
    /* the high nibble (element 2i) in the low half of each 32-bit lane */
    return _mm512_permutexvar_epi16(nibble_idx_avx512bf16(row + c / 2, mask, _mm512_set1_epi32(4)),
                                    _mm512_loadu_si512(fmt));
}

static inline float bnb4_scl_avx512bf16(const uint8_t *srow, int64_t row, int64_t s, int32_t *aux,
                                        const void *fmt)
{
    (void)fmt;
    (void)row;
    *aux = 0;
    return qs_ld_f32((const float *)srow + s);
}

/* ---- MXFP4, MXFP8, NVFP4 ---- */

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

static inline void e8m0_fmt_avx512bf16(e2m1_fmt_avx512bf16 *f)
{
    _mm512_storeu_si512((void *)f->book, book_table_avx512bf16(qs_e2m1_values));
    for (int i = 0; i < 256; i++)
        f->scale[i] = gemv_e8m0_avx512((uint8_t)i);
}

/* ---- FP8 E4M3 (above), E5M2; fmt: the tensor scale ---- */

static inline __m512i e5m2_dec_avx512bf16(const uint8_t *row, int64_t c, int32_t aux,
                                          __mmask32 mask, const void *fmt)
{
    (void)aux;
    (void)fmt;
    return e5m2_bf16_avx512bf16(row + c, mask, e5m2_spec_avx512bf16());
}

static inline float fp8_scl_avx512bf16(const uint8_t *srow, int64_t row, int64_t s, int32_t *aux,
                                       const void *fmt)
{
    (void)srow;
    (void)row;
    (void)s;
    *aux = 0;
    return *(const float *)fmt;
}

/* ---- INT8 ---- */

/* zp: the zero points of the call's first row (NULL: symmetric); mul: the view's scale_mul. */
typedef struct {
    const int8_t *zp;
    int64_t sstride;
    float mul;
} int8_fmt_avx512bf16;

/* 32 codes minus the segment's zero point as bf16 (exact): the f32 values' upper halves,
 * gathered in column order by one vpermt2w. */
static inline __m512i int8_dec16_avx512bf16(const uint8_t *row, int64_t c, int32_t aux,
                                            __mmask32 mask, const void *fmt)
{
    const __m512i hi_words =
        _mm512_set_epi16(63, 61, 59, 57, 55, 53, 51, 49, 47, 45, 43, 41, 39, 37, 35, 33, 31, 29, 27,
                         25, 23, 21, 19, 17, 15, 13, 11, 9, 7, 5, 3, 1);
    const __m512i z = _mm512_set1_epi32(aux);
    __m256i b = mask == (__mmask32)0xFFFFFFFFu ? _mm256_loadu_si256((const __m256i *)(row + c))
                                               : _mm256_maskz_loadu_epi8(mask, row + c);
    __m512 lo =
        _mm512_cvtepi32_ps(_mm512_sub_epi32(_mm512_cvtepi8_epi32(_mm256_castsi256_si128(b)), z));
    __m512 hi = _mm512_cvtepi32_ps(
        _mm512_sub_epi32(_mm512_cvtepi8_epi32(_mm256_extracti128_si256(b, 1)), z));
    (void)fmt;
    return _mm512_permutex2var_epi16(_mm512_castps_si512(lo), hi_words, _mm512_castps_si512(hi));
}

/* 16 codes minus the segment's zero point, as f32 (exact). */
static inline __m512 int8_dec_avx512bf16(const uint8_t *row, int64_t c, int32_t aux, __mmask16 mask,
                                         const void *fmt)
{
    __m128i b = mask == 0xFFFF ? _mm_loadu_si128((const __m128i *)(row + c))
                               : _mm_maskz_loadu_epi8(mask, row + c);
    (void)fmt;
    return _mm512_cvtepi32_ps(_mm512_sub_epi32(_mm512_cvtepi8_epi32(b), _mm512_set1_epi32(aux)));
}

static inline float int8_scl_avx512bf16(const uint8_t *srow, int64_t row, int64_t s, int32_t *aux,
                                        const void *fmt)
{
    const int8_fmt_avx512bf16 *f = fmt;
    *aux = f->zp ? f->zp[row * f->sstride + s] : 0;
    return qs_ld_f32((const float *)srow + s) * f->mul;
}

/* ---- bf16 weights: no scale ---- */

static inline __m512i bf16_dec_avx512bf16(const uint8_t *row, int64_t c, int32_t aux,
                                          __mmask32 mask, const void *fmt)
{
    const uint16_t *p = (const uint16_t *)(const void *)row + c;
    (void)aux;
    (void)fmt;
    return mask == (__mmask32)0xFFFFFFFFu ? _mm512_loadu_si512((const void *)p)
                                          : _mm512_maskz_loadu_epi16(mask, p);
}

static inline float one_scl_avx512bf16(const uint8_t *srow, int64_t row, int64_t s, int32_t *aux,
                                       const void *fmt)
{
    (void)srow;
    (void)row;
    (void)s;
    (void)fmt;
    *aux = 0;
    return 1.0f;
}

#endif /* QS_X86_MM_ABF16_FMT_AVX512BF16_H */
