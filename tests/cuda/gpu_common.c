/* SPDX-License-Identifier: MIT */
/* The GPU check's shared helpers (gpu_common.h). */
#include "gpu_common.h"

int failures, checks;
static FILE *out;

void report_to(FILE *f)
{
    out = f;
}

void report(const char *fmt, ...)
{
    va_list ap;
    va_start(ap, fmt);
    vprintf(fmt, ap);
    va_end(ap);
    if (out) {
        va_start(ap, fmt);
        vfprintf(out, fmt, ap);
        va_end(ap);
        fflush(out);
    }
    fflush(stdout);
}

/* splitmix64 and a mix of normal values and the adversarial list */
static uint64_t rng_s;

void rnd_seed(uint64_t s)
{
    rng_s = s;
}

uint64_t rnd(void)
{
    uint64_t z = (rng_s += 0x9E3779B97F4A7C15ull);
    z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ull;
    z = (z ^ (z >> 27)) * 0x94D049BB133111EBull;
    return z ^ (z >> 31);
}

static float bits_f(uint32_t u)
{
    float f;
    memcpy(&f, &u, 4);
    return f;
}

static const float special[] = {
    0.0f,    -0.0f,    1.0f,      -1.0f,           0.5f,          INFINITY, -INFINITY,
    NAN,     1e-45f,   -3e-39f,   1.17549435e-38f, 3.4028235e38f, 448.0f,   464.0f,
    -480.0f, 57344.0f, 61440.0f,  65520.0f,        6.0f,          7.0f,     0.25f,
    0x1p-9f, 0x1p-10f, 0x1p-127f, 7.9999995f,      1e30f,
};

void fill(float *x, int64_t n, double p_special)
{
    for (int64_t i = 0; i < n; i++) {
        double u = (double)(rnd() >> 11) * 0x1p-53;
        if (u < p_special * 0.1)
            x[i] = bits_f(rnd() & 1 ? 0x7FA00000u : 0xFFA00001u);
        else if (u < p_special)
            x[i] = special[rnd() % (sizeof special / sizeof special[0])];
        else if (u < p_special + 0.02 && i > 0)
            x[i] = x[i - 1];
        else {
            double a = (double)(rnd() >> 11) * 0x1p-53, b = (double)(rnd() >> 11) * 0x1p-53;
            x[i] = (float)(sqrt(-2.0 * log(a + 1e-300)) * cos(6.283185307179586 * b) *
                           ldexp(1.0, (int)(rnd() % 40) - 20));
        }
    }
}

double unif(void)
{
    return (double)(rnd() >> 11) * 0x1p-53;
}

qs_ctx *cpu_ctx(void)
{
    qs_ctx_params cp;
    qs_ctx *c;
    qs_ctx_params_init(&cp);
    cp.backend = QS_BACKEND_CPU;
    if (qs_ctx_create(&cp, &c) != QS_OK)
        exit(2);
    return c;
}

void planes_new(struct planes *t, const qs_quant_params *p, int64_t rows, int64_t cols, int device)
{
    void **ptr[QS_PLANE_COUNT] = {&t->q.data, &t->q.scale, &t->q.zero_point, &t->q.nested_scale};
    int64_t *cap[QS_PLANE_COUNT] = {&t->q.data_bytes, &t->q.scale_bytes, &t->q.zero_point_bytes,
                                    &t->q.nested_scale_bytes};
    memset(t, 0, sizeof *t);
    for (int k = 0; k < QS_PLANE_COUNT; k++) {
        qs_quant_size(p, rows, cols, k, &t->bytes[k]);
        *cap[k] = t->bytes[k];
        if (!t->bytes[k])
            continue;
        if (device)
            CU(cudaMalloc(ptr[k], (size_t)t->bytes[k]));
        else
            *ptr[k] = malloc((size_t)t->bytes[k]);
    }
}

void planes_free(struct planes *t, int device)
{
    void *ptr[QS_PLANE_COUNT] = {t->q.data, t->q.scale, t->q.zero_point, t->q.nested_scale};
    for (int k = 0; k < QS_PLANE_COUNT; k++)
        if (ptr[k])
            device ? (void)cudaFree(ptr[k]) : free(ptr[k]);
}

void planes_copy(struct planes *to, const struct planes *from)
{
    void *dst[QS_PLANE_COUNT] = {to->q.data, to->q.scale, to->q.zero_point, to->q.nested_scale};
    const void *src[QS_PLANE_COUNT] = {from->q.data, from->q.scale, from->q.zero_point,
                                       from->q.nested_scale};
    for (int k = 0; k < QS_PLANE_COUNT; k++)
        if (from->bytes[k])
            CU(cudaMemcpy(dst[k], src[k], (size_t)from->bytes[k], cudaMemcpyDefault));
    to->q.global_scale = from->q.global_scale;
    to->q.nested_offset = from->q.nested_offset;
}

int same(const char *what, const void *a, const void *b, size_t n, const char *name)
{
    const uint8_t *x = a, *y = b;
    for (size_t i = 0; i < n; i++)
        if (x[i] != y[i]) {
            report("FAIL %s %s: byte %zu of %zu: gpu 0x%02x cpu 0x%02x\n", name, what, i, n, x[i],
                   y[i]);
            return 0;
        }
    return 1;
}

const struct fmt_case cases[] = {
    {"nf4", QS_FORMAT_NF4, 64, 0, 0, 1, 0, 0},
    {"nf4-dq", QS_FORMAT_NF4, 64, 1, 0, 1, 0, 0},
    {"nf4-b4096", QS_FORMAT_NF4, 4096, 0, 0, 1, 0, 0},
    {"fp4", QS_FORMAT_FP4, 64, 0, 0, 1, 0, 0},
    {"fp4-dq", QS_FORMAT_FP4, 128, 1, 0, 1, 0, 0},
    {"int8-tensor", QS_FORMAT_INT8, 0, 0, QS_GRAN_TENSOR, 1, 0, 0},
    {"int8-row", QS_FORMAT_INT8, 0, 0, QS_GRAN_ROW, 1, 0, 0},
    {"int8-row-asym", QS_FORMAT_INT8, 0, 0, QS_GRAN_ROW, 0, 0, 0},
    {"int8-group128", QS_FORMAT_INT8, 128, 0, QS_GRAN_GROUP, 1, 0, 0},
    {"int8-group128-asym", QS_FORMAT_INT8, 128, 0, QS_GRAN_GROUP, 0, 0, 0},
    {"llm-int8", QS_FORMAT_LLM_INT8, 0, 0, 0, 1, 0, 0},
    {"fp8-e4m3", QS_FORMAT_FP8_E4M3, 0, 0, 0, 1, 0, 0},
    {"fp8-e4m3-given", QS_FORMAT_FP8_E4M3, 0, 0, 0, 1, 0, 3.0f},
    {"fp8-e5m2", QS_FORMAT_FP8_E5M2, 0, 0, 0, 1, 0, 0},
    {"mxfp4", QS_FORMAT_MXFP4, 0, 0, 0, 1, 0, 0},
    {"mxfp4-rceil", QS_FORMAT_MXFP4, 0, 0, 0, 1, 1, 0},
    {"mxfp8", QS_FORMAT_MXFP8, 0, 0, 0, 1, 0, 0},
    {"nvfp4", QS_FORMAT_NVFP4, 0, 0, 0, 1, 0, 0},
    {"nvfp4-given", QS_FORMAT_NVFP4, 0, 0, 0, 1, 0, 0.01f},
};
const int ncases = (int)(sizeof cases / sizeof cases[0]);

qs_quant_params params_of(const struct fmt_case *c)
{
    qs_quant_params p;
    qs_quant_params_init(&p, c->format);
    if (c->block)
        p.block_size = c->block;
    p.double_quant = c->dq;
    if (c->format == QS_FORMAT_INT8) {
        p.granularity = c->gran;
        p.symmetric = c->sym;
    }
    p.scale_rounding = c->rounding;
    p.scale = c->scale;
    return p;
}
