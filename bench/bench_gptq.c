/* SPDX-License-Identifier: MIT */
/*
 * GPTQ and Hessian benchmark (docs/calibration.md §14, §15): the time of qs_gptq_quantize for a
 * rows x K layer given its Hessian (NF4 and INT8), and qs_hessian_update against one OpenBLAS
 * cblas_ssyrk of the same activations into an f32 K x K matrix, measured in the same run (the
 * ratio is the figure to quote on a shared machine). Each line also gives the process CPU time
 * of the call: on an oversubscribed machine, wall time mostly measures waiting for a core, and
 * CPU seconds / threads is what a quiet machine's wall time would be.
 *
 *   bench_gptq [K [rows [tokens [threads]]]]     defaults 4096 4096 8192 2
 */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>

#ifdef QS_HAVE_BLAS
#include <cblas.h>
#endif

#include "bench_util.h"
#include "qsparse.h"

#define REPS 3

static double cpu_now(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_PROCESS_CPUTIME_ID, &ts);
    return (double)ts.tv_sec + 1e-9 * (double)ts.tv_nsec;
}

static double last_cpu; /* CPU seconds of the median-timed repetition's kind (minimum) */

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

static double time_gptq(qs_ctx *ctx, const qs_quant_params *p, const float *w, int64_t rows,
                        int64_t k, const qs_hessian *h, int32_t scale_search)
{
    qs_gptq_params g;
    qs_qtensor q = {0};
    int64_t b[3];
    void *pl[3];
    double t[REPS];

    qs_gptq_params_init(&g);
    g.scale_search = scale_search;
    for (int i = 0; i < 3; i++) {
        if (qs_quant_size(p, rows, k, i, &b[i]) != QS_OK)
            die(ctx, "size");
        pl[i] = b[i] ? malloc((size_t)b[i]) : NULL;
    }
    q.data = pl[0], q.data_bytes = b[0];
    q.scale = pl[1], q.scale_bytes = b[1];
    q.zero_point = pl[2], q.zero_point_bytes = b[2];
    last_cpu = 1e30;
    for (int r = 0; r < REPS; r++) {
        double t0 = now(), c0 = cpu_now();
        if (qs_gptq_quantize(ctx, &g, p, w, rows, k, h, &q, NULL) != QS_OK)
            die(ctx, "gptq");
        t[r] = now() - t0;
        if (cpu_now() - c0 < last_cpu)
            last_cpu = cpu_now() - c0;
    }
    for (int i = 0; i < 3; i++)
        free(pl[i]);
    return median(t, REPS);
}

int main(int argc, char **argv)
{
    int64_t k = argc > 1 ? atoll(argv[1]) : 4096, rows = argc > 2 ? atoll(argv[2]) : 4096;
    int64_t tokens = argc > 3 ? atoll(argv[3]) : 8192;
    int threads = argc > 4 ? atoi(argv[4]) : 2;
    qs_ctx_params cp;
    qs_ctx *ctx;
    char cpu[256];
    uint64_t seed = 1;

    if (k < 1 || rows < 1 || tokens < 1 || threads < 1) {
        fprintf(stderr, "usage: bench_gptq [K [rows [tokens [threads]]]]\n");
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
    printf("bench_gptq: %s, %d threads, ISA %s, K = %lld, rows = %lld, tokens = %lld\n", cpu,
           threads, qs_ctx_isa_name(ctx), (long long)k, (long long)rows, (long long)tokens);

    float *x = malloc((size_t)(tokens * k) * sizeof(float));
    float *w = malloc((size_t)(rows * k) * sizeof(float));
    for (int64_t i = 0; i < tokens * k; i++)
        x[i] = gauss(&seed);
    for (int64_t i = 0; i < rows * k; i++)
        w[i] = 0.02f * gauss(&seed);

    /* Hessian accumulation against ssyrk of the same activations */
    double th[REPS], ts[REPS], ch = 1e30, cs = 1e30;
    qs_hessian *h = NULL;
    for (int r = 0; r < REPS; r++) {
        qs_hessian *hr;
        if (qs_hessian_create(ctx, k, &hr) != QS_OK)
            die(ctx, "create");
        double t0 = now(), c0 = cpu_now();
        if (qs_hessian_update(ctx, hr, x, QS_DTYPE_F32, tokens, k) != QS_OK)
            die(ctx, "update");
        th[r] = now() - t0;
        ch = cpu_now() - c0 < ch ? cpu_now() - c0 : ch;
        if (h)
            qs_hessian_destroy(hr);
        else
            h = hr;
    }
    double t_h = median(th, REPS);
    printf("hessian update   %8.3f s wall, %8.3f s CPU\n", t_h, ch);
#ifdef QS_HAVE_BLAS
    float *c = malloc((size_t)(k * k) * sizeof(float));
    for (int r = 0; r < REPS; r++) {
        double t0 = now(), c0 = cpu_now();
        cblas_ssyrk(CblasRowMajor, CblasUpper, CblasTrans, (int)k, (int)tokens, 1.0f, x, (int)k,
                    0.0f, c, (int)k);
        ts[r] = now() - t0;
        cs = cpu_now() - c0 < cs ? cpu_now() - c0 : cs;
    }
    double t_s = median(ts, REPS);
    printf("cblas_ssyrk      %8.3f s wall, %8.3f s CPU -> Hessian at %.0f%% of ssyrk's speed "
           "(wall), %.0f%% (CPU)\n", t_s, cs, 100.0 * t_s / t_h, 100.0 * cs / ch);
    free(c);
#else
    (void)ts;
    printf("cblas_ssyrk      (built without OpenBLAS)\n");
#endif

    qs_quant_params p;
    qs_quant_params_init(&p, QS_FORMAT_NF4);
    double tg = time_gptq(ctx, &p, w, rows, k, h, 1);
    printf("gptq nf4         %8.3f s wall, %8.3f s CPU (%lld x %lld, block 128)\n", tg,
           last_cpu, (long long)rows, (long long)k);
    qs_quant_params_init(&p, QS_FORMAT_INT8);
    tg = time_gptq(ctx, &p, w, rows, k, h, 1);
    printf("gptq int8 (row)  %8.3f s wall, %8.3f s CPU\n", tg, last_cpu);
    /* MXFP4 with its per-block scale search (default) and with the floor rule alone */
    qs_quant_params_init(&p, QS_FORMAT_MXFP4);
    tg = time_gptq(ctx, &p, w, rows, k, h, 1);
    printf("gptq mxfp4       %8.3f s wall, %8.3f s CPU (scale search)\n", tg, last_cpu);
    tg = time_gptq(ctx, &p, w, rows, k, h, 0);
    printf("gptq mxfp4 floor %8.3f s wall, %8.3f s CPU (no search)\n", tg, last_cpu);
    qs_hessian_destroy(h);
    free(x);
    free(w);
    qs_ctx_destroy(ctx);
    return 0;
}
