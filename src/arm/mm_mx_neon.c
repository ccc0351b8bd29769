/* SPDX-License-Identifier: MIT */
/*
 * Fused MXFP4, MXFP8 and NVFP4 GEMV with f32 activations for NEON (include/qsparse/matmul.h; the
 * reference is src/ref/matmul_ref.c): E2M1 codes (element 2i in the low nibble of byte i) look
 * up their value with byte-plane table lookups, E4M3 codes decode by one exact multiply; each
 * block's sum gets the block scale once: the E8M0 power of two (NaN for 0xFF) for MX,
 * fl(E4M3(S & 0x7F) * s_global) for NVFP4, as the reference forms it (both from a table formed
 * once per call). Tiles and tails: mm_gemv_neon.h.
 */
#include <arm_neon.h>

#include "../core/kernels.h"
#include "../ref/ref.h"
#include "mm_gemv_neon.h"

/* The E2M1 table and the block scales by scale byte (E8M0: 256 values; NVFP4: the 128
 * fl(E4M3(i) * s_global)), formed once per call: a load per block instead of a decode. */
typedef struct {
    lut16_neon t;
    const float *scales;
} e2m1_fmt_neon;

static void e8m0_table_neon(float *t)
{
    for (int i = 0; i < 256; i++)
        t[i] = gemv_e8m0_neon((uint8_t)i);
}

static inline void e2m1_dec_neon(const uint8_t *p, int32_t aux, const void *fmt, float32x4_t v[4])
{
    const e2m1_fmt_neon *f = fmt;
    (void)aux;
    lut16_lookup_neon(&f->t, unpack_lo_first_neon(vld1_u8(p)), v);
}

static inline void e4m3_dec_neon(const uint8_t *p, int32_t aux, const void *fmt, float32x4_t v[4])
{
    uint32x4_t c[4];
    (void)aux;
    (void)fmt;
    widen_u8_neon(vld1q_u8(p), c);
    for (int q = 0; q < 4; q++)
        v[q] = e4m3_decode_neon(c[q]);
}

static inline float mx_scl_neon(const uint8_t *srow, int64_t row, int64_t s, int32_t *aux,
                                const void *fmt)
{
    (void)row;
    *aux = 0;
    return ((const e2m1_fmt_neon *)fmt)->scales[srow[s]];
}

static inline float nvfp4_scl_neon(const uint8_t *srow, int64_t row, int64_t s, int32_t *aux,
                                   const void *fmt)
{
    (void)row;
    *aux = 0;
    return ((const e2m1_fmt_neon *)fmt)->scales[srow[s] & 0x7F];
}

void qs_mm_gemv_mxfp4__neon_1x4x16(const qs_mm_weight *w, int64_t r0, int64_t rows, const float *x,
                                   int64_t ldx, int64_t m, float *y, int64_t ldy)
{
    float e8m0[256];
    e8m0_table_neon(e8m0);
    e2m1_fmt_neon f = {lut16_load_neon(qs_e2m1_values), e8m0};
    gemv_rows_neon wr = gemv_view_rows_neon(w, r0, 1, 32);
    gemv_neon(x, ldx, m, w->k, 4, &wr, rows, e2m1_dec_neon, mx_scl_neon, &f, y, ldy);
}

void qs_mm_gemv_mxfp8__neon_1x4x16(const qs_mm_weight *w, int64_t r0, int64_t rows, const float *x,
                                   int64_t ldx, int64_t m, float *y, int64_t ldy)
{
    float e8m0[256];
    e8m0_table_neon(e8m0);
    e2m1_fmt_neon f = {lut16_load_neon(qs_e2m1_values), e8m0}; /* the decode ignores the table */
    gemv_rows_neon wr = gemv_view_rows_neon(w, r0, 1, 32);
    gemv_neon(x, ldx, m, w->k, 8, &wr, rows, e4m3_dec_neon, mx_scl_neon, &f, y, ldy);
}

void qs_mm_gemv_nvfp4__neon_1x4x16(const qs_mm_weight *w, int64_t r0, int64_t rows, const float *x,
                                   int64_t ldx, int64_t m, float *y, int64_t ldy)
{
    float den[128];
    for (int i = 0; i < 128; i++)
        den[i] = gemv_e4m3_pos_neon((uint8_t)i) * w->s_global;
    e2m1_fmt_neon f = {lut16_load_neon(qs_e2m1_values), den};
    gemv_rows_neon wr = gemv_view_rows_neon(w, r0, 1, 16);
    gemv_neon(x, ldx, m, w->k, 4, &wr, rows, e2m1_dec_neon, nvfp4_scl_neon, &f, y, ldy);
}
