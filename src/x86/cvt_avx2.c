/* SPDX-License-Identifier: MIT */
/*
 * Plain dtype conversions f16/bf16 <-> f32 for AVX2 + F16C (docs/formats.md §0 rule 4), bit for bit
 * as src/ref/cvt_ref.c. F16C's VCVTPH2PS quiets a NaN and keeps its payload, and VCVTPS2PH with
 * round-to-nearest-even gives RNE, overflow to Inf and the reference's NaN bits; neither flushes
 * subnormals in the default environment. bfloat16 rounding is done on the integer bits, so f32
 * subnormals round like every other value (VCVTNEPS2BF16 would flush them). Tails use the
 * reference's element routines.
 */
#include <immintrin.h>
#include <string.h>

#include "../core/kernels.h"
#include "../ref/ref.h"

void qs_cvt_f16_f32__avx2(const uint16_t *src, int64_t n, float *dst)
{
    int64_t i = 0;

    for (; i + 16 <= n; i += 16) {
        __m128i a = _mm_loadu_si128((const __m128i *)(src + i));
        __m128i b = _mm_loadu_si128((const __m128i *)(src + i + 8));
        _mm256_storeu_ps(dst + i, _mm256_cvtph_ps(a));
        _mm256_storeu_ps(dst + i + 8, _mm256_cvtph_ps(b));
    }
    for (; i < n; i++)
        qs_st_f32(dst + i, qs_ref_f16_to_f32(qs_ld_u16(src + i)));
}

void qs_cvt_bf16_f32__avx2(const uint16_t *src, int64_t n, float *dst)
{
    int64_t i = 0;

    for (; i + 16 <= n; i += 16) {
        __m256i h = _mm256_loadu_si256((const __m256i *)(src + i));
        __m256i lo = _mm256_cvtepu16_epi32(_mm256_castsi256_si128(h));
        __m256i hi = _mm256_cvtepu16_epi32(_mm256_extracti128_si256(h, 1));
        _mm256_storeu_si256((__m256i *)(dst + i), _mm256_slli_epi32(lo, 16));
        _mm256_storeu_si256((__m256i *)(dst + i + 8), _mm256_slli_epi32(hi, 16));
    }
    for (; i < n; i++)
        qs_st_f32(dst + i, qs_ref_bf16_to_f32(qs_ld_u16(src + i)));
}

void qs_cvt_f32_f16__avx2(const float *src, int64_t n, uint16_t *dst)
{
    int64_t i = 0;

    for (; i + 16 <= n; i += 16) {
        __m256 a = _mm256_loadu_ps(src + i), b = _mm256_loadu_ps(src + i + 8);
        _mm_storeu_si128((__m128i *)(dst + i),
                         _mm256_cvtps_ph(a, _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC));
        _mm_storeu_si128((__m128i *)(dst + i + 8),
                         _mm256_cvtps_ph(b, _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC));
    }
    for (; i < n; i++)
        qs_st_u16(dst + i, qs_ref_f32_to_f16(qs_ld_f32(src + i)));
}

/* Eight f32 bit patterns to bfloat16 in the low 16 bits of each lane: RNE on the bits, NaN pinned
 * to (u >> 16) | 0x0040 (§0 rule 4). */
static inline __m256i bf16_round_avx2(__m256i u)
{
    const __m256i one = _mm256_set1_epi32(1);
    __m256i abs = _mm256_and_si256(u, _mm256_set1_epi32(0x7FFFFFFF));
    __m256i nan = _mm256_cmpgt_epi32(abs, _mm256_set1_epi32(0x7F800000));
    __m256i odd = _mm256_and_si256(_mm256_srli_epi32(u, 16), one);
    __m256i r = _mm256_add_epi32(_mm256_add_epi32(u, _mm256_set1_epi32(0x7FFF)), odd);
    __m256i q = _mm256_or_si256(_mm256_srli_epi32(u, 16), _mm256_set1_epi32(0x0040));
    return _mm256_blendv_epi8(_mm256_srli_epi32(r, 16), q, nan);
}

void qs_cvt_f32_bf16__avx2(const float *src, int64_t n, uint16_t *dst)
{
    int64_t i = 0;

    for (; i + 16 <= n; i += 16) {
        __m256i a = bf16_round_avx2(_mm256_loadu_si256((const __m256i *)(src + i)));
        __m256i b = bf16_round_avx2(_mm256_loadu_si256((const __m256i *)(src + i + 8)));
        /* lanes hold 0...0xFFFF, so the signed-input pack cannot saturate; it interleaves the
         * 128-bit halves, which the qword permute undoes */
        __m256i p = _mm256_permute4x64_epi64(_mm256_packus_epi32(a, b), 0xD8);
        _mm256_storeu_si256((__m256i *)(dst + i), p);
    }
    for (; i < n; i++)
        qs_st_u16(dst + i, qs_ref_f32_to_bf16(qs_ld_f32(src + i)));
}

/* Non-temporal copy: plain stores up to the first 32-byte boundary of dst, then VMOVNTPS of
 * 32-byte pieces (no read for ownership, no cache pollution), a plain tail, and with `fence`
 * SFENCE, so that the weakly ordered stores are visible before the caller's threads synchronize
 * (once per run of calls: a fence waits for every write-combining buffer to drain). Moves only,
 * so the bits (NaN payloads) are src's. */
void qs_copy_stream_f32__avx2(const float *src, int64_t n, float *dst, int32_t fence)
{
    int64_t i = 0;

    if (((uintptr_t)dst & 3) == 0) {
        int64_t head = (int64_t)((32 - ((uintptr_t)dst & 31)) & 31) / 4;
        if (head > n)
            head = n;
        for (; i < head; i++)
            memcpy(dst + i, src + i, 4);
        for (; i + 16 <= n; i += 16) {
            _mm256_stream_ps(dst + i, _mm256_loadu_ps(src + i));
            _mm256_stream_ps(dst + i + 8, _mm256_loadu_ps(src + i + 8));
        }
        for (; i + 8 <= n; i += 8)
            _mm256_stream_ps(dst + i, _mm256_loadu_ps(src + i));
    }
    if (i < n)
        memcpy(dst + i, src + i, (size_t)(n - i) * sizeof(float));
    if (fence)
        _mm_sfence();
}
