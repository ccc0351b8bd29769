/* SPDX-License-Identifier: MIT */
/*
 * Calibration files of `qsparse quantize --method gptq|sparsegpt --calib FILE` (tools/README.md
 * lists the keys): a safetensors file holding, per linear layer, either its Hessian or its input
 * activations, and the per-weight quantization by GPTQ or SparseGPT that they allow.
 */
#ifndef QS_TOOLS_CALIB_FILE_H
#define QS_TOOLS_CALIB_FILE_H

#include <stddef.h>
#include <stdint.h>

#include "qsparse.h"
#include "safetensors.h"

#define QS_METHOD_RTN 0
#define QS_METHOD_GPTQ 1
#define QS_METHOD_SPARSEGPT 2

struct qs_calib_opts {
    int method;           /* QS_METHOD_* */
    const char *calib;    /* FILE, or NULL */
    int32_t sp_n, sp_m;   /* --sparsity N:M (0:0 none) */
    struct qs_st_file f;  /* open when calib is set */
    int open;
};

/* Parse --method (rtn, gptq, sparsegpt) / --sparsity N:M; 0 or -1 (message on stderr). */
int qs_calib_parse_method(struct qs_calib_opts *o, const char *s);
int qs_calib_parse_sparsity(struct qs_calib_opts *o, const char *s);
/* Check the combination and open FILE; 0 or -1 with err. */
int qs_calib_open(struct qs_calib_opts *o, char *err, size_t errlen);
void qs_calib_close(struct qs_calib_opts *o);

/*
 * Quantize one weight (rows x cols of `dtype` at w, named `name`) into *q with *p: qs_quantize
 * for RTN; GPTQ with the layer's Hessian; SparseGPT N:M pruning, then the pruned dense weight
 * quantized by qs_quantize (its zeros stay exact zeros in every 4- and 8-bit format). Returns 0,
 * or -1 with err.
 */
int qs_calib_quantize(qs_ctx *ctx, const struct qs_calib_opts *o, const char *name,
                      const qs_quant_params *p, const void *w, int32_t dtype, int64_t rows,
                      int64_t cols, qs_qtensor *q, char *err, size_t errlen);

#endif /* QS_TOOLS_CALIB_FILE_H */
