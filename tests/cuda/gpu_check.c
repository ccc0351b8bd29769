/* SPDX-License-Identifier: MIT */
/*
 * The CUDA plugin on a GPU (run by tests/cuda/run.sh): every format and option through
 * qs_cuda_quantize / qs_cuda_dequantize on device memory, compared bit for bit with the CPU
 * backend (the scalar reference) on large and tail shapes and adversarial data, in f32, f16 and
 * bf16; 2:4 against the CPU; the matmul of every weight within include/qsparse/matmul.h's bound
 * (gpu_matmul.c); then the throughput table (gpu_bench.c). Plain C (no cmocka: the GPU machine
 * has none), linked with the static libqsparse and the CUDA runtime; prints one line per check
 * and a summary, exit status 0 only when every check passed.
 *
 * Usage: gpu_check [--bench] RESULTS_FILE
 */
#include "gpu_common.h"

/* One format and option on one shape and dtype: quantize and dequantize on both backends. */
static void check_quant(const char *name, const qs_quant_params *p, int64_t rows, int64_t cols,
                        int32_t dtype, qs_ctx *cpu, qs_ctx *gpu_msg)
{
    int64_t n = rows * cols, esz = qs_dtype_size(dtype), bytes;
    struct planes h, d, back;
    float *x = malloc((size_t)(n ? n : 1) * 4);
    void *src = malloc((size_t)(n ? n : 1) * (size_t)esz), *dsrc, *ddst;
    void *deq_cpu = malloc((size_t)(n ? n : 1) * (size_t)esz);
    void *deq_gpu = malloc((size_t)(n ? n : 1) * (size_t)esz);
    char label[160];
    qs_status sc, sg;
    int ok = 1;

    if (qs_quant_size(p, rows, cols, QS_PLANE_DATA, &bytes) != QS_OK)
        goto skip;
    snprintf(label, sizeof label, "%s %lldx%lld %s", name, (long long)rows, (long long)cols,
             qs_dtype_name(dtype));
    fill(x, n, 0.03);
    if (dtype == QS_DTYPE_F32)
        memcpy(src, x, (size_t)n * 4);
    else
        qs_convert(cpu, x, QS_DTYPE_F32, src, dtype, n, n * esz);
    planes_new(&h, p, rows, cols, 0);
    planes_new(&d, p, rows, cols, 1);
    planes_new(&back, p, rows, cols, 0);
    CU(cudaMalloc(&dsrc, (size_t)(n ? n : 1) * (size_t)esz));
    CU(cudaMalloc(&ddst, (size_t)(n ? n : 1) * (size_t)esz));
    CU(cudaMemcpy(dsrc, src, (size_t)(n * esz), cudaMemcpyHostToDevice));
    sc = qs_quantize(cpu, p, src, dtype, rows, cols, &h.q);
    sg = qs_cuda_quantize(gpu_msg, p, dsrc, dtype, rows, cols, &d.q, NULL);
    CU(cudaDeviceSynchronize());
    checks++;
    if (sc != QS_OK || sg != QS_OK) {
        report("FAIL %s: status cpu %d gpu %d (%s)\n", label, sc, sg, qs_ctx_last_error(gpu_msg));
        ok = 0;
    }
    {
        void *hp[QS_PLANE_COUNT] = {h.q.data, h.q.scale, h.q.zero_point, h.q.nested_scale};
        void *dp[QS_PLANE_COUNT] = {d.q.data, d.q.scale, d.q.zero_point, d.q.nested_scale};
        void *bp[QS_PLANE_COUNT] = {back.q.data, back.q.scale, back.q.zero_point,
                                    back.q.nested_scale};
        for (int k = 0; ok && k < QS_PLANE_COUNT; k++) {
            if (!h.bytes[k])
                continue;
            CU(cudaMemcpy(bp[k], dp[k], (size_t)h.bytes[k], cudaMemcpyDeviceToHost));
            ok = same(k == 0 ? "data plane" : "scale/zero/nested plane", bp[k], hp[k],
                      (size_t)h.bytes[k], label);
        }
    }
    if (ok && (memcmp(&h.q.global_scale, &d.q.global_scale, 4) ||
               memcmp(&h.q.nested_offset, &d.q.nested_offset, 4))) {
        report("FAIL %s: global_scale or nested_offset differ\n", label);
        ok = 0;
    }
    if (ok) {
        /* dequantize the CPU's planes on both */
        void *hp[QS_PLANE_COUNT] = {h.q.data, h.q.scale, h.q.zero_point, h.q.nested_scale};
        void *dp[QS_PLANE_COUNT] = {d.q.data, d.q.scale, d.q.zero_point, d.q.nested_scale};
        for (int k = 0; k < QS_PLANE_COUNT; k++)
            if (h.bytes[k])
                CU(cudaMemcpy(dp[k], hp[k], (size_t)h.bytes[k], cudaMemcpyHostToDevice));
        sc = qs_dequantize(cpu, p, &h.q, rows, cols, deq_cpu, dtype, n * esz);
        sg = qs_cuda_dequantize(gpu_msg, p, &d.q, rows, cols, ddst, dtype, n * esz, NULL);
        CU(cudaMemcpy(deq_gpu, ddst, (size_t)(n * esz), cudaMemcpyDeviceToHost));
        if (sc != QS_OK || sg != QS_OK) {
            report("FAIL %s dequantize: status cpu %d gpu %d (%s)\n", label, sc, sg,
                   qs_ctx_last_error(gpu_msg));
            ok = 0;
        } else {
            ok = same("dequantized", deq_gpu, deq_cpu, (size_t)(n * esz), label);
        }
    }
    failures += !ok;
    planes_free(&h, 0);
    planes_free(&back, 0);
    planes_free(&d, 1);
    cudaFree(dsrc);
    cudaFree(ddst);
skip:
    free(x);
    free(src);
    free(deq_cpu);
    free(deq_gpu);
}

/* 2:4 prune+compress (|w| or Wanda), compress by mask, decompress: GPU against CPU. */
static int64_t vb_dummy(int64_t n)
{
    return (n / 2 > 0 ? n / 2 : 1) * 4;
}

static void check_sp24(int64_t rows, int64_t cols, int wanda, qs_ctx *cpu, qs_ctx *msg)
{
    int64_t n = rows * cols, vb, mc;
    float *w = malloc((size_t)n * 4), *norms = malloc((size_t)cols * 4);
    float *vals = malloc((size_t)vb_dummy(n)), *vals_g = malloc((size_t)vb_dummy(n));
    float *dense = malloc((size_t)n * 4), *dense_g = malloc((size_t)n * 4);
    uint8_t *mask = malloc((size_t)n), *mask_g = malloc((size_t)n);
    uint16_t *meta, *meta_g;
    void *dw, *dn, *dv, *dm, *dk, *dd;
    char label[96];
    int ok = 1;

    qs_sp24_size(QS_DTYPE_F32, rows, cols, &vb, &mc);
    meta = malloc((size_t)mc * 2);
    meta_g = malloc((size_t)mc * 2);
    fill(w, n, 0.03);
    for (int64_t c = 0; c < cols; c++)
        norms[c] = (float)((rnd() >> 11) * 0x1p-53 * 4.0);
    snprintf(label, sizeof label, "sp24 %s %lldx%lld", wanda ? "wanda" : "|w|", (long long)rows,
             (long long)cols);
    CU(cudaMalloc(&dw, (size_t)n * 4));
    CU(cudaMalloc(&dn, (size_t)cols * 4));
    CU(cudaMalloc(&dv, (size_t)vb));
    CU(cudaMalloc(&dm, (size_t)mc * 2));
    CU(cudaMalloc(&dk, (size_t)n));
    CU(cudaMalloc(&dd, (size_t)n * 4));
    CU(cudaMemcpy(dw, w, (size_t)n * 4, cudaMemcpyHostToDevice));
    CU(cudaMemcpy(dn, norms, (size_t)cols * 4, cudaMemcpyHostToDevice));
    checks++;
    if (qs_sp24_prune_compress(cpu, w, QS_DTYPE_F32, rows, cols, wanda ? norms : NULL, vals, vb,
                               meta, mc, mask, n) != QS_OK ||
        qs_cuda_sp24_prune_compress(msg, dw, rows, cols, wanda ? dn : NULL, dv, vb, dm, mc, dk, n,
                                    NULL) != QS_OK) {
        report("FAIL %s prune: %s\n", label, qs_ctx_last_error(msg));
        ok = 0;
    }
    if (ok) {
        CU(cudaMemcpy(vals_g, dv, (size_t)vb, cudaMemcpyDeviceToHost));
        CU(cudaMemcpy(meta_g, dm, (size_t)mc * 2, cudaMemcpyDeviceToHost));
        CU(cudaMemcpy(mask_g, dk, (size_t)n, cudaMemcpyDeviceToHost));
        ok = same("values", vals_g, vals, (size_t)vb, label) &&
             same("meta", meta_g, meta, (size_t)mc * 2, label) &&
             same("mask", mask_g, mask, (size_t)n, label);
    }
    if (ok) { /* compress by the CPU's mask, then decompress */
        if (qs_cuda_sp24_compress(msg, dw, rows, cols, dk, dv, vb, dm, mc, NULL) != QS_OK) {
            report("FAIL %s compress: %s\n", label, qs_ctx_last_error(msg));
            ok = 0;
        } else {
            CU(cudaMemcpy(vals_g, dv, (size_t)vb, cudaMemcpyDeviceToHost));
            ok = same("compressed values", vals_g, vals, (size_t)vb, label);
        }
    }
    if (ok) {
        qs_sp24_decompress(cpu, vals, QS_DTYPE_F32, meta, mc, rows, cols, dense, n * 4);
        if (qs_cuda_sp24_decompress(msg, dv, dm, mc, rows, cols, dd, n * 4, NULL) != QS_OK) {
            report("FAIL %s decompress: %s\n", label, qs_ctx_last_error(msg));
            ok = 0;
        } else {
            CU(cudaMemcpy(dense_g, dd, (size_t)n * 4, cudaMemcpyDeviceToHost));
            ok = same("decompressed", dense_g, dense, (size_t)n * 4, label);
        }
    }
    failures += !ok;
    cudaFree(dw), cudaFree(dn), cudaFree(dv), cudaFree(dm), cudaFree(dk), cudaFree(dd);
    free(w), free(norms), free(vals), free(vals_g), free(dense), free(dense_g), free(mask);
    free(mask_g), free(meta), free(meta_g);
}

int main(int argc, char **argv)
{
    const int64_t shapes[][2] = {{1, 1},     {1, 7},     {3, 33},      {5, 100},     {7, 1000},
                                 {2, 16385}, {64, 4096}, {1, 1 << 20}, {1023, 1025}, {4096, 4096}};
    const int32_t dtypes[3] = {QS_DTYPE_F32, QS_DTYPE_F16, QS_DTYPE_BF16};
    int do_bench = argc == 3 && strcmp(argv[1], "--bench") == 0;
    qs_ctx *cpu, *msg;
    struct cudaDeviceProp prop;
    FILE *out;

    if (argc != 2 + do_bench || !(out = fopen(argv[argc - 1], "w"))) {
        fprintf(stderr, "usage: gpu_check [--bench] RESULTS_FILE\n");
        return 2;
    }
    cpu = cpu_ctx();
    msg = cpu_ctx();
    report_to(out);
    rnd_seed(12345);
    CU(cudaGetDeviceProperties(&prop, 0));
    report("device: %s, compute capability %d.%d, %d SMs\n", prop.name, prop.major, prop.minor,
           prop.multiProcessorCount);
    if (!qs_backend_available(QS_BACKEND_CUDA)) {
        report("FAIL the CUDA backend is not available: %s\n", qs_backend_message(QS_BACKEND_CUDA));
        return 1;
    }
    for (int c = 0; c < ncases; c++) {
        qs_quant_params p = params_of(&cases[c]);
        int before = failures;
        for (size_t s = 0; s < sizeof shapes / sizeof shapes[0]; s++)
            for (int d = 0; d < 3; d++) {
                if (shapes[s][0] * shapes[s][1] > (1 << 20) + 4096 && d > 0)
                    continue; /* the largest shapes in f32 only, to keep the run short */
                check_quant(cases[c].name, &p, shapes[s][0], shapes[s][1], dtypes[d], cpu, msg);
            }
        report("%s %s: quantize + dequantize, %d shapes x dtypes\n",
               failures == before ? "ok  " : "FAIL", cases[c].name,
               (int)(sizeof shapes / sizeof shapes[0]) * 3);
    }
    {
        const int64_t sshapes[][2] = {{1, 4}, {3, 20}, {7, 100}, {5, 1028}, {4096, 4096}};
        int before = failures;
        for (size_t s = 0; s < sizeof sshapes / sizeof sshapes[0]; s++)
            for (int wanda = 0; wanda < 2; wanda++)
                check_sp24(sshapes[s][0], sshapes[s][1], wanda, cpu, msg);
        report("%s sp24: prune, compress, decompress against the CPU\n",
               failures == before ? "ok  " : "FAIL");
    }
    check_matmul_all(cpu, msg);
    if (do_bench)
        bench(msg);
    report("SUMMARY %d checks, %d failed\n", checks, failures);
    fclose(out);
    qs_ctx_destroy(cpu);
    qs_ctx_destroy(msg);
    return failures ? 1 : 0;
}
