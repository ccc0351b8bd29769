/* SPDX-License-Identifier: MIT */
/*
 * Matmul with int8 activations for AVX2 (src/ref/mm8_ref.c defines the results; the integer
 * sums are exact, so the results agree with the reference bit for bit).
 *
 * vpmaddubsw multiplies unsigned by signed bytes and adds pairs into int16 with saturation. The
 * operands are |w| (unsigned, up to 128 for the INT8 code -128) and x with the sign of w (x is in
 * [-127, 127], so negating it cannot overflow): a pair is at most 2 * 128 * 127 = 32512, below
 * the int16 limit, so nothing saturates; vpmaddwd by 1 widens the pairs into int32 lanes. An INT8
 * zero point is applied once per group, sum x * (w - zp) = sum x * w - zp * sum x, with sum x from
 * the caller (xsum).
 *
 * A tile is up to 4 rows of x by 4 rows of W (16 accumulators); at the end of a segment the four
 * accumulators of one x row are reduced together into four sums, scaled and added to the running
 * totals in ascending segment order, as the reference does. Missing W rows of a tail tile repeat
 * the last row and are not stored. The bytes after the last whole 32-byte chunk of a segment are
 * summed in scalar code into the same exact integer.
 *
 * The 4-bit kernels decode 32 codes per 16 bytes in registers (low nibbles = odd elements, then
 * high nibbles = even elements, through a vpshufb table of the int8 codebook) and put each x chunk
 * in the same order once per tile. They need every row segment to be whole 32-element chunks at
 * the same offsets in every row (block a multiple of 32 and either a multiple or a divisor of the
 * row length); other layouts run the reference.
 *
 * The rows of W are separate streams of 4 KiB and less, on which the hardware prefetcher starts
 * over, so the first pass over a tile prefetches the next tile's rows (and absmax values) into L2
 * at the same offsets, one tile ahead.
 */
#include <immintrin.h>
#include <stdint.h>

#include "../core/kernels.h"
#include "../ref/mm8_ref.h"
#include "../ref/ref.h"

#define CH 32
#define INLINE static inline __attribute__((always_inline))

/* Prefetch into L2 the line `off` bytes past p (an address computed as an integer: it may lie past
 * the weight, where a prefetch does nothing). */
INLINE void prefetch_l2(const void *p, int64_t off)
{
    _mm_prefetch((const char *)((uintptr_t)p + (uintptr_t)off), _MM_HINT_T1);
}

/* The four sums of four int32 vectors, lane r holding the sum of the r-th. */
INLINE __m128i hsum4(__m256i a, __m256i b, __m256i c, __m256i d)
{
    __m256i ab = _mm256_add_epi32(_mm256_unpacklo_epi32(a, b), _mm256_unpackhi_epi32(a, b));
    __m256i cd = _mm256_add_epi32(_mm256_unpacklo_epi32(c, d), _mm256_unpackhi_epi32(c, d));
    __m256i s = _mm256_add_epi32(_mm256_unpacklo_epi64(ab, cd), _mm256_unpackhi_epi64(ab, cd));
    return _mm_add_epi32(_mm256_castsi256_si128(s), _mm256_extracti128_si256(s, 1));
}

/* sum of x * w over 32 byte pairs into 8 int32 lanes, added to acc; u = |w|. */
INLINE __m256i dot32(__m256i acc, __m256i u, __m256i w, __m256i x)
{
    __m256i p = _mm256_maddubs_epi16(u, _mm256_sign_epi8(x, w));
    return _mm256_add_epi32(acc, _mm256_madd_epi16(p, _mm256_set1_epi16(1)));
}

/* Store the first nr lanes of t, NaN made canonical as the reference returns it. */
INLINE void store_rows(float *out, __m128 t, int64_t nr)
{
    float v[4];

    t = _mm_blendv_ps(t, _mm_castsi128_ps(_mm_set1_epi32((int32_t)QS_NAN_F32_BITS)),
                      _mm_cmp_ps(t, t, _CMP_UNORD_Q));
    _mm_storeu_ps(v, t);
    for (int64_t r = 0; r < nr; r++)
        out[r] = v[r];
}

/* ---- W8A8 -------------------------------------------------------------------------------------
 */

INLINE void w8a8_tile(int mr, const int8_t *x, const int32_t *xs, int64_t ng, int64_t n,
                      const int8_t *w, int64_t nr, const float *scale, const int8_t *zp,
                      int64_t group, int64_t sstride, float *out, int64_t ldo, int pf)
{
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
        __m256i acc[4][4];
        int32_t tail[4][4];

        for (int i = 0; i < mr; i++)
            for (int r = 0; r < 4; r++) {
                acc[i][r] = _mm256_setzero_si256();
                tail[i][r] = 0;
            }
        for (; k + CH <= k1; k += CH) {
            __m256i wv[4], uv[4];
            if (pf && k % (2 * CH) == 0)
                for (int r = 0; r < 4; r++)
                    prefetch_l2(w, (4 + r) * n + k);
            for (int r = 0; r < 4; r++) {
                wv[r] = _mm256_loadu_si256((const __m256i *)(wr[r] + k));
                uv[r] = _mm256_abs_epi8(wv[r]);
            }
            for (int i = 0; i < mr; i++) {
                __m256i xv = _mm256_loadu_si256((const __m256i *)(x + i * n + k));
                for (int r = 0; r < 4; r++)
                    acc[i][r] = dot32(acc[i][r], uv[r], wv[r], xv);
            }
        }
        for (; k < k1; k++)
            for (int i = 0; i < mr; i++)
                for (int r = 0; r < 4; r++)
                    tail[i][r] += (int32_t)x[i * n + k] * wr[r][k];
        __m128i zc = _mm_setr_epi32(zr[0] ? zr[0][s] : 0, zr[1] ? zr[1][s] : 0,
                                    zr[2] ? zr[2][s] : 0, zr[3] ? zr[3][s] : 0);
        __m128 sc = _mm_setr_ps(qs_ld_f32(sr[0] + s), qs_ld_f32(sr[1] + s), qs_ld_f32(sr[2] + s),
                                qs_ld_f32(sr[3] + s));
        for (int i = 0; i < mr; i++) {
            __m128i a = hsum4(acc[i][0], acc[i][1], acc[i][2], acc[i][3]);
            a = _mm_add_epi32(a, _mm_loadu_si128((const __m128i *)tail[i]));
            a = _mm_sub_epi32(a, _mm_mullo_epi32(zc, _mm_set1_epi32(xs[i * ng + s])));
            t[i] = _mm_add_ps(t[i], _mm_mul_ps(_mm_cvtepi32_ps(a), sc));
        }
    }
    for (int i = 0; i < mr; i++)
        store_rows(out + i * ldo, t[i], nr);
}

/* W rows r0 ... of the view: INT8 codes at data + r * row_bytes (row_bytes = k: the tiles step
 * by k), unit scales and zero points at r * sstride, units of w->group columns. */
void qs_mm_w8a8__avx2_4x4x32(const int8_t *xq, const int32_t *xsum, int64_t m,
                             const qs_mm_weight *w, int64_t r0, int64_t rows, float *out,
                             int64_t ldo)
{
    const int64_t n = w->k, group = w->group, sstride = w->sstride;
    const int8_t *wq = (const int8_t *)w->data + r0 * w->row_bytes;
    const float *scale = (const float *)w->scale + r0 * sstride;
    const int8_t *zp = w->zp ? w->zp + r0 * sstride : NULL;
    int64_t ng = n > 0 ? (n + group - 1) / group : 0;

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

/* 32 codes of 16 bytes as int8 weights: odd elements (low nibbles), then even. */
INLINE __m256i bnb4_decode(const uint8_t *p, __m256i tab)
{
    __m128i b = _mm_loadu_si128((const __m128i *)p);
    __m256i z = _mm256_inserti128_si256(_mm256_castsi128_si256(b), _mm_srli_epi16(b, 4), 1);
    return _mm256_shuffle_epi8(tab, _mm256_and_si256(z, _mm256_set1_epi8(0x0F)));
}

/* 32 x codes in the decoded order: the odd elements, then the even ones. */
INLINE __m256i x_oddeven(const int8_t *x)
{
    const __m256i split = _mm256_setr_epi32(0x06040200, 0x0E0C0A08, 0x07050301, 0x0F0D0B09,
                                            0x06040200, 0x0E0C0A08, 0x07050301, 0x0F0D0B09);
    __m256i v = _mm256_shuffle_epi8(_mm256_loadu_si256((const __m256i *)x), split);
    return _mm256_permute4x64_epi64(v, _MM_SHUFFLE(2, 0, 3, 1));
}

INLINE void bnb4_tile(int mr, const int8_t *x, int64_t n, const uint8_t *data, int64_t start,
                      int64_t nr, const float *absmax, int32_t block, int64_t seg, __m256i tab,
                      float *out, int64_t ldo, int pf)
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
        __m256i acc[4][4];

        for (int i = 0; i < mr; i++)
            for (int r = 0; r < 4; r++)
                acc[i][r] = _mm256_setzero_si256();
        if (pf && s % 16 == 0)
            for (int r = 0; r < 4; r++)
                prefetch_l2(ar[r], (4 * n / block + s) * 4);
        for (; k < k1; k += CH) {
            __m256i wv[4], uv[4];
            if (pf && k % (4 * CH) == 0)
                for (int r = 0; r < 4; r++)
                    prefetch_l2(wr[r], 2 * n + k / 2);
            for (int r = 0; r < 4; r++) {
                wv[r] = bnb4_decode(wr[r] + k / 2, tab);
                uv[r] = _mm256_abs_epi8(wv[r]);
            }
            for (int i = 0; i < mr; i++) {
                __m256i xv = x_oddeven(x + i * n + k);
                for (int r = 0; r < 4; r++)
                    acc[i][r] = dot32(acc[i][r], uv[r], wv[r], xv);
            }
        }
        __m128 sc = _mm_setr_ps(qs_ld_f32(ar[0] + s), qs_ld_f32(ar[1] + s), qs_ld_f32(ar[2] + s),
                                qs_ld_f32(ar[3] + s));
        for (int i = 0; i < mr; i++) {
            __m128i a = hsum4(acc[i][0], acc[i][1], acc[i][2], acc[i][3]);
            t[i] = _mm_add_ps(t[i], _mm_mul_ps(_mm_cvtepi32_ps(a), sc));
        }
    }
    for (int i = 0; i < mr; i++)
        store_rows(out + i * ldo, t[i], nr);
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
    int64_t seg = block < n ? block : n;

    if (n == 0 || seg % CH != 0 || (n % block != 0 && block % n != 0) || start % seg != 0) {
        ref(xq, xsum, m, w, r0, rows, out, ldo);
        return;
    }
    __m256i tab = _mm256_broadcastsi128_si256(_mm_loadu_si128((const __m128i *)book));
    for (int64_t r = 0; r < rows; r += 4) {
        int64_t nr = rows - r < 4 ? rows - r : 4, f = start + r * n;
        int64_t i = 0;
        for (; i + 4 <= m; i += 4)
            bnb4_tile(4, xq + i * n, n, data, f, nr, absmax, block, seg, tab, out + i * ldo + r,
                      ldo, i == 0);
        for (; i < m; i++)
            bnb4_tile(1, xq + i * n, n, data, f, nr, absmax, block, seg, tab, out + i * ldo + r,
                      ldo, i == 0);
    }
}

void qs_mm_nf4a8__avx2_4x4x32(const int8_t *xq, const int32_t *xsum, int64_t m,
                              const qs_mm_weight *w, int64_t r0, int64_t rows, float *out,
                              int64_t ldo)
{
    bnb4_a8(qs_mm_nf4a8__ref, qs_nf4_codebook_i8, xq, xsum, m, w, r0, rows, out, ldo);
}

void qs_mm_fp4a8__avx2_4x4x32(const int8_t *xq, const int32_t *xsum, int64_t m,
                              const qs_mm_weight *w, int64_t r0, int64_t rows, float *out,
                              int64_t ldo)
{
    bnb4_a8(qs_mm_fp4a8__ref, qs_fp4_codebook_i8, xq, xsum, m, w, r0, rows, out, ldo);
}
