/* SPDX-License-Identifier: MIT */
/*
 * The host executor of the CUDA plugin's drivers (src/cuda/cuda_pipeline.h): it plays the GPU's
 * grid, running the same items as the kernels of src/cuda/cuda_plugin.cu in a scrambled order,
 * with the device's thread counts and reduction trees (a block's shared-memory tree, the lanes of
 * a blockwise group joined pairwise, the GEMV's butterfly over 32 lanes). Shared by
 * tests/test_cuda_items.c (quantize, dequantize, 2:4) and tests/test_cuda_mv.c (matmul).
 */
#ifndef QS_TESTS_CUDA_EXEC_H
#define QS_TESTS_CUDA_EXEC_H

#include "../src/cuda/cuda_pipeline.h"

struct host_exec {
    int64_t launches;
    int fail_at;                 /* > 0: the launch with this number fails (error paths) */
    int64_t dq_exact, dq_serial; /* which way the double-quantization offsets were summed */
    int64_t kernels[QS_CU_K_COUNT];
    int64_t waits;               /* copies back to the host (each one waits on the device) */
};

/* Index k of `count` in a scrambled order: items must not depend on running in index order. */
static int64_t scramble(int64_t k, int64_t count)
{
    const int64_t p = 7919;
    return count % p == 0 ? count - 1 - k : (k * p) % count;
}

static void run_reduce(const struct qs_cu_red *a, int64_t count)
{
    for (int64_t k = 0; k < count; k++) {
        int64_t i = scramble(k, count);
        struct qs_cu_pair p[QS_CU_RED_THREADS];
        for (int t = 0; t < QS_CU_RED_THREADS; t++)
            p[t] = qs_cu_red_thread(a, i, t);
        for (int s = QS_CU_RED_THREADS / 2; s > 0; s /= 2) /* the shared-memory tree */
            for (int t = 0; t < s; t++)
                p[t] = qs_cu_red_join(a->kind, p[t], p[t + s]);
        a->partial[i] = p[0];
    }
}

static void run_dq_stats(const struct qs_cu_dq_stats *a, int64_t count)
{
    for (int64_t k = 0; k < count; k++) {
        int64_t i = scramble(k, count);
        struct qs_cu_dqstat s[QS_CU_RED_THREADS];
        for (int t = 0; t < QS_CU_RED_THREADS; t++)
            s[t] = qs_cu_dq_stats_thread(a, i, t);
        for (int h = QS_CU_RED_THREADS / 2; h > 0; h /= 2)
            for (int t = 0; t < h; t++)
                s[t] = qs_cu_dqstat_join(s[t], s[t + h]);
        a->partial[i] = s[0];
    }
}

static void run_dq_offset(struct host_exec *h, const struct qs_cu_dq_offset *a)
{
    struct qs_cu_dqstat s = qs_cu_dqstat_init();

    for (int64_t c = 0; c < a->chunks; c++)
        s = qs_cu_dqstat_join(s, a->partial[c]);
    if (a->nb > 0 && !s.inf) {
        if (qs_cu_dq_exact(&s, a->nb))
            h->dq_exact++;
        else
            h->dq_serial++;
    }
    qs_cu_dq_offset_item(a, 0);
}

/* A group of `lanes` lanes per block: each lane's partial (its first tile, then the rest), the
 * xor tree of the device's shuffles, the parameters in every lane, lane 0's scale, each lane's
 * tiles encoded. */
static void run_bq(const struct qs_cu_bq *a, int64_t count)
{
    for (int64_t k = 0; k < count; k++) {
        int64_t b = scramble(k, count);
        struct qs_cu_pair p[32];
        int32_t kind = qs_cu_bq_kind(a);
        for (int l = 0; l < a->lanes; l++) {
            p[l] = qs_cu_red_init(kind);
            if (l < a->tiles) {
                struct qs_cu_v16 v = qs_cu_ld16(qs_cu_bq_tile(a, b, l));
                p[l] = qs_cu_bq_feed(a, p[l], &v);
            }
            p[l] = qs_cu_bq_reduce_rest(a, b, l, p[l]);
        }
        for (int off = a->lanes / 2; off > 0; off /= 2) {
            struct qs_cu_pair q[32];
            for (int l = 0; l < a->lanes; l++)
                q[l] = qs_cu_red_join(kind, p[l], p[l ^ off]);
            memcpy(p, q, sizeof q);
        }
        for (int l = 0; l < a->lanes; l++) {
            struct qs_cu_bq_par r = qs_cu_bq_params(a, p[l]);
            if (l == 0)
                qs_cu_bq_store_scale(a, b, &r);
            for (int64_t t = l; t < a->tiles; t += a->lanes) {
                struct qs_cu_v16 v = qs_cu_ld16(qs_cu_bq_tile(a, b, t));
                qs_cu_bq_encode(a, b, t, &v, &r);
            }
        }
    }
}

/* One warp per output: 32 lanes, then the butterfly of __shfl_xor_sync by 16, 8, 4, 2, 1. */
static void run_mv(const struct qs_cu_mv *a, int64_t count)
{
    if (a->only_if && !a->only_if[0])
        return;
    for (int64_t k = 0; k < count; k++) {
        int64_t o = scramble(k, count), m = o / a->N, r = o % a->N;
        float v[32];
        for (int l = 0; l < 32; l++)
            v[l] = qs_cu_mv_lane(a, m, r, l);
        for (int off = 16; off > 0; off /= 2) {
            float w[32];
            for (int l = 0; l < 32; l++)
                w[l] = v[l] + v[l ^ off];
            memcpy(v, w, sizeof w);
        }
        qs_cu_mv_store(a, m, r, v[0]);
    }
}

/* mma.sync m16n8k16 (bf16 in, f32 accumulators) of one warp, from every lane's fragments in the
 * PTX layouts: exact products, summed with C in double and rounded once (the tensor cores add
 * with a little less care; the bound the tests check leaves room for it). */
static void emulate_mma(float c[32][4], const uint32_t a[32][4], const uint32_t b[32][2])
{
    float A[16][16], B[16][8];

    for (int l = 0; l < 32; l++) {
        for (int q = 0; q < 4; q++) {
            int row, col;
            qs_cu_mma_a_pos(l, q, &row, &col);
            A[row][col] = qs_hd_bf16_to_f32((uint16_t)a[l][q]);
            A[row][col + 1] = qs_hd_bf16_to_f32((uint16_t)(a[l][q] >> 16));
        }
        for (int q = 0; q < 2; q++) {
            int k, n;
            qs_cu_mma_b_pos(l, q, &k, &n);
            B[k][n] = qs_hd_bf16_to_f32((uint16_t)b[l][q]);
            B[k + 1][n] = qs_hd_bf16_to_f32((uint16_t)(b[l][q] >> 16));
        }
    }
    for (int l = 0; l < 32; l++)
        for (int q = 0; q < 4; q++) {
            int row, col;
            double s;
            qs_cu_mma_c_pos(l, q, &row, &col);
            s = c[l][q];
            for (int k = 0; k < 16; k++)
                s += (double)A[row][k] * (double)B[k][col];
            c[l][q] = (float)s;
        }
}

/* The GEMM's CTAs, each with its shared memory, four warps and their lanes' accumulators, the
 * steps of cuda_mm.h in the kernel's order. */
static void run_mm(const struct qs_cu_mm *a, int64_t count)
{
    static struct qs_cu_mm_smem s;
    int64_t tn = (a->mv.N + QS_CU_MM_BN - 1) / QS_CU_MM_BN;

    if (a->bad[0])
        return;
    for (int64_t k = 0; k < count; k++) {
        int64_t t = scramble(k, count), m0 = t / tn * QS_CU_MM_BM, n0 = t % tn * QS_CU_MM_BN;
        static float acc[4][32][2][4][4];
        memset(acc, 0, sizeof acc);
        for (int64_t k0 = 0; k0 < a->mv.K; k0 += QS_CU_MM_BK) {
            for (int tid = 0; tid < QS_CU_MM_THREADS; tid++) {
                float xa[QS_CU_MM_PER];
                qs_cu_mm_load(a, m0, k0, tid, xa);
                qs_cu_mm_store(&s, a, n0, k0, tid, xa);
            }
            for (int w = 0; w < 4; w++)
                for (int ks = 0; ks < QS_CU_MM_BK / 16; ks++)
                    for (int p = 0; p < 6; p++) {
                        int i, j;
                        if (!qs_cu_mm_pair(a, p, &i, &j))
                            continue;
                        for (int mt = 0; mt < 2; mt++)
                            for (int nt = 0; nt < 4; nt++) {
                                uint32_t fa[32][4], fb[32][2];
                                float c[32][4];
                                for (int l = 0; l < 32; l++) {
                                    qs_cu_mm_frag_a(&s, i, w & 1, mt, ks, l, fa[l]);
                                    qs_cu_mm_frag_b(&s, j, w >> 1, nt, ks, l, fb[l]);
                                    memcpy(c[l], acc[w][l][mt][nt], sizeof c[l]);
                                }
                                emulate_mma(c, fa, fb);
                                for (int l = 0; l < 32; l++)
                                    memcpy(acc[w][l][mt][nt], c[l], sizeof c[l]);
                            }
                    }
        }
        for (int w = 0; w < 4; w++)
            for (int l = 0; l < 32; l++)
                qs_cu_mm_epilogue(a, m0, n0, w & 1, w >> 1, l,
                                  (const float(*)[4][4])acc[w][l]);
    }
}

#define GRID(type, fn)                                                                             \
    for (int64_t k = 0; k < count; k++)                                                            \
        fn((const type *)args, scramble(k, count));                                                \
    break

static int host_launch(void *user, int32_t kernel, const void *args, int64_t count)
{
    struct host_exec *h = user;

    if (h->fail_at > 0 && ++h->launches == h->fail_at)
        return 1;
    if (kernel >= 0 && kernel < QS_CU_K_COUNT)
        h->kernels[kernel]++;
    switch (kernel) {
    case QS_CU_K_CVT_IN: GRID(struct qs_cu_cvt_in, qs_cu_cvt_in_item);
    case QS_CU_K_REDUCE: run_reduce(args, count); break;
    case QS_CU_K_FLAG: GRID(struct qs_cu_flag, qs_cu_flag_item);
    case QS_CU_K_BNB4_QUANT: GRID(struct qs_cu_bnb4_quant, qs_cu_bnb4_quant_item);
    case QS_CU_K_DQ_STATS: run_dq_stats(args, count); break;
    case QS_CU_K_DQ_OFFSET: run_dq_offset(h, args); break;
    case QS_CU_K_DQ_CENTER: GRID(struct qs_cu_dq_quant, qs_cu_dq_center_item);
    case QS_CU_K_DQ_BLOCK: GRID(struct qs_cu_dq_quant, qs_cu_dq_block_item);
    case QS_CU_K_INT8_PARAMS: GRID(struct qs_cu_int8_params, qs_cu_int8_params_item);
    case QS_CU_K_TENSOR_SCALE: GRID(struct qs_cu_tensor_scale, qs_cu_tensor_scale_item);
    case QS_CU_K_ROWS_QUANT: GRID(struct qs_cu_rows, qs_cu_rows_quant_item);
    case QS_CU_K_BQ: run_bq(args, count); break;
    case QS_CU_K_EWQ_TILE: GRID(struct qs_cu_ewq, qs_cu_ewq_tile);
    case QS_CU_K_EWQ_ELEM: GRID(struct qs_cu_ewq, qs_cu_ewq_elem);
    case QS_CU_K_DEQ_TILE: GRID(struct qs_cu_deq, qs_cu_deq_tile);
    case QS_CU_K_DEQ_ELEM: GRID(struct qs_cu_deq, qs_cu_deq_elem);
    case QS_CU_K_MV: run_mv(args, count); break;
    case QS_CU_K_MM: run_mm(args, count); break;
    case QS_CU_K_SP24_CHECK: {
        const struct qs_cu_sp24_check *c = args;
        for (int64_t k = 0; k < count; k++) { /* atomicMin on the device */
            int64_t i = scramble(k, count);
            if (qs_cu_sp24_bad_item(&c->a, i, c->decompress) && (unsigned long long)i < *c->first)
                *c->first = (unsigned long long)i;
        }
        break;
    }
    case QS_CU_K_SP24_COMPRESS: GRID(struct qs_cu_sp24, qs_cu_sp24_compress_item);
    case QS_CU_K_SP24_DECOMPRESS: GRID(struct qs_cu_sp24, qs_cu_sp24_decompress_item);
    default: return 1;
    }
    return 0;
}

static void *host_alloc(void *user, size_t bytes)
{
    (void)user;
    return aligned_alloc(256, (bytes + 255) / 256 * 256); /* cudaMallocAsync's alignment */
}

static void host_release(void *user, void *p)
{
    (void)user;
    free(p);
}

static int host_to_host(void *user, void *dst, const void *src, size_t bytes)
{
    ((struct host_exec *)user)->waits++;
    memcpy(dst, src, bytes);
    return 0;
}

static int host_to_device(void *user, void *dst, const void *src, size_t bytes)
{
    (void)user;
    memcpy(dst, src, bytes);
    return 0;
}

/* The QS_CU_TAB_* tables as the device's constant memory holds them (the same literals). */
static float host_tab[QS_CU_TAB_FLOATS];
static const float host_nf4[16] = QS_NF4_CODEBOOK_INIT, host_fp4[16] = QS_FP4_CODEBOOK_INIT;
static const float host_dyn8[256] = QS_DYN8_MAP_INIT, host_e2m1[16] = QS_E2M1_VALUES_INIT;

static struct qs_cu_exec make_exec(struct host_exec *h)
{
    struct qs_cu_exec x = {
        .user = h,
        .tab = host_tab,
        .launch = host_launch,
        .alloc = host_alloc,
        .release = host_release,
        .to_host = host_to_host,
        .to_device = host_to_device,
    };
    memcpy(host_tab + QS_CU_TAB_NF4, host_nf4, sizeof host_nf4);
    memcpy(host_tab + QS_CU_TAB_FP4, host_fp4, sizeof host_fp4);
    memcpy(host_tab + QS_CU_TAB_DYN8, host_dyn8, sizeof host_dyn8);
    memcpy(host_tab + QS_CU_TAB_E2M1, host_e2m1, sizeof host_e2m1);
    return x;
}

#endif /* QS_TESTS_CUDA_EXEC_H */
