/* SPDX-License-Identifier: MIT */
/* The CPU backend: today's drivers behind the backend operations (backend.h). */
#include "backend.h"

static int32_t cpu_available(char *why, size_t why_len)
{
    (void)why, (void)why_len;
    return 1;
}

static const struct qs_backend_ops cpu_ops = {
    .abi_version = QS_BACKEND_ABI_VERSION,
    .backend = QS_BACKEND_CPU,
    .name = "cpu",
    .available = cpu_available,
    .quantize = qs_cpu_quantize,
    .dequantize = qs_cpu_dequantize,
};

const struct qs_backend_ops *qs_backend_cpu(void)
{
    return &cpu_ops;
}
