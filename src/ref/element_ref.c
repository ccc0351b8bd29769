/* SPDX-License-Identifier: MIT */
/*
 * Scalar encoders and decoders of single elements: f16/bf16 conversion (docs/formats.md §0 rule 4),
 * the NF4/FP4 rank rules (§3, §4), the dynamic 8-bit quantizer (§6.3), the OCP minifloats E4M3,
 * E5M2 and E2M1 (§10, §11), E8M0 (§12) and the INT8 element rule (§8, §9). Every kernel of the
 * reference is built from these, and SIMD tails call them.
 */
#include <math.h>

#include "ref.h"

/* ---- float16 / bfloat16 ---------------------------------------------------------------------- */

float qs_ref_f16_to_f32(uint16_t h)
{
    uint32_t sign = (uint32_t)(h & 0x8000u) << 16;
    uint32_t e = (h >> 10) & 0x1Fu;
    uint32_t m = h & 0x3FFu;

    if (e == 0) { /* zero or subnormal: m * 2^-24, exact */
        float v = (float)m * 0x1p-24f;
        return sign ? -v : v;
    }
    if (e == 31) /* Inf, or NaN quieted with its payload kept (what F16C's VCVTPH2PS does) */
        return qs_f32_from_bits(sign | 0x7F800000u | (m ? 0x00400000u | (m << 13) : 0));
    return qs_f32_from_bits(sign | ((e + 112u) << 23) | (m << 13));
}

uint16_t qs_ref_f32_to_f16(float f)
{
    uint32_t u = qs_f32_bits(f);
    uint16_t sign = (uint16_t)((u >> 16) & 0x8000u);
    uint32_t a = u & 0x7FFFFFFFu;

    if (a > 0x7F800000u) /* NaN: quiet bit set, top payload bits kept (as VCVTPS2PH) */
        return (uint16_t)(sign | 0x7E00u | ((a >> 13) & 0x3FFu));
    if (a >= 0x477FF000u) /* >= 65520 = 65504 + half an ulp: the tie goes to even, i.e. Inf */
        return (uint16_t)(sign | 0x7C00u);
    if (a < 0x38800000u) { /* below 2^-14: f16 subnormal, rne(|f| * 2^24); 1024 is the min normal */
        float r = rintf(fabsf(f) * 0x1p24f);
        return (uint16_t)(sign | (uint16_t)r);
    }
    a -= 112u << 23; /* rebias 127 -> 15 */
    return (uint16_t)(sign | ((a + 0x0FFFu + ((a >> 13) & 1u)) >> 13));
}

float qs_ref_bf16_to_f32(uint16_t h)
{
    return qs_f32_from_bits((uint32_t)h << 16);
}

uint16_t qs_ref_f32_to_bf16(float f)
{
    uint32_t u = qs_f32_bits(f);

    if ((u & 0x7FFFFFFFu) > 0x7F800000u) /* NaN: pinned bits, §0 rule 4 */
        return (uint16_t)((u >> 16) | 0x0040u);
    return (uint16_t)((u + 0x7FFFu + ((u >> 16) & 1u)) >> 16);
}

/* ---- bitsandbytes 4-bit and 8-bit ------------------------------------------------------------ */

uint8_t qs_ref_nf4_encode(float x)
{
    uint8_t code = 0;

    for (int k = 0; k < 15; k++)
        code += x > qs_nf4_thresholds[k]; /* NaN: every comparison false -> code 0 */
    return code;
}

uint8_t qs_ref_fp4_encode(float x)
{
    uint8_t s = x < 0.0f ? 0x8 : 0x0; /* -0.0 is not < 0: it gives 0b0000 (§4) */
    float a = fabsf(x);
    int r = 0;

    for (int k = 0; k < 7; k++)
        r += a > qs_fp4_thresholds[k];
    return (uint8_t)(s | qs_fp4_rank_code[r]);
}

uint8_t qs_ref_dyn8_encode(float x)
{
    /* code = #{j : x > m_j} with m_j = fl(map[j] + map[j+1]) * 0.5; an exact tie x == m_j takes the
     * even index of {j, j+1} (§6.3). NaN counts nothing: code 0. */
    int lo = 0, hi = 255; /* number of midpoints below x lies in [lo, hi] */

    if (x != x)
        return 0;
    while (lo < hi) { /* find the first j with x <= m_j */
        int mid = (lo + hi) / 2;
        float m = (qs_dyn8_map[mid] + qs_dyn8_map[mid + 1]) * 0.5f;
        if (x > m)
            lo = mid + 1;
        else
            hi = mid;
    }
    if (lo < 255 && x == (qs_dyn8_map[lo] + qs_dyn8_map[lo + 1]) * 0.5f && (lo & 1))
        return (uint8_t)(lo + 1);
    return (uint8_t)lo;
}

/* ---- OCP minifloats ------------------------------------------------------------------------ */

int qs_ref_floor_log2(float a)
{
    int e;

    (void)frexpf(a, &e); /* a = m * 2^e with m in [0.5, 1), exact for subnormals too */
    return e - 1;
}

/* Magnitude code of finite a >= 0 in a format with `mbits` mantissa bits and exponent bias
 * `bias`, rounded to nearest even, saturated to `maxmag`. The quantum of the binade of a (or of the
 * subnormal range) is 2^q; a / 2^q is exact, so one rintf is the whole rounding. */
static uint8_t encode_magnitude(float a, int mbits, int bias, uint32_t maxmag)
{
    if (a == 0.0f)
        return 0;
    if (a > 0x1p64f) /* far above every format's range; keeps the shifts below small */
        return (uint8_t)maxmag;

    int e = qs_ref_floor_log2(a);
    if (e < 1 - bias)
        e = 1 - bias; /* subnormal range shares the quantum of the smallest binade */
    float r = rintf(ldexpf(a, mbits - e));
    uint32_t code = ((uint32_t)(e + bias - 1) << mbits) + (uint32_t)r;
    return (uint8_t)(code > maxmag ? maxmag : code);
}

uint8_t qs_ref_e4m3_encode(float x)
{
    uint8_t sign = (uint8_t)((qs_f32_bits(x) >> 24) & 0x80u);

    if (x != x)
        return (uint8_t)(sign | 0x7Fu);
    return (uint8_t)(sign | encode_magnitude(fabsf(x), 3, 7, 0x7Eu)); /* Inf saturates to 448 */
}

uint8_t qs_ref_e5m2_encode(float x)
{
    uint8_t sign = (uint8_t)((qs_f32_bits(x) >> 24) & 0x80u);

    if (x != x)
        return (uint8_t)(sign | 0x7Fu);
    return (uint8_t)(sign | encode_magnitude(fabsf(x), 2, 15, 0x7Bu)); /* Inf saturates to 57344 */
}

uint8_t qs_ref_e2m1_encode(float x)
{
    uint8_t sign = (uint8_t)((qs_f32_bits(x) >> 28) & 0x8u);

    if (x != x)
        return 0x0; /* [convention] §11 */
    return (uint8_t)(sign | encode_magnitude(fabsf(x), 1, 1, 0x7u)); /* Inf saturates to 6 */
}

float qs_ref_e4m3_decode(uint8_t c)
{
    int e = (c >> 3) & 0xF, m = c & 0x7;
    float v;

    if ((c & 0x7F) == 0x7F)
        v = NAN;
    else if (e == 0)
        v = ldexpf((float)m, -9);
    else
        v = ldexpf((float)(8 + m), e - 10);
    return (c & 0x80) ? -v : v;
}

float qs_ref_e5m2_decode(uint8_t c)
{
    /* E5M2 is the upper byte of binary16 (§10). */
    return qs_ref_f16_to_f32((uint16_t)(c << 8));
}

float qs_ref_e8m0_decode(uint8_t e)
{
    if (e == 0xFF)
        return NAN;
    if (e == 0)
        return qs_f32_from_bits(0x00400000u); /* 2^-127, an f32 subnormal, not zero (§12) */
    return qs_f32_from_bits((uint32_t)e << 23);
}

/* ---- INT8 -------------------------------------------------------------------------------------- */

int8_t qs_ref_int8_encode(float x, float mul, int32_t zp, int32_t qmin)
{
    float v = x * mul;
    int32_t q;

    if (v != v)
        v = 0.0f; /* NaN product -> 0 before the zero point (§8 rule 4) */
    v = rintf(v);
    /* Clamp in float before converting: out-of-range float -> int is undefined. */
    if (v < -512.0f)
        v = -512.0f;
    if (v > 512.0f)
        v = 512.0f;
    q = (int32_t)v + zp;
    if (q < qmin)
        q = qmin;
    if (q > 127)
        q = 127;
    return (int8_t)q;
}
