/* SPDX-License-Identifier: MIT */
/*
 * The M = 1 GEMV loop over E4M3 codes for AVX-512 F/BW/DQ/VL, shared by FP8 E4M3 (one tensor
 * scale, the whole row one segment: mm_fp8_avx512.c) and MXFP8 (an E8M0 scale per 32 codes:
 * mm_mx_avx512.c); include/qsparse/matmul.h, the reference is src/ref/matmul_ref.c.
 *
 * 64 columns a step: one test of the step's 64 code bytes for an E4M3 NaN (0x7F, 0xFF) per row,
 * and without one each 16 codes decode in four operations as the f16 of value * 2^-8 (the
 * (c + (c & 0x80)) << 7 form of minifloat_avx512.h) instead of the NaN-aware eight; times 2^8
 * and one FMA per 16 codes against x, R rows of W per x load. MX scales (E8M0, never infinite)
 * multiply each 32-code block's sum; the FP8 tensor scale multiplies the row's total once.
 * Rows of whole steps only (k % 64 == 0); the callers run the tile driver otherwise.
 * Include only from files compiled with the AVX-512 flags, after minifloat_avx512.h and
 * mm_gemv_avx512.h.
 */
#ifndef QS_X86_MM_E4M3_AVX512_H
#define QS_X86_MM_E4M3_AVX512_H

#include <immintrin.h>

/* 16 codes at p as value * 2^-8 (exact), NaN codes decoded as NaN where nan is set. */
static inline __attribute__((always_inline)) __m512 e4m3_m1_dec16_avx512(const uint8_t *p,
                                                                         const int nan)
{
    __m128i b = _mm_loadu_si128((const __m128i *)p);
    return nan ? e4m3_decode16_f16_avx512(b) : e4m3_decode16_f16_nonan_avx512(b);
}

/* acc + the products of 32 codes at p with x[0 .. 32) (values times 2^8, exact) */
static inline __attribute__((always_inline)) __m512
e4m3_m1_dot32_avx512(const uint8_t *p, const float *x, const int nan)
{
    const __m512 two8 = _mm512_set1_ps(256.0f);
    __m512 v0 = _mm512_mul_ps(e4m3_m1_dec16_avx512(p, nan), two8);
    __m512 v1 = _mm512_mul_ps(e4m3_m1_dec16_avx512(p + 16, nan), two8);
    return _mm512_fmadd_ps(v1, _mm512_loadu_ps(x + 16), _mm512_mul_ps(v0, _mm512_loadu_ps(x)));
}

/*
 * Rows r0 ... r0 + R - 1 (R constant) of w for one x row of k % 64 == 0 columns. mx: E8M0 block
 * scales per 32 columns, from e8m0 (the 256 values); else the row's 16 lanes are summed and
 * multiplied by tscale once (the FP8 tensor scale). y[r0 + r] written under the NaN rule.
 */
static inline __attribute__((always_inline)) void
e4m3_m1_avx512(const float *x, int64_t k, const gemv_rows_avx512 *w, const int R, int64_t r0,
               int64_t rows, const int mx, const float *e8m0, float tscale, float *y)
{
    const uint8_t *drow[4], *srow[4];
    __m512 acc[4];
    gemv_pf_avx512 pf;

    gemv_pf_init_avx512(&pf, w, k / 2, r0, R, rows); /* one prefetch step per 32 columns */
    for (int r = 0; r < R; r++) {
        drow[r] = w->data + (r0 + r) * w->dstride;
        srow[r] = w->scale + (r0 + r) * w->sstride;
        acc[r] = _mm512_setzero_ps();
    }
    for (int64_t c = 0; c < k; c += 64) {
        gemv_pf_step_avx512(&pf);
        gemv_pf_step_avx512(&pf);
        for (int r = 0; r < R; r++) {
            __m512i b = _mm512_or_si512(_mm512_loadu_si512((const void *)(drow[r] + c)),
                                        _mm512_set1_epi8((char)0x80));
            __m512 s0, s1;
            if (__builtin_expect(_mm512_cmpeq_epi8_mask(b, _mm512_set1_epi8((char)0xFF)) != 0,
                                 0)) {
                s0 = e4m3_m1_dot32_avx512(drow[r] + c, x + c, 1);
                s1 = e4m3_m1_dot32_avx512(drow[r] + c + 32, x + c + 32, 1);
            } else {
                s0 = e4m3_m1_dot32_avx512(drow[r] + c, x + c, 0);
                s1 = e4m3_m1_dot32_avx512(drow[r] + c + 32, x + c + 32, 0);
            }
            if (mx) {
                acc[r] = _mm512_fmadd_ps(s0, _mm512_set1_ps(e8m0[srow[r][c / 32]]), acc[r]);
                acc[r] = _mm512_fmadd_ps(s1, _mm512_set1_ps(e8m0[srow[r][c / 32 + 1]]), acc[r]);
            } else {
                acc[r] = _mm512_add_ps(acc[r], _mm512_add_ps(s0, s1));
            }
        }
    }
    for (int r = 0; r < R; r++) {
        float t = _mm512_reduce_add_ps(acc[r]);
        qs_st_f32(y + r0 + r, gemv_canon_avx512(mx ? t : t * tscale));
    }
}

/* Every row of the call at M = 1 with k % 64 == 0: tiles of 4 rows, then single rows. */
static inline __attribute__((always_inline)) void
e4m3_m1_rows_avx512(const float *x, int64_t k, const gemv_rows_avx512 *w, int64_t rows,
                    const int mx, const float *e8m0, float tscale, float *y)
{
    int64_t r = 0;
    for (; r + 4 <= rows; r += 4)
        e4m3_m1_avx512(x, k, w, 4, r, rows, mx, e8m0, tscale, y);
    for (; r < rows; r++)
        e4m3_m1_avx512(x, k, w, 1, r, rows, mx, e8m0, tscale, y);
}

#endif /* QS_X86_MM_E4M3_AVX512_H */
