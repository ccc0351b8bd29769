/* SPDX-License-Identifier: MIT */
/*
 * Exact E2M1 decision thresholds of NVFP4 blocks (docs/formats.md §11, §14), shared by
 * nvfp4_avx2.c and nvfp4_avx512.c so that neither divides per element. Portable C, no intrinsics.
 *
 * The reference encodes P = E2M1_RNE_sat(fl(v / den)). For den finite and > 0, fl(a / den) of
 * a = |v| is the correctly rounded quotient, and the magnitude code is the number of these facts
 * that hold (the E2M1 midpoints with their ties to even):
 *   fl(q) > 0.25, fl(q) >= 0.75, fl(q) > 1.25, fl(q) >= 1.75, fl(q) > 2.5, fl(q) >= 3.5, fl(q) > 5.
 * Rounding is monotone, so fl(q) > T holds exactly when the exact q lies above the midpoint between
 * T and its f32 successor (a tie there rounds to the even T: not counted), and fl(q) >= T exactly
 * when q reaches the midpoint between T's predecessor and T (a tie rounds to the even T: counted).
 * Those midpoints M_k (25 significant bits each, nvfp4_mid) times den (24 bits) are exact in double,
 * so q > M_k is a > B_k = M_k * den and q >= M_k is a >= B_k, with no rounding anywhere. For an
 * f32 a (Inf included), a > B holds exactly when a > floor_f32(B), the largest f32 not above B.
 * a >= B is the same fact, because a = B never happens: M_k is an odd 25-bit integer times a
 * power of two, and den an odd integer of at most 24 bits times one, so M_k * den has at least 25
 * significant bits and is no f32. Hence seven f32 thresholds F_k = floor_f32(M_k * den) per den,
 * and code = #{k : a > F_k} (past FLT_MAX the floor is FLT_MAX, which only +Inf exceeds).
 * tests/test_e2m1_exact.c checks this against the reference for every UE4M3 scale byte, a range
 * of tensor scales and every f32 within a few ulps of every F_k, and every f32 quotient in
 * [2^-4, 6.25) for two dens. NaN fails every comparison
 * (magnitude 0; the kernels clear its sign), and a den of 0, Inf or NaN is left to the division.
 *
 * Within one tensor den = fl(value(scale) * s_global) takes at most 127 values, one per scale
 * byte, so a kernel call fills a row of thresholds per scale byte it meets (nvfp4_rows_cover),
 * and each block then takes three comparisons against its row.
 */
#ifndef QS_X86_NVFP4_ROWS_H
#define QS_X86_NVFP4_ROWS_H

#include <stdint.h>

/* Rows of thresholds for scale bytes lo ... hi (those filled so far; lo > hi: none). Row s holds
 * F_0 ... F_6 of den = fl(value(s) * s_global) in lanes 0 ... 6 (lane 7 is never read). */
struct nvfp4_rows {
    _Alignas(64) float f[128][8];
    float s_global;
    int lo, hi;
};

static inline void nvfp4_rows_init(struct nvfp4_rows *r, float s_global)
{
    r->s_global = s_global;
    r->lo = 128;
    r->hi = -1;
}

/* The midpoints M_k: 0.25 + 2^-26, 0.75 - 2^-25, 1.25 + 2^-24, 1.75 - 2^-24, 2.5 + 2^-23,
 * 3.5 - 2^-23, 5 + 2^-22 (odd k: the ">=" facts); lane 7 pads the row (its threshold is never
 * read). A kernel fills row s with floor_f32(M_k * den) for den = fl(value(s) * s_global), the
 * reference's den, computing M_k * den in double (exact) and rounding it down once. */
#define NVFP4_MIDPOINTS_INIT                                                                       \
    {                                                                                              \
        0x1.000001p-2, 0x1.7fffffp-1, 0x1.400001p+0, 0x1.bfffffp+0, 0x1.400001p+1, 0x1.bfffffp+1,  \
            0x1.400001p+2, 0x1p+0,                                                                 \
    }

/* Fills the row of one scale byte (see above). */
typedef void nvfp4_row_fill_fn(struct nvfp4_rows *r, int s);

/* Make rows lo ... hi (0 <= lo <= hi <= 127) available. Only rows of a finite den > 0 are ever
 * read; the others are filled all the same (their values do not matter). */
static inline void nvfp4_rows_cover(struct nvfp4_rows *r, int lo, int hi,
                                    nvfp4_row_fill_fn *fill)
{
    if (r->lo > r->hi) {
        for (int s = lo; s <= hi; s++)
            fill(r, s);
        r->lo = lo;
        r->hi = hi;
        return;
    }
    for (int s = lo; s < r->lo; s++)
        fill(r, s);
    for (int s = r->hi + 1; s <= hi; s++)
        fill(r, s);
    if (lo < r->lo)
        r->lo = lo;
    if (hi > r->hi)
        r->hi = hi;
}

#endif /* QS_X86_NVFP4_ROWS_H */
