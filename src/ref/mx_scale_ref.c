/* SPDX-License-Identifier: MIT */
/*
 * The OCP MX shared exponent of one block (docs/formats.md §12, §13): FLOOR, the sample algorithm
 * of the OCP specification (floor(log2 amax) - emax, from the exponent bits), or RCEIL (the
 * smallest power of two that keeps every element within the element maximum). Shared by MXFP4 and
 * MXFP8.
 */
#include "element_hd.h"
#include "mx_ref.h"
#include "ref.h"

/* The rules are qs_hd_mx_scale_from_amax and qs_hd_mx_scale (element_hd.h), shared with CUDA. */
uint8_t qs_ref_mx_scale_from_amax(float amax, int32_t rounding, int emax, float elem_max)
{
    return qs_hd_mx_scale_from_amax(amax, rounding, emax, elem_max);
}

uint8_t qs_ref_mx_scale(const float *v, int64_t len, int32_t rounding, int emax, float elem_max)
{
    return qs_hd_mx_scale(v, len, rounding, emax, elem_max);
}
