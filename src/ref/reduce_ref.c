/* SPDX-License-Identifier: MIT */
/*
 * Reductions used by the scale rules: absolute maximum and min/max with NaN ignored (fmaxf /
 * fminf semantics, spec/formats.md §5.2 step 1, §8 step 1), and the non-finite scan behind
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
        m = fmaxf(m, fabsf(src[i]));
    return m;
}

void qs_minmax_f32__ref(const float *src, int64_t n, float *lo, float *hi)
{
    float l = *lo, h = *hi;

    for (int64_t i = 0; i < n; i++) {
        l = fminf(l, src[i]);
        h = fmaxf(h, src[i]);
    }
    *lo = l;
    *hi = h;
}

int32_t qs_nonfinite_f32__ref(const float *src, int64_t n)
{
    for (int64_t i = 0; i < n; i++)
        if ((qs_f32_bits(src[i]) & 0x7F800000u) == 0x7F800000u)
            return 1;
    return 0;
}
