/* SPDX-License-Identifier: MIT */
/*
 * libqsparse matmul: y = x . W^T (+ bias) with W in any compressed form the library makes
 * (a quantized qs_qtensor of every format and option of qs_quantize, a 2:4 compressed weight, a
 * 2:4 weight with quantized kept values) or plain f32/f16/bf16; and the LLM.int8 activation
 * quantizer with its outlier split (bitsandbytes' int8_vectorwise_quant).
 *
 * Conventions (in addition to those of qsparse.h):
 * - x is M x K row-major (f32, f16 or bf16: QS_DTYPE_*), W is N x K row-major (a PyTorch Linear
 *   weight [out, in]), y is M x N row-major f32, bias (optional) N f32 values.
 * - On any error y is not written.
 * - The context's non-finite policy does not apply: NaN and Inf propagate through the f32
 *   arithmetic (with int8 activations a NaN element gets code 0 and Inf is an outlier or sets
 *   its row's statistic); a NaN in y is the canonical quiet NaN 0x7FC00000 (docs/nan.md).
 * - Every path runs on the context's threads. OpenBLAS (with its own threads,
 *   OPENBLAS_NUM_THREADS) is called only for plain f32 weights on the GEMM path, and on a build
 *   whose kernel table has no SIMD GEMM kernel (a build with -Dsimd=false) for every non-2:4
 *   GEMM.
 * - Results never depend on the thread count. For a fixed build, ISA and shape they are
 *   deterministic; they may differ in the last bits between ISA tiers (within the tolerance
 *   below) and between the GEMV path (M < QS_MATMUL_GEMM_MIN_M) and the GEMM path.
 *
 * Definition (src/ref/matmul_ref.c is the reference). With f32 activations every y[m, n] is the
 * dot product of x[m, :] (f16/bf16 widened exactly) and the dequantized row W[n, :]:
 * - GEMV path: the row is cut into segments, the elements of one scale block inside the row
 *   (an NF4/FP4 block of the flattened tensor, an INT8 group, row or tensor, an MX or NVFP4 block;
 *   the whole row for FP8, plain and 2:4 f32/f16/bf16 weights). Inside a segment the products
 *   x_k * v_k of the unscaled element values v_k (codebook value, q - zero_point, FP8/E2M1 value)
 *   go into 16 partial sums by (k - segment start) mod 16, which are added as a fixed pairwise
 *   tree (p[i] += p[i + 8], then + 4, + 2, + 1); acc = acc + fl(segment sum * segment scale) in
 *   ascending segment order from +0. So each block scale is applied once per block. 2:4 weights
 *   sum over the kept values only (x gathered at the kept columns).
 * - GEMM path: W is dequantized (qs_dequantize's rules) and cut into slices of 256 columns; per
 *   slice j, s_j is a chain of fused multiply-adds s = fma(x[m, k], W[n, k], s) over the slice's
 *   k in ascending order from +0, and acc = s_0, then acc = fl(acc + s_j) for the next slices in
 *   ascending order. This is the same on every ISA tier of a build with a SIMD GEMM kernel (x86
 *   and ARM alike: AVX2, AVX-512 and NEON give the reference kernel's bits, which the scalar tier
 *   runs) and for any thread count. Plain f32 weights in a build with OpenBLAS (QS_MATMUL_BLAS
 *   in qs_matmul_info) are multiplied by sgemm in place; a build without a SIMD GEMM kernel
 *   multiplies dequantized tiles with sgemm, or without OpenBLAS uses the slice definition
 *   above. 2:4 weights use the outer-product form: each kept value of W[n, :] is multiplied with
 *   a row of x^T and accumulated in ascending kept order.
 * - bias: y = fl(acc + bias[n]).
 * - K = 0: y = fl(+0 + bias[n]) (+0 without bias) for every weight and activation type; no
 *   element of x or W is read.
 * Every path is within a relative Frobenius error of 1e-5 of the float64 product of x and the
 * dequantized weight (for finite data of moderate range; tested at every ISA tier). Where the
 * sum cancels, the per-element bound is what holds for any summation order: two ISA tiers differ
 * by at most 2 (K/16 + 8) 2^-23 sum_k |x[m, k] W[n, k]| + (2 K + 32) 2^-149 (1 + s_max), where
 * W[n, k] = v s is taken before the dequantized weight's rounding and s_max is the row's largest
 * segment scale (1 for plain weights): the second term is gradual underflow, a rounding in the
 * subnormal range being off by up to 2^-150 absolute, among the unscaled products x v (later
 * multiplied by s) and after the scale (the SIMD kernels scale each lane's partial sum, the
 * reference the segment's total: one subnormal ulp apart where y is below 2^-126). Fused GEMV
 * kernels (2:4 ones included) sum in another order than the reference; with int8 activations
 * they run on x^ for the weights without an integer path (FP8 E5M2, MXFP8, plain, 2:4; same
 * bound, x^ for x); the integer paths and the 2:4 GEMM are bit-identical on every tier.
 *
 * int8 activations (params.activations = QS_MATMUL_ACT_INT8): x is quantized per token (row) as
 * qs_int8_vectorwise_quant does: r_m = max |x[m, k]| over the non-outlier elements,
 * codes q = rne(x * fl(127 / r_m)) in [-127, 127] (0 for r_m = 0 and for NaN), the same rule as
 * qs_quantize_dynamic_int8_per_token. With params.threshold > 0 (LLM.int8; bitsandbytes uses 6.0)
 * every column of x holding any |x| >= threshold is an outlier column: its codes are 0 and it is
 * multiplied in f32 (x as given, against the weight column dequantized by qs_dequantize's rule),
 * added after the int8 part in ascending column order.
 * - INT8 weights (QS_FORMAT_INT8, any granularity, symmetric or not; QS_FORMAT_LLM_INT8), dense:
 *   integer dot products with int32 accumulation per segment, exact: a_s = sum q_x * (q_w - zp).
 *   INT8: t = sum over segments of fl(a_s * scale_s) (ascending), y = fl(t * fl(r_m / 127)).
 *   LLM_INT8: y = fl(fl(fl(a * r_m) * SCB[n]) * fl(1/16129)), fl(1/16129) = 6.200012e-05f:
 *   bitsandbytes' CUDA int8_mm_dequant (before its float16 store; not its CPU backend's
 *   6.200124e-05, a typo 1.8e-5 too large).
 * - NF4 / FP4 weights (dense, with or without double quantization): each 4-bit code stands for
 *   its codebook entry scaled to int8, w8 = rne(127 * c) (NF4: -127 -88 -67 -50 -36 -23 -12 0 10
 *   20 31 43 56 71 92 127; FP4: 0 1 85 127 42 64 21 32 and their negatives), so the weight gets
 *   one more rounding, of at most absmax / 254 per element. Per segment (the block clipped to
 *   the row) a_s = sum q_x * w8 exactly in int32; t = sum over segments of fl(a_s * absmax_b)
 *   (ascending; absmax decoded as for f32 activations), y = fl(t * fl(r_m / 16129)).
 *   Outlier columns are multiplied with the weight as qs_dequantize gives it (codebook * absmax).
 * - MXFP4 and NVFP4 weights (dense): each E2M1 element stands for twice its value, the integer
 *   w2 = 2 v of 0, +-1, +-2, +-3, +-4, +-6, +-8, +-12 (exact). Per block b of the row (32
 *   columns for MXFP4, 16 for NVFP4, the row's last block shorter where K is not a multiple)
 *   a_b = sum q_x * w2 exactly in int32, and t = fmaf(a_b, d_b, t) in ascending blocks from +0
 *   (one rounding per block), d_b half the block scale: 2^(E - 128) for an E8M0 byte E (NaN for
 *   0xFF), value(S & 0x7F) / 2 for an NVFP4 E4M3 byte S (NaN for 0x7F). MXFP4:
 *   y = fl(t * fl(r_m / 127)); NVFP4, with its tensor scale g: y = fl(fl(t * g) * fl(r_m / 127)).
 *   (a_b d_b is exact but where it overflows or falls below 2^-149, so the fused step rounds
 *   only the sum.)
 * - FP8 E4M3 weights (dense; per-tensor scale s): each code stands for 2^9 times its value, an
 *   integer c of -229376 ... 229376 (exact). Per piece j of 64 columns of the row (the last one
 *   shorter) a_j = sum q_x * c exactly in int32 (|a_j| <= 64 * 127 * 229376 < 2^31), then
 *   t = fmaf((float)a_j, fl(s * 2^-9), t) in ascending pieces from +0 ((float)a_j rounds to
 *   nearest even beyond 2^24); a piece holding a NaN code (0x7F, 0xFF) makes t NaN.
 *   y = fl(t * fl(r_m / 127)).
 * - For these seven formats K is limited to QS_MATMUL_INT8_MAX_K (the int32 sums cannot
 *   overflow); larger K returns QS_ERR_UNSUPPORTED. The integer sums are the same on every ISA
 *   tier and on the GEMV and GEMM paths, so these results are identical everywhere.
 * - Every other weight (FP8 E5M2, MXFP8, plain, 2:4 of any kind including 2:4 + INT8):
 *   the f32 path above applied to x^ = the dequantized codes, fl(fl(q * r_m) * fl(1/127)) (the
 *   LLM.int8 row-statistic rule of qs_dequantize), with outlier columns kept exact. This defines
 *   the result; kernels may use integer arithmetic only where they reproduce it.
 * Error bound of int8 activations, against the f32-activation result y32 with the same weight:
 *   |y[m, n] - y32[m, n]| <= 1.001 * (r_m / 254) * sum_k |W[n, k]| + 1e-5 * sum_k |x[m, k] W[n, k]|
 * (W dequantized; the first term is the rounding of x to 127 steps of r_m, the second the f32
 * rounding of both paths, for rows of a few thousand elements of moderate range; INT8, MXFP4,
 * NVFP4 and FP8 E4M3 enter the integer sums with their exact values). NF4 and FP4 add the
 * weight rounding:
 *   + 1.001 * (1/254) * sum_k absmax_b(k) * (|x[m, k]| + r_m / 254)
 * (absmax_b(k) the scale of W[n, k]'s block). Outlier columns add no quantization error.
 *
 * bf16 activations (params.activations = QS_MATMUL_ACT_BF16): products of bf16 values summed in
 * f32, as AVX512-BF16 (vdpbf16ps) and NEON BF16 (BFDOT) give them.
 * - x^ = x rounded to bf16 (round to nearest even, a NaN stays a quiet NaN): an f32 x is
 *   rounded, an f16 x widened exactly and rounded, a bf16 x used as it is.
 * - Each element of W is taken as its unscaled value v (the f32 GEMV's: codebook entry,
 *   q - zero_point, FP8 / E2M1 value, bf16 weight value), which bf16 holds exactly for every
 *   format but NF4 and FP4: their 16 codebook entries are rounded to bf16 (nearest even), an
 *   extra rounding of the weight of at most 2^-8 relative (NF4: 0.0032, FP4: 0.0020).
 * - GEMV path (M <= QS_MATMUL_BF16_MAX_M, dense weights of a format with a bf16 kernel: every
 *   quantized format and plain bf16, packed or not, on a CPU with AVX512-BF16): per segment (the
 *   f32 GEMV's, one scale each) the exact products x^_k * v_k are summed in f32 in an unspecified
 *   order and grouping, where denormal inputs, products and partial sums may be flushed to zero (as
 *   vdpbf16ps does); each partial sum of a segment is multiplied by the segment scale (an
 *   infinite scale multiplies the segment's whole sum, as in the f32 GEMV) and the results are
 *   added in f32 in an unspecified order; then bias and the NaN rule as above.
 * - Everywhere else (a CPU without a bf16 kernel, 2:4 weights, plain f32 / f16 weights,
 *   M > QS_MATMUL_BF16_MAX_M): the f32 path above on x^ widened to f32 (the products are exact
 *   there too, the codebooks are not rounded).
 * Results never depend on the thread count; for a fixed tier and shape they are deterministic.
 * Error bound of bf16 activations, against the f32-activation result y32 with the same weight
 * (W[n, k] = v_k s_k dequantized, s_k the scale of its segment, 1 for plain weights, s_max the
 * row's largest; c = 1 for NF4 / FP4 through a bf16 kernel, else 0):
 *   |y[m, n] - y32[m, n]| <= (2^-8 + c (2^-8 + 2^-16) + (3.2 K + 16) 2^-24) sum_k |x[m, k] W[n, k]|
 *                            + 2^-125 sum_k (|W[n, k]| + s_k (1 + |x[m, k]|))
 *                            + (4 K + 64) 2^-149 (1 + s_max)
 * for x below bf16's largest finite value (about 3.39e38; larger |x| round to infinity). The
 * first term is the rounding of x to bf16 (half a unit of its 8-bit significand), the codebook
 * rounding and the f32 sums of both paths in any order; the second the flushed denormals (a
 * flushed x^ or product is below 2^-126); the third gradual underflow as above.
 */
#ifndef QSPARSE_MATMUL_H
#define QSPARSE_MATMUL_H

#include "../qsparse.h"

#ifdef __cplusplus
extern "C" {
#endif

/* Kinds of weight. */
#define QS_WEIGHT_DENSE 0 /* plain N x K of `dtype` (f32, f16, bf16) in `data` */
#define QS_WEIGHT_QUANT 1 /* `q` quantized by qs_quantize with `quant` as an N x K tensor */
#define QS_WEIGHT_SP24 2  /* qs_sp24_compress output: `data` values (N x K/2 of `dtype`), `meta` */
#define QS_WEIGHT_SP24_QUANT                                                                       \
    3 /* qs_sp24_quantize output: `q` (N x K/2 quantized with `quant`), `meta` */
#define QS_WEIGHT_PACKED 4 /* `data` (`data_bytes`): a weight qs_matmul_pack wrote; nothing else */

/**
 * A weight W (N x K) as the library stores it. Zero the struct, then set the fields of its kind;
 * fields a kind does not use must stay zero / NULL.
 */
typedef struct qs_weight {
    int32_t kind;                 /* QS_WEIGHT_* */
    int32_t dtype;                /* DENSE, SP24: QS_DTYPE_* of data */
    const void *data;             /* DENSE: N*K elements; SP24: N*K/2 kept values */
    int64_t data_bytes;           /* capacity of data */
    const uint16_t *meta;         /* SP24, SP24_QUANT: N * ceil(K/16) plain meta words */
    int64_t meta_count;           /* capacity of meta, in words */
    const qs_quant_params *quant; /* QUANT, SP24_QUANT: the parameters the weight was made with */
    const qs_qtensor *q;          /* QUANT, SP24_QUANT: the planes */
    int64_t reserved[4];          /* must be zero */
} qs_weight;

/* Activation types of qs_matmul. */
#define QS_MATMUL_ACT_F32 0 /* x used as given (f16/bf16 widened exactly): the default */
#define QS_MATMUL_ACT_INT8                                                                         \
    1 /* x quantized per token to INT8 on the fly (see the definition above) */
#define QS_MATMUL_ACT_BF16 2 /* x rounded to bf16, bf16 products summed in f32 (see above) */

/* bitsandbytes' default LLM.int8 outlier threshold. */
#define QS_LLM_INT8_THRESHOLD 6.0f
/* Largest K for int8 activations against INT8, LLM_INT8, NF4, FP4, MXFP4, NVFP4 and FP8 E4M3
 * weights: 65536 * 127 * 255 < 2^31, so int32 sums are exact (SIMD kernels add 128 to a weight
 * code: still 255 at most; FP8 E4M3 sums a byte of its integer value at a time). */
#define QS_MATMUL_INT8_MAX_K 65536
/* Rows of x from which the GEMM (dequantized tiles) path is taken. */
#define QS_MATMUL_GEMM_MIN_M 16
/* Rows of x up to which bf16 activations run the bf16 GEMV kernels (where the CPU has them): a
 * W block decoded once serves up to 16 rows of x in registers. Larger M runs the f32 path on x^. */
#define QS_MATMUL_BF16_MAX_M 16

typedef struct qs_matmul_params {
    int32_t activations; /* QS_MATMUL_ACT_F32 (default), QS_MATMUL_ACT_INT8, QS_MATMUL_ACT_BF16 */
    float threshold; /* QS_MATMUL_ACT_INT8: outlier threshold (> 0, finite) or 0 for none (default);
                        must be 0 with QS_MATMUL_ACT_F32 and QS_MATMUL_ACT_BF16 */
    int64_t reserved[7]; /* must be zero */
} qs_matmul_params;

/** Fill *params with the defaults (f32 activations, no outlier threshold). */
QS_API void qs_matmul_params_init(qs_matmul_params *params);

/**
 * y (M x N f32, capacity y_bytes) = x (M x K of x_dtype) . W^T + bias (bias NULL: none) with the
 * definition at the top of this header. params may be NULL for the defaults.
 *
 * Returns QS_OK; QS_ERR_INVALID_ARG (NULL pointer, negative size, unknown dtype / kind, bad
 * params, non-zero reserved fields, fields a kind does not use); QS_ERR_SHAPE (K % 4 for 2:4, an
 * INT8 group that does not divide K); QS_ERR_BUFFER_TOO_SMALL (y, data, meta or a plane shorter
 * than an N x K weight needs: a weight made for other shapes); QS_ERR_BAD_DATA (invalid 2:4 meta
 * nibbles); QS_ERR_OVERFLOW; QS_ERR_UNSUPPORTED (int8 activations with K > QS_MATMUL_INT8_MAX_K,
 * or a context whose backend has no matmul, or no int8 activations or packed weights, as the
 * CUDA backend: qsparse.h "Backends"; any shape); QS_ERR_OUT_OF_MEMORY (scratch for converted x,
 * dequantized tiles, decoded scales).
 * Every check runs, and every scratch buffer is allocated, before y is written.
 */
QS_API qs_status qs_matmul(qs_ctx *ctx, const qs_matmul_params *params, const void *x,
                           int32_t x_dtype, int64_t M, int64_t K, const qs_weight *w, int64_t N,
                           const float *bias, float *y, int64_t y_bytes);

/**
 * Packed weights: a weight of any other kind copied once into the form this context's matmul
 * kernels read fastest, for a model that is multiplied many times (an inference engine's
 * weights). qs_matmul then takes it as {.kind = QS_WEIGHT_PACKED, .data = buffer, .data_bytes =
 * bytes} for the same N x K, with the same results as the weight it came from.
 *
 * Layout version 1: a 64-byte-aligned header, then the weight's planes, NF4/FP4 absmax decoded
 * to f32 where it was double-quantized (every call would decode it again), and the 2:4 meta. The
 * header binds the buffer to this build of the library and to the ISA mask of the context that
 * packed it (qs_ctx_isa_name names its tier): a packed weight is valid only for contexts of the
 * same build and tier on the CPU backend, and qs_matmul refuses any other use with a status
 * saying why (QS_ERR_BAD_DATA: another build, another tier, not a packed weight, a damaged
 * header; QS_ERR_SHAPE: another N x K; QS_ERR_UNSUPPORTED: a GPU backend), never misreading it.
 * Its planes are checked again on every call, like an unpacked weight's. The buffer holds its own
 * copy of everything: the weight it came from may be freed. Store it only as a cache (it is not
 * an interchange format: another build or CPU packs again).
 */

/** Bytes qs_matmul_pack needs for w (N x K): *bytes. Errors as qs_matmul's weight checks. */
QS_API qs_status qs_matmul_pack_size(qs_ctx *ctx, const qs_weight *w, int64_t N, int64_t K,
                                     int64_t *bytes);

/**
 * Pack w (N x K, any kind but QS_WEIGHT_PACKED) for this context into dst (capacity dst_bytes,
 * any alignment). Returns QS_OK; the errors of qs_matmul's weight checks (QS_ERR_INVALID_ARG,
 * QS_ERR_SHAPE, QS_ERR_BUFFER_TOO_SMALL for a short plane, QS_ERR_BAD_DATA for 2:4 meta);
 * QS_ERR_BUFFER_TOO_SMALL when dst_bytes < qs_matmul_pack_size. Nothing is written on error.
 */
QS_API qs_status qs_matmul_pack(qs_ctx *ctx, const qs_weight *w, int64_t N, int64_t K, void *dst,
                                int64_t dst_bytes);

/* Bits of qs_matmul_info. QS_MATMUL_BLAS: the build found OpenBLAS; the GEMM path calls
 * cblas_sgemm for plain f32 weights (and for every weight but 2:4 ones where the build has no
 * SIMD GEMM kernel). */
#define QS_MATMUL_BLAS 1u

/** Build facts of the matmul (QS_MATMUL_* bits). */
QS_API uint32_t qs_matmul_info(void);

/**
 * LLM.int8 vector-wise quantization of activations, as bitsandbytes' int8_vectorwise_quant(A,
 * threshold): x is M x K of dtype.
 * - threshold > 0: an element with |x| >= threshold is an outlier; every column holding one is an
 *   outlier column. Their indices, ascending, go to outlier_cols (capacity outlier_capacity) and
 *   their count to *n_outliers. threshold 0: no outliers (*n_outliers = 0).
 * - row_stats[m] (M floats) = max |x[m, k]| over the elements that are not outliers (NaN ignored;
 *   the other elements of an outlier column count).
 * - codes (M x K int8, capacity codes_bytes) = rne(x * fl(127 / row_stats[m])), NaN -> 0, an
 *   all-zero row -> 0; 0 in every outlier column.
 * Returns QS_OK; QS_ERR_INVALID_ARG (NULL, negative size, unknown dtype, threshold negative or
 * not finite); QS_ERR_BUFFER_TOO_SMALL (codes, row_stats, or more outlier columns than
 * outlier_capacity: the columns are counted first, *n_outliers is set to the count needed and
 * nothing else is written); QS_ERR_NONFINITE (context rejects non-finite input); QS_ERR_OVERFLOW;
 * QS_ERR_OUT_OF_MEMORY.
 */
QS_API qs_status qs_int8_vectorwise_quant(qs_ctx *ctx, const void *x, int32_t dtype, int64_t M,
                                          int64_t K, float threshold, int8_t *codes,
                                          int64_t codes_bytes, float *row_stats,
                                          int64_t row_stats_count, int64_t *outlier_cols,
                                          int64_t outlier_capacity, int64_t *n_outliers);

#ifdef __cplusplus
}
#endif

#endif /* QSPARSE_MATMUL_H */
