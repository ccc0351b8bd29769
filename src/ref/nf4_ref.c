/* SPDX-License-Identifier: MIT */
/*
 * bitsandbytes NF4, blockwise over the flattened tensor (docs/formats.md §2, §3, §5): "CUDA
 * semantics evaluated in IEEE f32". Per block: absmax with NaN ignored, inv = 1/absmax,
 * x = v * inv, code = #{k : x > t_k}; element 2j in the high nibble.
 */
#include <math.h>

#include "../core/kernels.h"
#include "ref.h"

/* Quantize one block of len <= block elements (len may be odd only in the last block). */
static float nf4_block(const float *v, int64_t len, uint8_t *dst)
{
    float absmax = 0.0f, inv;

    for (int64_t i = 0; i < len; i++)
        absmax = qs_ref_absmax_step(absmax, qs_ld_f32(v + i)); /* NaN ignored (§5.2 step 1) */

    if (absmax == 0.0f) { /* all-zero (or all-NaN) block: explicit branch, codes 0 (§5.2) */
        memset(dst, 0x00, (size_t)((len + 1) / 2));
        return absmax;
    }
    inv = 1.0f / absmax; /* may be +Inf for absmax <= 2^-128: not special-cased (§5.2) */
    for (int64_t i = 0; i < len; i += 2) {
        uint8_t hi = qs_ref_nf4_encode(qs_ld_f32(v + i) * inv);
        /* odd length: the missing element is quantized as 0.0 (§5.1) */
        uint8_t lo = qs_ref_nf4_encode((i + 1 < len ? qs_ld_f32(v + i + 1) : 0.0f) * inv);
        dst[i / 2] = (uint8_t)(hi << 4 | lo);
    }
    return absmax;
}

void qs_nf4_quant__ref(const float *src, int64_t n, int32_t block, uint8_t *dst, float *absmax)
{
    for (int64_t b = 0; b * block < n; b++) {
        int64_t start = b * block;
        int64_t len = n - start < block ? n - start : block;
        qs_st_f32(absmax + b, nf4_block(src + start, len, dst + start / 2));
    }
}

void qs_nf4_dequant__ref(const uint8_t *src, const float *absmax, int64_t n, int32_t block,
                         float *dst)
{
    for (int64_t i = 0; i < n; i++) {
        uint8_t code = (i & 1) ? (src[i / 2] & 0xF) : (src[i / 2] >> 4);
        /* §5.3: one f32 multiply; a NaN absmax gives the canonical NaN */
        qs_st_f32(dst + i, qs_ref_nan_canon(qs_nf4_codebook[code] * qs_ld_f32(absmax + i / block)));
    }
}
