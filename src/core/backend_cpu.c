/* SPDX-License-Identifier: MIT */
/*
 * The CPU backend: the library's own drivers behind the backend operations (backend.h), so that
 * every entry point reaches the CPU through the same table as a plugin. It implements every
 * host operation; the device ones (qs_cuda_*) stay NULL.
 */
#include "backend.h"

static int32_t cpu_available(char *why, size_t why_len)
{
    (void)why, (void)why_len;
    return 1;
}

/* The drivers take the core's layout and matmul's checked job, which the core passes behind
 * the plain layout (qs_call_layout, qs_call_matmul): only the core calls these. */
static qs_status cpu_quantize(qs_backend_ctx *handle, const qs_backend_layout *bl,
                              const qs_quant_params *p, const void *src, int32_t src_dtype,
                              qs_qtensor *q)
{
    return qs_cpu_quantize(qs_backend_context(handle), qs_call_layout_core(bl), p, src, src_dtype,
                           q);
}

static qs_status cpu_dequantize(qs_backend_ctx *handle, const qs_backend_layout *bl,
                                const qs_quant_params *p, const qs_qtensor *q, void *dst,
                                int32_t dst_dtype)
{
    return qs_cpu_dequantize(qs_backend_context(handle), qs_call_layout_core(bl), p, q, dst,
                             dst_dtype);
}

static qs_status cpu_matmul(qs_backend_ctx *handle, const qs_matmul_params *p, const void *x,
                            int32_t x_dtype, int64_t M, int64_t K, const qs_weight *w,
                            const qs_backend_layout *wl, int64_t N, const float *bias, float *y)
{
    return qs_cpu_matmul(qs_backend_context(handle), qs_call_matmul_core(wl), p, x, x_dtype, M, K,
                         w, N, bias, y);
}

static qs_status cpu_sp24(qs_backend_ctx *handle, const qs_backend_sp24 *a)
{
    return qs_cpu_sp24(qs_backend_context(handle), a);
}

static qs_status cpu_act_sumsq(qs_backend_ctx *handle, const void *src, int32_t dtype,
                               int64_t rows, int64_t cols, double *sumsq)
{
    return qs_cpu_act_sumsq(qs_backend_context(handle), src, dtype, rows, cols, sumsq);
}

static const qs_backend_ops cpu_ops = {
    .abi_version = QS_BACKEND_ABI_VERSION,
    .name = "cpu",
    .available = cpu_available,
    .quantize = cpu_quantize,
    .dequantize = cpu_dequantize,
    .matmul = cpu_matmul,
    .sp24 = cpu_sp24,
    .act_sumsq = cpu_act_sumsq,
};

const qs_backend_ops *qs_backend_cpu(void)
{
    return &cpu_ops;
}
