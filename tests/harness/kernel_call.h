/* SPDX-License-Identifier: MIT */
/*
 * The per-slot kernel call, written once (dav1d's checkasm): for every slot of the kernel table
 * one entry in kernel_call.c sets up a call of any implementation of the slot from a few shared
 * input planes and makes it, writing every output into one buffer. tests/test_kernels.c sweeps
 * the entries over lengths and parameter variants and compares an implementation's bytes with its
 * reference's; bench/qsparse_bench.c times the same calls with the typical parameters. A new slot
 * needs one entry there (kernel_call.c says how).
 *
 * Use: kc_setup once per input set (parameters, derived inputs such as 2:4 meta, int8 x codes or
 * packed panels: untimed), kc_call per implementation (the call and whatever in-out state it
 * starts from: what a benchmark times), kc_release at the end.
 */
#ifndef QS_TESTS_HARNESS_KERNEL_CALL_H
#define QS_TESTS_HARNESS_KERNEL_CALL_H

#include <stddef.h>
#include <stdint.h>

#include "core/kernels.h"

typedef void kc_fn(void);

/* The input planes of a call, n elements each, and which parameters to use. */
typedef struct {
    const float *x;        /* n floats (the activations, values to quantize, ...) */
    const uint8_t *codes;  /* n random bytes (codes of every format) */
    const uint8_t *sbytes; /* n scale bytes (E8M0 / E4M3) */
    const uint16_t *half;  /* n 16-bit patterns (f16 / bf16 values, INT8 zero points) */
    const float *absmax;   /* n scales (NF4 absmax, INT8 scales, f32 weights) */
    int64_t n;
    int variant;      /* 0 ... KC_VARIANTS - 1: the parameter set (block sizes, scales, shapes) */
    int typical;      /* nonzero: the benchmark's typical parameters; variant is ignored */
    size_t out_bytes; /* the capacity of the output buffer kc_call writes */
} kc_in;

#define KC_VARIANTS 12

/* How tests/test_kernels.c compares a call's output with the reference's. */
typedef enum {
    KC_RULE_FAMILY, /* the slot family's rule (bit for bit, or the matmul tolerance) */
    KC_RULE_EXACT,  /* bit for bit in any family (the int8-activation matmul: exact integers,
                       then the same float steps as the reference) */
    KC_RULE_GEMV,   /* y within the GEMV error scale of sum |x w| (multi-row GEMV) */
    KC_RULE_SP24,   /* one 2:4 row's y within the GEMV error scale over its kept products */
} kc_rule;

/* What the GEMV and 2:4 rules need besides y (set by kc_setup for those rules, variant mode):
 * y[i * ldy + r] for i < m, r < rows is the dot product of x row i (k values at x + i * ldx: the
 * activations, or for 2:4 x gathered at the kept columns) with weight row r (k values at
 * w + r * k, decoded as the reference decodes them). */
typedef struct {
    int64_t m, rows, k, ldy, ldx;
    const float *x;
    const float *w;
    double vmax;  /* GEMV: the largest unscaled element value of the format (0: no scale) */
    int overflow; /* 2:4: a block scale or an unscaled block sum near the f32 limit */
    /* bf16-activation GEMV (x and w hold the bf16 values, widened): each weight element's scale
     * (NULL for the other slots). The SIMD kernels may flush denormals to zero, which the rule
     * allows for: 2^-125 sum_k (|w_k| + |s_k| (1 + |x_k|)) more (include/qsparse/matmul.h). */
    const float *ws;
} kc_gemv;

struct kc_entry;

/* One call as an entry set it up; fields past `rule` are the entry's own. */
typedef struct {
    kc_in in;
    int32_t slot;
    kc_rule rule;
    kc_gemv gemv;
    const struct kc_entry *entry;
    int64_t m, rows, k, r0, ldy, len, block, group, words, start, off;
    int32_t flag;
    float scale;
    qs_mm_weight w;
    const float *xsrc;
    uint8_t *mask;
    uint16_t *meta, *h16;
    float *fa, *fb;
    int8_t *xq;
    int32_t *xs;
    void *mem[8];
    int nmem;
} kc_case;

/* The comparison rule of `slot`'s entry; KC_RULE_FAMILY for a slot without one. */
kc_rule kc_slot_rule(int32_t slot);

/* Set up a call of `slot` on `in`: 1, 0 if the slot has no entry, -1 if out of memory (c then
 * needs no kc_release). */
int kc_setup(kc_case *c, int32_t slot, const kc_in *in);

/* Call fn (an implementation of the case's slot) as set up; returns the output bytes written at
 * out (in.out_bytes at most). For the GEMV and 2:4 rules the output is y only. */
size_t kc_call(const kc_case *c, kc_fn *fn, uint8_t *out);

void kc_release(kc_case *c);

/* Whether this process may call entry e: the CPU has its ISA bits and, for an AMX entry, the OS
 * granted the tile state (asked for here, as src/gemm/plan.c does before it picks one). */
int kc_entry_runs(const struct qs_kernel_entry *e);

#endif /* QS_TESTS_HARNESS_KERNEL_CALL_H */
