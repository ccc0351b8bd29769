/* SPDX-License-Identifier: MIT */
/*
 * The OCP MX block scale for the NEON kernels (spec/formats.md §12, §13), the rule of
 * src/ref/mx_scale_ref.c with the scan vectorized: 0xFF if any element is NaN or Inf, 0x00 for an
 * all-zero block, else shared_exp + 127 by FLOOR (exponent bits) or RCEIL (exact, in double).
 * Shared by mxfp4_neon.c and mxfp8_neon.c, which are built with the same flags.
 */
#ifndef QS_ARM_MX_NEON_H
#define QS_ARM_MX_NEON_H

#include <math.h>
#include <stdint.h>

#include "../ref/ref.h"
#include "neon_common.h"

static inline uint8_t mx_scale_neon(const float *v, int64_t len, int32_t rounding, int emax,
                                    float elem_max)
{
    float amax;
    int shared_exp;

    if (nonfinite_neon(v, len))
        return 0xFF; /* the block is NaN (§13 step 1) */
    amax = amax_neon(v, len);
    if (amax == 0.0f)
        return 0x00; /* 2^-127 (§13 special cases) */
    if (rounding == 0) {
        shared_exp = qs_ref_floor_log2(amax) - emax; /* exponent bits, never floorf(log2f()) */
    } else {
        shared_exp = qs_ref_floor_log2(amax) - emax - 1;
        while (ldexp((double)elem_max, shared_exp) < (double)amax)
            shared_exp++;
    }
    if (shared_exp < -127)
        shared_exp = -127;
    if (shared_exp > 127)
        shared_exp = 127;
    return (uint8_t)(shared_exp + 127);
}

/* 2^-shared_exp for scale byte s < 0xFF, exactly: 2^-127 (s = 254) is the f32 subnormal
 * 0x00400000. Multiplying by it rounds once, exactly like the reference's ldexpf. */
static inline float mx_inv_scale_neon(uint8_t s)
{
    return s == 254 ? qs_f32_from_bits(0x00400000u) : qs_f32_from_bits((uint32_t)(254 - s) << 23);
}

#endif /* QS_ARM_MX_NEON_H */
