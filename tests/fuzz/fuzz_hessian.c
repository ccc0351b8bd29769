/* SPDX-License-Identifier: MIT */
/*
 * qs_hessian_deserialize on arbitrary bytes, then everything an accepted Hessian feeds
 * (include/qsparse/gptq.h): a self-merge, an update with activations from the input (huge,
 * subnormal and non-finite ones included), GPTQ in a format and SparseGPT 2:4 on a weight from
 * the input, on every ISA tier.
 *
 * Input: byte 0 a mode (bit 0: rewrite the FNV-1a checksum of the blob, so mutations reach the
 * checks behind it; bits 1-3: the GPTQ format; bits 4-7: the weight's rows, 0 ... 15), byte 1
 * the activation rows (0 ... 15; bit 7: scale them by 2^100), bytes 2-3 the blob length (u16,
 * little-endian), the blob, then f32 weights and activations (zeros past the end).
 *
 * Checked: known statuses; *out untouched on failure; an accepted blob serializes back to the
 * same bytes; H = 2 S finite after every step that succeeds, and the state unchanged (same
 * bytes) after every step that fails; GPTQ and SparseGPT planes, w_out, meta and loss untouched
 * on failure, a finite loss (and for SparseGPT a 2:4 weight of finite values) on success; and
 * the same statuses, planes and loss bits on every tier.
 */
#include <math.h>

#include "fuzz_common.h"

#include "qsparse/gptq.h"
#include "qsparse/sparse.h"

#define MAX_ROWS 15

static uint64_t fnv1a(const uint8_t *p, size_t n)
{
    uint64_t h = 0xcbf29ce484222325ull;
    for (size_t i = 0; i < n; i++)
        h = (h ^ p[i]) * 0x100000001b3ull;
    return h;
}

/* The serialized state (malloc'd), to compare before and after a call. */
static uint8_t *state_of(qs_ctx *ctx, const qs_hessian *h, int64_t *len)
{
    int64_t n = 0, w = 0;
    fz_check(qs_hessian_serialized_size(h, &n) == QS_OK && n > 0, "serialized_size failed");
    uint8_t *b = malloc((size_t)n);
    fz_check(b && qs_hessian_serialize(ctx, h, b, n, &w) == QS_OK && w == n,
             "qs_hessian_serialize failed on a valid Hessian");
    *len = n;
    return b;
}

/* H = 2 S must be finite with a diagonal >= 0, whatever reached it. */
static void check_finite(qs_ctx *ctx, const qs_hessian *h, int64_t k, const char *after)
{
    double *m = malloc((size_t)(k * k) * sizeof(double));
    fz_check(m && qs_hessian_get(ctx, h, m, k * k) == QS_OK, "qs_hessian_get failed");
    for (int64_t i = 0; i < k * k; i++)
        fz_check(isfinite(m[i]), "after %s: H[%lld][%lld] = %g is not finite", after,
                 (long long)(i / k), (long long)(i % k), m[i]);
    for (int64_t i = 0; i < k; i++)
        fz_check(m[i * k + i] >= 0.0, "after %s: H[%lld][%lld] < 0", after, (long long)i,
                 (long long)i);
    free(m);
}

/* A step that may fail: on failure the state must be the bytes it was. */
static void check_unchanged(qs_ctx *ctx, const qs_hessian *h, const uint8_t *before, int64_t n,
                            const char *what, qs_status st)
{
    int64_t m;
    uint8_t *now = state_of(ctx, h, &m);
    fz_check(m == n && fz_byte_diff(now, before, (size_t)n) < 0,
             "%s failed (%s) and changed the Hessian", what, qs_status_str(st));
    free(now);
}

static const int32_t formats[8] = {QS_FORMAT_INT8, QS_FORMAT_INT8, QS_FORMAT_LLM_INT8,
                                   QS_FORMAT_MXFP4, QS_FORMAT_NVFP4, QS_FORMAT_NF4,
                                   QS_FORMAT_FP4, QS_FORMAT_INT8};

struct result {
    qs_status st;
    uint8_t *plane[QS_PLANE_COUNT];
    int64_t bytes[QS_PLANE_COUNT];
    uint32_t gscale;
    double loss;
};

/* GPTQ of w (rows x k) on one context into canary planes; *r keeps the planes. */
static void run_gptq(qs_ctx *ctx, const qs_quant_params *p, const float *w, int64_t rows,
                     int64_t k, const qs_hessian *h, struct result *r)
{
    qs_qtensor q;
    qs_gptq_params g;

    memset(&q, 0, sizeof q);
    memset(r, 0, sizeof *r);
    void **ptr[QS_PLANE_COUNT] = {&q.data, &q.scale, &q.zero_point, &q.nested_scale};
    int64_t *len[QS_PLANE_COUNT] = {&q.data_bytes, &q.scale_bytes, &q.zero_point_bytes,
                                    &q.nested_scale_bytes};
    for (int pl = 0; pl < QS_PLANE_COUNT; pl++) {
        if (qs_quant_size(p, rows, k, pl, &r->bytes[pl]) != QS_OK)
            r->bytes[pl] = 0;
        r->plane[pl] = fz_canary_new((size_t)r->bytes[pl]);
        *ptr[pl] = r->bytes[pl] ? r->plane[pl] : NULL;
        *len[pl] = r->bytes[pl];
    }
    memset(&q.global_scale, FZ_CANARY, sizeof q.global_scale);
    qs_gptq_params_init(&g);
    r->loss = -1.0;
    r->st = qs_gptq_quantize(ctx, &g, p, w, rows, k, h, &q, &r->loss);
    fz_check(fz_status_known(r->st), "qs_gptq_quantize: unknown status %d", r->st);
    if (r->st != QS_OK) {
        for (int pl = 0; pl < QS_PLANE_COUNT; pl++)
            fz_check(fz_untouched(r->plane[pl], (size_t)r->bytes[pl]),
                     "qs_gptq_quantize failed (%s) and wrote plane %d", qs_status_str(r->st),
                     pl);
        fz_check(r->loss == -1.0, "qs_gptq_quantize failed and wrote the loss");
    } else {
        fz_check(isfinite(r->loss) && r->loss >= 0.0, "qs_gptq_quantize: QS_OK with loss %g",
                 r->loss);
    }
    memcpy(&r->gscale, &q.global_scale, 4);
}

static void free_result(struct result *r)
{
    for (int pl = 0; pl < QS_PLANE_COUNT; pl++)
        free(r->plane[pl]);
}

/* SparseGPT 2:4 of w on one context: QS_OK gives a 2:4 weight of finite values and a finite
 * loss, a failure leaves w_out and the loss alone. Returns the status; w_out in *out. */
static qs_status run_sparsegpt(qs_ctx *ctx, const float *w, int64_t rows, int64_t k,
                               const qs_hessian *h, uint8_t **out, double *loss)
{
    qs_sparsegpt_params sp;
    size_t bytes = (size_t)(rows * k) * sizeof(float);
    uint8_t *o = fz_canary_new(bytes);

    qs_sparsegpt_params_init(&sp);
    *loss = -1.0;
    qs_status st = qs_sparsegpt(ctx, &sp, NULL, w, rows, k, h, (float *)(void *)o, rows * k,
                                NULL, NULL, 0, loss);
    fz_check(fz_status_known(st), "qs_sparsegpt: unknown status %d", st);
    if (st != QS_OK) {
        fz_check(fz_untouched(o, bytes) && *loss == -1.0,
                 "qs_sparsegpt failed (%s) and wrote its outputs", qs_status_str(st));
    } else {
        fz_check(isfinite(*loss), "qs_sparsegpt: QS_OK with loss %g", *loss);
        for (int64_t i = 0; i < rows * k; i++) {
            float v;
            memcpy(&v, o + 4 * i, 4);
            fz_check(isfinite(v), "qs_sparsegpt: QS_OK with a non-finite weight %g", (double)v);
        }
        fz_check(qs_nm_check(ctx, o, QS_DTYPE_F32, rows, k, 2, 4, 0, NULL) == QS_OK,
                 "qs_sparsegpt: QS_OK but the weight is not 2:4");
    }
    *out = o;
    return st;
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    if (size < 4)
        return 0;
    fz_tiers *t = fz_tiers_get();
    qs_ctx *c0 = t->ctx[0];
    uint8_t mode = data[0], arows = data[1];
    size_t len = (size_t)(data[2] | data[3] << 8);
    fz_in in = {data + 4, size - 4};
    if (len > in.n)
        len = in.n;
    uint8_t *blob = fz_canary_new(len);
    memcpy(blob, in.p, len);
    in.p += len;
    in.n -= len;
    if ((mode & 1) && len >= 8) {
        uint64_t h = fnv1a(blob, len - 8);
        for (int i = 0; i < 8; i++)
            blob[len - 8 + i] = (uint8_t)(h >> (8 * i));
    }

    /* deserialize on every tier: the same status, *out untouched on failure */
    qs_hessian *const sentinel = (qs_hessian *)(uintptr_t)0x5a5a5a5a;
    qs_hessian *h[FZ_MAX_TIERS];
    qs_status st0 = QS_OK;
    for (int i = 0; i < t->count; i++) {
        h[i] = sentinel;
        qs_status st = qs_hessian_deserialize(t->ctx[i], blob, (int64_t)len, &h[i]);
        fz_check(fz_status_known(st), "qs_hessian_deserialize: unknown status %d", st);
        fz_check(st == QS_OK || h[i] == sentinel, "qs_hessian_deserialize failed, wrote *out");
        fz_check(i == 0 || st == st0, "qs_hessian_deserialize: %s on %s, %s on scalar",
                 qs_status_str(st), fz_tier_name(t->ctx[i]), qs_status_str(st0));
        st0 = i == 0 ? st : st0;
    }
    if (st0 != QS_OK) {
        free(blob);
        return 0;
    }

    /* an accepted blob is its own serialization; H finite */
    int64_t k = 0, tokens = 0, n = 0;
    fz_check(qs_hessian_info(h[0], &k, &tokens) == QS_OK && k >= 1, "qs_hessian_info failed");
    uint8_t *s = state_of(c0, h[0], &n);
    fz_check((size_t)n == len && fz_byte_diff(s, blob, len) < 0,
             "an accepted Hessian does not serialize back to itself");
    free(s);
    check_finite(c0, h[0], k, "deserialize");

    /* a self-merge on every tier: QS_OK with H finite, or QS_ERR_OVERFLOW unchanged */
    for (int i = 0; i < t->count; i++) {
        uint8_t *before = state_of(c0, h[i], &n);
        qs_status st = qs_hessian_merge(t->ctx[i], h[i], h[i]);
        fz_check(st == QS_OK || st == QS_ERR_OVERFLOW, "qs_hessian_merge: %s",
                 qs_status_str(st));
        if (st != QS_OK)
            check_unchanged(c0, h[i], before, n, "qs_hessian_merge", st);
        else
            check_finite(c0, h[i], k, "a self-merge");
        free(before);
    }

    /* an update with activations from the input */
    int64_t rows = arows & 15;
    size_t xbytes = (size_t)(rows * k) * sizeof(float);
    float *x = malloc(xbytes ? xbytes : 1);
    fz_fill(&in, x, xbytes);
    if (arows & 0x80)
        for (int64_t i = 0; i < rows * k; i++)
            x[i] = ldexpf(x[i], 100);
    for (int i = 0; i < t->count; i++) {
        uint8_t *before = state_of(c0, h[i], &n);
        qs_status st = qs_hessian_update(t->ctx[i], h[i], x, QS_DTYPE_F32, rows, k);
        fz_check(st == QS_OK || st == QS_ERR_NONFINITE || st == QS_ERR_OVERFLOW,
                 "qs_hessian_update: %s", qs_status_str(st));
        if (st != QS_OK)
            check_unchanged(c0, h[i], before, n, "qs_hessian_update", st);
        else
            check_finite(c0, h[i], k, "an update");
        free(before);
    }

    /* GPTQ and SparseGPT on a weight from the input, every tier giving the same answer */
    int64_t wrows = mode >> 4;
    size_t wbytes = (size_t)(wrows * k) * sizeof(float);
    float *w = malloc(wbytes ? wbytes : 1);
    fz_fill(&in, w, wbytes);
    qs_quant_params p;
    qs_quant_params_init(&p, formats[(mode >> 1) & 7]);
    if (((mode >> 1) & 7) == 1)
        p.symmetric = 0;
    if (((mode >> 1) & 7) == 7) {
        p.granularity = QS_GRAN_GROUP;
        p.block_size = 32;
    }
    if (p.format == QS_FORMAT_NF4 || p.format == QS_FORMAT_FP4)
        p.block_size = 64; /* a SHAPE error unless K is a multiple of 64 */
    struct result r0, r;
    uint8_t *o0 = NULL, *o = NULL;
    double l0 = 0.0, l = 0.0;
    qs_status sg0 = QS_OK;
    run_gptq(c0, &p, w, wrows, k, h[0], &r0);
    if (k % 4 == 0)
        sg0 = run_sparsegpt(c0, w, wrows, k, h[0], &o0, &l0);
    for (int i = 1; i < t->count; i++) {
        run_gptq(t->ctx[i], &p, w, wrows, k, h[i], &r);
        fz_check(r.st == r0.st, "qs_gptq_quantize: %s on %s, %s on scalar", qs_status_str(r.st),
                 fz_tier_name(t->ctx[i]), qs_status_str(r0.st));
        if (r.st == QS_OK) {
            for (int pl = 0; pl < QS_PLANE_COUNT; pl++)
                fz_check(fz_byte_diff(r.plane[pl], r0.plane[pl], (size_t)r.bytes[pl]) < 0,
                         "qs_gptq_quantize: plane %d differs on %s", pl,
                         fz_tier_name(t->ctx[i]));
            fz_check(r.gscale == r0.gscale && memcmp(&r.loss, &r0.loss, 8) == 0,
                     "qs_gptq_quantize: global scale or loss differs on %s",
                     fz_tier_name(t->ctx[i]));
        }
        free_result(&r);
        if (k % 4 == 0) {
            qs_status sg = run_sparsegpt(t->ctx[i], w, wrows, k, h[i], &o, &l);
            fz_check(sg == sg0, "qs_sparsegpt: %s on %s, %s on scalar", qs_status_str(sg),
                     fz_tier_name(t->ctx[i]), qs_status_str(sg0));
            if (sg == QS_OK)
                fz_check(fz_byte_diff(o, o0, (size_t)(wrows * k) * 4) < 0 &&
                             memcmp(&l, &l0, 8) == 0,
                         "qs_sparsegpt: the weight or loss differs on %s",
                         fz_tier_name(t->ctx[i]));
            free(o);
        }
    }
    free_result(&r0);
    free(o0);
    free(w);
    free(x);
    for (int i = 0; i < t->count; i++)
        qs_hessian_destroy(h[i]);
    free(blob);
    return 0;
}
