/* SPDX-License-Identifier: MIT */
/* Side files: regular, non-blocking, bounded, named in every message (side_file.h). */
#define _POSIX_C_SOURCE 200809L

#include "side_file.h"
#include "heap.h"

#include <errno.h>
#include <fcntl.h>
#include <stdarg.h>
#include <stdio.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

static void fail(char *err, size_t errlen, const char *fmt, ...)
{
    va_list ap;

    va_start(ap, fmt);
    vsnprintf(err, errlen, fmt, ap);
    va_end(ap);
}

static const char *kind(mode_t m)
{
    return S_ISFIFO(m)                  ? "a FIFO"
           : S_ISDIR(m)                 ? "a directory"
           : S_ISCHR(m) || S_ISBLK(m)   ? "a device"
                                        : "a socket or other special file";
}

unsigned char *qs_side_read(const char *path, size_t *n, int *missing, char *err, size_t errlen)
{
    struct stat sb;
    unsigned char *buf = NULL;
    size_t got = 0;
    int fd;

    *missing = 0;
    /* O_NONBLOCK: opening a FIFO would otherwise wait for a writer, forever */
    fd = open(path, O_RDONLY | O_NONBLOCK | O_NOCTTY | O_CLOEXEC);
    if (fd < 0) {
        *missing = errno == ENOENT;
        fail(err, errlen, "%s: %s", path, strerror(errno));
        return NULL;
    }
    if (fstat(fd, &sb) != 0) {
        fail(err, errlen, "%s: %s", path, strerror(errno));
        goto bad;
    }
    if (!S_ISREG(sb.st_mode)) {
        fail(err, errlen, "%s: not a regular file (%s)", path, kind(sb.st_mode));
        goto bad;
    }
    if (sb.st_size > (off_t)QS_SIDE_FILE_MAX) {
        fail(err, errlen, "%s: %lld bytes, over the %u MiB limit of a side file", path,
             (long long)sb.st_size, QS_SIDE_FILE_MAX >> 20);
        goto bad;
    }
    /* one byte more than the file had when checked: a file that grows meanwhile is refused */
    if (!(buf = qs_heap_malloc((size_t)sb.st_size + 2))) {
        fail(err, errlen, "%s: out of memory", path);
        goto bad;
    }
    for (;;) {
        ssize_t k = read(fd, buf + got, (size_t)sb.st_size + 1 - got);
        if (k < 0 && errno == EINTR)
            continue;
        if (k < 0) {
            fail(err, errlen, "%s: %s", path, strerror(errno));
            goto bad;
        }
        if (k == 0)
            break;
        got += (size_t)k;
        if (got > (size_t)sb.st_size) {
            fail(err, errlen, "%s: the file grew while it was read", path);
            goto bad;
        }
    }
    close(fd);
    buf[got] = '\0';
    *n = got;
    return buf;
bad:
    qs_heap_free(buf);
    close(fd);
    return NULL;
}

json_t *qs_side_json(const char *path, int *missing, char *err, size_t errlen)
{
    json_error_t je;
    json_t *j;
    size_t n = 0;
    int miss;
    unsigned char *buf = qs_side_read(path, &n, &miss, err, errlen);

    if (missing)
        *missing = miss;
    if (!buf)
        return NULL;
    j = json_loadb((const char *)buf, n, JSON_REJECT_DUPLICATES, &je);
    qs_heap_free(buf);
    if (!j) {
        fail(err, errlen, "%s: %s (line %d)", path, je.text, je.line);
        return NULL;
    }
    if (!json_is_object(j)) {
        fail(err, errlen, "%s: not a JSON object", path);
        json_decref(j);
        return NULL;
    }
    return j;
}
