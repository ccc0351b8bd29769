/* SPDX-License-Identifier: MIT */
/*
 * The compressed-tensors layout: what compressed-tensors (through transformers) and vLLM read.
 * Keys sit on the module P of a weight P.weight:
 *
 *   fp8_e4m3  P.weight F8_E4M3, P.weight_scale F32 [1]                      ("float-quantized")
 *   int8      P.weight_packed I32 [rows, cols/4] (q + 128, four to a word, first in the low
 *             byte), P.weight_scale F32 [1] | [rows, 1] | [rows, cols/group], P.weight_shape
 *             I64 [2]                                                        ("pack-quantized")
 *   mxfp4     P.weight_packed U8 [rows, cols/2] (low nibble first), P.weight_scale U8 (E8M0)
 *             [rows, cols/32]                                          ("mxfp4-pack-quantized")
 *   mxfp8     P.weight F8_E4M3, P.weight_scale U8 (E8M0) [rows, cols/32]   ("mxfp8-quantized")
 *   nvfp4     P.weight_packed U8 [rows, cols/2], P.weight_scale F8_E4M3 [rows, cols/16],
 *             P.weight_global_scale F32 [1] = 1 / the per-tensor scale ("nvfp4-pack-quantized")
 *
 * Every format decodes as code * scale (nvfp4: code * block scale / global scale), which is the
 * library's decode (docs/formats.md §9, §10, §13, §14). The config is a weight-only scheme
 * (activations stay float) for the modules of type Linear, with every 2-D weight left float in
 * "ignore"; --sparsity 2:4 adds a sparsity_config (the weights are stored dense, pruned).
 */
#include "layout.h"

#include <stdio.h>

#define K(suffix, source, plane, dtype, shape, transform)                                          \
    {                                                                                              \
        suffix, 1, source, plane, 0, dtype, QS_KEY_SHAPE_##shape, 0, transform                     \
    }
#define END                                                                                        \
    {                                                                                              \
        NULL, 0, 0, 0, 0, NULL, 0, 0, 0                                                            \
    }

static const struct qs_ckpt_key fp8_keys[] = {
    K(".weight", QS_KEY_PLANE, QS_PLANE_DATA, "F8_E4M3", PLANE, QS_KEY_AS_IS),
    K(".weight_scale", QS_KEY_PLANE, QS_PLANE_SCALE, "F32", ONE, QS_KEY_AS_IS),
    END,
};
static const struct qs_ckpt_key int8_tensor_keys[] = {
    K(".weight_packed", QS_KEY_PLANE, QS_PLANE_DATA, "I32", PACK32, QS_KEY_XOR80),
    K(".weight_scale", QS_KEY_PLANE, QS_PLANE_SCALE, "F32", ONE, QS_KEY_AS_IS),
    K(".weight_shape", QS_KEY_WEIGHT_SHAPE, 0, "I64", PLANE, QS_KEY_AS_IS),
    END,
};
static const struct qs_ckpt_key int8_rows_keys[] = {
    K(".weight_packed", QS_KEY_PLANE, QS_PLANE_DATA, "I32", PACK32, QS_KEY_XOR80),
    K(".weight_scale", QS_KEY_PLANE, QS_PLANE_SCALE, "F32", ROWS, QS_KEY_AS_IS),
    K(".weight_shape", QS_KEY_WEIGHT_SHAPE, 0, "I64", PLANE, QS_KEY_AS_IS),
    END,
};
static const struct qs_ckpt_key mxfp4_keys[] = {
    K(".weight_packed", QS_KEY_PLANE, QS_PLANE_DATA, "U8", PLANE, QS_KEY_AS_IS),
    K(".weight_scale", QS_KEY_PLANE, QS_PLANE_SCALE, "U8", PLANE, QS_KEY_AS_IS),
    END,
};
static const struct qs_ckpt_key mxfp8_keys[] = {
    K(".weight", QS_KEY_PLANE, QS_PLANE_DATA, "F8_E4M3", PLANE, QS_KEY_AS_IS),
    K(".weight_scale", QS_KEY_PLANE, QS_PLANE_SCALE, "U8", PLANE, QS_KEY_AS_IS),
    END,
};
static const struct qs_ckpt_key nvfp4_keys[] = {
    K(".weight_packed", QS_KEY_PLANE, QS_PLANE_DATA, "U8", PLANE, QS_KEY_AS_IS),
    K(".weight_scale", QS_KEY_PLANE, QS_PLANE_SCALE, "F8_E4M3", PLANE, QS_KEY_AS_IS),
    K(".weight_global_scale", QS_KEY_GLOBAL_SCALE_RECIP, 0, "F32", ONE, QS_KEY_AS_IS),
    END,
};

static int ct_check(const struct qs_layout_req *r, char *err, size_t errlen)
{
    switch (r->format) {
    case QS_FORMAT_FP8_E4M3:
    case QS_FORMAT_MXFP4:
    case QS_FORMAT_MXFP8:
    case QS_FORMAT_NVFP4: return 0;
    case QS_FORMAT_INT8:
        if (!r->params.symmetric) {
            snprintf(err, errlen, "the compressed-tensors layout writes symmetric int8 only");
            return -1;
        }
        return 0;
    case QS_FORMAT_NONE:
        if (r->sparsity24)
            return 0;
        snprintf(err, errlen, "--format none needs --sparsity 2:4");
        return -1;
    default: break;
    }
    snprintf(err, errlen,
             "the compressed-tensors layout holds fp8_e4m3, int8, mxfp4, mxfp8, nvfp4 and 2:4 "
             "sparsity (%s: %s)",
             r->format ? qs_format_name(r->format) : "none",
             r->format == QS_FORMAT_NF4 || r->format == QS_FORMAT_FP4 ||
                     r->format == QS_FORMAT_LLM_INT8
                 ? "use --layout bitsandbytes"
                 : "no compressed-tensors scheme for it");
    return -1;
}

static const struct qs_ckpt_key *ct_keys(const struct qs_layout_req *r)
{
    switch (r->format) {
    case QS_FORMAT_FP8_E4M3: return fp8_keys;
    case QS_FORMAT_INT8:
        return r->params.granularity == QS_GRAN_TENSOR ? int8_tensor_keys : int8_rows_keys;
    case QS_FORMAT_MXFP4: return mxfp4_keys;
    case QS_FORMAT_MXFP8: return mxfp8_keys;
    case QS_FORMAT_NVFP4: return nvfp4_keys;
    default: return NULL;
    }
}

/* The compression format name and the weights' QuantizationArgs of a format. */
static json_t *weight_args(const struct qs_layout_req *r, const char **ct_format)
{
    const qs_quant_params *p = &r->params;

    switch (r->format) {
    case QS_FORMAT_FP8_E4M3:
        *ct_format = "float-quantized";
        return json_pack("{s:i, s:s, s:b, s:n, s:s, s:b}", "num_bits", 8, "type", "float",
                         "symmetric", 1, "group_size", "strategy", "tensor", "dynamic", 0);
    case QS_FORMAT_INT8:
        *ct_format = "pack-quantized";
        if (p->granularity == QS_GRAN_GROUP)
            return json_pack("{s:i, s:s, s:b, s:i, s:s, s:b}", "num_bits", 8, "type", "int",
                             "symmetric", 1, "group_size", p->block_size, "strategy", "group",
                             "dynamic", 0);
        return json_pack("{s:i, s:s, s:b, s:n, s:s, s:b}", "num_bits", 8, "type", "int",
                         "symmetric", 1, "group_size", "strategy",
                         p->granularity == QS_GRAN_TENSOR ? "tensor" : "channel", "dynamic", 0);
    case QS_FORMAT_MXFP4:
    case QS_FORMAT_MXFP8:
        *ct_format = r->format == QS_FORMAT_MXFP4 ? "mxfp4-pack-quantized" : "mxfp8-quantized";
        return json_pack("{s:i, s:s, s:b, s:i, s:s, s:b, s:s}", "num_bits",
                         r->format == QS_FORMAT_MXFP4 ? 4 : 8, "type", "float", "symmetric", 1,
                         "group_size", 32, "strategy", "group", "dynamic", 0, "scale_dtype",
                         "torch.uint8");
    case QS_FORMAT_NVFP4:
        *ct_format = "nvfp4-pack-quantized";
        return json_pack("{s:i, s:s, s:b, s:i, s:s, s:b, s:s}", "num_bits", 4, "type", "float",
                         "symmetric", 1, "group_size", 16, "strategy", "tensor_group", "dynamic", 0,
                         "scale_dtype", "torch.float8_e4m3fn");
    default: *ct_format = "dense"; return NULL;
    }
}

/* Per-tensor formats: one scheme per group, targeting its modules by name, and the format
 * "mixed-precision" (compressed-tensors then takes each scheme's own format). */
static json_t *mixed_groups(const struct qs_layout_req *r)
{
    json_t *groups = json_object();

    for (int32_t g = 0; groups && g < r->ngroups; g++) {
        const char *fmt = "dense";
        char name[32];
        json_t *w = weight_args(&r->groups[g].req, &fmt), *s;
        if (!w)
            continue; /* --format none: pruned dense weights belong to no scheme */
        s = json_pack("{s:O, s:o, s:n, s:n, s:s}", "targets", r->groups[g].modules, "weights", w,
                      "input_activations", "output_activations", "format", fmt);
        snprintf(name, sizeof name, "group_%d", (int)g);
        if (!s || json_object_set_new(groups, name, s) != 0) {
            json_decref(groups);
            return NULL;
        }
    }
    return groups;
}

static json_t *ct_config(const struct qs_layout_req *r, json_t *skipped)
{
    const char *fmt = "dense";
    json_t *w = r->ngroups > 1 ? NULL : weight_args(r, &fmt), *c;

    if (r->ngroups > 1)
        fmt = "mixed-precision";
    c = json_pack("{s:s, s:s, s:s, s:n, s:n, s:O, s:{}}", "quant_method", "compressed-tensors",
                  "format", fmt, "quantization_status", "compressed", "kv_cache_scheme",
                  "global_compression_ratio", "ignore", skipped, "sparsity_config");
    if (!c) {
        json_decref(w);
        return NULL;
    }
    if (r->ngroups > 1) {
        json_t *groups = mixed_groups(r);
        if (!groups || json_object_set_new(c, "config_groups", groups) != 0)
            goto fail;
    } else if (w) {
        json_t *groups =
            json_pack("{s:{s:[s], s:o, s:n, s:n, s:s}}", "group_0", "targets", "Linear", "weights",
                      w, "input_activations", "output_activations", "format", fmt);
        if (!groups || json_object_set_new(c, "config_groups", groups) != 0)
            goto fail;
    } else if (json_object_set_new(c, "config_groups", json_object()) != 0) {
        goto fail;
    }
    if (r->sparsity24) {
        json_t *s = json_pack("{s:s, s:s, s:[s], s:O, s:f, s:b}", "format", "dense",
                              "sparsity_structure", "2:4", "targets", "Linear", "ignore", skipped,
                              "global_sparsity", 0.5, "registry_requires_subclass", 0);
        if (!s || json_object_set_new(c, "sparsity_config", s) != 0)
            goto fail;
    }
    return c;
fail:
    json_decref(c);
    return NULL;
}

const struct qs_layout qs_layout_ct = {
    "compressed-tensors", ct_check, ct_keys, ct_config, NULL, NULL};
