/* SPDX-License-Identifier: MIT */
/*
 * Reductions for AArch64 NEON, bit-identical to src/ref/reduce_ref.c: absolute maximum and
 * min/max with every NaN ignored (signaling ones too: NaN lanes are replaced by the neutral
 * element before FMINNM / FMAXNM, which order -0 below +0 exactly as qs_ref_min / qs_ref_max do),
 * and the non-finite scan. Max and min are exact and, with zeros ordered, associative, so
 * lane-wise partial results combine to the same bits in any order.
 */
#include <arm_neon.h>

#include "../core/kernels.h"
#include "../ref/ref.h"
#include "../ref/ref.h"
#include "neon_common.h"

float qs_amax_f32__neon(const float *src, int64_t n)
{
    return amax_neon(src, n);
}

void qs_minmax_f32__neon(const float *src, int64_t n, float *lo, float *hi)
{
    const float32x4_t pinf = vdupq_n_f32(INFINITY), ninf = vdupq_n_f32(-INFINITY);
    float32x4_t l0 = vdupq_n_f32(*lo), l1 = l0, h0 = vdupq_n_f32(*hi), h1 = h0;
    int64_t i = 0;
    float l, h;

    for (; i + 8 <= n; i += 8) {
        float32x4_t a = vld1q_f32(src + i), b = vld1q_f32(src + i + 4);
        uint32x4_t na = vceqq_f32(a, a), nb = vceqq_f32(b, b); /* false for every NaN */
        /* a NaN lane becomes the neutral element, so signaling NaNs never reach FMINNM */
        l0 = vminnmq_f32(l0, vbslq_f32(na, a, pinf));
        h0 = vmaxnmq_f32(h0, vbslq_f32(na, a, ninf));
        l1 = vminnmq_f32(l1, vbslq_f32(nb, b, pinf));
        h1 = vmaxnmq_f32(h1, vbslq_f32(nb, b, ninf));
    }
    l = vminnmvq_f32(vminnmq_f32(l0, l1));
    h = vmaxnmvq_f32(vmaxnmq_f32(h0, h1));
    for (; i < n; i++) {
        l = qs_ref_min(l, qs_ld_f32(src + i));
        h = qs_ref_max(h, qs_ld_f32(src + i));
    }
    *lo = l;
    *hi = h;
}

int32_t qs_nonfinite_f32__neon(const float *src, int64_t n)
{
    /* Chunks of 1024 so that a non-finite value early in a large input ends the scan early. */
    for (int64_t i = 0; i < n; i += 1024)
        if (nonfinite_neon(src + i, n - i < 1024 ? n - i : 1024))
            return 1;
    return 0;
}
