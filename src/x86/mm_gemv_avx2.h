/* SPDX-License-Identifier: MIT */
/*
 * The multi-row GEMV driver shared by the fused matmul kernels for AVX2 + FMA + F16C
 * (mm_*_avx2.c; include/qsparse/matmul.h, src/ref/matmul_ref.c), the 8-lane counterpart of
 * mm_gemv_avx512.h. A format supplies, as function constants (inlined per kernel file):
 *
 * - dec(p, aux, fmt): the unscaled values of 8 consecutive elements whose codes start at byte p
 *   (BITS / 8 bytes each, BITS = 4, 8 or 16; reads exactly 8 * BITS / 8 bytes);
 * - scl(srow, row, s, &aux, fmt): the scale of segment s of W row `row` and a per-segment integer
 *   for dec (the INT8 zero point; 0 elsewhere).
 *
 * Segments of `seg` columns are summed as 8-lane partial sums of code value * x (FMA); each
 * segment's sum vector gets its scale once (one FMA per segment; an infinite scale multiplies the
 * segment's total instead, as the reference does); the lanes are added at the end. The last
 * piece of a segment shorter than 8 is copied to a zeroed stack buffer (codes and x), so nothing
 * outside the caller's arrays is read; code 0 is finite in every format, so the padding adds 0.
 * Tiles: MI rows of x against R rows of W: 1 x 4 for M = 1, 2 x 2 and 4 x 1 for M > 1 (16
 * registers). Include only from files compiled with the AVX2 flags.
 */
#ifndef QS_X86_MM_GEMV_AVX2_H
#define QS_X86_MM_GEMV_AVX2_H

#include <string.h>

#include <immintrin.h>

#include "../core/kernels.h"
#include "../ref/ref.h"
#include "lut16_avx2.h"

typedef __m256 (*gemv_dec_avx2_fn)(const uint8_t *p, int32_t aux, const void *fmt);
typedef float (*gemv_scl_avx2_fn)(const uint8_t *srow, int64_t row, int64_t s, int32_t *aux,
                                  const void *fmt);

/* Row r's codes at data + r * dstride, its scales at scale + r * sstride (bytes). Wider steps
 * for formats that have them: lut, for 4-bit codes whose dec is a 16-entry table lookup, that
 * table as byte planes (lut16_avx2.h) and the nibble order (hi_first as in gemv_nibbles_avx2),
 * else NULL; e4m3x16, 1 for E4M3 codes (dec is gemv_e4m3_f16_avx2), decoded 16 at a time. */
typedef struct {
    const uint8_t *data;
    int64_t dstride;
    const uint8_t *scale;
    int64_t sstride;
    int64_t seg;
    const lut16_avx2 *lut;
    int hi_first;
    int e4m3x16;
} gemv_rows_avx2;

/* The rows r0 ... of a row layout of the weight view (src/core/kernels.h): codes at data +
 * r * row_bytes, scales at scale + r * sstride units of sunit bytes (4 for f32 scales, 1 for
 * scale bytes; a view without scales gets the codes' address, never read), segments of seg
 * columns; the wider steps as gemv_rows_avx2. */
static inline gemv_rows_avx2 gemv_view_rows_avx2(const qs_mm_weight *w, int64_t r0, int64_t sunit,
                                                 int64_t seg, const lut16_avx2 *lut, int hi_first,
                                                 int e4m3x16)
{
    const uint8_t *d = (const uint8_t *)w->data + r0 * w->row_bytes;
    gemv_rows_avx2 g = {d,
                        w->row_bytes,
                        w->scale ? (const uint8_t *)w->scale + r0 * w->sstride * sunit : d,
                        w->sstride * sunit,
                        seg,
                        lut,
                        hi_first,
                        e4m3x16};
    return g;
}

/* 8 4-bit codes of 4 bytes in element order, one per 32-bit lane (hi_first: bitsandbytes' order,
 * element 2i in the high nibble; else MX/NVFP4's): the two nibbles of a byte become the two
 * 16-bit halves of a lane, which widen to 8 lanes in order. */
static inline __m256i gemv_nibbles_avx2(const uint8_t *p, int hi_first)
{
    int32_t w;
    memcpy(&w, p, 4);
    __m128i d = _mm_cvtepu8_epi32(_mm_cvtsi32_si128(w));
    __m128i h = _mm_srli_epi32(d, 4), l = _mm_and_si128(d, _mm_set1_epi32(15));
    __m128i t = hi_first ? _mm_or_si128(h, _mm_slli_epi32(l, 16))
                         : _mm_or_si128(l, _mm_slli_epi32(h, 16));
    return _mm256_cvtepu16_epi32(t);
}

/* 16-entry table lookup: two 8-entry permutes chosen by bit 3 of the code. */
static inline __m256 gemv_lut16_avx2(__m256i c, __m256 lo, __m256 hi)
{
    return _mm256_blendv_ps(_mm256_permutevar8x32_ps(lo, c), _mm256_permutevar8x32_ps(hi, c),
                            _mm256_castsi256_ps(_mm256_slli_epi32(c, 28)));
}

static inline __m256i gemv_bytes_avx2(const uint8_t *p)
{
    return _mm256_cvtepu8_epi32(_mm_loadl_epi64((const __m128i *)p));
}

/* gemv_e4m3_f16_avx2 (below) for 16 codes (16 bytes): their f16 forms in one 256-bit register,
 * so each integer step serves 16 lanes, then two VCVTPH2PS; v[0] holds elements 0-7, v[1] 8-15. */
static inline void gemv_e4m3x16_f16_avx2(const uint8_t *p, __m256 v[2])
{
    const __m256i w = _mm256_cvtepu8_epi16(_mm_loadu_si128((const __m128i *)p));
    const __m256i mag = _mm256_and_si256(w, _mm256_set1_epi16(0x7F));
    __m256i h = _mm256_or_si256(_mm256_slli_epi16(mag, 7),
                                _mm256_and_si256(_mm256_slli_epi16(w, 8),
                                                 _mm256_set1_epi16((short)0x8000)));
    h = _mm256_or_si256(h, _mm256_and_si256(_mm256_cmpeq_epi16(mag, _mm256_set1_epi16(0x7F)),
                                            _mm256_set1_epi16(0x7E00)));
    v[0] = _mm256_mul_ps(_mm256_cvtph_ps(_mm256_castsi256_si128(h)), _mm256_set1_ps(256.0f));
    v[1] = _mm256_mul_ps(_mm256_cvtph_ps(_mm256_extracti128_si256(h, 1)),
                         _mm256_set1_ps(256.0f));
}

static inline float gemv_hsum_avx2(__m256 v)
{
    __m128 s = _mm_add_ps(_mm256_castps256_ps128(v), _mm256_extractf128_ps(v, 1));
    s = _mm_add_ps(s, _mm_movehl_ps(s, s));
    s = _mm_add_ss(s, _mm_movehdup_ps(s));
    return _mm_cvtss_f32(s);
}

/* acc + sum * scale lane by lane; an infinite scale multiplies the total (lane 0), since a lane
 * holding 0 would make 0 * Inf = NaN where the reference's nonzero total gives an infinity. */
static inline __m256 gemv_scale_add_avx2(__m256 acc, __m256 sum, float s)
{
    if (__builtin_expect(s - s != 0.0f && s == s, 0))
        return _mm256_add_ps(acc, _mm256_setr_ps(gemv_hsum_avx2(sum) * s, 0, 0, 0, 0, 0, 0, 0));
    return _mm256_fmadd_ps(sum, _mm256_set1_ps(s), acc);
}

/* acc[i][r] = gemv_scale_add_avx2(acc[i][r], b[i][r], sc[r]) over the tile, with one vector test
 * of the R scales for an infinity instead of one test and branch per row (that cost MXFP4's
 * GEMV 7% of its time); plain FMAs unless a scale is infinite. sc[R...3] are 0. */
static inline __attribute__((always_inline)) void
gemv_scale_tile_avx2(__m256 acc[4][4], __m256 b[4][4], const float sc[4], const int MI,
                     const int R)
{
    const __m128 mag = _mm_and_ps(_mm_loadu_ps(sc), _mm_castsi128_ps(_mm_set1_epi32(0x7FFFFFFF)));
    if (__builtin_expect(_mm_movemask_ps(_mm_cmpeq_ps(mag, _mm_set1_ps(__builtin_inff()))), 0)) {
        for (int i = 0; i < MI; i++)
            for (int r = 0; r < R; r++)
                acc[i][r] = gemv_scale_add_avx2(acc[i][r], b[i][r], sc[r]);
        return;
    }
    for (int i = 0; i < MI; i++)
        for (int r = 0; r < R; r++)
            acc[i][r] = _mm256_fmadd_ps(b[i][r], _mm256_set1_ps(sc[r]), acc[i][r]);
}

/* Software prefetch of the next tile's rows and scales, as in mm_gemv_avx512.h: a cursor over
 * the next tile's bytes advanced a few lines per step of 8 columns, so that it reaches their end
 * when this tile ends; the hardware prefetcher would restart its streams at every tile.
 * The rows go to L2 (T1: a tile of 4 f16 rows of 4096 is as large as L1, and fetching it into
 * L1 evicted the tile being read: f16 weights ran slower than without prefetch), the scales,
 * small, to L1. */
typedef struct {
    const char *p, *end;
    int64_t step, budget;
} gemv_pf_avx2;

static inline void gemv_pf_init_avx2(gemv_pf_avx2 *pf, const gemv_rows_avx2 *w, int64_t k,
                                     int64_t r0, int R, int64_t rows)
{
    int64_t next = r0 + R, nr = rows - next < R ? rows - next : R;
    pf->p = pf->end = NULL;
    pf->step = (R * w->dstride) / (k / 8 + 1) + 1;
    pf->budget = 0;
    if (nr <= 0)
        return;
    pf->p = (const char *)w->data + next * w->dstride;
    pf->end = pf->p + nr * w->dstride;
    if (w->sstride > 0)
        for (int64_t b = 0; b < nr * w->sstride; b += 64)
            _mm_prefetch((const char *)w->scale + next * w->sstride + b, _MM_HINT_T0);
}

static inline void gemv_pf_step_avx2(gemv_pf_avx2 *pf)
{
    pf->budget += pf->step;
    while (pf->budget > 0 && pf->p < pf->end) {
        _mm_prefetch(pf->p, _MM_HINT_T1);
        pf->p += 64;
        pf->budget -= 64;
    }
}

/* A tile's start: its rows' codes and scales, zeroed accumulators, the prefetch cursor. */
static inline __attribute__((always_inline)) void
gemv_tile_begin_avx2(const gemv_rows_avx2 *w, int64_t k, int64_t r0, const int MI, const int R,
                     int64_t rows, const uint8_t *drow[4], const uint8_t *srow[4],
                     __m256 acc[4][4], gemv_pf_avx2 *pf)
{
    gemv_pf_init_avx2(pf, w, k, r0, R, rows);
    for (int r = 0; r < R; r++) {
        drow[r] = w->data + (r0 + r) * w->dstride;
        srow[r] = w->scale + (r0 + r) * w->sstride;
        for (int i = 0; i < MI; i++)
            acc[i][r] = _mm256_setzero_ps();
    }
}

/* A tile's end: y[i][r] = the lanes of acc[i][r] added, a NaN made canonical. */
static inline __attribute__((always_inline)) void
gemv_tile_end_avx2(__m256 acc[4][4], const int MI, const int R, float *y, int64_t ldy)
{
    for (int i = 0; i < MI; i++)
        for (int r = 0; r < R; r++)
            qs_st_f32(y + i * ldy + r, qs_ref_nan_canon(gemv_hsum_avx2(acc[i][r])));
}

/* The values of 32 codes at column c of row `drow` for the formats with a 32-column step: a
 * lut16 decode (4-bit table codes) or two 16-code E4M3 decodes. */
static inline __attribute__((always_inline)) void
gemv_dec32_avx2(const int BITS, const gemv_rows_avx2 *w, const uint8_t *drow, int64_t c,
                __m256 v[4])
{
    if (BITS == 4) {
        lut16_decode32_avx2(drow + c / 2, w->lut, w->hi_first, v);
    } else {
        gemv_e4m3x16_f16_avx2(drow + c, v);
        gemv_e4m3x16_f16_avx2(drow + c + 16, v + 2);
    }
}

/* gemv_tile_avx2 for rows of whole segments of whole 32-column steps (MX blocks, NF4/FP4 blocks
 * of 32 or more; PAIR: two NVFP4 blocks of 16 a step; k a multiple of the step and the segment):
 * the same FMAs into b and the same scale steps in the same order, in a loop with nothing else to
 * test per segment. With blocks of 32 the general loop's tests and spills between segments cost
 * as much as a third of the decode (MXFP4 0.158 against 0.126 ns per weight in L2, Zen 2; NF4
 * with blocks of 32 against 128: 0.145 against 0.111). */
static inline __attribute__((always_inline)) void
gemv_tile_seg32_avx2(const float *x, int64_t ldx, const int MI, const int R, const int BITS,
                     const int PAIR, int64_t k, const gemv_rows_avx2 *w, int64_t r0,
                     int64_t rows, gemv_scl_avx2_fn scl, const void *fmt, float *y, int64_t ldy)
{
    __m256 acc[4][4];
    const uint8_t *drow[4], *srow[4];
    const int64_t seg = PAIR ? 32 : w->seg;
    gemv_pf_avx2 pf;

    gemv_tile_begin_avx2(w, k, r0, MI, R, rows, drow, srow, acc, &pf);
    for (int64_t s0 = 0, s = 0; s0 < k; s0 += seg, s += 1 + PAIR) {
        __m256 b[4][4], b2[4][4];
        float sc[4] = {0}, sc2[4] = {0};
        int32_t aux;

        for (int r = 0; r < R; r++) {
            sc[r] = scl(srow[r], r0 + r, s, &aux, fmt);
            if (PAIR)
                sc2[r] = scl(srow[r], r0 + r, s + 1, &aux, fmt);
            for (int i = 0; i < MI; i++)
                b[i][r] = b2[i][r] = _mm256_setzero_ps();
        }
        for (int64_t c = s0; c < s0 + seg; c += 32) {
            for (int q = 0; q < 4; q++)
                gemv_pf_step_avx2(&pf);
            for (int r = 0; r < R; r++) {
                __m256 v[4];
                gemv_dec32_avx2(BITS, w, drow[r], c, v);
                for (int i = 0; i < MI; i++)
                    for (int q = 0; q < 4; q++) {
                        __m256 *t = PAIR && q >= 2 ? &b2[i][r] : &b[i][r];
                        *t = _mm256_fmadd_ps(v[q], _mm256_loadu_ps(x + i * ldx + c + 8 * q), *t);
                    }
            }
        }
        gemv_scale_tile_avx2(acc, b, sc, MI, R);
        if (PAIR)
            gemv_scale_tile_avx2(acc, b2, sc2, MI, R);
    }
    gemv_tile_end_avx2(acc, MI, R, y + r0, ldy);
}

static inline __attribute__((always_inline)) void
gemv_tile_avx2(const float *x, int64_t ldx, const int MI, const int R, const int BITS, int64_t k,
               const gemv_rows_avx2 *w, int64_t r0, int64_t rows, gemv_dec_avx2_fn dec,
               gemv_scl_avx2_fn scl, const void *fmt, float *y, int64_t ldy)
{
    __m256 acc[4][4];
    const uint8_t *drow[4], *srow[4];
    gemv_pf_avx2 pf;

    gemv_tile_begin_avx2(w, k, r0, MI, R, rows, drow, srow, acc, &pf);
    for (int64_t s0 = 0, s = 0; s0 < k; s0 += w->seg, s++) {
        int64_t s1 = k - s0 < w->seg ? k : s0 + w->seg, c = s0;
        __m256 b[4][4];
        float sc[4] = {0};
        int32_t aux[4];

        for (int r = 0; r < R; r++) {
            sc[r] = scl(srow[r], r0 + r, s, &aux[r], fmt);
            for (int i = 0; i < MI; i++)
                b[i][r] = _mm256_setzero_ps();
        }
        /* 4-bit table formats with 16-column segments (NVFP4): two whole segments per lut16
         * decode, each summed and scaled as the 8-column steps would, in the same order. */
        if (BITS == 4 && w->lut && w->seg == 16 && s0 + 32 <= k) {
            __m256 b2[4][4];
            float sc2[4] = {0};
            int32_t aux2[4];
            for (int r = 0; r < R; r++) {
                sc2[r] = scl(srow[r], r0 + r, s + 1, &aux2[r], fmt);
                for (int i = 0; i < MI; i++)
                    b2[i][r] = _mm256_setzero_ps();
            }
            for (int q = 0; q < 4; q++)
                gemv_pf_step_avx2(&pf);
            for (int r = 0; r < R; r++) {
                __m256 v[4];
                lut16_decode32_avx2(drow[r] + c / 2, w->lut, w->hi_first, v);
                for (int i = 0; i < MI; i++) {
                    const float *xi = x + i * ldx + c;
                    b[i][r] = _mm256_fmadd_ps(v[0], _mm256_loadu_ps(xi), b[i][r]);
                    b[i][r] = _mm256_fmadd_ps(v[1], _mm256_loadu_ps(xi + 8), b[i][r]);
                    b2[i][r] = _mm256_fmadd_ps(v[2], _mm256_loadu_ps(xi + 16), b2[i][r]);
                    b2[i][r] = _mm256_fmadd_ps(v[3], _mm256_loadu_ps(xi + 24), b2[i][r]);
                }
            }
            gemv_scale_tile_avx2(acc, b, sc, MI, R);
            gemv_scale_tile_avx2(acc, b2, sc2, MI, R);
            s0 += 16; /* the loop's own step passes the second segment */
            s++;
            continue;
        }
        /* 4-bit table formats, 32 columns a step: one lut16 decode per row gives the same values
         * as four dec calls (the table's bits) in a third of the operations and no lane-crossing
         * permute but one; the FMAs into b are the 8-column steps' in the same order. */
        if (BITS == 4 && w->lut)
            for (; c + 32 <= s1; c += 32) {
                for (int q = 0; q < 4; q++)
                    gemv_pf_step_avx2(&pf);
                for (int r = 0; r < R; r++) {
                    __m256 v[4];
                    lut16_decode32_avx2(drow[r] + c / 2, w->lut, w->hi_first, v);
                    for (int i = 0; i < MI; i++)
                        for (int q = 0; q < 4; q++)
                            b[i][r] = _mm256_fmadd_ps(
                                v[q], _mm256_loadu_ps(x + i * ldx + c + 8 * q), b[i][r]);
                }
            }
        /* E4M3 codes, 16 columns a step: the same values as two dec calls, each integer step
         * of the f16 form done once for 16 lanes; the FMAs into b in the same order. */
        if (BITS == 8 && w->e4m3x16)
            for (; c + 16 <= s1; c += 16) {
                gemv_pf_step_avx2(&pf);
                gemv_pf_step_avx2(&pf);
                for (int r = 0; r < R; r++) {
                    __m256 v[2];
                    gemv_e4m3x16_f16_avx2(drow[r] + c, v);
                    for (int i = 0; i < MI; i++)
                        for (int q = 0; q < 2; q++)
                            b[i][r] = _mm256_fmadd_ps(
                                v[q], _mm256_loadu_ps(x + i * ldx + c + 8 * q), b[i][r]);
                }
            }
        for (; c + 8 <= s1; c += 8) {
            __m256 v[4];
            gemv_pf_step_avx2(&pf);
            for (int r = 0; r < R; r++)
                v[r] = dec(drow[r] + c * BITS / 8, aux[r], fmt);
            for (int i = 0; i < MI; i++) {
                __m256 xv = _mm256_loadu_ps(x + i * ldx + c);
                for (int r = 0; r < R; r++)
                    b[i][r] = _mm256_fmadd_ps(v[r], xv, b[i][r]);
            }
        }
        if (c < s1) {
            int64_t len = s1 - c;
            uint8_t cb[16] = {0};
            float xb[8] = {0};
            __m256 v[4];
            for (int r = 0; r < R; r++) {
                memcpy(cb, drow[r] + c * BITS / 8, (size_t)(len * BITS + 7) / 8);
                v[r] = dec(cb, aux[r], fmt);
            }
            for (int i = 0; i < MI; i++) {
                memcpy(xb, x + i * ldx + c, (size_t)len * sizeof(float));
                __m256 xv = _mm256_loadu_ps(xb);
                for (int r = 0; r < R; r++)
                    b[i][r] = _mm256_fmadd_ps(v[r], xv, b[i][r]);
            }
        }
        gemv_scale_tile_avx2(acc, b, sc, MI, R);
    }
    gemv_tile_end_avx2(acc, MI, R, y + r0, ldy);
}

static inline __attribute__((always_inline)) void
gemv_rows_run_avx2(const float *x, int64_t ldx, const int MI, const int R, const int BITS,
                   int64_t k, const gemv_rows_avx2 *w, int64_t rows, gemv_dec_avx2_fn dec,
                   gemv_scl_avx2_fn scl, const void *fmt, float *y, int64_t ldy)
{
    int64_t r = 0;
    if (((BITS == 4 && w->lut) || (BITS == 8 && w->e4m3x16)) && w->seg % 32 == 0 &&
        k % w->seg == 0) {
        for (; r + R <= rows; r += R)
            gemv_tile_seg32_avx2(x, ldx, MI, R, BITS, 0, k, w, r, rows, scl, fmt, y, ldy);
        for (; r < rows; r++)
            gemv_tile_seg32_avx2(x, ldx, MI, 1, BITS, 0, k, w, r, rows, scl, fmt, y, ldy);
        return;
    }
    if (BITS == 4 && w->lut && w->seg == 16 && k % 32 == 0) {
        for (; r + R <= rows; r += R)
            gemv_tile_seg32_avx2(x, ldx, MI, R, BITS, 1, k, w, r, rows, scl, fmt, y, ldy);
        for (; r < rows; r++)
            gemv_tile_seg32_avx2(x, ldx, MI, 1, BITS, 1, k, w, r, rows, scl, fmt, y, ldy);
        return;
    }
    for (; r + R <= rows; r += R)
        gemv_tile_avx2(x, ldx, MI, R, BITS, k, w, r, rows, dec, scl, fmt, y, ldy);
    for (; r < rows; r++)
        gemv_tile_avx2(x, ldx, MI, 1, BITS, k, w, r, rows, dec, scl, fmt, y, ldy);
}

/* The whole call: x rows in groups of 4, 2, 1. */
static inline __attribute__((always_inline)) void
gemv_avx2(const float *x, int64_t ldx, int64_t m, int64_t k, const int BITS,
          const gemv_rows_avx2 *w, int64_t rows, gemv_dec_avx2_fn dec, gemv_scl_avx2_fn scl,
          const void *fmt, float *y, int64_t ldy)
{
    for (int64_t i0 = 0; i0 < m;) {
        int64_t left = m - i0;
        const float *xi = x + i0 * ldx;
        float *yi = y + i0 * ldy;
        if (left >= 4) {
            gemv_rows_run_avx2(xi, ldx, 4, 1, BITS, k, w, rows, dec, scl, fmt, yi, ldy);
            i0 += 4;
        } else if (left >= 2) {
            gemv_rows_run_avx2(xi, ldx, 2, 2, BITS, k, w, rows, dec, scl, fmt, yi, ldy);
            i0 += 2;
        } else {
            gemv_rows_run_avx2(xi, ldx, 1, 4, BITS, k, w, rows, dec, scl, fmt, yi, ldy);
            i0 += 1;
        }
    }
}

/* The values of 8 E4M3 codes (8 bytes): the seven magnitude bits shifted left by 7 are an f16
 * of value * 2^-8 (exponent bias 15 instead of 7, subnormals included), converted exactly by
 * VCVTPH2PS and multiplied by 2^8 (exact); magnitude 0x7F gives NaN. Fewer operations than the
 * integer field moves on 8 32-bit lanes. */
static inline __m256 gemv_e4m3_f16_avx2(const uint8_t *p)
{
    const __m128i w = _mm_cvtepu8_epi16(_mm_loadl_epi64((const __m128i *)p));
    const __m128i mag = _mm_and_si128(w, _mm_set1_epi16(0x7F));
    __m128i h = _mm_or_si128(_mm_slli_epi16(mag, 7),
                             _mm_and_si128(_mm_slli_epi16(w, 8), _mm_set1_epi16((short)0x8000)));
    h = _mm_or_si128(h, _mm_and_si128(_mm_cmpeq_epi16(mag, _mm_set1_epi16(0x7F)),
                                      _mm_set1_epi16(0x7E00)));
    return _mm256_mul_ps(_mm256_cvtph_ps(h), _mm256_set1_ps(256.0f));
}

/* E8M0 2^(e - 127) (NaN for 0xFF, 2^-127 a denormal), exact. */
static inline float gemv_e8m0_avx2(uint8_t e)
{
    uint32_t b = e == 0xFF ? 0x7FC00000u : e == 0 ? 0x00400000u : (uint32_t)e << 23;
    return qs_f32_from_bits(b);
}

/* E4M3 value of a scale byte with the sign cleared (NVFP4 block scales), exact. */
static inline float gemv_e4m3_pos_avx2(uint8_t c)
{
    unsigned e = (c >> 3) & 15u, mm = c & 7u;
    if ((c & 0x7Fu) == 0x7Fu)
        return qs_f32_from_bits(0x7FC00000u);
    if (e == 0)
        return (float)mm * 0x1p-9f;
    return qs_f32_from_bits(((e + 120u) << 23) | (mm << 20));
}

#endif /* QS_X86_MM_GEMV_AVX2_H */
