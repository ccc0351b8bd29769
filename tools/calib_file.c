/* SPDX-License-Identifier: MIT */
/*
 * The calibration options of `qsparse quantize` and the statistics of its --calib FILE
 * (tools/README.md lists the keys): `qsparse calibrate`'s file (per statistics base B: B.xtx, the
 * upper triangle of S = X^T X in F64, F32 or F16 (the mean S / tokens); B.sumsq; B.absmax;
 * B.tokens; and a "qsparse.calibration" metadata entry mapping each layer to its base), or, per
 * layer, NAME.hessian (F64 or F32 [K, K], H = 2 X^T X) or NAME.inputs (F32, F16 or BF16
 * [..., K] input activations).
 */
#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "calib_file.h"
#include "heap.h"

static const struct {
    const char *name;
    int method;
} methods[] = {
    {"rtn", QS_METHOD_RTN},     {"gptq", QS_METHOD_GPTQ},
    {"awq", QS_METHOD_AWQ},     {"sparsegpt", QS_METHOD_SPARSEGPT},
    {"wanda", QS_METHOD_WANDA},
};

static const char *method_name(int m)
{
    for (size_t i = 0; i < sizeof methods / sizeof methods[0]; i++)
        if (methods[i].method == m)
            return methods[i].name;
    return "?";
}

void qs_calib_init(struct qs_calib_opts *o)
{
    memset(o, 0, sizeof *o);
    o->damp = -1.0;
    o->smooth = -1.0;
    o->act_order = -1;
}

int qs_calib_parse_method(struct qs_calib_opts *o, const char *s)
{
    for (size_t i = 0; i < sizeof methods / sizeof methods[0]; i++)
        if (strcmp(s, methods[i].name) == 0) {
            o->method = methods[i].method;
            return 0;
        }
    fprintf(stderr, "qsparse quantize: --method is rtn, gptq, awq, sparsegpt or wanda, not '%s'\n",
            s);
    return -1;
}

int qs_calib_parse_sparsity(struct qs_calib_opts *o, const char *s)
{
    int n, m, used = 0;
    if (sscanf(s, "%d:%d%n", &n, &m, &used) != 2 || s[used] != '\0' || n < 1 || m > 16 || n >= m) {
        fprintf(stderr, "qsparse quantize: --sparsity is N:M with 1 <= N < M <= 16, not '%s'\n", s);
        return -1;
    }
    o->sp_n = n;
    o->sp_m = m;
    return 0;
}

const char *qs_calib_usage(void)
{
    return "--method gptq (nf4, fp4, int8, llm_int8, mxfp4, nvfp4), awq (per-input-channel\n"
           "scales searched on the calibration statistics and folded into the operation\n"
           "before the layer, then rounding), sparsegpt or wanda (with --sparsity N:M; with\n"
           "--format none they prune only) take each layer's statistics from --calib FILE\n"
           "(`qsparse calibrate`'s output, or per-layer Hessians or inputs: tools/README.md);\n"
           "rtn (the default) is plain rounding. With --calib the table adds each layer's\n"
           "output error tr(dW H dW^T) / tr(W H W^T) on the calibration statistics for the\n"
           "method and for round-to-nearest (magnitude pruning), and --heldout FILE (the\n"
           "statistics of other text) adds the same on that text.\n"
           "GPTQ / SparseGPT: --damp X (dampening, default 0.01), --block N (lazy-update\n"
           "block, default 128). GPTQ: --act-order / --no-act-order (columns by decreasing\n"
           "Hessian diagonal; the default for every format but mxfp4, whose per-block scale\n"
           "search needs the columns in order).\n"
           "--rotate hadamard[:B] quantizes W R, R the block Hadamard rotation (B a power of\n"
           "two dividing K; default the largest up to 32768); the loader must rotate each\n"
           "layer's input the same way (qs_hadamard; recorded in qsparse.quantized).\n"
           "--smoothquant ALPHA (W8A8, with --calib): s_j = amax(X_j)^ALPHA /\n"
           "amax(W_j)^(1-ALPHA) moved from the activations into the weights where the\n"
           "calibration found an operation to fold 1/s into.\n";
}

static int parse_double(const char *s, double lo, double hi, double *out)
{
    char *end;
    double v;
    if (!s || !*s)
        return -1;
    v = strtod(s, &end);
    if (*end || !(v >= lo && v <= hi))
        return -1;
    *out = v;
    return 0;
}

int qs_calib_option(struct qs_calib_opts *o, int argc, char **argv, int *i)
{
    const char *a = argv[*i], *next = *i + 1 < argc ? argv[*i + 1] : NULL;
    double v;

    if (strcmp(a, "--act-order") == 0 || strcmp(a, "--no-act-order") == 0) {
        o->act_order = a[2] != 'n';
        return 1;
    }
    if (strcmp(a, "--heldout") == 0) {
        if (!next) {
            fprintf(stderr, "qsparse quantize: --heldout needs a calibration file\n");
            return -1;
        }
        o->heldout = next;
    } else if (strcmp(a, "--damp") == 0) {
        if (parse_double(next, 0.0, 1e6, &v) != 0) {
            fprintf(stderr, "qsparse quantize: --damp needs a number >= 0 (a fraction of the "
                            "mean Hessian diagonal)\n");
            return -1;
        }
        o->damp = v;
    } else if (strcmp(a, "--block") == 0) {
        if (parse_double(next, 1, 4096, &v) != 0 || v != floor(v)) {
            fprintf(stderr, "qsparse quantize: --block needs an integer in 1 ... 4096\n");
            return -1;
        }
        o->block = (int32_t)v;
    } else if (strcmp(a, "--rotate") == 0) {
        int used = 0;
        unsigned b;
        if (next && strcmp(next, "hadamard") == 0) {
            o->rotate = -1;
        } else if (next && sscanf(next, "hadamard:%u%n", &b, &used) == 1 && next[used] == '\0' &&
                   b >= 2 && b <= QS_HADAMARD_MAX_BLOCK && (b & (b - 1)) == 0) {
            o->rotate = (int32_t)b;
        } else {
            fprintf(stderr,
                    "qsparse quantize: --rotate is hadamard or hadamard:B (B a power of "
                    "two, 2 ... %d)\n",
                    QS_HADAMARD_MAX_BLOCK);
            return -1;
        }
    } else if (strcmp(a, "--smoothquant") == 0) {
        if (parse_double(next, 0.0, 1.0, &v) != 0) {
            fprintf(stderr, "qsparse quantize: --smoothquant needs ALPHA in [0, 1] (0.5 is "
                            "SmoothQuant's default)\n");
            return -1;
        }
        o->smooth = v;
    } else {
        return 0;
    }
    (*i)++;
    return 1;
}

int qs_calib_prunes(const struct qs_calib_opts *o)
{
    return o->method == QS_METHOD_SPARSEGPT || o->method == QS_METHOD_WANDA;
}

int qs_calib_owns_pruning(const struct qs_calib_opts *o)
{
    return qs_calib_prunes(o) || (o->open && o->sp_m);
}

/* "qsparse.calibration" of an open file, parsed (NULL when absent); -1 when it is not JSON. */
static int parse_meta(const struct qs_st_file *f, json_t **out, const char *path, char *err,
                      size_t errlen)
{
    json_t *m = f->metadata ? json_object_get(f->metadata, "qsparse.calibration") : NULL;
    json_error_t je;

    *out = NULL;
    if (!m)
        return 0;
    if (!json_is_string(m) || !(*out = json_loads(json_string_value(m), 0, &je)) ||
        !json_is_object(*out) || !json_is_object(json_object_get(*out, "layers"))) {
        snprintf(err, errlen,
                 "%s: its qsparse.calibration metadata is not the JSON object "
                 "`qsparse calibrate` writes",
                 path);
        if (*out)
            json_decref(*out);
        *out = NULL;
        return -1;
    }
    if (json_integer_value(json_object_get(*out, "version")) != 1) {
        snprintf(err, errlen, "%s: calibration file version %lld; this tool reads version 1", path,
                 (long long)json_integer_value(json_object_get(*out, "version")));
        json_decref(*out);
        *out = NULL;
        return -1;
    }
    return 0;
}

int qs_calib_open(struct qs_calib_opts *o, char *err, size_t errlen)
{
    int m = o->method;

    if (qs_calib_prunes(o) && !o->sp_m) {
        snprintf(err, errlen, "--method %s needs --sparsity N:M", method_name(m));
        return -1;
    }
    if (m != QS_METHOD_RTN && !o->calib) {
        snprintf(err, errlen, "--method %s needs --calib FILE (`qsparse calibrate` writes one)",
                 method_name(m));
        return -1;
    }
    if (o->heldout && !o->calib) {
        snprintf(err, errlen, "--heldout compares with --calib FILE: give both");
        return -1;
    }
    if ((o->act_order >= 0 || o->block) && m != QS_METHOD_GPTQ && m != QS_METHOD_SPARSEGPT) {
        snprintf(err, errlen, "--act-order and --block apply to --method gptq or sparsegpt");
        return -1;
    }
    if (o->act_order >= 0 && m == QS_METHOD_SPARSEGPT) {
        snprintf(err, errlen, "--act-order applies to --method gptq");
        return -1;
    }
    if (o->damp >= 0.0 && m != QS_METHOD_GPTQ && m != QS_METHOD_SPARSEGPT) {
        snprintf(err, errlen, "--damp applies to --method gptq or sparsegpt");
        return -1;
    }
    if (o->block && m == QS_METHOD_SPARSEGPT && o->sp_m && o->block % o->sp_m != 0) {
        snprintf(err, errlen, "--block must be a multiple of M (%d) for SparseGPT", o->sp_m);
        return -1;
    }
    if (o->sp_m && (m == QS_METHOD_GPTQ || m == QS_METHOD_AWQ || o->rotate || o->smooth >= 0.0)) {
        /* GPTQ's updates would fill the pruned zeros; scales and rotations move them */
        snprintf(err, errlen,
                 "--sparsity goes with --method rtn (magnitude), wanda or sparsegpt "
                 "(which prunes and compensates)");
        return -1;
    }
    if (o->rotate && (m != QS_METHOD_RTN && m != QS_METHOD_GPTQ)) {
        snprintf(err, errlen, "--rotate goes with --method rtn or gptq");
        return -1;
    }
    if (o->rotate && !o->format) {
        snprintf(err, errlen, "--rotate needs a --format to quantize to");
        return -1;
    }
    if (o->smooth >= 0.0) {
        if (!o->calib) {
            snprintf(err, errlen, "--smoothquant needs --calib FILE (the activations' amax)");
            return -1;
        }
        if (m != QS_METHOD_RTN && m != QS_METHOD_GPTQ) {
            snprintf(err, errlen, "--smoothquant goes with --method rtn or gptq");
            return -1;
        }
        if (o->rotate) {
            snprintf(err, errlen,
                     "--smoothquant and --rotate both change the input space: "
                     "choose one");
            return -1;
        }
    }
    if (!o->calib)
        return 0;
    if (qs_st_open(&o->f, o->calib, err, errlen) != 0)
        return -1;
    o->open = 1;
    if (parse_meta(&o->f, &o->meta, o->calib, err, errlen) != 0)
        goto fail;
    if ((m == QS_METHOD_AWQ || o->smooth >= 0.0) && !o->meta) {
        snprintf(err, errlen,
                 "%s: --method awq and --smoothquant need the file of `qsparse "
                 "calibrate` (its per-channel statistics and folds)",
                 o->calib);
        goto fail;
    }
    if (o->heldout) {
        if (qs_st_open(&o->fh, o->heldout, err, errlen) != 0)
            goto fail;
        o->hopen = 1;
        if (parse_meta(&o->fh, &o->hmeta, o->heldout, err, errlen) != 0)
            goto fail;
    }
    return 0;
fail:
    qs_calib_close(o);
    return -1;
}

int qs_calib_check(qs_ctx *ctx, struct qs_calib_opts *o, int32_t format, const qs_quant_params *p,
                   char *err, size_t errlen)
{
    int64_t cols = 64, rows = 1;
    qs_plane_info info[QS_PLANE_COUNT];
    void *planes[QS_PLANE_COUNT] = {0};
    float w[4096];
    qs_hessian *h = NULL;
    qs_qtensor q;
    qs_status st = QS_OK;
    int rc = -1;

    o->format = format;
    if (o->method != QS_METHOD_GPTQ || !format)
        return 0;
    /* a row that holds whole blocks of the format */
    while (p->block_size > 0 && cols % p->block_size != 0 && cols < 4096)
        cols += 64;
    memset(&q, 0, sizeof q);
    for (int64_t i = 0; i < cols; i++)
        w[i] = (float)((i % 7) - 3) * 0.25f;
    for (int i = 0; i < QS_PLANE_COUNT; i++) {
        if ((st = qs_quant_plane_info(ctx, p, rows, cols, i, &info[i])) != QS_OK)
            goto done;
        if (info[i].bytes > 0 && !(planes[i] = qs_heap_calloc(1, (size_t)info[i].bytes))) {
            snprintf(err, errlen, "out of memory");
            goto out;
        }
    }
    q.data = planes[0], q.data_bytes = info[0].bytes;
    q.scale = planes[1], q.scale_bytes = info[1].bytes;
    q.zero_point = planes[2], q.zero_point_bytes = info[2].bytes;
    q.nested_scale = planes[3], q.nested_scale_bytes = info[3].bytes;
    if ((st = qs_hessian_create(ctx, cols, &h)) != QS_OK ||
        (st = qs_hessian_update(ctx, h, w, QS_DTYPE_F32, 1, cols)) != QS_OK)
        goto done;
    {
        qs_gptq_params g;
        qs_gptq_params_init(&g);
        g.percdamp = 1.0; /* a rank-one Hessian: only the format is being asked about */
        st = qs_gptq_quantize(ctx, &g, p, w, rows, cols, h, &q, NULL);
    }
done:
    if (st == QS_OK)
        rc = 0;
    else
        snprintf(err, errlen, "--method gptq cannot quantize to %s with these options: %s",
                 qs_format_name(format), qs_ctx_last_error(ctx));
out:
    qs_hessian_destroy(h);
    for (int i = 0; i < QS_PLANE_COUNT; i++)
        qs_heap_free(planes[i]);
    return rc;
}

void qs_calib_close(struct qs_calib_opts *o)
{
    if (o->open)
        qs_st_close(&o->f);
    if (o->hopen)
        qs_st_close(&o->fh);
    if (o->meta)
        json_decref(o->meta);
    if (o->hmeta)
        json_decref(o->hmeta);
    o->meta = o->hmeta = NULL;
    o->open = o->hopen = 0;
    qs_calib_folds_free(o);
}

int qs_calib_record(const struct qs_calib_opts *o, int64_t cols, json_t *entry)
{
    int32_t b;

    if (!o->rotate)
        return 0;
    b = o->rotate > 0 ? o->rotate : qs_hadamard_block(cols);
    return json_object_set_new(entry, "rotation",
                               json_pack("{s:s, s:i}", "type", "hadamard", "block", (int)b));
}

/* ---- a layer's statistics -----------------------------------------------------------------------
 */

/* NAME without a trailing ".weight". */
static void base_of(const char *name, char *out, size_t n)
{
    size_t len = strlen(name);
    if (len >= 7 && strcmp(name + len - 7, ".weight") == 0)
        len -= 7;
    snprintf(out, n, "%.*s", (int)len, name);
}

static double rd_f64(const unsigned char *p)
{
    double v;
    memcpy(&v, p, 8);
    return v;
}

static float rd_f32(const unsigned char *p)
{
    float v;
    memcpy(&v, p, 4);
    return v;
}

static float rd_f16(const unsigned char *p)
{
    uint16_t h;
    uint32_t sign, e, m, bits;
    float f;
    memcpy(&h, p, 2);
    sign = (uint32_t)(h >> 15) << 31;
    e = (h >> 10) & 0x1F;
    m = h & 0x3FF;
    if (e == 0x1F) {
        bits = sign | 0x7F800000u | (m << 13);
    } else if (e == 0) {
        f = (float)m * 0x1p-24f;
        return sign ? -f : f;
    } else {
        bits = sign | ((e + 112) << 23) | (m << 13);
    }
    memcpy(&f, &bits, 4);
    return f;
}

/* One element of a F64 / F32 / F16 tensor as a double. */
static double rd_elem(const struct qs_st_tensor *t, int64_t i)
{
    const unsigned char *p = t->data + (uint64_t)i * (uint64_t)t->elem_size;
    return t->elem_size == 8   ? rd_f64(p)
           : t->elem_size == 4 ? (double)rd_f32(p)
                               : (double)rd_f16(p);
}

static int is_float_dtype(const struct qs_st_tensor *t)
{
    return strcmp(t->dtype, "F64") == 0 || strcmp(t->dtype, "F32") == 0 ||
           strcmp(t->dtype, "F16") == 0;
}

/* A vector key base.suffix of K floats: 0 (absent: *out NULL), -1 with err; malloc'd. */
static int load_vector(const struct qs_st_file *f, const char *base, const char *suffix, int64_t k,
                       int want_f64, void **out, char *err, size_t errlen)
{
    char key[1024];
    const struct qs_st_tensor *t;

    *out = NULL;
    snprintf(key, sizeof key, "%s%s", base, suffix);
    if (!(t = qs_st_find(f, key)))
        return 0;
    if (!is_float_dtype(t) || t->ndim != 1 || t->shape[0] != k) {
        snprintf(err, errlen, "%s: must be a float vector of %lld values", key, (long long)k);
        return -1;
    }
    void *v = qs_heap_malloc((size_t)k * (want_f64 ? 8 : 4));
    if (!v) {
        snprintf(err, errlen, "%s: out of memory", key);
        return -1;
    }
    for (int64_t i = 0; i < k; i++) {
        double x = rd_elem(t, i);
        if (!(x >= 0.0) || !isfinite(x)) {
            snprintf(err, errlen, "%s[%lld] = %g: must be finite and >= 0", key, (long long)i, x);
            qs_heap_free(v);
            return -1;
        }
        if (want_f64)
            ((double *)v)[i] = x;
        else
            ((float *)v)[i] = (float)x;
    }
    *out = v;
    return 0;
}

/* `qsparse calibrate`'s statistics of base sb: 0, 1 (no such keys), -1. */
static int load_stats(qs_ctx *ctx, const struct qs_st_file *f, const json_t *meta, const char *sb,
                      int64_t k, struct qs_calib_layer *l, char *err, size_t errlen)
{
    char key[1024];
    const struct qs_st_tensor *tt, *tx;
    const char *kind = json_string_value(json_object_get(meta, "hessian"));
    double *hm = NULL;
    int64_t tokens;

    snprintf(key, sizeof key, "%s.tokens", sb);
    if (!(tt = qs_st_find(f, key)))
        return 1;
    if (strcmp(tt->dtype, "I64") != 0 || tt->numel != 1) {
        snprintf(err, errlen, "%s: must be one I64", key);
        return -1;
    }
    memcpy(&tokens, tt->data, 8);
    if (tokens < 0) {
        snprintf(err, errlen, "%s: negative", key);
        return -1;
    }
    if (tokens == 0) { /* every input dead: GPTQ and SparseGPT would zero every weight */
        snprintf(err, errlen, "%s: 0 tokens: no calibration data for this layer", key);
        return -1;
    }
    l->tokens = tokens;
    if (load_vector(f, sb, ".sumsq", k, 1, (void **)&l->sumsq, err, errlen) != 0 ||
        load_vector(f, sb, ".absmax", k, 0, (void **)&l->absmax, err, errlen) != 0)
        return -1;
    if (!l->sumsq) {
        snprintf(err, errlen, "%s.sumsq: missing (the file holds %s.tokens)", sb, sb);
        return -1;
    }
    if (!(hm = qs_heap_calloc((size_t)(k * k), sizeof *hm))) {
        snprintf(err, errlen, "%s: out of memory", sb);
        return -1;
    }
    snprintf(key, sizeof key, "%s.xtx", sb);
    tx = qs_st_find(f, key);
    if (tx) {
        /* the upper triangle of S row by row; f16 holds S / tokens */
        double mul = kind && strcmp(kind, "f16") == 0 ? 2.0 * (double)tokens : 2.0;
        int64_t at = 0;
        if (!is_float_dtype(tx) || tx->ndim != 1 || tx->shape[0] != k * (k + 1) / 2) {
            snprintf(err, errlen, "%s: must be a float vector of K (K + 1) / 2 = %lld values", key,
                     (long long)(k * (k + 1) / 2));
            qs_heap_free(hm);
            return -1;
        }
        for (int64_t i = 0; i < k; i++) {
            double *row = hm + i * k;
            if (tx->elem_size == 8) /* the common case: one copy per row */
                memcpy(row + i, tx->data + (uint64_t)at * 8, (size_t)(k - i) * 8);
            else
                for (int64_t j = i; j < k; j++)
                    row[j] = rd_elem(tx, at + j - i);
            at += k - i;
            for (int64_t j = i; j < k; j++) {
                row[j] *= mul;
                hm[j * k + i] = row[j];
            }
        }
        qs_st_release(f, tx);
    } else {
        for (int64_t i = 0; i < k; i++)
            hm[i * k + i] = 2.0 * l->sumsq[i];
        l->diag_only = 1;
    }
    int64_t live = 0;
    for (int64_t i = 0; i < k; i++)
        live += hm[i * k + i] != 0.0;
    if (live == 0) { /* an all-zero diagonal is no data, as for NAME.hessian */
        snprintf(err, errlen, "%s: every diagonal entry is 0: no calibration data for this layer",
                 tx ? key : sb);
        qs_heap_free(hm);
        return -1;
    }
    if (qs_hessian_from_matrix(ctx, hm, k, tokens, &l->h) != QS_OK) {
        snprintf(err, errlen, "%s: %s", key, qs_ctx_last_error(ctx));
        qs_heap_free(hm);
        return -1;
    }
    qs_heap_free(hm);
    return 0;
}

/* NAME.hessian (F64 or F32 [K, K]): 0, 1 (absent), -1. */
static int load_hessian_key(qs_ctx *ctx, const struct qs_st_file *f, const char *key, int64_t cols,
                            struct qs_calib_layer *l, char *err, size_t errlen)
{
    const struct qs_st_tensor *t = qs_st_find(f, key);
    if (!t)
        return 1;
    if (t->ndim != 2 || t->shape[0] != cols || t->shape[1] != cols ||
        (strcmp(t->dtype, "F64") != 0 && strcmp(t->dtype, "F32") != 0)) {
        snprintf(err, errlen, "%s: must be F64 or F32 of shape [%lld, %lld]", key, (long long)cols,
                 (long long)cols);
        return -1;
    }
    /* An aligned F64 matrix is read in place from the mapping; only F32 (or a misaligned F64) is
     * widened into a copy. */
    int in_place = strcmp(t->dtype, "F64") == 0 && (uintptr_t)t->data % sizeof(double) == 0;
    double *m = in_place ? NULL : qs_heap_malloc((size_t)(cols * cols) * sizeof(double));
    if (!in_place && !m) {
        snprintf(err, errlen, "%s: out of memory", key);
        return -1;
    }
    if (!in_place)
        for (int64_t i = 0; i < cols * cols; i++)
            m[i] = rd_elem(t, i);
    const double *hm = in_place ? (const double *)(const void *)t->data : m;
    int64_t live = 0;
    for (int64_t i = 0; i < cols; i++)
        live += hm[i * cols + i] != 0.0;
    /* an all-zero diagonal is no data: GPTQ would zero every weight (every input dead) */
    if (live == 0)
        snprintf(err, errlen, "%s: every diagonal entry is 0: no calibration data for this layer",
                 key);
    else if (qs_hessian_from_matrix(ctx, hm, cols, 0, &l->h) != QS_OK)
        snprintf(err, errlen, "%s: %s", key, qs_ctx_last_error(ctx));
    qs_heap_free(m);
    qs_st_release(f, t);
    if (!l->h)
        return -1;
    l->tokens = -1; /* not recorded with a Hessian */
    /* the diagonal is 2 x sum of squares: Wanda's norms and AWQ's statistics */
    if (!(l->sumsq = qs_heap_malloc((size_t)cols * sizeof(double)))) {
        snprintf(err, errlen, "%s: out of memory", key);
        return -1;
    }
    for (int64_t i = 0; i < cols; i++)
        l->sumsq[i] = 0.5 * rd_elem(t, i * cols + i);
    return 0;
}

/* NAME.inputs (F32, F16 or BF16 [..., K]): 0, 1 (absent), -1. */
static int load_inputs_key(qs_ctx *ctx, const struct qs_st_file *f, const char *key, int64_t cols,
                           struct qs_calib_layer *l, char *err, size_t errlen)
{
    const struct qs_st_tensor *t = qs_st_find(f, key);
    if (!t)
        return 1;
    int32_t dt = strcmp(t->dtype, "F32") == 0    ? QS_DTYPE_F32
                 : strcmp(t->dtype, "F16") == 0  ? QS_DTYPE_F16
                 : strcmp(t->dtype, "BF16") == 0 ? QS_DTYPE_BF16
                                                 : -1;
    if (dt < 0 || t->ndim < 1 || t->shape[t->ndim - 1] != cols) {
        snprintf(err, errlen, "%s: must be F32, F16 or BF16 of shape [..., %lld]", key,
                 (long long)cols);
        return -1;
    }
    int64_t rows = cols ? t->numel / cols : 0;
    if (rows == 0) { /* 0 tokens: every input dead, every weight would become 0 */
        snprintf(err, errlen, "%s: 0 tokens: no calibration data for this layer", key);
        return -1;
    }
    if (!(l->sumsq = qs_heap_calloc((size_t)cols, sizeof(double)))) {
        snprintf(err, errlen, "%s: out of memory", key);
        return -1;
    }
    /* The activations stream from the mapping: the library accumulates them 2048 tokens at a
     * time, and their pages are handed back once read. */
    if (qs_hessian_create(ctx, cols, &l->h) != QS_OK ||
        qs_hessian_update(ctx, l->h, t->data, dt, rows, cols) != QS_OK ||
        qs_act_sumsq_update(ctx, t->data, dt, rows, cols, l->sumsq, cols) != QS_OK) {
        snprintf(err, errlen, "%s: %s", key, qs_ctx_last_error(ctx));
        qs_st_release(f, t);
        return -1;
    }
    l->tokens = rows;
    qs_st_release(f, t);
    return 0;
}

int qs_calib_layer_load(qs_ctx *ctx, const struct qs_st_file *f, const json_t *meta,
                        const char *name, int64_t cols, struct qs_calib_layer *l, char *err,
                        size_t errlen)
{
    char base[1024], key[1100], key2[1100];
    int r;

    memset(l, 0, sizeof *l);
    if (cols < 1 || cols > QS_HESSIAN_MAX_K) {
        snprintf(err, errlen, "%s: %lld inputs: calibration handles 1 ... %d", name,
                 (long long)cols, QS_HESSIAN_MAX_K);
        return -1;
    }
    base_of(name, base, sizeof base);
    if (meta) {
        const char *sb = json_string_value(json_object_get(json_object_get(meta, "layers"), base));
        if (sb) {
            r = load_stats(ctx, f, meta, sb, cols, l, err, errlen);
            if (r == 1)
                snprintf(err, errlen,
                         "%s: the calibration file maps it to '%s', which has no "
                         "statistics",
                         name, sb);
            if (r != 0)
                qs_calib_layer_free(l);
            return r == 1 ? -1 : r;
        }
    }
    snprintf(key, sizeof key, "%s.hessian", base);
    snprintf(key2, sizeof key2, "%s.inputs", base);
    r = load_hessian_key(ctx, f, key, cols, l, err, errlen);
    if (r == 1)
        r = load_inputs_key(ctx, f, key2, cols, l, err, errlen);
    if (r == 1)
        snprintf(err, errlen, "%s: no calibration data (neither '%s' nor '%s'%s in the file)", name,
                 key, key2, meta ? ", nor an entry in its layer map" : "");
    if (r != 0)
        qs_calib_layer_free(l);
    return r;
}

void qs_calib_layer_free(struct qs_calib_layer *l)
{
    qs_hessian_destroy(l->h);
    qs_heap_free(l->sumsq);
    qs_heap_free(l->absmax);
    memset(l, 0, sizeof *l);
}
