/* SPDX-License-Identifier: MIT */
/*
 * INT8 element kernels for AVX2 + FMA + F16C (docs/formats.md §8, §9), bit for bit as
 * src/ref/int8_ref.c and in the same operation order. Quantize: v = x * mul, NaN -> 0, RNE
 * (ROUNDPS, default rounding mode), clamp to +-512 in float before the exact conversion, then
 * + zp and clamp to [qmin, 127] in integers. Dequantize: fl((q - zp) * scale), q - zp exact in
 * int32 and in f32; the row-statistic variant is fl(fl(q * stat) * fl(1/127)). No FMA: each
 * product is rounded on its own. Tails use the reference's element routines.
 */
#include <immintrin.h>

#include "../core/kernels.h"
#include "../ref/ref.h"
#include "nan_avx2.h"

/* Eight values to int32 codes in [qmin, 127]. */
static inline __m256i int8_encode_avx2(__m256 x, __m256 mul, __m256i zp, __m256i qmin)
{
    __m256 v = _mm256_mul_ps(x, mul);
    v = _mm256_andnot_ps(_mm256_cmp_ps(v, v, _CMP_UNORD_Q), v); /* NaN product -> +0 (§8 rule 4) */
    v = _mm256_round_ps(v, _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC);
    v = _mm256_min_ps(_mm256_max_ps(v, _mm256_set1_ps(-512.0f)), _mm256_set1_ps(512.0f));
    __m256i q = _mm256_add_epi32(_mm256_cvttps_epi32(v), zp);
    return _mm256_min_epi32(_mm256_max_epi32(q, qmin), _mm256_set1_epi32(127));
}

void qs_int8_quant__avx2(const float *src, int64_t n, float mul, int32_t zp, int32_t qmin,
                         int8_t *dst)
{
    const __m256 vm = _mm256_set1_ps(mul);
    const __m256i vz = _mm256_set1_epi32(zp), vq = _mm256_set1_epi32(qmin);
    int64_t i = 0;

    for (; i + 32 <= n; i += 32) {
        __m256i c0 = int8_encode_avx2(_mm256_loadu_ps(src + i), vm, vz, vq);
        __m256i c1 = int8_encode_avx2(_mm256_loadu_ps(src + i + 8), vm, vz, vq);
        __m256i c2 = int8_encode_avx2(_mm256_loadu_ps(src + i + 16), vm, vz, vq);
        __m256i c3 = int8_encode_avx2(_mm256_loadu_ps(src + i + 24), vm, vz, vq);
        /* values are in [-128, 127], so the saturating packs are exact; they interleave the
         * 128-bit halves, which the permute undoes */
        __m256i p = _mm256_packs_epi16(_mm256_packs_epi32(c0, c1), _mm256_packs_epi32(c2, c3));
        p = _mm256_permutevar8x32_epi32(p, _mm256_setr_epi32(0, 4, 1, 5, 2, 6, 3, 7));
        _mm256_storeu_si256((__m256i *)(dst + i), p);
    }
    for (; i < n; i++)
        dst[i] = qs_ref_int8_encode(qs_ld_f32(src + i), mul, zp, qmin);
}

/* The NaN rule costs a compare and a blend per vector; it is needed only for a non-finite scale
 * (q - zp is a small integer, so a finite scale gives no NaN). Both loops come from one body
 * with `canon` constant after inlining. */
static inline __m256 int8_out_avx2(__m256 v, int canon)
{
    return canon ? nan_canon_avx2(v) : v;
}

static inline void int8_dequant_body_avx2(const int8_t *src, int64_t n, float scale, int32_t zp,
                                          float *dst, int canon)
{
    const __m256 vs = _mm256_set1_ps(scale);
    const __m256i vz = _mm256_set1_epi32(zp);
    int64_t i = 0;

    for (; i + 16 <= n; i += 16) {
        __m128i b = _mm_loadu_si128((const __m128i *)(src + i));
        __m256i q0 = _mm256_sub_epi32(_mm256_cvtepi8_epi32(b), vz);
        __m256i q1 = _mm256_sub_epi32(_mm256_cvtepi8_epi32(_mm_unpackhi_epi64(b, b)), vz);
        _mm256_storeu_ps(dst + i, int8_out_avx2(_mm256_mul_ps(_mm256_cvtepi32_ps(q0), vs), canon));
        _mm256_storeu_ps(dst + i + 8,
                         int8_out_avx2(_mm256_mul_ps(_mm256_cvtepi32_ps(q1), vs), canon));
    }
    for (; i < n; i++)
        qs_st_f32(dst + i, qs_ref_nan_canon((float)((int32_t)src[i] - zp) * scale));
}

void qs_int8_dequant__avx2(const int8_t *src, int64_t n, float scale, int32_t zp, float *dst)
{
    if ((qs_f32_bits(scale) & 0x7F800000u) != 0x7F800000u)
        int8_dequant_body_avx2(src, n, scale, zp, dst, 0);
    else
        int8_dequant_body_avx2(src, n, scale, zp, dst, 1);
}

/* fl(fl(q * stat) * c): a finite stat gives a finite or infinite product, never NaN. */
static inline void int8_rowstat_body_avx2(const int8_t *src, int64_t n, float stat, float *dst,
                                          int canon)
{
    const float c = 0x1.020408p-7f; /* fl(1/127): a multiply, never a division (§8) */
    const __m256 vs = _mm256_set1_ps(stat), vc = _mm256_set1_ps(c);
    int64_t i = 0;

    for (; i + 16 <= n; i += 16) {
        __m128i b = _mm_loadu_si128((const __m128i *)(src + i));
        __m256 q0 = _mm256_cvtepi32_ps(_mm256_cvtepi8_epi32(b));
        __m256 q1 = _mm256_cvtepi32_ps(_mm256_cvtepi8_epi32(_mm_unpackhi_epi64(b, b)));
        _mm256_storeu_ps(dst + i, int8_out_avx2(_mm256_mul_ps(_mm256_mul_ps(q0, vs), vc), canon));
        _mm256_storeu_ps(dst + i + 8,
                         int8_out_avx2(_mm256_mul_ps(_mm256_mul_ps(q1, vs), vc), canon));
    }
    for (; i < n; i++) {
        float v = (float)src[i] * stat;
        qs_st_f32(dst + i, qs_ref_nan_canon(v * c));
    }
}

void qs_int8_dequant_rowstat__avx2(const int8_t *src, int64_t n, float stat, float *dst)
{
    if ((qs_f32_bits(stat) & 0x7F800000u) != 0x7F800000u)
        int8_rowstat_body_avx2(src, n, stat, dst, 0);
    else
        int8_rowstat_body_avx2(src, n, stat, dst, 1);
}
