/* SPDX-License-Identifier: MIT */
/*
 * Software prefetch ahead of a stream, for every x86 tier (SSE's PREFETCHT0 / T1). The line fetched
 * may lie past the end of the stream's buffer: a prefetch never faults and changes no data, but
 * a pointer formed beyond one past the end of an array is undefined in C, so the address is
 * computed on integers. Always inlined: GCC judges a function whose only effect is a prefetch to
 * have none, and a call to it that the inliner reaches late (from inside another always-inline
 * function) was deleted with its prefetch (mm8_avx512vnni.c lost all 120 of its prefetches so).
 */
#ifndef QS_X86_PREFETCH_X86_H
#define QS_X86_PREFETCH_X86_H

#include <stdint.h>

#include <xmmintrin.h>

/* Prefetch into L1 the line at `bytes` bytes past p. */
static inline __attribute__((always_inline)) void qs_prefetch_l1(const void *p, int64_t bytes)
{
    _mm_prefetch((const char *)((uintptr_t)p + (uintptr_t)bytes), _MM_HINT_T0);
}

/* Prefetch into L2 the line at `bytes` bytes past p. */
static inline __attribute__((always_inline)) void qs_prefetch_l2(const void *p, int64_t bytes)
{
    _mm_prefetch((const char *)((uintptr_t)p + (uintptr_t)bytes), _MM_HINT_T1);
}

#endif /* QS_X86_PREFETCH_X86_H */
