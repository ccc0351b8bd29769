/* SPDX-License-Identifier: MIT */
/*
 * `qsparse quantize IN.safetensors -o OUT.safetensors --format F`: quantizes the selected 2-D
 * weight tensors of a safetensors model with libqsparse, copies every other tensor unchanged, and
 * prints a per-layer error table. The keys it writes (the table in checkpoint_keys.c, documented
 * in tools/README.md):
 *
 *   nf4, fp4   bitsandbytes checkpoint keys and JSON quant_state (docs/formats.md §7)
 *   int8       bitsandbytes LLM.int8 keys: P.weight I8, P.SCB F32 row absmax, P.weight_format
 *   fp8_*      N as F8_E4M3 / F8_E5M2 and N_scale F32 [] (per-tensor; modelopt / vLLM names)
 *   mxfp4/8    N as U8 (E2M1 pairs, low nibble first) or F8_E4M3, N_scale U8 E8M0 [rows, blocks]
 *   nvfp4      N U8 (low nibble first), N_scale F8_E4M3 [rows, blocks], N_scale_2 F32 []
 *
 * and a "qsparse.quantized" metadata entry (a JSON string) giving, per quantized weight, its
 * format, original shape and dtype. The input is memory-mapped and fully validated before any
 * output exists; the output is written to a temporary file and renamed.
 */
#define _POSIX_C_SOURCE 200809L

#include <math.h>
#include <regex.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "qsparse.h"
#include "calib_file.h"
#include "checkpoint_keys.h"
#include "commands.h"
#include "escape.h"
#include "safetensors.h"

#define ERRLEN 512

/* Linear layers' weights, not norms, biases or embeddings (nor the tied output head). */
#define DEFAULT_INCLUDE "\\.weight$"
#define DEFAULT_EXCLUDE "norm|embed|lm_head|(^|\\.)(wte|wpe|ln_[a-z0-9]+)\\."

struct options {
    const char *in, *out, *format, *include, *exclude;
    int32_t blocksize;
    int double_quant, threads, quiet;
    struct qs_calib_opts cal; /* --method, --calib, --sparsity (calib_file.c) */
};

struct layer_stat {
    char *name;
    int64_t rows, cols;
    double bits, rel_rmse, max_abs;
};

static void usage(FILE *f)
{
    fprintf(f,
            "usage: qsparse quantize IN.safetensors -o OUT.safetensors --format FORMAT\n"
            "                        [--blocksize N] [--double-quant] [--include REGEX]\n"
            "                        [--exclude REGEX] [--threads N] [--quiet]\n"
            "                        [--method rtn|gptq|sparsegpt --calib FILE [--sparsity N:M]]\n\n"
            "FORMAT: nf4, fp4 (bitsandbytes keys), int8 (bitsandbytes LLM.int8 keys), fp8_e4m3,\n"
            "        fp8_e5m2, mxfp4, mxfp8, nvfp4.\n"
            "Quantizes the 2-D float tensors whose name matches --include (default '%s')\n"
            "and not --exclude (default '%s', case-insensitive);\n"
            "everything else is copied unchanged. POSIX extended regular expressions.\n"
            "--blocksize (nf4/fp4, default 64) and --double-quant (nf4/fp4) set the block format.\n"
            "Prints a per-layer error table (relative RMS error, max |error|) unless --quiet.\n"
            "--method gptq (nf4, fp4, int8, mxfp4, nvfp4) or sparsegpt (with --sparsity N:M)\n"
            "take each layer's Hessian or inputs from --calib FILE (tools/README.md).\n",
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

static int parse_args(int argc, char **argv, struct options *o)
{
    int64_t v;

    memset(o, 0, sizeof *o);
    for (int i = 1; i < argc; i++) {
        const char *a = argv[i];
        const char *next = i + 1 < argc ? argv[i + 1] : NULL;
        if (strcmp(a, "-h") == 0 || strcmp(a, "--help") == 0) {
            usage(stdout);
            exit(0);
        } else if (strcmp(a, "-o") == 0 || strcmp(a, "--output") == 0) {
            if (!next)
                goto missing;
            o->out = argv[++i];
        } else if (strcmp(a, "--format") == 0 || strcmp(a, "-f") == 0) {
            if (!next)
                goto missing;
            o->format = argv[++i];
        } else if (strcmp(a, "--blocksize") == 0) {
            if (parse_int(next, 1, 1 << 30, &v) != 0) {
                fprintf(stderr, "qsparse quantize: --blocksize needs a positive integer\n");
                return -1;
            }
            o->blocksize = (int32_t)v;
            i++;
        } else if (strcmp(a, "--double-quant") == 0) {
            o->double_quant = 1;
        } else if (strcmp(a, "--include") == 0) {
            if (!next)
                goto missing;
            o->include = argv[++i];
        } else if (strcmp(a, "--exclude") == 0) {
            if (!next)
                goto missing;
            o->exclude = argv[++i];
        } else if (strcmp(a, "--threads") == 0) {
            if (parse_int(next, 0, 4096, &v) != 0) {
                fprintf(stderr, "qsparse quantize: --threads needs an integer >= 0\n");
                return -1;
            }
            o->threads = (int)v;
            i++;
        } else if (strcmp(a, "--method") == 0) {
            if (!next)
                goto missing;
            if (qs_calib_parse_method(&o->cal, argv[++i]) != 0)
                return -1;
        } else if (strcmp(a, "--sparsity") == 0) {
            if (!next)
                goto missing;
            if (qs_calib_parse_sparsity(&o->cal, argv[++i]) != 0)
                return -1;
        } else if (strcmp(a, "--calib") == 0) {
            if (!next)
                goto missing;
            o->cal.calib = argv[++i];
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
    char *s = malloc(la + lb + 1);

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
    s = malloc(n + 1);
    if (s) {
        memcpy(s, name, n);
        s[n] = '\0';
    }
    return s;
}

static void *dup_bytes(const void *p, size_t n)
{
    void *d = malloc(n ? n : 1);

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

static void write_progress(size_t done, size_t total, void *user)
{
    (void)user;
    progress_bar("writing   ", done, total, NULL);
}

/* ---- one tensor --------------------------------------------------------------------------------
 */

struct ctx_all {
    qs_ctx *ctx;
    const struct options *o;
    int32_t format;
    struct qs_st_writer *w;
    json_t *record; /* "qsparse.quantized" */
    char err[ERRLEN];
};

/* Hand plane i to the writer (which owns it from then on, also when adding fails). */
#define ADD(name, dtype, ndim, shape, data, bytes, owned)                                          \
    do {                                                                                           \
        if (qs_st_writer_add(c->w, (name), (dtype), (ndim), (shape), (data), (bytes), (owned),     \
                             c->err, sizeof c->err) != 0)                                          \
            goto fail;                                                                             \
    } while (0)

static void make_params(const struct ctx_all *c, qs_quant_params *p)
{
    qs_quant_params_init(p, c->format);
    if (c->o->blocksize)
        p->block_size = c->o->blocksize;
    p->double_quant = c->o->double_quant;
}

/* Check the format options once, before any work. Returns 0, or -1 with the library's message
 * in c->err. */
static int check_params(struct ctx_all *c)
{
    qs_quant_params p;
    qs_plane_info info;

    make_params(c, &p);
    if (qs_quant_plane_info(c->ctx, &p, 1, 1, QS_PLANE_DATA, &info) == QS_OK)
        return 0;
    snprintf(c->err, sizeof c->err, "%s", qs_ctx_last_error(c->ctx));
    return -1;
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

/* Quantize tensor t, add its output keys (checkpoint_keys.c), fill *st. Returns 0 or -1 with
 * c->err. */
static int quantize_one(struct ctx_all *c, const struct qs_st_tensor *t, struct layer_stat *st)
{
    qs_quant_params p;
    qs_qtensor q;
    qs_plane_info info[QS_PLANE_COUNT];
    int64_t rows = t->shape[0], cols = t->shape[1], n = t->numel;
    int32_t sdt;
    const char *dtname = src_dtype_name(t->dtype, &sdt);
    void *planes[QS_PLANE_COUNT] = {0};
    float *ref = NULL, *deq = NULL;
    char *prefix = NULL, *key = NULL;
    double err2 = 0.0, ref2 = 0.0, maxabs = 0.0;
    int64_t total = 0;

    make_params(c, &p);
    memset(&q, 0, sizeof q);
    for (int i = 0; i < QS_PLANE_COUNT; i++) {
        if (qs_quant_plane_info(c->ctx, &p, rows, cols, i, &info[i]) != QS_OK) {
            snprintf(c->err, sizeof c->err, "%s: %s", t->name, qs_ctx_last_error(c->ctx));
            goto fail;
        }
        if (info[i].bytes > 0 && !(planes[i] = malloc((size_t)info[i].bytes))) {
            snprintf(c->err, sizeof c->err, "%s: out of memory", t->name);
            goto fail;
        }
        total += info[i].bytes;
    }
    q.data = planes[0], q.data_bytes = info[0].bytes;
    q.scale = planes[1], q.scale_bytes = info[1].bytes;
    q.zero_point = planes[2], q.zero_point_bytes = info[2].bytes;
    q.nested_scale = planes[3], q.nested_scale_bytes = info[3].bytes;
    if (qs_calib_quantize(c->ctx, &c->o->cal, t->name, &p, t->data, sdt, rows, cols, &q, c->err,
                          sizeof c->err) != 0)
        goto fail;

    /* The error of this layer: the library's decode against the input widened to f32. */
    ref = malloc((size_t)n * sizeof *ref);
    deq = malloc((size_t)n * sizeof *deq);
    if (!ref || !deq) {
        snprintf(c->err, sizeof c->err, "%s: out of memory", t->name);
        goto fail;
    }
    if (qs_convert(c->ctx, t->data, sdt, ref, QS_DTYPE_F32, n, n * 4) != QS_OK ||
        qs_dequantize(c->ctx, &p, &q, rows, cols, deq, QS_DTYPE_F32, n * 4) != QS_OK) {
        snprintf(c->err, sizeof c->err, "%s: %s", t->name, qs_ctx_last_error(c->ctx));
        goto fail;
    }
    for (int64_t i = 0; i < n; i++) {
        double d = (double)deq[i] - (double)ref[i];
        err2 += d * d;
        ref2 += (double)ref[i] * (double)ref[i];
        if (fabs(d) > maxabs || d != d)
            maxabs = fabs(d);
    }
    st->rows = rows;
    st->cols = cols;
    st->bits = 8.0 * (double)total / (double)n;
    st->rel_rmse = ref2 > 0 ? sqrt(err2 / ref2) : sqrt(err2);
    st->max_abs = maxabs;
    free(ref);
    free(deq);
    ref = deq = NULL;

    {
        json_t *e = json_pack("{s:s, s:[I,I], s:s}", "format", qs_format_name(c->format), "shape",
                              (json_int_t)rows, (json_int_t)cols, "dtype", dtname);
        if (!e || json_object_set_new(c->record, t->name, e) != 0) {
            snprintf(c->err, sizeof c->err, "out of memory");
            goto fail;
        }
    }

    /* Every key of the format's scheme, in table order. */
    for (const struct qs_ckpt_key *k = qs_ckpt_keys(c->format); k->suffix; k++) {
        int64_t shape[2] = {0, 1};
        int ndim = 1;
        const char *dtype = k->dtype;
        void *bytes = NULL;
        uint64_t nbytes = 0;

        if (k->double_quant && !p.double_quant)
            continue;
        if (k->module && !prefix && !(prefix = module_prefix(t->name)))
            goto oom;
        if (!(key = cat(k->module ? prefix : t->name, k->suffix)))
            goto oom;
        switch (k->source) {
        case QS_KEY_PLANE: {
            const qs_plane_info *pi = &info[k->plane];
            bytes = planes[k->plane];
            planes[k->plane] = NULL; /* the writer owns the plane from here */
            nbytes = (uint64_t)pi->bytes;
            if (!dtype)
                dtype = qs_ckpt_elem_dtype(pi->elem);
            ndim = k->shape == QS_KEY_SHAPE_SCALAR ? 0 : k->shape == QS_KEY_SHAPE_COLUMN ? 2
                                                                                       : pi->ndim;
            shape[0] = pi->shape[0];
            shape[1] = pi->shape[1];
            break;
        }
        case QS_KEY_CODEBOOK:
            shape[0] = qs_codebook_size(k->codebook);
            nbytes = (uint64_t)shape[0] * 4;
            if (!(bytes = malloc(nbytes)))
                goto oom;
            qs_codebook(k->codebook, bytes, shape[0]);
            break;
        case QS_KEY_QUANT_STATE:
            if (!(bytes = bnb_quant_state(c, &p, &q, dtname, rows, cols)))
                goto oom;
            nbytes = strlen(bytes);
            shape[0] = (int64_t)nbytes;
            break;
        case QS_KEY_GLOBAL_SCALE:
            ndim = 0;
            nbytes = 4;
            if (!(bytes = dup_bytes(&q.global_scale, 4)))
                goto oom;
            break;
        default: /* QS_KEY_WEIGHT_FORMAT: 0 = "row", the only layout bitsandbytes loads */
            ndim = 0;
            nbytes = 1;
            if (!(bytes = calloc(1, 1)))
                goto oom;
            break;
        }
        ADD(key, dtype, ndim, shape, bytes, nbytes, bytes);
        free(key);
        key = NULL;
    }
    free(prefix);
    for (int i = 0; i < QS_PLANE_COUNT; i++)
        free(planes[i]);
    return 0;
oom:
    snprintf(c->err, sizeof c->err, "out of memory");
fail:
    free(ref);
    free(deq);
    free(prefix);
    free(key);
    for (int i = 0; i < QS_PLANE_COUNT; i++)
        free(planes[i]);
    return -1;
}

/*
 * Output keys a quantized tensor adds beside its own name (its scheme's other keys, with and
 * without double quantization, tools/checkpoint_keys.c): none may already exist. Returns the
 * first that does (from malloc, for the message), else NULL; *oom is set when memory ran out.
 * Each lookup is a binary search, so checking every tensor costs n log n.
 */
static char *collision(const struct qs_st_file *f, const char *name, int32_t format, int *oom)
{
    char *prefix = NULL, *key = NULL;

    *oom = 0;
    for (const struct qs_ckpt_key *k = qs_ckpt_keys(format); k && k->suffix; k++) {
        if (!*k->suffix)
            continue;
        if (k->module && !prefix && !(prefix = module_prefix(name))) {
            *oom = 1;
            break;
        }
        if (!(key = cat(k->module ? prefix : name, k->suffix))) {
            *oom = 1;
            break;
        }
        if (qs_st_find(f, key))
            break;
        free(key);
        key = NULL;
    }
    free(prefix);
    return key;
}

static int32_t cli_format(const char *name)
{
    /* "int8" on the command line is the bitsandbytes LLM.int8 layout (row-wise absmax). */
    if (strcmp(name, "int8") == 0 || strcmp(name, "llm_int8") == 0)
        return QS_FORMAT_LLM_INT8;
    return qs_format_from_name(name);
}

/* Quantized: 2-D, non-empty, a float dtype, named by --include and not by --exclude. */
static int selected(const struct qs_st_tensor *t, const regex_t *inc, const regex_t *exc)
{
    int32_t sdt;

    return t->ndim == 2 && t->numel > 0 && src_dtype_name(t->dtype, &sdt) &&
           regexec(inc, t->name, 0, NULL, 0) == 0 && regexec(exc, t->name, 0, NULL, 0) != 0;
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

int qs_cmd_quantize(int argc, char **argv)
{
    struct options o;
    struct qs_st_file in;
    struct qs_st_writer w;
    struct ctx_all c;
    struct layer_stat *stats = NULL;
    regex_t inc, exc;
    qs_ctx_params cp;
    qs_format_info fi;
    char err[ERRLEN];
    size_t nsel = 0, ncopy = 0, nstat = 0;
    int rc = 1, tty = isatty(2), have_re = 0;
    json_t *record = NULL;

    if (parse_args(argc, argv, &o) != 0)
        return 2;
    memset(&c, 0, sizeof c);
    c.format = cli_format(o.format);
    /* the formats the tool writes are those with a checkpoint-key scheme */
    if (!qs_ckpt_keys(c.format) || qs_format_info_get(c.format, &fi) != QS_OK) {
        fprintf(stderr,
                "qsparse quantize: unknown format '%s' (nf4, fp4, int8, fp8_e4m3, "
                "fp8_e5m2, mxfp4, mxfp8, nvfp4)\n",
                o.format);
        return 2;
    }
    if (o.double_quant && !(fi.options & QS_OPT_DOUBLE_QUANT)) {
        fprintf(stderr, "qsparse quantize: --double-quant applies to nf4 and fp4 only\n");
        return 2;
    }
    if (o.blocksize && fi.block_min == fi.block_max && o.blocksize != fi.block_size) {
        fprintf(stderr, "qsparse quantize: %s has a fixed block size of %d\n", o.format,
                fi.block_size);
        return 2;
    }
    if (regcomp(&inc, o.include ? o.include : DEFAULT_INCLUDE, REG_EXTENDED | REG_NOSUB) != 0) {
        fprintf(stderr, "qsparse quantize: bad --include regular expression\n");
        return 2;
    }
    if (regcomp(&exc, o.exclude ? o.exclude : DEFAULT_EXCLUDE,
                REG_EXTENDED | REG_NOSUB | (o.exclude ? 0 : REG_ICASE)) != 0) {
        fprintf(stderr, "qsparse quantize: bad --exclude regular expression\n");
        regfree(&inc);
        return 2;
    }
    have_re = 1;

    /* Before the input is mapped: a truncated input then gives a message, a signal removes the
     * temporary output. */
    qs_st_install_signal_cleanup();
    if (qs_st_open(&in, o.in, err, sizeof err) != 0) {
        print_error(err);
        regfree(&inc);
        regfree(&exc);
        return 1;
    }
    if (qs_calib_open(&o.cal, err, sizeof err) != 0) {
        print_error(err);
        qs_st_close(&in);
    qs_calib_close(&o.cal);
        regfree(&inc);
        regfree(&exc);
        return 1;
    }
    qs_ctx_params_init(&cp);
    cp.num_threads = o.threads;
    if (qs_ctx_create(&cp, &c.ctx) != QS_OK) {
        fprintf(stderr, "qsparse quantize: error: cannot create a library context\n");
        goto done;
    }
    qs_st_writer_init(&w);
    c.o = &o;
    if (check_params(&c) != 0) {
        fprintf(stderr, "qsparse quantize: %s\n", c.err);
        rc = 2;
        goto done_w;
    }
    c.w = &w;
    c.record = record = json_object();
    stats = calloc(in.count + 1, sizeof *stats);
    if (!record || !stats) {
        fprintf(stderr, "qsparse quantize: error: out of memory\n");
        goto done_w;
    }

    for (size_t i = 0; i < in.count; i++) {
        const struct qs_st_tensor *t = &in.tensors[i];
        nsel += selected(t, &inc, &exc);
    }
    for (size_t i = 0, done = 0; i < in.count; i++) {
        const struct qs_st_tensor *t = &in.tensors[i];
        char *clash;
        int oom;
        if (!selected(t, &inc, &exc)) {
            if (qs_st_writer_add(&w, t->name, t->dtype, t->ndim, t->shape, t->data,
                                 t->end - t->begin, NULL, err, sizeof err) != 0) {
                print_error(err);
                goto done_w;
            }
            ncopy++;
            continue;
        }
        if ((clash = collision(&in, t->name, c.format, &oom)) || oom) {
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
            free(clash);
            goto done_w;
        }
        if (tty && !o.quiet)
            progress_bar("quantizing", done, nsel, t->name);
        stats[nstat].name = (char *)t->name;
        if (quantize_one(&c, t, &stats[nstat]) != 0) {
            if (tty && !o.quiet)
                fputc('\n', stderr);
            print_error(c.err);
            goto done_w;
        }
        nstat++;
        done++;
        if (tty && !o.quiet && done == nsel)
            progress_bar("quantizing", done, nsel, "");
    }
    if (nsel == 0)
        fprintf(stderr, "qsparse quantize: warning: no tensor matched; copying the file\n");

    /* Metadata: the input's, plus what a reader needs to decode the non-bitsandbytes keys. */
    if (in.metadata) {
        const char *k;
        json_t *v;
        json_object_foreach(in.metadata, k, v) qs_st_writer_meta(&w, k, json_string_value(v));
    }
    {
        char *rec = json_dumps(record, JSON_COMPACT);
        if (!rec || qs_st_writer_meta(&w, "qsparse.quantized", rec) != 0 ||
            qs_st_writer_meta(&w, "qsparse.version", qs_version_string()) != 0) {
            free(rec);
            fprintf(stderr, "qsparse quantize: error: out of memory\n");
            goto done_w;
        }
        free(rec);
    }
    if (qs_st_writer_write(&w, o.out, tty && !o.quiet ? write_progress : NULL, NULL, err,
                           sizeof err) != 0) {
        print_error(err);
        goto done_w;
    }

    if (!o.quiet) {
        double before = file_size(o.in), after = file_size(o.out);
        printf("%-52s %11s %6s %10s %10s\n", "layer", "shape", "bits/w", "rel.RMSE", "max|err|");
        for (size_t i = 0; i < nstat; i++) {
            char shape[32], *name = qs_escape_dup(stats[i].name);
            snprintf(shape, sizeof shape, "%lldx%lld", (long long)stats[i].rows,
                     (long long)stats[i].cols);
            printf("%-52s %11s %6.3f %10.3e %10.3e\n", name ? name : "?", shape, stats[i].bits,
                   stats[i].rel_rmse, stats[i].max_abs);
            free(name);
        }
        qs_escape_print(stdout, o.out);
        printf(": %zu tensors quantized to %s, %zu copied; %.2f MB -> %.2f MB (%.2fx)\n", nstat,
               o.format, ncopy, before / 1e6, after / 1e6, after > 0 ? before / after : 0.0);
    }
    rc = 0;
done_w:
    qs_st_writer_free(&w);
    qs_ctx_destroy(c.ctx);
done:
    if (record)
        json_decref(record);
    free(stats);
    qs_st_close(&in);
    qs_calib_close(&o.cal);
    if (have_re) {
        regfree(&inc);
        regfree(&exc);
    }
    return rc;
}
