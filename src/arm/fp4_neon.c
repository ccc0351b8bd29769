/* SPDX-License-Identifier: MIT */
/*
 * bitsandbytes FP4 quantize and dequantize for AArch64 NEON (docs/formats.md §4, §5), the same
 * operation order as src/ref/fp4_ref.c: the NF4 block rule with the FP4 encode: sign from
 * x < 0 (so -0.0 and NaN give 0), rank r = #{k : |x| > t_k} against the CUDA threshold literals,
 * code = sign | R[r] with R looked up by TBL; element 2j in the high nibble. Full groups of 16
 * elements inside a block are vectorized; the rest goes through the reference element routines.
 */
#include <arm_neon.h>
#include <string.h>

#include "../core/kernels.h"
#include "../ref/ref.h"
#include "neon_common.h"

static inline uint8x16_t fp4_codes16_neon(const float *v, float32x4_t inv, uint8x16_t rank_code)
{
    float32x4_t x[4];
    uint32x4_t r[4], s[4];

    for (int j = 0; j < 4; j++) {
        x[j] = vmulq_f32(vld1q_f32(v + 4 * j), inv);
        s[j] = vcltq_f32(x[j], vdupq_n_f32(0.0f));
        x[j] = vabsq_f32(x[j]);
        r[j] = vdupq_n_u32(0);
    }
    for (int k = 0; k < 7; k++) {
        float32x4_t t = vdupq_n_f32(qs_fp4_thresholds[k]);
        for (int j = 0; j < 4; j++)
            r[j] = vsubq_u32(r[j], vcgtq_f32(x[j], t)); /* a true compare is -1 */
    }
    uint8x16_t code = vqtbl1q_u8(rank_code, narrow_codes_neon(r[0], r[1], r[2], r[3]));
    uint8x16_t sign = vandq_u8(narrow_codes_neon(s[0], s[1], s[2], s[3]), vdupq_n_u8(0x8));
    return vorrq_u8(code, sign);
}

static float fp4_block_neon(const float *v, int64_t len, uint8_t *dst, uint8x16_t rank_code)
{
    float absmax = amax_neon(v, len), inv;
    int64_t i = 0;

    if (absmax == 0.0f) { /* all-zero (or all-NaN) block: explicit branch, codes 0 (§5.2) */
        memset(dst, 0x00, (size_t)((len + 1) / 2));
        return absmax;
    }
    inv = 1.0f / absmax;
    for (; i + 16 <= len; i += 16)
        vst1_u8(dst + i / 2,
                pack_hi_first_neon(fp4_codes16_neon(v + i, vdupq_n_f32(inv), rank_code)));
    for (; i < len; i += 2) {
        uint8_t hi = qs_ref_fp4_encode(qs_ld_f32(v + i) * inv);
        uint8_t lo = qs_ref_fp4_encode((i + 1 < len ? qs_ld_f32(v + i + 1) : 0.0f) * inv);
        dst[i / 2] = (uint8_t)(hi << 4 | lo);
    }
    return absmax;
}

void qs_fp4_quant__neon(const float *src, int64_t n, int32_t block, uint8_t *dst, float *absmax)
{
    uint8_t table[16] = {0};
    uint8x16_t rank_code;

    memcpy(table, qs_fp4_rank_code, 8);
    rank_code = vld1q_u8(table);
    for (int64_t b = 0; b * block < n; b++) {
        int64_t start = b * block;
        int64_t len = n - start < block ? n - start : block;
        qs_st_f32(absmax + b, fp4_block_neon(src + start, len, dst + start / 2, rank_code));
    }
}

void qs_fp4_dequant__neon(const uint8_t *src, const float *absmax, int64_t n, int32_t block,
                          float *dst)
{
    const lut16_neon lut = lut16_load_neon(qs_fp4_codebook);

    for (int64_t b = 0; b * block < n; b++) {
        int64_t start = b * block, i = start;
        int64_t end = n - start < block ? n : start + block;
        float s = qs_ld_f32(absmax + b);
        float32x4_t vs = vdupq_n_f32(s), f[4];
        const int finite = (qs_f32_bits(s) & 0x7F800000u) != 0x7F800000u;

        for (; i + 16 <= end; i += 16) {
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
            qs_st_f32(dst + i, qs_ref_nan_canon(qs_fp4_codebook[code] * s));
        }
    }
}
