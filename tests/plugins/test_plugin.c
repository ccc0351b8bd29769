/* SPDX-License-Identifier: MIT */
/*
 * Backend plugins for tests/test_backend.c, one source built as several shared modules
 * (tests/meson.build) that differ by PLUGIN_VARIANT:
 *   GOOD         a complete plugin for QS_BACKEND_CUDA: quantize writes 0xC5 to the first data
 *                byte and counts its calls; dequantize fails with QS_ERR_UNSUPPORTED and a message
 *   NO_SYMBOL    exports no init symbol
 *   WRONG_ABI    reports the next backend ABI version
 *   REFUSE       its init refuses the host's ABI version (returns NULL)
 *   UNAVAILABLE  complete, but says no device is present
 *   PLANTED      GOOD, plus code that runs as soon as dlopen maps the file (before the host sees
 *                its init symbol) and leaves the file named by QS_TEST_PLANTED_MARKER: what a
 *                hostile libqsparse-cuda.so in a downloaded folder would do (plugin_search.sh)
 * The recognisable effects show that a call reached the plugin only after the core's checks.
 */
#include <stdio.h>
#include <stdlib.h>

#include "core/backend.h"

#define GOOD 1
#define NO_SYMBOL 2
#define WRONG_ABI 3
#define REFUSE 4
#define UNAVAILABLE 5
#define PLANTED 6

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

static qs_status quantize(qs_ctx *ctx, const struct qs_layout *l, const qs_quant_params *p,
                          const void *src, int32_t src_dtype, qs_qtensor *q)
{
    (void)ctx, (void)p, (void)src, (void)src_dtype;
    qs_test_plugin_calls++;
    if (l->bytes[QS_PLANE_DATA] > 0)
        ((unsigned char *)q->data)[0] = 0xC5;
    return QS_OK;
}

static qs_status dequantize(qs_ctx *ctx, const struct qs_layout *l, const qs_quant_params *p,
                            const qs_qtensor *q, void *dst, int32_t dst_dtype)
{
    (void)p, (void)q, (void)dst, (void)dst_dtype;
    snprintf(ctx->last_error, sizeof ctx->last_error, "test backend: dequantize of %lld x %lld",
             (long long)l->rows, (long long)l->cols);
    return QS_ERR_UNSUPPORTED;
}

static const struct qs_backend_ops ops = {
#if PLUGIN_VARIANT == WRONG_ABI
    .abi_version = QS_BACKEND_ABI_VERSION + 1,
#else
    .abi_version = QS_BACKEND_ABI_VERSION,
#endif
    .backend = QS_BACKEND_CUDA,
    .name = "test",
    .available = available,
    .quantize = quantize,
    .dequantize = dequantize,
};

#if PLUGIN_VARIANT != NO_SYMBOL
QS_API const struct qs_backend_ops *qs_backend_plugin_init(int32_t host_abi_version);

QS_API const struct qs_backend_ops *qs_backend_plugin_init(int32_t host_abi_version)
{
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
QS_API const struct qs_backend_ops *qs_test_plugin_ops(void);

QS_API const struct qs_backend_ops *qs_test_plugin_ops(void)
{
    return &ops;
}
#endif
