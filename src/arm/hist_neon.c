/* SPDX-License-Identifier: MIT */
/*
 * Calibration statistics for AArch64 NEON: finite range scan with NaN / Inf counts, power-of-two
 * histogram binning and per-channel sum of squares. Same results as src/ref/hist_ref.c bit for
 * bit (docs/calibration.md §3): non-finite lanes are classified from the bits and replaced before
 * any arithmetic (so no NaN, signaling or quiet, reaches an FP instruction), min and max are exact
 * once zeros are made +0, the bin index is read from the exponent and mantissa bits
 * (floor(|x| * 2^-k) is a right shift of the 24-bit significand), and every sum of squares is one
 * double product and one addition per element, as in the reference. Tails use the reference's
 * scalar steps.
 */
#include <arm_neon.h>
#include <math.h>
#include <string.h>

#include "../core/kernels.h"
#include "../ref/ref.h"

#define ABS_MASK 0x7FFFFFFFu
#define INF_BITS 0x7F800000u

/* Many values in few bins make consecutive increments of one counter wait for each other; four
 * private uint32 copies of the histogram, lane j feeding copy j, break that chain. At most
 * SUB_CHUNK values per round keep the uint32 counters from wrapping. */
#define SUB_COPIES 4
#define SUB_MAX_BINS 2048
#define SUB_MIN_N 16384
#define SUB_CHUNK ((int64_t)1 << 30)

static inline uint32_t bits_neon(float f)
{
    uint32_t u;
    memcpy(&u, &f, sizeof u);
    return u;
}

/* Running state of the range scan: lane-wise min / max of the finite values (as +0 for zeros). */
typedef struct {
    float32x4_t lo, hi;
} scan_neon;

static inline void scan_init_neon(scan_neon *s)
{
    s->lo = vdupq_n_f32(INFINITY);
    s->hi = vdupq_n_f32(-INFINITY);
}

/* NaN and Inf among src[0..len), added to *nn and *ni. Callers come here only when a vector
 * holds a non-finite value, which is rare; out of line and cold, because inlined, GCC computes
 * the counts speculatively for every vector and the branch saves nothing. */
static __attribute__((noinline, cold)) void count_nonfinite_neon(const float *src, int len,
                                                                 uint64_t *nn, uint64_t *ni)
{
    for (int j = 0; j < len; j++) {
        uint32_t a = bits_neon(qs_ld_f32(src + j)) & ABS_MASK;
        *nn += a > INF_BITS;
        *ni += a == INF_BITS;
    }
}

/* One step of four values; returns the finite-lane mask and *ua the |x| bits. */
static inline uint32x4_t scan_step_neon(scan_neon *s, float32x4_t x, uint32x4_t *ua)
{
    uint32x4_t xb = vreinterpretq_u32_f32(x);
    uint32x4_t u = vandq_u32(xb, vdupq_n_u32(ABS_MASK));
    uint32x4_t fin = vcltq_u32(u, vdupq_n_u32(INF_BITS));

    /* non-finite lanes become +0 before the add (never a NaN operand), then the neutral element;
     * -0 + +0 = +0 as in the reference, so min and max never order two zeros */
    float32x4_t v = vaddq_f32(vreinterpretq_f32_u32(vandq_u32(xb, fin)), vdupq_n_f32(0.0f));
    s->lo = vminq_f32(s->lo, vbslq_f32(fin, v, vdupq_n_f32(INFINITY)));
    s->hi = vmaxq_f32(s->hi, vbslq_f32(fin, v, vdupq_n_f32(-INFINITY)));
    *ua = u;
    return fin;
}

/* The reference's scalar step for element x; returns 1 when x is finite. */
static inline int scan_one_neon(float x, float *l, float *h, uint64_t *nn, uint64_t *ni)
{
    uint32_t a = bits_neon(x) & ABS_MASK;
    if (a > INF_BITS) {
        (*nn)++;
    } else if (a == INF_BITS) {
        (*ni)++;
    } else {
        float v = x + 0.0f;
        *l = v < *l ? v : *l;
        *h = v > *h ? v : *h;
        return 1;
    }
    return 0;
}

void qs_hist_scan__neon(const float *src, int64_t n, float *lo, float *hi, uint64_t *n_nan,
                        uint64_t *n_inf)
{
    scan_neon s, t;
    uint64_t nn = 0, ni = 0;
    int64_t i = 0;

    scan_init_neon(&s);
    scan_init_neon(&t);
    for (; i + 8 <= n; i += 8) {
        uint32x4_t ua, ub;
        uint32x4_t fa = scan_step_neon(&s, vld1q_f32(src + i), &ua);
        uint32x4_t fb = scan_step_neon(&t, vld1q_f32(src + i + 4), &ub);
        if (vminvq_u32(vandq_u32(fa, fb)) == 0)
            count_nonfinite_neon(src + i, 8, &nn, &ni);
    }
    for (; i + 4 <= n; i += 4) {
        uint32x4_t u;
        if (vminvq_u32(scan_step_neon(&s, vld1q_f32(src + i), &u)) == 0)
            count_nonfinite_neon(src + i, 4, &nn, &ni);
    }
    /* min and max are exact and no lane holds a NaN or a -0: any order gives the same bits */
    float l = vminvq_f32(vminq_f32(s.lo, t.lo)), h = vmaxvq_f32(vmaxq_f32(s.hi, t.hi));
    for (; i < n; i++)
        (void)scan_one_neon(qs_ld_f32(src + i), &l, &h, &nn, &ni);
    /* strict comparisons against the caller's values, exactly as the reference's loop ends */
    if (l < *lo)
        *lo = l;
    if (h > *hi)
        *hi = h;
    *n_nan += nn;
    *n_inf += ni;
}

/* Bin indices from |x| bits u (finite lanes meaningful), clamped to the top bin; shift0 = 150 + k
 * with k in [-149, 200]. */
static inline uint32x4_t bin_index_neon(uint32x4_t u, int32x4_t shift0, uint32x4_t top)
{
    uint32x4_t e = vshrq_n_u32(u, 23);
    uint32x4_t hidden = vandq_u32(vtstq_u32(u, vdupq_n_u32(INF_BITS)), vdupq_n_u32(0x800000u));
    uint32x4_t mant = vorrq_u32(vandq_u32(u, vdupq_n_u32(0x7FFFFFu)), hidden);
    /* |x| = mant * 2^(max(e, 1) - 150), so floor(|x| / 2^k) = mant >> (150 + k - max(e, 1)) */
    int32x4_t s = vsubq_s32(shift0, vreinterpretq_s32_u32(vmaxq_u32(e, vdupq_n_u32(1))));
    /* USHL takes a signed byte: shifts clamped to [0, 32], and 32 already gives 0 */
    int32x4_t r = vnegq_s32(vminq_s32(vmaxq_s32(s, vdupq_n_s32(0)), vdupq_n_s32(32)));
    uint32x4_t b = vshlq_u32(mant, r);
    /* a negative shift means |x| >= 2^24 * 2^k, past every bin: all ones, clamped to the top */
    b = vorrq_u32(b, vreinterpretq_u32_s32(vshrq_n_s32(s, 31)));
    return vminq_u32(b, top);
}

/* Add 1 to counter base[b[j]] for each finite lane j (fin all ones there). */
#define COUNT4_NEON(base, b, fin)                                                                  \
    do {                                                                                           \
        if (vminvq_u32(fin)) {                                                                     \
            (base)[vgetq_lane_u32((b), 0)]++;                                                      \
            (base)[vgetq_lane_u32((b), 1)]++;                                                      \
            (base)[vgetq_lane_u32((b), 2)]++;                                                      \
            (base)[vgetq_lane_u32((b), 3)]++;                                                      \
        } else {                                                                                   \
            uint32_t b_[4], f_[4];                                                                 \
            vst1q_u32(b_, (b));                                                                    \
            vst1q_u32(f_, (fin));                                                                  \
            for (int j_ = 0; j_ < 4; j_++)                                                         \
                if (f_[j_])                                                                        \
                    (base)[b_[j_]]++;                                                              \
        }                                                                                          \
    } while (0)

static inline uint32x4_t lane_offsets_neon(int32_t nbins)
{
    const uint32_t off[4] = {0, (uint32_t)nbins, 2u * (uint32_t)nbins, 3u * (uint32_t)nbins};
    return vld1q_u32(off);
}

/* Sum of bin j over the SUB_COPIES private copies. */
static inline uint64_t sub_sum_neon(const uint32_t *sub, int32_t nbins, uint32_t j)
{
    uint64_t t = 0;
    for (int c = 0; c < SUB_COPIES; c++)
        t += sub[c * nbins + j];
    return t;
}

/* n % 4 == 0, n <= SUB_CHUNK, nbins <= SUB_MAX_BINS. */
static void update_sub_neon(const float *src, int64_t n, int32x4_t shift0, uint32x4_t top,
                            int32_t nbins, uint64_t *counts)
{
    uint32_t sub[SUB_COPIES * SUB_MAX_BINS];
    const uint32x4_t lane_off = lane_offsets_neon(nbins), inf = vdupq_n_u32(INF_BITS);
    uint32x4_t vmax = vdupq_n_u32(0);

    memset(sub, 0, (size_t)SUB_COPIES * (size_t)nbins * sizeof sub[0]);
    for (int64_t i = 0; i < n; i += 4) {
        uint32x4_t u = vandq_u32(vreinterpretq_u32_f32(vld1q_f32(src + i)), vdupq_n_u32(ABS_MASK));
        uint32x4_t b = bin_index_neon(u, shift0, top), fin = vcltq_u32(u, inf);
        vmax = vmaxq_u32(vmax, b);
        COUNT4_NEON(sub, vaddq_u32(b, lane_off), fin);
    }
    uint32_t used = vmaxvq_u32(vmax);
    for (uint32_t j = 0; j <= used; j++)
        counts[j] += sub_sum_neon(sub, nbins, j);
}

void qs_hist_update__neon(const float *src, int64_t n, int32_t k, int32_t nbins, uint64_t *counts)
{
    /* k < -149 only for a sub-normal maximum: subnormal significands would need a left shift */
    if (k < -149) {
        qs_hist_update__ref(src, n, k, nbins, counts);
        return;
    }
    if (k > 200)
        k = 200; /* every finite |x| < 2^128 lands in bin 0 either way */
    const int32x4_t shift0 = vdupq_n_s32(150 + k);
    const uint32x4_t top = vdupq_n_u32((uint32_t)nbins - 1), inf = vdupq_n_u32(INF_BITS);
    int64_t i = 0;

    if (nbins <= SUB_MAX_BINS && n >= SUB_MIN_N) {
        while (n - i >= 4) {
            int64_t len = (n - i) / 4 * 4;
            len = len < SUB_CHUNK ? len : SUB_CHUNK;
            update_sub_neon(src + i, len, shift0, top, nbins, counts);
            i += len;
        }
    }
    for (; i + 4 <= n; i += 4) {
        uint32x4_t u = vandq_u32(vreinterpretq_u32_f32(vld1q_f32(src + i)), vdupq_n_u32(ABS_MASK));
        uint32x4_t b = bin_index_neon(u, shift0, top), fin = vcltq_u32(u, inf);
        COUNT4_NEON(counts, b, fin);
    }
    qs_hist_update__ref(src + i, n - i, k, nbins, counts);
}

/* One pass over src: the scan of qs_hist_scan__neon and the binning of update_sub_neon into
 * private counters, committed only when the span's maximum fits the grid (the reference's
 * rule). Needs the conditions of update_sub_neon and k >= -149. */
static int32_t scan_update_sub_neon(const float *src, int64_t n, int32_t k, int32_t nbins,
                                    uint64_t *counts, float *l, float *h, uint64_t *n_nan,
                                    uint64_t *n_inf)
{
    uint32_t sub[SUB_COPIES * SUB_MAX_BINS];
    const int32x4_t shift0 = vdupq_n_s32(150 + (k > 200 ? 200 : k));
    const uint32x4_t top = vdupq_n_u32((uint32_t)nbins - 1), lane_off = lane_offsets_neon(nbins);
    uint32x4_t vmax = vdupq_n_u32(0);
    uint64_t nn = 0, ni = 0;
    scan_neon s;
    int64_t i = 0;

    scan_init_neon(&s);
    memset(sub, 0, (size_t)SUB_COPIES * (size_t)nbins * sizeof sub[0]);
    for (; i + 4 <= n; i += 4) {
        uint32x4_t u;
        uint32x4_t fin = scan_step_neon(&s, vld1q_f32(src + i), &u);
        uint32x4_t b = bin_index_neon(u, shift0, top);
        vmax = vmaxq_u32(vmax, b);
        b = vaddq_u32(b, lane_off);
        if (vminvq_u32(fin)) {
            sub[vgetq_lane_u32(b, 0)]++;
            sub[vgetq_lane_u32(b, 1)]++;
            sub[vgetq_lane_u32(b, 2)]++;
            sub[vgetq_lane_u32(b, 3)]++;
        } else {
            uint32_t bj[4], fj[4];
            count_nonfinite_neon(src + i, 4, &nn, &ni);
            vst1q_u32(bj, b);
            vst1q_u32(fj, fin);
            for (int j = 0; j < 4; j++)
                if (fj[j])
                    sub[bj[j]]++;
        }
    }
    float lv = vminvq_f32(s.lo), hv = vmaxvq_f32(s.hi);
    uint32_t used = vmaxvq_u32(vmax);
    /* the tail (< 4 values) with the reference's scalar steps, into copy 0 */
    for (; i < n; i++) {
        float x = qs_ld_f32(src + i);
        if (scan_one_neon(x, &lv, &hv, &nn, &ni)) {
            double bi = floor(ldexp((double)fabsf(x), -k));
            uint32_t j = bi < (double)(nbins - 1) ? (uint32_t)bi : (uint32_t)nbins - 1;
            sub[j]++;
            used = j > used ? j : used;
        }
    }
    *n_nan += nn;
    *n_inf += ni;
    *l = lv;
    *h = hv;
    int32_t fits = (double)(-lv > hv ? -lv : hv) < ldexp((double)nbins, k);
    if (fits)
        for (uint32_t j = 0; j <= used; j++)
            counts[j] += sub_sum_neon(sub, nbins, j);
    return fits;
}

int32_t qs_hist_scan_update__neon(const float *src, int64_t n, int32_t k, int32_t nbins,
                                  uint64_t *counts, float *lo, float *hi, uint64_t *n_nan,
                                  uint64_t *n_inf)
{
    float l = INFINITY, h = -INFINITY;
    int32_t fits;

    if (k < -149 || nbins > SUB_MAX_BINS || n < SUB_MIN_N || n > SUB_CHUNK) {
        qs_hist_scan__neon(src, n, &l, &h, n_nan, n_inf);
        /* the span's own maximum decides; an empty or zero-only span always fits */
        fits = (double)(-l > h ? -l : h) < ldexp((double)nbins, k);
        if (fits)
            qs_hist_update__neon(src, n, k, nbins, counts);
    } else {
        fits = scan_update_sub_neon(src, n, k, nbins, counts, &l, &h, n_nan, n_inf);
    }
    if (l < *lo)
        *lo = l;
    if (h > *hi)
        *hi = h;
    return fits;
}

void qs_hist_sumsq__neon(const float *src, int64_t n, double *acc)
{
    const uint32x4_t absm = vdupq_n_u32(ABS_MASK), inf = vdupq_n_u32(INF_BITS);
    int64_t j = 0;

    for (; j + 4 <= n; j += 4) {
        uint32x4_t xb = vreinterpretq_u32_f32(vld1q_f32(src + j));
        /* non-finite elements become +0.0: acc + 0.0 is what the reference adds */
        float32x4_t x = vreinterpretq_f32_u32(vandq_u32(xb, vcltq_u32(vandq_u32(xb, absm), inf)));
        float64x2_t d0 = vcvt_f64_f32(vget_low_f32(x)), d1 = vcvt_high_f64_f32(x);
        /* product exact in double, then one rounding per addition: no fused multiply-add */
        vst1q_f64(acc + j, vaddq_f64(vld1q_f64(acc + j), vmulq_f64(d0, d0)));
        vst1q_f64(acc + j + 2, vaddq_f64(vld1q_f64(acc + j + 2), vmulq_f64(d1, d1)));
    }
    qs_hist_sumsq__ref(src + j, n - j, acc + j);
}
