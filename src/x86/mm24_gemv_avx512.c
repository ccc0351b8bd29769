/* SPDX-License-Identifier: MIT */
/*
 * 2:4 GEMV kernels for AVX-512 (F/BW): the gather (slot mm_gather_sp24) and the fused dot
 * products of x with one 2:4 row of f32, f16, bf16 or NF4 kept values (mm_dot_sp24_*), within
 * the matmul tolerance of src/ref/matmul_ref.c (gather, then the 16-lane dot product of the GEMV
 * in include/qsparse/matmul.h; docs/sparsity.md §3.2 for the meta nibbles).
 *
 * Two meta words (8 groups, 32 columns of x, 16 kept values) a step, with only the kept
 * products computed (half the FMAs of the dense row) and no element-wise gather: the 32 bits are
 * broadcast, each lane shifted to its 2-bit index and merged with its group's offset (group * 4)
 * in one ternary-logic operation, and the result selects the 16 x values out of the 32 with one
 * two-register permutation. NF4 values come out of the codebook register with one permutation
 * per 16 (the codes widened to one per lane; the permutation reads only the low 4 bits). Products are FMAs into 16-lane
 * partial sums, two registers alternating; an NF4 block's partial sums are multiplied by its
 * absmax once per block (one FMA into the row's accumulator), and the 16 lanes are added at the
 * end. The order differs from the reference's (FMA, lane-wise scaling), as the matmul tolerance
 * allows. An infinite absmax multiplies the block's total instead (a lane holding 0 would make a
 * NaN of 0 * Inf where the reference's nonzero sum times Inf is an infinity). NF4 takes this
 * path when its scale blocks and the row start on multiples of 16 kept values (every default
 * shape with K a multiple of 32) and calls the reference otherwise. The last fewer than 32 columns
 * run under masks: x, meta words and code bytes past the row are never read, and lanes past it
 * keep their partial sums.
 */
#include <immintrin.h>
#include <string.h>

#include "../core/kernels.h"
#include "../ref/ref.h"

/* The 16 permutation indices of 32 columns from their two meta words: lane l holds kept value
 * l of group l / 2, index bits 2l + 1 .. 2l, offset by 4 per group. */
static inline __m512i meta_idx_avx512(uint32_t w)
{
    const __m512i shift =
        _mm512_setr_epi32(0, 2, 4, 6, 8, 10, 12, 14, 16, 18, 20, 22, 24, 26, 28, 30);
    const __m512i base =
        _mm512_setr_epi32(0, 0, 4, 4, 8, 8, 12, 12, 16, 16, 20, 20, 24, 24, 28, 28);
    /* (a & 3) | base */
    return _mm512_ternarylogic_epi32(_mm512_srlv_epi32(_mm512_set1_epi32((int)w), shift),
                                     _mm512_set1_epi32(3), base, 0xEA);
}

static inline uint32_t meta32_avx512(const uint16_t *meta)
{
    uint32_t w;
    memcpy(&w, meta, 4); /* two little-endian words, at any byte */
    return w;
}

/* x at the 16 kept columns of 32 full columns. */
static inline __m512 select16_avx512(const float *x, const uint16_t *meta)
{
    return _mm512_permutex2var_ps(_mm512_loadu_ps(x), meta_idx_avx512(meta32_avx512(meta)),
                                  _mm512_loadu_ps(x + 16));
}

/* x at the kept columns of the last 2 len < 32 columns (lanes past len: +0). */
static inline __m512 select_tail_avx512(const float *x, const uint16_t *meta, int64_t len)
{
    int64_t cols = 2 * len;
    __mmask16 lo = cols >= 16 ? (__mmask16)0xFFFF : (__mmask16)((1u << cols) - 1u);
    __mmask16 hi = cols > 16 ? (__mmask16)((1u << (cols - 16)) - 1u) : 0;
    uint32_t w = cols > 0 ? qs_ld_u16(meta) : 0;
    if (cols > 16)
        w |= (uint32_t)qs_ld_u16(meta + 1) << 16;
    __m512 s = _mm512_permutex2var_ps(_mm512_maskz_loadu_ps(lo, x), meta_idx_avx512(w),
                                      _mm512_maskz_loadu_ps(hi, x + 16));
    return _mm512_maskz_mov_ps((__mmask16)((1u << len) - 1u), s);
}

static inline __mmask16 tail_mask(int64_t len)
{
    return (__mmask16)((1u << len) - 1u);
}

/* p lanes under k += x * v; the others keep their sums. */
static inline __m512 fma_mask_avx512(__m512 p, __mmask16 k, __m512 x, __m512 v)
{
    return _mm512_mask3_fmadd_ps(x, v, p, k);
}

static inline float finish_avx512(__m512 p)
{
    return qs_ref_nan_canon(_mm512_reduce_add_ps(p));
}

void qs_mm_gather_sp24__avx512_1x1x32(const float *x, const uint16_t *meta, int64_t n, float *xg)
{
    int64_t i = 0;

    for (; i + 32 <= n; i += 32)
        _mm512_storeu_ps(xg + i / 2, select16_avx512(x + i, meta + i / 16));
    qs_mm_gather_sp24__ref(x + i, meta + i / 16, n - i, xg + i / 2);
}

float qs_mm_dot_sp24_f32__avx512_1x1x32(const float *x, const uint16_t *meta, int64_t n,
                                        const float *w)
{
    __m512 p0 = _mm512_setzero_ps(), p1 = _mm512_setzero_ps();
    int64_t i = 0, kept = n / 2;

    for (; i + 32 <= kept; i += 32) {
        p0 = _mm512_fmadd_ps(select16_avx512(x + 2 * i, meta + i / 8), _mm512_loadu_ps(w + i), p0);
        p1 = _mm512_fmadd_ps(select16_avx512(x + 2 * i + 32, meta + i / 8 + 2),
                             _mm512_loadu_ps(w + i + 16), p1);
    }
    if (i + 16 <= kept) {
        p0 = _mm512_fmadd_ps(select16_avx512(x + 2 * i, meta + i / 8), _mm512_loadu_ps(w + i), p0);
        i += 16;
    }
    if (i < kept) {
        __mmask16 k = tail_mask(kept - i);
        p1 = fma_mask_avx512(p1, k, select_tail_avx512(x + 2 * i, meta + i / 8, kept - i),
                             _mm512_maskz_loadu_ps(k, w + i));
    }
    return finish_avx512(_mm512_add_ps(p0, p1));
}

static inline __m512 widen_avx512(__m256i h, int bf16)
{
    return bf16 ? _mm512_castsi512_ps(_mm512_slli_epi32(_mm512_cvtepu16_epi32(h), 16))
                : _mm512_cvtph_ps(h);
}

static inline __m512 ld16_avx512(const uint16_t *w, int bf16)
{
    return widen_avx512(_mm256_loadu_si256((const __m256i *)w), bf16);
}

static inline float dot_u16_avx512(const float *x, const uint16_t *meta, int64_t n,
                                   const uint16_t *w, int bf16)
{
    __m512 p0 = _mm512_setzero_ps(), p1 = _mm512_setzero_ps();
    int64_t i = 0, kept = n / 2;

    for (; i + 32 <= kept; i += 32) {
        p0 = _mm512_fmadd_ps(select16_avx512(x + 2 * i, meta + i / 8), ld16_avx512(w + i, bf16),
                             p0);
        p1 = _mm512_fmadd_ps(select16_avx512(x + 2 * i + 32, meta + i / 8 + 2),
                             ld16_avx512(w + i + 16, bf16), p1);
    }
    if (i + 16 <= kept) {
        p0 = _mm512_fmadd_ps(select16_avx512(x + 2 * i, meta + i / 8), ld16_avx512(w + i, bf16),
                             p0);
        i += 16;
    }
    if (i < kept) {
        __mmask16 k = tail_mask(kept - i);
        __m512 v = widen_avx512(_mm256_maskz_loadu_epi16(k, w + i), bf16);
        p1 = fma_mask_avx512(p1, k, select_tail_avx512(x + 2 * i, meta + i / 8, kept - i), v);
    }
    return finish_avx512(_mm512_add_ps(p0, p1));
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

/* Codebook values of NF4 codes (element 2i in the high nibble of byte i): the code bytes with
 * each 16-bit half shifted right by 4 hold the high nibbles in their low 4 bits, interleaved with
 * the bytes themselves they are the codes in element order, one per byte; widened to one per
 * lane, the permutation reads the low 4 bits of each. 32 codes of 16 bytes: */
static inline void nf4x32_avx512(const uint8_t *p, __m512 book, __m512 *a, __m512 *b)
{
    __m128i v = _mm_loadu_si128((const __m128i *)p), hi = _mm_srli_epi16(v, 4);
    *a = _mm512_permutexvar_ps(_mm512_cvtepu8_epi32(_mm_unpacklo_epi8(hi, v)), book);
    *b = _mm512_permutexvar_ps(_mm512_cvtepu8_epi32(_mm_unpackhi_epi8(hi, v)), book);
}

/* 16 codes of the 8 bytes `bytes`. */
static inline __m512 nf4x16_avx512(uint64_t bytes, __m512 book)
{
    __m128i v = _mm_cvtsi64_si128((long long)bytes), hi = _mm_srli_epi16(v, 4);
    return _mm512_permutexvar_ps(_mm512_cvtepu8_epi32(_mm_unpacklo_epi8(hi, v)), book);
}

#ifndef PF_DATA
#define PF_DATA 1024
#define PF_META 512
#endif

static inline uint64_t ld64_avx512(const uint8_t *p)
{
    uint64_t v;
    memcpy(&v, p, 8);
    return v;
}

/* acc + sum * scale lane by lane; an infinite scale multiplies the block's total (lane 0). */
static inline __m512 scale_add_avx512(__m512 acc, __m512 sum, float s)
{
    if (__builtin_expect(s - s != 0.0f && s == s, 0))
        return _mm512_mask_add_ps(acc, 1, acc, _mm512_set1_ps(_mm512_reduce_add_ps(sum) * s));
    return _mm512_fmadd_ps(sum, _mm512_set1_ps(s), acc);
}

float qs_mm_dot_sp24_nf4__avx512_1x1x32(const float *x, const uint16_t *meta, int64_t n,
                                        const uint8_t *data, int64_t start, const float *absmax,
                                        int32_t block)
{
    const __m512 book = _mm512_loadu_ps(qs_nf4_codebook);
    __m512 acc = _mm512_setzero_ps();
    int64_t i = 0, kept = n / 2;

    if (block % 16 != 0 || start % 16 != 0)
        return qs_mm_dot_sp24_nf4__ref(x, meta, n, data, start, absmax, block);
    data += start / 2;
    /* block b of the tensor ends at kept value end; one division for the row */
    for (int64_t b = start / block, end = (b + 1) * block - start; i < kept; b++, end += block) {
        __m512 p0 = _mm512_setzero_ps(), p1 = _mm512_setzero_ps();
        int64_t stop = end < kept ? end : kept;

        for (; i + 32 <= stop; i += 32) {
            __m512 v0, v1;
            _mm_prefetch((const char *)(data + i / 2) + PF_DATA, _MM_HINT_T0);
            _mm_prefetch((const char *)(meta + i / 8) + PF_META, _MM_HINT_T0);
            nf4x32_avx512(data + i / 2, book, &v0, &v1);
            p0 = _mm512_fmadd_ps(select16_avx512(x + 2 * i, meta + i / 8), v0, p0);
            p1 = _mm512_fmadd_ps(select16_avx512(x + 2 * i + 32, meta + i / 8 + 2), v1, p1);
        }
        if (i + 16 <= stop) {
            p0 = _mm512_fmadd_ps(select16_avx512(x + 2 * i, meta + i / 8),
                                 nf4x16_avx512(ld64_avx512(data + i / 2), book), p0);
            i += 16;
        }
        if (i < stop) { /* the row's last kept values: fewer than 16, at a multiple of 16 */
            uint64_t bytes = 0;
            memcpy(&bytes, data + i / 2, (size_t)(stop - i + 1) / 2);
            p1 = fma_mask_avx512(p1, tail_mask(stop - i),
                                 select_tail_avx512(x + 2 * i, meta + i / 8, stop - i),
                                 nf4x16_avx512(bytes, book));
            i = stop;
        }
        acc = scale_add_avx512(acc, _mm512_add_ps(p0, p1), qs_ld_f32(absmax + b));
    }
    return finish_avx512(acc);
}
