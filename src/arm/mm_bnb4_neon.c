/* SPDX-License-Identifier: MIT */
/*
 * Fused NF4 / FP4 GEMV for NEON (include/qsparse/matmul.h; the reference is
 * src/ref/matmul_ref.c): 8 bytes unpack to 16 codes in element order (element 2i in the high
 * nibble of byte i) and look up the 16-entry codebook with byte-plane table lookups (exact bits);
 * each block's sum of code value * x gets the block's absmax once. Tiles and tails:
 * mm_gemv_neon.h. The fast path needs rows that start on a block (start and k multiples of the
 * block) and blocks of a multiple of 16; other shapes run the reference.
 */
#include <arm_neon.h>

#include "../core/kernels.h"
#include "../ref/ref.h"
#include "mm_gemv_neon.h"

static inline void bnb4_dec_neon(const uint8_t *p, int32_t aux, const void *fmt, float32x4_t v[4])
{
    (void)aux;
    lut16_lookup_neon(fmt, unpack_hi_first_neon(vld1_u8(p)), v);
}

static inline float bnb4_scl_neon(const uint8_t *srow, int64_t row, int64_t s, int32_t *aux,
                                  const void *fmt)
{
    (void)row;
    (void)fmt;
    *aux = 0;
    return qs_ld_f32((const float *)srow + s);
}

/* Rows r0 ... of the view: flat elements from start = r0 * k, absmax in blocks of w->group. */
static inline __attribute__((always_inline)) void
bnb4_gemv_neon(const float *book, qs_mm_gemv_fn *ref, const qs_mm_weight *wv, int64_t r0,
               int64_t rows, const float *x, int64_t ldx, int64_t m, float *y, int64_t ldy)
{
    const int64_t k = wv->k, start = r0 * k;
    const int32_t block = (int32_t)wv->group;
    const uint8_t *data = wv->data;
    const float *absmax = wv->scale;

    if (block % 16 != 0 || k % block != 0 || start % block != 0) {
        ref(wv, r0, rows, x, ldx, m, y, ldy);
        return;
    }
    lut16_neon t = lut16_load_neon(book);
    gemv_rows_neon w = {data + start / 2, k / 2, (const uint8_t *)(absmax + start / block),
                        (k / block) * 4, block};
    gemv_neon(x, ldx, m, k, 4, &w, rows, bnb4_dec_neon, bnb4_scl_neon, &t, y, ldy);
}

void qs_mm_gemv_nf4__neon_1x4x16(const qs_mm_weight *w, int64_t r0, int64_t rows, const float *x,
                                 int64_t ldx, int64_t m, float *y, int64_t ldy)
{
    bnb4_gemv_neon(qs_nf4_codebook, qs_mm_gemv_nf4__ref, w, r0, rows, x, ldx, m, y, ldy);
}

void qs_mm_gemv_fp4__neon_1x4x16(const qs_mm_weight *w, int64_t r0, int64_t rows, const float *x,
                                 int64_t ldx, int64_t m, float *y, int64_t ldy)
{
    bnb4_gemv_neon(qs_fp4_codebook, qs_mm_gemv_fp4__ref, w, r0, rows, x, ldx, m, y, ldy);
}
