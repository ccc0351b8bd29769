/* SPDX-License-Identifier: MIT */
/*
 * Calibrated quantization in `qsparse quantize` (tools/README.md): the options (--method,
 * --calib, --heldout, --damp, --block, --act-order, --rotate, --smoothquant), the calibration
 * file (`qsparse calibrate`'s statistics, or per-layer Hessians or inputs), and per weight the
 * method: round-to-nearest, GPTQ, AWQ, SparseGPT or Wanda, with the output error each one makes
 * on the calibration statistics next to round-to-nearest's.
 *
 * calib_file.c: options, opening and checking, reading a layer's statistics.
 * calib_quantize.c: one weight by its method, and its report.
 * calib_scales.c: AWQ and SmoothQuant scales, folded into the operation before the layer.
 */
#ifndef QS_TOOLS_CALIB_FILE_H
#define QS_TOOLS_CALIB_FILE_H

#include <stddef.h>
#include <stdint.h>
#include <stdio.h>

#include "qsparse.h"
#include "safetensors.h"

#define QS_METHOD_RTN 0
#define QS_METHOD_GPTQ 1
#define QS_METHOD_SPARSEGPT 2
#define QS_METHOD_WANDA 3
#define QS_METHOD_AWQ 4

struct qs_calib_fold; /* calib_scales.c */

struct qs_calib_opts {
    int method;              /* QS_METHOD_* */
    const char *calib;       /* --calib FILE, or NULL */
    const char *heldout;     /* --heldout FILE: statistics of other text, for the table */
    int32_t sp_n, sp_m;      /* --sparsity N:M (0:0 none) */
    double damp;             /* --damp: GPTQ / SparseGPT dampening; < 0: the default */
    int32_t block;           /* --block: lazy-update block; 0: the library's default */
    int act_order;           /* --act-order 1, --no-act-order 0; -1: on but for mxfp4 */
    int32_t rotate;          /* --rotate hadamard[:B]: 0 off, -1 the layer's largest block */
    double smooth;           /* --smoothquant ALPHA; < 0 off */
    int32_t format;          /* the --format code (0: none) */
    struct qs_st_file f, fh; /* open when calib / heldout are set */
    int open, hopen;
    json_t *meta, *hmeta;        /* their "qsparse.calibration" metadata, parsed (or NULL) */
    struct qs_calib_fold *folds; /* AWQ / SmoothQuant scales of the whole model (prepare) */
    size_t nfolds;
};

/* What calibration changed for one layer (the table's columns). */
struct qs_calib_report {
    int have;       /* out_* measured on the --calib statistics */
    int have_held;  /* held_* measured on the --heldout statistics */
    double out_err; /* tr(D H D^T) / tr(W H W^T) of the method's weight */
    double out_rtn; /* the same for round-to-nearest (or magnitude pruning) */
    double held_err, held_rtn;
    int64_t tokens; /* calibration tokens of the layer */
    char note[48];  /* e.g. "awq a=0.40", "hadamard 128", "no fold: rtn" */
};

/* Parse --method / --sparsity N:M; 0 or -1 (message on stderr). */
int qs_calib_parse_method(struct qs_calib_opts *o, const char *s);
int qs_calib_parse_sparsity(struct qs_calib_opts *o, const char *s);
/* Initialise the options (before parsing). */
void qs_calib_init(struct qs_calib_opts *o);
/*
 * One calibration option at argv[*i] (--heldout FILE, --damp X, --block N, --[no-]act-order,
 * --rotate hadamard[:B], --smoothquant ALPHA): 1 when it was one (*i moved past its value), 0
 * when it is not, -1 after printing a message.
 */
int qs_calib_option(struct qs_calib_opts *o, int argc, char **argv, int *i);
/* The options' help text (for `qsparse quantize --help`). */
const char *qs_calib_usage(void);
/* Check the combination and open FILE(s); 0 or -1 with err. */
int qs_calib_open(struct qs_calib_opts *o, char *err, size_t errlen);
/*
 * Check, before any layer, that the method runs with the format and options p: GPTQ's formats
 * are asked of the library (a tiny GPTQ run), so an unsupported one stops the tool before the
 * first layer. 0 or -1 with err.
 */
int qs_calib_check(qs_ctx *ctx, struct qs_calib_opts *o, int32_t format, const qs_quant_params *p,
                   char *err, size_t errlen);
void qs_calib_close(struct qs_calib_opts *o);

/* Add what a loader must know about the quantized weight `name` to its "qsparse.quantized"
 * entry (the rotation). 0, or -1 without memory. */
int qs_calib_record(const struct qs_calib_opts *o, int64_t cols, json_t *entry);

/* The method prunes a weight itself (Wanda, SparseGPT) instead of the tool's magnitude 2:4. */
int qs_calib_prunes(const struct qs_calib_opts *o);
/* The pruning (any, magnitude included) is done here, not by the tool: a pruning method, or
 * --sparsity with --calib (the table measures the pruned weight against the float one). */
int qs_calib_owns_pruning(const struct qs_calib_opts *o);

/*
 * Quantize one weight (rows x cols of `dtype` at w, named `name`) into *q with *p, by the
 * method; rep (may be NULL) receives the output errors. When the weight that was quantized is
 * not w itself (rotated, scaled by AWQ / SmoothQuant, or the row scales of a fold), *ref (if
 * not NULL) receives it as malloc'd f32, for the weight-error columns; NULL otherwise. Returns 0,
 * or -1 with err.
 */
int qs_calib_quantize(qs_ctx *ctx, const struct qs_calib_opts *o, const char *name,
                      const qs_quant_params *p, const void *w, int32_t dtype, int64_t rows,
                      int64_t cols, qs_qtensor *q, float **ref, struct qs_calib_report *rep,
                      char *err, size_t errlen);

/*
 * The report of a 2:4 weight that the tool pruned by magnitude and quantized compressed
 * (qs_sp24_quantize into q and meta, the qsparse layout): w is the float weight. The method is
 * the baseline (magnitude pruning, rounding to nearest), so both columns are the written
 * weight's. Returns 0, or -1 with err.
 */
int qs_calib_report_sp24(qs_ctx *ctx, const struct qs_calib_opts *o, const char *name,
                         const qs_quant_params *p, const void *w, int32_t dtype, int64_t rows,
                         int64_t cols, const qs_qtensor *q, const uint16_t *meta,
                         int64_t meta_count, struct qs_calib_report *rep, char *err, size_t errlen);

/*
 * Prune one weight by the method (Wanda's or SparseGPT's N:M) without quantizing: out receives
 * the pruned weight in w's dtype (rows * cols elements). Returns 0, or -1 with err.
 */
int qs_calib_prune(qs_ctx *ctx, const struct qs_calib_opts *o, const char *name, const void *w,
                   int32_t dtype, int64_t rows, int64_t cols, void *out,
                   struct qs_calib_report *rep, char *err, size_t errlen);

/* The table's calibration columns (calib_quantize.c): the header's and a layer's (each ends the
 * line), and a summary line after the table (layers whose output error the method lowered). The
 * reports are `stride` bytes apart (inside the tool's per-layer records). Nothing without --calib
 * but the line ends. */
void qs_calib_table_head(FILE *f, const struct qs_calib_opts *o);
void qs_calib_table_row(FILE *f, const struct qs_calib_opts *o, const struct qs_calib_report *r);
void qs_calib_table_summary(FILE *f, const struct qs_calib_opts *o,
                            const struct qs_calib_report *first, size_t stride, size_t n);

/* ---- reading statistics (calib_file.c) --------------------------------------------------------
 */

/* One layer's statistics. */
struct qs_calib_layer {
    qs_hessian *h; /* H = 2 X^T X; a diagonal one when the file has only the diagonal */
    double *sumsq; /* K sums of squares (NULL when unknown) */
    float *absmax; /* K per-channel absmax (NULL when unknown) */
    int64_t tokens;
    int diag_only; /* the Hessian is diag(2 sumsq) */
};

/*
 * The statistics of weight `name` (K = cols) in file f: `qsparse calibrate`'s keys (through its
 * metadata's layer map), or NAME.hessian / NAME.inputs. Returns 0, 1 when the file has nothing
 * for the layer (err says what was looked for), or -1 with err.
 */
int qs_calib_layer_load(qs_ctx *ctx, const struct qs_st_file *f, const json_t *meta,
                        const char *name, int64_t cols, struct qs_calib_layer *l, char *err,
                        size_t errlen);
void qs_calib_layer_free(struct qs_calib_layer *l);

/* ---- AWQ and SmoothQuant scales, folded into the previous operation (calib_scales.c) ----------
 */

/*
 * Before any tensor is written: for every group of layers sharing an input (FILE's metadata) that
 * `qsparse calibrate` found a verified fold for, and whose members are all selected (sel says),
 * the per-input-channel scales s (AWQ's search, or SmoothQuant's formula), read from the weights
 * in the files `paths`. Returns 0 or -1 with err.
 */
int qs_calib_prepare(qs_ctx *ctx, struct qs_calib_opts *o, const qs_quant_params *p,
                     const char *const *paths, size_t npaths,
                     int (*sel)(void *arg, const struct qs_st_tensor *t), void *arg, char *err,
                     size_t errlen);
/*
 * A tensor that the folds change but that is not quantized (a bias, a norm's weight or bias, or a
 * weight left float): 1 with *out (malloc'd, t's dtype and size) holding it divided by the fold's
 * scales, 0 when no fold touches it, -1 with err.
 */
int qs_calib_fold_tensor(qs_ctx *ctx, const struct qs_calib_opts *o, const struct qs_st_tensor *t,
                         void **out, char *err, size_t errlen);
/* The scales a weight's input columns are multiplied by (K values), or NULL. */
const float *qs_calib_col_scales(const struct qs_calib_opts *o, const char *name, int64_t cols);
/* The scales a weight's rows are divided by (rows values: it is a fold's previous Linear). */
const float *qs_calib_row_scales(const struct qs_calib_opts *o, const char *name, int64_t rows);
/* What the fold of this weight did (for the report's note), or NULL. */
const char *qs_calib_fold_note(const struct qs_calib_opts *o, const char *name);
void qs_calib_folds_free(struct qs_calib_opts *o);

#endif /* QS_TOOLS_CALIB_FILE_H */
