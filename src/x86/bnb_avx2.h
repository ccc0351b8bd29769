/* SPDX-License-Identifier: MIT */
/*
 * Blockwise-absmax helpers shared by the bitsandbytes kernels for AVX2 + FMA + F16C
 * (nf4_avx2.c, fp4_avx2.c, dyn8_avx2.c; docs/formats.md §5, §6.4): the block absmax with NaN
 * ignored, the group driver that computes every absmax of about 2048 elements before their codes,
 * and the NF4/FP4 block encoder and decoder, which differ only in the element encoder (passed in)
 * and the codebook. Everything is `static inline` and takes the family's encoder as a function
 * constant, so each kernel file gets its own inlined copy with no call per element. Include only
 * from files compiled with the AVX2 flags (*_avx2.c).
 */
#ifndef QS_X86_BNB_AVX2_H
#define QS_X86_BNB_AVX2_H

#include <string.h>

#include <immintrin.h>

#include "../core/kernels.h"
#include "../ref/ref.h"
#include "lut16_avx2.h"
#include "nan_avx2.h"
#include "prefetch_x86.h"

/* Codes of one block of len elements whose absmax is known; tab is the family's table. The
 * block prefetches v[i + ahead] as it reads v[i] (bnb_quant_avx2). */
typedef void (*bnb_block_avx2_fn)(const float *v, int64_t len, float absmax, uint8_t *dst,
                                  const void *tab, int64_t ahead);
/* Eight scaled values to 4-bit codes (one per 32-bit lane). */
typedef __m256i (*bnb4_encode_avx2_fn)(__m256 x, const void *tab);
/* One scaled value to its 4-bit code: the reference's element routine. */
typedef uint8_t (*bnb4_encode_ref_fn)(float x);

static inline float bnb_amax_avx2(const float *v, int64_t len)
{
    const __m256 abs = _mm256_castsi256_ps(_mm256_set1_epi32(0x7FFFFFFF));
    __m256 a0 = _mm256_setzero_ps(), a1 = a0;
    int64_t i = 0;

    for (; i + 16 <= len; i += 16) {
        a0 = _mm256_max_ps(_mm256_and_ps(_mm256_loadu_ps(v + i), abs), a0); /* NaN ignored */
        a1 = _mm256_max_ps(_mm256_and_ps(_mm256_loadu_ps(v + i + 8), abs), a1);
    }
    a0 = _mm256_max_ps(a0, a1);
    __m128 m = _mm_max_ps(_mm256_castps256_ps128(a0), _mm256_extractf128_ps(a0, 1));
    m = _mm_max_ps(m, _mm_movehl_ps(m, m));
    m = _mm_max_ss(m, _mm_movehdup_ps(m));
    float r = _mm_cvtss_f32(m);
    for (; i < len; i++)
        r = qs_ref_absmax_step(r, qs_ld_f32(v + i));
    return r;
}

/* The quantize driver: absmax[b] and the codes of every block; a block of `block` elements takes
 * block / per_byte bytes of dst (per_byte: 2 for 4-bit codes, 1 for 8-bit codes). */
static inline void bnb_quant_avx2(const float *src, int64_t n, int32_t block, int32_t per_byte,
                                  uint8_t *dst, float *absmax, bnb_block_avx2_fn block_fn,
                                  const void *tab)
{
    /* Blocks go in groups of about 2048 elements: every absmax of the group first, then every
     * block's codes, so that one block's reduction, division and encode do not form a single
     * dependency chain per block (the group is still in L1 for the second pass). The codes pass
     * prefetches the next group into L1, line by line as it goes, so the next absmax pass (the
     * only one that reads memory) finds its data there and memory works while the codes are
     * made: NF4, 4096 x 4096 on a Zen 2, 0.51 ns per value against 0.77 without. */
    const int64_t group = block >= 2048 ? 1 : 2048 / block;
    for (int64_t g = 0; g * block < n; g += group) {
        for (int64_t b = g; b < g + group && b * block < n; b++) {
            int64_t len = n - b * block < block ? n - b * block : block;
            qs_st_f32(absmax + b, bnb_amax_avx2(src + b * block, len));
        }
        for (int64_t b = g; b < g + group && b * block < n; b++) {
            int64_t len = n - b * block < block ? n - b * block : block;
            block_fn(src + b * block, len, qs_ld_f32(absmax + b), dst + b * block / per_byte, tab,
                     group * block);
        }
    }
}

/* 32 codes (four vectors of eight, in element order) to 16 bytes, element 2j in the high nibble. */
static inline __m128i bnb4_nibbles_pack_avx2(__m256i c0, __m256i c1, __m256i c2, __m256i c3)
{
    __m256i b = _mm256_packus_epi16(_mm256_packs_epi32(c0, c1), _mm256_packs_epi32(c2, c3));
    /* the packs interleave 128-bit halves: put the 4-byte groups back in element order */
    b = _mm256_permutevar8x32_epi32(b, _mm256_setr_epi32(0, 4, 1, 5, 2, 6, 3, 7));
    __m256i w = _mm256_maddubs_epi16(b, _mm256_set1_epi16(0x0110)); /* 16 * c[2j] + c[2j+1] */
    w = _mm256_permute4x64_epi64(_mm256_packus_epi16(w, w), 0x08);
    return _mm256_castsi256_si128(w);
}

/* Prefetch the two cache lines at v + ahead into L1 (32 floats; bnb_quant_avx2). A prefetch
 * never faults and changes no data, so past the end of the input it only warms the caller's
 * next span. */
static inline void bnb_prefetch32_avx2(const float *v, int64_t ahead)
{
    qs_prefetch_l1(v, 4 * ahead);
    qs_prefetch_l1(v, 4 * (ahead + 16));
}

/* NF4/FP4 codes of one block (§5): x = v * (1 / absmax), the vector encoder on 32 elements at a
 * time, the reference's element routine on the tail (an odd last element pads with 0.0). */
static inline void bnb4_block_avx2(const float *v, int64_t len, float absmax, uint8_t *dst,
                                   const void *tab, int64_t ahead, bnb4_encode_avx2_fn encode,
                                   bnb4_encode_ref_fn encode_ref)
{
    float inv;
    int64_t i = 0;

    if (absmax == 0.0f) { /* all-zero or all-NaN block: explicit branch, codes 0 (§5.2) */
        memset(dst, 0x00, (size_t)((len + 1) / 2));
        return;
    }
    inv = 1.0f / absmax;
    const __m256 vinv = _mm256_set1_ps(inv);
    for (; i + 32 <= len; i += 32) {
        bnb_prefetch32_avx2(v + i, ahead);
        __m256i c0 = encode(_mm256_mul_ps(_mm256_loadu_ps(v + i), vinv), tab);
        __m256i c1 = encode(_mm256_mul_ps(_mm256_loadu_ps(v + i + 8), vinv), tab);
        __m256i c2 = encode(_mm256_mul_ps(_mm256_loadu_ps(v + i + 16), vinv), tab);
        __m256i c3 = encode(_mm256_mul_ps(_mm256_loadu_ps(v + i + 24), vinv), tab);
        _mm_storeu_si128((__m128i *)(dst + i / 2), bnb4_nibbles_pack_avx2(c0, c1, c2, c3));
    }
    for (; i < len; i += 2) {
        uint8_t hi = encode_ref(qs_ld_f32(v + i) * inv);
        uint8_t lo =
            encode_ref((i + 1 < len ? qs_ld_f32(v + i + 1) : 0.0f) * inv); /* odd pad: 0.0 */
        dst[i / 2] = (uint8_t)(hi << 4 | lo);
    }
}

/* Eight codebook values times vs from the 4-byte word w of eight codes; canon: the NaN rule's
 * compare and blend, which only a non-finite absmax needs (a finite codebook value times a finite
 * absmax is never NaN). The indices are not masked to 4 bits: the permute reads bits 0..2 and the
 * blend bit 31, where the shift left by 28 puts bit 3; the bits above do not matter. */
static inline __m256 bnb4_dequant8_avx2(uint32_t w, __m256 lo, __m256 hi, __m256 vs, int canon)
{
    /* byte j of a 4-byte word holds element 2j in bits 4..7 and element 2j+1 in bits 0..3 */
    const __m256i shift = _mm256_setr_epi32(4, 0, 12, 8, 20, 16, 28, 24);
    __m256i idx = _mm256_srlv_epi32(_mm256_set1_epi32((int32_t)w), shift);
    /* bit 3 of the code picks the upper half of the codebook */
    __m256 v = _mm256_blendv_ps(_mm256_permutevar8x32_ps(lo, idx), _mm256_permutevar8x32_ps(hi, idx),
                                _mm256_castsi256_ps(_mm256_slli_epi32(idx, 28)));
    v = _mm256_mul_ps(v, vs); /* §5.3 */
    return canon ? nan_canon_avx2(v) : v;
}

/* 32 values (16 bytes of codes, element 2j in the high nibble of byte j) times vs, through the
 * codebook's byte planes (lut16_avx2.h); canon: the NaN rule (bnb4_dequant8_avx2). */
static inline void bnb4_dequant32_avx2(const uint8_t *s, const lut16_avx2 *t, __m256 vs, float *d,
                                       int canon)
{
    __m256 v[4];

    lut16_decode32_avx2(s, t, 1, v);
    for (int k = 0; k < 4; k++) {
        __m256 x = _mm256_mul_ps(v[k], vs); /* §5.3 */
        _mm256_storeu_ps(d + 8 * k, canon ? nan_canon_avx2(x) : x);
    }
}

/* One block's whole words of codes (len rounded down to 8), then its scalar tail. */
static inline void bnb4_dequant_block_avx2(const uint8_t *s, float scale, int64_t len,
                                           const float *codebook, __m256 lo, __m256 hi,
                                           const lut16_avx2 *planes, float *d, int canon)
{
    const __m256 vs = _mm256_set1_ps(scale);
    int64_t i = 0;

    for (; i + 32 <= len; i += 32)
        bnb4_dequant32_avx2(s + i / 2, planes, vs, d + i, canon);
    for (; i + 16 <= len; i += 16) {
        uint32_t w0, w1;
        memcpy(&w0, s + i / 2, sizeof w0);
        memcpy(&w1, s + i / 2 + 4, sizeof w1);
        _mm256_storeu_ps(d + i, bnb4_dequant8_avx2(w0, lo, hi, vs, canon));
        _mm256_storeu_ps(d + i + 8, bnb4_dequant8_avx2(w1, lo, hi, vs, canon));
    }
    for (; i + 8 <= len; i += 8) {
        uint32_t w;
        memcpy(&w, s + i / 2, sizeof w);
        _mm256_storeu_ps(d + i, bnb4_dequant8_avx2(w, lo, hi, vs, canon));
    }
    for (; i < len; i++) {
        uint8_t code = (i & 1) ? (s[i / 2] & 0xF) : (s[i / 2] >> 4);
        qs_st_f32(d + i, qs_ref_nan_canon(codebook[code] * scale));
    }
}

/* NF4/FP4 dequantize with a 16-entry codebook: value = codebook[code] * absmax (§5.3). */
static inline void bnb4_dequant_avx2(const uint8_t *src, const float *absmax, int64_t n,
                                     int32_t block, const float *codebook, float *dst)
{
    const __m256 lo = _mm256_loadu_ps(codebook), hi = _mm256_loadu_ps(codebook + 8);
    const lut16_avx2 planes = lut16_avx2_load(codebook);

    for (int64_t b = 0; b * block < n; b++) {
        int64_t start = b * block;
        int64_t len = n - start < block ? n - start : block;
        const float scale = qs_ld_f32(absmax + b);

        if ((qs_f32_bits(scale) & 0x7F800000u) != 0x7F800000u) /* finite */
            bnb4_dequant_block_avx2(src + start / 2, scale, len, codebook, lo, hi, &planes,
                                    dst + start, 0);
        else
            bnb4_dequant_block_avx2(src + start / 2, scale, len, codebook, lo, hi, &planes,
                                    dst + start, 1);
    }
}

#endif /* QS_X86_BNB_AVX2_H */
