/* SPDX-License-Identifier: MIT */
/*
 * 2:4 GEMV kernels for NEON: the gather (slot mm_gather_sp24) and the fused dot products of x
 * with 2:4 rows of f32, f16, bf16 or NF4 kept values (mm_gemv_sp24_*, row by row through
 * one-row products; mm_dot_sp24_nf4), within the matmul
 * tolerance of src/ref/matmul_ref.c (gather, then the 16-lane dot product of the GEMV in
 * include/qsparse/matmul.h; docs/sparsity.md §3.2 for the meta nibbles).
 *
 * The structure of the x86 kernels (mm24_gemv_avx512.c): only the kept products are computed
 * and x is never gathered element by element. One meta byte (2 groups, 8 columns of x, 4 kept
 * values) selects four floats with one two-register byte table lookup, the byte indices built
 * from the two nibbles. Products are FMLAs into 16 lanes in four registers; an NF4 block's sums
 * are multiplied by its absmax once per block (one FMLA per register into the row's
 * accumulators; an infinite absmax multiplies the block's total, as the reference does, since a
 * lane holding 0 would make a NaN of 0 * Inf), and the lanes are added at the end. NF4 codes are
 * decoded with byte-plane table lookups; NF4 takes the vector path when its scale blocks start
 * on a multiple of 16 kept values, and calls the reference otherwise. Tails of fewer than 16
 * kept values are gathered and widened by the reference routines into zero-padded lanes and
 * added under lane masks, so nothing past the row is read.
 */
#include <arm_neon.h>

#include "../core/kernels.h"
#include "../ref/ref.h"
#include "../ref/sp24_ref.h"
#include "neon_common.h"

/* x at the 4 kept columns of the 8 columns at x (meta byte `mb`: nibbles of 2 groups). */
static inline float32x4_t gather4_neon(const float *x, unsigned mb)
{
    const int32_t sh[4] = {0, -2, -4, -6};
    const uint32_t base[4] = {0, 0, 4, 4};
    uint32x4_t f = vandq_u32(vshlq_u32(vdupq_n_u32(mb), vld1q_s32(sh)), vdupq_n_u32(3));
    f = vaddq_u32(f, vld1q_u32(base));
    /* float index f -> bytes 4f .. 4f + 3 */
    uint8x16_t idx =
        vreinterpretq_u8_u32(vaddq_u32(vmulq_n_u32(f, 0x04040404u), vdupq_n_u32(0x03020100u)));
    uint8x16x2_t t = {{vreinterpretq_u8_f32(vld1q_f32(x)), vreinterpretq_u8_f32(vld1q_f32(x + 4))}};
    return vreinterpretq_f32_u8(vqtbl2q_u8(t, idx));
}

/* x at the 16 kept columns of 32 columns of x (two meta words). */
static inline void gather16_neon(const float *x, const uint16_t *meta, float32x4_t g[4])
{
    unsigned w0 = qs_ld_u16(meta), w1 = qs_ld_u16(meta + 1);
    g[0] = gather4_neon(x, w0 & 0xFFu);
    g[1] = gather4_neon(x + 8, w0 >> 8);
    g[2] = gather4_neon(x + 16, w1 & 0xFFu);
    g[3] = gather4_neon(x + 24, w1 >> 8);
}

/* The 16 lanes of p[0..3] added (p[i] + p[i + 8], then + 4, + 2, + 1). */
static inline float sum16_neon(const float32x4_t p[4])
{
    float32x4_t a0 = vaddq_f32(p[0], p[2]), a1 = vaddq_f32(p[1], p[3]);
    float32x4_t b = vaddq_f32(a0, a1);
    float32x2_t c = vadd_f32(vget_low_f32(b), vget_high_f32(b));
    return vget_lane_f32(c, 0) + vget_lane_f32(c, 1);
}

static inline void mac16_neon(float32x4_t p[4], const float32x4_t x[4], const float32x4_t v[4])
{
    for (int i = 0; i < 4; i++)
        p[i] = vfmaq_f32(p[i], x[i], v[i]);
}

/* The last len < 16 kept values, gathered and widened into zero-padded xg, v: lanes past the
 * row keep their sums. */
static inline void tail_neon(float32x4_t p[4], const float *xg, const float *v, int64_t len)
{
    const int32_t lane[4] = {0, 1, 2, 3};
    for (int i = 0; i < 4; i++) {
        uint32x4_t k = vcltq_s32(vld1q_s32(lane), vdupq_n_s32((int32_t)(len - 4 * i)));
        float32x4_t s = vfmaq_f32(p[i], vld1q_f32(xg + 4 * i), vld1q_f32(v + 4 * i));
        p[i] = vbslq_f32(k, s, p[i]);
    }
}

void qs_mm_gather_sp24__neon_1x1x32(const float *x, const uint16_t *meta, int64_t n, float *xg)
{
    int64_t i = 0;

    for (; i + 32 <= n; i += 32) {
        float32x4_t g[4];
        gather16_neon(x + i, meta + i / 16, g);
        for (int k = 0; k < 4; k++)
            vst1q_f32(xg + i / 2 + 4 * k, g[k]);
    }
    qs_mm_gather_sp24__ref(x + i, meta + i / 16, n - i, xg + i / 2);
}

/* kind 0: f32, 1: f16, 2: bf16; 16 values from w + i */
static inline void load16_neon(const void *w, int64_t i, int kind, float32x4_t v[4])
{
    for (int k = 0; k < 4; k++) {
        if (kind == 0) {
            v[k] = vld1q_f32((const float *)w + i + 4 * k);
        } else {
            uint16x4_t h = vld1_u16((const uint16_t *)w + i + 4 * k);
            v[k] = kind == 1 ? vcvt_f32_f16(vreinterpret_f16_u16(h))
                             : vreinterpretq_f32_u32(vshll_n_u16(h, 16));
        }
    }
}

static float dot_plain_neon(const float *x, const uint16_t *meta, int64_t n, const void *w,
                            int kind)
{
    float32x4_t p[4] = {vdupq_n_f32(0.0f), vdupq_n_f32(0.0f), vdupq_n_f32(0.0f), vdupq_n_f32(0.0f)};
    int64_t i = 0, kept = n / 2;

    for (; i + 16 <= kept; i += 16) {
        float32x4_t g[4], v[4];
        gather16_neon(x + 2 * i, meta + i / 8, g);
        load16_neon(w, i, kind, v);
        mac16_neon(p, g, v);
    }
    if (i < kept) {
        float xg[16] = {0}, v[16] = {0};
        qs_mm_gather_sp24__ref(x + 2 * i, meta + i / 8, 2 * (kept - i), xg);
        if (kind == 0)
            for (int64_t k = 0; k < kept - i; k++)
                v[k] = qs_ld_f32((const float *)w + i + k);
        else if (kind == 1)
            qs_cvt_f16_f32__ref((const uint16_t *)w + i, kept - i, v);
        else
            qs_cvt_bf16_f32__ref((const uint16_t *)w + i, kept - i, v);
        tail_neon(p, xg, v, kept - i);
    }
    return qs_ref_nan_canon(sum16_neon(p));
}

static float dot_f32_neon(const float *x, const uint16_t *meta, int64_t n, const void *w)
{
    return dot_plain_neon(x, meta, n, w, 0);
}

static float dot_f16_neon(const float *x, const uint16_t *meta, int64_t n, const void *w)
{
    return dot_plain_neon(x, meta, n, w, 1);
}

static float dot_bf16_neon(const float *x, const uint16_t *meta, int64_t n, const void *w)
{
    return dot_plain_neon(x, meta, n, w, 2);
}

/* Several rows (slots mm_gemv_sp24_f32 / f16 / bf16): the one-row products above row by row,
 * each row's meta checked (by the reference check) just before its products. */
int qs_mm_gemv_sp24_f32__neon_1x1x32(const qs_mm_weight *w, int64_t r0, int64_t rows,
                                     const float *x, float *y)
{
    return qs_sp24_plain_rows_by_dot(w, r0, rows, x, y, dot_f32_neon, qs_mm_sp24_meta_bad__ref);
}

int qs_mm_gemv_sp24_f16__neon_1x1x32(const qs_mm_weight *w, int64_t r0, int64_t rows,
                                     const float *x, float *y)
{
    return qs_sp24_plain_rows_by_dot(w, r0, rows, x, y, dot_f16_neon, qs_mm_sp24_meta_bad__ref);
}

int qs_mm_gemv_sp24_bf16__neon_1x1x32(const qs_mm_weight *w, int64_t r0, int64_t rows,
                                      const float *x, float *y)
{
    return qs_sp24_plain_rows_by_dot(w, r0, rows, x, y, dot_bf16_neon, qs_mm_sp24_meta_bad__ref);
}

float qs_mm_dot_sp24_nf4__neon_1x1x32(const float *x, const uint16_t *meta, int64_t n,
                                      const uint8_t *data, int64_t start, const float *absmax,
                                      int32_t block)
{
    const lut16_neon book = lut16_load_neon(qs_nf4_codebook);
    float32x4_t acc[4] = {vdupq_n_f32(0.0f), vdupq_n_f32(0.0f), vdupq_n_f32(0.0f),
                          vdupq_n_f32(0.0f)};
    int64_t i = 0, kept = n / 2;

    if (block % 16 != 0 || start % 16 != 0)
        return qs_mm_dot_sp24_nf4__ref(x, meta, n, data, start, absmax, block);
    /* block b of the tensor ends at kept value end; one division for the row */
    for (int64_t b = start / block, end = (b + 1) * block - start; i < kept; b++, end += block) {
        float32x4_t p[4] = {vdupq_n_f32(0.0f), vdupq_n_f32(0.0f), vdupq_n_f32(0.0f),
                            vdupq_n_f32(0.0f)};

        int64_t stop = end < kept ? end : kept;
        for (; i + 16 <= stop; i += 16) {
            float32x4_t g[4], v[4];
            gather16_neon(x + 2 * i, meta + i / 8, g);
            lut16_lookup_neon(&book, unpack_hi_first_neon(vld1_u8(data + (start + i) / 2)), v);
            mac16_neon(p, g, v);
        }
        if (i < stop) { /* the row's last kept values: fewer than 16, at a multiple of 16 */
            float xg[16] = {0}, v[16] = {0};
            for (int64_t k = 0; k < stop - i; k++) {
                int64_t f = start + i + k;
                v[k] = qs_nf4_codebook[(f & 1) ? data[f / 2] & 0xF : data[f / 2] >> 4];
            }
            qs_mm_gather_sp24__ref(x + 2 * i, meta + i / 8, 2 * (stop - i), xg);
            tail_neon(p, xg, v, stop - i);
            i = stop;
        }
        float s = qs_ld_f32(absmax + b);
        if (__builtin_expect(s - s != 0.0f && s == s, 0)) /* infinite: the block's total */
            acc[0] = vsetq_lane_f32(vgetq_lane_f32(acc[0], 0) + sum16_neon(p) * s, acc[0], 0);
        else
            for (int k = 0; k < 4; k++)
                acc[k] = vfmaq_n_f32(acc[k], p[k], s);
    }
    return qs_ref_nan_canon(sum16_neon(acc));
}

/* Several rows: this tier's fused dot product row by row (x needs no rearranging here), each
 * row's meta checked (by the reference check) just before its products. */
int qs_mm_gemv_sp24_nf4__neon_1x1x32(const qs_mm_weight *w, int64_t r0, int64_t rows,
                                     const float *x, float *y)
{
    return qs_sp24_nf4_rows_by_dot(w, r0, rows, x, y, qs_mm_dot_sp24_nf4__neon_1x1x32,
                                   qs_mm_sp24_meta_bad__ref);
}
