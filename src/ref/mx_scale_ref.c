/* SPDX-License-Identifier: MIT */
/*
 * The OCP MX shared exponent of one block (docs/formats.md §12, §13): FLOOR, the sample algorithm
 * of the OCP specification (floor(log2 amax) - emax, from the exponent bits), or RCEIL (the
 * smallest power of two that keeps every element within the element maximum). Shared by MXFP4 and
 * MXFP8.
 */
#include <math.h>

#include "mx_ref.h"
#include "ref.h"

uint8_t qs_ref_mx_scale_from_amax(float amax, int32_t rounding, int emax, float elem_max)
{
    int shared_exp;

    if (amax == 0.0f)
        return 0x00; /* 2^-127 (§13 special cases) */
    if (rounding == 0) {
        shared_exp = qs_ref_floor_log2(amax) - emax; /* exponent bits, never floorf(log2f()) */
    } else {
        /* RCEIL: the smallest e with elem_max * 2^e >= amax, evaluated exactly in double. */
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

uint8_t qs_ref_mx_scale(const float *v, int64_t len, int32_t rounding, int emax, float elem_max)
{
    float amax = 0.0f;

    for (int64_t i = 0; i < len; i++) {
        float x = qs_ld_f32(v + i);
        if ((qs_f32_bits(x) & 0x7F800000u) == 0x7F800000u)
            return 0xFF; /* NaN or Inf anywhere: the block is NaN (§13 step 1) */
        amax = qs_ref_absmax_step(amax, x);
    }
    return qs_ref_mx_scale_from_amax(amax, rounding, emax, elem_max);
}
