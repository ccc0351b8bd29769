/* SPDX-License-Identifier: MIT */
/*
 * Blockwise-absmax helpers shared by the bitsandbytes kernels for AVX-512 F/BW/DQ/VL
 * (nf4_avx512.c, fp4_avx512.c, dyn8_avx512.c; docs/formats.md §5, §6.4): tail masks, the block
 * absmax with NaN ignored, the group driver that computes every absmax of about 2048 elements
 * before their codes, and the NF4/FP4 block encoder and decoder, which differ only in the element
 * encoder (passed in) and the codebook. Block tails use masked loads and stores: a masked-off odd
 * pad lane loads 0.0, exactly the pad value the reference quantizes (§5.1), and nothing outside
 * the buffers is touched. Everything is `static inline` and takes the family's encoder as a
 * function constant, so each kernel file gets its own inlined copy with no call per element.
 * Include only from files compiled with the AVX-512 flags (*_avx512.c).
 */
#ifndef QS_X86_BNB_AVX512_H
#define QS_X86_BNB_AVX512_H

#include <string.h>

#include <immintrin.h>

#include "../core/kernels.h"
#include "nan_avx512.h"

/* Codes of one block of len elements whose absmax is known; tab is the family's table. */
typedef void (*bnb_block_avx512_fn)(const float *v, int64_t len, float absmax, uint8_t *dst,
                                    const void *tab);
/* Sixteen scaled values to 4-bit codes (one per 32-bit lane). */
typedef __m512i (*bnb4_encode_avx512_fn)(__m512 x, const void *tab);

static inline __mmask16 tail_mask_avx512(int64_t left)
{
    return left >= 16 ? (__mmask16)0xFFFF : (__mmask16)((1u << left) - 1u);
}

static inline float bnb_amax_avx512(const float *v, int64_t len)
{
    __m512 a0 = _mm512_setzero_ps(), a1 = a0;
    int64_t i = 0;

    for (; i + 32 <= len; i += 32) {
        a0 = _mm512_max_ps(_mm512_abs_ps(_mm512_loadu_ps(v + i)), a0); /* NaN ignored */
        a1 = _mm512_max_ps(_mm512_abs_ps(_mm512_loadu_ps(v + i + 16)), a1);
    }
    for (; i < len; i += 16) /* masked-off lanes load +0, which cannot raise the max */
        a0 = _mm512_max_ps(_mm512_abs_ps(_mm512_maskz_loadu_ps(tail_mask_avx512(len - i), v + i)),
                           a0);
    return _mm512_reduce_max_ps(_mm512_max_ps(a0, a1)); /* no NaN, no -0: exact */
}

/* The quantize driver: absmax[b] and the codes of every block; a block of `block` elements takes
 * block / per_byte bytes of dst (per_byte: 2 for 4-bit codes, 1 for 8-bit codes). */
static inline void bnb_quant_avx512(const float *src, int64_t n, int32_t block, int32_t per_byte,
                                    uint8_t *dst, float *absmax, bnb_block_avx512_fn block_fn,
                                    const void *tab)
{
    /* Blocks go in groups of about 2048 elements: every absmax of the group first, then every
     * block's codes, so that one block's reduction, division and encode do not form a single
     * dependency chain per block (the group is still in L1 for the second pass). */
    const int64_t group = block >= 2048 ? 1 : 2048 / block;
    for (int64_t g = 0; g * block < n; g += group) {
        for (int64_t b = g; b < g + group && b * block < n; b++) {
            int64_t len = n - b * block < block ? n - b * block : block;
            qs_st_f32(absmax + b, bnb_amax_avx512(src + b * block, len));
        }
        for (int64_t b = g; b < g + group && b * block < n; b++) {
            int64_t len = n - b * block < block ? n - b * block : block;
            block_fn(src + b * block, len, qs_ld_f32(absmax + b), dst + b * block / per_byte, tab);
        }
    }
}

/* 16 codes to 8 bytes (low half of the result), element 2j in the high nibble. */
static inline __m128i bnb4_nibbles16_avx512(__m512i c)
{
    __m128i w = _mm_maddubs_epi16(_mm512_cvtepi32_epi8(c), _mm_set1_epi16(0x0110));
    return _mm_packus_epi16(w, w); /* 16 * c[2j] + c[2j+1] <= 255 */
}

/* 32 codes to 16 bytes. */
static inline __m128i bnb4_nibbles32_avx512(__m512i c0, __m512i c1)
{
    __m256i b = _mm256_inserti128_si256(_mm256_castsi128_si256(_mm512_cvtepi32_epi8(c0)),
                                        _mm512_cvtepi32_epi8(c1), 1);
    return _mm256_cvtepi16_epi8(_mm256_maddubs_epi16(b, _mm256_set1_epi16(0x0110)));
}

/* NF4/FP4 codes of one block (§5): x = v * (1 / absmax), then the vector encoder. */
static inline void bnb4_block_avx512(const float *v, int64_t len, float absmax, uint8_t *dst,
                                     const void *tab, bnb4_encode_avx512_fn encode)
{
    int64_t i = 0;

    if (absmax == 0.0f) { /* all-zero or all-NaN block: explicit branch, codes 0 (§5.2) */
        memset(dst, 0x00, (size_t)((len + 1) / 2));
        return;
    }
    const __m512 vinv = _mm512_set1_ps(1.0f / absmax);
    for (; i + 32 <= len; i += 32) {
        __m512i c0 = encode(_mm512_mul_ps(_mm512_loadu_ps(v + i), vinv), tab);
        __m512i c1 = encode(_mm512_mul_ps(_mm512_loadu_ps(v + i + 16), vinv), tab);
        _mm_storeu_si128((__m128i *)(dst + i / 2), bnb4_nibbles32_avx512(c0, c1));
    }
    for (; i < len; i += 16) {
        int64_t left = len - i < 16 ? len - i : 16;
        __m512 x = _mm512_maskz_loadu_ps(tail_mask_avx512(left), v + i);
        __m128i b = bnb4_nibbles16_avx512(encode(_mm512_mul_ps(x, vinv), tab));
        _mm_mask_storeu_epi8(dst + i / 2, (__mmask16)((1u << ((left + 1) / 2)) - 1u), b);
    }
}

/* Codes of 8 packed bytes (16 elements, element 2j in the high nibble) in 32-bit lanes, bits 0..3;
 * the bits above are not cleared: the codebook permute reads only bits 0..3 of an index. */
static inline __m512i bnb4_nibbles_unpack_avx512(__m128i b)
{
    const __m512i shift = _mm512_set4_epi32(0, 4, 0, 4); /* lanes 0, 1, 2, 3: 4, 0, 4, 0 */
    return _mm512_srlv_epi32(_mm512_cvtepu8_epi32(_mm_unpacklo_epi8(b, b)), shift);
}

/* One block: codebook[code] * vs (§5.3); canon: the NaN rule's compare and blend, which only a
 * non-finite absmax needs (a finite codebook value times a finite absmax is never NaN). */
static inline void bnb4_dequant_block_avx512(const uint8_t *s, __m512 vs, int64_t len,
                                             __m512 book, float *d, int canon)
{
    int64_t i = 0;

    for (; i + 32 <= len; i += 32) {
        __m128i bytes = _mm_loadu_si128((const __m128i *)(s + i / 2));
        __m512 v0 = _mm512_mul_ps(
            _mm512_permutexvar_ps(bnb4_nibbles_unpack_avx512(bytes), book), vs);
        __m512 v1 = _mm512_mul_ps(
            _mm512_permutexvar_ps(bnb4_nibbles_unpack_avx512(_mm_unpackhi_epi64(bytes, bytes)),
                                  book),
            vs);
        _mm512_storeu_ps(d + i, canon ? nan_canon_avx512(v0) : v0);
        _mm512_storeu_ps(d + i + 16, canon ? nan_canon_avx512(v1) : v1);
    }
    for (; i < len; i += 16) {
        int64_t left = len - i < 16 ? len - i : 16;
        __mmask16 bm = (__mmask16)((1u << ((left + 1) / 2)) - 1u);
        __m128i bytes = _mm_maskz_loadu_epi8(bm, s + i / 2);
        __m512 v = _mm512_mul_ps(_mm512_permutexvar_ps(bnb4_nibbles_unpack_avx512(bytes), book), vs);
        _mm512_mask_storeu_ps(d + i, tail_mask_avx512(left), canon ? nan_canon_avx512(v) : v);
    }
}

/* NF4/FP4 dequantize with a 16-entry codebook: value = codebook[code] * absmax (§5.3). */
static inline void bnb4_dequant_avx512(const uint8_t *src, const float *absmax, int64_t n,
                                       int32_t block, const float *codebook, float *dst)
{
    const __m512 book = _mm512_loadu_ps(codebook);

    for (int64_t b = 0; b * block < n; b++) {
        int64_t start = b * block;
        int64_t len = n - start < block ? n - start : block;
        const float scale = qs_ld_f32(absmax + b);
        const __m512 vs = _mm512_set1_ps(scale);

        if ((qs_f32_bits(scale) & 0x7F800000u) != 0x7F800000u) /* finite */
            bnb4_dequant_block_avx512(src + start / 2, vs, len, book, dst + start, 0);
        else
            bnb4_dequant_block_avx512(src + start / 2, vs, len, book, dst + start, 1);
    }
}

#endif /* QS_X86_BNB_AVX512_H */
