/* SPDX-License-Identifier: MIT */
/*
 * Private declarations shared by src/core: the context, error reporting, scratch memory, the
 * parallel loop and the f32 staging of f16/bf16 data. No intrinsics, no ISA flags.
 */
#ifndef QS_CORE_INTERNAL_H
#define QS_CORE_INTERNAL_H

#include <stddef.h>
#include <stdint.h>

#include "qsparse.h"
#include "kernels.h"

#define QS_INTERNAL __attribute__((visibility("hidden")))

/* Elements staged through one f32 tile (16 KiB): a multiple of every block size (<= 4096 and,
 * for NF4/FP4, the largest multiple of the block that fits) and of 32 and 16 for MX/NVFP4. */
#define QS_TILE 4096

struct qs_ctx {
    int32_t num_threads;
    int32_t nonfinite;
    uint32_t isa;
    int32_t backend;
    qs_allocator allocator;
    struct qs_kernels k;
    const char *kernel_names[QS_SLOT_COUNT];
    char last_error[256];
};

/* Record a failure in ctx (printf-style message) and return `status`. */
QS_INTERNAL qs_status qs_fail(qs_ctx *ctx, qs_status status, const char *fmt, ...)
    __attribute__((format(printf, 3, 4)));
/* Clear the last error and return QS_OK. */
QS_INTERNAL qs_status qs_ok(qs_ctx *ctx);

/* Scratch memory through the context's allocator (64-byte aligned); NULL on failure. */
QS_INTERNAL void *qs_scratch_alloc(qs_ctx *ctx, size_t bytes);
QS_INTERNAL void qs_scratch_free(qs_ctx *ctx, void *p);

/* Overflow-checked int64 arithmetic: return 0 and set *r, or return 1 on overflow. */
static inline int qs_mul_overflow(int64_t a, int64_t b, int64_t *r)
{
    return __builtin_mul_overflow(a, b, r);
}

static inline int qs_add_overflow(int64_t a, int64_t b, int64_t *r)
{
    return __builtin_add_overflow(a, b, r);
}

static inline int64_t qs_ceil_div(int64_t a, int64_t b)
{
    return a / b + (a % b != 0);
}

/* Number of OpenMP threads a call of this context may use. */
QS_INTERNAL int32_t qs_threads(const qs_ctx *ctx);

/* Detected CPU features (src/x86/cpu_x86.c or src/arm/cpu_arm.c; 0 elsewhere). */
QS_INTERNAL uint32_t qs_cpu_detect(void);
/* The ISA mask that QS_FORCE_ISA allows (QS_ISA_ALL if unset or unknown). */
QS_INTERNAL uint32_t qs_force_isa_mask(const char *value);

/* Read `n` elements of `dtype` starting at element `offset` of src as f32: returns src itself
 * for 4-byte-aligned f32 data, else converts or copies into `tile` (n <= QS_TILE) and returns it,
 * so the pointer returned is always aligned for float. */
QS_INTERNAL const float *qs_stage_f32(const qs_ctx *ctx, const void *src, int32_t dtype,
                                      int64_t offset, int64_t n, float *tile);
/* Write n f32 values from `tile` to dst (of `dtype`) at element `offset`; for f32 dst, a copy
 * when qs_stage_out handed out the tile (a misaligned dst), else a no-op. */
QS_INTERNAL void qs_unstage_f32(const qs_ctx *ctx, const float *tile, void *dst, int32_t dtype,
                                int64_t offset, int64_t n);
/* The f32 pointer a kernel may write directly for dst[offset ...] when dtype is f32 and that
 * address is aligned for float, else tile. */
QS_INTERNAL float *qs_stage_out(void *dst, int32_t dtype, int64_t offset, float *tile);

/* Validated layout of a quantized tensor (formats.c). */
struct qs_layout {
    int32_t format;
    int32_t block;          /* NF4/FP4 block, INT8 unit length, 32/16 for MX/NVFP4 */
    int64_t n;              /* rows * cols */
    int64_t units;          /* NF4/FP4 blocks; INT8 scale count */
    int64_t bytes[QS_PLANE_COUNT];
};

QS_INTERNAL qs_status qs_layout_compute(qs_ctx *ctx, const qs_quant_params *p, int64_t rows,
                                        int64_t cols, struct qs_layout *out);

#endif /* QS_CORE_INTERNAL_H */
