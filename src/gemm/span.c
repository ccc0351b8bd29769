/* SPDX-License-Identifier: MIT */
/*
 * Spans of one stored row of W for the GEMM paths: dequantized as qs_dequantize gives them (by the
 * format's driver family and its dequantize kernel slot, as dequantize.c does: no format switch),
 * and prefetched from the view's geometry alone.
 */
#include <string.h>

#include "../ref/ref.h"
#include "gemm_internal.h"

float qs_mm_finish(const struct qs_mm_job *j, float acc, int64_t n)
{
    return qs_ref_nan_canon(j->bias ? acc + qs_ld_f32(j->bias + n) : acc);
}

/* NF4/FP4 elements [f, f + len) of the flattened tensor into out: a first partial block is
 * decoded whole into tmp (kernels start at a block), the rest straight into out. */
static void flat_span(const struct qs_mm_job *j, qs_nf4_dequant_fn *dec, int64_t f, int64_t len,
                      float *out, float *tmp)
{
    const uint8_t *d = j->w.data;
    const float *absmax = j->w.scale;
    int64_t block = j->w.group, a = f - f % block;

    if (a < f) {
        int64_t end = a + block < f + len ? a + block : f + len;
        dec(d + a / 2, absmax + a / block, end - a, (int32_t)block, tmp);
        memcpy(out, tmp + (f - a), (size_t)(end - f) * sizeof(float));
        out += end - f;
        len -= end - f;
        f = end;
    }
    if (len > 0)
        dec(d + f / 2, absmax + f / block, len, (int32_t)block, out);
}

/* INT8 units along row r: [c0, c0 + len) cut at unit boundaries, each with its scale and zero
 * point (LLM.int8's row statistic through its own kernel). */
static void int8_span(const struct qs_mm_job *j, int64_t r, int64_t c0, int64_t len, float *out)
{
    const struct qs_kernels *k = &j->ctx->k;
    const int8_t *q = (const int8_t *)j->w.data + r * j->w.row_bytes;
    const float *scale = j->w.scale;
    int64_t g = j->w.group;

    if (j->t->flags & QS_TRAIT_ROWSTAT) {
        k->int8_dequant_rowstat(q + c0, len, qs_ld_f32(scale + r), out);
        return;
    }
    for (int64_t c = c0; c < c0 + len;) {
        int64_t e = (c / g + 1) * g < c0 + len ? (c / g + 1) * g : c0 + len;
        int64_t u = r * j->w.sstride + (j->w.sstride ? c / g : 0);
        k->int8_dequant(q + c, e - c, qs_ld_f32(scale + u), j->w.zp ? j->w.zp[u] : 0,
                        out + (c - c0));
        c = e;
    }
}

void qs_mm_span_dequant(const struct qs_mm_job *j, int64_t r, int64_t c0, int64_t len, float *out,
                        float *tmp)
{
    const struct qs_kernels *k = &j->ctx->k;
    const qs_mm_weight *w = &j->w;
    const uint8_t *row = (const uint8_t *)w->data + r * w->row_bytes + c0 * j->bits / 8;
    void (*fn)(void);

    if (!j->t) { /* plain values */
        if (j->dtype == QS_DTYPE_F32)
            memcpy(out, row, (size_t)len * sizeof(float));
        else
            (j->dtype == QS_DTYPE_F16 ? k->cvt_f16_f32 : k->cvt_bf16_f32)((const uint16_t *)row,
                                                                          len, out);
        return;
    }
    fn = qs_kernel_get(k, j->t->dequant_slot);
    switch (j->t->driver) {
    case QS_DRIVER_BNB4: flat_span(j, (qs_nf4_dequant_fn *)fn, r * w->k + c0, len, out, tmp); break;
    case QS_DRIVER_INT8: int8_span(j, r, c0, len, out); break;
    case QS_DRIVER_FP8: ((qs_e4m3_dequant_fn *)fn)(row, len, qs_ld_f32(w->scale), out); break;
    case QS_DRIVER_MX:
        ((qs_mxfp4_dequant_fn *)fn)(row, (const uint8_t *)w->scale + r * w->sstride + c0 / w->group,
                                    len, out);
        break;
    default: /* QS_DRIVER_NV */
        ((qs_nvfp4_dequant_fn *)fn)(row, (const uint8_t *)w->scale + r * w->sstride + c0 / w->group,
                                    len, w->s_global, out);
        break;
    }
}

void qs_mm_span_prefetch(const struct qs_mm_job *j, int64_t r, int64_t c0, int64_t len)
{
    const qs_mm_weight *w = &j->w;
    const char *d = w->data, *s = NULL; /* first data byte, last scale (or none) */
    int64_t c1 = c0 + len - 1, first, last;

    if (w->row_bytes == 0) { /* flattened: element f of row r is r * k + f */
        first = (r * w->k + c0) * j->bits / 8;
        last = (r * w->k + c1) * j->bits / 8;
        s = (const char *)w->scale + (r * w->k + c1) / w->group * j->scale_bytes;
    } else {
        first = r * w->row_bytes + c0 * j->bits / 8;
        last = r * w->row_bytes + c1 * j->bits / 8;
        if (w->sstride > 1)
            s = (const char *)w->scale + (r * w->sstride + c1 / w->group) * j->scale_bytes;
    }
    for (int64_t b = first; b <= last; b += 64)
        __builtin_prefetch(d + b);
    __builtin_prefetch(d + last);
    if (s)
        __builtin_prefetch(s);
}
