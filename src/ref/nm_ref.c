/* SPDX-License-Identifier: MIT */
/*
 * Scalar reference of the general N:M kernels (docs/sparsity.md §2.2, §6.4): the STRIP mask for
 * any 1 <= N < M <= 16 from |w|, Wanda scores or signed caller scores, and the fused SR-STE step
 * (mask, masked weights, gradient with the decay term). A segment holds whole groups: n % M == 0.
 */
#include <math.h>

#include "../core/kernels.h"
#include "ref.h"
#include "sp24_ref.h"

/* Keep flags of one group: element i is kept when fewer than N elements outrank it, where j
 * outranks i if its key is larger, or equal at a lower index (§2.2 rules 1-3). */
static void group_keep(const uint32_t *key, int32_t nkeep, int32_t m, uint8_t *keep)
{
    for (int32_t i = 0; i < m; i++) {
        int32_t rank = 0;
        for (int32_t j = 0; j < m; j++)
            rank += key[j] > key[i] || (key[j] == key[i] && j < i);
        keep[i] = (uint8_t)(rank < nkeep);
    }
}

static void group_keys(const float *w, const float *norm, int32_t m, int32_t method,
                       uint32_t *key)
{
    for (int32_t i = 0; i < m; i++) {
        if (method == 2) {
            key[i] = qs_sp_key_signed(qs_ld_f32(w + i));
        } else {
            float a = fabsf(qs_ld_f32(w + i));
            key[i] = qs_sp_key_abs(norm ? a * qs_ld_f32(norm + i) : a);
        }
    }
}

void qs_nm_mask_f32__ref(const float *w, const float *norm, int64_t n, int32_t nkeep, int32_t m,
                         int32_t method, uint8_t *mask)
{
    uint32_t key[16];

    for (int64_t g = 0; g + m <= n; g += m) {
        group_keys(w + g, norm ? norm + g : NULL, m, method, key);
        group_keep(key, nkeep, m, mask + g);
    }
}

void qs_nm_srste_f32__ref(const float *w, const float *grad, int64_t n, int32_t nkeep, int32_t m,
                          float lambda, float *w_out, float *g_out, uint8_t *mask)
{
    uint32_t key[16];
    uint8_t keep[16];

    for (int64_t g = 0; g + m <= n; g += m) {
        /* The whole group's mask first: w_out may alias w. */
        group_keys(w + g, NULL, m, 0, key);
        group_keep(key, nkeep, m, keep);
        for (int32_t i = 0; i < m; i++) {
            float x = qs_ld_f32(w + g + i);
            if (g_out) {
                /* g + lambda * (1 - M) * w (§6.4): two roundings, no contraction; a kept
                 * gradient is moved as it is, a computed NaN is the canonical one (ref.h) */
                float gr = qs_ld_f32(grad + g + i);
                float decay = lambda * x;
                qs_st_f32(g_out + g + i, keep[i] ? gr : qs_ref_nan_canon(gr + decay));
            }
            if (w_out)
                qs_st_f32(w_out + g + i, keep[i] ? x : 0.0f);
            if (mask)
                mask[g + i] = keep[i];
        }
    }
}
