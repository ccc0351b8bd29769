/* SPDX-License-Identifier: MIT */
/*
 * 4-bit codes to the floats of a 16-entry table for AVX2 (the NF4/FP4 codebooks in bnb_avx2.h,
 * E2M1 in mxfp4_avx2.c and nvfp4_avx2.c): the table as four byte planes, so that 32 codes find
 * their values' bits by four in-lane byte shuffles and eight byte / 16-bit interleaves, with no
 * lane-crossing permute per 8 values (on a Zen 2 that halved the time of NF4 dequantize in
 * cache: 0.144 ns per value against 0.237 with two permutes and a blend per 8). The values are
 * the table's bits exactly. Include only from files compiled with the AVX2 flags (*_avx2.c).
 */
#ifndef QS_X86_LUT16_AVX2_H
#define QS_X86_LUT16_AVX2_H

#include <stdint.h>

#include <immintrin.h>

#include "../ref/ref.h"

/* Plane p: byte p of each entry's bits, in both 128-bit lanes. */
typedef struct {
    __m256i plane[4];
} lut16_avx2;

static inline lut16_avx2 lut16_avx2_load(const float *table)
{
    lut16_avx2 r;

    for (int p = 0; p < 4; p++) {
        uint8_t b[16];
        for (int k = 0; k < 16; k++)
            b[k] = (uint8_t)(qs_f32_bits(table[k]) >> (8 * p));
        r.plane[p] = _mm256_broadcastsi128_si256(_mm_loadu_si128((const __m128i *)b));
    }
    return r;
}

/*
 * The table values of 32 codes packed two per byte (16 bytes at s): v[k] holds elements 8k ...
 * 8k + 7. high_first (a constant at each call): element 2j is the high nibble of byte j
 * (bitsandbytes), else the low one (OCP MX, NVFP4). The code bytes are ordered so that the
 * interleaves leave the elements in order: lane 0 holds elements 0-3, 8-11, 16-19, 24-27 (from
 * bytes 0, 1, 4, 5, 8, 9, 12, 13), lane 1 the others; byte planes 0|1 and 2|3 interleaved by
 * bytes, then by 16-bit pairs, are whole floats.
 */
static inline void lut16_decode32_avx2(const uint8_t *s, const lut16_avx2 *t, int high_first,
                                       __m256 v[4])
{
    const __m128i b = _mm_shuffle_epi8(_mm_loadu_si128((const __m128i *)s),
                                       _mm_setr_epi8(0, 1, 4, 5, 8, 9, 12, 13, 2, 3, 6, 7, 10, 11,
                                                     14, 15));
    const __m128i lo = _mm_and_si128(b, _mm_set1_epi8(0x0F));
    const __m128i hi = _mm_and_si128(_mm_srli_epi16(b, 4), _mm_set1_epi8(0x0F));
    const __m128i first = high_first ? hi : lo, second = high_first ? lo : hi;
    const __m256i c = _mm256_inserti128_si256(
        _mm256_castsi128_si256(_mm_unpacklo_epi8(first, second)),
        _mm_unpackhi_epi8(first, second), 1);
    const __m256i p0 = _mm256_shuffle_epi8(t->plane[0], c), p1 = _mm256_shuffle_epi8(t->plane[1], c);
    const __m256i p2 = _mm256_shuffle_epi8(t->plane[2], c), p3 = _mm256_shuffle_epi8(t->plane[3], c);
    const __m256i l01 = _mm256_unpacklo_epi8(p0, p1), l23 = _mm256_unpacklo_epi8(p2, p3);
    const __m256i h01 = _mm256_unpackhi_epi8(p0, p1), h23 = _mm256_unpackhi_epi8(p2, p3);

    v[0] = _mm256_castsi256_ps(_mm256_unpacklo_epi16(l01, l23));
    v[1] = _mm256_castsi256_ps(_mm256_unpackhi_epi16(l01, l23));
    v[2] = _mm256_castsi256_ps(_mm256_unpacklo_epi16(h01, h23));
    v[3] = _mm256_castsi256_ps(_mm256_unpackhi_epi16(h01, h23));
}

#endif /* QS_X86_LUT16_AVX2_H */
