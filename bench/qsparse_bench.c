/* SPDX-License-Identifier: MIT */
/*
 * qsparse-bench: throughput of libqsparse measured as ratios in one run. It prints the context
 * (CPU model, detected ISA, the kernel chosen per slot at every ISA level, thread counts,
 * OPENBLAS_CORETYPE as found in the environment), then times qs_quantize and qs_dequantize of a
 * size x size f32 matrix for every format of the public API at every ISA level the machine has
 * (one context per tier of the library's tier table, bench_tiers.h) with the quiet-machine
 * protocol: threads pinned to CPUs, one thread timed by its own CPU clock (time the scheduler
 * gives other processes is not counted), rounds that interleave a read pass (sum of the f32
 * input) and a copy pass (memcpy of it) with quantize and dequantize on the same data in a
 * rotating order, each timed call right after an untimed one of the same pass (protocol() says
 * why), and the minimum of each pass over the rounds. It reports ns/value and the ratios
 * quantize : read and dequantize : memcpy per format and ISA tier, and with --bnb PATH
 * bitsandbytes' own CPU dequantize of NF4 / FP4 on the same planes (by both clocks, with the
 * spread of the ratio round by round); the Markdown summary is the README's table. Finally every
 * entry of the kernel registry (src/core/kernels.inc) the CPU can run is timed against its __ref
 * kernel (minimum of repeats), called as its slot's entry in tests/harness/kernel_call.c (the calls
 * test_kernels checks) with the typical parameters; an entry whose slot has no call there is
 * printed as an error and makes the exit status 1, so no slot is skipped silently. Registered with
 * Meson's benchmark(); `--check` (one call of every entry, no timing) runs as the test
 * bench-coverage.
 */
#define _GNU_SOURCE /* sched_setaffinity, CPU_SET */
#include <dlfcn.h>
#include <math.h>
#include <sched.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#ifdef _OPENMP
#include <omp.h>
#endif

#include "../tests/harness/kernel_call.h"
#include "bench_tiers.h"
#include "core/internal.h"
#include "core/kernels.h"
#include "qsparse.h"

#define MAX_LEVELS 8
#define MAX_THREADS 4        /* entries of --threads */
#define MAX_THREAD_COUNT 64  /* largest value of one entry */

typedef struct {
    const char *kernel; /* substring filter on format and kernel names, NULL for all */
    const char *isa;    /* comma-separated level names, NULL for all */
    int64_t size;       /* matrix rows = cols */
    int64_t kernel_n;   /* elements per kernel call */
    int threads[MAX_THREADS];
    int nthreads;
    int reps;
    double budget; /* seconds per measurement after which repeats stop (at least 3 run) */
    int wall;      /* 1: wall clock for single-thread work too */
    const char *bnb; /* path of bitsandbytes' libbitsandbytes_cpu.so, NULL: not measured */
} options;

typedef bench_tier level;

static double clock_s(clockid_t id)
{
    struct timespec ts;
    clock_gettime(id, &ts);
    return (double)ts.tv_sec + 1e-9 * (double)ts.tv_nsec;
}

static double now_s(void)
{
    return clock_s(CLOCK_MONOTONIC);
}

/* One warm-up call, then repeats until `reps` or the time budget (never fewer than 3); minimum.
 * Work on one thread is timed with this thread's CPU clock, which leaves out the time other
 * processes of a shared machine take from it (a wall-clock call longer than a scheduler slice
 * would count their share too); work on several threads can only be timed by the wall clock. */
static double time_min(void (*fn)(void *), void *arg, int threads, const options *o)
{
    clockid_t id = threads == 1 && !o->wall ? CLOCK_THREAD_CPUTIME_ID : CLOCK_MONOTONIC;
    double best = -1.0, start;
    int k = 0;

    fn(arg);
    start = now_s();
    while (k < o->reps) {
        double t0 = clock_s(id);
        fn(arg);
        double t = clock_s(id) - t0;
        best = best < 0 || t < best ? t : best;
        if (++k >= 3 && now_s() - start > o->budget)
            break;
    }
    return best;
}

static void *xalloc(size_t bytes)
{
    void *p = NULL;
    if (posix_memalign(&p, 64, bytes ? bytes : 64) != 0) {
        fprintf(stderr, "qsparse-bench: out of memory (%zu bytes)\n", bytes);
        exit(1);
    }
    return p;
}

static uint64_t rng_next(uint64_t *s)
{
    uint64_t z = (*s += 0x9E3779B97F4A7C15ull);
    z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ull;
    z = (z ^ (z >> 27)) * 0x94D049BB133111EBull;
    return z ^ (z >> 31);
}

/* Roughly normal values (sum of four uniforms), like trained weights; a few larger outliers. */
static void fill_weights(float *x, int64_t n, uint64_t seed)
{
    for (int64_t i = 0; i < n; i++) {
        uint64_t r = rng_next(&seed);
        float s = (float)(r & 0xFFFF) + (float)((r >> 16) & 0xFFFF) + (float)((r >> 32) & 0xFFFF) +
                  (float)((r >> 48) & 0xFFFF);
        x[i] = (s * (1.0f / 65536.0f) - 2.0f) * 1.7f;
        if ((r & 0xFFF) == 0)
            x[i] *= 8.0f;
    }
}

/* The CPUs this process may run on (pin_init), in order. */
static int cpu_allowed[MAX_THREAD_COUNT], cpu_allowed_n;

/* The first line of /proc/loadavg: how loaded the machine was when the run started. */
static const char *loadavg(void)
{
    static char line[128] = "unknown";
    FILE *f = fopen("/proc/loadavg", "r");

    if (f) {
        if (fgets(line, sizeof line, f))
            line[strcspn(line, "\n")] = 0;
        fclose(f);
    }
    return line;
}

/* ---- context --------------------------------------------------------------------------- */

static void print_cpu_model(void)
{
    char line[512], model[256] = "unknown";
    FILE *f = fopen("/proc/cpuinfo", "r");

    if (f) {
        while (fgets(line, sizeof line, f)) {
            if (strncmp(line, "model name", 10) == 0 || strncmp(line, "Model", 5) == 0) {
                const char *c = strchr(line, ':');
                if (c) {
                    snprintf(model, sizeof model, "%s", c + 2);
                    model[strcspn(model, "\n")] = 0;
                    break;
                }
            }
        }
        fclose(f);
    }
    printf("cpu model          : %s\n", model);
}

static qs_ctx *make_ctx(uint32_t mask, int threads)
{
    qs_ctx_params p;
    qs_ctx *ctx = NULL;

    qs_ctx_params_init(&p);
    p.isa_mask = mask;
    p.num_threads = threads;
    if (qs_ctx_create(&p, &ctx) != QS_OK) {
        fprintf(stderr, "qsparse-bench: qs_ctx_create failed\n");
        exit(1);
    }
    return ctx;
}

static void print_context(const level *lv, int nlv, const options *o)
{
    uint32_t cpu = qs_cpu_isa();
    const char *ct = getenv("OPENBLAS_CORETYPE"), *force = getenv("QS_FORCE_ISA");

    printf("qsparse-bench, libqsparse %s\n", qs_version_string());
    print_cpu_model();
    printf("detected ISA       :");
    for (int b = 0; b < 32; b++)
        if (cpu & (1u << b))
            printf(" %s", qs_isa_name(1u << b));
    printf("%s\n", cpu ? "" : " (none: scalar only)");
    printf("QS_FORCE_ISA       : %s\n", force ? force : "(unset)");
    printf("OPENBLAS_CORETYPE  : %s\n", ct ? ct : "(unset)");
#ifdef _OPENMP
    printf("OpenMP             : yes, omp_get_max_threads() = %d\n", omp_get_max_threads());
#else
    printf("OpenMP             : no (the 2-thread rows run on one thread)\n");
#endif
    printf("threads measured   :");
    for (int t = 0; t < o->nthreads; t++)
        printf(" %d", o->threads[t]);
    printf("\nmatrix             : %lld x %lld f32 (%.1f MiB); kernel calls: %lld elements\n",
           (long long)o->size, (long long)o->size,
           (double)o->size * (double)o->size * 4.0 / 1048576.0, (long long)o->kernel_n);
    printf("repeats            : minimum of up to %d rounds after one warm-up (%.1f s budget each;\n"
           "                     every timed call right after an untimed one of the same pass)\n",
           o->reps, o->budget);
    printf("clock              : %s\n",
           o->wall ? "wall clock for everything"
                   : "1 thread: the thread's CPU time (d/bnb also by the wall clock); more "
                     "threads: wall clock");
    printf("pinned to CPUs     :");
    for (int c = 0; c < cpu_allowed_n; c++)
        printf(" %d", cpu_allowed[c]);
    printf(" (thread t of a team on the t-th)\n");
    printf("load average       : %s\n\n", loadavg());

    /* Kernel chosen per slot at every level. */
    qs_ctx *ctx[MAX_LEVELS];
    printf("%-22s", "kernel per slot");
    for (int l = 0; l < nlv; l++) {
        ctx[l] = make_ctx(lv[l].mask, 1);
        printf(" %-30s", lv[l].name);
    }
    printf("\n");
    for (int32_t s = 0; s < qs_ctx_kernel_count(ctx[0]); s++) {
        const char *slot, *impl;
        qs_ctx_kernel_info(ctx[0], s, &slot, &impl);
        printf("%-22s", slot);
        for (int l = 0; l < nlv; l++) {
            qs_ctx_kernel_info(ctx[l], s, &slot, &impl);
            printf(" %-30s", impl);
        }
        printf("\n");
    }
    for (int l = 0; l < nlv; l++)
        qs_ctx_destroy(ctx[l]);
    printf("\n");
}

/* ---- memory bandwidth ---------------------------------------------------------------------- */

typedef struct {
    const float *x;
    float *y;
    int64_t n;
    int threads;
    volatile float sink;
} bw_job;

/* Sixteen independent accumulators: no reassociation is needed to keep the loads streaming. The
 * line 8 KiB ahead is prefetched, as the streaming kernels do, so the baseline is the best read
 * this machine gives, not the hardware prefetcher's alone. */
static float sum_span(const float *x, int64_t n)
{
    float acc[16] = {0};
    int64_t i = 0;

    for (; i + 16 <= n; i += 16) {
        /* the address as an integer: past the end of x, a pointer would be undefined */
        __builtin_prefetch((const void *)((uintptr_t)(x + i) + 4 * 2048));
        for (int k = 0; k < 16; k++)
            acc[k] += x[i + k];
    }
    for (; i < n; i++)
        acc[0] += x[i];
    for (int k = 1; k < 16; k++)
        acc[0] += acc[k];
    return acc[0];
}

static void bw_read(void *arg)
{
    bw_job *j = arg;
    float part[MAX_THREAD_COUNT * 16] = {0}; /* a cache line per thread */

#ifdef _OPENMP
#pragma omp parallel num_threads(j->threads)
#endif
    {
        int t = 0, nt = 1;
#ifdef _OPENMP
        t = omp_get_thread_num();
        nt = omp_get_num_threads();
#endif
        int64_t lo = j->n * t / nt, hi = j->n * (t + 1) / nt;
        part[t * 16] = sum_span(j->x + lo, hi - lo);
    }
    for (int t = 1; t < j->threads; t++)
        part[0] += part[t * 16];
    j->sink = part[0];
}

static void bw_copy(void *arg)
{
    bw_job *j = arg;

#ifdef _OPENMP
#pragma omp parallel num_threads(j->threads)
#endif
    {
        int t = 0, nt = 1;
#ifdef _OPENMP
        t = omp_get_thread_num();
        nt = omp_get_num_threads();
#endif
        int64_t lo = j->n * t / nt, hi = j->n * (t + 1) / nt;
        memcpy(j->y + lo, j->x + lo, (size_t)(hi - lo) * sizeof(float));
    }
}

/* ---- public API ---------------------------------------------------------------------------- */

/* Pin the calling thread (threads == 1) or each thread of an OpenMP team of `threads` to its own
 * CPU of the process's allowed set, so that the scheduler cannot migrate a measurement between
 * cores halfway. The team's threads are the pool the library's parallel loops reuse. Nothing
 * happens where the allowed set is smaller than the team. */
static void pin_init(void)
{
#ifdef __linux__
    cpu_set_t set;
    CPU_ZERO(&set);
    if (sched_getaffinity(0, sizeof set, &set) == 0)
        for (int c = 0; c < CPU_SETSIZE && cpu_allowed_n < MAX_THREAD_COUNT; c++)
            if (CPU_ISSET(c, &set))
                cpu_allowed[cpu_allowed_n++] = c;
#endif
}

static void pin_self(int slot)
{
#ifdef __linux__
    cpu_set_t set;
    CPU_ZERO(&set);
    CPU_SET(cpu_allowed[slot], &set);
    (void)sched_setaffinity(0, sizeof set, &set);
#else
    (void)slot;
#endif
}

static void pin_threads(int threads)
{
    if (threads > cpu_allowed_n)
        return;
#ifdef _OPENMP
    omp_set_num_threads(threads); /* the team size bitsandbytes' kernel (--bnb) uses */
    if (threads > 1) {
#pragma omp parallel num_threads(threads)
        pin_self(omp_get_thread_num());
    }
#endif
    pin_self(0);
}

/* bitsandbytes' CPU dequantize of NF4 / FP4 to f32 (its C symbols, loaded with --bnb), called
 * exactly as bitsandbytes.functional.dequantize_4bit calls it on CPU tensors: (A, absmax, out,
 * blocksize, m, n) over an m x n matrix. Same packing as libqsparse (element 2j in the high nibble,
 * f32 absmax per block), so both read the same planes. */
typedef void bnb_deq_fn(const uint8_t *a, const float *absmax, float *out, long long blocksize,
                        long long m, long long n);
static bnb_deq_fn *bnb_nf4, *bnb_fp4;

static int bnb_load(const char *path)
{
    void *h = dlopen(path, RTLD_NOW | RTLD_LOCAL);
    if (!h) {
        fprintf(stderr, "qsparse-bench: --bnb %s: %s\n", path, dlerror());
        return -1;
    }
    *(void **)&bnb_nf4 = dlsym(h, "cdequantize_blockwise_cpu_nf4_fp32");
    *(void **)&bnb_fp4 = dlsym(h, "cdequantize_blockwise_cpu_fp4_fp32");
    if (!bnb_nf4 || !bnb_fp4) {
        fprintf(stderr, "qsparse-bench: --bnb %s: no cdequantize_blockwise_cpu_{nf4,fp4}_fp32\n",
                path);
        return -1;
    }
    return 0;
}

typedef struct {
    qs_ctx *ctx;
    qs_quant_params p;
    const float *src;
    float *dst;
    int64_t rows, cols;
    qs_qtensor q;
    qs_status st;
    bnb_deq_fn *bnb;
} api_job;

static void api_quant(void *arg)
{
    api_job *j = arg;
    j->st = qs_quantize(j->ctx, &j->p, j->src, QS_DTYPE_F32, j->rows, j->cols, &j->q);
}

static void api_dequant(void *arg)
{
    api_job *j = arg;
    j->st = qs_dequantize(j->ctx, &j->p, &j->q, j->rows, j->cols, j->dst, QS_DTYPE_F32,
                          j->rows * j->cols * 4);
}

static void api_bnb(void *arg)
{
    api_job *j = arg;
    j->bnb(j->q.data, j->q.scale, j->dst, j->p.block_size, j->rows, j->cols);
}

static int alloc_planes(api_job *j)
{
    void **ptr[QS_PLANE_COUNT] = {&j->q.data, &j->q.scale, &j->q.zero_point, &j->q.nested_scale};
    int64_t *cap[QS_PLANE_COUNT] = {&j->q.data_bytes, &j->q.scale_bytes, &j->q.zero_point_bytes,
                                    &j->q.nested_scale_bytes};

    memset(&j->q, 0, sizeof j->q);
    for (int32_t pl = 0; pl < QS_PLANE_COUNT; pl++) {
        int64_t bytes = 0;
        if (qs_quant_size(&j->p, j->rows, j->cols, pl, &bytes) != QS_OK)
            return -1;
        if (bytes > 0) {
            *ptr[pl] = xalloc((size_t)bytes);
            memset(*ptr[pl], 0, (size_t)bytes);
            *cap[pl] = bytes;
        }
    }
    return 0;
}

static void free_planes(api_job *j)
{
    free(j->q.data);
    free(j->q.scale);
    free(j->q.zero_point);
    free(j->q.nested_scale);
}

/* The passes of one protocol round. */
enum { P_READ, P_COPY, P_QUANT, P_DEQ, P_BNB, P_COUNT };

#define MAX_ROUNDS 64

/* Per format, level and thread count: each pass's minimum seconds on the protocol's clock (`s`)
 * and on the wall clock (`w`), < 0 when not measured; and the spread of bitsandbytes' time over
 * ours paired within each round (`pair`: first quartile, median, third quartile). */
#define NFORMATS 11
typedef struct {
    double s[P_COUNT], w[P_COUNT], pair[3];
    int rounds;
} api_result;
static api_result api_r[NFORMATS][MAX_LEVELS][MAX_THREADS];

static int cmp_double(const void *a, const void *b)
{
    double x = *(const double *)a, y = *(const double *)b;
    return x < y ? -1 : x > y;
}

/* The protocol, for one format and level, every thread count of --threads in the same rounds:
 * pin, one warm-up of every pass, then rounds that, for each thread count in turn, run read,
 * copy, quantize, dequantize and bitsandbytes' dequantize on the same data, the order rotating
 * by one pass each round, so that whatever load the machine has, and the drift of this VM's
 * memory bandwidth over minutes, hit every pass and thread count alike (measured one after the
 * other, the 1-thread and 2-thread minima of one format came from different phases and their
 * ratio moved by 0.5). Each timed call comes right after an untimed call of the same pass: a
 * pass that writes with plain stores leaves up to an L3 of dirty lines whose write-back the next
 * pass pays, so timing a call after another kind of pass charged one pass for another's writes
 * (bitsandbytes' plain stores for our streaming ones); after a call of its own kind, each pass
 * pays for exactly the write-backs it leaves (the steady state of a loop of dequantizes). One
 * thread is timed by its own CPU clock and by the wall clock, more threads by the wall clock;
 * each pass keeps its minimum over the rounds (the run least disturbed), and the ratio
 * bitsandbytes : ours is also taken round by round, whose quartiles say how stable the ratio of
 * the minima is. */
static void protocol(api_job *j, qs_ctx *const *ctx, const options *o, api_result *res)
{
    bw_job bw = {j->src, j->dst, j->rows * j->cols, 1, 0.0f};
    void (*fn[P_COUNT])(void *) = {bw_read, bw_copy, api_quant, api_dequant, api_bnb};
    void *arg[P_COUNT] = {&bw, &bw, j, j, j};
    double start, pair[MAX_THREADS][MAX_ROUNDS];
    int np = 0, calls[MAX_THREADS][P_COUNT];
    qs_status st = QS_OK;

    for (int ti = 0; ti < o->nthreads; ti++) {
        api_result *res_t = &res[ti];
        j->ctx = ctx[ti];
        bw.threads = o->threads[ti];
        pin_threads(bw.threads);
        for (int p = 0; p < P_COUNT; p++) {
            res_t->s[p] = res_t->w[p] = -1.0;
            calls[ti][p] = 1;
            if (p != P_BNB || j->bnb) {
                /* the warm-up call sets how many calls one timing spans: at least 2 ms, so that
                 * a pass of a matrix in the cache (tens of microseconds) is not one clock tick's
                 * worth and the round-by-round ratios are not noise */
                double w0 = now_s();
                fn[p](arg[p]);
                double w = now_s() - w0;
                calls[ti][p] = w >= 2e-3 ? 1 : w <= 2e-3 / 64 ? 64 : (int)ceil(2e-3 / w);
            }
        }
        st = j->st != QS_OK ? j->st : st;
        res_t->rounds = 0;
    }
    start = now_s();
    for (int r = 0; r < o->reps && r < MAX_ROUNDS; r++) {
        for (int ti = 0; ti < o->nthreads; ti++) {
            api_result *res_t = &res[ti];
            const clockid_t id =
                o->threads[ti] == 1 && !o->wall ? CLOCK_THREAD_CPUTIME_ID : CLOCK_MONOTONIC;
            double deq = -1.0, bnb = -1.0;
            j->ctx = ctx[ti];
            bw.threads = o->threads[ti];
            pin_threads(bw.threads);
            for (int q = 0; q < P_COUNT; q++) {
                int p = (q + r) % P_COUNT;
                if (p == P_BNB && !j->bnb)
                    continue;
                fn[p](arg[p]); /* untimed: the write-backs the timed call pays are its kind's */
                double c0 = clock_s(id), w0 = now_s();
                for (int c = 0; c < calls[ti][p]; c++)
                    fn[p](arg[p]);
                double w = (now_s() - w0) / calls[ti][p];
                double t = (clock_s(id) - c0) / calls[ti][p];
                if (res_t->s[p] < 0 || t < res_t->s[p])
                    res_t->s[p] = t;
                if (res_t->w[p] < 0 || w < res_t->w[p])
                    res_t->w[p] = w;
                if (p == P_DEQ)
                    deq = t;
                if (p == P_BNB)
                    bnb = t;
            }
            if (deq > 0 && bnb > 0)
                pair[ti][r] = bnb / deq;
            res_t->rounds++;
        }
        np++;
        if (r >= 2 && now_s() - start > o->budget)
            break;
    }
    for (int ti = 0; ti < o->nthreads; ti++) {
        api_result *res_t = &res[ti];
        res_t->pair[0] = res_t->pair[1] = res_t->pair[2] = -1.0;
        if (j->bnb && np > 0) {
            qsort(pair[ti], (size_t)np, sizeof pair[ti][0], cmp_double);
            res_t->pair[0] = pair[ti][np / 4];
            res_t->pair[1] = pair[ti][np / 2];
            res_t->pair[2] = pair[ti][(3 * np) / 4 < np ? (3 * np) / 4 : np - 1];
        }
    }
    j->st = st != QS_OK ? st : j->st;
}

/* The summary row of one format: ns/value per level, then the ratios of the best level (the last
 * one) for one thread and, per other thread count, the speedup over one thread. */
static void summary_cells(int f, int op, int nlv, int t1, const options *o, double values)
{
    const int pass = op ? P_DEQ : P_QUANT, base = op ? P_COPY : P_READ;
    const api_result *best = &api_r[f][nlv - 1][t1];

    printf(" ");
    for (int l = 0; l < nlv; l++) {
        double s = api_r[f][l][t1].s[pass];
        if (s > 0)
            printf("%s%.3f", l ? " / " : "", s * 1e9 / values);
        else
            printf("%s-", l ? " / " : "");
    }
    printf(" | %.2f |", best->s[base] / best->s[pass]);
    if (op && bnb_nf4) {
        if (best->s[P_BNB] > 0)
            printf(" %.2f (%.2f-%.2f) |", best->s[P_BNB] / best->s[pass], best->pair[0],
                   best->pair[2]);
        else
            printf(" - |");
    }
    for (int t = 0; t < o->nthreads; t++) {
        if (o->threads[t] == 1)
            continue;
        /* wall over wall: the 1-thread CPU clock leaves out every interruption that the wall
         * clock of more threads pays, which biased this ratio down by up to 0.1 (measured) */
        double w = api_r[f][nlv - 1][t].w[pass];
        if (w > 0 && best->w[pass] > 0)
            printf(" %.2f |", best->w[pass] / w);
        else
            printf(" - |");
    }
}

static void bench_api(const level *lv, int nlv, const options *o, const float *src, float *dst)
{
    /* FP8 E4M3 and NVFP4 twice: with the scale from the data (two passes: the tensor amax, then
     * the codes) and with the same scale given (one pass) */
    static const int32_t formats[NFORMATS] = {
        QS_FORMAT_NF4,      QS_FORMAT_FP4,      QS_FORMAT_INT8,     QS_FORMAT_LLM_INT8,
        QS_FORMAT_FP8_E4M3, QS_FORMAT_FP8_E4M3, QS_FORMAT_FP8_E5M2, QS_FORMAT_MXFP4,
        QS_FORMAT_MXFP8,    QS_FORMAT_NVFP4,    QS_FORMAT_NVFP4};
    static const int given[NFORMATS] = {0, 0, 0, 0, 0, 1, 0, 0, 0, 0, 1};
    char names[NFORMATS][32];
    float amax = 0.0f;
    const double values = (double)o->size * (double)o->size;
    int t1 = -1; /* index of the 1-thread entry of --threads */

    for (int t = 0; t < o->nthreads; t++)
        if (o->threads[t] == 1 && t1 < 0)
            t1 = t;
    printf("== public API: qs_quantize / qs_dequantize, %lld x %lld f32 (%.1f MiB) ==\n",
           (long long)o->size, (long long)o->size, values * 4.0 / 1048576.0);
    printf("Protocol: pinned threads; per format and ISA tier, rounds that run for each thread\n"
           "count in turn read (sum), copy (memcpy), quantize, dequantize%s on the\n"
           "same data, the order rotating each round, every timing (of as many calls as last 2 ms) right after an\n"
           "untimed call of the same pass; each pass keeps its minimum over the rounds.\n"
           "q/read = read time / quantize time (1.0: quantize at read bandwidth), d/copy = copy\n"
           "time / dequantize time (the f32 output is what both write).%s 2T/1T: the speedup\n"
           "of 2 threads over 1, wall clock over wall clock. fp8_e4m3/s, nvfp4/s: the same formats with the scale given\n"
           "(quantize reads the input once).\n",
           bnb_nf4 ? ", bitsandbytes' dequantize" : "",
           bnb_nf4 ? "\nd/bnb = bitsandbytes' time / ours (NF4, FP4) on the protocol's clock, then on the\n"
                     "wall clock, then the quartiles of that ratio taken round by round."
                   : "");
    printf("%-10s %-7s %3s %9s %7s %8s %7s %6s %6s %-11s %6s %s\n", "format", "isa", "thr",
           "quant ns", "q/read", "deq ns", "d/copy", "d/bnb", "wall", "[q1 med q3]", "read",
           "GB/s rounds");
    for (int f = 0; f < NFORMATS; f++)
        for (int l = 0; l < MAX_LEVELS; l++)
            for (int t = 0; t < MAX_THREADS; t++)
                for (int p = 0; p < P_COUNT; p++)
                    api_r[f][l][t].s[p] = api_r[f][l][t].w[p] = -1.0;
    for (int64_t i = 0; i < o->size * o->size; i++)
        amax = fabsf(src[i]) > amax ? fabsf(src[i]) : amax;
    for (int f = 0; f < NFORMATS; f++)
        snprintf(names[f], sizeof names[f], "%s%s", qs_format_name(formats[f]),
                 given[f] ? "/s" : "");
    for (int f = 0; f < NFORMATS; f++) {
        const char *fname = names[f];
        if (o->kernel && !strstr(fname, o->kernel))
            continue;
        api_job j;
        memset(&j, 0, sizeof j);
        qs_quant_params_init(&j.p, formats[f]);
        if (given[f]) /* the scale the data gives, passed in: quantize reads the input once */
            j.p.scale = amax / (formats[f] == QS_FORMAT_NVFP4 ? 2688.0f : 448.0f);
        j.src = src;
        j.dst = dst;
        j.rows = o->size;
        j.cols = o->size;
        j.bnb = formats[f] == QS_FORMAT_NF4 ? bnb_nf4 : formats[f] == QS_FORMAT_FP4 ? bnb_fp4 : NULL;
        if (alloc_planes(&j) != 0) {
            printf("%-10s (qs_quant_size failed)\n", fname);
            continue;
        }
        for (int l = 0; l < nlv; l++) {
            qs_ctx *ctx[MAX_THREADS];
            for (int t = 0; t < o->nthreads; t++)
                ctx[t] = make_ctx(lv[l].mask, o->threads[t]);
            j.st = QS_OK;
            protocol(&j, ctx, o, api_r[f][l]);
            for (int t = 0; t < o->nthreads; t++)
                qs_ctx_destroy(ctx[t]);
            for (int t = 0; t < o->nthreads; t++) {
                api_result *r = &api_r[f][l][t];
                const double *b = r->s;
                if (j.st != QS_OK) {
                    printf("%-10s %-7s %3d  failed: %s\n", fname, lv[l].name, o->threads[t],
                           qs_status_str(j.st));
                    r->s[P_QUANT] = r->s[P_DEQ] = -1.0;
                    continue;
                }
                printf("%-10s %-7s %3d %9.3f %7.2f %8.3f %7.2f", fname, lv[l].name,
                       o->threads[t], b[P_QUANT] * 1e9 / values, b[P_READ] / b[P_QUANT],
                       b[P_DEQ] * 1e9 / values, b[P_COPY] / b[P_DEQ]);
                if (b[P_BNB] > 0)
                    printf(" %6.2f %6.2f [%.2f %.2f %.2f]", b[P_BNB] / b[P_DEQ],
                           r->w[P_BNB] / r->w[P_DEQ], r->pair[0], r->pair[1], r->pair[2]);
                else
                    printf(" %6s %6s %-16s", "-", "-", "");
                printf(" %6.2f %d\n", values * 4.0 / b[P_READ] / 1e9, r->rounds);
                fflush(stdout);
            }
        }
        free_planes(&j);
    }

    /* The summary, the README's table: per format, ns/value at every level (1 thread), the
     * ratios of the best level and its speedup on more threads, quantize and dequantize side by
     * side. */
    printf("\n== summary (Markdown): %lld x %lld f32 (%.1f MiB), %s; ratios of minima in the "
           "same rounds ==\n",
           (long long)o->size, (long long)o->size, values * 4.0 / 1048576.0,
           o->wall ? "wall clock" : "1 thread on its CPU clock, nT / 1T on the wall clock");
    if (t1 < 0)
        return;
    printf("| format | quantize ns/value (");
    for (int l = 0; l < nlv; l++)
        printf("%s%s", l ? " / " : "", lv[l].name);
    printf(") | quantize : read |");
    for (int t = 0; t < o->nthreads; t++)
        if (o->threads[t] != 1)
            printf(" quantize %dT / 1T |", o->threads[t]);
    printf(" dequantize ns/value (");
    for (int l = 0; l < nlv; l++)
        printf("%s%s", l ? " / " : "", lv[l].name);
    printf(") | dequantize : memcpy |");
    if (bnb_nf4)
        printf(" dequantize : bitsandbytes (per-round quartiles) |");
    for (int t = 0; t < o->nthreads; t++)
        if (o->threads[t] != 1)
            printf(" dequantize %dT / 1T |", o->threads[t]);
    printf("\n|---|---|---|");
    for (int t = 0; t < o->nthreads; t++)
        if (o->threads[t] != 1)
            printf("---|");
    printf("---|---|%s", bnb_nf4 ? "---|" : "");
    for (int t = 0; t < o->nthreads; t++)
        if (o->threads[t] != 1)
            printf("---|");
    printf("\n");
    for (int f = 0; f < NFORMATS; f++) {
        if (api_r[f][nlv - 1][t1].s[P_QUANT] < 0 || api_r[f][nlv - 1][t1].s[P_DEQ] < 0)
            continue;
        printf("| %s |", names[f]);
        summary_cells(f, 0, nlv, t1, o, values);
        summary_cells(f, 1, nlv, t1, o, values);
        printf("\n");
    }
}

/* ---- kernels.inc entries ------------------------------------------------------------------- */

/* One timed call: a registry entry's function on a case of its slot (the slot's call and typical
 * parameters are its entry in tests/harness/kernel_call.c, which test_kernels sweeps too). */
typedef struct {
    const kc_case *c;
    kc_fn *fn;
    uint8_t *out;
} k_job;

static void kernel_call(void *arg)
{
    const k_job *j = arg;
    kc_call(j->c, j->fn, j->out);
}

/* The tier of an entry, as its name says: "avx2" of qs_nf4_quant__avx2, "avx512-vnni" of
 * qs_mm_w8a8__avx512vnni_4x4x64 (the id of the tier table), "scalar" for __ref. */
static const char *tier_name(const struct qs_kernel_entry *e)
{
    qs_isa_tier t;
    return qs_isa_tier_info(qs_isa_tier_of_kernel(e->name), &t) == QS_OK ? t.name : "?";
}

/* Time every registry entry this CPU can run (or, with check, call it once); returns the number
 * of entries whose slot has no runner here, each printed as an error. */
static int bench_kernels(const options *o, int check)
{
    int32_t count;
    const struct qs_kernel_entry *e = qs_kernel_entries(&count);
    uint32_t cpu = qs_cpu_isa();
    const int64_t n = (o->kernel_n + 15) & ~(int64_t)15;
    float *x = xalloc((size_t)n * 4), *absmax = xalloc((size_t)n * 4);
    uint8_t *codes = xalloc((size_t)n), *sbytes = xalloc((size_t)n);
    uint16_t *half = xalloc((size_t)n * 2);
    const size_t out_bytes = (size_t)n * 9 + 64; /* srste: two f32 planes and a mask */
    uint8_t *out = xalloc(out_bytes);
    uint64_t seed = 7;
    double ref_ns[QS_SLOT_COUNT];
    int missing = 0, calls = 0;

    fill_weights(x, n, 3);
    for (int64_t i = 0; i < n; i++) {
        uint64_t r = rng_next(&seed);
        codes[i] = (uint8_t)r;
        /* plausible scale bytes for E8M0 (2^-15 ... 2^-2) and UE4M3 (16 ... 240), never NaN */
        sbytes[i] = (uint8_t)(0x70 + (r >> 8) % 14);
        half[i] = (uint16_t)(0x3000 + (r >> 16) % 0x1000); /* f16 in [0.125, 1) */
        absmax[i] = 0.5f + (float)((r >> 32) & 0xFF) / 64.0f;
    }
    memset(out, 0, out_bytes);
    const kc_in in = {x, codes, sbytes, half, absmax, n, 0, 1, out_bytes};
    if (check)
        printf("== registry check: every entry this CPU runs, called once on %lld elements ==\n",
               (long long)n);
    else {
        printf("== kernels.inc entries, %lld elements per call, single thread ==\n", (long long)n);
        printf("%-36s %-12s %9s %8s %9s\n", "kernel", "tier", "ns/value", "GB/s", "vs __ref");
    }
    for (int32_t s = 0; s < QS_SLOT_COUNT; s++)
        ref_ns[s] = -1.0;
    for (int32_t i = 0; i < count; i++) {
        if (o->kernel && !strstr(e[i].name, o->kernel))
            continue;
        const char *tier = tier_name(&e[i]);
        if (e[i].isa != 0 && !bench_name_in_list(tier, o->isa))
            continue;
        if (!kc_entry_runs(&e[i])) {
            printf("%-36s %-12s skipped: this CPU lacks ISA bits 0x%x%s\n", e[i].name, tier,
                   e[i].isa & ~cpu, (e[i].isa & ~cpu) ? "" : " (the OS refused the AMX state)");
            continue;
        }
        kc_case c;
        int set = kc_setup(&c, e[i].slot, &in);
        if (set <= 0) {
            printf("%-36s %-12s error: %s for slot %s\n", e[i].name, tier,
                   set < 0 ? "out of memory setting up the call"
                           : "tests/harness/kernel_call.c has no entry",
                   qs_slot_name(e[i].slot));
            missing++;
            continue;
        }
        k_job j = {&c, e[i].fn, out};
        kernel_call(&j);
        calls++;
        if (!check) {
            if (e[i].isa != 0 && ref_ns[e[i].slot] < 0) {
                /* the reference of this slot, for the ratio, even if filtered out above */
                for (int32_t r = 0; r < count; r++)
                    if (e[r].slot == e[i].slot && e[r].isa == 0) {
                        k_job jr = {&c, e[r].fn, out};
                        ref_ns[e[i].slot] = time_min(kernel_call, &jr, 1, o) * 1e9 / (double)n;
                    }
            }
            double ns = time_min(kernel_call, &j, 1, o) * 1e9 / (double)n;
            if (e[i].isa == 0)
                ref_ns[e[i].slot] = ns;
            printf("%-36s %-12s %9.3f %8.2f", e[i].name, tier, ns, 4.0 / ns);
            if (e[i].isa != 0 && ref_ns[e[i].slot] > 0)
                printf(" %8.1fx", ref_ns[e[i].slot] / ns);
            printf("\n");
            fflush(stdout);
        }
        kc_release(&c);
    }
    if (!check)
        printf("(GB/s counts 4 bytes per element, the f32 side of the kernel)\n");
    printf("%d entries run, %d without a call%s\n", calls, missing,
           missing ? " (add an entry to tests/harness/kernel_call.c)" : "");
    free(x);
    free(absmax);
    free(codes);
    free(sbytes);
    free(half);
    free(out);
    return missing;
}

/* ---- main ---------------------------------------------------------------------------------- */

static void usage(void)
{
    printf("usage: qsparse-bench [--kernel SUBSTR] [--isa LIST] [--size N] [--threads LIST]\n"
           "                     [--reps N] [--bnb PATH] [--quick] [--wall] [--no-api]\n"
           "                     [--no-kernels] [--check]\n"
           "  --kernel SUBSTR  only formats / kernel names containing SUBSTR (e.g. nvfp4)\n"
           "  --isa LIST       ISA tiers, comma-separated names of the library's tier table\n"
           "                   (scalar,avx2,avx512,neon,...); a tier this CPU lacks is listed\n"
           "  --size N         matrix N x N for the public API and bandwidth (default 4096)\n"
           "  --threads LIST   thread counts, comma-separated, at most %d (default 1,2)\n"
           "  --reps N         rounds of the protocol (default 15; it stops after 3 once the\n"
           "                   rounds have taken 5 s)\n"
           "  --bnb PATH       also time bitsandbytes' CPU dequantize of NF4 / FP4 from its\n"
           "                   libbitsandbytes_cpu.so (the file in the PyPI package)\n"
           "  --quick          smaller sizes, fewer repeats (a smoke run)\n"
           "  --wall           time single-thread work by the wall clock too (default: the\n"
           "                   thread's CPU clock, robust on shared machines)\n"
           "  --check          call every registry entry once, no timing; exit status 1 if a\n"
           "                   slot has no runner here (the test bench-coverage)\n",
           MAX_THREADS);
}

int main(int argc, char **argv)
{
    options o = {NULL, NULL, 4096, 1 << 20, {1, 2}, 2, 15, 5.0, 0, NULL};
    int quick = 0, size_set = 0, do_api = 1, do_kernels = 1, check = 0;

    for (int i = 1; i < argc; i++) {
        const char *a = argv[i], *v = i + 1 < argc ? argv[i + 1] : NULL;
        if (strcmp(a, "--quick") == 0) {
            quick = 1;
        } else if (strcmp(a, "--wall") == 0) {
            o.wall = 1;
        } else if (strcmp(a, "--no-api") == 0) {
            do_api = 0;
        } else if (strcmp(a, "--check") == 0) {
            check = 1;
        } else if (strcmp(a, "--no-kernels") == 0) {
            do_kernels = 0;
        } else if (strcmp(a, "--kernel") == 0 && v) {
            o.kernel = v;
            i++;
        } else if (strcmp(a, "--bnb") == 0 && v) {
            o.bnb = v;
            i++;
        } else if (strcmp(a, "--reps") == 0 && v) {
            o.reps = atoi(v);
            i++;
        } else if (strcmp(a, "--isa") == 0 && v) {
            o.isa = v;
            i++;
        } else if (strcmp(a, "--size") == 0 && v) {
            o.size = atoll(v);
            size_set = 1;
            i++;
        } else if (strcmp(a, "--threads") == 0 && v) {
            o.nthreads = 0;
            for (const char *p = v; *p && o.nthreads < MAX_THREADS;) {
                int t = atoi(p);
                if (t >= 1 && t <= MAX_THREAD_COUNT)
                    o.threads[o.nthreads++] = t;
                p = strchr(p, ',');
                if (!p)
                    break;
                p++;
            }
            i++;
        } else {
            usage();
            return strcmp(a, "--help") == 0 || strcmp(a, "-h") == 0 ? 0 : 2;
        }
    }
    if (quick) {
        if (!size_set)
            o.size = 1024;
        o.kernel_n = 1 << 16;
        o.reps = 3;
        o.budget = 0.2;
    }
    if (o.size < 32 || o.nthreads == 0 || o.reps < 1) {
        usage();
        return 2;
    }

    if (check)
        return bench_kernels(&o, 1) ? 1 : 0;
    pin_init();
    if (o.bnb && bnb_load(o.bnb) != 0)
        return 2;

    level lv[MAX_LEVELS];
    int nlv = bench_tiers(lv, MAX_LEVELS, o.isa);
    if (nlv == 0) {
        fprintf(stderr, "qsparse-bench: no ISA level matches --isa %s\n", o.isa);
        return 2;
    }
    print_context(lv, nlv, &o);

    const int64_t values = o.size * o.size;
    float *src = xalloc((size_t)values * 4), *dst = xalloc((size_t)values * 4);

    fill_weights(src, values, 1);
    memset(dst, 0, (size_t)values * 4);
    if (do_api)
        bench_api(lv, nlv, &o, src, dst);
    free(src);
    free(dst);
    if (do_kernels && bench_kernels(&o, 0) != 0)
        return 1;
    return 0;
}
