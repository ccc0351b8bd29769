/* SPDX-License-Identifier: MIT */
/*
 * OCP Microscaling MXFP8 with E4M3 elements for AArch64 NEON (docs/formats.md §10, §12, §13),
 * bit-identical to src/ref/mxfp8_ref.c: blocks of 32 along a row, E8M0 scale from mx_neon.h,
 * P_i = E4M3_RNE_sat(v_i * 2^-shared_exp) (an exact power-of-two multiply, rounded once like
 * ldexpf), one byte each; dequantize fl(value(P_i) * 2^(e - 127)). Partial groups use the
 * reference rules.
 */
#include <arm_neon.h>
#include <math.h>
#include <string.h>

#include "../core/kernels.h"
#include "../ref/ref.h"
#include "mx_neon.h"
#include "neon_common.h"

void qs_mxfp8_quant__neon(const float *src, int64_t n, int32_t rounding, uint8_t *dst,
                          uint8_t *scales)
{
    for (int64_t b = 0; b * 32 < n; b++) {
        const float *v = src + b * 32;
        uint8_t *d = dst + b * 32;
        int64_t len = n - b * 32 < 32 ? n - b * 32 : 32, i = 0;
        uint8_t s = len == 32 ? mx_scale32_neon(v, rounding, 8, 448.0f)
                              : mx_scale_neon(v, len, rounding, 8, 448.0f);
        int shift = 127 - (int)s;

        scales[b] = s;
        if (s == 0xFF) {
            memset(d, 0, (size_t)len);
            continue;
        }
        const float32x4_t p = vdupq_n_f32(mx_inv_scale_neon(s));
        for (; i + 16 <= len; i += 16) {
            uint32x4_t c[4];
            for (int k = 0; k < 4; k++)
                c[k] = e4m3_encode_neon(vmulq_f32(vld1q_f32(v + i + 4 * k), p));
            vst1q_u8(d + i, narrow_codes_neon(c[0], c[1], c[2], c[3]));
        }
        for (; i < len; i++)
            d[i] = qs_ref_e4m3_encode(ldexpf(qs_ld_f32(v + i), shift));
    }
}

void qs_mxfp8_dequant__neon(const uint8_t *src, const uint8_t *scales, int64_t n, float *dst)
{
    for (int64_t b = 0; b * 32 < n; b++) {
        int64_t i = b * 32, end = n - i < 32 ? n : i + 32;
        float sc = qs_e8m0_decode_inline(scales[b]);
        float32x4_t vs = vdupq_n_f32(sc);

        for (; i + 16 <= end; i += 16) {
            uint32x4_t w[4];
            widen_u8_neon(vld1q_u8(src + i), w);
            for (int k = 0; k < 4; k++)
                vst1q_f32(dst + i + 4 * k, nan_canon_neon(vmulq_f32(e4m3_decode_neon(w[k]), vs)));
        }
        for (; i < end; i++)
            qs_st_f32(dst + i, qs_ref_nan_canon(qs_ref_e4m3_decode(src[i]) * sc));
    }
}
