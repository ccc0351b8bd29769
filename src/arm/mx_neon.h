/* SPDX-License-Identifier: MIT */
/*
 * The OCP MX block scale for the NEON kernels (docs/formats.md §12, §13): the NaN/Inf scan and
 * the absolute maximum vectorized (one pass for a full block), then the reference's own rule
 * from amax (qs_ref_mx_scale_from_amax in src/ref/mx_scale_ref.c): 0xFF if any element is NaN
 * or Inf, 0x00 for an all-zero block, else shared_exp + 127 by FLOOR or RCEIL.
 * Shared by mxfp4_neon.c and mxfp8_neon.c, which are built with the same flags.
 */
#ifndef QS_ARM_MX_NEON_H
#define QS_ARM_MX_NEON_H

#include <math.h>
#include <stdint.h>

#include "../ref/mx_ref.h"
#include "../ref/ref.h"
#include "neon_common.h"

/* Any block length: the NaN/Inf scan, then the absolute maximum. */
static inline uint8_t mx_scale_neon(const float *v, int64_t len, int32_t rounding, int emax,
                                    float elem_max)
{
    if (nonfinite_neon(v, len))
        return 0xFF; /* the block is NaN (§13 step 1) */
    return qs_ref_mx_scale_from_amax(amax_neon(v, len), rounding, emax, elem_max);
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
    return qs_ref_mx_scale_from_amax(vmaxnmvq_f32(vmaxnmq_f32(m0, m1)), rounding, emax,
                                     elem_max);
}

/* 2^-shared_exp for scale byte s < 0xFF, exactly: 2^-127 (s = 254) is the f32 subnormal
 * 0x00400000. Multiplying by it rounds once, exactly like the reference's ldexpf. */
static inline float mx_inv_scale_neon(uint8_t s)
{
    return s == 254 ? qs_f32_from_bits(0x00400000u) : qs_f32_from_bits((uint32_t)(254 - s) << 23);
}

#endif /* QS_ARM_MX_NEON_H */
