/* SPDX-License-Identifier: MIT */
/*
 * INT8 element kernels for AVX-512 F/BW/DQ/VL (docs/formats.md §8, §9), bit for bit as
 * src/ref/int8_ref.c and in the same operation order. Quantize: v = x * mul, NaN -> 0, RNE
 * (VRNDSCALEPS, round to nearest even), clamp to +-512 in float before the exact conversion, then
 * + zp and clamp to [qmin, 127] in integers. Dequantize: fl((q - zp) * scale), q - zp exact in
 * int32 and in f32; the row-statistic variant is fl(fl(q * stat) * fl(1/127)). No FMA: each
 * product is rounded on its own. Tails use masked loads and stores.
 */
#include <immintrin.h>

#include "../core/kernels.h"
#include "../ref/ref.h"
#include "nan_avx512.h"

static inline __mmask16 tail_mask_avx512(int64_t left)
{
    return left >= 16 ? (__mmask16)0xFFFF : (__mmask16)((1u << left) - 1u);
}

/* Sixteen values to int32 codes in [qmin, 127]. */
static inline __m512i int8_encode_avx512(__m512 x, __m512 mul, __m512i zp, __m512i qmin)
{
    __m512 v = _mm512_mul_ps(x, mul);
    __mmask16 num = _mm512_cmp_ps_mask(v, v, _CMP_ORD_Q);
    v = _mm512_maskz_mov_ps(num, v); /* NaN product -> +0 (§8 rule 4) */
    v = _mm512_roundscale_ps(v, _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC);
    v = _mm512_min_ps(_mm512_max_ps(v, _mm512_set1_ps(-512.0f)), _mm512_set1_ps(512.0f));
    __m512i q = _mm512_add_epi32(_mm512_cvttps_epi32(v), zp);
    return _mm512_min_epi32(_mm512_max_epi32(q, qmin), _mm512_set1_epi32(127));
}

void qs_int8_quant__avx512(const float *src, int64_t n, float mul, int32_t zp, int32_t qmin,
                           int8_t *dst)
{
    const __m512 vm = _mm512_set1_ps(mul);
    const __m512i vz = _mm512_set1_epi32(zp), vq = _mm512_set1_epi32(qmin);
    int64_t i = 0;

    for (; i + 32 <= n; i += 32) {
        __m512i c0 = int8_encode_avx512(_mm512_loadu_ps(src + i), vm, vz, vq);
        __m512i c1 = int8_encode_avx512(_mm512_loadu_ps(src + i + 16), vm, vz, vq);
        _mm_storeu_si128((__m128i *)(dst + i), _mm512_cvtepi32_epi8(c0));
        _mm_storeu_si128((__m128i *)(dst + i + 16), _mm512_cvtepi32_epi8(c1));
    }
    for (; i < n; i += 16) {
        __mmask16 m = tail_mask_avx512(n - i);
        __m512i c = int8_encode_avx512(_mm512_maskz_loadu_ps(m, src + i), vm, vz, vq);
        _mm_mask_storeu_epi8(dst + i, m, _mm512_cvtepi32_epi8(c));
    }
}

/* The NaN rule costs a compare and a masked move per vector; it is needed only for a non-finite
 * scale (q - zp is a small integer, q * stat * c is never 0 * Inf for a finite stat). Both loops
 * come from one body with `canon` constant after inlining. */
static inline __m512 int8_out_avx512(__m512 v, int canon)
{
    return canon ? nan_canon_avx512(v) : v;
}

static inline void int8_dequant_body_avx512(const int8_t *src, int64_t n, float scale, int32_t zp,
                                            float *dst, int canon)
{
    const __m512 vs = _mm512_set1_ps(scale);
    const __m512i vz = _mm512_set1_epi32(zp);
    int64_t i = 0;

    for (; i + 32 <= n; i += 32) {
        __m512i q0 = _mm512_cvtepi8_epi32(_mm_loadu_si128((const __m128i *)(src + i)));
        __m512i q1 = _mm512_cvtepi8_epi32(_mm_loadu_si128((const __m128i *)(src + i + 16)));
        _mm512_storeu_ps(
            dst + i, int8_out_avx512(
                         _mm512_mul_ps(_mm512_cvtepi32_ps(_mm512_sub_epi32(q0, vz)), vs), canon));
        _mm512_storeu_ps(
            dst + i + 16,
            int8_out_avx512(_mm512_mul_ps(_mm512_cvtepi32_ps(_mm512_sub_epi32(q1, vz)), vs),
                            canon));
    }
    for (; i < n; i += 16) {
        __mmask16 m = tail_mask_avx512(n - i);
        __m512i q = _mm512_cvtepi8_epi32(_mm_maskz_loadu_epi8(m, src + i));
        _mm512_mask_storeu_ps(
            dst + i, m,
            int8_out_avx512(_mm512_mul_ps(_mm512_cvtepi32_ps(_mm512_sub_epi32(q, vz)), vs), canon));
    }
}

void qs_int8_dequant__avx512(const int8_t *src, int64_t n, float scale, int32_t zp, float *dst)
{
    if ((qs_f32_bits(scale) & 0x7F800000u) != 0x7F800000u)
        int8_dequant_body_avx512(src, n, scale, zp, dst, 0);
    else
        int8_dequant_body_avx512(src, n, scale, zp, dst, 1);
}

static inline void int8_rowstat_body_avx512(const int8_t *src, int64_t n, float stat, float *dst,
                                            int canon)
{
    const __m512 vs = _mm512_set1_ps(stat);
    const __m512 vc = _mm512_set1_ps(0x1.020408p-7f); /* fl(1/127): never a division (§8) */
    int64_t i = 0;

    for (; i + 32 <= n; i += 32) {
        __m512 q0 =
            _mm512_cvtepi32_ps(_mm512_cvtepi8_epi32(_mm_loadu_si128((const __m128i *)(src + i))));
        __m512 q1 = _mm512_cvtepi32_ps(
            _mm512_cvtepi8_epi32(_mm_loadu_si128((const __m128i *)(src + i + 16))));
        _mm512_storeu_ps(dst + i, int8_out_avx512(_mm512_mul_ps(_mm512_mul_ps(q0, vs), vc), canon));
        _mm512_storeu_ps(dst + i + 16,
                         int8_out_avx512(_mm512_mul_ps(_mm512_mul_ps(q1, vs), vc), canon));
    }
    for (; i < n; i += 16) {
        __mmask16 m = tail_mask_avx512(n - i);
        __m512 q = _mm512_cvtepi32_ps(_mm512_cvtepi8_epi32(_mm_maskz_loadu_epi8(m, src + i)));
        _mm512_mask_storeu_ps(dst + i, m,
                              int8_out_avx512(_mm512_mul_ps(_mm512_mul_ps(q, vs), vc), canon));
    }
}

void qs_int8_dequant_rowstat__avx512(const int8_t *src, int64_t n, float stat, float *dst)
{
    if ((qs_f32_bits(stat) & 0x7F800000u) != 0x7F800000u)
        int8_rowstat_body_avx512(src, n, stat, dst, 0);
    else
        int8_rowstat_body_avx512(src, n, stat, dst, 1);
}
