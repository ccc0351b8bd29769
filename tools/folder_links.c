/* SPDX-License-Identifier: MIT */
/* Links of a model folder: followed only to regular files inside it (folder_links.h). */
#define _POSIX_C_SOURCE 200809L
#define _XOPEN_SOURCE 700 /* realpath */

#include "folder_links.h"

#include <errno.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

static void fail(char *err, size_t errlen, const char *fmt, ...)
{
    va_list ap;

    va_start(ap, fmt);
    vsnprintf(err, errlen, fmt, ap);
    va_end(ap);
}

/* Whether the real path p is root or lies below it. */
static int inside(const char *p, const char *root)
{
    size_t n = strlen(root);

    if (!*root)
        return 0;
    if (strcmp(root, "/") == 0)
        return 1;
    return strncmp(p, root, n) == 0 && (p[n] == '/' || p[n] == '\0');
}

int qs_folder_root(struct qs_folder_root *r, const char *dir, char *err, size_t errlen)
{
    char up[PATH_MAX], *slash;
    struct stat sb;

    memset(r, 0, sizeof *r);
    if (!realpath(dir, r->real))
        return fail(err, errlen, "%s: %s", dir, strerror(errno)), -1;
    /* REPO/snapshots/REV: the snapshot's links lead to REPO/blobs */
    snprintf(up, sizeof up, "%s", r->real);
    if ((slash = strrchr(up, '/')) != NULL && slash != up) {
        *slash = '\0';
        slash = strrchr(up, '/');
        if (slash && strcmp(slash + 1, "snapshots") == 0) {
            char blobs[PATH_MAX + 8];
            *slash = '\0';
            snprintf(blobs, sizeof blobs, "%s/blobs", *up ? up : "");
            if (stat(blobs, &sb) == 0 && S_ISDIR(sb.st_mode) && !realpath(blobs, r->blobs))
                r->blobs[0] = '\0';
        }
    }
    return 0;
}

int qs_folder_file(const struct qs_folder_root *r, const char *path, char *real, size_t reallen,
                   char *err, size_t errlen)
{
    struct stat sb;
    char target[PATH_MAX];

    if (lstat(path, &sb) != 0) {
        if (errno == ENOENT)
            return 1;
        return fail(err, errlen, "%s: %s", path, strerror(errno)), -1;
    }
    if (!S_ISLNK(sb.st_mode)) {
        if ((size_t)snprintf(real, reallen, "%s", path) >= reallen)
            return fail(err, errlen, "%s: path too long", path), -1;
        return 0;
    }
    if (!realpath(path, target))
        return fail(err, errlen, "%s: a symbolic link that leads nowhere (%s): not followed", path,
                    strerror(errno)),
               -1;
    if (!inside(target, r->real) && !inside(target, r->blobs))
        return fail(err, errlen,
                    "%s: a symbolic link out of the model folder (to %s): not followed", path,
                    target),
               -1;
    if (stat(target, &sb) != 0 || !S_ISREG(sb.st_mode))
        return fail(err, errlen,
                    "%s: a symbolic link to a folder or special file (%s): not followed", path,
                    target),
               -1;
    if ((size_t)snprintf(real, reallen, "%s", target) >= reallen)
        return fail(err, errlen, "%s: path too long", path), -1;
    return 0;
}
