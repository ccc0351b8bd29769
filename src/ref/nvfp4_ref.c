/* SPDX-License-Identifier: MIT */
/*
 * NVIDIA NVFP4 (docs/formats.md §11, §14): blocks of 16 along a row, an E4M3 (unsigned) block
 * scale, the f32 per-tensor scale s_global chosen by the driver, E2M1 elements in the low nibble
 * first. Operation order is modelopt's: S = amax / fl(6 * s_global), den = fl(value(S) * s_global),
 * P = E2M1(fl(v / den)), decode fl(value(P) * den).
 */
#include <math.h>

#include "../core/kernels.h"
#include "element_hd.h"
#include "ref.h"

void qs_nvfp4_quant__ref(const float *src, int64_t n, float s_global, uint8_t *dst,
                         uint8_t *scales)
{
    for (int64_t b = 0; b * 16 < n; b++) {
        const float *v = src + b * 16;
        int64_t len = n - b * 16 < 16 ? n - b * 16 : 16;
        uint8_t s = qs_hd_nvfp4_block_scale(v, len, s_global); /* element_hd.h */
        float den = qs_ref_e4m3_decode(s) * s_global;

        scales[b] = s;
        for (int64_t i = 0; i < len; i += 2) {
            uint8_t lo = 0, hi = 0; /* den == 0 (subnormal s_global): every code 0 */
            if (den != 0.0f) {
                lo = qs_ref_e2m1_encode(qs_ld_f32(v + i) / den);
                hi = i + 1 < len ? qs_ref_e2m1_encode(qs_ld_f32(v + i + 1) / den) : 0;
            }
            dst[(b * 16 + i) / 2] = (uint8_t)(lo | hi << 4);
        }
    }
}

void qs_nvfp4_dequant__ref(const uint8_t *src, const uint8_t *scales, int64_t n, float s_global,
                           float *dst)
{
    for (int64_t i = 0; i < n; i++) {
        uint8_t code = (i & 1) ? (src[i / 2] >> 4) : (src[i / 2] & 0xF);
        /* UE4M3: readers ignore the sign bit (§14) */
        float den = qs_ref_e4m3_decode(scales[i / 16] & 0x7F) * s_global;
        /* a NaN den (NaN s_global or scale 0x7F): the canonical NaN */
        qs_st_f32(dst + i, qs_ref_nan_canon(qs_e2m1_values[code] * den));
    }
}
