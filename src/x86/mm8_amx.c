/* SPDX-License-Identifier: MIT */
/*
 * Matmul with int8 activations on AMX tiles (AMX-TILE, AMX-INT8), for every format with an
 * integer kernel: INT8 (W8A8, LLM.int8), NF4, FP4, MXFP4, NVFP4, FP8 E4M3. src/ref/mm8_ref.c
 * defines the results; TDPBSSD / TDPBSUD sum exact int32 products, the float steps are the
 * reference's, so the results agree with it bit for bit.
 *
 * Each call decodes panels of 32 W rows by a chunk of columns once (mm8_panel_avx512.h: signed
 * bytes, E4M3 as three digit planes), in the layout of AMX B tiles; the A tiles are 16 rows of
 * the caller's x codes, loaded in place (a padded copy only at the end of a row or past the last
 * x row). The tile configuration is loaded at the start of every call and released at its end;
 * the caller (src/gemm/plan.c) has asked the OS for the tile state (qs_x86_amx_request).
 *
 * - Segments (NF4 / FP4 blocks, INT8 groups, MX and NVFP4 blocks, E4M3's 64 columns): for one
 *   16 x 16 output tile at a time, each segment's TDPs (one per 64 columns, or one K = 32 / 16
 *   step for MX / NVFP4) sum into a zeroed C tile, which is stored and scaled into 16 vectors of
 *   float totals held in registers over the chunk (t = t + fl(a s), or fma for the formats
 *   whose definition fuses it); two C tiles alternate, so the next segment's TDP runs while the
 *   last one's sums are converted. E4M3 sums its digit planes into three C tiles and joins them,
 *   a = c0 + 256 c1 + 65536 c2 (wrapping int32, exact at the end).
 * - Whole rows (INT8 per row or per tensor, LLM.int8, a bnb4 block holding whole rows): no step
 *   between columns, so 2 x 2 output tiles accumulate a chunk of TDPs each (A and B tiles each
 *   used twice), and the int32 sums wait in `out` between chunks; the last chunk scales them.
 */
#include <immintrin.h>
#include <stdint.h>
#include <string.h>

#include "../core/kernels.h"
#include "../ref/mm8_ref.h"
#include "../ref/ref.h"
#include "mm8_amx.h"
#include "mm8_panel_avx512.h"
#include "nan_avx512.h"

#define INLINE static inline __attribute__((always_inline))
#define TM 16 /* x rows per tile */

/* x rows [i0, i0 + 16) from column k0 of the chunk: in place where all of them and the chunk's
 * columns lie inside x (and not `copy`), else copied into pad (zero past the row's end and past
 * the last row). */
static const int8_t *x_rows(const int8_t *xq, int64_t n, int64_t m, int64_t i0, int64_t k0,
                            int64_t cols, int64_t kc, int8_t *pad, int copy, int64_t *ldx)
{
    int64_t mr = m - i0 < TM ? m - i0 : TM;
    if (mr == TM && cols == kc && !copy) {
        *ldx = n;
        return xq + i0 * n + k0;
    }
    memset(pad, 0, (size_t)(TM * kc));
    for (int64_t i = 0; i < mr; i++)
        memcpy(pad + i * kc, xq + (i0 + i) * n + k0, (size_t)cols);
    *ldx = kc;
    return pad;
}

/* Store the C tile `c` (a compile-time tile number) into buf, 16 rows of 16 int32. */
#define C_STORE(c, buf) _tile_stored(c, buf, 64)

/* ---- segments ----------------------------------------------------------------------------- */

/* C tile c = the sums of columns [c0, c1) (whole steps) of x (A tiles in tile a) against the
 * panel group's lines qg (B tiles in tile b); tile numbers are instruction immediates. */
#define SEG_SUMS(c, a, b, c0, c1)                                                                  \
    do {                                                                                           \
        _tile_zero(c);                                                                             \
        for (int64_t k_ = (c0); k_ < (c1); k_ += step) {                                           \
            _tile_loadd(a, x + k_, ldx);                                                           \
            _tile_loadd(b, qg + k_ / 4 * lines, lines);                                            \
            _tile_dpbssd(c, a, b);                                                                 \
        }                                                                                          \
    } while (0)

/* Columns [c0, c1) of segment s: c1 rounded up to whole steps (x is zero past the row's end). */
INLINE void seg_cols(int64_t s, int64_t seg, int64_t cols, int64_t step, int64_t *c0, int64_t *c1)
{
    int64_t e = (s + 1) * seg < cols ? (s + 1) * seg : cols;
    *c0 = s * seg;
    *c1 = (e + step - 1) / step * step;
}

/* The integer sums of segments s0 ... s0 + ns - 1 (ns <= 4) into cb[j * 256 ...]: up to four
 * independent C tiles in flight, their A and B loads alternating between two tile pairs. E4M3
 * (ns = 1): its three digit planes into tiles 2, 3, 4, joined (a = c0 + 256 c1 + 65536 c2). */
INLINE void seg_sums(const mm8p_fmt *f, const int8_t *x, int64_t ldx, const uint8_t *qg, int64_t s0,
                     int ns, int64_t cols, int64_t step, int32_t *cb)
{
    const int64_t lines = MM8P_NP * 4, plane = f->kc * MM8P_NP, seg = f->seg;
    int64_t c0, c1;

    if (f->planes == 3) { /* one 64-column step: d0, d1 unsigned, d2 signed */
        seg_cols(s0, seg, cols, step, &c0, &c1);
        _tile_zero(2);
        _tile_zero(3);
        _tile_zero(4);
        _tile_loadd(0, x + c0, ldx);
        _tile_loadd(1, qg + c0 / 4 * lines, lines);
        _tile_loadd(7, qg + plane + c0 / 4 * lines, lines);
        _tile_dpbsud(2, 0, 1);
        _tile_dpbsud(3, 0, 7);
        _tile_loadd(1, qg + 2 * plane + c0 / 4 * lines, lines);
        _tile_dpbssd(4, 0, 1);
        C_STORE(2, cb);
        C_STORE(3, cb + 256);
        C_STORE(4, cb + 512);
        for (int r = 0; r < 16; r++) {
            __m512i a = _mm512_load_si512(cb + 16 * r);
            a = _mm512_add_epi32(a, _mm512_slli_epi32(_mm512_load_si512(cb + 256 + 16 * r), 8));
            a = _mm512_add_epi32(a, _mm512_slli_epi32(_mm512_load_si512(cb + 512 + 16 * r), 16));
            _mm512_store_si512(cb + 16 * r, a);
        }
        return;
    }
    seg_cols(s0, seg, cols, step, &c0, &c1);
    SEG_SUMS(2, 0, 1, c0, c1);
    if (ns > 1) {
        seg_cols(s0 + 1, seg, cols, step, &c0, &c1);
        SEG_SUMS(3, 6, 7, c0, c1);
    }
    if (ns > 2) {
        seg_cols(s0 + 2, seg, cols, step, &c0, &c1);
        SEG_SUMS(4, 0, 1, c0, c1);
    }
    if (ns > 3) {
        seg_cols(s0 + 3, seg, cols, step, &c0, &c1);
        SEG_SUMS(5, 6, 7, c0, c1);
    }
    C_STORE(2, cb);
    if (ns > 1)
        C_STORE(3, cb + 256);
    if (ns > 2)
        C_STORE(4, cb + 512);
    if (ns > 3)
        C_STORE(5, cb + 768);
}

/* The totals t of the first mr rows of one 16 x 16 output tile: t = t + fl(a s) (NF4, FP4,
 * INT8, after the zero point: a - zp sum x) or t = fma(a, s, t) (MXFP4, NVFP4, E4M3). */
INLINE void seg_scale(int fused, const int32_t *c, __m512 sc, int64_t mr, __m512 t[16])
{
    for (int r = 0; r < 16 && r < mr; r++) {
        __m512 a = _mm512_cvtepi32_ps(_mm512_load_si512(c + 16 * r));
        t[r] = fused ? _mm512_fmadd_ps(a, sc, t[r]) : _mm512_add_ps(t[r], _mm512_mul_ps(a, sc));
    }
}

/* INT8 with zero points: a - zp * (sum of the row's x over the segment), in place. */
static void seg_zp(int32_t *c, const int32_t *zc, const int32_t *xs, int64_t nu, int64_t u,
                   int64_t mr)
{
    const __m512i z = _mm512_loadu_si512(zc);
    for (int64_t r = 0; r < mr; r++)
        _mm512_store_si512(
            c + 16 * r, _mm512_sub_epi32(_mm512_load_si512(c + 16 * r),
                                         _mm512_mullo_epi32(z, _mm512_set1_epi32(xs[r * nu + u]))));
}

/* One 16 x 16 output tile over the chunk's segments: x rows at x (row stride ldx; their sums xs,
 * row stride nu, from unit u0 of the chunk), the panel group's lines qg, scales scg, zero points
 * zcg (or NULL); totals in registers (in out between chunks: read unless first, finished if
 * last), the first mr rows and the columns of mk stored. */
static void seg_tile(const mm8p_fmt *f, const int8_t *x, int64_t ldx, const uint8_t *qg,
                     const float *scg, const int32_t *zcg, const int32_t *xs, int64_t nu,
                     int64_t u0, int64_t cols, int64_t step, float *out, int64_t ldo, int64_t mr,
                     __mmask16 mk, int first, int last)
{
    const int64_t seg = f->seg, nseg = (cols + seg - 1) / seg;
    const int fused = f->kind != MM8P_BNB4 && f->kind != MM8P_W8A8, batch = f->planes == 3 ? 1 : 4;
    int32_t cb[4 * 256] __attribute__((aligned(64)));
    __m512 t[16];

    for (int r = 0; r < 16; r++)
        t[r] = first || r >= mr ? _mm512_setzero_ps() : _mm512_maskz_loadu_ps(mk, out + r * ldo);
    for (int64_t s0 = 0; s0 < nseg; s0 += batch) {
        int ns = (int)(nseg - s0 < batch ? nseg - s0 : batch);
        seg_sums(f, x, ldx, qg, s0, ns, cols, step, cb);
        for (int j = 0; j < ns; j++) {
            if (zcg)
                seg_zp(cb + 256 * j, zcg + (s0 + j) * MM8P_NP, xs, nu, u0 + s0 + j, mr);
            seg_scale(fused, cb + 256 * j, _mm512_loadu_ps(scg + (s0 + j) * MM8P_NP), mr, t);
        }
    }
    for (int r = 0; r < mr; r++) {
        __m512 v = t[r];
        if (last) {
            if (f->kind == MM8P_NV)
                v = _mm512_mul_ps(v, _mm512_set1_ps(f->w->s_global));
            v = nan_canon_avx512(v);
        }
        _mm512_mask_storeu_ps(out + r * ldo, mk, v);
    }
}

/* ---- whole rows ---------------------------------------------------------------------------- */

/* The int32 sums of x tiles a0 (and a1 if two) against both panel groups over `steps` 64-column
 * steps, into cb[4][256]: (a0, g0), (a0, g1), (a1, g0), (a1, g1). */
INLINE void whole_sums(const int8_t *a0, const int8_t *a1, int64_t ldx, const uint8_t *q,
                       int64_t steps, int two, int32_t *cb)
{
    const int64_t lines = MM8P_NP * 4;

    _tile_zero(4);
    _tile_zero(5);
    _tile_zero(6);
    _tile_zero(7);
    for (int64_t j = 0; j < steps; j++) {
        _tile_loadd(2, q + 16 * j * lines, lines);
        _tile_loadd(3, q + 16 * j * lines + 64, lines);
        _tile_loadd(0, a0 + 64 * j, ldx);
        _tile_dpbssd(4, 0, 2);
        _tile_dpbssd(5, 0, 3);
        if (two) {
            _tile_loadd(1, a1 + 64 * j, ldx);
            _tile_dpbssd(6, 1, 2);
            _tile_dpbssd(7, 1, 3);
        }
    }
    C_STORE(4, cb);
    C_STORE(5, cb + 256);
    if (two) {
        C_STORE(6, cb + 512);
        C_STORE(7, cb + 768);
    }
}

/* Add one x tile's chunk sums c (two groups) to the sums in out (unless first); on the last chunk
 * scale them: t = +0 + fl((a - zp sum x) s), the NaN rule. mr rows, valid panel rows. */
static void whole_merge(const int32_t *c, const float *sc, const int32_t *zc, const int32_t *xs,
                        int64_t nu, float *out, int64_t ldo, int64_t mr, int valid, int first,
                        int last)
{
    for (int g = 0; g < 2; g++) {
        int vg = valid - 16 * g;
        __mmask16 mk = (__mmask16)(vg >= 16 ? 0xFFFF : vg <= 0 ? 0 : (1u << vg) - 1);
        __m512 s = _mm512_loadu_ps(sc + 16 * g);
        __m512i z = zc ? _mm512_loadu_si512(zc + 16 * g) : _mm512_setzero_si512();
        for (int64_t r = 0; r < mr && mk; r++) {
            int32_t *o = (int32_t *)(void *)(out + r * ldo + 16 * g);
            __m512i a = _mm512_load_si512(c + 256 * g + 16 * r);
            if (!first)
                a = _mm512_add_epi32(a, _mm512_maskz_loadu_epi32(mk, o));
            if (!last) {
                _mm512_mask_storeu_epi32(o, mk, a);
                continue;
            }
            if (zc)
                a = _mm512_sub_epi32(a, _mm512_mullo_epi32(z, _mm512_set1_epi32(xs[r * nu])));
            __m512 v = _mm512_add_ps(_mm512_setzero_ps(), _mm512_mul_ps(_mm512_cvtepi32_ps(a), s));
            _mm512_mask_storeu_ps((float *)(void *)o, mk, nan_canon_avx512(v));
        }
    }
}

/* ---- the call ------------------------------------------------------------------------------ */

static void run(const mm8p_fmt *f, const int8_t *xq, const int32_t *xsum, int64_t m, int64_t unit,
                float *out, int64_t ldo)
{
    const int64_t n = f->w->k, nu = (n + unit - 1) / unit, kc = f->kc;
    const int64_t step = f->whole || f->seg > 64 ? 64 : f->seg;
    uint8_t q[MM8P_Q_BYTES] __attribute__((aligned(64)));
    float sc[MM8P_SC_FLOATS] __attribute__((aligned(64)));
    int32_t zc[MM8P_SC_FLOATS] __attribute__((aligned(64)));
    int32_t cb[4 * 256] __attribute__((aligned(64)));
    int8_t pad[2][TM * MM8P_KC_MAX] __attribute__((aligned(64)));
    int32_t *z = f->kind == MM8P_W8A8 && f->w->zp ? zc : NULL;

    mm8_amx_start(step, f->whole);
    for (int64_t pr = 0; pr < f->rows; pr += MM8P_NP) {
        int valid = (int)(f->rows - pr < MM8P_NP ? f->rows - pr : MM8P_NP);
        for (int64_t k0 = 0; k0 < n; k0 += kc) {
            int64_t cols = mm8p_cols(f, k0);
            int first = k0 == 0, last = k0 + kc >= n;
            int64_t pf_pr, pf_k;
            mm8p_next_panel(f, pr, k0, &pf_pr, &pf_k);
            mm8p_panel(f, pr, k0, q, sc, z, pf_pr, pf_k);
            if (f->whole) {
                int64_t steps = (cols + 63) / 64;
                for (int64_t i0 = 0; i0 < m; i0 += 2 * TM) {
                    int two = i0 + TM < m, copy = cols < kc || i0 + 2 * TM > m;
                    int64_t ldx;
                    /* both tiles in place, or both copied: whole_sums takes one stride */
                    const int8_t *a0 = x_rows(xq, n, m, i0, k0, cols, kc, pad[0], copy, &ldx);
                    const int8_t *a1 =
                        two ? x_rows(xq, n, m, i0 + TM, k0, cols, kc, pad[1], copy, &ldx) : NULL;
                    whole_sums(a0, a1, ldx, q, steps, two, cb);
                    for (int h = 0; h <= two; h++) {
                        int64_t i = i0 + h * TM, mr = m - i < TM ? m - i : TM;
                        whole_merge(cb + 512 * h, sc, z, xsum + i * nu, nu, out + i * ldo + pr, ldo,
                                    mr, valid, first, last);
                    }
                }
                continue;
            }
            for (int64_t i0 = 0; i0 < m; i0 += TM) {
                int64_t ldx, mr = m - i0 < TM ? m - i0 : TM;
                const int8_t *a = x_rows(xq, n, m, i0, k0, cols, kc, pad[0], 0, &ldx);
                for (int g = 0; g < 2 && 16 * g < valid; g++) {
                    int vg = valid - 16 * g;
                    __mmask16 mk = (__mmask16)(vg >= 16 ? 0xFFFF : (1u << vg) - 1);
                    seg_tile(f, a, ldx, q + 64 * g, sc + 16 * g, z ? z + 16 * g : NULL,
                             xsum + i0 * nu, nu, k0 / unit, cols, step,
                             out + i0 * ldo + pr + 16 * g, ldo, mr, mk, first, last);
                }
            }
        }
    }
    _tile_release();
}

/* One entry: the reference for K = 0 (every sum empty), the fallback for layouts the tiles do
 * not take, else the tiles. */
static void amx_a8(qs_mm_a8_fn *ref, qs_mm_a8_fn *fallback, int kind, const int8_t *book,
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
    if (!mm8_amx_setup(&f, kind, book, w, r0, rows)) {
        fallback(xq, xsum, m, w, r0, rows, out, ldo);
        return;
    }
    run(&f, xq, xsum, m, unit > 0 ? unit : w->group, out, ldo);
}

void qs_mm_w8a8__amx_16x32x64(const int8_t *xq, const int32_t *xsum, int64_t m,
                              const qs_mm_weight *w, int64_t r0, int64_t rows, float *out,
                              int64_t ldo)
{
    amx_a8(qs_mm_w8a8__ref, qs_mm_w8a8__avx512vnni_4x4x64, MM8P_W8A8, NULL, 0, xq, xsum, m, w, r0,
           rows, out, ldo);
}

void qs_mm_nf4a8__amx_16x32x64(const int8_t *xq, const int32_t *xsum, int64_t m,
                               const qs_mm_weight *w, int64_t r0, int64_t rows, float *out,
                               int64_t ldo)
{
    amx_a8(qs_mm_nf4a8__ref, qs_mm_nf4a8__avx512vnni_6x32x4, MM8P_BNB4, qs_nf4_codebook_i8, 64, xq,
           xsum, m, w, r0, rows, out, ldo);
}

void qs_mm_fp4a8__amx_16x32x64(const int8_t *xq, const int32_t *xsum, int64_t m,
                               const qs_mm_weight *w, int64_t r0, int64_t rows, float *out,
                               int64_t ldo)
{
    amx_a8(qs_mm_fp4a8__ref, qs_mm_fp4a8__avx512vnni_6x32x4, MM8P_BNB4, qs_fp4_codebook_i8, 64, xq,
           xsum, m, w, r0, rows, out, ldo);
}

void qs_mm_mxfp4a8__amx_16x32x32(const int8_t *xq, const int32_t *xsum, int64_t m,
                                 const qs_mm_weight *w, int64_t r0, int64_t rows, float *out,
                                 int64_t ldo)
{
    amx_a8(qs_mm_mxfp4a8__ref, qs_mm_mxfp4a8__ref, MM8P_MX, qs_e2m1_i8x2, 32, xq, xsum, m, w, r0,
           rows, out, ldo);
}

void qs_mm_nvfp4a8__amx_16x32x16(const int8_t *xq, const int32_t *xsum, int64_t m,
                                 const qs_mm_weight *w, int64_t r0, int64_t rows, float *out,
                                 int64_t ldo)
{
    amx_a8(qs_mm_nvfp4a8__ref, qs_mm_nvfp4a8__ref, MM8P_NV, qs_e2m1_i8x2, 16, xq, xsum, m, w, r0,
           rows, out, ldo);
}

void qs_mm_e4m3a8__amx_16x32x64(const int8_t *xq, const int32_t *xsum, int64_t m,
                                const qs_mm_weight *w, int64_t r0, int64_t rows, float *out,
                                int64_t ldo)
{
    amx_a8(qs_mm_e4m3a8__ref, qs_mm_e4m3a8__ref, MM8P_E4M3, NULL, QS_MM_E4M3A8_SEG, xq, xsum, m, w,
           r0, rows, out, ldo);
}
