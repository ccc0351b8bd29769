/* SPDX-License-Identifier: MIT */
/*
 * safetensors reading (mmap + jansson, every offset validated before use) and atomic writing
 * (temporary file + rename) for the `qsparse` tool; the format is described in safetensors.h.
 * A hostile file must give a clear message, never a crash, an over-read, a huge allocation or a
 * cost that grows faster than n log n in the number of tensors.
 */
#define _POSIX_C_SOURCE 200809L
#define _DEFAULT_SOURCE /* madvise's MADV_DONTNEED */

#include "file_kind.h"
#include "safetensors.h"
#include "heap.h"

#include <dirent.h>
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

/*
 * No two non-empty tensors share a byte. In order of their start, each must begin at or after
 * the furthest end seen so far, not only its neighbour's: one short tensor between two others
 * would otherwise hide their overlap. Empty tensors own no bytes, so they are left out: they can
 * neither overlap anything nor stand between two that do.
 */
static int check_overlaps(struct qs_st_file *f, char *err, size_t errlen)
{
    const struct qs_st_tensor **order, *furthest = NULL;
    size_t n = 0;
    int rc = 0;

    order = qs_heap_malloc((f->count + 1) * sizeof *order);
    if (!order)
        return fail(err, errlen, "out of memory"), -1;
    for (size_t i = 0; i < f->count; i++)
        if (f->tensors[i].end > f->tensors[i].begin)
            order[n++] = &f->tensors[i];
    qsort(order, n, sizeof *order, cmp_begin);
    for (size_t i = 0; i < n && rc == 0; i++) {
        if (furthest && order[i]->begin < furthest->end) {
            fail(err, errlen, "tensors '%s' and '%s' overlap in the data section", furthest->name,
                 order[i]->name);
            rc = -1;
        }
        if (!furthest || order[i]->end > furthest->end)
            furthest = order[i];
    }
    qs_heap_free(order);
    return rc;
}

static int cmp_name(const void *a, const void *b)
{
    return strcmp((*(const struct qs_st_tensor *const *)a)->name,
                  (*(const struct qs_st_tensor *const *)b)->name);
}

/* The name index behind qs_st_find (names are unique: the JSON parser rejects duplicates). */
static int index_names(struct qs_st_file *f, char *err, size_t errlen)
{
    f->by_name = qs_heap_malloc((f->count + 1) * sizeof *f->by_name);
    if (!f->by_name)
        return fail(err, errlen, "out of memory"), -1;
    for (size_t i = 0; i < f->count; i++)
        f->by_name[i] = &f->tensors[i];
    qsort(f->by_name, f->count, sizeof *f->by_name, cmp_name);
    return 0;
}

/*
 * The input being read, watched in case another program truncates it meanwhile. Reading a mapped
 * page that the file no longer covers raises SIGBUS, which the signal handler turns into a
 * message; bytes cut from the last page it still covers read as zeros without any signal, so
 * the writer also compares the file's size with the one it was opened with before it commits an
 * output. One input at a time is watched, the latest opened.
 */
static const unsigned char *volatile watched_map;
static volatile size_t watched_size;
static int watched_fd = -1;

/*
 * Test hook, used by tests/python/test_tool.py and nothing else: with QSPARSE_TOOL_TEST_STOP set
 * to the name of a point ("open": the input is validated and no tensor read yet; "write": the
 * temporary output exists and holds its header), the process stops itself there with SIGSTOP so
 * that a test can act at a known moment (truncate the input, send a signal) and then continue it.
 */
static void test_stop(const char *point)
{
    const char *v = getenv("QSPARSE_TOOL_TEST_STOP");

    if (v && strcmp(v, point) == 0)
        raise(SIGSTOP);
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
    /* O_NONBLOCK: opening a FIFO for reading would otherwise wait for a writer (forever), and
     * some devices act on a blocking open. Only a regular file is read, in blocking mode. */
    fd = open(path, O_RDONLY | O_NONBLOCK | O_NOCTTY | O_CLOEXEC);
    if (fd < 0)
        return fail(err, errlen, "%s: %s", path, strerror(errno)), -1;
    if (fstat(fd, &sb) != 0) {
        fail(err, errlen, "%s: %s", path, strerror(errno));
        close(fd);
        return -1;
    }
    if (!S_ISREG(sb.st_mode)) {
        fail(err, errlen, "%s: not a regular file (%s)", path,
             S_ISFIFO(sb.st_mode)                         ? "a FIFO"
             : S_ISDIR(sb.st_mode)                        ? "a directory"
             : S_ISCHR(sb.st_mode) || S_ISBLK(sb.st_mode) ? "a device"
                                                          : "a socket or other special file");
        close(fd);
        return -1;
    }
    {
        int fl = fcntl(fd, F_GETFL);
        if (fl == -1 || fcntl(fd, F_SETFL, fl & ~O_NONBLOCK) == -1) {
            fail(err, errlen, "%s: %s", path, strerror(errno));
            close(fd);
            return -1;
        }
    }
    if (sb.st_size < 8) {
        fail(err, errlen, "%s: truncated (%lld bytes, a safetensors file has at least 8)", path,
             (long long)sb.st_size);
        close(fd);
        return -1;
    }
    f->map_size = (size_t)sb.st_size;
    f->map = mmap(NULL, f->map_size, PROT_READ, MAP_PRIVATE, fd, 0);
    if (f->map == MAP_FAILED) {
        f->map = NULL;
        fail(err, errlen, "%s: mmap: %s", path, strerror(errno));
        close(fd);
        return -1;
    }
    f->fd = fd; /* kept open while mapped: the writer checks the size through it */
    watched_size = 0;
    watched_map = f->map;
    watched_size = f->map_size;
    watched_fd = fd;
    for (int i = 7; i >= 0; i--)
        hl = (hl << 8) | f->map[i];
    /* Only a file that cannot be safetensors (its header length does not fit, or the header is
     * not a JSON object) is named by its magic: a real header length may begin with any byte. */
    if ((hl > QS_ST_MAX_HEADER || hl > f->map_size - 8 || f->map_size == 8 || f->map[8] != '{') &&
        qs_file_kind_hint(f->map, f->map_size)) {
        fail(err, errlen, "%s: %s", path, qs_file_kind_hint(f->map, f->map_size));
        goto bad;
    }
    if (hl > QS_ST_MAX_HEADER) {
        fail(err, errlen,
             "%s: not a safetensors file? its first 8 bytes give a header of %llu bytes, larger "
             "than the %u-byte limit",
             path, (unsigned long long)hl, QS_ST_MAX_HEADER);
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
    f->tensors = qs_heap_calloc(json_object_size(f->root) + 1, sizeof *f->tensors);
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
    if (check_overlaps(f, err, errlen) != 0 || index_names(f, err, errlen) != 0)
        goto bad;
    test_stop("open");
    return 0;
bad:
    qs_st_close(f);
    return -1;
}

void qs_st_close(struct qs_st_file *f)
{
    if (f->map) {
        if (watched_map == f->map) {
            watched_size = 0;
            watched_map = NULL;
            watched_fd = -1;
        }
        munmap(f->map, f->map_size);
        close(f->fd);
    }
    qs_heap_free(f->tensors);
    qs_heap_free(f->by_name);
    if (f->root)
        json_decref(f->root);
    memset(f, 0, sizeof *f);
}

const struct qs_st_tensor *qs_st_find(const struct qs_st_file *f, const char *name)
{
    size_t lo = 0, hi = f->by_name ? f->count : 0;

    while (lo < hi) {
        size_t mid = lo + (hi - lo) / 2;
        int c = strcmp(f->by_name[mid]->name, name);
        if (c == 0)
            return f->by_name[mid];
        if (c < 0)
            lo = mid + 1;
        else
            hi = mid;
    }
    return NULL;
}

void qs_st_release_bytes(const struct qs_st_file *f, const void *p, uint64_t n)
{
#ifdef MADV_DONTNEED
    long page = sysconf(_SC_PAGESIZE);
    uintptr_t lo, hi;

    if (!f->map || n == 0 || page <= 0)
        return;
    lo = (uintptr_t)p & ~(uintptr_t)(page - 1);
    hi = (uintptr_t)p + n;
    /* a private read-only mapping: dropped pages read again from the file if touched */
    madvise((void *)lo, hi - lo, MADV_DONTNEED);
#else
    (void)f;
    (void)p;
    (void)n;
#endif
}

void qs_st_release(const struct qs_st_file *f, const struct qs_st_tensor *t)
{
    qs_st_release_bytes(f, t->data, t->end - t->begin);
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
        qs_heap_free(owned);
        return fail(err, errlen, "tensor '%s': bad dtype or rank", name), -1;
    }
    for (int i = 0; i < ndim; i++)
        if (shape[i] < 0 || !mul_ok(numel, shape[i], &numel)) {
            qs_heap_free(owned);
            return fail(err, errlen, "tensor '%s': bad shape", name), -1;
        }
    if (!mul_ok(numel, es, &need) || (uint64_t)need != bytes) {
        qs_heap_free(owned);
        return fail(err, errlen, "tensor '%s': %llu bytes do not match %s of %lld elements", name,
                    (unsigned long long)bytes, dtype, (long long)numel),
               -1;
    }
    if (w->count == w->cap) {
        size_t cap = w->cap ? 2 * w->cap : 64;
        struct qs_st_out *nt = qs_heap_realloc(w->t, cap * sizeof *nt);
        if (!nt) {
            qs_heap_free(owned);
            return fail(err, errlen, "out of memory"), -1;
        }
        w->t = nt;
        w->cap = cap;
    }
    t = &w->t[w->count];
    memset(t, 0, sizeof *t);
    t->name = qs_heap_strdup(name);
    if (!t->name) {
        qs_heap_free(owned);
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
        qs_heap_free(w->t[i].name);
        qs_heap_free(w->t[i].owned);
    }
    qs_heap_free(w->t);
    if (w->metadata)
        json_decref(w->metadata);
    memset(w, 0, sizeof *w);
}

/*
 * The temporary output being written, for the signal handler (a fixed buffer: no allocation).
 * Its name is ".<output name>.qsparse-tmp-<pid>-XXXXXX" beside the output, so that a run killed
 * by SIGKILL (which no handler sees) leaves a file that the next run for the same output
 * recognises as stale, by its dead pid, and removes.
 */
static char tmp_path[PATH_MAX + 256];
static volatile sig_atomic_t tmp_active;

#define TMP_TAG ".qsparse-tmp-"
#define TMP_BASE_MAX 128 /* bytes of the output's name kept in the temporary name (NAME_MAX) */

static const char truncated_msg[] =
    "qsparse: error: the input file shrank while it was being read (truncated or rewritten "
    "by another program); no output was written\n";

static int in_watched_map(const void *addr)
{
    const unsigned char *lo = watched_map;
    size_t n = watched_size;

    return lo && n && (uintptr_t)addr - (uintptr_t)lo < n;
}

static void on_signal(int sig, siginfo_t *si, void *uc)
{
    (void)uc;
    if (tmp_active)
        unlink(tmp_path); /* async-signal-safe, as are write, _exit, signal and raise */
    /* si_code > 0: raised by the kernel for a fault, so si_addr is meaningful (kill() fills
     * the same bytes with its sender's pid and uid). */
    if (sig == SIGBUS && si && si->si_code > 0 && in_watched_map(si->si_addr)) {
        if (write(2, truncated_msg, sizeof truncated_msg - 1) < 0) {
            /* nothing more to do: the exit status still says it failed */
        }
        _exit(1);
    }
    /* Die of the same signal, as without the handler (core dump included where that is the
     * default): it is blocked while this runs and delivered on return. */
    signal(sig, SIG_DFL);
    raise(sig);
}

/* Signals whose default action ends the process, apart from SIGKILL and SIGSTOP. */
static const int fatal_signals[] = {
    SIGHUP,    SIGINT,  SIGQUIT, SIGABRT, SIGUSR1, SIGUSR2,   SIGPIPE, SIGALRM,
    SIGTERM,   SIGTRAP, SIGSYS,  SIGXCPU, SIGXFSZ, SIGVTALRM, SIGPROF,
#ifdef SIGPOLL
    SIGPOLL,
#endif
#ifdef SIGSTKFLT
    SIGSTKFLT,
#endif
#ifdef SIGPWR
    SIGPWR,
#endif
#ifdef SIGEMT
    SIGEMT,
#endif
#ifdef SIGLOST
    SIGLOST,
#endif
};

/* Faults: the kernel delivers these even when they are ignored, so they are always handled. */
static const int fault_signals[] = {SIGBUS, SIGSEGV, SIGILL, SIGFPE};

static void handle(int sig, int even_if_ignored)
{
    struct sigaction sa, old;

    if (sigaction(sig, NULL, &old) != 0)
        return;
    /* A signal ignored when the tool started stays ignored (nohup, a shell's `trap '' HUP`). */
    if (!even_if_ignored && !(old.sa_flags & SA_SIGINFO) && old.sa_handler == SIG_IGN)
        return;
    memset(&sa, 0, sizeof sa);
    sa.sa_sigaction = on_signal;
    sa.sa_flags = SA_SIGINFO;
    sigfillset(&sa.sa_mask);
    sigaction(sig, &sa, NULL);
}

void qs_st_install_signal_cleanup(void)
{
    for (size_t i = 0; i < sizeof fatal_signals / sizeof fatal_signals[0]; i++)
        handle(fatal_signals[i], 0);
    for (size_t i = 0; i < sizeof fault_signals / sizeof fault_signals[0]; i++)
        handle(fault_signals[i], 1);
#ifdef SIGRTMIN
    for (int sig = SIGRTMIN; sig <= SIGRTMAX; sig++)
        handle(sig, 0);
#endif
}

/*
 * Remove the temporary files of earlier runs for the same output whose process is gone (killed
 * by SIGKILL, a crash, a power cut). Names are matched exactly and only regular files removed;
 * a pid that still exists (or belongs to another user: EPERM) keeps its file.
 */
static void remove_stale_tmps(const char *dir, const char *prefix)
{
    size_t plen = strlen(prefix);
    struct dirent *e;
    DIR *d = opendir(dir);

    if (!d)
        return;
    while ((e = readdir(d)) != NULL) {
        const char *p = e->d_name + plen;
        long long pid = 0;
        int digits = 0, tail = 0;
        struct stat sb;

        if (strncmp(e->d_name, prefix, plen) != 0)
            continue;
        while (*p >= '0' && *p <= '9' && digits < 10)
            pid = pid * 10 + (*p++ - '0'), digits++;
        if (digits == 0 || *p++ != '-')
            continue;
        while ((*p >= '0' && *p <= '9') || (*p >= 'a' && *p <= 'z') || (*p >= 'A' && *p <= 'Z'))
            p++, tail++;
        if (*p != '\0' || tail != 6 || pid <= 0 || pid > INT_MAX || pid == (long long)getpid())
            continue;
        if (kill((pid_t)pid, 0) == 0 || errno != ESRCH)
            continue;
        if (fstatat(dirfd(d), e->d_name, &sb, AT_SYMLINK_NOFOLLOW) == 0 && S_ISREG(sb.st_mode))
            unlinkat(dirfd(d), e->d_name, 0);
    }
    closedir(d);
}

/*
 * Create the temporary output beside path: tmp_path holds its name, tmp_active is set, and its
 * permissions are those the output will have: the old output's when it exists, else 0666 less
 * the umask. Returns the descriptor, or -1 with a message.
 */
static int create_tmp(const char *path, char *err, size_t errlen)
{
    const char *slash = strrchr(path, '/'), *base = slash ? slash + 1 : path;
    char dir[PATH_MAX], prefix[TMP_BASE_MAX + 32];
    sigset_t all, old;
    struct stat sb;
    mode_t mode, mask;
    int fd;

    if (strlen(path) >= PATH_MAX)
        return fail(err, errlen, "output path too long"), -1;
    if (!slash)
        snprintf(dir, sizeof dir, ".");
    else if (slash == path)
        snprintf(dir, sizeof dir, "/");
    else
        snprintf(dir, sizeof dir, "%.*s", (int)(slash - path), path);
    snprintf(prefix, sizeof prefix, ".%.*s" TMP_TAG, TMP_BASE_MAX, base);
    remove_stale_tmps(dir, prefix);

    if (stat(path, &sb) == 0 && S_ISREG(sb.st_mode)) {
        mode = sb.st_mode & 0777;
    } else {
        mask = umask(0);
        umask(mask);
        mode = 0666 & ~mask;
    }
    snprintf(tmp_path, sizeof tmp_path, "%s%s%s%lld-XXXXXX", slash ? dir : "",
             slash && slash != path ? "/" : "", prefix, (long long)getpid());
    /* No signal between creating the file and recording it: none may leave it behind. */
    sigfillset(&all);
    sigprocmask(SIG_BLOCK, &all, &old);
    fd = mkstemp(tmp_path);
    if (fd >= 0)
        tmp_active = 1;
    sigprocmask(SIG_SETMASK, &old, NULL);
    if (fd < 0)
        return fail(err, errlen, "cannot create a temporary file beside %s: %s", path,
                    strerror(errno)),
               -1;
    if (fchmod(fd, mode) != 0) {
        fail(err, errlen, "cannot set the mode of a temporary file beside %s: %s", path,
             strerror(errno));
        close(fd);
        unlink(tmp_path);
        tmp_active = 0;
        return -1;
    }
    return fd;
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

/* A growing text buffer; `oom` is set once an allocation fails and every later call is a no-op. */
struct text {
    char *p;
    size_t n, cap;
    int oom;
};

static void put(struct text *t, const char *s, size_t n)
{
    if (t->oom)
        return;
    if (t->cap - t->n < n + 1) {
        size_t cap = t->cap ? t->cap : 4096;
        char *np;
        while (cap - t->n < n + 1)
            cap *= 2;
        if (!(np = qs_heap_realloc(t->p, cap))) {
            t->oom = 1;
            return;
        }
        t->p = np;
        t->cap = cap;
    }
    memcpy(t->p + t->n, s, n);
    t->n += n;
    t->p[t->n] = '\0';
}

static void put_str(struct text *t, const char *s)
{
    put(t, s, strlen(s));
}

static void put_int(struct text *t, long long v)
{
    char buf[24];

    put(t, buf, (size_t)snprintf(buf, sizeof buf, "%lld", v));
}

/*
 * s as a JSON string, byte for byte as jansson's json_dumps writes it with JSON_ENSURE_ASCII (the
 * writer's earlier form): `"` and `\` escaped, \b \f \n \r \t, other controls and every non-ASCII
 * character as \uXXXX (surrogate pairs above U+FFFF). Returns -1 when s is not valid UTF-8.
 */
static int put_json_string(struct text *t, const char *s)
{
    static const char hex[] = "0123456789ABCDEF";
    const unsigned char *p = (const unsigned char *)s;

    put(t, "\"", 1);
    while (*p) {
        uint32_t c = *p, min = 0;
        int len = 1;
        char esc[16];
        if (c >= 0x80) {
            if (c >= 0xC2 && c <= 0xDF)
                len = 2, c &= 0x1F, min = 0x80;
            else if (c >= 0xE0 && c <= 0xEF)
                len = 3, c &= 0x0F, min = 0x800;
            else if (c >= 0xF0 && c <= 0xF4)
                len = 4, c &= 0x07, min = 0x10000;
            else
                return -1;
            for (int i = 1; i < len; i++) {
                if ((p[i] & 0xC0) != 0x80)
                    return -1;
                c = (c << 6) | (p[i] & 0x3Fu);
            }
            if (c < min || c > 0x10FFFF || (c >= 0xD800 && c <= 0xDFFF))
                return -1;
        }
        p += len;
        if (c == '"' || c == '\\') {
            esc[0] = '\\', esc[1] = (char)c;
            put(t, esc, 2);
        } else if (c == '\b' || c == '\f' || c == '\n' || c == '\r' || c == '\t') {
            esc[0] = '\\';
            esc[1] = c == '\b' ? 'b' : c == '\f' ? 'f' : c == '\n' ? 'n' : c == '\r' ? 'r' : 't';
            put(t, esc, 2);
        } else if (c >= 0x20 && c < 0x80) {
            esc[0] = (char)c;
            put(t, esc, 1);
        } else {
            uint32_t units[2] = {c, 0};
            int nu = 1;
            if (c >= 0x10000) {
                units[0] = 0xD800 | ((c - 0x10000) >> 10);
                units[1] = 0xDC00 | ((c - 0x10000) & 0x3FF);
                nu = 2;
            }
            for (int u = 0; u < nu; u++) {
                esc[0] = '\\', esc[1] = 'u';
                for (int i = 0; i < 4; i++)
                    esc[2 + i] = hex[(units[u] >> (12 - 4 * i)) & 15];
                put(t, esc, 6);
            }
        }
    }
    put(t, "\"", 1);
    return 0;
}

/*
 * The header text, padded with spaces so that the data section starts 8-byte aligned as the
 * reference writer does; from malloc, NULL with a message. Written directly rather than through a
 * jansson tree: one small tree per tensor made a header of 10^5 tensors cost seconds in the
 * allocator alone. The metadata (a few strings) still goes through jansson.
 */
static char *build_header(struct qs_st_writer *w, uint64_t *padded_len, char *err, size_t errlen)
{
    struct text t = {0};
    uint64_t off = 0;
    int first = 1;

    put(&t, "{", 1);
    if (w->metadata) {
        char *meta = json_dumps(w->metadata, JSON_COMPACT | JSON_ENSURE_ASCII);
        if (!meta) {
            qs_heap_free(t.p);
            return fail(err, errlen, "out of memory building the header"), NULL;
        }
        put_str(&t, "\"__metadata__\":");
        put_str(&t, meta);
        qs_heap_free(meta);
        first = 0;
    }
    for (size_t i = 0; i < w->count; i++) {
        const struct qs_st_out *o = &w->t[i];
        if (!first)
            put(&t, ",", 1);
        first = 0;
        if (put_json_string(&t, o->name) != 0) {
            qs_heap_free(t.p);
            return fail(err, errlen, "tensor name '%s' is not valid UTF-8", o->name), NULL;
        }
        put_str(&t, ":{\"dtype\":");
        put_json_string(&t, o->dtype);
        put_str(&t, ",\"shape\":[");
        for (int d = 0; d < o->ndim; d++) {
            if (d)
                put(&t, ",", 1);
            put_int(&t, (long long)o->shape[d]);
        }
        put_str(&t, "],\"data_offsets\":[");
        put_int(&t, (long long)off);
        put(&t, ",", 1);
        off += o->bytes;
        put_int(&t, (long long)off);
        put_str(&t, "]}");
        if (t.n > QS_ST_MAX_HEADER)
            break; /* refused below; no need to grow further */
    }
    put(&t, "}", 1);
    while (!t.oom && t.n % 8 != 0)
        put(&t, " ", 1);
    if (t.oom) {
        qs_heap_free(t.p);
        return fail(err, errlen, "out of memory building the header"), NULL;
    }
    *padded_len = t.n;
    return t.p;
}

/*
 * Buffered writes: a model of many small tensors would otherwise cost one system call each.
 * Tensors larger than the buffer go straight from their memory to the file.
 */
struct out_buf {
    int fd;
    size_t n;
    unsigned char b[1u << 20];
};

static void io_fail(struct qs_st_stream *s, char *err, size_t errlen);

static int flush_out(struct out_buf *o)
{
    int rc = write_all(o->fd, o->b, o->n);

    o->n = 0;
    return rc;
}

static int put_out(struct out_buf *o, const void *p, uint64_t n)
{
    if (n > sizeof o->b - o->n) {
        if (flush_out(o) != 0)
            return -1;
        if (n > sizeof o->b)
            return write_all(o->fd, p, n);
    }
    memcpy(o->b + o->n, p, (size_t)n);
    o->n += (size_t)n;
    return 0;
}

/* Whether the watched input no longer has the size it was mapped with. */
static int watched_input_changed(void)
{
    struct stat sb;

    if (watched_fd < 0 || !watched_map)
        return 0;
    return fstat(watched_fd, &sb) != 0 || (uint64_t)sb.st_size != (uint64_t)watched_size;
}

static int cmp_out_name(const void *a, const void *b)
{
    return strcmp(*(const char *const *)a, *(const char *const *)b);
}

/* Refuse two output tensors of one name: sorted, equal names are neighbours (n log n). */
static int check_unique(const struct qs_st_writer *w, char *err, size_t errlen)
{
    const char **names = qs_heap_malloc((w->count + 1) * sizeof *names);
    int rc = 0;

    if (!names)
        return fail(err, errlen, "out of memory"), -1;
    for (size_t i = 0; i < w->count; i++)
        names[i] = w->t[i].name;
    qsort(names, w->count, sizeof *names, cmp_out_name);
    for (size_t i = 1; i < w->count && rc == 0; i++)
        if (strcmp(names[i - 1], names[i]) == 0) {
            fail(err, errlen, "duplicate output tensor '%s'", names[i]);
            rc = -1;
        }
    qs_heap_free(names);
    return rc;
}

int qs_st_stream_begin(struct qs_st_stream *s, struct qs_st_writer *w, const char *path,
                       char *err, size_t errlen)
{
    uint64_t hl;
    unsigned char len8[8];
    char *header;
    int fd;

    memset(s, 0, sizeof *s);
    s->fd = -1;
    if (check_unique(w, err, errlen) != 0)
        return -1;
    header = build_header(w, &hl, err, errlen);
    if (!header)
        return -1;
    if (hl > QS_ST_MAX_HEADER) {
        qs_heap_free(header);
        return fail(err, errlen, "output header of %llu bytes exceeds the safetensors limit",
                    (unsigned long long)hl),
               -1;
    }
    if (!(s->buf = qs_heap_malloc(sizeof *s->buf))) {
        qs_heap_free(header);
        return fail(err, errlen, "out of memory"), -1;
    }
    fd = create_tmp(path, err, errlen);
    if (fd < 0) {
        qs_heap_free(header);
        qs_heap_free(s->buf);
        s->buf = NULL;
        return -1;
    }
    s->w = w;
    s->path = path;
    s->fd = fd;
    s->buf->fd = fd;
    s->buf->n = 0;
    for (int i = 0; i < 8; i++)
        len8[i] = (unsigned char)(hl >> (8 * i));
    if (write_all(fd, len8, 8) != 0 || write_all(fd, header, hl) != 0) {
        qs_heap_free(header);
        io_fail(s, err, errlen);
        return -1;
    }
    qs_heap_free(header);
    test_stop("write");
    return 0;
}

/* After a failed write: the message (errno still that of the failure), then the cleanup. */
static void io_fail(struct qs_st_stream *s, char *err, size_t errlen)
{
    if (errno == EFAULT) /* write() could not read the source: a mapped input that shrank */
        fail(err, errlen,
             "writing %s: a tensor's bytes could not be read: the input file shrank while it was "
             "being read (truncated or rewritten by another program)",
             s->path);
    else
        fail(err, errlen, "writing %s: %s", s->path, strerror(errno));
    qs_st_stream_abort(s);
}

int qs_st_stream_put(struct qs_st_stream *s, const void *p, uint64_t n, char *err,
                     size_t errlen)
{
    const struct qs_st_out *t;

    if (s->fd < 0)
        return fail(err, errlen, "writing: the output is not open"), -1;
    /* empty tensors own no bytes: step over them to the next one that does */
    while (s->next < s->w->count && s->w->t[s->next].bytes == s->done)
        s->next++, s->done = 0;
    t = s->next < s->w->count ? &s->w->t[s->next] : NULL;
    if (n == 0)
        return 0;
    if (!t || n > t->bytes - s->done) {
        fail(err, errlen, "writing %s: %llu bytes more than the header announced%s%s", s->path,
             (unsigned long long)n, t ? " for " : "", t ? t->name : "");
        qs_st_stream_abort(s);
        return -1;
    }
    if (put_out(s->buf, p, n) != 0) {
        io_fail(s, err, errlen);
        return -1;
    }
    s->done += n;
    return 0;
}

int qs_st_stream_end(struct qs_st_stream *s, char *err, size_t errlen)
{
    int fd = s->fd;

    if (fd < 0)
        return fail(err, errlen, "writing: the output is not open"), -1;
    while (s->next < s->w->count && s->w->t[s->next].bytes == s->done)
        s->next++, s->done = 0;
    if (s->next != s->w->count) {
        fail(err, errlen, "writing %s: tensor '%s' has %llu of its %llu bytes", s->path,
             s->w->t[s->next].name, (unsigned long long)s->done,
             (unsigned long long)s->w->t[s->next].bytes);
        qs_st_stream_abort(s);
        return -1;
    }
    if (flush_out(s->buf) != 0) {
        io_fail(s, err, errlen);
        return -1;
    }
    if (watched_input_changed()) {
        fail(err, errlen,
             "the input file changed size while it was being read (truncated or rewritten by "
             "another program); %s was not written",
             s->path);
        qs_st_stream_abort(s);
        return -1;
    }
    s->fd = -1;
    if (fsync(fd) != 0 || close(fd) != 0 || rename(tmp_path, s->path) != 0) {
        fail(err, errlen, "writing %s: %s", s->path, strerror(errno));
        unlink(tmp_path);
        tmp_active = 0;
        qs_heap_free(s->buf);
        s->buf = NULL;
        return -1;
    }
    tmp_active = 0;
    qs_heap_free(s->buf);
    s->buf = NULL;
    return 0;
}

void qs_st_stream_abort(struct qs_st_stream *s)
{
    if (s->fd >= 0) {
        close(s->fd);
        unlink(tmp_path);
        tmp_active = 0;
    }
    s->fd = -1;
    qs_heap_free(s->buf);
    s->buf = NULL;
}

uint64_t qs_st_writer_file_bytes(struct qs_st_writer *w)
{
    char err[256];
    uint64_t hl = 0, data = 0;
    char *h = build_header(w, &hl, err, sizeof err);

    if (!h)
        return 0;
    qs_heap_free(h);
    for (size_t i = 0; i < w->count; i++)
        data += w->t[i].bytes;
    return 8 + hl + data;
}
