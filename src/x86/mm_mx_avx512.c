/* SPDX-License-Identifier: MIT */
/*
 * Fused MXFP4, MXFP8 and NVFP4 GEMV with f32 activations for AVX-512 F/BW/DQ/VL
 * (include/qsparse/matmul.h; the reference is src/ref/matmul_ref.c). E2M1 codes (element 2i in
 * the low nibble of byte i) look up their value in a 16-entry register table with vpermps, E4M3
 * codes decode through VCVTPH2PS (an f16 of value * 2^-8, times 2^8); each block's 16-lane sum
 * gets the block scale once: the E8M0 power of two (NaN for 0xFF) for MX, fl(E4M3(S & 0x7F) *
 * s_global) for NVFP4, as the reference forms it (both from a table formed once per call).
 * M = 1 over whole 32-column steps has its own loop (e2m1_m1_avx512: two permutes per 32 E2M1
 * codes against x split into even and odd columns); other tiles and tails: mm_gemv_avx512.h.
 */
#include <immintrin.h>

#include "../core/kernels.h"
#include "../ref/ref.h"
#include "minifloat_avx512.h"
#include "mm_gemv_avx512.h"
#include "mm_e4m3_avx512.h"

static inline __m512 e2m1_dec_avx512(const uint8_t *row, int64_t c, int32_t aux, __mmask16 mask,
                                     const void *fmt)
{
    (void)aux;
    (void)fmt;
    return _mm512_permutexvar_ps(gemv_nibbles_avx512(row + c / 2, mask, 0),
                                 _mm512_loadu_ps(qs_e2m1_values));
}

static inline __m512 e4m3_dec_avx512(const uint8_t *row, int64_t c, int32_t aux, __mmask16 mask,
                                     const void *fmt)
{
    (void)aux;
    (void)fmt;
    /* value * 2^-8 through VCVTPH2PS (minifloat_avx512.h), times 2^8: exact, and fewer
     * operations than the integer field moves on 16 32-bit lanes */
    __m128i b = mask == 0xFFFF ? _mm_loadu_si128((const __m128i *)(row + c))
                               : _mm_maskz_loadu_epi8(mask, row + c);
    return _mm512_mul_ps(e4m3_decode16_f16_avx512(b), _mm512_set1_ps(256.0f));
}

/* fmt: the 256 E8M0 values, formed once per call (a load per block, no compares). */
static inline float mx_scl_avx512(const uint8_t *srow, int64_t row, int64_t s, int32_t *aux,
                                  const void *fmt)
{
    (void)row;
    *aux = 0;
    return ((const float *)fmt)[srow[s]];
}

static void e8m0_table_avx512(float *t)
{
    for (int i = 0; i < 256; i++)
        t[i] = gemv_e8m0_avx512((uint8_t)i);
}

/* fmt: the 128 block scales fl(E4M3(i) * s_global), formed once per call (a load per block
 * instead of a decode and a multiply; the same bits). */
static inline float nvfp4_scl_avx512(const uint8_t *srow, int64_t row, int64_t s, int32_t *aux,
                                     const void *fmt)
{
    (void)row;
    *aux = 0;
    return ((const float *)fmt)[srow[s] & 0x7F];
}

/* acc + s * (sa in lanes 0-7, sb in lanes 8-15): NVFP4's two blocks of one 32-column step, the
 * scales broadcast from the table (load ports) and merged by a mask. With may_inf (a tensor scale
 * large enough that a block scale can overflow) an infinite scale multiplies its half's total
 * instead (added to the half's first lane), as the reference scales a segment's sum
 * (gemv_scale_add_avx512 says why). */
static inline __m512 nv_scale_add_avx512(__m512 acc, __m512 s, const float *pa, const float *pb,
                                         int may_inf)
{
    float sa = *pa, sb = *pb;
    if (may_inf &&
        __builtin_expect((sa - sa != 0.0f && sa == sa) || (sb - sb != 0.0f && sb == sb), 0)) {
        float t[16], a[16];
        _mm512_storeu_ps(t, s);
        _mm512_storeu_ps(a, acc);
        for (int h = 0; h < 2; h++) {
            float sc = h ? sb : sa;
            if (sc - sc != 0.0f && sc == sc) {
                float sum = 0.0f;
                for (int i = 0; i < 8; i++)
                    sum += t[8 * h + i];
                a[8 * h] += sum * sc;
            } else {
                for (int i = 0; i < 8; i++)
                    a[8 * h + i] = __builtin_fmaf(t[8 * h + i], sc, a[8 * h + i]);
            }
        }
        return _mm512_loadu_ps(a);
    }
    __m512 sv = _mm512_mask_mov_ps(_mm512_set1_ps(sa), (__mmask16)0xFF00, _mm512_set1_ps(sb));
    return _mm512_fmadd_ps(s, sv, acc);
}

/*
 * M = 1 over R rows (R constant) of E2M1 codes, 32 columns a step: one 16-byte load per row
 * widened to 16 lanes (byte i in lane i: element 2i in its low nibble, 2i + 1 in its high one),
 * two vpermps against the E2M1 table (vpermps reads the low 4 bits of each lane, so the even
 * elements need no mask and the odd ones one shift), x split once per step into its even and odd
 * columns for all R rows. MX blocks of 32 are one step; NVFP4's two blocks of 16 are the step's
 * lane halves (bytes 0-7 and 8-15), scaled by a vector of their two scales. stab: the 256 E8M0
 * values (MX) or the 128 NVFP4 block scales fl(E4M3(i) * s_global). Rows of whole steps only.
 */
static inline __attribute__((always_inline)) void
e2m1_m1_avx512(const float *x, int64_t k, const gemv_rows_avx512 *w, const int R, int64_t r0,
               int64_t rows, const int nv, const int may_inf, const float *stab, float *y)
{
    const __m512i ie = _mm512_setr_epi32(0, 2, 4, 6, 8, 10, 12, 14, 16, 18, 20, 22, 24, 26, 28, 30);
    const __m512i io = _mm512_add_epi32(ie, _mm512_set1_epi32(1));
    const __m512 tab = _mm512_loadu_ps(qs_e2m1_values);
    const uint8_t *drow[4], *srow[4];
    __m512 acc[4];
    gemv_pf_avx512 pf;

    gemv_pf_init_avx512(&pf, w, k / 2, r0, R, rows); /* one prefetch step per 32 columns */
    for (int r = 0; r < R; r++) {
        drow[r] = w->data + (r0 + r) * w->dstride;
        srow[r] = w->scale + (r0 + r) * w->sstride;
        acc[r] = _mm512_setzero_ps();
    }
    for (int64_t c = 0; c < k; c += 32) {
        __m512 x0 = _mm512_loadu_ps(x + c), x1 = _mm512_loadu_ps(x + c + 16);
        __m512 xe = _mm512_permutex2var_ps(x0, ie, x1), xo = _mm512_permutex2var_ps(x0, io, x1);
        gemv_pf_step_avx512(&pf);
        for (int r = 0; r < R; r++) {
            __m512i q = _mm512_cvtepu8_epi32(_mm_loadu_si128((const __m128i *)(drow[r] + c / 2)));
            __m512 s = _mm512_mul_ps(_mm512_permutexvar_ps(q, tab), xe);
            s = _mm512_fmadd_ps(_mm512_permutexvar_ps(_mm512_srli_epi32(q, 4), tab), xo, s);
            if (nv) /* E8M0 values are never infinite: MX needs no test */
                acc[r] = nv_scale_add_avx512(acc[r], s, &stab[srow[r][c / 16] & 0x7F],
                                             &stab[srow[r][c / 16 + 1] & 0x7F], may_inf);
            else
                acc[r] = _mm512_fmadd_ps(s, _mm512_set1_ps(stab[srow[r][c / 32]]), acc[r]);
        }
    }
    for (int r = 0; r < R; r++)
        qs_st_f32(y + r0 + r, gemv_canon_avx512(_mm512_reduce_add_ps(acc[r])));
}

/* The call: M = 1 with whole 32-column steps through e2m1_m1_avx512 (tiles of 4 rows, then
 * single rows), everything else through the tile driver. */
static inline __attribute__((always_inline)) void
e2m1_gemv_avx512(const gemv_rows_avx512 *wr, int64_t k, int nv, const float *stab, int64_t rows,
                 const float *x, int64_t ldx, int64_t m, float *y, int64_t ldy)
{
    if (m == 1 && k % 32 == 0) {
        /* a block scale is at most 448 * |s_global| (NVFP4): finite unless that overflows */
        int may_inf = 0;
        for (int i = 0; nv && i < 127; i++)
            may_inf |= stab[i] - stab[i] != 0.0f && stab[i] == stab[i];
        int64_t r = 0;
        if (may_inf) {
            for (; r + 4 <= rows; r += 4)
                e2m1_m1_avx512(x, k, wr, 4, r, rows, nv, 1, stab, y);
        } else {
            for (; r + 4 <= rows; r += 4)
                e2m1_m1_avx512(x, k, wr, 4, r, rows, nv, 0, stab, y);
        }
        for (; r < rows; r++)
            e2m1_m1_avx512(x, k, wr, 1, r, rows, nv, may_inf, stab, y);
        return;
    }
    gemv_avx512(x, ldx, m, k, wr, rows, e2m1_dec_avx512, nv ? nvfp4_scl_avx512 : mx_scl_avx512,
                stab, y, ldy);
}

void qs_mm_gemv_mxfp4__avx512_1x4x16(const qs_mm_weight *w, int64_t r0, int64_t rows,
                                     const float *x, int64_t ldx, int64_t m, float *y, int64_t ldy)
{
    gemv_rows_avx512 wr = gemv_view_rows_avx512(w, r0, 1, 32);
    float e8m0[256];
    e8m0_table_avx512(e8m0);
    e2m1_gemv_avx512(&wr, w->k, 0, e8m0, rows, x, ldx, m, y, ldy);
}

void qs_mm_gemv_mxfp8__avx512_1x4x16(const qs_mm_weight *w, int64_t r0, int64_t rows,
                                     const float *x, int64_t ldx, int64_t m, float *y, int64_t ldy)
{
    gemv_rows_avx512 wr = gemv_view_rows_avx512(w, r0, 1, 32);
    float e8m0[256];
    e8m0_table_avx512(e8m0);
    if (m == 1 && w->k % 64 == 0 && w->k > 0) {
        e4m3_m1_rows_avx512(x, w->k, &wr, rows, 1, e8m0, 1.0f, y);
        return;
    }
    gemv_avx512(x, ldx, m, w->k, &wr, rows, e4m3_dec_avx512, mx_scl_avx512, e8m0, y, ldy);
}

void qs_mm_gemv_nvfp4__avx512_1x4x16(const qs_mm_weight *w, int64_t r0, int64_t rows,
                                     const float *x, int64_t ldx, int64_t m, float *y, int64_t ldy)
{
    gemv_rows_avx512 wr = gemv_view_rows_avx512(w, r0, 1, 16);
    float den[128];
    for (int i = 0; i < 128; i++)
        den[i] = gemv_e4m3_pos_avx512((uint8_t)i) * w->s_global;
    e2m1_gemv_avx512(&wr, w->k, 1, den, rows, x, ldx, m, y, ldy);
}
