/* SPDX-License-Identifier: MIT */
/*
 * The GPU check's matmul part: qs_cuda_matmul for every weight kind and format (plain, every
 * quantized case of gpu_common.c, 2:4 plain and quantized), f32 and bf16 activations, GEMV
 * (M < 16) and tensor-core GEMM shapes, each y within include/qsparse/matmul.h's bound of the
 * double-precision product of x and the weight as the CPU dequantizes it; qs_matmul on a CUDA
 * context (host arrays) gives the device API's bits; NaN lands where the CPU puts it; then the
 * stream rules of include/qsparse/cuda.h: graph capture refused for a call that waits and taken
 * for one that does not, pageable host pointers refused by name.
 */
#include "gpu_common.h"

struct dweight {
    qs_weight w; /* device pointers */
    qs_quant_params qp;
    struct planes dq, hq; /* device and host planes */
    void *ddata, *dmeta;
    uint16_t *meta;
    float *dense; /* N x K, as the CPU decodes it */
};

/* kind: QS_WEIGHT_*; for DENSE / SP24 `c` is NULL and dtype the values' type. */
static void make_weight(qs_ctx *cpu, const struct fmt_case *c, int32_t kind, int32_t dtype,
                        const float *w0, int64_t N, int64_t K, struct dweight *b)
{
    int sparse = kind == QS_WEIGHT_SP24 || kind == QS_WEIGHT_SP24_QUANT;
    int64_t cols = sparse ? K / 2 : K, vb = 0, mc = 0;
    float *vals = NULL;

    memset(b, 0, sizeof *b);
    b->dense = malloc((size_t)(N * K) * 4);
    b->w.kind = kind;
    if (sparse) {
        qs_sp24_size(QS_DTYPE_F32, N, K, &vb, &mc);
        vals = malloc((size_t)vb);
        b->meta = malloc((size_t)mc * 2);
        qs_sp24_prune_compress(cpu, w0, QS_DTYPE_F32, N, K, NULL, vals, vb, b->meta, mc, NULL, 0);
        CU(cudaMalloc(&b->dmeta, (size_t)mc * 2));
        CU(cudaMemcpy(b->dmeta, b->meta, (size_t)mc * 2, cudaMemcpyHostToDevice));
        b->w.meta = b->dmeta;
        b->w.meta_count = mc;
    }
    if (!c) {
        int64_t cnt = N * cols, esz = qs_dtype_size(dtype);
        void *conv = malloc((size_t)(cnt * esz));
        float *back = malloc((size_t)cnt * 4);
        qs_convert(cpu, sparse ? vals : w0, QS_DTYPE_F32, conv, dtype, cnt, cnt * esz);
        qs_convert(cpu, conv, dtype, back, QS_DTYPE_F32, cnt, cnt * 4);
        CU(cudaMalloc(&b->ddata, (size_t)(cnt * esz)));
        CU(cudaMemcpy(b->ddata, conv, (size_t)(cnt * esz), cudaMemcpyHostToDevice));
        b->w.dtype = dtype;
        b->w.data = b->ddata;
        b->w.data_bytes = cnt * esz;
        if (sparse)
            qs_sp24_decompress(cpu, back, QS_DTYPE_F32, b->meta, mc, N, K, b->dense, N * K * 4);
        else
            memcpy(b->dense, back, (size_t)(N * K) * 4);
        free(conv);
        free(back);
    } else {
        b->qp = params_of(c);
        planes_new(&b->hq, &b->qp, N, cols, 0);
        planes_new(&b->dq, &b->qp, N, cols, 1);
        qs_quantize(cpu, &b->qp, sparse ? vals : w0, QS_DTYPE_F32, N, cols, &b->hq.q);
        planes_copy(&b->dq, &b->hq);
        if (sparse)
            qs_sp24_dequantize(cpu, &b->qp, &b->hq.q, b->meta, mc, N, K, b->dense, QS_DTYPE_F32,
                               N * K * 4);
        else
            qs_dequantize(cpu, &b->qp, &b->hq.q, N, K, b->dense, QS_DTYPE_F32, N * K * 4);
        b->w.quant = &b->qp;
        b->w.q = &b->dq.q;
    }
    free(vals);
}

static void free_weight(struct dweight *b)
{
    if (b->w.q) {
        planes_free(&b->hq, 0);
        planes_free(&b->dq, 1);
    }
    cudaFree(b->ddata);
    cudaFree(b->dmeta);
    free(b->meta);
    free(b->dense);
}

/* |got - exact| within matmul.h's bound (its per-element form, plus the bias's rounding). */
static int within_bound(float got, double exact, double sabs, int64_t K)
{
    double tol = 2.0 * ((double)K / 16.0 + 8.0) * 0x1p-23 * sabs +
                 (2.0 * (double)K + 32.0) * 0x1p-149 * 1e6 + fabs(exact) * 0x1p-23;
    if (isnan(exact))
        return isnan(got);
    return fabs((double)got - exact) <= tol;
}

/* One weight, one shape and x dtype: the device API against the bound; with `host`, qs_matmul
 * on a CUDA context too, which must give the same bits. */
static void check_one(const char *name, const struct dweight *b, int64_t M, int64_t N, int64_t K,
                      int32_t xd, int host, qs_ctx *cpu, qs_ctx *msg)
{
    int64_t esz = qs_dtype_size(xd);
    float *xf = malloc((size_t)(M * K) * 4), *xw = malloc((size_t)(M * K) * 4);
    float *bias = malloc((size_t)N * 4), *y = malloc((size_t)(M * N) * 4);
    float *yh = malloc((size_t)(M * N) * 4);
    void *xc = malloc((size_t)(M * K * esz)), *dx, *dy, *dbias;
    char label[160];
    int ok = 1;

    for (int64_t i = 0; i < M * K; i++)
        xf[i] = (float)((unif() - 0.5) * 4.0);
    for (int64_t i = 0; i < N; i++)
        bias[i] = (float)(unif() - 0.5);
    qs_convert(cpu, xf, QS_DTYPE_F32, xc, xd, M * K, M * K * esz);
    qs_convert(cpu, xc, xd, xw, QS_DTYPE_F32, M * K, M * K * 4);
    CU(cudaMalloc(&dx, (size_t)(M * K * esz)));
    CU(cudaMalloc(&dy, (size_t)(M * N) * 4));
    CU(cudaMalloc(&dbias, (size_t)N * 4));
    CU(cudaMemcpy(dx, xc, (size_t)(M * K * esz), cudaMemcpyHostToDevice));
    CU(cudaMemcpy(dbias, bias, (size_t)N * 4, cudaMemcpyHostToDevice));
    snprintf(label, sizeof label, "matmul %s M=%lld N=%lld K=%lld x %s", name, (long long)M,
             (long long)N, (long long)K, qs_dtype_name(xd));
    checks++;
    if (qs_cuda_matmul(msg, NULL, dx, xd, M, K, &b->w, N, dbias, dy, M * N * 4, NULL) != QS_OK) {
        report("FAIL %s: %s\n", label, qs_ctx_last_error(msg));
        ok = 0;
    } else {
        CU(cudaMemcpy(y, dy, (size_t)(M * N) * 4, cudaMemcpyDeviceToHost));
        for (int64_t m = 0; ok && m < M; m++)
            for (int64_t n = 0; ok && n < N; n++) {
                double e = bias[n], s = fabs(bias[n]);
                for (int64_t k = 0; k < K; k++) {
                    double p = (double)xw[m * K + k] * (double)b->dense[n * K + k];
                    e += p;
                    s += fabs(p);
                }
                if (!within_bound(y[m * N + n], e, s, K)) {
                    report("FAIL %s: y[%lld, %lld] = %.9g, exact %.9g, sum |x w| %.6g\n", label,
                           (long long)m, (long long)n, (double)y[m * N + n], e, s);
                    ok = 0;
                }
            }
    }
    if (ok && host) { /* a CUDA context's qs_matmul on host arrays: the same kernels */
        qs_ctx_params cp;
        qs_ctx *gpu;
        qs_weight hw = b->w;
        qs_ctx_params_init(&cp);
        cp.backend = QS_BACKEND_CUDA;
        if (qs_ctx_create(&cp, &gpu) != QS_OK) {
            report("FAIL %s: no CUDA context\n", label);
            ok = 0;
        } else {
            if (b->w.q) {
                hw.q = &b->hq.q;
            } else {
                void *hd = malloc((size_t)b->w.data_bytes);
                CU(cudaMemcpy(hd, b->w.data, (size_t)b->w.data_bytes, cudaMemcpyDeviceToHost));
                hw.data = hd;
            }
            hw.meta = b->meta;
            if (qs_matmul(gpu, NULL, xc, xd, M, K, &hw, N, bias, yh, M * N * 4) != QS_OK) {
                report("FAIL %s on a CUDA context: %s\n", label, qs_ctx_last_error(gpu));
                ok = 0;
            } else {
                ok = same("host-array y", yh, y, (size_t)(M * N) * 4, label);
            }
            if (!b->w.q)
                free((void *)hw.data);
            qs_ctx_destroy(gpu);
        }
    }
    failures += !ok;
    cudaFree(dx), cudaFree(dy), cudaFree(dbias);
    free(xf), free(xw), free(bias), free(y), free(yh), free(xc);
}

/* NaN and Inf in x on the GEMM's size: the scan hands over to the GEMV; NaN where the CPU. */
static void check_nan(const struct dweight *b, int64_t N, int64_t K, qs_ctx *cpu, qs_ctx *msg)
{
    const int64_t M = 32;
    float *x = malloc((size_t)(M * K) * 4), *yc = malloc((size_t)(M * N) * 4);
    float *yg = malloc((size_t)(M * N) * 4), *dx, *dy;
    qs_weight hw = b->w;
    int ok = 1;

    for (int64_t i = 0; i < M * K; i++)
        x[i] = (float)(unif() - 0.5);
    x[3 * K + 1] = NAN;
    x[5 * K + 2] = INFINITY;
    if (b->w.q)
        hw.q = &b->hq.q;
    hw.meta = b->meta;
    CU(cudaMalloc((void **)&dx, (size_t)(M * K) * 4));
    CU(cudaMalloc((void **)&dy, (size_t)(M * N) * 4));
    CU(cudaMemcpy(dx, x, (size_t)(M * K) * 4, cudaMemcpyHostToDevice));
    checks++;
    if (qs_matmul(cpu, NULL, x, QS_DTYPE_F32, M, K, &hw, N, NULL, yc, M * N * 4) != QS_OK ||
        qs_cuda_matmul(msg, NULL, dx, QS_DTYPE_F32, M, K, &b->w, N, NULL, dy, M * N * 4, NULL) !=
            QS_OK) {
        report("FAIL matmul NaN: %s\n", qs_ctx_last_error(msg));
        ok = 0;
    } else {
        CU(cudaMemcpy(yg, dy, (size_t)(M * N) * 4, cudaMemcpyDeviceToHost));
        for (int64_t i = 0; ok && i < M * N; i++)
            if (!!isnan(yc[i]) != !!isnan(yg[i]) || !!isinf(yc[i]) != !!isinf(yg[i])) {
                report("FAIL matmul NaN: y[%lld] cpu %g gpu %g\n", (long long)i, (double)yc[i],
                       (double)yg[i]);
                ok = 0;
            }
    }
    failures += !ok;
    cudaFree(dx), cudaFree(dy);
    free(x), free(yc), free(yg);
}

/* include/qsparse/cuda.h's stream rules. */
static void check_streams(qs_ctx *cpu, qs_ctx *msg)
{
    const int64_t rows = 64, cols = 256, n = rows * cols;
    qs_quant_params nv;
    struct planes h, d;
    float *x = malloc((size_t)n * 4), *dx, *dy, *back = malloc((size_t)n * 4);
    float *want = malloc((size_t)n * 4);
    cudaStream_t s;
    cudaGraph_t g;
    cudaGraphExec_t ge;
    qs_status st;
    int ok = 1;

    fill(x, n, 0.0);
    qs_quant_params_init(&nv, QS_FORMAT_NVFP4);
    planes_new(&h, &nv, rows, cols, 0);
    planes_new(&d, &nv, rows, cols, 1);
    qs_quantize(cpu, &nv, x, QS_DTYPE_F32, rows, cols, &h.q);
    qs_dequantize(cpu, &nv, &h.q, rows, cols, want, QS_DTYPE_F32, n * 4);
    planes_copy(&d, &h);
    CU(cudaMalloc((void **)&dx, (size_t)n * 4));
    CU(cudaMalloc((void **)&dy, (size_t)n * 4));
    CU(cudaMemcpy(dx, x, (size_t)n * 4, cudaMemcpyHostToDevice));
    CU(cudaStreamCreateWithFlags(&s, cudaStreamNonBlocking));
    checks++;
    /* a quantize that must bring a scale back cannot be captured; a dequantize can */
    CU(cudaStreamBeginCapture(s, cudaStreamCaptureModeThreadLocal));
    st = qs_cuda_quantize(msg, &nv, dx, QS_DTYPE_F32, rows, cols, &d.q, s);
    if (st != QS_ERR_UNSUPPORTED || !strstr(qs_ctx_last_error(msg), "capture")) {
        report("FAIL capture: NVFP4 quantize without a scale gave %d (%s)\n", st,
               qs_ctx_last_error(msg));
        ok = 0;
    }
    st = qs_cuda_dequantize(msg, &nv, &d.q, rows, cols, dy, QS_DTYPE_F32, n * 4, s);
    CU(cudaStreamEndCapture(s, &g));
    if (st != QS_OK) {
        report("FAIL capture: dequantize: %s\n", qs_ctx_last_error(msg));
        ok = 0;
    } else {
        CU(cudaMemset(dy, 0, (size_t)n * 4));
        CU(cudaGraphInstantiate(&ge, g, 0));
        CU(cudaGraphLaunch(ge, s));
        CU(cudaStreamSynchronize(s));
        CU(cudaMemcpy(back, dy, (size_t)n * 4, cudaMemcpyDeviceToHost));
        ok &= same("graph-launched dequantize", back, want, (size_t)n * 4, "capture");
        cudaGraphExecDestroy(ge);
    }
    cudaGraphDestroy(g);
    /* pageable host memory is refused by name, nothing is launched */
    st = qs_cuda_dequantize(msg, &nv, &d.q, rows, cols, back, QS_DTYPE_F32, n * 4, s);
    if (st != QS_ERR_INVALID_ARG || !strstr(qs_ctx_last_error(msg), "dst")) {
        report("FAIL a host dst gave %d (%s)\n", st, qs_ctx_last_error(msg));
        ok = 0;
    }
    report("%s streams: capture refused for a waiting call and taken for dequantize; host "
           "pointers refused\n",
           ok ? "ok  " : "FAIL");
    failures += !ok;
    cudaStreamDestroy(s);
    planes_free(&h, 0);
    planes_free(&d, 1);
    cudaFree(dx), cudaFree(dy);
    free(x), free(back), free(want);
}

void check_matmul_all(qs_ctx *cpu, qs_ctx *msg)
{
    const int64_t shapes[][3] = {
        {1, 300, 1024}, {3, 257, 4096}, {17, 65, 96}, {64, 192, 1024}, {130, 70, 256}};
    const int32_t xds[2] = {QS_DTYPE_F32, QS_DTYPE_BF16};
    const int32_t plain[3] = {QS_DTYPE_F32, QS_DTYPE_F16, QS_DTYPE_BF16};
    int before = failures;

    for (size_t s = 0; s < sizeof shapes / sizeof shapes[0]; s++) {
        int64_t M = shapes[s][0], N = shapes[s][1], K = shapes[s][2];
        float *w0 = malloc((size_t)(N * K) * 4);
        for (int64_t i = 0; i < N * K; i++)
            w0[i] = (float)(unif() * 2.0 - 1.0);
        for (int kind = 0; kind < 4; kind++) {
            int nformats = kind == QS_WEIGHT_DENSE || kind == QS_WEIGHT_SP24 ? 3 : ncases;
            for (int f = 0; f < nformats; f++) {
                struct dweight b;
                const struct fmt_case *c = nformats == 3 ? NULL : &cases[f];
                int64_t cols = kind >= QS_WEIGHT_SP24 ? K / 2 : K, bytes;
                char name[96];
                qs_quant_params qp;
                if (c) {
                    qp = params_of(c);
                    if (qs_quant_size(&qp, N, cols, QS_PLANE_DATA, &bytes) != QS_OK)
                        continue; /* INT8 groups that do not divide the columns */
                    if (kind == QS_WEIGHT_SP24_QUANT && f % 3 != 0)
                        continue; /* a third of the formats for 2:4 + quantized */
                }
                make_weight(cpu, c, kind, c ? 0 : plain[f], w0, N, K, &b);
                snprintf(name, sizeof name, "%s%s", kind >= QS_WEIGHT_SP24 ? "2:4 " : "",
                         c ? c->name : qs_dtype_name(plain[f]));
                for (int d = 0; d < 2; d++)
                    check_one(name, &b, M, N, K, xds[d], s == 2 && d == 0, cpu, msg);
                if (s == 2 && c) /* the CPU's y needs host planes: quantized weights */
                    check_nan(&b, N, K, cpu, msg);
                free_weight(&b);
            }
        }
        free(w0);
    }
    report("%s matmul: every weight, GEMV and GEMM shapes, within the bound\n",
           failures == before ? "ok  " : "FAIL");
    check_streams(cpu, msg);
}
