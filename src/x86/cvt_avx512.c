/* SPDX-License-Identifier: MIT */
/*
 * Plain dtype conversions f16/bf16 <-> f32 for AVX-512 F/BW/VL (docs/formats.md §0 rule 4), bit for
 * bit as src/ref/cvt_ref.c. VCVTPH2PS / VCVTPS2PH (round to nearest even) have the reference's NaN,
 * overflow and subnormal behaviour. bfloat16 rounding is integer arithmetic on the bits because
 * VCVTNEPS2BF16 flushes f32 subnormal inputs. Tails use masked loads and stores, so nothing
 * outside [0, n) is touched.
 */
#include <immintrin.h>

#include "../core/kernels.h"
#include "../ref/ref.h"

static inline __mmask16 tail_mask_avx512(int64_t left)
{
    return left >= 16 ? (__mmask16)0xFFFF : (__mmask16)((1u << left) - 1u);
}

void qs_cvt_f16_f32__avx512(const uint16_t *src, int64_t n, float *dst)
{
    int64_t i = 0;

    for (; i + 32 <= n; i += 32) {
        __m256i a = _mm256_loadu_si256((const __m256i *)(src + i));
        __m256i b = _mm256_loadu_si256((const __m256i *)(src + i + 16));
        _mm512_storeu_ps(dst + i, _mm512_cvtph_ps(a));
        _mm512_storeu_ps(dst + i + 16, _mm512_cvtph_ps(b));
    }
    for (; i < n; i += 16) {
        __mmask16 m = tail_mask_avx512(n - i);
        __m256i a = _mm256_maskz_loadu_epi16(m, src + i);
        _mm512_mask_storeu_ps(dst + i, m, _mm512_cvtph_ps(a));
    }
}

void qs_cvt_bf16_f32__avx512(const uint16_t *src, int64_t n, float *dst)
{
    int64_t i = 0;

    for (; i + 32 <= n; i += 32) {
        __m256i a = _mm256_loadu_si256((const __m256i *)(src + i));
        __m256i b = _mm256_loadu_si256((const __m256i *)(src + i + 16));
        _mm512_storeu_si512(dst + i, _mm512_slli_epi32(_mm512_cvtepu16_epi32(a), 16));
        _mm512_storeu_si512(dst + i + 16, _mm512_slli_epi32(_mm512_cvtepu16_epi32(b), 16));
    }
    for (; i < n; i += 16) {
        __mmask16 m = tail_mask_avx512(n - i);
        __m256i a = _mm256_maskz_loadu_epi16(m, src + i);
        _mm512_mask_storeu_epi32(dst + i, m, _mm512_slli_epi32(_mm512_cvtepu16_epi32(a), 16));
    }
}

/* VCVTPS2PH rounding immediate (a constant expression, as the intrinsic requires): nearest even. */
#define RNE_AVX512 (_MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC)

void qs_cvt_f32_f16__avx512(const float *src, int64_t n, uint16_t *dst)
{
    int64_t i = 0;

    for (; i + 32 <= n; i += 32) {
        __m512 a = _mm512_loadu_ps(src + i), b = _mm512_loadu_ps(src + i + 16);
        _mm256_storeu_si256((__m256i *)(dst + i), _mm512_cvtps_ph(a, RNE_AVX512));
        _mm256_storeu_si256((__m256i *)(dst + i + 16), _mm512_cvtps_ph(b, RNE_AVX512));
    }
    for (; i < n; i += 16) {
        __mmask16 m = tail_mask_avx512(n - i);
        __m512 a = _mm512_maskz_loadu_ps(m, src + i);
        _mm256_mask_storeu_epi16(dst + i, m, _mm512_cvtps_ph(a, RNE_AVX512));
    }
}

/* Sixteen f32 bit patterns to bfloat16: RNE on the bits, NaN pinned to (u >> 16) | 0x0040. */
static inline __m256i bf16_round_avx512(__m512i u)
{
    __m512i abs = _mm512_and_si512(u, _mm512_set1_epi32(0x7FFFFFFF));
    __mmask16 nan = _mm512_cmpgt_epi32_mask(abs, _mm512_set1_epi32(0x7F800000));
    __m512i odd = _mm512_and_si512(_mm512_srli_epi32(u, 16), _mm512_set1_epi32(1));
    __m512i r = _mm512_add_epi32(_mm512_add_epi32(u, _mm512_set1_epi32(0x7FFF)), odd);
    __m512i q = _mm512_or_si512(_mm512_srli_epi32(u, 16), _mm512_set1_epi32(0x0040));
    return _mm512_cvtepi32_epi16(_mm512_mask_mov_epi32(_mm512_srli_epi32(r, 16), nan, q));
}

void qs_cvt_f32_bf16__avx512(const float *src, int64_t n, uint16_t *dst)
{
    int64_t i = 0;

    for (; i + 32 <= n; i += 32) {
        __m256i a = bf16_round_avx512(_mm512_loadu_si512(src + i));
        __m256i b = bf16_round_avx512(_mm512_loadu_si512(src + i + 16));
        _mm256_storeu_si256((__m256i *)(dst + i), a);
        _mm256_storeu_si256((__m256i *)(dst + i + 16), b);
    }
    for (; i < n; i += 16) {
        __mmask16 m = tail_mask_avx512(n - i);
        __m256i a = bf16_round_avx512(_mm512_maskz_loadu_epi32(m, src + i));
        _mm256_mask_storeu_epi16(dst + i, m, a);
    }
}

/* Non-temporal copy: plain masked stores up to the first 64-byte boundary of dst, then VMOVNTPS
 * of whole lines (no read for ownership, no cache pollution), a masked tail, and with `fence`
 * SFENCE, so that the weakly ordered stores are visible before the caller's threads synchronize
 * (once per run of calls: a fence waits for every write-combining buffer to drain). */
void qs_copy_stream_f32__avx512(const float *src, int64_t n, float *dst, int32_t fence)
{
    int64_t head = (int64_t)((64 - ((uintptr_t)dst & 63)) & 63) / 4, i = 0;

    if ((uintptr_t)dst & 3) { /* not float-aligned: no line alignment exists, plain copy */
        for (; i + 16 <= n; i += 16)
            _mm512_storeu_ps(dst + i, _mm512_loadu_ps(src + i));
    } else {
        if (head > n)
            head = n;
        if (head > 0) {
            __mmask16 k = (__mmask16)((1u << head) - 1);
            _mm512_mask_storeu_ps(dst, k, _mm512_maskz_loadu_ps(k, src));
            i = head;
        }
        for (; i + 32 <= n; i += 32) {
            _mm512_stream_ps(dst + i, _mm512_loadu_ps(src + i));
            _mm512_stream_ps(dst + i + 16, _mm512_loadu_ps(src + i + 16));
        }
        for (; i + 16 <= n; i += 16)
            _mm512_stream_ps(dst + i, _mm512_loadu_ps(src + i));
    }
    if (i < n) {
        __mmask16 k = (__mmask16)((1u << (n - i)) - 1);
        _mm512_mask_storeu_ps(dst + i, k, _mm512_maskz_loadu_ps(k, src + i));
    }
    if (fence)
        _mm_sfence();
}
