/* SPDX-License-Identifier: MIT */
/*
 * The format descriptors (format_traits.h): one entry per format. Adding a format of an existing
 * driver family means one entry here, its reference kernels and its SIMD kernels.
 */
#include <math.h>

#include "../ref/ref.h"
#include "format_traits.h"

/* ---- parameter validators: the fields each format reads ----------------------------------- */

static qs_status check_bnb4(qs_ctx *ctx, const struct qs_format_traits *t,
                            const qs_quant_params *p)
{
    /* bitsandbytes sizes are the powers of two 32...4096; other even sizes are an extension,
     * capped at 4096 so that one staging tile always holds whole blocks. */
    if (p->block_size < t->block_min || p->block_size > t->block_max || (p->block_size & 1))
        return qs_fail(ctx, QS_ERR_INVALID_ARG,
                       "%s block_size %d: must be even, %d...%d (bitsandbytes: 32...4096, "
                       "powers of two)", t->name, p->block_size, t->block_min, t->block_max);
    if (p->double_quant != 0 && p->double_quant != 1)
        return qs_fail(ctx, QS_ERR_INVALID_ARG, "double_quant must be 0 or 1");
    return QS_OK;
}

static qs_status check_int8(qs_ctx *ctx, const struct qs_format_traits *t,
                            const qs_quant_params *p)
{
    if (p->granularity < QS_GRAN_TENSOR || p->granularity > QS_GRAN_GROUP)
        return qs_fail(ctx, QS_ERR_INVALID_ARG, "unknown granularity %d", p->granularity);
    if (p->symmetric != 0 && p->symmetric != 1)
        return qs_fail(ctx, QS_ERR_INVALID_ARG, "symmetric must be 0 or 1");
    if (p->granularity == QS_GRAN_GROUP && p->block_size < t->block_min)
        return qs_fail(ctx, QS_ERR_INVALID_ARG, "%s group size %d must be >= %d", t->name,
                       p->block_size, t->block_min);
    return QS_OK;
}

/* LLM.int8 reads no field: it is always by row and symmetric. */
static qs_status check_none(qs_ctx *ctx, const struct qs_format_traits *t,
                            const qs_quant_params *p)
{
    (void)ctx, (void)t, (void)p;
    return QS_OK;
}

static qs_status check_fixed_block(qs_ctx *ctx, const struct qs_format_traits *t,
                                   const qs_quant_params *p)
{
    if (p->block_size != t->block_default)
        return qs_fail(ctx, QS_ERR_INVALID_ARG, "%s block_size is %d, got %d", t->name,
                       t->block_default, p->block_size);
    return QS_OK;
}

static qs_status check_scale(qs_ctx *ctx, const struct qs_format_traits *t,
                             const qs_quant_params *p)
{
    if (!(p->scale == 0.0f || (p->scale > 0.0f && isfinite(p->scale))))
        return qs_fail(ctx, QS_ERR_INVALID_ARG,
                       "%s scale %g: must be 0 (from the data) or finite and > 0", t->name,
                       (double)p->scale);
    return QS_OK;
}

static qs_status check_mx(qs_ctx *ctx, const struct qs_format_traits *t,
                          const qs_quant_params *p)
{
    qs_status st = check_fixed_block(ctx, t, p);

    if (st != QS_OK)
        return st;
    if (p->scale_rounding != QS_MX_SCALE_FLOOR && p->scale_rounding != QS_MX_SCALE_RCEIL)
        return qs_fail(ctx, QS_ERR_INVALID_ARG, "unknown MX scale rounding %d", p->scale_rounding);
    return QS_OK;
}

static qs_status check_nvfp4(qs_ctx *ctx, const struct qs_format_traits *t,
                             const qs_quant_params *p)
{
    qs_status st = check_scale(ctx, t, p);

    return st != QS_OK ? st : check_fixed_block(ctx, t, p);
}

/* ---- the descriptors ------------------------------------------------------------------------ */

#define RULE(count, when, elem, bits) {QS_COUNT_##count, QS_WHEN_##when, QS_ELEM_##elem, bits}
#define NONE {{0, 0, 0, 0}}

/* The planes of the byte-code formats with one f32 scale per unit. */
#define CODES_F32_SCALE(code_elem)                                                                 \
    {{RULE(ROW_ELEMENTS, ALWAYS, code_elem, 8)}, {RULE(UNITS, ALWAYS, F32, 32)}, NONE, NONE}

static const struct qs_format_traits traits[] = {
    [QS_FORMAT_NF4] = {
        .name = "nf4", .bits = 4, .block_default = 64, .block_min = 2, .block_max = QS_TILE,
        .blocks = QS_BLOCKS_FLAT, .options = QS_OPT_BLOCK_SIZE | QS_OPT_DOUBLE_QUANT,
        .units = QS_UNITS_FLAT_BLOCKS, .driver = QS_DRIVER_BNB4, .element = QS_ELEMENT_NF4,
        .plane = {{RULE(ELEMENTS, ALWAYS, U8, 4)},
                  {RULE(UNITS, SINGLE_QUANT, F32, 32), RULE(UNITS, DOUBLE_QUANT, U8, 8)},
                  NONE,
                  {RULE(NESTED, DOUBLE_QUANT, F32, 32)}},
        .check = check_bnb4, .quant_slot = QS_SLOT_nf4_quant, .dequant_slot = QS_SLOT_nf4_dequant,
        .codebook = qs_nf4_codebook, .encode = qs_ref_nf4_encode,
        .mm = {QS_SLOT_mm_gemv_nf4, QS_SLOT_mm_gemv_sp24_nf4, QS_SLOT_mm_nf4a8, QS_A8_CODEBOOK_I8,
               QS_SLOT_mm_nf4abf16, 64},
    },
    [QS_FORMAT_FP4] = {
        .name = "fp4", .bits = 4, .block_default = 64, .block_min = 2, .block_max = QS_TILE,
        .blocks = QS_BLOCKS_FLAT, .options = QS_OPT_BLOCK_SIZE | QS_OPT_DOUBLE_QUANT,
        .units = QS_UNITS_FLAT_BLOCKS, .driver = QS_DRIVER_BNB4, .element = QS_ELEMENT_FP4,
        .plane = {{RULE(ELEMENTS, ALWAYS, U8, 4)},
                  {RULE(UNITS, SINGLE_QUANT, F32, 32), RULE(UNITS, DOUBLE_QUANT, U8, 8)},
                  NONE,
                  {RULE(NESTED, DOUBLE_QUANT, F32, 32)}},
        .check = check_bnb4, .quant_slot = QS_SLOT_fp4_quant, .dequant_slot = QS_SLOT_fp4_dequant,
        .codebook = qs_fp4_codebook, .encode = qs_ref_fp4_encode,
        .mm = {QS_SLOT_mm_gemv_fp4, -1, QS_SLOT_mm_fp4a8, QS_A8_CODEBOOK_I8,
               QS_SLOT_mm_fp4abf16, 64},
    },
    [QS_FORMAT_INT8] = {
        .name = "int8", .bits = 8, .block_min = 1, .block_max = INT32_MAX,
        .blocks = QS_BLOCKS_ROWS,
        .options = QS_OPT_BLOCK_SIZE | QS_OPT_GRANULARITY | QS_OPT_SYMMETRIC,
        .units = QS_UNITS_GRANULARITY, .driver = QS_DRIVER_INT8, .element = QS_ELEMENT_INT8,
        .plane = {{RULE(ROW_ELEMENTS, ALWAYS, I8, 8)},
                  {RULE(UNITS, ALWAYS, F32, 32)},
                  {RULE(UNITS, ASYMMETRIC, I8, 8)},
                  NONE},
        .check = check_int8, .quant_slot = QS_SLOT_int8_quant, .dequant_slot = QS_SLOT_int8_dequant,
        .mm = {QS_SLOT_mm_gemv_int8, -1, QS_SLOT_mm_w8a8, QS_A8_UNIT_SCALES,
               QS_SLOT_mm_int8abf16},
    },
    [QS_FORMAT_LLM_INT8] = {
        .name = "llm_int8", .bits = 8, .blocks = QS_BLOCKS_NONE, .units = QS_UNITS_ROWS,
        .driver = QS_DRIVER_INT8, .element = QS_ELEMENT_INT8, .flags = QS_TRAIT_ROWSTAT,
        .plane = CODES_F32_SCALE(I8),
        .check = check_none, .quant_slot = QS_SLOT_int8_quant,
        .dequant_slot = QS_SLOT_int8_dequant_rowstat,
        .mm = {QS_SLOT_mm_gemv_int8, -1, QS_SLOT_mm_w8a8, QS_A8_ROWSTAT,
               QS_SLOT_mm_int8abf16},
    },
    [QS_FORMAT_FP8_E4M3] = {
        .name = "fp8_e4m3", .bits = 8, .blocks = QS_BLOCKS_NONE, .options = QS_OPT_SCALE,
        .units = QS_UNITS_TENSOR, .driver = QS_DRIVER_FP8, .element = QS_ELEMENT_E4M3, .elem_max = 448.0f,
        .plane = CODES_F32_SCALE(U8),
        .check = check_scale, .quant_slot = QS_SLOT_e4m3_quant,
        .dequant_slot = QS_SLOT_e4m3_dequant,
        .mm = {QS_SLOT_mm_gemv_e4m3, -1, QS_SLOT_mm_e4m3a8, QS_A8_UNIT_SCALES,
               QS_SLOT_mm_e4m3abf16, QS_MM_E4M3A8_SEG},
    },
    [QS_FORMAT_FP8_E5M2] = {
        .name = "fp8_e5m2", .bits = 8, .blocks = QS_BLOCKS_NONE, .options = QS_OPT_SCALE,
        .units = QS_UNITS_TENSOR, .driver = QS_DRIVER_FP8, .element = QS_ELEMENT_E5M2, .elem_max = 57344.0f,
        .plane = CODES_F32_SCALE(U8),
        .check = check_scale, .quant_slot = QS_SLOT_e5m2_quant,
        .dequant_slot = QS_SLOT_e5m2_dequant,
        .mm = {QS_SLOT_mm_gemv_e5m2, -1, -1, QS_A8_NONE, QS_SLOT_mm_e5m2abf16},
    },
    [QS_FORMAT_MXFP4] = {
        .name = "mxfp4", .bits = 4, .block_default = 32, .block_min = 32, .block_max = 32,
        .blocks = QS_BLOCKS_ROWS, .options = QS_OPT_BLOCK_SIZE | QS_OPT_SCALE_ROUNDING,
        .units = QS_UNITS_ROW_BLOCKS, .driver = QS_DRIVER_MX, .element = QS_ELEMENT_E2M1, .elem_max = 6.0f,
        .plane = {{RULE(ROW_ELEMENTS, ALWAYS, U8, 4)}, {RULE(UNITS, ALWAYS, U8, 8)}, NONE, NONE},
        .check = check_mx, .quant_slot = QS_SLOT_mxfp4_quant, .dequant_slot = QS_SLOT_mxfp4_dequant,
        .mm = {QS_SLOT_mm_gemv_mxfp4, -1, QS_SLOT_mm_mxfp4a8, QS_A8_UNIT_SCALES,
               QS_SLOT_mm_mxfp4abf16, 0},
    },
    [QS_FORMAT_MXFP8] = {
        .name = "mxfp8", .bits = 8, .block_default = 32, .block_min = 32, .block_max = 32,
        .blocks = QS_BLOCKS_ROWS, .options = QS_OPT_BLOCK_SIZE | QS_OPT_SCALE_ROUNDING,
        .units = QS_UNITS_ROW_BLOCKS, .driver = QS_DRIVER_MX, .element = QS_ELEMENT_E4M3, .elem_max = 448.0f,
        .plane = {{RULE(ROW_ELEMENTS, ALWAYS, U8, 8)}, {RULE(UNITS, ALWAYS, U8, 8)}, NONE, NONE},
        .check = check_mx, .quant_slot = QS_SLOT_mxfp8_quant, .dequant_slot = QS_SLOT_mxfp8_dequant,
        .mm = {QS_SLOT_mm_gemv_mxfp8, -1, -1, QS_A8_NONE, QS_SLOT_mm_mxfp8abf16},
    },
    [QS_FORMAT_NVFP4] = {
        .name = "nvfp4", .bits = 4, .block_default = 16, .block_min = 16, .block_max = 16,
        .blocks = QS_BLOCKS_ROWS, .options = QS_OPT_BLOCK_SIZE | QS_OPT_SCALE,
        .units = QS_UNITS_ROW_BLOCKS, .driver = QS_DRIVER_NV, .element = QS_ELEMENT_E2M1, .flags = QS_TRAIT_GLOBAL_SCALE,
        .elem_max = 6.0f,
        .plane = {{RULE(ROW_ELEMENTS, ALWAYS, U8, 4)}, {RULE(UNITS, ALWAYS, U8, 8)}, NONE, NONE},
        .check = check_nvfp4, .quant_slot = QS_SLOT_nvfp4_quant,
        .dequant_slot = QS_SLOT_nvfp4_dequant,
        .mm = {QS_SLOT_mm_gemv_nvfp4, -1, QS_SLOT_mm_nvfp4a8, QS_A8_UNIT_SCALES,
               QS_SLOT_mm_nvfp4abf16, 0},
    },
};

#undef CODES_F32_SCALE
#undef NONE
#undef RULE

const struct qs_format_traits *qs_format_traits(int32_t format)
{
    if (format < 1 || format >= (int32_t)(sizeof traits / sizeof traits[0]) || !traits[format].name)
        return NULL;
    return &traits[format];
}

int32_t qs_format_traits_count(void)
{
    return (int32_t)(sizeof traits / sizeof traits[0]) - 1;
}

void (*qs_kernel_get(const struct qs_kernels *k, int32_t slot))(void)
{
    switch (slot) {
#define QS_SLOT(s)                                                                                 \
    case QS_SLOT_##s: return (void (*)(void))k->s;
#include "slots.inc"
#undef QS_SLOT
    default: return NULL;
    }
}
