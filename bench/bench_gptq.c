/* SPDX-License-Identifier: MIT */
/*
 * GPTQ, SparseGPT and Hessian benchmark (docs/calibration.md §14 - §16), 2 threads by default:
 *
 * - qs_hessian_update against one OpenBLAS cblas_ssyrk of the same activations into an f32
 *   K x K matrix, in interleaved rounds (the ratio of the two in one run is the figure to quote);
 * - qs_gptq_quantize of a rows x K layer given its Hessian in every format GPTQ offers (NF4, FP4,
 *   INT8 by row and by group of 128, MXFP4 with and without its scale search, NVFP4), and
 *   qs_sparsegpt at 2:4 alone and jointly with NF4;
 * - where the time of one GPTQ goes: the double factorization LAPACK runs for it (dpotrf +
 *   dtrtri of the same K x K matrix; beside it the textbook dpotrf + dpotri + dpotrf it replaced)
 *   and the lazy-block updates alone (the same sequence of cblas_sgemm calls); the rest of a
 *   GPTQ line is the column sweep (quantize + in-block error propagation), the copies and the
 *   planes.
 *
 * Every line gives the minimum wall time and the minimum process CPU time over the repetitions:
 * on an oversubscribed machine wall time mostly measures waiting for a core, and CPU seconds /
 * threads is what a quiet machine's wall time would be (less the threads' idle spinning).
 *
 *   bench_gptq [K [rows [tokens [threads]]]]     defaults 4096 4096 8192 2
 */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#ifdef QS_HAVE_BLAS
#include <cblas.h>
#endif

#include "bench_util.h"
#include "qsparse.h"

#define REPS 3

#ifdef QS_HAVE_LAPACK
extern void dpotrf_(const char *uplo, const int *n, double *a, const int *lda, int *info, size_t);
extern void dtrtri_(const char *uplo, const char *diag, const int *n, double *a, const int *lda,
                    int *info, size_t, size_t);
extern void dpotri_(const char *uplo, const int *n, double *a, const int *lda, int *info, size_t);
#endif

static double cpu_now(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_PROCESS_CPUTIME_ID, &ts);
    return (double)ts.tv_sec + 1e-9 * (double)ts.tv_nsec;
}

/* minimum wall and CPU seconds over the repetitions of one kind */
struct timing {
    double wall, cpu;
};

static void timing_reset(struct timing *t)
{
    t->wall = t->cpu = 1e30;
}

static void timing_add(struct timing *t, double w0, double c0)
{
    double w = now() - w0, c = cpu_now() - c0;
    t->wall = w < t->wall ? w : t->wall;
    t->cpu = c < t->cpu ? c : t->cpu;
}

static float gauss(uint64_t *s)
{
    double u = 0.0;
    for (int i = 0; i < 4; i++) { /* sum of uniforms: cheap and bell-shaped */
        *s = *s * 6364136223846793005ull + 1442695040888963407ull;
        u += (double)(*s >> 11) * 0x1p-53;
    }
    return (float)(u - 2.0);
}

static void die(qs_ctx *ctx, const char *what)
{
    fprintf(stderr, "bench_gptq: %s: %s\n", what, qs_ctx_last_error(ctx));
    exit(1);
}

struct planes {
    qs_qtensor q;
    void *p[3];
    uint16_t *meta;
    int64_t meta_count;
};

/* the planes of p for rows x k (sp24: the compressed 2:4 + quantized weight and its meta) */
static void planes_new(qs_ctx *ctx, const qs_quant_params *p, int64_t rows, int64_t k, int sp24,
                       struct planes *o)
{
    int64_t b[3];
    memset(o, 0, sizeof *o);
    for (int i = 0; i < 3; i++) {
        qs_status st = sp24 ? qs_sp24_quant_size(p, rows, k, i, &b[i])
                            : qs_quant_size(p, rows, k, i, &b[i]);
        if (st != QS_OK)
            die(ctx, "size");
        o->p[i] = b[i] ? malloc((size_t)b[i]) : NULL;
    }
    o->q.data = o->p[0], o->q.data_bytes = b[0];
    o->q.scale = o->p[1], o->q.scale_bytes = b[1];
    o->q.zero_point = o->p[2], o->q.zero_point_bytes = b[2];
    if (sp24) {
        o->meta_count = rows * ((k + 15) / 16);
        o->meta = malloc((size_t)o->meta_count * sizeof(uint16_t));
    }
}

static void planes_free(struct planes *o)
{
    for (int i = 0; i < 3; i++)
        free(o->p[i]);
    free(o->meta);
}

static void print_line(const char *name, const struct timing *t, const char *note)
{
    printf("%-22s %8.3f s wall, %8.3f s CPU%s%s\n", name, t->wall, t->cpu, *note ? "  " : "",
           note);
}

static struct timing time_gptq(qs_ctx *ctx, const qs_quant_params *p, const float *w,
                               int64_t rows, int64_t k, const qs_hessian *h, int32_t scale_search)
{
    qs_gptq_params g;
    struct planes o;
    struct timing t;

    qs_gptq_params_init(&g);
    g.scale_search = scale_search;
    planes_new(ctx, p, rows, k, 0, &o);
    timing_reset(&t);
    for (int r = 0; r < REPS; r++) {
        double w0 = now(), c0 = cpu_now();
        if (qs_gptq_quantize(ctx, &g, p, w, rows, k, h, &o.q, NULL) != QS_OK)
            die(ctx, "gptq");
        timing_add(&t, w0, c0);
    }
    planes_free(&o);
    return t;
}

/* SparseGPT 2:4: p NULL for the dense pruned weight, else jointly quantized */
static struct timing time_sparsegpt(qs_ctx *ctx, const qs_quant_params *p, const float *w,
                                    int64_t rows, int64_t k, const qs_hessian *h)
{
    qs_sparsegpt_params sp;
    struct planes o;
    struct timing t;
    float *dense = p ? NULL : malloc((size_t)(rows * k) * sizeof(float));

    qs_sparsegpt_params_init(&sp);
    memset(&o, 0, sizeof o);
    if (p)
        planes_new(ctx, p, rows, k, 1, &o);
    timing_reset(&t);
    for (int r = 0; r < REPS; r++) {
        double w0 = now(), c0 = cpu_now();
        if (qs_sparsegpt(ctx, &sp, p, w, rows, k, h, dense, dense ? rows * k : 0,
                         p ? &o.q : NULL, o.meta, o.meta_count, NULL) != QS_OK)
            die(ctx, "sparsegpt");
        timing_add(&t, w0, c0);
    }
    if (p)
        planes_free(&o);
    free(dense);
    return t;
}

#if defined(QS_HAVE_BLAS) && defined(QS_HAVE_LAPACK)
/* The parts of one GPTQ that OpenBLAS runs, alone: the factorization of the dampened 2 S
 * (dpotrf + dtrtri in double, as linalg.c) and the lazy-block sgemm sequence (block 128). */
static void time_parts(qs_ctx *ctx, const qs_hessian *h, int64_t rows, int64_t k,
                       struct timing *fact, struct timing *textbook, struct timing *lazy)
{
    double *a = malloc((size_t)(k * k) * sizeof(double)), *hm = a;
    float *wc = malloc((size_t)(rows * k) * sizeof(float)), *u = malloc((size_t)(k * k) * 4);
    float *err = malloc((size_t)(rows * 128) * sizeof(float));
    uint64_t seed = 7;
    int n = (int)k, info = 0;

    if (qs_hessian_get(ctx, h, hm, k * k) != QS_OK)
        die(ctx, "get");
    double *h2 = malloc((size_t)(k * k) * sizeof(double));
    memcpy(h2, hm, (size_t)(k * k) * sizeof(double));
    for (int64_t i = 0; i < k; i++)
        h2[i * k + i] += 0.01 * h2[i * k + i] + 1e-3; /* dampened enough for any data */
    timing_reset(fact);
    for (int r = 0; r < REPS; r++) {
        memcpy(a, h2, (size_t)(k * k) * sizeof(double));
        double w0 = now(), c0 = cpu_now();
        dpotrf_("U", &n, a, &n, &info, 1);
        if (info == 0)
            dtrtri_("U", "N", &n, a, &n, &info, 1, 1);
        timing_add(fact, w0, c0);
        if (info != 0) {
            fprintf(stderr, "bench_gptq: the factorization failed (%d)\n", info);
            exit(1);
        }
    }
    /* the textbook route to the same factor, for comparison: chol(H), its inverse, chol again */
    timing_reset(textbook);
    for (int r = 0; r < REPS; r++) {
        double *b = malloc((size_t)(k * k) * sizeof(double));
        memcpy(b, h2, (size_t)(k * k) * sizeof(double));
        double w0 = now(), c0 = cpu_now();
        dpotrf_("L", &n, b, &n, &info, 1);
        if (info == 0)
            dpotri_("L", &n, b, &n, &info, 1);
        if (info == 0)
            dpotrf_("L", &n, b, &n, &info, 1);
        timing_add(textbook, w0, c0);
        free(b);
    }
    for (int64_t i = 0; i < k; i++)
        for (int64_t j = 0; j < k; j++)
            u[i * k + j] = j < i ? 0.0f : (float)a[j * k + i] * 1e-3f;
    for (int64_t i = 0; i < rows * 128; i++)
        err[i] = gauss(&seed);
    memset(wc, 0, (size_t)(rows * k) * sizeof(float));
    timing_reset(lazy);
    for (int r = 0; r < REPS; r++) {
        double w0 = now(), c0 = cpu_now();
        for (int64_t i1 = 0; i1 + 128 < k; i1 += 128)
            cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasNoTrans, (int)rows,
                        (int)(k - i1 - 128), 128, -1.0f, err, 128, u + i1 * k + i1 + 128,
                        (int)k, 1.0f, wc + i1 + 128, (int)k);
        timing_add(lazy, w0, c0);
    }
    free(a);
    free(h2);
    free(wc);
    free(u);
    free(err);
}
#endif

int main(int argc, char **argv)
{
    int64_t k = argc > 1 ? atoll(argv[1]) : 4096, rows = argc > 2 ? atoll(argv[2]) : 4096;
    int64_t tokens = argc > 3 ? atoll(argv[3]) : 8192;
    int threads = argc > 4 ? atoi(argv[4]) : 2;
    qs_ctx_params cp;
    qs_ctx *ctx;
    char cpu[256], note[160];
    uint64_t seed = 1;
    struct timing t;

    if (k < 1 || rows < 1 || tokens < 1 || threads < 1 || k % 128) {
        fprintf(stderr, "usage: bench_gptq [K [rows [tokens [threads]]]] (K a multiple of 128)\n");
        return 2;
    }
    qs_ctx_params_init(&cp);
    cp.num_threads = threads;
    if (qs_ctx_create(&cp, &ctx) != QS_OK)
        return 1;
#ifdef QS_HAVE_BLAS
    openblas_set_num_threads(threads); /* a benchmark may; the library never does */
#endif
    cpu_model(cpu, sizeof cpu);
    printf("bench_gptq: %s, %d threads, ISA %s, K = %lld, rows = %lld, tokens = %lld; "
           "minima of %d runs\n", cpu, threads, qs_ctx_isa_name(ctx), (long long)k,
           (long long)rows, (long long)tokens, REPS);

    float *x = malloc((size_t)(tokens * k) * sizeof(float));
    float *w = malloc((size_t)(rows * k) * sizeof(float));
    for (int64_t i = 0; i < tokens * k; i++)
        x[i] = gauss(&seed);
    for (int64_t i = 0; i < rows * k; i++)
        w[i] = 0.02f * gauss(&seed);

    /* Hessian accumulation against ssyrk of the same activations, rounds interleaved */
    struct timing th, ts;
    qs_hessian *h = NULL;
    timing_reset(&th);
    timing_reset(&ts);
#ifdef QS_HAVE_BLAS
    float *c = malloc((size_t)(k * k) * sizeof(float));
#endif
    for (int r = 0; r < REPS; r++) {
        qs_hessian *hr;
        if (qs_hessian_create(ctx, k, &hr) != QS_OK)
            die(ctx, "create");
        double w0 = now(), c0 = cpu_now();
        if (qs_hessian_update(ctx, hr, x, QS_DTYPE_F32, tokens, k) != QS_OK)
            die(ctx, "update");
        timing_add(&th, w0, c0);
        if (h)
            qs_hessian_destroy(hr);
        else
            h = hr;
#ifdef QS_HAVE_BLAS
        w0 = now(), c0 = cpu_now();
        cblas_ssyrk(CblasRowMajor, CblasUpper, CblasTrans, (int)k, (int)tokens, 1.0f, x, (int)k,
                    0.0f, c, (int)k);
        timing_add(&ts, w0, c0);
#endif
    }
    print_line("hessian update", &th, "");
#ifdef QS_HAVE_BLAS
    snprintf(note, sizeof note, "-> Hessian at %.0f%% of ssyrk's speed (wall), %.0f%% (CPU)",
             100.0 * ts.wall / th.wall, 100.0 * ts.cpu / th.cpu);
    print_line("cblas_ssyrk", &ts, note);
    free(c);
#else
    printf("cblas_ssyrk            (built without OpenBLAS)\n");
#endif

    static const struct {
        const char *name;
        int32_t format, granularity, group, search;
    } gptq_runs[] = {
        {"gptq nf4", QS_FORMAT_NF4, 0, 0, 1},
        {"gptq fp4", QS_FORMAT_FP4, 0, 0, 1},
        {"gptq int8 (row)", QS_FORMAT_INT8, QS_GRAN_ROW, 0, 1},
        {"gptq int8 (group 128)", QS_FORMAT_INT8, QS_GRAN_GROUP, 128, 1},
        {"gptq mxfp4", QS_FORMAT_MXFP4, 0, 0, 1},
        {"gptq mxfp4 (floor)", QS_FORMAT_MXFP4, 0, 0, 0},
        {"gptq nvfp4", QS_FORMAT_NVFP4, 0, 0, 1},
    };
    for (size_t i = 0; i < sizeof gptq_runs / sizeof gptq_runs[0]; i++) {
        qs_quant_params p;
        qs_quant_params_init(&p, gptq_runs[i].format);
        if (gptq_runs[i].granularity) {
            p.granularity = gptq_runs[i].granularity;
            p.block_size = gptq_runs[i].group;
        }
        t = time_gptq(ctx, &p, w, rows, k, h, gptq_runs[i].search);
        note[0] = 0;
        if (i == 0)
            snprintf(note, sizeof note, "(%lld x %lld, lazy block 128, block %d)",
                     (long long)rows, (long long)k, p.block_size);
        else if (gptq_runs[i].format == QS_FORMAT_MXFP4)
            snprintf(note, sizeof note, gptq_runs[i].search ? "(scale search, the default)"
                                                            : "(OCP floor rule, no search)");
        print_line(gptq_runs[i].name, &t, note);
    }
    t = time_sparsegpt(ctx, NULL, w, rows, k, h);
    print_line("sparsegpt 2:4", &t, "(dense pruned output)");
    qs_quant_params pn;
    qs_quant_params_init(&pn, QS_FORMAT_NF4);
    t = time_sparsegpt(ctx, &pn, w, rows, k, h);
    print_line("sparsegpt 2:4 + nf4", &t, "(compressed 2:4 + NF4 output)");
#if defined(QS_HAVE_BLAS) && defined(QS_HAVE_LAPACK)
    struct timing fact, textbook, lazy;
    time_parts(ctx, h, rows, k, &fact, &textbook, &lazy);
    print_line("  dpotrf + dtrtri", &fact, "(the factorization inside each GPTQ line)");
    print_line("  dpotrf+dpotri+dpotrf", &textbook, "(the textbook route it replaces)");
    print_line("  lazy sgemm", &lazy, "(the block updates inside each GPTQ line)");
#endif
    qs_hessian_destroy(h);
    free(x);
    free(w);
    qs_ctx_destroy(ctx);
    return 0;
}
