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
 *
 * Part folders may come from other machines, so the markers are checked like any input before
 * anything is written: every shard name a plain file name (the check the model-folder reader
 * applies to an index: a name like "../../x.safetensors" would otherwise be joined to OUT_DIR),
 * the input shards unique, part numbers inside 0 ... N-1, every shard owned by its part, and
 * no tensor held by two shards. Markers and the compared files are side files (side_file.h);
 * a link in a part folder must lead to a regular file inside it (folder_links.h).
 */
#define _POSIX_C_SOURCE 200809L

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

#include "commands.h"
#include "escape.h"
#include "folder_links.h"
#include "heap.h"
#include "model_dir.h"
#include "safetensors.h"
#include "side_file.h"

#define ERRLEN 1024

struct part {
    const char *dir;
    struct qs_folder_root root;
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

/* `name` of part p as the file it stands for (folder_links.h) in real: 0, 1 when it does not
 * exist, -1 with err. */
static int part_file(const struct part *p, const char *name, char *real, size_t reallen,
                     char *err, size_t errlen)
{
    char *path = join(p->dir, name);
    int r;

    if (!path) {
        snprintf(err, errlen, "out of memory");
        return -1;
    }
    r = qs_folder_file(&p->root, path, real, reallen, err, errlen);
    qs_heap_free(path);
    return r;
}

/* The whole side file `name` of part p (qs_heap_malloc'd) and its size; NULL when it cannot be
 * read (err says why). A missing file gives NULL with *missing set. */
static unsigned char *slurp(const struct part *p, const char *name, size_t *n, int *missing,
                            char *err, size_t errlen)
{
    char real[PATH_MAX];
    int r = part_file(p, name, real, sizeof real, err, errlen);

    *missing = r == 1;
    return r == 0 ? qs_side_read(real, n, missing, err, errlen) : NULL;
}

/* Whether `name` is byte for byte the same in every part (or absent from all); err says why
 * not when a file cannot be read. */
static int same_file(const struct part *p, size_t np, const char *name, int *present, char *err,
                     size_t errlen)
{
    size_t n0 = 0, n = 0;
    int miss0, miss, ok = 1;
    unsigned char *first = slurp(&p[0], name, &n0, &miss0, err, errlen);

    *present = first != NULL;
    if (!first && !miss0)
        return 0;
    for (size_t i = 1; ok && i < np; i++) {
        unsigned char *b = slurp(&p[i], name, &n, &miss, err, errlen);
        ok = first ? b && n == n0 && memcmp(b, first, n) == 0 : !b && miss;
        if (!ok && (b || miss)) /* else err says why the file could not be read */
            snprintf(err, errlen, "%s differs between the parts", name);
        qs_heap_free(b);
    }
    qs_heap_free(first);
    return ok;
}

static int cmp_str(const void *a, const void *b)
{
    return strcmp(*(const char *const *)a, *(const char *const *)b);
}

/* Every entry of the marker's array `key` a plain file name (model_dir.h); with `unique`, no
 * name twice. Returns 0, or -1 after printing the error. */
static int check_names(const struct part *p, const char *key, int unique)
{
    json_t *a = json_object_get(p->marker, key), *v;
    size_t n = json_array_size(a), i;
    const char **sorted;

    json_array_foreach(a, i, v)
    {
        if (!json_is_string(v) || !qs_plain_name(json_string_value(v))) {
            fputs("qsparse merge-index: error: " QS_PART_MARKER " in ", stderr);
            qs_escape_print(stderr, p->dir);
            fprintf(stderr, ": %s[%zu] ", key, i);
            if (json_is_string(v)) {
                fputc('\'', stderr);
                qs_escape_print(stderr, json_string_value(v));
                fputs("' is not a plain file name inside the folder\n", stderr);
            } else {
                fputs("is not a file name\n", stderr);
            }
            return -1;
        }
    }
    if (!unique || n < 2)
        return 0;
    if (!(sorted = qs_heap_calloc(n, sizeof *sorted))) {
        fprintf(stderr, "qsparse merge-index: error: out of memory\n");
        return -1;
    }
    for (i = 0; i < n; i++)
        sorted[i] = json_string_value(json_array_get(a, i));
    qsort(sorted, n, sizeof *sorted, cmp_str);
    for (i = 1; i < n; i++)
        if (strcmp(sorted[i - 1], sorted[i]) == 0) {
            error(QS_PART_MARKER " names the input shard ", sorted[i], " twice");
            qs_heap_free(sorted);
            return -1;
        }
    qs_heap_free(sorted);
    return 0;
}

/* Read and check the markers; p[] sorted by part number on return. */
static int read_parts(struct part *p, size_t np)
{
    json_t *ref = NULL;

    for (size_t i = 0; i < np; i++) {
        char err[ERRLEN], real[PATH_MAX];
        json_t *m = NULL;
        int r;
        if (qs_folder_root(&p[i].root, p[i].dir, err, sizeof err) != 0) {
            error("", err, "");
            return -1;
        }
        r = part_file(&p[i], QS_PART_MARKER, real, sizeof real, err, sizeof err);
        if (r == 0)
            m = qs_side_json(real, NULL, err, sizeof err);
        if (!m) {
            if (r == 1)
                error("", p[i].dir,
                      " has no readable " QS_PART_MARKER
                      ": not a part written by `qsparse quantize --shard I/N`");
            else
                error("", err, "");
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
        if (json_integer_value(json_object_get(m, "parts")) < 1 || p[i].index < 0 ||
            p[i].index >= json_integer_value(json_object_get(m, "parts"))) {
            error(QS_PART_MARKER " in ", p[i].dir, ": part number outside 0 ... parts - 1");
            return -1;
        }
        if (check_names(&p[i], "shards", 1) != 0 || check_names(&p[i], "input_shards", 1) != 0)
            return -1;
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
    for (size_t i = 0; i < sizeof extra / sizeof extra[0]; i++) {
        if (!same_file(p, np, extra[i], &present, err, sizeof err)) {
            error("", err, "");
            goto done;
        }
        if (i == 0 && !present) {
            fprintf(stderr, "qsparse merge-index: error: %s is missing from the first part\n",
                    extra[i]);
            goto done;
        }
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
    for (size_t j = 0; j < nshards; j++) {
        const char *name = json_string_value(json_array_get(all, j));
        if (!owner(p, np, j, name)) {
            error("no part holds the shard ", name, "");
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
        char real[PATH_MAX], *to = qs_model_out_path(&out, extra[i]);
        int r = to ? part_file(&p[0], extra[i], real, sizeof real, err, sizeof err) : -1;
        if (!to)
            snprintf(err, sizeof err, "out of memory");
        if (r == 0)
            r = qs_link_or_copy(real, to, err, sizeof err);
        qs_heap_free(to);
        if (r < 0) {
            error("", err, "");
            goto done;
        }
    }
    if (!(map = json_object()))
        goto oom;
    for (size_t j = 0; j < nshards; j++) {
        const char *name = json_string_value(json_array_get(all, j));
        const struct part *o = owner(p, np, j, name);
        char from[PATH_MAX], *to;
        struct qs_st_file f;
        int r = part_file(o, name, from, sizeof from, err, sizeof err);
        if (r == 1)
            snprintf(err, sizeof err, "%s/%s: the part's shard is missing", o->dir, name);
        if (r != 0) {
            error("", err, "");
            goto done;
        }
        if (!(to = qs_model_out_path(&out, name)))
            goto oom;
        /* its header validated, its tensors into the index, each from one shard only */
        r = qs_st_open(&f, from, err, sizeof err);
        if (r == 0) {
            for (size_t t = 0; r == 0 && t < f.count; t++) {
                json_t *had = json_object_get(map, f.tensors[t].name);
                total += f.tensors[t].end - f.tensors[t].begin;
                if (had) {
                    snprintf(err, sizeof err, "tensor '%s' is held by two shards, %s and %s",
                             f.tensors[t].name, json_string_value(had), name);
                    r = -1;
                } else if (json_object_set_new(map, f.tensors[t].name, json_string(name)) != 0) {
                    snprintf(err, sizeof err, "out of memory");
                    r = -1;
                }
            }
            qs_st_close(&f);
        }
        if (r == 0)
            r = qs_link_or_copy(from, to, err, sizeof err);
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
