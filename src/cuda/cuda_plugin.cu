// SPDX-License-Identifier: MIT
//
// libqsparse-cuda.so: the CUDA backend plugin (include/qsparse/plugin.h, the only header of the
// library it includes besides the public ones). It exports one symbol, qs_backend_plugin_init. Its kernels are grid-stride loops over the items of cuda_items.h (the
// reference's own element and block rules, element_hd.h), plus a block reduction and a GEMV
// whose shared-memory and shuffle steps follow the orders that tests/test_cuda_items.c emulates
// on the host. The drivers are cuda_pipeline.c's; this file is their executor: launches on the
// caller's stream, stream-ordered scratch memory, copies. Built with --fmad=false and IEEE
// division and square root, never --use_fast_math, so every float operation rounds as in
// src/ref. Nothing here prints or aborts: every CUDA error becomes a status and a message.
#include <cuda_runtime.h>
#include <dlfcn.h>
#include <pthread.h>
#include <stdarg.h>
#include <stdio.h>
#include <string.h>

extern "C" {
#include "cuda_pipeline.h"
extern const float qs_nf4_codebook[16];
extern const float qs_fp4_codebook[16];
extern const float qs_dyn8_map[256];
extern const float qs_e2m1_values[16];
}

#define THREADS 256

// The library's services (plugin.h), from init. The plugin calls no function of libqsparse by
// name: it may be loaded RTLD_LOCAL under a library loaded RTLD_LOCAL too.
static const qs_backend_host *host_api;

// The context's message, through the host.
__attribute__((format(printf, 3, 4))) static qs_status plugin_fail(qs_backend_ctx *ctx,
                                                                   qs_status st, const char *fmt,
                                                                   ...)
{
    char msg[256];
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
#define MIN_CC_MAJOR 8 // SASS for sm_80 and newer; older GPUs would JIT nothing we ship

// ---- kernels ---------------------------------------------------------------------------------

template <typename A, void (*F)(const A *, int64_t)>
__global__ void __launch_bounds__(THREADS) grid_kernel(A a, int64_t count)
{
    int64_t stride = (int64_t)gridDim.x * blockDim.x;
    for (int64_t i = (int64_t)blockIdx.x * blockDim.x + threadIdx.x; i < count; i += stride)
        F(&a, i);
}

// One block per chunk: each thread its strided share, then the tree the host test emulates.
__global__ void __launch_bounds__(QS_CU_RED_THREADS) reduce_kernel(qs_cu_red a, int64_t count)
{
    __shared__ qs_cu_pair p[QS_CU_RED_THREADS];
    for (int64_t i = blockIdx.x; i < count; i += gridDim.x) {
        p[threadIdx.x] = qs_cu_red_thread(&a, i, threadIdx.x);
        __syncthreads();
        for (int s = QS_CU_RED_THREADS / 2; s > 0; s /= 2) {
            if ((int)threadIdx.x < s)
                p[threadIdx.x] = qs_cu_red_join(a.kind, p[threadIdx.x], p[threadIdx.x + s]);
            __syncthreads();
        }
        if (threadIdx.x == 0)
            a.partial[i] = p[0];
        __syncthreads();
    }
}

// One warp per row; each half warp takes one segment (16 lanes), the tree is four shuffles, and
// lane 0 adds the segment products in ascending order: the reference's sum, bit for bit.
__global__ void __launch_bounds__(THREADS) gemv_kernel(qs_cu_gemv a, int64_t rows)
{
    const unsigned full = 0xFFFFFFFFu;
    int lane = threadIdx.x & 31, half = lane >> 4, l16 = lane & 15;
    int64_t warp = ((int64_t)blockIdx.x * blockDim.x + threadIdx.x) >> 5;
    int64_t warps = ((int64_t)gridDim.x * blockDim.x) >> 5;

    for (int64_t r = warp; r < rows; r += warps) {
        int64_t segs = qs_cu_gemv_segments(&a, r);
        float acc = 0.0f;
        for (int64_t s0 = 0; s0 < segs; s0 += 2) {
            int64_t s = s0 + half;
            float v = s < segs ? qs_cu_gemv_lane(&a, r, s, l16) : 0.0f;
            for (int h = 8; h >= 1; h /= 2)
                v = v + __shfl_down_sync(full, v, h, 16);
            float sc = s < segs && l16 == 0 ? qs_cu_gemv_scale(&a, r, s) : 0.0f;
            float v1 = __shfl_sync(full, v, 16), sc1 = __shfl_sync(full, sc, 16);
            if (lane == 0) {
                acc = qs_cu_gemv_acc(acc, v, sc);
                if (s0 + 1 < segs)
                    acc = qs_cu_gemv_acc(acc, v1, sc1);
            }
        }
        if (lane == 0)
            a.y[r] = qs_hd_nan_canon(acc);
    }
}

// Validation of 2:4 inputs: the lowest bad word index wins, as the host emulation's minimum.
__global__ void __launch_bounds__(THREADS) sp24_check_kernel(qs_cu_sp24_check c, int64_t count)
{
    int64_t stride = (int64_t)gridDim.x * blockDim.x;
    for (int64_t i = (int64_t)blockIdx.x * blockDim.x + threadIdx.x; i < count; i += stride)
        if (qs_cu_sp24_bad_item(&c.a, i, c.decompress))
            atomicMin(c.first, (unsigned long long)i);
}

// ---- the executor ----------------------------------------------------------------------------

struct exec_state {
    cudaStream_t stream;
    cudaError_t err;
    int sm_count;
};

static int blocks_for(const exec_state *s, int64_t items, int per_block)
{
    int64_t b = (items + per_block - 1) / per_block, cap = (int64_t)s->sm_count * 32;
    return (int)(b < cap ? (b > 0 ? b : 1) : cap);
}

template <typename A, void (*F)(const A *, int64_t)>
static void grid(exec_state *s, const void *args, int64_t count)
{
    grid_kernel<A, F><<<blocks_for(s, count, THREADS), THREADS, 0, s->stream>>>(
        *(const A *)args, count);
}

static int launch(void *user, int32_t kernel, const void *args, int64_t count)
{
    exec_state *s = (exec_state *)user;

    switch (kernel) {
    case QS_CU_K_CVT_IN: grid<qs_cu_cvt_in, qs_cu_cvt_in_item>(s, args, count); break;
    case QS_CU_K_CVT_OUT: grid<qs_cu_cvt_out, qs_cu_cvt_out_item>(s, args, count); break;
    case QS_CU_K_REDUCE:
        reduce_kernel<<<blocks_for(s, count, 1), QS_CU_RED_THREADS, 0, s->stream>>>(
            *(const qs_cu_red *)args, count);
        break;
    case QS_CU_K_BNB4_QUANT:
        grid<qs_cu_bnb4_quant, qs_cu_bnb4_quant_item>(s, args, count);
        break;
    case QS_CU_K_DQ_CENTER: grid<qs_cu_dq_quant, qs_cu_dq_center_item>(s, args, count); break;
    case QS_CU_K_DQ_BLOCK: grid<qs_cu_dq_quant, qs_cu_dq_block_item>(s, args, count); break;
    case QS_CU_K_DQ_DEQUANT:
        grid<qs_cu_dq_dequant, qs_cu_dq_dequant_item>(s, args, count);
        break;
    case QS_CU_K_BNB4_DEQUANT:
        grid<qs_cu_bnb4_dequant, qs_cu_bnb4_dequant_item>(s, args, count);
        break;
    case QS_CU_K_INT8_PARAMS:
        grid<qs_cu_int8_params, qs_cu_int8_params_item>(s, args, count);
        break;
    case QS_CU_K_INT8_QUANT: grid<qs_cu_int8_quant, qs_cu_int8_quant_item>(s, args, count); break;
    case QS_CU_K_INT8_DEQUANT:
        grid<qs_cu_int8_dequant, qs_cu_int8_dequant_item>(s, args, count);
        break;
    case QS_CU_K_TENSOR_SCALE:
        grid<qs_cu_tensor_scale, qs_cu_tensor_scale_item>(s, args, count);
        break;
    case QS_CU_K_FP8_QUANT: grid<qs_cu_fp8, qs_cu_fp8_quant_item>(s, args, count); break;
    case QS_CU_K_FP8_DEQUANT: grid<qs_cu_fp8, qs_cu_fp8_dequant_item>(s, args, count); break;
    case QS_CU_K_ROWS_QUANT: grid<qs_cu_rows, qs_cu_rows_quant_item>(s, args, count); break;
    case QS_CU_K_ROWS_DEQUANT: grid<qs_cu_rows, qs_cu_rows_dequant_item>(s, args, count); break;
    case QS_CU_K_GEMV:
        gemv_kernel<<<blocks_for(s, count, THREADS / 32), THREADS, 0, s->stream>>>(
            *(const qs_cu_gemv *)args, count);
        break;
    case QS_CU_K_SP24_CHECK:
        sp24_check_kernel<<<blocks_for(s, count, THREADS), THREADS, 0, s->stream>>>(
            *(const qs_cu_sp24_check *)args, count);
        break;
    case QS_CU_K_SP24_COMPRESS: grid<qs_cu_sp24, qs_cu_sp24_compress_item>(s, args, count); break;
    case QS_CU_K_SP24_DECOMPRESS:
        grid<qs_cu_sp24, qs_cu_sp24_decompress_item>(s, args, count);
        break;
    default: return 1;
    }
    s->err = cudaGetLastError();
    return s->err != cudaSuccess;
}

static void *dev_alloc(void *user, size_t bytes)
{
    exec_state *s = (exec_state *)user;
    void *p = NULL;

    s->err = cudaMallocAsync(&p, bytes, s->stream);
    return s->err == cudaSuccess ? p : NULL;
}

static void dev_release(void *user, void *p)
{
    exec_state *s = (exec_state *)user;
    (void)cudaFreeAsync(p, s->stream);
}

static int copy_wait(exec_state *s, void *dst, const void *src, size_t bytes, cudaMemcpyKind k)
{
    s->err = cudaMemcpyAsync(dst, src, bytes, k, s->stream);
    if (s->err == cudaSuccess)
        s->err = cudaStreamSynchronize(s->stream);
    return s->err != cudaSuccess;
}

static int to_host(void *user, void *dst, const void *src, size_t bytes)
{
    return copy_wait((exec_state *)user, dst, src, bytes, cudaMemcpyDeviceToHost);
}

static int to_device(void *user, void *dst, const void *src, size_t bytes)
{
    return copy_wait((exec_state *)user, dst, src, bytes, cudaMemcpyHostToDevice);
}

// ---- device tables: one copy per device, made on first use ---------------------------------

#define MAX_DEVICES 64
#define TABLE_FLOATS (16 + 16 + 256 + 16)

static pthread_mutex_t tables_lock = PTHREAD_MUTEX_INITIALIZER;
static float *device_tables[MAX_DEVICES];

static cudaError_t tables_for(int dev, float **out)
{
    cudaError_t e = cudaSuccess;

    if (dev < 0 || dev >= MAX_DEVICES)
        return cudaErrorInvalidDevice;
    pthread_mutex_lock(&tables_lock);
    if (!device_tables[dev]) {
        float host[TABLE_FLOATS], *d = NULL;
        memcpy(host, qs_nf4_codebook, sizeof qs_nf4_codebook);
        memcpy(host + 16, qs_fp4_codebook, sizeof qs_fp4_codebook);
        memcpy(host + 32, qs_dyn8_map, sizeof qs_dyn8_map);
        memcpy(host + 288, qs_e2m1_values, sizeof qs_e2m1_values);
        e = cudaMalloc(&d, sizeof host);
        if (e == cudaSuccess)
            e = cudaMemcpy(d, host, sizeof host, cudaMemcpyHostToDevice);
        if (e == cudaSuccess)
            device_tables[dev] = d; // kept for the life of the process, like the module
        else if (d)
            cudaFree(d);
    }
    *out = device_tables[dev];
    pthread_mutex_unlock(&tables_lock);
    return e;
}

// Fill an executor for the current device and `stream`; a status and message on failure.
static qs_status exec_init(qs_backend_ctx *ctx, exec_state *s, qs_cu_exec *x, void *stream)
{
    int dev = 0;
    float *t = NULL;
    cudaError_t e = cudaGetDevice(&dev);

    if (e == cudaSuccess)
        e = cudaDeviceGetAttribute(&s->sm_count, cudaDevAttrMultiProcessorCount, dev);
    if (e == cudaSuccess)
        e = tables_for(dev, &t);
    if (e != cudaSuccess)
        return plugin_fail(ctx, QS_ERR_BACKEND, "cuda backend: %s", cudaGetErrorString(e));
    s->stream = (cudaStream_t)stream;
    s->err = cudaSuccess;
    x->user = s;
    x->tables.nf4 = t;
    x->tables.fp4 = t + 16;
    x->tables.dyn8 = t + 32;
    x->tables.e2m1 = t + 288;
    x->launch = launch;
    x->alloc = dev_alloc;
    x->release = dev_release;
    x->to_host = to_host;
    x->to_device = to_device;
    return QS_OK;
}

// The executor's CUDA error, if any, replaces the driver's generic message.
static qs_status finish(qs_backend_ctx *ctx, const exec_state *s, qs_status st, const char *err)
{
    if (st == QS_OK)
        return QS_OK;
    if (s->err != cudaSuccess)
        return plugin_fail(ctx, st, "%s: %s", err, cudaGetErrorString(s->err));
    return plugin_fail(ctx, st, "%s", err);
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

static qs_status quantize_dev(qs_backend_ctx *ctx, const qs_backend_layout *l, const qs_quant_params *p,
                              const void *src, int32_t src_dtype, qs_qtensor *q, void *stream)
{
    exec_state s;
    qs_cu_exec x;
    char err[256];
    qs_status st = exec_init(ctx, &s, &x, stream);

    if (st != QS_OK)
        return st;
    st = qs_cu_quantize(&x, l, p, src, src_dtype, q,
                        host_api->nonfinite(ctx) == QS_NONFINITE_REJECT, err, sizeof err);
    return finish(ctx, &s, st, err);
}

static qs_status dequantize_dev(qs_backend_ctx *ctx, const qs_backend_layout *l, const qs_quant_params *p,
                                const qs_qtensor *q, void *dst, int32_t dst_dtype, void *stream)
{
    exec_state s;
    qs_cu_exec x;
    char err[256];
    qs_status st = exec_init(ctx, &s, &x, stream);

    if (st != QS_OK)
        return st;
    st = qs_cu_dequantize(&x, l, p, q, dst, dst_dtype, err, sizeof err);
    return finish(ctx, &s, st, err);
}

static qs_status gemv_dev(qs_backend_ctx *ctx, const qs_backend_layout *l, const qs_quant_params *p,
                          const qs_qtensor *w, const float *xv, float *y, void *stream)
{
    exec_state s;
    qs_cu_exec x;
    char err[256];
    qs_status st = exec_init(ctx, &s, &x, stream);

    if (st != QS_OK)
        return st;
    st = qs_cu_gemv_run(&x, l, p, w, xv, y, err, sizeof err);
    return finish(ctx, &s, st, err);
}

static qs_status sp24_dev(qs_backend_ctx *ctx, const qs_backend_sp24 *d, void *stream)
{
    exec_state s;
    qs_cu_exec x;
    qs_cu_sp24 a;
    char err[256];
    qs_status st = exec_init(ctx, &s, &x, stream);

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

// Host-pointer calls of a context created for the CUDA backend: through device copies on the
// default stream, then back. Planes are copied both ways (a plane's bytes come from the layout).
struct staged {
    void *dev[QS_PLANE_COUNT + 1];
};

static void staged_free(staged *g)
{
    for (int i = 0; i <= QS_PLANE_COUNT; i++)
        if (g->dev[i])
            cudaFree(g->dev[i]);
}

static qs_status stage_planes(qs_backend_ctx *ctx, const qs_backend_layout *l, const qs_qtensor *q, staged *g,
                              qs_qtensor *dq, int upload)
{
    void *const host[QS_PLANE_COUNT] = {q->data, q->scale, q->zero_point, q->nested_scale};
    void **dev[QS_PLANE_COUNT] = {&dq->data, &dq->scale, &dq->zero_point, &dq->nested_scale};

    for (int k = 0; k < QS_PLANE_COUNT; k++) {
        cudaError_t e;
        *dev[k] = NULL;
        if (l->plane[k].bytes == 0)
            continue;
        e = cudaMalloc(&g->dev[k], (size_t)l->plane[k].bytes);
        if (e == cudaSuccess && upload)
            e = cudaMemcpy(g->dev[k], host[k], (size_t)l->plane[k].bytes, cudaMemcpyHostToDevice);
        if (e != cudaSuccess)
            return plugin_fail(ctx, QS_ERR_BACKEND, "cuda backend: staging plane %d: %s", k,
                           cudaGetErrorString(e));
        *dev[k] = g->dev[k];
    }
    return QS_OK;
}

static qs_status quantize_host(qs_backend_ctx *ctx, const qs_backend_layout *l, const qs_quant_params *p,
                               const void *src, int32_t src_dtype, qs_qtensor *q)
{
    staged g;
    qs_qtensor dq = *q;
    size_t in = (size_t)l->n * dtype_size(src_dtype);
    qs_status st;
    cudaError_t e = cudaSuccess;

    memset(&g, 0, sizeof g);
    if ((st = stage_planes(ctx, l, q, &g, &dq, 0)) == QS_OK) {
        e = cudaMalloc(&g.dev[QS_PLANE_COUNT], in > 0 ? in : 4);
        if (e == cudaSuccess && in > 0)
            e = cudaMemcpy(g.dev[QS_PLANE_COUNT], src, in, cudaMemcpyHostToDevice);
        st = e == cudaSuccess ? quantize_dev(ctx, l, p, g.dev[QS_PLANE_COUNT], src_dtype, &dq, 0)
                              : plugin_fail(ctx, QS_ERR_BACKEND, "cuda backend: staging the input: "
                                        "%s", cudaGetErrorString(e));
    }
    // The caller's planes are written only after the device work succeeded.
    void *const host[QS_PLANE_COUNT] = {q->data, q->scale, q->zero_point, q->nested_scale};
    for (int k = 0; st == QS_OK && k < QS_PLANE_COUNT; k++)
        if (l->plane[k].bytes && (e = cudaMemcpy(host[k], g.dev[k], (size_t)l->plane[k].bytes,
                                           cudaMemcpyDeviceToHost)) != cudaSuccess)
            st = plugin_fail(ctx, QS_ERR_BACKEND, "cuda backend: copying plane %d back: %s", k,
                         cudaGetErrorString(e));
    if (st == QS_OK) {
        q->global_scale = dq.global_scale;
        q->nested_offset = dq.nested_offset;
    }
    staged_free(&g);
    return st;
}

static qs_status dequantize_host(qs_backend_ctx *ctx, const qs_backend_layout *l, const qs_quant_params *p,
                                 const qs_qtensor *q, void *dst, int32_t dst_dtype)
{
    staged g;
    qs_qtensor dq = *q;
    size_t out = (size_t)l->n * dtype_size(dst_dtype);
    qs_status st;
    cudaError_t e = cudaSuccess;

    memset(&g, 0, sizeof g);
    if ((st = stage_planes(ctx, l, q, &g, &dq, 1)) == QS_OK) {
        e = cudaMalloc(&g.dev[QS_PLANE_COUNT], out > 0 ? out : 4);
        st = e == cudaSuccess
                 ? dequantize_dev(ctx, l, p, &dq, g.dev[QS_PLANE_COUNT], dst_dtype, 0)
                 : plugin_fail(ctx, QS_ERR_BACKEND, "cuda backend: %s", cudaGetErrorString(e));
    }
    if (st == QS_OK && out > 0 &&
        (e = cudaMemcpy(dst, g.dev[QS_PLANE_COUNT], out, cudaMemcpyDeviceToHost)) != cudaSuccess)
        st = plugin_fail(ctx, QS_ERR_BACKEND, "cuda backend: copying the output back: %s",
                     cudaGetErrorString(e));
    staged_free(&g);
    return st;
}

// Host arrays: quantize and dequantize through device copies. Matmul, 2:4 and act_sumsq on host
// arrays are not this backend's yet (NULL): a CUDA context refuses them by name.
static qs_backend_ops make_ops()
{
    qs_backend_ops o;

    memset(&o, 0, sizeof o);
    o.abi_version = QS_BACKEND_ABI_VERSION;
    o.name = "cuda";
    o.available = cuda_available;
    o.quantize = quantize_host;
    o.dequantize = dequantize_host;
    o.quantize_dev = quantize_dev;
    o.dequantize_dev = dequantize_dev;
    o.gemv_dev = gemv_dev;
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
