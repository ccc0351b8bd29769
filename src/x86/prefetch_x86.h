/* SPDX-License-Identifier: MIT */
/*
 * Software prefetch ahead of a stream, for every x86 tier (SSE's PREFETCHT0). The line fetched
 * may lie past the end of the stream's buffer: a prefetch never faults and changes no data, but
 * a pointer formed beyond one past the end of an array is undefined in C, so the address is
 * computed on integers.
 */
#ifndef QS_X86_PREFETCH_X86_H
#define QS_X86_PREFETCH_X86_H

#include <stdint.h>

#include <xmmintrin.h>

/* Prefetch into L1 the line at `bytes` bytes past p. */
static inline void qs_prefetch_l1(const void *p, int64_t bytes)
{
    _mm_prefetch((const char *)((uintptr_t)p + (uintptr_t)bytes), _MM_HINT_T0);
}

#endif /* QS_X86_PREFETCH_X86_H */
