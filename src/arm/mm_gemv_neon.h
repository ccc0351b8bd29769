/* SPDX-License-Identifier: MIT */
/*
 * The multi-row GEMV driver shared by the fused matmul kernels for NEON (mm_*_neon.c;
 * include/qsparse/matmul.h, src/ref/matmul_ref.c), the AArch64 counterpart of
 * src/x86/mm_gemv_avx512.h. A format supplies, as function constants (inlined per kernel file):
 *
 * - dec(p, aux, fmt, v): the unscaled values of 16 consecutive elements whose codes start at
 *   byte p (BITS / 8 bytes each, BITS = 4, 8 or 16; reads exactly 2 * BITS bytes), in v[0..3];
 * - scl(srow, row, s, &aux, fmt): the scale of segment s of W row `row` and a per-segment
 *   integer for dec (the INT8 zero point; 0 elsewhere).
 *
 * Per 16 columns the four value vectors of each W row meet the four x vectors of each x row in
 * one 4-lane accumulator per (x row, W row); each segment's sum gets its scale once (one FMA per
 * segment; an infinite scale multiplies the segment's total instead, as the reference does); the
 * lanes are added at the end. The last piece of a segment shorter than 16 is copied to a zeroed
 * stack buffer (codes and x): code 0 is finite in every format, so the padding adds 0.
 * Tiles: MI rows of x against R rows of W, 1 x 4 for M = 1, 2 x 2 and 4 x 1 for M > 1.
 */
#ifndef QS_ARM_MM_GEMV_NEON_H
#define QS_ARM_MM_GEMV_NEON_H

#include <string.h>

#include <arm_neon.h>

#include "../core/kernels.h"
#include "../ref/ref.h"
#include "neon_common.h"

typedef void (*gemv_dec_neon_fn)(const uint8_t *p, int32_t aux, const void *fmt,
                                 float32x4_t v[4]);
typedef float (*gemv_scl_neon_fn)(const uint8_t *srow, int64_t row, int64_t s, int32_t *aux,
                                  const void *fmt);

/* Row r's codes at data + r * dstride, its scales at scale + r * sstride (bytes). */
typedef struct {
    const uint8_t *data;
    int64_t dstride;
    const uint8_t *scale;
    int64_t sstride;
    int64_t seg;
} gemv_rows_neon;

/* The rows r0 ... of a row layout of the weight view (src/core/kernels.h): codes at data +
 * r * row_bytes, scales at scale + r * sstride units of sunit bytes (4 for f32 scales, 1 for
 * scale bytes; a view without scales gets the codes' address, never read), segments of seg
 * columns. */
static inline gemv_rows_neon gemv_view_rows_neon(const qs_mm_weight *w, int64_t r0, int64_t sunit,
                                                 int64_t seg)
{
    const uint8_t *d = (const uint8_t *)w->data + r0 * w->row_bytes;
    gemv_rows_neon g = {d, w->row_bytes,
                        w->scale ? (const uint8_t *)w->scale + r0 * w->sstride * sunit : d,
                        w->sstride * sunit, seg};
    return g;
}

static inline float32x4_t gemv_scale_add_neon(float32x4_t acc, float32x4_t sum, float s)
{
    if (__builtin_expect(s - s != 0.0f && s == s, 0)) /* +-Inf: the total times the scale */
        return vsetq_lane_f32(vgetq_lane_f32(acc, 0) + vaddvq_f32(sum) * s, acc, 0);
    return vfmaq_n_f32(acc, sum, s);
}

/* Software prefetch of the next tile's rows and scales (as in src/x86/mm_gemv_avx512.h): a
 * cursor over the next tile's bytes, advanced a few lines per step of 16 columns so that it
 * reaches their end when this tile ends; the hardware prefetcher would restart its streams at
 * every tile. Prefetches never fault; the cursor stops at the end of the call's rows. */
typedef struct {
    const char *p, *end;
    int64_t step, budget;
} gemv_pf_neon;

static inline void gemv_pf_init_neon(gemv_pf_neon *pf, const gemv_rows_neon *w, int64_t k,
                                     int64_t r0, int R, int64_t rows)
{
    int64_t next = r0 + R, nr = rows - next < R ? rows - next : R;
    pf->p = pf->end = NULL;
    pf->step = (R * w->dstride) / (k / 16 + 1) + 1;
    pf->budget = 0;
    if (nr <= 0)
        return;
    pf->p = (const char *)w->data + next * w->dstride;
    pf->end = pf->p + nr * w->dstride;
    if (w->sstride > 0)
        for (int64_t b = 0; b < nr * w->sstride; b += 64)
            __builtin_prefetch((const char *)w->scale + next * w->sstride + b);
}

static inline void gemv_pf_step_neon(gemv_pf_neon *pf)
{
    pf->budget += pf->step;
    while (pf->budget > 0 && pf->p < pf->end) {
        __builtin_prefetch(pf->p, 0, 2); /* into L2: a tile of f16 rows is as large as L1 */
        pf->p += 64;
        pf->budget -= 64;
    }
}

static inline __attribute__((always_inline)) void
gemv_tile_neon(const float *x, int64_t ldx, const int MI, const int R, const int BITS, int64_t k,
               const gemv_rows_neon *w, int64_t r0, int64_t rows, gemv_dec_neon_fn dec,
               gemv_scl_neon_fn scl, const void *fmt, float *y, int64_t ldy)
{
    float32x4_t acc[4][4];
    const uint8_t *drow[4], *srow[4];
    gemv_pf_neon pf;

    gemv_pf_init_neon(&pf, w, k, r0, R, rows);
    for (int r = 0; r < R; r++) {
        drow[r] = w->data + (r0 + r) * w->dstride;
        srow[r] = w->scale + (r0 + r) * w->sstride;
        for (int i = 0; i < MI; i++)
            acc[i][r] = vdupq_n_f32(0.0f);
    }
    for (int64_t s0 = 0, s = 0; s0 < k; s0 += w->seg, s++) {
        int64_t s1 = k - s0 < w->seg ? k : s0 + w->seg, c = s0;
        float32x4_t b[4][4];
        float sc[4];
        int32_t aux[4];

        for (int r = 0; r < R; r++) {
            sc[r] = scl(srow[r], r0 + r, s, &aux[r], fmt);
            for (int i = 0; i < MI; i++)
                b[i][r] = vdupq_n_f32(0.0f);
        }
        while (c < s1) {
            int64_t len = s1 - c < 16 ? s1 - c : 16;
            float32x4_t v[4][4];
            float xb[16];
            gemv_pf_step_neon(&pf);
            for (int r = 0; r < R; r++) {
                if (len == 16) {
                    dec(drow[r] + c * BITS / 8, aux[r], fmt, v[r]);
                } else {
                    uint8_t cb[32] = {0};
                    memcpy(cb, drow[r] + c * BITS / 8, (size_t)(len * BITS + 7) / 8);
                    dec(cb, aux[r], fmt, v[r]);
                }
            }
            for (int i = 0; i < MI; i++) {
                const float *xp = x + i * ldx + c;
                if (len < 16) {
                    memset(xb, 0, sizeof xb);
                    memcpy(xb, xp, (size_t)len * sizeof(float));
                    xp = xb;
                }
                for (int q = 0; q < 4; q++) {
                    float32x4_t xv = vld1q_f32(xp + 4 * q);
                    for (int r = 0; r < R; r++)
                        b[i][r] = vfmaq_f32(b[i][r], v[r][q], xv);
                }
            }
            c += len;
        }
        for (int i = 0; i < MI; i++)
            for (int r = 0; r < R; r++)
                acc[i][r] = gemv_scale_add_neon(acc[i][r], b[i][r], sc[r]);
    }
    for (int i = 0; i < MI; i++)
        for (int r = 0; r < R; r++)
            qs_st_f32(y + i * ldy + r0 + r, qs_ref_nan_canon(vaddvq_f32(acc[i][r])));
}

static inline __attribute__((always_inline)) void
gemv_rows_run_neon(const float *x, int64_t ldx, const int MI, const int R, const int BITS,
                   int64_t k, const gemv_rows_neon *w, int64_t rows, gemv_dec_neon_fn dec,
                   gemv_scl_neon_fn scl, const void *fmt, float *y, int64_t ldy)
{
    int64_t r = 0;
    for (; r + R <= rows; r += R)
        gemv_tile_neon(x, ldx, MI, R, BITS, k, w, r, rows, dec, scl, fmt, y, ldy);
    for (; r < rows; r++)
        gemv_tile_neon(x, ldx, MI, 1, BITS, k, w, r, rows, dec, scl, fmt, y, ldy);
}

static inline __attribute__((always_inline)) void
gemv_neon(const float *x, int64_t ldx, int64_t m, int64_t k, const int BITS,
          const gemv_rows_neon *w, int64_t rows, gemv_dec_neon_fn dec, gemv_scl_neon_fn scl,
          const void *fmt, float *y, int64_t ldy)
{
    for (int64_t i0 = 0; i0 < m;) {
        int64_t left = m - i0;
        const float *xi = x + i0 * ldx;
        float *yi = y + i0 * ldy;
        if (left >= 4) {
            gemv_rows_run_neon(xi, ldx, 4, 1, BITS, k, w, rows, dec, scl, fmt, yi, ldy);
            i0 += 4;
        } else if (left >= 2) {
            gemv_rows_run_neon(xi, ldx, 2, 2, BITS, k, w, rows, dec, scl, fmt, yi, ldy);
            i0 += 2;
        } else {
            gemv_rows_run_neon(xi, ldx, 1, 4, BITS, k, w, rows, dec, scl, fmt, yi, ldy);
            i0 += 1;
        }
    }
}

/* 16 bytes widened to four vectors of signed or unsigned 32-bit lanes. */
static inline void gemv_widen_s8_neon(const uint8_t *p, int32_t sub, float32x4_t v[4])
{
    int8x16_t b = vld1q_s8((const int8_t *)p);
    int16x8_t lo = vmovl_s8(vget_low_s8(b)), hi = vmovl_s8(vget_high_s8(b));
    int32x4_t z = vdupq_n_s32(sub);
    v[0] = vcvtq_f32_s32(vsubq_s32(vmovl_s16(vget_low_s16(lo)), z));
    v[1] = vcvtq_f32_s32(vsubq_s32(vmovl_s16(vget_high_s16(lo)), z));
    v[2] = vcvtq_f32_s32(vsubq_s32(vmovl_s16(vget_low_s16(hi)), z));
    v[3] = vcvtq_f32_s32(vsubq_s32(vmovl_s16(vget_high_s16(hi)), z));
}

/* E8M0 2^(e - 127) (NaN for 0xFF, 2^-127 a denormal), exact. */
static inline float gemv_e8m0_neon(uint8_t e)
{
    uint32_t b = e == 0xFF ? 0x7FC00000u : e == 0 ? 0x00400000u : (uint32_t)e << 23;
    return qs_f32_from_bits(b);
}

/* E4M3 value of a scale byte with the sign cleared (NVFP4 block scales), exact. */
static inline float gemv_e4m3_pos_neon(uint8_t c)
{
    unsigned e = (c >> 3) & 15u, mm = c & 7u;
    if ((c & 0x7Fu) == 0x7Fu)
        return qs_f32_from_bits(0x7FC00000u);
    if (e == 0)
        return (float)mm * 0x1p-9f;
    return qs_f32_from_bits(((e + 120u) << 23) | (mm << 20));
}

#endif /* QS_ARM_MM_GEMV_NEON_H */
