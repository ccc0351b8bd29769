/* SPDX-License-Identifier: MIT */
/*
 * Codebooks and decision thresholds of docs/formats.md (§2, §3, §4, §6.3, §11), written as C99
 * hexadecimal float literals so that every value is exactly the f32 bit pattern listed there;
 * tests/test_spec_tables.c checks each one against those hex columns.
 */
#include "element_hd.h"
#include "ref.h"

/* §2: NF4, code = table index (7 negative values, 0, 8 positive values). */
const float qs_nf4_codebook[16] = {
    -0x1p+0f, -0x1.647362p-1f, -0x1.0cd66p-1f, -0x1.94654p-2f,
    -0x1.23449ap-2f, -0x1.7a6a7ep-3f, -0x1.74f0e2p-4f, 0.0f,
    0x1.45f5fep-4f, 0x1.4995c6p-3f, 0x1.f809bap-3f, 0x1.5a0674p-2f,
    0x1.c3497p-2f, 0x1.200f56p-1f, 0x1.722766p-1f, 0x1p+0f,
};

/* §3: t_k between codes k and k+1; code = #{k : x > t_k} (strict: a tie takes the lower code). */
const float qs_nf4_thresholds[15] = QS_NF4_THRESHOLDS_INIT; /* element_hd.h */

/* §4: bitsandbytes FP4, bits s e1 e0 m; codes 8..15 negate 0..7 (code 8 is -0.0). */
const float qs_fp4_codebook[16] = {
    0.0f, 0x1.555556p-8f, 0x1.555556p-1f, 0x1p+0f,
    0x1.555556p-2f, 0x1p-1f, 0x1.555556p-3f, 0x1p-2f,
    -0.0f, -0x1.555556p-8f, -0x1.555556p-1f, -0x1p+0f,
    -0x1.555556p-2f, -0x1p-1f, -0x1.555556p-3f, -0x1p-2f,
};

/* §4: t_1 ... t_7, the CUDA literals (five of seven are not the exact f32 midpoints). */
const float qs_fp4_thresholds[7] = QS_FP4_THRESHOLDS_INIT; /* element_hd.h */

/* §4: R[r], the low three code bits for magnitude rank r. */
const uint8_t qs_fp4_rank_code[8] = QS_FP4_RANK_CODE_INIT;

/* §6.3: the signed dynamic map, index 0 ... 255 (hard-coded: numpy.linspace gives other bits). */
const float qs_dyn8_map[256] = {
    -0x1.fc6666p-1f, -0x1.f53334p-1f, -0x1.eep-1f, -0x1.e6ccccp-1f,
    -0x1.df999ap-1f, -0x1.d86666p-1f, -0x1.d13334p-1f, -0x1.cap-1f,
    -0x1.c2ccccp-1f, -0x1.bb999ap-1f, -0x1.b46666p-1f, -0x1.ad3334p-1f,
    -0x1.a6p-1f, -0x1.9eccccp-1f, -0x1.97999ap-1f, -0x1.906666p-1f,
    -0x1.893334p-1f, -0x1.82p-1f, -0x1.7accccp-1f, -0x1.73999ap-1f,
    -0x1.6c6668p-1f, -0x1.653334p-1f, -0x1.5ep-1f, -0x1.56ccccp-1f,
    -0x1.4f999ap-1f, -0x1.486668p-1f, -0x1.413334p-1f, -0x1.3ap-1f,
    -0x1.32ccccp-1f, -0x1.2b999ap-1f, -0x1.246668p-1f, -0x1.1d3334p-1f,
    -0x1.16p-1f, -0x1.0eccccp-1f, -0x1.079998p-1f, -0x1.006666p-1f,
    -0x1.f26664p-2f, -0x1.e4p-2f, -0x1.d59998p-2f, -0x1.c73334p-2f,
    -0x1.b8ccccp-2f, -0x1.aa6666p-2f, -0x1.9cp-2f, -0x1.8d9998p-2f,
    -0x1.7f3334p-2f, -0x1.70ccccp-2f, -0x1.626666p-2f, -0x1.54p-2f,
    -0x1.459998p-2f, -0x1.373334p-2f, -0x1.28ccccp-2f, -0x1.1a6668p-2f,
    -0x1.0cp-2f, -0x1.fb3332p-3f, -0x1.de6666p-3f, -0x1.c1999ap-3f,
    -0x1.a4ccccp-3f, -0x1.88p-3f, -0x1.6b3334p-3f, -0x1.4e6666p-3f,
    -0x1.31999ap-3f, -0x1.14ccccp-3f, -0x1.fp-4f, -0x1.b66668p-4f,
    -0x1.93d70ap-4f, -0x1.8851eep-4f, -0x1.7ccccep-4f, -0x1.7147aep-4f,
    -0x1.65c29p-4f, -0x1.5a3d7p-4f, -0x1.4eb854p-4f, -0x1.433334p-4f,
    -0x1.37ae14p-4f, -0x1.2c28f6p-4f, -0x1.20a3d6p-4f, -0x1.151ebap-4f,
    -0x1.09999ap-4f, -0x1.fc28f6p-5f, -0x1.e51ebap-5f, -0x1.ce147ap-5f,
    -0x1.b70a3ep-5f, -0x1.ap-5f, -0x1.88f5c2p-5f, -0x1.71eb86p-5f,
    -0x1.5ae146p-5f, -0x1.43d70ap-5f, -0x1.2ccccep-5f, -0x1.15c29p-5f,
    -0x1.fd70a4p-6f, -0x1.cf5c2ap-6f, -0x1.a147aep-6f, -0x1.733334p-6f,
    -0x1.451ebap-6f, -0x1.170a3ep-6f, -0x1.d1eb86p-7f, -0x1.75c29p-7f,
    -0x1.3e76c8p-7f, -0x1.2c083p-7f, -0x1.19999ap-7f, -0x1.072b02p-7f,
    -0x1.e978d4p-8f, -0x1.c49ba6p-8f, -0x1.9fbe76p-8f, -0x1.7ae148p-8f,
    -0x1.56041ap-8f, -0x1.3126e8p-8f, -0x1.0c49bap-8f, -0x1.ced914p-9f,
    -0x1.851eb8p-9f, -0x1.3b645ap-9f, -0x1.e353f8p-10f, -0x1.4fdf3ap-10f,
    -0x1.eecbfep-11f, -0x1.b3d07cp-11f, -0x1.78d5p-11f, -0x1.3dd982p-11f,
    -0x1.02de02p-11f, -0x1.8fc506p-12f, -0x1.19ce0ap-12f, -0x1.47ae16p-13f,
    -0x1.743e96p-14f, -0x1.15df66p-14f, -0x1.6f0068p-15f, -0x1.64840cp-16f,
    -0x1.040bfep-17f, -0x1.b43528p-19f, -0x1.27476ep-21f, 0.0f,
    0x1.27476ep-21f, 0x1.b43528p-19f, 0x1.040bfep-17f, 0x1.64840cp-16f,
    0x1.6f0068p-15f, 0x1.15df66p-14f, 0x1.743e96p-14f, 0x1.47ae16p-13f,
    0x1.19ce0ap-12f, 0x1.8fc506p-12f, 0x1.02de02p-11f, 0x1.3dd982p-11f,
    0x1.78d5p-11f, 0x1.b3d07cp-11f, 0x1.eecbfep-11f, 0x1.4fdf3ap-10f,
    0x1.e353f8p-10f, 0x1.3b645ap-9f, 0x1.851eb8p-9f, 0x1.ced914p-9f,
    0x1.0c49bap-8f, 0x1.3126e8p-8f, 0x1.56041ap-8f, 0x1.7ae148p-8f,
    0x1.9fbe76p-8f, 0x1.c49ba6p-8f, 0x1.e978d4p-8f, 0x1.072b02p-7f,
    0x1.19999ap-7f, 0x1.2c083p-7f, 0x1.3e76c8p-7f, 0x1.75c29p-7f,
    0x1.d1eb86p-7f, 0x1.170a3ep-6f, 0x1.451ebap-6f, 0x1.733334p-6f,
    0x1.a147aep-6f, 0x1.cf5c2ap-6f, 0x1.fd70a4p-6f, 0x1.15c29p-5f,
    0x1.2ccccep-5f, 0x1.43d70ap-5f, 0x1.5ae146p-5f, 0x1.71eb86p-5f,
    0x1.88f5c2p-5f, 0x1.ap-5f, 0x1.b70a3ep-5f, 0x1.ce147ap-5f,
    0x1.e51ebap-5f, 0x1.fc28f6p-5f, 0x1.09999ap-4f, 0x1.151ebap-4f,
    0x1.20a3d6p-4f, 0x1.2c28f6p-4f, 0x1.37ae14p-4f, 0x1.433334p-4f,
    0x1.4eb854p-4f, 0x1.5a3d7p-4f, 0x1.65c29p-4f, 0x1.7147aep-4f,
    0x1.7ccccep-4f, 0x1.8851eep-4f, 0x1.93d70ap-4f, 0x1.b66668p-4f,
    0x1.fp-4f, 0x1.14ccccp-3f, 0x1.31999ap-3f, 0x1.4e6666p-3f,
    0x1.6b3334p-3f, 0x1.88p-3f, 0x1.a4ccccp-3f, 0x1.c1999ap-3f,
    0x1.de6666p-3f, 0x1.fb3332p-3f, 0x1.0cp-2f, 0x1.1a6668p-2f,
    0x1.28ccccp-2f, 0x1.373334p-2f, 0x1.459998p-2f, 0x1.54p-2f,
    0x1.626666p-2f, 0x1.70ccccp-2f, 0x1.7f3334p-2f, 0x1.8d9998p-2f,
    0x1.9cp-2f, 0x1.aa6666p-2f, 0x1.b8ccccp-2f, 0x1.c73334p-2f,
    0x1.d59998p-2f, 0x1.e4p-2f, 0x1.f26664p-2f, 0x1.006666p-1f,
    0x1.079998p-1f, 0x1.0eccccp-1f, 0x1.16p-1f, 0x1.1d3334p-1f,
    0x1.246668p-1f, 0x1.2b999ap-1f, 0x1.32ccccp-1f, 0x1.3ap-1f,
    0x1.413334p-1f, 0x1.486668p-1f, 0x1.4f999ap-1f, 0x1.56ccccp-1f,
    0x1.5ep-1f, 0x1.653334p-1f, 0x1.6c6668p-1f, 0x1.73999ap-1f,
    0x1.7accccp-1f, 0x1.82p-1f, 0x1.893334p-1f, 0x1.906666p-1f,
    0x1.97999ap-1f, 0x1.9eccccp-1f, 0x1.a6p-1f, 0x1.ad3334p-1f,
    0x1.b46666p-1f, 0x1.bb999ap-1f, 0x1.c2ccccp-1f, 0x1.cap-1f,
    0x1.d13334p-1f, 0x1.d86666p-1f, 0x1.df999ap-1f, 0x1.e6ccccp-1f,
    0x1.eep-1f, 0x1.f53334p-1f, 0x1.fc6666p-1f, 0x1p+0f,
};

/* §11: E2M1 values by code (sign bit 3; code 0x8 is -0.0, which §13 keeps when decoding). */
const float qs_e2m1_values[16] = {
    0.0f, 0x1p-1f, 0x1p+0f, 0x1.8p+0f, 0x1p+1f, 0x1.8p+1f, 0x1p+2f, 0x1.8p+2f,
    -0.0f, -0x1p-1f, -0x1p+0f, -0x1.8p+0f, -0x1p+1f, -0x1.8p+1f, -0x1p+2f, -0x1.8p+2f,
};
