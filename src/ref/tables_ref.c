/* SPDX-License-Identifier: MIT */
/*
 * Codebooks and decision thresholds of docs/formats.md (§2, §3, §4, §6.3, §11), written as C99
 * hexadecimal float literals so that every value is exactly the f32 bit pattern listed there;
 * tests/test_spec_tables.c checks each one against those hex columns.
 */
#include <math.h>

#include "element_hd.h"
#include "ref.h"

/* §2: NF4, code = table index (7 negative values, 0, 8 positive values). */
const float qs_nf4_codebook[16] = QS_NF4_CODEBOOK_INIT; /* element_hd.h */

/* §3: t_k between codes k and k+1; code = #{k : x > t_k} (strict: a tie takes the lower code). */
const float qs_nf4_thresholds[15] = QS_NF4_THRESHOLDS_INIT; /* element_hd.h */

/* §4: bitsandbytes FP4, bits s e1 e0 m; codes 8..15 negate 0..7 (code 8 is -0.0). */
const float qs_fp4_codebook[16] = QS_FP4_CODEBOOK_INIT; /* element_hd.h */

/* §4: t_1 ... t_7, the CUDA literals (five of seven are not the exact f32 midpoints). */
const float qs_fp4_thresholds[7] = QS_FP4_THRESHOLDS_INIT; /* element_hd.h */

/* §4: R[r], the low three code bits for magnitude rank r. */
const uint8_t qs_fp4_rank_code[8] = QS_FP4_RANK_CODE_INIT;

/* §6.3: the signed dynamic map, index 0 ... 255 (hard-coded: numpy.linspace gives other bits). */
const float qs_dyn8_map[256] = QS_DYN8_MAP_INIT; /* element_hd.h */

/* §11: E2M1 values by code (sign bit 3; code 0x8 is -0.0, which §13 keeps when decoding). */
const float qs_e2m1_values[16] = QS_E2M1_VALUES_INIT; /* element_hd.h */

/* value(c) of E4M3 codes 0 ... 127 (§10): m * 2^-9 for exponent field 0, (8 + m) * 2^(e - 10)
 * otherwise, NaN for 0x7F. */
const float qs_ue4m3_values[128] = {
    0.0f, 0x1p-9f, 0x1p-8f, 0x1.8p-8f, 0x1p-7f, 0x1.4p-7f, 0x1.8p-7f, 0x1.cp-7f,
    0x1p-6f, 0x1.2p-6f, 0x1.4p-6f, 0x1.6p-6f, 0x1.8p-6f, 0x1.ap-6f, 0x1.cp-6f, 0x1.ep-6f,
    0x1p-5f, 0x1.2p-5f, 0x1.4p-5f, 0x1.6p-5f, 0x1.8p-5f, 0x1.ap-5f, 0x1.cp-5f, 0x1.ep-5f,
    0x1p-4f, 0x1.2p-4f, 0x1.4p-4f, 0x1.6p-4f, 0x1.8p-4f, 0x1.ap-4f, 0x1.cp-4f, 0x1.ep-4f,
    0x1p-3f, 0x1.2p-3f, 0x1.4p-3f, 0x1.6p-3f, 0x1.8p-3f, 0x1.ap-3f, 0x1.cp-3f, 0x1.ep-3f,
    0x1p-2f, 0x1.2p-2f, 0x1.4p-2f, 0x1.6p-2f, 0x1.8p-2f, 0x1.ap-2f, 0x1.cp-2f, 0x1.ep-2f,
    0x1p-1f, 0x1.2p-1f, 0x1.4p-1f, 0x1.6p-1f, 0x1.8p-1f, 0x1.ap-1f, 0x1.cp-1f, 0x1.ep-1f,
    0x1p+0f, 0x1.2p+0f, 0x1.4p+0f, 0x1.6p+0f, 0x1.8p+0f, 0x1.ap+0f, 0x1.cp+0f, 0x1.ep+0f,
    0x1p+1f, 0x1.2p+1f, 0x1.4p+1f, 0x1.6p+1f, 0x1.8p+1f, 0x1.ap+1f, 0x1.cp+1f, 0x1.ep+1f,
    0x1p+2f, 0x1.2p+2f, 0x1.4p+2f, 0x1.6p+2f, 0x1.8p+2f, 0x1.ap+2f, 0x1.cp+2f, 0x1.ep+2f,
    0x1p+3f, 0x1.2p+3f, 0x1.4p+3f, 0x1.6p+3f, 0x1.8p+3f, 0x1.ap+3f, 0x1.cp+3f, 0x1.ep+3f,
    0x1p+4f, 0x1.2p+4f, 0x1.4p+4f, 0x1.6p+4f, 0x1.8p+4f, 0x1.ap+4f, 0x1.cp+4f, 0x1.ep+4f,
    0x1p+5f, 0x1.2p+5f, 0x1.4p+5f, 0x1.6p+5f, 0x1.8p+5f, 0x1.ap+5f, 0x1.cp+5f, 0x1.ep+5f,
    0x1p+6f, 0x1.2p+6f, 0x1.4p+6f, 0x1.6p+6f, 0x1.8p+6f, 0x1.ap+6f, 0x1.cp+6f, 0x1.ep+6f,
    0x1p+7f, 0x1.2p+7f, 0x1.4p+7f, 0x1.6p+7f, 0x1.8p+7f, 0x1.ap+7f, 0x1.cp+7f, 0x1.ep+7f,
    0x1p+8f, 0x1.2p+8f, 0x1.4p+8f, 0x1.6p+8f, 0x1.8p+8f, 0x1.ap+8f, 0x1.cp+8f, NAN,
};
