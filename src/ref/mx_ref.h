/* SPDX-License-Identifier: MIT */
/* The OCP MX shared-exponent rules (docs/formats.md §13), shared by mxfp4_ref.c and mxfp8_ref.c. */
#ifndef QS_REF_MX_REF_H
#define QS_REF_MX_REF_H

#include <stdint.h>

/* The E8M0 scale byte of one block: 0xFF if any element is NaN or Inf (*special = 1), else
 * shared_exp + 127 for the FLOOR (rounding 0) or RCEIL (rounding 1) rule. emax and elem_max are
 * the element format's (2 and 6 for E2M1, 8 and 448 for E4M3). */
uint8_t qs_ref_mx_scale(const float *v, int64_t len, int32_t rounding, int emax, float elem_max);
/* The same rule from the block's absolute maximum of a finite block (§13 steps 2, 3): 0x00 for
 * amax 0, else shared_exp + 127. SIMD kernels that find amax themselves call this. */
uint8_t qs_ref_mx_scale_from_amax(float amax, int32_t rounding, int emax, float elem_max);

#endif /* QS_REF_MX_REF_H */
