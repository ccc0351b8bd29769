/* SPDX-License-Identifier: MIT */
/*
 * OCP FP8 E5M2 (saturating to +-57344, NaN -> 0x7F | sign) with a per-tensor f32 scale for
 * AArch64 NEON (docs/formats.md §10), bit-identical to src/ref/e5m2_ref.c. Quantize:
 * q = cvt_sat(fl(x / scale)) with an IEEE division (FDIV) and the RNE minifloat encoder of
 * neon_common.h. Dequantize: the code is the upper byte of a binary16, widened by FCVTL, which
 * quiets a NaN and keeps its payload exactly as qs_ref_f16_to_f32 does; then fl(value(q) *
 * scale). Tails call the reference element routines.
 */
#include <arm_neon.h>

#include "../core/kernels.h"
#include "../ref/ref.h"
#include "neon_common.h"

void qs_e5m2_quant__neon(const float *src, int64_t n, float scale, uint8_t *dst)
{
    const float32x4_t vs = vdupq_n_f32(scale);
    int64_t i = 0;

    for (; i + 16 <= n; i += 16) {
        uint32x4_t c[4];
        for (int k = 0; k < 4; k++)
            c[k] = e5m2_encode_neon(vdivq_f32(vld1q_f32(src + i + 4 * k), vs));
        vst1q_u8(dst + i, narrow_codes_neon(c[0], c[1], c[2], c[3]));
    }
    for (; i < n; i++)
        dst[i] = qs_ref_e5m2_encode(qs_ld_f32(src + i) / scale); /* divided: formats.md */
}

void qs_e5m2_dequant__neon(const uint8_t *src, int64_t n, float scale, float *dst)
{
    const float32x4_t vs = vdupq_n_f32(scale);
    int64_t i = 0;

    for (; i + 8 <= n; i += 8) {
        /* byte c becomes the binary16 c << 8 */
        uint16x8_t h = vshll_n_u8(vld1_u8(src + i), 8);
        float16x8_t f = vreinterpretq_f16_u16(h);
        vst1q_f32(dst + i, nan_canon_neon(vmulq_f32(vcvt_f32_f16(vget_low_f16(f)), vs)));
        vst1q_f32(dst + i + 4, nan_canon_neon(vmulq_f32(vcvt_high_f32_f16(f), vs)));
    }
    for (; i < n; i++)
        qs_st_f32(dst + i, qs_ref_nan_canon(qs_ref_e5m2_decode(src[i]) * scale));
}
