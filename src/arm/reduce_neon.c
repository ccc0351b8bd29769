/* SPDX-License-Identifier: MIT */
/*
 * Reductions for AArch64 NEON, bit-identical to src/ref/reduce_ref.c: absolute maximum and
 * min/max with NaN ignored (fmaxf / fminf semantics: FMAXNM / FMINNM, which also order -0 below
 * +0 exactly as the reference's fmaxf / fminf do on AArch64), and the non-finite scan. Max and
 * min are exact, so lane-wise partial results combine to the same bits in any order.
 */
#include <arm_neon.h>

#include "../core/kernels.h"
#include "neon_common.h"

float qs_amax_f32__neon(const float *src, int64_t n)
{
    return amax_neon(src, n);
}

void qs_minmax_f32__neon(const float *src, int64_t n, float *lo, float *hi)
{
    float32x4_t l0 = vdupq_n_f32(*lo), l1 = l0, h0 = vdupq_n_f32(*hi), h1 = h0;
    int64_t i = 0;
    float l, h;

    for (; i + 8 <= n; i += 8) {
        float32x4_t a = vld1q_f32(src + i), b = vld1q_f32(src + i + 4);
        l0 = vminnmq_f32(l0, a);
        h0 = vmaxnmq_f32(h0, a);
        l1 = vminnmq_f32(l1, b);
        h1 = vmaxnmq_f32(h1, b);
    }
    l = vminnmvq_f32(vminnmq_f32(l0, l1));
    h = vmaxnmvq_f32(vmaxnmq_f32(h0, h1));
    for (; i < n; i++) {
        l = fminf(l, src[i]);
        h = fmaxf(h, src[i]);
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
