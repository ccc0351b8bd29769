/* SPDX-License-Identifier: MIT */
/* Every command makes its context here, so the tool-wide `--profile` option (qsparse.c) reaches
 * all of them: the counters are switched on at creation and printed when the context is done. */
#ifndef QS_TOOLS_TOOL_CTX_H
#define QS_TOOLS_TOOL_CTX_H

#include "qsparse.h"

/* Set by `qsparse --profile[=json] <command>`: 0 off, 1 table on stderr, 2 JSON on stderr. */
extern int qs_tool_profile;

/* qs_ctx_create, then the counters on when qs_tool_profile asks for them. */
qs_status qs_tool_ctx_create(const qs_ctx_params *params, qs_ctx **out);
/* Print the counters (when on) to stderr, then qs_ctx_destroy. NULL is accepted. */
void qs_tool_ctx_done(qs_ctx *ctx);

#endif /* QS_TOOLS_TOOL_CTX_H */
