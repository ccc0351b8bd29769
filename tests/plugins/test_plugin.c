/* SPDX-License-Identifier: MIT */
/*
 * Backend plugins for tests/test_backend.c, one source built as several shared modules
 * (tests/meson.build) that differ by PLUGIN_VARIANT. Like any plugin it includes the plugin ABI
 * (include/qsparse/plugin.h) and nothing of the library's sources.
 *   GOOD         the "cuda" backend with quantize (writes 0xC5 to the first data byte and counts
 *                its calls) and a dequantize that fails with QS_ERR_UNSUPPORTED and a message;
 *                matmul, 2:4 and act_sumsq missing, so a CUDA context must refuse them
 *   RECORDER     a backend of its own name, "recorder", with quantize, matmul, 2:4 and
 *                act_sumsq: it writes down what it got (test_plugin.h) and leaves a mark
 *   NO_SYMBOL    exports no init symbol
 *   WRONG_ABI    reports the next backend ABI version
 *   REFUSE       its init refuses the host's ABI version (returns NULL)
 *   UNAVAILABLE  the "cuda" backend, complete, but says no device is present
 *   RESERVED     calls itself "cpu"
 *   BAD_NAME     calls itself "Big GPU"
 *   PLANTED      GOOD, plus code that runs as soon as dlopen maps the file (before the host sees
 *                its init symbol) and leaves the file named by QS_TEST_PLANTED_MARKER: what a
 *                hostile libqsparse-cuda.so in a downloaded folder would do (plugin_search.sh)
 * The recognisable effects show that a call reached the plugin only after the core's checks.
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "test_plugin.h"

#define GOOD 1
#define NO_SYMBOL 2
#define WRONG_ABI 3
#define REFUSE 4
#define UNAVAILABLE 5
#define RECORDER 6
#define RESERVED 7
#define BAD_NAME 8
#define PLANTED 9

#if PLUGIN_VARIANT == PLANTED
__attribute__((constructor)) static void planted_code_runs(void)
{
    const char *marker = getenv("QS_TEST_PLANTED_MARKER");
    FILE *f = marker ? fopen(marker, "w") : NULL;

    if (f) {
        fputs("planted plugin code ran\n", f);
        fclose(f);
    }
}
#endif

/* Calls of quantize that reached the plugin (read by the test through dlsym). */
QS_API int32_t qs_test_plugin_calls;
QS_API struct qs_test_plugin_log qs_test_plugin_log;

static const qs_backend_host *host;

static int32_t available(char *why, size_t why_len)
{
#if PLUGIN_VARIANT == UNAVAILABLE
    snprintf(why, why_len, "no device");
    return 0;
#else
    (void)why, (void)why_len;
    return 1;
#endif
}

static qs_status quantize(qs_backend_ctx *ctx, const qs_backend_layout *l,
                          const qs_quant_params *p, const void *src, int32_t src_dtype,
                          qs_qtensor *q)
{
    (void)ctx, (void)p, (void)src, (void)src_dtype;
    qs_test_plugin_calls++;
    qs_test_plugin_log.quantize++;
    if (l->plane[QS_PLANE_DATA].bytes > 0)
        ((unsigned char *)q->data)[0] = 0xC5;
    return QS_OK;
}

#if PLUGIN_VARIANT == RECORDER
static qs_status matmul(qs_backend_ctx *ctx, const qs_matmul_params *p, const void *x,
                        int32_t x_dtype, int64_t M, int64_t K, const qs_weight *w,
                        const qs_backend_layout *wl, int64_t N, const float *bias, float *y)
{
    struct qs_test_plugin_log *g = &qs_test_plugin_log;

    (void)ctx, (void)x;
    g->matmul++;
    g->M = M;
    g->K = K;
    g->N = N;
    g->x_dtype = x_dtype;
    g->activations = p->activations;
    g->kind = w->kind;
    g->has_bias = bias != NULL;
    g->has_layout = wl != NULL;
    if (wl)
        g->layout = *wl;
    for (int64_t m = 0; m < M; m++)
        for (int64_t n = 0; n < N; n++)
            y[m * N + n] = QS_TEST_Y(m, n);
    return QS_OK;
}

static qs_status sp24(qs_backend_ctx *ctx, const qs_backend_sp24 *a)
{
    (void)ctx;
    qs_test_plugin_log.sp24++;
    qs_test_plugin_log.sp24_call = *a;
    if (a->op == QS_BACKEND_SP24_DECOMPRESS) {
        float mark = QS_TEST_DST_MARK;
        memcpy(a->dst, &mark, sizeof mark);
    } else {
        a->meta[0] = QS_TEST_META_MARK;
    }
    return QS_OK;
}

/* sumsq[j] += j + 1, through a scratch buffer from the context's allocator. */
static qs_status act_sumsq(qs_backend_ctx *ctx, const void *src, int32_t dtype, int64_t rows,
                           int64_t cols, double *sumsq)
{
    struct qs_test_plugin_log *g = &qs_test_plugin_log;
    double *tmp = host->scratch_alloc(ctx, (size_t)cols * sizeof(double));

    (void)src, (void)dtype, (void)rows;
    g->act_sumsq++;
    g->threads = host->num_threads(ctx);
    g->nonfinite = host->nonfinite(ctx);
    g->scratch_ok = tmp != NULL && ((uintptr_t)tmp & 63) == 0;
    if (!tmp) {
        host->set_error(ctx, "recorder backend: no scratch memory");
        return QS_ERR_OUT_OF_MEMORY;
    }
    for (int64_t j = 0; j < cols; j++)
        tmp[j] = (double)(j + 1);
    for (int64_t j = 0; j < cols; j++)
        sumsq[j] += tmp[j];
    host->scratch_free(ctx, tmp);
    return QS_OK;
}
#else
static qs_status dequantize(qs_backend_ctx *ctx, const qs_backend_layout *l,
                            const qs_quant_params *p, const qs_qtensor *q, void *dst,
                            int32_t dst_dtype)
{
    char msg[128];

    (void)p, (void)q, (void)dst, (void)dst_dtype;
    snprintf(msg, sizeof msg, "test backend: dequantize of %lld x %lld", (long long)l->rows,
             (long long)l->cols);
    host->set_error(ctx, msg);
    return QS_ERR_UNSUPPORTED;
}
#endif

static const qs_backend_ops ops = {
#if PLUGIN_VARIANT == WRONG_ABI
    .abi_version = QS_BACKEND_ABI_VERSION + 1,
#else
    .abi_version = QS_BACKEND_ABI_VERSION,
#endif
#if PLUGIN_VARIANT == RECORDER
    .name = "recorder",
#elif PLUGIN_VARIANT == RESERVED
    .name = "cpu",
#elif PLUGIN_VARIANT == BAD_NAME
    .name = "Big GPU",
#else
    .name = "cuda",
#endif
    .available = available,
    .quantize = quantize,
#if PLUGIN_VARIANT == RECORDER
    .matmul = matmul,
    .sp24 = sp24,
    .act_sumsq = act_sumsq,
#else
    .dequantize = dequantize,
#endif
};

#if PLUGIN_VARIANT != NO_SYMBOL
QS_API const qs_backend_ops *qs_backend_plugin_init(int32_t host_abi_version,
                                                    const qs_backend_host *services);

QS_API const qs_backend_ops *qs_backend_plugin_init(int32_t host_abi_version,
                                                    const qs_backend_host *services)
{
    if (host != services) /* the library's one static table: written once, before any call */
        host = services;
#if PLUGIN_VARIANT == REFUSE
    /* a plugin that serves only other versions: it would hand out ops for its own one */
    return host_abi_version == QS_BACKEND_ABI_VERSION ? NULL : &ops;
#else
    (void)host_abi_version; /* the host compares ops.abi_version itself */
    return &ops;
#endif
}
#else
/* Keeps the operations referenced, as a real plugin's would be. */
QS_API const qs_backend_ops *qs_test_plugin_ops(void);

QS_API const qs_backend_ops *qs_test_plugin_ops(void)
{
    return &ops;
}
#endif
