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

/* zp: the zero points of the call's first row (NULL: symmetric); mul: the view's scale_mul. */
typedef struct {
    const int8_t *zp;
    int64_t sstride;
    float mul;
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
    return qs_ld_f32((const float *)srow + s) * f->mul;
}

void qs_mm_gemv_int8__neon_1x4x16(const qs_mm_weight *w, int64_t r0, int64_t rows, const float *x,
                                  int64_t ldx, int64_t m, float *y, int64_t ldy)
{
    int8_fmt_neon f = {w->zp ? w->zp + r0 * w->sstride : NULL, w->sstride, w->scale_mul};
    gemv_rows_neon wr = gemv_view_rows_neon(w, r0, 4, w->group > 0 ? w->group : 1);
    gemv_neon(x, ldx, m, w->k, 8, &wr, rows, int8_dec_neon, int8_scl_neon, &f, y, ldy);
}
