/* SPDX-License-Identifier: MIT */
/*
 * Profiling counters (include/qsparse/profile.h) and the run-time facts of `qsparse doctor`.
 * The table lives behind ctx->prof, allocated when the counters are switched on, so a context
 * with the counters off pays one pointer test per call (qs_prof_start in profile_internal.h).
 */
#include <inttypes.h>
#include <stdarg.h>
#include <stdio.h>
#include <string.h>
#include <time.h>

#ifdef _OPENMP
#include <omp.h>
#endif

#include "profile_internal.h"
#include "qsparse/profile.h"

#ifdef QS_HAVE_OPENBLAS
/* OpenBLAS's own queries (cblas.h of OpenBLAS declares them; a generic cblas.h does not). */
char *openblas_get_config(void);
char *openblas_get_corename(void);
int openblas_get_num_threads(void);
#endif

struct qs_prof {
    int64_t count;
    uint64_t dropped;
    qs_profile_entry e[QS_PROFILE_MAX_ENTRIES];
};

uint64_t qs_prof_now(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (uint64_t)ts.tv_sec * 1000000000u + (uint64_t)ts.tv_nsec;
}

qs_status qs_prof_enable(qs_ctx *ctx, int on)
{
    if (!on) {
        if (ctx->prof)
            ctx->allocator.free(ctx->allocator.user, ctx->prof);
        ctx->prof = NULL;
        return QS_OK;
    }
    if (ctx->prof)
        return QS_OK;
    struct qs_prof *p = ctx->allocator.alloc(ctx->allocator.user, sizeof *p, 64);
    if (!p)
        return QS_ERR_OUT_OF_MEMORY;
    memset(p, 0, sizeof *p);
    ctx->prof = p;
    return QS_OK;
}

void qs_prof_record(qs_ctx *ctx, uint64_t t0, const char *op, int32_t slot, int32_t format,
                    uint64_t elements, uint64_t bytes_in, uint64_t bytes_out)
{
    qs_prof_record_kernel(ctx, t0, op,
                          slot >= 0 && slot < QS_SLOT_COUNT ? ctx->kernel_names[slot] : "", format,
                          elements, bytes_in, bytes_out);
}

void qs_prof_record_kernel(qs_ctx *ctx, uint64_t t0, const char *op, const char *kernel,
                           int32_t format, uint64_t elements, uint64_t bytes_in,
                           uint64_t bytes_out)
{
    struct qs_prof *p = ctx->prof;
    uint64_t ns = qs_prof_now() - t0;
    const char *isa = qs_ctx_isa_name(ctx);
    int32_t threads = qs_threads(ctx);
    qs_profile_entry *e = NULL;

    /* kernel and op are static strings, so their addresses identify them */
    for (int64_t i = 0; i < p->count; i++) {
        qs_profile_entry *c = &p->e[i];
        if (c->op == op && c->kernel == kernel && c->format == format && c->threads == threads &&
            c->isa == isa) {
            e = c;
            break;
        }
    }
    if (!e) {
        if (p->count == QS_PROFILE_MAX_ENTRIES) {
            p->dropped++;
            return;
        }
        e = &p->e[p->count++];
        e->op = op;
        e->kernel = kernel;
        e->isa = isa;
        e->format = format;
        e->threads = threads;
    }
    e->calls++;
    e->elements += elements;
    e->bytes_in += bytes_in;
    e->bytes_out += bytes_out;
    e->ns += ns;
}

void qs_prof_destroy(qs_ctx *ctx)
{
    qs_prof_enable(ctx, 0);
}

QS_API int64_t qs_profile_count(const qs_ctx *ctx)
{
    return ctx && ctx->prof ? ctx->prof->count : 0;
}

QS_API qs_status qs_profile_get(const qs_ctx *ctx, int64_t index, qs_profile_entry *entry)
{
    if (!ctx || !entry || index < 0 || index >= qs_profile_count(ctx))
        return QS_ERR_INVALID_ARG;
    *entry = ctx->prof->e[index];
    return QS_OK;
}

QS_API uint64_t qs_profile_dropped(const qs_ctx *ctx)
{
    return ctx && ctx->prof ? ctx->prof->dropped : 0;
}

QS_API qs_status qs_profile_reset(qs_ctx *ctx)
{
    if (!ctx)
        return QS_ERR_INVALID_ARG;
    if (ctx->prof)
        memset(ctx->prof, 0, sizeof *ctx->prof);
    return qs_ok(ctx);
}

/* ---- JSON ------------------------------------------------------------------------------------ */

/* Appends to a buffer that counts what it could not hold, so one pass gives both the length and,
 * when it fits, the text. Every string written is a static name of the library (no escaping). */
struct sink {
    char *p;
    int64_t cap, len;
};

static void put(struct sink *s, const char *fmt, ...) __attribute__((format(printf, 2, 3)));

static void put(struct sink *s, const char *fmt, ...)
{
    char tmp[256];
    va_list ap;
    va_start(ap, fmt);
    int n = vsnprintf(tmp, sizeof tmp, fmt, ap);
    va_end(ap);
    if (n < 0)
        return;
    if (s->p && s->len + n < s->cap)
        memcpy(s->p + s->len, tmp, (size_t)n);
    s->len += n;
}

static void put_json(const qs_ctx *ctx, struct sink *s)
{
    int64_t n = qs_profile_count(ctx);

    put(s, "{\"isa\": \"%s\", \"dropped\": %" PRIu64 ", \"entries\": [", qs_ctx_isa_name(ctx),
        qs_profile_dropped(ctx));
    for (int64_t i = 0; i < n; i++) {
        const qs_profile_entry *e = &ctx->prof->e[i];
        const char *fmt = e->format ? qs_format_name(e->format) : NULL;
        put(s, "%s{\"op\": \"%s\", \"kernel\": \"%s\", \"isa\": \"%s\", ", i ? ", " : "", e->op,
            e->kernel, e->isa);
        if (fmt)
            put(s, "\"format\": \"%s\", ", fmt);
        else
            put(s, "\"format\": null, ");
        put(s,
            "\"threads\": %d, \"calls\": %" PRIu64 ", \"elements\": %" PRIu64
            ", \"bytes_in\": %" PRIu64 ", \"bytes_out\": %" PRIu64 ", \"ns\": %" PRIu64 "}",
            (int)e->threads, e->calls, e->elements, e->bytes_in, e->bytes_out, e->ns);
    }
    put(s, "]}");
}

QS_API qs_status qs_profile_json(const qs_ctx *ctx, char *buf, int64_t size, int64_t *written)
{
    if (!ctx || !written || size < 0 || (!buf && size > 0))
        return QS_ERR_INVALID_ARG;
    struct sink probe = {NULL, 0, 0};
    put_json(ctx, &probe);
    *written = probe.len;
    if (size <= probe.len)
        return QS_ERR_BUFFER_TOO_SMALL;
    struct sink out = {buf, size, 0};
    put_json(ctx, &out);
    buf[out.len] = '\0';
    return QS_OK;
}

/* ---- run-time facts -------------------------------------------------------------------------- */

QS_API const char *qs_runtime_info(qs_ctx *ctx, int32_t key)
{
    static const char *unknown = "unknown key";
    /* short lines rebuilt on every call, one thread-local buffer per key, so the answers for
     * different keys can be held together (ctx->last_error is not touched) */
    static _Thread_local char lines[QS_RUNTIME_COMPILER + 1][192];
    char *line = key >= 0 && key <= QS_RUNTIME_COMPILER ? lines[key] : lines[0];
    const size_t cap = sizeof lines[0];

    switch (key) {
    case QS_RUNTIME_BLAS:
#ifdef QS_HAVE_OPENBLAS
        snprintf(line, cap, "%s (core %s, %d threads)", openblas_get_config(),
                 openblas_get_corename(), openblas_get_num_threads());
        return line;
#elif defined(QS_HAVE_BLAS)
        return "CBLAS (not OpenBLAS: no core or thread query)";
#else
        return "none (built without BLAS: the GEMM path uses the library's own loop)";
#endif
    case QS_RUNTIME_OPENMP:
#ifdef _OPENMP
        snprintf(line, cap, "OpenMP %d, %d threads for this context", (int)_OPENMP,
                 ctx ? (int)qs_threads(ctx) : omp_get_max_threads());
        return line;
#else
        (void)ctx;
        return "none (built without OpenMP: one thread)";
#endif
    case QS_RUNTIME_COMPILER:
#if defined(__clang__)
        return "clang " __clang_version__;
#elif defined(__GNUC__)
        return "gcc " __VERSION__;
#else
        return "unknown compiler";
#endif
    default: return unknown;
    }
}
