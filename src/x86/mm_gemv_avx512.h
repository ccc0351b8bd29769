/* SPDX-License-Identifier: MIT */
/*
 * The multi-row GEMV driver shared by the fused matmul kernels for AVX-512 F/BW/DQ/VL
 * (mm_*_avx512.c; include/qsparse/matmul.h, src/ref/matmul_ref.c). A format supplies two
 * routines, passed as function constants so each kernel file gets its own inlined copy:
 *
 * - dec(row, c, aux, mask, fmt): the unscaled values of columns c ... c+15 of one W row (row is
 *   the row's first data byte), lanes outside `mask` read no memory and are +0;
 * - scl(srow, row, s, &aux, fmt): the scale of segment s of W row `row` (srow: the row's first
 *   scale byte) and a per-segment integer for dec (the INT8 zero point; 0 elsewhere).
 *
 * Segments of `seg` columns (the last one may be shorter) are summed as 16-lane partial sums,
 * code * x by FMA, and each segment's sum vector is multiplied by its scale once and added to the
 * row's accumulator (one FMA per segment); the 16 lanes are added at the end. The order differs
 * from the reference's (per-lane scaling, FMA), which the matmul tolerance allows.
 *
 * Register tiles: MI rows of x against R rows of W, the R decoded vectors shared by the MI x rows
 * and each x vector shared by the R W rows. M = 1 runs 1 x 4 tiles (one x load per four W rows),
 * M = 2...8 tiles of 2 x 4, 4 x 2, 8 x 1, so a W row is decoded once for up to 8 rows of x (larger
 * M in groups of 8). Include only from files compiled with the AVX-512 flags.
 */
#ifndef QS_X86_MM_GEMV_AVX512_H
#define QS_X86_MM_GEMV_AVX512_H

#include <immintrin.h>

#include "../core/kernels.h"
#include "../ref/ref.h"

typedef __m512 (*gemv_dec_avx512_fn)(const uint8_t *row, int64_t c, int32_t aux, __mmask16 mask,
                                     const void *fmt);
typedef float (*gemv_scl_avx512_fn)(const uint8_t *srow, int64_t row, int64_t s, int32_t *aux,
                                    const void *fmt);

/* Where the W rows are: row r's data at data + r * dstride, its scales at scale + r * sstride
 * (bytes), segments of seg columns. */
typedef struct {
    const uint8_t *data;
    int64_t dstride;
    const uint8_t *scale;
    int64_t sstride;
    int64_t seg;
} gemv_rows_avx512;

/* The rows r0 ... of a row layout of the weight view (src/core/kernels.h): codes at data +
 * r * row_bytes, scales at scale + r * sstride units of sunit bytes (4 for f32 scales, 1 for
 * scale bytes; a view without scales gets the codes' address, never read), segments of seg
 * columns. */
static inline gemv_rows_avx512 gemv_view_rows_avx512(const qs_mm_weight *w, int64_t r0,
                                                     int64_t sunit, int64_t seg)
{
    const uint8_t *d = (const uint8_t *)w->data + r0 * w->row_bytes;
    gemv_rows_avx512 g = {d, w->row_bytes,
                          w->scale ? (const uint8_t *)w->scale + r0 * w->sstride * sunit : d,
                          w->sstride * sunit, seg};
    return g;
}

static inline __mmask16 gemv_mask_avx512(int64_t left)
{
    return left >= 16 ? (__mmask16)0xFFFF : (__mmask16)((1u << left) - 1u);
}

/* Byte masks for the nibbles of `mask` elements (element 2i and 2i+1 share byte i). */
static inline __mmask16 gemv_nibble_mask_avx512(__mmask16 mask)
{
    unsigned n = (unsigned)__builtin_popcount(mask);
    return (__mmask16)((1u << ((n + 1) / 2)) - 1u);
}

/* 16 4-bit codes of 8 bytes, in element order, one per 32-bit lane. hi_first: element 2i is the
 * high nibble of byte i (bitsandbytes), else the low one (MX, NVFP4). The two nibbles of a byte
 * become the two 16-bit halves of a 32-bit lane, which widen to 16 lanes in order. */
static inline __m512i gemv_nibbles_avx512(const uint8_t *p, __mmask16 mask, int hi_first)
{
    __m128i b = mask == 0xFFFF ? _mm_loadl_epi64((const __m128i *)p)
                               : _mm_maskz_loadu_epi8(gemv_nibble_mask_avx512(mask), p);
    __m256i d = _mm256_cvtepu8_epi32(b);
    __m256i h = _mm256_srli_epi32(d, 4), l = _mm256_and_si256(d, _mm256_set1_epi32(15));
    __m256i t = hi_first ? _mm256_or_si256(h, _mm256_slli_epi32(l, 16))
                         : _mm256_or_si256(l, _mm256_slli_epi32(h, 16));
    return _mm512_cvtepu16_epi32(t);
}

/* 16 bytes (masked) widened to 16 unsigned 32-bit lanes. */
static inline __m512i gemv_bytes_avx512(const uint8_t *p, __mmask16 mask)
{
    __m128i b = mask == 0xFFFF ? _mm_loadu_si128((const __m128i *)p) : _mm_maskz_loadu_epi8(mask, p);
    return _mm512_cvtepu8_epi32(b);
}

static inline float gemv_canon_avx512(float v)
{
    return qs_ref_nan_canon(v);
}

/* acc + sum * scale, lane by lane; an infinite scale instead multiplies the segment's total
 * (added to lane 0), as the reference does: lane-wise, a lane holding 0 would make a NaN of
 * 0 * Inf where the reference's nonzero sum times Inf is an infinity. */
static inline __m512 gemv_scale_add_avx512(__m512 acc, __m512 sum, __m512 scale)
{
    float s = _mm_cvtss_f32(_mm512_castps512_ps128(scale));
    if (__builtin_expect(s - s != 0.0f && s == s, 0))
        return _mm512_mask_add_ps(acc, 1, acc, _mm512_set1_ps(_mm512_reduce_add_ps(sum) * s));
    return _mm512_fmadd_ps(sum, scale, acc);
}

/*
 * Software prefetch of the next tile: the rows of a tile and of the next one are contiguous
 * (R * dstride bytes each), but the hardware prefetcher sees R short streams end and R new ones
 * start at every tile and loses about a third of the bandwidth ramping up again (NF4 at M = 1:
 * 29.6 GFLOP/s with the weight in L2, 21 from memory). So each tile walks a cursor over the next
 * tile's bytes, a few lines per step of 16 columns, at the rate that reaches its end when this
 * tile ends, and fetches the next tile's scales when it starts. Prefetches never fault; the
 * cursor stops at the end of the rows of this call.
 * The rows go to L2 (T1: a tile of 4 f16 rows of 4096 is as large as L1, and fetching it into
 * L1 evicted the tile being read: f16 weights ran slower than without prefetch), the scales,
 * small, to L1.
 */
typedef struct {
    const char *p, *end;
    int64_t step, budget; /* bytes per step of 16 columns; bytes owed */
} gemv_pf_avx512;

static inline void gemv_pf_init_avx512(gemv_pf_avx512 *pf, const gemv_rows_avx512 *w, int64_t k,
                                       int64_t r0, int R, int64_t rows)
{
    int64_t next = r0 + R, nr = rows - next < R ? rows - next : R;
    pf->p = pf->end = NULL;
    pf->step = (R * w->dstride) / (k / 16 + 1) + 1;
    pf->budget = 0;
    if (nr <= 0)
        return;
    pf->p = (const char *)w->data + next * w->dstride;
    pf->end = pf->p + nr * w->dstride;
    if (w->sstride > 0)
        for (int64_t b = 0; b < nr * w->sstride; b += 64)
            _mm_prefetch((const char *)w->scale + next * w->sstride + b, _MM_HINT_T0);
}

static inline void gemv_pf_step_avx512(gemv_pf_avx512 *pf)
{
    pf->budget += pf->step;
    while (pf->budget > 0 && pf->p < pf->end) {
        _mm_prefetch(pf->p, _MM_HINT_T1);
        pf->p += 64;
        pf->budget -= 64;
    }
}

/* One MI x R tile over the whole row length k (rows: the rows of the call, for the prefetch). */
static inline __attribute__((always_inline)) void
gemv_tile_avx512(const float *x, int64_t ldx, const int MI, const int R, int64_t k,
                 const gemv_rows_avx512 *w, int64_t r0, int64_t rows, gemv_dec_avx512_fn dec,
                 gemv_scl_avx512_fn scl, const void *fmt, float *y, int64_t ldy)
{
    __m512 acc[8][4];
    const uint8_t *drow[4], *srow[4];
    gemv_pf_avx512 pf;

    gemv_pf_init_avx512(&pf, w, k, r0, R, rows);
    for (int r = 0; r < R; r++) {
        drow[r] = w->data + (r0 + r) * w->dstride;
        srow[r] = w->scale + (r0 + r) * w->sstride;
        for (int i = 0; i < MI; i++)
            acc[i][r] = _mm512_setzero_ps();
    }
    for (int64_t s0 = 0, s = 0; s0 < k; s0 += w->seg, s++) {
        int64_t s1 = k - s0 < w->seg ? k : s0 + w->seg, c = s0;
        __m512 b[8][4], sc[4];
        int32_t aux[4];

        for (int r = 0; r < R; r++) {
            sc[r] = _mm512_set1_ps(scl(srow[r], r0 + r, s, &aux[r], fmt));
            for (int i = 0; i < MI; i++)
                b[i][r] = _mm512_setzero_ps();
        }
        for (; c + 16 <= s1; c += 16) {
            __m512 v[4];
            gemv_pf_step_avx512(&pf);
            for (int r = 0; r < R; r++)
                v[r] = dec(drow[r], c, aux[r], 0xFFFF, fmt);
            for (int i = 0; i < MI; i++) {
                __m512 xv = _mm512_loadu_ps(x + i * ldx + c);
                for (int r = 0; r < R; r++)
                    b[i][r] = _mm512_fmadd_ps(v[r], xv, b[i][r]);
            }
        }
        if (c < s1) { /* masked lanes: x and the value are +0 (a NaN code there must not count) */
            __mmask16 mk = gemv_mask_avx512(s1 - c);
            __m512 v[4];
            for (int r = 0; r < R; r++)
                v[r] = _mm512_maskz_mov_ps(mk, dec(drow[r], c, aux[r], mk, fmt));
            for (int i = 0; i < MI; i++) {
                __m512 xv = _mm512_maskz_loadu_ps(mk, x + i * ldx + c);
                for (int r = 0; r < R; r++)
                    b[i][r] = _mm512_fmadd_ps(v[r], xv, b[i][r]);
            }
        }
        for (int i = 0; i < MI; i++)
            for (int r = 0; r < R; r++)
                acc[i][r] = gemv_scale_add_avx512(acc[i][r], b[i][r], sc[r]);
    }
    for (int i = 0; i < MI; i++)
        for (int r = 0; r < R; r++)
            qs_st_f32(y + i * ldy + r0 + r, gemv_canon_avx512(_mm512_reduce_add_ps(acc[i][r])));
}

/* Every row of W for MI rows of x: tiles of R rows, then single rows. */
static inline __attribute__((always_inline)) void
gemv_rows_run_avx512(const float *x, int64_t ldx, const int MI, const int R, int64_t k,
                     const gemv_rows_avx512 *w, int64_t rows, gemv_dec_avx512_fn dec,
                     gemv_scl_avx512_fn scl, const void *fmt, float *y, int64_t ldy)
{
    int64_t r = 0;
    for (; r + R <= rows; r += R)
        gemv_tile_avx512(x, ldx, MI, R, k, w, r, rows, dec, scl, fmt, y, ldy);
    for (; r < rows; r++)
        gemv_tile_avx512(x, ldx, MI, 1, k, w, r, rows, dec, scl, fmt, y, ldy);
}

/* The whole call: x rows in groups of 8, 4, 2, 1. */
static inline __attribute__((always_inline)) void
gemv_avx512(const float *x, int64_t ldx, int64_t m, int64_t k, const gemv_rows_avx512 *w,
            int64_t rows, gemv_dec_avx512_fn dec, gemv_scl_avx512_fn scl, const void *fmt,
            float *y, int64_t ldy)
{
    for (int64_t i0 = 0; i0 < m;) {
        int64_t left = m - i0;
        const float *xi = x + i0 * ldx;
        float *yi = y + i0 * ldy;
        if (left >= 8) {
            gemv_rows_run_avx512(xi, ldx, 8, 1, k, w, rows, dec, scl, fmt, yi, ldy);
            i0 += 8;
        } else if (left >= 4) {
            gemv_rows_run_avx512(xi, ldx, 4, 2, k, w, rows, dec, scl, fmt, yi, ldy);
            i0 += 4;
        } else if (left >= 2) {
            gemv_rows_run_avx512(xi, ldx, 2, 4, k, w, rows, dec, scl, fmt, yi, ldy);
            i0 += 2;
        } else {
            gemv_rows_run_avx512(xi, ldx, 1, 4, k, w, rows, dec, scl, fmt, yi, ldy);
            i0 += 1;
        }
    }
}

/* E8M0 2^(e - 127) (NaN for 0xFF, 2^-127 a denormal), exact. */
static inline float gemv_e8m0_avx512(uint8_t e)
{
    uint32_t b = e == 0xFF ? 0x7FC00000u : e == 0 ? 0x00400000u : (uint32_t)e << 23;
    return qs_f32_from_bits(b);
}

/* E4M3 value of a scale byte with the sign cleared (NVFP4 block scales), exact. */
static inline float gemv_e4m3_pos_avx512(uint8_t c)
{
    unsigned e = (c >> 3) & 15u, mm = c & 7u;
    if ((c & 0x7Fu) == 0x7Fu)
        return qs_f32_from_bits(0x7FC00000u);
    if (e == 0)
        return (float)mm * 0x1p-9f;
    return qs_f32_from_bits(((e + 120u) << 23) | (mm << 20));
}

#endif /* QS_X86_MM_GEMV_AVX512_H */
