/* SPDX-License-Identifier: MIT */
/*
 * Fused NF4 / FP4 GEMV for AVX-512 F/BW/DQ/VL (include/qsparse/matmul.h; the reference is
 * src/ref/matmul_ref.c): the 16-entry codebook sits in one register and a vpermps turns 16 codes
 * into their values; each block's 16-lane sum of code value * x gets the block's absmax once.
 *
 * M = 1 (decode): 16 bytes hold 32 elements, element 2i in the high nibble of byte i. Instead of
 * interleaving the nibbles, x is split once per 32 columns into its even and odd columns (two
 * vpermt2ps shared by four W rows), so each row needs only a widening load, a shift, an and and
 * two vpermps per 32 elements. M = 2...15 go through the shared tile driver (mm_gemv_avx512.h),
 * which decodes each block once for up to 8 rows of x.
 *
 * The fast paths need rows that start on a block (start and k multiples of the block) and blocks
 * of a multiple of 32 (16 for M > 1); other shapes (odd blocks, rows that cut blocks) run the
 * reference, which is exact for them and rare in practice (the default block is 64).
 */
#include <immintrin.h>

#include "../core/kernels.h"
#include "../ref/ref.h"
#include "mm_gemv_avx512.h"

static inline __m512 bnb4_dec_avx512(const uint8_t *row, int64_t c, int32_t aux, __mmask16 mask,
                                     const void *fmt)
{
    (void)aux;
    return _mm512_permutexvar_ps(gemv_nibbles_avx512(row + c / 2, mask, 1),
                                 _mm512_loadu_ps((const float *)fmt));
}

static inline float bnb4_scl_avx512(const uint8_t *srow, int64_t row, int64_t s, int32_t *aux,
                                    const void *fmt)
{
    (void)fmt;
    (void)row;
    *aux = 0;
    return qs_ld_f32((const float *)srow + s);
}

/* M = 1, R rows of W (R constant): rows r0 ... of data/absmax with the row length k. */
static inline __attribute__((always_inline)) void
bnb4_m1_avx512(const float *x, int64_t k, const uint8_t *data, const float *absmax, int32_t block,
               const int R, int64_t r0, int64_t rows, const int may_inf, __m512 book, float *y)
{
    /* the next tile's rows and scales ahead of the hardware prefetcher (mm_gemv_avx512.h) */
    gemv_rows_avx512 wr = {data, k / 2, (const uint8_t *)absmax, (k / block) * 4, block};
    gemv_pf_avx512 pf;
    gemv_pf_init_avx512(&pf, &wr, k / 2, r0, R, rows); /* one step per 32 columns */
    const __m512i ie = _mm512_setr_epi32(0, 2, 4, 6, 8, 10, 12, 14, 16, 18, 20, 22, 24, 26, 28, 30);
    const __m512i io = _mm512_add_epi32(ie, _mm512_set1_epi32(1));
    const __m512i lo4 = _mm512_set1_epi32(15);
    const int64_t nb = k / block;
    __m512 acc[4];

    for (int r = 0; r < R; r++)
        acc[r] = _mm512_setzero_ps();
    for (int64_t b = 0; b < nb; b++) {
        __m512 be[4], bo[4];
        for (int r = 0; r < R; r++) {
            be[r] = _mm512_setzero_ps();
            bo[r] = _mm512_setzero_ps();
        }
        for (int64_t c = b * block; c < (b + 1) * block; c += 32) {
            __m512 x0 = _mm512_loadu_ps(x + c), x1 = _mm512_loadu_ps(x + c + 16);
            __m512 xe = _mm512_permutex2var_ps(x0, ie, x1), xo = _mm512_permutex2var_ps(x0, io, x1);
            gemv_pf_step_avx512(&pf);
            for (int r = 0; r < R; r++) {
                const uint8_t *p = data + (r0 + r) * (k / 2) + c / 2;
                __m512i q = _mm512_cvtepu8_epi32(_mm_loadu_si128((const __m128i *)p));
                be[r] = _mm512_fmadd_ps(_mm512_permutexvar_ps(_mm512_srli_epi32(q, 4), book), xe,
                                        be[r]);
                bo[r] = _mm512_fmadd_ps(_mm512_permutexvar_ps(_mm512_and_si512(q, lo4), book), xo,
                                        bo[r]);
            }
        }
        for (int r = 0; r < R; r++) {
            __m512 sc = _mm512_set1_ps(qs_ld_f32(absmax + (r0 + r) * nb + b));
            acc[r] = may_inf ? gemv_scale_add_avx512(acc[r], _mm512_add_ps(be[r], bo[r]), sc)
                             : _mm512_fmadd_ps(_mm512_add_ps(be[r], bo[r]), sc, acc[r]);
        }
    }
    for (int r = 0; r < R; r++)
        qs_st_f32(y + r0 + r, gemv_canon_avx512(_mm512_reduce_add_ps(acc[r])));
}

/* Rows r0 ... of the view: flat elements from start = r0 * k, absmax in blocks of w->group. */
static inline __attribute__((always_inline)) void
bnb4_gemv_avx512(const float *book, qs_mm_gemv_fn *ref, const qs_mm_weight *wv, int64_t r0,
                 int64_t rows, const float *x, int64_t ldx, int64_t m, float *y, int64_t ldy)
{
    const int64_t k = wv->k, start = r0 * k;
    const int32_t block = (int32_t)wv->group;
    const uint8_t *data = wv->data;
    const float *absmax = wv->scale;

    if (block % 16 != 0 || k % block != 0 || start % block != 0) {
        ref(wv, r0, rows, x, ldx, m, y, ldy);
        return;
    }
    data += start / 2;
    absmax += start / block;
    if (m == 1 && block % 32 == 0) {
        __m512 bk = _mm512_loadu_ps(book);
        int64_t r = 0;
        /* an infinite absmax needs the per-block test of gemv_scale_add_avx512; one pass over
         * the call's scales (1/64 of the codes' bytes at block 64) says whether any is */
        int may_inf = 0;
        for (int64_t i = 0; i < rows * (k / block); i++) {
            float a = qs_ld_f32(absmax + i);
            may_inf |= a - a != 0.0f && a == a;
        }
        if (may_inf) {
            for (; r + 4 <= rows; r += 4)
                bnb4_m1_avx512(x, k, data, absmax, block, 4, r, rows, 1, bk, y);
        } else {
            for (; r + 4 <= rows; r += 4)
                bnb4_m1_avx512(x, k, data, absmax, block, 4, r, rows, 0, bk, y);
        }
        for (; r < rows; r++)
            bnb4_m1_avx512(x, k, data, absmax, block, 1, r, rows, may_inf, bk, y);
        return;
    }
    gemv_rows_avx512 w = {data, k / 2, (const uint8_t *)absmax, (k / block) * 4, block};
    gemv_avx512(x, ldx, m, k, &w, rows, bnb4_dec_avx512, bnb4_scl_avx512, book, y, ldy);
}

void qs_mm_gemv_nf4__avx512_1x4x32(const qs_mm_weight *w, int64_t r0, int64_t rows, const float *x,
                                   int64_t ldx, int64_t m, float *y, int64_t ldy)
{
    bnb4_gemv_avx512(qs_nf4_codebook, qs_mm_gemv_nf4__ref, w, r0, rows, x, ldx, m, y, ldy);
}

void qs_mm_gemv_fp4__avx512_1x4x32(const qs_mm_weight *w, int64_t r0, int64_t rows, const float *x,
                                   int64_t ldx, int64_t m, float *y, int64_t ldy)
{
    bnb4_gemv_avx512(qs_fp4_codebook, qs_mm_gemv_fp4__ref, w, r0, rows, x, ldx, m, y, ldy);
}
