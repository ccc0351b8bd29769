/* SPDX-License-Identifier: MIT */
/*
 * `qsparse merge-index OUT_DIR PART_DIR...`: joins the parts that `qsparse quantize MODEL_DIR
 * --shard I/N -o PART_DIR` wrote (on one machine or many) into one model folder, the same bytes
 * as one run without --shard would have written.
 *
 * Each part holds its shards, the whole model's config.json (and the layout's extra file: every
 * part surveys all input headers) and qsparse-part.json: its number, the count of parts, its
 * shards, every input shard and the options that shape the output. The parts must be all N of
 * one split (each number once), of the same input shards and options, with identical
 * config.json and extra file; each input shard must be written by exactly the part it belongs
 * to. The index is rebuilt from the shards' own headers, in shard then tensor order, as
 * quantize writes it. Shards are hard-linked into OUT_DIR when they share its file system,
 * copied otherwise; the other files come from the first part. OUT_DIR is written as a whole or
 * not at all (model_dir.h).
 */
#define _POSIX_C_SOURCE 200809L

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

#include "commands.h"
#include "escape.h"
#include "heap.h"
#include "model_dir.h"
#include "safetensors.h"

#define ERRLEN 1024

struct part {
    const char *dir;
    json_t *marker;
    int64_t index;
};

static char *join(const char *a, const char *b)
{
    size_t la = strlen(a), lb = strlen(b);
    char *s = qs_heap_malloc(la + lb + 2);

    if (s) {
        memcpy(s, a, la);
        s[la] = '/';
        memcpy(s + la + 1, b, lb + 1);
    }
    return s;
}

/* "qsparse merge-index: error: BEFORE WHAT AFTER", WHAT (a path or a message quoting one)
 * printed escaped. */
static void error(const char *before, const char *what, const char *after)
{
    fprintf(stderr, "qsparse merge-index: error: %s", before);
    qs_escape_print(stderr, what);
    fprintf(stderr, "%s\n", after);
}

/* The whole file (qs_heap_malloc'd) and its size; NULL when it cannot be read. A missing file
 * gives NULL with *missing set. */
static unsigned char *slurp(const char *dir, const char *name, size_t *n, int *missing)
{
    char *path = join(dir, name);
    FILE *f = path ? fopen(path, "rb") : NULL;
    unsigned char *buf = NULL;
    long len;

    *missing = path && !f;
    qs_heap_free(path);
    if (!f)
        return NULL;
    if (fseek(f, 0, SEEK_END) == 0 && (len = ftell(f)) >= 0 && fseek(f, 0, SEEK_SET) == 0 &&
        (buf = qs_heap_malloc((size_t)len + 1)) != NULL &&
        fread(buf, 1, (size_t)len, f) != (size_t)len) {
        qs_heap_free(buf);
        buf = NULL;
    }
    if (buf)
        *n = (size_t)len;
    fclose(f);
    return buf;
}

/* Whether `name` is byte for byte the same in every part (or absent from all). */
static int same_file(const struct part *p, size_t np, const char *name, int *present)
{
    size_t n0 = 0, n = 0;
    int miss0, miss, ok = 1;
    unsigned char *first = slurp(p[0].dir, name, &n0, &miss0);

    *present = first != NULL;
    if (!first && !miss0)
        return 0;
    for (size_t i = 1; ok && i < np; i++) {
        unsigned char *b = slurp(p[i].dir, name, &n, &miss);
        ok = first ? b && n == n0 && memcmp(b, first, n) == 0 : !b && miss;
        qs_heap_free(b);
    }
    qs_heap_free(first);
    return ok;
}

/* Read and check the markers; p[] sorted by part number on return. */
static int read_parts(struct part *p, size_t np)
{
    json_t *ref = NULL;

    for (size_t i = 0; i < np; i++) {
        char *path = join(p[i].dir, QS_PART_MARKER);
        json_error_t je;
        json_t *m = path ? json_load_file(path, JSON_REJECT_DUPLICATES, &je) : NULL;
        qs_heap_free(path);
        if (!m) {
            error("", p[i].dir,
                  " has no readable " QS_PART_MARKER
                  ": not a part written by `qsparse quantize --shard I/N`");
            return -1;
        }
        p[i].marker = m;
        if (!json_is_integer(json_object_get(m, "part")) ||
            !json_is_integer(json_object_get(m, "parts")) ||
            !json_is_array(json_object_get(m, "shards")) ||
            !json_is_array(json_object_get(m, "input_shards")) ||
            !json_is_boolean(json_object_get(m, "indexed")) ||
            !json_is_array(json_object_get(m, "options"))) {
            error("malformed " QS_PART_MARKER " in ", p[i].dir, "");
            return -1;
        }
        p[i].index = json_integer_value(json_object_get(m, "part"));
    }
    /* sorted by part number: the first part gives the shared files */
    for (size_t i = 1; i < np; i++)
        for (size_t j = i; j > 0 && p[j - 1].index > p[j].index; j--) {
            struct part t = p[j];
            p[j] = p[j - 1];
            p[j - 1] = t;
        }
    ref = p[0].marker;
    if (json_integer_value(json_object_get(ref, "parts")) != (json_int_t)np) {
        fprintf(stderr,
                "qsparse merge-index: error: the parts were split %lld ways; %zu part folders "
                "given\n",
                (long long)json_integer_value(json_object_get(ref, "parts")), np);
        return -1;
    }
    for (size_t i = 0; i < np; i++) {
        json_t *m = p[i].marker;
        if (i > 0 && p[i].index == p[i - 1].index) {
            fprintf(stderr, "qsparse merge-index: error: part %lld is given twice\n",
                    (long long)p[i].index);
            return -1;
        }
        if (p[i].index != (int64_t)i) {
            fprintf(stderr, "qsparse merge-index: error: part %zu is missing\n", i);
            return -1;
        }
        if (!json_equal(json_object_get(m, "parts"), json_object_get(ref, "parts")) ||
            !json_equal(json_object_get(m, "input_shards"), json_object_get(ref, "input_shards")) ||
            !json_equal(json_object_get(m, "indexed"), json_object_get(ref, "indexed"))) {
            error("", p[i].dir, " is a part of another model or split than the first part");
            return -1;
        }
        if (!json_equal(json_object_get(m, "options"), json_object_get(ref, "options"))) {
            error("", p[i].dir, " was quantized with other options than the first part");
            return -1;
        }
    }
    return 0;
}

/* The part that wrote input shard `name` (which must be part j mod N for position j). */
static const struct part *owner(const struct part *p, size_t np, size_t j, const char *name)
{
    const struct part *o = &p[j % np];
    json_t *v;
    size_t k;

    for (k = 0; (v = json_array_get(json_object_get(o->marker, "shards"), k)) != NULL; k++)
        if (json_is_string(v) && strcmp(json_string_value(v), name) == 0)
            return o;
    return NULL;
}

int qs_cmd_merge_index(int argc, char **argv)
{
    struct part *p = NULL;
    struct qs_model_out out;
    json_t *all, *map = NULL;
    char err[ERRLEN];
    size_t np, nshards = 0;
    uint64_t total = 0;
    int rc = 1, present, started = 0;
    const char *extra[] = {"config.json", "hf_quant_config.json"};

    if (argc >= 2 && (strcmp(argv[1], "-h") == 0 || strcmp(argv[1], "--help") == 0)) {
        printf("usage: qsparse merge-index OUT_DIR PART_DIR...\n\n"
               "Joins the part folders of `qsparse quantize MODEL_DIR --shard I/N -o PART_DIR`\n"
               "(all N of them, in any order) into one model folder, with the index rebuilt\n"
               "from the shards: the same files as one run without --shard.\n");
        return 0;
    }
    if (argc < 3) {
        fprintf(stderr, "usage: qsparse merge-index OUT_DIR PART_DIR...\n");
        return 2;
    }
    np = (size_t)(argc - 2);
    if (!(p = qs_heap_calloc(np, sizeof *p)))
        goto oom;
    for (size_t i = 0; i < np; i++)
        p[i].dir = argv[i + 2];
    if (read_parts(p, np) != 0)
        goto done;
    for (size_t i = 0; i < sizeof extra / sizeof extra[0]; i++)
        if (!same_file(p, np, extra[i], &present) || (i == 0 && !present)) {
            fputs("qsparse merge-index: error: ", stderr);
            fputs(extra[i], stderr);
            fputs(i == 0 && !present ? " is missing from the first part\n"
                                     : " differs between the parts (or cannot be read)\n",
                  stderr);
            goto done;
        }
    all = json_object_get(p[0].marker, "input_shards");
    nshards = json_array_size(all);
    /* every part wrote exactly its own shards */
    for (size_t i = 0; i < np; i++) {
        size_t expect = 0;
        for (size_t j = 0; j < nshards; j++)
            expect += j % np == i;
        if (json_array_size(json_object_get(p[i].marker, "shards")) != expect) {
            error("", p[i].dir, " does not hold the shards of its part");
            goto done;
        }
    }
    if (qs_model_out_begin(&out, argv[1], 0, err, sizeof err) != 0) {
        error("", err, "");
        goto done;
    }
    started = 1;
    if (qs_model_out_copy_from(p[0].dir, &out, err, sizeof err) != 0) {
        error("", err, "");
        goto done;
    }
    for (size_t i = 0; i < sizeof extra / sizeof extra[0]; i++) {
        char *from = join(p[0].dir, extra[i]), *to = qs_model_out_path(&out, extra[i]);
        struct stat sb;
        int r = from && to ? 0 : -1;
        if (r == 0 && stat(from, &sb) == 0)
            r = qs_link_or_copy(from, to, err, sizeof err);
        else if (r != 0)
            snprintf(err, sizeof err, "out of memory");
        qs_heap_free(from);
        qs_heap_free(to);
        if (r != 0) {
            error("", err, "");
            goto done;
        }
    }
    if (!(map = json_object()))
        goto oom;
    for (size_t j = 0; j < nshards; j++) {
        const char *name = json_string_value(json_array_get(all, j));
        const struct part *o = name ? owner(p, np, j, name) : NULL;
        char *from, *to;
        struct qs_st_file f;
        int r;
        if (!o) {
            error("no part holds the shard ", name ? name : "?", "");
            goto done;
        }
        from = join(o->dir, name);
        to = qs_model_out_path(&out, name);
        if (!from || !to) {
            qs_heap_free(from);
            qs_heap_free(to);
            goto oom;
        }
        /* its header validated, its tensors into the index */
        r = qs_st_open(&f, from, err, sizeof err);
        if (r == 0) {
            for (size_t t = 0; r == 0 && t < f.count; t++) {
                total += f.tensors[t].end - f.tensors[t].begin;
                r = json_object_set_new(map, f.tensors[t].name, json_string(name));
                if (r != 0)
                    snprintf(err, sizeof err, "out of memory");
            }
            qs_st_close(&f);
        }
        if (r == 0)
            r = qs_link_or_copy(from, to, err, sizeof err);
        qs_heap_free(from);
        qs_heap_free(to);
        if (r != 0) {
            error("", err, "");
            goto done;
        }
    }
    if (json_is_true(json_object_get(p[0].marker, "indexed"))) {
        json_t *idx = qs_model_index_json(total, map);
        int r = idx ? qs_model_out_json(&out, QS_INDEX_NAME, idx, err, sizeof err) : -1;
        if (idx)
            json_decref(idx);
        if (!idx)
            goto oom;
        if (r != 0) {
            error("", err, "");
            goto done;
        }
    }
    if (qs_model_out_commit(&out, err, sizeof err) != 0) {
        error("", err, "");
        goto done;
    }
    printf("%s: %zu shards from %zu parts, %.2f MB of tensors\n", argv[1], nshards, np,
           (double)total / 1e6);
    rc = 0;
    goto done;
oom:
    fprintf(stderr, "qsparse merge-index: error: out of memory\n");
done:
    if (started)
        qs_model_out_abort(&out);
    if (map)
        json_decref(map);
    for (size_t i = 0; p && i < np; i++)
        if (p[i].marker)
            json_decref(p[i].marker);
    qs_heap_free(p);
    return rc;
}
