/* SPDX-License-Identifier: MIT */
/*
 * Hugging Face model folders for `qsparse quantize`: reading one (config.json plus a single
 * model.safetensors or the shards named by model.safetensors.index.json) and writing one. The
 * output folder is built as a temporary folder beside it, ".NAME.qsparse-tmp-PID-XXXXXX", and
 * renamed into place when complete, so OUT is either absent (or the empty folder it was) or the
 * whole model; an error removes the temporary folder, and the next run for the same OUT removes
 * those left by a run that was killed.
 */
#ifndef QS_TOOLS_MODEL_DIR_H
#define QS_TOOLS_MODEL_DIR_H

#include <limits.h>
#include <stddef.h>
#include <stdint.h>

#include <jansson.h>

#include "safetensors.h"

#define QS_INDEX_NAME "model.safetensors.index.json"
/* What `quantize --shard i/n` writes beside its shards, for `merge-index` (cmd_merge_index.c). */
#define QS_PART_MARKER "qsparse-part.json"

struct qs_model_dir {
    char *dir;
    json_t *config; /* config.json (an object) */
    char **shards;  /* safetensors file names inside dir, sorted */
    size_t nshards;
    int indexed; /* 1: the shards came from model.safetensors.index.json */
    json_t *weight_map; /* the index's tensor -> shard map (indexed folders), else NULL */
    json_t *holder;     /* tensor -> position in shards, as the shards' headers are noted */
};

/* A file name a folder's index or a part marker may give: a plain name inside the folder (no
 * '/', not "." or ".."), nothing else. */
int qs_plain_name(const char *s);

/* 1 when path is a directory (following symbolic links). */
int qs_is_dir(const char *path);

/* Read the folder's config.json and find its weight files. Side files are read as side_file.h
 * says; a symbolic link among them (or among the shards) must lead to a regular file inside the
 * folder (folder_links.h). Returns 0, or -1 with a message. */
int qs_model_dir_open(struct qs_model_dir *m, const char *dir, char *err, size_t errlen);
/* Note the tensors of shard `shard` (position in shards) from its header: a tensor another
 * shard already holds is an error naming it and both shards. Returns 0, or -1 with a message
 * (which quotes a tensor name: print it escaped). No-op for a folder without an index. */
int qs_model_dir_note_tensors(struct qs_model_dir *m, size_t shard,
                              const struct qs_st_file *f, char *err, size_t errlen);
/* After every shard was noted: each tensor the index names is held by the shard it names.
 * Returns 0, or -1 with a message naming the tensor and the shards. */
int qs_model_dir_check_index(const struct qs_model_dir *m, char *err, size_t errlen);
void qs_model_dir_close(struct qs_model_dir *m);

struct qs_model_out {
    char final[PATH_MAX];
    char tmp[PATH_MAX];
    int active;
    int replace; /* a non-empty `final` is replaced at commit (--force) */
};

/* Check that `out` does not exist or is an empty folder (or, with `replace`, is a folder), then
 * create the temporary folder beside it. */
int qs_model_out_begin(struct qs_model_out *o, const char *out, int replace, char *err,
                       size_t errlen);
/* The path of `name` inside the temporary folder (malloc'd), NULL without memory. */
char *qs_model_out_path(const struct qs_model_out *o, const char *name);
/* Copy every file and folder of the input except its weights (the shards, the index, any other
 * top-level weight file or export folder), config.json and hf_quant_config.json. Regular files
 * only; a symbolic link as the file it leads to inside the folder, any other link an error
 * naming it (folder_links.h). */
int qs_model_out_copy_rest(const struct qs_model_dir *m, const struct qs_model_out *o, char *err,
                           size_t errlen);
/* Write a JSON value to `name` in the temporary folder, indented by 2, with a final newline. */
int qs_model_out_json(const struct qs_model_out *o, const char *name, const json_t *j, char *err,
                      size_t errlen);
/* Copy every file and folder of `dir` except its weights, config.json, hf_quant_config.json and
 * a part marker (merge-index: the first part's tokenizer and other files). */
int qs_model_out_copy_from(const char *dir, const struct qs_model_out *o, char *err,
                           size_t errlen);
/* A hard link from -> to when both are on one file system, else a copy. */
int qs_link_or_copy(const char *from, const char *to, char *err, size_t errlen);
/* {"metadata": {"total_size": total}, "weight_map": map}: the index both quantize and
 * merge-index write (a new reference, NULL without memory). */
json_t *qs_model_index_json(uint64_t total, json_t *weight_map);
/* Rename the temporary folder to the output. A folder there (replace) is exchanged with it in
 * one step where the file system can (output_path.h), else moved aside first and put back if
 * the rename fails; then it is removed. */
int qs_model_out_commit(struct qs_model_out *o, char *err, size_t errlen);
/* Remove the temporary folder and everything in it (after an error). */
void qs_model_out_abort(struct qs_model_out *o);

#endif /* QS_TOOLS_MODEL_DIR_H */
