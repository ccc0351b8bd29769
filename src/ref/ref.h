/* SPDX-License-Identifier: MIT */
/*
 * Element-level helpers of the scalar reference: codebooks, thresholds and the scalar encoders
 * and decoders of every element type. They are ordinary functions compiled with baseline flags,
 * so SIMD files may call them for tails. docs/formats.md is the definition.
 */
#ifndef QS_REF_REF_H
#define QS_REF_REF_H

#include <float.h>
#include <stdint.h>
#include <string.h>

_Static_assert(FLT_EVAL_METHOD == 0, "libqsparse needs f32 arithmetic without excess precision");

static inline uint32_t qs_f32_bits(float f)
{
    uint32_t u;
    memcpy(&u, &f, sizeof u);
    return u;
}

static inline float qs_f32_from_bits(uint32_t u)
{
    float f;
    memcpy(&f, &u, sizeof f);
    return f;
}

/* Unaligned element access. Kernels take typed pointers, but the public API promises no alignment
 * (a safetensors tensor may start at any byte), so a scalar loop never dereferences a caller's
 * float or uint16_t pointer: it goes through these. The parameters are `void *` on purpose: a
 * memcpy from a typed pointer lets the compiler assume the type's alignment again. Each call
 * compiles to one plain (unaligned-tolerant) load or store. */
static inline float qs_ld_f32(const void *p)
{
    float v;
    memcpy(&v, p, sizeof v);
    return v;
}

static inline void qs_st_f32(void *p, float v)
{
    memcpy(p, &v, sizeof v);
}

static inline uint16_t qs_ld_u16(const void *p)
{
    uint16_t v;
    memcpy(&v, p, sizeof v);
    return v;
}

static inline void qs_st_u16(void *p, uint16_t v)
{
    memcpy(p, &v, sizeof v);
}

/* The NaN rule (docs/nan.md): a NaN that a kernel computes into a float output is always the
 * canonical quiet NaN, f32 bits 0x7FC00000 (through the staging conversions f16 0x7E00, bf16
 * 0x7FC0). The sign and payload of a computed NaN depend on the ISA (x86 makes 0xFFC00000 from
 * no NaN operand, AArch64 0x7FC00000) and, when both operands are NaN, on which one the compiler
 * put first, so they cannot be part of a bit-exact result. NaNs that are only moved (dtype
 * conversions, 2:4 compression) keep their bits. */
#define QS_NAN_F32_BITS 0x7FC00000u

static inline float qs_ref_nan_canon(float v)
{
    return v != v ? qs_f32_from_bits(QS_NAN_F32_BITS) : v;
}

/* Tables (tables_ref.c). */
extern const float qs_nf4_codebook[16];      /* §2 */
extern const float qs_nf4_thresholds[15];    /* §3 */
extern const float qs_fp4_codebook[16];      /* §4 */
extern const float qs_fp4_thresholds[7];     /* §4, t_1 ... t_7 (CUDA literals) */
extern const uint8_t qs_fp4_rank_code[8];    /* §4: R[r] */
extern const float qs_dyn8_map[256];         /* §6.3 */
extern const float qs_e2m1_values[16];       /* §11 */
/* qs_ref_e4m3_decode(c) for c = 0 ... 127 (the unsigned E4M3 of NVFP4 block scales, §14): a
 * table, so that a kernel decodes one scale per block with one load. */
extern const float qs_ue4m3_values[128];

/* Plain dtype conversions of one element (§0 rule 4). */
float qs_ref_f16_to_f32(uint16_t h);
uint16_t qs_ref_f32_to_f16(float f);
float qs_ref_bf16_to_f32(uint16_t h);
uint16_t qs_ref_f32_to_bf16(float f);

/* Element encoders (RNE, saturating) and decoders. */
uint8_t qs_ref_nf4_encode(float x);   /* x already normalized: #{k : x > t_k} */
uint8_t qs_ref_fp4_encode(float x);   /* §4 encode */
uint8_t qs_ref_dyn8_encode(float x);  /* §6.3 quantizer */
uint8_t qs_ref_e4m3_encode(float x);  /* §10, NaN -> 0x7F | sign */
uint8_t qs_ref_e5m2_encode(float x);  /* §10, NaN -> 0x7F | sign */
uint8_t qs_ref_e2m1_encode(float x);  /* §11, NaN -> 0x0 */
float qs_ref_e4m3_decode(uint8_t c);
float qs_ref_e5m2_decode(uint8_t c);
float qs_ref_e8m0_decode(uint8_t e);  /* §12: 2^(e-127); NaN for 0xFF */

/* qs_ref_e8m0_decode, inline, so that SIMD block loops decode a scale byte without a call: the
 * same bits for every byte (tests/test_spec_tables.c checks all 256). */
static inline float qs_e8m0_decode_inline(uint8_t e)
{
    uint32_t b = e == 0 ? 0x00400000u : e == 0xFF ? QS_NAN_F32_BITS : (uint32_t)e << 23;
    return qs_f32_from_bits(b);
}

/* Max and min with every NaN ignored, signaling ones included, and -0 < +0 (reduce_ref.c).
 * fmaxf/fminf do not do this: glibc returns NaN for a signaling NaN operand and leaves the sign of
 * a zero result open, so the reference never uses them on data. acc must not be NaN. */
float qs_ref_max(float acc, float x);
float qs_ref_min(float acc, float x);

/* One step of an absolute maximum: acc = max(acc, |x|), NaN ignored (formats.md §5.2 step 1). */
static inline float qs_ref_absmax_step(float acc, float x)
{
    float a = x < 0.0f ? -x : x; /* |x| for every non-NaN x; NaN fails every comparison */
    return a > acc ? a : acc;
}

/* floor(log2(a)) for finite a > 0, exactly, from the exponent bits (never log2f). */
int qs_ref_floor_log2(float a);

/* INT8 element rule: clamp(rne(x * mul) + zp, qmin, 127), NaN product -> 0 (§8, §9). */
int8_t qs_ref_int8_encode(float x, float mul, int32_t zp, int32_t qmin);

#endif /* QS_REF_REF_H */
