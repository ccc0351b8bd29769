/* SPDX-License-Identifier: MIT */
/*
 * `qsparse recommend MODEL [--calib FILE] [--max-error E] [--objective speed|size] [--layers N]
 * [--repeats N] [--threads N] [--json]`: which compressed form to write for this model on this
 * machine. A sample of the model's own linear weights (2-D float tensors named *.weight;
 * embeddings, norms and lm_head left out; --layers evenly spaced ones, default 6) goes through
 * qs_recommend (include/qsparse/recommend.h):
 *
 * - error: with --calib (the file of `quantize --method gptq`), the relative output error on the
 *   layer's own input activations (NAME.inputs, up to 64 tokens); without it, the relative error
 *   of the decoded weight. Never synthetic activations.
 * - speed: each layer is measured --repeats times (default 3); a row shows the median ratio
 *   against dense float32 and is flagged "unstable" when the runs of a layer differ by more than
 *   25% (a busy machine: the load average is printed and flagged too).
 * - rows: only what `qsparse quantize` can write, each with the command that writes it (the
 *   layout is checked as quantize checks it); the candidates it cannot write (asymmetric INT8,
 *   int8 activations chosen at run time, ...) are listed after the table with the reason.
 */
#define _POSIX_C_SOURCE 200809L

#include <ctype.h>
#include <math.h>
#include <regex.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <time.h>

#include "commands.h"
#include "escape.h"
#include "layout.h"
#include "qsparse.h"
#include "qsparse/recommend.h"
#include "safetensors.h"
#include "tool_ctx.h"
#include "tool_threads.h"
#include "heap.h"

#define MAX_REPEATS 9
#define UNSTABLE 1.25   /* max / min of a layer's speed runs above this: "unstable" */
#define CALIB_TOKENS 64 /* activation rows of the error measurement */

/*
 * What `qsparse quantize` writes for each of qs_recommend's candidates (by its label): the
 * options, and the format and parameters the layouts are checked with; args NULL with the reason
 * when the tool cannot write it.
 */
struct writable {
    const char *label, *args, *why_not;
    int32_t format, sparse24, double_quant, symmetric;
};

static const struct writable WRITABLE[] = {
    {"nf4 b64", "--format nf4", NULL, QS_FORMAT_NF4, 0, 0, 1},
    {"nf4 b64 + dq", "--format nf4 --double-quant", NULL, QS_FORMAT_NF4, 0, 1, 1},
    {"fp4 b64", "--format fp4", NULL, QS_FORMAT_FP4, 0, 0, 1},
    {"int8 row", "--format int8", NULL, QS_FORMAT_INT8, 0, 0, 1},
    {"int8 g128 asym", NULL, "asymmetric int8: the tool writes symmetric int8 only",
     QS_FORMAT_INT8, 0, 0, 0},
    {"int8 row / int8 act", NULL,
     "int8 activations are chosen at run time (qs.matmul(..., activations=\"int8\")), not "
     "written: see int8 row",
     QS_FORMAT_INT8, 0, 0, 1},
    {"llm.int8", NULL,
     "bitsandbytes runs LLM.int8 with int8 activations: see llm.int8 / int8 act",
     QS_FORMAT_LLM_INT8, 0, 0, 1},
    {"llm.int8 / int8 act", "--format llm_int8", NULL, QS_FORMAT_LLM_INT8, 0, 0, 1},
    {"fp8 e4m3", "--format fp8_e4m3", NULL, QS_FORMAT_FP8_E4M3, 0, 0, 1},
    {"fp8 e5m2", "--format fp8_e5m2", NULL, QS_FORMAT_FP8_E5M2, 0, 0, 1},
    {"mxfp4", "--format mxfp4", NULL, QS_FORMAT_MXFP4, 0, 0, 1},
    {"mxfp8", "--format mxfp8", NULL, QS_FORMAT_MXFP8, 0, 0, 1},
    {"nvfp4", "--format nvfp4", NULL, QS_FORMAT_NVFP4, 0, 0, 1},
    {"2:4 f32", "--format none --sparsity 2:4", NULL, QS_FORMAT_NONE, 1, 0, 1},
    {"2:4 + nf4", "--format nf4 --sparsity 2:4", NULL, QS_FORMAT_NF4, 1, 0, 1},
};

struct agg {
    char label[48];
    const char *kernel;
    char reason[96];
    int slow, layers;
    double bits_sum, weights, err_max, err_sum, log_gemv, log_gemv_mt, log_gemm;
    double spread; /* the largest max / min of one layer's GEMV runs */
    char command[256];
    const char *why_not; /* NULL: writable, with `command` */
    char why_buf[320];
};

static void usage(FILE *f)
{
    fprintf(f,
            "usage: qsparse recommend MODEL [--calib FILE] [--max-error E] [--objective "
            "speed|size]\n"
            "                          [--layers N] [--repeats N] [--threads N] [--json]\n\n"
            "MODEL is a .safetensors file or a model folder. Measures every form that `qsparse\n"
            "quantize` can write on a sample of the model's own linear weights on this machine\n"
            "and prints them ranked, each with the command that writes it:\n"
            "  error: with --calib FILE (NAME.inputs activations, as for quantize --method gptq)\n"
            "         the relative output error on those activations, else the relative error of\n"
            "         the decoded weights;\n"
            "  speed: GEMV (1 thread, all threads) and GEMM time of dense float32 over the\n"
            "         form's, the median of --repeats runs per layer (default 3); a row whose\n"
            "         runs differ by more than 25%% is marked unstable (a busy machine: run it\n"
            "         again when it is quiet).\n"
            "Default: --max-error 0.1 --objective speed --layers 6 --repeats 3.\n");
}

static int icontains(const char *s, const char *needle)
{
    size_t n = strlen(needle);
    for (; *s; s++) {
        size_t i = 0;
        while (i < n && s[i] && tolower((unsigned char)s[i]) == needle[i])
            i++;
        if (i == n)
            return 1;
    }
    return 0;
}

/* A linear layer's weight: what loaders replace (embeddings, norms and lm_head are kept). */
static int is_linear(const struct qs_st_tensor *t)
{
    size_t n = strlen(t->name);
    if (t->ndim != 2 || t->shape[0] < 16 || t->shape[1] < 16 || n < 7 ||
        strcmp(t->name + n - 7, ".weight") != 0)
        return 0;
    if (icontains(t->name, "embed") || icontains(t->name, "norm") ||
        icontains(t->name, "lm_head"))
        return 0;
    return strcmp(t->dtype, "F32") == 0 || strcmp(t->dtype, "F16") == 0 ||
           strcmp(t->dtype, "BF16") == 0;
}

static int32_t qs_dtype_of(const char *st)
{
    return strcmp(st, "F32") == 0 ? QS_DTYPE_F32 : strcmp(st, "F16") == 0 ? QS_DTYPE_F16
                                                                           : QS_DTYPE_BF16;
}

/* s as one shell word: as it is when it has only safe characters, else in single quotes. */
static const char *shell_quote(const char *s, char *buf, size_t n)
{
    size_t k = 0;
    int plain = *s != '\0';

    for (const char *p = s; *p; p++)
        if (!isalnum((unsigned char)*p) && !strchr("_./-+:=,@%", *p))
            plain = 0;
    if (plain)
        return s;
    buf[k++] = '\'';
    for (; *s && k + 5 < n; s++) {
        if (*s == '\'') {
            memcpy(buf + k, "'\\''", 4);
            k += 4;
        } else {
            buf[k++] = *s;
        }
    }
    buf[k++] = '\'';
    buf[k] = '\0';
    return buf;
}

/*
 * The command that writes candidate w for MODEL (a folder or one file): the first layout that
 * takes it, as quantize would check it (the input's default first). Returns the reason when no
 * layout does, else NULL with the command in cmd.
 */
static const char *command_for(const struct writable *w, const char *model, int folder, char *cmd,
                               size_t n)
{
    const struct qs_layout *order[4];
    struct qs_layout_req req;
    char err[256];
    int no = 0;

    if (!w->args)
        return w->why_not;
    memset(&req, 0, sizeof req);
    qs_quant_params_init(&req.params, w->format ? w->format : QS_FORMAT_FP8_E4M3);
    req.format = w->format;
    req.params.double_quant = w->double_quant;
    req.params.symmetric = w->symmetric;
    req.sparsity24 = w->sparse24;
    req.weight_dtype = "float32";
    order[no++] = folder ? qs_layout_default(w->format) : &qs_layout_qsparse;
    order[no++] = &qs_layout_ct;
    order[no++] = &qs_layout_bnb;
    for (int i = 0; i < no; i++) {
        if ((!folder || order[i] != &qs_layout_qsparse) &&
            order[i]->check(&req, err, sizeof err) == 0) {
            int dflt = order[i] == order[0];
            char quoted[2048];
            snprintf(cmd, n, "qsparse quantize %s -o %s %s%s%s",
                     shell_quote(model, quoted, sizeof quoted),
                     folder ? "OUT_DIR" : "OUT.safetensors", w->args,
                     dflt ? "" : " --layout ", dflt ? "" : order[i]->name);
            return NULL;
        }
    }
    return folder ? "no layout of a model folder holds it" : "no layout holds it";
}

/*
 * What quantize checks per tensor beyond the layout: 2:4 groups run along rows, and
 * compressed-tensors packs INT8 codes four to an int32 word, so for those every tensor the
 * default selection quantizes needs a row length that is a multiple of 4. Returns the reason (in
 * buf) when a tensor of f fails, else NULL.
 */
static const char *tensors_fit(const struct writable *w, int ct, const struct qs_st_file *f,
                               char *buf, size_t n)
{
    regex_t inc, exc;
    const char *why = NULL;

    if (!w->sparse24 && !(w->format == QS_FORMAT_INT8 && ct))
        return NULL;
    if (regcomp(&inc, QS_SELECT_INCLUDE, REG_EXTENDED | REG_NOSUB) != 0)
        return "out of memory";
    if (regcomp(&exc, QS_SELECT_EXCLUDE, REG_EXTENDED | REG_NOSUB | REG_ICASE) != 0) {
        regfree(&inc);
        return "out of memory";
    }
    for (size_t i = 0; i < f->count && !why; i++) {
        const struct qs_st_tensor *t = &f->tensors[i];
        if (t->ndim == 2 && t->shape[1] % 4 != 0 && regexec(&inc, t->name, 0, NULL, 0) == 0 &&
            regexec(&exc, t->name, 0, NULL, 0) != 0) {
            snprintf(buf, n, "%s; %.200s has rows of %lld",
                     w->sparse24 ? "2:4 needs rows of a multiple of 4"
                                 : "compressed-tensors packs int8 four to a word",
                     t->name, (long long)t->shape[1]);
            why = buf;
        }
    }
    regfree(&inc);
    regfree(&exc);
    return why;
}

static const struct writable *writable_of(const char *label)
{
    for (size_t i = 0; i < sizeof WRITABLE / sizeof WRITABLE[0]; i++)
        if (strcmp(WRITABLE[i].label, label) == 0)
            return &WRITABLE[i];
    return NULL;
}

static double median(double *v, int n)
{
    for (int i = 1; i < n; i++) /* insertion sort: n <= MAX_REPEATS */
        for (int j = i; j > 0 && v[j] < v[j - 1]; j--) {
            double t = v[j];
            v[j] = v[j - 1];
            v[j - 1] = t;
        }
    return n % 2 ? v[n / 2] : 0.5 * (v[n / 2 - 1] + v[n / 2]);
}

static struct agg *find_agg(struct agg *a, int *na, const char *label)
{
    int i = 0;
    while (i < *na && strcmp(a[i].label, label) != 0)
        i++;
    if (i == *na) {
        if (*na == QS_RECOMMEND_MAX_CANDIDATES)
            return NULL;
        memset(&a[i], 0, sizeof a[i]);
        snprintf(a[i].label, sizeof a[i].label, "%.47s", label);
        (*na)++;
    }
    return &a[i];
}

/* One layer's runs[0 .. r) of one candidate (the same label in every run) into its row. */
static void add(struct agg *g, qs_candidate runs[][QS_RECOMMEND_MAX_CANDIDATES],
                const int64_t *idx, int r, int64_t weights)
{
    const qs_candidate *c = &runs[0][idx[0]];
    double v1[MAX_REPEATS], vt[MAX_REPEATS], vm[MAX_REPEATS], lo1 = INFINITY, hi1 = 0.0,
           lot = INFINITY, hit = 0.0;

    g->kernel = c->kernel;
    if (c->slow) {
        g->slow = 1;
        snprintf(g->reason, sizeof g->reason, "%s", c->reason);
    }
    for (int k = 0; k < r; k++) {
        const qs_candidate *ck = &runs[k][idx[k]];
        v1[k] = ck->gemv_speedup > 0 ? ck->gemv_speedup : 1e-9;
        vt[k] = ck->gemv_speedup_mt > 0 ? ck->gemv_speedup_mt : 1e-9;
        vm[k] = ck->gemm_speedup > 0 ? ck->gemm_speedup : 1e-9;
        lo1 = fmin(lo1, v1[k]);
        hi1 = fmax(hi1, v1[k]);
        lot = fmin(lot, vt[k]);
        hit = fmax(hit, vt[k]);
    }
    /* each GEMV figure's runs (one thread, all threads) against each other */
    g->spread = fmax(g->spread, fmax(hi1 / lo1, hit / lot));
    g->layers++;
    g->bits_sum += c->bits_per_weight * (double)weights;
    g->weights += (double)weights;
    g->err_max = c->error > g->err_max ? c->error : g->err_max;
    g->err_sum += c->error;
    g->log_gemv += log(median(v1, r));
    g->log_gemv_mt += log(median(vt, r));
    g->log_gemm += log(median(vm, r));
}

static double max_error_g;
static int objective_g;

static int cmp_agg(const void *pa, const void *pb)
{
    const struct agg *a = pa, *b = pb;
    int ia = a->err_max <= max_error_g, ib = b->err_max <= max_error_g;
    if ((a->why_not != NULL) != (b->why_not != NULL))
        return a->why_not ? 1 : -1; /* what the tool cannot write goes last (and is not shown) */
    if (ia != ib)
        return ib - ia;
    if (!ia)
        return a->err_max < b->err_max ? -1 : 1;
    if (objective_g == QS_RECOMMEND_SIZE) {
        double ba = a->bits_sum / a->weights, bb = b->bits_sum / b->weights;
        if (ba != bb)
            return ba < bb ? -1 : 1;
    }
    return a->log_gemv > b->log_gemv ? -1 : a->log_gemv < b->log_gemv;
}

struct run_info {
    int layers, repeats, calib, busy;
    double secs;
    const char *isa;
    struct qs_tool_threads thr;
};

static void json_text(const char *s)
{
    putchar('"');
    for (; *s; s++)
        if (*s == '"' || *s == '\\')
            printf("\\%c", *s);
        else if ((unsigned char)*s < 0x20)
            printf("\\u%04x", (unsigned char)*s);
        else
            putchar(*s);
    putchar('"');
}

static void print_json(const struct agg *a, int na, const struct run_info *ri)
{
    int rank = 0;

    printf("{\"isa\": \"%s\", \"layers\": %d, \"repeats\": %d, \"seconds\": %.3f, "
           "\"max_error\": %g, \"error_on\": \"%s\", \"load_average\": %.2f, \"cores\": %d, "
           "\"busy\": %s, \"candidates\": [",
           ri->isa, ri->layers, ri->repeats, ri->secs, max_error_g,
           ri->calib ? "activations" : "weights", ri->thr.load, ri->thr.cores,
           ri->busy ? "true" : "false");
    for (int i = 0; i < na; i++) {
        const struct agg *g = &a[i];
        if (g->why_not)
            continue;
        printf("%s{\"rank\": %d, \"label\": \"%s\", \"command\": ", rank ? ", " : "", rank + 1,
               g->label);
        json_text(g->command);
        printf(", \"bits_per_weight\": %.4f, \"error_max\": %.6g, \"error_mean\": %.6g, "
               "\"within_error\": %s, \"gemv_speedup\": %.4f, \"gemv_speedup_mt\": %.4f, "
               "\"gemm_speedup\": %.4f, \"spread\": %.3f, \"stable\": %s, \"kernel\": \"%s\", "
               "\"slow\": %s, \"reason\": ",
               g->bits_sum / g->weights, g->err_max, g->err_sum / g->layers,
               g->err_max <= max_error_g ? "true" : "false", exp(g->log_gemv / g->layers),
               exp(g->log_gemv_mt / g->layers), exp(g->log_gemm / g->layers), g->spread,
               g->spread <= UNSTABLE ? "true" : "false", g->kernel ? g->kernel : "",
               g->slow ? "true" : "false");
        json_text(g->reason);
        printf("}");
        rank++;
    }
    printf("], \"left_out\": [");
    rank = 0;
    for (int i = 0; i < na; i++)
        if (a[i].why_not) {
            printf("%s{\"label\": \"%s\", \"why\": ", rank++ ? ", " : "", a[i].label);
            json_text(a[i].why_not);
            printf("}");
        }
    printf("]}\n");
}

static void print_words(const struct agg *a, int na, const struct run_info *ri)
{
    int rank = 0, unstable = 0;

    printf("%2s %-20s %6s %10s %10s %7s %7s %7s  %s\n", "#", "candidate", "bits/w",
           ri->calib ? "out err" : "w err", "err mean", "GEMV x", "GEMVxT", "GEMM x",
           "command / kernel (GEMV)");
    for (int i = 0; i < na; i++) {
        const struct agg *g = &a[i];
        if (g->why_not)
            continue;
        unstable += g->spread > UNSTABLE;
        printf("%2d %-20s %6.3f %10.3e %10.3e %7.2f %7.2f %7.2f  %s\n", ++rank, g->label,
               g->bits_sum / g->weights, g->err_max, g->err_sum / g->layers,
               exp(g->log_gemv / g->layers), exp(g->log_gemv_mt / g->layers),
               exp(g->log_gemm / g->layers), g->command);
        printf("   %-20s %s%s%s%s", "", g->kernel ? g->kernel : "",
               g->err_max <= max_error_g ? "" : "  (over --max-error)",
               g->slow ? "  slow: " : "", g->slow ? g->reason : "");
        if (g->spread > 100.0)
            printf("  unstable: runs differ more than 100x");
        else if (g->spread > UNSTABLE)
            printf("  unstable: runs differ up to %.1fx", g->spread);
        putchar('\n');
    }
    printf("\n%d layers sampled, %d runs each, isa %s, %.1f s. Error: %s. Speed: dense float32 "
           "time / candidate time, the median of the runs (geometric mean over layers; xT: all "
           "threads).\n",
           ri->layers, ri->repeats, ri->isa, ri->secs,
           ri->calib ? "relative output error on the --calib activations (max over layers)"
                     : "relative error of the decoded weights (max over layers; --calib FILE "
                       "gives the output error on real activations)");
    for (int i = 0; i < na; i++)
        if (a[i].why_not)
            printf("not written by the tool: %s (%s)\n", a[i].label, a[i].why_not);
    if (ri->busy)
        printf("warning: the machine is busy (load average %.2f on %d cores): the speed "
               "columns are not reliable (%d rows unstable); run again on a quiet machine.\n",
               ri->thr.load, ri->thr.cores, unstable);
    else if (unstable)
        printf("warning: %d rows unstable (their runs differ by more than %.0f%%): their speed "
               "is not reliable; run again on a quiet machine or with more --repeats.\n",
               unstable, (UNSTABLE - 1.0) * 100.0);
}

/* The first CALIB_TOKENS activation rows of NAME.inputs (f32, from malloc), or NULL with err. */
static float *calib_rows(qs_ctx *ctx, const struct qs_st_file *cf, const char *name, int64_t cols,
                         int64_t *rows, char *err, size_t errlen)
{
    size_t n = strlen(name);
    char key[768];
    const struct qs_st_tensor *t;
    float *x;

    if (n > 7 && strcmp(name + n - 7, ".weight") == 0)
        n -= 7;
    snprintf(key, sizeof key, "%.*s.inputs", (int)n, name);
    t = qs_st_find(cf, key);
    if (!t) {
        snprintf(err, errlen,
                 "--calib has no '%s' (the layer's input activations, [..., %lld]; a .hessian "
                 "cannot give the output error)",
                 key, (long long)cols);
        return NULL;
    }
    if (t->ndim < 1 || t->shape[t->ndim - 1] != cols ||
        (strcmp(t->dtype, "F32") != 0 && strcmp(t->dtype, "F16") != 0 &&
         strcmp(t->dtype, "BF16") != 0)) {
        snprintf(err, errlen, "--calib '%s' is not F32/F16/BF16 [..., %lld]", key,
                 (long long)cols);
        return NULL;
    }
    *rows = t->numel / cols < CALIB_TOKENS ? t->numel / cols : CALIB_TOKENS;
    if (*rows < 1) {
        snprintf(err, errlen, "--calib '%s' holds no tokens", key);
        return NULL;
    }
    x = qs_heap_malloc((size_t)(*rows * cols) * sizeof *x);
    if (!x || qs_convert(ctx, t->data, qs_dtype_of(t->dtype), x, QS_DTYPE_F32, *rows * cols,
                         *rows * cols * 4) != QS_OK) {
        qs_heap_free(x);
        snprintf(err, errlen, "cannot read '%s'", key);
        return NULL;
    }
    return x;
}

/* One layer: r runs of qs_recommend, matched by label, into the rows. Returns 0 or -1. */
static int measure(qs_ctx *ctx, const qs_recommend_params *rp, const struct qs_st_tensor *t,
                   const struct qs_st_file *cf, int r, struct agg *aggs, int *na, int json)
{
    static qs_candidate runs[MAX_REPEATS][QS_RECOMMEND_MAX_CANDIDATES];
    int64_t rows = t->shape[0], cols = t->shape[1], n = rows * cols, xr = 0, count[MAX_REPEATS];
    float *w = qs_heap_malloc((size_t)n * sizeof *w), *x = NULL;
    char err[1536];
    int rc = -1;

    if (!w || qs_convert(ctx, t->data, qs_dtype_of(t->dtype), w, QS_DTYPE_F32, n, n * 4) != QS_OK) {
        fprintf(stderr, "qsparse recommend: cannot read %s\n", t->name);
        goto done;
    }
    if (cf && !(x = calib_rows(ctx, cf, t->name, cols, &xr, err, sizeof err))) {
        fprintf(stderr, "qsparse recommend: %s: ", t->name);
        qs_escape_print(stderr, err);
        fputc('\n', stderr);
        goto done;
    }
    for (int k = 0; k < r; k++)
        if (qs_recommend(ctx, rp, w, rows, cols, x, xr, runs[k], QS_RECOMMEND_MAX_CANDIDATES,
                         &count[k]) != QS_OK) {
            fprintf(stderr, "qsparse recommend: %s: %s\n", t->name, qs_ctx_last_error(ctx));
            goto done;
        }
    for (int64_t c = 0; c < count[0]; c++) {
        int64_t idx[MAX_REPEATS];
        struct agg *g;
        idx[0] = c;
        for (int k = 1; k < r; k++) {
            idx[k] = 0;
            while (idx[k] < count[k] && strcmp(runs[k][idx[k]].label, runs[0][c].label) != 0)
                idx[k]++;
            if (idx[k] == count[k])
                idx[k] = c; /* the same set every run: cannot happen */
        }
        if ((g = find_agg(aggs, na, runs[0][c].label)) != NULL)
            add(g, runs, idx, r, n);
    }
    if (!json) {
        fprintf(stderr, "  measured ");
        qs_escape_print(stderr, t->name);
        fprintf(stderr, " (%lld x %lld)%s\n", (long long)rows, (long long)cols,
                x ? ", on its --calib activations" : "");
    }
    rc = 0;
done:
    qs_heap_free(w);
    qs_heap_free(x);
    return rc;
}

struct opts {
    const char *model, *calib;
    double max_error;
    int objective, layers, threads, json, repeats;
};

static int parse(int argc, char **argv, struct opts *o)
{
    memset(o, 0, sizeof *o);
    o->max_error = 0.1;
    o->objective = QS_RECOMMEND_SPEED;
    o->layers = 6;
    o->repeats = 3;
    for (int i = 1; i < argc; i++) {
        const char *a = argv[i];
        if (strcmp(a, "--help") == 0 || strcmp(a, "-h") == 0) {
            usage(stdout);
            exit(0);
        } else if (strcmp(a, "--json") == 0) {
            o->json = 1;
        } else if (strcmp(a, "--calib") == 0 && i + 1 < argc) {
            o->calib = argv[++i];
        } else if (strcmp(a, "--max-error") == 0 && i + 1 < argc) {
            char *end;
            o->max_error = strtod(argv[++i], &end);
            if (*end || !(o->max_error > 0) || !isfinite(o->max_error)) {
                fprintf(stderr, "qsparse recommend: --max-error must be a number > 0\n");
                return -1;
            }
        } else if (strcmp(a, "--objective") == 0 && i + 1 < argc) {
            const char *v = argv[++i];
            if (strcmp(v, "speed") == 0)
                o->objective = QS_RECOMMEND_SPEED;
            else if (strcmp(v, "size") == 0)
                o->objective = QS_RECOMMEND_SIZE;
            else {
                fprintf(stderr, "qsparse recommend: --objective is speed or size\n");
                return -1;
            }
        } else if ((strcmp(a, "--layers") == 0 || strcmp(a, "--threads") == 0 ||
                    strcmp(a, "--repeats") == 0) &&
                   i + 1 < argc) {
            char *end;
            long v = strtol(argv[++i], &end, 10);
            int *slot = a[2] == 'l' ? &o->layers : a[2] == 't' ? &o->threads : &o->repeats;
            long hi = a[2] == 'r' ? MAX_REPEATS : 4096;
            if (*end || v < (a[2] == 't' ? 0 : 1) || v > hi) {
                fprintf(stderr, "qsparse recommend: bad %s value (at most %ld)\n", a, hi);
                return -1;
            }
            *slot = (int)v;
        } else if (a[0] == '-' || o->model) {
            fprintf(stderr, "qsparse recommend: unexpected argument '%s' (see --help)\n", a);
            return -1;
        } else {
            o->model = a;
        }
    }
    if (!o->model) {
        usage(stderr);
        return -1;
    }
    return 0;
}

int qs_cmd_recommend(int argc, char **argv)
{
    struct opts o;
    char path[4096], err[1024];
    struct stat sb;
    struct qs_st_file f, cf;
    int folder, have_cf = 0, rc = 0, na = 0;
    struct agg aggs[QS_RECOMMEND_MAX_CANDIDATES];
    struct run_info ri;
    qs_ctx_params cp;
    qs_ctx *ctx = NULL;
    qs_recommend_params rp;
    struct timespec t0, t1;
    size_t nlin = 0;

    if (parse(argc, argv, &o) != 0)
        return 2;
    folder = stat(o.model, &sb) == 0 && S_ISDIR(sb.st_mode);
    snprintf(path, sizeof path, folder ? "%s/model.safetensors" : "%s", o.model);
    if (qs_st_open(&f, path, err, sizeof err) != 0) {
        fprintf(stderr, "qsparse recommend: ");
        qs_escape_print(stderr, err);
        fprintf(stderr, "\n");
        return 1;
    }
    if (o.calib && qs_st_open(&cf, o.calib, err, sizeof err) != 0) {
        fprintf(stderr, "qsparse recommend: --calib ");
        qs_escape_print(stderr, err);
        fprintf(stderr, "\n");
        qs_st_close(&f);
        return 1;
    }
    have_cf = o.calib != NULL;
    for (size_t i = 0; i < f.count; i++)
        nlin += (size_t)is_linear(&f.tensors[i]);
    if (nlin == 0) {
        fprintf(stderr, "qsparse recommend: no linear-layer weights (2-D float *.weight) in %s\n",
                path);
        rc = 1;
        goto out;
    }
    qs_ctx_params_init(&cp);
    cp.num_threads = o.threads;
    if (qs_tool_ctx_create(&cp, &ctx) != QS_OK) {
        fprintf(stderr, "qsparse recommend: cannot create a context\n");
        rc = 1;
        goto out;
    }
    memset(&ri, 0, sizeof ri);
    qs_tool_threads_init(&ri.thr, o.threads);
    ri.busy = ri.thr.load >= (double)ri.thr.cores - 0.5;
    qs_recommend_params_init(&rp);
    rp.max_error = (float)o.max_error;
    rp.objective = o.objective;
    ri.layers = 0;
    ri.repeats = o.repeats;
    ri.calib = have_cf;
    clock_gettime(CLOCK_MONOTONIC, &t0);
    {
        int take = o.layers < (int)nlin ? o.layers : (int)nlin;
        for (int s = 0; s < take && rc == 0; s++) {
            /* the s-th of `take` evenly spaced linear weights */
            size_t want = (size_t)((double)s * (double)(nlin - 1) / (take > 1 ? take - 1 : 1) +
                                   0.5);
            const struct qs_st_tensor *t = NULL;
            for (size_t i = 0, k = 0; i < f.count; i++)
                if (is_linear(&f.tensors[i]) && k++ == want) {
                    t = &f.tensors[i];
                    break;
                }
            if (measure(ctx, &rp, t, have_cf ? &cf : NULL, o.repeats, aggs, &na, o.json) != 0)
                rc = 1;
            else
                ri.layers++;
        }
    }
    clock_gettime(CLOCK_MONOTONIC, &t1);
    if (rc == 0) {
        for (int i = 0; i < na; i++) {
            const struct writable *w = writable_of(aggs[i].label);
            aggs[i].why_not = w ? command_for(w, o.model, folder, aggs[i].command,
                                              sizeof aggs[i].command)
                                : "not known to this tool";
            if (!aggs[i].why_not)
                aggs[i].why_not = tensors_fit(w, folder || strstr(aggs[i].command, "--layout"),
                                              &f, aggs[i].why_buf, sizeof aggs[i].why_buf);
        }
        max_error_g = o.max_error;
        objective_g = o.objective;
        qsort(aggs, (size_t)na, sizeof aggs[0], cmp_agg);
        ri.secs = (double)(t1.tv_sec - t0.tv_sec) + 1e-9 * (double)(t1.tv_nsec - t0.tv_nsec);
        ri.isa = qs_ctx_isa_name(ctx);
        if (o.json)
            print_json(aggs, na, &ri);
        else
            print_words(aggs, na, &ri);
    }
    qs_tool_ctx_done(ctx);
out:
    if (have_cf)
        qs_st_close(&cf);
    qs_st_close(&f);
    return rc;
}
