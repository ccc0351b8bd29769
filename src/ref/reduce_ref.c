/* SPDX-License-Identifier: MIT */
/*
 * Reductions used by the scale rules: absolute maximum and min/max with every NaN ignored and
 * zeros ordered -0 < +0 (docs/formats.md §5.2 step 1, §8 step 1), and the non-finite scan behind
 * QS_NONFINITE_REJECT. Max and min are exact and order-independent, so chunked reductions
 * combined in any order give the same bits.
 */
#include <math.h>

#include "../core/kernels.h"
#include "ref.h"

float qs_amax_f32__ref(const float *src, int64_t n)
{
    float m = 0.0f;

    for (int64_t i = 0; i < n; i++)
        m = qs_ref_absmax_step(m, qs_ld_f32(src + i));
    return m;
}

/* fminf/fmaxf leave the sign of a zero result to the C library (glibc returns either operand of a
 * -0/+0 pair; AArch64's FMINNM orders -0 below +0) and return NaN for a signaling NaN operand.
 * Pinned here [convention]: every NaN is ignored and -0 < +0, as IEEE 754-2019 minimum/maximum
 * order zeros. This makes min and max associative and
 * commutative on zeros too, so lane-parallel SIMD reductions give the same bits. */
float qs_ref_min(float acc, float x)
{
    if (x != x)
        return acc;
    if (acc != acc || x < acc || (x == acc && signbit(x)))
        return x;
    return acc;
}

float qs_ref_max(float acc, float x)
{
    if (x != x)
        return acc;
    if (acc != acc || x > acc || (x == acc && !signbit(x)))
        return x;
    return acc;
}

void qs_minmax_f32__ref(const float *src, int64_t n, float *lo, float *hi)
{
    float l = *lo, h = *hi;

    for (int64_t i = 0; i < n; i++) {
        float x = qs_ld_f32(src + i);
        l = qs_ref_min(l, x);
        h = qs_ref_max(h, x);
    }
    *lo = l;
    *hi = h;
}

int32_t qs_nonfinite_f32__ref(const float *src, int64_t n)
{
    for (int64_t i = 0; i < n; i++)
        if ((qs_f32_bits(qs_ld_f32(src + i)) & 0x7F800000u) == 0x7F800000u)
            return 1;
    return 0;
}
