/* SPDX-License-Identifier: MIT */
/*
 * Per-tensor, per-row and per-group scale rules (docs/formats.md §6.1, §8, §9, §10, §14). The
 * drivers in src/core call these once per scale unit; like every reference routine they define the
 * arithmetic, so they live here and are compiled with -ffp-contract=off.
 */
#include "element_hd.h"
#include "ref.h"
#include "scale_ref.h"

/* The per-unit rules are element_hd.h's, which the CUDA plugin runs too. */
void qs_ref_int8_symmetric(float amax, float *scale, float *mul)
{
    qs_hd_int8_symmetric(amax, scale, mul);
}

void qs_ref_int8_asymmetric(float mn, float mx, float *scale, float *mul, int32_t *zp)
{
    qs_hd_int8_asymmetric(mn, mx, scale, mul, zp);
}

float qs_ref_llm_int8_mul(float row_stat)
{
    return qs_hd_llm_int8_mul(row_stat);
}

float qs_ref_fp8_scale(float amax, float elem_max)
{
    return qs_hd_fp8_scale(amax, elem_max);
}

float qs_ref_nvfp4_global_scale(float amax)
{
    return qs_hd_nvfp4_global_scale(amax);
}

float qs_ref_dq_offset(const float *absmax, int64_t nb)
{
    return qs_hd_dq_offset(absmax, nb); /* [convention] double sum in index order (§6.1) */
}

void qs_ref_dq_center(float *absmax, int64_t nb, float offset)
{
    for (int64_t i = 0; i < nb; i++)
        qs_st_f32(absmax + i, qs_ref_nan_canon(qs_ld_f32(absmax + i) - offset)); /* Inf - Inf */
}
