/* SPDX-License-Identifier: MIT */
/*
 * Per-tensor formats of `qsparse quantize --tensor-format REGEX=FORMAT` (what llama.cpp users
 * know as --tensor-type and k-quant mixes): the first pattern that matches a selected tensor's
 * name gives its format; the others get --format. FORMAT "none" keeps the tensor float (and its
 * module in the loader's skip list). A pattern's format takes that format's defaults; --blocksize,
 * --double-quant and --granularity apply to --format's tensors (and to a pattern of the same
 * format). Each rule collects the modules it quantized, which a layout that allows mixed formats
 * turns into one config group per format (compressed-tensors); the qsparse layout records each
 * tensor's format anyway.
 */
#ifndef QS_TOOLS_TENSOR_RULES_H
#define QS_TOOLS_TENSOR_RULES_H

#include <regex.h>
#include <stddef.h>
#include <stdint.h>

#include <jansson.h>

#include "layout.h"
#include "qsparse.h"

#define QS_MAX_TENSOR_RULES 32

struct qs_tensor_rule {
    const char *spec;         /* "REGEX=FORMAT" as given; NULL for the --format rule */
    regex_t re;               /* compiled REGEX (POSIX extended) */
    int32_t format;           /* QS_FORMAT_*, or QS_FORMAT_NONE */
    int keep_float;           /* FORMAT "none": the tensor is not quantized */
    qs_quant_params params;   /* the format's parameters */
    json_t *modules;          /* modules this rule quantized (survey) */
    size_t count;             /* tensors this rule quantized */
};

struct qs_tensor_rules {
    struct qs_tensor_rule r[QS_MAX_TENSOR_RULES + 1]; /* the patterns, then --format's rule */
    int n;                                            /* patterns (the base is r[n]) */
};

/*
 * Compile the patterns (specs[0 .. n)) and set the base rule from --format's format and
 * parameters. Returns 0, or -1 with a message in err (a bad regex, an unknown format, no '=').
 */
int qs_tensor_rules_init(struct qs_tensor_rules *rs, const char *const *specs, int n,
                         int32_t base_format, const qs_quant_params *base_params, char *err,
                         size_t errlen);
void qs_tensor_rules_free(struct qs_tensor_rules *rs);

/* The rule of a tensor: the first pattern matching its name, else the base rule. */
struct qs_tensor_rule *qs_tensor_rules_match(struct qs_tensor_rules *rs, const char *name);

/* Count a tensor the rule quantizes and note its module (P of P.weight); -1 out of memory. */
int qs_tensor_rules_note(struct qs_tensor_rule *r, const char *module);

/*
 * After the survey: the rules that quantized something, as layout groups (up to
 * QS_MAX_TENSOR_RULES + 1, one per distinct format and parameters, their module lists merged),
 * with `base` giving the sparsity, activation ranges and weight dtype. Returns the number of
 * groups, or -1 out of memory; the groups borrow the rules' module arrays (new references held
 * by groups[i].modules, released by the caller with json_decref).
 */
int qs_tensor_rules_groups(const struct qs_tensor_rules *rs, const struct qs_layout_req *base,
                           struct qs_layout_group *groups);

/* "nf4: 30, fp8_e4m3: 7" for the summary line (into buf). */
void qs_tensor_rules_summary(const struct qs_tensor_rules *rs, char *buf, size_t n);

#endif /* QS_TOOLS_TENSOR_RULES_H */
