/* SPDX-License-Identifier: MIT */
/*
 * What a file that is not safetensors is, from its first bytes, and what to do instead: a user
 * who passes pytorch_model.bin, a .gguf or a Git LFS pointer gets a sentence naming it, not a
 * header length read from its magic. Nothing here parses past the magic (a pickle is never
 * unpickled: loading one can run code).
 */
#ifndef QS_TOOLS_FILE_KIND_H
#define QS_TOOLS_FILE_KIND_H

#include <stddef.h>

/* A sentence saying what the n bytes at head start (a zip archive, a pickle, GGUF, HDF5, ...)
 * and how to get safetensors, or NULL for none of those. The first bytes of a safetensors file
 * are its header length, which may begin like any of them: ask only about a file whose length
 * field or header already shows it is not safetensors. */
const char *qs_file_kind_hint(const unsigned char *head, size_t n);

/* For a model folder without model.safetensors: a sentence naming the weight file it holds
 * instead (pytorch_model.bin, tf_model.h5, a .gguf, ...) and what to do, or NULL. */
const char *qs_folder_kind_hint(const char *dir);

#endif /* QS_TOOLS_FILE_KIND_H */
