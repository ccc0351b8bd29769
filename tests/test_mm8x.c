/* SPDX-License-Identifier: MIT */
/*
 * The int8-activation matmul at GEMM shapes and for the formats whose integer path came with
 * the panel kernels (slots mm_mxfp4a8, mm_nvfp4a8, mm_e4m3a8; src/ref/mm8_ref.c): every
 * registered implementation of every a8 slot that the CPU and the OS allow (AMX entries after
 * the tile-state request), bit for bit against the reference, over x rows across and past 16-
 * and 32-row tiles, W rows across and past 32-row panels, K across 256- and 512-column chunks
 * with every tail, every scale layout of INT8 (row, tensor, groups the tiles take and ones they
 * hand on), NF4 / FP4 blocks that tile the rows, hold whole rows or fall back, NaN / infinite /
 * zero / subnormal scales of every format, E4M3 NaN codes, and K = QS_MATMUL_INT8_MAX_K at the
 * largest integers. Then qs_matmul with int8 activations against MXFP4, NVFP4 and FP8 E4M3
 * weights: against a model written here from include/qsparse/matmul.h (GEMV and GEMM paths,
 * outlier columns, bias), the GEMV and GEMM paths against each other, and the documented error
 * bound against f32 activations.
 */
#include "common.h"

#include <math.h>

#include "core/internal.h"
#include "core/kernels.h"
#include "qsparse/matmul.h"
#include "ref/mm8_ref.h"
#include "ref/ref.h"

#define LDO_PAD 5
#define SENTINEL -12345.0f
#define MAX_ENTRIES 8

static const int32_t a8_slots[] = {QS_SLOT_mm_w8a8,    QS_SLOT_mm_nf4a8,   QS_SLOT_mm_fp4a8,
                                   QS_SLOT_mm_mxfp4a8, QS_SLOT_mm_nvfp4a8, QS_SLOT_mm_e4m3a8};

/* The entries of `slot` this process may run (AMX ones once the OS granted the tile state, as
 * src/gemm/plan.c asks for it), the reference first. */
static int entries_of(int32_t slot, const struct qs_kernel_entry **out)
{
    uint32_t isa = qs_cpu_isa();
    int32_t count = 0, k = 0;
    const struct qs_kernel_entry *e = qs_kernel_entries(&count);

    for (int32_t i = 0; i < count && k < MAX_ENTRIES; i++) {
        if (e[i].slot != slot || (e[i].isa & ~isa) != 0)
            continue;
#if defined(__x86_64__)
        if ((e[i].isa & (QS_ISA_AMX_TILE | QS_ISA_AMX_INT8)) && !qs_x86_amx_request())
            continue;
#endif
        out[k++] = &e[i];
    }
    assert_true(k >= 1 && out[0]->rank == 0);
    return k;
}

static int8_t rand_x(t_rng *r)
{
    uint64_t v = t_next(r) % 16;
    return (int8_t)(v == 0 ? 127 : v == 1 ? -127 : (int)(t_next(r) % 255) - 127);
}

/* An f32 scale: mostly ordinary, one in 12 one of the special classes. */
static float rand_scale(t_rng *r)
{
    static const float special[] = {0.0f, -0.0f, 1e-40f, -3e-39f, 3e38f, -2.5f};
    uint64_t v = t_next(r) % 24;
    if (v == 0)
        return NAN;
    if (v == 1)
        return t_next(r) % 2 ? INFINITY : -INFINITY;
    if (v < 4)
        return special[t_next(r) % 6];
    return (float)(t_unif(r) * 0.02 + 1e-4);
}

/* The xsum unit of a slot (struct qs_mm_traits.a8_xsum; 0: the view's group). */
static int64_t xsum_unit(int32_t slot, const qs_mm_weight *w)
{
    return slot == QS_SLOT_mm_w8a8 || slot == QS_SLOT_mm_mxfp4a8 || slot == QS_SLOT_mm_nvfp4a8
               ? w->group
               : 64;
}

static void sums(const int8_t *x, int64_t m, int64_t kk, int64_t unit, int32_t *xs)
{
    int64_t nu = kk > 0 ? (kk + unit - 1) / unit : 0;
    for (int64_t i = 0; i < m; i++)
        for (int64_t u = 0; u < nu; u++) {
            int32_t a = 0;
            for (int64_t k = u * unit; k < (u + 1) * unit && k < kk; k++)
                a += x[i * kk + k];
            xs[i * nu + u] = a;
        }
}

/* Every entry of the slot against the reference on one weight view; returns the comparisons. */
static int64_t compare_entries(int32_t slot, const qs_mm_weight *w, const int8_t *x,
                               const int32_t *xs, int64_t m, int64_t r0, int64_t rows,
                               const char *what)
{
    const struct qs_kernel_entry *e[MAX_ENTRIES];
    int ne = entries_of(slot, e);
    int64_t ldo = rows + LDO_PAD, n = m * ldo, checked = 0;
    float *want = malloc((size_t)n * 4), *got = malloc((size_t)n * 4);

    for (int64_t i = 0; i < n; i++)
        want[i] = SENTINEL;
    ((qs_mm_a8_fn *)e[0]->fn)(x, xs, m, w, r0, rows, want, ldo);
    for (int j = 1; j < ne; j++) {
        for (int64_t i = 0; i < n; i++)
            got[i] = SENTINEL;
        ((qs_mm_a8_fn *)e[j]->fn)(x, xs, m, w, r0, rows, got, ldo);
        for (int64_t i = 0; i < n; i++)
            if (t_bits(got[i]) != t_bits(want[i])) {
                print_error("%s %s (m %lld, rows %lld from %lld, k %lld, group %lld): out[%lld]"
                            "[%lld] = %a, want %a\n",
                            e[j]->name, what, (long long)m, (long long)rows, (long long)r0,
                            (long long)w->k, (long long)w->group, (long long)(i / ldo),
                            (long long)(i % ldo), (double)got[i], (double)want[i]);
                fail();
            }
        checked++;
    }
    free(want);
    free(got);
    return checked;
}

/* ---- kernels at GEMM shapes ------------------------------------------------------------------ */

static const int64_t shape_m[] = {1, 3, 16, 17, 33};
static const int64_t shape_rows[] = {5, 32, 33, 70};

typedef struct {
    int64_t k, group;
    int tensor, zp, nan_codes;
    float g; /* NVFP4 tensor scale, FP8 scale */
} layout;

/* The slot's weight view of layout l over the planes (codes, f32 scales, scale bytes, zero
 * points), for rows 0 ... nrows - 1. */
static qs_mm_weight make_view(int32_t slot, const layout *l, int64_t nrows, uint8_t *codes,
                              float *scales, uint8_t *sbytes, int8_t *zp, float *fscale, t_rng *r)
{
    int64_t k = l->k;
    qs_mm_weight w = {.n = nrows, .k = k, .data = codes, .scale_mul = 1.0f};

    if (slot == QS_SLOT_mm_w8a8) {
        int64_t ng = (k + l->group - 1) / l->group;
        w.row_bytes = k;
        w.scale = scales;
        w.group = l->group;
        w.sstride = l->tensor ? 0 : ng;
        w.zp = l->zp ? zp : NULL;
    } else if (slot == QS_SLOT_mm_nf4a8 || slot == QS_SLOT_mm_fp4a8) {
        w.scale = scales;
        w.group = l->group;
    } else if (slot == QS_SLOT_mm_e4m3a8) {
        w.row_bytes = k;
        *fscale = l->g;
        w.scale = fscale;
        w.group = k;
        if (!l->nan_codes)
            for (int64_t i = 0; i < nrows * k; i++)
                if ((codes[i] & 0x7F) == 0x7F)
                    codes[i] = (uint8_t)(codes[i] ^ (t_next(r) % 2 ? 1 : 3));
    } else {
        int64_t block = slot == QS_SLOT_mm_mxfp4a8 ? 32 : 16;
        if (l->zp) /* moderate scales (2^-8 ... 2^6; E4M3 0.25 ... 4), where one bit shows */
            for (int64_t i = 0; i < nrows * k; i++)
                sbytes[i] = (uint8_t)(slot == QS_SLOT_mm_mxfp4a8 ? 120 + t_next(r) % 15
                                                                 : 0x30 + t_next(r) % 32);
        w.row_bytes = (k + 1) / 2;
        w.scale = sbytes;
        w.group = block;
        w.sstride = (k + block - 1) / block;
        w.s_global = l->g;
    }
    return w;
}

static void sweep_layouts(int32_t slot, const layout *ls, int nl)
{
    t_rng r = {0x6E11 + (uint64_t)slot};
    int64_t checked = 0, maxk = 0, maxr = 70 + 2, maxm = 33;

    for (int i = 0; i < nl; i++)
        maxk = ls[i].k > maxk ? ls[i].k : maxk;
    uint8_t *codes = malloc((size_t)(maxr * maxk) + 1), *sbytes = malloc((size_t)(maxr * maxk));
    float *scales = malloc((size_t)(maxr * maxk) * 4), fscale;
    int8_t *zp = malloc((size_t)(maxr * maxk)), *x = malloc((size_t)(maxm * maxk));
    int32_t *xs = malloc((size_t)(maxm * maxk + 1) * 4);

    for (int i = 0; i < nl; i++) {
        const layout *l = &ls[i];
        for (size_t mi = 0; mi < sizeof shape_m / sizeof shape_m[0]; mi++)
            for (size_t ri = 0; ri < sizeof shape_rows / sizeof shape_rows[0]; ri++) {
                int64_t m = shape_m[mi], rows = shape_rows[ri], r0 = (mi + ri) % 3 == 1 ? 2 : 0;
                if ((mi + ri + (size_t)i) % 2 && m > 3 && rows > 5)
                    continue; /* half of the larger shapes per layout: they all come round */
                for (int64_t j = 0; j < maxr * maxk; j++) {
                    codes[j] = (uint8_t)t_next(&r);
                    sbytes[j] = (uint8_t)t_next(&r);
                    zp[j] = (int8_t)((int)(t_next(&r) % 256) - 128);
                    scales[j] = rand_scale(&r);
                }
                for (int64_t j = 0; j < m * l->k; j++)
                    x[j] = rand_x(&r);
                qs_mm_weight w =
                    make_view(slot, l, r0 + rows, codes, scales, sbytes, zp, &fscale, &r);
                sums(x, m, l->k, xsum_unit(slot, &w), xs);
                checked += compare_entries(slot, &w, x, xs, m, r0, rows, "layout");
            }
    }
    print_message("%s: %lld comparisons at GEMM shapes\n", qs_slot_name(slot), (long long)checked);
    free(codes);
    free(sbytes);
    free(scales);
    free(zp);
    free(x);
    free(xs);
}

static void test_w8a8_shapes(void **state)
{
    /* whole rows (row, tensor) with K past 512-column chunks and every tail; groups the tiles
     * take (16 ... 512) and ones they hand on (8, 100); zero points on groups and rows */
    static const layout ls[] = {
        {64, 64, 0, 0, 0, 0},     {100, 100, 0, 1, 0, 0}, {1000, 1000, 1, 0, 0, 0},
        {1537, 1537, 0, 1, 0, 0}, {256, 16, 0, 1, 0, 0},  {320, 32, 0, 0, 0, 0},
        {576, 64, 0, 1, 0, 0},    {768, 128, 1, 0, 0, 0}, {1024, 256, 0, 1, 0, 0},
        {1536, 512, 0, 0, 0, 0},  {200, 8, 0, 1, 0, 0},   {600, 100, 0, 0, 0, 0},
    };
    (void)state;
    sweep_layouts(QS_SLOT_mm_w8a8, ls, (int)(sizeof ls / sizeof ls[0]));
}

/* NF4 / FP4: blocks that tile the rows (64 ... 512), that the panel kernels hand on (1024, 32,
 * blocks not dividing K), and blocks holding whole rows (4096 over K = 1024, 256 over K = 64). */
static const layout bnb4_layouts[] = {
    {64, 64, 0, 0, 0, 0},    {320, 64, 0, 0, 0, 0},   {1024, 128, 0, 0, 0, 0},
    {1280, 256, 0, 0, 0, 0}, {1536, 512, 0, 0, 0, 0}, {2048, 1024, 0, 0, 0, 0},
    {256, 32, 0, 0, 0, 0},   {192, 128, 0, 0, 0, 0},  {1024, 4096, 0, 0, 0, 0},
    {64, 256, 0, 0, 0, 0},   {520, 4160, 0, 0, 0, 0}, {98, 64, 0, 0, 0, 0},
};

static void test_nf4a8_shapes(void **state)
{
    (void)state;
    sweep_layouts(QS_SLOT_mm_nf4a8, bnb4_layouts,
                  (int)(sizeof bnb4_layouts / sizeof bnb4_layouts[0]));
}

static void test_fp4a8_shapes(void **state)
{
    (void)state;
    sweep_layouts(QS_SLOT_mm_fp4a8, bnb4_layouts,
                  (int)(sizeof bnb4_layouts / sizeof bnb4_layouts[0]));
}

/* MX / NVFP4: every scale byte comes round (E8M0 0x00, 0x01, 0xFE, NaN 0xFF; E4M3 0, subnormal,
 * NaN 0x7F), or moderate ones (zp field set); NVFP4 tensor scales of every class; K with short
 * last blocks and chunk tails. */
static const layout e2m1_layouts[] = {
    {32, 0, 0, 0, 0, 0.37f},   {50, 0, 0, 0, 0, NAN},     {64, 0, 0, 0, 0, INFINITY},
    {256, 0, 0, 0, 0, 0.0f},   {300, 0, 0, 0, 0, 1e-40f}, {1000, 0, 0, 0, 0, -2.0f},
    {1024, 0, 0, 0, 0, 3e30f}, {513, 0, 0, 0, 0, 0.001f}, {320, 0, 0, 1, 0, 0.37f},
    {1000, 0, 0, 1, 0, 1.5f},  {77, 0, 0, 1, 0, 1e-3f},
};

static void test_mxfp4a8_shapes(void **state)
{
    (void)state;
    sweep_layouts(QS_SLOT_mm_mxfp4a8, e2m1_layouts,
                  (int)(sizeof e2m1_layouts / sizeof e2m1_layouts[0]));
}

static void test_nvfp4a8_shapes(void **state)
{
    (void)state;
    sweep_layouts(QS_SLOT_mm_nvfp4a8, e2m1_layouts,
                  (int)(sizeof e2m1_layouts / sizeof e2m1_layouts[0]));
}

/* FP8 E4M3: K with every tail of the 64-column pieces and 256-column chunks, NaN codes in some
 * layouts, tensor scales of every class. */
static void test_e4m3a8_shapes(void **state)
{
    static const layout ls[] = {
        {1, 0, 0, 0, 0, 0.01f},     {63, 0, 0, 0, 1, 0.5f},    {64, 0, 0, 0, 0, NAN},
        {65, 0, 0, 0, 0, INFINITY}, {256, 0, 0, 0, 1, 1e-42f}, {300, 0, 0, 0, 0, 0.0f},
        {1000, 0, 0, 0, 0, -3.0f},  {1024, 0, 0, 0, 1, 2e-3f}, {777, 0, 0, 0, 0, 1e30f},
    };
    (void)state;
    sweep_layouts(QS_SLOT_mm_e4m3a8, ls, (int)(sizeof ls / sizeof ls[0]));
}

/* K = QS_MATMUL_INT8_MAX_K with the largest integers of the new formats: x = +-127 against
 * +-12 (E2M1 6.0) and +-229376 (E4M3 448), scales 1, where every block's sum is the largest it
 * can be; the results are exact (powers of two and small multiples) and equal the reference's
 * on every entry. Also every entry with 17 x rows and 33 W rows there (whole AMX tiles, partial
 * ones, both panel groups). */
static void test_max_k(void **state)
{
    const int64_t K = QS_MATMUL_INT8_MAX_K, m = 17, rows = 33;
    int8_t *x = malloc((size_t)(m * K));
    uint8_t *codes = malloc((size_t)(rows * K)), *sb = malloc((size_t)(rows * K / 16));
    int32_t *xs = malloc((size_t)(m * K) * 4);
    float one = 1.0f;

    (void)state;
    for (int v = 0; v < 4; v++) {
        int8_t xv = v % 2 ? -127 : 127;
        memset(x, xv, (size_t)(m * K));
        for (int s = 3; s < 6; s++) {
            int32_t slot = a8_slots[s];
            qs_mm_weight w = {.n = rows, .k = K, .data = codes, .scale_mul = 1.0f};
            double per; /* one element's product */
            if (slot == QS_SLOT_mm_e4m3a8) {
                memset(codes, v < 2 ? 0x7E : 0xFE, (size_t)(rows * K));
                w.row_bytes = K;
                w.scale = &one;
                w.group = K;
                per = xv * (v < 2 ? 448.0 : -448.0);
            } else {
                memset(codes, v < 2 ? 0x77 : 0xFF, (size_t)(rows * K / 2));
                /* E8M0 127 = 1.0; E4M3 0x38 = 1.0 */
                memset(sb, slot == QS_SLOT_mm_mxfp4a8 ? 127 : 0x38, (size_t)(rows * K / 16));
                w.row_bytes = K / 2;
                w.scale = sb;
                w.group = slot == QS_SLOT_mm_mxfp4a8 ? 32 : 16;
                w.sstride = K / w.group;
                w.s_global = 1.0f;
                per = xv * (v < 2 ? 6.0 : -6.0);
            }
            sums(x, m, K, xsum_unit(slot, &w), xs);
            compare_entries(slot, &w, x, xs, m, 0, rows, "max K");
            /* the value itself: K products of one size, exact in f32 (2^16 * 127 * 6 or 448) */
            const struct qs_kernel_entry *e[MAX_ENTRIES];
            int ne = entries_of(slot, e);
            for (int j = 0; j < ne; j++) {
                float out[2];
                ((qs_mm_a8_fn *)e[j]->fn)(x, xs, 1, &w, 0, 2, out, 2);
                if (out[0] != (float)(per * (double)K) || out[1] != out[0]) {
                    print_error("%s at K = %lld: %a, want %a\n", e[j]->name, (long long)K,
                                (double)out[0], per * (double)K);
                    fail();
                }
            }
        }
    }
    free(x);
    free(codes);
    free(sb);
    free(xs);
}

/* ---- qs_matmul against the definition -------------------------------------------------------- */

typedef struct {
    qs_quant_params p;
    qs_qtensor q;
    qs_weight w;
} qw;

static void qw_make(qs_ctx *ctx, const float *w0, int64_t N, int64_t K, int32_t fmt, qw *o)
{
    void **ptr[QS_PLANE_COUNT] = {&o->q.data, &o->q.scale, &o->q.zero_point, &o->q.nested_scale};
    int64_t *cap[QS_PLANE_COUNT] = {&o->q.data_bytes, &o->q.scale_bytes, &o->q.zero_point_bytes,
                                    &o->q.nested_scale_bytes};

    memset(o, 0, sizeof *o);
    qs_quant_params_init(&o->p, fmt);
    for (int i = 0; i < QS_PLANE_COUNT; i++) {
        int64_t b = 0;
        assert_int_equal(qs_quant_size(&o->p, N, K, i, &b), QS_OK);
        *ptr[i] = b > 0 ? malloc((size_t)b) : NULL;
        *cap[i] = b;
    }
    assert_int_equal(qs_quantize(ctx, &o->p, w0, QS_DTYPE_F32, N, K, &o->q), QS_OK);
    o->w.kind = QS_WEIGHT_QUANT;
    o->w.quant = &o->p;
    o->w.q = &o->q;
}

static void qw_free(qw *o)
{
    free(o->q.data);
    free(o->q.scale);
    free(o->q.zero_point);
    free(o->q.nested_scale);
}

/* The definition of include/qsparse/matmul.h for y[m, n] (MXFP4, NVFP4, FP8 E4M3), from the
 * codes and statistics qs_int8_vectorwise_quant gives and the dequantized weight wd (for the
 * outlier columns), written from the text: its own element values and block steps. */
static float model(const qw *o, const int8_t *codes, const float *stats, const float *x,
                   const float *wd, const int64_t *cols, int64_t nout, int64_t K, int64_t m,
                   int64_t n, const float *bias)
{
    static const double e2m1[8] = {0, 0.5, 1, 1.5, 2, 3, 4, 6};
    int32_t fmt = o->p.format;
    const uint8_t *d = o->q.data;
    float t = 0.0f, v, out = 0.0f;

    if (fmt == QS_FORMAT_FP8_E4M3) {
        float u = *(const float *)o->q.scale * 0x1p-9f;
        for (int64_t k0 = 0; k0 < K; k0 += 64) {
            int64_t a = 0;
            int nan = 0;
            for (int64_t k = k0; k < k0 + 64 && k < K; k++) {
                uint8_t c = d[n * K + k];
                int e = (c >> 3) & 15, f = c & 7;
                double val = e ? ldexp(8 + f, e - 10) : ldexp(f, -9);
                nan |= (c & 0x7F) == 0x7F;
                a += (int64_t)codes[m * K + k] * (int64_t)ldexp((c & 0x80) ? -val : val, 9);
            }
            assert_true(a == (int32_t)a);
            t = nan ? NAN : fmaf((float)a, u, t);
        }
    } else {
        int mx = fmt == QS_FORMAT_MXFP4;
        int64_t block = mx ? 32 : 16, rb = (K + 1) / 2, nb = (K + block - 1) / block;
        const uint8_t *sb = o->q.scale;
        for (int64_t b = 0; b < nb; b++) {
            int64_t a = 0;
            for (int64_t k = b * block; k < (b + 1) * block && k < K; k++) {
                uint8_t byte = d[n * rb + k / 2], c = (k & 1) ? byte >> 4 : byte & 15;
                double w2 = 2.0 * e2m1[c & 7] * ((c & 8) ? -1.0 : 1.0);
                a += (int64_t)codes[m * K + k] * (int64_t)w2;
            }
            uint8_t s = sb[n * nb + b];
            double half = mx ? (s == 0xFF ? NAN : ldexp(1.0, s - 128))
                             : ((s & 0x7F) == 0x7F ? NAN
                                : ((s >> 3) & 15)  ? ldexp(8 + (s & 7), ((s >> 3) & 15) - 11)
                                                   : ldexp(s & 7, -10));
            t = fmaf((float)a, (float)half, t);
        }
        if (!mx)
            t = t * o->q.global_scale;
    }
    v = t * (stats[m] / 127.0f);
    for (int64_t c = 0; c < nout; c++)
        out = out + x[m * K + cols[c]] * wd[n * K + cols[c]];
    if (nout > 0)
        v = v + out;
    return bias ? v + bias[n] : v;
}

static const int32_t new_formats[] = {QS_FORMAT_MXFP4, QS_FORMAT_NVFP4, QS_FORMAT_FP8_E4M3};

static void test_matmul_model(void **state)
{
    static const int64_t Ms[] = {1, 3, 20, 40};
    static const int64_t Ks[] = {256, 200};
    qs_ctx *ctx = t_ctx();
    t_rng r = {71};

    (void)state;
    for (size_t fi = 0; fi < 3; fi++)
        for (size_t kj = 0; kj < 2; kj++)
            for (size_t mi = 0; mi < 4; mi++)
                for (int th = 0; th < 2; th++) {
                    int64_t M = Ms[mi], K = Ks[kj], N = 45, nout = 0;
                    float *w0 = malloc((size_t)(N * K) * 4), *x = malloc((size_t)(M * K) * 4);
                    float *y = malloc((size_t)(M * N) * 4), *wd = malloc((size_t)(N * K) * 4);
                    float bias[45], stats[40];
                    int8_t *codes = malloc((size_t)(M * K));
                    int64_t cols[256];
                    qs_matmul_params p;
                    qw o;

                    for (int64_t i = 0; i < N * K; i++)
                        w0[i] = (float)(t_normal(&r) * (i % 97 == 0 ? 3.0 : 0.05));
                    for (int64_t i = 0; i < M * K; i++)
                        x[i] = (float)t_normal(&r);
                    for (int64_t i = 0; i < N; i++)
                        bias[i] = (float)t_normal(&r);
                    if (th) { /* outlier columns, one odd (a high nibble of the 4-bit formats) */
                        x[0 * K + 7] = 9.0f;
                        x[(M - 1) * K + K - 2] = -7.5f;
                    }
                    qw_make(ctx, w0, N, K, new_formats[fi], &o);
                    assert_int_equal(
                        qs_dequantize(ctx, &o.p, &o.q, N, K, wd, QS_DTYPE_F32, N * K * 4), QS_OK);
                    qs_matmul_params_init(&p);
                    p.activations = QS_MATMUL_ACT_INT8;
                    p.threshold = th ? QS_LLM_INT8_THRESHOLD : 0.0f;
                    assert_int_equal(
                        qs_matmul(ctx, &p, x, QS_DTYPE_F32, M, K, &o.w, N, bias, y, M * N * 4),
                        QS_OK);
                    assert_int_equal(qs_int8_vectorwise_quant(ctx, x, QS_DTYPE_F32, M, K,
                                                              p.threshold, codes, M * K, stats, M,
                                                              cols, 256, &nout),
                                     QS_OK);
                    assert_int_equal(nout, th ? 2 : 0);
                    for (int64_t m = 0; m < M; m++)
                        for (int64_t n = 0; n < N; n++) {
                            float want = qs_ref_nan_canon(
                                model(&o, codes, stats, x, wd, cols, nout, K, m, n, bias));
                            if (t_bits(y[m * N + n]) != t_bits(want)) {
                                print_error("fmt %d K %lld M %lld th %d: y[%lld][%lld] = %a, "
                                            "want %a\n",
                                            new_formats[fi], (long long)K, (long long)M, th,
                                            (long long)m, (long long)n, (double)y[m * N + n],
                                            (double)want);
                                fail();
                            }
                        }
                    qw_free(&o);
                    free(w0);
                    free(x);
                    free(y);
                    free(wd);
                    free(codes);
                }
    qs_ctx_destroy(ctx);
}

/* GEMV (M < QS_MATMUL_GEMM_MIN_M) and GEMM (AMX tiles where the CPU has them) run the same
 * integer sums: each row of a 40-row product equals the 1-row product of that row. */
static void test_gemv_gemm_same(void **state)
{
    qs_ctx *ctx = t_ctx();
    t_rng r = {73};
    const int64_t M = 40, N = 70, K = 320;

    (void)state;
    for (size_t fi = 0; fi < 3; fi++) {
        float *w0 = malloc((size_t)(N * K) * 4), *x = malloc((size_t)(M * K) * 4);
        float *y = malloc((size_t)(M * N) * 4), y1[70];
        qs_matmul_params p;
        qw o;

        for (int64_t i = 0; i < N * K; i++)
            w0[i] = (float)(t_normal(&r) * 0.05);
        for (int64_t i = 0; i < M * K; i++)
            x[i] = (float)t_normal(&r);
        qw_make(ctx, w0, N, K, new_formats[fi], &o);
        qs_matmul_params_init(&p);
        p.activations = QS_MATMUL_ACT_INT8;
        assert_int_equal(qs_matmul(ctx, &p, x, QS_DTYPE_F32, M, K, &o.w, N, NULL, y, M * N * 4),
                         QS_OK);
        for (int64_t m = 0; m < M; m++) {
            assert_int_equal(
                qs_matmul(ctx, &p, x + m * K, QS_DTYPE_F32, 1, K, &o.w, N, NULL, y1, N * 4), QS_OK);
            assert_memory_equal(y1, y + m * N, (size_t)N * 4);
        }
        qw_free(&o);
        free(w0);
        free(x);
        free(y);
    }
    qs_ctx_destroy(ctx);
}

/* The documented bound against f32 activations, |y - y32| <= 1.001 (r/254) sum|W| + 1e-5
 * sum|x W| (the weights enter exactly), at the GEMV and GEMM paths; the activation term is
 * needed (the f32 term alone is exceeded somewhere), so the test can fail both ways. */
static void test_bound(void **state)
{
    qs_ctx *ctx = t_ctx();
    t_rng r = {79};
    const int64_t N = 64, K = 1024;

    (void)state;
    for (size_t fi = 0; fi < 3; fi++)
        for (int64_t M = 4; M <= 32; M += 28) {
            float *w0 = malloc((size_t)(N * K) * 4), *x = malloc((size_t)(M * K) * 4);
            float *y = malloc((size_t)(M * N) * 4), *y32 = malloc((size_t)(M * N) * 4);
            float *wd = malloc((size_t)(N * K) * 4);
            qs_matmul_params p;
            int needs_x = 0;
            qw o;

            for (int64_t i = 0; i < N * K; i++)
                w0[i] = (float)(t_normal(&r) * 0.05);
            for (int64_t i = 0; i < M * K; i++)
                x[i] = (float)t_normal(&r);
            qw_make(ctx, w0, N, K, new_formats[fi], &o);
            assert_int_equal(qs_dequantize(ctx, &o.p, &o.q, N, K, wd, QS_DTYPE_F32, N * K * 4),
                             QS_OK);
            qs_matmul_params_init(&p);
            assert_int_equal(
                qs_matmul(ctx, &p, x, QS_DTYPE_F32, M, K, &o.w, N, NULL, y32, M * N * 4), QS_OK);
            p.activations = QS_MATMUL_ACT_INT8;
            assert_int_equal(qs_matmul(ctx, &p, x, QS_DTYPE_F32, M, K, &o.w, N, NULL, y, M * N * 4),
                             QS_OK);
            for (int64_t m = 0; m < M; m++) {
                double rm = 0.0;
                for (int64_t k = 0; k < K; k++)
                    rm = fmax(rm, fabs(x[m * K + k]));
                for (int64_t n = 0; n < N; n++) {
                    double sw = 0.0, sxw = 0.0;
                    for (int64_t k = 0; k < K; k++) {
                        sw += fabs(wd[n * K + k]);
                        sxw += fabs((double)x[m * K + k] * wd[n * K + k]);
                    }
                    double err = fabs((double)y[m * N + n] - y32[m * N + n]);
                    assert_true(err <= 1.001 * rm / 254.0 * sw + 1e-5 * sxw);
                    needs_x |= err > 1e-5 * sxw;
                }
            }
            assert_true(needs_x);
            qw_free(&o);
            free(w0);
            free(x);
            free(y);
            free(y32);
            free(wd);
        }
    qs_ctx_destroy(ctx);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_w8a8_shapes),    cmocka_unit_test(test_nf4a8_shapes),
        cmocka_unit_test(test_fp4a8_shapes),   cmocka_unit_test(test_mxfp4a8_shapes),
        cmocka_unit_test(test_nvfp4a8_shapes), cmocka_unit_test(test_e4m3a8_shapes),
        cmocka_unit_test(test_max_k),          cmocka_unit_test(test_matmul_model),
        cmocka_unit_test(test_gemv_gemm_same), cmocka_unit_test(test_bound),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
