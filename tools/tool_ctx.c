/* SPDX-License-Identifier: MIT */
/* The tool's context helper (tool_ctx.h) and the profile printout of `--profile`. */
#include <stdio.h>
#include <stdlib.h>

#include "qsparse/profile.h"
#include "tool_ctx.h"
#include "heap.h"

int qs_tool_profile;

qs_status qs_tool_ctx_create(const qs_ctx_params *params, qs_ctx **out)
{
    qs_status st = qs_ctx_create(params, out);
    if (st == QS_OK && qs_tool_profile && qs_ctx_set(*out, QS_PARAM_PROFILE, 1) != QS_OK) {
        qs_ctx_destroy(*out);
        *out = NULL;
        return QS_ERR_OUT_OF_MEMORY;
    }
    return st;
}

static void print_json(qs_ctx *ctx)
{
    int64_t need = 0;
    qs_profile_json(ctx, NULL, 0, &need);
    char *buf = qs_heap_malloc((size_t)need + 1);
    if (buf && qs_profile_json(ctx, buf, need + 1, &need) == QS_OK)
        fprintf(stderr, "%s\n", buf);
    qs_heap_free(buf);
}

static void print_table(qs_ctx *ctx)
{
    fprintf(stderr, "profile (isa %s):\n%-11s %-34s %-9s %3s %7s %10s %10s %10s %7s\n",
            qs_ctx_isa_name(ctx), "op", "kernel", "format", "thr", "calls", "MB in", "MB out",
            "ms", "GB/s");
    for (int64_t i = 0; i < qs_profile_count(ctx); i++) {
        qs_profile_entry e;
        if (qs_profile_get(ctx, i, &e) != QS_OK)
            break;
        double ms = (double)e.ns / 1e6;
        double gbs = e.ns ? (double)(e.bytes_in + e.bytes_out) / (double)e.ns : 0.0;
        fprintf(stderr, "%-11s %-34s %-9s %3d %7llu %10.2f %10.2f %10.3f %7.2f\n", e.op,
                e.kernel, e.format ? qs_format_name(e.format) : "-", (int)e.threads,
                (unsigned long long)e.calls, (double)e.bytes_in / 1e6,
                (double)e.bytes_out / 1e6, ms, gbs);
    }
    if (qs_profile_dropped(ctx))
        fprintf(stderr, "(%llu calls not counted: the table was full)\n",
                (unsigned long long)qs_profile_dropped(ctx));
}

void qs_tool_ctx_done(qs_ctx *ctx)
{
    if (ctx && qs_tool_profile == 1)
        print_table(ctx);
    else if (ctx && qs_tool_profile == 2)
        print_json(ctx);
    qs_ctx_destroy(ctx);
}
