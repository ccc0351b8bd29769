/* SPDX-License-Identifier: MIT */
/*
 * INT8 GEMV with bf16 activations for AVX512-BF16 (include/qsparse/matmul.h; the reference is
 * src/ref/mm_abf16_ref.c): every granularity (tensor, row, group; symmetric or with zero points)
 * and LLM.int8 rows (unit scales applied as fl(scale * scale_mul)). q - zp lies in [-255, 255],
 * which bf16 holds exactly, but no instruction makes bf16 of an integer: the codes widen to 32
 * bits, the segment's zero point is subtracted and VCVTDQ2PS converts them exactly. Tiles of up
 * to 4 x rows multiply these f32 values with x widened to f32 by FMA (the same exact products as
 * vdpbf16ps; packing them to bf16, a vpermt2w per 32 columns, made the M = 1 kernel 1.7x
 * slower); tiles of 8 x rows pack them for vdpbf16ps, whose products the x rows share. Tiles and
 * tails: mm_gemv_avx512bf16.h.
 */
#include <immintrin.h>

#include "../core/kernels.h"
#include "../ref/ref.h"
#include "mm_gemv_avx512bf16.h"

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

void qs_mm_int8abf16__avx512bf16_1x4x32(const qs_mm_weight *w, int64_t r0, int64_t rows,
                                        const uint16_t *x, int64_t ldx, int64_t m, float *y,
                                        int64_t ldy)
{
    int8_fmt_avx512bf16 f = {w->zp ? w->zp + r0 * w->sstride : NULL, w->sstride, w->scale_mul};
    gemv_rows_avx512 wr = gemv_view_rows_avx512(w, r0, 4, w->group > 0 ? w->group : 1);
    gemv_avx512bf16(x, ldx, m, w->k, &wr, rows, int8_dec16_avx512bf16, int8_dec_avx512bf16,
                    int8_scl_avx512bf16, &f, GEMV_BF16_SCAN_F32, y, ldy);
}
