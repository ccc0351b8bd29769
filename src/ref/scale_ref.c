/* SPDX-License-Identifier: MIT */
/*
 * Per-tensor, per-row and per-group scale rules (docs/formats.md §6.1, §8, §9, §10, §14). The
 * drivers in src/core call these once per scale unit; like every reference routine they define the
 * arithmetic, so they live here and are compiled with -ffp-contract=off.
 */
#include <float.h>
#include <math.h>

#include "ref.h"
#include "scale_ref.h"

void qs_ref_int8_symmetric(float amax, float *scale, float *mul)
{
    if (amax == 0.0f) { /* [convention] s = 1, all codes 0 (§9) */
        *scale = 1.0f;
        *mul = 0.0f;
        return;
    }
    *scale = amax / 127.0f;
    *mul = 127.0f / amax;
}

void qs_ref_int8_asymmetric(float mn, float mx, float *scale, float *mul, int32_t *zp)
{
    float lo = fminf(mn, 0.0f), hi = fmaxf(mx, 0.0f), s, z;

    if (hi == lo) { /* [convention] all-zero range: s = 1, zp = 0 (§9) */
        *scale = 1.0f;
        *mul = 1.0f;
        *zp = 0;
        return;
    }
    s = (hi - lo) / 255.0f;
    if (s < FLT_EPSILON)
        s = FLT_EPSILON; /* max(s, FLT_EPSILON) (§9) */
    z = rintf(lo / s);
    if (z != z)
        z = 0.0f; /* NaN (only from an infinite range) -> 0, as the element rule does */
    z = -128.0f - z;  /* qmin - rne(lo / s); lo <= 0 so z >= -128 */
    *zp = z > 127.0f ? 127 : (int32_t)z;
    *scale = s;
    *mul = 1.0f / s;
}

float qs_ref_llm_int8_mul(float row_stat)
{
    /* fl(127 / row_stats): +Inf for 0 and for row_stats below about 3.73e-37 (§8 rule 4) */
    return 127.0f / row_stat;
}

float qs_ref_fp8_scale(float amax, float elem_max)
{
    if (amax == 0.0f)
        return 1.0f; /* [convention] §10 */
    return amax / elem_max;
}

float qs_ref_nvfp4_global_scale(float amax)
{
    float s = amax / 2688.0f; /* 6 * 448 */

    return s == 0.0f ? 1.0f : s; /* amax 0, or a quotient that underflows (§14 step 1) */
}

float qs_ref_dq_offset(const float *absmax, int64_t nb)
{
    double sum = 0.0; /* [convention] double sum in index order, one rounding to f32 (§6.1) */

    for (int64_t i = 0; i < nb; i++)
        sum += (double)qs_ld_f32(absmax + i);
    return nb > 0 ? (float)(sum / (double)nb) : 0.0f;
}

void qs_ref_dq_center(float *absmax, int64_t nb, float offset)
{
    for (int64_t i = 0; i < nb; i++)
        qs_st_f32(absmax + i, qs_ref_nan_canon(qs_ld_f32(absmax + i) - offset)); /* Inf - Inf */
}
