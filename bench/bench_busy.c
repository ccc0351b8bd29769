/* SPDX-License-Identifier: MIT */
/*
 * The library's default threading on a busy machine: the same calls through a context with the
 * default thread count and through one with a single thread, while busy processes (one busy loop
 * each, forked here) compete for the CPUs, and again without them. A call should cost about what
 * its work costs whatever else runs: a small call must not wait for threads that cannot get a
 * CPU, and a large one must still scale where CPUs are free.
 *
 *   bench_busy [--busy N] [--rounds R] [--check]
 *
 * Three workloads, each timed with the default threads and with one, interleaved in rounds:
 *   small   qs_quantize NF4 of 64 x 256 f32 (the README's example size), per call, timed one
 *           by one with 20 us of the caller's own work between calls (not timed)
 *   model   per tensor what `qsparse quantize` does: bf16 -> f32 conversion, NF4 quantize and
 *           dequantize of a 1024 x 2048 bf16 weight, 24 tensors (100 MB of bf16)
 *   large   qs_quantize NF4 of 4096 x 4096 f32 (64 MiB), per call
 * --busy N: busy processes beside the busy phase (default: CPUs + 1; 0 runs the quiet phase
 * only). --check exits 1 when, with the busy processes running, the default threads take more
 * than 1.5 times one thread's time for the small or the model workload (what a caller loses by
 * not choosing a thread count), and 0 otherwise. Medians over the rounds.
 */
#define _GNU_SOURCE
#include <signal.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/prctl.h>
#include <sys/types.h>
#include <sys/wait.h>
#include <unistd.h>

#include "bench_util.h"
#include "qsparse.h"

#define SMALL_ROWS 64
#define SMALL_COLS 256
#define SMALL_CALLS 50 /* calls per round; a round's time is divided by it */
#define MODEL_ROWS 1024
#define MODEL_COLS 2048
#define MODEL_TENSORS 24
#define LARGE_N 4096

struct work {
    float *small, *large, *back;
    uint16_t *model; /* MODEL_TENSORS bf16 weights */
    float *staged;   /* one f32 copy of a model weight */
    qs_qtensor qs, qm, ql;
    qs_quant_params p;
};

static void die(qs_ctx *ctx, const char *what)
{
    fprintf(stderr, "bench_busy: %s: %s\n", what, ctx ? qs_ctx_last_error(ctx) : "failed");
    exit(2);
}

static void alloc_q(const qs_quant_params *p, int64_t rows, int64_t cols, qs_qtensor *q)
{
    int64_t d, s;

    memset(q, 0, sizeof *q);
    if (qs_quant_size(p, rows, cols, QS_PLANE_DATA, &d) != QS_OK ||
        qs_quant_size(p, rows, cols, QS_PLANE_SCALE, &s) != QS_OK)
        die(NULL, "qs_quant_size");
    q->data = malloc((size_t)d);
    q->scale = malloc((size_t)s);
    q->data_bytes = d;
    q->scale_bytes = s;
    if (!q->data || !q->scale)
        die(NULL, "out of memory");
}

/* Deterministic values in [-1, 1), bf16 as the upper half of the f32 bits. */
static void fill(struct work *w)
{
    uint32_t s = 12345;
    size_t nm = (size_t)MODEL_TENSORS * MODEL_ROWS * MODEL_COLS;

    for (size_t i = 0; i < (size_t)LARGE_N * LARGE_N; i++) {
        s = s * 1664525u + 1013904223u;
        w->large[i] = (float)(int32_t)s * 0x1p-31f;
    }
    memcpy(w->small, w->large, sizeof(float) * SMALL_ROWS * SMALL_COLS);
    for (size_t i = 0; i < nm; i++) {
        uint32_t b;
        float f = w->large[i % ((size_t)LARGE_N * LARGE_N)] * 0.02f;
        memcpy(&b, &f, 4);
        w->model[i] = (uint16_t)(b >> 16);
    }
}

/* Between two small calls the caller does work of its own (a binding builds its arguments in
 * about 20 us): the calls are timed one by one, that work is not timed. */
static void caller_work(double seconds)
{
    double t0 = now();
    while (now() - t0 < seconds)
        ;
}

static double run_small(qs_ctx *ctx, struct work *w)
{
    double spent = 0.0;
    for (int i = 0; i < SMALL_CALLS; i++) {
        double t0;
        caller_work(20e-6);
        t0 = now();
        if (qs_quantize(ctx, &w->p, w->small, QS_DTYPE_F32, SMALL_ROWS, SMALL_COLS, &w->qs) !=
            QS_OK)
            die(ctx, "small quantize");
        spent += now() - t0;
    }
    return spent / SMALL_CALLS;
}

static double run_model(qs_ctx *ctx, struct work *w)
{
    const int64_t n = (int64_t)MODEL_ROWS * MODEL_COLS;
    double t0 = now();

    for (int t = 0; t < MODEL_TENSORS; t++) {
        const uint16_t *src = w->model + (size_t)t * (size_t)n;
        if (qs_convert(ctx, src, QS_DTYPE_BF16, w->staged, QS_DTYPE_F32, n, n * 4) != QS_OK ||
            qs_quantize(ctx, &w->p, src, QS_DTYPE_BF16, MODEL_ROWS, MODEL_COLS, &w->qm) !=
                QS_OK ||
            qs_dequantize(ctx, &w->p, &w->qm, MODEL_ROWS, MODEL_COLS, w->back, QS_DTYPE_F32,
                          n * 4) != QS_OK)
            die(ctx, "model tensor");
    }
    return now() - t0;
}

static double run_large(qs_ctx *ctx, struct work *w)
{
    double t0 = now();
    if (qs_quantize(ctx, &w->p, w->large, QS_DTYPE_F32, LARGE_N, LARGE_N, &w->ql) != QS_OK)
        die(ctx, "large quantize");
    return now() - t0;
}

typedef double run_fn(qs_ctx *ctx, struct work *w);

/* Median seconds of `rounds` runs of fn through each context, alternating. */
static void measure(qs_ctx *def, qs_ctx *one, struct work *w, run_fn *fn, int rounds,
                    double *t_def, double *t_one)
{
    double *a = malloc(sizeof(double) * (size_t)rounds);
    double *b = malloc(sizeof(double) * (size_t)rounds);

    if (!a || !b)
        die(NULL, "out of memory");
    fn(def, w); /* untimed: first touch of the outputs, the thread team started */
    fn(one, w);
    for (int r = 0; r < rounds; r++) {
        if (r & 1) {
            b[r] = fn(one, w);
            a[r] = fn(def, w);
        } else {
            a[r] = fn(def, w);
            b[r] = fn(one, w);
        }
    }
    *t_def = median(a, rounds);
    *t_one = median(b, rounds);
    free(a);
    free(b);
}

static pid_t *start_busy(int n)
{
    pid_t *pids = calloc((size_t)(n > 0 ? n : 1), sizeof *pids);

    if (!pids)
        die(NULL, "out of memory");
    for (int i = 0; i < n; i++) {
        pid_t pid = fork();
        if (pid == 0) {
            volatile uint64_t spin = 0;
            prctl(PR_SET_PDEATHSIG, SIGKILL); /* never outlives the benchmark */
            for (;;)
                spin++;
        }
        if (pid < 0)
            die(NULL, "fork");
        pids[i] = pid;
    }
    return pids;
}

static void stop_busy(pid_t *pids, int n)
{
    for (int i = 0; i < n; i++) {
        kill(pids[i], SIGKILL);
        waitpid(pids[i], NULL, 0);
    }
    free(pids);
}

struct result {
    double small[2], model[2], large[2]; /* default, one thread */
};

static void phase(const char *name, int busy, qs_ctx *def, qs_ctx *one, struct work *w,
                  int rounds, struct result *r)
{
    pid_t *pids = start_busy(busy);

    measure(def, one, w, run_small, rounds * 4, &r->small[0], &r->small[1]);
    measure(def, one, w, run_model, rounds, &r->model[0], &r->model[1]);
    measure(def, one, w, run_large, rounds, &r->large[0], &r->large[1]);
    stop_busy(pids, busy);
    printf("%-34s %12.1f %12.1f %7.2f\n", name, r->small[0] * 1e6, r->small[1] * 1e6,
           r->small[0] / r->small[1]);
    printf("%-34s %12.1f %12.1f %7.2f\n", "  model (24 x 1024x2048 bf16), ms", r->model[0] * 1e3,
           r->model[1] * 1e3, r->model[0] / r->model[1]);
    printf("%-34s %12.1f %12.1f %7.2f\n", "  large (4096x4096 f32), ms", r->large[0] * 1e3,
           r->large[1] * 1e3, r->large[0] / r->large[1]);
}

int main(int argc, char **argv)
{
    long cpus = sysconf(_SC_NPROCESSORS_ONLN);
    int busy = (int)(cpus > 0 ? cpus : 1) + 1, rounds = 7, check = 0;
    qs_ctx_params cp;
    qs_ctx *def = NULL, *one = NULL;
    struct work w;
    struct result quiet, loaded;
    char cpu[128];
    int64_t threads = 0;

    for (int i = 1; i < argc; i++) {
        if (strcmp(argv[i], "--busy") == 0 && i + 1 < argc) {
            busy = atoi(argv[++i]);
        } else if (strcmp(argv[i], "--rounds") == 0 && i + 1 < argc) {
            rounds = atoi(argv[++i]);
        } else if (strcmp(argv[i], "--check") == 0) {
            check = 1;
        } else {
            fprintf(stderr, "usage: bench_busy [--busy N] [--rounds R] [--check]\n");
            return 2;
        }
    }
    if (busy < 0 || rounds < 1) {
        fprintf(stderr, "bench_busy: --busy >= 0 and --rounds >= 1\n");
        return 2;
    }
    qs_ctx_params_init(&cp);
    if (qs_ctx_create(&cp, &def) != QS_OK)
        die(NULL, "qs_ctx_create");
    cp.num_threads = 1;
    if (qs_ctx_create(&cp, &one) != QS_OK)
        die(NULL, "qs_ctx_create");
    qs_ctx_get(def, QS_PARAM_NUM_THREADS, &threads);

    memset(&w, 0, sizeof w);
    qs_quant_params_init(&w.p, QS_FORMAT_NF4);
    w.small = malloc(sizeof(float) * SMALL_ROWS * SMALL_COLS);
    w.large = malloc(sizeof(float) * LARGE_N * LARGE_N);
    w.back = malloc(sizeof(float) * MODEL_ROWS * MODEL_COLS);
    w.staged = malloc(sizeof(float) * MODEL_ROWS * MODEL_COLS);
    w.model = malloc(sizeof(uint16_t) * MODEL_TENSORS * MODEL_ROWS * MODEL_COLS);
    if (!w.small || !w.large || !w.back || !w.staged || !w.model)
        die(NULL, "out of memory");
    alloc_q(&w.p, SMALL_ROWS, SMALL_COLS, &w.qs);
    alloc_q(&w.p, MODEL_ROWS, MODEL_COLS, &w.qm);
    alloc_q(&w.p, LARGE_N, LARGE_N, &w.ql);
    fill(&w);

    cpu_model(cpu, sizeof cpu);
    printf("bench_busy: libqsparse %s, isa %s, %s, %ld CPUs online, OMP_WAIT_POLICY=%s, "
           "default context: %d threads (0: OpenMP's default), median of %d rounds\n\n",
           qs_version_string(), qs_ctx_isa_name(def), cpu, cpus,
           getenv("OMP_WAIT_POLICY") ? getenv("OMP_WAIT_POLICY") : "(unset)", (int)threads,
           rounds);
    {
        FILE *f = fopen("/proc/loadavg", "r");
        char load[128] = "unknown";
        if (f) {
            if (fgets(load, sizeof load, f))
                load[strcspn(load, "\n")] = '\0';
            fclose(f);
        }
        printf("load average before the run: %s (other processes count as busy ones)\n\n", load);
    }
    printf("%-34s %12s %12s %7s\n", "busy processes added", "default", "1 thread", "ratio");
    phase("none added: small (64x256 f32), us", 0, def, one, &w, rounds, &quiet);
    if (busy > 0) {
        char name[64];
        snprintf(name, sizeof name, "%d busy: small (64x256 f32), us", busy);
        phase(name, busy, def, one, &w, rounds, &loaded);
    }

    qs_ctx_destroy(def);
    qs_ctx_destroy(one);
    if (check && busy > 0) {
        double rs = loaded.small[0] / loaded.small[1], rm = loaded.model[0] / loaded.model[1];
        int ok = rs <= 1.5 && rm <= 1.5;
        printf("\ncheck (%d busy processes: default / 1 thread <= 1.5): small %.2f, model %.2f: "
               "%s\n",
               busy, rs, rm, ok ? "pass" : "FAIL");
        return ok ? 0 : 1;
    }
    return 0;
}
