/* SPDX-License-Identifier: MIT */
/* The overwrite rule (output_path.h). */
#define _GNU_SOURCE /* renameat2 */

#include "output_path.h"

#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <string.h>
#include <sys/stat.h>

static int empty_dir(const char *path)
{
    DIR *d = opendir(path);
    struct dirent *e;
    int empty = 1;

    if (!d)
        return 0;
    while (empty && (e = readdir(d)) != NULL)
        empty = strcmp(e->d_name, ".") == 0 || strcmp(e->d_name, "..") == 0;
    closedir(d);
    return empty;
}

int qs_output_check(const char *out, const char *in, int folder, int force, char *err,
                    size_t errlen)
{
    struct stat so, si;

    if (stat(out, &so) != 0) {
        if (lstat(out, &so) == 0) { /* a dangling symbolic link: the output would follow it */
            snprintf(err, errlen, "%s is a symbolic link to nothing: remove it first", out);
            return -1;
        }
        return 0;
    }
    if (stat(in, &si) == 0 && si.st_dev == so.st_dev && si.st_ino == so.st_ino) {
        snprintf(err, errlen, "%s is the input itself: choose another output", out);
        return -1;
    }
    if (folder && S_ISDIR(so.st_mode) && empty_dir(out))
        return 0;
    if (folder != (S_ISDIR(so.st_mode) != 0)) {
        snprintf(err, errlen, "%s exists and is a %s; the input makes a %s (not replaced, even "
                 "with --force)", out, S_ISDIR(so.st_mode) ? "folder" : "file",
                 folder ? "folder" : "file");
        return -1;
    }
    if (!force) {
        snprintf(err, errlen, "%s exists: --force replaces it (once the new %s is complete)", out,
                 folder ? "folder" : "file");
        return -1;
    }
    return 0;
}

int qs_path_exchange(const char *a, const char *b)
{
#ifdef RENAME_EXCHANGE
    return renameat2(AT_FDCWD, a, AT_FDCWD, b, RENAME_EXCHANGE);
#else
    (void)a;
    (void)b;
    errno = ENOSYS;
    return -1;
#endif
}
