/* SPDX-License-Identifier: MIT */
/*
 * The element and block rules of the reference (docs/formats.md §0 rule 4, §3 - §14) as static
 * inline functions that compile both as C (src/ref, and the SIMD tails through ref.h) and as CUDA
 * `__host__ __device__` code (src/cuda). The reference's encoders, decoders, block scales and
 * scale rules are these functions, so the CUDA plugin runs the very code that defines every
 * format; only the loops around them differ, and tests/test_cuda_items.c checks those loops on
 * the host. Tables the GPU reads from its own memory (codebooks, the dynamic map) are passed in as
 * pointers; the short threshold tables are literals, the same ones tables_ref.c is built from.
 */
#ifndef QS_REF_ELEMENT_HD_H
#define QS_REF_ELEMENT_HD_H

#include <math.h>
#include <stdint.h>
#include <string.h>

#if defined(__CUDACC__)
#define QS_HD __host__ __device__
#else
#define QS_HD
#endif

/* §3: NF4 decision thresholds t_0 ... t_14 (code = #{k : x > t_k}). */
#define QS_NF4_THRESHOLDS_INIT                                                                     \
    {                                                                                              \
        -0x1.b239bp-1f, -0x1.38a4ep-1f, -0x1.d709p-2f, -0x1.5bd4ecp-2f, -0x1.e079d8p-3f,           \
            -0x1.1a7178p-3f, -0x1.74f0e2p-5f, 0x1.45f5fep-5f, 0x1.ec90c4p-4f, 0x1.a0cfcp-3f,       \
            0x1.2b05a8p-2f, 0x1.8ea7f2p-2f, 0x1.00da08p-1f, 0x1.491b5ep-1f, 0x1.b913b4p-1f,        \
    }
/* §4: bitsandbytes FP4 thresholds t_1 ... t_7 (the CUDA literals) and R[r]. */
#define QS_FP4_THRESHOLDS_INIT                                                                     \
    {                                                                                              \
        0x1.555572p-9f, 0x1.6p-4f, 0x1.aaaaaap-3f, 0x1.2aaaaap-2f, 0x1.aaaaacp-2f, 0x1.2aaaap-1f,  \
            0x1.aaaaaap-1f,                                                                        \
    }
#define QS_FP4_RANK_CODE_INIT {0x0, 0x1, 0x6, 0x7, 0x4, 0x5, 0x2, 0x3}
#define QS_FP4_RANK_CODE_WORD 0x32547610u /* nibble r = QS_FP4_RANK_CODE_INIT[r] */

/* The codebooks and maps as literals (tables_ref.c defines its arrays from them; the CUDA plugin
 * puts the same values in constant memory): §2 NF4, §4 FP4, §6.3 the dynamic map, §11 E2M1. */
#define QS_NF4_CODEBOOK_INIT \
    { \
    -0x1p+0f, -0x1.647362p-1f, -0x1.0cd66p-1f, -0x1.94654p-2f, \
    -0x1.23449ap-2f, -0x1.7a6a7ep-3f, -0x1.74f0e2p-4f, 0.0f, \
    0x1.45f5fep-4f, 0x1.4995c6p-3f, 0x1.f809bap-3f, 0x1.5a0674p-2f, \
    0x1.c3497p-2f, 0x1.200f56p-1f, 0x1.722766p-1f, 0x1p+0f, \
    }
#define QS_FP4_CODEBOOK_INIT \
    { \
    0.0f, 0x1.555556p-8f, 0x1.555556p-1f, 0x1p+0f, \
    0x1.555556p-2f, 0x1p-1f, 0x1.555556p-3f, 0x1p-2f, \
    -0.0f, -0x1.555556p-8f, -0x1.555556p-1f, -0x1p+0f, \
    -0x1.555556p-2f, -0x1p-1f, -0x1.555556p-3f, -0x1p-2f, \
    }
#define QS_DYN8_MAP_INIT \
    { \
    -0x1.fc6666p-1f, -0x1.f53334p-1f, -0x1.eep-1f, -0x1.e6ccccp-1f, \
    -0x1.df999ap-1f, -0x1.d86666p-1f, -0x1.d13334p-1f, -0x1.cap-1f, \
    -0x1.c2ccccp-1f, -0x1.bb999ap-1f, -0x1.b46666p-1f, -0x1.ad3334p-1f, \
    -0x1.a6p-1f, -0x1.9eccccp-1f, -0x1.97999ap-1f, -0x1.906666p-1f, \
    -0x1.893334p-1f, -0x1.82p-1f, -0x1.7accccp-1f, -0x1.73999ap-1f, \
    -0x1.6c6668p-1f, -0x1.653334p-1f, -0x1.5ep-1f, -0x1.56ccccp-1f, \
    -0x1.4f999ap-1f, -0x1.486668p-1f, -0x1.413334p-1f, -0x1.3ap-1f, \
    -0x1.32ccccp-1f, -0x1.2b999ap-1f, -0x1.246668p-1f, -0x1.1d3334p-1f, \
    -0x1.16p-1f, -0x1.0eccccp-1f, -0x1.079998p-1f, -0x1.006666p-1f, \
    -0x1.f26664p-2f, -0x1.e4p-2f, -0x1.d59998p-2f, -0x1.c73334p-2f, \
    -0x1.b8ccccp-2f, -0x1.aa6666p-2f, -0x1.9cp-2f, -0x1.8d9998p-2f, \
    -0x1.7f3334p-2f, -0x1.70ccccp-2f, -0x1.626666p-2f, -0x1.54p-2f, \
    -0x1.459998p-2f, -0x1.373334p-2f, -0x1.28ccccp-2f, -0x1.1a6668p-2f, \
    -0x1.0cp-2f, -0x1.fb3332p-3f, -0x1.de6666p-3f, -0x1.c1999ap-3f, \
    -0x1.a4ccccp-3f, -0x1.88p-3f, -0x1.6b3334p-3f, -0x1.4e6666p-3f, \
    -0x1.31999ap-3f, -0x1.14ccccp-3f, -0x1.fp-4f, -0x1.b66668p-4f, \
    -0x1.93d70ap-4f, -0x1.8851eep-4f, -0x1.7ccccep-4f, -0x1.7147aep-4f, \
    -0x1.65c29p-4f, -0x1.5a3d7p-4f, -0x1.4eb854p-4f, -0x1.433334p-4f, \
    -0x1.37ae14p-4f, -0x1.2c28f6p-4f, -0x1.20a3d6p-4f, -0x1.151ebap-4f, \
    -0x1.09999ap-4f, -0x1.fc28f6p-5f, -0x1.e51ebap-5f, -0x1.ce147ap-5f, \
    -0x1.b70a3ep-5f, -0x1.ap-5f, -0x1.88f5c2p-5f, -0x1.71eb86p-5f, \
    -0x1.5ae146p-5f, -0x1.43d70ap-5f, -0x1.2ccccep-5f, -0x1.15c29p-5f, \
    -0x1.fd70a4p-6f, -0x1.cf5c2ap-6f, -0x1.a147aep-6f, -0x1.733334p-6f, \
    -0x1.451ebap-6f, -0x1.170a3ep-6f, -0x1.d1eb86p-7f, -0x1.75c29p-7f, \
    -0x1.3e76c8p-7f, -0x1.2c083p-7f, -0x1.19999ap-7f, -0x1.072b02p-7f, \
    -0x1.e978d4p-8f, -0x1.c49ba6p-8f, -0x1.9fbe76p-8f, -0x1.7ae148p-8f, \
    -0x1.56041ap-8f, -0x1.3126e8p-8f, -0x1.0c49bap-8f, -0x1.ced914p-9f, \
    -0x1.851eb8p-9f, -0x1.3b645ap-9f, -0x1.e353f8p-10f, -0x1.4fdf3ap-10f, \
    -0x1.eecbfep-11f, -0x1.b3d07cp-11f, -0x1.78d5p-11f, -0x1.3dd982p-11f, \
    -0x1.02de02p-11f, -0x1.8fc506p-12f, -0x1.19ce0ap-12f, -0x1.47ae16p-13f, \
    -0x1.743e96p-14f, -0x1.15df66p-14f, -0x1.6f0068p-15f, -0x1.64840cp-16f, \
    -0x1.040bfep-17f, -0x1.b43528p-19f, -0x1.27476ep-21f, 0.0f, \
    0x1.27476ep-21f, 0x1.b43528p-19f, 0x1.040bfep-17f, 0x1.64840cp-16f, \
    0x1.6f0068p-15f, 0x1.15df66p-14f, 0x1.743e96p-14f, 0x1.47ae16p-13f, \
    0x1.19ce0ap-12f, 0x1.8fc506p-12f, 0x1.02de02p-11f, 0x1.3dd982p-11f, \
    0x1.78d5p-11f, 0x1.b3d07cp-11f, 0x1.eecbfep-11f, 0x1.4fdf3ap-10f, \
    0x1.e353f8p-10f, 0x1.3b645ap-9f, 0x1.851eb8p-9f, 0x1.ced914p-9f, \
    0x1.0c49bap-8f, 0x1.3126e8p-8f, 0x1.56041ap-8f, 0x1.7ae148p-8f, \
    0x1.9fbe76p-8f, 0x1.c49ba6p-8f, 0x1.e978d4p-8f, 0x1.072b02p-7f, \
    0x1.19999ap-7f, 0x1.2c083p-7f, 0x1.3e76c8p-7f, 0x1.75c29p-7f, \
    0x1.d1eb86p-7f, 0x1.170a3ep-6f, 0x1.451ebap-6f, 0x1.733334p-6f, \
    0x1.a147aep-6f, 0x1.cf5c2ap-6f, 0x1.fd70a4p-6f, 0x1.15c29p-5f, \
    0x1.2ccccep-5f, 0x1.43d70ap-5f, 0x1.5ae146p-5f, 0x1.71eb86p-5f, \
    0x1.88f5c2p-5f, 0x1.ap-5f, 0x1.b70a3ep-5f, 0x1.ce147ap-5f, \
    0x1.e51ebap-5f, 0x1.fc28f6p-5f, 0x1.09999ap-4f, 0x1.151ebap-4f, \
    0x1.20a3d6p-4f, 0x1.2c28f6p-4f, 0x1.37ae14p-4f, 0x1.433334p-4f, \
    0x1.4eb854p-4f, 0x1.5a3d7p-4f, 0x1.65c29p-4f, 0x1.7147aep-4f, \
    0x1.7ccccep-4f, 0x1.8851eep-4f, 0x1.93d70ap-4f, 0x1.b66668p-4f, \
    0x1.fp-4f, 0x1.14ccccp-3f, 0x1.31999ap-3f, 0x1.4e6666p-3f, \
    0x1.6b3334p-3f, 0x1.88p-3f, 0x1.a4ccccp-3f, 0x1.c1999ap-3f, \
    0x1.de6666p-3f, 0x1.fb3332p-3f, 0x1.0cp-2f, 0x1.1a6668p-2f, \
    0x1.28ccccp-2f, 0x1.373334p-2f, 0x1.459998p-2f, 0x1.54p-2f, \
    0x1.626666p-2f, 0x1.70ccccp-2f, 0x1.7f3334p-2f, 0x1.8d9998p-2f, \
    0x1.9cp-2f, 0x1.aa6666p-2f, 0x1.b8ccccp-2f, 0x1.c73334p-2f, \
    0x1.d59998p-2f, 0x1.e4p-2f, 0x1.f26664p-2f, 0x1.006666p-1f, \
    0x1.079998p-1f, 0x1.0eccccp-1f, 0x1.16p-1f, 0x1.1d3334p-1f, \
    0x1.246668p-1f, 0x1.2b999ap-1f, 0x1.32ccccp-1f, 0x1.3ap-1f, \
    0x1.413334p-1f, 0x1.486668p-1f, 0x1.4f999ap-1f, 0x1.56ccccp-1f, \
    0x1.5ep-1f, 0x1.653334p-1f, 0x1.6c6668p-1f, 0x1.73999ap-1f, \
    0x1.7accccp-1f, 0x1.82p-1f, 0x1.893334p-1f, 0x1.906666p-1f, \
    0x1.97999ap-1f, 0x1.9eccccp-1f, 0x1.a6p-1f, 0x1.ad3334p-1f, \
    0x1.b46666p-1f, 0x1.bb999ap-1f, 0x1.c2ccccp-1f, 0x1.cap-1f, \
    0x1.d13334p-1f, 0x1.d86666p-1f, 0x1.df999ap-1f, 0x1.e6ccccp-1f, \
    0x1.eep-1f, 0x1.f53334p-1f, 0x1.fc6666p-1f, 0x1p+0f, \
    }
#define QS_E2M1_VALUES_INIT \
    { \
    0.0f, 0x1p-1f, 0x1p+0f, 0x1.8p+0f, 0x1p+1f, 0x1.8p+1f, 0x1p+2f, 0x1.8p+2f, \
    -0.0f, -0x1p-1f, -0x1p+0f, -0x1.8p+0f, -0x1p+1f, -0x1.8p+1f, -0x1p+2f, -0x1.8p+2f, \
    }

/* ---- bits, NaN rule, max/min ------------------------------------------------------------------ */

QS_HD static inline uint32_t qs_hd_bits(float f)
{
#if defined(__CUDA_ARCH__)
    return __float_as_uint(f);
#else
    uint32_t u;
    memcpy(&u, &f, sizeof u);
    return u;
#endif
}

QS_HD static inline float qs_hd_float(uint32_t u)
{
#if defined(__CUDA_ARCH__)
    return __uint_as_float(u);
#else
    float f;
    memcpy(&f, &u, sizeof f);
    return f;
#endif
}

/* A load of caller data: memcpy on the host, where the public API promises no alignment (ref.h's
 * qs_ld_f32); a plain load on the device, whose entry points require aligned pointers. */
QS_HD static inline float qs_hd_ld(const float *p)
{
#if defined(__CUDA_ARCH__)
    return *p;
#else
    float v;
    memcpy(&v, p, sizeof v);
    return v;
#endif
}

/* The NaN rule (docs/nan.md): a computed NaN is stored as 0x7FC00000. */
QS_HD static inline float qs_hd_nan_canon(float v)
{
    return v != v ? qs_hd_float(0x7FC00000u) : v;
}

/* acc = max(acc, |x|) with NaN ignored (§5.2 step 1). */
QS_HD static inline float qs_hd_absmax_step(float acc, float x)
{
    float a = x < 0.0f ? -x : x; /* |x| for every non-NaN x; NaN fails every comparison */
    return a > acc ? a : acc;
}

/* Max and min with every NaN ignored and -0 < +0: associative and commutative, so any reduction
 * order (SIMD lanes, GPU threads) gives the same bits. acc must not be NaN. */
QS_HD static inline float qs_hd_max(float acc, float x)
{
    if (x != x)
        return acc;
    if (acc != acc || x > acc || (x == acc && !(qs_hd_bits(x) >> 31)))
        return x;
    return acc;
}

QS_HD static inline float qs_hd_min(float acc, float x)
{
    if (x != x)
        return acc;
    if (acc != acc || x < acc || (x == acc && (qs_hd_bits(x) >> 31)))
        return x;
    return acc;
}

/* ---- float16 / bfloat16 (§0 rule 4) ----------------------------------------------------------- */

QS_HD static inline float qs_hd_f16_to_f32(uint16_t h)
{
    uint32_t sign = (uint32_t)(h & 0x8000u) << 16;
    uint32_t e = (h >> 10) & 0x1Fu;
    uint32_t m = h & 0x3FFu;

    if (e == 0) { /* zero or subnormal: m * 2^-24, exact */
        float v = (float)m * 0x1p-24f;
        return sign ? -v : v;
    }
    if (e == 31) /* Inf, or NaN quieted with its payload kept (what F16C's VCVTPH2PS does) */
        return qs_hd_float(sign | 0x7F800000u | (m ? 0x00400000u | (m << 13) : 0));
    return qs_hd_float(sign | ((e + 112u) << 23) | (m << 13));
}

QS_HD static inline uint16_t qs_hd_f32_to_f16(float f)
{
    uint32_t u = qs_hd_bits(f);
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

QS_HD static inline float qs_hd_bf16_to_f32(uint16_t h)
{
    return qs_hd_float((uint32_t)h << 16);
}

QS_HD static inline uint16_t qs_hd_f32_to_bf16(float f)
{
    uint32_t u = qs_hd_bits(f);

    if ((u & 0x7FFFFFFFu) > 0x7F800000u) /* NaN: pinned bits, §0 rule 4 */
        return (uint16_t)((u >> 16) | 0x0040u);
    return (uint16_t)((u + 0x7FFFu + ((u >> 16) & 1u)) >> 16);
}

/* ---- bitsandbytes 4-bit and 8-bit (§3, §4, §5, §6.3) ----------------------------------------- */

QS_HD static inline uint8_t qs_hd_nf4_encode(float x)
{
    const float t[15] = QS_NF4_THRESHOLDS_INIT;
    uint8_t code = 0;

    for (int k = 0; k < 15; k++)
        code += x > t[k]; /* NaN: every comparison false -> code 0 */
    return code;
}

QS_HD static inline uint8_t qs_hd_fp4_encode(float x)
{
    const float t[7] = QS_FP4_THRESHOLDS_INIT;
    uint8_t s = x < 0.0f ? 0x8 : 0x0; /* -0.0 is not < 0: it gives 0b0000 (§4) */
    float a = fabsf(x);
    int r = 0;

    for (int k = 0; k < 7; k++)
        r += a > t[k];
    /* R[r] of QS_FP4_RANK_CODE_INIT as nibble r of one word: no table indexed by a variable
     * (a GPU would put it in local memory) */
    return (uint8_t)(s | ((QS_FP4_RANK_CODE_WORD >> (4 * r)) & 0x7u));
}

/* One NF4 (fp4 == 0) or FP4 (fp4 == 1) block of len elements (odd only for the last block):
 * absmax, then codes, element 2j in the high nibble; returns the absmax (§5.1, §5.2). */
QS_HD static inline float qs_hd_bnb4_block(const float *v, int64_t len, uint8_t *dst, int fp4)
{
    float absmax = 0.0f, inv;

    for (int64_t i = 0; i < len; i++)
        absmax = qs_hd_absmax_step(absmax, qs_hd_ld(v + i)); /* NaN ignored (§5.2 step 1) */
    if (absmax == 0.0f) { /* all-zero (or all-NaN) block: explicit branch, codes 0 (§5.2) */
        for (int64_t i = 0; i < (len + 1) / 2; i++)
            dst[i] = 0;
        return absmax;
    }
    inv = 1.0f / absmax; /* may be +Inf for absmax <= 2^-128: not special-cased (§5.2) */
    for (int64_t i = 0; i < len; i += 2) {
        float a = qs_hd_ld(v + i) * inv;
        float b = (i + 1 < len ? qs_hd_ld(v + i + 1) : 0.0f) * inv; /* odd length: a missing 0.0 (§5.1) */
        uint8_t hi = fp4 ? qs_hd_fp4_encode(a) : qs_hd_nf4_encode(a);
        uint8_t lo = fp4 ? qs_hd_fp4_encode(b) : qs_hd_nf4_encode(b);
        dst[i / 2] = (uint8_t)(hi << 4 | lo);
    }
    return absmax;
}

/* §5.3: one f32 multiply of the code's value by the block's absmax. */
QS_HD static inline float qs_hd_bnb4_decode(const float *book, uint8_t code, float absmax)
{
    return qs_hd_nan_canon(book[code] * absmax);
}

/* §6.3 with `map` the 256-entry dynamic map: code = #{j : x > m_j}, m_j = fl(map[j] + map[j+1])
 * * 0.5; an exact tie takes the even index of {j, j+1}; NaN gives 0. */
QS_HD static inline uint8_t qs_hd_dyn8_encode(float x, const float *map)
{
    int lo = 0, hi = 255; /* number of midpoints below x lies in [lo, hi] */

    if (x != x)
        return 0;
    while (lo < hi) { /* find the first j with x <= m_j */
        int mid = (lo + hi) / 2;
        float m = (map[mid] + map[mid + 1]) * 0.5f;
        if (x > m)
            lo = mid + 1;
        else
            hi = mid;
    }
    if (lo < 255 && x == (map[lo] + map[lo + 1]) * 0.5f && (lo & 1))
        return (uint8_t)(lo + 1);
    return (uint8_t)lo;
}

/* One dynamic 8-bit block (§6.4): absmax, then codes; absmax 0 gives codes 0. */
QS_HD static inline float qs_hd_dyn8_block(const float *v, int64_t len, uint8_t *dst,
                                           const float *map)
{
    float m = 0.0f, inv;

    for (int64_t i = 0; i < len; i++)
        m = qs_hd_absmax_step(m, qs_hd_ld(v + i));
    inv = 1.0f / m;
    for (int64_t i = 0; i < len; i++)
        dst[i] = m == 0.0f ? 0 : qs_hd_dyn8_encode(qs_hd_ld(v + i) * inv, map);
    return m;
}

/* §6.2: the nested absmax, then the mean offset added after the multiply. */
QS_HD static inline float qs_hd_dyn8_decode(const float *map, uint8_t code, float absmax,
                                            float offset)
{
    float v = map[code] * absmax;
    return qs_hd_nan_canon(v + offset);
}

/* ---- OCP minifloats (§10, §11, §12) ----------------------------------------------------------- */

/* floor(log2(a)) for finite a > 0, exactly, from frexpf (never log2f). */
QS_HD static inline int qs_hd_floor_log2(float a)
{
    int e;

    (void)frexpf(a, &e); /* a = m * 2^e with m in [0.5, 1), exact for subnormals too */
    return e - 1;
}

/* Magnitude code of finite a >= 0 with `mbits` mantissa bits and exponent bias `bias`, RNE,
 * saturated to `maxmag`: a / 2^q is exact in the quantum 2^q of a's binade, one rintf rounds. */
QS_HD static inline uint8_t qs_hd_encode_magnitude(float a, int mbits, int bias, uint32_t maxmag)
{
    if (a == 0.0f)
        return 0;
    if (a > 0x1p64f) /* far above every format's range; keeps the shifts below small */
        return (uint8_t)maxmag;

    int e = qs_hd_floor_log2(a);
    if (e < 1 - bias)
        e = 1 - bias; /* subnormal range shares the quantum of the smallest binade */
    float r = rintf(ldexpf(a, mbits - e));
    uint32_t code = ((uint32_t)(e + bias - 1) << mbits) + (uint32_t)r;
    return (uint8_t)(code > maxmag ? maxmag : code);
}

QS_HD static inline uint8_t qs_hd_e4m3_encode(float x)
{
    uint8_t sign = (uint8_t)((qs_hd_bits(x) >> 24) & 0x80u);

    if (x != x)
        return (uint8_t)(sign | 0x7Fu);
    return (uint8_t)(sign | qs_hd_encode_magnitude(fabsf(x), 3, 7, 0x7Eu)); /* Inf -> 448 */
}

QS_HD static inline uint8_t qs_hd_e5m2_encode(float x)
{
    uint8_t sign = (uint8_t)((qs_hd_bits(x) >> 24) & 0x80u);

    if (x != x)
        return (uint8_t)(sign | 0x7Fu);
    return (uint8_t)(sign | qs_hd_encode_magnitude(fabsf(x), 2, 15, 0x7Bu)); /* Inf -> 57344 */
}

QS_HD static inline uint8_t qs_hd_e2m1_encode(float x)
{
    uint8_t sign = (uint8_t)((qs_hd_bits(x) >> 28) & 0x8u);

    if (x != x)
        return 0x0; /* [convention] §11 */
    return (uint8_t)(sign | qs_hd_encode_magnitude(fabsf(x), 1, 1, 0x7u)); /* Inf -> 6 */
}

QS_HD static inline float qs_hd_e4m3_decode(uint8_t c)
{
    int e = (c >> 3) & 0xF, m = c & 0x7;
    float v;

    if ((c & 0x7F) == 0x7F)
        v = qs_hd_float(0x7FC00000u);
    else if (e == 0)
        v = ldexpf((float)m, -9);
    else
        v = ldexpf((float)(8 + m), e - 10);
    return (c & 0x80) ? -v : v;
}

QS_HD static inline float qs_hd_e5m2_decode(uint8_t c)
{
    return qs_hd_f16_to_f32((uint16_t)(c << 8)); /* E5M2 is the upper byte of binary16 (§10) */
}

QS_HD static inline float qs_hd_e8m0_decode(uint8_t e)
{
    if (e == 0xFF)
        return qs_hd_float(0x7FC00000u);
    if (e == 0)
        return qs_hd_float(0x00400000u); /* 2^-127, an f32 subnormal, not zero (§12) */
    return qs_hd_float((uint32_t)e << 23);
}

/* ---- MX and NVFP4 block scales (§13, §14) ----------------------------------------------------- */

/* The E8M0 byte of a finite block from its amax: 0x00 for amax 0, else shared_exp + 127 for the
 * FLOOR (rounding 0) or RCEIL (rounding 1) rule. emax, elem_max: 2, 6 (E2M1) or 8, 448 (E4M3). */
QS_HD static inline uint8_t qs_hd_mx_scale_from_amax(float amax, int32_t rounding, int emax,
                                                     float elem_max)
{
    int shared_exp;

    if (amax == 0.0f)
        return 0x00; /* 2^-127 (§13 special cases) */
    if (rounding == 0) {
        shared_exp = qs_hd_floor_log2(amax) - emax;
    } else {
        /* RCEIL: the smallest e with elem_max * 2^e >= amax, evaluated exactly in double. */
        shared_exp = qs_hd_floor_log2(amax) - emax - 1;
        while (ldexp((double)elem_max, shared_exp) < (double)amax)
            shared_exp++;
    }
    if (shared_exp < -127)
        shared_exp = -127;
    if (shared_exp > 127)
        shared_exp = 127;
    return (uint8_t)(shared_exp + 127);
}

/* The E8M0 byte of one block: 0xFF if any element is NaN or Inf (§13 step 1). */
QS_HD static inline uint8_t qs_hd_mx_scale(const float *v, int64_t len, int32_t rounding,
                                           int emax, float elem_max)
{
    float amax = 0.0f;

    for (int64_t i = 0; i < len; i++) {
        float x = qs_hd_ld(v + i);
        if ((qs_hd_bits(x) & 0x7F800000u) == 0x7F800000u)
            return 0xFF;
        amax = qs_hd_absmax_step(amax, x);
    }
    return qs_hd_mx_scale_from_amax(amax, rounding, emax, elem_max);
}

/* NVFP4 block scale byte (§14 step 2) from the block's amax (NaN ignored): UE4M3 of
 * amax / fl(6 * s_global), at least 2^-9. */
QS_HD static inline uint8_t qs_hd_nvfp4_scale_from_amax(float amax, float s_global)
{
    float s = amax / (6.0f * s_global);

    if (s == 0.0f)
        return 0x38; /* all-zero block: 1.0 */
    if (s < 0x1p-9f)
        s = 0x1p-9f; /* a comparison, not fmaxf, so that NaN stays NaN */
    return (uint8_t)(qs_hd_e4m3_encode(s) & 0x7F); /* unsigned: NaN S gives 0x7F, never 0xFF */
}

/* The NVFP4 block scale byte of one block of len elements. */
QS_HD static inline uint8_t qs_hd_nvfp4_block_scale(const float *v, int64_t len, float s_global)
{
    float amax = 0.0f;

    for (int64_t i = 0; i < len; i++)
        amax = qs_hd_absmax_step(amax, qs_hd_ld(v + i)); /* NaN ignored */
    return qs_hd_nvfp4_scale_from_amax(amax, s_global);
}

/* ---- INT8 (§8, §9) and the per-tensor scale rules -------------------------------------------- */

/* clamp(rne(x * mul) + zp, qmin, 127), NaN product -> 0. */
QS_HD static inline int8_t qs_hd_int8_encode(float x, float mul, int32_t zp, int32_t qmin)
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

/* Symmetric INT8 (§9): scale = fl(amax / 127), mul = fl(127 / amax); amax 0 -> 1 and 0. */
QS_HD static inline void qs_hd_int8_symmetric(float amax, float *scale, float *mul)
{
    if (amax == 0.0f) { /* [convention] s = 1, all codes 0 (§9) */
        *scale = 1.0f;
        *mul = 0.0f;
        return;
    }
    *scale = amax / 127.0f;
    *mul = 127.0f / amax;
}

/* Asymmetric INT8 (§9) from the observed min and max. */
QS_HD static inline void qs_hd_int8_asymmetric(float mn, float mx, float *scale, float *mul,
                                               int32_t *zp)
{
    float lo = fminf(mn, 0.0f), hi = fmaxf(mx, 0.0f), s, z;

    if (hi == lo) { /* [convention] all-zero range: s = 1, zp = 0 (§9) */
        *scale = 1.0f;
        *mul = 1.0f;
        *zp = 0;
        return;
    }
    s = (hi - lo) / 255.0f;
    if (s < 0x1p-23f)
        s = 0x1p-23f; /* max(s, FLT_EPSILON) (§9) */
    z = rintf(lo / s);
    if (z != z)
        z = 0.0f; /* NaN (only from an infinite range) -> 0, as the element rule does */
    z = -128.0f - z; /* qmin - rne(lo / s); lo <= 0 so z >= -128 */
    *zp = z > 127.0f ? 127 : (int32_t)z;
    *scale = s;
    *mul = 1.0f / s;
}

/* LLM.int8 (§8): mul = fl(127 / row_stat), +Inf for 0. */
QS_HD static inline float qs_hd_llm_int8_mul(float row_stat)
{
    return 127.0f / row_stat;
}

/* bitsandbytes int8_vectorwise_dequant: fl(fl(q * stat) * fl(1/127)), never a division (§8). */
QS_HD static inline float qs_hd_int8_rowstat_decode(int8_t q, float stat)
{
    float v = (float)q * stat;
    return qs_hd_nan_canon(v * 0x1.020408p-7f); /* 3c010204 = fl(1/127) */
}

/* fl((q - zp) * s), q - zp exact. */
QS_HD static inline float qs_hd_int8_decode(int8_t q, float scale, int32_t zp)
{
    return qs_hd_nan_canon((float)((int32_t)q - zp) * scale);
}

/* FP8 per-tensor scale (§10): fl(amax / elem_max), 1.0 for amax 0. */
QS_HD static inline float qs_hd_fp8_scale(float amax, float elem_max)
{
    if (amax == 0.0f)
        return 1.0f; /* [convention] §10 */
    return amax / elem_max;
}

/* NVFP4 per-tensor scale (§14 step 1): fl(amax / 2688), 1.0 when that is 0. */
QS_HD static inline float qs_hd_nvfp4_global_scale(float amax)
{
    float s = amax / 2688.0f; /* 6 * 448 */

    return s == 0.0f ? 1.0f : s;
}

/* ---- 2:4 sparsity (docs/sparsity.md §2.2, §3.2) ------------------------------------------------ */

/* Rank key of a non-negative (or NaN) score: its magnitude bits, every NaN one key above +Inf. */
QS_HD static inline uint32_t qs_hd_sp_key_abs(float s)
{
    uint32_t u = qs_hd_bits(s) & 0x7FFFFFFFu;
    return u > 0x7F800001u ? 0x7F800001u : u;
}

/* Keep bits of a group of 4 keys: position i is kept when fewer than two others beat it, an
 * equal key at a lower position beating it too (§2.2 rules 1-3). */
QS_HD static inline unsigned qs_hd_sp24_keep(const uint32_t k[4])
{
    unsigned keep = 0;
    for (int i = 0; i < 4; i++) {
        int rank = 0;
        for (int j = 0; j < 4; j++)
            rank += k[j] > k[i] || (k[j] == k[i] && j < i);
        if (rank < 2)
            keep |= 1u << i;
    }
    return keep;
}

/* Metadata nibble i0 | i1 << 2 of a keep pattern (§3.2): its two lowest kept positions, completed
 * by the lowest unused ones (§3.4); the table qs_sp24_nibble_of_keep in computed form. */
QS_HD static inline unsigned qs_hd_sp24_nibble(unsigned keep)
{
    int idx[2], n = 0;

    for (int i = 0; i < 4 && n < 2; i++)
        if ((keep >> i) & 1u)
            idx[n++] = i;
    for (int i = 0; i < 4 && n < 2; i++)
        if (!((keep >> i) & 1u))
            idx[n++] = i;
    if (idx[0] > idx[1]) {
        int t = idx[0];
        idx[0] = idx[1];
        idx[1] = t;
    }
    return (unsigned)(idx[0] | idx[1] << 2);
}

/* Double quantization's mean offset (§6.1): a double sum in index order, one rounding to f32.
 * Sequential by definition; the CUDA plugin sums in parallel only where every partial sum is
 * exact in double (src/cuda/cuda_vec.h), and in this order otherwise. */
QS_HD static inline float qs_hd_dq_offset(const float *absmax, int64_t nb)
{
    double sum = 0.0;

    for (int64_t i = 0; i < nb; i++)
        sum += (double)qs_hd_ld(absmax + i);
    return nb > 0 ? (float)(sum / (double)nb) : 0.0f;
}

#endif /* QS_REF_ELEMENT_HD_H */
