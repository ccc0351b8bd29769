/* SPDX-License-Identifier: MIT */
/*
 * 2:4 GEMV kernels for AVX-512 (F/BW): the gather (slot mm_gather_sp24) and the fused dot
 * products of x with 2:4 rows of f32, f16, bf16 or NF4 kept values (mm_gemv_sp24_*; the one-row
 * mm_dot_sp24_nf4), within
 * the matmul tolerance of src/ref/matmul_ref.c (gather, then the 16-lane dot product of the GEMV
 * in include/qsparse/matmul.h; docs/sparsity.md §3.2 for the meta nibbles).
 *
 * Two meta words (8 groups, 32 columns of x, 16 kept values) a step, with only the kept
 * products computed (half the FMAs of the dense row) and no element-wise gather: the 32 bits are
 * broadcast, each lane shifted to its 2-bit index and merged with its group's offset (group * 4)
 * in one ternary-logic operation, and the result selects the 16 x values out of the 32 with one
 * two-register permutation. NF4 values come out of the codebook register with one permutation
 * per 16 (the codes widened to one per lane; the permutation reads only the low 4 bits).
 * Products are FMAs into 16-lane partial sums, two registers alternating; an NF4 block's
 * partial sums are multiplied by its absmax once per block (one FMA into the row's accumulator),
 * and the 16 lanes are added at the end. The order differs from the reference's (FMA, lane-wise
 * scaling), as the matmul tolerance allows. An infinite absmax multiplies the block's total
 * instead (a lane holding 0 would make a NaN of 0 * Inf where the reference's nonzero sum times
 * Inf is an infinity). NF4 takes this path when its scale blocks and the row start on multiples
 * of 16 kept values (every default shape with K a multiple of 32) and calls the reference
 * otherwise. The last fewer than 32 columns run under masks: x, meta words and code bytes past
 * the row are never read, and lanes past it keep their partial sums.
 */
#include <immintrin.h>
#include <string.h>

#include "../core/kernels.h"
#include "../ref/ref.h"
#include "../ref/sp24_ref.h"
#include "prefetch_x86.h"

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

static float dot_f32_avx512(const float *x, const uint16_t *meta, int64_t n, const void *wv)
{
    const float *w = wv;
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

static float dot_f16_avx512(const float *x, const uint16_t *meta, int64_t n, const void *w)
{
    return dot_u16_avx512(x, meta, n, w, 0);
}

static float dot_bf16_avx512(const float *x, const uint16_t *meta, int64_t n, const void *w)
{
    return dot_u16_avx512(x, meta, n, w, 1);
}

/* Codebook values of the 16 NF4 codes of the 8 bytes `bytes` (element 2i in the high nibble of
 * byte i), in element order: the bytes with each 16-bit half shifted right by 4 hold the high
 * nibbles in their low 4 bits; interleaved with the bytes themselves they are the codes one per
 * byte, widened to one per lane (the permutation reads the low 4 bits of each). */
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

/* p + the products of 16 kept values (32 columns of x at x, two meta words, 8 code bytes), lane
 * 2m holding kept value m and lane 2m + 1 kept value 8 + m: the code bytes broadcast as one
 * 64-bit word put kept values 0-7 in the low 32 bits of every even lane and 8-15 in the high ones
 * of every odd lane, so one variable shift brings each lane's nibble down (the codebook
 * permutation reads its low 4 bits), and the x permutation's indices are built in that order. */
static inline __m512 nf4_row16_avx512(__m512 x0, __m512 x1, const uint16_t *meta,
                                      const uint8_t *codes, __m512 book, __m512 p)
{
    const __m512i mshift =
        _mm512_setr_epi32(0, 16, 2, 18, 4, 20, 6, 22, 8, 24, 10, 26, 12, 28, 14, 30);
    const __m512i mbase =
        _mm512_setr_epi32(0, 16, 0, 16, 4, 20, 4, 20, 8, 24, 8, 24, 12, 28, 12, 28);
    const __m512i cshift =
        _mm512_setr_epi32(4, 4, 0, 0, 12, 12, 8, 8, 20, 20, 16, 16, 28, 28, 24, 24);
    __m512i idx = _mm512_ternarylogic_epi32(
        _mm512_srlv_epi32(_mm512_set1_epi32((int)meta32_avx512(meta)), mshift),
        _mm512_set1_epi32(3), mbase, 0xEA);
    __m512i c = _mm512_srlv_epi32(_mm512_set1_epi64((long long)ld64_avx512(codes)), cshift);
    return _mm512_fmadd_ps(_mm512_permutex2var_ps(x0, idx, x1), _mm512_permutexvar_ps(c, book),
                           p);
}

static inline __m512 nf4_kept16_avx512(const float *x, const uint16_t *meta, const uint8_t *codes,
                                       __m512 book, __m512 p)
{
    return nf4_row16_avx512(_mm512_loadu_ps(x), _mm512_loadu_ps(x + 16), meta, codes, book, p);
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
            qs_prefetch_l1(data, i / 2 + PF_DATA);
            qs_prefetch_l1(meta, 2 * (i / 8) + PF_META);
            p0 = nf4_kept16_avx512(x + 2 * i, meta + i / 8, data + i / 2, book, p0);
            p1 = nf4_kept16_avx512(x + 2 * i + 32, meta + i / 8 + 2, data + i / 2 + 8, book, p1);
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

/* ---- the meta check (slot mm_sp24_meta_bad) -----------------------------------------------------
 * 32 words a step: the low and the high nibble of every byte look up a table that holds 0xFF at
 * the six codes (one in-lane byte shuffle each), and the results are ANDed into one register; the
 * last words are loaded over a register of valid words. */
static inline int meta_bad_avx512(const uint16_t *w, int64_t n)
{
    const __m512i table = _mm512_broadcast_i32x4(
        _mm_setr_epi8(0, 0, 0, 0, -1, 0, 0, 0, -1, -1, 0, 0, -1, -1, -1, 0));
    const __m512i lo4 = _mm512_set1_epi8(15), valid = _mm512_set1_epi16(0x4444);
    __m512i ok = _mm512_set1_epi8(-1);
    int64_t i = 0;

    for (; i < n; i += 32) {
        __mmask32 tail = (__mmask32)((1ull << (n - i < 32 ? n - i : 0)) - 1u);
        __m512i v = i + 32 <= n ? _mm512_loadu_si512(w + i)
                                : _mm512_mask_loadu_epi16(valid, tail, w + i);
        __m512i a = _mm512_shuffle_epi8(table, _mm512_and_si512(v, lo4));
        __m512i b = _mm512_shuffle_epi8(table, _mm512_and_si512(_mm512_srli_epi16(v, 4), lo4));
        ok = _mm512_ternarylogic_epi32(ok, a, b, 0x80); /* ok & a & b */
    }
    return _mm512_cmpneq_epi8_mask(ok, _mm512_set1_epi8(-1)) != 0;
}

int qs_mm_sp24_meta_bad__avx512_1x1x32(const uint16_t *w, int64_t n)
{
    return meta_bad_avx512(w, n);
}

/* ---- several rows of 2:4 f32 / f16 / bf16 (slots mm_gemv_sp24_f32 / f16 / bf16) ----------------
 * The one-row products above row by row, each row's meta checked just before its products. */
int qs_mm_gemv_sp24_f32__avx512_1x1x32(const qs_mm_weight *w, int64_t r0, int64_t rows,
                                       const float *x, float *y)
{
    return qs_sp24_plain_rows_by_dot(w, r0, rows, x, y, dot_f32_avx512, meta_bad_avx512);
}

int qs_mm_gemv_sp24_f16__avx512_1x1x32(const qs_mm_weight *w, int64_t r0, int64_t rows,
                                       const float *x, float *y)
{
    return qs_sp24_plain_rows_by_dot(w, r0, rows, x, y, dot_f16_avx512, meta_bad_avx512);
}

int qs_mm_gemv_sp24_bf16__avx512_1x1x32(const qs_mm_weight *w, int64_t r0, int64_t rows,
                                        const float *x, float *y)
{
    return qs_sp24_plain_rows_by_dot(w, r0, rows, x, y, dot_bf16_avx512, meta_bad_avx512);
}

/* ---- several rows of 2:4 + NF4 (slot mm_gemv_sp24_nf4) ----------------------------------------
 *
 * Four rows at a time: they share the two x loads of each 32 columns, and their four independent
 * chains of the same short sequence (nf4_kept16_avx512's: two shifts, a ternary-logic, the x and
 * codebook permutations and an FMA per 16 kept values) keep the vector units busy where one
 * row's chain leaves them waiting (1.4-1.5x the one-row kernel in cache). Each row's blocks, scales
 * and order are those of the one-row kernel, which takes rows that cut a block, blocks that are
 * not a multiple of 16, and the rows left over.
 */

/* Rows 0-3 of meta (stride words) and data (row r at kept value start + r * n / 2), which
 * start on a block; y[0..3] as the one-row kernel gives them. */
static void sp24_nf4_rows4_avx512(const float *x, int64_t n, const uint16_t *meta, int64_t words,
                                  const uint8_t *data, int64_t start, const float *absmax,
                                  int32_t block, float *y)
{
    const __m512 book = _mm512_loadu_ps(qs_nf4_codebook);
    int64_t kept = n / 2, b = start / block, bs = kept / block;
    const uint8_t *d0 = data + start / 2, *d1 = d0 + kept / 2, *d2 = d1 + kept / 2,
                  *d3 = d2 + kept / 2;
    const uint16_t *m0 = meta, *m1 = m0 + words, *m2 = m1 + words, *m3 = m2 + words;
    /* The next four rows (codes and meta, each contiguous) are fetched while these run: eight
     * streams at once are more than the hardware prefetcher follows. Per 16 kept values, 32 of
     * their 2 * kept code bytes and 8 of their 4 * words meta words (a prefetch never faults,
     * past the last row either; qs_prefetch_l1 forms those addresses on integers). */
    __m512 a0 = _mm512_setzero_ps(), a1 = a0, a2 = a0, a3 = a0;

    for (int64_t i = 0; i < kept; i += block, b++) {
        __m512 p0 = _mm512_setzero_ps(), p1 = p0, p2 = p0, p3 = p0;
        for (int64_t c = i; c < i + block; c += 16) {
            __m512 x0 = _mm512_loadu_ps(x + 2 * c), x1 = _mm512_loadu_ps(x + 2 * c + 16);
            qs_prefetch_l1(d3, kept / 2 + 2 * c);
            qs_prefetch_l1(m3, 2 * words + c);
            p0 = nf4_row16_avx512(x0, x1, m0 + c / 8, d0 + c / 2, book, p0);
            p1 = nf4_row16_avx512(x0, x1, m1 + c / 8, d1 + c / 2, book, p1);
            p2 = nf4_row16_avx512(x0, x1, m2 + c / 8, d2 + c / 2, book, p2);
            p3 = nf4_row16_avx512(x0, x1, m3 + c / 8, d3 + c / 2, book, p3);
        }
        a0 = scale_add_avx512(a0, p0, qs_ld_f32(absmax + b));
        a1 = scale_add_avx512(a1, p1, qs_ld_f32(absmax + b + bs));
        a2 = scale_add_avx512(a2, p2, qs_ld_f32(absmax + b + 2 * bs));
        a3 = scale_add_avx512(a3, p3, qs_ld_f32(absmax + b + 3 * bs));
    }
    qs_st_f32(y + 0, finish_avx512(a0));
    qs_st_f32(y + 1, finish_avx512(a1));
    qs_st_f32(y + 2, finish_avx512(a2));
    qs_st_f32(y + 3, finish_avx512(a3));
}

/* Each four rows' meta (4 * words contiguous words, fetched ahead by the previous four rows'
 * prefetches) is checked just before their products: one pass over the meta from memory, the
 * kernel's own (a separate pass cost the GEMV at 4096 x 4096 about a tenth of its time). */
int qs_mm_gemv_sp24_nf4__avx512_1x4x16(const qs_mm_weight *w, int64_t r0, int64_t rows,
                                       const float *x, float *y)
{
    const int64_t kept = w->k, n = 2 * kept, words = w->words, start = r0 * kept;
    const uint16_t *meta = w->meta + r0 * words;
    const uint8_t *data = w->data;
    const float *absmax = w->scale;
    const int32_t block = (int32_t)w->group;
    int64_t r = 0;

    if (block % 16 == 0 && kept % block == 0 && start % block == 0 && kept > 0)
        for (; r + 4 <= rows; r += 4) {
            if (meta_bad_avx512(meta + r * words, 4 * words))
                return 1;
            sp24_nf4_rows4_avx512(x, n, meta + r * words, words, data, start + r * kept, absmax,
                                  block, y + r);
        }
    return qs_sp24_nf4_rows_by_dot(w, r0 + r, rows - r, x, y + r, qs_mm_dot_sp24_nf4__avx512_1x1x32,
                                   meta_bad_avx512);
}

