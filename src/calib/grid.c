/* SPDX-License-Identifier: MIT */
/*
 * A quantization format's grid with its scales held fixed (docs/calibration.md §15.1): GPTQ and
 * SparseGPT round one column at a time, after earlier columns' errors have moved the later ones,
 * so a scale cannot be recomputed from the final values. The grid chooses each (row, group)
 * scale once, by the format's own scale rule (the same reference functions qs_quantize runs),
 * rounds elements with the format's element rule against that scale, and finally writes the
 * planes exactly as qs_quantize lays them out. With unchanged weights every code and scale is
 * qs_quantize's. Elements are rounded with the reference's own rules in their inline form
 * (element_hd.h, which the qs_ref_* encoders wrap): one rounding per weight, no call.
 */
#include <math.h>
#include <string.h>

#include "../ref/mx_ref.h"
#include "../ref/ref.h"
#include "../ref/scale_ref.h"
#include "../core/format_traits.h"
#include "../core/quant_common.h"
#include "gptq_internal.h"

/* Whether a format has a grid: its driver family's scale rule is below and, for codebook formats,
 * the descriptor names the element encoder; MX with 4-bit (E2M1) elements. */
static int has_grid(const struct qs_format_traits *t)
{
    switch (t->driver) {
    case QS_DRIVER_BNB4: return t->encode != NULL && t->codebook != NULL;
    case QS_DRIVER_INT8:
    case QS_DRIVER_NV: return 1;
    case QS_DRIVER_MX: return t->bits == 4;
    default: return 0;
    }
}

static float span_amax(const float *v, int64_t n)
{
    float a = 0.0f;
    for (int64_t i = 0; i < n; i++)
        a = qs_ref_absmax_step(a, v[i]);
    return a;
}

/* The NVFP4 block-scale rule of formats.md §14 (as nvfp4_ref.c). */
static uint8_t nvfp4_scale_byte(float amax, float s_global)
{
    float s = amax / (6.0f * s_global);
    if (s == 0.0f)
        return 0x38;
    if (s < 0x1p-9f)
        s = 0x1p-9f;
    return (uint8_t)(qs_ref_e4m3_encode(s) & 0x7F);
}

/* Scale of one unit (g->a/b/zp/sb at index u) from the values v[0 ... n), any stride-1 span. */
static void fit_unit(struct qs_grid *g, int64_t u, const float *v, int64_t n)
{
    switch (g->t->driver) {
    case QS_DRIVER_BNB4: {
        float amax = span_amax(v, n);
        g->a[u] = amax;
        g->b[u] = amax == 0.0f ? 0.0f : 1.0f / amax;
        break;
    }
    case QS_DRIVER_INT8:
        if (g->t->flags & QS_TRAIT_ROWSTAT) {
            /* LLM.int8: row absmax (SCB), mul = fl(127 / SCB) (formats.md §8) */
            g->a[u] = span_amax(v, n);
            g->b[u] = qs_ref_llm_int8_mul(g->a[u]);
            g->zp[u] = 0;
        } else if (g->symmetric) {
            qs_ref_int8_symmetric(span_amax(v, n), &g->a[u], &g->b[u]);
            g->zp[u] = 0;
        } else {
            float lo = INFINITY, hi = -INFINITY;
            for (int64_t i = 0; i < n; i++) {
                lo = qs_ref_min(lo, v[i]);
                hi = qs_ref_max(hi, v[i]);
            }
            qs_ref_int8_asymmetric(lo, hi, &g->a[u], &g->b[u], &g->zp[u]);
        }
        break;
    case QS_DRIVER_MX: g->sb[u] = qs_ref_mx_scale(v, n, g->rounding, 2, g->t->elem_max); break;
    case QS_DRIVER_NV:
        g->sb[u] = nvfp4_scale_byte(span_amax(v, n), g->s_global);
        g->a[u] = qs_ref_e4m3_decode(g->sb[u]) * g->s_global;
        break;
    default: break;
    }
}

void qs_grid_fit(struct qs_grid *g, int64_t row, int64_t gi, const float *v, int64_t len)
{
    if (g->dynamic)
        fit_unit(g, row * g->groups + gi, v, len);
}

float qs_grid_round(struct qs_grid *g, int64_t row, int64_t col, float x)
{
    int64_t u = row * g->groups + col / g->group;
    uint8_t code;
    float v;

    switch (g->t->driver) {
    case QS_DRIVER_BNB4:
        /* all-zero block: codes 0 (formats.md §5.2) */
        code = g->a[u] == 0.0f ? 0 : g->t->encode(x * g->b[u]);
        v = g->t->codebook[code] * g->a[u];
        break;
    case QS_DRIVER_INT8:
        if (g->t->flags & QS_TRAIT_ROWSTAT) {
            int8_t c = qs_hd_int8_encode(x, g->b[u], 0, -127);
            code = (uint8_t)c;
            v = ((float)c * g->a[u]) * 0x1.020408p-7f; /* fl(fl(q * SCB) * fl(1/127)) */
        } else {
            int8_t c = qs_hd_int8_encode(x, g->b[u], g->zp[u], g->qmin);
            code = (uint8_t)c;
            v = (float)((int32_t)c - g->zp[u]) * g->a[u];
        }
        break;
    case QS_DRIVER_MX: v = qs_grid_mx_round(g->sb[u], x, &code); break;
    default: /* QS_DRIVER_NV */
        code = g->a[u] != 0.0f ? qs_hd_e2m1_encode(x / g->a[u]) : 0;
        v = qs_e2m1_values[code] * g->a[u];
        break;
    }
    g->codes[row * g->lcols + col] = code;
    return v;
}

void qs_grid_free(qs_ctx *ctx, struct qs_grid *g)
{
    qs_scratch_free(ctx, g->a);
    qs_scratch_free(ctx, g->b);
    qs_scratch_free(ctx, g->zp);
    qs_scratch_free(ctx, g->sb);
    qs_scratch_free(ctx, g->codes);
    memset(g, 0, sizeof *g);
}

qs_status qs_grid_init(qs_ctx *ctx, struct qs_grid *g, const qs_quant_params *p, int64_t rows,
                       int64_t lcols, const float *src, int64_t src_cols, int32_t static_groups,
                       const qs_qtensor *q, const char *who)
{
    const struct qs_format_traits *t;
    struct qs_layout l;
    qs_status st;
    int64_t units;

    memset(g, 0, sizeof *g);
    t = qs_format_traits(p->format);
    if (!t || !has_grid(t))
        return qs_fail(ctx, QS_ERR_UNSUPPORTED, "%s: format %s has no GPTQ grid (NF4, FP4, INT8, "
                       "LLM_INT8, MXFP4, NVFP4)", who, t ? t->name : "(unknown)");
    if ((st = qs_layout_compute(ctx, p, rows, lcols, &l)) != QS_OK)
        return st;
    if (l.bytes[QS_PLANE_NESTED_SCALE] > 0)
        return qs_fail(ctx, QS_ERR_UNSUPPORTED, "%s: double quantization is not supported", who);
    if (l.unit_rule == QS_UNITS_FLAT_BLOCKS && lcols % l.block)
        return qs_fail(ctx, QS_ERR_SHAPE, "%s: %lld columns are not a multiple of the block %d, "
                       "so blocks would span rows", who, (long long)lcols, l.block);
    if ((st = qs_check_planes(ctx, &l, q)) != QS_OK)
        return st;

    g->format = p->format;
    g->t = t;
    g->rows = rows;
    g->lcols = lcols;
    /* the scale unit along a row: the block, or the whole row for row and tensor scales */
    g->group = (int32_t)(l.unit_rule == QS_UNITS_ROWS || l.unit_rule == QS_UNITS_TENSOR ? lcols
                                                                                       : l.block);
    if (g->group < 1)
        g->group = 1;
    g->groups = qs_ceil_div(lcols, g->group);
    g->symmetric = p->symmetric;
    g->qmin = p->symmetric ? -127 : -128;
    g->rounding = p->scale_rounding;
    g->unit_tensor = l.unit_rule == QS_UNITS_TENSOR;
    /* one scale per row or for the whole tensor: fixed from the original weight */
    int rowwise = l.unit_rule == QS_UNITS_ROWS || l.unit_rule == QS_UNITS_TENSOR;
    g->dynamic = !rowwise && !static_groups;
    units = rows * g->groups;
    g->a = qs_scratch_alloc(ctx, (size_t)(units ? units : 1) * sizeof(float));
    g->b = qs_scratch_alloc(ctx, (size_t)(units ? units : 1) * sizeof(float));
    g->zp = qs_scratch_alloc(ctx, (size_t)(units ? units : 1) * sizeof(int32_t));
    g->sb = qs_scratch_alloc(ctx, (size_t)(units ? units : 1));
    g->codes = qs_scratch_alloc(ctx, (size_t)(rows * lcols > 0 ? rows * lcols : 1));
    if (!g->a || !g->b || !g->zp || !g->sb || !g->codes) {
        qs_grid_free(ctx, g);
        return qs_fail(ctx, QS_ERR_OUT_OF_MEMORY, "%s: out of memory", who);
    }
    if (t->flags & QS_TRAIT_GLOBAL_SCALE)
        g->s_global = p->scale != 0.0f ? p->scale
                                       : qs_ref_nvfp4_global_scale(span_amax(src, rows * src_cols));
    if (l.unit_rule == QS_UNITS_TENSOR) {
        fit_unit(g, 0, src, rows * src_cols);
        for (int64_t r = 1; r < rows; r++) {
            g->a[r] = g->a[0];
            g->b[r] = g->b[0];
            g->zp[r] = g->zp[0];
        }
    } else if (rowwise) {
        for (int64_t r = 0; r < rows; r++)
            fit_unit(g, r, src + r * src_cols, src_cols);
    } else if (static_groups) {
        for (int64_t r = 0; r < rows; r++)
            for (int64_t gi = 0; gi < g->groups; gi++) {
                int64_t c0 = gi * g->group;
                int64_t len = lcols - c0 < g->group ? lcols - c0 : g->group;
                fit_unit(g, r * g->groups + gi, src + r * src_cols + c0, len);
            }
    }
    return QS_OK;
}

qs_status qs_grid_store(qs_ctx *ctx, const struct qs_grid *g, const qs_quant_params *p,
                        qs_qtensor *q)
{
    const int64_t rows = g->rows, cols = g->lcols, units = rows * g->groups;
    uint8_t *data = q->data;
    (void)ctx, (void)p;

    switch (g->t->driver) {
    case QS_DRIVER_BNB4:
        /* flattened, high nibble first; blocks are (row, group) since block divides cols */
        for (int64_t i = 0; i < rows * cols; i += 2)
            data[i / 2] = (uint8_t)(g->codes[i] << 4 | g->codes[i + 1]);
        for (int64_t u = 0; u < units; u++)
            qs_st_f32((float *)q->scale + u, g->a[u]);
        break;
    case QS_DRIVER_INT8: {
        int64_t ns = g->unit_tensor ? 1 : units;
        if (rows * cols > 0) /* a 0-row weight may have no data plane at all */
            memcpy(data, g->codes, (size_t)(rows * cols));
        for (int64_t u = 0; u < ns; u++) {
            qs_st_f32((float *)q->scale + u, g->a[u]);
            if (q->zero_point && !g->symmetric)
                ((int8_t *)q->zero_point)[u] = (int8_t)g->zp[u];
        }
        break;
    }
    default: { /* MX, NV: per row, low nibble first, a last odd nibble pads with 0 */
        int64_t rb = (cols + 1) / 2;
        for (int64_t r = 0; r < rows; r++) {
            const uint8_t *c = g->codes + r * cols;
            for (int64_t i = 0; i < cols; i += 2)
                data[r * rb + i / 2] = (uint8_t)(c[i] | (i + 1 < cols ? c[i + 1] << 4 : 0));
        }
        if (units > 0)
            memcpy(q->scale, g->sb, (size_t)units);
        if (g->t->flags & QS_TRAIT_GLOBAL_SCALE)
            q->global_scale = g->s_global;
        break;
    }
    }
    return QS_OK;
}
