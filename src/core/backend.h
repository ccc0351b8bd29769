/* SPDX-License-Identifier: MIT */
/*
 * The backend seam, the core's side. The public entry points validate every argument and size
 * in the core, then call the context's backend operations (qs_backend_ops, the plugin ABI of
 * include/qsparse/plugin.h); the CPU backend (backend_cpu.c) is the library's own drivers behind
 * that same table. Other backends come from plugins, which the registry (backend.c) loads with
 * dlopen and accepts only when their ABI version equals QS_BACKEND_ABI_VERSION.
 *
 * A plugin sees no core struct: the context is an opaque handle (the qs_ctx pointer itself,
 * only ever read back here), the call is public types plus the plain structs of plugin.h, and
 * the plugin reaches the context through the host services (backend_host.c).
 */
#ifndef QS_CORE_BACKEND_H
#define QS_CORE_BACKEND_H

#include "internal.h"
#include "qsparse/plugin.h"

/* The handle a backend operation gets for a context, and back. */
static inline qs_backend_ctx *qs_backend_handle(qs_ctx *ctx)
{
    return (qs_backend_ctx *)ctx;
}

static inline qs_ctx *qs_backend_context(qs_backend_ctx *handle)
{
    return (qs_ctx *)handle;
}

/* The CPU backend (backend_cpu.c): every operation but the device ones. */
QS_INTERNAL const qs_backend_ops *qs_backend_cpu(void);
/* The operations for a context created with params->backend, or NULL (QS_ERR_BACKEND; the
 * reason is in qs_backend_message). AUTO and CPU are the CPU backend. */
QS_INTERNAL const qs_backend_ops *qs_backend_select(int32_t backend);

/* The host services handed to every plugin's init (backend_host.c). */
QS_INTERNAL const qs_backend_host *qs_backend_host_services(void);
/* The plain layout of a computed one (p: the parameters it was computed with). */
QS_INTERNAL void qs_backend_layout_fill(const struct qs_layout *l, const qs_quant_params *p,
                                        qs_backend_layout *out);

/* What the layout argument of quantize / dequantize points into when the core calls them: the
 * plain layout a plugin reads, then the core's own, which the CPU backend reads instead (so its
 * small calls pay for neither a copy nor a second qs_layout_compute). */
struct qs_call_layout {
    qs_backend_layout plain; /* first: the operation gets &plain */
    const struct qs_layout *core;
};

/* Set c for a call on ctx: the core's layout, and the plain copy where a plugin reads it (a
 * context runs the CPU backend exactly when its backend is QS_BACKEND_CPU). */
static inline void qs_call_layout_init(const qs_ctx *ctx, struct qs_call_layout *c,
                                       const struct qs_layout *l, const qs_quant_params *p)
{
    c->core = l;
    if (ctx->backend != QS_BACKEND_CPU)
        qs_backend_layout_fill(l, p, &c->plain);
}

/* The core's layout behind the layout argument of a call the core made (qs_call_layout). */
static inline const struct qs_layout *qs_call_layout_core(const qs_backend_layout *plain)
{
    return ((const struct qs_call_layout *)(const void *)plain)->core;
}
/* QS_ERR_UNSUPPORTED with "<backend> backend: <op> is not implemented ...": the context's
 * backend has no such operation, and the call runs nowhere else. */
QS_INTERNAL qs_status qs_backend_unsupported(qs_ctx *ctx, const char *op);
/* The status of an operation that ran: on failure the backend's message, or a generic one
 * when it gave none (call with ctx->last_error cleared before the operation). */
QS_INTERNAL qs_status qs_backend_result(qs_ctx *ctx, qs_status st, const char *op);
struct qs_mm_job; /* the checked call of gemm/matmul.c (gemm/gemm_internal.h) */

/* What the weight-layout argument of matmul points into when the core calls it: the plain
 * layout a plugin reads (NULL for a plugin when the weight is not quantized), then the job the
 * core's checks filled, which the CPU backend runs without checking again. */
struct qs_call_matmul {
    qs_backend_layout plain; /* first: the operation gets &plain */
    const struct qs_mm_job *core;
};

static inline const struct qs_mm_job *qs_call_matmul_core(const qs_backend_layout *plain)
{
    return ((const struct qs_call_matmul *)(const void *)plain)->core;
}

/* qs_matmul after its checks (which filled *job): the context's matmul operation. */
QS_INTERNAL qs_status qs_backend_matmul(qs_ctx *ctx, const struct qs_mm_job *job,
                                        const qs_matmul_params *p, const void *x,
                                        int32_t x_dtype, int64_t M, int64_t K,
                                        const qs_weight *w, int64_t N, const float *bias,
                                        float *y);

/* The CPU drivers, called after the core's checks: quantize.c, dequantize.c, gemm/matmul.c (the
 * 2:4 meta nibbles included, as the matmul operation says), sparse/compress.c,
 * calib/calib_apply.c. */
QS_INTERNAL qs_status qs_cpu_quantize(qs_ctx *ctx, const struct qs_layout *l,
                                      const qs_quant_params *p, const void *src,
                                      int32_t src_dtype, qs_qtensor *q);
QS_INTERNAL qs_status qs_cpu_dequantize(qs_ctx *ctx, const struct qs_layout *l,
                                        const qs_quant_params *p, const qs_qtensor *q, void *dst,
                                        int32_t dst_dtype);
/* qs_matmul_params' rules (reserved fields, activation mode, outlier threshold), for every
 * entry point that takes them (src/gemm/matmul.c). */
QS_INTERNAL qs_status qs_matmul_check_params(qs_ctx *ctx, const qs_matmul_params *p);
QS_INTERNAL qs_status qs_cpu_matmul(qs_ctx *ctx, const struct qs_mm_job *checked,
                                    const qs_matmul_params *params, const void *x,
                                    int32_t x_dtype, int64_t M, int64_t K, const qs_weight *w,
                                    int64_t N, const float *bias, float *y);
QS_INTERNAL qs_status qs_cpu_sp24(qs_ctx *ctx, const qs_backend_sp24 *a);
QS_INTERNAL qs_status qs_cpu_act_sumsq(qs_ctx *ctx, const void *src, int32_t dtype, int64_t rows,
                                       int64_t cols, double *sumsq);

#endif /* QS_CORE_BACKEND_H */
