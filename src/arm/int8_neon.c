/* SPDX-License-Identifier: MIT */
/*
 * INT8 element kernels for AArch64 NEON (docs/formats.md §8, §9), bit-identical to
 * src/ref/int8_ref.c. Quantize: v = x * mul, NaN -> 0, RNE with FRINTN, clamp to +-512 in float
 * before the (then exact) conversion, add the zero point, clamp to [qmin, 127]. Dequantize:
 * fl((q - zp) * scale) with q - zp exact in int32 and in f32; the LLM.int8 row-stat form is
 * fl(fl(q * stat) * fl(1/127)), two multiplies, never a division or an FMA.
 */
#include <arm_neon.h>

#include "../core/kernels.h"
#include "../ref/ref.h"
#include "neon_common.h"

static inline int32x4_t int8_code4_neon(float32x4_t x, float32x4_t mul, int32x4_t zp,
                                        int32x4_t qmin)
{
    float32x4_t v = vmulq_f32(x, mul);
    v = vreinterpretq_f32_u32(vandq_u32(vreinterpretq_u32_f32(v), vceqq_f32(v, v))); /* NaN->0 */
    v = vrndnq_f32(v);
    v = vminq_f32(vmaxq_f32(v, vdupq_n_f32(-512.0f)), vdupq_n_f32(512.0f));
    int32x4_t q = vaddq_s32(vcvtq_s32_f32(v), zp);
    return vminq_s32(vmaxq_s32(q, qmin), vdupq_n_s32(127));
}

void qs_int8_quant__neon(const float *src, int64_t n, float mul, int32_t zp, int32_t qmin,
                         int8_t *dst)
{
    const float32x4_t vm = vdupq_n_f32(mul);
    const int32x4_t vz = vdupq_n_s32(zp), vq = vdupq_n_s32(qmin);
    int64_t i = 0;

    for (; i + 16 <= n; i += 16) {
        int32x4_t q0 = int8_code4_neon(vld1q_f32(src + i), vm, vz, vq);
        int32x4_t q1 = int8_code4_neon(vld1q_f32(src + i + 4), vm, vz, vq);
        int32x4_t q2 = int8_code4_neon(vld1q_f32(src + i + 8), vm, vz, vq);
        int32x4_t q3 = int8_code4_neon(vld1q_f32(src + i + 12), vm, vz, vq);
        int16x8_t lo = vuzp1q_s16(vreinterpretq_s16_s32(q0), vreinterpretq_s16_s32(q1));
        int16x8_t hi = vuzp1q_s16(vreinterpretq_s16_s32(q2), vreinterpretq_s16_s32(q3));
        vst1q_s8(dst + i, vuzp1q_s8(vreinterpretq_s8_s16(lo), vreinterpretq_s8_s16(hi)));
    }
    for (; i < n; i++)
        dst[i] = qs_ref_int8_encode(qs_ld_f32(src + i), mul, zp, qmin);
}

/* The NaN rule costs a compare and a select per vector; it is needed only for a non-finite scale
 * (q - zp is a small integer, q * stat * c is never 0 * Inf for a finite stat). Both loops come
 * from one body with `canon` constant after inlining. */
static inline float32x4_t int8_out_neon(float32x4_t v, int canon)
{
    return canon ? nan_canon_neon(v) : v;
}

static inline void int8_dequant_body_neon(const int8_t *src, int64_t n, float scale, int32_t zp,
                                          float *dst, int canon)
{
    const float32x4_t vs = vdupq_n_f32(scale);
    const int32x4_t vz = vdupq_n_s32(zp);
    int64_t i = 0;

    for (; i + 8 <= n; i += 8) {
        int16x8_t q = vmovl_s8(vld1_s8(src + i));
        int32x4_t a = vsubq_s32(vmovl_s16(vget_low_s16(q)), vz);
        int32x4_t b = vsubq_s32(vmovl_high_s16(q), vz);
        vst1q_f32(dst + i, int8_out_neon(vmulq_f32(vcvtq_f32_s32(a), vs), canon));
        vst1q_f32(dst + i + 4, int8_out_neon(vmulq_f32(vcvtq_f32_s32(b), vs), canon));
    }
    for (; i < n; i++)
        qs_st_f32(dst + i, qs_ref_nan_canon((float)((int32_t)src[i] - zp) * scale));
}

void qs_int8_dequant__neon(const int8_t *src, int64_t n, float scale, int32_t zp, float *dst)
{
    if ((qs_f32_bits(scale) & 0x7F800000u) != 0x7F800000u)
        int8_dequant_body_neon(src, n, scale, zp, dst, 0);
    else
        int8_dequant_body_neon(src, n, scale, zp, dst, 1);
}

static inline void int8_rowstat_body_neon(const int8_t *src, int64_t n, float stat, float *dst,
                                          int canon)
{
    const float c = 0x1.020408p-7f; /* 3c010204 = fl(1/127), as the reference */
    const float32x4_t vs = vdupq_n_f32(stat), vc = vdupq_n_f32(c);
    int64_t i = 0;

    for (; i + 8 <= n; i += 8) {
        int16x8_t q = vmovl_s8(vld1_s8(src + i));
        float32x4_t a = vcvtq_f32_s32(vmovl_s16(vget_low_s16(q)));
        float32x4_t b = vcvtq_f32_s32(vmovl_high_s16(q));
        vst1q_f32(dst + i, int8_out_neon(vmulq_f32(vmulq_f32(a, vs), vc), canon));
        vst1q_f32(dst + i + 4, int8_out_neon(vmulq_f32(vmulq_f32(b, vs), vc), canon));
    }
    for (; i < n; i++) {
        float v = (float)src[i] * stat;
        qs_st_f32(dst + i, qs_ref_nan_canon(v * c));
    }
}

void qs_int8_dequant_rowstat__neon(const int8_t *src, int64_t n, float stat, float *dst)
{
    if ((qs_f32_bits(stat) & 0x7F800000u) != 0x7F800000u)
        int8_rowstat_body_neon(src, n, stat, dst, 0);
    else
        int8_rowstat_body_neon(src, n, stat, dst, 1);
}
