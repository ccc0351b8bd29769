/* SPDX-License-Identifier: MIT */
/*
 * The multi-row GEMV driver of the bf16-activation kernels for AVX512-BF16
 * (mm_*_avx512bf16.c; include/qsparse/matmul.h "bf16 activations", src/ref/mm_abf16_ref.c). A
 * format supplies two routines, passed as function constants so that each kernel file gets its
 * own inlined copy:
 *
 * - dec(row, c, aux, mask, fmt): columns c ... c+31 of one W row (row: its first data byte) as 32
 *   bf16 values in column order, so that they pair with x as it is stored: vdpbf16ps adds
 *   x[2j] w[2j] + x[2j+1] w[2j+1] into lane j. Columns outside `mask` read no memory; the driver
 *   zeroes them (a NaN code there must not count).
 * - scl(srow, row, s, &aux, fmt): as in mm_gemv_avx512.h (the scale of segment s, the INT8 zero
 *   point in aux).
 *
 * Each segment's products are summed by vdpbf16ps in 16 lanes, the lane sums multiplied by the
 * segment's scale (an infinite scale multiplies the segment's whole sum, gemv_scale_add_avx512)
 * and added to the row's accumulator; the 16 lanes are added at the end. Segments of 16 columns
 * (NVFP4, bitsandbytes blocks of 16) go two to a 32-column step, lanes 0-7 against the first
 * scale and 8-15 against the second, when the format allows it (`pairs`); other lengths run
 * whole 32-column steps and one masked step at the segment's end.
 *
 * Register tiles as the f32 driver: MI rows of x against R rows of W, R decoded vectors shared by
 * MI x rows and each x vector by R W rows: 1 x 4 for M = 1, then 2 x 4, 4 x 2 and 8 x 1, so a W
 * row is decoded once per 8 rows of x (M = 16: twice). The rows of the next tile are prefetched
 * as in mm_gemv_avx512.h. Include only from files compiled with the AVX512-BF16 flags.
 */
#ifndef QS_X86_MM_GEMV_AVX512BF16_H
#define QS_X86_MM_GEMV_AVX512BF16_H

#include <string.h>

#include <immintrin.h>

#include "mm_gemv_avx512.h"

typedef __m512i (*gemv_dec_bf16_fn)(const uint8_t *row, int64_t c, int32_t aux, __mmask32 mask,
                                    const void *fmt);

/* acc + the 32 products x[2j] w[2j] + x[2j+1] w[2j+1] into lane j (denormals flushed). */
static inline __m512 dp_avx512bf16(__m512 acc, __m512i x, __m512i w)
{
    __m512bh a, b;
    memcpy(&a, &x, sizeof a); /* bits only: the intrinsic's operand type */
    memcpy(&b, &w, sizeof b);
    return _mm512_dpbf16_ps(acc, a, b);
}

static inline __mmask32 mask32_avx512bf16(int64_t left)
{
    return left >= 32 ? (__mmask32)0xFFFFFFFFu : (__mmask32)((1u << left) - 1u);
}

/* acc + sum * (sa in lanes 0-7, sb in lanes 8-15): two segments of 16 columns in one step; an
 * infinite scale multiplies its half's total (gemv_scale_add_avx512). */
static inline __m512 pair_scale_add_avx512bf16(__m512 acc, __m512 sum, float sa, float sb)
{
    const __mmask16 half[2] = {0x00FF, 0xFF00};
    const float s[2] = {sa, sb};

    if (__builtin_expect(!(sa - sa != 0.0f && sa == sa) && !(sb - sb != 0.0f && sb == sb), 1))
        return _mm512_fmadd_ps(
            sum, _mm512_mask_blend_ps(0xFF00, _mm512_set1_ps(sa), _mm512_set1_ps(sb)), acc);
    for (int h = 0; h < 2; h++) {
        if (s[h] - s[h] != 0.0f && s[h] == s[h]) {
            float t = _mm512_mask_reduce_add_ps(half[h], sum) * s[h];
            acc = _mm512_mask_add_ps(acc, (__mmask16)(half[h] & -half[h]), acc, _mm512_set1_ps(t));
        } else {
            acc = _mm512_mask3_fmadd_ps(sum, _mm512_set1_ps(s[h]), acc, half[h]);
        }
    }
    return acc;
}

/* How a format's scales behave (the driver's `flags`). */
#define GEMV_BF16_PAIRS 1u /* segments of 16 may go two to a step (no zero point) */
#define GEMV_BF16_SCAN_F32                                                                         \
    2u                     /* f32 unit scales at the row's scale pointer, which may be             \
                              infinite: a tile whose rows hold none runs without the test */
#define GEMV_BF16_CHECK 4u /* every scale may be infinite: tested segment by segment */

/* Whether any of the n f32 scales at p is +-Inf (16 a load). */
static inline int f32_any_inf_avx512bf16(const uint8_t *p, int64_t n)
{
    const __m512i abs = _mm512_set1_epi32(0x7FFFFFFF), inf = _mm512_set1_epi32(0x7F800000);
    __mmask16 hit = 0;
    int64_t i = 0;

    for (; i + 16 <= n; i += 16)
        hit |= _mm512_cmpeq_epi32_mask(
            _mm512_and_si512(_mm512_loadu_si512((const void *)(p + 4 * i)), abs), inf);
    if (i < n)
        hit |= _mm512_cmpeq_epi32_mask(
            _mm512_and_si512(_mm512_maskz_loadu_epi32(gemv_mask_avx512(n - i), p + 4 * i), abs),
            inf);
    return hit != 0;
}

/* x's 32 columns at c widened to f32, columns c ... c+15 and c+16 ... c+31 (exact). */
static inline void x_f32_avx512bf16(__m512i xv, __m512 *lo, __m512 *hi)
{
    *lo = _mm512_castsi512_ps(
        _mm512_slli_epi32(_mm512_cvtepu16_epi32(_mm512_castsi512_si256(xv)), 16));
    *hi = _mm512_castsi512_ps(
        _mm512_slli_epi32(_mm512_cvtepu16_epi32(_mm512_extracti64x4_epi64(xv, 1)), 16));
}

/* One step of 32 columns at c for the tile: W decoded (mask: the columns that exist), then every
 * x row against every W row into b. A format with an exact f32 decoder (dec32: 16 columns as
 * f32, mm_gemv_avx512.h) may multiply those with x widened to f32 by FMA instead: the same exact
 * products, cheaper where its bf16 decode costs more than widening x (INT8: up to 4 x rows; the
 * 8 x rows of a tile share each bf16 decode enough for vdpbf16ps to win). */
static inline __attribute__((always_inline)) void
step_avx512bf16(const uint16_t *x, int64_t ldx, const int MI, const int R, int64_t c,
                __mmask32 mask, const uint8_t *const *drow, const int32_t *aux,
                gemv_dec_bf16_fn dec, gemv_dec_avx512_fn dec32, const void *fmt, __m512 (*b)[4])
{
    int full = mask == (__mmask32)0xFFFFFFFFu;

    if (!dec || (dec32 && MI <= 4)) {
        __mmask16 m0 = (__mmask16)mask, m1 = (__mmask16)(mask >> 16);
        __m512 lo[4], hi[4];
        for (int r = 0; r < R; r++) {
            lo[r] = full ? dec32(drow[r], c, aux[r], m0, fmt)
                         : _mm512_maskz_mov_ps(m0, dec32(drow[r], c, aux[r], m0, fmt));
            hi[r] = full ? dec32(drow[r], c + 16, aux[r], m1, fmt)
                         : _mm512_maskz_mov_ps(m1, dec32(drow[r], c + 16, aux[r], m1, fmt));
        }
        for (int i = 0; i < MI; i++) {
            const uint16_t *xp = x + i * ldx + c;
            __m512 xl, xh;
            x_f32_avx512bf16(full ? _mm512_loadu_si512((const void *)xp)
                                  : _mm512_maskz_loadu_epi16(mask, xp),
                             &xl, &xh);
            for (int r = 0; r < R; r++)
                b[i][r] = _mm512_fmadd_ps(hi[r], xh, _mm512_fmadd_ps(lo[r], xl, b[i][r]));
        }
        return;
    }
    __m512i v[4];
    for (int r = 0; r < R; r++)
        v[r] = full ? dec(drow[r], c, aux[r], mask, fmt)
                    : _mm512_maskz_mov_epi16(mask, dec(drow[r], c, aux[r], mask, fmt));
    for (int i = 0; i < MI; i++) {
        const uint16_t *xp = x + i * ldx + c;
        __m512i xv =
            full ? _mm512_loadu_si512((const void *)xp) : _mm512_maskz_loadu_epi16(mask, xp);
        for (int r = 0; r < R; r++)
            b[i][r] = dp_avx512bf16(b[i][r], xv, v[r]);
    }
}

/* One MI x R tile over the whole row length k (rows: the rows of the call, for the prefetch). */
static inline __attribute__((always_inline)) void
gemv_tile_avx512bf16(const uint16_t *x, int64_t ldx, const int MI, const int R, int64_t k,
                     const gemv_rows_avx512 *w, int64_t r0, int64_t rows, gemv_dec_bf16_fn dec,
                     gemv_dec_avx512_fn dec32, gemv_scl_avx512_fn scl, const void *fmt,
                     unsigned flags, float *y, int64_t ldy)
{
    __m512 acc[8][4], b[8][4];
    const uint8_t *drow[4], *srow[4];
    int32_t aux[4] = {0, 0, 0, 0};
    const int pairs = (flags & GEMV_BF16_PAIRS) && w->seg == 16;
    int chk = (flags & GEMV_BF16_CHECK) != 0;
    gemv_pf_avx512 pf;

    gemv_pf_init_avx512(&pf, w, k / 2, r0, R, rows); /* one prefetch step per 32 columns */
    for (int r = 0; r < R; r++) {
        drow[r] = w->data + (r0 + r) * w->dstride;
        srow[r] = w->scale + (r0 + r) * w->sstride;
        if (flags & GEMV_BF16_SCAN_F32)
            chk |= f32_any_inf_avx512bf16(srow[r], (k + w->seg - 1) / w->seg);
        for (int i = 0; i < MI; i++)
            acc[i][r] = _mm512_setzero_ps();
    }
    if (pairs) {
        for (int64_t c = 0; c < k; c += 32) {
            float sa[4], sb[4];
            for (int r = 0; r < R; r++) {
                sa[r] = scl(srow[r], r0 + r, c / 16, &aux[r], fmt);
                sb[r] = c + 16 < k ? scl(srow[r], r0 + r, c / 16 + 1, &aux[r], fmt) : 0.0f;
                for (int i = 0; i < MI; i++)
                    b[i][r] = _mm512_setzero_ps();
            }
            gemv_pf_step_avx512(&pf);
            step_avx512bf16(x, ldx, MI, R, c, mask32_avx512bf16(k - c), drow, aux, dec, dec32, fmt,
                            b);
            for (int i = 0; i < MI; i++)
                for (int r = 0; r < R; r++)
                    acc[i][r] =
                        chk ? pair_scale_add_avx512bf16(acc[i][r], b[i][r], sa[r], sb[r])
                            : _mm512_fmadd_ps(b[i][r],
                                              _mm512_mask_blend_ps(0xFF00, _mm512_set1_ps(sa[r]),
                                                                   _mm512_set1_ps(sb[r])),
                                              acc[i][r]);
        }
    } else {
        for (int64_t s0 = 0, s = 0; s0 < k; s0 += w->seg, s++) {
            int64_t s1 = k - s0 < w->seg ? k : s0 + w->seg, c = s0;
            __m512 sc[4];
            for (int r = 0; r < R; r++) {
                sc[r] = _mm512_set1_ps(scl(srow[r], r0 + r, s, &aux[r], fmt));
                for (int i = 0; i < MI; i++)
                    b[i][r] = _mm512_setzero_ps();
            }
            for (; c + 32 <= s1; c += 32) {
                gemv_pf_step_avx512(&pf);
                step_avx512bf16(x, ldx, MI, R, c, (__mmask32)0xFFFFFFFFu, drow, aux, dec, dec32,
                                fmt, b);
            }
            if (c < s1)
                step_avx512bf16(x, ldx, MI, R, c, mask32_avx512bf16(s1 - c), drow, aux, dec, dec32,
                                fmt, b);
            for (int i = 0; i < MI; i++)
                for (int r = 0; r < R; r++)
                    acc[i][r] = chk ? gemv_scale_add_avx512(acc[i][r], b[i][r], sc[r])
                                    : _mm512_fmadd_ps(b[i][r], sc[r], acc[i][r]);
        }
    }
    for (int i = 0; i < MI; i++)
        for (int r = 0; r < R; r++)
            qs_st_f32(y + i * ldy + r0 + r, gemv_canon_avx512(_mm512_reduce_add_ps(acc[i][r])));
}

/* Every row of W for MI rows of x: tiles of R rows, then single rows. */
static inline __attribute__((always_inline)) void
gemv_rows_run_avx512bf16(const uint16_t *x, int64_t ldx, const int MI, const int R, int64_t k,
                         const gemv_rows_avx512 *w, int64_t rows, gemv_dec_bf16_fn dec,
                         gemv_dec_avx512_fn dec32, gemv_scl_avx512_fn scl, const void *fmt,
                         unsigned flags, float *y, int64_t ldy)
{
    int64_t r = 0;
    for (; r + R <= rows; r += R)
        gemv_tile_avx512bf16(x, ldx, MI, R, k, w, r, rows, dec, dec32, scl, fmt, flags, y, ldy);
    for (; r < rows; r++)
        gemv_tile_avx512bf16(x, ldx, MI, 1, k, w, r, rows, dec, dec32, scl, fmt, flags, y, ldy);
}

/* The whole call: x rows in groups of 8, 4, 2, 1. dec: the bf16 decoder (NULL: none), dec32 the
 * f32 one (NULL: none; step_avx512bf16 says which runs); flags: GEMV_BF16_*. */
static inline __attribute__((always_inline)) void
gemv_avx512bf16(const uint16_t *x, int64_t ldx, int64_t m, int64_t k, const gemv_rows_avx512 *w,
                int64_t rows, gemv_dec_bf16_fn dec, gemv_dec_avx512_fn dec32,
                gemv_scl_avx512_fn scl, const void *fmt, unsigned flags, float *y, int64_t ldy)
{
    for (int64_t i0 = 0; i0 < m;) {
        int64_t left = m - i0;
        const uint16_t *xi = x + i0 * ldx;
        float *yi = y + i0 * ldy;
        if (left >= 8) {
            gemv_rows_run_avx512bf16(xi, ldx, 8, 1, k, w, rows, dec, dec32, scl, fmt, flags, yi,
                                     ldy);
            i0 += 8;
        } else if (left >= 4) {
            gemv_rows_run_avx512bf16(xi, ldx, 4, 2, k, w, rows, dec, dec32, scl, fmt, flags, yi,
                                     ldy);
            i0 += 4;
        } else if (left >= 2) {
            gemv_rows_run_avx512bf16(xi, ldx, 2, 4, k, w, rows, dec, dec32, scl, fmt, flags, yi,
                                     ldy);
            i0 += 2;
        } else {
            gemv_rows_run_avx512bf16(xi, ldx, 1, 4, k, w, rows, dec, dec32, scl, fmt, flags, yi,
                                     ldy);
            i0 += 1;
        }
    }
}

/* ---- element decoders: 32 columns to bf16, in column order ------------------------------------
 */

/* The indices of 32 4-bit codes (16 bytes at p; mask: the columns that exist) for vpermw: each
 * byte goes to both halves of its 32-bit lane (lane L of the register takes bytes 4L ... 4L+3),
 * then the half that stands for the high nibble is shifted right by 4. vpermw reads 5 index
 * bits, so the table holds its 16 values twice and the other half needs no mask. shift: 4 in the
 * low half (bitsandbytes: the high nibble comes first) or in the high half (MX, NVFP4). */
static inline __m512i nibble_idx_avx512bf16(const uint8_t *p, __mmask32 mask, __m512i shift)
{
    const __m512i dup =
        _mm512_set_epi8(-128, 15, -128, 15, -128, 14, -128, 14, -128, 13, -128, 13, -128, 12, -128,
                        12, -128, 11, -128, 11, -128, 10, -128, 10, -128, 9, -128, 9, -128, 8, -128,
                        8, -128, 7, -128, 7, -128, 6, -128, 6, -128, 5, -128, 5, -128, 4, -128, 4,
                        -128, 3, -128, 3, -128, 2, -128, 2, -128, 1, -128, 1, -128, 0, -128, 0);
    __m128i b;

    if (mask == (__mmask32)0xFFFFFFFFu) {
        b = _mm_loadu_si128((const __m128i *)p);
    } else {
        unsigned n = (unsigned)__builtin_popcount(mask);
        b = _mm_maskz_loadu_epi8((__mmask16)((1u << ((n + 1) / 2)) - 1u), p);
    }
    return _mm512_srlv_epi16(_mm512_shuffle_epi8(_mm512_broadcast_i32x4(b), dup), shift);
}

/* The 32-entry vpermw table of a 16-entry codebook: its values rounded to bf16, twice. */
static inline __m512i book_table_avx512bf16(const float *book)
{
    uint16_t t[32];
    for (int i = 0; i < 16; i++)
        t[i] = t[i + 16] = qs_ref_f32_to_bf16(book[i]);
    return _mm512_loadu_si512((const void *)t);
}

/* An FP8 code as bf16 (the format's fields: `sh` = 7 - mantissa bits, exponent offset `bias`
 * = 127 - the format's bias): the magnitude bits shifted into place plus the offset, exact for
 * every normal code; the codes that are not normal numbers (zero, subnormals, and for E4M3 the
 * NaN 0x7F, for E5M2 Inf and NaN) are those with (c + add) & 0x7F <= lim, and take their value
 * from `spec` (vpermw on the code's low 5 bits); the sign is the code's. 32 codes at p. */
static inline __m512i fp8_bf16_avx512bf16(const uint8_t *p, __mmask32 mask, int sh, int magmask,
                                          int bias, int add, int lim, __m512i spec)
{
    __m256i b = mask == (__mmask32)0xFFFFFFFFu ? _mm256_loadu_si256((const __m256i *)p)
                                               : _mm256_maskz_loadu_epi8(mask, p);
    __m512i w = _mm512_cvtepi8_epi16(b); /* the sign in bits 7 ... 15 */
    __m512i r = _mm512_add_epi16(
        _mm512_and_si512(_mm512_slli_epi16(w, (unsigned)sh), _mm512_set1_epi16((short)magmask)),
        _mm512_set1_epi16((short)(bias << 7)));
    __mmask32 odd =
        _mm512_cmple_epu16_mask(_mm512_and_si512(_mm512_add_epi16(w, _mm512_set1_epi16((short)add)),
                                                 _mm512_set1_epi16(0x7F)),
                                _mm512_set1_epi16((short)lim));

    r = _mm512_mask_permutexvar_epi16(r, odd, w, spec);
    return _mm512_ternarylogic_epi32(r, w, _mm512_set1_epi16((short)0x8000), 0xF8); /* r | w & s */
}

/* E4M3 (bias 7, 3 mantissa bits): zero and the subnormals m * 2^-9 at codes 0-7, NaN at 0x7F
 * (low bits 31). */
static inline __m512i e4m3_spec_avx512bf16(void)
{
    return _mm512_set_epi16(0x7FC0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0,
                            0, 0, 0x3C60, 0x3C40, 0x3C20, 0x3C00, 0x3BC0, 0x3B80, 0x3B00, 0);
}

static inline __m512i e4m3_bf16_avx512bf16(const uint8_t *p, __mmask32 mask, __m512i spec)
{
    return fp8_bf16_avx512bf16(p, mask, 4, 0x07F0, 127 - 7, 1, 8, spec);
}

/* E5M2 (bias 15, 2 mantissa bits): zero and m * 2^-16 at codes 0-3, Inf at 0x7C, NaN at
 * 0x7D-0x7F (low bits 28-31). */
static inline __m512i e5m2_spec_avx512bf16(void)
{
    return _mm512_set_epi16(0x7FC0, 0x7FC0, 0x7FC0, 0x7F80, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0,
                            0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0x3840, 0x3800, 0x3780, 0);
}

static inline __m512i e5m2_bf16_avx512bf16(const uint8_t *p, __mmask32 mask, __m512i spec)
{
    return fp8_bf16_avx512bf16(p, mask, 5, 0x0FE0, 127 - 15, 4, 7, spec);
}

#endif /* QS_X86_MM_GEMV_AVX512BF16_H */
