/* SPDX-License-Identifier: MIT */
/*
 * The MXFP4 block-scale search of GPTQ (docs/calibration.md §15.1). The OCP rule takes the E8M0
 * exponent e = floor(log2 amax) - 2, so amax / 2^e lies in [4, 8) and elements above 6 * 2^e
 * clip to 6 * 2^e; NVIDIA's RCEIL rule takes e + 1 whenever that would clip, and never clips but
 * doubles the step. Neither is right for every block: GPTQ's updates move a block's values, and a
 * clipped large weight costs more than a coarser step or the reverse depending on the Hessian.
 * The block is therefore swept twice, once per exponent, exactly as the GPTQ sweep will run it
 * (element rule, error e_i = (x_i - q_i) / U_ii, later columns of the block updated along U's
 * row), and the exponent with the smaller loss sum e_i^2 wins. That sum is the rise of the layer
 * objective ||X W^T - X Q^T||^2 / 2 caused by quantizing the block while the columns after it
 * still compensate (the OBS identity GPTQ rests on), so the choice is greedy-optimal for GPTQ's
 * own objective. Both candidates are ordinary E8M0 scales: the output stays plain MXFP4.
 */
#include <math.h>
#include <string.h>

#include "gptq_internal.h"

#define MX_BLOCK 32

/* GPTQ's loss over one block with scale byte sb; stops once it reaches `bound`. */
static double block_loss(uint8_t sb, const float *v, int64_t len, const float *u, int64_t ldu,
                         double bound)
{
    float x[MX_BLOCK];
    double loss = 0.0;
    /* qs_grid_mx_round with its two scalings hoisted out of the loop */
    const float inv = qs_grid_mx_inv(sb), scale = qs_e8m0_decode_inline(sb);

    memcpy(x, v, (size_t)len * sizeof *x);
    for (int64_t i = 0; i < len && loss < bound; i++) {
        const float *urow = u + i * ldu;
        float er = (x[i] - qs_e2m1_values[qs_hd_e2m1_encode(x[i] * inv)] * scale) / urow[i];
        loss += (double)er * (double)er;
        for (int64_t c = i + 1; c < len; c++)
            x[c] -= er * urow[c];
    }
    return loss;
}

void qs_grid_fit_search(struct qs_grid *g, int64_t row, int64_t gi, const float *v, int64_t len,
                        const float *u, int64_t ldu)
{
    int64_t unit = row * g->groups + gi;
    uint8_t rule = qs_ref_mx_scale(v, len, g->rounding, 2, 6.0f);
    uint8_t floor_e = qs_ref_mx_scale(v, len, QS_MX_SCALE_FLOOR, 2, 6.0f);
    /* the candidate that is not the rule's: floor + 1 (FLOOR) or floor (RCEIL, when it differs) */
    uint8_t other = rule == floor_e ? (uint8_t)(floor_e + 1) : floor_e;

    g->sb[unit] = rule;
    /* an all-zero block (byte 0), a NaN byte, or no E8M0 above the largest: nothing to choose */
    int nonzero = 0;
    for (int64_t i = 0; i < len; i++)
        nonzero |= v[i] != 0.0f;
    if (len > MX_BLOCK || rule == 0xFF || floor_e >= 0xFE || !nonzero)
        return;
    double best = block_loss(rule, v, len, u, ldu, INFINITY);
    if (block_loss(other, v, len, u, ldu, best) < best)
        g->sb[unit] = other;
}
