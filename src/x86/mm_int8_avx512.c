/* SPDX-License-Identifier: MIT */
/*
 * Fused INT8 GEMV with f32 activations for AVX-512 F/BW/DQ/VL (include/qsparse/matmul.h; the
 * reference is src/ref/matmul_ref.c): every granularity (tensor, row, group; symmetric or with
 * zero points) and LLM.int8 rows (each unit scale applied as fl(scale * scale_mul): fl(SCB *
 * fl(1/127)) for LLM.int8). Codes widen to 32 bits, the segment's zero point is subtracted in
 * integers (exact) and the result converted (exact), so the unscaled values are those of the
 * reference; each group's 16-lane sum gets the group scale once. Tiles and tails:
 * mm_gemv_avx512.h.
 */
#include <immintrin.h>

#include "../core/kernels.h"
#include "../ref/ref.h"
#include "mm_gemv_avx512.h"

/* zp: the zero points of the call's first row (NULL: symmetric); mul: the view's scale_mul. */
typedef struct {
    const int8_t *zp;
    int64_t sstride;
    float mul;
} int8_fmt_avx512;

static inline __m512 int8_dec_avx512(const uint8_t *row, int64_t c, int32_t aux, __mmask16 mask,
                                     const void *fmt)
{
    __m128i b = mask == 0xFFFF ? _mm_loadu_si128((const __m128i *)(row + c))
                               : _mm_maskz_loadu_epi8(mask, row + c);
    (void)fmt;
    return _mm512_cvtepi32_ps(_mm512_sub_epi32(_mm512_cvtepi8_epi32(b), _mm512_set1_epi32(aux)));
}

static inline float int8_scl_avx512(const uint8_t *srow, int64_t row, int64_t s, int32_t *aux,
                                    const void *fmt)
{
    const int8_fmt_avx512 *f = fmt;
    *aux = f->zp ? f->zp[row * f->sstride + s] : 0;
    return qs_ld_f32((const float *)srow + s) * f->mul;
}

void qs_mm_gemv_int8__avx512_1x4x16(const qs_mm_weight *w, int64_t r0, int64_t rows, const float *x,
                                    int64_t ldx, int64_t m, float *y, int64_t ldy)
{
    int8_fmt_avx512 f = {w->zp ? w->zp + r0 * w->sstride : NULL, w->sstride, w->scale_mul};
    gemv_rows_avx512 wr = gemv_view_rows_avx512(w, r0, 4, w->group > 0 ? w->group : 1);
    gemv_avx512(x, ldx, m, w->k, &wr, rows, int8_dec_avx512, int8_scl_avx512, &f, y, ldy);
}
