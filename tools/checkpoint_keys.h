/* SPDX-License-Identifier: MIT */
/*
 * The checkpoint-key scheme of `qsparse quantize`: for each format, every safetensors key a
 * quantized weight N becomes, with the key's dtype, shape rule and where its bytes come from.
 * The writer (cmd_quantize.c) and its collision check read this one table; tools/README.md
 * documents the same keys.
 */
#ifndef QS_TOOLS_CHECKPOINT_KEYS_H
#define QS_TOOLS_CHECKPOINT_KEYS_H

#include <stdint.h>

/* Where a key's bytes come from. */
enum qs_key_source {
    QS_KEY_PLANE,          /* a plane of the quantized tensor (qs_ckpt_key.plane) */
    QS_KEY_CODEBOOK,       /* a codebook of the library (qs_ckpt_key.codebook), f32 */
    QS_KEY_QUANT_STATE,    /* the bitsandbytes JSON quant_state, as U8 bytes */
    QS_KEY_GLOBAL_SCALE,   /* qs_qtensor.global_scale, f32 [] */
    QS_KEY_WEIGHT_FORMAT,  /* bitsandbytes weight_format: U8 [] 0 ("row") */
    QS_KEY_GLOBAL_SCALE_RECIP, /* f32 1 / qs_qtensor.global_scale (compressed-tensors NVFP4) */
    QS_KEY_WEIGHT_SHAPE,   /* I64 [2]: the weight's rows and cols (compressed-tensors packing) */
    QS_KEY_INPUT_SCALE,    /* f32: activation amax / the format's largest code (modelopt) */
};

/* How a plane key's shape follows the plane (qs_plane_info). */
enum qs_key_shape {
    QS_KEY_SHAPE_PLANE,   /* as the library describes it: [n] or [rows, k] */
    QS_KEY_SHAPE_COLUMN,  /* [n, 1]: bitsandbytes' packed 4-bit weight */
    QS_KEY_SHAPE_SCALAR,  /* []: a per-tensor scale */
    QS_KEY_SHAPE_ONE,     /* [1]: a per-tensor scale as compressed-tensors stores it */
    QS_KEY_SHAPE_ROWS,    /* [rows, values / rows]: one line per weight row */
    QS_KEY_SHAPE_PACK32,  /* [rows, cols / 4] I32: int8 codes packed four to a word */
};

/* How a plane's bytes are changed on the way out. */
enum qs_key_transform {
    QS_KEY_AS_IS,
    QS_KEY_XOR80, /* int8 -> unsigned (q + 128): compressed-tensors' pack-quantized words */
};

struct qs_ckpt_key {
    const char *suffix;   /* appended to the base name; "" is the weight's own key */
    int32_t module;       /* 1: the base is the module prefix (N without ".weight") */
    int32_t source;       /* enum qs_key_source */
    int32_t plane;        /* QS_PLANE_* for QS_KEY_PLANE */
    int32_t codebook;     /* QS_CODEBOOK_* for QS_KEY_CODEBOOK */
    const char *dtype;    /* safetensors dtype; NULL: from the plane's element type */
    int32_t shape;        /* enum qs_key_shape */
    int32_t double_quant; /* 1: written only with double quantization */
    int32_t transform;    /* enum qs_key_transform */
};

/* In the tool's own layout a 2:4 weight N (--sparsity 2:4) is stored compressed: the format's
 * keys hold its kept values as a rows x cols/2 tensor (plain values with --format none), and
 * N + QS_CKPT_SP24_META the meta words, U16 [rows, ceil(cols/16)] (docs/sparsity.md §3). */
#define QS_CKPT_SP24_META ".sp24_meta"

/* The keys of `format` (QS_FORMAT_*) in the tool's own layout ("qsparse", also bitsandbytes'
 * for nf4, fp4 and llm_int8), ended by an entry with suffix NULL; NULL for a format that layout
 * does not write. Other layouts: layout.h. */
const struct qs_ckpt_key *qs_ckpt_keys(int32_t format);

/* The safetensors dtype of a plane element type (QS_ELEM_*), NULL for none. */
const char *qs_ckpt_elem_dtype(int32_t elem);

#endif /* QS_TOOLS_CHECKPOINT_KEYS_H */
