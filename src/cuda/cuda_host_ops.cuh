// SPDX-License-Identifier: MIT
//
// The host-array operations of a context created for the CUDA backend (qs_quantize,
// qs_dequantize, qs_matmul): every input copied to the device, the device operation run on the
// legacy default stream, the outputs copied back, so these calls are synchronous like their CPU
// twins. An output is written only after the device work succeeded. Included by cuda_plugin.cu
// only (it uses the device operations defined there).
#ifndef QS_CUDA_HOST_OPS_CUH
#define QS_CUDA_HOST_OPS_CUH

// Device copies of one call, freed together.
#define STAGED_MAX 8

struct staged {
    void *dev[STAGED_MAX];
    int n;
};

static void staged_free(staged *g)
{
    while (g->n > 0)
        (void)cudaFree(g->dev[--g->n]);
}

// A device buffer of `bytes` (at least 4), filled from host `src` when it is not NULL.
static qs_status stage(qs_backend_ctx *ctx, staged *g, const void *src, int64_t bytes, void **out,
                       const char *what)
{
    void *d = NULL;
    cudaError_t e = cudaMalloc(&d, (size_t)(bytes > 4 ? bytes : 4));

    if (e == cudaSuccess && src && bytes > 0)
        e = cudaMemcpy(d, src, (size_t)bytes, cudaMemcpyHostToDevice);
    if (d)
        g->dev[g->n++] = d;
    if (e != cudaSuccess) {
        (void)cudaGetLastError();
        return plugin_fail(ctx, QS_ERR_BACKEND, "cuda backend: staging %s (%lld bytes): %s", what,
                           (long long)bytes, cudaGetErrorString(e));
    }
    *out = d;
    return QS_OK;
}

static qs_status stage_planes(qs_backend_ctx *ctx, const qs_backend_layout *l, const qs_qtensor *q,
                              staged *g, qs_qtensor *dq, int upload)
{
    void *const host[QS_PLANE_COUNT] = {q->data, q->scale, q->zero_point, q->nested_scale};
    void **dev[QS_PLANE_COUNT] = {&dq->data, &dq->scale, &dq->zero_point, &dq->nested_scale};
    qs_status st = QS_OK;

    for (int k = 0; st == QS_OK && k < QS_PLANE_COUNT; k++) {
        *dev[k] = NULL;
        if (l->plane[k].bytes > 0)
            st = stage(ctx, g, upload ? host[k] : NULL, l->plane[k].bytes, dev[k], "a plane");
    }
    return st;
}

static qs_status copy_back(qs_backend_ctx *ctx, void *dst, const void *src, int64_t bytes)
{
    cudaError_t e;

    if (bytes <= 0)
        return QS_OK;
    e = cudaMemcpy(dst, src, (size_t)bytes, cudaMemcpyDeviceToHost);
    if (e == cudaSuccess)
        return QS_OK;
    (void)cudaGetLastError();
    return plugin_fail(ctx, QS_ERR_BACKEND, "cuda backend: copying a result back: %s",
                       cudaGetErrorString(e));
}

static qs_status quantize_host(qs_backend_ctx *ctx, const qs_backend_layout *l,
                               const qs_quant_params *p, const void *src, int32_t src_dtype,
                               qs_qtensor *q)
{
    staged g = {{NULL}, 0};
    qs_qtensor dq = *q;
    void *dsrc = NULL;
    qs_status st = stage_planes(ctx, l, q, &g, &dq, 0);

    if (st == QS_OK)
        st = stage(ctx, &g, src, l->n * (int64_t)dtype_size(src_dtype), &dsrc, "the input");
    if (st == QS_OK)
        st = quantize_dev(ctx, l, p, dsrc, src_dtype, &dq, NULL);
    // the caller's planes are written only after the device work succeeded
    {
        void *const host[QS_PLANE_COUNT] = {q->data, q->scale, q->zero_point, q->nested_scale};
        void *const dev[QS_PLANE_COUNT] = {dq.data, dq.scale, dq.zero_point, dq.nested_scale};
        for (int k = 0; st == QS_OK && k < QS_PLANE_COUNT; k++)
            st = copy_back(ctx, host[k], dev[k], l->plane[k].bytes);
    }
    if (st == QS_OK) {
        q->global_scale = dq.global_scale;
        q->nested_offset = dq.nested_offset;
    }
    staged_free(&g);
    return st;
}

static qs_status dequantize_host(qs_backend_ctx *ctx, const qs_backend_layout *l,
                                 const qs_quant_params *p, const qs_qtensor *q, void *dst,
                                 int32_t dst_dtype)
{
    staged g = {{NULL}, 0};
    qs_qtensor dq = *q;
    int64_t out = l->n * (int64_t)dtype_size(dst_dtype);
    void *ddst = NULL;
    qs_status st = stage_planes(ctx, l, q, &g, &dq, 1);

    if (st == QS_OK)
        st = stage(ctx, &g, NULL, out, &ddst, "the output");
    if (st == QS_OK)
        st = dequantize_dev(ctx, l, p, &dq, ddst, dst_dtype, NULL);
    if (st == QS_OK)
        st = copy_back(ctx, dst, ddst, out);
    staged_free(&g);
    return st;
}

// qs_matmul on host arrays: x, the weight (data or planes, meta) and bias copied over.
static qs_status matmul_host(qs_backend_ctx *ctx, const qs_matmul_params *p, const void *xv,
                             int32_t x_dtype, int64_t M, int64_t K, const qs_weight *w,
                             const qs_backend_layout *wl, int64_t N, const float *bias, float *y)
{
    staged g = {{NULL}, 0};
    int sparse = w->kind == QS_WEIGHT_SP24 || w->kind == QS_WEIGHT_SP24_QUANT;
    int64_t cols = sparse ? K / 2 : K;
    qs_weight dw = *w;
    qs_qtensor dq;
    void *dx = NULL, *dy = NULL, *dbias = NULL, *dmeta = NULL, *ddata = NULL;
    qs_status st = QS_OK;

    if (M == 0 || N == 0)
        return QS_OK;
    if (w->kind == QS_WEIGHT_PACKED)
        return plugin_fail(ctx, QS_ERR_UNSUPPORTED,
                           "cuda backend: a packed weight (qs_matmul_pack) is for the CPU "
                           "backend that packed it; pass the weight it was packed from");
    if (sparse && (st = stage(ctx, &g, w->meta, N * ((K + 15) / 16) * 2, &dmeta, "the meta")) ==
                      QS_OK)
        dw.meta = (const uint16_t *)dmeta;
    if (st == QS_OK && (w->kind == QS_WEIGHT_DENSE || w->kind == QS_WEIGHT_SP24)) {
        st = stage(ctx, &g, w->data, N * cols * (int64_t)dtype_size(w->dtype), &ddata,
                   "the weight");
        dw.data = ddata;
    } else if (st == QS_OK) {
        dq = *w->q;
        st = stage_planes(ctx, wl, w->q, &g, &dq, 1);
        dw.q = &dq;
    }
    if (st == QS_OK)
        st = stage(ctx, &g, xv, M * K * (int64_t)dtype_size(x_dtype), &dx, "x");
    if (st == QS_OK && bias)
        st = stage(ctx, &g, bias, N * 4, &dbias, "the bias");
    if (st == QS_OK)
        st = stage(ctx, &g, NULL, M * N * 4, &dy, "y");
    if (st == QS_OK)
        st = matmul_dev(ctx, p, dx, x_dtype, M, K, &dw, wl, N, (const float *)dbias, (float *)dy,
                        NULL);
    if (st == QS_OK)
        st = copy_back(ctx, y, dy, M * N * 4);
    staged_free(&g);
    return st;
}

#endif // QS_CUDA_HOST_OPS_CUH
