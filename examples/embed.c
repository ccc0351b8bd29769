/* SPDX-License-Identifier: MIT */
/* Embedding libqsparse: quantize a weight vector to NF4 and back (build: see examples/README). */
#include <qsparse.h>
#include <stdio.h>

int main(void)
{
    float w[64], back[64], absmax[1];
    unsigned char codes[32];
    for (int i = 0; i < 64; i++)
        w[i] = (float)(i - 32) / 32.0f;
    qs_ctx *ctx;
    qs_quant_params p;
    qs_qtensor q = {.data = codes, .data_bytes = 32, .scale = absmax, .scale_bytes = 4};
    qs_quant_params_init(&p, QS_FORMAT_NF4);
    if (qs_ctx_create(NULL, &ctx) != QS_OK)
        return 1;
    qs_status st = qs_quantize(ctx, &p, w, QS_DTYPE_F32, 1, 64, &q);
    if (st == QS_OK)
        st = qs_dequantize(ctx, &p, &q, 1, 64, back, QS_DTYPE_F32, sizeof back);
    if (st != QS_OK)
        fprintf(stderr, "error: %s\n", qs_ctx_last_error(ctx));
    else
        printf("%s on %s: w[4] = %g -> code %x -> %g\n", qs_version_string(),
               qs_ctx_isa_name(ctx), w[4], codes[2] >> 4, back[4]);
    qs_ctx_destroy(ctx);
    return st == QS_OK ? 0 : 1;
}
