/* SPDX-License-Identifier: MIT */
/*
 * Fused INT8 GEMV with f32 activations for AVX2 + FMA (include/qsparse/matmul.h; the reference
 * is src/ref/matmul_ref.c): every granularity, symmetric or with zero points, and LLM.int8 rows
 * (each unit scale applied as fl(scale * scale_mul): fl(SCB * fl(1/127)) for LLM.int8). Codes
 * widen to 32 bits and the segment's zero point is subtracted in integers (exact), so the
 * unscaled values are those of the reference; each group's sum gets its scale once. Tiles and
 * tails: mm_gemv_avx2.h.
 */
#include <immintrin.h>

#include "../core/kernels.h"
#include "../ref/ref.h"
#include "mm_gemv_avx2.h"

/* zp: the zero points of the call's first row (NULL: symmetric); mul: the view's scale_mul. */
typedef struct {
    const int8_t *zp;
    int64_t sstride;
    float mul;
} int8_fmt_avx2;

static inline __m256 int8_dec_avx2(const uint8_t *p, int32_t aux, const void *fmt)
{
    (void)fmt;
    return _mm256_cvtepi32_ps(_mm256_sub_epi32(
        _mm256_cvtepi8_epi32(_mm_loadl_epi64((const __m128i *)p)), _mm256_set1_epi32(aux)));
}

static inline float int8_scl_avx2(const uint8_t *srow, int64_t row, int64_t s, int32_t *aux,
                                  const void *fmt)
{
    const int8_fmt_avx2 *f = fmt;
    *aux = f->zp ? f->zp[row * f->sstride + s] : 0;
    return qs_ld_f32((const float *)srow + s) * f->mul;
}

void qs_mm_gemv_int8__avx2_1x4x8(const qs_mm_weight *w, int64_t r0, int64_t rows, const float *x,
                                 int64_t ldx, int64_t m, float *y, int64_t ldy)
{
    int8_fmt_avx2 f = {w->zp ? w->zp + r0 * w->sstride : NULL, w->sstride, w->scale_mul};
    gemv_rows_avx2 wr = gemv_view_rows_avx2(w, r0, 4, w->group > 0 ? w->group : 1, NULL, 0, 0);
    gemv_avx2(x, ldx, m, w->k, 8, &wr, rows, int8_dec_avx2, int8_scl_avx2, &f, y, ldy);
}
