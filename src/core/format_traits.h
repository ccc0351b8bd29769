/* SPDX-License-Identifier: MIT */
/*
 * Format traits: everything the core knows about one quantization format, in one descriptor per
 * format (format_traits.c). The layout (formats.c), the drivers (quantize.c, dequantize.c), the
 * public queries (qs_format_info, qs_quant_plane_info) and through them the Python binding and
 * the tool all read these descriptors instead of switching on the format code.
 */
#ifndef QS_CORE_FORMAT_TRAITS_H
#define QS_CORE_FORMAT_TRAITS_H

#include "internal.h"

/* How many values a plane holds (qs_plane_rule.count). */
enum qs_plane_count {
    QS_COUNT_NONE = 0,     /* plane unused */
    QS_COUNT_ELEMENTS,     /* n = rows * cols codes over the flattened tensor: 1-D */
    QS_COUNT_ROW_ELEMENTS, /* cols codes per row, each row packed on its own: rows x bytes */
    QS_COUNT_UNITS,        /* one per scale unit (the format's unit rule below) */
    QS_COUNT_NESTED,       /* one per 256 scale units (double quantization) */
};

/* When a plane rule applies (params-dependent planes). */
enum qs_plane_when {
    QS_WHEN_ALWAYS = 0,
    QS_WHEN_SINGLE_QUANT, /* double_quant == 0 */
    QS_WHEN_DOUBLE_QUANT, /* double_quant == 1 */
    QS_WHEN_ASYMMETRIC,   /* symmetric == 0 */
};

struct qs_plane_rule {
    uint8_t count; /* enum qs_plane_count */
    uint8_t when;  /* enum qs_plane_when */
    uint8_t elem;  /* QS_ELEM_* */
    uint8_t bits;  /* bits per value: 4 (two per byte), 8 or 32 */
};

/* Scale units: what one scale covers. */
enum qs_unit_rule {
    QS_UNITS_TENSOR = 0,  /* one for the whole tensor */
    QS_UNITS_ROWS,        /* one per row */
    QS_UNITS_FLAT_BLOCKS, /* one per block of the flattened tensor (the last one short) */
    QS_UNITS_ROW_BLOCKS,  /* one per block along each row (the last one of a row short) */
    QS_UNITS_GRANULARITY, /* params->granularity picks tensor, rows or row blocks of block_size */
};

/* The driver family that runs a format (quantize.c, dequantize.c): formats of one family share
 * the driver and the kernel signatures; a new format of an existing family needs no driver code. */
enum qs_driver {
    QS_DRIVER_BNB4 = 0, /* blockwise absmax over the flattened tensor, optional double quant */
    QS_DRIVER_INT8,     /* INT8 per tensor / row / group; LLM.int8 row statistics */
    QS_DRIVER_FP8,      /* one f32 scale for the tensor */
    QS_DRIVER_MX,       /* E8M0 block scales along rows, a rounding mode */
    QS_DRIVER_NV,       /* E4M3 block scales along rows and an f32 tensor scale */
};

/* How y follows from the sums of a format's int8-activation kernel (qs_mm_a8_fn; the definition
 * is in include/qsparse/matmul.h, "int8 activations"). */
enum qs_a8_rule {
    QS_A8_NONE = 0,     /* no integer kernel: int8 activations run the f32 path on x^ */
    QS_A8_UNIT_SCALES,  /* INT8: t = sum fl(a_s * scale_s), y = fl(t * fl(r_m / 127)); the
                           kernels of MXFP4, NVFP4, FP8 E4M3 give their t the same way */
    QS_A8_CODEBOOK_I8,  /* NF4/FP4 codes as int8 codebook values: y = fl(t * fl(r_m / 16129)) */
    QS_A8_ROWSTAT,      /* LLM.int8: y = fl(fl(a * fl(r_m * SCB[n])) * c) (bitsandbytes) */
};

/* The matmul kernels of a format (src/gemm/): kernel slots (enum qs_slot_index) of one
 * signature per operation, chosen by src/gemm/plan.c; -1 where the format has none. */
struct qs_mm_traits {
    int32_t gemv_slot;      /* qs_mm_gemv_fn: f32 activations, the GEMV path */
    int32_t sp24_gemv_slot; /* qs_mm_gemv_sp24_fn for 2:4 weights of this format; -1: x gathered
                               at the kept columns, then gemv_slot over one compressed row */
    int32_t a8_slot;        /* qs_mm_a8_fn: int8 activations; -1: the f32 path on x^ */
    int32_t a8_rule;        /* enum qs_a8_rule */
    int32_t bf16_slot;      /* qs_mm_gemv_xbf16_fn: bf16 activations, the GEMV path; -1: the f32
                               path on x^ (x rounded to bf16 and widened) */
    int32_t a8_xsum;        /* elements per x sum the a8 kernel reads (qs_mm_a8_fn); 0: the
                               weight's scale unit (w.group, the whole row for LLM.int8) */
};

/* The element rule of a format's codes (qs_format_traits.element; the plugin ABI's
 * QS_BACKEND_ELEM_* have the same values). */
enum qs_element {
    QS_ELEMENT_NF4 = 0,
    QS_ELEMENT_FP4,
    QS_ELEMENT_INT8,
    QS_ELEMENT_E4M3,
    QS_ELEMENT_E5M2,
    QS_ELEMENT_E2M1,
};

/* qs_format_traits.flags */
#define QS_TRAIT_ROWSTAT 1u /* INT8 driver: the scale plane stores the row absmax (LLM.int8 SCB) */
#define QS_TRAIT_GLOBAL_SCALE 2u /* an f32 tensor scale in qs_qtensor.global_scale (NVFP4) */

struct qs_format_traits {
    const char *name;
    int32_t bits;          /* bits of one element code */
    int32_t block_default; /* qs_quant_params_init's block_size (0: none) */
    int32_t block_min, block_max; /* block_size accepted (equal: fixed); group size for INT8 */
    int32_t blocks;        /* QS_BLOCKS_* */
    uint32_t options;      /* QS_OPT_* fields of qs_quant_params this format reads */
    int32_t units;         /* enum qs_unit_rule */
    int32_t driver;        /* enum qs_driver */
    int32_t element;       /* enum qs_element: the rule of one code */
    uint32_t flags;        /* QS_TRAIT_* */
    float elem_max;        /* largest finite element magnitude (FP8: the scale's divisor) */
    /* Up to two rules per plane, the first whose `when` holds applies. */
    struct qs_plane_rule plane[QS_PLANE_COUNT][2];
    /* Checks the fields of params this format reads (name, format and reserved are checked). */
    qs_status (*check)(qs_ctx *ctx, const struct qs_format_traits *t, const qs_quant_params *p);
    int32_t quant_slot, dequant_slot; /* enum qs_slot_index of the element kernels */
    const float *codebook; /* the 16 code values of a codebook format (NF4, FP4), else NULL */
    uint8_t (*encode)(float y); /* its element encoder of a value already divided by the
                                   block's absmax (the reference's), else NULL */
    struct qs_mm_traits mm;
};

/* The descriptor of a format code, NULL for an unknown one. */
QS_INTERNAL const struct qs_format_traits *qs_format_traits(int32_t format);
/* Highest format code. */
QS_INTERNAL int32_t qs_format_traits_count(void);
/* The context's kernel for a slot, to be cast to the slot's type (qs_<slot>_fn *). */
QS_INTERNAL void (*qs_kernel_get(const struct qs_kernels *k, int32_t slot))(void);

#endif /* QS_CORE_FORMAT_TRAITS_H */
