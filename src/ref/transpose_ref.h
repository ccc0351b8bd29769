/* SPDX-License-Identifier: MIT */
/*
 * The block loop of the SIMD transposed copies (slot mm_transpose_f32, src/core/kernels.h): whole
 * B x B blocks by a tier's register kernel, the right and bottom edges by the reference, so that
 * each tier writes only its block kernel.
 */
#ifndef QS_REF_TRANSPOSE_REF_H
#define QS_REF_TRANSPOSE_REF_H

#include <stdint.h>

#include "../core/kernels.h"

/* A tier's B x B block: src at row stride lds to dst at row stride ldd, transposed. */
typedef void qs_transpose_block_fn(const float *src, int64_t lds, float *dst, int64_t ldd);

/* Always inlined, so that `block`, a constant at every call, is inlined too. */
static inline __attribute__((always_inline)) void
qs_transpose_by_blocks(const float *src, int64_t lds, int64_t rows, int64_t cols, float *dst,
                       int64_t ldd, const int B, qs_transpose_block_fn *block)
{
    int64_t r = 0, c;

    for (; r + B <= rows; r += B) {
        for (c = 0; c + B <= cols; c += B)
            block(src + r * lds + c, lds, dst + c * ldd + r, ldd);
        qs_mm_transpose_f32__ref(src + r * lds + c, lds, B, cols - c, dst + c * ldd + r, ldd);
    }
    qs_mm_transpose_f32__ref(src + r * lds, lds, rows - r, cols, dst + r, ldd);
}

#endif /* QS_REF_TRANSPOSE_REF_H */
