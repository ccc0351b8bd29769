/* SPDX-License-Identifier: MIT */
/* The int8 codebooks of the int8-activation matmul (mm8_ref.c), shared with the SIMD kernels. */
#ifndef QS_REF_MM8_REF_H
#define QS_REF_MM8_REF_H

#include <stdint.h>

/* rne(127 * codebook[c]) for the NF4 and FP4 codebooks: the weight value an int8 dot product
 * uses (an extra rounding of at most 1/254 of absmax per element; include/qsparse/matmul.h). */
extern const int8_t qs_nf4_codebook_i8[16];
extern const int8_t qs_fp4_codebook_i8[16];

#endif /* QS_REF_MM8_REF_H */
