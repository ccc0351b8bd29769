/* SPDX-License-Identifier: MIT */
/*
 * Matmul with int8 activations for NEON with the dot-product extension (src/ref/mm8_ref.c
 * defines the results; the integer sums are exact, so the results agree with the reference bit
 * for bit).
 *
 * sdot multiplies signed by signed bytes and adds groups of four into int32 lanes, so no offset
 * is needed: x codes are in [-127, 127], weight codes in [-128, 127], and an INT8 zero point is
 * applied once per group, sum x * (w - zp) = sum x * w - zp * sum x, with sum x from the caller
 * (xsum).
 *
 * A tile is up to 4 rows of x by 4 rows of W (16 accumulators); at the end of a segment the four
 * accumulators of one x row are reduced together (pairwise adds) into four sums, scaled and added
 * to the running totals in ascending segment order, as the reference does. Missing W rows of a
 * tail tile repeat the last row and are not stored. Bytes after the last whole 16-byte chunk of
 * a segment are summed in scalar code into the same exact integer.
 *
 * The 4-bit kernels decode 32 codes per 16 bytes in registers with tbl (high nibbles = even
 * elements, low nibbles = odd elements) and split each x chunk into its even and odd elements
 * with uzp1 / uzp2 once per tile. They need every row segment to be whole 32-element chunks at
 * the same offsets in every row (block a multiple of 32 and either a multiple or a divisor of the
 * row length); other layouts run the reference.
 */
#include <arm_neon.h>
#include <stdint.h>

#include "../core/kernels.h"
#include "../ref/mm8_ref.h"
#include "../ref/ref.h"

#define INLINE static inline __attribute__((always_inline))

/* Prefetch into L2 the line `off` bytes past p (an address computed as an integer: it may lie past
 * the weight, where a prefetch does nothing). The rows of a tile are separate 4 KiB streams, and
 * the hardware prefetcher restarts on each, so the kernels fetch the next tile's rows one tile
 * ahead. */
INLINE void prefetch_l2(const void *p, int64_t off)
{
    __builtin_prefetch((const void *)((uintptr_t)p + (uintptr_t)off), 0, 2);
}

INLINE int32x4_t hsum4(int32x4_t a, int32x4_t b, int32x4_t c, int32x4_t d)
{
    return vpaddq_s32(vpaddq_s32(a, b), vpaddq_s32(c, d));
}

/* Store the first nr lanes of t, NaN made canonical as the reference returns it. */
INLINE void store_rows(float *out, float32x4_t t, int64_t nr)
{
    float v[4];

    t = vbslq_f32(vceqq_f32(t, t), t, vreinterpretq_f32_u32(vdupq_n_u32(QS_NAN_F32_BITS)));
    vst1q_f32(v, t);
    for (int64_t r = 0; r < nr; r++)
        out[r] = v[r];
}

INLINE float32x4_t load4(const float *const *p, int64_t s)
{
    float v[4] = {qs_ld_f32(p[0] + s), qs_ld_f32(p[1] + s), qs_ld_f32(p[2] + s),
                  qs_ld_f32(p[3] + s)};
    return vld1q_f32(v);
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
    float32x4_t t[4];

    for (int r = 0; r < 4; r++) {
        int64_t rr = r < nr ? r : nr - 1;
        wr[r] = w + rr * n;
        sr[r] = scale + rr * sstride;
        zr[r] = zp ? zp + rr * sstride : NULL;
    }
    for (int i = 0; i < mr; i++)
        t[i] = vdupq_n_f32(0.0f);
    for (int64_t s = 0; s < ng; s++) {
        int64_t k = s * group, k1 = k + group < n ? k + group : n;
        int32x4_t acc[4][4];
        int32_t tail[4][4];

        for (int i = 0; i < mr; i++)
            for (int r = 0; r < 4; r++) {
                acc[i][r] = vdupq_n_s32(0);
                tail[i][r] = 0;
            }
        for (; k + 16 <= k1; k += 16) {
            int8x16_t wv[4];
            if (pf && k % 64 == 0)
                for (int r = 0; r < 4; r++)
                    prefetch_l2(w, (4 + r) * n + k);
            for (int r = 0; r < 4; r++)
                wv[r] = vld1q_s8(wr[r] + k);
            for (int i = 0; i < mr; i++) {
                int8x16_t xv = vld1q_s8(x + i * n + k);
                for (int r = 0; r < 4; r++)
                    acc[i][r] = vdotq_s32(acc[i][r], wv[r], xv);
            }
        }
        for (; k < k1; k++)
            for (int i = 0; i < mr; i++)
                for (int r = 0; r < 4; r++)
                    tail[i][r] += (int32_t)x[i * n + k] * wr[r][k];
        int32_t zv[4] = {zr[0] ? zr[0][s] : 0, zr[1] ? zr[1][s] : 0, zr[2] ? zr[2][s] : 0,
                         zr[3] ? zr[3][s] : 0};
        int32x4_t zc = vld1q_s32(zv);
        float32x4_t sc = load4(sr, s);
        for (int i = 0; i < mr; i++) {
            int32x4_t a = hsum4(acc[i][0], acc[i][1], acc[i][2], acc[i][3]);
            a = vaddq_s32(a, vld1q_s32(tail[i]));
            a = vsubq_s32(a, vmulq_n_s32(zc, xs[i * ng + s]));
            t[i] = vaddq_f32(t[i], vmulq_f32(vcvtq_f32_s32(a), sc));
        }
    }
    for (int i = 0; i < mr; i++)
        store_rows(out + i * ldo, t[i], nr);
}

/* W rows r0 ... of the view: INT8 codes at data + r * row_bytes (row_bytes = k: the tiles step
 * by k), unit scales and zero points at r * sstride, units of w->group columns. */
void qs_mm_w8a8__neondotprod_4x4x16(const int8_t *xq, const int32_t *xsum, int64_t m,
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

INLINE void bnb4_tile(int mr, const int8_t *x, int64_t n, const uint8_t *data, int64_t start,
                      int64_t nr, const float *absmax, int32_t block, int64_t seg, int8x16_t tab,
                      float *out, int64_t ldo, int pf)
{
    const uint8_t *wr[4];
    const float *ar[4];
    float32x4_t t[4];

    for (int r = 0; r < 4; r++) {
        int64_t f = start + (r < nr ? r : nr - 1) * n;
        wr[r] = data + f / 2;
        ar[r] = absmax + f / block;
    }
    for (int i = 0; i < mr; i++)
        t[i] = vdupq_n_f32(0.0f);
    for (int64_t s = 0, k = 0; k < n; s++) {
        int64_t k1 = k + seg;
        int32x4_t acc[4][4];

        for (int i = 0; i < mr; i++)
            for (int r = 0; r < 4; r++)
                acc[i][r] = vdupq_n_s32(0);
        if (pf && s % 16 == 0)
            for (int r = 0; r < 4; r++)
                prefetch_l2(ar[r], (4 * n / block + s) * 4);
        for (; k < k1; k += 32) {
            int8x16_t we[4], wo[4];
            if (pf && k % 128 == 0)
                for (int r = 0; r < 4; r++)
                    prefetch_l2(wr[r], 2 * n + k / 2);
            for (int r = 0; r < 4; r++) {
                uint8x16_t b = vld1q_u8(wr[r] + k / 2);
                we[r] = vqtbl1q_s8(tab, vshrq_n_u8(b, 4));
                wo[r] = vqtbl1q_s8(tab, vandq_u8(b, vdupq_n_u8(0x0F)));
            }
            for (int i = 0; i < mr; i++) {
                int8x16_t x0 = vld1q_s8(x + i * n + k), x1 = vld1q_s8(x + i * n + k + 16);
                int8x16_t xe = vuzp1q_s8(x0, x1), xo = vuzp2q_s8(x0, x1);
                for (int r = 0; r < 4; r++)
                    acc[i][r] = vdotq_s32(vdotq_s32(acc[i][r], we[r], xe), wo[r], xo);
            }
        }
        float32x4_t sc = load4(ar, s);
        for (int i = 0; i < mr; i++) {
            int32x4_t a = hsum4(acc[i][0], acc[i][1], acc[i][2], acc[i][3]);
            t[i] = vaddq_f32(t[i], vmulq_f32(vcvtq_f32_s32(a), sc));
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

    if (n == 0 || seg % 32 != 0 || (n % block != 0 && block % n != 0) || start % seg != 0) {
        ref(xq, xsum, m, w, r0, rows, out, ldo);
        return;
    }
    int8x16_t tab = vld1q_s8(book);
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

void qs_mm_nf4a8__neondotprod_4x4x32(const int8_t *xq, const int32_t *xsum, int64_t m,
                                     const qs_mm_weight *w, int64_t r0, int64_t rows, float *out,
                                     int64_t ldo)
{
    bnb4_a8(qs_mm_nf4a8__ref, qs_nf4_codebook_i8, xq, xsum, m, w, r0, rows, out, ldo);
}

void qs_mm_fp4a8__neondotprod_4x4x32(const int8_t *xq, const int32_t *xsum, int64_t m,
                                     const qs_mm_weight *w, int64_t r0, int64_t rows, float *out,
                                     int64_t ldo)
{
    bnb4_a8(qs_mm_fp4a8__ref, qs_fp4_codebook_i8, xq, xsum, m, w, r0, rows, out, ldo);
}
