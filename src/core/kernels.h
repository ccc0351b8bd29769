/* SPDX-License-Identifier: MIT */
/*
 * The kernel table: one function type per kernel family and operation, one table member (slot)
 * per type, and the declarations of every implementation listed in kernels.inc. A kernel is a
 * pure function over caller buffers (STYLE.md §3): it never allocates, fails, prints or reads the
 * context, accepts any n >= 0 and never touches memory outside [ptr, ptr + n).
 *
 * Conventions shared by every kernel below:
 * - `n` counts elements. Nibble outputs write (n + 1) / 2 bytes; block outputs write
 *   ceil(n / block) scales. Callers split work only at block boundaries, so a kernel's first
 *   element always starts a block (and, for nibble formats, a byte).
 * - Semantics are those of the scalar reference in src/ref/, which follows spec/formats.md.
 */
#ifndef QS_CORE_KERNELS_H
#define QS_CORE_KERNELS_H

#include <stdint.h>

/* Plain dtype conversions (spec/formats.md §0 rule 4). */
typedef void qs_cvt_f16_f32_fn(const uint16_t *src, int64_t n, float *dst);
typedef void qs_cvt_bf16_f32_fn(const uint16_t *src, int64_t n, float *dst);
typedef void qs_cvt_f32_f16_fn(const float *src, int64_t n, uint16_t *dst);
typedef void qs_cvt_f32_bf16_fn(const float *src, int64_t n, uint16_t *dst);

/* Reductions. amax: max |x| with NaN ignored, starting from +0.0 (fmaxf semantics).
 * minmax: *lo = fminf(*lo, x), *hi = fmaxf(*hi, x) over x, NaN ignored.
 * nonfinite: 1 if any element is NaN or +-Inf, else 0. */
typedef float qs_amax_f32_fn(const float *src, int64_t n);
typedef void qs_minmax_f32_fn(const float *src, int64_t n, float *lo, float *hi);
typedef int32_t qs_nonfinite_f32_fn(const float *src, int64_t n);

/* bitsandbytes NF4 / FP4 (§5): blocks of `block` (even) over src; absmax[ceil(n/block)];
 * dst (n+1)/2 bytes, element 2j in the high nibble. */
typedef void qs_nf4_quant_fn(const float *src, int64_t n, int32_t block, uint8_t *dst,
                             float *absmax);
typedef void qs_nf4_dequant_fn(const uint8_t *src, const float *absmax, int64_t n, int32_t block,
                               float *dst);
typedef qs_nf4_quant_fn qs_fp4_quant_fn;
typedef qs_nf4_dequant_fn qs_fp4_dequant_fn;

/* bitsandbytes signed dynamic 8-bit map, blockwise (§6.3, §6.4). The dequant adds `offset` after
 * the multiply, as the nested level of double quantization does (§6.2). */
typedef void qs_dyn8_quant_fn(const float *src, int64_t n, int32_t block, uint8_t *dst,
                              float *absmax);
typedef void qs_dyn8_dequant_fn(const uint8_t *src, const float *absmax, int64_t n, int32_t block,
                                float offset, float *dst);

/* INT8 (§8, §9). quant: q = clamp(rne(x * mul) + zp, qmin, 127), NaN product -> 0 before zp.
 * dequant: fl((q - zp) * scale). dequant_rowstat (LLM.int8): fl(fl(q * stat) * fl(1/127)). */
typedef void qs_int8_quant_fn(const float *src, int64_t n, float mul, int32_t zp, int32_t qmin,
                              int8_t *dst);
typedef void qs_int8_dequant_fn(const int8_t *src, int64_t n, float scale, int32_t zp, float *dst);
typedef void qs_int8_dequant_rowstat_fn(const int8_t *src, int64_t n, float stat, float *dst);

/* FP8 (§10), saturating: q = cvt(fl(x / scale)); dequant fl(value(q) * scale). */
typedef void qs_e4m3_quant_fn(const float *src, int64_t n, float scale, uint8_t *dst);
typedef void qs_e4m3_dequant_fn(const uint8_t *src, int64_t n, float scale, float *dst);
typedef qs_e4m3_quant_fn qs_e5m2_quant_fn;
typedef qs_e4m3_dequant_fn qs_e5m2_dequant_fn;

/* OCP MX (§13) along one row: blocks of 32, the last one padded with +0.0; scales[ceil(n/32)]
 * E8M0 bytes. MXFP4 data (n+1)/2 bytes low nibble first; MXFP8 one E4M3 byte per element.
 * `rounding` is QS_MX_SCALE_FLOOR or QS_MX_SCALE_RCEIL. */
typedef void qs_mxfp4_quant_fn(const float *src, int64_t n, int32_t rounding, uint8_t *dst,
                               uint8_t *scales);
typedef void qs_mxfp4_dequant_fn(const uint8_t *src, const uint8_t *scales, int64_t n,
                                 float *dst);
typedef qs_mxfp4_quant_fn qs_mxfp8_quant_fn;
typedef qs_mxfp4_dequant_fn qs_mxfp8_dequant_fn;

/* NVFP4 (§14) along one row: blocks of 16, E4M3 block scales, the given f32 tensor scale. */
typedef void qs_nvfp4_quant_fn(const float *src, int64_t n, float s_global, uint8_t *dst,
                               uint8_t *scales);
typedef void qs_nvfp4_dequant_fn(const uint8_t *src, const uint8_t *scales, int64_t n,
                                 float s_global, float *dst);

/* One member per slot; every member starts at its __ref kernel. */
struct qs_kernels {
#define QS_SLOT(slot) qs_##slot##_fn *slot;
#include "slots.inc"
#undef QS_SLOT
};

/* Slot indices, in slots.inc order. */
enum qs_slot_index {
#define QS_SLOT(slot) QS_SLOT_##slot,
#include "slots.inc"
#undef QS_SLOT
    QS_SLOT_COUNT
};

/* Declarations of every implementation. */
#define QS_KERNEL(slot, isa, fn) qs_##slot##_fn fn;
#include "kernels.inc"
#undef QS_KERNEL

/* One row of kernels.inc, for dispatch, tests and benchmarks. */
struct qs_kernel_entry {
    int32_t slot;       /* enum qs_slot_index */
    uint32_t isa;       /* QS_ISA_* bits the kernel needs; 0 for __ref */
    void (*fn)(void);   /* cast to the slot's type before calling */
    const char *name;   /* "qs_nf4_quant__avx2" */
};

/* Every implementation compiled into this build, in kernels.inc order (ref first). */
const struct qs_kernel_entry *qs_kernel_entries(int32_t *count);
/* "nf4_quant" for a slot index, NULL out of range. */
const char *qs_slot_name(int32_t slot);
/* Fill k with the ref kernels, then upgrade each slot to the last entry whose ISA bits are all in
 * `isa` (kernels.inc lists the tiers of a slot best-last). */
void qs_kernels_init(struct qs_kernels *k, const char **names, uint32_t isa);

#endif /* QS_CORE_KERNELS_H */
