/* SPDX-License-Identifier: MIT */
/*
 * Fused INT8 GEMV with f32 activations for NEON (include/qsparse/matmul.h; the reference is
 * src/ref/matmul_ref.c): every granularity, symmetric or with zero points, and LLM.int8 rows
 * (the driver passes each row's fl(SCB * fl(1/127)) as a row scale). Codes widen to 32 bits and
 * the segment's zero point is subtracted in integers (exact); each group's sum gets its scale
 * once. Tiles and tails: mm_gemv_neon.h.
 */
#include <arm_neon.h>

#include "../core/kernels.h"
#include "../ref/ref.h"
#include "mm_gemv_neon.h"

typedef struct {
    const int8_t *zp;
    int64_t sstride;
} int8_fmt_neon;

static inline void int8_dec_neon(const uint8_t *p, int32_t aux, const void *fmt, float32x4_t v[4])
{
    (void)fmt;
    gemv_widen_s8_neon(p, aux, v);
}

static inline float int8_scl_neon(const uint8_t *srow, int64_t row, int64_t s, int32_t *aux,
                                  const void *fmt)
{
    const int8_fmt_neon *f = fmt;
    *aux = f->zp ? f->zp[row * f->sstride + s] : 0;
    return qs_ld_f32((const float *)srow + s);
}

void qs_mm_gemv_int8__neon_1x4x16(const float *x, int64_t ldx, int64_t m, int64_t k,
                                  const int8_t *q, const float *scale, const int8_t *zp,
                                  int64_t group, int64_t sstride, int64_t rows, float *y,
                                  int64_t ldy)
{
    int8_fmt_neon f = {zp, sstride};
    gemv_rows_neon w = {(const uint8_t *)q, k, (const uint8_t *)scale, sstride * 4,
                        group > 0 ? group : 1};
    gemv_neon(x, ldx, m, k, 8, &w, rows, int8_dec_neon, int8_scl_neon, &f, y, ldy);
}
