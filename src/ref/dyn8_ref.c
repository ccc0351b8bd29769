/* SPDX-License-Identifier: MIT */
/*
 * bitsandbytes blockwise 8-bit quantization with the signed dynamic map (docs/formats.md §6.3,
 * §6.4). libqsparse uses it for the nested level of double quantization (§6.1, block 256): the
 * dequant takes the mean offset that §6.2 adds after the multiply.
 */
#include "../core/kernels.h"
#include "element_hd.h"
#include "ref.h"

void qs_dyn8_quant__ref(const float *src, int64_t n, int32_t block, uint8_t *dst, float *absmax)
{
    for (int64_t b = 0; b * block < n; b++) {
        int64_t start = b * block;
        int64_t len = n - start < block ? n - start : block;
        /* absmax 0: codes 0, written as a branch in qs_hd_dyn8_block rather than relying on
         * 0 * Inf = NaN giving code 0 as CUDA does (§6.4) */
        qs_st_f32(absmax + b, qs_hd_dyn8_block(src + start, len, dst + start, qs_dyn8_map));
    }
}

void qs_dyn8_dequant__ref(const uint8_t *src, const float *absmax, int64_t n, int32_t block,
                          float offset, float *dst)
{
    for (int64_t i = 0; i < n; i++) {
        /* the multiply, then a separate add of the offset */
        qs_st_f32(dst + i, qs_hd_dyn8_decode(qs_dyn8_map, src[i], qs_ld_f32(absmax + i / block),
                                             offset));
    }
}
