/* SPDX-License-Identifier: MIT */
/*
 * The bitsandbytes layout: what transformers' bitsandbytes quantizers load as written. The keys
 * are bitsandbytes' own (Params4bit's absmax, quant_map, nested_*, quant_state.bitsandbytes__*;
 * Int8Params' SCB and weight_format: checkpoint_keys.c); config.json gets the
 * BitsAndBytesConfig fields, with every 2-D weight left unquantized in llm_int8_skip_modules so
 * that transformers replaces exactly the modules that were quantized.
 */
#include "layout.h"

#include <stdio.h>

static int bnb_check(const struct ckpt_layout_req *r, char *err, size_t errlen)
{
    int32_t bs = r->params.block_size;

    if (r->sparsity24) {
        snprintf(err, errlen,
                 "the bitsandbytes layout cannot hold 2:4 sparse weights; use "
                 "--layout compressed-tensors");
        return -1;
    }
    switch (r->format) {
    case QS_FORMAT_NF4:
    case QS_FORMAT_FP4:
        /* bitsandbytes' 4-bit kernels take these block sizes only ("invalid blocksize"). */
        if (bs < 32 || bs > 4096 || (bs & (bs - 1)) != 0) {
            snprintf(err, errlen,
                     "the bitsandbytes layout needs a block size of 32, 64, ..., 4096 (a power of "
                     "two; bitsandbytes refuses %d); use --layout qsparse for other sizes",
                     bs);
            return -1;
        }
        return 0;
    case QS_FORMAT_LLM_INT8: return 0;
    default:
        snprintf(err, errlen,
                 "the bitsandbytes layout holds nf4, fp4 and llm_int8 only (%s: use --layout "
                 "compressed-tensors%s)",
                 r->format ? qs_format_name(r->format) : "none",
                 r->format == QS_FORMAT_FP8_E4M3 || r->format == QS_FORMAT_NVFP4 ? " or modelopt"
                                                                                 : "");
        return -1;
    }
}

static const struct qs_ckpt_key *bnb_keys(const struct ckpt_layout_req *r)
{
    return qs_ckpt_keys(r->format);
}

static json_t *bnb_config(const struct ckpt_layout_req *r, json_t *skipped)
{
    int four = r->format != QS_FORMAT_LLM_INT8;
    json_t *c = json_pack("{s:s, s:b, s:b, s:f, s:O, s:b, s:b}", "quant_method", "bitsandbytes",
                          "load_in_4bit", four, "load_in_8bit", !four, "llm_int8_threshold", 6.0,
                          "llm_int8_skip_modules", skipped, "llm_int8_has_fp16_weight", 0,
                          "llm_int8_enable_fp32_cpu_offload", 0);

    if (c && four &&
        json_object_update_new(c, json_pack("{s:s, s:b, s:s, s:s}", "bnb_4bit_quant_type",
                                            qs_format_name(r->format), "bnb_4bit_use_double_quant",
                                            r->params.double_quant != 0, "bnb_4bit_compute_dtype",
                                            r->weight_dtype, "bnb_4bit_quant_storage", "uint8")) !=
            0) {
        json_decref(c);
        return NULL;
    }
    return c;
}

const struct ckpt_layout ckpt_layout_bnb = {"bitsandbytes", bnb_check, bnb_keys,
                                            bnb_config,     NULL,      NULL};
