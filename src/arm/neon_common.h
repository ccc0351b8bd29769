/* SPDX-License-Identifier: MIT */
/*
 * Small NEON building blocks shared by the kernels of src/arm/ (all built with the same baseline
 * AArch64 flags, so these static functions never leak an instruction into another tier): the
 * absolute maximum that ignores every NaN, the RNE saturating minifloat encoder of
 * docs/formats.md §10/§11, the E4M3 decoder, 16-entry float table lookups and nibble packing in
 * both orders (§16).
 * The library runs in the default floating-point environment (FPCR: round to nearest, no
 * flush-to-zero, no default-NaN); nothing here changes it.
 */
#ifndef QS_ARM_NEON_COMMON_H
#define QS_ARM_NEON_COMMON_H

#include <arm_neon.h>
#include <math.h>
#include <stdint.h>
#include <string.h>

#include "../ref/ref.h"

/* acc = max(acc, |x|) lane-wise with every NaN ignored, signaling ones included: a compare and
 * a select, as qs_ref_absmax_step (FMAXNM would turn a signaling NaN into a NaN result). */
static inline float32x4_t absmax_step_neon(float32x4_t acc, float32x4_t x)
{
    float32x4_t a = vabsq_f32(x);
    return vbslq_f32(vcgtq_f32(a, acc), a, acc);
}

/* max |v[i]| over len elements starting from +0.0, NaN ignored (docs/formats.md §5.2 step 1).
 * The accumulators never hold a NaN, and max is exact, so the lane order does not matter. */
static inline float amax_neon(const float *v, int64_t len)
{
    float32x4_t a0 = vdupq_n_f32(0.0f), a1 = a0, a2 = a0, a3 = a0;
    int64_t i = 0;
    float m;

    for (; i + 16 <= len; i += 16) {
        a0 = absmax_step_neon(a0, vld1q_f32(v + i));
        a1 = absmax_step_neon(a1, vld1q_f32(v + i + 4));
        a2 = absmax_step_neon(a2, vld1q_f32(v + i + 8));
        a3 = absmax_step_neon(a3, vld1q_f32(v + i + 12));
    }
    for (; i + 4 <= len; i += 4)
        a0 = absmax_step_neon(a0, vld1q_f32(v + i));
    m = vmaxvq_f32(vmaxq_f32(vmaxq_f32(a0, a1), vmaxq_f32(a2, a3)));
    for (; i < len; i++)
        m = qs_ref_absmax_step(m, qs_ld_f32(v + i));
    return m;
}

/* 1 if any of v[0..len) is NaN or +-Inf (exponent field all ones). */
static inline int nonfinite_neon(const float *v, int64_t len)
{
    const uint32x4_t e = vdupq_n_u32(0x7F800000u);
    uint32x4_t any = vdupq_n_u32(0);
    int64_t i = 0;

    for (; i + 4 <= len; i += 4) {
        uint32x4_t u = vreinterpretq_u32_f32(vld1q_f32(v + i));
        any = vorrq_u32(any, vceqq_u32(vandq_u32(u, e), e));
    }
    if (vmaxvq_u32(any))
        return 1;
    for (; i < len; i++) {
        uint32_t u;
        memcpy(&u, v + i, 4);
        if ((u & 0x7F800000u) == 0x7F800000u)
            return 1;
    }
    return 0;
}

/*
 * Magnitude code of |x| in a minifloat with `mbits` mantissa bits, exponent bias `bias`, rounded
 * to nearest even and saturated to `maxmag` (the encode_magnitude rule of element_ref.c). The
 * input is first clamped to 2^20, above every saturation point, which also turns +Inf into a
 * saturating value. e = max(floor(log2 a), 1 - bias) comes from the exponent bits (f32 subnormals
 * give -127 and are clamped like every value of the format's subnormal range); a * 2^(mbits - e)
 * is exact, so one vrndn is the whole rounding, and a carry into the next binade lands on the
 * right code by the addition. NaN lanes return garbage: callers select their NaN code.
 */
static inline uint32x4_t minifloat_mag_neon(float32x4_t x, int mbits, int bias, uint32_t maxmag)
{
    float32x4_t a = vminq_f32(vabsq_f32(x), vdupq_n_f32(0x1p20f));
    int32x4_t e = vreinterpretq_s32_u32(vshrq_n_u32(vreinterpretq_u32_f32(a), 23));
    e = vmaxq_s32(vsubq_s32(e, vdupq_n_s32(127)), vdupq_n_s32(1 - bias));
    int32x4_t pbits = vshlq_n_s32(vsubq_s32(vdupq_n_s32(127 + mbits), e), 23);
    float32x4_t r = vrndnq_f32(vmulq_f32(a, vreinterpretq_f32_s32(pbits)));
    int32x4_t hi = vshlq_s32(vaddq_s32(e, vdupq_n_s32(bias - 1)), vdupq_n_s32(mbits));
    uint32x4_t code = vaddq_u32(vreinterpretq_u32_s32(hi), vcvtq_u32_f32(r));
    return vminq_u32(code, vdupq_n_u32(maxmag));
}

/* OCP E4M3 (§10): RNE, saturating to 448, NaN -> 0x7F | sign. One code per u32 lane. */
static inline uint32x4_t e4m3_encode_neon(float32x4_t x)
{
    uint32x4_t sign = vandq_u32(vshrq_n_u32(vreinterpretq_u32_f32(x), 24), vdupq_n_u32(0x80));
    uint32x4_t mag = vbslq_u32(vceqq_f32(x, x), minifloat_mag_neon(x, 3, 7, 0x7E),
                               vdupq_n_u32(0x7F));
    return vorrq_u32(sign, mag);
}

/* OCP E5M2 (§10): RNE, saturating to 57344, NaN -> 0x7F | sign. */
static inline uint32x4_t e5m2_encode_neon(float32x4_t x)
{
    uint32x4_t sign = vandq_u32(vshrq_n_u32(vreinterpretq_u32_f32(x), 24), vdupq_n_u32(0x80));
    uint32x4_t mag = vbslq_u32(vceqq_f32(x, x), minifloat_mag_neon(x, 2, 15, 0x7B),
                               vdupq_n_u32(0x7F));
    return vorrq_u32(sign, mag);
}

/* OCP E2M1 (§11): RNE, saturating to 6, sign copied, NaN -> 0x0 [convention]. */
static inline uint32x4_t e2m1_encode_neon(float32x4_t x)
{
    uint32x4_t sign = vandq_u32(vshrq_n_u32(vreinterpretq_u32_f32(x), 28), vdupq_n_u32(0x8));
    uint32x4_t code = vorrq_u32(sign, minifloat_mag_neon(x, 1, 1, 0x7));
    return vandq_u32(code, vceqq_f32(x, x));
}

/* Four vectors of one code per u32 lane -> 16 bytes in element order. */
static inline uint8x16_t narrow_codes_neon(uint32x4_t c0, uint32x4_t c1, uint32x4_t c2,
                                           uint32x4_t c3)
{
    uint16x8_t lo = vuzp1q_u16(vreinterpretq_u16_u32(c0), vreinterpretq_u16_u32(c1));
    uint16x8_t hi = vuzp1q_u16(vreinterpretq_u16_u32(c2), vreinterpretq_u16_u32(c3));
    return vuzp1q_u8(vreinterpretq_u8_u16(lo), vreinterpretq_u8_u16(hi));
}

/* 16 nibble codes (one per byte, element order) -> 8 bytes, element 2j in the high nibble
 * (bitsandbytes, §5.1). */
static inline uint8x8_t pack_hi_first_neon(uint8x16_t c)
{
    uint16x8_t w = vreinterpretq_u16_u8(c); /* lane j: c[2j] | c[2j+1] << 8 */
    return vsli_n_u8(vshrn_n_u16(w, 8), vmovn_u16(w), 4);
}

/* ... element 2k in the low nibble (E2M1 in MXFP4 and NVFP4, §11). */
static inline uint8x8_t pack_lo_first_neon(uint8x16_t c)
{
    uint16x8_t w = vreinterpretq_u16_u8(c);
    return vsli_n_u8(vmovn_u16(w), vshrn_n_u16(w, 8), 4);
}

/* 8 packed bytes -> 16 codes in element order. */
static inline uint8x16_t unpack_hi_first_neon(uint8x8_t b)
{
    uint8x8x2_t z = vzip_u8(vshr_n_u8(b, 4), vand_u8(b, vdup_n_u8(0xF)));
    return vcombine_u8(z.val[0], z.val[1]);
}

static inline uint8x16_t unpack_lo_first_neon(uint8x8_t b)
{
    uint8x8x2_t z = vzip_u8(vand_u8(b, vdup_n_u8(0xF)), vshr_n_u8(b, 4));
    return vcombine_u8(z.val[0], z.val[1]);
}

/* A 16-entry f32 table as four byte planes, for vqtbl1q lookups without a gather. */
typedef struct {
    uint8x16_t b[4];
} lut16_neon;

static inline lut16_neon lut16_load_neon(const float *table)
{
    uint8x16x4_t p = vld4q_u8((const uint8_t *)table); /* p.val[k][i] = byte k of table[i] */
    lut16_neon t = {{p.val[0], p.val[1], p.val[2], p.val[3]}};
    return t;
}

/* table[c[i]] for 16 codes (each < 16), as four vectors in element order: the exact bits. */
static inline void lut16_lookup_neon(const lut16_neon *t, uint8x16_t c, float32x4_t out[4])
{
    uint8x16_t b0 = vqtbl1q_u8(t->b[0], c), b1 = vqtbl1q_u8(t->b[1], c);
    uint8x16_t b2 = vqtbl1q_u8(t->b[2], c), b3 = vqtbl1q_u8(t->b[3], c);
    uint16x8_t l01 = vreinterpretq_u16_u8(vzip1q_u8(b0, b1));
    uint16x8_t h01 = vreinterpretq_u16_u8(vzip2q_u8(b0, b1));
    uint16x8_t l23 = vreinterpretq_u16_u8(vzip1q_u8(b2, b3));
    uint16x8_t h23 = vreinterpretq_u16_u8(vzip2q_u8(b2, b3));
    out[0] = vreinterpretq_f32_u16(vzip1q_u16(l01, l23));
    out[1] = vreinterpretq_f32_u16(vzip2q_u16(l01, l23));
    out[2] = vreinterpretq_f32_u16(vzip1q_u16(h01, h23));
    out[3] = vreinterpretq_f32_u16(vzip2q_u16(h01, h23));
}

/* OCP E4M3 decode (§10) of four codes in u32 lanes. The seven magnitude bits placed at f32
 * mantissa position 20 read as value * 2^-120 for normal and subnormal codes alike (an f32
 * subnormal for the latter), so one exact multiply by 2^120 decodes; 0x7F/0xFF become the NaN
 * qs_ref_e4m3_decode returns (quiet, sign kept). */
static inline float32x4_t e4m3_decode_neon(uint32x4_t c)
{
    uint32x4_t mag = vandq_u32(c, vdupq_n_u32(0x7F));
    uint32x4_t sign = vshlq_n_u32(vandq_u32(c, vdupq_n_u32(0x80)), 24);
    float32x4_t v = vmulq_f32(vreinterpretq_f32_u32(vshlq_n_u32(mag, 20)), vdupq_n_f32(0x1p120f));
    uint32x4_t nan = vceqq_u32(mag, vdupq_n_u32(0x7F));
    uint32x4_t bits = vbslq_u32(nan, vdupq_n_u32(0x7FC00000u), vreinterpretq_u32_f32(v));
    return vreinterpretq_f32_u32(vorrq_u32(bits, sign));
}

/* The NaN rule of src/ref/ref.h (qs_ref_nan_canon, docs/nan.md): every NaN lane of a computed
 * float result becomes the canonical quiet NaN 0x7FC00000. FMUL returns its first NaN operand
 * (and the compiler may swap the operands of a commutative intrinsic), so without this the bits
 * of NaN x NaN would depend on operand order. One compare and one select before the store. */
static inline float32x4_t nan_canon_neon(float32x4_t v)
{
    return vbslq_f32(vceqq_f32(v, v), v, vreinterpretq_f32_u32(vdupq_n_u32(QS_NAN_F32_BITS)));
}

/* Widen 16 bytes into four vectors of u32 lanes, element order. */
static inline void widen_u8_neon(uint8x16_t b, uint32x4_t out[4])
{
    uint16x8_t lo = vmovl_u8(vget_low_u8(b)), hi = vmovl_u8(vget_high_u8(b));
    out[0] = vmovl_u16(vget_low_u16(lo));
    out[1] = vmovl_u16(vget_high_u16(lo));
    out[2] = vmovl_u16(vget_low_u16(hi));
    out[3] = vmovl_u16(vget_high_u16(hi));
}

#endif /* QS_ARM_NEON_COMMON_H */
