/* SPDX-License-Identifier: MIT */
/*
 * What the RECORDER test plugin (test_plugin.c) writes down about every call it receives, read
 * by tests/test_backend.c through dlsym("qs_test_plugin_log"): which operations reached the
 * plugin and with which arguments, and what the host services answered it.
 */
#ifndef QS_TEST_PLUGIN_H
#define QS_TEST_PLUGIN_H

#include "qsparse/plugin.h"

/* The recognisable outputs of the RECORDER's operations. */
#define QS_TEST_META_MARK 0x4E4Eu   /* PRUNE / COMPRESS: meta[0] */
#define QS_TEST_DST_MARK 42.0f      /* DECOMPRESS: the first f32 of dst */
#define QS_TEST_Y(m, n) ((float)(1000 * (m) + (n))) /* matmul: y[m][n] */

struct qs_test_plugin_log {
    int32_t quantize, matmul, sp24, act_sumsq; /* calls that reached the plugin */
    /* the last matmul */
    int64_t M, K, N;
    int32_t x_dtype, activations, kind, has_bias, has_layout;
    qs_backend_layout layout; /* its weight's layout, when it had one */
    /* the last 2:4 call */
    qs_backend_sp24 sp24_call;
    /* the host services, asked during the last act_sumsq */
    int32_t threads, nonfinite, scratch_ok;
};

#endif /* QS_TEST_PLUGIN_H */
