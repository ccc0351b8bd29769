/* SPDX-License-Identifier: MIT */
/*
 * bitsandbytes NF4 quantize and dequantize for AArch64 NEON (docs/formats.md §2, §3, §5), the
 * same operation order as src/ref/nf4_ref.c: absmax with every NaN ignored, inv = 1/absmax,
 * x = v * inv (one multiply, never a division), code = #{k : x > t_k} counted with 15 vector
 * compares (a NaN x compares false everywhere and gets code 0), element 2j in the high nibble.
 * Dequantize looks the codebook up with byte-plane table lookups and does one multiply. Full
 * groups of 16 elements inside a block are vectorized; the rest of a block goes through the
 * reference element routines.
 */
#include <arm_neon.h>
#include <string.h>

#include "../core/kernels.h"
#include "../ref/ref.h"
#include "neon_common.h"

/* Codes of 16 consecutive elements v[0..16) scaled by inv. (Splitting the count at t_7 and
 * picking each lane's thresholds with BSL needs as many instructions: BSL overwrites its mask.) */
static inline uint8x16_t nf4_codes16_neon(const float *v, float32x4_t inv)
{
    float32x4_t x0 = vmulq_f32(vld1q_f32(v), inv), x1 = vmulq_f32(vld1q_f32(v + 4), inv);
    float32x4_t x2 = vmulq_f32(vld1q_f32(v + 8), inv), x3 = vmulq_f32(vld1q_f32(v + 12), inv);
    uint32x4_t c0 = vdupq_n_u32(0), c1 = c0, c2 = c0, c3 = c0;

    for (int k = 0; k < 15; k++) {
        float32x4_t t = vdupq_n_f32(qs_nf4_thresholds[k]);
        /* a true compare is all ones, i.e. -1: subtracting it counts the threshold */
        c0 = vsubq_u32(c0, vcgtq_f32(x0, t));
        c1 = vsubq_u32(c1, vcgtq_f32(x1, t));
        c2 = vsubq_u32(c2, vcgtq_f32(x2, t));
        c3 = vsubq_u32(c3, vcgtq_f32(x3, t));
    }
    return narrow_codes_neon(c0, c1, c2, c3);
}

static float nf4_block_neon(const float *v, int64_t len, uint8_t *dst)
{
    float absmax = amax_neon(v, len), inv;
    int64_t i = 0;

    if (absmax == 0.0f) { /* all-zero (or all-NaN) block: explicit branch, codes 0 (§5.2) */
        memset(dst, 0x00, (size_t)((len + 1) / 2));
        return absmax;
    }
    inv = 1.0f / absmax; /* may be +Inf for absmax <= 2^-128: not special-cased (§5.2) */
    for (; i + 16 <= len; i += 16)
        vst1_u8(dst + i / 2, pack_hi_first_neon(nf4_codes16_neon(v + i, vdupq_n_f32(inv))));
    for (; i < len; i += 2) {
        uint8_t hi = qs_ref_nf4_encode(qs_ld_f32(v + i) * inv);
        uint8_t lo = qs_ref_nf4_encode((i + 1 < len ? qs_ld_f32(v + i + 1) : 0.0f) * inv);
        dst[i / 2] = (uint8_t)(hi << 4 | lo);
    }
    return absmax;
}

void qs_nf4_quant__neon(const float *src, int64_t n, int32_t block, uint8_t *dst, float *absmax)
{
    for (int64_t b = 0; b * block < n; b++) {
        int64_t start = b * block;
        int64_t len = n - start < block ? n - start : block;
        qs_st_f32(absmax + b, nf4_block_neon(src + start, len, dst + start / 2));
    }
}

void qs_nf4_dequant__neon(const uint8_t *src, const float *absmax, int64_t n, int32_t block,
                          float *dst)
{
    const lut16_neon lut = lut16_load_neon(qs_nf4_codebook);

    for (int64_t b = 0; b * block < n; b++) {
        int64_t start = b * block, i = start;
        int64_t end = n - start < block ? n : start + block;
        float s = qs_ld_f32(absmax + b);
        float32x4_t vs = vdupq_n_f32(s), f[4];
        const int finite = (qs_f32_bits(s) & 0x7F800000u) != 0x7F800000u;

        for (; i + 16 <= end; i += 16) { /* block is even, so i is even: byte aligned */
            lut16_lookup_neon(&lut, unpack_hi_first_neon(vld1_u8(src + i / 2)), f);
            /* a finite codebook value times a finite absmax is never NaN: the NaN rule's
             * compare and select only for a non-finite absmax */
            if (finite)
                for (int k = 0; k < 4; k++)
                    vst1q_f32(dst + i + 4 * k, vmulq_f32(f[k], vs));
            else
                for (int k = 0; k < 4; k++)
                    vst1q_f32(dst + i + 4 * k, nan_canon_neon(vmulq_f32(f[k], vs)));
        }
        for (; i < end; i++) {
            uint8_t code = (i & 1) ? (src[i / 2] & 0xF) : (src[i / 2] >> 4);
            /* §5.3: one f32 multiply */
            qs_st_f32(dst + i, qs_ref_nan_canon(qs_nf4_codebook[code] * s));
        }
    }
}
