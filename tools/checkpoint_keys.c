/* SPDX-License-Identifier: MIT */
/* The checkpoint-key scheme (checkpoint_keys.h). */
#include "checkpoint_keys.h"

#include <stddef.h>

#include "qsparse.h"

#define PLANE(suffix, plane, dtype, shape, dq)                                                     \
    {suffix, 0, QS_KEY_PLANE, plane, 0, dtype, QS_KEY_SHAPE_##shape, dq, QS_KEY_AS_IS}
#define END {NULL, 0, 0, 0, 0, NULL, 0, 0, 0}

/* bitsandbytes 4-bit (Params4bit): packed codes [n/2, 1], absmax, quant_map, the nested pair
 * with double quantization, and the JSON quant_state named after the quant type. */
#define BNB4(type, codebook)                                                                       \
    PLANE("", QS_PLANE_DATA, "U8", COLUMN, 0), PLANE(".absmax", QS_PLANE_SCALE, NULL, PLANE, 0),   \
        {".quant_map", 0, QS_KEY_CODEBOOK, 0, codebook, "F32", QS_KEY_SHAPE_PLANE, 0, 0},           \
        PLANE(".nested_absmax", QS_PLANE_NESTED_SCALE, NULL, PLANE, 1),                            \
        {".nested_quant_map", 0, QS_KEY_CODEBOOK, 0, QS_CODEBOOK_DYN8, "F32",                      \
         QS_KEY_SHAPE_PLANE, 1, 0},                                                                 \
        {".quant_state.bitsandbytes__" type, 0, QS_KEY_QUANT_STATE, 0, 0, "U8",                   \
         QS_KEY_SHAPE_PLANE, 0, 0},                                                                 \
        END

static const struct qs_ckpt_key nf4_keys[] = {BNB4("nf4", QS_CODEBOOK_NF4)};
static const struct qs_ckpt_key fp4_keys[] = {BNB4("fp4", QS_CODEBOOK_FP4)};

/* bitsandbytes LLM.int8 (Int8Params): the weight, the row absmax SCB and weight_format on the
 * module. */
static const struct qs_ckpt_key llm_int8_keys[] = {
    PLANE("", QS_PLANE_DATA, "I8", PLANE, 0),
    {".SCB", 1, QS_KEY_PLANE, QS_PLANE_SCALE, 0, "F32", QS_KEY_SHAPE_PLANE, 0, 0},
    {".weight_format", 1, QS_KEY_WEIGHT_FORMAT, 0, 0, "U8", QS_KEY_SHAPE_SCALAR, 0, 0},
    END,
};

/* FP8 per tensor (modelopt / vLLM names): the codes and N_scale []. */
static const struct qs_ckpt_key e4m3_keys[] = {
    PLANE("", QS_PLANE_DATA, "F8_E4M3", PLANE, 0),
    PLANE("_scale", QS_PLANE_SCALE, "F32", SCALAR, 0),
    END,
};
static const struct qs_ckpt_key e5m2_keys[] = {
    PLANE("", QS_PLANE_DATA, "F8_E5M2", PLANE, 0),
    PLANE("_scale", QS_PLANE_SCALE, "F32", SCALAR, 0),
    END,
};

/* MX: the codes (E2M1 pairs as U8, or E4M3) and the E8M0 scales [rows, blocks]. */
static const struct qs_ckpt_key mxfp4_keys[] = {
    PLANE("", QS_PLANE_DATA, "U8", PLANE, 0),
    PLANE("_scale", QS_PLANE_SCALE, "U8", PLANE, 0),
    END,
};
static const struct qs_ckpt_key mxfp8_keys[] = {
    PLANE("", QS_PLANE_DATA, "F8_E4M3", PLANE, 0),
    PLANE("_scale", QS_PLANE_SCALE, "U8", PLANE, 0),
    END,
};

/* Plain INT8 (per tensor, row or group): the codes, the f32 scales, the zero points when
 * asymmetric (one per scale). */
static const struct qs_ckpt_key int8_keys[] = {
    PLANE("", QS_PLANE_DATA, "I8", PLANE, 0),
    PLANE("_scale", QS_PLANE_SCALE, "F32", PLANE, 0),
    PLANE("_zero_point", QS_PLANE_ZERO_POINT, "I8", PLANE, 0),
    END,
};

/* NVFP4: E2M1 pairs, E4M3 block scales and the f32 tensor scale N_scale_2. */
static const struct qs_ckpt_key nvfp4_keys[] = {
    PLANE("", QS_PLANE_DATA, "U8", PLANE, 0),
    PLANE("_scale", QS_PLANE_SCALE, "F8_E4M3", PLANE, 0),
    {"_scale_2", 0, QS_KEY_GLOBAL_SCALE, 0, 0, "F32", QS_KEY_SHAPE_SCALAR, 0, 0},
    END,
};

#undef BNB4
#undef END
#undef PLANE

const struct qs_ckpt_key *qs_ckpt_keys(int32_t format)
{
    switch (format) {
    case QS_FORMAT_NF4: return nf4_keys;
    case QS_FORMAT_FP4: return fp4_keys;
    case QS_FORMAT_LLM_INT8: return llm_int8_keys;
    case QS_FORMAT_INT8: return int8_keys;
    case QS_FORMAT_FP8_E4M3: return e4m3_keys;
    case QS_FORMAT_FP8_E5M2: return e5m2_keys;
    case QS_FORMAT_MXFP4: return mxfp4_keys;
    case QS_FORMAT_MXFP8: return mxfp8_keys;
    case QS_FORMAT_NVFP4: return nvfp4_keys;
    default: return NULL;
    }
}

const char *qs_ckpt_elem_dtype(int32_t elem)
{
    switch (elem) {
    case QS_ELEM_U8: return "U8";
    case QS_ELEM_I8: return "I8";
    case QS_ELEM_F32: return "F32";
    default: return NULL;
    }
}
