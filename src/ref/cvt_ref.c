/* SPDX-License-Identifier: MIT */
/* Plain dtype conversion kernels, f16/bf16 <-> f32 (docs/formats.md §0 rule 4). A NaN is moved,
 * not computed: its payload follows the element rules of element_ref.c, never the canonical NaN. */
#include <string.h>

#include "../core/kernels.h"
#include "ref.h"

void qs_cvt_f16_f32__ref(const uint16_t *src, int64_t n, float *dst)
{
    for (int64_t i = 0; i < n; i++)
        qs_st_f32(dst + i, qs_ref_f16_to_f32(qs_ld_u16(src + i)));
}

void qs_cvt_bf16_f32__ref(const uint16_t *src, int64_t n, float *dst)
{
    for (int64_t i = 0; i < n; i++)
        qs_st_f32(dst + i, qs_ref_bf16_to_f32(qs_ld_u16(src + i)));
}

void qs_cvt_f32_f16__ref(const float *src, int64_t n, uint16_t *dst)
{
    for (int64_t i = 0; i < n; i++)
        qs_st_u16(dst + i, qs_ref_f32_to_f16(qs_ld_f32(src + i)));
}

void qs_cvt_f32_bf16__ref(const float *src, int64_t n, uint16_t *dst)
{
    for (int64_t i = 0; i < n; i++)
        qs_st_u16(dst + i, qs_ref_f32_to_bf16(qs_ld_f32(src + i)));
}

/* The reference copy: plain stores (portable C has no non-temporal store); the bits move as
 * they are, NaN payloads included. */
void qs_copy_stream_f32__ref(const float *src, int64_t n, float *dst, int32_t fence)
{
    (void)fence; /* plain stores are ordered */
    if (n > 0)
        memcpy(dst, src, (size_t)n * sizeof(float));
}
