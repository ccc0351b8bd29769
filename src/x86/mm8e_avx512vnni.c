/* SPDX-License-Identifier: MIT */
/*
 * MXFP4 and NVFP4 with int8 activations for few x rows (GEMV, small batches) on AVX512-VNNI,
 * lanes over k. src/ref/mm8_ref.c defines the results; the integer sums are exact and the float
 * steps the reference's, so the results agree with it bit for bit.
 *
 * A step is 64 columns of 4 W rows: 32 code bytes per row through a vpshufb table of the doubled
 * E2M1 values plus 128 (mm8_panel_avx512.h's nibble decode, in element order, so the x codes
 * are used as they lie), one vpdpbusd per W row and x row. The 128-bit lane j of a row's sums
 * then covers columns 16j ... 16j + 15: one NVFP4 block, half an MX block. The four rows' sums
 * are reduced together (two unpack steps) into lane j = [row 0 ... row 3] of block j (MX: lane
 * pairs added), corrected by -128 times the block's sum of x (the caller's xsum), converted,
 * and each block's step t = fma(a, d, t) runs on the four rows at once, lane by lane in
 * ascending blocks as the reference does. Blocks past the row's end take no step. No transpose
 * and no horizontal sum per block: the weights' decode is a load, three integer operations and
 * a table lookup per 64 elements. Many x rows go to mm8n_avx512vnni.c, which decodes once for
 * all of them.
 */
#include <immintrin.h>
#include <stdint.h>
#include <string.h>

#include "../core/kernels.h"
#include "../ref/mm8_ref.h"
#include "../ref/ref.h"
#include "mm8_panel_avx512.h"
#include "nan_avx512.h"

#define INLINE static inline __attribute__((always_inline))
#define XB 4 /* x rows sharing one decode */

/* The four rows' sums a[r] reduced: 128-bit lane j holds [row 0 ... row 3] of lane j's sums. */
INLINE __m512i reduce4(const __m512i a[4])
{
    __m512i u01 =
        _mm512_add_epi32(_mm512_unpacklo_epi32(a[0], a[1]), _mm512_unpackhi_epi32(a[0], a[1]));
    __m512i u23 =
        _mm512_add_epi32(_mm512_unpacklo_epi32(a[2], a[3]), _mm512_unpackhi_epi32(a[2], a[3]));
    return _mm512_add_epi32(_mm512_unpacklo_epi64(u01, u23), _mm512_unpackhi_epi64(u01, u23));
}

/* One 128-bit lane j of v (j a constant). */
#define LANE(v, j) ((j) == 0 ? _mm512_castps512_ps128(v) : _mm512_extractf32x4_ps(v, (j)))

/* x rows [0, mi) (row stride n, sums xs with row stride nu) against the 4 W rows at rp (nr of
 * them real) with scale bytes at sp[r] (block b of row r at sp[r][b]), totals into out. */
static void rows4(int nv, const int8_t *x, int64_t n, const int32_t *xs, int64_t nu, int mi,
                  const uint8_t *const rp[4], const uint8_t *const sp[4], int nr, __m512i tab,
                  float s_global, float *out, int64_t ldo)
{
    const int64_t block = nv ? 16 : 32;
    __m128 t[XB];

    for (int i = 0; i < mi; i++)
        t[i] = _mm_setzero_ps();
    for (int64_t k = 0; k < n; k += 64) {
        int64_t len = n - k < 64 ? n - k : 64, nblk = (len + block - 1) / block;
        __m512i wv[4];
        float d[16];
        for (int r = 0; r < 4; r++)
            wv[r] = mm8p_nibbles(rp[r] + k / 2, (len + 1) / 2, tab, 0);
        /* block scales, halved (exact), lane by block: d[4 j + r] */
        for (int64_t b = 0; b < nblk; b++)
            for (int r = 0; r < 4; r++) {
                uint8_t s = sp[r][k / block + b];
                d[4 * b + r] = (nv ? qs_ue4m3_values[s & 0x7F] : qs_e8m0_decode_inline(s)) * 0.5f;
            }
        for (int i = 0; i < mi; i++) {
            __m512i xv = _mm512_maskz_loadu_epi8(mm8p_mask(len), x + i * n + k), acc[4];
            for (int r = 0; r < 4; r++)
                acc[r] = _mm512_dpbusd_epi32(_mm512_setzero_si512(), wv[r], xv);
            __m512i a = reduce4(acc);
            if (!nv) /* an MX block is two lanes: lane 2b gets the block's whole sum */
                a = _mm512_add_epi32(a, _mm512_shuffle_i32x4(a, a, _MM_SHUFFLE(2, 3, 0, 1)));
            int32_t sx[4] = {0, 0, 0, 0};
            for (int64_t b = 0; b < nblk; b++)
                sx[b] = xs[i * nu + k / block + b];
            /* the weights' +128 times the block's sum of x, in the lane of the block */
            __m512i corr =
                nv ? _mm512_setr_epi32(sx[0], sx[0], sx[0], sx[0], sx[1], sx[1], sx[1], sx[1],
                                       sx[2], sx[2], sx[2], sx[2], sx[3], sx[3], sx[3], sx[3])
                   : _mm512_setr_epi32(sx[0], sx[0], sx[0], sx[0], 0, 0, 0, 0, sx[1], sx[1], sx[1],
                                       sx[1], 0, 0, 0, 0);
            __m512 af = _mm512_cvtepi32_ps(_mm512_sub_epi32(a, _mm512_slli_epi32(corr, 7)));
            if (nv) {
                __m512 dv = _mm512_loadu_ps(d);
                t[i] = _mm_fmadd_ps(LANE(af, 0), LANE(dv, 0), t[i]);
                if (nblk > 1)
                    t[i] = _mm_fmadd_ps(LANE(af, 1), LANE(dv, 1), t[i]);
                if (nblk > 2)
                    t[i] = _mm_fmadd_ps(LANE(af, 2), LANE(dv, 2), t[i]);
                if (nblk > 3)
                    t[i] = _mm_fmadd_ps(LANE(af, 3), LANE(dv, 3), t[i]);
            } else {
                t[i] = _mm_fmadd_ps(LANE(af, 0), _mm_loadu_ps(d), t[i]);
                if (nblk > 1)
                    t[i] = _mm_fmadd_ps(LANE(af, 2), _mm_loadu_ps(d + 4), t[i]);
            }
        }
    }
    for (int i = 0; i < mi; i++) {
        __m128 v = nv ? _mm_mul_ps(t[i], _mm_set1_ps(s_global)) : t[i];
        v = _mm512_castps512_ps128(nan_canon_avx512(_mm512_castps128_ps512(v)));
        _mm_mask_storeu_ps(out + i * ldo, (__mmask8)((1u << nr) - 1), v);
    }
}

static void e2m1_a8(int nv, const int8_t *xq, const int32_t *xsum, int64_t m, const qs_mm_weight *w,
                    int64_t r0, int64_t rows, float *out, int64_t ldo)
{
    const int64_t n = w->k, nu = (n + w->group - 1) / w->group;
    int8_t t8[16];

    for (int c = 0; c < 16; c++)
        t8[c] = (int8_t)(qs_e2m1_i8x2[c] + 128 - 256 * (qs_e2m1_i8x2[c] >= 0));
    __m512i tab = _mm512_broadcast_i32x4(_mm_loadu_si128((const __m128i *)t8));
    for (int64_t r = 0; r < rows; r += 4) {
        int nr = (int)(rows - r < 4 ? rows - r : 4);
        const uint8_t *rp[4], *sp[4];
        for (int j = 0; j < 4; j++) {
            int64_t row = r0 + r + (j < nr ? j : nr - 1);
            rp[j] = (const uint8_t *)w->data + row * w->row_bytes;
            sp[j] = (const uint8_t *)w->scale + row * w->sstride;
        }
        for (int64_t i = 0; i < m; i += XB) {
            int mi = (int)(m - i < XB ? m - i : XB);
            rows4(nv, xq + i * n, n, xsum + i * nu, nu, mi, rp, sp, nr, tab, w->s_global,
                  out + i * ldo + r, ldo);
        }
    }
}

void qs_mm_mxfp4a8__avx512vnni_4x4x64(const int8_t *xq, const int32_t *xsum, int64_t m,
                                      const qs_mm_weight *w, int64_t r0, int64_t rows, float *out,
                                      int64_t ldo)
{
    e2m1_a8(0, xq, xsum, m, w, r0, rows, out, ldo);
}

void qs_mm_nvfp4a8__avx512vnni_4x4x64(const int8_t *xq, const int32_t *xsum, int64_t m,
                                      const qs_mm_weight *w, int64_t r0, int64_t rows, float *out,
                                      int64_t ldo)
{
    e2m1_a8(1, xq, xsum, m, w, r0, rows, out, ldo);
}
