/* SPDX-License-Identifier: MIT */
/*
 * An inference engine's decode step with libqsparse: a layer's weights are quantized to NF4 with
 * double quantization once, packed once for this context's kernels (qs_matmul_pack), and then
 * multiplied with one token's activations per step (qs_matmul, M = 1). The packed weight gives
 * the same bits as the weight it came from; the program checks that, and prints the ISA tier
 * and the time per step of both.
 *
 *   ./decode_step [N K steps]     (default 4096 4096 50)
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include <qsparse.h>

static double now(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + 1e-9 * (double)ts.tv_nsec;
}

static int fail(qs_ctx *ctx, const char *what)
{
    fprintf(stderr, "%s: %s\n", what, qs_ctx_last_error(ctx));
    return 1;
}

int main(int argc, char **argv)
{
    int64_t N = argc > 1 ? atoll(argv[1]) : 4096, K = argc > 2 ? atoll(argv[2]) : 4096;
    int steps = argc > 3 ? atoi(argv[3]) : 50;
    float *w = malloc((size_t)(N * K) * sizeof(float)), *x = malloc((size_t)K * sizeof(float));
    float *y0 = malloc((size_t)N * sizeof(float)), *y1 = malloc((size_t)N * sizeof(float));
    int64_t bytes[QS_PLANE_COUNT], packed_bytes = 0;
    void *planes[QS_PLANE_COUNT] = {NULL}, *packed = NULL;
    qs_quant_params p;
    qs_qtensor q;
    qs_weight wq, wp;
    qs_ctx *ctx;
    int rc = 1;

    if (!w || !x || !y0 || !y1 || N < 1 || K < 1 || steps < 1 || qs_ctx_create(NULL, &ctx) != QS_OK)
        return 1;
    for (int64_t i = 0; i < N * K; i++) /* a deterministic stand-in for a trained layer */
        w[i] = (float)((i * 2654435761u) % 2001) / 20000.0f - 0.05f;
    for (int64_t k = 0; k < K; k++)
        x[k] = (float)(k % 17) / 17.0f - 0.5f;

    /* quantize once: NF4, blocks of 64, absmax double-quantized (4.127 bits per weight) */
    qs_quant_params_init(&p, QS_FORMAT_NF4);
    p.double_quant = 1;
    memset(&q, 0, sizeof q);
    for (int i = 0; i < QS_PLANE_COUNT; i++) {
        qs_quant_size(&p, N, K, i, &bytes[i]);
        planes[i] = bytes[i] ? malloc((size_t)bytes[i]) : NULL;
    }
    q.data = planes[QS_PLANE_DATA], q.data_bytes = bytes[QS_PLANE_DATA];
    q.scale = planes[QS_PLANE_SCALE], q.scale_bytes = bytes[QS_PLANE_SCALE];
    q.nested_scale = planes[QS_PLANE_NESTED_SCALE];
    q.nested_scale_bytes = bytes[QS_PLANE_NESTED_SCALE];
    if (qs_quantize(ctx, &p, w, QS_DTYPE_F32, N, K, &q) != QS_OK) {
        rc = fail(ctx, "qs_quantize");
        goto done;
    }
    memset(&wq, 0, sizeof wq);
    wq.kind = QS_WEIGHT_QUANT;
    wq.quant = &p;
    wq.q = &q;

    /* pack once for this context (its tier and this build) */
    if (qs_matmul_pack_size(ctx, &wq, N, K, &packed_bytes) != QS_OK ||
        !(packed = malloc((size_t)packed_bytes)) ||
        qs_matmul_pack(ctx, &wq, N, K, packed, packed_bytes) != QS_OK) {
        rc = fail(ctx, "qs_matmul_pack");
        goto done;
    }
    memset(&wp, 0, sizeof wp);
    wp.kind = QS_WEIGHT_PACKED;
    wp.data = packed;
    wp.data_bytes = packed_bytes;

    /* the decode steps: one token's activations against the layer, as unpacked and packed */
    double t[2] = {1e30, 1e30};
    for (int s = 0; s < steps; s++)
        for (int v = 0; v < 2; v++) {
            double t0 = now();
            if (qs_matmul(ctx, NULL, x, QS_DTYPE_F32, 1, K, v ? &wp : &wq, N, NULL, v ? y1 : y0,
                          N * (int64_t)sizeof(float)) != QS_OK) {
                rc = fail(ctx, "qs_matmul");
                goto done;
            }
            double dt = now() - t0;
            t[v] = dt < t[v] ? dt : t[v];
        }
    if (memcmp(y0, y1, (size_t)N * sizeof(float)) != 0) {
        fprintf(stderr, "the packed weight gave other bits than the weight\n");
        goto done;
    }
    printf("%s on %s: %lld x %lld NF4 (double quant), packed %lld bytes; y[0] = %.6f; "
           "best step %.3f ms unpacked, %.3f ms packed (same bits)\n",
           qs_version_string(), qs_ctx_isa_name(ctx), (long long)N, (long long)K,
           (long long)packed_bytes, (double)y1[0], t[0] * 1e3, t[1] * 1e3);
    rc = 0;
done:
    for (int i = 0; i < QS_PLANE_COUNT; i++)
        free(planes[i]);
    free(packed);
    free(w);
    free(x);
    free(y0);
    free(y1);
    qs_ctx_destroy(ctx);
    return rc;
}
