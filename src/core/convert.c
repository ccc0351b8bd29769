/* SPDX-License-Identifier: MIT */
/* qs_convert between plain dtypes, and the codebook getters (the tables of src/ref/tables_ref.c). */
#include <string.h>

#include "../ref/ref.h"
#include "parallel.h"
#include "profile_internal.h"

struct cvt_job {
    const qs_ctx *ctx;
    const void *src;
    void *dst;
    int32_t sdt, ddt;
    int64_t n;
};

static void cvt_task(void *arg, int64_t i, float *tile)
{
    const struct cvt_job *j = arg;
    int64_t start = i * QS_TILE, len = j->n - start < QS_TILE ? j->n - start : QS_TILE;
    const float *x;

    if (j->sdt == j->ddt) {
        memcpy((char *)j->dst + start * qs_dtype_size(j->ddt),
               (const char *)j->src + start * qs_dtype_size(j->sdt),
               (size_t)(len * qs_dtype_size(j->sdt)));
        return;
    }
    x = qs_stage_f32(j->ctx, j->src, j->sdt, start, len, tile);
    if (j->ddt == QS_DTYPE_F32)
        memcpy((float *)j->dst + start, x, (size_t)len * sizeof(float));
    else
        qs_unstage_f32(j->ctx, x, j->dst, j->ddt, start, len);
}

/* The kernel a conversion runs (through f32 for f16 <-> bf16: the narrowing one), -1 for a copy. */
static int32_t convert_slot(int32_t sdt, int32_t ddt)
{
    if (sdt == ddt)
        return -1;
    if (ddt == QS_DTYPE_F16)
        return QS_SLOT_cvt_f32_f16;
    if (ddt == QS_DTYPE_BF16)
        return QS_SLOT_cvt_f32_bf16;
    return sdt == QS_DTYPE_F16 ? QS_SLOT_cvt_f16_f32 : QS_SLOT_cvt_bf16_f32;
}

QS_API qs_status qs_convert(qs_ctx *ctx, const void *src, int32_t src_dtype, void *dst,
                            int32_t dst_dtype, int64_t n, int64_t dst_bytes)
{
    struct cvt_job j = {ctx, src, dst, src_dtype, dst_dtype, n};
    int64_t need;

    if (!ctx)
        return QS_ERR_INVALID_ARG;
    if (qs_dtype_size(src_dtype) == 0 || qs_dtype_size(dst_dtype) == 0)
        return qs_fail(ctx, QS_ERR_INVALID_ARG, "unknown dtype (%d -> %d)", src_dtype, dst_dtype);
    if (n < 0)
        return qs_fail(ctx, QS_ERR_INVALID_ARG, "negative count %lld", (long long)n);
    if (qs_mul_overflow(n, 4, &need))
        return qs_fail(ctx, QS_ERR_OVERFLOW, "count %lld overflows", (long long)n);
    need = n * qs_dtype_size(dst_dtype);
    if ((!src || !dst) && n > 0)
        return qs_fail(ctx, QS_ERR_INVALID_ARG, "%s is NULL", src ? "dst" : "src");
    if (dst_bytes < need)
        return qs_fail(ctx, QS_ERR_BUFFER_TOO_SMALL, "dst holds %lld bytes, %lld needed",
                       (long long)dst_bytes, (long long)need);
    uint64_t t0 = qs_prof_start(ctx);
    qs_parallel_run(ctx, qs_ceil_div(n, QS_TILE),
                    qs_work(n, qs_dtype_size(src_dtype) + qs_dtype_size(dst_dtype)), cvt_task, NULL,
                    &j);
    if (t0)
        qs_prof_record(ctx, t0, "convert", convert_slot(src_dtype, dst_dtype), 0, (uint64_t)n,
                       (uint64_t)(n * qs_dtype_size(src_dtype)), (uint64_t)need);
    return qs_ok(ctx);
}

QS_API int64_t qs_codebook_size(int32_t which)
{
    switch (which) {
    case QS_CODEBOOK_NF4:
    case QS_CODEBOOK_FP4:
    case QS_CODEBOOK_E2M1: return 16;
    case QS_CODEBOOK_DYN8:
    case QS_CODEBOOK_E4M3:
    case QS_CODEBOOK_E5M2: return 256;
    default: return 0;
    }
}

QS_API qs_status qs_codebook(int32_t which, float *dst, int64_t count)
{
    int64_t size = qs_codebook_size(which);

    if (size == 0 || !dst || count < 0)
        return QS_ERR_INVALID_ARG;
    if (count < size)
        return QS_ERR_BUFFER_TOO_SMALL;
    for (int64_t c = 0; c < size; c++) {
        switch (which) {
        case QS_CODEBOOK_NF4: dst[c] = qs_nf4_codebook[c]; break;
        case QS_CODEBOOK_FP4: dst[c] = qs_fp4_codebook[c]; break;
        case QS_CODEBOOK_E2M1: dst[c] = qs_e2m1_values[c]; break;
        case QS_CODEBOOK_DYN8: dst[c] = qs_dyn8_map[c]; break;
        case QS_CODEBOOK_E4M3: dst[c] = qs_ref_e4m3_decode((uint8_t)c); break;
        default: dst[c] = qs_ref_e5m2_decode((uint8_t)c); break;
        }
    }
    return QS_OK;
}
