/* SPDX-License-Identifier: MIT */
/* The tool's counting allocator (heap.h). */
#include "heap.h"

#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#ifdef QS_TOOL_JANSSON
#include <jansson.h>
#endif

/* Room for the size in front of each block, keeping malloc's 16-byte alignment. */
#define HDR 16

static size_t cur, peak;

/* Atomic: the library may allocate from its worker threads. */
static void count_add(size_t n)
{
    size_t now = __atomic_add_fetch(&cur, n, __ATOMIC_RELAXED);
    size_t p = __atomic_load_n(&peak, __ATOMIC_RELAXED);

    while (now > p && !__atomic_compare_exchange_n(&peak, &p, now, 1, __ATOMIC_RELAXED,
                                                   __ATOMIC_RELAXED)) {
    }
}

static void count_sub(size_t n)
{
    __atomic_sub_fetch(&cur, n, __ATOMIC_RELAXED);
}

void *qs_heap_malloc(size_t n)
{
    unsigned char *b;

    if (n > SIZE_MAX - HDR || !(b = malloc(n + HDR)))
        return NULL;
    memcpy(b, &n, sizeof n);
    count_add(n);
    return b + HDR;
}

void *qs_heap_calloc(size_t n, size_t size)
{
    void *p;

    if (size && n > SIZE_MAX / size)
        return NULL;
    p = qs_heap_malloc(n * size);
    if (p)
        memset(p, 0, n * size);
    return p;
}

void qs_heap_free(void *p)
{
    unsigned char *b = p;
    size_t n;

    if (!p)
        return;
    b -= HDR;
    memcpy(&n, b, sizeof n);
    count_sub(n);
    free(b);
}

void *qs_heap_realloc(void *p, size_t n)
{
    unsigned char *b, *nb;
    size_t old;

    if (!p)
        return qs_heap_malloc(n);
    b = (unsigned char *)p - HDR;
    memcpy(&old, b, sizeof old);
    if (n > SIZE_MAX - HDR || !(nb = realloc(b, n + HDR)))
        return NULL;
    memcpy(nb, &n, sizeof n);
    if (n > old)
        count_add(n - old);
    else
        count_sub(old - n);
    return nb + HDR;
}

char *qs_heap_strdup(const char *s)
{
    size_t n = strlen(s) + 1;
    char *d = qs_heap_malloc(n);

    if (d)
        memcpy(d, s, n);
    return d;
}

size_t qs_heap_current(void)
{
    return __atomic_load_n(&cur, __ATOMIC_RELAXED);
}

size_t qs_heap_peak(void)
{
    return __atomic_load_n(&peak, __ATOMIC_RELAXED);
}

/* The library's blocks: `align` (a power of two) over a counted block; the counted pointer is
 * kept just below the aligned one. Counted as the size asked for, like the tool's own. */
static void *lib_alloc(void *user, size_t size, size_t align)
{
    unsigned char *raw, *p;
    size_t extra = align + sizeof(void *);

    (void)user;
    if (align < sizeof(void *))
        align = sizeof(void *), extra = align + sizeof(void *);
    if (size > SIZE_MAX - extra || !(raw = qs_heap_malloc(size + extra)))
        return NULL;
    p = (unsigned char *)(((uintptr_t)raw + sizeof(void *) + align - 1) & ~(uintptr_t)(align - 1));
    memcpy(p - sizeof(void *), &raw, sizeof raw);
    return p;
}

static void lib_free(void *user, void *p)
{
    void *raw;

    (void)user;
    if (!p)
        return;
    memcpy(&raw, (unsigned char *)p - sizeof(void *), sizeof raw);
    qs_heap_free(raw);
}

qs_allocator qs_heap_allocator(void)
{
    qs_allocator a = {lib_alloc, lib_free, NULL};
    return a;
}

void qs_heap_hook_jansson(void)
{
#ifdef QS_TOOL_JANSSON
    json_set_alloc_funcs(qs_heap_malloc, qs_heap_free);
#endif
}
