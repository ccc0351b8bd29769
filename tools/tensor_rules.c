/* SPDX-License-Identifier: MIT */
/* Per-tensor formats (tensor_rules.h). */
#include "tensor_rules.h"

#include <stdio.h>
#include <string.h>
#include <strings.h>

#include "heap.h"

int qs_tensor_rules_init(struct qs_tensor_rules *rs, const char *const *specs, int n,
                         int32_t base_format, const qs_quant_params *base_params, char *err,
                         size_t errlen)
{
    memset(rs, 0, sizeof *rs);
    if (n > QS_MAX_TENSOR_RULES) {
        snprintf(err, errlen, "at most %d --tensor-format rules", QS_MAX_TENSOR_RULES);
        return -1;
    }
    for (int i = 0; i < n; i++) {
        struct qs_tensor_rule *r = &rs->r[i];
        const char *eq = strrchr(specs[i], '=');
        char *re;
        int bad;

        if (!eq || eq == specs[i] || !eq[1]) {
            snprintf(err, errlen, "--tensor-format '%s': give REGEX=FORMAT", specs[i]);
            goto fail;
        }
        r->spec = specs[i];
        if (strcasecmp(eq + 1, "none") == 0) {
            r->keep_float = 1;
            r->format = QS_FORMAT_NONE;
        } else if ((r->format = qs_format_from_name(eq + 1)) <= 0) {
            snprintf(err, errlen, "--tensor-format '%s': unknown format '%s'", specs[i], eq + 1);
            goto fail;
        }
        if (r->format == base_format && base_params)
            r->params = *base_params;
        else
            qs_quant_params_init(&r->params, r->format ? r->format : QS_FORMAT_FP8_E4M3);
        if (!(re = qs_heap_malloc((size_t)(eq - specs[i]) + 1))) {
            snprintf(err, errlen, "out of memory");
            goto fail;
        }
        memcpy(re, specs[i], (size_t)(eq - specs[i]));
        re[eq - specs[i]] = '\0';
        bad = regcomp(&r->re, re, REG_EXTENDED | REG_NOSUB);
        qs_heap_free(re);
        if (bad) {
            snprintf(err, errlen, "--tensor-format '%s': bad regular expression", specs[i]);
            goto fail;
        }
        rs->n = i + 1;
        if (!(r->modules = json_array())) {
            snprintf(err, errlen, "out of memory");
            goto fail;
        }
    }
    rs->r[rs->n].format = base_format;
    if (base_params)
        rs->r[rs->n].params = *base_params;
    if (!(rs->r[rs->n].modules = json_array())) {
        snprintf(err, errlen, "out of memory");
        goto fail;
    }
    return 0;
fail:
    qs_tensor_rules_free(rs);
    return -1;
}

void qs_tensor_rules_free(struct qs_tensor_rules *rs)
{
    for (int i = 0; i <= rs->n && i <= QS_MAX_TENSOR_RULES; i++) {
        if (i < rs->n)
            regfree(&rs->r[i].re);
        if (rs->r[i].modules)
            json_decref(rs->r[i].modules);
    }
    memset(rs, 0, sizeof *rs);
}

struct qs_tensor_rule *qs_tensor_rules_match(struct qs_tensor_rules *rs, const char *name)
{
    for (int i = 0; i < rs->n; i++)
        if (regexec(&rs->r[i].re, name, 0, NULL, 0) == 0)
            return &rs->r[i];
    return &rs->r[rs->n];
}

int qs_tensor_rules_note(struct qs_tensor_rule *r, const char *module)
{
    r->count++;
    return json_array_append_new(r->modules, json_string(module));
}

/* Whether two rules write the same scheme (format and every parameter a layout reads). */
static int same_scheme(const struct qs_tensor_rule *a, const struct qs_tensor_rule *b)
{
    return a->format == b->format && a->params.block_size == b->params.block_size &&
           a->params.double_quant == b->params.double_quant &&
           a->params.granularity == b->params.granularity &&
           a->params.symmetric == b->params.symmetric;
}

int qs_tensor_rules_groups(const struct qs_tensor_rules *rs, const struct qs_layout_req *base,
                           struct qs_layout_group *groups)
{
    int ng = 0;

    for (int i = 0; i <= rs->n; i++) {
        const struct qs_tensor_rule *r = &rs->r[i];
        int g = 0;
        if (!r->count || r->keep_float)
            continue;
        while (g < ng && !same_scheme(r, &rs->r[groups[g].rule]))
            g++;
        if (g == ng) {
            groups[g].req = *base;
            groups[g].req.format = r->format;
            groups[g].req.params = r->params;
            groups[g].req.groups = NULL;
            groups[g].req.ngroups = 0;
            groups[g].rule = i;
            if (!(groups[g].modules = json_array()))
                return -1;
            ng++;
        }
        if (json_array_extend(groups[g].modules, r->modules) != 0)
            return -1;
    }
    return ng;
}

void qs_tensor_rules_summary(const struct qs_tensor_rules *rs, char *buf, size_t n)
{
    size_t k = 0;

    buf[0] = '\0';
    for (int i = 0; i <= rs->n && k + 1 < n; i++) {
        const struct qs_tensor_rule *r = &rs->r[i];
        if (!r->count || r->keep_float)
            continue;
        k += (size_t)snprintf(buf + k, n - k, "%s%s: %zu", k ? ", " : "",
                              r->format ? qs_format_name(r->format) : "none", r->count);
        if (k >= n)
            k = n - 1;
    }
}
