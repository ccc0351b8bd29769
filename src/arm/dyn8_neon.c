/* SPDX-License-Identifier: MIT */
/*
 * bitsandbytes blockwise dynamic 8-bit quantization for AArch64 NEON (docs/formats.md §6.3,
 * §6.4), bit-identical to src/ref/dyn8_ref.c. The block absmax and the products x = v * inv are
 * vectorized; the code itself is the reference's search over the 255 midpoints of the map, which
 * has no gather-free vector form on NEON, so it stays one element at a time. Dequantize gathers
 * the map values lane by lane and keeps the multiply and the separate offset add in vectors.
 */
#include <arm_neon.h>
#include <string.h>

#include "../core/kernels.h"
#include "../ref/ref.h"
#include "neon_common.h"

void qs_dyn8_quant__neon(const float *src, int64_t n, int32_t block, uint8_t *dst, float *absmax)
{
    for (int64_t b = 0; b * block < n; b++) {
        int64_t start = b * block, i = 0;
        int64_t len = n - start < block ? n - start : block;
        float m = amax_neon(src + start, len), inv;

        qs_st_f32(absmax + b, m);
        if (m == 0.0f) { /* absmax 0: every code 0, as the reference's branch (§6.4) */
            memset(dst + start, 0, (size_t)len);
            continue;
        }
        inv = 1.0f / m;
        for (; i + 4 <= len; i += 4) {
            float x[4];
            vst1q_f32(x, vmulq_f32(vld1q_f32(src + start + i), vdupq_n_f32(inv)));
            for (int k = 0; k < 4; k++)
                dst[start + i + k] = qs_ref_dyn8_encode(x[k]);
        }
        for (; i < len; i++)
            dst[start + i] = qs_ref_dyn8_encode(qs_ld_f32(src + start + i) * inv);
    }
}

void qs_dyn8_dequant__neon(const uint8_t *src, const float *absmax, int64_t n, int32_t block,
                           float offset, float *dst)
{
    const float32x4_t off = vdupq_n_f32(offset);

    for (int64_t b = 0; b * block < n; b++) {
        int64_t start = b * block, i = start;
        int64_t end = n - start < block ? n : start + block;
        float s = qs_ld_f32(absmax + b);

        for (; i + 4 <= end; i += 4) {
            float32x4_t m = vld1q_dup_f32(&qs_dyn8_map[src[i]]);
            m = vld1q_lane_f32(&qs_dyn8_map[src[i + 1]], m, 1);
            m = vld1q_lane_f32(&qs_dyn8_map[src[i + 2]], m, 2);
            m = vld1q_lane_f32(&qs_dyn8_map[src[i + 3]], m, 3);
            /* a multiply, then a separate add: no FMA (§0 rule 1) */
            vst1q_f32(dst + i, nan_canon_neon(vaddq_f32(vmulq_f32(m, vdupq_n_f32(s)), off)));
        }
        for (; i < end; i++) {
            float v = qs_dyn8_map[src[i]] * s;
            qs_st_f32(dst + i, qs_ref_nan_canon(v + offset));
        }
    }
}
