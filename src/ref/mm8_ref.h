/* SPDX-License-Identifier: MIT */
/* The int8 codebooks of the int8-activation matmul (mm8_ref.c), shared with the SIMD kernels. */
#ifndef QS_REF_MM8_REF_H
#define QS_REF_MM8_REF_H

#include <stdint.h>

/* rne(127 * codebook[c]) for the NF4 and FP4 codebooks: the weight value an int8 dot product
 * uses (an extra rounding of at most 1/254 of absmax per element; include/qsparse/matmul.h). */
extern const int8_t qs_nf4_codebook_i8[16];
extern const int8_t qs_fp4_codebook_i8[16];
/* 2 * the E2M1 value of each code (MXFP4, NVFP4 elements): -12 ... 12, exact. */
extern const int8_t qs_e2m1_i8x2[16];
/* 2^9 * the E4M3 value of code c (not a NaN code): an integer of -229376 ... 229376. */
int32_t qs_e4m3_int9(uint8_t c);

#endif /* QS_REF_MM8_REF_H */
