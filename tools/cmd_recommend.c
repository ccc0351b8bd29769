/* SPDX-License-Identifier: MIT */
/*
 * `qsparse recommend MODEL [--max-error E] [--objective speed|size] [--layers N] [--json]`:
 * which compressed form to use on this machine for this model. A sample of the model's linear
 * weights (2-D float tensors named *.weight, embeddings, norms and lm_head left out; --layers
 * evenly spaced ones, default 6) goes through qs_recommend (include/qsparse/recommend.h) with
 * synthetic Gaussian activations (32 tokens, a fixed seed), and the candidates are summed up over
 * the layers: bits per weight over all sampled weights, the worst and the mean output error, and
 * the geometric mean of the speed ratios against dense float32. A candidate is within the bound
 * when its worst layer is.
 */
#include <ctype.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <time.h>

#include "commands.h"
#include "escape.h"
#include "qsparse.h"
#include "qsparse/recommend.h"
#include "safetensors.h"
#include "tool_ctx.h"
#include "heap.h"

struct agg {
    char label[48];
    const char *kernel;
    char reason[96];
    int slow;
    int layers;
    double bits_sum, weights, err_max, err_sum, log_gemv, log_gemv_mt, log_gemm;
};

static void usage(FILE *f)
{
    fprintf(f, "usage: qsparse recommend MODEL [--max-error E] [--objective speed|size]\n"
               "                          [--layers N] [--threads N] [--json]\n\n"
               "MODEL is a .safetensors file or a folder holding model.safetensors. Measures every\n"
               "candidate format on a sample of the linear weights on this machine (output error\n"
               "on synthetic activations, size, GEMV/GEMM speed against dense float32) and prints\n"
               "them ranked. Default: --max-error 0.1 --objective speed --layers 6.\n");
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

static void add(struct agg *a, int *na, const qs_candidate *c, int64_t weights)
{
    int i = 0;
    while (i < *na && strcmp(a[i].label, c->label) != 0)
        i++;
    if (i == *na) {
        if (*na == QS_RECOMMEND_MAX_CANDIDATES)
            return;
        memset(&a[i], 0, sizeof a[i]);
        memcpy(a[i].label, c->label, sizeof a[i].label);
        a[i].label[sizeof a[i].label - 1] = '\0';
        (*na)++;
    }
    struct agg *g = &a[i];
    g->kernel = c->kernel;
    if (c->slow) {
        g->slow = 1;
        memcpy(g->reason, c->reason, sizeof g->reason);
        g->reason[sizeof g->reason - 1] = '\0';
    }
    g->layers++;
    g->bits_sum += c->bits_per_weight * (double)weights;
    g->weights += (double)weights;
    g->err_max = c->error > g->err_max ? c->error : g->err_max;
    g->err_sum += c->error;
    g->log_gemv += log(c->gemv_speedup > 0 ? c->gemv_speedup : 1e-9);
    g->log_gemv_mt += log(c->gemv_speedup_mt > 0 ? c->gemv_speedup_mt : 1e-9);
    g->log_gemm += log(c->gemm_speedup > 0 ? c->gemm_speedup : 1e-9);
}

static double max_error_g;
static int objective_g;

static int cmp_agg(const void *pa, const void *pb)
{
    const struct agg *a = pa, *b = pb;
    int ia = a->err_max <= max_error_g, ib = b->err_max <= max_error_g;
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

static void print_rows(const struct agg *a, int na, int json, double secs, int layers,
                       const char *isa)
{
    if (json) {
        printf("{\"isa\": \"%s\", \"layers\": %d, \"seconds\": %.3f, \"max_error\": %g, "
               "\"candidates\": [",
               isa, layers, secs, max_error_g);
        for (int i = 0; i < na; i++) {
            const struct agg *g = &a[i];
            printf("%s{\"rank\": %d, \"label\": \"%s\", \"bits_per_weight\": %.4f, "
                   "\"error_max\": %.6g, \"error_mean\": %.6g, \"within_error\": %s, "
                   "\"gemv_speedup\": %.4f, \"gemv_speedup_mt\": %.4f, \"gemm_speedup\": %.4f, "
                   "\"kernel\": \"%s\", \"slow\": %s, \"reason\": \"%s\"}",
                   i ? ", " : "", i + 1, g->label, g->bits_sum / g->weights, g->err_max,
                   g->err_sum / g->layers, g->err_max <= max_error_g ? "true" : "false",
                   exp(g->log_gemv / g->layers), exp(g->log_gemv_mt / g->layers),
                   exp(g->log_gemm / g->layers), g->kernel ? g->kernel : "",
                   g->slow ? "true" : "false", g->reason);
        }
        printf("]}\n");
        return;
    }
    printf("%2s %-22s %6s %10s %10s %7s %7s %7s  %s\n", "#", "candidate", "bits/w", "err max",
           "err mean", "GEMV x", "GEMVxT", "GEMM x", "kernel (GEMV)");
    for (int i = 0; i < na; i++) {
        const struct agg *g = &a[i];
        printf("%2d %-22s %6.3f %10.3e %10.3e %7.2f %7.2f %7.2f  %s%s%s%s\n", i + 1, g->label,
               g->bits_sum / g->weights, g->err_max, g->err_sum / g->layers,
               exp(g->log_gemv / g->layers), exp(g->log_gemv_mt / g->layers),
               exp(g->log_gemm / g->layers), g->kernel ? g->kernel : "",
               g->err_max <= max_error_g ? "" : "  (over --max-error)", g->slow ? "  slow: " : "",
               g->slow ? g->reason : "");
    }
    printf("\n%d layers sampled, isa %s, %.1f s. Speed: dense float32 time / candidate time "
           "(geometric mean over layers; xT: all threads).\n",
           layers, isa, secs);
}

int qs_cmd_recommend(int argc, char **argv)
{
    const char *model = NULL;
    double max_error = 0.1;
    int objective = QS_RECOMMEND_SPEED, layers = 6, threads = 0, json = 0;
    char path[4096], err[512];

    for (int i = 1; i < argc; i++) {
        const char *a = argv[i];
        if (strcmp(a, "--help") == 0 || strcmp(a, "-h") == 0) {
            usage(stdout);
            return 0;
        } else if (strcmp(a, "--json") == 0) {
            json = 1;
        } else if (strcmp(a, "--max-error") == 0 && i + 1 < argc) {
            char *end;
            max_error = strtod(argv[++i], &end);
            if (*end || !(max_error > 0) || !isfinite(max_error)) {
                fprintf(stderr, "qsparse recommend: --max-error must be a number > 0\n");
                return 2;
            }
        } else if (strcmp(a, "--objective") == 0 && i + 1 < argc) {
            const char *v = argv[++i];
            if (strcmp(v, "speed") == 0)
                objective = QS_RECOMMEND_SPEED;
            else if (strcmp(v, "size") == 0)
                objective = QS_RECOMMEND_SIZE;
            else {
                fprintf(stderr, "qsparse recommend: --objective is speed or size\n");
                return 2;
            }
        } else if ((strcmp(a, "--layers") == 0 || strcmp(a, "--threads") == 0) && i + 1 < argc) {
            char *end;
            long v = strtol(argv[++i], &end, 10);
            if (*end || v < (a[2] == 'l' ? 1 : 0) || v > 4096) {
                fprintf(stderr, "qsparse recommend: bad %s value\n", a);
                return 2;
            }
            *(a[2] == 'l' ? &layers : &threads) = (int)v;
        } else if (a[0] == '-' || model) {
            fprintf(stderr, "qsparse recommend: unexpected argument '%s' (see --help)\n", a);
            return 2;
        } else {
            model = a;
        }
    }
    if (!model) {
        usage(stderr);
        return 2;
    }
    struct stat sb;
    if (stat(model, &sb) == 0 && S_ISDIR(sb.st_mode))
        snprintf(path, sizeof path, "%s/model.safetensors", model);
    else
        snprintf(path, sizeof path, "%s", model);

    struct qs_st_file f;
    if (qs_st_open(&f, path, err, sizeof err) != 0) {
        fprintf(stderr, "qsparse recommend: ");
        qs_escape_print(stderr, err);
        fprintf(stderr, "\n");
        return 1;
    }
    size_t nlin = 0;
    for (size_t i = 0; i < f.count; i++)
        nlin += (size_t)is_linear(&f.tensors[i]);
    if (nlin == 0) {
        fprintf(stderr, "qsparse recommend: no linear-layer weights (2-D float *.weight) in %s\n",
                path);
        qs_st_close(&f);
        return 1;
    }

    qs_ctx_params cp;
    qs_ctx *ctx = NULL;
    qs_ctx_params_init(&cp);
    cp.num_threads = threads;
    if (qs_tool_ctx_create(&cp, &ctx) != QS_OK) {
        fprintf(stderr, "qsparse recommend: cannot create a context\n");
        qs_st_close(&f);
        return 1;
    }
    qs_recommend_params rp;
    qs_recommend_params_init(&rp);
    rp.max_error = (float)max_error;
    rp.objective = objective;
    int take = layers < (int)nlin ? layers : (int)nlin, na = 0, done = 0, rc = 0;
    struct agg aggs[QS_RECOMMEND_MAX_CANDIDATES];
    qs_candidate cands[QS_RECOMMEND_MAX_CANDIDATES];
    struct timespec t0, t1;
    clock_gettime(CLOCK_MONOTONIC, &t0);
    for (int s = 0; s < take && rc == 0; s++) {
        /* the s-th of `take` evenly spaced linear weights */
        size_t want = (size_t)((double)s * (double)(nlin - 1) / (take > 1 ? take - 1 : 1) + 0.5);
        const struct qs_st_tensor *t = NULL;
        for (size_t i = 0, k = 0; i < f.count; i++)
            if (is_linear(&f.tensors[i]) && k++ == want) {
                t = &f.tensors[i];
                break;
            }
        int64_t rows = t->shape[0], cols = t->shape[1], n = rows * cols, xr = 32;
        float *w = qs_heap_malloc((size_t)n * sizeof *w), *x = qs_heap_malloc((size_t)(xr * cols) * sizeof *x);
        int64_t count = 0;
        if (!w || !x || qs_convert(ctx, t->data, qs_dtype_of(t->dtype), w, QS_DTYPE_F32, n,
                                   n * 4) != QS_OK) {
            fprintf(stderr, "qsparse recommend: cannot read %s\n", t->name);
            rc = 1;
        } else {
            uint64_t st = 0x9E3779B97F4A7C15ull;
            for (int64_t i = 0; i < xr * cols; i += 2) { /* Box-Muller, fixed seed */
                double u1, u2;
                st = st * 6364136223846793005ull + 1442695040888963407ull;
                u1 = ((double)(st >> 11) + 1.0) / 9007199254740993.0;
                st = st * 6364136223846793005ull + 1442695040888963407ull;
                u2 = (double)(st >> 11) / 9007199254740992.0;
                x[i] = (float)(sqrt(-2.0 * log(u1)) * cos(6.283185307179586 * u2));
                if (i + 1 < xr * cols)
                    x[i + 1] = (float)(sqrt(-2.0 * log(u1)) * sin(6.283185307179586 * u2));
            }
            if (qs_recommend(ctx, &rp, w, rows, cols, x, xr, cands, QS_RECOMMEND_MAX_CANDIDATES,
                             &count) != QS_OK) {
                fprintf(stderr, "qsparse recommend: %s: %s\n", t->name, qs_ctx_last_error(ctx));
                rc = 1;
            } else {
                for (int64_t c = 0; c < count; c++)
                    add(aggs, &na, &cands[c], n);
                done++;
                if (!json) {
                    fprintf(stderr, "  measured ");
                    qs_escape_print(stderr, t->name);
                    fprintf(stderr, " (%lld x %lld)\n", (long long)rows, (long long)cols);
                }
            }
        }
        qs_heap_free(w);
        qs_heap_free(x);
    }
    clock_gettime(CLOCK_MONOTONIC, &t1);
    if (rc == 0) {
        max_error_g = max_error;
        objective_g = objective;
        qsort(aggs, (size_t)na, sizeof aggs[0], cmp_agg);
        print_rows(aggs, na, json,
                   (double)(t1.tv_sec - t0.tv_sec) + 1e-9 * (double)(t1.tv_nsec - t0.tv_nsec),
                   done, qs_ctx_isa_name(ctx));
    }
    qs_tool_ctx_done(ctx);
    qs_st_close(&f);
    return rc;
}
