/* SPDX-License-Identifier: MIT */
/*
 * libqsparse profiling counters: per context, off by default, switched on with
 * qs_ctx_set(ctx, QS_PARAM_PROFILE, 1). While on, every successful call of the operations below
 * adds to one entry per (operation, kernel, format, threads): calls, elements, bytes read and
 * written, and wall-clock nanoseconds. Failed calls are not counted.
 *
 *   operation     elements                 bytes_in                    bytes_out
 *   "quantize"    rows * cols              rows * cols * source size   every plane of the format
 *   "dequantize"  rows * cols              every plane of the format   rows * cols * dst size
 *   "matmul"      M * N * K multiply-adds  x and every weight plane    M * N * 4
 *   "convert"     n                        n * source size             n * destination size
 *
 * The kernel is the function of the kernel slot the operation's inner loop calls, as
 * qs_ctx_kernel_info names it ("qs_nf4_quant__avx512"), so a forced lower ISA tier shows up in
 * the table; `isa` is the context's tier (qs_ctx_isa_name). When the counters are off, the only
 * cost of a call is one test of a pointer. A context holds at most QS_PROFILE_MAX_ENTRIES
 * entries; calls of further kinds are counted in `dropped`.
 *
 * Like everything else on a context, the counters are not synchronized: one thread at a time.
 */
#ifndef QSPARSE_PROFILE_H
#define QSPARSE_PROFILE_H

#include "../qsparse.h"

#ifdef __cplusplus
extern "C" {
#endif

#define QS_PROFILE_MAX_ENTRIES 64

typedef struct qs_profile_entry {
    const char *op;     /* "quantize", "dequantize", "matmul", "convert" (static strings) */
    const char *kernel; /* the kernel function name ("" for calls that ran none) */
    const char *isa;    /* the context's tier at the time of the call */
    int32_t format;     /* QS_FORMAT_* (quantize, dequantize, matmul of a quantized weight), else 0 */
    int32_t threads;    /* threads the call was allowed (the context's OpenMP team size) */
    uint64_t calls;
    uint64_t elements;
    uint64_t bytes_in;
    uint64_t bytes_out;
    uint64_t ns;        /* wall-clock nanoseconds (CLOCK_MONOTONIC), summed over calls */
    int64_t reserved[4];
} qs_profile_entry;

/** Number of entries recorded since the counters were switched on or reset (0 when off). */
QS_API int64_t qs_profile_count(const qs_ctx *ctx);

/**
 * Copy entry `index` (0 <= index < qs_profile_count) into *entry; entries are in the order of
 * their first call. QS_ERR_INVALID_ARG for a NULL pointer or an index out of range (*entry is
 * then untouched).
 */
QS_API qs_status qs_profile_get(const qs_ctx *ctx, int64_t index, qs_profile_entry *entry);

/** Calls not counted because the table was full (QS_PROFILE_MAX_ENTRIES kinds). */
QS_API uint64_t qs_profile_dropped(const qs_ctx *ctx);

/** Clear every entry; the counters stay on or off as they were. */
QS_API qs_status qs_profile_reset(qs_ctx *ctx);

/**
 * The entries as a JSON document:
 *   {"isa": "...", "dropped": N, "entries": [{"op": ..., "kernel": ..., "isa": ...,
 *    "format": "nf4" or null, "threads": T, "calls": ..., "elements": ..., "bytes_in": ...,
 *    "bytes_out": ..., "ns": ...}, ...]}
 * written to buf (with a terminating NUL) when it holds `size` bytes; *written receives the bytes
 * needed without the NUL either way. QS_ERR_BUFFER_TOO_SMALL when size <= that length (buf
 * untouched); buf may be NULL with size 0 to ask for the length.
 */
QS_API qs_status qs_profile_json(const qs_ctx *ctx, char *buf, int64_t size, int64_t *written);

/**
 * What the library runs on, as one line of facts per call to qs_runtime_info(ctx, key): used by
 * `qsparse doctor` and qs.doctor(). Returns a static or context-owned string, never NULL.
 *   QS_RUNTIME_BLAS          "OpenBLAS 0.3.21 (core Zen, 2 threads)" or "none (built without BLAS)"
 *   QS_RUNTIME_OPENMP        "OpenMP 201511, 2 threads" or "none (built without OpenMP)"
 *   QS_RUNTIME_COMPILER      the compiler and version the library was built with
 */
#define QS_RUNTIME_BLAS     1
#define QS_RUNTIME_OPENMP   2
#define QS_RUNTIME_COMPILER 3
QS_API const char *qs_runtime_info(qs_ctx *ctx, int32_t key);

#ifdef __cplusplus
}
#endif

#endif /* QSPARSE_PROFILE_H */
