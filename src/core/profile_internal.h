/* SPDX-License-Identifier: MIT */
/* The profiling hooks of the operations (profile.c; the public side is qsparse/profile.h). An
 * operation brackets its work with
 *     uint64_t t0 = qs_prof_start(ctx);  ...  if (t0) qs_prof_record(ctx, t0, "op", slot, ...);
 * and pays one pointer test while the counters are off. */
#ifndef QS_CORE_PROFILE_INTERNAL_H
#define QS_CORE_PROFILE_INTERNAL_H

#include "internal.h"

/* Monotonic nanoseconds; never 0 in practice (the clock counts from boot). */
QS_INTERNAL uint64_t qs_prof_now(void);

static inline uint64_t qs_prof_start(const qs_ctx *ctx)
{
    return ctx->prof ? qs_prof_now() : 0;
}

/* Add one successful call to the entry of (op, the kernel in `slot`, format, threads); op is a
 * static string. slot < 0: the call ran no kernel of the table. */
QS_INTERNAL void qs_prof_record(qs_ctx *ctx, uint64_t t0, const char *op, int32_t slot,
                                int32_t format, uint64_t elements, uint64_t bytes_in,
                                uint64_t bytes_out);

/* The same for a kernel chosen by shape (a registry entry's name, a static string; "" for none):
 * the matmul plan's. */
QS_INTERNAL void qs_prof_record_kernel(qs_ctx *ctx, uint64_t t0, const char *op,
                                       const char *kernel, int32_t format, uint64_t elements,
                                       uint64_t bytes_in, uint64_t bytes_out);

/* Switch the counters on (allocating the table) or off (freeing it). */
QS_INTERNAL qs_status qs_prof_enable(qs_ctx *ctx, int on);
QS_INTERNAL void qs_prof_destroy(qs_ctx *ctx);

#endif
