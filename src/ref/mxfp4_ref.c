/* SPDX-License-Identifier: MIT */
/*
 * OCP Microscaling MXFP4 (docs/formats.md §11, §12, §13): blocks of 32 along a row, E8M0 scale
 * X = 2^shared_exp, elements P_i = E2M1_RNE_sat(v_i * 2^-shared_exp), first element in the low
 * nibble. A partial last block reads its missing elements as +0.0.
 */
#include <math.h>

#include "../core/kernels.h"
#include "mx_ref.h"
#include "ref.h"

void qs_mxfp4_quant__ref(const float *src, int64_t n, int32_t rounding, uint8_t *dst,
                         uint8_t *scales)
{
    for (int64_t b = 0; b * 32 < n; b++) {
        const float *v = src + b * 32;
        int64_t len = n - b * 32 < 32 ? n - b * 32 : 32;
        uint8_t s = qs_ref_mx_scale(v, len, rounding, 2, 6.0f);
        int shift = 127 - (int)s; /* multiply by 2^-shared_exp */

        scales[b] = s;
        for (int64_t i = 0; i < len; i += 2) {
            uint8_t lo = 0, hi = 0; /* NaN block: element codes 0 [convention] */
            if (s != 0xFF) {
                lo = qs_ref_e2m1_encode(ldexpf(qs_ld_f32(v + i), shift));
                hi = i + 1 < len ? qs_ref_e2m1_encode(ldexpf(qs_ld_f32(v + i + 1), shift)) : 0;
            }
            dst[(b * 32 + i) / 2] = (uint8_t)(lo | hi << 4);
        }
    }
}

void qs_mxfp4_dequant__ref(const uint8_t *src, const uint8_t *scales, int64_t n, float *dst)
{
    for (int64_t i = 0; i < n; i++) {
        uint8_t code = (i & 1) ? (src[i / 2] >> 4) : (src[i / 2] & 0xF);
        /* scale 0xFF: the canonical NaN, whatever the code */
        qs_st_f32(dst + i,
                  qs_ref_nan_canon(qs_e2m1_values[code] * qs_ref_e8m0_decode(scales[i / 32])));
    }
}
