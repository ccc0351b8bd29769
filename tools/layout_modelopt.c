/* SPDX-License-Identifier: MIT */
/*
 * The ModelOpt layout (NVIDIA TensorRT Model Optimizer's Hugging Face export, read by vLLM,
 * SGLang and TensorRT-LLM): keys on the module P of a weight P.weight,
 *
 *   fp8_e4m3  P.weight F8_E4M3, P.weight_scale F32 [], P.input_scale F32 []
 *   nvfp4     P.weight U8 [rows, cols/2] (low nibble first), P.weight_scale F8_E4M3
 *             [rows, cols/16], P.weight_scale_2 F32 [] (the per-tensor scale), P.input_scale F32 []
 *
 * plus hf_quant_config.json and a config.json quantization_config naming the algorithm and the
 * modules left unquantized. Both formats quantize activations with a static scale, so
 * input_scale needs each module's activation range (--act-amax): amax / 448 for FP8,
 * amax / (6 * 448) for NVFP4, as ModelOpt computes them.
 */
#include "layout.h"

#include <stdio.h>

#define K(suffix, source, plane, dtype, shape)                                                     \
    {                                                                                              \
        suffix, 1, source, plane, 0, dtype, QS_KEY_SHAPE_##shape, 0, QS_KEY_AS_IS                  \
    }
#define END                                                                                        \
    {                                                                                              \
        NULL, 0, 0, 0, 0, NULL, 0, 0, 0                                                            \
    }

static const struct qs_ckpt_key fp8_keys[] = {
    K(".weight", QS_KEY_PLANE, QS_PLANE_DATA, "F8_E4M3", PLANE),
    K(".weight_scale", QS_KEY_PLANE, QS_PLANE_SCALE, "F32", SCALAR),
    K(".input_scale", QS_KEY_INPUT_SCALE, 0, "F32", SCALAR),
    END,
};
static const struct qs_ckpt_key nvfp4_keys[] = {
    K(".weight", QS_KEY_PLANE, QS_PLANE_DATA, "U8", PLANE),
    K(".weight_scale", QS_KEY_PLANE, QS_PLANE_SCALE, "F8_E4M3", PLANE),
    K(".weight_scale_2", QS_KEY_GLOBAL_SCALE, 0, "F32", SCALAR),
    K(".input_scale", QS_KEY_INPUT_SCALE, 0, "F32", SCALAR),
    END,
};

static int modelopt_check(const struct ckpt_layout_req *r, char *err, size_t errlen)
{
    if (r->sparsity24 || (r->format != QS_FORMAT_FP8_E4M3 && r->format != QS_FORMAT_NVFP4)) {
        snprintf(err, errlen, "the modelopt layout holds fp8_e4m3 and nvfp4 only%s",
                 r->sparsity24 ? ", without sparsity" : "");
        return -1;
    }
    if (!r->have_act_amax) {
        snprintf(err, errlen,
                 "the modelopt layout quantizes activations with a static input_scale: pass "
                 "--act-amax FILE.json ({\"module name\": activation amax, ...}, e.g. from "
                 "qsparse.Observer), or use --layout compressed-tensors (weight-only)");
        return -1;
    }
    return 0;
}

static const struct qs_ckpt_key *modelopt_keys(const struct ckpt_layout_req *r)
{
    return r->format == QS_FORMAT_NVFP4 ? nvfp4_keys : fp8_keys;
}

static json_t *quantization(const struct ckpt_layout_req *r, json_t *skipped)
{
    json_t *q =
        json_pack("{s:s, s:n, s:O}", "quant_algo", r->format == QS_FORMAT_NVFP4 ? "NVFP4" : "FP8",
                  "kv_cache_quant_algo", "exclude_modules", skipped);

    if (q && r->format == QS_FORMAT_NVFP4 &&
        json_object_set_new(q, "group_size", json_integer(16)) != 0) {
        json_decref(q);
        return NULL;
    }
    return q;
}

/* config.json: the same fields, flat, under quant_method "modelopt" (what vLLM reads). */
static json_t *modelopt_config(const struct ckpt_layout_req *r, json_t *skipped)
{
    json_t *q = quantization(r, skipped);

    if (q && json_object_set_new(q, "quant_method", json_string("modelopt")) != 0) {
        json_decref(q);
        return NULL;
    }
    return q;
}

static json_t *modelopt_extra(const struct ckpt_layout_req *r, json_t *skipped)
{
    json_t *q = quantization(r, skipped);

    if (!q)
        return NULL;
    return json_pack("{s:{s:s, s:s}, s:o}", "producer", "name", "qsparse", "version",
                     qs_version_string(), "quantization", q);
}

const struct ckpt_layout ckpt_layout_modelopt = {
    "modelopt",      modelopt_check,         modelopt_keys,
    modelopt_config, "hf_quant_config.json", modelopt_extra};
