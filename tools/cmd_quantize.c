/* SPDX-License-Identifier: MIT */
/*
 * `qsparse quantize IN -o OUT --format F [--layout L]`: quantizes the selected 2-D weight
 * tensors of a model with libqsparse, copies every other tensor unchanged, and prints a
 * per-layer error table.
 *
 * IN is a Hugging Face model folder (config.json plus model.safetensors, or shards named by
 * model.safetensors.index.json) or one .safetensors file. A folder gives a folder that its
 * loader reads as written (model_dir.c): each shard quantized into a shard of the same name, the
 * index rewritten, config.json with the layout's quantization_config, every other file copied.
 * A file gives a file; --config-out prints the quantization_config the folder would get.
 *
 * The layout (layout.h) names and shapes the keys: bitsandbytes (nf4, fp4, llm_int8),
 * compressed-tensors (fp8_e4m3, int8, mxfp4, mxfp8, nvfp4, 2:4), modelopt (fp8_e4m3, nvfp4),
 * or the tool's own "qsparse" keys (checkpoint_keys.c; the default for a single file). A
 * "qsparse.quantized" metadata entry (a JSON string) gives, per quantized weight, its format,
 * layout, original shape and dtype. Every input file is memory-mapped and fully validated
 * before its output exists; outputs are written to temporary names and renamed.
 */
#define _POSIX_C_SOURCE 200809L

#include <math.h>
#include <regex.h>
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <sys/resource.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#include "qsparse.h"
#include "qsparse/sparse.h"
#include "calib_file.h"
#include "checkpoint_keys.h"
#include "commands.h"
#include "escape.h"
#include "layout.h"
#include "model_dir.h"
#include "natsort.h"
#include "output_path.h"
#include "safetensors.h"
#include "side_file.h"
#include "tool_ctx.h"
#include "tool_threads.h"
#include "tensor_rules.h"
#include "heap.h"

#define ERRLEN 1024
#define COPY_PIECE (16u << 20) /* bytes of a copied tensor written between two releases */

/* Linear layers' weights, not norms, biases or embeddings (nor the tied output head). */
#define DEFAULT_INCLUDE QS_SELECT_INCLUDE
#define DEFAULT_EXCLUDE QS_SELECT_EXCLUDE
/* Embedding tables: no loader layout replaces them (they are not linear layers). */
#define EMBEDDING "embed|(^|\\.)(wte|wpe)\\."

struct options {
    const char *in, *out, *format, *include, *exclude, *layout, *config_out, *act_amax;
    const char *sparsity, *granularity, *method, *calib, *stats_json;
    int32_t blocksize;
    int double_quant, asymmetric, threads, quiet, stats, dry_run, force;
    const char *tformat[QS_MAX_TENSOR_RULES]; /* --tensor-format REGEX=FORMAT, in order */
    int ntformat;
    int64_t part, nparts; /* --shard part/nparts; nparts 0: every shard */
    int argc;
    char **argv;
    struct qs_calib_opts cal; /* --method, --calib, N:M of --sparsity (calib_file.c) */
};

struct layer_stat {
    char *name;
    int64_t rows, cols;
    int32_t format;
    double bits, rel_rmse, max_abs;
};

static void usage(FILE *f)
{
    fprintf(f,
            "usage: qsparse quantize IN -o OUT --format FORMAT [--layout LAYOUT]\n"
            "                        [--block-size N] [--double-quant] [--granularity G]\n"
            "                        [--asymmetric]\n"
            "                        [--sparsity 2:4] [--act-amax FILE.json]\n"
            "                        [--include REGEX] [--exclude REGEX] [--config-out FILE|-]\n"
            "                        [--threads N] [--quiet] [--force]\n"
            "                        [--method rtn|gptq|sparsegpt --calib FILE]\n"
            "                        [--shard I/N] [--stats] [--stats-json FILE]\n"
            "                        [--tensor-format REGEX=FORMAT]... [--dry-run]\n\n"
            "IN: a Hugging Face model folder (config.json + model.safetensors or shards with\n"
            "    model.safetensors.index.json): OUT is a folder its loader reads as written.\n"
            "    Or one .safetensors file: OUT is a file. An existing OUT is refused unless\n"
            "    --force, which replaces it once the new output is complete.\n"
            "FORMAT: nf4, fp4, llm_int8 (bitsandbytes LLM.int8: row absmax SCB), int8 (plain\n"
            "        INT8, --granularity row (default; 'channel' is the same), group or tensor,\n"
            "        symmetric unless --asymmetric), fp8_e4m3, fp8_e5m2, mxfp4, mxfp8, nvfp4;\n"
            "        none (with --sparsity: prune only).\n"
            "LAYOUT: bitsandbytes (nf4, fp4, llm_int8; default for those in a folder),\n"
            "        compressed-tensors (fp8_e4m3, int8, mxfp4, mxfp8, nvfp4, 2:4; default for\n"
            "        the others), modelopt (fp8_e4m3, nvfp4; needs --act-amax; for vLLM, SGLang,\n"
            "        TensorRT-LLM: transformers misreads it), qsparse (the tool's own keys,\n"
            "        single files only; the default for a single file).\n"
            "Quantizes the 2-D float tensors whose name matches --include (default '%s')\n"
            "and not --exclude (default '%s', case-insensitive):\n"
            "the linear layers' weights. Everything else is copied unchanged. POSIX extended\n"
            "regular expressions.\n"
            "--block-size (or --blocksize): nf4/fp4 block (default 64), int8 group size with\n"
            "--granularity group. --double-quant (nf4/fp4). --asymmetric: int8 with zero\n"
            "points (qsparse layout). --sparsity 2:4 prunes by magnitude before quantizing.\n"
            "--act-amax: {\"module\": activation amax} for modelopt's input_scale.\n"
            "--config-out writes the layout's quantization_config as JSON ('-': stdout).\n"
            "--method gptq (nf4, fp4, int8, llm_int8, mxfp4, nvfp4) or sparsegpt (with\n"
            "--sparsity N:M) take each layer's Hessian or inputs from --calib FILE\n"
            "(tools/README.md); rtn (the default) is plain rounding.\n"
            "Prints a per-layer error table (relative RMS error, max |error|) unless --quiet;\n"
            "--quiet also skips decoding the weights to measure it (the slowest step).\n"
            "--threads N: threads per tensor. Default: one for tensors under 4M elements and\n"
            "GPTQ/SparseGPT layers under K = 2048, else the cores the 1-minute load average\n"
            "leaves idle (qsparse doctor shows the choice). On a machine shared with other busy\n"
            "jobs use --threads 1 (and OPENBLAS_NUM_THREADS=1 with --method gptq|sparsegpt):\n"
            "threads that wait for a core at every barrier make the run several times slower.\n"
            "Tensors stream: read from the memory-mapped input, quantized, written, freed, one\n"
            "at a time. --stats prints the heap peak against the largest tensor (stderr);\n"
            "--stats-json FILE writes those numbers as JSON.\n"
            "--tensor-format REGEX=FORMAT (repeatable; --tensor-type is the same): a selected\n"
            "tensor whose name matches REGEX gets FORMAT (its defaults; the first match wins;\n"
            "'none' keeps it float), e.g. --format nf4 --tensor-format 'down_proj=fp8_e4m3'.\n"
            "Mixed formats need a layout that holds them: compressed-tensors (one config group\n"
            "per format) or the qsparse keys of a single file; bitsandbytes and modelopt hold\n"
            "one format.\n"
            "--dry-run: every check, the plan and the output size (per tensor unless --quiet);\n"
            "nothing is quantized or written.\n"
            "--shard I/N (0 <= I < N, a folder): only the input shards whose position in the\n"
            "sorted list of shard files is I modulo N, into a part folder that\n"
            "`qsparse merge-index OUT PART...` joins with the other parts.\n",
            DEFAULT_INCLUDE, DEFAULT_EXCLUDE);
}

static int parse_int(const char *s, int64_t lo, int64_t hi, int64_t *out)
{
    char *end;
    long long v;

    if (!s || !*s)
        return -1;
    v = strtoll(s, &end, 10);
    if (*end || v < lo || v > hi)
        return -1;
    *out = v;
    return 0;
}

/* Options that take a string value, in one table. */
static const char **string_option(struct options *o, const char *a)
{
    static const struct {
        const char *name, *alt;
        size_t offset;
    } opts[] = {
        {"-o", "--output", offsetof(struct options, out)},
        {"--format", "-f", offsetof(struct options, format)},
        {"--include", NULL, offsetof(struct options, include)},
        {"--exclude", NULL, offsetof(struct options, exclude)},
        {"--layout", NULL, offsetof(struct options, layout)},
        {"--config-out", NULL, offsetof(struct options, config_out)},
        {"--act-amax", NULL, offsetof(struct options, act_amax)},
        {"--sparsity", NULL, offsetof(struct options, sparsity)},
        {"--granularity", NULL, offsetof(struct options, granularity)},
        {"--method", NULL, offsetof(struct options, method)},
        {"--calib", NULL, offsetof(struct options, calib)},
        {"--stats-json", NULL, offsetof(struct options, stats_json)},
    };

    for (size_t i = 0; i < sizeof opts / sizeof opts[0]; i++)
        if (strcmp(a, opts[i].name) == 0 || (opts[i].alt && strcmp(a, opts[i].alt) == 0))
            return (const char **)((char *)o + opts[i].offset);
    return NULL;
}

static int parse_args(int argc, char **argv, struct options *o)
{
    int64_t v;
    const char **slot;

    memset(o, 0, sizeof *o);
    o->argc = argc;
    o->argv = argv;
    for (int i = 1; i < argc; i++) {
        const char *a = argv[i];
        const char *next = i + 1 < argc ? argv[i + 1] : NULL;
        if (strcmp(a, "-h") == 0 || strcmp(a, "--help") == 0) {
            usage(stdout);
            exit(0);
        } else if ((slot = string_option(o, a)) != NULL) {
            if (!next)
                goto missing;
            *slot = argv[++i];
        } else if (strcmp(a, "--block-size") == 0 || strcmp(a, "--blocksize") == 0) {
            if (parse_int(next, 1, 1 << 30, &v) != 0) {
                fprintf(stderr, "qsparse quantize: %s needs a positive integer\n", a);
                return -1;
            }
            o->blocksize = (int32_t)v;
            i++;
        } else if (strcmp(a, "--double-quant") == 0) {
            o->double_quant = 1;
        } else if (strcmp(a, "--asymmetric") == 0) {
            o->asymmetric = 1;
        } else if (strcmp(a, "--force") == 0) {
            o->force = 1;
        } else if (strcmp(a, "--stats") == 0) {
            o->stats = 1;
        } else if (strcmp(a, "--dry-run") == 0) {
            o->dry_run = 1;
        } else if (strcmp(a, "--tensor-format") == 0 || strcmp(a, "--tensor-type") == 0) {
            if (!next)
                goto missing;
            if (o->ntformat == QS_MAX_TENSOR_RULES) {
                fprintf(stderr, "qsparse quantize: at most %d --tensor-format rules\n",
                        QS_MAX_TENSOR_RULES);
                return -1;
            }
            o->tformat[o->ntformat++] = argv[++i];
        } else if (strcmp(a, "--shard") == 0) {
            long long pi, pn;
            int used = 0;
            if (!next || sscanf(next, "%lld/%lld%n", &pi, &pn, &used) != 2 ||
                next[used] != '\0' || pn < 1 || pn > 1000000 || pi < 0 || pi >= pn) {
                fprintf(stderr, "qsparse quantize: --shard is I/N with 0 <= I < N\n");
                return -1;
            }
            o->part = pi;
            o->nparts = pn;
            i++;
        } else if (strcmp(a, "--threads") == 0) {
            if (parse_int(next, 0, 4096, &v) != 0) {
                fprintf(stderr, "qsparse quantize: --threads needs an integer >= 0\n");
                return -1;
            }
            o->threads = (int)v;
            i++;
        } else if (strcmp(a, "-q") == 0 || strcmp(a, "--quiet") == 0) {
            o->quiet = 1;
        } else if (a[0] == '-' && a[1] != '\0') {
            fprintf(stderr, "qsparse quantize: unknown option '%s'\n", a);
            return -1;
        } else if (!o->in) {
            o->in = a;
        } else {
            fprintf(stderr, "qsparse quantize: unexpected argument '%s'\n", a);
            return -1;
        }
        continue;
    missing:
        fprintf(stderr, "qsparse quantize: option '%s' needs a value\n", a);
        return -1;
    }
    if (!o->in || !o->out || !o->format) {
        fprintf(stderr, "qsparse quantize: IN, -o OUT and --format are required\n\n");
        usage(stderr);
        return -1;
    }
    return 0;
}

/* ---- small helpers -----------------------------------------------------------------------------
 */

/* Python's repr() of a double (shortest round-trip digits), as json.dumps prints floats. */
static void py_float_repr(double v, char *buf, size_t n)
{
    char tmp[48], digits[24], *p;
    int prec, exp10, k = 0, neg;

    if (isnan(v)) {
        snprintf(buf, n, "NaN");
        return;
    }
    if (isinf(v)) {
        snprintf(buf, n, v < 0 ? "-Infinity" : "Infinity");
        return;
    }
    for (prec = 1; prec <= 17; prec++) {
        snprintf(tmp, sizeof tmp, "%.*e", prec - 1, v);
        if (strtod(tmp, NULL) == v)
            break;
    }
    neg = tmp[0] == '-';
    for (p = tmp + neg; *p && *p != 'e'; p++)
        if (*p >= '0' && *p <= '9')
            digits[k++] = *p;
    digits[k] = '\0';
    exp10 = atoi(p + 1);
    while (k > 1 && digits[k - 1] == '0') /* "%.*e" may keep zeros the round trip did not need */
        digits[--k] = '\0';
    p = buf;
    if (neg)
        *p++ = '-';
    if (exp10 >= -4 && exp10 < 16) {
        if (exp10 >= 0) {
            for (int i = 0; i <= exp10; i++)
                *p++ = i < k ? digits[i] : '0';
            *p++ = '.';
            if (k > exp10 + 1)
                for (int i = exp10 + 1; i < k; i++)
                    *p++ = digits[i];
            else
                *p++ = '0';
        } else {
            *p++ = '0';
            *p++ = '.';
            for (int i = 0; i < -exp10 - 1; i++)
                *p++ = '0';
            for (int i = 0; i < k; i++)
                *p++ = digits[i];
        }
        *p = '\0';
    } else {
        *p++ = digits[0];
        if (k > 1) {
            *p++ = '.';
            for (int i = 1; i < k; i++)
                *p++ = digits[i];
        }
        snprintf(p, n - (size_t)(p - buf), "e%c%02d", exp10 < 0 ? '-' : '+', abs(exp10));
    }
}

static const char *src_dtype_name(const char *st_dtype, int32_t *qs_dtype)
{
    if (strcmp(st_dtype, "F32") == 0)
        return *qs_dtype = QS_DTYPE_F32, "float32";
    if (strcmp(st_dtype, "F16") == 0)
        return *qs_dtype = QS_DTYPE_F16, "float16";
    if (strcmp(st_dtype, "BF16") == 0)
        return *qs_dtype = QS_DTYPE_BF16, "bfloat16";
    return NULL;
}

static char *cat(const char *a, const char *b)
{
    size_t la = strlen(a), lb = strlen(b);
    char *s = qs_heap_malloc(la + lb + 1);

    if (s) {
        memcpy(s, a, la);
        memcpy(s + la, b, lb + 1);
    }
    return s;
}

/* P for a weight "P.weight" (bitsandbytes' module prefix); the name itself otherwise. */
static char *module_prefix(const char *name)
{
    size_t n = strlen(name);
    char *s;

    if (n > 7 && strcmp(name + n - 7, ".weight") == 0)
        n -= 7;
    s = qs_heap_malloc(n + 1);
    if (s) {
        memcpy(s, name, n);
        s[n] = '\0';
    }
    return s;
}

/* "a/b" (malloc'd, NULL without memory). */
static char *path_join(const char *a, const char *b)
{
    char *d = cat(a, "/"), *s = d ? cat(d, b) : NULL;

    qs_heap_free(d);
    return s;
}

static void *dup_bytes(const void *p, size_t n)
{
    void *d = qs_heap_malloc(n ? n : 1);

    if (d && n)
        memcpy(d, p, n);
    return d;
}

static void progress_bar(const char *what, size_t done, size_t total, const char *name)
{
    int width = 30, fill = total ? (int)((double)done / (double)total * width) : width;
    char shown[41];

    fprintf(stderr, "\r%s [", what);
    for (int i = 0; i < width; i++)
        fputc(i < fill ? '#' : ' ', stderr);
    fprintf(stderr, "] %zu/%zu %-40s", done, total,
            qs_escape_into(name ? name : "", shown, sizeof shown));
    if (done == total)
        fputc('\n', stderr);
    fflush(stderr);
}

/* ---- one tensor --------------------------------------------------------------------------------
 */

/* The passes over one input file (process_file). */
enum pass {
    PASS_SURVEY, /* headers only: selection, checks, the skip list, the weights' dtype */
    PASS_PLAN,   /* every output tensor's name, dtype, shape and size: the output header */
    PASS_WRITE,  /* quantize, write, free, one tensor at a time */
};

struct ctx_all {
    qs_ctx *ctx;
    const struct options *o;
    int32_t format;
    const struct qs_layout *layout;
    struct qs_layout_req req;
    regex_t *inc, *exc, *embedding;
    enum pass pass;
    struct qs_st_writer *w;   /* PASS_PLAN: the output entries (no data) */
    struct qs_st_stream *out; /* PASS_WRITE: the output being written */
    float *nested;            /* per input tensor: the double quantization's offset (PASS_PLAN) */
    json_t *record;           /* "qsparse.quantized" of the file being written */
    json_t *skipped;          /* modules whose 2-D weight stays float */
    json_t *weight_map;       /* folder output: tensor -> shard */
    json_t *act_amax;         /* --act-amax */
    const char *shard;        /* the shard being written (folder output) */
    uint64_t total_size;
    struct layer_stat *stats;
    size_t nstat, cap_stat, nsel, ncopy;
    size_t nsurveyed;         /* tensors the survey selected */
    uint64_t tensor_bytes;    /* bytes emitted for the tensor at hand (its bits per weight) */
    const char *quantized;    /* why the input looks quantized already (a static string) */
    double bytes_in, bytes_out;
    uint64_t largest;         /* bytes of the largest input tensor read (--stats) */
    uint64_t largest_q;       /* ... and of the largest one quantized */
    char *largest_name;
    struct qs_tool_threads thr; /* threads per operation (tool_threads.h) */
    struct qs_tensor_rules rules; /* --tensor-format, and --format's rule (tensor_rules.h) */
    int32_t base_format;          /* --format, and its parameters */
    qs_quant_params base_params;
    struct qs_layout_group groups[QS_MAX_TENSOR_RULES + 1]; /* schemes in use (after survey) */
    int ngroups;
    int tty;
    char err[ERRLEN];
};

/* One output tensor: announced in the header (PASS_PLAN) or its bytes written (PASS_WRITE). */
#define EMIT(name, dtype, ndim, shape, data, bytes)                                                \
    do {                                                                                           \
        if (emit(c, (name), (dtype), (ndim), (shape), (data), (bytes)) != 0)                      \
            goto fail;                                                                             \
    } while (0)

static int emit(struct ctx_all *c, const char *name, const char *dtype, int ndim,
                const int64_t *shape, const void *data, uint64_t bytes)
{
    c->tensor_bytes += bytes;
    if (c->pass == PASS_WRITE)
        return qs_st_stream_put(c->out, data, bytes, c->err, sizeof c->err);
    if (qs_st_writer_add(c->w, name, dtype, ndim, shape, NULL, bytes, NULL, c->err,
                         sizeof c->err) != 0)
        return -1;
    c->total_size += bytes;
    if (c->weight_map &&
        json_object_set_new(c->weight_map, name, json_string(c->shard)) != 0) {
        snprintf(c->err, sizeof c->err, "out of memory");
        return -1;
    }
    return 0;
}

static void make_params(const struct options *o, int32_t format, qs_quant_params *p)
{
    qs_quant_params_init(p, format ? format : QS_FORMAT_FP8_E4M3);
    if (o->blocksize)
        p->block_size = o->blocksize;
    p->double_quant = o->double_quant;
    if (o->asymmetric)
        p->symmetric = 0;
    if (format == QS_FORMAT_INT8 && o->granularity)
        p->granularity = strcmp(o->granularity, "tensor") == 0  ? QS_GRAN_TENSOR
                         : strcmp(o->granularity, "group") == 0 ? QS_GRAN_GROUP
                                                                : QS_GRAN_ROW; /* row, channel */
}

/* Check the format options once, before any work. Returns 0, or -1 with the library's message
 * in c->err. */
static int check_params(struct ctx_all *c)
{
    qs_plane_info info;

    if (!c->format)
        return 0;
    if (qs_quant_plane_info(c->ctx, &c->req.params, 1, c->req.params.block_size, QS_PLANE_DATA,
                            &info) == QS_OK)
        return 0;
    snprintf(c->err, sizeof c->err, "%s", qs_ctx_last_error(c->ctx));
    return -1;
}

/* Each --tensor-format rule's format and parameters, as check_params and the layout check the
 * base ones (before any work). Returns 0, or -1 with the message in c->err. */
static int check_rules(struct ctx_all *c)
{
    char why[512];

    for (int i = 0; i < c->rules.n; i++) {
        const struct qs_tensor_rule *r = &c->rules.r[i];
        qs_plane_info info;
        if (r->keep_float)
            continue;
        c->req.format = r->format;
        c->req.params = r->params;
        if (c->layout->check(&c->req, why, sizeof why) != 0) {
            snprintf(c->err, sizeof c->err, "--tensor-format '%s': %s", r->spec, why);
            return -1;
        }
        if (qs_quant_plane_info(c->ctx, &c->req.params, 1, c->req.params.block_size,
                                QS_PLANE_DATA, &info) != QS_OK) {
            snprintf(c->err, sizeof c->err, "--tensor-format '%s': %s", r->spec,
                     qs_ctx_last_error(c->ctx));
            return -1;
        }
    }
    c->req.format = c->base_format;
    c->req.params = c->base_params;
    return 0;
}

/* The bitsandbytes JSON quant_state of a 4-bit weight (a malloc'd string, NULL without memory). */
static char *bnb_quant_state(const struct ctx_all *c, const qs_quant_params *p,
                             const qs_qtensor *q, const char *dtname, int64_t rows, int64_t cols)
{
    char json[512], off[64];

    if (p->double_quant) {
        py_float_repr((double)q->nested_offset, off, sizeof off);
        snprintf(json, sizeof json,
                 "{\"quant_type\": \"%s\", \"blocksize\": %d, \"dtype\": \"%s\", \"shape\": "
                 "[%lld, %lld], \"nested_blocksize\": 256, \"nested_dtype\": \"float32\", "
                 "\"nested_offset\": %s}",
                 qs_format_name(c->format), p->block_size, dtname, (long long)rows,
                 (long long)cols, off);
    } else {
        snprintf(json, sizeof json,
                 "{\"quant_type\": \"%s\", \"blocksize\": %d, \"dtype\": \"%s\", \"shape\": "
                 "[%lld, %lld]}",
                 qs_format_name(c->format), p->block_size, dtname, (long long)rows,
                 (long long)cols);
    }
    return dup_bytes(json, strlen(json) + 1);
}

/* Rows per chunk of the error measurement and the pruning: an eighth of the tensor (its two f32
 * buffers then hold as many bytes as a 16-bit tensor's elements: half of the tensor), at most
 * 2^20 elements (8 MB of buffers) and at least 2^14, and a multiple of `unit`. */
static int64_t chunk_rows(int64_t rows, int64_t cols, int64_t unit)
{
    int64_t want = rows * cols / 8, r;

    want = want > (1 << 20) ? (1 << 20) : want < (1 << 14) ? (1 << 14) : want;
    r = cols > 0 ? want / cols : rows;
    r = r < unit ? unit : r / unit * unit;
    return r < 1 ? 1 : r > rows ? rows : r;
}

/* The weight pruned to 2:4 by magnitude, in its own dtype (malloc'd), or NULL with c->err. The
 * mask is made a chunk of rows at a time: 2:4 groups run along a row, so rows are independent. */
static void *prune24(struct ctx_all *c, const struct qs_st_tensor *t, int32_t sdt)
{
    int64_t rows = t->shape[0], cols = t->shape[1], cr = chunk_rows(rows, cols, 1);
    uint64_t bytes = t->end - t->begin, es = (uint64_t)t->elem_size;
    size_t mask_bytes = (size_t)(cr * cols);
    uint8_t *mask = qs_heap_malloc(mask_bytes > 0 ? mask_bytes : 1);
    unsigned char *out = qs_heap_malloc(bytes ? bytes : 1);

    if (!mask || !out) {
        snprintf(c->err, sizeof c->err, "%s: out of memory", t->name);
        goto fail;
    }
    for (int64_t r0 = 0; r0 < rows; r0 += cr) {
        int64_t m = rows - r0 < cr ? rows - r0 : cr, n = m * cols;
        const unsigned char *src = t->data + (uint64_t)(r0 * cols) * es;
        if (qs_nm_mask(c->ctx, src, sdt, m, cols, 2, 4, QS_PRUNE_MAGNITUDE, NULL, mask, n) !=
                QS_OK ||
            qs_nm_apply_mask(c->ctx, src, sdt, mask, n, out + (uint64_t)(r0 * cols) * es,
                             (int64_t)((uint64_t)n * es)) != QS_OK) {
            snprintf(c->err, sizeof c->err, "%s: 2:4 pruning: %s", t->name,
                     qs_ctx_last_error(c->ctx));
            goto fail;
        }
    }
    qs_heap_free(mask);
    return out;
fail:
    qs_heap_free(mask);
    qs_heap_free(out);
    return NULL;
}

/* Shape of key k for plane info pi of a rows x cols weight; returns ndim. */
static int key_shape(const struct qs_ckpt_key *k, const qs_plane_info *pi, int64_t rows,
                     int64_t cols, int64_t shape[2])
{
    shape[0] = pi->shape[0];
    shape[1] = pi->shape[1];
    switch (k->shape) {
    case QS_KEY_SHAPE_SCALAR: return 0;
    case QS_KEY_SHAPE_ONE: shape[0] = 1; return 1;
    case QS_KEY_SHAPE_COLUMN: return 2;
    case QS_KEY_SHAPE_ROWS:
        shape[0] = rows;
        shape[1] = pi->values / rows;
        return 2;
    case QS_KEY_SHAPE_PACK32:
        shape[0] = rows;
        shape[1] = cols / 4;
        return 2;
    default: return pi->ndim;
    }
}

/*
 * Where rows [r0, ...) of a rows x cols tensor start in each plane, so that the error can be
 * measured a chunk of rows at a time. Blocks over the flattened tensor (NF4, FP4) need a chunk
 * that starts on a block boundary (a nested block of 256 with double quantization): `unit` is
 * the smallest row count that keeps every chunk aligned. A plane of the same size for one row
 * and for all is per tensor (FP8's scale, INT8's per-tensor scale); one of rows times the size
 * of one row is per row. Returns 0, or -1 when the planes do not split by rows (the caller then
 * measures the whole tensor at once).
 */
struct plane_split {
    int flat;                    /* 1: blocks over the flattened tensor */
    int64_t unit;                /* rows per aligned step */
    int64_t row_bytes[QS_PLANE_COUNT]; /* per-row planes: bytes of one row; -1 per tensor */
};

static int64_t gcd64(int64_t a, int64_t b)
{
    while (b) {
        int64_t t = a % b;
        a = b;
        b = t;
    }
    return a;
}

static int split_planes(struct ctx_all *c, const qs_quant_params *p, const qs_plane_info *info,
                        int64_t rows, int64_t cols, struct plane_split *sp)
{
    qs_format_info fi;

    memset(sp, 0, sizeof *sp);
    if (qs_format_info_get(p->format, &fi) != QS_OK || rows < 2 || cols < 1)
        return -1;
    if (fi.blocks == QS_BLOCKS_FLAT) {
        int64_t span = (int64_t)p->block_size * (p->double_quant ? 256 : 1);
        sp->flat = 1;
        sp->unit = span / gcd64(span, cols);
        return sp->unit < rows ? 0 : -1;
    }
    sp->unit = 1;
    for (int i = 0; i < QS_PLANE_COUNT; i++) {
        qs_plane_info one;
        if (info[i].bytes == 0)
            continue;
        if (qs_quant_plane_info(c->ctx, p, 1, cols, i, &one) != QS_OK)
            return -1;
        if (one.bytes == info[i].bytes)
            sp->row_bytes[i] = -1;
        else if (one.bytes * rows == info[i].bytes)
            sp->row_bytes[i] = one.bytes;
        else
            return -1;
    }
    return 0;
}

/* q's planes from row r0 on (split_planes said how), in *sq. */
static int sub_qtensor(struct ctx_all *c, const qs_quant_params *p, const qs_qtensor *q,
                       const struct plane_split *sp, int64_t r0, int64_t cols, qs_qtensor *sq)
{
    void *const base[QS_PLANE_COUNT] = {q->data, q->scale, q->zero_point, q->nested_scale};
    const int64_t size[QS_PLANE_COUNT] = {q->data_bytes, q->scale_bytes, q->zero_point_bytes,
                                          q->nested_scale_bytes};
    int64_t off[QS_PLANE_COUNT] = {0};

    for (int i = 0; i < QS_PLANE_COUNT; i++) {
        qs_plane_info before;
        if (!base[i] || r0 == 0)
            continue;
        if (sp->flat) {
            if (qs_quant_plane_info(c->ctx, p, 1, r0 * cols, i, &before) != QS_OK)
                return -1;
            off[i] = before.bytes;
        } else if (sp->row_bytes[i] > 0) {
            off[i] = r0 * sp->row_bytes[i];
        }
    }
    *sq = *q;
    sq->data = q->data ? (unsigned char *)q->data + off[0] : NULL;
    sq->data_bytes = size[0] - off[0];
    sq->scale = q->scale ? (unsigned char *)q->scale + off[1] : NULL;
    sq->scale_bytes = size[1] - off[1];
    sq->zero_point = q->zero_point ? (unsigned char *)q->zero_point + off[2] : NULL;
    sq->zero_point_bytes = size[2] - off[2];
    sq->nested_scale = q->nested_scale ? (unsigned char *)q->nested_scale + off[3] : NULL;
    sq->nested_scale_bytes = size[3] - off[3];
    return 0;
}

/*
 * The error of this layer: the library's decode against the input widened to f32, a chunk of
 * rows at a time (two f32 buffers of the chunk, not of the tensor). Fills st; 0 or -1 with
 * c->err.
 */
static int layer_error(struct ctx_all *c, const struct qs_st_tensor *t, int32_t sdt,
                       const void *src, const qs_quant_params *p, const qs_qtensor *q,
                       const qs_plane_info *info, const uint16_t *meta, struct layer_stat *st)
{
    /* a compressed 2:4 weight (meta): its planes hold rows x cols/2 kept values */
    int64_t rows = t->shape[0], cols = t->shape[1], cr = rows, words = (cols + 15) / 16;
    int64_t qcols = meta ? cols / 2 : cols;
    uint64_t es = (uint64_t)t->elem_size;
    struct plane_split sp;
    double err2 = 0.0, ref2 = 0.0, maxabs = 0.0;
    float *ref = NULL, *deq = NULL;
    int rc = -1;

    if (!c->format || split_planes(c, p, info, rows, qcols, &sp) == 0)
        cr = chunk_rows(rows, cols, c->format ? sp.unit : 1);
    ref = qs_heap_malloc((size_t)(cr * cols) * sizeof *ref);
    deq = qs_heap_malloc((size_t)(cr * cols) * sizeof *deq);
    if (!ref || !deq) {
        snprintf(c->err, sizeof c->err, "%s: out of memory", t->name);
        goto done;
    }
    for (int64_t r0 = 0; r0 < rows; r0 += cr) {
        int64_t m = rows - r0 < cr ? rows - r0 : cr, n = m * cols;
        uint64_t at = (uint64_t)(r0 * cols) * es;
        qs_qtensor sq;
        if (qs_convert(c->ctx, t->data + at, sdt, ref, QS_DTYPE_F32, n, n * 4) != QS_OK)
            goto lib_error;
        if (c->format && meta) {
            if (sub_qtensor(c, p, q, &sp, r0, qcols, &sq) != 0 ||
                qs_sp24_dequantize(c->ctx, p, &sq, meta + r0 * words, m * words, m, cols, deq,
                                   QS_DTYPE_F32, n * 4) != QS_OK)
                goto lib_error;
        } else if (c->format) {
            if (sub_qtensor(c, p, q, &sp, r0, cols, &sq) != 0 ||
                qs_dequantize(c->ctx, p, &sq, m, cols, deq, QS_DTYPE_F32, n * 4) != QS_OK)
                goto lib_error;
        } else if (qs_convert(c->ctx, (const unsigned char *)src + at, sdt, deq, QS_DTYPE_F32, n,
                              n * 4) != QS_OK) {
            goto lib_error;
        }
        for (int64_t i = 0; i < n; i++) {
            double d = (double)deq[i] - (double)ref[i];
            err2 += d * d;
            ref2 += (double)ref[i] * (double)ref[i];
            if (fabs(d) > maxabs || d != d)
                maxabs = fabs(d);
        }
    }
    st->rows = rows;
    st->cols = cols;
    st->rel_rmse = ref2 > 0 ? sqrt(err2 / ref2) : sqrt(err2);
    st->max_abs = maxabs;
    rc = 0;
    goto done;
lib_error:
    snprintf(c->err, sizeof c->err, "%s: %s", t->name, qs_ctx_last_error(c->ctx));
done:
    qs_heap_free(ref);
    qs_heap_free(deq);
    return rc;
}

/*
 * One selected tensor t (input index ti) in the current pass. PASS_PLAN announces every key of
 * the layout's table with its size, and records the tensor in "qsparse.quantized"; PASS_WRITE
 * quantizes, writes the keys' bytes, frees them and fills *st. The planes' sizes come from the
 * library (qs_quant_plane_info), so the plan needs no quantization, except for the one key whose
 * length depends on the values: bitsandbytes' JSON quant_state with double quantization prints
 * the nested offset, so the plan quantizes such a tensor once to learn it. Returns 0 or -1 with
 * c->err.
 */
/* The format and parameters of tensor `name` (tensor_rules.h) become the current ones: every
 * per-tensor step reads c->format and c->req. Returns the rule. */
static struct qs_tensor_rule *use_rule(struct ctx_all *c, const char *name)
{
    struct qs_tensor_rule *r = qs_tensor_rules_match(&c->rules, name);

    c->format = r->format;
    c->req.format = r->format;
    c->req.params = r->params;
    return r;
}

/* --format's format and parameters again (for the model-wide config and summary). */
static void use_base(struct ctx_all *c)
{
    c->format = c->base_format;
    c->req.format = c->base_format;
    c->req.params = c->base_params;
}

static int quantize_one(struct ctx_all *c, const struct qs_st_tensor *t, size_t ti,
                        struct layer_stat *st)
{
    qs_quant_params p = (use_rule(c, t->name), c->req.params);
    qs_qtensor q;
    qs_plane_info info[QS_PLANE_COUNT];
    int64_t rows = t->shape[0], cols = t->shape[1], n = t->numel;
    int32_t sdt;
    const char *dtname = src_dtype_name(t->dtype, &sdt);
    void *planes[QS_PLANE_COUNT] = {0};
    void *pruned = NULL, *values = NULL;
    uint16_t *meta = NULL;
    const void *src = t->data;
    char *prefix = NULL, *key = NULL;
    const struct qs_ckpt_key *keys = c->format ? c->layout->keys(&c->req) : NULL;
    /* The tool's own layout keeps a 2:4 weight compressed: the format's keys hold its kept
     * values (rows x cols/2, docs/sparsity.md), N.sp24_meta its meta words. */
    int sp = c->req.sparsity24 && c->layout == &qs_layout_qsparse;
    int64_t qcols = sp ? cols / 2 : cols, vbytes = 0, meta_count = 0;
    int quantize = c->pass == PASS_WRITE;

    memset(&q, 0, sizeof q);
    c->tensor_bytes = 0;
    if (!(prefix = module_prefix(t->name)))
        goto oom;
    if (qs_ctx_set(c->ctx, QS_PARAM_NUM_THREADS,
                   qs_tool_threads_for(&c->thr,
                                       c->o->cal.method == QS_METHOD_RTN ? QS_TOOL_OP_ELEMENTWISE
                                                                         : QS_TOOL_OP_GPTQ,
                                       rows, cols)) != QS_OK) {
        snprintf(c->err, sizeof c->err, "%s: %s", t->name, qs_ctx_last_error(c->ctx));
        goto fail;
    }
    if (sp && qs_sp24_size(sdt, rows, cols, &vbytes, &meta_count) != QS_OK) {
        snprintf(c->err, sizeof c->err,
                 "%s: 2:4 groups of four run along the rows: the row length (%lld) must be a "
                 "multiple of 4",
                 t->name, (long long)cols);
        goto fail;
    }
    if (c->format == QS_FORMAT_INT8 && c->layout == &qs_layout_ct && cols % 4 != 0) {
        snprintf(c->err, sizeof c->err,
                 "%s: compressed-tensors packs int8 codes four to an int32 word: the row length "
                 "(%lld) must be a multiple of 4",
                 t->name, (long long)cols);
        goto fail;
    }
    for (const struct qs_ckpt_key *k = keys; k && k->suffix && p.double_quant; k++)
        if (k->source == QS_KEY_QUANT_STATE)
            quantize = 1; /* its length depends on the nested offset */
    if (c->format) {
        for (int i = 0; i < QS_PLANE_COUNT; i++) {
            if (qs_quant_plane_info(c->ctx, &p, rows, qcols, i, &info[i]) != QS_OK) {
                snprintf(c->err, sizeof c->err, "%s: %s%s", t->name, qs_ctx_last_error(c->ctx),
                         sp ? " (the kept values of a 2:4 weight: cols / 2 per row)" : "");
                goto fail;
            }
        }
    }
    if (quantize && c->req.sparsity24 && c->o->cal.method != QS_METHOD_SPARSEGPT) {
        if (!(pruned = prune24(c, t, sdt)))
            goto fail;
        src = pruned;
    }
    if (quantize && sp && !(meta = qs_heap_malloc((size_t)meta_count * 2 + 1)))
        goto oom;
    if (quantize && c->format) {
        for (int i = 0; i < QS_PLANE_COUNT; i++)
            if (info[i].bytes > 0 && !(planes[i] = qs_heap_malloc((size_t)info[i].bytes)))
                goto oom;
        q.data = planes[0], q.data_bytes = info[0].bytes;
        q.scale = planes[1], q.scale_bytes = info[1].bytes;
        q.zero_point = planes[2], q.zero_point_bytes = info[2].bytes;
        q.nested_scale = planes[3], q.nested_scale_bytes = info[3].bytes;
        if (sp) {
            if (qs_sp24_quantize(c->ctx, &p, src, sdt, rows, cols, NULL, &q, meta, meta_count) !=
                QS_OK) {
                snprintf(c->err, sizeof c->err, "%s: %s", t->name, qs_ctx_last_error(c->ctx));
                goto fail;
            }
        } else if (qs_calib_quantize(c->ctx, &c->o->cal, t->name, &p, src, sdt, rows, cols, &q,
                                     c->err, sizeof c->err) != 0) {
            goto fail;
        }
        if (c->pass == PASS_PLAN) {
            c->nested[ti] = q.nested_offset;
        } else if (p.double_quant &&
                   memcmp(&c->nested[ti], &q.nested_offset, sizeof q.nested_offset) != 0) {
            snprintf(c->err, sizeof c->err,
                     "%s: the double quantization's offset differs between two quantizations "
                     "of the same tensor",
                     t->name);
            goto fail;
        }
    }
    if (c->pass == PASS_PLAN) {
        /* "layout" and "sparsity" only where they are not the defaults (qsparse, dense) */
        json_t *e = json_pack("{s:s, s:[I,I], s:s}", "format",
                              c->format ? qs_format_name(c->format) : "none", "shape",
                              (json_int_t)rows, (json_int_t)cols, "dtype", dtname);
        if (!e || json_object_set_new(c->record, t->name, e) != 0)
            goto oom;
        if (c->layout != &qs_layout_qsparse &&
            json_object_set_new(e, "layout", json_string(c->layout->name)) != 0)
            goto oom;
        if (c->req.sparsity24 && json_object_set_new(e, "sparsity", json_string("2:4")) != 0)
            goto oom;
        if (st) { /* --dry-run: the plan is all there is (bits/w below, from what it emits) */
            st->rows = rows;
            st->cols = cols;
            st->format = c->format;
            st->rel_rmse = st->max_abs = NAN;
        }
    } else {
        st->format = c->format;
        /* the error table is the only reader of the decode: --quiet skips it (it costs several
         * times the quantization) */
        if (!c->o->quiet &&
            layer_error(c, t, sdt, src, &p, &q, info, c->format ? meta : NULL, st) != 0)
            goto fail;
    }

    if (!c->format && sp) { /* pruned only, compressed: the kept values and the meta */
        int64_t vshape[2] = {rows, cols / 2};
        if (quantize && (!(values = qs_heap_malloc((size_t)vbytes + 1)) ||
                         qs_sp24_compress(c->ctx, pruned, sdt, rows, cols, NULL, values, vbytes,
                                          meta, meta_count) != QS_OK)) {
            snprintf(c->err, sizeof c->err, "%s: %s", t->name,
                     values ? qs_ctx_last_error(c->ctx) : "out of memory");
            goto fail;
        }
        EMIT(t->name, t->dtype, 2, vshape, values, (uint64_t)vbytes);
    } else if (!c->format) { /* pruned only: the weight in its own dtype under its own name */
        EMIT(t->name, t->dtype, t->ndim, t->shape, pruned, t->end - t->begin);
    }
    if (!c->format)
        goto meta_key;

    /* Every key of the layout's scheme, in table order. */
    for (const struct qs_ckpt_key *k = keys; k->suffix; k++) {
        int64_t shape[2] = {0, 1};
        int ndim = 1;
        const char *dtype = k->dtype;
        void *bytes = NULL, *own = NULL;
        uint64_t nbytes = 0;

        if (k->double_quant && !p.double_quant)
            continue;
        if (k->source == QS_KEY_PLANE && info[k->plane].bytes == 0)
            continue; /* a plane this format and option set does not use (zero points) */
        if (!(key = cat(k->module ? prefix : t->name, k->suffix)))
            goto oom;
        switch (k->source) {
        case QS_KEY_PLANE: {
            const qs_plane_info *pi = &info[k->plane];
            bytes = planes[k->plane]; /* NULL in the plan: only the size is announced */
            nbytes = (uint64_t)pi->bytes;
            if (!dtype)
                dtype = qs_ckpt_elem_dtype(pi->elem);
            ndim = key_shape(k, pi, rows, qcols, shape);
            if (k->transform == QS_KEY_XOR80 && bytes)
                for (uint64_t i = 0; i < nbytes; i++)
                    ((unsigned char *)bytes)[i] ^= 0x80;
            break;
        }
        case QS_KEY_CODEBOOK:
            shape[0] = qs_codebook_size(k->codebook);
            nbytes = (uint64_t)shape[0] * 4;
            if (!(bytes = own = qs_heap_malloc(nbytes)))
                goto oom;
            qs_codebook(k->codebook, bytes, shape[0]);
            break;
        case QS_KEY_QUANT_STATE:
            q.nested_offset = c->nested ? c->nested[ti] : q.nested_offset;
            if (!(bytes = own = bnb_quant_state(c, &p, &q, dtname, rows, qcols)))
                goto oom;
            nbytes = strlen(bytes);
            shape[0] = (int64_t)nbytes;
            break;
        case QS_KEY_GLOBAL_SCALE:
        case QS_KEY_GLOBAL_SCALE_RECIP:
        case QS_KEY_INPUT_SCALE: {
            float v = q.global_scale;
            if (k->source == QS_KEY_GLOBAL_SCALE_RECIP) {
                v = 1.0f / q.global_scale;
            } else if (k->source == QS_KEY_INPUT_SCALE) {
                json_t *a = json_object_get(c->act_amax, prefix);
                double den = c->format == QS_FORMAT_NVFP4 ? 6.0 * 448.0 : 448.0;
                if (!json_is_number(a) || !(json_number_value(a) > 0) ||
                    !isfinite(json_number_value(a))) {
                    snprintf(c->err, sizeof c->err,
                             "%s: --act-amax has no positive finite amax for module '%s'",
                             t->name, prefix);
                    goto fail;
                }
                v = (float)(json_number_value(a) / den);
                /* the scale is stored as float32: an amax whose scale would round to Inf, to
                 * 0 or into the subnormals (whose reciprocal overflows) is refused */
                if (!isnormal(v)) {
                    snprintf(c->err, sizeof c->err,
                             "%s: --act-amax %.17g for module '%s' gives input_scale %.9g, "
                             "outside float32's normal range",
                             t->name, json_number_value(a), prefix, (double)v);
                    goto fail;
                }
            }
            ndim = k->shape == QS_KEY_SHAPE_ONE;
            shape[0] = 1;
            nbytes = 4;
            if (!(bytes = own = dup_bytes(&v, 4)))
                goto oom;
            break;
        }
        case QS_KEY_WEIGHT_SHAPE: {
            int64_t rc[2] = {rows, cols};
            shape[0] = 2;
            nbytes = 16;
            if (!(bytes = own = dup_bytes(rc, 16)))
                goto oom;
            break;
        }
        default: /* QS_KEY_WEIGHT_FORMAT: 0 = "row", the only layout bitsandbytes loads */
            ndim = 0;
            nbytes = 1;
            if (!(bytes = own = qs_heap_calloc(1, 1)))
                goto oom;
            break;
        }
        if (emit(c, key, dtype, ndim, shape, bytes, nbytes) != 0) {
            qs_heap_free(own);
            goto fail;
        }
        qs_heap_free(own);
        qs_heap_free(key);
        key = NULL;
    }
meta_key:
    if (sp) {
        int64_t mshape[2] = {rows, (cols + 15) / 16};
        if (!(key = cat(t->name, QS_CKPT_SP24_META)))
            goto oom;
        EMIT(key, "U16", 2, mshape, meta, (uint64_t)meta_count * 2);
    }
    /* every byte written for this weight, as `qsparse inspect` counts them */
    if (st)
        st->bits = 8.0 * (double)c->tensor_bytes / (double)n;
    qs_heap_free(key);
    qs_heap_free(prefix);
    qs_heap_free(pruned);
    qs_heap_free(values);
    qs_heap_free(meta);
    for (int i = 0; i < QS_PLANE_COUNT; i++)
        qs_heap_free(planes[i]);
    return 0;
oom:
    snprintf(c->err, sizeof c->err, "out of memory");
fail:
    qs_heap_free(prefix);
    qs_heap_free(key);
    qs_heap_free(pruned);
    qs_heap_free(values);
    qs_heap_free(meta);
    for (int i = 0; i < QS_PLANE_COUNT; i++)
        qs_heap_free(planes[i]);
    return -1;
}

/*
 * Output keys a quantized tensor adds beside its own name (its layout's other keys, with and
 * without double quantization): none may already exist. Returns the first that does (from
 * malloc, for the message), else NULL; *oom is set when memory ran out. Each lookup is a binary
 * search, so checking every tensor costs n log n.
 */
static char *collision(struct ctx_all *c, const struct qs_st_file *f, const char *name, int *oom)
{
    const struct qs_ckpt_key *keys = (use_rule(c, name), c->format ? c->layout->keys(&c->req)
                                                                   : NULL);
    char *prefix = NULL, *key = NULL;

    *oom = 0;
    for (const struct qs_ckpt_key *k = keys; k && k->suffix; k++) {
        if (k->module && !prefix && !(prefix = module_prefix(name))) {
            *oom = 1;
            break;
        }
        if (!(key = cat(k->module ? prefix : name, k->suffix))) {
            *oom = 1;
            break;
        }
        if (strcmp(key, name) != 0 && qs_st_find(f, key))
            break;
        qs_heap_free(key);
        key = NULL;
    }
    if (!key && !*oom && c->req.sparsity24 && c->layout == &qs_layout_qsparse) {
        if (!(key = cat(name, QS_CKPT_SP24_META)))
            *oom = 1;
        else if (!qs_st_find(f, key)) {
            qs_heap_free(key);
            key = NULL;
        }
    }
    qs_heap_free(prefix);
    return key;
}

static int32_t cli_format(const char *name)
{
    if (strcasecmp(name, "none") == 0)
        return QS_FORMAT_NONE;
    return qs_format_from_name(name);
}

/* Quantized: 2-D, non-empty, a float dtype, named by --include and not by --exclude, and not
 * kept float by a --tensor-format rule. */
static int selected(struct ctx_all *c, const struct qs_st_tensor *t)
{
    int32_t sdt;

    return t->ndim == 2 && t->numel > 0 && src_dtype_name(t->dtype, &sdt) &&
           regexec(c->inc, t->name, 0, NULL, 0) == 0 &&
           regexec(c->exc, t->name, 0, NULL, 0) != 0 &&
           !qs_tensor_rules_match(&c->rules, t->name)->keep_float;
}

/* A 2-D float weight left unquantized: its module goes to the loader's skip list. */
static int note_skipped(struct ctx_all *c, const struct qs_st_tensor *t)
{
    size_t n = strlen(t->name);
    int32_t sdt;
    char *m;
    int rc;

    if (t->ndim != 2 || !src_dtype_name(t->dtype, &sdt) || n <= 7 ||
        strcmp(t->name + n - 7, ".weight") != 0)
        return 0;
    if (!(m = module_prefix(t->name)))
        return -1;
    rc = json_array_append_new(c->skipped, json_string(m));
    qs_heap_free(m);
    return rc;
}

static double file_size(const char *path)
{
    struct stat sb;

    return stat(path, &sb) == 0 ? (double)sb.st_size : 0.0;
}

/* An error message that may quote names from the input: printed escaped. */
static void print_error(const char *msg)
{
    fputs("qsparse quantize: error: ", stderr);
    qs_escape_print(stderr, msg);
    fputc('\n', stderr);
}

static int ends_with(const char *s, const char *tail)
{
    size_t n = strlen(s), k = strlen(tail);
    return n >= k && strcmp(s + n - k, tail) == 0;
}

/* Why the file looks like the output of a quantizer (a static string), or NULL: the tool's own
 * record, or the keys or dtypes that bitsandbytes, compressed-tensors and ModelOpt write. */
static const char *quantized_already(const struct qs_st_file *f)
{
    if (f->metadata && json_object_get(f->metadata, "qsparse.quantized"))
        return "its qsparse.quantized record";
    for (size_t i = 0; i < f->count; i++) {
        const struct qs_st_tensor *t = &f->tensors[i];
        if (strstr(t->name, ".quant_state.bitsandbytes__"))
            return "bitsandbytes 4-bit keys (quant_state)";
        if (ends_with(t->name, ".SCB"))
            return "bitsandbytes LLM.int8 keys (SCB)";
        if (ends_with(t->name, ".weight_packed") || ends_with(t->name, ".weight_scale"))
            return "compressed-tensors or ModelOpt keys (weight_packed, weight_scale)";
        if (strncmp(t->dtype, "F8_", 3) == 0)
            return "FP8 weights";
    }
    return NULL;
}

/* After the survey: an input with no float weight to quantize that looks quantized already
 * is an error that says so, not a copy. Returns 0, or 1 after printing the error. */
static int refuse_quantized(const struct ctx_all *c)
{
    if (c->nsurveyed > 0 || !c->quantized)
        return 0;
    fputs("qsparse quantize: error: ", stderr);
    qs_escape_print(stderr, c->o->in);
    fprintf(stderr, " is quantized already (%s) and holds no float weight to quantize; quantize "
                    "the original model\n", c->quantized);
    return 1;
}

/*
 * The survey of one input file: its header only, no tensor read. It checks every selected
 * tensor (no output key already in the input, no embedding under a loader layout), notes the
 * weights' dtype and the 2-D weights left float (the loader's skip list). A folder's shards are
 * all surveyed before any is written, so that a part (--shard) writes the config.json of the
 * whole model. Returns 0, or 1 after printing the error.
 */
static int survey_in(struct ctx_all *c, const struct qs_st_file *f)
{
    if (!c->quantized)
        c->quantized = quantized_already(f);
    for (size_t i = 0; i < f->count; i++) {
        const struct qs_st_tensor *t = &f->tensors[i];
        char *clash;
        int oom;
        if (!selected(c, t)) {
            if (note_skipped(c, t) != 0)
                goto oom;
            continue;
        }
        c->nsurveyed++;
        if ((clash = collision(c, f, t->name, &oom)) || oom) {
            fputs("qsparse quantize: error: ", stderr);
            if (oom) {
                fputs("out of memory", stderr);
            } else {
                qs_escape_print(stderr, t->name);
                fputs(": the input already has a tensor '", stderr);
                qs_escape_print(stderr, clash);
                fputs("' (is it quantized already?)", stderr);
            }
            fputc('\n', stderr);
            qs_heap_free(clash);
            return 1;
        }
        if (c->layout != &qs_layout_qsparse && regexec(c->embedding, t->name, 0, NULL, 0) == 0) {
            fputs("qsparse quantize: error: ", stderr);
            qs_escape_print(stderr, t->name);
            fprintf(stderr,
                    " is an embedding: the %s loader replaces linear layers only; leave it out "
                    "(--exclude) or use --layout qsparse\n",
                    c->layout->name);
            return 1;
        }
        if (!c->req.weight_dtype) {
            int32_t sdt;
            c->req.weight_dtype = src_dtype_name(t->dtype, &sdt);
        }
        {
            char *m = module_prefix(t->name);
            int r = m ? qs_tensor_rules_note(use_rule(c, t->name), m) : -1;
            qs_heap_free(m);
            if (r != 0)
                goto oom;
        }
    }
    return 0;
oom:
    fprintf(stderr, "qsparse quantize: error: out of memory\n");
    return 1;
}

/* The survey of shard `shard` of folder m: its tensors are also noted against the other
 * shards' and the index (model_dir.h). */
static int survey_file(struct ctx_all *c, const char *in_path, struct qs_model_dir *m,
                       size_t shard)
{
    struct qs_st_file in;
    char err[ERRLEN];
    int rc;

    if (qs_st_open(&in, in_path, err, sizeof err) != 0) {
        print_error(err);
        return 1;
    }
    rc = survey_in(c, &in);
    if (rc == 0 && qs_model_dir_note_tensors(m, shard, &in, err, sizeof err) != 0) {
        print_error(err);
        rc = 1;
    }
    qs_st_close(&in);
    return rc;
}

/*
 * After the survey: the schemes the model's tensors use (tensor_rules.h). More than one needs a
 * layout that holds mixed formats: compressed-tensors (a config group per scheme) or the qsparse
 * keys (each tensor's format is in the record). Returns 0, or 1 after printing the error.
 */
static int plan_groups(struct ctx_all *c)
{
    c->ngroups = qs_tensor_rules_groups(&c->rules, &c->req, c->groups);
    use_base(c);
    if (c->ngroups < 0) {
        c->ngroups = 0;
        fprintf(stderr, "qsparse quantize: error: out of memory\n");
        return 1;
    }
    if (c->ngroups > 1 && (c->layout == &qs_layout_bnb || c->layout == &qs_layout_modelopt)) {
        fprintf(stderr,
                "qsparse quantize: error: --tensor-format gives this model %d formats; the %s "
                "layout holds one format per model (its loader reads one config): use --layout "
                "compressed-tensors for a folder, or the qsparse layout for a single file\n",
                c->ngroups, c->layout->name);
        return 1;
    }
    c->req.groups = c->ngroups > 1 ? c->groups : NULL;
    c->req.ngroups = c->ngroups > 1 ? c->ngroups : 0;
    return 0;
}

/* The largest input tensor read so far (--stats). */
static int note_size(struct ctx_all *c, const struct qs_st_tensor *t)
{
    if (t->end - t->begin <= c->largest && c->largest_name)
        return 0;
    qs_heap_free(c->largest_name);
    c->largest = t->end - t->begin;
    return (c->largest_name = qs_heap_strdup(t->name)) ? 0 : -1;
}

/*
 * Quantize one (surveyed) safetensors file into another, streaming: the plan gives the output
 * header, then each tensor is read from the mapping, quantized, written and freed before the
 * next, and its pages of the input are handed back to the kernel. The heap holds one tensor's
 * planes and a few MB of buffers, whatever the file's size. Returns 0, or 1 after printing the
 * error.
 */
static int process_in(struct ctx_all *c, const struct qs_st_file *f, const char *in_path,
                      const char *out_path)
{
    struct qs_st_writer w;
    struct qs_st_stream out;
    char err[ERRLEN];
    size_t nsel = 0, done = 0;
    int rc = 1, writing = 0;

    qs_st_writer_init(&w);
    c->w = &w;
    c->out = &out;
    if (!(c->record = json_object()) ||
        !(c->nested = qs_heap_calloc(f->count + 1, sizeof *c->nested)))
        goto oom;
    for (size_t i = 0; i < f->count; i++)
        nsel += selected(c, &f->tensors[i]);
    if (c->nstat + nsel + 1 > c->cap_stat) {
        size_t cap = c->nstat + nsel + 1;
        struct layer_stat *s = qs_heap_realloc(c->stats, cap * sizeof *s);
        if (!s)
            goto oom;
        c->stats = s;
        c->cap_stat = cap;
    }

    /* The plan: every output tensor's entry, and the metadata; nothing is written yet. */
    c->pass = PASS_PLAN;
    for (size_t i = 0; i < f->count; i++) {
        const struct qs_st_tensor *t = &f->tensors[i];
        if (selected(c, t)) {
            struct layer_stat *st = c->o->dry_run ? &c->stats[c->nstat] : NULL;
            if (st)
                memset(st, 0, sizeof *st);
            if (quantize_one(c, t, i, st) != 0) {
                print_error(c->err);
                goto done;
            }
            if (st) {
                if (!(st->name = qs_heap_strdup(t->name)))
                    goto oom;
                c->nstat++;
            }
        } else {
            if (emit(c, t->name, t->dtype, t->ndim, t->shape, NULL, t->end - t->begin) != 0) {
                print_error(c->err);
                goto done;
            }
            c->ncopy++;
        }
    }
    if (f->metadata) {
        const char *k;
        json_t *v;
        json_object_foreach(f->metadata, k, v) qs_st_writer_meta(&w, k, json_string_value(v));
    }
    {
        char *rec = json_dumps(c->record, JSON_COMPACT);
        if (!rec || qs_st_writer_meta(&w, "qsparse.quantized", rec) != 0 ||
            qs_st_writer_meta(&w, "qsparse.version", qs_version_string()) != 0) {
            qs_heap_free(rec);
            goto oom;
        }
        qs_heap_free(rec);
    }

    if (c->o->dry_run) { /* the plan's sizes are the output's: nothing more to do */
        c->nsel += nsel;
        c->bytes_in += file_size(in_path);
        c->bytes_out += (double)qs_st_writer_file_bytes(&w);
        rc = 0;
        goto done;
    }

    /* The header, then the tensors one at a time. */
    c->pass = PASS_WRITE;
    if (qs_st_stream_begin(&out, &w, out_path, err, sizeof err) != 0) {
        print_error(err);
        goto done;
    }
    writing = 1;
    for (size_t i = 0; i < f->count; i++) {
        const struct qs_st_tensor *t = &f->tensors[i];
        struct layer_stat *st = &c->stats[c->nstat];
        if (note_size(c, t) != 0)
            goto oom;
        if (!selected(c, t)) {
            /* copied in pieces, each released once written: a large embedding table does not
             * stay resident either */
            for (uint64_t at = 0, n = t->end - t->begin; at < n; at += COPY_PIECE) {
                uint64_t k = n - at < COPY_PIECE ? n - at : COPY_PIECE;
                if (qs_st_stream_put(&out, t->data + at, k, err, sizeof err) != 0) {
                    writing = 0;
                    print_error(err);
                    goto done;
                }
                qs_st_release_bytes(f, t->data + at, k);
            }
            continue;
        }
        if (c->tty && !c->o->quiet)
            progress_bar("quantizing", done, nsel, t->name);
        memset(st, 0, sizeof *st);
        if (quantize_one(c, t, i, st) != 0) {
            if (c->tty && !c->o->quiet)
                fputc('\n', stderr);
            print_error(c->err);
            goto done;
        }
        qs_st_release(f, t);
        if (t->end - t->begin > c->largest_q)
            c->largest_q = t->end - t->begin;
        if (!(st->name = qs_heap_strdup(t->name)))
            goto oom;
        c->nstat++;
        done++;
        if (c->tty && !c->o->quiet && done == nsel)
            progress_bar("quantizing", done, nsel, "");
    }
    writing = 0;
    if (qs_st_stream_end(&out, err, sizeof err) != 0) {
        print_error(err);
        goto done;
    }
    c->nsel += nsel;
    c->bytes_in += file_size(in_path);
    c->bytes_out += file_size(out_path);
    rc = 0;
    goto done;
oom:
    fprintf(stderr, "qsparse quantize: error: out of memory\n");
done:
    if (writing)
        qs_st_stream_abort(&out);
    if (c->record)
        json_decref(c->record);
    c->record = NULL;
    qs_heap_free(c->nested);
    c->nested = NULL;
    qs_st_writer_free(&w);
    c->w = NULL;
    c->out = NULL;
    return rc;
}

/* One file of a folder: open, quantize, close. */
static int process_file(struct ctx_all *c, const char *in_path, const char *out_path)
{
    struct qs_st_file in;
    char err[ERRLEN];
    int rc;

    if (qs_st_open(&in, in_path, err, sizeof err) != 0) {
        print_error(err);
        return 1;
    }
    rc = process_in(c, &in, in_path, out_path);
    qs_st_close(&in);
    return rc;
}

/* A single file in: surveyed and quantized through one mapping. */
static int process_single(struct ctx_all *c, const char *in_path, const char *out_path)
{
    struct qs_st_file in;
    char err[ERRLEN];
    int rc;

    if (qs_st_open(&in, in_path, err, sizeof err) != 0) {
        print_error(err);
        return 1;
    }
    rc = survey_in(c, &in);
    if (rc == 0)
        rc = refuse_quantized(c);
    if (rc == 0)
        rc = plan_groups(c);
    if (rc == 0)
        rc = process_in(c, &in, in_path, out_path);
    qs_st_close(&in);
    return rc;
}

/* The quantization_config block of --config-out or config.json (a new reference, or NULL). */
static json_t *layout_config(struct ctx_all *c)
{
    use_base(c);
    if (!c->req.weight_dtype)
        c->req.weight_dtype = "float32";
    return c->layout->config ? c->layout->config(&c->req, c->skipped) : NULL;
}

static int write_config_out(struct ctx_all *c, const char *path)
{
    json_t *cfg = layout_config(c);
    FILE *f;
    int rc = 0;

    if (!cfg) {
        fprintf(stderr, "qsparse quantize: error: the %s layout has no loader config\n",
                c->layout->name);
        return 1;
    }
    f = strcmp(path, "-") == 0 ? stdout : fopen(path, "w");
    if (!f || json_dumpf(cfg, f, JSON_INDENT(2)) != 0 || fputc('\n', f) == EOF)
        rc = 1;
    if (f && f != stdout && fclose(f) != 0)
        rc = 1;
    if (rc)
        fprintf(stderr, "qsparse quantize: error: cannot write %s\n", path);
    json_decref(cfg);
    return rc;
}

/*
 * The options of a part's command line that shape its output, for qsparse-part.json: merge-index
 * refuses parts made with different ones. Left out: IN, -o, --shard, and what changes nothing
 * in the files (--threads, --quiet, --stats*, --force); --act-amax and --calib keep their name,
 * not their path (the parts may run on machines that mount the files in different places).
 */
static json_t *part_options(const struct options *o)
{
    json_t *a = json_array();

    for (int i = 1; a && i < o->argc; i++) {
        const char *s = o->argv[i];
        if (s == o->in)
            continue;
        if (strcmp(s, "-o") == 0 || strcmp(s, "--output") == 0 || strcmp(s, "--shard") == 0 ||
            strcmp(s, "--threads") == 0 || strcmp(s, "--stats-json") == 0) {
            i++;
            continue;
        }
        if (strcmp(s, "-q") == 0 || strcmp(s, "--quiet") == 0 || strcmp(s, "--stats") == 0 ||
            strcmp(s, "--force") == 0)
            continue;
        if (json_array_append_new(a, json_string(s)) != 0) {
            json_decref(a);
            return NULL;
        }
        if ((strcmp(s, "--act-amax") == 0 || strcmp(s, "--calib") == 0) && i + 1 < o->argc)
            i++;
    }
    return a;
}

/* Whether shard j (of the sorted list) belongs to this run: all of them, or j mod n == i for
 * --shard i/n. */
static int own_shard(const struct options *o, size_t j)
{
    return o->nparts == 0 || (int64_t)(j % (size_t)o->nparts) == o->part;
}

/* config.json's dtype where the layout's loader decodes into one dtype only
 * (qs_layout_model_dtype): both spellings, "dtype" (transformers 5) and "torch_dtype" (what
 * earlier versions read; transformers 5 reads it when "dtype" is absent). */
static int set_model_dtype(struct ctx_all *c, json_t *config)
{
    const char *dt = qs_layout_model_dtype(c->layout, &c->req);

    if (!dt)
        return 0;
    return json_object_set_new(config, "dtype", json_string(dt)) != 0 ||
                   json_object_set_new(config, "torch_dtype", json_string(dt)) != 0
               ? -1
               : 0;
}

/* --dry-run of a folder: the survey, the plan of each shard (this part's, with --shard) and the
 * config, with every check of a real run; no output folder. Returns the exit status. */
static int dry_run_folder(struct ctx_all *c, const char *in_dir)
{
    struct qs_model_dir m;
    char err[ERRLEN];
    json_t *cfg;
    int rc = 1;

    if (qs_model_dir_open(&m, in_dir, err, sizeof err) != 0) {
        print_error(err);
        return 1;
    }
    for (size_t i = 0; i < m.nshards; i++) {
        char *src = path_join(m.dir, m.shards[i]);
        int r = src ? survey_file(c, src, &m, i) : -1;
        qs_heap_free(src);
        if (r != 0)
            goto done;
    }
    if (qs_model_dir_check_index(&m, err, sizeof err) != 0) {
        print_error(err);
        goto done;
    }
    if (plan_groups(c) != 0)
        goto done;
    for (size_t i = 0; i < m.nshards; i++) {
        char *src;
        int r;
        if (!own_shard(c->o, i))
            continue;
        if (!(src = path_join(m.dir, m.shards[i])))
            goto done;
        c->shard = m.shards[i];
        r = process_file(c, src, NULL);
        qs_heap_free(src);
        if (r != 0)
            goto done;
    }
    if (!(cfg = layout_config(c))) {
        fprintf(stderr, "qsparse quantize: error: out of memory\n");
        goto done;
    }
    json_decref(cfg);
    rc = 0;
done:
    qs_model_dir_close(&m);
    return rc;
}

/* A model folder in, a model folder out (or one part of it, --shard). Returns the exit status. */
static int process_folder(struct ctx_all *c, const char *in_dir, const char *out_dir)
{
    struct qs_model_dir m;
    struct qs_model_out out;
    char err[ERRLEN];
    json_t *cfg = NULL, *mine = NULL;
    int rc = 1, part = c->o->nparts > 0;

    if (qs_model_dir_open(&m, in_dir, err, sizeof err) != 0) {
        print_error(err);
        return 1;
    }
    if (qs_model_out_begin(&out, out_dir, c->o->force, err, sizeof err) != 0) {
        print_error(err);
        qs_model_dir_close(&m);
        return 1;
    }
    if ((m.indexed && !(c->weight_map = json_object())) || !(mine = json_array()))
        goto oom;
    /* Every shard's header first: the skip list and dtype of config.json are the whole
     * model's, also for a part. */
    for (size_t i = 0; i < m.nshards; i++) {
        char *src = path_join(m.dir, m.shards[i]);
        int r;
        if (!src)
            goto oom;
        r = survey_file(c, src, &m, i);
        qs_heap_free(src);
        if (r != 0)
            goto done;
    }
    if (qs_model_dir_check_index(&m, err, sizeof err) != 0) {
        print_error(err);
        goto done;
    }
    if (!c->quantized && json_object_get(m.config, "quantization_config"))
        c->quantized = "config.json has a quantization_config";
    if (refuse_quantized(c) != 0 || plan_groups(c) != 0)
        goto done;
    for (size_t i = 0; i < m.nshards; i++) {
        char *src = NULL, *dst = NULL;
        int r;
        if (!own_shard(c->o, i))
            continue;
        if (!(src = path_join(m.dir, m.shards[i])) ||
            !(dst = qs_model_out_path(&out, m.shards[i]))) {
            qs_heap_free(src);
            goto oom;
        }
        c->shard = m.shards[i];
        r = process_file(c, src, dst);
        qs_heap_free(src);
        qs_heap_free(dst);
        if (r != 0)
            goto done;
        if (json_array_append_new(mine, json_string(m.shards[i])) != 0)
            goto oom;
    }
    if (qs_model_out_copy_rest(&m, &out, err, sizeof err) != 0) {
        print_error(err);
        goto done;
    }
    if (!(cfg = layout_config(c)) ||
        json_object_set_new(m.config, "quantization_config", cfg) != 0) {
        cfg = NULL;
        goto oom;
    }
    if (set_model_dtype(c, m.config) != 0)
        goto oom;
    if (qs_model_out_json(&out, "config.json", m.config, err, sizeof err) != 0) {
        print_error(err);
        goto done;
    }
    if (c->layout->extra) {
        json_t *x = c->layout->extra(&c->req, c->skipped);
        int r = x ? qs_model_out_json(&out, c->layout->extra_name, x, err, sizeof err) : -1;
        if (x)
            json_decref(x);
        if (!x)
            goto oom;
        if (r != 0) {
            print_error(err);
            goto done;
        }
    }
    if (part) {
        /* merge-index joins the parts; the index is written there, from the shards' headers */
        json_t *all = json_array(), *opts = part_options(c->o), *marker = NULL;
        int r = -1;
        for (size_t i = 0; all && i < m.nshards; i++)
            if (json_array_append_new(all, json_string(m.shards[i])) != 0)
                break;
        if (all && opts)
            marker = json_pack("{s:s, s:I, s:I, s:O, s:O, s:b, s:O}", "qsparse_part",
                               qs_version_string(), "part", (json_int_t)c->o->part, "parts",
                               (json_int_t)c->o->nparts, "shards", mine, "input_shards", all,
                               "indexed", m.indexed, "options", opts);
        if (marker)
            r = qs_model_out_json(&out, QS_PART_MARKER, marker, err, sizeof err);
        if (all)
            json_decref(all);
        if (opts)
            json_decref(opts);
        if (marker)
            json_decref(marker);
        if (!marker)
            goto oom;
        if (r != 0) {
            print_error(err);
            goto done;
        }
    } else if (m.indexed) {
        json_t *idx = qs_model_index_json(c->total_size, c->weight_map);
        int r = idx ? qs_model_out_json(&out, QS_INDEX_NAME, idx, err, sizeof err) : -1;
        if (idx)
            json_decref(idx);
        if (!idx)
            goto oom;
        if (r != 0) {
            print_error(err);
            goto done;
        }
    }
    if (qs_model_out_commit(&out, err, sizeof err) != 0) {
        print_error(err);
        goto done;
    }
    rc = 0;
    goto done;
oom:
    fprintf(stderr, "qsparse quantize: error: out of memory\n");
done:
    if (mine)
        json_decref(mine);
    qs_model_out_abort(&out);
    qs_model_dir_close(&m);
    return rc;
}

static int stat_cmp(const void *a, const void *b)
{
    return qs_natural_cmp(((const struct layer_stat *)a)->name,
                          ((const struct layer_stat *)b)->name);
}

/*
 * --stats / --stats-json: the heap peak (heap.h: every allocation of the tool, the library and
 * jansson since the start, counted exactly) against the largest input tensor read, and the
 * process's peak resident memory for comparison (which also counts mapped file pages and the
 * program itself). Returns 0, or 1 when the JSON file cannot be written.
 */
static int print_stats(struct ctx_all *c, const struct timespec *t0)
{
    struct timespec t1;
    struct rusage ru;
    double wall, ratio;
    size_t peak = qs_heap_peak();
    long rss_kb = getrusage(RUSAGE_SELF, &ru) == 0 ? ru.ru_maxrss : 0;
    char *name = qs_escape_dup(c->largest_name ? c->largest_name : "");
    int rc = 0;

    clock_gettime(CLOCK_MONOTONIC, &t1);
    wall = (double)(t1.tv_sec - t0->tv_sec) + 1e-9 * (double)(t1.tv_nsec - t0->tv_nsec);
    ratio = c->largest ? (double)peak / (double)c->largest : 0.0;
    if (c->o->stats)
        fprintf(stderr,
                "stats: heap peak %.1f MB = %.3fx the largest tensor (%s, %.1f MB); %.2f MB "
                "read, %.2f MB written, %.1f s, peak RSS %.1f MB\n",
                (double)peak / 1e6, ratio, name ? name : "?", (double)c->largest / 1e6,
                c->bytes_in / 1e6, c->bytes_out / 1e6, wall, (double)rss_kb * 1024 / 1e6);
    qs_heap_free(name);
    if (c->o->stats_json) {
        json_t *j = json_pack("{s:I, s:I, s:s, s:I, s:f, s:f, s:f, s:I, s:I, s:f}",
                              "heap_peak_bytes", (json_int_t)peak, "largest_tensor_bytes",
                              (json_int_t)c->largest,
                              "largest_tensor", c->largest_name ? c->largest_name : "",
                              "largest_quantized_bytes", (json_int_t)c->largest_q,
                              "heap_peak_over_largest", ratio, "bytes_read", c->bytes_in,
                              "bytes_written", c->bytes_out, "tensors_quantized",
                              (json_int_t)c->nstat, "peak_rss_bytes",
                              (json_int_t)rss_kb * 1024, "wall_seconds", wall);
        FILE *f = j ? fopen(c->o->stats_json, "w") : NULL;
        if (!f || json_dumpf(j, f, JSON_INDENT(2)) != 0 || fputc('\n', f) == EOF)
            rc = 1;
        if (f && fclose(f) != 0)
            rc = 1;
        if (j)
            json_decref(j);
        if (rc)
            fprintf(stderr, "qsparse quantize: error: cannot write %s\n", c->o->stats_json);
    }
    return rc;
}

/*
 * transformers has no reader for the modelopt layout: it skips quant_method "modelopt" with a
 * warning of its own and loads the FP8 codes into the float weights without their scales, so the
 * model runs and computes garbage (cosine -0.07 on all-MiniLM-L6-v2); NVFP4's packed weights at
 * least fail its shape check. Said on every run, --quiet or not, since nothing in the folder can
 * stop that load without also stopping vLLM's.
 */
static void warn_modelopt(const char *out, int32_t format)
{
    fputs("qsparse quantize: warning: ", stderr);
    qs_escape_print(stderr, out);
    fprintf(stderr,
            " is for vLLM, SGLang or TensorRT-LLM. transformers does not read the modelopt "
            "layout: %s; for transformers write --layout compressed-tensors "
            "(docs/layouts.md)\n",
            format == QS_FORMAT_FP8_E4M3
                ? "AutoModel.from_pretrained() skips it with a warning and loads the FP8 codes "
                  "as weights without their scales, so the model runs and computes garbage"
                : "AutoModel.from_pretrained() fails on the packed weights' shapes");
}

int qs_cmd_quantize(int argc, char **argv)
{
    struct timespec t0;
    struct options o;
    struct ctx_all c;
    regex_t inc, exc, emb;
    qs_ctx_params cp;
    qs_format_info fi;
    int rc = 1, have_re = 0, folder;

    if (parse_args(argc, argv, &o) != 0)
        return 2;
    memset(&c, 0, sizeof c);
    c.o = &o;
    c.format = cli_format(o.format);
    if (c.format != QS_FORMAT_NONE && qs_format_info_get(c.format, &fi) != QS_OK) {
        fprintf(stderr,
                "qsparse quantize: unknown format '%s' (nf4, fp4, llm_int8, int8, fp8_e4m3, "
                "fp8_e5m2, mxfp4, mxfp8, nvfp4, none)\n",
                o.format);
        return 2;
    }
    if (o.double_quant && (c.format == QS_FORMAT_NONE || !(fi.options & QS_OPT_DOUBLE_QUANT))) {
        fprintf(stderr, "qsparse quantize: --double-quant applies to nf4 and fp4 only\n");
        return 2;
    }
    if (o.blocksize && c.format != QS_FORMAT_NONE && fi.block_min == fi.block_max &&
        o.blocksize != fi.block_size) {
        fprintf(stderr, "qsparse quantize: %s has a fixed block size of %d\n", o.format,
                fi.block_size);
        return 2;
    }
    if (o.granularity && (c.format != QS_FORMAT_INT8 || (strcmp(o.granularity, "tensor") != 0 &&
                                                         strcmp(o.granularity, "row") != 0 &&
                                                         strcmp(o.granularity, "channel") != 0 &&
                                                         strcmp(o.granularity, "group") != 0))) {
        fprintf(stderr, "qsparse quantize: --granularity is tensor, row (or channel) or group, "
                        "for int8\n");
        return 2;
    }
    if (o.asymmetric && (c.format == QS_FORMAT_NONE || !(fi.options & QS_OPT_SYMMETRIC))) {
        fprintf(stderr, "qsparse quantize: --asymmetric applies to int8 only (zero points)\n");
        return 2;
    }
    if (o.method && qs_calib_parse_method(&o.cal, o.method) != 0)
        return 2;
    o.cal.calib = o.calib;
    if (o.cal.method == QS_METHOD_SPARSEGPT) {
        /* SparseGPT prunes N:M itself, from the calibration data */
        if (!o.sparsity || qs_calib_parse_sparsity(&o.cal, o.sparsity) != 0) {
            fprintf(stderr, "qsparse quantize: --method sparsegpt needs --sparsity N:M\n");
            return 2;
        }
        if (!c.format) {
            fprintf(stderr, "qsparse quantize: --method sparsegpt writes a quantized weight: "
                            "give --format\n");
            return 2;
        }
    } else if (o.sparsity && strcmp(o.sparsity, "2:4") != 0) {
        fprintf(stderr, "qsparse quantize: --sparsity takes 2:4 (N:M with --method sparsegpt)\n");
        return 2;
    }
    folder = qs_is_dir(o.in);
    if (o.nparts && !folder) {
        fprintf(stderr, "qsparse quantize: --shard splits a model folder's shards; IN is a "
                        "single file\n");
        return 2;
    }
    if (qs_output_check(o.out, o.in, folder, o.force, c.err, sizeof c.err) != 0) {
        print_error(c.err);
        return 1;
    }
    if (o.nparts && o.config_out) {
        fprintf(stderr, "qsparse quantize: --config-out is for a single file; a part holds "
                        "config.json\n");
        return 2;
    }
    if (o.layout) {
        if (!(c.layout = qs_layout_find(o.layout))) {
            fprintf(stderr,
                    "qsparse quantize: unknown layout '%s' (bitsandbytes, compressed-tensors, "
                    "modelopt, qsparse)\n",
                    o.layout);
            return 2;
        }
    } else {
        c.layout = folder ? qs_layout_default(c.format) : &qs_layout_qsparse;
    }
    if (folder && c.layout == &qs_layout_qsparse) {
        fprintf(stderr, "qsparse quantize: a model folder is written for a loader: --layout "
                        "bitsandbytes, compressed-tensors or modelopt\n");
        return 2;
    }
    make_params(&o, c.format, &c.req.params);
    c.req.format = c.format;
    /* SparseGPT writes its pruned weight dense (exact zeros): a loader layout records 2:4 in
     * its config, the tool's own keys need nothing */
    c.req.sparsity24 = o.sparsity != NULL &&
                       (o.cal.method != QS_METHOD_SPARSEGPT ||
                        (o.cal.sp_n == 2 && o.cal.sp_m == 4 && c.layout != &qs_layout_qsparse));
    if (o.act_amax) {
        if (!(c.act_amax = qs_side_json(o.act_amax, NULL, c.err, sizeof c.err))) {
            fputs("qsparse quantize: --act-amax ", stderr);
            qs_escape_print(stderr, c.err);
            fputc('\n', stderr);
            return 2;
        }
        c.req.have_act_amax = 1;
    }
    rc = 2; /* usage errors until the options are all checked */
    if (c.layout == &qs_layout_qsparse && c.req.sparsity24 && o.cal.method == QS_METHOD_GPTQ) {
        fprintf(stderr, "qsparse quantize: the qsparse layout stores a 2:4 weight compressed, "
                        "its kept values rounded to nearest: --method gptq with --sparsity 2:4 "
                        "needs a loader layout (or --method sparsegpt)\n");
        goto done_early;
    }
    if (c.layout->check(&c.req, c.err, sizeof c.err) != 0) {
        fprintf(stderr, "qsparse quantize: %s\n", c.err);
        goto done_early;
    }
    c.base_format = c.format;
    c.base_params = c.req.params;
    if (qs_tensor_rules_init(&c.rules, o.tformat, o.ntformat, c.format, &c.req.params, c.err,
                             sizeof c.err) != 0) {
        fprintf(stderr, "qsparse quantize: %s\n", c.err);
        goto done_early;
    }
    if (regcomp(&inc, o.include ? o.include : DEFAULT_INCLUDE, REG_EXTENDED | REG_NOSUB) != 0) {
        fprintf(stderr, "qsparse quantize: bad --include regular expression\n");
        goto done_early;
    }
    if (regcomp(&exc, o.exclude ? o.exclude : DEFAULT_EXCLUDE,
                REG_EXTENDED | REG_NOSUB | (o.exclude ? 0 : REG_ICASE)) != 0) {
        fprintf(stderr, "qsparse quantize: bad --exclude regular expression\n");
        regfree(&inc);
        goto done_early;
    }
    if (regcomp(&emb, EMBEDDING, REG_EXTENDED | REG_NOSUB | REG_ICASE) != 0) {
        fprintf(stderr, "qsparse quantize: error: out of memory\n");
        regfree(&inc);
        regfree(&exc);
        goto done_early;
    }
    have_re = 1;
    rc = 1;
    c.inc = &inc;
    c.exc = &exc;
    c.embedding = &emb;
    c.tty = isatty(2);

    /* Before any input is mapped: a truncated input then gives a message, a signal removes the
     * temporary output. */
    qs_st_install_signal_cleanup();
    if (qs_calib_open(&o.cal, c.err, sizeof c.err) != 0) {
        fprintf(stderr, "qsparse quantize: %s\n", c.err);
        rc = 2;
        goto done;
    }
    qs_ctx_params_init(&cp);
    qs_tool_threads_init(&c.thr, o.threads);
    cp.num_threads = o.threads > 0 ? o.threads : 1; /* auto: set per tensor (quantize_one) */
    cp.allocator = qs_heap_allocator(); /* the library's scratch counts in --stats */
    if (qs_tool_ctx_create(&cp, &c.ctx) != QS_OK) {
        fprintf(stderr, "qsparse quantize: error: cannot create a library context\n");
        goto done;
    }
    if (check_params(&c) != 0 || check_rules(&c) != 0) {
        fprintf(stderr, "qsparse quantize: %s\n", c.err);
        rc = 2;
        goto done;
    }
    if (!(c.skipped = json_array())) {
        fprintf(stderr, "qsparse quantize: error: out of memory\n");
        goto done;
    }
    clock_gettime(CLOCK_MONOTONIC, &t0);
    if ((folder ? (o.dry_run ? dry_run_folder(&c, o.in) : process_folder(&c, o.in, o.out))
                : process_single(&c, o.in, o.dry_run ? NULL : o.out)) != 0)
        goto done;
    use_base(&c);
    if (c.nsel == 0)
        fprintf(stderr, "qsparse quantize: warning: no tensor matched; the weights were copied\n");
    if (o.config_out && (!o.dry_run || strcmp(o.config_out, "-") == 0) &&
        write_config_out(&c, o.config_out) != 0)
        goto done;

    if (!o.quiet) {
        FILE *f = o.config_out && strcmp(o.config_out, "-") == 0 ? stderr : stdout;
        char formats[512];
        if (o.ntformat)
            qs_tensor_rules_summary(&c.rules, formats, sizeof formats);
        else
            snprintf(formats, sizeof formats, "%s", o.format);
        qsort(c.stats, c.nstat, sizeof *c.stats, stat_cmp); /* layer.2 before layer.10 */
        fprintf(f, "%-52s %11s %6s %10s %10s%s\n", "layer", "shape", "bits/w", "rel.RMSE",
                "max|err|", o.ntformat ? "  format" : "");
        for (size_t i = 0; i < c.nstat; i++) {
            char shape[32], *name = qs_escape_dup(c.stats[i].name);
            snprintf(shape, sizeof shape, "%lldx%lld", (long long)c.stats[i].rows,
                     (long long)c.stats[i].cols);
            fprintf(f, "%-52s %11s %6.3f %10.3e %10.3e", name ? name : "?", shape,
                    c.stats[i].bits, c.stats[i].rel_rmse, c.stats[i].max_abs);
            if (o.ntformat)
                fprintf(f, "  %s",
                        c.stats[i].format ? qs_format_name(c.stats[i].format) : "none");
            fputc('\n', f);
            qs_heap_free(name);
        }
        if (o.dry_run)
            fputs("dry run: ", f);
        qs_escape_print(f, o.out);
        fprintf(f, ": %zu tensors %s%s%s (%s layout%s), %zu copied; %.2f MB -> %.2f MB "
                   "(%.2fx)%s\n",
                c.nstat, o.dry_run ? "to quantize" : "quantized", o.ntformat ? "" : " to ",
                o.ntformat ? "" : formats, c.layout->name, c.req.sparsity24 ? ", 2:4 sparse" : "",
                c.ncopy, c.bytes_in / 1e6, c.bytes_out / 1e6,
                c.bytes_out > 0 ? c.bytes_in / c.bytes_out : 0.0,
                o.dry_run ? " in safetensors files; nothing written" : "");
        if (o.ntformat)
            fprintf(f, "formats: %s%s\n", formats,
                    c.ngroups > 1 && c.layout == &qs_layout_ct
                        ? " (compressed-tensors: one config group per format, mixed-precision)"
                        : "");
        if (folder && qs_layout_model_dtype(c.layout, &c.req))
            fprintf(f, "config.json: dtype %s (compressed-tensors decodes %s weights to %s; "
                       "loaded as float32 they would fail)\n",
                    qs_layout_model_dtype(c.layout, &c.req), o.ntformat ? "FP4 and MX" : o.format,
                    qs_layout_model_dtype(c.layout, &c.req));
    }
    if (folder && c.layout == &qs_layout_modelopt)
        warn_modelopt(o.out, c.format);
    if ((o.stats || o.stats_json) && print_stats(&c, &t0) != 0)
        goto done;
    rc = 0;
done:
    qs_heap_free(c.largest_name);
    qs_tool_ctx_done(c.ctx);
    qs_calib_close(&o.cal);
    for (size_t i = 0; i < c.nstat; i++)
        qs_heap_free(c.stats[i].name);
    qs_heap_free(c.stats);
    if (c.skipped)
        json_decref(c.skipped);
    if (c.weight_map)
        json_decref(c.weight_map);
    if (have_re) {
        regfree(&inc);
        regfree(&exc);
        regfree(&emb);
    }
done_early:
    for (int g = 0; g < c.ngroups; g++)
        json_decref(c.groups[g].modules);
    qs_tensor_rules_free(&c.rules);
    if (c.act_amax)
        json_decref(c.act_amax);
    return rc;
}
