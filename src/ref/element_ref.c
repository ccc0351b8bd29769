/* SPDX-License-Identifier: MIT */
/*
 * Scalar encoders and decoders of single elements: f16/bf16 conversion (docs/formats.md §0 rule 4),
 * the NF4/FP4 rank rules (§3, §4), the dynamic 8-bit quantizer (§6.3), the OCP minifloats E4M3,
 * E5M2 and E2M1 (§10, §11), E8M0 (§12) and the INT8 element rule (§8, §9). Every kernel of the
 * reference is built from these, and SIMD tails call them.
 */
#include "element_hd.h"
#include "ref.h"

/* The rules themselves are the host/device functions of element_hd.h, which the CUDA plugin
 * compiles too; these are the reference's named entry points, which SIMD tails call. */

float qs_ref_f16_to_f32(uint16_t h)
{
    return qs_hd_f16_to_f32(h);
}

uint16_t qs_ref_f32_to_f16(float f)
{
    return qs_hd_f32_to_f16(f);
}

float qs_ref_bf16_to_f32(uint16_t h)
{
    return qs_hd_bf16_to_f32(h);
}

uint16_t qs_ref_f32_to_bf16(float f)
{
    return qs_hd_f32_to_bf16(f);
}

uint8_t qs_ref_nf4_encode(float x)
{
    return qs_hd_nf4_encode(x);
}

uint8_t qs_ref_fp4_encode(float x)
{
    return qs_hd_fp4_encode(x);
}

uint8_t qs_ref_dyn8_encode(float x)
{
    return qs_hd_dyn8_encode(x, qs_dyn8_map);
}

int qs_ref_floor_log2(float a)
{
    return qs_hd_floor_log2(a);
}

uint8_t qs_ref_e4m3_encode(float x)
{
    return qs_hd_e4m3_encode(x);
}

uint8_t qs_ref_e5m2_encode(float x)
{
    return qs_hd_e5m2_encode(x);
}

uint8_t qs_ref_e2m1_encode(float x)
{
    return qs_hd_e2m1_encode(x);
}

float qs_ref_e4m3_decode(uint8_t c)
{
    return qs_hd_e4m3_decode(c);
}

float qs_ref_e5m2_decode(uint8_t c)
{
    return qs_hd_e5m2_decode(c);
}

float qs_ref_e8m0_decode(uint8_t e)
{
    return qs_hd_e8m0_decode(e);
}

int8_t qs_ref_int8_encode(float x, float mul, int32_t zp, int32_t qmin)
{
    return qs_hd_int8_encode(x, mul, zp, qmin);
}
