/* SPDX-License-Identifier: MIT */
/*
 * The OCP MX block scale for the NEON kernels (spec/formats.md §12, §13), the rule of
 * src/ref/mx_scale_ref.c with the scan vectorized (one pass for a full block): 0xFF if any
 * element is NaN or Inf, 0x00 for an all-zero block, else shared_exp + 127 by FLOOR (exponent
 * bits) or RCEIL (exact, in double).
 * Shared by mxfp4_neon.c and mxfp8_neon.c, which are built with the same flags.
 */
#ifndef QS_ARM_MX_NEON_H
#define QS_ARM_MX_NEON_H

#include <math.h>
#include <stdint.h>

#include "../ref/ref.h"
#include "neon_common.h"

/* floor(log2(a)) for finite a > 0 from the bits, as qs_ref_floor_log2 (frexpf) gives it:
 * the exponent field for normal numbers, the leading one of the fraction for subnormals. */
static inline int mx_floor_log2_neon(float a)
{
    uint32_t u = qs_f32_bits(a);
    return (u >> 23) ? (int)(u >> 23) - 127 : 31 - __builtin_clz(u) - 149;
}

/* The scale byte of a finite block with absolute maximum amax (§13 steps 2, 3). */
static inline uint8_t mx_scale_from_amax_neon(float amax, int32_t rounding, int emax,
                                              float elem_max)
{
    int shared_exp;

    if (amax == 0.0f)
        return 0x00; /* 2^-127 (§13 special cases) */
    if (rounding == 0) {
        shared_exp = mx_floor_log2_neon(amax) - emax; /* exponent bits, never floorf(log2f()) */
    } else {
        /* RCEIL: the smallest e with elem_max * 2^e >= amax, evaluated exactly in double. */
        shared_exp = mx_floor_log2_neon(amax) - emax - 1;
        while (ldexp((double)elem_max, shared_exp) < (double)amax)
            shared_exp++;
    }
    if (shared_exp < -127)
        shared_exp = -127;
    if (shared_exp > 127)
        shared_exp = 127;
    return (uint8_t)(shared_exp + 127);
}

/* Any block length: the NaN/Inf scan, then the absolute maximum. */
static inline uint8_t mx_scale_neon(const float *v, int64_t len, int32_t rounding, int emax,
                                    float elem_max)
{
    if (nonfinite_neon(v, len))
        return 0xFF; /* the block is NaN (§13 step 1) */
    return mx_scale_from_amax_neon(amax_neon(v, len), rounding, emax, elem_max);
}

/* A full block of 32: the scan and the maximum in one pass over eight vectors. */
static inline uint8_t mx_scale32_neon(const float *v, int32_t rounding, int emax,
                                      float elem_max)
{
    const uint32x4_t e = vdupq_n_u32(0x7F800000u);
    float32x4_t m0 = vdupq_n_f32(0.0f), m1 = m0;
    uint32x4_t sp = vdupq_n_u32(0);

    for (int k = 0; k < 8; k += 2) {
        float32x4_t a = vld1q_f32(v + 4 * k), b = vld1q_f32(v + 4 * k + 4);
        uint32x4_t ea = vandq_u32(vreinterpretq_u32_f32(a), e);
        uint32x4_t eb = vandq_u32(vreinterpretq_u32_f32(b), e);
        sp = vorrq_u32(sp, vorrq_u32(vceqq_u32(ea, e), vceqq_u32(eb, e)));
        m0 = vmaxnmq_f32(m0, vabsq_f32(a));
        m1 = vmaxnmq_f32(m1, vabsq_f32(b));
    }
    if (vmaxvq_u32(sp))
        return 0xFF;
    return mx_scale_from_amax_neon(vmaxnmvq_f32(vmaxnmq_f32(m0, m1)), rounding, emax, elem_max);
}

/* 2^-shared_exp for scale byte s < 0xFF, exactly: 2^-127 (s = 254) is the f32 subnormal
 * 0x00400000. Multiplying by it rounds once, exactly like the reference's ldexpf. */
static inline float mx_inv_scale_neon(uint8_t s)
{
    return s == 254 ? qs_f32_from_bits(0x00400000u) : qs_f32_from_bits((uint32_t)(254 - s) << 23);
}

#endif /* QS_ARM_MX_NEON_H */
