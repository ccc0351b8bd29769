/* SPDX-License-Identifier: MIT */
/*
 * INT8 element kernels (docs/formats.md §8, §9). The driver chooses `mul` and `zp` per row, group
 * or tensor: LLM.int8 and symmetric use mul = fl(127 / amax), zp = 0, qmin = -127; asymmetric uses
 * mul = fl(1 / s), the zero point and qmin = -128.
 */
#include "../core/kernels.h"
#include "element_hd.h"
#include "ref.h"

void qs_int8_quant__ref(const float *src, int64_t n, float mul, int32_t zp, int32_t qmin,
                        int8_t *dst)
{
    for (int64_t i = 0; i < n; i++)
        dst[i] = qs_ref_int8_encode(qs_ld_f32(src + i), mul, zp, qmin);
}

void qs_int8_dequant__ref(const int8_t *src, int64_t n, float scale, int32_t zp, float *dst)
{
    for (int64_t i = 0; i < n; i++)
        /* fl((q - zp) * s), q - zp exact; a NaN scale gives the canonical NaN */
        qs_st_f32(dst + i, qs_hd_int8_decode(src[i], scale, zp));
}

void qs_int8_dequant_rowstat__ref(const int8_t *src, int64_t n, float stat, float *dst)
{
    /* bitsandbytes int8_vectorwise_dequant: fl(fl(q * stat) * fl(1/127)), never a division (§8) */
    for (int64_t i = 0; i < n; i++)
        qs_st_f32(dst + i, qs_hd_int8_rowstat_decode(src[i], stat));
}
