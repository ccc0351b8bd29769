/* SPDX-License-Identifier: MIT */
/*
 * OCP FP8 E4M3 ("fn": saturating to +-448, NaN -> 0x7F | sign) with a per-tensor f32 scale for
 * AArch64 NEON (docs/formats.md §10), bit-identical to src/ref/e4m3_ref.c. Quantize:
 * q = cvt_sat(fl(x / scale)) with an IEEE division (FDIV) and the RNE minifloat encoder of
 * neon_common.h. Dequantize: the magnitude bits placed in an f32 and one exact multiply by 2^120,
 * then fl(value(q) * scale). Tails call the reference element routines.
 */
#include <arm_neon.h>

#include "../core/kernels.h"
#include "../ref/ref.h"
#include "neon_common.h"

void qs_e4m3_quant__neon(const float *src, int64_t n, float scale, uint8_t *dst)
{
    const float32x4_t vs = vdupq_n_f32(scale);
    int64_t i = 0;

    for (; i + 16 <= n; i += 16) {
        uint32x4_t c[4];
        for (int k = 0; k < 4; k++)
            c[k] = e4m3_encode_neon(vdivq_f32(vld1q_f32(src + i + 4 * k), vs));
        vst1q_u8(dst + i, narrow_codes_neon(c[0], c[1], c[2], c[3]));
    }
    for (; i < n; i++)
        dst[i] = qs_ref_e4m3_encode(qs_ld_f32(src + i) / scale); /* divided: formats.md */
}

void qs_e4m3_dequant__neon(const uint8_t *src, int64_t n, float scale, float *dst)
{
    const float32x4_t vs = vdupq_n_f32(scale);
    int64_t i = 0;

    for (; i + 16 <= n; i += 16) {
        uint32x4_t w[4];
        widen_u8_neon(vld1q_u8(src + i), w);
        for (int k = 0; k < 4; k++)
            vst1q_f32(dst + i + 4 * k, nan_canon_neon(vmulq_f32(e4m3_decode_neon(w[k]), vs)));
    }
    for (; i < n; i++)
        qs_st_f32(dst + i, qs_ref_nan_canon(qs_ref_e4m3_decode(src[i]) * scale));
}
