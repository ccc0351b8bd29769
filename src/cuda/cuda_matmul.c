/* SPDX-License-Identifier: MIT */
/*
 * The CUDA plugin's matmul driver over an executor: the weight of a call (the plugin ABI's
 * qs_weight and, for quantized kinds, its plain layout) becomes a GEMV description (cuda_mv.h)
 * from the layout's element rule, unit rule and flags, never from a switch on the format code;
 * 2:4 meta is validated on the device before y is touched; then below QS_MATMUL_GEMM_MIN_M rows
 * of x one warp per output row and weight row computes the dot product in the order cuda_mv.h
 * fixes, and from there the tensor-core GEMM of cuda_mm.h runs (with the GEMV behind it for the
 * values it cannot carry).
 */
#include "cuda_run.h"

/* fl(1/127): the LLM.int8 row statistic's multiplier (qs_hd_int8_rowstat_decode). */
#define INV127 0x1.020408p-7f

static qs_status quant_setup(const qs_weight *w, const qs_backend_layout *l, struct qs_cu_mv *mv,
                             struct qs_cu_run *r)
{
    const qs_qtensor *q = w->q;

    mv->w = q->data;
    mv->fscale = q->scale;
    mv->bscale = q->scale;
    mv->unit = l->cols > 0 ? l->cols : 1;
    mv->row_bytes = l->plane[QS_PLANE_DATA].ndim == 2 ? l->plane[QS_PLANE_DATA].shape[1] : l->cols;
    switch (l->element) {
    case QS_BACKEND_ELEM_NF4:
    case QS_BACKEND_ELEM_FP4:
        mv->kind = l->element == QS_BACKEND_ELEM_NF4 ? QS_CU_MV_NF4 : QS_CU_MV_FP4;
        mv->flat = 1;
        mv->unit = l->block;
        mv->dq = (l->flags & QS_BACKEND_LAYOUT_DOUBLE_QUANT) != 0;
        mv->nested = q->nested_scale;
        mv->offset = q->nested_offset;
        return QS_OK;
    case QS_BACKEND_ELEM_INT8:
        mv->kind = QS_CU_MV_INT8;
        mv->row_bytes = l->cols;
        if (l->unit_rule == QS_BACKEND_UNITS_ROWS) {
            mv->sstride = 1;
        } else if (l->unit_rule == QS_BACKEND_UNITS_ROW_BLOCKS) {
            mv->unit = l->block;
            mv->sstride = l->cols / l->block;
        }
        mv->zp = (l->flags & QS_BACKEND_LAYOUT_ZERO_POINT) ? q->zero_point : NULL;
        mv->scale_mul = (l->flags & QS_BACKEND_LAYOUT_ROWSTAT) ? INV127 : 1.0f;
        return QS_OK;
    case QS_BACKEND_ELEM_E4M3:
    case QS_BACKEND_ELEM_E5M2:
    case QS_BACKEND_ELEM_E2M1:
        if (l->family == QS_BACKEND_FAMILY_FP8) {
            mv->kind = l->element == QS_BACKEND_ELEM_E5M2 ? QS_CU_MV_E5M2 : QS_CU_MV_E4M3;
            mv->row_bytes = l->cols;
            return QS_OK;
        }
        mv->kind = l->family == QS_BACKEND_FAMILY_NV        ? QS_CU_MV_NVFP4
                   : l->element == QS_BACKEND_ELEM_E2M1 ? QS_CU_MV_MXFP4
                                                        : QS_CU_MV_MXFP8;
        mv->unit = l->block;
        mv->sstride = qs_cu_ceil_div(l->cols, l->block);
        mv->s_global = q->global_scale;
        return QS_OK;
    default:
        return qs_cu_fail(r, QS_ERR_UNSUPPORTED, "cuda backend: weight element rule %d",
                          l->element);
    }
}

qs_status qs_cu_mv_setup(const qs_weight *w, const qs_backend_layout *wl, int64_t N, int64_t K,
                         struct qs_cu_mv *mv, char *err, size_t err_len)
{
    struct qs_cu_run r = {.x = NULL, .err = err, .err_len = err_len};
    int sparse = w->kind == QS_WEIGHT_SP24 || w->kind == QS_WEIGHT_SP24_QUANT;
    qs_status st;

    err[0] = '\0';
    memset(mv, 0, sizeof *mv);
    mv->N = N;
    mv->K = K;
    mv->cols = sparse ? K / 2 : K;
    mv->scale_mul = 1.0f;
    if (w->kind == QS_WEIGHT_PACKED)
        return qs_cu_fail(&r, QS_ERR_UNSUPPORTED,
                          "cuda backend: a packed weight (qs_matmul_pack) is for the CPU backend "
                          "that packed it; pass the weight it was packed from");
    if (sparse) {
        mv->meta = w->meta;
        mv->words = qs_cu_ceil_div(K, 16);
    }
    if (w->kind == QS_WEIGHT_DENSE || w->kind == QS_WEIGHT_SP24) {
        mv->kind = w->dtype == QS_DTYPE_F32 ? QS_CU_MV_F32
                   : w->dtype == QS_DTYPE_F16 ? QS_CU_MV_F16 : QS_CU_MV_BF16;
        mv->w = w->data;
        mv->row_bytes = mv->cols * qs_cu_dsize(w->dtype);
        mv->unit = mv->cols > 0 ? mv->cols : 1;
    } else if ((st = quant_setup(w, wl, mv, &r)) != QS_OK) {
        return st;
    }
    if (mv->unit <= 0)
        mv->unit = 1;
    /* 16-byte loads of W where every full tile starts at a multiple of 16 bytes */
    mv->vec = qs_cu_aligned(mv->w, 16) &&
              (mv->flat ? mv->cols % 32 == 0 : mv->row_bytes % 16 == 0);
    return QS_OK;
}

int qs_cu_matmul_waits(const qs_weight *w, int64_t M, int64_t N, int64_t K)
{
    return (w->kind == QS_WEIGHT_SP24 || w->kind == QS_WEIGHT_SP24_QUANT) && M > 0 && N > 0 &&
           K > 0;
}

/* The meta check (one host wait): QS_ERR_BAD_DATA naming the first bad nibble, as the CPU. */
static qs_status check_meta(struct qs_cu_run *r, const struct qs_cu_mv *mv)
{
    struct qs_cu_sp24_check c;
    unsigned long long first = ~0ull;
    uint16_t word = 0;

    memset(&c, 0, sizeof c);
    c.a.cols = mv->K;
    c.a.words = mv->words;
    c.a.cmeta = mv->meta;
    c.decompress = 1;
    c.first = qs_cu_scratch(r, sizeof first);
    QS_CU_NEED(r, c.first);
    if (r->x->to_device(r->x->user, c.first, &first, sizeof first))
        return qs_cu_fail(r, QS_ERR_BACKEND, "cuda backend: copy to the device failed");
    QS_CU_LAUNCH(r, QS_CU_K_SP24_CHECK, &c, mv->N * mv->words);
    QS_CU_TO_HOST(r, &first, c.first, sizeof first);
    if (first == ~0ull)
        return QS_OK;
    QS_CU_TO_HOST(r, &word, mv->meta + first, sizeof word);
    for (int j = 0; j < 4; j++) {
        int64_t g = (int64_t)(first % (unsigned long long)mv->words) * 4 + j;
        unsigned nib = (word >> (4 * j)) & 15u;
        int ok = g < mv->K / 4 ? (nib == 0x4 || nib == 0x8 || nib == 0xC || nib == 0x9 ||
                                  nib == 0xD || nib == 0xE)
                               : nib == 0;
        if (!ok)
            return qs_cu_fail(r, QS_ERR_BAD_DATA,
                              "2:4 meta of row %lld, group %lld holds the invalid nibble 0x%X",
                              (long long)(first / (unsigned long long)mv->words), (long long)g,
                              nib);
    }
    return qs_cu_fail(r, QS_ERR_BAD_DATA, "2:4 meta word %llu holds an invalid nibble", first);
}

/* The tensor-core GEMM (cuda_mm.h), after the scan that leaves it to the GEMV where a value of
 * x or W cannot go through bf16 limbs; neither waits for the host. */
static qs_status gemm(struct qs_cu_run *r, const qs_weight *w, const qs_backend_layout *wl,
                      struct qs_cu_mv *mv)
{
    struct qs_cu_mm mm;
    struct qs_cu_pair *partial;
    struct qs_cu_flag f;
    int32_t *bad = qs_cu_scratch(r, sizeof(int32_t));
    int64_t chunks;
    qs_status st;

    QS_CU_NEED(r, bad);
    memset(&mm, 0, sizeof mm);
    mm.mv = *mv;
    mm.xl = qs_cu_mm_x_limbs(mv->x_dtype);
    mm.wl = qs_cu_mm_w_limbs(mv->kind);
    mm.bad = bad;
    /* the scan: x, then W's stored values (a 2:4 weight's zeros are finite) */
    if ((st = qs_cu_reduce(r, mv->x, mv->x_dtype, 1, mv->M * mv->K, QS_CU_RED_TC, &partial,
                           &chunks)) != QS_OK)
        return st;
    f.partial = partial;
    f.count = chunks;
    f.combine = 0;
    f.out = bad;
    QS_CU_LAUNCH(r, QS_CU_K_FLAG, &f, 1);
    if (w->kind == QS_WEIGHT_QUANT || w->kind == QS_WEIGHT_SP24_QUANT) {
        struct qs_cu_deq d;
        int64_t per, tiles = 0;
        qs_cu_deq_setup(wl, w->q, r->x->tab, &d);
        d.flag = bad; /* dst NULL: scan only */
        per = qs_cu_deq_bits(&d) == 4 ? 32 : 16;
        if (qs_cu_aligned(w->q->data, 16) &&
            ((d.rule != QS_CU_DQ_MX && d.rule != QS_CU_DQ_NV) ||
             (wl->cols % wl->block == 0 && wl->cols % per == 0))) {
            tiles = wl->n / per;
            QS_CU_LAUNCH(r, QS_CU_K_DEQ_TILE, &d, tiles);
        }
        d.first = tiles * per;
        QS_CU_LAUNCH(r, QS_CU_K_DEQ_ELEM, &d, wl->n - d.first);
        mm.w = d;
    } else {
        int32_t dt = mv->kind == QS_CU_MV_F32   ? QS_DTYPE_F32
                     : mv->kind == QS_CU_MV_F16 ? QS_DTYPE_F16
                                                : QS_DTYPE_BF16;
        if ((st = qs_cu_reduce(r, mv->w, dt, 1, mv->N * mv->cols, QS_CU_RED_TC, &partial,
                               &chunks)) != QS_OK)
            return st;
        f.partial = partial;
        f.count = chunks;
        f.combine = 1;
        QS_CU_LAUNCH(r, QS_CU_K_FLAG, &f, 1);
    }
    QS_CU_LAUNCH(r, QS_CU_K_MM, &mm, qs_cu_mm_tiles(mv->M, mv->N));
    mv->only_if = bad; /* the GEMV, for the calls the scan flagged */
    QS_CU_LAUNCH(r, QS_CU_K_MV, mv, mv->M * mv->N);
    return QS_OK;
}

qs_status qs_cu_matmul(const struct qs_cu_exec *x, const qs_matmul_params *p, const void *xv,
                       int32_t x_dtype, int64_t M, int64_t K, const qs_weight *w,
                       const qs_backend_layout *wl, int64_t N, const float *bias, float *y,
                       char *err, size_t err_len)
{
    struct qs_cu_run r = {.x = x, .err = err, .err_len = err_len};
    struct qs_cu_mv mv;
    qs_status st;

    err[0] = '\0';
    if (p->activations != QS_MATMUL_ACT_F32)
        return qs_cu_fail(&r, QS_ERR_UNSUPPORTED,
                          "cuda backend: %s activations are not implemented on the GPU; use "
                          "QS_MATMUL_ACT_F32 (f32 / f16 / bf16 x read as they are) or a CPU "
                          "context",
                          p->activations == QS_MATMUL_ACT_INT8 ? "int8" : "bf16");
    if ((st = qs_cu_mv_setup(w, wl, N, K, &mv, err, err_len)) != QS_OK)
        return st;
    if (M == 0 || N == 0)
        return QS_OK;
    mv.M = M;
    mv.x_dtype = x_dtype;
    mv.x = xv;
    mv.bias = bias;
    mv.y = y;
    mv.tab = x->tab;
    mv.xvec = qs_cu_aligned(xv, 16) && (K * qs_cu_dsize(x_dtype)) % 16 == 0;
    if (qs_cu_matmul_waits(w, M, N, K) && (st = check_meta(&r, &mv)) != QS_OK)
        goto done;
    if (M >= QS_MATMUL_GEMM_MIN_M && K > 0 && qs_cu_mm_tiles(M, N) <= INT32_MAX)
        st = gemm(&r, w, wl, &mv);
    else if (x->launch(x->user, QS_CU_K_MV, &mv, M * N) != 0)
        st = qs_cu_fail(&r, QS_ERR_BACKEND, "cuda backend: matmul kernel failed");
done:
    qs_cu_release_all(&r);
    return st;
}
