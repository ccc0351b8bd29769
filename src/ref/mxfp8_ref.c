/* SPDX-License-Identifier: MIT */
/*
 * OCP Microscaling MXFP8 with E4M3 elements (docs/formats.md §10, §12, §13): blocks of 32 along a
 * row, E8M0 scale, elements P_i = E4M3_RNE_sat(v_i * 2^-shared_exp), one byte each.
 */
#include <math.h>

#include "../core/kernels.h"
#include "mx_ref.h"
#include "ref.h"

void qs_mxfp8_quant__ref(const float *src, int64_t n, int32_t rounding, uint8_t *dst,
                         uint8_t *scales)
{
    for (int64_t b = 0; b * 32 < n; b++) {
        const float *v = src + b * 32;
        int64_t len = n - b * 32 < 32 ? n - b * 32 : 32;
        uint8_t s = qs_ref_mx_scale(v, len, rounding, 8, 448.0f);
        int shift = 127 - (int)s;

        scales[b] = s;
        for (int64_t i = 0; i < len; i++)
            dst[b * 32 + i] = s == 0xFF ? 0 : qs_ref_e4m3_encode(ldexpf(qs_ld_f32(v + i), shift));
    }
}

void qs_mxfp8_dequant__ref(const uint8_t *src, const uint8_t *scales, int64_t n, float *dst)
{
    for (int64_t i = 0; i < n; i++) {
        /* NaN code times NaN scale: which NaN a multiply returns is the compiler's choice of
         * operand order; the canonical NaN removes it (ref.h) */
        float v = qs_ref_e4m3_decode(src[i]) * qs_ref_e8m0_decode(scales[i / 32]);
        qs_st_f32(dst + i, qs_ref_nan_canon(v));
    }
}
