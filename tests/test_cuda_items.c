/* SPDX-License-Identifier: MIT */
/*
 * The CUDA plugin's quantize, dequantize and 2:4 code on the host (src/cuda/cuda_items.h,
 * cuda_vec.h, cuda_pipeline.c): its drivers run over the host executor of cuda_exec.h, which
 * plays the GPU grid (items in a scrambled order, reductions with the device's thread count and
 * shared-memory tree, a blockwise group's lanes joined as the device's shuffles join them). Every
 * plane, scale field and decoded value is compared bit for bit with the CPU backend
 * (qs_quantize / qs_dequantize on the scalar reference, docs/formats.md), with every buffer
 * 16-byte aligned (the 16-byte tile items) and shifted off that boundary (the scalar items), in
 * f32, f16 and bf16, and the host waits are counted against qs_cu_quantize_waits. No GPU is
 * needed: this is how the plugin's numerics are tested at every tier of the suite.
 */
#include "common.h"

#include "../src/core/backend.h"
#include "../src/core/kernels.h"
#include "cuda_exec.h"
#include "../src/ref/ref.h"
#include "../src/ref/sp24_ref.h"

/* ---- one case: CPU backend vs the plugin's drivers on the host ------------------------------- */

struct qt {
    qs_qtensor q;
    void *plane[QS_PLANE_COUNT];
    int64_t bytes[QS_PLANE_COUNT];
};

/* Planes of a rows x cols tensor filled with `fill`; the data plane starts `shift` bytes past a
 * 16-byte boundary (1: the tile items cannot run, the scalar ones must give the same bytes). */
static void qt_alloc(struct qt *t, const qs_quant_params *p, int64_t rows, int64_t cols,
                     uint8_t fill, int shift)
{
    void **ptr[QS_PLANE_COUNT] = {&t->q.data, &t->q.scale, &t->q.zero_point, &t->q.nested_scale};
    int64_t *cap[QS_PLANE_COUNT] = {&t->q.data_bytes, &t->q.scale_bytes, &t->q.zero_point_bytes,
                                    &t->q.nested_scale_bytes};

    memset(t, 0, sizeof *t);
    for (int k = 0; k < QS_PLANE_COUNT; k++) {
        assert_int_equal(qs_quant_size(p, rows, cols, k, &t->bytes[k]), QS_OK);
        if (!t->bytes[k])
            continue;
        t->plane[k] = aligned_alloc(16, (size_t)(t->bytes[k] + 31) / 16 * 16);
        memset(t->plane[k], fill, (size_t)(t->bytes[k] + 31) / 16 * 16);
        *ptr[k] = (char *)t->plane[k] + (k == 0 ? shift : 0);
        *cap[k] = t->bytes[k];
    }
}

static void qt_free(struct qt *t)
{
    for (int k = 0; k < QS_PLANE_COUNT; k++)
        free(t->plane[k]);
}

/* The plain layout the plugin's drivers get (include/qsparse/plugin.h), as the core makes it. */
static qs_status plain_layout(qs_ctx *ctx, const qs_quant_params *p, int64_t rows, int64_t cols,
                              qs_backend_layout *out)
{
    struct qs_layout l;
    qs_status st = qs_layout_compute(ctx, p, rows, cols, &l);

    if (st == QS_OK)
        qs_backend_layout_fill(&l, p, out);
    return st;
}

static qs_ctx *cpu_ctx(int32_t reject)
{
    qs_ctx_params cp;
    qs_ctx *ctx = NULL;

    qs_ctx_params_init(&cp);
    cp.backend = QS_BACKEND_CPU;
    cp.num_threads = 1;
    cp.nonfinite = reject ? QS_NONFINITE_REJECT : QS_NONFINITE_ENCODE;
    assert_int_equal(qs_ctx_create(&cp, &ctx), QS_OK);
    return ctx;
}

static int64_t n_cases;
static struct host_exec totals; /* kernels launched and offsets summed, over every case */

static void add_totals(const struct host_exec *h)
{
    for (int k = 0; k < QS_CU_K_COUNT; k++)
        totals.kernels[k] += h->kernels[k];
    totals.dq_exact += h->dq_exact;
    totals.dq_serial += h->dq_serial;
    totals.waits += h->waits;
}

#define DATA_MIXED 0 /* normal values over 2^40 of scales, 5% adversarial values */
#define DATA_TAME 1  /* normal values of one scale: double quantization's exact offset sum */

/* Quantize and dequantize one tensor both ways; 1 when every byte agrees. shift 1: every
 * buffer is one element (the data plane one byte) past a 16-byte boundary. */
static int check_case(const qs_quant_params *p, int64_t rows, int64_t cols, int32_t dtype,
                      uint64_t seed, int32_t reject, int shift, int data)
{
    qs_ctx *ctx = cpu_ctx(reject);
    struct host_exec h;
    struct qs_cu_exec x;
    qs_backend_layout l;
    struct qt a, b;
    int64_t n = rows * cols, esz = qs_dtype_size(dtype), room = (n + 8) * esz;
    float *xf = malloc((size_t)(n > 0 ? n : 1) * sizeof(float));
    char *src0 = aligned_alloc(16, (size_t)(room + 15) / 16 * 16);
    char *da = malloc((size_t)room), *db0 = aligned_alloc(16, (size_t)(room + 15) / 16 * 16);
    char *src = src0 + shift * esz, *db = db0 + shift * esz;
    char err[256];
    t_rng rng = {seed};
    qs_status sa, sb;
    int ok = 1;

    memset(&h, 0, sizeof h);
    x = make_exec(&h);
    if (data == DATA_TAME)
        for (int64_t i = 0; i < n; i++)
            xf[i] = (float)t_normal(&rng);
    else
        t_fill_mixed(&rng, xf, n, reject ? 0.0 : 0.05);
    if (reject && n > 2)
        xf[n / 2] = INFINITY; /* one non-finite value: both must refuse */
    if (dtype == QS_DTYPE_F32) {
        memcpy(src, xf, (size_t)n * sizeof(float));
    } else {
        for (int64_t i = 0; i < n; i++)
            ((uint16_t *)src)[i] = dtype == QS_DTYPE_F16 ? qs_ref_f32_to_f16(xf[i])
                                                         : qs_ref_f32_to_bf16(xf[i]);
    }
    assert_int_equal(plain_layout(ctx, p, rows, cols, &l), QS_OK);
    qt_alloc(&a, p, rows, cols, 0x88, 0);
    qt_alloc(&b, p, rows, cols, 0x88, shift);
    sa = qs_quantize(ctx, p, src, dtype, rows, cols, &a.q);
    sb = qs_cu_quantize(&x, &l, p, src, dtype, &b.q, reject, err, sizeof err);
    n_cases++;
    if (sa != sb) {
        print_error("format %d %lldx%lld dtype %d shift %d: status cpu %d, cuda %d (%s)\n",
                    p->format, (long long)rows, (long long)cols, dtype, shift, sa, sb, err);
        ok = 0;
    }
    if (h.waits != (sa == QS_OK || reject ? qs_cu_quantize_waits(&l, p, reject) : 0)) {
        print_error("format %d: %lld host waits, qs_cu_quantize_waits says %d\n", p->format,
                    (long long)h.waits, qs_cu_quantize_waits(&l, p, reject));
        ok = 0;
    }
    {
        const void *bp[QS_PLANE_COUNT] = {b.q.data, b.q.scale, b.q.zero_point, b.q.nested_scale};
        for (int k = 0; ok && sa == QS_OK && k < QS_PLANE_COUNT; k++)
            if (a.bytes[k] && !t_check_bytes("plane", bp[k], a.plane[k], (size_t)a.bytes[k], 1)) {
                print_error("format %d %lldx%lld dtype %d shift %d: plane %d differs\n",
                            p->format, (long long)rows, (long long)cols, dtype, shift, k);
                ok = 0;
            }
    }
    if (ok && sa == QS_OK &&
        (t_bits(a.q.global_scale) != t_bits(b.q.global_scale) ||
         t_bits(a.q.nested_offset) != t_bits(b.q.nested_offset))) {
        print_error("format %d: global_scale or nested_offset differ\n", p->format);
        ok = 0;
    }
    if (ok && sa == QS_OK) {
        /* the CPU's planes, moved to b's (possibly shifted) data plane, decoded both ways */
        if (a.bytes[0])
            memcpy(b.q.data, a.q.data, (size_t)a.bytes[0]);
        b.q.global_scale = a.q.global_scale;
        b.q.nested_offset = a.q.nested_offset;
        memset(da, 0x88, (size_t)(n * esz));
        memset(db, 0x77, (size_t)(n * esz));
        sa = qs_dequantize(ctx, p, &a.q, rows, cols, da, dtype, n * esz);
        sb = qs_cu_dequantize(&x, &l, p, &b.q, db, dtype, err, sizeof err);
        if (sa != QS_OK || sb != QS_OK ||
            !t_check_bytes("dequantized", db, da, (size_t)(n * esz), 1)) {
            print_error("format %d %lldx%lld dtype %d shift %d: dequantize differs (%d %d)\n",
                        p->format, (long long)rows, (long long)cols, dtype, shift, sa, sb);
            ok = 0;
        }
    }
    add_totals(&h);
    qt_free(&a);
    qt_free(&b);
    free(xf);
    free(src0);
    free(da);
    free(db0);
    qs_ctx_destroy(ctx);
    return ok;
}

static const int64_t shapes[][2] = {
    {1, 1}, {1, 2}, {1, 7}, {3, 33}, {2, 64}, {5, 100}, {4, 257}, {7, 1000}, {1, 4097},
    {2, 16385}, {0, 8}, {3, 0}, {3, 8192}, {9, 4096}, {1100, 32},
};
#define NSHAPES ((int)(sizeof shapes / sizeof shapes[0]))

static void sweep(const qs_quant_params *p, uint64_t seed)
{
    for (int s = 0; s < NSHAPES; s++) {
        const int32_t dtypes[3] = {QS_DTYPE_F32, QS_DTYPE_F16, QS_DTYPE_BF16};
        for (int d = 0; d < 3; d++)
            for (int v = 0; v < 3; v++) {
                int64_t rows = shapes[s][0], cols = shapes[s][1];
                int64_t bytes;
                /* shapes the format refuses (INT8 groups must divide cols) are skipped */
                if (qs_quant_size(p, rows, cols, QS_PLANE_DATA, &bytes) != QS_OK)
                    continue;
                /* aligned with mixed data, shifted, aligned with tame data */
                assert_true(check_case(p, rows, cols, dtypes[d],
                                       seed + (uint64_t)(s * 9 + d * 3 + v), 0, v == 1,
                                       v == 2 ? DATA_TAME : DATA_MIXED));
            }
    }
}

static void test_bnb4(void **state)
{
    const int32_t fmts[2] = {QS_FORMAT_NF4, QS_FORMAT_FP4};
    const int32_t blocks[5] = {64, 32, 4096, 6, 12}; /* 12: three f32 tiles for two lanes */
    (void)state;
    for (int f = 0; f < 2; f++)
        for (int b = 0; b < 5; b++)
            for (int dq = 0; dq < 2; dq++) {
                qs_quant_params p;
                qs_quant_params_init(&p, fmts[f]);
                p.block_size = blocks[b];
                p.double_quant = dq;
                sweep(&p, 100 + (uint64_t)(f * 10 + b * 2 + dq) * 1000);
            }
}

static void test_int8(void **state)
{
    (void)state;
    for (int g = 0; g < 3; g++)
        for (int sym = 0; sym < 2; sym++) {
            qs_quant_params p;
            qs_quant_params_init(&p, QS_FORMAT_INT8);
            p.granularity = g;
            p.symmetric = sym;
            if (g == QS_GRAN_GROUP)
                p.block_size = 1; /* divides every column count of the sweep */
            sweep(&p, 200 + (uint64_t)(g * 2 + sym) * 1000);
        }
    {
        qs_quant_params p;
        qs_quant_params_init(&p, QS_FORMAT_INT8);
        p.granularity = QS_GRAN_GROUP;
        p.block_size = 64; /* 2x64 and 1x... only where 64 divides cols */
        sweep(&p, 9000);
    }
    {
        qs_quant_params p;
        qs_quant_params_init(&p, QS_FORMAT_LLM_INT8);
        sweep(&p, 9100);
    }
}

static void test_fp8_mx_nvfp4(void **state)
{
    const int32_t fmts[5] = {QS_FORMAT_FP8_E4M3, QS_FORMAT_FP8_E5M2, QS_FORMAT_MXFP4,
                             QS_FORMAT_MXFP8, QS_FORMAT_NVFP4};
    (void)state;
    for (int f = 0; f < 5; f++)
        for (int opt = 0; opt < 2; opt++) {
            qs_quant_params p;
            qs_quant_params_init(&p, fmts[f]);
            if (fmts[f] == QS_FORMAT_MXFP4 || fmts[f] == QS_FORMAT_MXFP8)
                p.scale_rounding = opt;
            else if (opt)
                p.scale = fmts[f] == QS_FORMAT_NVFP4 ? 0.01f : 3.0f; /* a given scale */
            sweep(&p, 300 + (uint64_t)(f * 2 + opt) * 1000);
        }
}

/* The reject policy: the device scan must refuse exactly when the CPU does. */
static void test_reject(void **state)
{
    qs_quant_params p;
    (void)state;
    qs_quant_params_init(&p, QS_FORMAT_NF4);
    for (int shift = 0; shift < 2; shift++) {
        assert_true(check_case(&p, 3, 100, QS_DTYPE_F32, 1, 1, shift, DATA_MIXED)); /* an Inf */
        assert_true(check_case(&p, 2, 20000, QS_DTYPE_F16, 2, 1, shift, DATA_MIXED)); /* chunks */
        assert_true(check_case(&p, 1, 2, QS_DTYPE_F32, 3, 1, shift, DATA_MIXED)); /* finite */
    }
}

/* A failing launch is a status with a message, and the tensor's struct fields stay. */
static void test_launch_failure(void **state)
{
    qs_ctx *ctx = cpu_ctx(0);
    struct host_exec h = {.fail_at = 1};
    struct qs_cu_exec x = make_exec(&h);
    qs_backend_layout l;
    qs_quant_params p;
    struct qt t;
    float src[64] = {1.0f};
    char err[256];
    (void)state;

    qs_quant_params_init(&p, QS_FORMAT_NVFP4);
    assert_int_equal(plain_layout(ctx, &p, 1, 64, &l), QS_OK);
    qt_alloc(&t, &p, 1, 64, 0, 0);
    t.q.global_scale = 5.0f;
    assert_int_equal(qs_cu_quantize(&x, &l, &p, src, QS_DTYPE_F32, &t.q, 0, err, sizeof err),
                     QS_ERR_BACKEND);
    assert_non_null(strstr(err, "cuda backend: kernel"));
    assert_true(t.q.global_scale == 5.0f);
    qt_free(&t);
    qs_ctx_destroy(ctx);
}

/* ---- 2:4 against the CPU's qs_sp24_* ------------------------------------------------------- */

/* The computed nibble rule equals the reference's table for all 16 keep patterns. */
static void test_sp24_nibble_rule(void **state)
{
    (void)state;
    for (unsigned keep = 0; keep < 16; keep++)
        assert_int_equal(qs_hd_sp24_nibble(keep), qs_sp24_nibble_of_keep[keep]);
}

static int sp24_case(int64_t rows, int64_t cols, int use_norms, int use_mask, uint64_t seed,
                     int corrupt)
{
    qs_ctx *ctx = cpu_ctx(0);
    struct host_exec h = {0};
    struct qs_cu_exec x = make_exec(&h);
    int64_t n = rows * cols, vbytes, mcount;
    float *w = malloc((size_t)(n ? n : 1) * 4), *norms = malloc((size_t)(cols ? cols : 1) * 4);
    float *va = malloc((size_t)(n ? n : 2) * 2), *vb = malloc((size_t)(n ? n : 2) * 2);
    float *da = malloc((size_t)(n ? n : 1) * 4), *db = malloc((size_t)(n ? n : 1) * 4);
    uint8_t *mask = malloc((size_t)(n ? n : 1)), *ma = malloc((size_t)(n ? n : 1));
    uint8_t *mb = malloc((size_t)(n ? n : 1));
    uint16_t *meta_a, *meta_b;
    struct qs_cu_sp24 a;
    char err[256];
    t_rng rng = {seed};
    qs_status sa, sb;
    int ok = 1;

    assert_int_equal(qs_sp24_size(QS_DTYPE_F32, rows, cols, &vbytes, &mcount), QS_OK);
    meta_a = malloc((size_t)(mcount ? mcount : 1) * 2);
    meta_b = malloc((size_t)(mcount ? mcount : 1) * 2);
    t_fill_mixed(&rng, w, n, 0.05);
    for (int64_t c = 0; c < cols; c++)
        norms[c] = (float)(t_unif(&rng) * 4.0);
    for (int64_t i = 0; i < n; i++) /* mostly two per group, sometimes fewer or (corrupt) more */
        mask[i] = (uint8_t)((i % 4 == (int64_t)(t_next(&rng) % 4)) || (i % 4 == 3 && corrupt &&
                                                                         i == n - 1) ||
                            (t_next(&rng) % 8 == 0 && i % 4 < 2));
    if (corrupt && n >= 4)
        mask[n - 1] = mask[n - 2] = mask[n - 3] = 1;
    memset(&a, 0, sizeof a);
    a.cols = cols;
    a.words = (cols + 15) / 16;
    a.w = w;
    memset(va, 0x11, (size_t)vbytes);
    memset(vb, 0x22, (size_t)vbytes);
    memset(meta_a, 0x33, (size_t)mcount * 2);
    memset(meta_b, 0x44, (size_t)mcount * 2);
    if (use_mask >= 0) { /* compress with the mask (1) or by non-zero values (0) */
        for (int64_t i = 0; !use_mask && i < n; i++)
            if (!mask[i])
                w[i] = 0.0f;
        a.op = QS_CU_SP24_COMPRESS;
        a.mask_in = use_mask ? mask : NULL;
        a.values = vb;
        a.meta = meta_b;
        sa = qs_sp24_compress(ctx, w, QS_DTYPE_F32, rows, cols, use_mask ? mask : NULL, va,
                              vbytes, meta_a, mcount);
    } else {
        a.op = QS_CU_SP24_PRUNE;
        a.norms = use_norms ? norms : NULL;
        a.values = vb;
        a.meta = meta_b;
        a.mask_out = mb;
        sa = qs_sp24_prune_compress(ctx, w, QS_DTYPE_F32, rows, cols, use_norms ? norms : NULL,
                                    va, vbytes, meta_a, mcount, ma, n);
    }
    sb = qs_cu_sp24_run(&x, &a, rows, err, sizeof err);
    n_cases++;
    if (corrupt && use_mask >= 0 && sa != QS_ERR_BAD_DATA) {
        print_error("2:4: the corrupt mask was accepted (%d)\n", sa);
        ok = 0;
    }
    if (sa != sb) {
        print_error("2:4 %lldx%lld: status cpu %d, cuda %d (%s)\n", (long long)rows,
                    (long long)cols, sa, sb, err);
        ok = 0;
    } else if (sa == QS_OK) {
        ok = t_check_bytes("2:4 values", vb, va, (size_t)vbytes, 1) &&
             t_check_bytes("2:4 meta", meta_b, meta_a, (size_t)mcount * 2, 1) &&
             (use_mask >= 0 || t_check_bytes("2:4 mask", mb, ma, (size_t)n, 1));
    } else {
        /* nothing written on error */
        for (int64_t i = 0; i < vbytes; i++)
            ok &= ((uint8_t *)vb)[i] == 0x22;
    }
    if (ok && sa == QS_OK) { /* decompress both ways; a corrupt nibble must be refused too */
        if (corrupt && mcount > 0)
            meta_a[mcount - 1] ^= 0x3; /* 0x4 <-> 0x7 and friends: invalid */
        memset(da, 0x55, (size_t)n * 4);
        memset(db, 0x66, (size_t)n * 4);
        sa = qs_sp24_decompress(ctx, va, QS_DTYPE_F32, meta_a, mcount, rows, cols, da, n * 4);
        memset(&a, 0, sizeof a);
        a.op = -1;
        a.cols = cols;
        a.words = (cols + 15) / 16;
        a.cvalues = va;
        a.cmeta = meta_a;
        a.dst = db;
        sb = qs_cu_sp24_run(&x, &a, rows, err, sizeof err);
        if (corrupt && sa != QS_ERR_BAD_DATA) {
            print_error("2:4: the corrupt meta was accepted (%d)\n", sa);
            ok = 0;
        }
        if (sa != sb || (sa == QS_OK && !t_check_bytes("2:4 decompressed", db, da, (size_t)n * 4,
                                                       1))) {
            print_error("2:4 decompress %lldx%lld: status cpu %d, cuda %d\n", (long long)rows,
                        (long long)cols, sa, sb);
            ok = 0;
        }
    }
    free(w), free(norms), free(va), free(vb), free(da), free(db), free(mask), free(ma), free(mb);
    free(meta_a), free(meta_b);
    qs_ctx_destroy(ctx);
    return ok;
}

static void test_sp24(void **state)
{
    const int64_t sshapes[][2] = {{1, 4}, {1, 16}, {3, 20}, {2, 36}, {5, 64}, {7, 100},
                                  {4, 1028}, {0, 8}, {3, 0}};
    (void)state;
    for (int s = 0; s < 9; s++)
        for (int v = 0; v < 4; v++) {
            int64_t rows = sshapes[s][0], cols = sshapes[s][1];
            uint64_t seed = 700 + (uint64_t)(s * 4 + v);
            /* prune |w|, prune Wanda, compress by mask, compress by non-zero values */
            assert_true(sp24_case(rows, cols, v == 1, v < 2 ? -1 : v == 2, seed, 0));
        }
    assert_true(sp24_case(3, 20, 0, 1, 9, 1)); /* a group of three kept: BAD_DATA both ways */
    assert_true(sp24_case(4, 64, 0, -1, 10, 1)); /* a corrupt meta nibble for decompress */
}

/* Every path ran somewhere above: the tile items and the scalar ones (tails, misaligned
 * buffers, the staged f16 fallback), the fused and the three-step INT8 paths, both ways of
 * summing the double-quantization offset. */
static void test_paths(void **state)
{
    const int32_t must[] = {QS_CU_K_CVT_IN,   QS_CU_K_REDUCE,       QS_CU_K_FLAG,
                            QS_CU_K_BNB4_QUANT, QS_CU_K_DQ_STATS,   QS_CU_K_DQ_OFFSET,
                            QS_CU_K_DQ_CENTER, QS_CU_K_DQ_BLOCK,    QS_CU_K_INT8_PARAMS,
                            QS_CU_K_TENSOR_SCALE, QS_CU_K_ROWS_QUANT, QS_CU_K_BQ,
                            QS_CU_K_EWQ_TILE, QS_CU_K_EWQ_ELEM,     QS_CU_K_DEQ_TILE,
                            QS_CU_K_DEQ_ELEM};
    (void)state;
    for (size_t i = 0; i < sizeof must / sizeof must[0]; i++) {
        if (totals.kernels[must[i]] == 0)
            print_error("kernel %d never ran\n", must[i]);
        assert_true(totals.kernels[must[i]] > 0);
    }
    assert_true(totals.dq_exact > 0);
    assert_true(totals.dq_serial > 0);
    fprintf(stderr, "double-quantization offsets: %lld summed in parallel, %lld in order\n",
            (long long)totals.dq_exact, (long long)totals.dq_serial);
}

/* The comparison can fail: a flipped bit of one code is reported. */
static void test_negative(void **state)
{
    uint8_t a[4] = {1, 2, 3, 4}, b[4] = {1, 2, 3, 5};
    (void)state;
    assert_false(t_check_bytes("negative", a, b, 4, 0));
    assert_true(scramble(0, 10) != 0 || scramble(1, 10) != 1); /* the order is scrambled */
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_negative),     cmocka_unit_test(test_bnb4),
        cmocka_unit_test(test_int8),         cmocka_unit_test(test_fp8_mx_nvfp4),
        cmocka_unit_test(test_reject),       cmocka_unit_test(test_launch_failure),
        cmocka_unit_test(test_paths),        cmocka_unit_test(test_sp24_nibble_rule),
        cmocka_unit_test(test_sp24),
    };
    int rc = cmocka_run_group_tests(tests, NULL, NULL);
    fprintf(stderr, "%lld cases compared\n", (long long)n_cases);
    return rc;
}
