/* SPDX-License-Identifier: MIT */
/*
 * W8A8 matmul with int8 activations for NEON with the Int8 matrix-multiply extension
 * (src/ref/mm8_ref.c defines the results; the integer sums are exact, so the results agree with
 * the reference bit for bit).
 *
 * smmla multiplies a 2 x 8 block of signed bytes by the transpose of another and adds the 2 x 2
 * int32 products: with two rows of x and two rows of W interleaved by 8-byte halves (zip of the
 * 64-bit lanes) one instruction does 32 multiply-adds, twice the work of sdot. A tile is 4 rows
 * of x (two pairs) by 4 rows of W (two pairs): 4 accumulators, each holding the 2 x 2 sums of one
 * pair of pairs. At the end of a group the halves are regrouped into one vector of four W-row
 * sums per x row, corrected by the zero points (sum x * (w - zp) = sum x * w - zp * sum x, with
 * sum x from the caller), scaled and added in ascending group order, as the reference does.
 * Missing W rows of a tail tile repeat the last row and are not stored; bytes after the last whole
 * 16-byte chunk of a group are summed in scalar code. x rows left over after the pairs of a
 * 4-row tile (m not a multiple of 4) run the dot-product kernel, whose results are the same.
 */
#include <arm_neon.h>
#include <stdint.h>

#include "../core/kernels.h"
#include "../ref/ref.h"

#define INLINE static inline __attribute__((always_inline))

/* Prefetch into L2 the line `off` bytes past p (an address computed as an integer: it may lie past
 * the weight, where a prefetch does nothing); the next W tile is fetched one tile ahead, as in
 * mm8_neondotprod.c. */
INLINE void prefetch_l2(const void *p, int64_t off)
{
    __builtin_prefetch((const void *)((uintptr_t)p + (uintptr_t)off), 0, 2);
}

INLINE void store_rows(float *out, float32x4_t t, int64_t nr)
{
    float v[4];

    t = vbslq_f32(vceqq_f32(t, t), t, vreinterpretq_f32_u32(vdupq_n_u32(QS_NAN_F32_BITS)));
    vst1q_f32(v, t);
    for (int64_t r = 0; r < nr; r++)
        out[r] = v[r];
}

/* Two 16-byte rows as the two 2 x 8 operands of smmla (bytes 0-7 of both, then 8-15 of both). */
INLINE void pair(const int8_t *a, const int8_t *b, int8x16_t *lo, int8x16_t *hi)
{
    int64x2_t va = vreinterpretq_s64_s8(vld1q_s8(a)), vb = vreinterpretq_s64_s8(vld1q_s8(b));
    *lo = vreinterpretq_s8_s64(vzip1q_s64(va, vb));
    *hi = vreinterpretq_s8_s64(vzip2q_s64(va, vb));
}

static void w8a8_tile4(const int8_t *x, const int32_t *xs, int64_t ng, int64_t n, const int8_t *w,
                       int64_t nr, const float *scale, const int8_t *zp, int64_t group,
                       int64_t sstride, float *out, int64_t ldo, int pf)
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
    for (int i = 0; i < 4; i++)
        t[i] = vdupq_n_f32(0.0f);
    for (int64_t s = 0; s < ng; s++) {
        int64_t k = s * group, k1 = k + group < n ? k + group : n;
        /* acc[p][q]: x rows 2p, 2p + 1 against W rows 2q, 2q + 1: lanes (x0 w0, x0 w1, x1 w0,
         * x1 w1) */
        int32x4_t acc[2][2] = {{vdupq_n_s32(0), vdupq_n_s32(0)}, {vdupq_n_s32(0), vdupq_n_s32(0)}};
        int32_t tail[4][4] = {{0}};

        for (; k + 16 <= k1; k += 16) {
            int8x16_t xl[2], xh[2], wl[2], wh[2];
            if (pf && k % 64 == 0)
                for (int r = 0; r < 4; r++)
                    prefetch_l2(w, (4 + r) * n + k);
            pair(x + k, x + n + k, &xl[0], &xh[0]);
            pair(x + 2 * n + k, x + 3 * n + k, &xl[1], &xh[1]);
            pair(wr[0] + k, wr[1] + k, &wl[0], &wh[0]);
            pair(wr[2] + k, wr[3] + k, &wl[1], &wh[1]);
            for (int p = 0; p < 2; p++)
                for (int q = 0; q < 2; q++)
                    acc[p][q] = vmmlaq_s32(vmmlaq_s32(acc[p][q], xl[p], wl[q]), xh[p], wh[q]);
        }
        for (; k < k1; k++)
            for (int i = 0; i < 4; i++)
                for (int r = 0; r < 4; r++)
                    tail[i][r] += (int32_t)x[i * n + k] * wr[r][k];
        int32_t zv[4] = {zr[0] ? zr[0][s] : 0, zr[1] ? zr[1][s] : 0, zr[2] ? zr[2][s] : 0,
                         zr[3] ? zr[3][s] : 0};
        float sv[4] = {qs_ld_f32(sr[0] + s), qs_ld_f32(sr[1] + s), qs_ld_f32(sr[2] + s),
                       qs_ld_f32(sr[3] + s)};
        int32x4_t zc = vld1q_s32(zv);
        float32x4_t sc = vld1q_f32(sv);
        for (int i = 0; i < 4; i++) {
            int p = i / 2;
            /* x row i's sums against W rows 0, 1 (from acc[p][0]) and 2, 3 (from acc[p][1]) */
            int32x4_t a = i % 2 == 0
                              ? vcombine_s32(vget_low_s32(acc[p][0]), vget_low_s32(acc[p][1]))
                              : vcombine_s32(vget_high_s32(acc[p][0]), vget_high_s32(acc[p][1]));
            a = vaddq_s32(a, vld1q_s32(tail[i]));
            a = vsubq_s32(a, vmulq_n_s32(zc, xs[i * ng + s]));
            t[i] = vaddq_f32(t[i], vmulq_f32(vcvtq_f32_s32(a), sc));
        }
    }
    for (int i = 0; i < 4; i++)
        store_rows(out + i * ldo, t[i], nr);
}

/* W rows r0 ... of the view: INT8 codes at data + r * row_bytes (row_bytes = k: the tiles step
 * by k), unit scales and zero points at r * sstride, units of w->group columns. */
void qs_mm_w8a8__neoni8mm_4x4x16(const int8_t *xq, const int32_t *xsum, int64_t m,
                                 const qs_mm_weight *w, int64_t r0, int64_t rows, float *out,
                                 int64_t ldo)
{
    const int64_t n = w->k, group = w->group, sstride = w->sstride;
    const int8_t *wq = (const int8_t *)w->data + r0 * w->row_bytes;
    const float *scale = (const float *)w->scale + r0 * sstride;
    const int8_t *zp = w->zp ? w->zp + r0 * sstride : NULL;
    int64_t ng = n > 0 ? (n + group - 1) / group : 0, m4 = m - m % 4;

    for (int64_t r = 0; r < rows; r += 4) {
        int64_t nr = rows - r < 4 ? rows - r : 4;
        const float *sc = scale + r * sstride;
        const int8_t *z = zp ? zp + r * sstride : NULL;
        for (int64_t i = 0; i < m4; i += 4)
            w8a8_tile4(xq + i * n, xsum + i * ng, ng, n, wq + r * n, nr, sc, z, group, sstride,
                       out + i * ldo + r, ldo, i == 0);
    }
    if (m4 < m)
        qs_mm_w8a8__neondotprod_4x4x16(xq + m4 * n, xsum + m4 * ng, m - m4, w, r0, rows,
                                       out + m4 * ldo, ldo);
}
