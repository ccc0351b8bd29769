/* SPDX-License-Identifier: MIT */
/*
 * The tool's safetensors reader (tools/safetensors.h) on arbitrary files. The input is the whole
 * file; it is handed to qs_st_open through a memfd, so no disk is involved. Checked on every file
 * the reader accepts, against what its header promises: the header and data section tile the
 * file; every tensor has a known dtype, a shape of at most 8 non-negative dimensions whose product
 * times the element size equals its byte range, lies inside the data section, and overlaps no
 * other non-empty tensor (all pairs, not only neighbours); qs_st_find finds each one; metadata
 * values are strings. Then the accepted file is written back with the writer into a private
 * temporary directory and read again: same tensors, same bytes, same metadata.
 */
#define _GNU_SOURCE /* memfd_create */
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <unistd.h>

#include "fuzz_common.h"
#include "heap.h"
#include "safetensors.h"

static int memfd = -1;
static char memfd_path[64];
static char out_dir[4096], out_path[4200];

static void cleanup(void)
{
    unlink(out_path);
    rmdir(out_dir);
}

static void setup(void)
{
    if (memfd >= 0)
        return;
    /* as the tool's main() does: safetensors.c frees jansson's strings with qs_heap_free */
    qs_heap_hook_jansson();
    memfd = memfd_create("fuzz_safetensors", 0);
    if (memfd < 0)
        fz_fail("memfd_create failed");
    snprintf(memfd_path, sizeof memfd_path, "/proc/self/fd/%d", memfd);
    const char *tmp = getenv("TMPDIR");
    snprintf(out_dir, sizeof out_dir, "%s/qs_fuzz_st_XXXXXX", tmp && *tmp ? tmp : "/tmp");
    if (!mkdtemp(out_dir))
        fz_fail("mkdtemp failed");
    snprintf(out_path, sizeof out_path, "%s/out.safetensors", out_dir);
    atexit(cleanup);
}

static void check_invariants(const struct qs_st_file *f)
{
    fz_check(8 + f->header_len + f->data_size == f->map_size, "header and data do not tile the file");
    fz_check(f->data == f->map + 8 + f->header_len, "data section pointer");
    for (size_t i = 0; i < f->count; i++) {
        const struct qs_st_tensor *t = &f->tensors[i];
        fz_check(t->name != NULL, "tensor %zu has no name", i);
        fz_check(strcmp(t->name, "__metadata__") != 0, "__metadata__ taken as a tensor");
        fz_check(t->elem_size > 0 && t->elem_size == qs_st_dtype_size(t->dtype),
                 "tensor '%s': dtype '%s' with element size %d", t->name, t->dtype, t->elem_size);
        fz_check(t->ndim >= 0 && t->ndim <= QS_ST_MAX_DIMS, "tensor '%s': ndim %d", t->name,
                 t->ndim);
        int64_t numel = 1;
        for (int d = 0; d < t->ndim; d++) {
            fz_check(t->shape[d] >= 0, "tensor '%s': negative dimension", t->name);
            fz_check(!__builtin_mul_overflow(numel, t->shape[d], &numel),
                     "tensor '%s': shape product overflows", t->name);
        }
        fz_check(numel == t->numel, "tensor '%s': numel %lld, shape gives %lld", t->name,
                 (long long)t->numel, (long long)numel);
        fz_check(t->begin <= t->end && t->end <= f->data_size,
                 "tensor '%s': range [%llu, %llu) outside a data section of %llu bytes", t->name,
                 (unsigned long long)t->begin, (unsigned long long)t->end,
                 (unsigned long long)f->data_size);
        fz_check((uint64_t)numel * (uint64_t)t->elem_size == t->end - t->begin,
                 "tensor '%s': %lld elements of %d bytes in %llu bytes", t->name,
                 (long long)numel, t->elem_size, (unsigned long long)(t->end - t->begin));
        fz_check(t->data == f->data + t->begin, "tensor '%s': data pointer", t->name);
        fz_check(qs_st_find(f, t->name) == t, "qs_st_find('%s') finds another tensor", t->name);
        for (size_t j = 0; j < i && !fz_known("overlap"); j++) {
            const struct qs_st_tensor *u = &f->tensors[j];
            int empty = t->begin == t->end || u->begin == u->end;
            fz_check(empty || t->end <= u->begin || u->end <= t->begin,
                     "tensors '%s' [%llu, %llu) and '%s' [%llu, %llu) overlap", t->name,
                     (unsigned long long)t->begin, (unsigned long long)t->end, u->name,
                     (unsigned long long)u->begin, (unsigned long long)u->end);
        }
    }
    if (f->metadata) {
        const char *k;
        json_t *v;
        json_object_foreach(f->metadata, k, v)
            fz_check(json_is_string(v), "metadata value of '%s' is not a string", k);
    }
}

/* Write f back through the writer, read it again and compare. */
static void check_rewrite(const struct qs_st_file *f)
{
    struct qs_st_writer w;
    char err[512];
    qs_st_writer_init(&w);
    for (size_t i = 0; i < f->count; i++) {
        const struct qs_st_tensor *t = &f->tensors[i];
        if (qs_st_writer_add(&w, t->name, t->dtype, t->ndim, t->shape, t->data, t->end - t->begin,
                             NULL, err, sizeof err) != 0)
            fz_fail("writer refuses accepted tensor '%s': %s", t->name, err);
    }
    if (f->metadata) {
        const char *k;
        json_t *v;
        json_object_foreach(f->metadata, k, v)
            fz_check(qs_st_writer_meta(&w, k, json_string_value(v)) == 0, "writer_meta '%s'", k);
    }
    /* the streaming writer, as the tool uses it: the header, then each tensor's bytes in order */
    struct qs_st_stream s;
    if (qs_st_stream_begin(&s, &w, out_path, err, sizeof err) != 0)
        fz_fail("writing an accepted file back failed: %s", err);
    for (size_t i = 0; i < f->count; i++) {
        const struct qs_st_tensor *t = &f->tensors[i];
        if (qs_st_stream_put(&s, t->data, t->end - t->begin, err, sizeof err) != 0)
            fz_fail("writing tensor '%s' back failed: %s", t->name, err);
    }
    if (qs_st_stream_end(&s, err, sizeof err) != 0)
        fz_fail("finishing the rewritten file failed: %s", err);
    qs_st_writer_free(&w);

    struct qs_st_file g;
    if (qs_st_open(&g, out_path, err, sizeof err) != 0)
        fz_fail("the reader refuses what the writer wrote: %s", err);
    check_invariants(&g);
    fz_check(g.count == f->count, "rewritten file has %zu tensors, not %zu", g.count, f->count);
    for (size_t i = 0; i < f->count; i++) {
        const struct qs_st_tensor *t = &f->tensors[i], *u = qs_st_find(&g, t->name);
        fz_check(u != NULL, "tensor '%s' lost in the rewrite", t->name);
        fz_check(strcmp(t->dtype, u->dtype) == 0 && t->ndim == u->ndim &&
                     memcmp(t->shape, u->shape, sizeof t->shape[0] * (size_t)t->ndim) == 0 &&
                     t->end - t->begin == u->end - u->begin &&
                     memcmp(t->data, u->data, t->end - t->begin) == 0,
                 "tensor '%s' changed in the rewrite", t->name);
    }
    if (f->metadata) {
        const char *k;
        json_t *v;
        json_object_foreach(f->metadata, k, v)
        {
            json_t *x = g.metadata ? json_object_get(g.metadata, k) : NULL;
            fz_check(x && json_equal(x, v), "metadata '%s' changed in the rewrite", k);
        }
    }
    qs_st_close(&g);
    unlink(out_path);
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    setup();
    if (ftruncate(memfd, 0) != 0 || pwrite(memfd, data, size, 0) != (ssize_t)size)
        fz_fail("writing the memfd failed");

    struct qs_st_file f;
    char err[512];
    err[0] = 0;
    if (qs_st_open(&f, memfd_path, err, sizeof err) != 0) {
        fz_check(err[0] != 0, "qs_st_open failed without a message");
        fz_check(memchr(err, 0, sizeof err) != NULL, "unterminated message");
        fz_check(f.map == NULL && f.tensors == NULL && f.root == NULL && f.count == 0,
                 "a failing qs_st_open left state behind");
        return 0;
    }
    check_invariants(&f);
    check_rewrite(&f);
    qs_st_close(&f);
    return 0;
}
