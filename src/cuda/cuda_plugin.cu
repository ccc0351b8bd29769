// SPDX-License-Identifier: MIT
//
// libqsparse-cuda.so: the CUDA backend plugin (include/qsparse/plugin.h, the only header of the
// library it includes besides the public ones). It exports one symbol, qs_backend_plugin_init.
// The drivers are cuda_pipeline.c's and cuda_matmul.c's, the kernels cuda_kernels.cuh's; this
// file is their executor (launches on the caller's stream, stream-ordered scratch memory,
// copies) and the backend's operations around it: where each device pointer lives, whether a
// call may run during CUDA graph capture, and whose a CUDA error is. Built with --fmad=false and
// IEEE division and square root, never --use_fast_math, so every float operation rounds as in
// src/ref (the GEMV's fused multiply-adds are explicit fmaf). Nothing here prints or aborts:
// every CUDA error becomes a status and a message.
#include <cuda_runtime.h>
#include <dlfcn.h>
#include <stdarg.h>
#include <stdio.h>
#include <string.h>

#include "cuda_kernels.cuh"

// The library's services (plugin.h), from init. The plugin calls no function of libqsparse by
// name: it may be loaded RTLD_LOCAL under a library loaded RTLD_LOCAL too.
static const qs_backend_host *host_api;

#define MIN_CC_MAJOR 8 // SASS for sm_80 and newer; older GPUs would JIT nothing we ship

// The context's message, through the host.
__attribute__((format(printf, 3, 4))) static qs_status plugin_fail(qs_backend_ctx *ctx,
                                                                   qs_status st, const char *fmt,
                                                                   ...)
{
    char msg[320];
    va_list ap;

    va_start(ap, fmt);
    vsnprintf(msg, sizeof msg, fmt, ap);
    va_end(ap);
    host_api->set_error(ctx, msg);
    return st;
}

static size_t dtype_size(int32_t dtype)
{
    return dtype == QS_DTYPE_F32 ? 4 : 2;
}

// ---- the executor ----------------------------------------------------------------------------

struct exec_state {
    cudaStream_t stream;
    cudaError_t err;     // the first CUDA error of this call
    const char *where;   // what returned it
    int device, sm_count;
    int pools;           // stream-ordered allocation (cudaMallocAsync) is supported
    int capturing;       // the stream is capturing a CUDA graph
    int pending;         // the application left an error pending before the call
};

// Record a CUDA error of this call. The runtime keeps the last error per thread: ours is cleared
// (the status carries it), unless the application had one pending, which stays for it to see.
static int note(exec_state *s, cudaError_t e, const char *where)
{
    if (e == cudaSuccess)
        return 0;
    if (s->err == cudaSuccess) {
        s->err = e;
        s->where = where;
    }
    if (!s->pending)
        (void)cudaGetLastError();
    return 1;
}

// cudaLaunchKernel returns this launch's own error, so an earlier one is never taken for it.
static int go(exec_state *s, const void *fn, int64_t blocks, void **params)
{
    int64_t cap = (int64_t)s->sm_count * 32;
    dim3 grid((unsigned)(blocks < 1 ? 1 : blocks > cap ? cap : blocks));

    return note(s, cudaLaunchKernel(fn, grid, dim3(QS_CU_THREADS), params, 0, s->stream),
                "a kernel launch");
}

template <typename A, void (*F)(const A *, int64_t), bool TAB = false>
static int items(exec_state *s, const void *args, int64_t count)
{
    A a = *(const A *)args;
    void *p[] = {&a, &count};
    return go(s, (const void *)grid_kernel<A, F, TAB>, (count + QS_CU_THREADS - 1) / QS_CU_THREADS,
              p);
}

// One CUDA block per item (reductions).
template <typename A>
static int per_block(exec_state *s, void (*k)(A, int64_t), const void *args, int64_t count)
{
    A a = *(const A *)args;
    void *p[] = {&a, &count};
    return go(s, (const void *)k, count, p);
}

#define BY_DTYPE(K, R) {(const void *)K<R, 0>, (const void *)K<R, 1>, (const void *)K<R, 2>}
static const void *const bq_kernels[5][3] = {
    BY_DTYPE(bq_kernel, QS_CU_BQ_BNB4), BY_DTYPE(bq_kernel, QS_CU_BQ_INT8),
    BY_DTYPE(bq_kernel, QS_CU_BQ_MX),   BY_DTYPE(bq_kernel, QS_CU_BQ_NV),
    {(const void *)bq_kernel<QS_CU_BQ_DYN8, 0>, NULL, NULL}, // f32 input only
};
static const void *const ewq_kernels[2][3] = {BY_DTYPE(ewq_kernel, 0), BY_DTYPE(ewq_kernel, 1)};
#define BY_SUB(K, R)                                                                             \
    {{(const void *)K<R, 0, 0>, (const void *)K<R, 0, 1>, (const void *)K<R, 0, 2>},              \
     {(const void *)K<R, 1, 0>, (const void *)K<R, 1, 1>, (const void *)K<R, 1, 2>}}
static const void *const deq_kernels[5][2][3] = {
    BY_SUB(deq_kernel, QS_CU_DQ_BNB4), BY_SUB(deq_kernel, QS_CU_DQ_INT8),
    BY_SUB(deq_kernel, QS_CU_DQ_FP8),  BY_SUB(deq_kernel, QS_CU_DQ_MX),
    {{(const void *)deq_kernel<QS_CU_DQ_NV, 0, 0>, (const void *)deq_kernel<QS_CU_DQ_NV, 0, 1>,
      (const void *)deq_kernel<QS_CU_DQ_NV, 0, 2>},
     {NULL, NULL, NULL}},
};
static const void *const mv_kernels[QS_CU_MV_KINDS] = {
    (const void *)mv_kernel<0>, (const void *)mv_kernel<1>, (const void *)mv_kernel<2>,
    (const void *)mv_kernel<3>, (const void *)mv_kernel<4>, (const void *)mv_kernel<5>,
    (const void *)mv_kernel<6>, (const void *)mv_kernel<7>, (const void *)mv_kernel<8>,
    (const void *)mv_kernel<9>, (const void *)mv_kernel<10>,
};

static int launch_bq(exec_state *s, const void *args, int64_t blocks)
{
    qs_cu_bq a = *(const qs_cu_bq *)args;
    const void *k = a.rule >= 0 && a.rule < 5 && a.dtype >= 0 && a.dtype < 3
                        ? bq_kernels[a.rule][a.dtype]
                        : NULL;
    int64_t warps = (blocks + 32 / a.lanes - 1) / (32 / a.lanes);
    void *p[] = {&a, &blocks};

    return k ? go(s, k, (warps + QS_CU_THREADS / 32 - 1) / (QS_CU_THREADS / 32), p) : 1;
}

static int launch_tiles(exec_state *s, const void *k, void *a, int64_t tiles)
{
    void *p[] = {a, &tiles};
    return k ? go(s, k, (tiles + QS_CU_THREADS - 1) / QS_CU_THREADS, p) : 1;
}

static int launch_mv(exec_state *s, const void *args)
{
    qs_cu_mv a = *(const qs_cu_mv *)args;
    int64_t items = a.M * ((a.N + 1) / 2);
    void *p[] = {&a, &items};

    if (a.kind < 0 || a.kind >= QS_CU_MV_KINDS)
        return 1;
    return go(s, mv_kernels[a.kind], (items + QS_CU_THREADS / 32 - 1) / (QS_CU_THREADS / 32), p);
}

static int launch(void *user, int32_t kernel, const void *args, int64_t count)
{
    exec_state *s = (exec_state *)user;

    switch (kernel) {
    case QS_CU_K_CVT_IN: return items<qs_cu_cvt_in, qs_cu_cvt_in_item>(s, args, count);
    case QS_CU_K_REDUCE: return per_block(s, reduce_kernel, args, count);
    case QS_CU_K_FLAG: return items<qs_cu_flag, qs_cu_flag_item>(s, args, count);
    case QS_CU_K_BNB4_QUANT:
        return items<qs_cu_bnb4_quant, qs_cu_bnb4_quant_item>(s, args, count);
    case QS_CU_K_DQ_STATS: return per_block(s, dq_stats_kernel, args, count);
    case QS_CU_K_DQ_OFFSET: return items<qs_cu_dq_offset, qs_cu_dq_offset_item>(s, args, count);
    case QS_CU_K_DQ_CENTER: return items<qs_cu_dq_quant, qs_cu_dq_center_item>(s, args, count);
    case QS_CU_K_DQ_BLOCK:
        return items<qs_cu_dq_quant, qs_cu_dq_block_item, true>(s, args, count);
    case QS_CU_K_INT8_PARAMS:
        return items<qs_cu_int8_params, qs_cu_int8_params_item>(s, args, count);
    case QS_CU_K_TENSOR_SCALE:
        return items<qs_cu_tensor_scale, qs_cu_tensor_scale_item>(s, args, count);
    case QS_CU_K_ROWS_QUANT: return items<qs_cu_rows, qs_cu_rows_quant_item>(s, args, count);
    case QS_CU_K_BQ: return launch_bq(s, args, count);
    case QS_CU_K_EWQ_TILE: {
        qs_cu_ewq a = *(const qs_cu_ewq *)args;
        return launch_tiles(s, a.fp8 >= 0 && a.fp8 < 2 && a.dtype >= 0 && a.dtype < 3
                                   ? ewq_kernels[a.fp8][a.dtype]
                                   : NULL,
                            &a, count);
    }
    case QS_CU_K_EWQ_ELEM: return items<qs_cu_ewq, qs_cu_ewq_elem>(s, args, count);
    case QS_CU_K_DEQ_TILE: {
        qs_cu_deq a = *(const qs_cu_deq *)args;
        return launch_tiles(s, a.rule >= 0 && a.rule < 5 && (a.sub == 0 || a.sub == 1) &&
                                       a.dtype >= 0 && a.dtype < 3
                                   ? deq_kernels[a.rule][a.sub][a.dtype]
                                   : NULL,
                            &a, count);
    }
    case QS_CU_K_DEQ_ELEM: return items<qs_cu_deq, qs_cu_deq_elem, true>(s, args, count);
    case QS_CU_K_MV: return launch_mv(s, args);
    case QS_CU_K_MM: {
        qs_cu_mm a = *(const qs_cu_mm *)args;
        void *p[] = {&a, &count};
        int64_t cap = (int64_t)s->sm_count * 8;
        dim3 grid((unsigned)(count < cap ? count : cap));
        return note(s, cudaLaunchKernel((const void *)mm_kernel, grid, dim3(QS_CU_MM_THREADS), p, 0,
                                        s->stream),
                    "a kernel launch");
    }
    case QS_CU_K_SP24_CHECK: {
        qs_cu_sp24_check c = *(const qs_cu_sp24_check *)args;
        void *p[] = {&c, &count};
        return go(s, (const void *)sp24_check_kernel, (count + QS_CU_THREADS - 1) / QS_CU_THREADS,
                  p);
    }
    case QS_CU_K_SP24_COMPRESS: return items<qs_cu_sp24, qs_cu_sp24_compress_item>(s, args, count);
    case QS_CU_K_SP24_DECOMPRESS:
        return items<qs_cu_sp24, qs_cu_sp24_decompress_item>(s, args, count);
    default: return 1;
    }
}

// Scratch: stream-ordered where the device has memory pools; cudaMalloc / cudaFree (which wait)
// where it has not.
static void *dev_alloc(void *user, size_t bytes)
{
    exec_state *s = (exec_state *)user;
    void *p = NULL;

    if (note(s, s->pools ? cudaMallocAsync(&p, bytes, s->stream) : cudaMalloc(&p, bytes),
             s->pools ? "cudaMallocAsync of scratch memory" : "cudaMalloc of scratch memory"))
        return NULL;
    return p;
}

static void dev_release(void *user, void *p)
{
    exec_state *s = (exec_state *)user;

    (void)note(s, s->pools ? cudaFreeAsync(p, s->stream) : cudaFree(p), "freeing scratch memory");
}

static int copy_wait(exec_state *s, void *dst, const void *src, size_t bytes, cudaMemcpyKind k)
{
    if (note(s, cudaMemcpyAsync(dst, src, bytes, k, s->stream), "a copy"))
        return 1;
    // an error here may come from any work queued on the stream before, the caller's included
    return note(s, cudaStreamSynchronize(s->stream), "waiting for the stream");
}

static int to_host(void *user, void *dst, const void *src, size_t bytes)
{
    return copy_wait((exec_state *)user, dst, src, bytes, cudaMemcpyDeviceToHost);
}

static int to_device(void *user, void *dst, const void *src, size_t bytes)
{
    return copy_wait((exec_state *)user, dst, src, bytes, cudaMemcpyHostToDevice);
}

// Fill an executor for the current device and `stream`. `what` names the call; `waits` says
// whether it will wait for the stream (qs_cu_*_waits), which graph capture cannot take.
static qs_status exec_init(qs_backend_ctx *ctx, exec_state *s, qs_cu_exec *x, void *stream,
                           const char *what, int waits)
{
    cudaStreamCaptureStatus cs = cudaStreamCaptureStatusNone;
    cudaError_t e;

    memset(s, 0, sizeof *s);
    s->stream = (cudaStream_t)stream;
    s->pending = cudaPeekAtLastError() != cudaSuccess;
    e = cudaGetDevice(&s->device);
    if (e == cudaSuccess)
        e = cudaDeviceGetAttribute(&s->sm_count, cudaDevAttrMultiProcessorCount, s->device);
    if (e == cudaSuccess)
        e = cudaDeviceGetAttribute(&s->pools, cudaDevAttrMemoryPoolsSupported, s->device);
    if (e == cudaSuccess && (e = cudaStreamIsCapturing(s->stream, &cs)) != cudaSuccess) {
        if (!s->pending)
            (void)cudaGetLastError();
        return plugin_fail(ctx, QS_ERR_INVALID_ARG,
                           "cuda backend: %s: the stream is not usable on device %d: %s", what,
                           s->device, cudaGetErrorString(e));
    }
    if (e != cudaSuccess) {
        if (!s->pending)
            (void)cudaGetLastError();
        return plugin_fail(ctx, QS_ERR_BACKEND, "cuda backend: %s", cudaGetErrorString(e));
    }
    s->capturing = cs != cudaStreamCaptureStatusNone;
    if (s->pending && !s->capturing) {
        // A sticky error (a fault of earlier work) breaks every call: say so, not ours.
        e = cudaStreamQuery(s->stream);
        if (e != cudaSuccess && e != cudaErrorNotReady)
            return plugin_fail(ctx, QS_ERR_BACKEND,
                               "cuda backend: %s did not run: the CUDA context holds an error of "
                               "earlier work on device %d: %s",
                               what, s->device, cudaGetErrorString(e));
    }
    if (s->capturing && waits)
        return plugin_fail(ctx, QS_ERR_UNSUPPORTED,
                           "cuda backend: %s waits for the stream once (its result is a host "
                           "value: a tensor scale or offset, or a validation's verdict), so it "
                           "cannot run while the stream captures a CUDA graph; run it before the "
                           "capture (or give NVFP4 a scale, or use another non-finite policy)",
                           what);
    if (s->capturing && !s->pools)
        return plugin_fail(ctx, QS_ERR_UNSUPPORTED,
                           "cuda backend: device %d has no memory pools (cudaMallocAsync), so "
                           "its scratch memory cannot be allocated inside a CUDA graph capture",
                           s->device);
    memset(x, 0, sizeof *x);
    x->user = s;
    x->tab = NULL; // the kernels read constant memory
    x->launch = launch;
    x->alloc = dev_alloc;
    x->release = dev_release;
    x->to_host = to_host;
    x->to_device = to_device;
    return QS_OK;
}

// The call's CUDA error, if any, with the driver's message.
static qs_status finish(qs_backend_ctx *ctx, const exec_state *s, qs_status st, const char *err)
{
    if (st == QS_OK && s->err == cudaSuccess)
        return QS_OK;
    if (st == QS_OK)
        st = QS_ERR_BACKEND; // e.g. a failed release after the work
    if (s->err != cudaSuccess)
        return plugin_fail(ctx, st, "%s: %s (%s)", err[0] ? err : "cuda backend",
                           cudaGetErrorString(s->err), s->where);
    return plugin_fail(ctx, st, "%s", err);
}

// Where a device pointer lives: device memory of the current device, managed memory, or host
// memory pinned and mapped at the same address; anything else cannot be read by the kernels.
static qs_status check_ptr(qs_backend_ctx *ctx, exec_state *s, const void *p, int64_t bytes,
                           const char *name)
{
    cudaPointerAttributes at;
    cudaError_t e;

    if (!p || bytes <= 0)
        return QS_OK;
    e = cudaPointerGetAttributes(&at, p);
    if (e != cudaSuccess) {
        if (!s->pending)
            (void)cudaGetLastError();
        return plugin_fail(ctx, QS_ERR_INVALID_ARG, "cuda backend: %s (%p): %s", name, p,
                           cudaGetErrorString(e));
    }
    switch (at.type) {
    case cudaMemoryTypeDevice:
        if (at.device != s->device)
            return plugin_fail(ctx, QS_ERR_INVALID_ARG,
                               "cuda backend: %s is memory of device %d; the current device is "
                               "%d (cudaSetDevice)",
                               name, at.device, s->device);
        return QS_OK;
    case cudaMemoryTypeManaged: return QS_OK;
    case cudaMemoryTypeHost:
        if (at.devicePointer == p)
            return QS_OK;
        return plugin_fail(ctx, QS_ERR_INVALID_ARG,
                           "cuda backend: %s is pinned host memory not mapped at the same "
                           "address on the device",
                           name);
    default:
        return plugin_fail(ctx, QS_ERR_INVALID_ARG,
                           "cuda backend: %s is host memory CUDA does not know (pageable); the "
                           "device API takes device memory (qs_quantize and friends take host "
                           "arrays)",
                           name);
    }
}

static qs_status check_planes(qs_backend_ctx *ctx, exec_state *s, const qs_backend_layout *l,
                              const qs_qtensor *q)
{
    const void *const ptr[QS_PLANE_COUNT] = {q->data, q->scale, q->zero_point, q->nested_scale};
    static const char *const names[QS_PLANE_COUNT] = {"the data plane", "the scale plane",
                                                      "the zero-point plane",
                                                      "the nested-scale plane"};
    qs_status st = QS_OK;

    for (int k = 0; st == QS_OK && k < QS_PLANE_COUNT; k++)
        st = check_ptr(ctx, s, ptr[k], l->plane[k].bytes, names[k]);
    return st;
}

// ---- backend operations ----------------------------------------------------------------------

static int32_t cuda_available(char *why, size_t why_len)
{
    int count = 0, major = 0;
    cudaError_t e = cudaGetDeviceCount(&count);

    if (e == cudaErrorInsufficientDriver) {
        // Either no driver at all or one older than this runtime: say which.
        void *drv = dlopen("libcuda.so.1", RTLD_LAZY | RTLD_LOCAL);
        if (drv)
            dlclose(drv);
        snprintf(why, why_len, drv ? "the NVIDIA driver is older than CUDA runtime %d.%d needs"
                                   : "no NVIDIA driver (libcuda.so.1 not found; CUDA runtime %d.%d)",
                 CUDART_VERSION / 1000, CUDART_VERSION % 1000 / 10);
        return 0;
    }
    if (e != cudaSuccess) {
        snprintf(why, why_len, "%s (CUDA runtime %d.%d)", cudaGetErrorString(e),
                 CUDART_VERSION / 1000, CUDART_VERSION % 1000 / 10);
        return 0;
    }
    if (count == 0) {
        snprintf(why, why_len, "no CUDA device");
        return 0;
    }
    e = cudaDeviceGetAttribute(&major, cudaDevAttrComputeCapabilityMajor, 0);
    if (e != cudaSuccess || major < MIN_CC_MAJOR) {
        snprintf(why, why_len, "device 0 has compute capability %d.x; the plugin needs %d.0+",
                 major, MIN_CC_MAJOR);
        return 0;
    }
    return 1;
}

static qs_status quantize_dev(qs_backend_ctx *ctx, const qs_backend_layout *l,
                              const qs_quant_params *p, const void *src, int32_t src_dtype,
                              qs_qtensor *q, void *stream)
{
    exec_state s;
    qs_cu_exec x;
    char err[256];
    int32_t reject = host_api->nonfinite(ctx) == QS_NONFINITE_REJECT;
    qs_status st = exec_init(ctx, &s, &x, stream, "quantize",
                             qs_cu_quantize_waits(l, p, reject));

    if (st == QS_OK)
        st = check_ptr(ctx, &s, src, l->n * (int64_t)dtype_size(src_dtype), "src");
    if (st == QS_OK)
        st = check_planes(ctx, &s, l, q);
    if (st != QS_OK)
        return st;
    st = qs_cu_quantize(&x, l, p, src, src_dtype, q, reject, err, sizeof err);
    return finish(ctx, &s, st, err);
}

static qs_status dequantize_dev(qs_backend_ctx *ctx, const qs_backend_layout *l,
                                const qs_quant_params *p, const qs_qtensor *q, void *dst,
                                int32_t dst_dtype, void *stream)
{
    exec_state s;
    qs_cu_exec x;
    char err[256];
    qs_status st = exec_init(ctx, &s, &x, stream, "dequantize", 0);

    if (st == QS_OK)
        st = check_planes(ctx, &s, l, q);
    if (st == QS_OK)
        st = check_ptr(ctx, &s, dst, l->n * (int64_t)dtype_size(dst_dtype), "dst");
    if (st != QS_OK)
        return st;
    st = qs_cu_dequantize(&x, l, p, q, dst, dst_dtype, err, sizeof err);
    return finish(ctx, &s, st, err);
}

// The bytes of each device buffer of a matmul weight (data or planes, meta).
static qs_status check_weight(qs_backend_ctx *ctx, exec_state *s, const qs_weight *w,
                              const qs_backend_layout *wl, int64_t N, int64_t K)
{
    int sparse = w->kind == QS_WEIGHT_SP24 || w->kind == QS_WEIGHT_SP24_QUANT;
    int64_t cols = sparse ? K / 2 : K;
    qs_status st = QS_OK;

    if (sparse)
        st = check_ptr(ctx, s, w->meta, N * ((K + 15) / 16) * 2, "the weight's meta");
    if (st == QS_OK && (w->kind == QS_WEIGHT_DENSE || w->kind == QS_WEIGHT_SP24))
        st = check_ptr(ctx, s, w->data, N * cols * (int64_t)dtype_size(w->dtype),
                       "the weight's data");
    else if (st == QS_OK && wl)
        st = check_planes(ctx, s, wl, w->q);
    return st;
}

static qs_status matmul_dev(qs_backend_ctx *ctx, const qs_matmul_params *p, const void *xv,
                            int32_t x_dtype, int64_t M, int64_t K, const qs_weight *w,
                            const qs_backend_layout *wl, int64_t N, const float *bias, float *y,
                            void *stream)
{
    exec_state s;
    qs_cu_exec x;
    char err[256];
    qs_status st = exec_init(ctx, &s, &x, stream, "matmul", qs_cu_matmul_waits(w, M, N, K));

    if (st == QS_OK)
        st = check_ptr(ctx, &s, xv, M * K * (int64_t)dtype_size(x_dtype), "x");
    if (st == QS_OK)
        st = check_ptr(ctx, &s, y, M * N * 4, "y");
    if (st == QS_OK)
        st = check_ptr(ctx, &s, bias, N * 4, "bias");
    if (st == QS_OK && M > 0)
        st = check_weight(ctx, &s, w, wl, N, K);
    if (st != QS_OK)
        return st;
    st = qs_cu_matmul(&x, p, xv, x_dtype, M, K, w, wl, N, bias, y, err, sizeof err);
    return finish(ctx, &s, st, err);
}

static qs_status sp24_dev(qs_backend_ctx *ctx, const qs_backend_sp24 *d, void *stream)
{
    exec_state s;
    qs_cu_exec x;
    qs_cu_sp24 a;
    char err[256];
    int64_t n = d->rows * d->cols, words = d->rows * ((d->cols + 15) / 16);
    qs_status st = exec_init(ctx, &s, &x, stream, "2:4",
                             d->op != QS_BACKEND_SP24_PRUNE && words > 0);
    const void *const ptr[9] = {d->w, d->norms, d->mask_in, d->values, d->meta, d->mask_out,
                                d->values_in, d->meta_in, d->dst};
    const int64_t bytes[9] = {n * 4, d->cols * 4, n, n * 2, words * 2, n, n * 2, words * 2, n * 4};
    static const char *const names[9] = {"w", "norms", "mask", "values", "meta", "mask",
                                         "values", "meta", "dst"};

    for (int i = 0; st == QS_OK && i < 9; i++)
        st = check_ptr(ctx, &s, ptr[i], bytes[i], names[i]);
    if (st != QS_OK)
        return st;
    memset(&a, 0, sizeof a);
    a.op = d->op == QS_BACKEND_SP24_PRUNE      ? QS_CU_SP24_PRUNE
           : d->op == QS_BACKEND_SP24_COMPRESS ? QS_CU_SP24_COMPRESS
                                               : -1;
    a.cols = d->cols;
    a.words = (d->cols + 15) / 16;
    a.w = (const float *)d->w; // device 2:4 is f32 (the core checks)
    a.norms = d->norms;
    a.mask_in = d->mask_in;
    a.values = (float *)d->values;
    a.meta = d->meta;
    a.mask_out = d->mask_out;
    a.cvalues = (const float *)d->values_in;
    a.cmeta = d->meta_in;
    a.dst = (float *)d->dst;
    st = qs_cu_sp24_run(&x, &a, d->rows, err, sizeof err);
    return finish(ctx, &s, st, err);
}

#include "cuda_host_ops.cuh"

static qs_backend_ops make_ops()
{
    qs_backend_ops o;

    memset(&o, 0, sizeof o);
    o.abi_version = QS_BACKEND_ABI_VERSION;
    o.name = "cuda";
    o.available = cuda_available;
    o.quantize = quantize_host;
    o.dequantize = dequantize_host;
    o.matmul = matmul_host;
    o.quantize_dev = quantize_dev;
    o.dequantize_dev = dequantize_dev;
    o.matmul_dev = matmul_dev;
    o.sp24_dev = sp24_dev;
    return o;
}

extern "C" __attribute__((visibility("default"))) const qs_backend_ops *
qs_backend_plugin_init(int32_t host_abi_version, const qs_backend_host *host)
{
    static const qs_backend_ops cuda_ops = make_ops();

    if (host_abi_version != QS_BACKEND_ABI_VERSION || !host)
        return NULL;
    if (host_api != host) // the library's one static table: written once, before any call
        host_api = host;
    return &cuda_ops;
}
