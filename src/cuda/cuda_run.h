/* SPDX-License-Identifier: MIT */
/*
 * One driver call's bookkeeping, shared by cuda_pipeline.c and cuda_matmul.c: the executor, the
 * scratch buffers released together at the end, the message of a failure.
 */
#ifndef QS_CUDA_RUN_H
#define QS_CUDA_RUN_H

#include <stdarg.h>
#include <stdio.h>
#include <string.h>

#include "cuda_pipeline.h"

#define QS_CU_MAX_SCRATCH 8

struct qs_cu_run {
    const struct qs_cu_exec *x;
    void *scratch[QS_CU_MAX_SCRATCH];
    int n_scratch;
    char *err;
    size_t err_len;
};

static inline int64_t qs_cu_ceil_div(int64_t a, int64_t b)
{
    return a / b + (a % b != 0);
}

/* The GEMM's 64 x 64 tiles of y; mm_kernel indexes them in 32 bits, so a call with more than
 * INT32_MAX (over 2^43 outputs) goes to the GEMV. */
static inline int64_t qs_cu_mm_tiles(int64_t M, int64_t N)
{
    return qs_cu_ceil_div(M, QS_CU_MM_BM) * qs_cu_ceil_div(N, QS_CU_MM_BN);
}

static inline int qs_cu_aligned(const void *p, uintptr_t n)
{
    return ((uintptr_t)p & (n - 1)) == 0;
}

static qs_status qs_cu_fail(struct qs_cu_run *r, qs_status st, const char *fmt, ...)
    __attribute__((format(printf, 3, 4), unused));
static qs_status qs_cu_fail(struct qs_cu_run *r, qs_status st, const char *fmt, ...)
{
    va_list ap;

    if (r->err[0] == '\0') { /* the first cause wins */
        va_start(ap, fmt);
        vsnprintf(r->err, r->err_len, fmt, ap);
        va_end(ap);
    }
    return st;
}

static inline void *qs_cu_scratch(struct qs_cu_run *r, size_t bytes)
{
    void *p;

    if (r->n_scratch == QS_CU_MAX_SCRATCH)
        return NULL;
    p = r->x->alloc(r->x->user, bytes > 0 ? bytes : 4);
    if (p)
        r->scratch[r->n_scratch++] = p;
    return p;
}

static inline void qs_cu_release_all(struct qs_cu_run *r)
{
    while (r->n_scratch > 0)
        r->x->release(r->x->user, r->scratch[--r->n_scratch]);
}

/* Reduce `units` units of unit_len elements of src (cuda_pipeline.c); *partial gets
 * units * *chunks results, in the run's scratch. */
qs_status qs_cu_reduce(struct qs_cu_run *r, const void *src, int32_t dtype, int64_t units,
                       int64_t unit_len, int32_t kind, struct qs_cu_pair **partial,
                       int64_t *chunks);

/* Launch or return QS_ERR_BACKEND from the calling function. */
#define QS_CU_LAUNCH(r, k, args, count)                                                            \
    do {                                                                                           \
        if ((count) > 0 && (r)->x->launch((r)->x->user, (k), (args), (count)) != 0)                \
            return qs_cu_fail((r), QS_ERR_BACKEND, "cuda backend: kernel %d failed", (int)(k));    \
    } while (0)

/* Scratch or QS_ERR_OUT_OF_MEMORY from the calling function (the executor's message first). */
#define QS_CU_NEED(r, ptr)                                                                         \
    do {                                                                                           \
        if (!(ptr))                                                                                \
            return qs_cu_fail((r), QS_ERR_OUT_OF_MEMORY,                                           \
                              "cuda backend: no device memory for scratch");                       \
    } while (0)

#define QS_CU_TO_HOST(r, dst, src, bytes)                                                          \
    do {                                                                                           \
        if ((r)->x->to_host((r)->x->user, (dst), (src), (bytes)) != 0)                             \
            return qs_cu_fail((r), QS_ERR_BACKEND, "cuda backend: copy to the host failed");       \
    } while (0)

#endif /* QS_CUDA_RUN_H */
