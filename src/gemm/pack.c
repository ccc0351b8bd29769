/* SPDX-License-Identifier: MIT */
/*
 * Packed weights (qs_matmul_pack): a weight copied once into the form this context's matmul
 * kernels read, behind a header that says who may read it. Layout version 1 ("planes"): the
 * header, then the weight's planes at 64-byte offsets, with double-quantized NF4/FP4 absmax
 * decoded to f32 (the decode every call of an unpacked weight repeats) and the 2:4 meta. A packed
 * weight gives the same bits as the weight it came from (the same kernels see the same values).
 *
 * The header binds the buffer to the library build (a hash of the version, the layout version
 * and the kernel registry's names) and to the packing context's ISA mask: a buffer from another
 * build or tier is refused, never misread, and its planes are checked again against the layout
 * its parameters give (a damaged header fails its own hash first).
 */
#include <string.h>

#include "../core/parallel.h"
#include "../core/quant_common.h"
#include "../ref/ref.h"
#include "gemm_internal.h"

#define PACK_MAGIC "QSPACKW"
#define PACK_VERSION 1u
#define PACK_ALIGN 64
#define PACK_LAYOUT_PLANES 1
#define PACK_PLANES (QS_PLANE_COUNT + 1) /* the quantized planes, then the 2:4 meta */

struct pack_header {
    char magic[8];
    uint32_t version, header_bytes;
    uint64_t build; /* build_id() of the library that packed it */
    uint32_t isa;   /* the packing context's ISA mask */
    int32_t layout; /* PACK_LAYOUT_* */
    int32_t kind, dtype;
    int64_t n, k;
    qs_quant_params quant; /* double_quant cleared: the absmax is stored decoded */
    float global_scale, nested_offset;
    int64_t off[PACK_PLANES], bytes[PACK_PLANES];
    uint64_t check; /* FNV-1a of every byte above */
};

#define HEADER_BYTES                                                                               \
    ((int64_t)((sizeof(struct pack_header) + PACK_ALIGN - 1) / PACK_ALIGN * PACK_ALIGN))

static uint64_t fnv1a(uint64_t h, const void *p, size_t n)
{
    const unsigned char *b = p;
    for (size_t i = 0; i < n; i++)
        h = (h ^ b[i]) * 0x100000001b3ull;
    return h;
}

/* The build's identity: the version, the layout version and every kernel's name in registry
 * order, so a library with other kernels (another build, a new release) has another id. */
static uint64_t build_id(void)
{
    int32_t count;
    const struct qs_kernel_entry *e = qs_kernel_entries(&count);
    uint64_t h = fnv1a(0xcbf29ce484222325ull, QS_VERSION_STRING, sizeof QS_VERSION_STRING);
    uint32_t v = PACK_VERSION;

    h = fnv1a(h, &v, sizeof v);
    for (int32_t i = 0; i < count; i++)
        h = fnv1a(h, e[i].name, strlen(e[i].name) + 1);
    return h;
}

static uint64_t header_check(const struct pack_header *h)
{
    return fnv1a(0xcbf29ce484222325ull, h, offsetof(struct pack_header, check));
}

/* Plane sizes of the packed form of a checked weight, and the header without offsets. */
static qs_status plan_pack(qs_ctx *ctx, const qs_weight *w, const struct qs_mm_job *j,
                           struct pack_header *h, int64_t *total)
{
    int64_t at = HEADER_BYTES;

    memset(h, 0, sizeof *h);
    memcpy(h->magic, PACK_MAGIC, sizeof h->magic);
    h->version = PACK_VERSION;
    h->header_bytes = (uint32_t)HEADER_BYTES;
    h->build = build_id();
    h->isa = ctx->isa;
    h->layout = PACK_LAYOUT_PLANES;
    h->kind = w->kind;
    h->dtype = w->dtype;
    h->n = j->N;
    h->k = j->K;
    if (j->t) {
        struct qs_layout l;
        qs_status st;
        h->quant = *w->quant;
        h->quant.double_quant = 0;
        h->global_scale = w->q->global_scale;
        if ((st = qs_layout_compute(ctx, &h->quant, j->N, j->w.k, &l)) != QS_OK)
            return st;
        for (int i = 0; i < QS_PLANE_COUNT; i++)
            h->bytes[i] = l.bytes[i];
    } else {
        h->bytes[QS_PLANE_DATA] = j->N * j->w.row_bytes;
    }
    if (j->w.meta)
        h->bytes[QS_PLANE_COUNT] = j->N * j->w.words * 2;
    for (int i = 0; i < PACK_PLANES; i++) {
        if (h->bytes[i] == 0)
            continue;
        h->off[i] = at;
        if (qs_add_overflow(at, (h->bytes[i] + PACK_ALIGN - 1) / PACK_ALIGN * PACK_ALIGN, &at))
            return qs_fail(ctx, QS_ERR_OVERFLOW, "the packed weight's size overflows");
    }
    *total = at;
    return QS_OK;
}

QS_API qs_status qs_matmul_pack_size(qs_ctx *ctx, const qs_weight *w, int64_t N, int64_t K,
                                     int64_t *bytes)
{
    struct qs_mm_job j;
    struct pack_header h;
    qs_status st;

    if (!ctx)
        return QS_ERR_INVALID_ARG;
    if (!w || !bytes)
        return qs_fail(ctx, QS_ERR_INVALID_ARG, "%s is NULL", w ? "bytes" : "w");
    if (N < 0 || K < 0)
        return qs_fail(ctx, QS_ERR_INVALID_ARG, "negative shape N=%lld K=%lld", (long long)N,
                       (long long)K);
    if (w->kind == QS_WEIGHT_PACKED)
        return qs_fail(ctx, QS_ERR_INVALID_ARG, "the weight is packed already");
    memset(&j, 0, sizeof j);
    j.ctx = ctx;
    j.N = N;
    j.K = K;
    if ((st = qs_mm_weight_build(ctx, w, &j)) != QS_OK)
        return st;
    if ((st = plan_pack(ctx, w, &j, &h, bytes)) != QS_OK)
        return st;
    return qs_ok(ctx);
}

struct dq_job {
    const qs_ctx *ctx;
    const uint8_t *codes;
    const float *nested;
    float offset;
    int64_t n;
    float *dst;
};

static void dq_task(void *arg, int64_t i, float *tile)
{
    const struct dq_job *d = arg;
    int64_t start = i * QS_DQ_CHUNK, len = d->n - start < QS_DQ_CHUNK ? d->n - start : QS_DQ_CHUNK;

    (void)tile;
    d->ctx->k.dyn8_dequant(d->codes + start, d->nested + start / 256, len, 256, d->offset,
                           d->dst + start);
}

QS_API qs_status qs_matmul_pack(qs_ctx *ctx, const qs_weight *w, int64_t N, int64_t K, void *dst,
                                int64_t dst_bytes)
{
    struct qs_mm_job j;
    struct pack_header h;
    int64_t total;
    qs_status st;
    const void *src[PACK_PLANES] = {NULL};
    uint8_t *out = dst;

    if (!ctx)
        return QS_ERR_INVALID_ARG;
    if (!w || !dst)
        return qs_fail(ctx, QS_ERR_INVALID_ARG, "%s is NULL", w ? "dst" : "w");
    if (N < 0 || K < 0)
        return qs_fail(ctx, QS_ERR_INVALID_ARG, "negative shape N=%lld K=%lld", (long long)N,
                       (long long)K);
    if (w->kind == QS_WEIGHT_PACKED)
        return qs_fail(ctx, QS_ERR_INVALID_ARG, "the weight is packed already");
    memset(&j, 0, sizeof j);
    j.ctx = ctx;
    j.N = N;
    j.K = K;
    if ((st = qs_mm_weight_build(ctx, w, &j)) != QS_OK)
        return st;
    if ((st = plan_pack(ctx, w, &j, &h, &total)) != QS_OK)
        return st;
    if (dst_bytes < total)
        return qs_fail(ctx, QS_ERR_BUFFER_TOO_SMALL,
                       "dst holds %lld bytes, the packed weight needs %lld", (long long)dst_bytes,
                       (long long)total);
    /* Everything checked: from here on nothing fails. */
    if (j.t) {
        src[QS_PLANE_DATA] = w->q->data;
        src[QS_PLANE_SCALE] = w->q->scale;
        src[QS_PLANE_ZERO_POINT] = w->q->zero_point;
    } else {
        src[QS_PLANE_DATA] = w->data;
    }
    src[QS_PLANE_COUNT] = w->meta;
    memset(out, 0, (size_t)total); /* padding and alignment gaps: no stale bytes in a file */
    h.check = header_check(&h);
    memcpy(out, &h, sizeof h);
    for (int i = 0; i < PACK_PLANES; i++) {
        if (h.bytes[i] == 0)
            continue;
        if (i == QS_PLANE_SCALE && j.t && w->quant->double_quant) {
            struct dq_job d = {ctx,
                               w->q->scale,
                               w->q->nested_scale,
                               w->q->nested_offset,
                               h.bytes[i] / 4,
                               (float *)(void *)(out + h.off[i])};
            qs_parallel_run(ctx, qs_ceil_div(d.n, QS_DQ_CHUNK), qs_work(d.n, 5), dq_task, NULL,
                            &d);
        } else {
            memcpy(out + h.off[i], src[i], (size_t)h.bytes[i]);
        }
    }
    return qs_ok(ctx);
}

qs_status qs_mm_packed_weight(qs_ctx *ctx, const qs_weight *w, int64_t N, int64_t K,
                              qs_weight *plain, qs_quant_params *quant, qs_qtensor *q)
{
    struct pack_header h;
    const uint8_t *b = w->data;

    if (ctx->backend != QS_BACKEND_CPU)
        return qs_fail(ctx, QS_ERR_UNSUPPORTED,
                       "a packed weight runs on the CPU backend of the tier that packed it");
    if (!b || w->data_bytes < HEADER_BYTES)
        return qs_fail(ctx, QS_ERR_INVALID_ARG, "a packed weight needs data (%lld bytes or more)",
                       (long long)HEADER_BYTES);
    if (w->dtype || w->meta || w->meta_count || w->quant || w->q)
        return qs_fail(
            ctx, QS_ERR_INVALID_ARG,
            "a packed weight has only data and data_bytes (the buffer of qs_matmul_pack)");
    memcpy(&h, b, sizeof h);
    if (memcmp(h.magic, PACK_MAGIC, sizeof h.magic) != 0)
        return qs_fail(ctx, QS_ERR_BAD_DATA,
                       "the data is no packed weight (no qs_matmul_pack header)");
    if (h.version != PACK_VERSION || h.header_bytes != (uint32_t)HEADER_BYTES)
        return qs_fail(ctx, QS_ERR_BAD_DATA,
                       "a packed weight of layout version %u; this library reads %u", h.version,
                       PACK_VERSION);
    if (h.check != header_check(&h))
        return qs_fail(ctx, QS_ERR_BAD_DATA, "the packed weight's header is damaged");
    if (h.build != build_id())
        return qs_fail(ctx, QS_ERR_BAD_DATA,
                       "the weight was packed by another build of the library: pack it again");
    if (h.isa != ctx->isa)
        return qs_fail(ctx, QS_ERR_BAD_DATA,
                       "the weight was packed for ISA 0x%x (tier %s), this context runs 0x%x (%s): "
                       "pack it again with this context",
                       h.isa, qs_isa_tier_name(h.isa), ctx->isa, qs_isa_tier_name(ctx->isa));
    if (h.n != N || h.k != K)
        return qs_fail(ctx, QS_ERR_SHAPE,
                       "the weight was packed as %lld x %lld, the call is %lld x %lld",
                       (long long)h.n, (long long)h.k, (long long)N, (long long)K);
    for (int i = 0; i < PACK_PLANES; i++) {
        int64_t end;
        if (h.bytes[i] < 0 || h.off[i] < 0 || qs_add_overflow(h.off[i], h.bytes[i], &end) ||
            end > w->data_bytes)
            return qs_fail(ctx, QS_ERR_BUFFER_TOO_SMALL,
                           "the packed weight holds %lld bytes, its planes reach past them",
                           (long long)w->data_bytes);
    }
    memset(plain, 0, sizeof *plain);
    plain->kind = h.kind;
    if (h.kind == QS_WEIGHT_DENSE || h.kind == QS_WEIGHT_SP24) {
        plain->dtype = h.dtype;
        plain->data = b + h.off[QS_PLANE_DATA];
        plain->data_bytes = h.bytes[QS_PLANE_DATA];
    } else {
        memset(q, 0, sizeof *q);
        *quant = h.quant;
        q->data = (void *)(b + h.off[QS_PLANE_DATA]);
        q->data_bytes = h.bytes[QS_PLANE_DATA];
        q->scale = h.bytes[QS_PLANE_SCALE] ? (void *)(b + h.off[QS_PLANE_SCALE]) : NULL;
        q->scale_bytes = h.bytes[QS_PLANE_SCALE];
        q->zero_point =
            h.bytes[QS_PLANE_ZERO_POINT] ? (void *)(b + h.off[QS_PLANE_ZERO_POINT]) : NULL;
        q->zero_point_bytes = h.bytes[QS_PLANE_ZERO_POINT];
        q->global_scale = h.global_scale;
        plain->quant = quant;
        plain->q = q;
    }
    if (h.bytes[QS_PLANE_COUNT]) {
        plain->meta = (const uint16_t *)(const void *)(b + h.off[QS_PLANE_COUNT]);
        plain->meta_count = h.bytes[QS_PLANE_COUNT] / 2;
    }
    return QS_OK;
}
