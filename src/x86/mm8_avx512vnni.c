/* SPDX-License-Identifier: MIT */
/*
 * Matmul with int8 activations for AVX-512 with VNNI (src/ref/mm8_ref.c defines the results; the
 * integer sums are exact, so the results agree with the reference bit for bit).
 *
 * vpdpbusd multiplies unsigned by signed bytes. The weight operand is made unsigned by adding 128
 * (an xor of the sign bit for INT8 codes; the 4-bit codebooks are stored with the 128 already
 * added), so a lane sums x * (w + 128) and the segment sum is corrected once per segment by
 * 128 * sum(x), which the caller passes (xsum); an INT8 zero point joins the same correction,
 * sum x * (w - zp) = sum x * (w + 128) - (128 + zp) * sum x. All int32 arithmetic wraps, and the
 * final value is the exact sum, which fits (K <= QS_MATMUL_INT8_MAX_K).
 *
 * A tile is up to 4 rows of x by 4 rows of W: 16 accumulators, each W chunk loaded once for every
 * x row and each x chunk once for every W row. At the end of a segment the four accumulators of
 * one x row are reduced together into one vector of four sums, then scaled and added to the row's
 * running totals in ascending segment order, as the reference does. Missing W rows of a tail
 * tile repeat the last row and are not stored. Chunks shorter than 64 bytes use masked loads
 * (masked-off bytes load 0: x = 0 contributes nothing).
 *
 * The 4-bit kernels decode 64 codes per 32 bytes in registers: low nibbles (the odd elements)
 * and high nibbles (the even elements) side by side, looked up with vpshufb; the x chunk is put in
 * the same order once per tile (odd elements, then even). They need every row segment to be whole
 * 64-element chunks at the same offsets in every row (block a multiple of 64 and either a multiple
 * or a divisor of the row length); other layouts run the reference. With 64-element segments
 * (block 64, the default) the x rows outside the 4 x 4 tiles (every x row of a GEMV) go through
 * bnb4_quad: four segments per step and one accumulator per W row, segment j in 128-bit block j,
 * so one reduction of four accumulators yields 16 segment sums (instead of one per segment).
 *
 * The rows of W are separate streams of 4 KiB and less, and the hardware prefetcher starts over on
 * each, so a GEMV waited on memory latency at the start of every tile. The first pass over a tile
 * prefetches the next tile's rows and absmax values into L2 at the same offsets, one tile ahead.
 */
#include <immintrin.h>
#include <stdint.h>

#include "../core/kernels.h"
#include "../ref/mm8_ref.h"
#include "../ref/ref.h"
#include "prefetch_x86.h"

#define CH 64
#define INLINE static inline __attribute__((always_inline))

/* The four sums of four int32 vectors, lane r holding the sum of the r-th. */
INLINE __m128i hsum4(__m512i a, __m512i b, __m512i c, __m512i d)
{
    __m512i ab = _mm512_add_epi32(_mm512_unpacklo_epi32(a, b), _mm512_unpackhi_epi32(a, b));
    __m512i cd = _mm512_add_epi32(_mm512_unpacklo_epi32(c, d), _mm512_unpackhi_epi32(c, d));
    __m512i s = _mm512_add_epi32(_mm512_unpacklo_epi64(ab, cd), _mm512_unpackhi_epi64(ab, cd));
    __m256i h = _mm256_add_epi32(_mm512_castsi512_si256(s), _mm512_extracti64x4_epi64(s, 1));
    return _mm_add_epi32(_mm256_castsi256_si128(h), _mm256_extracti128_si256(h, 1));
}

/* Store the first nr lanes of t, NaN made canonical as the reference returns it. */
INLINE void store_rows(float *out, __m128 t, int64_t nr)
{
    __mmask8 nan = _mm_cmp_ps_mask(t, t, _CMP_UNORD_Q);
    t = _mm_mask_mov_ps(t, nan, _mm_castsi128_ps(_mm_set1_epi32((int32_t)QS_NAN_F32_BITS)));
    _mm_mask_storeu_ps(out, (__mmask8)((1u << nr) - 1), t);
}

/* ---- W8A8 -------------------------------------------------------------------------------------
 */

INLINE void w8a8_tile(int mr, const int8_t *x, const int32_t *xs, int64_t ng, int64_t n,
                      const int8_t *w, int64_t nr, const float *scale, const int8_t *zp,
                      int64_t group, int64_t sstride, float *out, int64_t ldo, int pf)
{
    const __m512i sign = _mm512_set1_epi8((char)0x80);
    const int8_t *wr[4];
    const float *sr[4];
    const int8_t *zr[4];
    __m128 t[4];

    for (int r = 0; r < 4; r++) {
        int64_t rr = r < nr ? r : nr - 1;
        wr[r] = w + rr * n;
        sr[r] = scale + rr * sstride;
        zr[r] = zp ? zp + rr * sstride : NULL;
    }
    for (int i = 0; i < mr; i++)
        t[i] = _mm_setzero_ps();
    for (int64_t s = 0; s < ng; s++) {
        int64_t k = s * group, k1 = k + group < n ? k + group : n;
        __m512i acc[4][4];

        for (int i = 0; i < mr; i++)
            for (int r = 0; r < 4; r++)
                acc[i][r] = _mm512_setzero_si512();
        for (; k < k1; k += CH) {
            __mmask64 msk = k1 - k >= CH ? ~(__mmask64)0 : ((__mmask64)1 << (k1 - k)) - 1;
            __m512i wv[4];
            if (pf)
                for (int r = 0; r < 4; r++)
                    qs_prefetch_l2(w, (4 + r) * n + k);
            for (int r = 0; r < 4; r++)
                wv[r] = _mm512_xor_si512(_mm512_maskz_loadu_epi8(msk, wr[r] + k), sign);
            for (int i = 0; i < mr; i++) {
                __m512i xv = _mm512_maskz_loadu_epi8(msk, x + i * n + k);
                for (int r = 0; r < 4; r++)
                    acc[i][r] = _mm512_dpbusd_epi32(acc[i][r], wv[r], xv);
            }
        }
        __m128i zc = _mm_setr_epi32(128 + (zr[0] ? zr[0][s] : 0), 128 + (zr[1] ? zr[1][s] : 0),
                                    128 + (zr[2] ? zr[2][s] : 0), 128 + (zr[3] ? zr[3][s] : 0));
        __m128 sc = _mm_setr_ps(qs_ld_f32(sr[0] + s), qs_ld_f32(sr[1] + s), qs_ld_f32(sr[2] + s),
                                qs_ld_f32(sr[3] + s));
        for (int i = 0; i < mr; i++) {
            __m128i a = hsum4(acc[i][0], acc[i][1], acc[i][2], acc[i][3]);
            a = _mm_sub_epi32(a, _mm_mullo_epi32(zc, _mm_set1_epi32(xs[i * ng + s])));
            t[i] = _mm_add_ps(t[i], _mm_mul_ps(_mm_cvtepi32_ps(a), sc));
        }
    }
    for (int i = 0; i < mr; i++)
        store_rows(out + i * ldo, t[i], nr);
}

/* W rows r0 ... of the view: INT8 codes at data + r * row_bytes (row_bytes = k: the tiles step
 * by k), unit scales and zero points at r * sstride, units of w->group columns. */
void qs_mm_w8a8__avx512vnni_4x4x64(const int8_t *xq, const int32_t *xsum, int64_t m,
                                   const qs_mm_weight *w, int64_t r0, int64_t rows, float *out,
                                   int64_t ldo)
{
    const int64_t n = w->k, group = w->group, sstride = w->sstride;
    const int8_t *wq = (const int8_t *)w->data + r0 * w->row_bytes;
    const float *scale = (const float *)w->scale + r0 * sstride;
    const int8_t *zp = w->zp ? w->zp + r0 * sstride : NULL;
    int64_t ng = n > 0 ? (n + group - 1) / group : 0;

    /* W tile outside, x rows inside: the four W rows stay in L1 while x goes by. */
    for (int64_t r = 0; r < rows; r += 4) {
        int64_t nr = rows - r < 4 ? rows - r : 4;
        const float *sc = scale + r * sstride;
        const int8_t *z = zp ? zp + r * sstride : NULL;
        int64_t i = 0;
        for (; i + 4 <= m; i += 4)
            w8a8_tile(4, xq + i * n, xsum + i * ng, ng, n, wq + r * n, nr, sc, z, group, sstride,
                      out + i * ldo + r, ldo, i == 0);
        for (; i < m; i++)
            w8a8_tile(1, xq + i * n, xsum + i * ng, ng, n, wq + r * n, nr, sc, z, group, sstride,
                      out + i * ldo + r, ldo, i == 0);
    }
}

/* ---- NF4 / FP4 --------------------------------------------------------------------------------
 */

/* 64 codes of 32 bytes as unsigned weights w8 + 128: odd elements (low nibbles), then even. The
 * 32 bytes go to both halves and the upper half is shifted by 4; the and clears bit 7, which would
 * make vpshufb write 0. */
INLINE __m512i bnb4_decode(const uint8_t *p, __m512i tab)
{
    const __m512i shift = _mm512_inserti64x4(_mm512_setzero_si512(), _mm256_set1_epi16(4), 1);
    __m512i b = _mm512_broadcast_i64x4(_mm256_loadu_si256((const __m256i *)p));
    b = _mm512_srlv_epi16(b, shift);
    return _mm512_shuffle_epi8(tab, _mm512_and_si512(b, _mm512_set1_epi8(0x0F)));
}

/* 64 x codes in the decoded order: the odd elements, then the even ones. */
INLINE __m512i x_oddeven(const int8_t *x)
{
    const __m512i split = _mm512_set4_epi32(0x0F0D0B09, 0x07050301, 0x0E0C0A08, 0x06040200);
    const __m512i gather = _mm512_setr_epi64(1, 3, 5, 7, 0, 2, 4, 6);
    __m512i v = _mm512_shuffle_epi8(_mm512_loadu_si512(x), split);
    return _mm512_permutexvar_epi64(gather, v);
}

INLINE void bnb4_tile(int mr, const int8_t *x, const int32_t *xs, int64_t nc, int64_t n,
                      const uint8_t *data, int64_t start, int64_t nr, const float *absmax,
                      int32_t block, int64_t seg, __m512i tab, float *out, int64_t ldo, int pf)
{
    const uint8_t *wr[4];
    const float *ar[4];
    __m128 t[4];

    for (int r = 0; r < 4; r++) {
        int64_t f = start + (r < nr ? r : nr - 1) * n;
        wr[r] = data + f / 2;
        ar[r] = absmax + f / block;
    }
    for (int i = 0; i < mr; i++)
        t[i] = _mm_setzero_ps();
    for (int64_t s = 0, k = 0; k < n; s++) {
        int64_t k1 = k + seg;
        int32_t sx[4] = {0, 0, 0, 0};
        __m512i acc[4][4];

        for (int i = 0; i < mr; i++)
            for (int r = 0; r < 4; r++)
                acc[i][r] = _mm512_setzero_si512();
        if (pf && s % 16 == 0)
            for (int r = 0; r < 4; r++)
                qs_prefetch_l2(ar[r], (4 * n / block + s) * 4);
        for (; k < k1; k += CH) {
            __m512i wv[4];
            if (pf && k % (2 * CH) == 0)
                for (int r = 0; r < 4; r++)
                    qs_prefetch_l2(wr[r], 2 * n + k / 2);
            for (int r = 0; r < 4; r++)
                wv[r] = bnb4_decode(wr[r] + k / 2, tab);
            for (int i = 0; i < mr; i++) {
                __m512i xv = x_oddeven(x + i * n + k);
                sx[i] += xs[i * nc + k / CH];
                for (int r = 0; r < 4; r++)
                    acc[i][r] = _mm512_dpbusd_epi32(acc[i][r], wv[r], xv);
            }
        }
        __m128 sc = _mm_setr_ps(qs_ld_f32(ar[0] + s), qs_ld_f32(ar[1] + s), qs_ld_f32(ar[2] + s),
                                qs_ld_f32(ar[3] + s));
        for (int i = 0; i < mr; i++) {
            __m128i a = hsum4(acc[i][0], acc[i][1], acc[i][2], acc[i][3]);
            a = _mm_sub_epi32(a, _mm_set1_epi32(128 * sx[i]));
            t[i] = _mm_add_ps(t[i], _mm_mul_ps(_mm_cvtepi32_ps(a), sc));
        }
    }
    for (int i = 0; i < mr; i++)
        store_rows(out + i * ldo, t[i], nr);
}

/* x codes of four 64-element segments in the order bnb4_quad decodes the weights: block j of each
 * vector holds 16 codes of segment j, xv[0] the odd elements of its first half, xv[1] the even
 * ones, xv[2] and xv[3] the same of its second half. */
INLINE void x_quad(const int8_t *x, __m512i xv[4])
{
    /* in each 128-bit block: the 8 even bytes, then the 8 odd ones */
    const __m512i split = _mm512_set4_epi32(0x0F0D0B09, 0x07050301, 0x0E0C0A08, 0x06040200);
    const __m512i lo = _mm512_setr_epi64(1, 3, 9, 11, 0, 2, 8, 10);
    const __m512i hi = _mm512_setr_epi64(5, 7, 13, 15, 4, 6, 12, 14);
    __m512i w[4], a[2], b[2];

    for (int j = 0; j < 4; j++)
        w[j] = _mm512_shuffle_epi8(_mm512_loadu_si512(x + j * CH), split);
    for (int h = 0; h < 2; h++) {
        a[h] = _mm512_permutex2var_epi64(w[2 * h], lo, w[2 * h + 1]);
        b[h] = _mm512_permutex2var_epi64(w[2 * h], hi, w[2 * h + 1]);
    }
    xv[0] = _mm512_shuffle_i64x2(a[0], a[1], _MM_SHUFFLE(1, 0, 1, 0));
    xv[1] = _mm512_shuffle_i64x2(a[0], a[1], _MM_SHUFFLE(3, 2, 3, 2));
    xv[2] = _mm512_shuffle_i64x2(b[0], b[1], _MM_SHUFFLE(1, 0, 1, 0));
    xv[3] = _mm512_shuffle_i64x2(b[0], b[1], _MM_SHUFFLE(3, 2, 3, 2));
}

/* The integer sums of one W row's four segments against x_quad's vectors, block j holding four
 * partial sums of segment j. The 128 bytes of the four segments are regrouped by 16-byte halves
 * before the nibbles are split (the split works byte by byte), so that block j holds segment j. */
INLINE __m512i row_quad(const uint8_t *p, const __m512i xv[4], __m512i tab)
{
    const __m512i nib = _mm512_set1_epi8(0x0F);
    __m512i a = _mm512_loadu_si512(p), b = _mm512_loadu_si512(p + 64);
    __m512i h0 = _mm512_shuffle_i64x2(a, b, _MM_SHUFFLE(2, 0, 2, 0));
    __m512i h1 = _mm512_shuffle_i64x2(a, b, _MM_SHUFFLE(3, 1, 3, 1));
    __m512i acc = _mm512_dpbusd_epi32(_mm512_setzero_si512(),
                                      _mm512_shuffle_epi8(tab, _mm512_and_si512(h0, nib)), xv[0]);
    acc = _mm512_dpbusd_epi32(
        acc, _mm512_shuffle_epi8(tab, _mm512_and_si512(_mm512_srli_epi16(h0, 4), nib)), xv[1]);
    acc = _mm512_dpbusd_epi32(acc, _mm512_shuffle_epi8(tab, _mm512_and_si512(h1, nib)), xv[2]);
    return _mm512_dpbusd_epi32(
        acc, _mm512_shuffle_epi8(tab, _mm512_and_si512(_mm512_srli_epi16(h1, 4), nib)), xv[3]);
}

/* One x row against 4 q W rows (q = 1 or 2) with 64-element segments (block 64, the
 * bitsandbytes default): four segments at a time, one accumulator per W row with segment j in
 * 128-bit block j; the accumulators of four rows are reduced together into block j = segment,
 * lane r = row, corrected, converted and scaled with one multiply by the absmax values put in the
 * same order, then added to the rows' totals segment by segment (ascending, as the reference
 * does). x is put in order once for all the rows. Missing rows repeat the last one (not stored);
 * segments left over go one at a time. */
INLINE void bnb4_quad(int q, const int8_t *x, const int32_t *xs, int64_t n, const uint8_t *data,
                      int64_t start, int64_t nr, const float *absmax, int32_t block, __m512i tab,
                      float *out, int pf)
{
    const __m512i bcast = _mm512_setr_epi32(0, 0, 0, 0, 1, 1, 1, 1, 2, 2, 2, 2, 3, 3, 3, 3);
    const __m512i trans = _mm512_setr_epi32(0, 4, 8, 12, 1, 5, 9, 13, 2, 6, 10, 14, 3, 7, 11, 15);
    const uint8_t *wr[8];
    const float *ar[8];
    __m128 t[2];
    int64_t s = 0;

    for (int r = 0; r < 4 * q; r++) {
        int64_t f = start + (r < nr ? r : nr - 1) * n;
        wr[r] = data + f / 2;
        ar[r] = absmax + f / block;
    }
    for (int h = 0; h < q; h++)
        t[h] = _mm_setzero_ps();
    for (; (s + 4) * CH <= n; s += 4) {
        __m512i xv[4];
        for (int r = 0; r < 4 * q && pf; r++) {
            qs_prefetch_l2(wr[r], 2 * q * n + s * CH / 2);
            qs_prefetch_l2(wr[r], 2 * q * n + s * CH / 2 + 64);
        }
        if (pf && s % 16 == 0)
            for (int r = 0; r < 4 * q; r++)
                qs_prefetch_l2(ar[r], (4 * q * n / block + s) * 4);
        x_quad(x + s * CH, xv);
        __m512i sx = _mm512_permutexvar_epi32(
            bcast, _mm512_castsi128_si512(_mm_loadu_si128((const __m128i *)(xs + s))));
        sx = _mm512_slli_epi32(sx, 7);
        for (int h = 0; h < q; h++) {
            const uint8_t *const *w = wr + 4 * h;
            const float *const *am4 = ar + 4 * h;
            __m512i acc[4];
            for (int r = 0; r < 4; r++)
                acc[r] = row_quad(w[r] + s * CH / 2, xv, tab);
            __m512i u01 = _mm512_add_epi32(_mm512_unpacklo_epi32(acc[0], acc[1]),
                                           _mm512_unpackhi_epi32(acc[0], acc[1]));
            __m512i u23 = _mm512_add_epi32(_mm512_unpacklo_epi32(acc[2], acc[3]),
                                           _mm512_unpackhi_epi32(acc[2], acc[3]));
            __m512i a = _mm512_add_epi32(_mm512_unpacklo_epi64(u01, u23),
                                         _mm512_unpackhi_epi64(u01, u23));
            a = _mm512_sub_epi32(a, sx);
            __m512 am = _mm512_castps128_ps512(_mm_loadu_ps(am4[0] + s));
            am = _mm512_insertf32x4(am, _mm_loadu_ps(am4[1] + s), 1);
            am = _mm512_insertf32x4(am, _mm_loadu_ps(am4[2] + s), 2);
            am = _mm512_insertf32x4(am, _mm_loadu_ps(am4[3] + s), 3);
            __m512 p = _mm512_mul_ps(_mm512_cvtepi32_ps(a), _mm512_permutexvar_ps(trans, am));
            t[h] = _mm_add_ps(t[h], _mm512_castps512_ps128(p));
            t[h] = _mm_add_ps(t[h], _mm512_extractf32x4_ps(p, 1));
            t[h] = _mm_add_ps(t[h], _mm512_extractf32x4_ps(p, 2));
            t[h] = _mm_add_ps(t[h], _mm512_extractf32x4_ps(p, 3));
        }
    }
    for (; s * CH < n; s++) {
        __m512i xv = x_oddeven(x + s * CH);
        for (int h = 0; h < q; h++) {
            __m512i acc[4];
            for (int r = 0; r < 4; r++)
                acc[r] = _mm512_dpbusd_epi32(_mm512_setzero_si512(),
                                             bnb4_decode(wr[4 * h + r] + s * CH / 2, tab), xv);
            __m128i a = hsum4(acc[0], acc[1], acc[2], acc[3]);
            a = _mm_sub_epi32(a, _mm_set1_epi32(128 * xs[s]));
            __m128 sc = _mm_setr_ps(qs_ld_f32(ar[4 * h] + s), qs_ld_f32(ar[4 * h + 1] + s),
                                    qs_ld_f32(ar[4 * h + 2] + s), qs_ld_f32(ar[4 * h + 3] + s));
            t[h] = _mm_add_ps(t[h], _mm_mul_ps(_mm_cvtepi32_ps(a), sc));
        }
    }
    for (int h = 0; h < q && 4 * h < nr; h++)
        store_rows(out + 4 * h, t[h], nr - 4 * h < 4 ? nr - 4 * h : 4);
}

/* W rows r0 ... of the view: flat elements from start = r0 * k of the bnb4 tensor, absmax
 * w->scale in blocks of w->group. */
INLINE void bnb4_a8(qs_mm_a8_fn *ref, const int8_t *book, const int8_t *xq, const int32_t *xsum,
                    int64_t m, const qs_mm_weight *w, int64_t r0, int64_t rows, float *out,
                    int64_t ldo)
{
    const int64_t n = w->k, start = r0 * n;
    const uint8_t *data = w->data;
    const float *absmax = w->scale;
    const int32_t block = (int32_t)w->group;
    int64_t seg = block < n ? block : n, nc = (n + CH - 1) / CH;
    int8_t t8[16];

    if (n == 0 || seg % CH != 0 || (n % block != 0 && block % n != 0) || start % seg != 0) {
        ref(xq, xsum, m, w, r0, rows, out, ldo);
        return;
    }
    for (int c = 0; c < 16; c++)
        t8[c] = (int8_t)(book[c] + 128 - 256 * (book[c] >= 0));
    __m512i tab = _mm512_broadcast_i32x4(_mm_loadu_si128((const __m128i *)t8));
    /* 8 W rows at a time: tiles of 4 x rows by 4 W rows, then the x rows left over (all of them
     * for a GEMV) against the 8 rows while they are in L1 (64-element segments), or against 4
     * at a time. Only the first pass over a W row prefetches the next rows. */
    for (int64_t r = 0; r < rows; r += 8) {
        int64_t nr8 = rows - r < 8 ? rows - r : 8, m4 = m - m % 4;
        for (int64_t h = 0; h < nr8; h += 4) {
            int64_t nr = nr8 - h < 4 ? nr8 - h : 4, f = start + (r + h) * n;
            for (int64_t i = 0; i < m4; i += 4)
                bnb4_tile(4, xq + i * n, xsum + i * nc, nc, n, data, f, nr, absmax, block, seg,
                          tab, out + i * ldo + r + h, ldo, i == 0);
            for (int64_t i = m4; i < m && seg != CH; i++)
                bnb4_tile(1, xq + i * n, xsum + i * nc, nc, n, data, f, nr, absmax, block, seg,
                          tab, out + i * ldo + r + h, ldo, i == 0);
        }
        for (int64_t i = m4; i < m && seg == CH; i++) {
            if (nr8 > 4)
                bnb4_quad(2, xq + i * n, xsum + i * nc, n, data, start + r * n, nr8, absmax,
                          block, tab, out + i * ldo + r, i == 0);
            else
                bnb4_quad(1, xq + i * n, xsum + i * nc, n, data, start + r * n, nr8, absmax,
                          block, tab, out + i * ldo + r, i == 0);
        }
    }
}

void qs_mm_nf4a8__avx512vnni_4x4x64(const int8_t *xq, const int32_t *xsum, int64_t m,
                                    const qs_mm_weight *w, int64_t r0, int64_t rows, float *out,
                                    int64_t ldo)
{
    bnb4_a8(qs_mm_nf4a8__ref, qs_nf4_codebook_i8, xq, xsum, m, w, r0, rows, out, ldo);
}

void qs_mm_fp4a8__avx512vnni_4x4x64(const int8_t *xq, const int32_t *xsum, int64_t m,
                                    const qs_mm_weight *w, int64_t r0, int64_t rows, float *out,
                                    int64_t ldo)
{
    bnb4_a8(qs_mm_fp4a8__ref, qs_fp4_codebook_i8, xq, xsum, m, w, r0, rows, out, ldo);
}
