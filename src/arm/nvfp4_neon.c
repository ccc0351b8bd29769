/* SPDX-License-Identifier: MIT */
/*
 * NVIDIA NVFP4 for AArch64 NEON (spec/formats.md §11, §14), bit-identical to
 * src/ref/nvfp4_ref.c: blocks of 16 along a row; the block amax is vectorized (FMAXNM, NaN
 * ignored), the E4M3 block scale S = amax / fl(6 * s_global) and den = fl(value(S) * s_global) are
 * one scalar step per block as in the reference, and the elements P = E2M1(fl(v / den)) use an
 * IEEE vector division. Dequantize: fl(value(P) * den) with the same den, E2M1 values by TBL.
 * Partial blocks use the reference rules.
 */
#include <arm_neon.h>
#include <string.h>

#include "../core/kernels.h"
#include "../ref/ref.h"
#include "neon_common.h"

static uint8_t nvfp4_block_scale_neon(const float *v, int64_t len, float s_global)
{
    float s = amax_neon(v, len) / (6.0f * s_global);

    if (s == 0.0f)
        return 0x38; /* all-zero block: 1.0 */
    if (s < 0x1p-9f)
        s = 0x1p-9f; /* a comparison, not fmaxf, so that NaN stays NaN */
    return (uint8_t)(qs_ref_e4m3_encode(s) & 0x7F); /* unsigned: NaN S gives 0x7F */
}

void qs_nvfp4_quant__neon(const float *src, int64_t n, float s_global, uint8_t *dst,
                          uint8_t *scales)
{
    for (int64_t b = 0; b * 16 < n; b++) {
        const float *v = src + b * 16;
        uint8_t *d = dst + b * 8;
        int64_t len = n - b * 16 < 16 ? n - b * 16 : 16;
        uint8_t s = nvfp4_block_scale_neon(v, len, s_global);
        float den = qs_ref_e4m3_decode(s) * s_global;

        scales[b] = s;
        if (den == 0.0f) { /* subnormal s_global: every code 0 */
            memset(d, 0, (size_t)((len + 1) / 2));
        } else if (len == 16) {
            const float32x4_t vd = vdupq_n_f32(den);
            uint32x4_t c[4];
            for (int k = 0; k < 4; k++)
                c[k] = e2m1_encode_neon(vdivq_f32(vld1q_f32(v + 4 * k), vd));
            vst1_u8(d, pack_lo_first_neon(narrow_codes_neon(c[0], c[1], c[2], c[3])));
        } else {
            for (int64_t i = 0; i < len; i += 2) {
                uint8_t lo = qs_ref_e2m1_encode(v[i] / den);
                uint8_t hi = i + 1 < len ? qs_ref_e2m1_encode(v[i + 1] / den) : 0;
                d[i / 2] = (uint8_t)(lo | hi << 4);
            }
        }
    }
}

void qs_nvfp4_dequant__neon(const uint8_t *src, const uint8_t *scales, int64_t n, float s_global,
                            float *dst)
{
    const lut16_neon lut = lut16_load_neon(qs_e2m1_values);

    for (int64_t b = 0; b * 16 < n; b++) {
        int64_t i = b * 16, end = n - i < 16 ? n : i + 16;
        /* UE4M3: readers ignore the sign bit (§14) */
        float den = qs_ref_e4m3_decode(scales[b] & 0x7F) * s_global;

        if (end - i == 16) {
            float32x4_t f[4];
            lut16_lookup_neon(&lut, unpack_lo_first_neon(vld1_u8(src + i / 2)), f);
            for (int k = 0; k < 4; k++)
                vst1q_f32(dst + i + 4 * k, vmulq_f32(f[k], vdupq_n_f32(den)));
            continue;
        }
        for (; i < end; i++) {
            uint8_t code = (i & 1) ? (src[i / 2] >> 4) : (src[i / 2] & 0xF);
            dst[i] = qs_e2m1_values[code] * den;
        }
    }
}
