/* SPDX-License-Identifier: MIT */
/*
 * `qsparse quantize --method gptq|sparsegpt --calib FILE`: the layer statistics of FILE (a
 * safetensors file; keys in tools/README.md) turned into a qs_hessian per weight, and the weight
 * quantized by GPTQ (qs_gptq_quantize) or pruned by SparseGPT (qs_sparsegpt) and then quantized.
 * For a weight "NAME.weight" (or any NAME) the file holds "NAME.hessian" (F64 or F32, [K, K],
 * H = 2 X^T X) or "NAME.inputs" (F32, F16 or BF16, [..., K] input activations).
 */
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "calib_file.h"
#include "heap.h"

int qs_calib_parse_method(struct qs_calib_opts *o, const char *s)
{
    if (strcmp(s, "rtn") == 0)
        o->method = QS_METHOD_RTN;
    else if (strcmp(s, "gptq") == 0)
        o->method = QS_METHOD_GPTQ;
    else if (strcmp(s, "sparsegpt") == 0)
        o->method = QS_METHOD_SPARSEGPT;
    else {
        fprintf(stderr, "qsparse quantize: --method is rtn, gptq or sparsegpt, not '%s'\n", s);
        return -1;
    }
    return 0;
}

int qs_calib_parse_sparsity(struct qs_calib_opts *o, const char *s)
{
    int n, m, used = 0;
    if (sscanf(s, "%d:%d%n", &n, &m, &used) != 2 || s[used] != '\0' || n < 1 || m > 16 ||
        n >= m) {
        fprintf(stderr, "qsparse quantize: --sparsity is N:M with 1 <= N < M <= 16, not '%s'\n",
                s);
        return -1;
    }
    o->sp_n = n;
    o->sp_m = m;
    return 0;
}

int qs_calib_open(struct qs_calib_opts *o, char *err, size_t errlen)
{
    if (o->method == QS_METHOD_SPARSEGPT && !o->sp_m) {
        snprintf(err, errlen, "--method sparsegpt needs --sparsity N:M");
        return -1;
    }
    if (o->sp_m && o->method != QS_METHOD_SPARSEGPT) {
        snprintf(err, errlen, "--sparsity needs --method sparsegpt");
        return -1;
    }
    if (o->method != QS_METHOD_RTN && !o->calib) {
        snprintf(err, errlen, "--method %s needs --calib FILE",
                 o->method == QS_METHOD_GPTQ ? "gptq" : "sparsegpt");
        return -1;
    }
    if (o->method == QS_METHOD_RTN && o->calib) {
        snprintf(err, errlen, "--calib needs --method gptq or sparsegpt");
        return -1;
    }
    if (!o->calib)
        return 0;
    if (qs_st_open(&o->f, o->calib, err, errlen) != 0)
        return -1;
    o->open = 1;
    return 0;
}

void qs_calib_close(struct qs_calib_opts *o)
{
    if (o->open)
        qs_st_close(&o->f);
    o->open = 0;
}

/* The layer's key `base` + suffix, base = name without a trailing ".weight". */
static const struct qs_st_tensor *find_key(const struct qs_calib_opts *o, const char *name,
                                           const char *suffix, char *key, size_t keylen)
{
    size_t n = strlen(name);
    if (n >= 7 && strcmp(name + n - 7, ".weight") == 0)
        n -= 7;
    snprintf(key, keylen, "%.*s%s", (int)n, name, suffix);
    return qs_st_find(&o->f, key);
}

/* The Hessian of layer `name` with K = cols, from FILE. NULL with err. */
static qs_hessian *load_hessian(qs_ctx *ctx, const struct qs_calib_opts *o, const char *name,
                                int64_t cols, char *err, size_t errlen)
{
    char key[1024], key2[1024];
    const struct qs_st_tensor *t = find_key(o, name, ".hessian", key, sizeof key);
    qs_hessian *h = NULL;

    if (t) {
        if (t->ndim != 2 || t->shape[0] != cols || t->shape[1] != cols ||
            (strcmp(t->dtype, "F64") != 0 && strcmp(t->dtype, "F32") != 0)) {
            snprintf(err, errlen, "%s: must be F64 or F32 of shape [%lld, %lld]", key,
                     (long long)cols, (long long)cols);
            return NULL;
        }
        /* An aligned F64 matrix is read in place from the mapping; only F32 (or a misaligned
         * F64) is widened into a copy. */
        int in_place = strcmp(t->dtype, "F64") == 0 && (uintptr_t)t->data % sizeof(double) == 0;
        double *m = in_place ? NULL : qs_heap_malloc((size_t)(cols * cols) * sizeof(double));
        if (!in_place && !m) {
            snprintf(err, errlen, "%s: out of memory", key);
            return NULL;
        }
        if (strcmp(t->dtype, "F64") == 0) {
            if (!in_place)
                memcpy(m, t->data, (size_t)(cols * cols) * sizeof(double));
        } else {
            for (int64_t i = 0; i < cols * cols; i++) {
                float v;
                memcpy(&v, t->data + 4 * i, 4);
                m[i] = (double)v;
            }
        }
        const double *hm = in_place ? (const double *)(const void *)t->data : m;
        int64_t live = 0;
        for (int64_t i = 0; i < cols; i++)
            live += hm[i * cols + i] != 0.0;
        /* an all-zero diagonal is no data: GPTQ would zero every weight (every input dead) */
        if (live == 0)
            snprintf(err, errlen, "%s: every diagonal entry is 0: no calibration data for this "
                     "layer", key);
        else if (qs_hessian_from_matrix(ctx, hm, cols, 0, &h) != QS_OK)
            snprintf(err, errlen, "%s: %s", key, qs_ctx_last_error(ctx));
        qs_heap_free(m);
        qs_st_release(&o->f, t);
        return h;
    }
    t = find_key(o, name, ".inputs", key2, sizeof key2);
    if (!t) {
        snprintf(err, errlen, "%s: no calibration data (neither '%s' nor '%s' in the --calib file)",
                 name, key, key2);
        return NULL;
    }
    int32_t dt = strcmp(t->dtype, "F32") == 0 ? QS_DTYPE_F32
                 : strcmp(t->dtype, "F16") == 0 ? QS_DTYPE_F16
                 : strcmp(t->dtype, "BF16") == 0 ? QS_DTYPE_BF16 : -1;
    if (dt < 0 || t->ndim < 1 || t->shape[t->ndim - 1] != cols) {
        snprintf(err, errlen, "%s: must be F32, F16 or BF16 of shape [..., %lld]", key2,
                 (long long)cols);
        return NULL;
    }
    if (t->numel == 0) { /* 0 tokens: every input dead, every weight would become 0 */
        snprintf(err, errlen, "%s: 0 tokens: no calibration data for this layer", key2);
        return NULL;
    }
    /* The activations stream from the mapping: the library accumulates them 512 tokens at a
     * time (an f32 stage of that size), and their pages are handed back once read. */
    if (qs_hessian_create(ctx, cols, &h) != QS_OK ||
        qs_hessian_update(ctx, h, t->data, dt, t->numel / cols, cols) != QS_OK) {
        snprintf(err, errlen, "%s: %s", key2, qs_ctx_last_error(ctx));
        qs_hessian_destroy(h);
        qs_st_release(&o->f, t);
        return NULL;
    }
    qs_st_release(&o->f, t);
    return h;
}

int qs_calib_quantize(qs_ctx *ctx, const struct qs_calib_opts *o, const char *name,
                      const qs_quant_params *p, const void *w, int32_t dtype, int64_t rows,
                      int64_t cols, qs_qtensor *q, char *err, size_t errlen)
{
    qs_hessian *h;
    float *wf, *pruned = NULL;
    qs_status st;

    if (o->method == QS_METHOD_RTN) {
        if (qs_quantize(ctx, p, w, dtype, rows, cols, q) == QS_OK)
            return 0;
        snprintf(err, errlen, "%s: %s", name, qs_ctx_last_error(ctx));
        return -1;
    }
    if (!(h = load_hessian(ctx, o, name, cols, err, errlen)))
        return -1;
    wf = qs_heap_malloc((size_t)(rows * cols) * sizeof(float));
    if (o->method == QS_METHOD_SPARSEGPT)
        pruned = qs_heap_malloc((size_t)(rows * cols) * sizeof(float));
    if (!wf || (o->method == QS_METHOD_SPARSEGPT && !pruned)) {
        snprintf(err, errlen, "%s: out of memory", name);
        st = QS_ERR_OUT_OF_MEMORY;
        goto done;
    }
    if ((st = qs_convert(ctx, w, dtype, wf, QS_DTYPE_F32, rows * cols,
                         rows * cols * (int64_t)sizeof(float))) != QS_OK)
        goto fail;
    if (o->method == QS_METHOD_GPTQ) {
        qs_gptq_params g;
        qs_gptq_params_init(&g);
        st = qs_gptq_quantize(ctx, &g, p, wf, rows, cols, h, q, NULL);
    } else {
        qs_sparsegpt_params s;
        qs_sparsegpt_params_init(&s);
        s.n = o->sp_n;
        s.m = o->sp_m;
        st = qs_sparsegpt(ctx, &s, NULL, wf, rows, cols, h, pruned, rows * cols, NULL, NULL, 0,
                          NULL);
        if (st == QS_OK)
            st = qs_quantize(ctx, p, pruned, QS_DTYPE_F32, rows, cols, q);
    }
fail:
    if (st != QS_OK)
        snprintf(err, errlen, "%s: %s", name, qs_ctx_last_error(ctx));
done:
    qs_heap_free(wf);
    qs_heap_free(pruned);
    qs_hessian_destroy(h);
    return st == QS_OK ? 0 : -1;
}
