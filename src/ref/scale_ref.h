/* SPDX-License-Identifier: MIT */
/* Scale rules of the quantization drivers (scale_ref.c). */
#ifndef QS_REF_SCALE_REF_H
#define QS_REF_SCALE_REF_H

#include <stdint.h>

/* Symmetric INT8 (§9): scale = fl(amax / 127), mul = fl(127 / amax); amax 0 -> scale 1, mul 0. */
void qs_ref_int8_symmetric(float amax, float *scale, float *mul);
/* Asymmetric INT8 (§9) from the observed min and max: scale, mul = fl(1 / scale), zero point. */
void qs_ref_int8_asymmetric(float mn, float mx, float *scale, float *mul, int32_t *zp);
/* LLM.int8 (§8): mul = fl(127 / row_stat). */
float qs_ref_llm_int8_mul(float row_stat);
/* FP8 per-tensor scale (§10): fl(amax / elem_max), 1.0 for amax 0. */
float qs_ref_fp8_scale(float amax, float elem_max);
/* NVFP4 per-tensor scale (§14): fl(amax / 2688), 1.0 when that is 0. */
float qs_ref_nvfp4_global_scale(float amax);
/* Double quantization (§6.1): the mean offset, and absmax[i] -= offset in place. */
float qs_ref_dq_offset(const float *absmax, int64_t nb);
void qs_ref_dq_center(float *absmax, int64_t nb, float offset);

#endif /* QS_REF_SCALE_REF_H */
