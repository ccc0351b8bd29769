/* SPDX-License-Identifier: MIT */
/* Plain dtype conversion kernels, f16/bf16 <-> f32 (spec/formats.md §0 rule 4). */
#include "../core/kernels.h"
#include "ref.h"

void qs_cvt_f16_f32__ref(const uint16_t *src, int64_t n, float *dst)
{
    for (int64_t i = 0; i < n; i++)
        dst[i] = qs_ref_f16_to_f32(src[i]);
}

void qs_cvt_bf16_f32__ref(const uint16_t *src, int64_t n, float *dst)
{
    for (int64_t i = 0; i < n; i++)
        dst[i] = qs_ref_bf16_to_f32(src[i]);
}

void qs_cvt_f32_f16__ref(const float *src, int64_t n, uint16_t *dst)
{
    for (int64_t i = 0; i < n; i++)
        dst[i] = qs_ref_f32_to_f16(src[i]);
}

void qs_cvt_f32_bf16__ref(const float *src, int64_t n, uint16_t *dst)
{
    for (int64_t i = 0; i < n; i++)
        dst[i] = qs_ref_f32_to_bf16(src[i]);
}
