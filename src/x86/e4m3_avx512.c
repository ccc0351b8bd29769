/* SPDX-License-Identifier: MIT */
/*
 * FP8 E4M3 ("fn") quantize and dequantize with a per-tensor scale for AVX-512 F/BW/DQ/VL
 * (docs/formats.md §10), bit-identical to src/ref/e4m3_ref.c: q = E4M3_RNE_sat(fl(x / scale)) with
 * a true division, NaN -> 0x7F | sign, decode fl(value(q) * scale). Same integer-domain rounding
 * as e4m3_avx2.c on 16 lanes; the tail uses masked loads and stores, so nothing past n is read or
 * written. The encoder, decoder and driver are shared through minifloat_avx512.h.
 */
#include <immintrin.h>

#include "../core/kernels.h"
#include "minifloat_avx512.h"

void qs_e4m3_quant__avx512(const float *src, int64_t n, float scale, uint8_t *dst)
{
    fp8_quant_avx512(src, n, scale, dst, 3, 7, 0x7E); /* saturating to 448 = code 0x7E */
}

/* 16 E4M3 codes (bytes) -> 16 floats. */
static inline __m512 e4m3_decode16_avx512(__m128i b)
{
    return e4m3_decode_avx512(_mm512_cvtepu8_epi32(b));
}

void qs_e4m3_dequant__avx512(const uint8_t *src, int64_t n, float scale, float *dst)
{
    fp8_dequant_avx512(src, n, scale, dst, e4m3_decode16_avx512);
}
