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

struct qs_backend_ops;

/* The threading policy of a context (parallel.h): its settings and what it learnt. */
struct qs_par_state {
    int64_t grain;       /* QS_PARAM_PARALLEL_GRAIN: bytes of work per thread; 0: no minimum */
    int32_t backoff;     /* QS_PARAM_PARALLEL_BACKOFF */
    double window;       /* seconds on the calling thread after the next lost region */
    double serial_until; /* omp_get_wtime() before which calls use the calling thread only */
    int64_t regions;     /* parallel regions opened (tests) */
};

struct qs_ctx {
    int32_t num_threads;
    int32_t nonfinite;
    uint32_t isa;
    int32_t backend;                  /* QS_BACKEND_CPU or a plugin's; never AUTO */
    const struct qs_backend_ops *ops; /* the backend's operations (backend.h); plugins see
                                       * the context only as an opaque handle */
    qs_allocator allocator;
    struct qs_kernels k;
    const char *kernel_names[QS_SLOT_COUNT];
    char last_error[256];
    struct qs_prof *prof; /* profiling counters; NULL while off (profile.c) */
    struct qs_par_state par;
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

/* Every ISA bit of one architecture (the tier table's widest masks). */
#define QS_ISA_X86_ALL                                                                             \
    (QS_ISA_AVX2 | QS_ISA_AVX512 | QS_ISA_AVX512_VNNI | QS_ISA_AVX512_BF16 | QS_ISA_AVX_VNNI |    \
     QS_ISA_AVX512_FP16 | QS_ISA_AMX_TILE | QS_ISA_AMX_INT8 | QS_ISA_AMX_BF16)
#define QS_ISA_ARM_ALL                                                                             \
    (QS_ISA_NEON | QS_ISA_NEON_DOTPROD | QS_ISA_NEON_FP16 | QS_ISA_NEON_BF16 | QS_ISA_SVE |        \
     QS_ISA_NEON_I8MM)

/* Detected CPU features (src/x86/cpu_x86.c or src/arm/cpu_arm.c; 0 elsewhere). */
QS_INTERNAL uint32_t qs_cpu_detect(void);
/* Bytes of one core's L2 cache as the C library reports it (glibc's sysconf, which reads CPUID on
 * x86), 0 where it is not known. Only for sizing cache blocks: it never changes a result. */
QS_INTERNAL int64_t qs_cpu_l2_bytes(void);
/* The ISA mask that QS_FORCE_ISA allows: the named tier's `allowed` (isa_tiers.inc), QS_ISA_ALL if
 * unset or unknown. */
QS_INTERNAL uint32_t qs_force_isa_mask(const char *value);
#if defined(__x86_64__)
/* Ask the OS once per process for the AMX tile state (src/x86/cpu_x86.c): 1 if tile
 * instructions may run, 0 if the CPU, the OS or the permission is missing. Matmul kernels call it
 * before choosing an AMX entry. */
QS_INTERNAL int qs_x86_amx_request(void);
#endif
/* The name of the last tier of isa_tiers.inc whose `required` bits `isa` contains. */
QS_INTERNAL const char *qs_isa_tier_name(uint32_t isa);
/* The id of tier `index` of isa_tiers.inc ("avx512vnni" for avx512-vnni, "ref" for scalar): the
 * suffix its kernels, their files and its static library carry. NULL out of range. */
QS_INTERNAL const char *qs_isa_tier_id(int32_t index);
/* The index of the tier whose id a kernel's name carries after "__" ("qs_nf4_quant__avx512",
 * "qs_mm_w8a8__avx512vnni_4x4x64", "qs_nf4_quant__ref": 0); -1 for a null name, no "__" or an id
 * no tier has. */
QS_INTERNAL int32_t qs_isa_tier_of_kernel(const char *kernel);

/* The kernel of `slot` this context runs for an m x n x k problem (qs_kernel_select over the
 * registry with the context's ISA): how matmul drivers pick GEMV, small-M or tiled kernels. */
QS_INTERNAL const struct qs_kernel_entry *qs_ctx_kernel_select(const qs_ctx *ctx, int32_t slot,
                                                               int64_t m, int64_t n, int64_t k);

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

/* One plane of a layout (qs_plane_info without the reserved fields). */
struct qs_plane_layout {
    int32_t elem, bits, ndim;
    int64_t shape[2], values, bytes;
};

struct qs_format_traits;

/* Validated layout of a quantized tensor (formats.c). */
struct qs_layout {
    int32_t format;
    const struct qs_format_traits *traits;
    int32_t block;          /* block or INT8 group length; 0 without blocks */
    int64_t rows, cols;
    int64_t n;              /* rows * cols */
    int32_t unit_rule;      /* enum qs_unit_rule (format_traits.h), INT8 granularity resolved */
    int64_t units;          /* scale units: blocks, rows, groups or 1 */
    int64_t bytes[QS_PLANE_COUNT];
    struct qs_plane_layout plane[QS_PLANE_COUNT];
};

QS_INTERNAL qs_status qs_layout_compute(qs_ctx *ctx, const qs_quant_params *p, int64_t rows,
                                        int64_t cols, struct qs_layout *out);

/* Bytes of every plane of a layout together (each was overflow-checked; so is their sum, since
 * qs_quant_size reports it). */
static inline uint64_t qs_layout_total_bytes(const struct qs_layout *l)
{
    uint64_t sum = 0;
    for (int i = 0; i < QS_PLANE_COUNT; i++)
        sum += (uint64_t)l->bytes[i];
    return sum;
}

#endif /* QS_CORE_INTERNAL_H */
