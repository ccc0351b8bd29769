/* SPDX-License-Identifier: MIT */
/*
 * The context: parameters, ISA selection (CPU detection intersected with the caller's mask and
 * QS_FORCE_ISA, read here once), the kernel table, scratch memory and the last error message.
 */
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#ifdef _OPENMP
#include <omp.h>
#endif

#include "backend.h"
#include "parallel.h"
#include "profile_internal.h"

static void *default_alloc(void *user, size_t size, size_t align)
{
    void *p = NULL;

    (void)user;
    if (align < sizeof(void *))
        align = sizeof(void *);
    if (posix_memalign(&p, align, size ? size : 1) != 0)
        return NULL;
    return p;
}

static void default_free(void *user, void *ptr)
{
    (void)user;
    free(ptr);
}

QS_API void qs_ctx_params_init(qs_ctx_params *params)
{
    if (!params)
        return;
    memset(params, 0, sizeof *params);
    params->num_threads = 0;
    params->backend = QS_BACKEND_AUTO;
    params->isa_mask = QS_ISA_ALL;
    params->nonfinite = QS_NONFINITE_ENCODE;
}

static int params_valid(const qs_ctx_params *p)
{
    if (p->num_threads < 0 || !qs_backend_name(p->backend))
        return 0;
    if (p->nonfinite != QS_NONFINITE_ENCODE && p->nonfinite != QS_NONFINITE_REJECT)
        return 0;
    if ((p->allocator.alloc == NULL) != (p->allocator.free == NULL))
        return 0;
    for (size_t i = 0; i < sizeof p->reserved / sizeof p->reserved[0]; i++)
        if (p->reserved[i] != 0)
            return 0;
    return 1;
}

QS_API qs_status qs_ctx_create(const qs_ctx_params *params, qs_ctx **out)
{
    qs_ctx_params defaults;
    const qs_backend_ops *ops;
    qs_ctx *ctx;

    if (!out)
        return QS_ERR_INVALID_ARG;
    if (!params) {
        qs_ctx_params_init(&defaults);
        params = &defaults;
    }
    if (!params_valid(params))
        return QS_ERR_INVALID_ARG;
    /* the reason a backend is missing stays in qs_backend_message: there is no context yet */
    if (!(ops = qs_backend_select(params->backend)))
        return QS_ERR_BACKEND;

    qs_allocator a = params->allocator;
    if (!a.alloc) {
        a.alloc = default_alloc;
        a.free = default_free;
        a.user = NULL;
    }
    ctx = a.alloc(a.user, sizeof *ctx, 64);
    if (!ctx)
        return QS_ERR_OUT_OF_MEMORY;
    memset(ctx, 0, sizeof *ctx);
    ctx->allocator = a;
    ctx->num_threads = params->num_threads;
    ctx->nonfinite = params->nonfinite;
    qs_parallel_init(ctx);
    ctx->backend = params->backend == QS_BACKEND_AUTO ? QS_BACKEND_CPU : params->backend;
    ctx->ops = ops;
    ctx->isa = qs_cpu_detect() & params->isa_mask & qs_force_isa_mask(getenv("QS_FORCE_ISA"));
    qs_kernels_init(&ctx->k, ctx->kernel_names, ctx->isa);
    *out = ctx;
    return QS_OK;
}

QS_API void qs_ctx_destroy(qs_ctx *ctx)
{
    if (!ctx)
        return;
    qs_prof_destroy(ctx);
    ctx->allocator.free(ctx->allocator.user, ctx);
}

QS_API const char *qs_ctx_last_error(const qs_ctx *ctx)
{
    return ctx ? ctx->last_error : "no context";
}

QS_API uint32_t qs_ctx_isa(const qs_ctx *ctx)
{
    return ctx ? ctx->isa : 0;
}

QS_API int32_t qs_ctx_backend(const qs_ctx *ctx)
{
    return ctx ? ctx->backend : -1;
}

QS_API const char *qs_ctx_isa_name(const qs_ctx *ctx)
{
    return qs_isa_tier_name(ctx ? ctx->isa : 0);
}

QS_API qs_status qs_ctx_set(qs_ctx *ctx, int32_t key, int64_t value)
{
    if (!ctx)
        return QS_ERR_INVALID_ARG;
    switch (key) {
    case QS_PARAM_NUM_THREADS:
        if (value < 0 || value > 4096)
            return qs_fail(ctx, QS_ERR_INVALID_ARG, "num_threads %lld out of range [0, 4096]",
                           (long long)value);
        ctx->num_threads = (int32_t)value;
        return qs_ok(ctx);
    case QS_PARAM_NONFINITE:
        if (value != QS_NONFINITE_ENCODE && value != QS_NONFINITE_REJECT)
            return qs_fail(ctx, QS_ERR_INVALID_ARG, "unknown non-finite policy %lld",
                           (long long)value);
        ctx->nonfinite = (int32_t)value;
        return qs_ok(ctx);
    case QS_PARAM_PROFILE:
        if (value != 0 && value != 1)
            return qs_fail(ctx, QS_ERR_INVALID_ARG, "profile must be 0 or 1, got %lld",
                           (long long)value);
        if (qs_prof_enable(ctx, (int)value) != QS_OK)
            return qs_fail(ctx, QS_ERR_OUT_OF_MEMORY, "no memory for the profiling table");
        return qs_ok(ctx);
    case QS_PARAM_PARALLEL_GRAIN:
        if (value < 0)
            return qs_fail(ctx, QS_ERR_INVALID_ARG, "parallel grain %lld is negative",
                           (long long)value);
        ctx->par.grain = value;
        return qs_ok(ctx);
    case QS_PARAM_PARALLEL_BACKOFF:
        if (value != 0 && value != 1)
            return qs_fail(ctx, QS_ERR_INVALID_ARG, "parallel backoff must be 0 or 1, got %lld",
                           (long long)value);
        ctx->par.backoff = (int32_t)value;
        ctx->par.serial_until = 0.0; /* a fresh start either way */
        return qs_ok(ctx);
    default:
        return qs_fail(ctx, QS_ERR_INVALID_ARG, "unknown or read-only parameter key %d", key);
    }
}

QS_API qs_status qs_ctx_get(const qs_ctx *ctx, int32_t key, int64_t *value)
{
    if (!ctx || !value)
        return QS_ERR_INVALID_ARG;
    switch (key) {
    case QS_PARAM_NUM_THREADS: *value = ctx->num_threads; return QS_OK;
    case QS_PARAM_NONFINITE: *value = ctx->nonfinite; return QS_OK;
    case QS_PARAM_ISA: *value = ctx->isa; return QS_OK;
    case QS_PARAM_PROFILE: *value = ctx->prof != NULL; return QS_OK;
    case QS_PARAM_PARALLEL_GRAIN: *value = ctx->par.grain; return QS_OK;
    case QS_PARAM_PARALLEL_BACKOFF: *value = ctx->par.backoff; return QS_OK;
    default: return QS_ERR_INVALID_ARG;
    }
}

QS_API int32_t qs_ctx_kernel_count(const qs_ctx *ctx)
{
    (void)ctx;
    return QS_SLOT_COUNT;
}

QS_API qs_status qs_ctx_kernel_info(const qs_ctx *ctx, int32_t index, const char **slot,
                                    const char **impl)
{
    if (!ctx || !slot || !impl || index < 0 || index >= QS_SLOT_COUNT)
        return QS_ERR_INVALID_ARG;
    *slot = qs_slot_name(index);
    *impl = ctx->kernel_names[index];
    return QS_OK;
}

qs_status qs_fail(qs_ctx *ctx, qs_status status, const char *fmt, ...)
{
    va_list ap;

    if (!ctx)
        return status;
    va_start(ap, fmt);
    vsnprintf(ctx->last_error, sizeof ctx->last_error, fmt, ap);
    va_end(ap);
    return status;
}

qs_status qs_ok(qs_ctx *ctx)
{
    ctx->last_error[0] = '\0';
    return QS_OK;
}

void *qs_scratch_alloc(qs_ctx *ctx, size_t bytes)
{
    return ctx->allocator.alloc(ctx->allocator.user, bytes, 64);
}

void qs_scratch_free(qs_ctx *ctx, void *p)
{
    if (p)
        ctx->allocator.free(ctx->allocator.user, p);
}

int32_t qs_threads(const qs_ctx *ctx)
{
#ifdef _OPENMP
    return ctx->num_threads > 0 ? ctx->num_threads : omp_get_max_threads();
#else
    (void)ctx;
    return 1;
#endif
}
