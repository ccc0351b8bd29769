/* SPDX-License-Identifier: MIT */
/*
 * The AVX-512 intrinsics the kernels use that SIMDe 0.7.4 (Debian 12's libsimde-dev) lacks,
 * written lane by lane from the instruction definitions in Intel's SDM. Each keeps the
 * instruction's exact result: masked-off lanes are neither read nor written (a masked load at the
 * end of a buffer must not touch the next page), out-of-range conversions give the integer
 * indefinite 0x80000000, and the float reductions combine lanes in the order GCC's own
 * <avx512fintrin.h> does, so a kernel that is bit-exact on hardware is bit-exact here.
 *
 * Included by immintrin.h in this directory after SIMDe; each macro replaces the compiler's
 * declaration of the same name for the rest of the translation unit.
 */
#ifndef QS_EMU_SIMDE_GAPS_H
#define QS_EMU_SIMDE_GAPS_H

#include <math.h>
#include <stdint.h>
#include <string.h>

/* Lane views: a vector is copied to an array, worked on, and copied back. */
#define QS_EMU_TO(arr, v) memcpy((arr), &(v), sizeof(v))
#define QS_EMU_FROM(v, arr) memcpy(&(v), (arr), sizeof(v))
#define QS_EMU_BIT(k, i) ((((uint64_t)(k)) >> (i)) & 1u)

/* ---- masked loads and stores: only the selected lanes touch memory ---- */

#define QS_EMU_MASKZ_LOAD(name, vec_t, lane_t, lanes, mask_t)                                      \
    static inline vec_t name(mask_t k, const void *p)                                              \
    {                                                                                              \
        lane_t a[lanes];                                                                           \
        vec_t r;                                                                                   \
        for (int i = 0; i < (lanes); i++) {                                                        \
            a[i] = 0;                                                                              \
            if (QS_EMU_BIT(k, i))                                                                  \
                memcpy(&a[i], (const char *)p + i * sizeof(lane_t), sizeof(lane_t));               \
        }                                                                                          \
        QS_EMU_FROM(r, a);                                                                         \
        return r;                                                                                  \
    }

#define QS_EMU_MASK_STORE(name, vec_t, lane_t, lanes, mask_t)                                      \
    static inline void name(void *p, mask_t k, vec_t v)                                            \
    {                                                                                              \
        lane_t a[lanes];                                                                           \
        QS_EMU_TO(a, v);                                                                           \
        for (int i = 0; i < (lanes); i++)                                                          \
            if (QS_EMU_BIT(k, i))                                                                  \
                memcpy((char *)p + i * sizeof(lane_t), &a[i], sizeof(lane_t));                     \
    }

QS_EMU_MASKZ_LOAD(qs_emu_mm_maskz_loadu_epi8, simde__m128i, int8_t, 16, simde__mmask16)
QS_EMU_MASKZ_LOAD(qs_emu_mm256_maskz_loadu_epi8, simde__m256i, int8_t, 32, simde__mmask32)
QS_EMU_MASKZ_LOAD(qs_emu_mm256_maskz_loadu_epi16, simde__m256i, int16_t, 16, simde__mmask16)
QS_EMU_MASKZ_LOAD(qs_emu_mm256_maskz_loadu_ps, simde__m256, float, 8, simde__mmask8)
QS_EMU_MASKZ_LOAD(qs_emu_mm512_maskz_loadu_epi8, simde__m512i, int8_t, 64, simde__mmask64)
QS_EMU_MASKZ_LOAD(qs_emu_mm512_maskz_loadu_epi32, simde__m512i, int32_t, 16, simde__mmask16)
QS_EMU_MASKZ_LOAD(qs_emu_mm512_maskz_loadu_ps, simde__m512, float, 16, simde__mmask16)
QS_EMU_MASKZ_LOAD(qs_emu_mm512_maskz_loadu_pd, simde__m512d, double, 8, simde__mmask8)
QS_EMU_MASK_STORE(qs_emu_mm_mask_storeu_epi8, simde__m128i, int8_t, 16, simde__mmask16)
QS_EMU_MASK_STORE(qs_emu_mm_mask_storeu_ps, simde__m128, float, 4, simde__mmask8)
QS_EMU_MASK_STORE(qs_emu_mm256_mask_storeu_epi16, simde__m256i, int16_t, 16, simde__mmask16)
QS_EMU_MASK_STORE(qs_emu_mm512_mask_storeu_epi32, simde__m512i, int32_t, 16, simde__mmask16)
QS_EMU_MASK_STORE(qs_emu_mm512_mask_storeu_ps, simde__m512, float, 16, simde__mmask16)
QS_EMU_MASK_STORE(qs_emu_mm512_mask_storeu_pd, simde__m512d, double, 8, simde__mmask8)
#define _mm_maskz_loadu_epi8(k, p) qs_emu_mm_maskz_loadu_epi8((k), (p))
#define _mm256_maskz_loadu_epi8(k, p) qs_emu_mm256_maskz_loadu_epi8((k), (p))
#define _mm256_maskz_loadu_epi16(k, p) qs_emu_mm256_maskz_loadu_epi16((k), (p))
#define _mm256_maskz_loadu_ps(k, p) qs_emu_mm256_maskz_loadu_ps((k), (p))
#define _mm512_maskz_loadu_epi8(k, p) qs_emu_mm512_maskz_loadu_epi8((k), (p))
#define _mm512_maskz_loadu_epi32(k, p) qs_emu_mm512_maskz_loadu_epi32((k), (p))
#define _mm512_maskz_loadu_ps(k, p) qs_emu_mm512_maskz_loadu_ps((k), (p))
#define _mm512_maskz_loadu_pd(k, p) qs_emu_mm512_maskz_loadu_pd((k), (p))
#define _mm_mask_storeu_epi8(p, k, v) qs_emu_mm_mask_storeu_epi8((p), (k), (v))
#define _mm_mask_storeu_ps(p, k, v) qs_emu_mm_mask_storeu_ps((p), (k), (v))
#define _mm256_mask_storeu_epi16(p, k, v) qs_emu_mm256_mask_storeu_epi16((p), (k), (v))
#define _mm512_mask_storeu_epi32(p, k, v) qs_emu_mm512_mask_storeu_epi32((p), (k), (v))
#define _mm512_mask_storeu_ps(p, k, v) qs_emu_mm512_mask_storeu_ps((p), (k), (v))
#define _mm512_mask_storeu_pd(p, k, v) qs_emu_mm512_mask_storeu_pd((p), (k), (v))

/* Merge-masked 16-bit load: unselected lanes keep src. */
static inline simde__m512i qs_emu_mm512_mask_loadu_epi16(simde__m512i src, simde__mmask32 k,
                                                         const void *p)
{
    int16_t a[32];
    QS_EMU_TO(a, src);
    for (int i = 0; i < 32; i++)
        if (QS_EMU_BIT(k, i))
            memcpy(&a[i], (const char *)p + 2 * i, 2);
    QS_EMU_FROM(src, a);
    return src;
}
#define _mm512_mask_loadu_epi16(s, k, p) qs_emu_mm512_mask_loadu_epi16((s), (k), (p))

/* A non-temporal store writes the same bytes; the cache hint has no meaning here. */
#define _mm512_stream_ps(p, v) simde_mm512_storeu_ps((p), (v))

/* ---- narrowing (truncating) moves and their masked stores ---- */

#define QS_EMU_NARROW(name, in_t, from_t, in_lanes, out_t, to_t)                                   \
    static inline out_t name(in_t v)                                                               \
    {                                                                                              \
        from_t a[in_lanes];                                                                        \
        to_t b[sizeof(out_t) / sizeof(to_t)];                                                      \
        out_t r;                                                                                   \
        memset(b, 0, sizeof(b));                                                                   \
        QS_EMU_TO(a, v);                                                                           \
        for (int i = 0; i < (in_lanes); i++)                                                       \
            b[i] = (to_t)a[i];                                                                     \
        QS_EMU_FROM(r, b);                                                                         \
        return r;                                                                                  \
    }

QS_EMU_NARROW(qs_emu_mm256_cvtepi16_epi8, simde__m256i, uint16_t, 16, simde__m128i, uint8_t)
QS_EMU_NARROW(qs_emu_mm512_cvtepi32_epi16, simde__m512i, uint32_t, 16, simde__m256i, uint16_t)
QS_EMU_NARROW(qs_emu_mm512_cvtepi32_epi8, simde__m512i, uint32_t, 16, simde__m128i, uint8_t)
QS_EMU_NARROW(qs_emu_mm512_cvtepi64_epi16, simde__m512i, uint64_t, 8, simde__m128i, uint16_t)
QS_EMU_NARROW(qs_emu_mm512_cvtepi64_epi8, simde__m512i, uint64_t, 8, simde__m128i, uint8_t)
#define _mm256_cvtepi16_epi8(v) qs_emu_mm256_cvtepi16_epi8(v)
#define _mm512_cvtepi32_epi16(v) qs_emu_mm512_cvtepi32_epi16(v)
#define _mm512_cvtepi32_epi8(v) qs_emu_mm512_cvtepi32_epi8(v)
#define _mm512_cvtepi64_epi16(v) qs_emu_mm512_cvtepi64_epi16(v)
#define _mm512_cvtepi64_epi8(v) qs_emu_mm512_cvtepi64_epi8(v)

static inline void qs_emu_mm512_mask_cvtepi32_storeu_epi8(void *p, simde__mmask16 k, simde__m512i v)
{
    uint32_t a[16];
    QS_EMU_TO(a, v);
    for (int i = 0; i < 16; i++)
        if (QS_EMU_BIT(k, i))
            ((uint8_t *)p)[i] = (uint8_t)a[i];
}
static inline void qs_emu_mm512_mask_cvtepi64_storeu_epi8(void *p, simde__mmask8 k, simde__m512i v)
{
    uint64_t a[8];
    QS_EMU_TO(a, v);
    for (int i = 0; i < 8; i++)
        if (QS_EMU_BIT(k, i))
            ((uint8_t *)p)[i] = (uint8_t)a[i];
}
#define _mm512_mask_cvtepi32_storeu_epi8(p, k, v)                                                  \
    qs_emu_mm512_mask_cvtepi32_storeu_epi8((p), (k), (v))
#define _mm512_mask_cvtepi64_storeu_epi8(p, k, v)                                                  \
    qs_emu_mm512_mask_cvtepi64_storeu_epi8((p), (k), (v))

/* ---- widening moves ---- */

#define QS_EMU_WIDEN(name, in_t, from_t, to_t)                                                     \
    static inline simde__m512i name(in_t v)                                                        \
    {                                                                                              \
        from_t a[sizeof(in_t) / sizeof(from_t)];                                                   \
        to_t b[64 / sizeof(to_t)];                                                                 \
        simde__m512i r;                                                                            \
        QS_EMU_TO(a, v);                                                                           \
        for (int i = 0; i < (int)(64 / sizeof(to_t)); i++)                                         \
            b[i] = (to_t)a[i];                                                                     \
        QS_EMU_FROM(r, b);                                                                         \
        return r;                                                                                  \
    }

QS_EMU_WIDEN(qs_emu_mm512_cvtepi8_epi32, simde__m128i, int8_t, int32_t)
QS_EMU_WIDEN(qs_emu_mm512_cvtepu8_epi32, simde__m128i, uint8_t, uint32_t)
QS_EMU_WIDEN(qs_emu_mm512_cvtepu16_epi32, simde__m256i, uint16_t, uint32_t)
QS_EMU_WIDEN(qs_emu_mm512_cvtepu8_epi16, simde__m256i, uint8_t, uint16_t)
#define _mm512_cvtepi8_epi32(v) qs_emu_mm512_cvtepi8_epi32(v)
#define _mm512_cvtepu8_epi32(v) qs_emu_mm512_cvtepu8_epi32(v)
#define _mm512_cvtepu16_epi32(v) qs_emu_mm512_cvtepu16_epi32(v)
#define _mm512_cvtepu8_epi16(v) qs_emu_mm512_cvtepu8_epi16(v)

/* ---- float conversions: the two 256-bit halves through this machine's own AVX / F16C, whose
 * rounding and out-of-range rules are those of the 512-bit forms ---- */

static inline void qs_emu_split_ps(simde__m512 v, __m256 *lo, __m256 *hi)
{
    float a[16];
    QS_EMU_TO(a, v);
    *lo = _mm256_loadu_ps(a);
    *hi = _mm256_loadu_ps(a + 8);
}
static inline void qs_emu_split_si(simde__m512i v, __m256i *lo, __m256i *hi)
{
    int32_t a[16];
    QS_EMU_TO(a, v);
    *lo = _mm256_loadu_si256((const __m256i *)a);
    *hi = _mm256_loadu_si256((const __m256i *)(a + 8));
}
static inline simde__m512 qs_emu_join_ps(__m256 lo, __m256 hi)
{
    float a[16];
    simde__m512 r;
    _mm256_storeu_ps(a, lo);
    _mm256_storeu_ps(a + 8, hi);
    QS_EMU_FROM(r, a);
    return r;
}
static inline simde__m512i qs_emu_join_si(__m256i lo, __m256i hi)
{
    int32_t a[16];
    simde__m512i r;
    _mm256_storeu_si256((__m256i *)a, lo);
    _mm256_storeu_si256((__m256i *)(a + 8), hi);
    QS_EMU_FROM(r, a);
    return r;
}

static inline simde__m512i qs_emu_mm512_cvtps_epi32(simde__m512 v)
{
    __m256 lo, hi;
    qs_emu_split_ps(v, &lo, &hi);
    return qs_emu_join_si(_mm256_cvtps_epi32(lo), _mm256_cvtps_epi32(hi));
}
static inline simde__m512i qs_emu_mm512_cvttps_epi32(simde__m512 v)
{
    __m256 lo, hi;
    qs_emu_split_ps(v, &lo, &hi);
    return qs_emu_join_si(_mm256_cvttps_epi32(lo), _mm256_cvttps_epi32(hi));
}
static inline simde__m512 qs_emu_mm512_cvtepi32_ps(simde__m512i v)
{
    __m256i lo, hi;
    qs_emu_split_si(v, &lo, &hi);
    return qs_emu_join_ps(_mm256_cvtepi32_ps(lo), _mm256_cvtepi32_ps(hi));
}
static inline simde__m512 qs_emu_mm512_cvtph_ps(simde__m256i v)
{
    __m128i h[2];
    memcpy(h, &v, sizeof(h));
    return qs_emu_join_ps(_mm256_cvtph_ps(h[0]), _mm256_cvtph_ps(h[1]));
}
/* the rounding immediate must stay a constant for F16C's vcvtps2ph, hence a macro */
#define qs_emu_mm512_cvtps_ph(v, imm)                                                              \
    __extension__({                                                                                \
        __m256 qs_emu_lo_, qs_emu_hi_;                                                             \
        __m128i qs_emu_h_[2];                                                                      \
        simde__m256i qs_emu_r_;                                                                    \
        qs_emu_split_ps((v), &qs_emu_lo_, &qs_emu_hi_);                                            \
        qs_emu_h_[0] = _mm256_cvtps_ph(qs_emu_lo_, (imm));                                         \
        qs_emu_h_[1] = _mm256_cvtps_ph(qs_emu_hi_, (imm));                                         \
        memcpy(&qs_emu_r_, qs_emu_h_, sizeof(qs_emu_r_));                                          \
        qs_emu_r_;                                                                                 \
    })
static inline simde__m512d qs_emu_mm512_cvtps_pd(simde__m256 v)
{
    float a[8];
    double b[8];
    simde__m512d r;
    QS_EMU_TO(a, v);
    for (int i = 0; i < 8; i++)
        b[i] = (double)a[i];
    QS_EMU_FROM(r, b);
    return r;
}
#define _mm512_cvtps_epi32(v) qs_emu_mm512_cvtps_epi32(v)
#define _mm512_cvttps_epi32(v) qs_emu_mm512_cvttps_epi32(v)
#define _mm512_cvtepi32_ps(v) qs_emu_mm512_cvtepi32_ps(v)
#define _mm512_cvtph_ps(v) qs_emu_mm512_cvtph_ps(v)
#define _mm512_cvtps_ph(v, imm) qs_emu_mm512_cvtps_ph((v), (imm))
#define _mm512_cvtps_pd(v) qs_emu_mm512_cvtps_pd(v)

/* double -> float with the rounding the immediate names. C's conversion rounds to nearest; the
 * directed modes step one float toward their direction when that result lies on the wrong side
 * of the exact value (the comparison in double is exact), which also gives FLT_MAX for a finite
 * value beyond it rounded toward zero or away from its infinity. */
static inline float qs_emu_pd_to_ps_round(double d, int rounding)
{
    float f = (float)d;
    if (d != d)
        return f;
    switch (rounding & 3) {
    case 1: /* toward -Inf */ return (double)f > d ? nextafterf(f, -INFINITY) : f;
    case 2: /* toward +Inf */ return (double)f < d ? nextafterf(f, INFINITY) : f;
    case 3: /* toward zero */ return fabs((double)f) > fabs(d) ? nextafterf(f, 0.0f) : f;
    default: return f;
    }
}
static inline simde__m256 qs_emu_mm512_cvt_roundpd_ps(simde__m512d v, int rounding)
{
    double a[8];
    float b[8];
    simde__m256 r;
    QS_EMU_TO(a, v);
    /* _MM_FROUND_CUR_DIRECTION (4) is round to nearest: the tests never change MXCSR */
    int mode = (rounding & 4) ? 0 : rounding;
    for (int i = 0; i < 8; i++)
        b[i] = qs_emu_pd_to_ps_round(a[i], mode);
    QS_EMU_FROM(r, b);
    return r;
}
#define _mm512_cvt_roundpd_ps(v, r) qs_emu_mm512_cvt_roundpd_ps((v), (r))

/* ---- compares into masks ---- */

#define QS_EMU_CMP(name, lane_t, lanes, mask_t, op)                                                \
    static inline mask_t name(mask_t k, simde__m512i x, simde__m512i y)                            \
    {                                                                                              \
        lane_t a[lanes], b[lanes];                                                                 \
        mask_t r = 0;                                                                              \
        QS_EMU_TO(a, x);                                                                           \
        QS_EMU_TO(b, y);                                                                           \
        for (int i = 0; i < (lanes); i++)                                                          \
            if (QS_EMU_BIT(k, i) && a[i] op b[i])                                                  \
                r |= (mask_t)((mask_t)1 << i);                                                     \
        return r;                                                                                  \
    }

QS_EMU_CMP(qs_emu_cmpeq_epu32, uint32_t, 16, simde__mmask16, ==)
QS_EMU_CMP(qs_emu_cmpgt_epu32, uint32_t, 16, simde__mmask16, >)
QS_EMU_CMP(qs_emu_cmplt_epu32, uint32_t, 16, simde__mmask16, <)
QS_EMU_CMP(qs_emu_cmplt_epi32, int32_t, 16, simde__mmask16, <)
QS_EMU_CMP(qs_emu_cmpneq_epi8, int8_t, 64, simde__mmask64, !=)
#define _mm512_cmpeq_epu32_mask(a, b) qs_emu_cmpeq_epu32(0xFFFF, (a), (b))
#define _mm512_cmpgt_epu32_mask(a, b) qs_emu_cmpgt_epu32(0xFFFF, (a), (b))
#define _mm512_cmplt_epu32_mask(a, b) qs_emu_cmplt_epu32(0xFFFF, (a), (b))
#define _mm512_cmplt_epi32_mask(a, b) qs_emu_cmplt_epi32(0xFFFF, (a), (b))
#define _mm512_cmpneq_epi8_mask(a, b) qs_emu_cmpneq_epi8(~(simde__mmask64)0, (a), (b))
#define _mm512_mask_cmpeq_epu32_mask(k, a, b) qs_emu_cmpeq_epu32((k), (a), (b))
#define _mm512_mask_cmpgt_epu32_mask(k, a, b) qs_emu_cmpgt_epu32((k), (a), (b))
#define _mm512_mask_cmplt_epu32_mask(k, a, b) qs_emu_cmplt_epu32((k), (a), (b))
#define _mm512_mask_cmp_ps_mask(k, a, b, imm)                                                      \
    ((simde__mmask16)((k)&simde_mm512_cmp_ps_mask((a), (b), (imm))))

static inline simde__mmask16 qs_emu_mm256_cmpeq_epi16_mask(simde__m256i x, simde__m256i y)
{
    int16_t a[16], b[16];
    simde__mmask16 r = 0;
    QS_EMU_TO(a, x);
    QS_EMU_TO(b, y);
    for (int i = 0; i < 16; i++)
        if (a[i] == b[i])
            r |= (simde__mmask16)(1u << i);
    return r;
}
static inline simde__mmask16 qs_emu_mm_test_epi8_mask(simde__m128i x, simde__m128i y)
{
    uint8_t a[16], b[16];
    simde__mmask16 r = 0;
    QS_EMU_TO(a, x);
    QS_EMU_TO(b, y);
    for (int i = 0; i < 16; i++)
        if (a[i] & b[i])
            r |= (simde__mmask16)(1u << i);
    return r;
}
#define _mm256_cmpeq_epi16_mask(a, b) qs_emu_mm256_cmpeq_epi16_mask((a), (b))
#define _mm_test_epi8_mask(a, b) qs_emu_mm_test_epi8_mask((a), (b))

/* VFPCLASSPS: imm bit 0 QNaN, 1 +0, 2 -0, 3 +Inf, 4 -Inf, 5 denormal, 6 negative finite
 * (non-zero, denormals included), 7 SNaN. */
static inline simde__mmask16 qs_emu_mm512_fpclass_ps_mask(simde__m512 x, int imm)
{
    uint32_t a[16];
    simde__mmask16 r = 0;
    QS_EMU_TO(a, x);
    for (int i = 0; i < 16; i++) {
        uint32_t neg = a[i] >> 31, exp = (a[i] >> 23) & 0xFF, man = a[i] & 0x7FFFFF;
        int hit = 0;
        hit |= (imm & 0x01) && exp == 0xFF && (man >> 22);
        hit |= (imm & 0x02) && !neg && exp == 0 && man == 0;
        hit |= (imm & 0x04) && neg && exp == 0 && man == 0;
        hit |= (imm & 0x08) && !neg && exp == 0xFF && man == 0;
        hit |= (imm & 0x10) && neg && exp == 0xFF && man == 0;
        hit |= (imm & 0x20) && exp == 0 && man != 0;
        hit |= (imm & 0x40) && neg && exp != 0xFF && (exp | man) != 0;
        hit |= (imm & 0x80) && exp == 0xFF && man != 0 && !(man >> 22);
        if (hit)
            r |= (simde__mmask16)(1u << i);
    }
    return r;
}
#define _mm512_fpclass_ps_mask(x, imm) qs_emu_mm512_fpclass_ps_mask((x), (imm))

/* ---- arithmetic, shuffles, gathers ---- */

static inline simde__m512 qs_emu_mm512_mask3_fmadd_ps(simde__m512 x, simde__m512 y, simde__m512 z,
                                                      simde__mmask16 k)
{
    float a[16], b[16], c[16];
    QS_EMU_TO(a, x);
    QS_EMU_TO(b, y);
    QS_EMU_TO(c, z);
    for (int i = 0; i < 16; i++)
        if (QS_EMU_BIT(k, i))
            c[i] = fmaf(a[i], b[i], c[i]);
    QS_EMU_FROM(z, c);
    return z;
}
#define _mm512_mask3_fmadd_ps(a, b, c, k) qs_emu_mm512_mask3_fmadd_ps((a), (b), (c), (k))

/* VPSHUFD in each 128-bit lane */
static inline simde__m512i qs_emu_mm512_shuffle_epi32(simde__m512i v, int imm)
{
    uint32_t a[16], b[16];
    QS_EMU_TO(a, v);
    for (int i = 0; i < 16; i++)
        b[i] = a[(i & ~3) + ((imm >> (2 * (i & 3))) & 3)];
    QS_EMU_FROM(v, b);
    return v;
}
#define _mm512_shuffle_epi32(v, imm) qs_emu_mm512_shuffle_epi32((v), (int)(imm))

/* 128-bit block shuffles: SIMDe has them without their Intel names (i64x2 moves the same blocks
 * as i32x4) */
#define _mm512_shuffle_f32x4(a, b, imm) simde_mm512_shuffle_f32x4((a), (b), (imm))
#define _mm512_shuffle_i64x2(a, b, imm) simde_mm512_shuffle_i32x4((a), (b), (imm))

/* VEXPANDPS with zeroing: the selected lanes take the source's low elements in order */
static inline simde__m512 qs_emu_mm512_maskz_expand_ps(simde__mmask16 k, simde__m512 v)
{
    float a[16], b[16];
    int j = 0;
    QS_EMU_TO(a, v);
    for (int i = 0; i < 16; i++)
        b[i] = QS_EMU_BIT(k, i) ? a[j++] : 0.0f;
    QS_EMU_FROM(v, b);
    return v;
}
#define _mm512_maskz_expand_ps(k, v) qs_emu_mm512_maskz_expand_ps((k), (v))

static inline simde__m512 qs_emu_mm512_i32gather_ps(simde__m512i idx, const void *base, int scale)
{
    int32_t ix[16];
    float b[16];
    simde__m512 r;
    QS_EMU_TO(ix, idx);
    for (int i = 0; i < 16; i++)
        memcpy(&b[i], (const char *)base + (int64_t)ix[i] * scale, 4);
    QS_EMU_FROM(r, b);
    return r;
}
#define _mm512_i32gather_ps(idx, base, scale) qs_emu_mm512_i32gather_ps((idx), (base), (scale))

static inline simde__m128i qs_emu_mm_maskz_set1_epi8(simde__mmask16 k, char c)
{
    int8_t a[16];
    simde__m128i r;
    for (int i = 0; i < 16; i++)
        a[i] = QS_EMU_BIT(k, i) ? (int8_t)c : 0;
    QS_EMU_FROM(r, a);
    return r;
}
#define _mm_maskz_set1_epi8(k, c) qs_emu_mm_maskz_set1_epi8((k), (c))

/* ---- reductions, in the order of GCC 12's <avx512fintrin.h>: high 256 op low 256, then high
 * 128 op low 128, then lanes {2,3,0,1}, then {1,0,1,0}; vmaxps / vminps keep their operand order,
 * which decides the result for NaNs and for zeros of both signs ---- */

#define QS_EMU_REDUCE_PS(name, op256, op128)                                                       \
    static inline float name(simde__m512 v)                                                        \
    {                                                                                              \
        __m256 lo, hi;                                                                             \
        qs_emu_split_ps(v, &lo, &hi);                                                              \
        __m256 t3 = op256(hi, lo);                                                                 \
        __m128 t6 = op128(_mm256_extractf128_ps(t3, 1), _mm256_castps256_ps128(t3));               \
        __m128 t8 = op128(t6, _mm_shuffle_ps(t6, t6, _MM_SHUFFLE(1, 0, 3, 2)));                    \
        __m128 t10 = op128(t8, _mm_shuffle_ps(t8, t8, _MM_SHUFFLE(0, 1, 0, 1)));                   \
        return _mm_cvtss_f32(t10);                                                                 \
    }
QS_EMU_REDUCE_PS(qs_emu_mm512_reduce_max_ps, _mm256_max_ps, _mm_max_ps)
QS_EMU_REDUCE_PS(qs_emu_mm512_reduce_min_ps, _mm256_min_ps, _mm_min_ps)
#define _mm512_reduce_max_ps(v) qs_emu_mm512_reduce_max_ps(v)
#define _mm512_reduce_min_ps(v) qs_emu_mm512_reduce_min_ps(v)

/* GCC's add reduction: (hi + lo), then (hi128 + lo128), then t6 + t6{2,3,0,1}, then [0] + [1] */
static inline float qs_emu_mm512_reduce_add_ps(simde__m512 v)
{
    float a[16], t3[8], t6[4], t8[2];
    QS_EMU_TO(a, v);
    for (int i = 0; i < 8; i++)
        t3[i] = a[8 + i] + a[i];
    for (int i = 0; i < 4; i++)
        t6[i] = t3[4 + i] + t3[i];
    for (int i = 0; i < 2; i++)
        t8[i] = t6[i] + t6[i + 2];
    return t8[0] + t8[1];
}
#define _mm512_reduce_add_ps(v) qs_emu_mm512_reduce_add_ps(v)

#define QS_EMU_REDUCE_I32(name, lane_t, pick)                                                      \
    static inline lane_t name(simde__m512i v)                                                      \
    {                                                                                              \
        lane_t a[16], r;                                                                           \
        QS_EMU_TO(a, v);                                                                           \
        r = a[0];                                                                                  \
        for (int i = 1; i < 16; i++)                                                               \
            r = (a[i] pick r) ? a[i] : r;                                                          \
        return r;                                                                                  \
    }
QS_EMU_REDUCE_I32(qs_emu_mm512_reduce_max_epi32, int32_t, >)
QS_EMU_REDUCE_I32(qs_emu_mm512_reduce_min_epi32, int32_t, <)
QS_EMU_REDUCE_I32(qs_emu_mm512_reduce_max_epu32, uint32_t, >)
#define _mm512_reduce_max_epi32(v) qs_emu_mm512_reduce_max_epi32(v)
#define _mm512_reduce_min_epi32(v) qs_emu_mm512_reduce_min_epi32(v)
#define _mm512_reduce_max_epu32(v) qs_emu_mm512_reduce_max_epu32(v)

#endif
