/* SPDX-License-Identifier: MIT */
/*
 * Which files a model folder may lend the tool. A downloaded folder is someone else's: a
 * symbolic link in it may name any file of this machine (/proc/self/environ, ~/.ssh, /etc), and
 * the output folder is meant to be published. So a link is followed only to a regular file
 * inside the folder, or, for a Hugging Face cache snapshot (a folder REPO/snapshots/REV, whose
 * files are links to ../../blobs/HASH), inside that cache repository's blobs folder. Any other
 * link (out of the folder, to a folder, dangling) is refused with an error naming it.
 */
#ifndef QS_TOOLS_FOLDER_LINKS_H
#define QS_TOOLS_FOLDER_LINKS_H

#include <limits.h>
#include <stddef.h>

struct qs_folder_root {
    char real[PATH_MAX];  /* the folder's real path */
    char blobs[PATH_MAX]; /* a cache snapshot's REPO/blobs (real path), else "" */
};

/* The root of folder dir. Returns 0, or -1 with a message in err. */
int qs_folder_root(struct qs_folder_root *r, const char *dir, char *err, size_t errlen);

/*
 * The file that path (a file inside the root's folder, reached through real folders) stands
 * for, in real (capacity reallen): path itself when it is not a symbolic link, else the link's
 * real target when that is a regular file inside the root. Returns 0; 1 when path does not
 * exist (real unset, no message); -1 with a message naming the link in err.
 */
int qs_folder_file(const struct qs_folder_root *r, const char *path, char *real, size_t reallen,
                   char *err, size_t errlen);

#endif /* QS_TOOLS_FOLDER_LINKS_H */
