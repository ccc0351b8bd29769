/* SPDX-License-Identifier: MIT */
/*
 * What the parts of the GPU check share (tests/cuda/gpu_check.c: bit-exact quantize, dequantize
 * and 2:4; gpu_matmul.c: matmul within the bound; gpu_bench.c: the throughput table): the
 * report, the CUDA error check, the data generator, plane helpers and the format cases. Plain C,
 * no cmocka: the GPU machine has none.
 */
#ifndef QS_GPU_COMMON_H
#define QS_GPU_COMMON_H

#include <cuda_runtime_api.h>
#include <math.h>
#include <stdarg.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "qsparse.h"
#include "qsparse/cuda.h"
#include "qsparse/matmul.h"
#include "qsparse/sparse.h"

extern int failures, checks;

void report(const char *fmt, ...) __attribute__((format(printf, 1, 2)));
/* report() also writes to f (the results file). */
void report_to(FILE *f);

#define CU(call)                                                                                   \
    do {                                                                                           \
        cudaError_t e_ = (call);                                                                   \
        if (e_ != cudaSuccess) {                                                                   \
            report("FATAL %s:%d %s: %s\n", __FILE__, __LINE__, #call, cudaGetErrorString(e_));     \
            exit(2);                                                                               \
        }                                                                                          \
    } while (0)

/* splitmix64; fill() mixes normal values over 2^40 of scales with adversarial ones. */
uint64_t rnd(void);
void rnd_seed(uint64_t s);
void fill(float *x, int64_t n, double p_special);
double unif(void);

qs_ctx *cpu_ctx(void);

struct planes {
    qs_qtensor q;
    int64_t bytes[QS_PLANE_COUNT];
};

void planes_new(struct planes *t, const qs_quant_params *p, int64_t rows, int64_t cols, int device);
void planes_free(struct planes *t, int device);
/* Copy every plane of `from` to `to` (host to device or device to host by the pointers). */
void planes_copy(struct planes *to, const struct planes *from);
int same(const char *what, const void *a, const void *b, size_t n, const char *name);

struct fmt_case {
    const char *name;
    int32_t format, block, dq, gran, sym, rounding;
    float scale;
};

extern const struct fmt_case cases[];
extern const int ncases;
qs_quant_params params_of(const struct fmt_case *c);

/* gpu_matmul.c and gpu_bench.c */
void check_matmul_all(qs_ctx *cpu, qs_ctx *msg);
void bench(qs_ctx *ctx);

#endif /* QS_GPU_COMMON_H */
