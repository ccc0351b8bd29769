/* SPDX-License-Identifier: MIT */
/*
 * Fused FP8 (E4M3, E5M2) GEMV with f32 activations for NEON (include/qsparse/matmul.h; the
 * reference is src/ref/matmul_ref.c): E4M3 codes decode by one exact multiply (neon_common.h),
 * E5M2 codes as the high byte of an f16; the whole row is one segment and the per-tensor scale
 * multiplies the row's sum once. Tiles and tails: mm_gemv_neon.h.
 */
#include <arm_neon.h>

#include "../core/kernels.h"
#include "../ref/ref.h"
#include "mm_gemv_neon.h"

static inline void e4m3_dec_neon(const uint8_t *p, int32_t aux, const void *fmt, float32x4_t v[4])
{
    uint32x4_t c[4];
    (void)aux;
    (void)fmt;
    widen_u8_neon(vld1q_u8(p), c);
    for (int q = 0; q < 4; q++)
        v[q] = e4m3_decode_neon(c[q]);
}

static inline void e5m2_dec_neon(const uint8_t *p, int32_t aux, const void *fmt, float32x4_t v[4])
{
    uint8x16_t b = vld1q_u8(p);
    uint16x8_t lo = vshll_n_u8(vget_low_u8(b), 8), hi = vshll_n_u8(vget_high_u8(b), 8);
    (void)aux;
    (void)fmt;
    v[0] = vcvt_f32_f16(vreinterpret_f16_u16(vget_low_u16(lo)));
    v[1] = vcvt_f32_f16(vreinterpret_f16_u16(vget_high_u16(lo)));
    v[2] = vcvt_f32_f16(vreinterpret_f16_u16(vget_low_u16(hi)));
    v[3] = vcvt_f32_f16(vreinterpret_f16_u16(vget_high_u16(hi)));
}

static inline float fp8_scl_neon(const uint8_t *srow, int64_t row, int64_t s, int32_t *aux,
                                 const void *fmt)
{
    (void)srow;
    (void)row;
    (void)s;
    *aux = 0;
    return *(const float *)fmt;
}

/* The tensor scale: w->scale (sstride 0). */
void qs_mm_gemv_e4m3__neon_1x4x16(const qs_mm_weight *w, int64_t r0, int64_t rows, const float *x,
                                  int64_t ldx, int64_t m, float *y, int64_t ldy)
{
    const int64_t k = w->k;
    const float scale = qs_ld_f32((const float *)w->scale);
    gemv_rows_neon wr = gemv_view_rows_neon(w, r0, 0, k > 0 ? k : 1);
    gemv_neon(x, ldx, m, k, 8, &wr, rows, e4m3_dec_neon, fp8_scl_neon, &scale, y, ldy);
}

void qs_mm_gemv_e5m2__neon_1x4x16(const qs_mm_weight *w, int64_t r0, int64_t rows, const float *x,
                                  int64_t ldx, int64_t m, float *y, int64_t ldy)
{
    const int64_t k = w->k;
    const float scale = qs_ld_f32((const float *)w->scale);
    gemv_rows_neon wr = gemv_view_rows_neon(w, r0, 0, k > 0 ? k : 1);
    gemv_neon(x, ldx, m, k, 8, &wr, rows, e5m2_dec_neon, fp8_scl_neon, &scale, y, ldy);
}
