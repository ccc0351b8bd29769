/* SPDX-License-Identifier: MIT */
/* The layout registry (layout.h) and the tool's own layout, "qsparse". */
#include "layout.h"

#include <stdio.h>
#include <string.h>

/* Any format with keys; with --sparsity 2:4 the weight is written compressed (the kept values
 * in the format's keys, plus its meta: checkpoint_keys.h), also with --format none. */
static int qsparse_check(const struct qs_layout_req *r, char *err, size_t errlen)
{
    if (r->sparsity24 && r->format == QS_FORMAT_NONE)
        return 0;
    if (!qs_ckpt_keys(r->format)) {
        snprintf(err, errlen, "the qsparse layout has no keys for %s",
                 r->format ? qs_format_name(r->format) : "--format none");
        return -1;
    }
    return 0;
}

static const struct qs_ckpt_key *qsparse_keys(const struct qs_layout_req *r)
{
    return qs_ckpt_keys(r->format);
}

const struct qs_layout qs_layout_qsparse = {"qsparse", qsparse_check, qsparse_keys,
                                            NULL,      NULL,          NULL};

const struct qs_layout *qs_layout_find(const char *name)
{
    if (strcmp(name, "qsparse") == 0)
        return &qs_layout_qsparse;
    if (strcmp(name, "bnb") == 0 || strcmp(name, "bitsandbytes") == 0)
        return &qs_layout_bnb;
    if (strcmp(name, "ct") == 0 || strcmp(name, "compressed-tensors") == 0)
        return &qs_layout_ct;
    if (strcmp(name, "modelopt") == 0)
        return &qs_layout_modelopt;
    return NULL;
}

const char *qs_layout_model_dtype(const struct qs_layout *layout, const struct qs_layout_req *r)
{
    if (layout != &qs_layout_ct)
        return NULL;
    for (int32_t g = 0; g < r->ngroups; g++)
        if (qs_layout_model_dtype(layout, &r->groups[g].req))
            return "bfloat16";
    switch (r->format) {
    case QS_FORMAT_MXFP4:
    case QS_FORMAT_MXFP8:
    case QS_FORMAT_NVFP4: return "bfloat16";
    default: return NULL;
    }
}

const struct qs_layout *qs_layout_default(int32_t format)
{
    switch (format) {
    case QS_FORMAT_NF4:
    case QS_FORMAT_FP4:
    case QS_FORMAT_LLM_INT8: return &qs_layout_bnb;
    default: return &qs_layout_ct;
    }
}
