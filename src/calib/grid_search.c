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

/* GPTQ's loss over one block with scale byte sb; stops once it reaches `bound`. The sweep's
 * codes, rounded values and errors go to *out (complete only when the loss stays below bound). */
static double block_loss(uint8_t sb, const float *v, int64_t len, const float *u, int64_t ldu,
                         double bound, struct qs_mx_sweep *out)
{
    float x[QS_MX_SWEEP];
    double loss = 0.0;
    /* qs_grid_mx_round with its two scalings hoisted out of the loop */
    const float inv = qs_grid_mx_inv(sb), scale = qs_e8m0_decode_inline(sb);

    memcpy(x, v, (size_t)len * sizeof *x);
    for (int64_t i = 0; i < len && loss < bound; i++) {
        const float *urow = u + i * ldu;
        uint8_t code = qs_hd_e2m1_encode(x[i] * inv);
        float qv = qs_e2m1_values[code] * scale;
        float er = (x[i] - qv) / urow[i];
        loss += (double)er * (double)er;
        for (int64_t c = i + 1; c < len; c++)
            x[c] -= er * urow[c];
        out->code[i] = code;
        out->q[i] = qv;
        out->er[i] = er;
    }
    return loss;
}

int qs_grid_fit_search(struct qs_grid *g, int64_t row, int64_t gi, const float *v, int64_t len,
                       const float *u, int64_t ldu, struct qs_mx_sweep *out)
{
    int64_t unit = row * g->groups + gi;
    float amax = 0.0f;
    uint8_t rule = 0xFF, floor_e = 0xFF;
    struct qs_mx_sweep other_sweep;

    /* qs_ref_mx_scale's amax, once for both rules */
    for (int64_t i = 0; i < len; i++) {
        if ((qs_hd_bits(v[i]) & 0x7F800000u) == 0x7F800000u) {
            amax = NAN;
            break;
        }
        amax = qs_hd_absmax_step(amax, v[i]);
    }
    if (amax == amax) {
        rule = qs_hd_mx_scale_from_amax(amax, g->rounding, 2, 6.0f);
        floor_e = qs_hd_mx_scale_from_amax(amax, QS_MX_SCALE_FLOOR, 2, 6.0f);
    }
    /* the candidate that is not the rule's: floor + 1 (FLOOR) or floor (RCEIL, when it differs) */
    uint8_t other = rule == floor_e ? (uint8_t)(floor_e + 1) : floor_e;

    g->sb[unit] = rule;
    /* an all-zero block (byte 0), a NaN byte, or no E8M0 above the largest: nothing to choose */
    if (len > QS_MX_SWEEP || rule == 0xFF || floor_e >= 0xFE || amax == 0.0f)
        return 0;
    double best = block_loss(rule, v, len, u, ldu, INFINITY, out);
    if (block_loss(other, v, len, u, ldu, best, &other_sweep) < best) {
        g->sb[unit] = other;
        *out = other_sweep;
    }
    return 1;
}
