/* SPDX-License-Identifier: MIT */
/*
 * NVIDIA NVFP4 for AArch64 NEON (docs/formats.md §11, §14), bit-identical to
 * src/ref/nvfp4_ref.c: blocks of 16 along a row; the block amax is vectorized (every NaN
 * ignored), the E4M3 block scale S = amax / fl(6 * s_global) and den = fl(value(S) * s_global)
 * are computed for four blocks at once in vectors (one scalar step per block in the tail), and
 * the elements P = E2M1(fl(v / den)) use an IEEE vector division. Dequantize: fl(value(P) * den)
 * with the same den, E2M1 values by TBL. Partial blocks use the reference rules.
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

/* Codes of one full block of 16 with divisor den (non-zero), low nibble first. */
static inline uint8x8_t nvfp4_codes16_neon(const float *v, float den)
{
    const float32x4_t vd = vdupq_n_f32(den);
    uint32x4_t c[4];

    for (int k = 0; k < 4; k++)
        c[k] = e2m1_encode_neon(vdivq_f32(vld1q_f32(v + 4 * k), vd));
    return pack_lo_first_neon(narrow_codes_neon(c[0], c[1], c[2], c[3]));
}

/* Four full blocks (64 elements): the four block maxima land in one vector (pairwise FMAXP),
 * so the scale rule of step 2 and den of step 3 run once for four blocks, in vectors. */
static void nvfp4_quad_neon(const float *v, float s_global, uint8_t *d, uint8_t *scales)
{
    float32x4_t m[4], den;
    float dd[4];

    for (int b = 0; b < 4; b++) {
        const float *p = v + 16 * b;
        float32x4_t a = absmax_step_neon(vdupq_n_f32(0.0f), vld1q_f32(p));
        float32x4_t c = absmax_step_neon(vdupq_n_f32(0.0f), vld1q_f32(p + 4));
        a = absmax_step_neon(a, vld1q_f32(p + 8));
        c = absmax_step_neon(c, vld1q_f32(p + 12));
        m[b] = vmaxq_f32(a, c); /* no NaN left: every lane is a number >= +0 */
    }
    float32x4_t amax = vpmaxq_f32(vpmaxq_f32(m[0], m[1]), vpmaxq_f32(m[2], m[3]));
    float32x4_t s = vdivq_f32(amax, vdupq_n_f32(6.0f * s_global));
    uint32x4_t zero = vceqq_f32(s, vdupq_n_f32(0.0f));
    /* a comparison, not a max, so that NaN stays NaN */
    s = vbslq_f32(vcltq_f32(s, vdupq_n_f32(0x1p-9f)), vdupq_n_f32(0x1p-9f), s);
    uint32x4_t code = vandq_u32(e4m3_encode_neon(s), vdupq_n_u32(0x7F));
    code = vbslq_u32(zero, vdupq_n_u32(0x38), code); /* all-zero block: 1.0 */
    den = vmulq_f32(e4m3_decode_neon(code), vdupq_n_f32(s_global));
    vst1q_f32(dd, den);
    uint8_t sb[8];
    vst1_u8(sb, vmovn_u16(vcombine_u16(vmovn_u32(code), vdup_n_u16(0))));
    memcpy(scales, sb, 4);
    for (int b = 0; b < 4; b++) {
        if (dd[b] == 0.0f) /* subnormal s_global: every code 0 */
            vst1_u8(d + 8 * b, vdup_n_u8(0));
        else
            vst1_u8(d + 8 * b, nvfp4_codes16_neon(v + 16 * b, dd[b]));
    }
}

void qs_nvfp4_quant__neon(const float *src, int64_t n, float s_global, uint8_t *dst,
                          uint8_t *scales)
{
    int64_t b = 0;

    for (; (b + 4) * 16 <= n; b += 4)
        nvfp4_quad_neon(src + b * 16, s_global, dst + b * 8, scales + b);
    for (; b * 16 < n; b++) {
        const float *v = src + b * 16;
        uint8_t *d = dst + b * 8;
        int64_t len = n - b * 16 < 16 ? n - b * 16 : 16;
        uint8_t s = nvfp4_block_scale_neon(v, len, s_global);
        float den = qs_ref_e4m3_decode(s) * s_global;

        scales[b] = s;
        if (den == 0.0f) {
            memset(d, 0, (size_t)((len + 1) / 2));
        } else if (len == 16) {
            vst1_u8(d, nvfp4_codes16_neon(v, den));
        } else {
            for (int64_t i = 0; i < len; i += 2) {
                uint8_t lo = qs_ref_e2m1_encode(qs_ld_f32(v + i) / den);
                uint8_t hi = i + 1 < len ? qs_ref_e2m1_encode(qs_ld_f32(v + i + 1) / den) : 0;
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
        float den = qs_ue4m3_values[scales[b] & 0x7F] * s_global;

        if (end - i == 16) {
            float32x4_t f[4];
            lut16_lookup_neon(&lut, unpack_lo_first_neon(vld1_u8(src + i / 2)), f);
            for (int k = 0; k < 4; k++)
                vst1q_f32(dst + i + 4 * k, nan_canon_neon(vmulq_f32(f[k], vdupq_n_f32(den))));
            continue;
        }
        for (; i < end; i++) {
            uint8_t code = (i & 1) ? (src[i / 2] >> 4) : (src[i / 2] & 0xF);
            qs_st_f32(dst + i, qs_ref_nan_canon(qs_e2m1_values[code] * den));
        }
    }
}
