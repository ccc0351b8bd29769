/* SPDX-License-Identifier: MIT */
/*
 * 2:4 GEMV kernels for AVX2 (+FMA, F16C): the gather (slot mm_gather_sp24) and the fused dot
 * products of x with 2:4 rows of f32, f16, bf16 or NF4 kept values (mm_gemv_sp24_*, row by row
 * through one-row products; mm_dot_sp24_nf4), within
 * the matmul tolerance of src/ref/matmul_ref.c (gather, then the 16-lane dot product of the GEMV
 * in include/qsparse/matmul.h; docs/sparsity.md §3.2 for the meta nibbles).
 *
 * The structure of the AVX-512 kernels (mm24_gemv_avx512.c) in 8 lanes: only the kept products
 * are computed and x is never gathered element by element. One meta word (4 groups, 16 columns
 * of x, 8 kept values) a step: the 8 two-bit indices are spread into the 8 lanes with one
 * variable shift and select, by in-lane permutes, from groups 0 and 2 loaded into the halves of
 * one register and groups 1 and 3 into another; one blend puts them in order. NF4 codes: 32 a
 * step by the byte planes of lut16_avx2.h; 16 a step (the last of a block) widened to one per
 * lane and looked up in the two 8-entry halves of the codebook, the upper one where code bit 3
 * is set. Products are FMAs into two 8-lane partial sums; an NF4 block's sums are
 * multiplied by its absmax once per block (an infinite absmax multiplies the block's total, as
 * the reference does), and the lanes are added at the end. NF4 takes this path when its scale
 * blocks and the row start on multiples of 16 kept values and calls the reference otherwise. The
 * last fewer than 16 kept values are staged through the reference gather under lane masks, so
 * nothing past the row is read and lanes past it keep their sums.
 */
#include <immintrin.h>
#include <string.h>

#include "../core/kernels.h"
#include "../ref/ref.h"
#include "../ref/sp24_ref.h"
#include "lut16_avx2.h"

/* x at the 8 kept columns of 16 columns of x (one meta word): groups 0 and 2 (columns 0-3,
 * 8-11) in the two halves of one register, groups 1 and 3 in another, so that in-lane permutes
 * (VPERMILPS) by the 2-bit indices and one blend give the kept values in order, with no
 * lane-crossing permute (two of those and an index offset before). */
static inline __m256 gather8_avx2(const float *x, const uint16_t *meta)
{
    const __m256i shift = _mm256_setr_epi32(0, 2, 4, 6, 8, 10, 12, 14);
    const __m256i idx = _mm256_and_si256(
        _mm256_srlv_epi32(_mm256_set1_epi32((int)qs_ld_u16(meta)), shift), _mm256_set1_epi32(3));
    const __m256 g02 = _mm256_insertf128_ps(_mm256_castps128_ps256(_mm_loadu_ps(x)),
                                            _mm_loadu_ps(x + 8), 1);
    const __m256 g13 = _mm256_insertf128_ps(_mm256_castps128_ps256(_mm_loadu_ps(x + 4)),
                                            _mm_loadu_ps(x + 12), 1);
    return _mm256_blend_ps(_mm256_permutevar_ps(g02, idx), _mm256_permutevar_ps(g13, idx), 0xCC);
}

static inline float hsum_avx2(__m256 a)
{
    __m128 b = _mm_add_ps(_mm256_castps256_ps128(a), _mm256_extractf128_ps(a, 1));
    __m128 c = _mm_add_ps(b, _mm_movehl_ps(b, b));
    return _mm_cvtss_f32(_mm_add_ss(c, _mm_shuffle_ps(c, c, 1)));
}

static inline float finish_avx2(__m256 p0, __m256 p1)
{
    return qs_ref_nan_canon(hsum_avx2(_mm256_add_ps(p0, p1)));
}

/* The last len < 16 kept values: x and v staged into lanes by the caller (zero past len),
 * added under the lane masks so the lanes past the row keep their sums. */
static inline void tail_avx2(__m256 *p0, __m256 *p1, const float *xg, const float *v, int64_t len)
{
    const __m256i lane = _mm256_setr_epi32(0, 1, 2, 3, 4, 5, 6, 7);
    __m256 k0 = _mm256_castsi256_ps(_mm256_cmpgt_epi32(_mm256_set1_epi32((int)len), lane));
    __m256 k1 = _mm256_castsi256_ps(_mm256_cmpgt_epi32(_mm256_set1_epi32((int)len - 8), lane));
    __m256 f0 = _mm256_fmadd_ps(_mm256_loadu_ps(xg), _mm256_loadu_ps(v), *p0);
    __m256 f1 = _mm256_fmadd_ps(_mm256_loadu_ps(xg + 8), _mm256_loadu_ps(v + 8), *p1);
    *p0 = _mm256_blendv_ps(*p0, f0, k0);
    *p1 = _mm256_blendv_ps(*p1, f1, k1);
}

void qs_mm_gather_sp24__avx2_1x1x16(const float *x, const uint16_t *meta, int64_t n, float *xg)
{
    int64_t i = 0;

    for (; i + 16 <= n; i += 16)
        _mm256_storeu_ps(xg + i / 2, gather8_avx2(x + i, meta + i / 16));
    qs_mm_gather_sp24__ref(x + i, meta + i / 16, n - i, xg + i / 2);
}

/* Widened kept values [i, i + len) (len < 16) into v, zero past. */
typedef void widen_fn(const void *w, int64_t i, int64_t len, float *v);

static void widen_f32(const void *w, int64_t i, int64_t len, float *v)
{
    for (int64_t k = 0; k < len; k++)
        v[k] = qs_ld_f32((const float *)w + i + k);
}

static void widen_f16(const void *w, int64_t i, int64_t len, float *v)
{
    qs_cvt_f16_f32__ref((const uint16_t *)w + i, len, v);
}

static void widen_bf16(const void *w, int64_t i, int64_t len, float *v)
{
    qs_cvt_bf16_f32__ref((const uint16_t *)w + i, len, v);
}

static inline __m256 load8_avx2(const void *w, int64_t i, int kind)
{
    if (kind == 0)
        return _mm256_loadu_ps((const float *)w + i);
    __m128i h = _mm_loadu_si128((const __m128i *)((const uint16_t *)w + i));
    if (kind == 1)
        return _mm256_cvtph_ps(h);
    return _mm256_castsi256_ps(_mm256_slli_epi32(_mm256_cvtepu16_epi32(h), 16));
}

/* kind 0: f32, 1: f16, 2: bf16 */
static inline float dot_plain_avx2(const float *x, const uint16_t *meta, int64_t n, const void *w,
                                   int kind, widen_fn *widen)
{
    __m256 p0 = _mm256_setzero_ps(), p1 = _mm256_setzero_ps();
    int64_t i = 0, kept = n / 2;

    for (; i + 16 <= kept; i += 16) {
        p0 = _mm256_fmadd_ps(gather8_avx2(x + 2 * i, meta + i / 8), load8_avx2(w, i, kind), p0);
        p1 = _mm256_fmadd_ps(gather8_avx2(x + 2 * i + 16, meta + i / 8 + 1),
                             load8_avx2(w, i + 8, kind), p1);
    }
    if (i < kept) {
        float xg[16] = {0}, v[16] = {0};
        qs_mm_gather_sp24__ref(x + 2 * i, meta + i / 8, 2 * (kept - i), xg);
        widen(w, i, kept - i, v);
        tail_avx2(&p0, &p1, xg, v, kept - i);
    }
    return finish_avx2(p0, p1);
}

static float dot_f32_avx2(const float *x, const uint16_t *meta, int64_t n, const void *w)
{
    return dot_plain_avx2(x, meta, n, w, 0, widen_f32);
}

static float dot_f16_avx2(const float *x, const uint16_t *meta, int64_t n, const void *w)
{
    return dot_plain_avx2(x, meta, n, w, 1, widen_f16);
}

static float dot_bf16_avx2(const float *x, const uint16_t *meta, int64_t n, const void *w)
{
    return dot_plain_avx2(x, meta, n, w, 2, widen_bf16);
}

/* Several rows (slots mm_gemv_sp24_f32 / f16 / bf16): the one-row products above row by row,
 * each row's meta checked just before its products. */
int qs_mm_gemv_sp24_f32__avx2_1x1x16(const qs_mm_weight *w, int64_t r0, int64_t rows,
                                     const float *x, float *y)
{
    return qs_sp24_plain_rows_by_dot(w, r0, rows, x, y, dot_f32_avx2,
                                     qs_mm_sp24_meta_bad__avx2_1x1x16);
}

int qs_mm_gemv_sp24_f16__avx2_1x1x16(const qs_mm_weight *w, int64_t r0, int64_t rows,
                                     const float *x, float *y)
{
    return qs_sp24_plain_rows_by_dot(w, r0, rows, x, y, dot_f16_avx2,
                                     qs_mm_sp24_meta_bad__avx2_1x1x16);
}

int qs_mm_gemv_sp24_bf16__avx2_1x1x16(const qs_mm_weight *w, int64_t r0, int64_t rows,
                                      const float *x, float *y)
{
    return qs_sp24_plain_rows_by_dot(w, r0, rows, x, y, dot_bf16_avx2,
                                     qs_mm_sp24_meta_bad__avx2_1x1x16);
}

/* Codebook values of 8 codes, one per lane in the low 4 bits: two 8-entry lookups, the upper
 * one where code bit 3 is set (moved to the sign bit for the blend). */
static inline __m256 book8_avx2(__m256i c, __m256 book_lo, __m256 book_hi)
{
    __m256 lo = _mm256_permutevar8x32_ps(book_lo, c), hi = _mm256_permutevar8x32_ps(book_hi, c);
    return _mm256_blendv_ps(lo, hi, _mm256_castsi256_ps(_mm256_slli_epi32(c, 28)));
}

/* The 16 NF4 codes of 8 bytes (element 2i in the high nibble of byte i) in two vectors: the
 * bytes with each 16-bit half shifted right by 4 hold the high nibbles in their low 4 bits;
 * interleaved with the bytes they are the codes in element order. */
static inline void nf4x16_avx2(uint64_t bytes, __m256 book_lo, __m256 book_hi, __m256 *a,
                               __m256 *b)
{
    __m128i v = _mm_cvtsi64_si128((long long)bytes);
    __m128i c = _mm_unpacklo_epi8(_mm_srli_epi16(v, 4), v);
    *a = book8_avx2(_mm256_cvtepu8_epi32(c), book_lo, book_hi);
    *b = book8_avx2(_mm256_cvtepu8_epi32(_mm_srli_si128(c, 8)), book_lo, book_hi);
}

/* acc + sum * scale lane by lane; an infinite scale multiplies the block's total (lane 0): a
 * lane holding 0 would make a NaN of 0 * Inf where the reference's nonzero sum gives Inf. */
static inline __m256 scale_add_avx2(__m256 acc, __m256 sum, float s)
{
    if (__builtin_expect(s - s != 0.0f && s == s, 0))
        return _mm256_add_ps(acc, _mm256_setr_ps(hsum_avx2(sum) * s, 0, 0, 0, 0, 0, 0, 0));
    return _mm256_fmadd_ps(sum, _mm256_set1_ps(s), acc);
}

float qs_mm_dot_sp24_nf4__avx2_1x1x16(const float *x, const uint16_t *meta, int64_t n,
                                      const uint8_t *data, int64_t start, const float *absmax,
                                      int32_t block)
{
    const __m256 book_lo = _mm256_loadu_ps(qs_nf4_codebook);
    const __m256 book_hi = _mm256_loadu_ps(qs_nf4_codebook + 8);
    const lut16_avx2 book = lut16_avx2_load(qs_nf4_codebook);
    __m256 acc = _mm256_setzero_ps();
    int64_t i = 0, kept = n / 2;

    if (block % 16 != 0 || start % 16 != 0)
        return qs_mm_dot_sp24_nf4__ref(x, meta, n, data, start, absmax, block);
    data += start / 2;
    /* block b of the tensor ends at kept value end; one division for the row */
    for (int64_t b = start / block, end = (b + 1) * block - start; i < kept; b++, end += block) {
        __m256 p0 = _mm256_setzero_ps(), p1 = _mm256_setzero_ps();
        int64_t stop = end < kept ? end : kept;

        /* 32 kept values a step: their codes by one byte-plane decode (lut16_avx2.h), a third
         * of the permutes of two nf4x16 steps, into p0 and p1 in the same order */
        for (; i + 32 <= stop; i += 32) {
            __m256 v[4];
            lut16_decode32_avx2(data + i / 2, &book, 1, v);
            p0 = _mm256_fmadd_ps(gather8_avx2(x + 2 * i, meta + i / 8), v[0], p0);
            p1 = _mm256_fmadd_ps(gather8_avx2(x + 2 * i + 16, meta + i / 8 + 1), v[1], p1);
            p0 = _mm256_fmadd_ps(gather8_avx2(x + 2 * i + 32, meta + i / 8 + 2), v[2], p0);
            p1 = _mm256_fmadd_ps(gather8_avx2(x + 2 * i + 48, meta + i / 8 + 3), v[3], p1);
        }
        for (; i + 16 <= stop; i += 16) {
            uint64_t bytes;
            __m256 v0, v1;
            memcpy(&bytes, data + i / 2, 8);
            nf4x16_avx2(bytes, book_lo, book_hi, &v0, &v1);
            p0 = _mm256_fmadd_ps(gather8_avx2(x + 2 * i, meta + i / 8), v0, p0);
            p1 = _mm256_fmadd_ps(gather8_avx2(x + 2 * i + 16, meta + i / 8 + 1), v1, p1);
        }
        if (i < stop) { /* the row's last kept values: fewer than 16, at a multiple of 16 */
            float xg[16] = {0}, v[16] = {0};
            for (int64_t k = 0; k < stop - i; k++)
                v[k] = qs_nf4_codebook[(k & 1) ? data[(i + k) / 2] & 0xF : data[(i + k) / 2] >> 4];
            qs_mm_gather_sp24__ref(x + 2 * i, meta + i / 8, 2 * (stop - i), xg);
            tail_avx2(&p0, &p1, xg, v, stop - i);
            i = stop;
        }
        acc = scale_add_avx2(acc, _mm256_add_ps(p0, p1), qs_ld_f32(absmax + b));
    }
    return qs_ref_nan_canon(hsum_avx2(acc));
}

/* Several rows: this tier's fused dot product row by row (x needs no rearranging here), each
 * row's meta checked just before its products. */
int qs_mm_gemv_sp24_nf4__avx2_1x1x16(const qs_mm_weight *w, int64_t r0, int64_t rows,
                                     const float *x, float *y)
{
    return qs_sp24_nf4_rows_by_dot(w, r0, rows, x, y, qs_mm_dot_sp24_nf4__avx2_1x1x16,
                                   qs_mm_sp24_meta_bad__avx2_1x1x16);
}

/* The meta check (slot mm_sp24_meta_bad): 16 words a step, the low and the high nibble of every
 * byte looked up in a table holding 0xFF at the six codes; the last words go through the
 * reference. */
int qs_mm_sp24_meta_bad__avx2_1x1x16(const uint16_t *w, int64_t n)
{
    const __m256i table = _mm256_setr_epi8(0, 0, 0, 0, -1, 0, 0, 0, -1, -1, 0, 0, -1, -1, -1, 0, 0,
                                           0, 0, 0, -1, 0, 0, 0, -1, -1, 0, 0, -1, -1, -1, 0);
    const __m256i lo4 = _mm256_set1_epi8(15);
    __m256i ok = _mm256_set1_epi8(-1);
    int64_t i = 0;

    for (; i + 16 <= n; i += 16) {
        __m256i v = _mm256_loadu_si256((const __m256i *)(w + i));
        __m256i a = _mm256_shuffle_epi8(table, _mm256_and_si256(v, lo4));
        __m256i b = _mm256_shuffle_epi8(table, _mm256_and_si256(_mm256_srli_epi16(v, 4), lo4));
        ok = _mm256_and_si256(ok, _mm256_and_si256(a, b));
    }
    return _mm256_movemask_epi8(ok) != -1 || qs_mm_sp24_meta_bad__ref(w + i, n - i);
}
