/* SPDX-License-Identifier: MIT */
/*
 * GEMV over dense f16 and bf16 weights with f32 activations for NEON (include/qsparse/matmul.h;
 * the reference is src/ref/matmul_ref.c): weights widen exactly in registers (FCVTL; bf16
 * shifted into the high half), one segment per row with no scale. Tiles and tails:
 * mm_gemv_neon.h.
 */
#include <arm_neon.h>

#include "../core/kernels.h"
#include "../ref/ref.h"
#include "mm_gemv_neon.h"

static inline void f16_dec_neon(const uint8_t *p, int32_t aux, const void *fmt, float32x4_t v[4])
{
    (void)aux;
    (void)fmt;
    for (int q = 0; q < 4; q++)
        v[q] = vcvt_f32_f16(vreinterpret_f16_u16(vld1_u16((const uint16_t *)p + 4 * q)));
}

static inline void bf16_dec_neon(const uint8_t *p, int32_t aux, const void *fmt, float32x4_t v[4])
{
    (void)aux;
    (void)fmt;
    for (int q = 0; q < 4; q++)
        v[q] = vreinterpretq_f32_u32(vshll_n_u16(vld1_u16((const uint16_t *)p + 4 * q), 16));
}

static inline float one_scl_neon(const uint8_t *srow, int64_t row, int64_t s, int32_t *aux,
                                 const void *fmt)
{
    (void)srow;
    (void)row;
    (void)s;
    (void)fmt;
    *aux = 0;
    return 1.0f;
}

void qs_mm_gemv_f16__neon_1x4x16(const qs_mm_weight *w, int64_t r0, int64_t rows, const float *x,
                                 int64_t ldx, int64_t m, float *y, int64_t ldy)
{
    const int64_t k = w->k;
    gemv_rows_neon wr = gemv_view_rows_neon(w, r0, 0, k > 0 ? k : 1);
    gemv_neon(x, ldx, m, k, 16, &wr, rows, f16_dec_neon, one_scl_neon, NULL, y, ldy);
}

void qs_mm_gemv_bf16__neon_1x4x16(const qs_mm_weight *w, int64_t r0, int64_t rows, const float *x,
                                  int64_t ldx, int64_t m, float *y, int64_t ldy)
{
    const int64_t k = w->k;
    gemv_rows_neon wr = gemv_view_rows_neon(w, r0, 0, k > 0 ? k : 1);
    gemv_neon(x, ldx, m, k, 16, &wr, rows, bf16_dec_neon, one_scl_neon, NULL, y, ldy);
}
