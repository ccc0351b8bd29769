/* SPDX-License-Identifier: MIT */
/*
 * The summation order of the matmul GEMV definition (include/qsparse/matmul.h), shared by the
 * f32-activation reference (matmul_ref.c) and the bf16-activation reference (mm_abf16_ref.c):
 * inside a segment, the product x_k * v_k goes into partial sum p[(k - segment start) mod 16]
 * (ascending k, each p starting at +0), and the segment sum is the fixed tree p[i] += p[i + 8]
 * (i < 8), p[i] += p[i + 4] (i < 4), p[i] += p[i + 2], p[0] += p[1]. Reference files only.
 */
#ifndef QS_REF_MM_LANES_REF_H
#define QS_REF_MM_LANES_REF_H

#include <stdint.h>

#include "ref.h"

#define MM_LANES 16

struct mm_lanes {
    float p[MM_LANES];
    int64_t i;
};

static inline void mm_lanes_reset(struct mm_lanes *l)
{
    for (int i = 0; i < MM_LANES; i++)
        l->p[i] = 0.0f;
    l->i = 0;
}

/* Element k goes to lane (l->i + k) % 16. Once the lanes are at a multiple of 16, whole rounds
 * of 16 run as one loop over the lanes (the same order, in a form the compiler vectorizes). */
static inline void mm_lanes_feed(struct mm_lanes *l, const float *x, const float *v, int64_t n)
{
    int64_t k = 0;

    for (; k < n && (l->i + k) % MM_LANES != 0; k++)
        l->p[(l->i + k) % MM_LANES] += qs_ld_f32(x + k) * v[k];
    for (; k + MM_LANES <= n; k += MM_LANES)
        for (int j = 0; j < MM_LANES; j++)
            l->p[j] += qs_ld_f32(x + k + j) * v[k + j];
    for (; k < n; k++)
        l->p[(l->i + k) % MM_LANES] += qs_ld_f32(x + k) * v[k];
    l->i += n;
}

static inline float mm_lanes_sum(const struct mm_lanes *l)
{
    float t[MM_LANES];

    for (int i = 0; i < MM_LANES; i++)
        t[i] = l->p[i];
    for (int h = MM_LANES / 2; h >= 1; h /= 2)
        for (int i = 0; i < h; i++)
            t[i] = t[i] + t[i + h];
    return t[0];
}

#endif /* QS_REF_MM_LANES_REF_H */
