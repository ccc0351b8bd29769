/* SPDX-License-Identifier: MIT */
/*
 * The one reader of the tool's side files: the JSON files beside the weights (config.json,
 * model.safetensors.index.json, hf_quant_config.json, a part's qsparse-part.json) and
 * `--act-amax FILE`. Like the weights reader it refuses anything but a regular file without
 * blocking (opened non-blocking: a FIFO never waits for a writer), and it refuses a file over
 * QS_SIDE_FILE_MAX bytes before reading it: jansson holds a parsed file as one allocation per
 * value, up to about 35 times the file's size, so the limit bounds that memory too. Every
 * message names the file.
 */
#ifndef QS_TOOLS_SIDE_FILE_H
#define QS_TOOLS_SIDE_FILE_H

#include <stddef.h>

#include <jansson.h>

/* 16 MiB: a config.json is kilobytes (a 21k-class id2label map about 1.3 MB), the index of a
 * 10^5-tensor model about 10 MB. */
#define QS_SIDE_FILE_MAX (16u << 20)

/* The whole file at path (qs_heap_malloc'd, with a NUL after the n bytes), or NULL with a
 * message in err. *missing is set when the file does not exist (ENOENT), else cleared. */
unsigned char *qs_side_read(const char *path, size_t *n, int *missing, char *err, size_t errlen);

/* The file as a JSON object (a new reference; duplicate keys refused), or NULL with a message
 * in err; *missing as qs_side_read (missing may be NULL). */
json_t *qs_side_json(const char *path, int *missing, char *err, size_t errlen);

#endif /* QS_TOOLS_SIDE_FILE_H */
