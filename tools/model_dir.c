/* SPDX-License-Identifier: MIT */
/* Hugging Face model folders in and out (model_dir.h). */
#define _POSIX_C_SOURCE 200809L
#define _XOPEN_SOURCE 700

#include "model_dir.h"
#include "file_kind.h"
#include "folder_links.h"
#include "heap.h"
#include "output_path.h"
#include "side_file.h"

#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <signal.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#define INDEX_NAME QS_INDEX_NAME
#define TMP_TAG ".qsparse-tmp-"

static void fail(char *err, size_t errlen, const char *fmt, ...)
{
    va_list ap;

    va_start(ap, fmt);
    vsnprintf(err, errlen, fmt, ap);
    va_end(ap);
}

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

int qs_is_dir(const char *path)
{
    struct stat sb;

    return stat(path, &sb) == 0 && S_ISDIR(sb.st_mode);
}

static int cmp_str(const void *a, const void *b)
{
    return strcmp(*(const char *const *)a, *(const char *const *)b);
}

int qs_plain_name(const char *s)
{
    return *s && strchr(s, '/') == NULL && strcmp(s, ".") != 0 && strcmp(s, "..") != 0;
}

/* A side JSON file of the folder (side_file.h), a link only to a file inside it
 * (folder_links.h). *missing (may be NULL) is set when the file does not exist. */
static json_t *load_json(const struct qs_folder_root *root, const char *dir, const char *name,
                         int *missing, char *err, size_t errlen)
{
    char *path = join(dir, name), real[PATH_MAX];
    json_t *j = NULL;
    int r;

    if (missing)
        *missing = 0;
    if (!path)
        return fail(err, errlen, "out of memory"), NULL;
    r = qs_folder_file(root, path, real, sizeof real, err, errlen);
    if (r == 1) {
        if (missing)
            *missing = 1;
        fail(err, errlen, "%s: %s", path, strerror(ENOENT));
    } else if (r == 0) {
        j = qs_side_json(path, missing, err, errlen);
    }
    qs_heap_free(path);
    return j;
}

int qs_model_dir_open(struct qs_model_dir *m, const char *dir, char *err, size_t errlen)
{
    char *p, real[PATH_MAX];
    struct qs_folder_root root;
    json_t *idx;
    int missing;

    memset(m, 0, sizeof *m);
    if (!(m->dir = qs_heap_strdup(dir)))
        return fail(err, errlen, "out of memory"), -1;
    if (qs_folder_root(&root, dir, err, errlen) != 0)
        goto bad;
    m->config = load_json(&root, dir, "config.json", &missing, err, errlen);
    if (!m->config && missing)
        fail(err, errlen,
             "%s has no config.json: a Hugging Face model folder holds config.json beside its "
             "weights (for one file, pass the .safetensors file itself)",
             dir);
    if (!m->config)
        goto bad;
    if (json_object_get(m->config, "quantization_config")) {
        fail(err, errlen,
             "%s/config.json already has a quantization_config: the model is "
             "quantized already",
             dir);
        goto bad;
    }
    idx = load_json(&root, dir, INDEX_NAME, &missing, err, errlen);
    m->indexed = !missing;
    if (!idx && !missing)
        goto bad;
    if (idx) {
        json_t *map = json_object_get(idx, "weight_map"), *v;
        const char *k;
        size_t n = 0;
        if (!json_is_object(map) || json_object_size(map) == 0) {
            fail(err, errlen, "%s/" INDEX_NAME ": no weight_map", dir);
            json_decref(idx);
            goto bad;
        }
        m->shards = qs_heap_calloc(json_object_size(map), sizeof *m->shards);
        if (!m->shards) {
            json_decref(idx);
            goto oom;
        }
        json_object_foreach(map, k, v)
        {
            const char *s = json_string_value(v);
            if (!s || !qs_plain_name(s)) {
                fail(err, errlen, "%s/" INDEX_NAME ": tensor '%s' names no file of the folder", dir,
                     k);
                json_decref(idx);
                goto bad;
            }
            if (!(m->shards[n++] = qs_heap_strdup(s))) {
                json_decref(idx);
                goto oom;
            }
            m->nshards = n; /* so that a later refusal frees the names so far */
        }
        /* kept: each tensor's shard is checked against the shards' headers */
        m->weight_map = json_incref(map);
        json_decref(idx);
        qsort(m->shards, n, sizeof *m->shards, cmp_str);
        m->nshards = 0;
        for (size_t i = 0; i < n; i++) { /* unique names, in order */
            if (m->nshards && strcmp(m->shards[m->nshards - 1], m->shards[i]) == 0) {
                qs_heap_free(m->shards[i]);
                continue;
            }
            m->shards[m->nshards++] = m->shards[i];
        }
    } else {
        if (!(m->shards = qs_heap_calloc(1, sizeof *m->shards)) ||
            !(m->shards[0] = qs_heap_strdup("model.safetensors")))
            goto oom;
        m->nshards = 1;
    }
    if (m->indexed && !(m->holder = json_object()))
        goto oom;
    for (size_t i = 0; i < m->nshards; i++) {
        int r;
        if (!(p = join(dir, m->shards[i])))
            goto oom;
        r = qs_folder_file(&root, p, real, sizeof real, err, errlen);
        if (r == 1 && !m->indexed && qs_folder_kind_hint(dir))
            fail(err, errlen, "%s: %s", dir, qs_folder_kind_hint(dir));
        else if (r == 1)
            fail(err, errlen, "%s: %s%s", p, strerror(ENOENT),
                 m->indexed ? ""
                            : " (a model folder holds model.safetensors, or shards and " INDEX_NAME
                              ")");
        qs_heap_free(p);
        if (r != 0)
            goto bad;
    }
    return 0;
oom:
    fail(err, errlen, "out of memory");
bad:
    qs_model_dir_close(m);
    return -1;
}

int qs_model_dir_note_tensors(struct qs_model_dir *m, size_t shard,
                              const struct qs_st_file *f, char *err, size_t errlen)
{
    if (!m->holder)
        return 0;
    for (size_t t = 0; t < f->count; t++) {
        const char *name = f->tensors[t].name;
        json_t *had = json_object_get(m->holder, name);
        if (had) {
            fail(err, errlen, "tensor '%s' is held by two shards, %s and %s: which one the index "
                 "means is not for the tool to guess", name,
                 m->shards[json_integer_value(had)], m->shards[shard]);
            return -1;
        }
        if (json_object_set_new(m->holder, name, json_integer((json_int_t)shard)) != 0) {
            fail(err, errlen, "out of memory");
            return -1;
        }
    }
    return 0;
}

int qs_model_dir_check_index(const struct qs_model_dir *m, char *err, size_t errlen)
{
    const char *name;
    json_t *v;

    if (!m->weight_map)
        return 0;
    json_object_foreach(m->weight_map, name, v)
    {
        const char *want = json_string_value(v);
        json_t *had = json_object_get(m->holder, name);
        if (!had) {
            fail(err, errlen, INDEX_NAME ": tensor '%s' is in shard %s, which does not hold it "
                 "(no shard does)", name, want);
            return -1;
        }
        if (strcmp(m->shards[json_integer_value(had)], want) != 0) {
            fail(err, errlen, INDEX_NAME ": tensor '%s' is in shard %s, which does not hold it "
                 "(%s does)", name, want, m->shards[json_integer_value(had)]);
            return -1;
        }
    }
    return 0;
}

void qs_model_dir_close(struct qs_model_dir *m)
{
    for (size_t i = 0; i < m->nshards; i++)
        qs_heap_free(m->shards[i]);
    qs_heap_free(m->shards);
    if (m->config)
        json_decref(m->config);
    if (m->weight_map)
        json_decref(m->weight_map);
    if (m->holder)
        json_decref(m->holder);
    qs_heap_free(m->dir);
    memset(m, 0, sizeof *m);
}

/* ---- output ------------------------------------------------------------------------------------
 */

/* rm -r of a folder this tool created (regular files and folders; links are removed, not
 * followed). */
static void remove_tree(const char *path)
{
    DIR *d = opendir(path);
    struct dirent *e;

    if (d) {
        while ((e = readdir(d)) != NULL) {
            struct stat sb;
            char *p;
            if (strcmp(e->d_name, ".") == 0 || strcmp(e->d_name, "..") == 0)
                continue;
            if (!(p = join(path, e->d_name)))
                continue;
            if (lstat(p, &sb) == 0 && S_ISDIR(sb.st_mode))
                remove_tree(p);
            else
                unlink(p);
            qs_heap_free(p);
        }
        closedir(d);
    }
    rmdir(path);
}

/* Temporary folders of earlier runs for the same output whose process is gone. */
static void remove_stale(const char *dir, const char *prefix)
{
    size_t plen = strlen(prefix);
    DIR *d = opendir(dir);
    struct dirent *e;

    if (!d)
        return;
    while ((e = readdir(d)) != NULL) {
        const char *p = e->d_name + plen;
        long long pid = 0;
        int digits = 0;
        char *path;
        if (strncmp(e->d_name, prefix, plen) != 0)
            continue;
        while (*p >= '0' && *p <= '9' && digits < 10)
            pid = pid * 10 + (*p++ - '0'), digits++;
        if (!digits || *p != '-' || strlen(p + 1) != 6 || pid <= 0 || pid == (long long)getpid())
            continue;
        if (kill((pid_t)pid, 0) == 0 || errno != ESRCH)
            continue;
        if ((path = join(dir, e->d_name)) != NULL) {
            struct stat sb;
            if (lstat(path, &sb) == 0 && S_ISDIR(sb.st_mode))
                remove_tree(path);
            qs_heap_free(path);
        }
    }
    closedir(d);
}

int qs_model_out_begin(struct qs_model_out *o, const char *out, int replace, char *err,
                       size_t errlen)
{
    char dir[PATH_MAX], prefix[NAME_MAX + 1];
    const char *base;
    size_t n = strlen(out);
    struct stat sb;
    int len;

    memset(o, 0, sizeof *o);
    while (n > 1 && out[n - 1] == '/')
        n--;
    if (n + 64 >= PATH_MAX)
        return fail(err, errlen, "output path too long"), -1;
    memcpy(o->final, out, n);
    o->final[n] = '\0';
    base = strrchr(o->final, '/');
    if (base) {
        snprintf(dir, sizeof dir, "%.*s", base == o->final ? 1 : (int)(base - o->final), o->final);
        base++;
    } else {
        snprintf(dir, sizeof dir, ".");
        base = o->final;
    }
    if (lstat(o->final, &sb) == 0) {
        DIR *d;
        struct dirent *e;
        int empty = 1;
        if (!S_ISDIR(sb.st_mode))
            return fail(err, errlen, "%s exists and is not a folder", o->final), -1;
        if (!(d = opendir(o->final)))
            return fail(err, errlen, "%s: %s", o->final, strerror(errno)), -1;
        while ((e = readdir(d)) != NULL)
            if (strcmp(e->d_name, ".") != 0 && strcmp(e->d_name, "..") != 0)
                empty = 0;
        closedir(d);
        if (!empty && !replace)
            return fail(err, errlen, "%s is not empty: remove it or choose another output folder",
                        o->final),
                   -1;
        o->replace = !empty;
    }
    snprintf(prefix, sizeof prefix, ".%.*s" TMP_TAG, 128, base);
    remove_stale(dir, prefix);
    len = snprintf(o->tmp, sizeof o->tmp, "%s/%s%lld-XXXXXX", dir, prefix, (long long)getpid());
    if (len < 0 || (size_t)len >= sizeof o->tmp)
        return fail(err, errlen, "output path too long"), -1;
    if (!mkdtemp(o->tmp))
        return fail(err, errlen, "cannot create a temporary folder beside %s: %s", o->final,
                    strerror(errno)),
               -1;
    o->active = 1;
    return 0;
}

char *qs_model_out_path(const struct qs_model_out *o, const char *name)
{
    return join(o->tmp, name);
}

/* Top-level names that are weights of the float model, or its exports: not copied. */
static int is_weight_file(const char *name)
{
    static const char *const suffixes[] = {".safetensors", ".safetensors.index.json",
                                           ".bin",         ".bin.index.json",
                                           ".h5",          ".msgpack",
                                           ".pt",          ".pth",
                                           ".ckpt",        ".gguf"};
    static const char *const skipped[] = {"config.json", "hf_quant_config.json", "onnx",
                                          "openvino", QS_PART_MARKER};
    size_t n = strlen(name);

    for (size_t i = 0; i < sizeof skipped / sizeof skipped[0]; i++)
        if (strcmp(name, skipped[i]) == 0)
            return 1;
    for (size_t i = 0; i < sizeof suffixes / sizeof suffixes[0]; i++) {
        size_t k = strlen(suffixes[i]);
        if (n >= k && strcmp(name + n - k, suffixes[i]) == 0)
            return 1;
    }
    return 0;
}

/* Copy the regular file `from` (never through a symbolic link: callers resolve links with
 * folder_links.h first; O_NONBLOCK: a FIFO swapped in is refused, not waited on). */
static int copy_file(const char *from, const char *to, char *err, size_t errlen)
{
    char buf[1 << 16];
    int in = open(from, O_RDONLY | O_NOFOLLOW | O_NONBLOCK | O_NOCTTY | O_CLOEXEC), out;
    struct stat sb;
    ssize_t k;

    if (in < 0)
        return fail(err, errlen, "%s: %s", from, strerror(errno)), -1;
    if (fstat(in, &sb) != 0 || !S_ISREG(sb.st_mode)) {
        fail(err, errlen, "%s: not a regular file", from);
        close(in);
        return -1;
    }
    out = open(to, O_WRONLY | O_CREAT | O_EXCL | O_CLOEXEC, 0666);
    if (out < 0) {
        fail(err, errlen, "%s: %s", to, strerror(errno));
        close(in);
        return -1;
    }
    while ((k = read(in, buf, sizeof buf)) != 0) {
        const char *p = buf;
        if (k < 0) {
            if (errno == EINTR)
                continue;
            goto io;
        }
        while (k > 0) {
            ssize_t w = write(out, p, (size_t)k);
            if (w < 0) {
                if (errno == EINTR)
                    continue;
                goto io;
            }
            p += w;
            k -= w;
        }
    }
    close(in);
    if (close(out) != 0)
        return fail(err, errlen, "%s: %s", to, strerror(errno)), -1;
    return 0;
io:
    fail(err, errlen, "copying %s: %s", from, strerror(errno));
    close(in);
    close(out);
    return -1;
}

/* Copy folder `from` into the existing folder `to`; `top` skips the float weights. Real
 * folders are copied into, regular files copied; a symbolic link only as the file it leads to
 * inside the root (a Hugging Face cache snapshot is made of them), any other link is an error
 * naming it (folder_links.h); sockets, FIFOs and devices are not part of a model. */
static int copy_tree(const struct qs_folder_root *root, const char *from, const char *to, int top,
                     char *err, size_t errlen)
{
    DIR *d = opendir(from);
    struct dirent *e;
    int rc = 0;

    if (!d)
        return fail(err, errlen, "%s: %s", from, strerror(errno)), -1;
    while (rc == 0 && (e = readdir(d)) != NULL) {
        struct stat sb;
        char *src, *dst;
        if (strcmp(e->d_name, ".") == 0 || strcmp(e->d_name, "..") == 0)
            continue;
        if (top && is_weight_file(e->d_name))
            continue;
        src = join(from, e->d_name);
        dst = join(to, e->d_name);
        if (!src || !dst) {
            fail(err, errlen, "out of memory");
            rc = -1;
        } else if (lstat(src, &sb) != 0) {
            fail(err, errlen, "%s: %s", src, strerror(errno));
            rc = -1;
        } else if (S_ISDIR(sb.st_mode)) {
            if (mkdir(dst, 0777) != 0) {
                fail(err, errlen, "%s: %s", dst, strerror(errno));
                rc = -1;
            } else {
                rc = copy_tree(root, src, dst, 0, err, errlen);
            }
        } else if (S_ISREG(sb.st_mode)) {
            rc = copy_file(src, dst, err, errlen);
        } else if (S_ISLNK(sb.st_mode)) {
            char real[PATH_MAX];
            int r = qs_folder_file(root, src, real, sizeof real, err, errlen);
            if (r == 1)
                fail(err, errlen, "%s: %s", src, strerror(ENOENT));
            rc = r == 0 ? copy_file(real, dst, err, errlen) : -1;
        }
        qs_heap_free(src);
        qs_heap_free(dst);
    }
    closedir(d);
    return rc;
}

int qs_model_out_copy_rest(const struct qs_model_dir *m, const struct qs_model_out *o, char *err,
                           size_t errlen)
{
    return qs_model_out_copy_from(m->dir, o, err, errlen);
}

int qs_model_out_copy_from(const char *dir, const struct qs_model_out *o, char *err,
                           size_t errlen)
{
    struct qs_folder_root root;

    if (qs_folder_root(&root, dir, err, errlen) != 0)
        return -1;
    return copy_tree(&root, dir, o->tmp, 1, err, errlen);
}

int qs_link_or_copy(const char *from, const char *to, char *err, size_t errlen)
{
    if (link(from, to) == 0)
        return 0;
    return copy_file(from, to, err, errlen);
}

json_t *qs_model_index_json(uint64_t total, json_t *weight_map)
{
    return json_pack("{s:{s:I}, s:O}", "metadata", "total_size", (json_int_t)total, "weight_map",
                     weight_map);
}

int qs_model_out_json(const struct qs_model_out *o, const char *name, const json_t *j, char *err,
                      size_t errlen)
{
    char *path = join(o->tmp, name);
    FILE *f;
    int rc = 0;

    if (!path)
        return fail(err, errlen, "out of memory"), -1;
    f = fopen(path, "w");
    if (!f) {
        fail(err, errlen, "%s: %s", path, strerror(errno));
        qs_heap_free(path);
        return -1;
    }
    if (json_dumpf(j, f, JSON_INDENT(2)) != 0 || fputc('\n', f) == EOF)
        rc = -1;
    if (fclose(f) != 0)
        rc = -1;
    if (rc)
        fail(err, errlen, "writing %s: %s", path, strerror(errno));
    qs_heap_free(path);
    return rc;
}

/* Replace the folder o->final by o->tmp; the old one is removed. */
static int replace_dir(struct qs_model_out *o, char *err, size_t errlen)
{
    char aside[PATH_MAX];
    int len;

    if (qs_path_exchange(o->tmp, o->final) == 0) {
        remove_tree(o->tmp); /* the old output, now under the temporary name */
        o->active = 0;
        return 0;
    }
    if (errno != ENOSYS && errno != EINVAL)
        return fail(err, errlen, "replacing %s: %s", o->final, strerror(errno)), -1;
    len = snprintf(aside, sizeof aside, "%s.qsparse-old-%lld", o->tmp, (long long)getpid());
    if (len < 0 || (size_t)len >= sizeof aside)
        return fail(err, errlen, "output path too long"), -1;
    if (rename(o->final, aside) != 0)
        return fail(err, errlen, "moving %s aside: %s", o->final, strerror(errno)), -1;
    if (rename(o->tmp, o->final) != 0) {
        int e = errno;
        if (rename(aside, o->final) != 0)
            return fail(err, errlen, "renaming %s to %s: %s; the old output is %s", o->tmp,
                        o->final, strerror(e), aside),
                   -1;
        return fail(err, errlen, "renaming %s to %s: %s", o->tmp, o->final, strerror(e)), -1;
    }
    o->active = 0;
    remove_tree(aside);
    return 0;
}

int qs_model_out_commit(struct qs_model_out *o, char *err, size_t errlen)
{
    struct stat sb;

    if (o->replace && lstat(o->final, &sb) == 0 && S_ISDIR(sb.st_mode))
        return replace_dir(o, err, errlen);
    if (rename(o->tmp, o->final) != 0) {
        fail(err, errlen, "renaming %s to %s: %s", o->tmp, o->final, strerror(errno));
        return -1;
    }
    o->active = 0;
    return 0;
}

void qs_model_out_abort(struct qs_model_out *o)
{
    if (o->active)
        remove_tree(o->tmp);
    o->active = 0;
}
