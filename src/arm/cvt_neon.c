/* SPDX-License-Identifier: MIT */
/*
 * f16/bf16 <-> f32 conversions for AArch64 NEON (docs/formats.md §0 rule 4), bit-identical to
 * src/ref/cvt_ref.c. f16 uses the baseline FCVTL/FCVTN instructions: with FPCR in its default
 * state (round to nearest even, no flush-to-zero, DN = 0) they round like the reference and keep
 * NaN payloads the same way (quiet bit set, top payload bits kept). bf16 has no baseline
 * instruction (BFCVTN needs FEAT_BF16), so f32 -> bf16 is the reference's integer RNE with the
 * pinned NaN bits. Tails call the reference element routines.
 */
#include <arm_neon.h>
#include <string.h>

#include "../core/kernels.h"
#include "../ref/ref.h"

void qs_cvt_f16_f32__neon(const uint16_t *src, int64_t n, float *dst)
{
    int64_t i = 0;

    for (; i + 8 <= n; i += 8) {
        float16x8_t h = vreinterpretq_f16_u16(vld1q_u16(src + i));
        vst1q_f32(dst + i, vcvt_f32_f16(vget_low_f16(h)));
        vst1q_f32(dst + i + 4, vcvt_high_f32_f16(h));
    }
    for (; i < n; i++)
        qs_st_f32(dst + i, qs_ref_f16_to_f32(qs_ld_u16(src + i)));
}

void qs_cvt_bf16_f32__neon(const uint16_t *src, int64_t n, float *dst)
{
    int64_t i = 0;

    for (; i + 8 <= n; i += 8) {
        uint16x8_t h = vld1q_u16(src + i);
        vst1q_f32(dst + i, vreinterpretq_f32_u32(vshll_n_u16(vget_low_u16(h), 16)));
        vst1q_f32(dst + i + 4, vreinterpretq_f32_u32(vshll_high_n_u16(h, 16)));
    }
    for (; i < n; i++)
        qs_st_f32(dst + i, qs_ref_bf16_to_f32(qs_ld_u16(src + i)));
}

void qs_cvt_f32_f16__neon(const float *src, int64_t n, uint16_t *dst)
{
    int64_t i = 0;

    for (; i + 8 <= n; i += 8) {
        float16x4_t lo = vcvt_f16_f32(vld1q_f32(src + i));
        float16x8_t h = vcvt_high_f16_f32(lo, vld1q_f32(src + i + 4));
        vst1q_u16(dst + i, vreinterpretq_u16_f16(h));
    }
    for (; i < n; i++)
        qs_st_u16(dst + i, qs_ref_f32_to_f16(qs_ld_f32(src + i)));
}

/* RNE on the bits: u + 0x7FFF + ((u >> 16) & 1), then the top half; NaN lanes get the pinned
 * (u >> 16) | 0x0040 instead (§0 rule 4). */
static inline uint16x4_t bf16_round4_neon(float32x4_t x)
{
    uint32x4_t u = vreinterpretq_u32_f32(x);
    uint32x4_t odd = vandq_u32(vshrq_n_u32(u, 16), vdupq_n_u32(1));
    uint32x4_t r = vaddq_u32(vaddq_u32(u, vdupq_n_u32(0x7FFFu)), odd);
    uint32x4_t nan = vorrq_u32(u, vdupq_n_u32(0x00400000u));
    return vshrn_n_u32(vbslq_u32(vceqq_f32(x, x), r, nan), 16);
}

void qs_cvt_f32_bf16__neon(const float *src, int64_t n, uint16_t *dst)
{
    int64_t i = 0;

    for (; i + 8 <= n; i += 8) {
        uint16x4_t lo = bf16_round4_neon(vld1q_f32(src + i));
        uint16x4_t hi = bf16_round4_neon(vld1q_f32(src + i + 4));
        vst1q_u16(dst + i, vcombine_u16(lo, hi));
    }
    for (; i < n; i++)
        qs_st_u16(dst + i, qs_ref_f32_to_bf16(qs_ld_f32(src + i)));
}

/* Non-temporal copy: STNP of two 128-bit registers (a hint that the lines are not kept in the
 * cache; no alignment needed beyond the element's), a plain tail, and with `fence` a DMB ISHST so
 * that the stores are ordered before the caller's threads synchronize. Integer registers' bits:
 * NaN payloads are src's. */
void qs_copy_stream_f32__neon(const float *src, int64_t n, float *dst, int32_t fence)
{
    int64_t i = 0;

    for (; i + 8 <= n; i += 8) {
        uint32x4_t a = vld1q_u32((const uint32_t *)(const void *)(src + i));
        uint32x4_t b = vld1q_u32((const uint32_t *)(const void *)(src + i + 4));
        __asm__ volatile("stnp %q[a], %q[b], [%[p]]"
                         :
                         : [a] "w"(a), [b] "w"(b), [p] "r"(dst + i)
                         : "memory");
    }
    if (i < n)
        memcpy(dst + i, src + i, (size_t)(n - i) * sizeof(float));
    if (fence)
        __asm__ volatile("dmb ishst" ::: "memory");
}
