/* SPDX-License-Identifier: MIT */
/*
 * One weight by its calibration method (`qsparse quantize --method ...`), and what the method
 * changed: the layer's relative output error tr(D H D^T) / tr(W H W^T) on the calibration
 * statistics (qs_hessian_error) next to round-to-nearest's (magnitude pruning's for a pruning
 * method), and the same on --heldout statistics.
 *
 * The weight goes through, in this order: the row scales of a fold whose previous Linear it is
 * (AWQ / SmoothQuant of the next layer), its input-column scales (AWQ / SmoothQuant of its own
 * input) or the Hadamard rotation, then the method: qs_quantize, qs_gptq_quantize on the Hessian
 * of the transformed inputs, or pruning (Wanda's mask from the activation norms, SparseGPT) and
 * then qs_quantize. Errors are measured in the layer's own input space: the decoded weight is
 * mapped back (columns divided by the scales, rotated back) and compared with the weight the
 * float model computes with.
 */
#define _POSIX_C_SOURCE 200809L

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "qsparse/sparse.h"
#include "calib_file.h"
#include "heap.h"

struct work {
    qs_ctx *ctx;
    const struct qs_calib_opts *o;
    const char *name;
    int64_t rows, cols, n;
    float *w;        /* the float model's weight, f32 (after a fold's row scales) */
    float *wt;       /* the weight that is quantized (w transformed), or w itself */
    const float *cs; /* column scales, or NULL */
    int32_t rot;     /* rotation block, 0 none */
    struct qs_calib_layer l;
    char *err;
    size_t errlen;
};

static int lib_fail(struct work *k, const char *what)
{
    snprintf(k->err, k->errlen, "%s: %s%s", k->name, what ? what : "", qs_ctx_last_error(k->ctx));
    return -1;
}

static qs_hessian *hessian_copy(qs_ctx *ctx, const qs_hessian *h, int64_t k)
{
    double *m = qs_heap_malloc((size_t)(k * k) * sizeof *m);
    qs_hessian *c = NULL;
    int64_t tokens = 0;

    qs_hessian_info(h, NULL, &tokens);
    if (m && qs_hessian_get(ctx, h, m, k * k) == QS_OK)
        qs_hessian_from_matrix(ctx, m, k, tokens > 0 ? tokens : 0, &c);
    qs_heap_free(m);
    return c;
}

/* The Hessian of the transformed inputs: X diag(1/s) or X R. */
static qs_hessian *hessian_transformed(struct work *k)
{
    qs_hessian *c = NULL;
    if (k->rot) {
        if (!(c = hessian_copy(k->ctx, k->l.h, k->cols)) ||
            qs_hessian_rotate(k->ctx, c, k->rot) != QS_OK) {
            qs_hessian_destroy(c);
            return NULL;
        }
        return c;
    }
    /* diag(1/s) H diag(1/s) */
    int64_t kk = k->cols, tokens = 0;
    double *m = qs_heap_malloc((size_t)(kk * kk) * sizeof *m);
    qs_hessian_info(k->l.h, NULL, &tokens);
    if (m && qs_hessian_get(k->ctx, k->l.h, m, kk * kk) == QS_OK) {
        for (int64_t i = 0; i < kk; i++)
            for (int64_t j = 0; j < kk; j++)
                m[i * kk + j] /= (double)k->cs[i] * (double)k->cs[j];
        qs_hessian_from_matrix(k->ctx, m, kk, tokens > 0 ? tokens : 0, &c);
    }
    qs_heap_free(m);
    return c;
}

/* Decode q (rows x cols) into out f32, mapped back to the layer's input space. */
static int decode_back(struct work *k, const qs_quant_params *p, const qs_qtensor *q, float *out)
{
    if (qs_dequantize(k->ctx, p, q, k->rows, k->cols, out, QS_DTYPE_F32, k->n * 4) != QS_OK)
        return lib_fail(k, "decoding: ");
    if (k->rot && qs_hadamard(k->ctx, out, k->rows, k->cols, k->rot) != QS_OK)
        return lib_fail(k, "");
    if (k->cs)
        for (int64_t r = 0; r < k->rows; r++)
            for (int64_t j = 0; j < k->cols; j++)
                out[r * k->cols + j] /= k->cs[j];
    return 0;
}

/* Relative output errors of `got` (the method's weight, decoded) and `base` (the baseline's)
 * against w on h: tr(W H W^T) once, each error's tr(D H D^T). */
static int rel_errors(struct work *k, const qs_hessian *h, const float *got, const float *base,
                      double *rel, double *rel_base)
{
    double e, eb, r;
    if (qs_hessian_error(k->ctx, h, k->w, got, k->rows, k->cols, &e, &r) != QS_OK ||
        qs_hessian_error(k->ctx, h, k->w, base, k->rows, k->cols, &eb, NULL) != QS_OK)
        return lib_fail(k, "output error: ");
    *rel = r > 0.0 ? e / r : e;
    *rel_base = r > 0.0 ? eb / r : eb;
    return 0;
}

/* The N:M mask of w by magnitude or Wanda (norms), applied: pruned f32 into out. */
static int prune_mask(struct work *k, const float *w, const float *norms, float *out)
{
    uint8_t *mask = qs_heap_malloc((size_t)k->n);
    int rc = -1;
    if (!mask) {
        snprintf(k->err, k->errlen, "%s: out of memory", k->name);
        return -1;
    }
    if (qs_nm_mask(k->ctx, w, QS_DTYPE_F32, k->rows, k->cols, k->o->sp_n, k->o->sp_m,
                   norms ? QS_PRUNE_WANDA : QS_PRUNE_MAGNITUDE, norms, mask, k->n) != QS_OK ||
        qs_nm_apply_mask(k->ctx, w, QS_DTYPE_F32, mask, k->n, out, k->n * 4) != QS_OK)
        lib_fail(k, "pruning: ");
    else
        rc = 0;
    qs_heap_free(mask);
    return rc;
}

/* The method's pruned weight (f32, in the layer's space) into out. */
static int prune_by_method(struct work *k, float *out)
{
    if (!qs_calib_prunes(k->o))
        return prune_mask(k, k->w, NULL, out); /* --sparsity with rtn: magnitude */
    if (k->o->method == QS_METHOD_WANDA) {
        float *norms = qs_heap_malloc((size_t)k->cols * sizeof *norms);
        int rc;
        if (!norms) {
            snprintf(k->err, k->errlen, "%s: out of memory", k->name);
            return -1;
        }
        if (qs_act_norms(k->ctx, k->l.sumsq, k->cols, norms) != QS_OK) {
            qs_heap_free(norms);
            return lib_fail(k, "");
        }
        rc = prune_mask(k, k->w, norms, out);
        qs_heap_free(norms);
        return rc;
    }
    qs_sparsegpt_params s;
    qs_sparsegpt_params_init(&s);
    s.n = k->o->sp_n;
    s.m = k->o->sp_m;
    if (k->o->damp >= 0.0)
        s.percdamp = k->o->damp;
    if (k->o->block)
        s.block_size = k->o->block;
    if (qs_sparsegpt(k->ctx, &s, NULL, k->w, k->rows, k->cols, k->l.h, out, k->n, NULL, NULL, 0,
                     NULL) != QS_OK)
        return lib_fail(k, "SparseGPT: ");
    return 0;
}

/* Allocate planes for q as qs_quantize lays them out; planes freed by planes_free. */
static int planes_alloc(struct work *k, const qs_quant_params *p, qs_qtensor *q)
{
    qs_plane_info info;
    void **dst[QS_PLANE_COUNT] = {&q->data, &q->scale, &q->zero_point, &q->nested_scale};
    int64_t *len[QS_PLANE_COUNT] = {&q->data_bytes, &q->scale_bytes, &q->zero_point_bytes,
                                    &q->nested_scale_bytes};
    memset(q, 0, sizeof *q);
    for (int i = 0; i < QS_PLANE_COUNT; i++) {
        if (qs_quant_plane_info(k->ctx, p, k->rows, k->cols, i, &info) != QS_OK)
            return lib_fail(k, "");
        if (info.bytes > 0 && !(*dst[i] = qs_heap_malloc((size_t)info.bytes))) {
            snprintf(k->err, k->errlen, "%s: out of memory", k->name);
            return -1;
        }
        *len[i] = info.bytes;
    }
    return 0;
}

static void planes_free(qs_qtensor *q)
{
    qs_heap_free(q->data);
    qs_heap_free(q->scale);
    qs_heap_free(q->zero_point);
    qs_heap_free(q->nested_scale);
    memset(q, 0, sizeof *q);
}

/* The baseline: round-to-nearest of w (magnitude pruning first with --sparsity), decoded. */
static int baseline(struct work *k, const qs_quant_params *p, float *out)
{
    qs_qtensor q;
    const float *src = k->w;
    float *pruned = NULL;
    int rc = -1;

    if (k->o->sp_m) {
        if (!(pruned = qs_heap_malloc((size_t)k->n * 4))) {
            snprintf(k->err, k->errlen, "%s: out of memory", k->name);
            return -1;
        }
        if (prune_mask(k, k->w, NULL, pruned) != 0)
            goto done;
        src = pruned;
    }
    if (!k->o->format) {
        memcpy(out, src, (size_t)k->n * 4);
        rc = 0;
        goto done;
    }
    if (planes_alloc(k, p, &q) == 0) {
        if (qs_quantize(k->ctx, p, src, QS_DTYPE_F32, k->rows, k->cols, &q) != QS_OK ||
            qs_dequantize(k->ctx, p, &q, k->rows, k->cols, out, QS_DTYPE_F32, k->n * 4) != QS_OK)
            lib_fail(k, "");
        else
            rc = 0;
    }
    planes_free(&q);
done:
    qs_heap_free(pruned);
    return rc;
}

/* The report: the method's and the baseline's output errors on --calib and --heldout. The
 * baseline is `given` when not NULL (the method is the baseline), else computed. */
static int report_vs(struct work *k, const qs_quant_params *p, const float *got, const float *given,
                     struct qs_calib_report *rep)
{
    float *own = given ? NULL : qs_heap_malloc((size_t)k->n * 4);
    const float *base = given ? given : own;
    struct qs_calib_layer hl;
    int rc = -1, r;

    memset(&hl, 0, sizeof hl);
    if (!base) {
        snprintf(k->err, k->errlen, "%s: out of memory", k->name);
        return -1;
    }
    if ((own && baseline(k, p, own) != 0) ||
        rel_errors(k, k->l.h, got, base, &rep->out_err, &rep->out_rtn) != 0)
        goto done;
    rep->have = 1;
    rep->tokens = k->l.tokens;
    if (k->o->hopen) {
        r = qs_calib_layer_load(k->ctx, &k->o->fh, k->o->hmeta, k->name, k->cols, &hl, k->err,
                                k->errlen);
        if (r != 0)
            goto done;
        if (rel_errors(k, hl.h, got, base, &rep->held_err, &rep->held_rtn) != 0)
            goto done;
        rep->have_held = 1;
    }
    rc = 0;
done:
    qs_calib_layer_free(&hl);
    qs_heap_free(own);
    return rc;
}

static int report(struct work *k, const qs_quant_params *p, const float *got,
                  struct qs_calib_report *rep)
{
    return report_vs(k, p, got, NULL, rep);
}

static void warn_tokens(const struct work *k)
{
    if (k->l.tokens >= 0 && k->l.tokens < k->cols && k->o->method != QS_METHOD_RTN)
        fprintf(stderr,
                "%sqsparse quantize: warning: %s: %lld calibration tokens for %lld inputs: its "
                "Hessian is singular, so %s fits the calibration text; give more text\n",
                isatty(2) ? "\n" : "", /* past the progress bar's line */
                k->name, (long long)k->l.tokens, (long long)k->cols,
                k->o->method == QS_METHOD_WANDA ? "the mask" : "the method");
}

/* Convert, fold and load: the common start of both entry points. */
static int begin(struct work *k, qs_ctx *ctx, const struct qs_calib_opts *o, const char *name,
                 const void *w, int32_t dtype, int64_t rows, int64_t cols, char *err, size_t errlen)
{
    const float *rs;

    memset(k, 0, sizeof *k);
    k->ctx = ctx;
    k->o = o;
    k->name = name;
    k->rows = rows;
    k->cols = cols;
    k->n = rows * cols;
    k->err = err;
    k->errlen = errlen;
    if (!(k->w = qs_heap_malloc((size_t)k->n * 4))) {
        snprintf(err, errlen, "%s: out of memory", name);
        return -1;
    }
    if (qs_convert(ctx, w, dtype, k->w, QS_DTYPE_F32, k->n, k->n * 4) != QS_OK)
        return lib_fail(k, "");
    if ((rs = qs_calib_row_scales(o, name, rows)) != NULL)
        for (int64_t r = 0; r < rows; r++)
            for (int64_t j = 0; j < cols; j++)
                k->w[r * cols + j] /= rs[r];
    k->wt = k->w;
    if (o->open) {
        if (qs_calib_layer_load(ctx, &o->f, o->meta, name, cols, &k->l, err, errlen) != 0)
            return -1;
        warn_tokens(k);
    }
    return 0;
}

static void end(struct work *k)
{
    if (k->wt != k->w)
        qs_heap_free(k->wt);
    qs_heap_free(k->w);
    qs_calib_layer_free(&k->l);
}

int qs_calib_quantize(qs_ctx *ctx, const struct qs_calib_opts *o, const char *name,
                      const qs_quant_params *p, const void *w, int32_t dtype, int64_t rows,
                      int64_t cols, qs_qtensor *q, float **ref, struct qs_calib_report *rep,
                      char *err, size_t errlen)
{
    struct work k;
    struct qs_calib_report local;
    qs_hessian *ht = NULL;
    float *got = NULL, *pruned = NULL;
    const char *note;
    int rc = -1;

    if (ref)
        *ref = NULL;
    if (!rep)
        rep = &local;
    memset(rep, 0, sizeof *rep);
    if (o->method == QS_METHOD_RTN && !o->open && !o->rotate) {
        if (qs_quantize(ctx, p, w, dtype, rows, cols, q) == QS_OK)
            return 0;
        snprintf(err, errlen, "%s: %s", name, qs_ctx_last_error(ctx));
        return -1;
    }
    if (begin(&k, ctx, o, name, w, dtype, rows, cols, err, errlen) != 0)
        goto done;
    /* the input space: rotated, or scaled by a fold's column scales */
    if (o->rotate) {
        k.rot = o->rotate > 0 ? o->rotate : qs_hadamard_block(cols);
        if (k.rot < 2) {
            snprintf(err, errlen,
                     "%s: %lld columns: no power-of-two block divides them for "
                     "--rotate",
                     name, (long long)cols);
            goto done;
        }
        snprintf(rep->note, sizeof rep->note, "hadamard %d", (int)k.rot);
    } else {
        k.cs = qs_calib_col_scales(o, name, cols);
    }
    if ((note = qs_calib_fold_note(o, name)) != NULL)
        snprintf(rep->note, sizeof rep->note, "%s", note);
    if (k.rot || k.cs) {
        if (!(k.wt = qs_heap_malloc((size_t)k.n * 4))) {
            snprintf(err, errlen, "%s: out of memory", name);
            goto done;
        }
        memcpy(k.wt, k.w, (size_t)k.n * 4);
        if (k.rot && qs_hadamard(ctx, k.wt, rows, cols, k.rot) != QS_OK) {
            lib_fail(&k, "");
            goto done;
        }
        if (k.cs)
            for (int64_t r = 0; r < rows; r++)
                for (int64_t j = 0; j < cols; j++)
                    k.wt[r * cols + j] *= k.cs[j];
    }
    if (o->sp_m) {
        if (!(pruned = qs_heap_malloc((size_t)k.n * 4)))
            goto oom;
        if (prune_by_method(&k, pruned) != 0)
            goto done;
        if (qs_quantize(ctx, p, pruned, QS_DTYPE_F32, rows, cols, q) != QS_OK) {
            lib_fail(&k, "");
            goto done;
        }
    } else if (o->method == QS_METHOD_GPTQ) {
        qs_gptq_params g;
        qs_gptq_params_init(&g);
        if (o->damp >= 0.0)
            g.percdamp = o->damp;
        if (o->block)
            g.block_size = o->block;
        /* act-order by default: on all-MiniLM-L6-v2 it raised the held-out NF4 cosine from
         * 0.9882 to 0.9896 (0.9896 -> 0.9915 with 4x the text), NVFP4 0.9885 -> 0.9892; MXFP4
         * fell 0.983 -> 0.975, its scale search needing the columns in order */
        g.act_order = o->act_order >= 0 ? o->act_order : o->format != QS_FORMAT_MXFP4;
        if ((k.rot || k.cs) && !(ht = hessian_transformed(&k))) {
            lib_fail(&k, "");
            goto done;
        }
        if (qs_gptq_quantize(ctx, &g, p, k.wt, rows, cols, ht ? ht : k.l.h, q, NULL) != QS_OK) {
            lib_fail(&k, "GPTQ: ");
            goto done;
        }
    } else if (qs_quantize(ctx, p, k.wt, QS_DTYPE_F32, rows, cols, q) != QS_OK) {
        lib_fail(&k, "");
        goto done;
    }
    if (o->open) {
        if (!(got = qs_heap_malloc((size_t)k.n * 4)))
            goto oom;
        if (decode_back(&k, p, q, got) != 0 || report(&k, p, got, rep) != 0)
            goto done;
    }
    if (ref && k.wt != (const float *)w && (k.rot || k.cs || qs_calib_row_scales(o, name, rows))) {
        *ref = k.wt;
        if (k.wt == k.w)
            k.w = NULL;
        k.wt = NULL;
    }
    rc = 0;
    goto done;
oom:
    snprintf(err, errlen, "%s: out of memory", name);
done:
    qs_hessian_destroy(ht);
    qs_heap_free(got);
    qs_heap_free(pruned);
    if (k.ctx) {
        if (!k.wt)
            k.wt = k.w;
        end(&k);
    }
    return rc;
}

int qs_calib_prune(qs_ctx *ctx, const struct qs_calib_opts *o, const char *name, const void *w,
                   int32_t dtype, int64_t rows, int64_t cols, void *out,
                   struct qs_calib_report *rep, char *err, size_t errlen)
{
    struct work k;
    struct qs_calib_report local;
    float *pruned = NULL;
    int rc = -1;

    if (!rep)
        rep = &local;
    memset(rep, 0, sizeof *rep);
    if (begin(&k, ctx, o, name, w, dtype, rows, cols, err, errlen) != 0)
        goto done;
    if (!(pruned = qs_heap_malloc((size_t)k.n * 4))) {
        snprintf(err, errlen, "%s: out of memory", name);
        goto done;
    }
    if (prune_by_method(&k, pruned) != 0 || report(&k, NULL, pruned, rep) != 0)
        goto done;
    if (qs_convert(ctx, pruned, QS_DTYPE_F32, out, dtype, k.n,
                   k.n * (int64_t)qs_dtype_size(dtype)) != QS_OK) {
        lib_fail(&k, "");
        goto done;
    }
    rc = 0;
done:
    qs_heap_free(pruned);
    if (k.ctx)
        end(&k);
    return rc;
}

int qs_calib_report_sp24(qs_ctx *ctx, const struct qs_calib_opts *o, const char *name,
                         const qs_quant_params *p, const void *w, int32_t dtype, int64_t rows,
                         int64_t cols, const qs_qtensor *q, const uint16_t *meta,
                         int64_t meta_count, struct qs_calib_report *rep, char *err, size_t errlen)
{
    struct work k;
    float *got = NULL;
    int rc = -1;

    memset(rep, 0, sizeof *rep);
    if (begin(&k, ctx, o, name, w, dtype, rows, cols, err, errlen) != 0)
        goto done;
    if (!(got = qs_heap_malloc((size_t)k.n * 4))) {
        snprintf(err, errlen, "%s: out of memory", name);
        goto done;
    }
    if (qs_sp24_dequantize(ctx, p, q, meta, meta_count, rows, cols, got, QS_DTYPE_F32, k.n * 4) !=
        QS_OK) {
        lib_fail(&k, "decoding: ");
        goto done;
    }
    /* magnitude 2:4 and rounding to nearest is the baseline itself */
    rc = report_vs(&k, p, got, got, rep);
done:
    qs_heap_free(got);
    if (k.ctx)
        end(&k);
    return rc;
}

/* ---- the table's columns ------------------------------------------------------------------------
 */

void qs_calib_table_head(FILE *f, const struct qs_calib_opts *o)
{
    const char *base = o->sp_m ? (o->format ? "mag+rtn" : "magnitude") : "rtn";
    if (o->open) {
        fprintf(f, " %6s %10s %10s", "tokens", "out.err", base);
        if (o->hopen)
            fprintf(f, " %10s %10s", "held.err", "held.base");
        fprintf(f, "  %s", "note");
    }
    fputc('\n', f);
}

void qs_calib_table_row(FILE *f, const struct qs_calib_opts *o, const struct qs_calib_report *r)
{
    if (o->open && r->have) {
        if (r->tokens >= 0)
            fprintf(f, " %6lld", (long long)r->tokens);
        else
            fprintf(f, " %6s", "-");
        fprintf(f, " %10.3e %10.3e", r->out_err, r->out_rtn);
        if (r->have_held)
            fprintf(f, " %10.3e %10.3e", r->held_err, r->held_rtn);
        else if (o->hopen)
            fprintf(f, " %10s %10s", "-", "-");
        if (r->note[0])
            fprintf(f, "  %s", r->note);
    }
    fputc('\n', f);
}

void qs_calib_table_summary(FILE *f, const struct qs_calib_opts *o,
                            const struct qs_calib_report *first, size_t stride, size_t n)
{
    size_t have = 0, lower = 0, hlower = 0, hhave = 0;
    double worst = 0.0, hworst = 0.0;

    if (!o->open || n == 0)
        return;
    for (size_t i = 0; i < n; i++) {
        const struct qs_calib_report *r =
            (const struct qs_calib_report *)(const void *)((const char *)first + i * stride);
        if (!r->have)
            continue;
        have++;
        lower += r->out_err <= r->out_rtn;
        if (r->out_rtn > 0 && r->out_err / r->out_rtn > worst)
            worst = r->out_err / r->out_rtn;
        if (r->have_held) {
            hhave++;
            hlower += r->held_err <= r->held_rtn;
            if (r->held_rtn > 0 && r->held_err / r->held_rtn > hworst)
                hworst = r->held_err / r->held_rtn;
        }
    }
    fprintf(f,
            "output error (tr(dW H dW^T) / tr(W H W^T)) at or below the baseline's on %zu of "
            "%zu layers (worst ratio %.3f)",
            lower, have, worst);
    if (hhave)
        fprintf(f, "; held-out: %zu of %zu (worst ratio %.3f)", hlower, hhave, hworst);
    fputc('\n', f);
}
