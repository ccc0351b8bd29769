/* SPDX-License-Identifier: MIT */
/*
 * Checkpoint layouts: how a quantized weight is named, shaped and described so that a given
 * loader reads the written files as they are. Each layout lives in its own file:
 *
 *   qsparse              the tool's own keys (checkpoint_keys.c), one file, no loader config
 *   bitsandbytes         layout_bnb.c: transformers + bitsandbytes (nf4, fp4, llm_int8)
 *   compressed-tensors   layout_ct.c: compressed-tensors / vLLM (fp8, int8, mxfp4, mxfp8, nvfp4,
 *                        2:4 sparsity)
 *   modelopt             layout_modelopt.c: NVIDIA ModelOpt (fp8, nvfp4; hf_quant_config.json)
 *
 * docs/layouts.md describes what each writes and which loader reads it.
 */
#ifndef QS_TOOLS_LAYOUT_H
#define QS_TOOLS_LAYOUT_H

#include <stddef.h>
#include <stdint.h>

#include <jansson.h>

#include "qsparse.h"
#include "checkpoint_keys.h"

struct qs_layout_group;

/* What the user asked for, as far as a layout cares. */
struct qs_layout_req {
    int32_t format;           /* QS_FORMAT_*, or QS_FORMAT_NONE for sparsity alone */
    qs_quant_params params;   /* after the command-line options */
    int32_t sparsity24;       /* 1: weights pruned to 2:4 (magnitude) before quantization */
    int32_t have_act_amax;    /* 1: activation ranges were given (--act-amax) */
    const char *weight_dtype; /* "float32", "float16" or "bfloat16": the weights' dtype */
    /* --tensor-format: more than one scheme in the model, one group per scheme (NULL, 0 for
     * one format); format and params above are then the first group's */
    const struct qs_layout_group *groups;
    int32_t ngroups;
};

/* One scheme of a model with per-tensor formats, and the modules (P of P.weight) it covers. */
struct qs_layout_group {
    struct qs_layout_req req;
    json_t *modules; /* array of strings */
    int rule;        /* the tool's rule it came from (tensor_rules.h) */
};

#define QS_FORMAT_NONE 0 /* --format none: weights stay float (with --sparsity) */

/* The tensors `qsparse quantize` selects by default (POSIX extended regular expressions, the
 * exclusion case-insensitive): linear layers' weights, not norms, biases or embeddings (nor the
 * tied output head). */
#define QS_SELECT_INCLUDE "\\.weight$"
#define QS_SELECT_EXCLUDE "norm|embed|lm_head|(^|\\.)(wte|wpe|ln_[a-z0-9]+)\\."

struct qs_layout {
    const char *name;
    /* 0, or -1 with a message naming what the layout cannot represent. */
    int (*check)(const struct qs_layout_req *r, char *err, size_t errlen);
    /* The keys of one quantized weight (checkpoint_keys.h); NULL when the format has none. */
    const struct qs_ckpt_key *(*keys)(const struct qs_layout_req *r);
    /* config.json's "quantization_config" (a new reference), or NULL for a layout without one.
     * `skipped` is the array of modules whose 2-D weight was left unquantized (borrowed). */
    json_t *(*config)(const struct qs_layout_req *r, json_t *skipped);
    /* A second file written beside config.json (modelopt: hf_quant_config.json), or NULL. */
    const char *extra_name;
    json_t *(*extra)(const struct qs_layout_req *r, json_t *skipped);
};

extern const struct qs_layout qs_layout_qsparse, qs_layout_bnb, qs_layout_ct, qs_layout_modelopt;

/* The layout of that name ("bnb" and "ct" are accepted short names), NULL if none. */
const struct qs_layout *qs_layout_find(const char *name);
/* The layout a model folder gets without --layout: bitsandbytes for nf4, fp4 and llm_int8,
 * compressed-tensors otherwise. */
const struct qs_layout *qs_layout_default(int32_t format);

/* The dtype ("bfloat16") that config.json must name for the folder to compute as written, or
 * NULL when the input's stays right. compressed-tensors decodes MXFP4, MXFP8 and NVFP4 weights
 * to bfloat16 whatever the model's dtype, so a float32 model fails at its first forward
 * ("self and mat2 must have the same dtype"); with the model's dtype bfloat16 it loads and runs
 * as written (transformers' default dtype="auto" reads it from config.json). */
const char *qs_layout_model_dtype(const struct qs_layout *layout, const struct qs_layout_req *r);

#endif /* QS_TOOLS_LAYOUT_H */
