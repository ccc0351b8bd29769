/* SPDX-License-Identifier: MIT */
/*
 * 2:4 GEMV kernels for AVX-512 (F/BW): the gather (slot mm_gather_sp24) and the fused dot
 * products of x with one 2:4 row of f32, f16, bf16 or NF4 kept values (mm_dot_sp24_*), as
 * src/ref/matmul_ref.c defines them (gather, then the 16-lane dot product of the GEMV in
 * include/qsparse/matmul.h; docs/sparsity.md §3.2 for the meta nibbles).
 *
 * Two meta words (8 groups, 32 columns of x, 16 kept values) a step: the 16 two-bit indices
 * are spread into the 16 lanes with one variable shift, offset by 4 per group, and used as a
 * two-register permutation of the 32 x values, so x is never gathered element by element.
 * Kept value j goes to lane j mod 16 and every lane adds fl(x * v) in ascending j, with the
 * reference's pairwise tree at the end, so the results are the reference's bit for bit (a NaN
 * is canonical). NF4 takes this path when its scale blocks start on a multiple of 16 kept
 * values (blocks of 16k and a row start at a multiple of 16: every default shape), and calls
 * the reference otherwise. Tails of fewer than 16 kept values run under a lane mask.
 */
#include <immintrin.h>
#include <string.h>

#include "../core/kernels.h"
#include "../ref/ref.h"

/* x at the 16 kept columns of 32 columns of x (two meta words). */
static inline __m512 gather16_avx512(const float *x, const uint16_t *meta)
{
    /* lane l holds kept value l: group l / 2, index bits 2l + 1 .. 2l of the two words */
    const __m512i shift =
        _mm512_setr_epi32(0, 2, 4, 6, 8, 10, 12, 14, 16, 18, 20, 22, 24, 26, 28, 30);
    const __m512i base =
        _mm512_setr_epi32(0, 0, 4, 4, 8, 8, 12, 12, 16, 16, 20, 20, 24, 24, 28, 28);
    uint32_t w = (uint32_t)qs_ld_u16(meta) | (uint32_t)qs_ld_u16(meta + 1) << 16;
    __m512i idx = _mm512_srlv_epi32(_mm512_set1_epi32((int)w), shift);
    idx = _mm512_add_epi32(_mm512_and_si512(idx, _mm512_set1_epi32(3)), base);
    return _mm512_permutex2var_ps(_mm512_loadu_ps(x), idx, _mm512_loadu_ps(x + 16));
}

/* x at the kept columns of the last len < 16 kept values (the reference gather, zero past). */
static inline __m512 gather_tail_avx512(const float *x, const uint16_t *meta, int64_t len)
{
    float xg[16] = {0};
    qs_mm_gather_sp24__ref(x, meta, 2 * len, xg);
    return _mm512_loadu_ps(xg);
}

/* p[i] + p[i + 8], then + 4, + 2, + 1: the reference's tree. */
static inline float sum16_avx512(__m512 p)
{
    __m256 a = _mm256_add_ps(_mm512_castps512_ps256(p), _mm512_extractf32x8_ps(p, 1));
    __m128 b = _mm_add_ps(_mm256_castps256_ps128(a), _mm256_extractf128_ps(a, 1));
    __m128 c = _mm_add_ps(b, _mm_movehl_ps(b, b));
    return _mm_cvtss_f32(_mm_add_ss(c, _mm_shuffle_ps(c, c, 1)));
}

static inline __m512 mac_avx512(__m512 p, __m512 x, __m512 v)
{
    return _mm512_add_ps(p, _mm512_mul_ps(x, v));
}

static inline __mmask16 tail_mask(int64_t len)
{
    return (__mmask16)((1u << len) - 1u);
}

void qs_mm_gather_sp24__avx512_1x1x32(const float *x, const uint16_t *meta, int64_t n, float *xg)
{
    int64_t i = 0;

    for (; i + 32 <= n; i += 32)
        _mm512_storeu_ps(xg + i / 2, gather16_avx512(x + i, meta + i / 16));
    qs_mm_gather_sp24__ref(x + i, meta + i / 16, n - i, xg + i / 2);
}

float qs_mm_dot_sp24_f32__avx512_1x1x32(const float *x, const uint16_t *meta, int64_t n,
                                        const float *w)
{
    __m512 p = _mm512_setzero_ps();
    int64_t i = 0, kept = n / 2;

    for (; i + 16 <= kept; i += 16)
        p = mac_avx512(p, gather16_avx512(x + 2 * i, meta + i / 8), _mm512_loadu_ps(w + i));
    if (i < kept) {
        __mmask16 k = tail_mask(kept - i);
        __m512 prod = _mm512_mul_ps(gather_tail_avx512(x + 2 * i, meta + i / 8, kept - i),
                                    _mm512_maskz_loadu_ps(k, w + i));
        p = _mm512_mask_add_ps(p, k, p, prod); /* lanes past the row keep their sum (and -0) */
    }
    return qs_ref_nan_canon(sum16_avx512(p));
}

static inline __m512 f16_avx512(__m256i h)
{
    return _mm512_cvtph_ps(h);
}

static inline __m512 bf16_avx512(__m256i h)
{
    return _mm512_castsi512_ps(_mm512_slli_epi32(_mm512_cvtepu16_epi32(h), 16));
}

static inline float dot_u16_avx512(const float *x, const uint16_t *meta, int64_t n,
                                   const uint16_t *w, int bf16)
{
    __m512 p = _mm512_setzero_ps();
    int64_t i = 0, kept = n / 2;

    for (; i + 16 <= kept; i += 16) {
        __m256i h = _mm256_loadu_si256((const __m256i *)(w + i));
        p = mac_avx512(p, gather16_avx512(x + 2 * i, meta + i / 8),
                       bf16 ? bf16_avx512(h) : f16_avx512(h));
    }
    if (i < kept) {
        __mmask16 k = tail_mask(kept - i);
        __m256i h = _mm256_maskz_loadu_epi16(k, w + i);
        __m512 prod = _mm512_mul_ps(gather_tail_avx512(x + 2 * i, meta + i / 8, kept - i),
                                    bf16 ? bf16_avx512(h) : f16_avx512(h));
        p = _mm512_mask_add_ps(p, k, p, prod);
    }
    return qs_ref_nan_canon(sum16_avx512(p));
}

float qs_mm_dot_sp24_f16__avx512_1x1x32(const float *x, const uint16_t *meta, int64_t n,
                                        const uint16_t *w)
{
    return dot_u16_avx512(x, meta, n, w, 0);
}

float qs_mm_dot_sp24_bf16__avx512_1x1x32(const float *x, const uint16_t *meta, int64_t n,
                                         const uint16_t *w)
{
    return dot_u16_avx512(x, meta, n, w, 1);
}

/* Codebook values of 16 NF4 codes in 8 bytes (element 2i in the high nibble of byte i). */
static inline __m512 nf4_avx512(uint64_t bytes, __m512 book)
{
    const __m512i hi_lo = _mm512_setr_epi32(4, 0, 4, 0, 4, 0, 4, 0, 4, 0, 4, 0, 4, 0, 4, 0);
    __m128i b = _mm_cvtsi64_si128((long long)bytes);
    __m512i c = _mm512_cvtepu8_epi32(_mm_unpacklo_epi8(b, b)); /* byte i in lanes 2i, 2i + 1 */
    c = _mm512_and_si512(_mm512_srlv_epi32(c, hi_lo), _mm512_set1_epi32(15));
    return _mm512_permutexvar_ps(c, book);
}

float qs_mm_dot_sp24_nf4__avx512_1x1x32(const float *x, const uint16_t *meta, int64_t n,
                                        const uint8_t *data, int64_t start, const float *absmax,
                                        int32_t block)
{
    const __m512 book = _mm512_loadu_ps(qs_nf4_codebook);
    int64_t i = 0, kept = n / 2;
    float acc = 0.0f;

    if (block % 16 != 0 || start % 16 != 0)
        return qs_mm_dot_sp24_nf4__ref(x, meta, n, data, start, absmax, block);
    /* block b of the tensor ends at kept value end; one division for the row */
    for (int64_t b = start / block, end = (b + 1) * block - start; i < kept; b++, end += block) {
        __m512 p = _mm512_setzero_ps();
        uint64_t bytes;

        int64_t stop = end < kept ? end : kept;
        for (; i + 16 <= stop; i += 16) {
            memcpy(&bytes, data + (start + i) / 2, 8);
            p = mac_avx512(p, gather16_avx512(x + 2 * i, meta + i / 8), nf4_avx512(bytes, book));
        }
        if (i < stop) { /* the row's last kept values: fewer than 16, at a multiple of 16 */
            __mmask16 k = tail_mask(stop - i);
            bytes = 0;
            memcpy(&bytes, data + (start + i) / 2, (size_t)(stop - i + 1) / 2);
            __m512 prod = _mm512_mul_ps(gather_tail_avx512(x + 2 * i, meta + i / 8, stop - i),
                                        nf4_avx512(bytes, book));
            p = _mm512_mask_add_ps(p, k, p, prod);
            i = stop;
        }
        acc = acc + sum16_avx512(p) * qs_ld_f32(absmax + b);
    }
    return qs_ref_nan_canon(acc);
}
