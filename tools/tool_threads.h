/* SPDX-License-Identifier: MIT */
/*
 * The tool's thread count per operation. With --threads N the tool uses N everywhere; without it
 * (auto) it gives a tensor's quantization, pruning and error decode more than one thread only
 * when the tensor is large enough to pay for the threads' start and barrier, GPTQ / SparseGPT
 * only on wide layers, and nothing more than the cores that the 1-minute load average leaves
 * idle when the tool starts: on a machine shared with a busy process, an OpenMP team of two
 * waits for a core at every barrier (measured: a 4M-element NF4 quantize 7 ms on one thread,
 * 24 ms on two beside other jobs). Quantize, dequantize and pruning give the same bytes for any
 * thread count, so the choice changes speed only.
 */
#ifndef QS_TOOLS_TOOL_THREADS_H
#define QS_TOOLS_TOOL_THREADS_H

#include <stdint.h>

enum qs_tool_op {
    QS_TOOL_OP_ELEMENTWISE, /* quantize, dequantize, prune, convert: rows x cols elements */
    QS_TOOL_OP_GPTQ,        /* GPTQ / SparseGPT of a rows x cols (K) weight */
};

/* Below these, one thread (auto mode): a 4M-element tensor (16 MB in f32) is where a second
 * thread starts to gain on a quiet machine; GPTQ's per-column steps need K >= 2048. */
#define QS_TOOL_PAR_ELEMENTS (INT64_C(1) << 22)
#define QS_TOOL_PAR_GPTQ_K 2048

struct qs_tool_threads {
    int requested; /* --threads; 0 = auto */
    int cores;     /* CPUs this process may run on */
    int idle;      /* cores less the rounded 1-minute load average, at least 1 */
    double load;   /* the load average read (-1 when unknown) */
};

/* Reads the CPU count (affinity mask, then OMP_NUM_THREADS as a cap) and the load average. The
 * test hook QSPARSE_TOOL_TEST_LOADAVG replaces the load average read from the system. */
void qs_tool_threads_init(struct qs_tool_threads *t, int requested);

/* Threads for one operation on a rows x cols tensor. */
int qs_tool_threads_for(const struct qs_tool_threads *t, enum qs_tool_op op, int64_t rows,
                        int64_t cols);

#endif /* QS_TOOLS_TOOL_THREADS_H */
