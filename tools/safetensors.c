/* SPDX-License-Identifier: MIT */
/*
 * safetensors reading (mmap + jansson, every offset validated before use) and atomic writing
 * (temporary file + rename) for the `qsparse` tool; the format is described in safetensors.h.
 * A hostile file must give a clear message, never a crash, an over-read or a huge allocation.
 */
#define _POSIX_C_SOURCE 200809L

#include "safetensors.h"

#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <signal.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

static void fail(char *err, size_t errlen, const char *fmt, ...)
{
    va_list ap;

    va_start(ap, fmt);
    vsnprintf(err, errlen, fmt, ap);
    va_end(ap);
}

static const struct {
    const char *name;
    int size;
} dtypes[] = {
    {"BOOL", 1}, {"U8", 1},  {"I8", 1},  {"F8_E4M3", 1}, {"F8_E5M2", 1}, {"F8_E8M0", 1},
    {"I16", 2},  {"U16", 2}, {"F16", 2}, {"BF16", 2},    {"I32", 4},     {"U32", 4},
    {"F32", 4},  {"I64", 8}, {"U64", 8}, {"F64", 8},     {"C64", 8},
};

int qs_st_dtype_size(const char *dtype)
{
    for (size_t i = 0; i < sizeof dtypes / sizeof dtypes[0]; i++)
        if (strcmp(dtype, dtypes[i].name) == 0)
            return dtypes[i].size;
    return 0;
}

static int mul_ok(int64_t a, int64_t b, int64_t *out)
{
    if (a != 0 && b > INT64_MAX / a)
        return 0;
    *out = a * b;
    return 1;
}

/* Parse one header entry into t; returns 0 or -1 with a message. */
static int parse_entry(const char *name, json_t *v, uint64_t data_size, struct qs_st_tensor *t,
                       char *err, size_t errlen)
{
    json_t *dt, *shape, *offs, *x;
    size_t i;
    int64_t numel = 1, bytes;

    memset(t, 0, sizeof *t);
    t->name = name;
    if (!json_is_object(v))
        return fail(err, errlen, "tensor '%s': entry is not a JSON object", name), -1;
    dt = json_object_get(v, "dtype");
    shape = json_object_get(v, "shape");
    offs = json_object_get(v, "data_offsets");
    if (!json_is_string(dt) || !json_is_array(shape) || !json_is_array(offs))
        return fail(err, errlen,
                    "tensor '%s': needs string dtype, array shape and array "
                    "data_offsets",
                    name),
               -1;
    t->elem_size = qs_st_dtype_size(json_string_value(dt));
    if (t->elem_size == 0 || strlen(json_string_value(dt)) >= sizeof t->dtype)
        return fail(err, errlen, "tensor '%s': unknown dtype '%.20s'", name, json_string_value(dt)),
               -1;
    strcpy(t->dtype, json_string_value(dt));
    if (json_array_size(shape) > QS_ST_MAX_DIMS)
        return fail(err, errlen, "tensor '%s': %zu dimensions (at most %d)", name,
                    json_array_size(shape), QS_ST_MAX_DIMS),
               -1;
    t->ndim = (int)json_array_size(shape);
    json_array_foreach(shape, i, x)
    {
        if (!json_is_integer(x) || json_integer_value(x) < 0)
            return fail(err, errlen, "tensor '%s': shape entries must be integers >= 0", name), -1;
        t->shape[i] = json_integer_value(x);
        if (!mul_ok(numel, t->shape[i], &numel))
            return fail(err, errlen, "tensor '%s': element count overflows", name), -1;
    }
    if (!mul_ok(numel, t->elem_size, &bytes))
        return fail(err, errlen, "tensor '%s': byte count overflows", name), -1;
    t->numel = numel;
    if (json_array_size(offs) != 2 || !json_is_integer(json_array_get(offs, 0)) ||
        !json_is_integer(json_array_get(offs, 1)))
        return fail(err, errlen, "tensor '%s': data_offsets must be [begin, end]", name), -1;
    if (json_integer_value(json_array_get(offs, 0)) < 0 ||
        json_integer_value(json_array_get(offs, 1)) < 0)
        return fail(err, errlen, "tensor '%s': negative data_offsets", name), -1;
    t->begin = (uint64_t)json_integer_value(json_array_get(offs, 0));
    t->end = (uint64_t)json_integer_value(json_array_get(offs, 1));
    if (t->begin > t->end || t->end > data_size)
        return fail(err, errlen,
                    "tensor '%s': data_offsets [%llu, %llu] outside the data "
                    "section of %llu bytes",
                    name, (unsigned long long)t->begin, (unsigned long long)t->end,
                    (unsigned long long)data_size),
               -1;
    if (t->end - t->begin != (uint64_t)bytes)
        return fail(err, errlen,
                    "tensor '%s': data_offsets span %llu bytes, dtype %s and shape "
                    "need %lld",
                    name, (unsigned long long)(t->end - t->begin), t->dtype, (long long)bytes),
               -1;
    return 0;
}

static int cmp_begin(const void *a, const void *b)
{
    const struct qs_st_tensor *x = *(const struct qs_st_tensor *const *)a;
    const struct qs_st_tensor *y = *(const struct qs_st_tensor *const *)b;

    return x->begin < y->begin   ? -1
           : x->begin > y->begin ? 1
                                 : (x->end > y->end) - (x->end < y->end);
}

static int check_overlaps(struct qs_st_file *f, char *err, size_t errlen)
{
    const struct qs_st_tensor **order;
    int rc = 0;

    if (f->count < 2)
        return 0;
    order = malloc(f->count * sizeof *order);
    if (!order)
        return fail(err, errlen, "out of memory"), -1;
    for (size_t i = 0; i < f->count; i++)
        order[i] = &f->tensors[i];
    qsort(order, f->count, sizeof *order, cmp_begin);
    for (size_t i = 1; i < f->count && rc == 0; i++) {
        /* Empty tensors occupy no bytes and cannot overlap anything. */
        if (order[i]->begin < order[i - 1]->end && order[i]->end > order[i]->begin) {
            fail(err, errlen, "tensors '%s' and '%s' overlap in the data section",
                 order[i - 1]->name, order[i]->name);
            rc = -1;
        }
    }
    free(order);
    return rc;
}

int qs_st_open(struct qs_st_file *f, const char *path, char *err, size_t errlen)
{
    struct stat sb;
    json_error_t jerr;
    const char *key;
    json_t *v;
    uint64_t hl = 0;
    int fd;

    memset(f, 0, sizeof *f);
    fd = open(path, O_RDONLY);
    if (fd < 0)
        return fail(err, errlen, "%s: %s", path, strerror(errno)), -1;
    if (fstat(fd, &sb) != 0 || !S_ISREG(sb.st_mode)) {
        fail(err, errlen, "%s: not a regular file", path);
        close(fd);
        return -1;
    }
    if (sb.st_size < 8) {
        fail(err, errlen, "%s: truncated (%lld bytes, a safetensors file has at least 8)", path,
             (long long)sb.st_size);
        close(fd);
        return -1;
    }
    f->map_size = (size_t)sb.st_size;
    f->map = mmap(NULL, f->map_size, PROT_READ, MAP_PRIVATE, fd, 0);
    close(fd);
    if (f->map == MAP_FAILED) {
        f->map = NULL;
        return fail(err, errlen, "%s: mmap: %s", path, strerror(errno)), -1;
    }
    for (int i = 7; i >= 0; i--)
        hl = (hl << 8) | f->map[i];
    if (hl > QS_ST_MAX_HEADER) {
        fail(err, errlen, "%s: header of %llu bytes is larger than the %u-byte limit", path,
             (unsigned long long)hl, QS_ST_MAX_HEADER);
        goto bad;
    }
    if (hl > f->map_size - 8) {
        fail(err, errlen, "%s: truncated: header of %llu bytes, file of %zu", path,
             (unsigned long long)hl, f->map_size);
        goto bad;
    }
    if (hl < 2 || f->map[8] != '{') {
        fail(err, errlen, "%s: not a safetensors file (the header must be a JSON object)", path);
        goto bad;
    }
    f->header_len = hl;
    f->data = f->map + 8 + hl;
    f->data_size = f->map_size - 8 - hl;
    f->root = json_loadb((const char *)f->map + 8, hl, JSON_REJECT_DUPLICATES, &jerr);
    if (!f->root) {
        fail(err, errlen, "%s: malformed header JSON at byte %d: %s", path, jerr.position,
             jerr.text);
        goto bad;
    }
    if (!json_is_object(f->root)) {
        fail(err, errlen, "%s: the header is not a JSON object", path);
        goto bad;
    }
    f->tensors = calloc(json_object_size(f->root) + 1, sizeof *f->tensors);
    if (!f->tensors) {
        fail(err, errlen, "out of memory");
        goto bad;
    }
    json_object_foreach(f->root, key, v)
    {
        if (strcmp(key, "__metadata__") == 0) {
            const char *mk;
            json_t *mv;
            if (!json_is_object(v)) {
                fail(err, errlen, "%s: __metadata__ is not an object", path);
                goto bad;
            }
            json_object_foreach(v, mk, mv)
            {
                if (!json_is_string(mv)) {
                    fail(err, errlen, "%s: __metadata__ value of '%s' is not a string", path, mk);
                    goto bad;
                }
            }
            f->metadata = v;
            continue;
        }
        if (parse_entry(key, v, f->data_size, &f->tensors[f->count], err, errlen) != 0)
            goto bad;
        f->tensors[f->count].data = f->data + f->tensors[f->count].begin;
        f->count++;
    }
    if (check_overlaps(f, err, errlen) != 0)
        goto bad;
    return 0;
bad:
    qs_st_close(f);
    return -1;
}

void qs_st_close(struct qs_st_file *f)
{
    if (f->map)
        munmap(f->map, f->map_size);
    free(f->tensors);
    if (f->root)
        json_decref(f->root);
    memset(f, 0, sizeof *f);
}

const struct qs_st_tensor *qs_st_find(const struct qs_st_file *f, const char *name)
{
    for (size_t i = 0; i < f->count; i++)
        if (strcmp(f->tensors[i].name, name) == 0)
            return &f->tensors[i];
    return NULL;
}

/* ---- writing ----------------------------------------------------------------------------------
 */

void qs_st_writer_init(struct qs_st_writer *w)
{
    memset(w, 0, sizeof *w);
}

int qs_st_writer_add(struct qs_st_writer *w, const char *name, const char *dtype, int ndim,
                     const int64_t *shape, const void *data, uint64_t bytes, void *owned, char *err,
                     size_t errlen)
{
    struct qs_st_out *t;
    int64_t numel = 1, need;
    int es = qs_st_dtype_size(dtype);

    if (es == 0 || ndim < 0 || ndim > QS_ST_MAX_DIMS || strlen(dtype) >= sizeof t->dtype) {
        free(owned);
        return fail(err, errlen, "tensor '%s': bad dtype or rank", name), -1;
    }
    for (int i = 0; i < ndim; i++)
        if (shape[i] < 0 || !mul_ok(numel, shape[i], &numel)) {
            free(owned);
            return fail(err, errlen, "tensor '%s': bad shape", name), -1;
        }
    if (!mul_ok(numel, es, &need) || (uint64_t)need != bytes) {
        free(owned);
        return fail(err, errlen, "tensor '%s': %llu bytes do not match %s of %lld elements", name,
                    (unsigned long long)bytes, dtype, (long long)numel),
               -1;
    }
    if (w->count == w->cap) {
        size_t cap = w->cap ? 2 * w->cap : 64;
        struct qs_st_out *nt = realloc(w->t, cap * sizeof *nt);
        if (!nt) {
            free(owned);
            return fail(err, errlen, "out of memory"), -1;
        }
        w->t = nt;
        w->cap = cap;
    }
    t = &w->t[w->count];
    memset(t, 0, sizeof *t);
    t->name = strdup(name);
    if (!t->name) {
        free(owned);
        return fail(err, errlen, "out of memory"), -1;
    }
    strcpy(t->dtype, dtype);
    t->ndim = ndim;
    for (int i = 0; i < ndim; i++)
        t->shape[i] = shape[i];
    t->data = data;
    t->bytes = bytes;
    t->owned = owned;
    w->count++;
    return 0;
}

int qs_st_writer_meta(struct qs_st_writer *w, const char *key, const char *value)
{
    if (!w->metadata && !(w->metadata = json_object()))
        return -1;
    return json_object_set_new(w->metadata, key, json_string(value));
}

void qs_st_writer_free(struct qs_st_writer *w)
{
    for (size_t i = 0; i < w->count; i++) {
        free(w->t[i].name);
        free(w->t[i].owned);
    }
    free(w->t);
    if (w->metadata)
        json_decref(w->metadata);
    memset(w, 0, sizeof *w);
}

/* The temporary file being written, for the signal handler (a fixed buffer: no allocation). */
static char tmp_path[PATH_MAX + 32];
static volatile sig_atomic_t tmp_active;

static void on_signal(int sig)
{
    if (tmp_active)
        unlink(tmp_path); /* async-signal-safe */
    signal(sig, SIG_DFL);
    raise(sig);
}

void qs_st_install_signal_cleanup(void)
{
    struct sigaction sa;

    memset(&sa, 0, sizeof sa);
    sa.sa_handler = on_signal;
    sigemptyset(&sa.sa_mask);
    sigaction(SIGINT, &sa, NULL);
    sigaction(SIGTERM, &sa, NULL);
    sigaction(SIGHUP, &sa, NULL);
}

static int write_all(int fd, const void *buf, uint64_t n)
{
    const unsigned char *p = buf;

    while (n > 0) {
        size_t chunk = n > (1u << 30) ? (1u << 30) : (size_t)n;
        ssize_t k = write(fd, p, chunk);
        if (k < 0) {
            if (errno == EINTR)
                continue;
            return -1;
        }
        p += k;
        n -= (uint64_t)k;
    }
    return 0;
}

static char *build_header(struct qs_st_writer *w, uint64_t *padded_len)
{
    json_t *root = json_object();
    uint64_t off = 0;
    char *text, *padded;
    size_t len;

    if (!root)
        return NULL;
    if (w->metadata && json_object_set(root, "__metadata__", w->metadata) != 0)
        goto oom;
    for (size_t i = 0; i < w->count; i++) {
        json_t *e = json_object(), *shape = json_array(), *offs = json_array();
        if (!e || !shape || !offs) {
            json_decref(e);
            json_decref(shape);
            json_decref(offs);
            goto oom;
        }
        for (int d = 0; d < w->t[i].ndim; d++)
            json_array_append_new(shape, json_integer(w->t[i].shape[d]));
        json_array_append_new(offs, json_integer((json_int_t)off));
        json_array_append_new(offs, json_integer((json_int_t)(off + w->t[i].bytes)));
        off += w->t[i].bytes;
        json_object_set_new(e, "dtype", json_string(w->t[i].dtype));
        json_object_set_new(e, "shape", shape);
        json_object_set_new(e, "data_offsets", offs);
        if (json_object_set_new(root, w->t[i].name, e) != 0)
            goto oom;
    }
    text = json_dumps(root, JSON_COMPACT | JSON_ENSURE_ASCII);
    json_decref(root);
    if (!text)
        return NULL;
    /* Pad with spaces so that the data section starts 8-byte aligned, as the reference writer. */
    len = strlen(text);
    *padded_len = (len + 7) & ~(uint64_t)7;
    padded = malloc(*padded_len + 1);
    if (padded) {
        memcpy(padded, text, len);
        memset(padded + len, ' ', *padded_len - len);
        padded[*padded_len] = '\0';
    }
    free(text);
    return padded;
oom:
    json_decref(root);
    return NULL;
}

int qs_st_writer_write(struct qs_st_writer *w, const char *path,
                       void (*progress)(size_t done, size_t total, void *user), void *user,
                       char *err, size_t errlen)
{
    uint64_t hl;
    unsigned char len8[8];
    char *header = NULL;
    const char *slash;
    int fd = -1;
    mode_t mask;

    for (size_t i = 0; i < w->count; i++)
        for (size_t j = 0; j < i; j++)
            if (strcmp(w->t[i].name, w->t[j].name) == 0)
                return fail(err, errlen, "duplicate output tensor '%s'", w->t[i].name), -1;
    header = build_header(w, &hl);
    if (!header)
        return fail(err, errlen, "out of memory building the header"), -1;
    if (hl > QS_ST_MAX_HEADER) {
        free(header);
        return fail(err, errlen, "output header of %llu bytes exceeds the safetensors limit",
                    (unsigned long long)hl),
               -1;
    }

    slash = strrchr(path, '/');
    if (strlen(path) + 32 > sizeof tmp_path) {
        free(header);
        return fail(err, errlen, "output path too long"), -1;
    }
    if (slash)
        snprintf(tmp_path, sizeof tmp_path, "%.*s/.%s.tmp-XXXXXX", (int)(slash - path), path,
                 slash + 1);
    else
        snprintf(tmp_path, sizeof tmp_path, ".%s.tmp-XXXXXX", path);
    /* Block the cleanup signals while the file is created, so that none can leave it behind. */
    {
        sigset_t set, old;
        sigemptyset(&set);
        sigaddset(&set, SIGINT);
        sigaddset(&set, SIGTERM);
        sigaddset(&set, SIGHUP);
        sigprocmask(SIG_BLOCK, &set, &old);
        fd = mkstemp(tmp_path);
        if (fd >= 0)
            tmp_active = 1;
        sigprocmask(SIG_SETMASK, &old, NULL);
    }
    if (fd < 0) {
        fail(err, errlen, "cannot create a temporary file beside %s: %s", path, strerror(errno));
        free(header);
        return -1;
    }
    mask = umask(0);
    umask(mask);
    fchmod(fd, 0666 & ~mask);

    for (int i = 0; i < 8; i++)
        len8[i] = (unsigned char)(hl >> (8 * i));
    if (write_all(fd, len8, 8) != 0 || write_all(fd, header, hl) != 0)
        goto io_error;
    for (size_t i = 0; i < w->count; i++) {
        if (write_all(fd, w->t[i].data, w->t[i].bytes) != 0)
            goto io_error;
        if (progress)
            progress(i + 1, w->count, user);
    }
    if (fsync(fd) != 0 || close(fd) != 0) {
        fd = -1;
        goto io_error;
    }
    fd = -1;
    if (rename(tmp_path, path) != 0)
        goto io_error;
    tmp_active = 0;
    free(header);
    return 0;
io_error:
    fail(err, errlen, "writing %s: %s", path, strerror(errno));
    if (fd >= 0)
        close(fd);
    unlink(tmp_path);
    tmp_active = 0;
    free(header);
    return -1;
}
