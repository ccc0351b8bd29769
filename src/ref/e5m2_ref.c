/* SPDX-License-Identifier: MIT */
/*
 * OCP FP8 E5M2 with a per-tensor f32 scale (docs/formats.md §10): q = cvt_sat(fl(x / scale))
 * with RNE and saturation to +-57344, NaN -> 0x7F | sign; decode fl(value(q) * scale),
 * a NaN result canonical (ref.h).
 */
#include "../core/kernels.h"
#include "ref.h"

void qs_e5m2_quant__ref(const float *src, int64_t n, float scale, uint8_t *dst)
{
    for (int64_t i = 0; i < n; i++)
        dst[i] = qs_ref_e5m2_encode(qs_ld_f32(src + i) / scale); /* divided: formats.md */
}

void qs_e5m2_dequant__ref(const uint8_t *src, int64_t n, float scale, float *dst)
{
    for (int64_t i = 0; i < n; i++)
        qs_st_f32(dst + i, qs_ref_nan_canon(qs_ref_e5m2_decode(src[i]) * scale));
}
