/* SPDX-License-Identifier: MIT */
/*
 * safetensors reading and writing for the `qsparse` tool. A file is an 8-byte little-endian
 * header length, a JSON header ({name: {dtype, shape, data_offsets}}, optional "__metadata__" of
 * string values) and the data section. Reading refuses anything but a regular file (a FIFO,
 * device or directory is refused without blocking), memory-maps it, parses the header with
 * jansson and validates every entry before any tensor is used: header length within the file and
 * under 100 MB, unique names, known dtypes, non-negative shapes whose byte count fits int64 and
 * equals the offsets, offsets inside the data section and no two non-empty tensors sharing a
 * byte. Every step costs at most O(n log n) in the number of tensors. Writing goes to a temporary
 * file beside the target (".NAME.qsparse-tmp-PID-XXXXXX", with the old output's permissions)
 * that is renamed into place only when complete; an error or a fatal signal removes it, and the
 * next write to the same target removes those left by runs that died of SIGKILL.
 */
#ifndef QS_TOOLS_SAFETENSORS_H
#define QS_TOOLS_SAFETENSORS_H

#include <stddef.h>
#include <stdint.h>

#include <jansson.h>

#define QS_ST_MAX_DIMS 8
#define QS_ST_MAX_HEADER (100u * 1000u * 1000u) /* the reference reader's limit */

struct qs_st_tensor {
    const char *name; /* owned by the file's JSON header */
    char dtype[12];   /* "F32", "U8", ... */
    int elem_size;    /* bytes per element */
    int ndim;
    int64_t shape[QS_ST_MAX_DIMS];
    int64_t numel;
    uint64_t begin, end;       /* byte range inside the data section */
    const unsigned char *data; /* into the mapping */
};

struct qs_st_file {
    unsigned char *map;
    size_t map_size;
    int fd; /* open while mapped (valid when map is not NULL) */
    uint64_t header_len;
    const unsigned char *data;
    uint64_t data_size;
    struct qs_st_tensor *tensors; /* in header order */
    size_t count;
    const struct qs_st_tensor **by_name; /* the tensors sorted by name, for qs_st_find */
    json_t *root;
    json_t *metadata; /* borrowed from root; NULL when absent */
};

/* Bytes per element of a safetensors dtype name, 0 if unknown. */
int qs_st_dtype_size(const char *dtype);

/*
 * Open, map and validate a file. Returns 0, or -1 with a message in err. Messages quote tensor
 * names as the file spells them: print them through escape.h.
 */
int qs_st_open(struct qs_st_file *f, const char *path, char *err, size_t errlen);
void qs_st_close(struct qs_st_file *f);
/* The tensor of that name, or NULL (a binary search: O(log n)). */
const struct qs_st_tensor *qs_st_find(const struct qs_st_file *f, const char *name);

/* Hand the pages of t's bytes back to the kernel once they are used: a model streamed through
 * the mapping keeps its resident memory to the tensor at hand. The bytes stay readable. */
void qs_st_release(const struct qs_st_file *f, const struct qs_st_tensor *t);
/* The same for n bytes at p inside the mapping. */
void qs_st_release_bytes(const struct qs_st_file *f, const void *p, uint64_t n);

/* ---- writing ----------------------------------------------------------------------------------
 */

struct qs_st_out {
    char *name;
    char dtype[12];
    int ndim;
    int64_t shape[QS_ST_MAX_DIMS];
    const void *data;
    uint64_t bytes;
    void *owned; /* freed with the writer (may be NULL when data points elsewhere) */
};

struct qs_st_writer {
    struct qs_st_out *t;
    size_t count, cap;
    json_t *metadata; /* object of strings, owned; may stay NULL */
};

void qs_st_writer_init(struct qs_st_writer *w);
/*
 * Add a tensor. `owned` (may be NULL) is freed with the writer, also when this call fails.
 * Returns 0, or -1 with a message when the byte count does not match dtype and shape.
 */
int qs_st_writer_add(struct qs_st_writer *w, const char *name, const char *dtype, int ndim,
                     const int64_t *shape, const void *data, uint64_t bytes, void *owned, char *err,
                     size_t errlen);
/* Set a metadata string (copied). */
int qs_st_writer_meta(struct qs_st_writer *w, const char *key, const char *value);
void qs_st_writer_free(struct qs_st_writer *w);
/* The bytes of the file these entries make (header included), without writing it; 0 when the
 * header cannot be built (names that are not UTF-8, no memory). */
uint64_t qs_st_writer_file_bytes(struct qs_st_writer *w);

/*
 * Writing is streamed: the header is written first, from a writer whose entries give names,
 * dtypes, shapes and byte counts (their data may be NULL), then each tensor's bytes in entry
 * order, in as many pieces as the caller likes, then qs_st_stream_end checks that every
 * announced byte came, syncs and renames the temporary file into place. The names must be
 * unique (checked) and valid UTF-8. The output is refused when the input opened last with
 * qs_st_open (and not yet closed) has changed size since: its tensors may have read as zeros.
 * Only a 1 MB write buffer is held, so a model of any size is written with the memory of the
 * tensor at hand. Each call returns 0, or -1 with a message; any failure removes the temporary
 * file and leaves the target untouched (qs_st_stream_abort does the same, for the caller's own
 * errors).
 */
struct out_buf;
struct qs_st_stream {
    struct qs_st_writer *w; /* borrowed until the end */
    const char *path;
    struct out_buf *buf;
    int fd;
    size_t next;   /* the entry being written */
    uint64_t done; /* its bytes written so far */
};

int qs_st_stream_begin(struct qs_st_stream *s, struct qs_st_writer *w, const char *path,
                       char *err, size_t errlen);
int qs_st_stream_put(struct qs_st_stream *s, const void *p, uint64_t n, char *err,
                     size_t errlen);
int qs_st_stream_end(struct qs_st_stream *s, char *err, size_t errlen);
void qs_st_stream_abort(struct qs_st_stream *s);

/*
 * Install handlers for every signal whose default action ends the process (all but SIGKILL and
 * SIGSTOP): they remove a temporary output, then the process dies of the signal as it would have.
 * A signal ignored when the process started stays ignored (nohup), except the faults (SIGBUS,
 * SIGSEGV, SIGILL, SIGFPE), which the kernel delivers anyway. A SIGBUS from reading the latest
 * opened input mapping (a file truncated while mapped) prints a message and exits with status 1
 * instead. Call it before qs_st_open, so that reading the header is covered too.
 */
void qs_st_install_signal_cleanup(void);

#endif /* QS_TOOLS_SAFETENSORS_H */
