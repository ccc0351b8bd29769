/* SPDX-License-Identifier: MIT */
/*
 * Matmul with int8 activations for AVX-512 VNNI, lanes over W rows: the kernel for several x
 * rows (small M and the GEMM), for NF4, FP4, MXFP4, NVFP4 and FP8 E4M3 weights. src/ref/mm8_ref.c
 * defines the results; the integer sums are exact and the float steps the reference's, so the
 * results agree with it bit for bit.
 *
 * Each call decodes panels of 32 W rows by a chunk of columns once (mm8_panel_avx512.h: the
 * VNNI layout, unsigned bytes w + 128), then runs every x row of the call over them: a register
 * tile of up to 6 x rows by the panel's 32 rows keeps one int32 sum per (x row, W row) in a
 * lane, 12 vectors, for a whole segment: per k-quad, two 64-byte panel lines and one broadcast
 * x dword per x row feed 12 vpdpbusd. A segment's sums start at -128 times the segment's sum of
 * x (the caller's xsum), which takes the +128 of the weights back out. At the end of a segment
 * each sum is converted once and scaled into the tile's 12 float totals, which stay in registers
 * across the chunk (NF4 / FP4: t = t + fl(a s); the others: t = fma(a, s, t)); between chunks
 * they wait in `out`. FP8 E4M3 runs its three digit planes through the same sums by Horner's
 * rule, a = (S2 256 + S1) 256 + S0 in wrapping int32 arithmetic, whose end value is exact.
 *
 * Unlike the older kernels of mm8_avx512vnni.c (lanes over k, reduced across lanes at the end of
 * every segment) nothing is reduced horizontally, and a W element is decoded once per call
 * whatever the number of x rows. Layouts it does not take (segments longer than 512 columns, or
 * NF4 / FP4 rows that start inside a byte or cut blocks unevenly) go to the older kernel.
 */
#include <immintrin.h>
#include <stdint.h>
#include <string.h>

#include "../core/kernels.h"
#include "../ref/mm8_ref.h"
#include "../ref/ref.h"
#include "mm8_panel_avx512.h"
#include "nan_avx512.h"

#define MR 6 /* x rows per register tile */
#define INLINE static inline __attribute__((always_inline))

/* One register tile: x rows [0, mr) of x (row stride ldx, the chunk's first column), xsum row
 * stride nu (units of `unit` columns from column k0 of the row), against the panel q / sc of
 * `cols` columns; totals in out (row stride ldo) for the panel's `valid` rows, read first unless
 * `first`, finished (NVFP4's tensor scale, the NaN rule) if `last`. */
INLINE void tile(const int mr, const int planes, const mm8p_fmt *f, const uint8_t *q,
                 const float *sc, const int8_t *x, int64_t ldx, const int32_t *xs, int64_t nu,
                 int64_t unit, int64_t k0, int64_t cols, float *out, int64_t ldo, int valid,
                 int first, int last)
{
    const int64_t lines = MM8P_NP * 4, plane = f->kc * MM8P_NP, seg = f->seg;
    const __mmask16 mk0 = (__mmask16)(valid >= 16 ? 0xFFFF : (1u << valid) - 1);
    const __mmask16 mk1 = (__mmask16)(valid >= 32   ? 0xFFFF
                                      : valid <= 16 ? 0
                                                    : (1u << (valid - 16)) - 1);
    const int fused = f->kind != MM8P_BNB4;
    __m512 t[MR][2];

    for (int i = 0; i < mr; i++) {
        t[i][0] = first ? _mm512_setzero_ps() : _mm512_maskz_loadu_ps(mk0, out + i * ldo);
        t[i][1] = first ? _mm512_setzero_ps() : _mm512_maskz_loadu_ps(mk1, out + i * ldo + 16);
    }
    for (int64_t s = 0; s * seg < cols; s++) {
        int64_t c0 = s * seg, c1 = c0 + seg < cols ? c0 + seg : cols;
        int64_t u0 = (k0 + c0) / unit, u1 = (k0 + c1 + unit - 1) / unit;
        int64_t j0 = c0 / 4, j1 = (c1 + 3) / 4;
        __m512i acc[MR][2];

        for (int i = 0; i < mr; i++) {
            int32_t sx = 0;
            for (int64_t u = u0; u < u1; u++)
                sx += xs[i * nu + u];
            /* the weights' offset (+128; E4M3: +4 on its top digit) times the sum of x */
            acc[i][0] = acc[i][1] = _mm512_set1_epi32(-(planes == 3 ? 4 : 128) * sx);
        }
        for (int p = planes - 1; p >= 0; p--) {
            const uint8_t *qp = q + p * plane;
            if (p < planes - 1)
                for (int i = 0; i < mr; i++) {
                    acc[i][0] = _mm512_slli_epi32(acc[i][0], 8);
                    acc[i][1] = _mm512_slli_epi32(acc[i][1], 8);
                }
            for (int64_t j = j0; j < j1; j++) {
                __m512i w0 = _mm512_loadu_si512(qp + j * lines);
                __m512i w1 = _mm512_loadu_si512(qp + j * lines + 64);
                for (int i = 0; i < mr; i++) {
                    int32_t xd;
                    memcpy(&xd, x + i * ldx + 4 * j, 4);
                    __m512i xb = _mm512_set1_epi32(xd);
                    acc[i][0] = _mm512_dpbusd_epi32(acc[i][0], w0, xb);
                    acc[i][1] = _mm512_dpbusd_epi32(acc[i][1], w1, xb);
                }
            }
        }
        __m512 s0 = _mm512_loadu_ps(sc + s * MM8P_NP), s1 = _mm512_loadu_ps(sc + s * MM8P_NP + 16);
        for (int i = 0; i < mr; i++) {
            __m512 a0 = _mm512_cvtepi32_ps(acc[i][0]), a1 = _mm512_cvtepi32_ps(acc[i][1]);
            if (fused) {
                t[i][0] = _mm512_fmadd_ps(a0, s0, t[i][0]);
                t[i][1] = _mm512_fmadd_ps(a1, s1, t[i][1]);
            } else {
                t[i][0] = _mm512_add_ps(t[i][0], _mm512_mul_ps(a0, s0));
                t[i][1] = _mm512_add_ps(t[i][1], _mm512_mul_ps(a1, s1));
            }
        }
    }
    for (int i = 0; i < mr; i++)
        for (int h = 0; h < 2; h++) {
            __m512 v = t[i][h];
            if (last) {
                if (f->kind == MM8P_NV)
                    v = _mm512_mul_ps(v, _mm512_set1_ps(f->w->s_global));
                v = nan_canon_avx512(v);
            }
            _mm512_mask_storeu_ps(out + i * ldo + 16 * h, h ? mk1 : mk0, v);
        }
}

/* Every x row against the call's W rows, panel by panel. */
static void run(const mm8p_fmt *f, const int8_t *xq, const int32_t *xsum, int64_t m, int64_t unit,
                float *out, int64_t ldo)
{
    const int64_t n = f->w->k, nu = (n + unit - 1) / unit;
    uint8_t q[MM8P_Q_BYTES] __attribute__((aligned(64)));
    float sc[MM8P_SC_FLOATS] __attribute__((aligned(64)));
    int8_t xpad[MR * MM8P_KC_MAX];

    for (int64_t pr = 0; pr < f->rows; pr += MM8P_NP) {
        int valid = (int)(f->rows - pr < MM8P_NP ? f->rows - pr : MM8P_NP);
        for (int64_t k0 = 0; k0 < n; k0 += f->kc) {
            int64_t cols = mm8p_cols(f, k0);
            int64_t pf_pr, pf_k;
            mm8p_next_panel(f, pr, k0, &pf_pr, &pf_k);
            mm8p_panel(f, pr, k0, q, sc, NULL, pf_pr, pf_k);
            for (int64_t i0 = 0; i0 < m; i0 += MR) {
                int mr = (int)(m - i0 < MR ? m - i0 : MR);
                const int8_t *x = xq + i0 * n + k0;
                int64_t ldx = n;
                if (cols < f->kc) { /* the row's end: x up to the chunk's end, zero past it */
                    memset(xpad, 0, sizeof xpad);
                    for (int i = 0; i < mr; i++)
                        memcpy(xpad + i * f->kc, x + i * n, (size_t)cols);
                    x = xpad;
                    ldx = f->kc;
                }
                const int32_t *xs = xsum + i0 * nu;
                float *o = out + i0 * ldo + pr;
                int first = k0 == 0, last = k0 + f->kc >= n;
#define TILE(R)                                                                                    \
    case R:                                                                                        \
        if (f->planes == 3)                                                                        \
            tile(R, 3, f, q, sc, x, ldx, xs, nu, unit, k0, cols, o, ldo, valid, first, last);      \
        else                                                                                       \
            tile(R, 1, f, q, sc, x, ldx, xs, nu, unit, k0, cols, o, ldo, valid, first, last);      \
        break;
                switch (mr) {
                    TILE(6)
                    TILE(5)
                    TILE(4)
                    TILE(3)
                    TILE(2)
                    TILE(1)
                }
#undef TILE
            }
        }
    }
}

/* The panel's format for a call, or 0 if this kernel does not take the layout. */
static int setup(mm8p_fmt *f, int kind, const int8_t *book, const qs_mm_weight *w, int64_t r0,
                 int64_t rows)
{
    int8_t t8[16];

    memset(f, 0, sizeof *f);
    f->kind = kind;
    f->planes = kind == MM8P_E4M3 ? 3 : 1;
    f->bias = 128;
    f->w = w;
    f->r0 = r0;
    f->rows = rows;
    switch (kind) {
    case MM8P_BNB4: {
        /* rows on whole bytes and whole 64-column blocks: block a multiple of 64 dividing K */
        if (w->k % 2 != 0 || w->group % 64 != 0 || w->k % w->group != 0 || w->group > MM8P_KC_MAX)
            return 0;
        f->seg = w->group;
        break;
    }
    case MM8P_MX: f->seg = 32; break;
    case MM8P_NV: f->seg = 16; break;
    default: f->seg = QS_MM_E4M3A8_SEG; break;
    }
    f->kc = f->seg > MM8P_KC ? f->seg : MM8P_KC;
    if (book) {
        for (int c = 0; c < 16; c++)
            t8[c] = (int8_t)(book[c] + 128 - 256 * (book[c] >= 0));
        f->tab = _mm512_broadcast_i32x4(_mm_loadu_si128((const __m128i *)t8));
    }
    if (kind == MM8P_E4M3)
        f->u = qs_ld_f32((const float *)w->scale) * 0x1p-9f;
    return 1;
}

/* One entry: the reference for K = 0 (every sum empty: t = +0, NVFP4's 0 * s_global), the
 * fallback for layouts this kernel does not take, else the panels. */
static void vnni_a8(qs_mm_a8_fn *ref, qs_mm_a8_fn *fallback, int kind, const int8_t *book,
                    int64_t unit, const int8_t *xq, const int32_t *xsum, int64_t m,
                    const qs_mm_weight *w, int64_t r0, int64_t rows, float *out, int64_t ldo)
{
    mm8p_fmt f;

    if (m == 0 || rows == 0)
        return;
    if (w->k == 0) {
        ref(xq, xsum, m, w, r0, rows, out, ldo);
        return;
    }
    if (!setup(&f, kind, book, w, r0, rows)) {
        fallback(xq, xsum, m, w, r0, rows, out, ldo);
        return;
    }
    run(&f, xq, xsum, m, unit, out, ldo);
}

void qs_mm_nf4a8__avx512vnni_6x32x4(const int8_t *xq, const int32_t *xsum, int64_t m,
                                    const qs_mm_weight *w, int64_t r0, int64_t rows, float *out,
                                    int64_t ldo)
{
    vnni_a8(qs_mm_nf4a8__ref, qs_mm_nf4a8__avx512vnni_4x4x64, MM8P_BNB4, qs_nf4_codebook_i8, 64, xq,
            xsum, m, w, r0, rows, out, ldo);
}

void qs_mm_fp4a8__avx512vnni_6x32x4(const int8_t *xq, const int32_t *xsum, int64_t m,
                                    const qs_mm_weight *w, int64_t r0, int64_t rows, float *out,
                                    int64_t ldo)
{
    vnni_a8(qs_mm_fp4a8__ref, qs_mm_fp4a8__avx512vnni_4x4x64, MM8P_BNB4, qs_fp4_codebook_i8, 64, xq,
            xsum, m, w, r0, rows, out, ldo);
}

void qs_mm_mxfp4a8__avx512vnni_6x32x4(const int8_t *xq, const int32_t *xsum, int64_t m,
                                      const qs_mm_weight *w, int64_t r0, int64_t rows, float *out,
                                      int64_t ldo)
{
    vnni_a8(qs_mm_mxfp4a8__ref, qs_mm_mxfp4a8__ref, MM8P_MX, qs_e2m1_i8x2, 32, xq, xsum, m, w, r0,
            rows, out, ldo);
}

void qs_mm_nvfp4a8__avx512vnni_6x32x4(const int8_t *xq, const int32_t *xsum, int64_t m,
                                      const qs_mm_weight *w, int64_t r0, int64_t rows, float *out,
                                      int64_t ldo)
{
    vnni_a8(qs_mm_nvfp4a8__ref, qs_mm_nvfp4a8__ref, MM8P_NV, qs_e2m1_i8x2, 16, xq, xsum, m, w, r0,
            rows, out, ldo);
}

void qs_mm_e4m3a8__avx512vnni_6x32x4(const int8_t *xq, const int32_t *xsum, int64_t m,
                                     const qs_mm_weight *w, int64_t r0, int64_t rows, float *out,
                                     int64_t ldo)
{
    vnni_a8(qs_mm_e4m3a8__ref, qs_mm_e4m3a8__ref, MM8P_E4M3, NULL, QS_MM_E4M3A8_SEG, xq, xsum, m, w,
            r0, rows, out, ldo);
}
