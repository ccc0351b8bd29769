/* SPDX-License-Identifier: MIT */
/*
 * The overwrite rule of `qsparse quantize`, one for a file and a folder, as in most tools that
 * write files: an existing output is refused unless --force, and --force replaces it only when
 * the new one is complete (a file is renamed over the old; a folder is exchanged with the old in
 * one step where the system can, then the old one is removed). An empty folder counts as
 * absent, the input itself is never an output, and a file never replaces a folder (nor the
 * other way round).
 */
#ifndef QS_TOOLS_OUTPUT_PATH_H
#define QS_TOOLS_OUTPUT_PATH_H

#include <stddef.h>

/* 0 when `out` may be written as a folder (folder 1) or a file (folder 0) made from `in`;
 * -1 with the reason in err otherwise. */
int qs_output_check(const char *out, const char *in, int folder, int force, char *err,
                    size_t errlen);

/* Exchange two paths in one step (Linux renameat2 RENAME_EXCHANGE). 0, or -1 with errno set
 * (ENOSYS or EINVAL where the system or the file system cannot). */
int qs_path_exchange(const char *a, const char *b);

#endif /* QS_TOOLS_OUTPUT_PATH_H */
