/* SPDX-License-Identifier: MIT */
/*
 * AWQ and SmoothQuant in `qsparse quantize`: per-input-channel scales s of a group of layers that
 * read the same input (q, k, v; gate, up; or one layer), moved into the weights (W diag(s)) and
 * out of the activations by dividing the output channels of the operation before the group by s
 * (a Linear's rows and bias, a norm's weight and bias). Only where `qsparse calibrate` verified
 * that the fold leaves the float model's output unchanged (its metadata's "fold" of the group),
 * so the checkpoint is the float model up to quantization for any loader that reads it as written.
 *
 * AWQ (Lin et al., 2023): s = a^alpha with a_j = sqrt(sumsq_j / tokens) (the RMS of input channel
 * j *(libqsparse's choice; AutoAWQ takes the mean |x|)*), normalized by sqrt(max s * min s), for
 * alpha in 0, 0.05, ... 0.95; the alpha with the smallest output error
 * sum over the group of tr(D H D^T), D = deq(Q(W diag(s))) diag(1/s) - W, on the calibration
 * statistics (AWQ measures the same error by running the block; H gives it without a forward).
 * alpha = 0 is round-to-nearest, so the search never ends above it on those statistics.
 * SmoothQuant (Xiao et al., 2023): s_j = amax(X_j)^alpha / amax(W_j)^(1 - alpha), amax(W_j) over
 * the group's rows, clamped to [1e-5, 1e5].
 */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "calib_file.h"
#include "heap.h"

struct qs_calib_fold {
    char **members; /* the group's layer names (checkpoint bases) */
    size_t nmembers;
    char *prev_weight, *prev_bias; /* the previous operation's tensors (bias may be NULL) */
    int prev_linear;               /* 1: a Linear (rows scaled), 0: a norm (elements) */
    int64_t k;
    float *s;
    char note[48];
};

#define AWQ_GRID 20
#define AWQ_MAX_ROWS 1024 /* rows of a member the search evaluates (evenly spaced) */

static void fold_free(struct qs_calib_fold *f)
{
    for (size_t i = 0; i < f->nmembers; i++)
        qs_heap_free(f->members[i]);
    qs_heap_free(f->members);
    qs_heap_free(f->prev_weight);
    qs_heap_free(f->prev_bias);
    qs_heap_free(f->s);
}

void qs_calib_folds_free(struct qs_calib_opts *o)
{
    for (size_t i = 0; i < o->nfolds; i++)
        fold_free(&o->folds[i]);
    qs_heap_free(o->folds);
    o->folds = NULL;
    o->nfolds = 0;
}

static int strip_weight(const char *name, char *out, size_t n)
{
    size_t len = strlen(name);
    if (len < 7 || strcmp(name + len - 7, ".weight") != 0)
        return -1;
    snprintf(out, n, "%.*s", (int)(len - 7), name);
    return 0;
}

static const struct qs_calib_fold *fold_of_member(const struct qs_calib_opts *o, const char *name)
{
    char base[1024];
    if (strip_weight(name, base, sizeof base) != 0)
        return NULL;
    for (size_t i = 0; i < o->nfolds; i++)
        for (size_t j = 0; j < o->folds[i].nmembers; j++)
            if (strcmp(o->folds[i].members[j], base) == 0)
                return &o->folds[i];
    return NULL;
}

const float *qs_calib_col_scales(const struct qs_calib_opts *o, const char *name, int64_t cols)
{
    const struct qs_calib_fold *f = fold_of_member(o, name);
    return f && f->k == cols ? f->s : NULL;
}

const float *qs_calib_row_scales(const struct qs_calib_opts *o, const char *name, int64_t rows)
{
    for (size_t i = 0; i < o->nfolds; i++)
        if (o->folds[i].prev_linear && strcmp(o->folds[i].prev_weight, name) == 0 &&
            o->folds[i].k == rows)
            return o->folds[i].s;
    return NULL;
}

const char *qs_calib_fold_note(const struct qs_calib_opts *o, const char *name)
{
    const struct qs_calib_fold *f = fold_of_member(o, name);
    if (f)
        return f->note;
    if (o->method == QS_METHOD_AWQ)
        return "awq: no fold, rtn";
    return NULL;
}

int qs_calib_fold_tensor(qs_ctx *ctx, const struct qs_calib_opts *o, const struct qs_st_tensor *t,
                         void **out, char *err, size_t errlen)
{
    const struct qs_calib_fold *f = NULL;
    int32_t dt;
    float *v;

    *out = NULL;
    for (size_t i = 0; i < o->nfolds && !f; i++)
        if (strcmp(o->folds[i].prev_weight, t->name) == 0 ||
            (o->folds[i].prev_bias && strcmp(o->folds[i].prev_bias, t->name) == 0))
            f = &o->folds[i];
    if (!f)
        return 0;
    dt = strcmp(t->dtype, "F32") == 0    ? QS_DTYPE_F32
         : strcmp(t->dtype, "F16") == 0  ? QS_DTYPE_F16
         : strcmp(t->dtype, "BF16") == 0 ? QS_DTYPE_BF16
                                         : -1;
    if (dt < 0 || t->ndim < 1 || t->shape[0] != f->k ||
        (t->ndim == 2) != (f->prev_linear && strcmp(f->prev_weight, t->name) == 0)) {
        snprintf(err, errlen,
                 "%s: the fold of its output channels expects a float tensor with "
                 "%lld rows",
                 t->name, (long long)f->k);
        return -1;
    }
    int64_t per = t->numel / f->k;
    if (!(v = qs_heap_malloc((size_t)t->numel * 4)) ||
        !(*out = qs_heap_malloc(t->end - t->begin))) {
        qs_heap_free(v);
        snprintf(err, errlen, "%s: out of memory", t->name);
        return -1;
    }
    if (qs_convert(ctx, t->data, dt, v, QS_DTYPE_F32, t->numel, t->numel * 4) != QS_OK)
        goto fail;
    for (int64_t r = 0; r < f->k; r++)
        for (int64_t j = 0; j < per; j++)
            v[r * per + j] /= f->s[r];
    if (qs_convert(ctx, v, QS_DTYPE_F32, *out, dt, t->numel, (int64_t)(t->end - t->begin)) != QS_OK)
        goto fail;
    qs_heap_free(v);
    return 1;
fail:
    snprintf(err, errlen, "%s: %s", t->name, qs_ctx_last_error(ctx));
    qs_heap_free(v);
    qs_heap_free(*out);
    *out = NULL;
    return -1;
}

/* ---- the search --------------------------------------------------------------------------------
 */

struct member {
    const char *name; /* NAME.weight */
    float *w;         /* rows x k f32 (rows subsampled for the search) */
    int64_t rows;
};

/* Output error of the group with column scales s on h: sum of tr(D H D^T). */
static int group_error(qs_ctx *ctx, const qs_quant_params *p, const struct member *m, size_t nm,
                       int64_t k, const float *s, const qs_hessian *h, double *out, char *err,
                       size_t errlen)
{
    double total = 0.0;
    for (size_t i = 0; i < nm; i++) {
        int64_t n = m[i].rows * k;
        float *ws = qs_heap_malloc((size_t)n * 4), *deq = qs_heap_malloc((size_t)n * 4);
        void *planes[QS_PLANE_COUNT] = {0};
        qs_plane_info info;
        qs_qtensor q;
        double e = 0.0;
        int ok = ws && deq;
        memset(&q, 0, sizeof q);
        for (int pl = 0; ok && pl < QS_PLANE_COUNT; pl++) {
            if (qs_quant_plane_info(ctx, p, m[i].rows, k, pl, &info) != QS_OK) {
                ok = 0;
                break;
            }
            if (info.bytes > 0 && !(planes[pl] = qs_heap_malloc((size_t)info.bytes)))
                ok = 0;
            if (pl == 0)
                q.data = planes[0], q.data_bytes = info.bytes;
            else if (pl == 1)
                q.scale = planes[1], q.scale_bytes = info.bytes;
            else if (pl == 2)
                q.zero_point = planes[2], q.zero_point_bytes = info.bytes;
            else
                q.nested_scale = planes[3], q.nested_scale_bytes = info.bytes;
        }
        if (ok) {
            for (int64_t r = 0; r < m[i].rows; r++)
                for (int64_t j = 0; j < k; j++)
                    ws[r * k + j] = m[i].w[r * k + j] * s[j];
            ok = qs_quantize(ctx, p, ws, QS_DTYPE_F32, m[i].rows, k, &q) == QS_OK &&
                 qs_dequantize(ctx, p, &q, m[i].rows, k, deq, QS_DTYPE_F32, n * 4) == QS_OK;
            if (ok) {
                for (int64_t r = 0; r < m[i].rows; r++)
                    for (int64_t j = 0; j < k; j++)
                        deq[r * k + j] /= s[j];
                ok = qs_hessian_error(ctx, h, m[i].w, deq, m[i].rows, k, &e, NULL) == QS_OK;
            }
        }
        for (int pl = 0; pl < QS_PLANE_COUNT; pl++)
            qs_heap_free(planes[pl]);
        qs_heap_free(ws);
        qs_heap_free(deq);
        if (!ok) {
            snprintf(err, errlen, "%s: AWQ search: %s", m[i].name,
                     ws && deq ? qs_ctx_last_error(ctx) : "out of memory");
            return -1;
        }
        total += e;
    }
    *out = total;
    return 0;
}

static void awq_scales(const double *a, int64_t k, double alpha, float *s)
{
    double mx = 0.0, mn = INFINITY;
    for (int64_t j = 0; j < k; j++) {
        double v = pow(a[j], alpha);
        s[j] = (float)v;
    }
    for (int64_t j = 0; j < k; j++) {
        mx = (double)s[j] > mx ? (double)s[j] : mx;
        mn = (double)s[j] < mn ? (double)s[j] : mn;
    }
    double norm = sqrt(mx * mn);
    for (int64_t j = 0; j < k; j++)
        s[j] = (float)((double)s[j] / norm);
}

/* AWQ's alpha search for one group: f->s and f->note. */
static int awq_search(qs_ctx *ctx, const qs_quant_params *p, struct qs_calib_fold *f,
                      const struct qs_calib_layer *l, const struct member *m, size_t nm, char *err,
                      size_t errlen)
{
    int64_t k = f->k;
    double *a = qs_heap_malloc((size_t)k * sizeof *a), best = INFINITY, amax = 0.0;
    float *s = qs_heap_malloc((size_t)k * 4);
    int best_i = 0, rc = -1;

    if (!a || !s) {
        snprintf(err, errlen, "out of memory");
        goto done;
    }
    for (int64_t j = 0; j < k; j++) {
        a[j] = sqrt(l->sumsq[j] / (double)(l->tokens > 0 ? l->tokens : 1));
        amax = a[j] > amax ? a[j] : amax;
    }
    /* a channel never active would get a zero scale: floor it */
    for (int64_t j = 0; j < k; j++)
        a[j] = a[j] > 1e-4 * amax ? a[j] : (amax > 0 ? 1e-4 * amax : 1.0);
    for (int i = 0; i < AWQ_GRID; i++) {
        double e;
        awq_scales(a, k, i / (double)AWQ_GRID, s);
        if (group_error(ctx, p, m, nm, k, s, l->h, &e, err, errlen) != 0)
            goto done;
        if (e < best) {
            best = e;
            best_i = i;
        }
    }
    awq_scales(a, k, best_i / (double)AWQ_GRID, f->s);
    snprintf(f->note, sizeof f->note, "awq a=%.2f", best_i / (double)AWQ_GRID);
    rc = 0;
done:
    qs_heap_free(a);
    qs_heap_free(s);
    return rc;
}

static void smooth_scales(struct qs_calib_fold *f, const struct qs_calib_layer *l,
                          const struct member *m, size_t nm, double alpha)
{
    for (int64_t j = 0; j < f->k; j++) {
        double wmax = 0.0, v;
        for (size_t i = 0; i < nm; i++)
            for (int64_t r = 0; r < m[i].rows; r++)
                wmax = fmax(wmax, fabs((double)m[i].w[r * f->k + j]));
        v = pow(fmax((double)l->absmax[j], 1e-5), alpha) / pow(fmax(wmax, 1e-5), 1.0 - alpha);
        f->s[j] = (float)fmin(fmax(v, 1e-5), 1e5);
    }
    snprintf(f->note, sizeof f->note, "smoothquant a=%.2f", alpha);
}

/* The tensor `name` among the open files, or NULL. */
static const struct qs_st_tensor *find_any(const struct qs_st_file *files, size_t n,
                                           const char *name, const struct qs_st_file **which)
{
    for (size_t i = 0; i < n; i++) {
        const struct qs_st_tensor *t = qs_st_find(&files[i], name);
        if (t) {
            *which = &files[i];
            return t;
        }
    }
    return NULL;
}

static char *dup_str(const char *s)
{
    return s ? qs_heap_strdup(s) : NULL;
}

/* One group of the metadata: its fold's scales, or nothing (0) when it cannot be folded here. */
static int prepare_group(qs_ctx *ctx, struct qs_calib_opts *o, const qs_quant_params *p,
                         const char *sb, const json_t *g, const struct qs_st_file *files,
                         size_t nfiles, int (*sel)(void *, const struct qs_st_tensor *), void *arg,
                         char *err, size_t errlen)
{
    const json_t *fold = json_object_get(g, "fold"), *mem = json_object_get(g, "members");
    const char *pw = json_string_value(json_object_get(fold, "weight"));
    const char *pb = json_string_value(json_object_get(fold, "bias"));
    const char *kind = json_string_value(json_object_get(fold, "kind"));
    struct qs_calib_fold f;
    struct qs_calib_layer l;
    struct member *m = NULL;
    size_t nm = json_array_size(mem), added = 0;
    char key[1100];
    int rc = -1;

    if (!json_is_object(fold) || !pw || !kind || !json_is_array(mem) || nm == 0)
        return 0;
    memset(&f, 0, sizeof f);
    memset(&l, 0, sizeof l);
    if (!(m = qs_heap_calloc(nm, sizeof *m)) || !(f.members = qs_heap_calloc(nm, sizeof(char *))))
        goto oom;
    f.prev_linear = strcmp(kind, "linear") == 0;
    for (size_t i = 0; i < nm; i++) {
        const char *b = json_string_value(json_array_get(mem, i));
        const struct qs_st_file *in;
        const struct qs_st_tensor *t;
        int32_t dt;
        if (!b)
            goto skip;
        snprintf(key, sizeof key, "%s.weight", b);
        t = find_any(files, nfiles, key, &in);
        if (!t || t->ndim != 2 || !sel(arg, t))
            goto skip; /* a member left float or absent: the fold would change it */
        dt = strcmp(t->dtype, "F32") == 0   ? QS_DTYPE_F32
             : strcmp(t->dtype, "F16") == 0 ? QS_DTYPE_F16
                                            : QS_DTYPE_BF16;
        if (i == 0)
            f.k = t->shape[1];
        if (t->shape[1] != f.k)
            goto skip;
        /* evenly spaced rows (all of them up to AWQ_MAX_ROWS) */
        int64_t rows = t->shape[0], take = rows < AWQ_MAX_ROWS ? rows : AWQ_MAX_ROWS;
        int32_t blk = p->block_size > 0 ? p->block_size : 1;
        if (take < rows && (f.k % blk) != 0)
            take = rows; /* blocks across rows: the search quantizes the whole weight */
        if (!(m[i].w = qs_heap_malloc((size_t)(take * f.k) * 4)) || !(f.members[i] = dup_str(b)))
            goto oom;
        f.nmembers = i + 1;
        for (int64_t r = 0; r < take; r++) {
            int64_t src = take == rows ? r : r * rows / take;
            if (qs_convert(ctx, t->data + (uint64_t)(src * f.k) * (uint64_t)t->elem_size, dt,
                           m[i].w + r * f.k, QS_DTYPE_F32, f.k, f.k * 4) != QS_OK) {
                snprintf(err, errlen, "%s: %s", key, qs_ctx_last_error(ctx));
                goto done;
            }
        }
        /* a member that is itself an earlier fold's previous Linear has its rows divided */
        const float *rs = qs_calib_row_scales(o, key, rows);
        if (rs)
            for (int64_t r = 0; r < take; r++)
                for (int64_t j = 0; j < f.k; j++)
                    m[i].w[r * f.k + j] /= rs[take == rows ? r : r * rows / take];
        m[i].name = json_string_value(json_array_get(mem, i));
        m[i].rows = take;
        qs_st_release(in, t);
    }
    {
        const struct qs_st_file *in;
        const struct qs_st_tensor *t = find_any(files, nfiles, pw, &in);
        if (!t || t->shape[0] != f.k)
            goto skip; /* the previous operation is not in these files (or not that shape) */
        /* its rows are scaled in place of the original: a fold must not touch it twice */
        for (size_t i = 0; i < o->nfolds; i++)
            if (strcmp(o->folds[i].prev_weight, pw) == 0)
                goto skip;
    }
    snprintf(key, sizeof key, "%s.weight", m[0].name);
    if (qs_calib_layer_load(ctx, &o->f, o->meta, key, f.k, &l, err, errlen) != 0)
        goto done;
    if (!(f.s = qs_heap_malloc((size_t)f.k * 4)) || !(f.prev_weight = dup_str(pw)) ||
        (pb && !(f.prev_bias = dup_str(pb))))
        goto oom;
    if (o->method == QS_METHOD_AWQ) {
        if (awq_search(ctx, p, &f, &l, m, f.nmembers, err, errlen) != 0)
            goto done;
    } else {
        if (!l.absmax) {
            snprintf(err, errlen, "%s: --smoothquant needs the per-channel absmax (%s.absmax)", key,
                     sb);
            goto done;
        }
        smooth_scales(&f, &l, m, f.nmembers, o->smooth);
    }
    {
        struct qs_calib_fold *all = qs_heap_realloc(o->folds, (o->nfolds + 1) * sizeof *all);
        if (!all)
            goto oom;
        o->folds = all;
        o->folds[o->nfolds++] = f;
        added = 1;
    }
    rc = 0;
    goto done;
skip:
    rc = 0;
    goto done;
oom:
    snprintf(err, errlen, "out of memory");
done:
    if (!added)
        fold_free(&f);
    for (size_t i = 0; m && i < nm; i++)
        qs_heap_free(m[i].w);
    qs_heap_free(m);
    qs_calib_layer_free(&l);
    return rc;
}

int qs_calib_prepare(qs_ctx *ctx, struct qs_calib_opts *o, const qs_quant_params *p,
                     const char *const *paths, size_t npaths,
                     int (*sel)(void *arg, const struct qs_st_tensor *t), void *arg, char *err,
                     size_t errlen)
{
    const json_t *groups;
    struct qs_st_file *files = NULL;
    size_t opened = 0;
    const char *sb;
    json_t *g;
    int rc = -1;

    if ((o->method != QS_METHOD_AWQ && o->smooth < 0.0) || !o->meta)
        return 0;
    groups = json_object_get(o->meta, "groups");
    if (!json_is_object(groups))
        return 0;
    if (!(files = qs_heap_calloc(npaths ? npaths : 1, sizeof *files))) {
        snprintf(err, errlen, "out of memory");
        return -1;
    }
    for (; opened < npaths; opened++)
        if (qs_st_open(&files[opened], paths[opened], err, errlen) != 0)
            goto done;
    json_object_foreach((json_t *)groups, sb, g)
    {
        if (prepare_group(ctx, o, p, sb, g, files, npaths, sel, arg, err, errlen) != 0)
            goto done;
    }
    rc = 0;
done:
    for (size_t i = 0; i < opened; i++)
        qs_st_close(&files[i]);
    qs_heap_free(files);
    if (rc != 0)
        qs_calib_folds_free(o);
    return rc;
}
