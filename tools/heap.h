/* SPDX-License-Identifier: MIT */
/*
 * The tool's counting allocator: what `qsparse quantize --stats` reports as the heap peak.
 *
 * Every heap allocation of the tool goes through it: the tool's own buffers (qs_heap_malloc and
 * friends, used by every tools/ file that allocates), the library's (the context is created with
 * qs_heap_allocator(), so the library's scratch, GPTQ's Hessians and the double quantization's
 * temporary absmax are counted) and jansson's (qs_heap_hook_jansson routes the JSON parser
 * through it). Each block carries its size in a 16-byte header, so the count is exact: the
 * bytes requested and not yet freed, and their peak. Only the C library's own internals
 * (stdio buffers, regcomp) are outside it: a few kilobytes. Memory-mapped inputs are not heap:
 * they are file pages the kernel may drop at any time (RSS, not the heap).
 */
#ifndef QS_TOOLS_HEAP_H
#define QS_TOOLS_HEAP_H

#include <stddef.h>

#include "qsparse.h"

void *qs_heap_malloc(size_t n);
void *qs_heap_calloc(size_t n, size_t size);
void *qs_heap_realloc(void *p, size_t n);
char *qs_heap_strdup(const char *s);
void qs_heap_free(void *p);

/* Bytes allocated and not yet freed, and the most there ever were. */
size_t qs_heap_current(void);
size_t qs_heap_peak(void);

/* An allocator for qs_ctx_params.allocator that counts the library's allocations here. */
qs_allocator qs_heap_allocator(void);

/* Route jansson's allocations through the counter (before the first JSON value is made). */
void qs_heap_hook_jansson(void);

#endif /* QS_TOOLS_HEAP_H */
