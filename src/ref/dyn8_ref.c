/* SPDX-License-Identifier: MIT */
/*
 * bitsandbytes blockwise 8-bit quantization with the signed dynamic map (docs/formats.md §6.3,
 * §6.4). libqsparse uses it for the nested level of double quantization (§6.1, block 256): the
 * dequant takes the mean offset that §6.2 adds after the multiply.
 */
#include <math.h>

#include "../core/kernels.h"
#include "ref.h"

void qs_dyn8_quant__ref(const float *src, int64_t n, int32_t block, uint8_t *dst, float *absmax)
{
    for (int64_t b = 0; b * block < n; b++) {
        int64_t start = b * block;
        int64_t len = n - start < block ? n - start : block;
        float m = 0.0f, inv;

        for (int64_t i = 0; i < len; i++)
            m = qs_ref_absmax_step(m, qs_ld_f32(src + start + i));
        /* absmax 0: inv = +Inf and x = 0 * Inf = NaN gives code 0, as CUDA does (§6.4); written as
         * a branch rather than relying on NaN arithmetic. */
        inv = 1.0f / m;
        for (int64_t i = 0; i < len; i++)
            dst[start + i] = m == 0.0f ? 0 : qs_ref_dyn8_encode(qs_ld_f32(src + start + i) * inv);
        qs_st_f32(absmax + b, m);
    }
}

void qs_dyn8_dequant__ref(const uint8_t *src, const float *absmax, int64_t n, int32_t block,
                          float offset, float *dst)
{
    for (int64_t i = 0; i < n; i++) {
        float v = qs_dyn8_map[src[i]] * qs_ld_f32(absmax + i / block); /* then a separate add */
        qs_st_f32(dst + i, qs_ref_nan_canon(v + offset));
    }
}
