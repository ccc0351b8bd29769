/* SPDX-License-Identifier: MIT */
/*
 * qs_matmul and qs_int8_vectorwise_quant under every ISA tier. The input chooses the weight kind
 * (dense f32/f16/bf16, quantized in any format and option, 2:4, 2:4 + quantized; a "packed"
 * weight made of the fuzzed bytes, which must be refused unless they form a valid header), the
 * shapes, the x dtype, bias or not, f32, int8 or bf16 activations, the outlier threshold,
 * misaligned pointers, one buffer a byte short, and the bytes of x, bias, the weight's data or
 * planes and its meta words (optionally forced to valid 2:4 nibbles so the arithmetic is reached).
 * Checked: the status is a known one and the same on every tier; a failing call wrote nothing (y,
 * codes, row statistics, outlier columns; only *n_outliers when the outlier capacity is short); a
 * successful one gave identical bits on every tier, or for y, where the bits differ, the same
 * non-finite elements and finite ones within the cross-tier tolerance matmul.h documents; and
 * the weight packed by each tier's context (qs_matmul_pack) gives that tier's bits again, while
 * a context of another tier refuses it with y untouched.
 *
 * Input layout: kind, flags, M, N, K, short choice, format, quant flags, block-size choice,
 * threshold choice, [4-byte threshold], 4-byte global_scale, 4-byte nested_offset, then the
 * weight (data, or the planes in order data, scale, zero point, nested scale), the meta words, x,
 * bias; zeros past the end of the input. M = 255 selects huge shapes with a zero dimension
 * (unless QS_FUZZ_KNOWN has "empty"): buffers are then capped at 64 KiB, so a size computation
 * that overflows shows up as a read or write past them.
 */
#include <math.h>

#include "fuzz_common.h"

#define MAX_M 20 /* past QS_MATMUL_GEMM_MIN_M, so both paths run */
#define MAX_N 12
#define MAX_K 72
#define CAP (64 * 1024)

static const int32_t block_choices[] = {32, 64, 128, 4096, 2, 6, 16, 4, 8, 1, 0, -32, 17, 3, 5, 8192};
static const float threshold_choices[] = {6.0f, 0.5f, 1.0f, 3.0f, -1.0f, INFINITY, NAN};
static const uint8_t valid_nibbles[6] = {0x4, 0x8, 0xC, 0x9, 0xD, 0xE};

/* Which buffer is one byte (or element) short. */
enum { SH_Y, SH_DATA, SH_META, SH_PLANE0, SH_CODES = SH_PLANE0 + QS_PLANE_COUNT, SH_STATS, SH_OUTL };

/* A buffer of `bytes` (at most `limit`, minus one when short) at an offset of 0 or 1 byte. */
typedef struct {
    uint8_t *mem;
    uint8_t *p;
    size_t cap;
} fz_buf;

static fz_buf buf_new_max(int64_t bytes, int64_t limit, int is_short, int misalign)
{
    fz_buf b;
    size_t cap = bytes > limit ? (size_t)limit : bytes < 0 ? 0 : (size_t)bytes;
    if (is_short && cap > 0)
        cap--;
    b.mem = fz_canary_new(cap + (size_t)misalign);
    b.p = b.mem + misalign;
    b.cap = cap;
    return b;
}

static fz_buf buf_new(int64_t bytes, int is_short, int misalign)
{
    return buf_new_max(bytes, CAP, is_short, misalign);
}

/*
 * The cross-tier contract of qs_matmul (matmul.h): identical bits today; kernels may differ in
 * the last bits, each within a relative Frobenius error of 1e-5 of the float64 product, so two
 * tiers are within 2e-5 of each other (relative to the scalar result, which is itself within
 * 1e-5). Non-finite elements must match bit for bit (canonical NaN). Returns the first element
 * that breaks it or -1.
 */
static int64_t y_diff(const void *a, const void *b, int64_t n)
{
    int64_t first = fz_float_diff(a, b, n, QS_DTYPE_F32);
    if (first < 0)
        return -1;
    double err = 0.0, norm = 0.0;
    for (int64_t i = 0; i < n; i++) {
        float x, y;
        memcpy(&x, (const uint8_t *)a + 4 * i, 4);
        memcpy(&y, (const uint8_t *)b + 4 * i, 4);
        if (!isfinite(x) || !isfinite(y)) {
            if (fz_float_diff(&x, &y, 1, QS_DTYPE_F32) >= 0)
                return i;
            continue;
        }
        err += ((double)x - y) * ((double)x - y);
        norm += (double)x * x;
    }
    return isfinite(norm) && err <= 4.0004e-10 * norm ? -1 : first;
}

/*
 * The fused kernels sum in another order than the reference, so on sums that cancel the relative
 * check above is too strict for any reordering. What holds for every order (matmul.h): two tiers
 * within 2 (K/16 + 8) 2^-23 sum_k |x_mk| |v_nk s_nk| plus the underflow term
 * (2 K + 32) 2^-149 (1 + s_max): a rounding in the subnormal range errs by up to 2^-150 absolute,
 * not relative, both among the unscaled products x v (then multiplied by the scale s) and after
 * the scale, where the SIMD kernels scale each lane's partial sum on its own (per-lane FMA) and
 * the reference scales the segment total once (the finding "reorder": MXFP4 scale 2^-119, y about
 * 2^-141, one subnormal ulp apart). |v s| is bounded by the dequantized |w| (1 + 2^-23) + 2^-150
 * (the dequantized weight is v s rounded once), s by that over the format's smallest nonzero
 * unscaled value (a segment whose values are all 0 adds 0 in every order). With int8 activations
 * the kernels see x^ with |x^_k| <= |x_k| + max |x| / 254 (half a code step). Only for plain and
 * quantized weights (the 2:4 kernels are bit-exact); returns the first element over it, or -1;
 * -2 when the bound cannot be formed (the strict check stands). With bf16 activations every tier
 * sees x^ = x rounded to bf16, and a bf16 kernel (AVX512-BF16) against the f32 path on x^ adds
 * the NF4 / FP4 codebook's rounding to bf16, (2^-8 + 2^-16) sum_k |x^_k| |v_nk s_nk|, its own
 * summation order (within 2 K + 1 roundings) and the flushed denormals,
 * 2^-125 sum_k (|v s| + s (1 + |x^_k|)) (matmul.h).
 */
static double smallest_unscaled(const qs_weight *w)
{
    if (w->kind == QS_WEIGHT_DENSE || w->kind == QS_WEIGHT_SP24)
        return 1.0;
    switch (w->quant->format) {
    case QS_FORMAT_NF4: return 0.0795802995562553; /* codebook entry 8 */
    case QS_FORMAT_FP4: return 0x1.555556p-8;      /* codebook entry 1 */
    case QS_FORMAT_FP8_E4M3:
    case QS_FORMAT_MXFP8: return 0x1p-9; /* the smallest E4M3 subnormal */
    case QS_FORMAT_FP8_E5M2: return 0x1p-16;
    case QS_FORMAT_MXFP4:
    case QS_FORMAT_NVFP4: return 0.5; /* E2M1 */
    default: return 1.0;              /* INT8: q - zero point, an integer */
    }
}

static int64_t y_diff_reordered(qs_ctx *ctx, const float *a, const float *b, const void *x,
                                int32_t x_dtype, const qs_weight *w, int64_t M, int64_t K,
                                int64_t N, int32_t act)
{
    int act8 = act == QS_MATMUL_ACT_INT8, bf16 = act == QS_MATMUL_ACT_BF16;
    if (M > MAX_M || N > MAX_N || K > 4096 || M * K == 0 || N * K == 0)
        return -2;
    /* 2:4 weights (the fused 2:4 GEMV sums in its own order too): the row's kept values, N x K/2,
     * bound |W[n, k]|; sum |x| over the whole row bounds the sum over the kept positions */
    int sparse = w->kind == QS_WEIGHT_SP24 || w->kind == QS_WEIGHT_SP24_QUANT;
    int64_t kw = sparse ? K / 2 : K;
    float *xf = malloc((size_t)(M * K) * 4), *wf = malloc((size_t)(N * kw) * 4 + 4);
    int64_t bad = -2;
    if (!xf || !wf)
        goto out;
    if (qs_convert(ctx, x, x_dtype, xf, QS_DTYPE_F32, M * K, M * K * 4) != QS_OK)
        goto out;
    if (bf16) { /* x^: x rounded to bf16 */
        uint16_t *h = malloc((size_t)(M * K) * 2);
        int ok = h && qs_convert(ctx, xf, QS_DTYPE_F32, h, QS_DTYPE_BF16, M * K, M * K * 2) ==
                          QS_OK &&
                 qs_convert(ctx, h, QS_DTYPE_BF16, xf, QS_DTYPE_F32, M * K, M * K * 4) == QS_OK;
        free(h);
        if (!ok)
            goto out;
    }
    if (w->kind == QS_WEIGHT_QUANT || w->kind == QS_WEIGHT_SP24_QUANT
            ? qs_dequantize(ctx, w->quant, w->q, N, kw, wf, QS_DTYPE_F32, N * kw * 4) != QS_OK
            : qs_convert(ctx, w->data, w->dtype, wf, QS_DTYPE_F32, N * kw, N * kw * 4) != QS_OK)
        goto out;
    bad = -1;
    for (int64_t n = 0; n < N && bad == -1; n++) {
        double wmax = 0.0;
        for (int64_t k = 0; k < kw; k++)
            wmax = fabs((double)wf[n * kw + k]) > wmax ? fabs((double)wf[n * kw + k]) : wmax;
        double vs = wmax * (1.0 + 0x1p-23) + 0x1p-150; /* bounds |v s| */
        double smax = vs / smallest_unscaled(w);
        for (int64_t m = 0; m < M; m++) {
            double sx = 0.0, xmax = 0.0;
            for (int64_t k = 0; k < K; k++) {
                double ax = fabs((double)xf[m * K + k]);
                sx += ax;
                xmax = ax > xmax ? ax : xmax;
            }
            if (act8)
                sx = sx * (1.0 + 0x1p-20) + (double)K * xmax / 254.0 * (1.0 + 0x1p-20);
            float ya, yb;
            memcpy(&ya, a + m * N + n, 4);
            memcpy(&yb, b + m * N + n, 4);
            if (!isfinite(ya) || !isfinite(yb) || !isfinite(sx * vs))
                continue; /* non-finite elements: the strict check above already judged them */
            /* plus the rounding of the bias add and of the final result */
            double tol = 2.0 * ((double)K / 16.0 + 8.0) * 0x1p-23 * sx * vs +
                         (2.0 * (double)K + 32.0) * 0x1p-149 * (1.0 + smax) +
                         0x1p-22 * fabs((double)ya);
            if (bf16) {
                int fmt = w->kind == QS_WEIGHT_QUANT ? w->quant->format : -1;
                int cb = fmt == QS_FORMAT_NF4 || fmt == QS_FORMAT_FP4;
                tol += (cb * (0x1p-8 + 0x1p-16) + (2.0 * (double)K + 1.0) * 0x1p-24) * sx * vs +
                       0x1p-125 * ((double)K * vs + smax * ((double)K + sx));
            }
            if (fabs((double)ya - (double)yb) > tol) {
                bad = m * N + n;
                break;
            }
        }
    }
out:
    free(xf);
    free(wf);
    return bad;
}

static void fuzz_vectorwise(fz_tiers *t, const void *x, int dtype, int64_t M, int64_t K,
                            float threshold, int short_sel, int reject)
{
    int64_t n, ncap = K - (short_sel == SH_OUTL && K > 0);
    if (__builtin_mul_overflow(M, K, &n))
        n = CAP; /* the call must refuse it; the buffers stay capped */
    size_t cb = (size_t)(n > CAP ? CAP : n) - (short_sel == SH_CODES && n > 0);
    size_t sb = 4 * (size_t)(M > CAP / 4 ? CAP / 4 : M) - 4 * (short_sel == SH_STATS && M > 0);
    size_t ob = 8 * (size_t)(ncap > CAP / 8 ? CAP / 8 : ncap);
    uint8_t *codes[2], *stats[2], *outl[2];
    int64_t nout[2], nout0 = 0;
    qs_status st0 = QS_OK;

    for (int s = 0; s < 2; s++) {
        codes[s] = fz_canary_new(cb);
        stats[s] = fz_canary_new(sb);
        outl[s] = fz_canary_new(ob);
    }
    for (int i = 0; i < t->count; i++) {
        int s = i > 0;
        memset(codes[s], FZ_CANARY, cb ? cb : 1);
        memset(stats[s], FZ_CANARY, sb ? sb : 1);
        memset(outl[s], FZ_CANARY, ob ? ob : 1);
        memset(&nout[s], FZ_CANARY, sizeof nout[s]);
        qs_ctx_set(t->ctx[i], QS_PARAM_NONFINITE, reject ? QS_NONFINITE_REJECT : QS_NONFINITE_ENCODE);
        qs_status st = qs_int8_vectorwise_quant(t->ctx[i], x, dtype, M, K, threshold,
                                                (int8_t *)codes[s], (int64_t)cb, (float *)stats[s],
                                                (int64_t)(sb / 4), (int64_t *)outl[s],
                                                (int64_t)(ob / 8), &nout[s]);
        qs_ctx_set(t->ctx[i], QS_PARAM_NONFINITE, QS_NONFINITE_ENCODE);
        fz_check(fz_status_known(st), "qs_int8_vectorwise_quant returned unknown status %d", st);
        if (i == 0)
            st0 = st, nout0 = nout[0];
        else
            fz_check(st == st0, "vectorwise: status %s on tier %s, %s on scalar",
                     qs_status_str(st), fz_tier_name(t->ctx[i]), qs_status_str(st0));
        if (st != QS_OK) {
            fz_check(fz_untouched(codes[s], cb) && fz_untouched(stats[s], sb) &&
                         fz_untouched(outl[s], ob),
                     "vectorwise: an output written by a failing call (%s)", qs_status_str(st));
            /* Only a short outlier capacity reports the count it needs. */
            if (!fz_untouched((const uint8_t *)&nout[s], sizeof nout[s]))
                fz_check(st == QS_ERR_BUFFER_TOO_SMALL && nout[s] > (int64_t)(ob / 8) &&
                             nout[s] == nout0,
                         "vectorwise: *n_outliers = %lld written by a failing call (%s)",
                         (long long)nout[s], qs_status_str(st));
            continue;
        }
        fz_check(nout[s] >= 0 && nout[s] <= (int64_t)(ob / 8), "vectorwise: %lld outliers",
                 (long long)nout[s]);
        fz_check(fz_untouched(outl[s] + 8 * nout[s], ob - 8 * (size_t)nout[s]),
                 "vectorwise: outlier_cols written past the %lld columns", (long long)nout[s]);
        if (i == 0)
            continue;
        fz_check(nout[1] == nout0 && fz_byte_diff(outl[0], outl[1], 8 * (size_t)nout0) < 0,
                 "vectorwise: outlier columns differ: tier %s vs scalar", fz_tier_name(t->ctx[i]));
        int64_t d = fz_byte_diff(codes[0], codes[1], cb);
        fz_check(d < 0, "vectorwise: code %lld differs: tier %s vs scalar", (long long)d,
                 fz_tier_name(t->ctx[i]));
        d = fz_float_diff(stats[0], stats[1], (int64_t)(sb / 4), QS_DTYPE_F32);
        fz_check(d < 0, "vectorwise: row_stats[%lld] differs: tier %s vs scalar", (long long)d,
                 fz_tier_name(t->ctx[i]));
    }
    for (int s = 0; s < 2; s++) {
        free(codes[s]);
        free(stats[s]);
        free(outl[s]);
    }
}

/* The weight packed by tier i's context: the same bits as y (that tier's unpacked product), and
 * refused by every context of another ISA mask with its y untouched. */
static void fuzz_packed(fz_tiers *t, int i, const qs_matmul_params *mp, const void *x,
                        int32_t x_dtype, int64_t M, int64_t K, const qs_weight *w, int64_t N,
                        const float *bias, const uint8_t *y, size_t ybytes)
{
    int64_t bytes = 0;
    qs_status st = qs_matmul_pack_size(t->ctx[i], w, N, K, &bytes);

    fz_check(st == QS_OK, "qs_matmul_pack_size failed (%s) on a weight qs_matmul took",
             qs_status_str(st));
    if (st != QS_OK || bytes > 4 * CAP)
        return;
    uint8_t *buf = fz_canary_new((size_t)bytes + 1), *yp = fz_canary_new(ybytes);
    fz_check(qs_matmul_pack(t->ctx[i], w, N, K, buf, bytes) == QS_OK, "qs_matmul_pack failed");
    fz_check(fz_untouched(buf + bytes, 1), "qs_matmul_pack wrote past its size");
    qs_weight pw;
    memset(&pw, 0, sizeof pw);
    pw.kind = QS_WEIGHT_PACKED;
    pw.data = buf;
    pw.data_bytes = bytes;
    st = qs_matmul(t->ctx[i], mp, x, x_dtype, M, K, &pw, N, bias, (float *)yp, (int64_t)ybytes);
    fz_check(st == QS_OK, "the packed weight failed (%s) where the weight passed",
             qs_status_str(st));
    fz_check(st != QS_OK || memcmp(yp, y, ybytes) == 0,
             "the packed weight gave other bits than the weight (tier %s)",
             fz_tier_name(t->ctx[i]));
    for (int j = 0; j < t->count; j++) {
        if (qs_ctx_isa(t->ctx[j]) == qs_ctx_isa(t->ctx[i]) || ybytes == 0)
            continue;
        memset(yp, FZ_CANARY, ybytes);
        st = qs_matmul(t->ctx[j], mp, x, x_dtype, M, K, &pw, N, bias, (float *)yp,
                       (int64_t)ybytes);
        fz_check(st == QS_ERR_BAD_DATA, "a weight packed on tier %s was taken on tier %s (%s)",
                 fz_tier_name(t->ctx[i]), fz_tier_name(t->ctx[j]), qs_status_str(st));
        fz_check(fz_untouched(yp, ybytes), "y written by a refused packed weight");
    }
    free(buf);
    free(yp);
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    fz_in in = {data, size};
    fz_tiers *t = fz_tiers_get();

    int32_t kind = fz_u8(&in) % 5; /* 4: QS_WEIGHT_PACKED over the weight's fuzzed bytes */
    uint8_t flags = fz_u8(&in), msel = fz_u8(&in), nsel = fz_u8(&in), ksel = fz_u8(&in);
    int short_sel = fz_u8(&in);
    int32_t format = fz_u8(&in) % 11; /* 0 and 10 are invalid */
    uint8_t qflags = fz_u8(&in), bsel = fz_u8(&in), tsel = fz_u8(&in);

    int bias_on = flags & 1, act8 = (flags >> 1) & 1, reject = (flags >> 3) & 1;
    int misalign = (flags >> 2) & 1 && !fz_known("align");
    int x_dtype = (flags >> 4) & 3; /* 3 is invalid */
    int bad_params = (flags >> 6) & 1, fix_meta = (flags >> 7) & 1;

    int64_t M = msel % MAX_M, N = nsel % MAX_N, K = ksel % MAX_K;
    if ((kind == QS_WEIGHT_SP24 || kind == QS_WEIGHT_SP24_QUANT) && ksel < 224)
        K &= ~(int64_t)3; /* mostly whole 2:4 groups */
    if (msel == 255 && !fz_known("empty")) {
        /* Each dimension small, huge or zero, one of them zero. */
        int64_t big = (int64_t)(fz_u64(&in) >> 1), *dim[3] = {&M, &N, &K};
        for (int d = 0; d < 3; d++)
            if (nsel & (1 << d))
                *dim[d] = big;
        *dim[(nsel >> 3) % 3] = 0;
    }

    float threshold = 0.0f;
    if (tsel & 0x80) {
        uint32_t bits = fz_u32(&in);
        memcpy(&threshold, &bits, 4);
    } else if (tsel > 0) {
        threshold = threshold_choices[tsel % (sizeof threshold_choices / sizeof threshold_choices[0])];
    }
    qs_matmul_params mp;
    qs_matmul_params_init(&mp);
    /* bf16 activations on a bit of tsel that only int8 activations (and bad params) read */
    mp.activations = act8          ? QS_MATMUL_ACT_INT8
                     : tsel & 0x40 ? QS_MATMUL_ACT_BF16
                                   : QS_MATMUL_ACT_F32;
    mp.threshold = act8 || bad_params ? threshold : 0.0f;
    if (bad_params && (tsel & 1))
        mp.reserved[tsel >> 1 & 3] = 1;

    /* The weight. */
    qs_quant_params qp;
    qs_quant_params_init(&qp, format);
    qp.double_quant = qflags & 1;
    qp.symmetric = !(qflags & 2);
    qp.granularity = (qflags >> 2) & 3; /* 3 is invalid */
    qp.scale_rounding = (qflags >> 4) & 1;
    int w_dtype = (qflags >> 5) & 3; /* 3 is invalid */
    int wrong_field = qflags >> 7;
    if (bsel >= 128)
        qp.block_size = block_choices[bsel % (sizeof block_choices / sizeof block_choices[0])];
    uint32_t gs = fz_u32(&in), no = fz_u32(&in);

    int is_quant = kind == QS_WEIGHT_QUANT || kind == QS_WEIGHT_SP24_QUANT;
    int is_sp24 = kind == QS_WEIGHT_SP24 || kind == QS_WEIGHT_SP24_QUANT;
    int64_t wcols = is_sp24 ? K / 2 : K;
    int small = M <= MAX_M && N <= MAX_N && K <= MAX_K;
    fz_buf planes[QS_PLANE_COUNT], wdata = {NULL, NULL, 0}, meta = {NULL, NULL, 0};
    qs_qtensor q;
    qs_weight w;
    memset(&q, 0, sizeof q);
    memset(&w, 0, sizeof w);
    memset(planes, 0, sizeof planes);
    w.kind = kind;
    if (is_quant) {
        for (int k = 0; k < QS_PLANE_COUNT; k++) {
            int64_t sz = 0;
            qs_status st = qs_quant_size(&qp, N, wcols, k, &sz);
            fz_check(fz_status_known(st), "qs_quant_size returned unknown status %d", st);
            if (st != QS_OK)
                sz = 64;
            if (sz == 0)
                continue;
            planes[k] = buf_new(sz, short_sel == SH_PLANE0 + k, misalign);
            fz_fill(&in, planes[k].p, small ? planes[k].cap : 0);
        }
        q.data = planes[0].p, q.data_bytes = (int64_t)planes[0].cap;
        q.scale = planes[1].p, q.scale_bytes = (int64_t)planes[1].cap;
        q.zero_point = planes[2].p, q.zero_point_bytes = (int64_t)planes[2].cap;
        q.nested_scale = planes[3].p, q.nested_scale_bytes = (int64_t)planes[3].cap;
        memcpy(&q.global_scale, &gs, 4);
        memcpy(&q.nested_offset, &no, 4);
        w.quant = &qp;
        w.q = &q;
        if (wrong_field)
            w.dtype = QS_DTYPE_F16; /* a field a quantized weight does not use */
    } else {
        int esz = w_dtype < 3 ? qs_dtype_size(w_dtype) : 4;
        int64_t nw = N <= MAX_N && wcols <= MAX_K ? N * wcols * esz : CAP;
        wdata = buf_new(nw, short_sel == SH_DATA, misalign);
        fz_fill(&in, wdata.p, small ? wdata.cap : 0);
        w.dtype = w_dtype;
        w.data = wdata.p;
        w.data_bytes = (int64_t)wdata.cap;
        if (wrong_field)
            w.quant = &qp; /* a field a plain weight does not use */
    }
    if (is_sp24) {
        int64_t words = K / 16 + (K % 16 != 0);
        int64_t nm = N <= MAX_N && K <= MAX_K ? 2 * N * words : CAP;
        meta = buf_new(nm, short_sel == SH_META, misalign);
        if (small) {
            fz_fill(&in, meta.p, meta.cap);
            for (size_t b = 0; fix_meta && b < meta.cap; b++) {
                /* Byte b holds nibbles 2*(b%2) and 2*(b%2)+1 of word b/2. */
                uint8_t v = 0;
                for (int h = 0; h < 2; h++) {
                    int64_t g = (int64_t)(b % 2) * 2 + h + 4 * ((int64_t)(b / 2) % words);
                    uint8_t nib = (uint8_t)(meta.p[b] >> (4 * h) & 15);
                    if (g < K / 4)
                        v |= (uint8_t)(valid_nibbles[nib % 6] << (4 * h));
                }
                meta.p[b] = v;
            }
        }
        w.meta = (const uint16_t *)meta.p;
        w.meta_count = (int64_t)(meta.cap / 2);
    }

    /* x, bias, y. */
    int xesz = x_dtype < 3 ? qs_dtype_size(x_dtype) : 4;
    /* x has no capacity argument: both calls read all M x K elements once the other checks
     * pass, which with huge shapes needs (vectorwise) codes of M * K <= CAP bytes. So x gets its
     * full size up to xesz * CAP bytes; anything larger is refused before x is read. */
    int64_t xbytes;
    if (__builtin_mul_overflow(M, K, &xbytes) || __builtin_mul_overflow(xbytes, xesz, &xbytes))
        xbytes = CAP;
    fz_buf x = buf_new_max(xbytes, (int64_t)xesz * CAP, 0, misalign);
    fz_fill(&in, x.p, small ? x.cap : 0);
    fz_buf bias = {NULL, NULL, 0};
    if (bias_on) {
        bias = buf_new(N <= MAX_N ? 4 * N : CAP, 0, misalign);
        fz_fill(&in, bias.p, small ? bias.cap : 0);
    }
    int64_t ybytes = M <= MAX_M && N <= MAX_N ? 4 * M * N : CAP;
    fz_buf y0 = buf_new(ybytes, short_sel == SH_Y, misalign);
    fz_buf y1 = buf_new(ybytes, short_sel == SH_Y, misalign);

    qs_status st0 = QS_OK;
    for (int i = 0; i < t->count; i++) {
        fz_buf *y = i == 0 ? &y0 : &y1;
        memset(y->mem, FZ_CANARY, y->cap + (size_t)misalign);
        qs_status st = qs_matmul(t->ctx[i], &mp, x.p, x_dtype, M, K, &w, N,
                                 (const float *)bias.p, (float *)y->p, (int64_t)y->cap);
        fz_check(fz_status_known(st), "qs_matmul returned unknown status %d", st);
        if (i == 0)
            st0 = st;
        else
            fz_check(st == st0, "status %s on tier %s, %s on scalar", qs_status_str(st),
                     fz_tier_name(t->ctx[i]), qs_status_str(st0));
        fz_check(fz_untouched(y->mem, (size_t)misalign), "qs_matmul wrote before y");
        if (st != QS_OK) {
            fz_check(fz_untouched(y->p, y->cap), "y written by a failing qs_matmul (%s)",
                     qs_status_str(st));
            continue;
        }
        if (kind != QS_WEIGHT_PACKED && small)
            fuzz_packed(t, i, &mp, x.p, x_dtype, M, K, &w, N, (const float *)bias.p, y->p,
                        y->cap);
        if (i > 0) {
            int64_t d = y_diff(y0.p, y1.p, (int64_t)(y0.cap / 4));
            /* int8 activations take the integer kernels (bit-exact across tiers) for INT8,
             * LLM.int8, NF4, FP4, MXFP4, NVFP4 and FP8 E4M3 weights; other weights run the f32
             * kernels on x^ */
            int fmt = w.quant ? w.quant->format : 0;
            int integer = w.kind == QS_WEIGHT_QUANT &&
                          (fmt == QS_FORMAT_INT8 || fmt == QS_FORMAT_LLM_INT8 ||
                           fmt == QS_FORMAT_NF4 || fmt == QS_FORMAT_FP4 ||
                           fmt == QS_FORMAT_MXFP4 || fmt == QS_FORMAT_NVFP4 ||
                           fmt == QS_FORMAT_FP8_E4M3);
            if (d >= 0 && st == QS_OK && (mp.activations != QS_MATMUL_ACT_INT8 || !integer)) {
                int64_t r = y_diff_reordered(t->ctx[0], (const float *)y0.p,
                                             (const float *)y1.p, x.p, x_dtype, &w, M, K, N,
                                             mp.activations);
                d = r == -2 ? d : r;
            }
            fz_check(d < 0, "y[%lld] differs beyond the tolerance: tier %s vs scalar",
                     (long long)d, fz_tier_name(t->ctx[i]));
        }
    }
    if (st0 == QS_OK && small)
        fz_check(y0.cap == (size_t)(4 * M * N) || M * N == 0, "a short y was accepted");

    fuzz_vectorwise(t, x.p, x_dtype, M, K, threshold, short_sel, reject);

    for (int k = 0; k < QS_PLANE_COUNT; k++)
        free(planes[k].mem);
    free(wdata.mem);
    free(meta.mem);
    free(x.mem);
    free(bias.mem);
    free(y0.mem);
    free(y1.mem);
    return 0;
}
