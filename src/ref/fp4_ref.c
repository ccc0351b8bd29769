/* SPDX-License-Identifier: MIT */
/*
 * bitsandbytes FP4 (its own E2M1-like table, not OCP E2M1), blockwise over the flattened tensor
 * (docs/formats.md §4, §5): the NF4 block rule with the FP4 encode of §4: sign from x < 0,
 * rank of |x| against the CUDA threshold literals; element 2j in the high nibble.
 * The block rule is qs_hd_bnb4_block (element_hd.h), which the CUDA plugin runs too.
 */
#include "../core/kernels.h"
#include "element_hd.h"
#include "ref.h"

void qs_fp4_quant__ref(const float *src, int64_t n, int32_t block, uint8_t *dst, float *absmax)
{
    for (int64_t b = 0; b * block < n; b++) {
        int64_t start = b * block;
        int64_t len = n - start < block ? n - start : block;
        qs_st_f32(absmax + b, qs_hd_bnb4_block(src + start, len, dst + start / 2, 1));
    }
}

void qs_fp4_dequant__ref(const uint8_t *src, const float *absmax, int64_t n, int32_t block,
                         float *dst)
{
    for (int64_t i = 0; i < n; i++) {
        uint8_t code = (i & 1) ? (src[i / 2] & 0xF) : (src[i / 2] >> 4);
        /* §5.3: one f32 multiply; a NaN absmax gives the canonical NaN */
        qs_st_f32(dst + i, qs_hd_bnb4_decode(qs_fp4_codebook, code, qs_ld_f32(absmax + i / block)));
    }
}
