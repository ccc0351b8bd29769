/* SPDX-License-Identifier: MIT */
/*
 * OCP Microscaling MXFP4 for AArch64 NEON (docs/formats.md §11, §12, §13), bit-identical to
 * src/ref/mxfp4_ref.c: blocks of 32 along a row, E8M0 scale from mx_neon.h, elements
 * P_i = E2M1_RNE_sat(v_i * 2^-shared_exp) (an exact power-of-two multiply, rounded once like
 * ldexpf), first element in the low nibble. Dequantize looks E2M1 values up by TBL and multiplies
 * by the decoded scale. Full groups of 16 are vectorized; partial blocks use the reference rules.
 */
#include <arm_neon.h>
#include <math.h>
#include <string.h>

#include "../core/kernels.h"
#include "../ref/ref.h"
#include "mx_neon.h"
#include "neon_common.h"

void qs_mxfp4_quant__neon(const float *src, int64_t n, int32_t rounding, uint8_t *dst,
                          uint8_t *scales)
{
    for (int64_t b = 0; b * 32 < n; b++) {
        const float *v = src + b * 32;
        uint8_t *d = dst + b * 16;
        int64_t len = n - b * 32 < 32 ? n - b * 32 : 32, i = 0;
        uint8_t s = len == 32 ? mx_scale32_neon(v, rounding, 2, 6.0f)
                              : mx_scale_neon(v, len, rounding, 2, 6.0f);
        int shift = 127 - (int)s;

        scales[b] = s;
        if (s == 0xFF) { /* NaN block: element codes 0 [convention] */
            memset(d, 0, (size_t)((len + 1) / 2));
            continue;
        }
        const float32x4_t p = vdupq_n_f32(mx_inv_scale_neon(s));
        for (; i + 16 <= len; i += 16) {
            uint32x4_t c[4];
            for (int k = 0; k < 4; k++)
                c[k] = e2m1_encode_neon(vmulq_f32(vld1q_f32(v + i + 4 * k), p));
            vst1_u8(d + i / 2, pack_lo_first_neon(narrow_codes_neon(c[0], c[1], c[2], c[3])));
        }
        for (; i < len; i += 2) {
            uint8_t lo = qs_ref_e2m1_encode(ldexpf(qs_ld_f32(v + i), shift));
            uint8_t hi = i + 1 < len ? qs_ref_e2m1_encode(ldexpf(qs_ld_f32(v + i + 1), shift)) : 0;
            d[i / 2] = (uint8_t)(lo | hi << 4);
        }
    }
}

void qs_mxfp4_dequant__neon(const uint8_t *src, const uint8_t *scales, int64_t n, float *dst)
{
    const lut16_neon lut = lut16_load_neon(qs_e2m1_values);

    for (int64_t b = 0; b * 32 < n; b++) {
        int64_t i = b * 32, end = n - i < 32 ? n : i + 32;
        float sc = qs_e8m0_decode_inline(scales[b]);
        float32x4_t vs = vdupq_n_f32(sc), f[4];

        for (; i + 16 <= end; i += 16) {
            lut16_lookup_neon(&lut, unpack_lo_first_neon(vld1_u8(src + i / 2)), f);
            /* no NaN fix-up: E2M1 values are finite and the scale a power of two or the
             * canonical NaN (0xFF), so a NaN product is a copy of that canonical operand
             * (tests/test_kernels.c proves it over every code and scale byte) */
            for (int k = 0; k < 4; k++)
                vst1q_f32(dst + i + 4 * k, vmulq_f32(f[k], vs));
        }
        for (; i < end; i++) {
            uint8_t code = (i & 1) ? (src[i / 2] >> 4) : (src[i / 2] & 0xF);
            qs_st_f32(dst + i, qs_ref_nan_canon(qs_e2m1_values[code] * sc));
        }
    }
}
