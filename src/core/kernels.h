/* SPDX-License-Identifier: MIT */
/*
 * The kernel table: one function type per kernel family and operation, one table member (slot)
 * per type, and the declarations of every implementation listed in kernels.inc. A kernel is a
 * pure function over caller buffers: it never allocates, fails, prints or reads the
 * context, accepts any n >= 0 and never touches memory outside [ptr, ptr + n).
 *
 * Two rules every implementation follows (src/ref/ref.h, docs/nan.md):
 * - NaN rule: a NaN the kernel computes into a float output (a dequantized value, a dyn8 value
 *   with its offset, an SR-STE gradient) is the canonical quiet NaN 0x7FC00000, whatever the
 *   signs and payloads of the NaNs that went in and the operand order; a NaN that is only moved
 *   (cvt, sp24 compress/decompress, kept SR-STE values) keeps its bits. Reductions ignore NaN.
 * - No alignment: float and uint16_t pointers may be misaligned (the data of a safetensors file
 *   starts at any byte). Scalar code touches them only through qs_ld_f32 / qs_st_f32 /
 *   qs_ld_u16 / qs_st_u16 of ref.h; vector code uses unaligned loads and stores.
 *
 * Conventions shared by every kernel below:
 * - `n` counts elements. Nibble outputs write (n + 1) / 2 bytes; block outputs write
 *   ceil(n / block) scales. Callers split work only at block boundaries, so a kernel's first
 *   element always starts a block (and, for nibble formats, a byte).
 * - Semantics are those of the scalar reference in src/ref/, which follows docs/formats.md.
 */
#ifndef QS_CORE_KERNELS_H
#define QS_CORE_KERNELS_H

#include <stdint.h>

/* Plain dtype conversions (docs/formats.md §0 rule 4). */
typedef void qs_cvt_f16_f32_fn(const uint16_t *src, int64_t n, float *dst);
typedef void qs_cvt_bf16_f32_fn(const uint16_t *src, int64_t n, float *dst);
typedef void qs_cvt_f32_f16_fn(const float *src, int64_t n, uint16_t *dst);
typedef void qs_cvt_f32_bf16_fn(const float *src, int64_t n, uint16_t *dst);
/* f32 -> f32 copy of n values whose stores bypass the cache where the ISA has non-temporal stores
 * (the dequantize driver's output when it exceeds the last-level cache); the bits are src's.
 * fence != 0: the (weakly ordered) stores of this and earlier calls are ordered before the call
 * returns; the last call before other threads may read dst passes it. */
typedef void qs_copy_stream_f32_fn(const float *src, int64_t n, float *dst, int32_t fence);

/* Reductions. amax: max |x| with NaN ignored, starting from +0.0 (fmaxf semantics).
 * minmax: *lo = fminf(*lo, x), *hi = fmaxf(*hi, x) over x, NaN ignored.
 * nonfinite: 1 if any element is NaN or +-Inf, else 0. */
typedef float qs_amax_f32_fn(const float *src, int64_t n);
typedef void qs_minmax_f32_fn(const float *src, int64_t n, float *lo, float *hi);
typedef int32_t qs_nonfinite_f32_fn(const float *src, int64_t n);

/* bitsandbytes NF4 / FP4 (§5): blocks of `block` (even) over src; absmax[ceil(n/block)];
 * dst (n+1)/2 bytes, element 2j in the high nibble. */
typedef void qs_nf4_quant_fn(const float *src, int64_t n, int32_t block, uint8_t *dst,
                             float *absmax);
typedef void qs_nf4_dequant_fn(const uint8_t *src, const float *absmax, int64_t n, int32_t block,
                               float *dst);
typedef qs_nf4_quant_fn qs_fp4_quant_fn;
typedef qs_nf4_dequant_fn qs_fp4_dequant_fn;

/* bitsandbytes signed dynamic 8-bit map, blockwise (§6.3, §6.4). The dequant adds `offset` after
 * the multiply, as the nested level of double quantization does (§6.2). */
typedef void qs_dyn8_quant_fn(const float *src, int64_t n, int32_t block, uint8_t *dst,
                              float *absmax);
typedef void qs_dyn8_dequant_fn(const uint8_t *src, const float *absmax, int64_t n, int32_t block,
                                float offset, float *dst);

/* INT8 (§8, §9). quant: q = clamp(rne(x * mul) + zp, qmin, 127), NaN product -> 0 before zp.
 * dequant: fl((q - zp) * scale). dequant_rowstat (LLM.int8): fl(fl(q * stat) * fl(1/127)). */
typedef void qs_int8_quant_fn(const float *src, int64_t n, float mul, int32_t zp, int32_t qmin,
                              int8_t *dst);
typedef void qs_int8_dequant_fn(const int8_t *src, int64_t n, float scale, int32_t zp, float *dst);
typedef void qs_int8_dequant_rowstat_fn(const int8_t *src, int64_t n, float stat, float *dst);

/* FP8 (§10), saturating: q = cvt(fl(x / scale)); dequant fl(value(q) * scale). */
typedef void qs_e4m3_quant_fn(const float *src, int64_t n, float scale, uint8_t *dst);
typedef void qs_e4m3_dequant_fn(const uint8_t *src, int64_t n, float scale, float *dst);
typedef qs_e4m3_quant_fn qs_e5m2_quant_fn;
typedef qs_e4m3_dequant_fn qs_e5m2_dequant_fn;

/* OCP MX (§13) along one row: blocks of 32, the last one padded with +0.0; scales[ceil(n/32)]
 * E8M0 bytes. MXFP4 data (n+1)/2 bytes low nibble first; MXFP8 one E4M3 byte per element.
 * `rounding` is QS_MX_SCALE_FLOOR or QS_MX_SCALE_RCEIL. */
typedef void qs_mxfp4_quant_fn(const float *src, int64_t n, int32_t rounding, uint8_t *dst,
                               uint8_t *scales);
typedef void qs_mxfp4_dequant_fn(const uint8_t *src, const uint8_t *scales, int64_t n,
                                 float *dst);
typedef qs_mxfp4_quant_fn qs_mxfp8_quant_fn;
typedef qs_mxfp4_dequant_fn qs_mxfp8_dequant_fn;

/* NVFP4 (§14) along one row: blocks of 16, E4M3 block scales, the given f32 tensor scale. */
typedef void qs_nvfp4_quant_fn(const float *src, int64_t n, float s_global, uint8_t *dst,
                               uint8_t *scales);
typedef void qs_nvfp4_dequant_fn(const uint8_t *src, const uint8_t *scales, int64_t n,
                                 float s_global, float *dst);

/* N:M and 2:4 sparsity (docs/sparsity.md §2, §3, §6.4) over one row segment: n % 4 == 0 (n % M
 * for nm_*), the first element starts a group and, where meta is written, a meta word. Masks are
 * one byte per element (1 kept, 0 pruned). norm: NULL for |w|, else Wanda norms per element.
 * compress: mask NULL = non-zero values; callers guarantee at most two kept per group.
 * decompress: callers guarantee valid nibbles. tile: a strip of 4 rows (strides ldw, ldm) and
 * `cols` columns; variant 0 best of 90, 1 greedy. nm_mask method: 0 |w|, 1 Wanda, 2 signed w. */
typedef void qs_sp24_mask_f32_fn(const float *w, const float *norm, int64_t n, uint8_t *mask);
typedef void qs_sp24_prune_f32_fn(const float *w, const float *norm, int64_t n, float *values,
                                  uint16_t *meta);
typedef void qs_sp24_compress_f32_fn(const float *w, const uint8_t *mask, int64_t n,
                                     float *values, uint16_t *meta);
typedef void qs_sp24_compress_u16_fn(const uint16_t *w, const uint8_t *mask, int64_t n,
                                     uint16_t *values, uint16_t *meta);
typedef void qs_sp24_decompress_f32_fn(const float *values, const uint16_t *meta, int64_t n,
                                       float *dst);
typedef void qs_sp24_decompress_u16_fn(const uint16_t *values, const uint16_t *meta, int64_t n,
                                       uint16_t *dst);
typedef void qs_sp24_tile_f32_fn(const float *w, int64_t ldw, const float *norm, int64_t cols,
                                 int32_t variant, uint8_t *mask, int64_t ldm);
typedef void qs_nm_mask_f32_fn(const float *w, const float *norm, int64_t n, int32_t nkeep,
                               int32_t m, int32_t method, uint8_t *mask);
typedef void qs_nm_srste_f32_fn(const float *w, const float *grad, int64_t n, int32_t nkeep,
                                int32_t m, float lambda, float *w_out, float *g_out,
                                uint8_t *mask);

/* Calibration statistics (docs/calibration.md §0 rule 5, §3; hist_ref.c is the definition).
 * NaN and +-Inf are counted, never used. scan: over the finite x, with -0 read as +0,
 * *lo = min(*lo, x) and *hi = max(*hi, x) by strict comparison; n_nan[0] and n_inf[0] are
 * incremented. update: counts[min(floor(|x| * 2^-k), nbins - 1)] += 1 for every finite x
 * (nbins a power of two; callers guarantee |x| < nbins * 2^k, the clamp only keeps a wrong
 * k inside the array). sumsq: acc[j] += x[j]^2 in double for finite x[j], += 0.0 otherwise. */
typedef void qs_hist_scan_fn(const float *src, int64_t n, float *lo, float *hi, uint64_t *n_nan,
                             uint64_t *n_inf);
typedef void qs_hist_update_fn(const float *src, int64_t n, int32_t k, int32_t nbins,
                               uint64_t *counts);
typedef void qs_hist_sumsq_fn(const float *src, int64_t n, double *acc);
/* scan_update: hist_scan over the n values (always) and, when every finite |x| of them is
 * below nbins * 2^k, hist_update with that k, returning 1; otherwise counts are untouched and it
 * returns 0 (the caller widens the bins and calls hist_update). SIMD versions read src once. */
typedef int32_t qs_hist_scan_update_fn(const float *src, int64_t n, int32_t k, int32_t nbins,
                                       uint64_t *counts, float *lo, float *hi, uint64_t *n_nan,
                                       uint64_t *n_inf);

/* Matmul (include/qsparse/matmul.h; src/ref/matmul_ref.c defines the summation order): the dot
 * product of n f32 activations x with one row of W, dequantization fused, each block scale
 * applied once per block. bnb4 (NF4/FP4): row element i is flat element start + i of the
 * tensor (block (start + i) / block). int8: scale[s] and zp[s] (zp NULL: 0) for the s-th
 * `group` elements of the row. mx / nvfp4: the row's data and scales. w8a8: int8 activations
 * against INT8 codes, exact int32 sums per group, returns sum_s fl(a_s * scale[s]).
 * gather_sp24: xg[2g + t] = x[4g + index t of meta nibble g], n = dense columns. sp24_axpy:
 * acc[0..m) += v_j * xt[col_j * ldxt + 0..m) for every kept value j of one 2:4 row, ascending. */
typedef float qs_mm_dot_f32_fn(const float *x, const float *w, int64_t n);
typedef float qs_mm_dot_f16_fn(const float *x, const uint16_t *w, int64_t n);
typedef qs_mm_dot_f16_fn qs_mm_dot_bf16_fn;
typedef float qs_mm_dot_nf4_fn(const float *x, int64_t n, const uint8_t *data, int64_t start,
                               const float *absmax, int32_t block);
typedef qs_mm_dot_nf4_fn qs_mm_dot_fp4_fn;
typedef float qs_mm_dot_int8_fn(const float *x, int64_t n, const int8_t *q, const float *scale,
                                const int8_t *zp, int64_t group);
typedef float qs_mm_dot_e4m3_fn(const float *x, int64_t n, const uint8_t *q, float scale);
typedef qs_mm_dot_e4m3_fn qs_mm_dot_e5m2_fn;
typedef float qs_mm_dot_mxfp4_fn(const float *x, int64_t n, const uint8_t *data,
                                 const uint8_t *scales);
typedef qs_mm_dot_mxfp4_fn qs_mm_dot_mxfp8_fn;
typedef float qs_mm_dot_nvfp4_fn(const float *x, int64_t n, const uint8_t *data,
                                 const uint8_t *scales, float s_global);
typedef float qs_mm_dot_w8a8_fn(const int8_t *xq, const int8_t *wq, int64_t n,
                                const float *scale, const int8_t *zp, int64_t group);
typedef void qs_mm_gather_sp24_fn(const float *x, const uint16_t *meta, int64_t n, float *xg);
typedef void qs_mm_sp24_axpy_fn(const float *values, const uint16_t *meta, int64_t n,
                                const float *xt, int64_t ldxt, int64_t m, float *acc);
/* The fused 2:4 + NF4 dot product: the result of mm_gather_sp24 (x over n dense columns, meta of
 * the row) followed by mm_dot_nf4 over the n / 2 kept values (kept value i is flat element
 * start + i of the compressed tensor), bit for bit. */
typedef float qs_mm_dot_sp24_nf4_fn(const float *x, const uint16_t *meta, int64_t n,
                                    const uint8_t *data, int64_t start, const float *absmax,
                                    int32_t block);

/* ---- the matmul weight view --------------------------------------------------------------------
 *
 * Every matmul operation kernel (multi-row GEMV, 2:4 GEMV, int8-activation product) reads W
 * through one view, built once per call from the public qs_weight and the format's descriptor
 * (src/gemm/weight.c), so one kernel signature serves every format and a new format needs no
 * driver code. Which fields a format's kernels read is the format's business; the others are 0.
 *
 * Row r (0 <= r < n) of W holds k stored values (K; the K / 2 kept values of a 2:4 weight):
 * - data: row layouts (row_bytes > 0) start row r at data + r * row_bytes (INT8, FP8, MX, NVFP4
 *   codes; f32/f16/bf16 values); row_bytes = 0 means the elements run over the flattened tensor
 *   (NF4/FP4, bitsandbytes): row element i is flat element r * k + i, in byte (r * k + i) / 2,
 *   the high nibble for an even flat index.
 * - scale: one scale per unit of `group` columns. Row layouts: row r's units at scale + r *
 *   sstride (sstride 0: one scale for the whole tensor, FP8 and INT8 per tensor); flattened
 *   layouts: unit (r * k + i) / group for element i. f32 for NF4/FP4 (absmax, decoded when
 *   double-quantized), INT8, LLM.int8 and FP8; bytes for MX (E8M0) and NVFP4 (E4M3).
 *   Every f32 unit scale is applied as fl(scale * scale_mul): scale_mul is fl(1/127) for LLM.int8
 *   (whose plane stores the row absmax), 1 elsewhere (exact).
 * - zp: INT8 zero points, one per unit like the scales (NULL: symmetric).
 * - s_global: the NVFP4 tensor scale.
 * - meta, words: 2:4 meta, `words` 16-bit words per row (the row's K dense columns, 4 each).
 * Pointers may be misaligned; kernels read f32 scales with qs_ld_f32. */
typedef struct qs_mm_weight {
    int64_t n, k;
    const void *data;
    int64_t row_bytes;
    const void *scale;
    int64_t sstride, group;
    const int8_t *zp;
    float scale_mul, s_global;
    const uint16_t *meta;
    int64_t words;
} qs_mm_weight;

/* Multi-row GEMV with f32 activations: for i < m and r < rows,
 *   y[i * ldy + r] = the dot product of x + i * ldx (w->k values) with row r0 + r of W,
 * by the GEMV definition (include/qsparse/matmul.h: segments of one scale, 16 lanes, a fixed
 * tree, one scale per segment; src/ref/matmul_ref.c), within the matmul tolerance of it. One
 * call streams its rows of W once for all m rows of x; raw sums (no bias) under the NaN rule. */
typedef void qs_mm_gemv_fn(const qs_mm_weight *w, int64_t r0, int64_t rows, const float *x,
                           int64_t ldx, int64_t m, float *y, int64_t ldy);
typedef qs_mm_gemv_fn qs_mm_gemv_f32_fn;
typedef qs_mm_gemv_fn qs_mm_gemv_f16_fn;
typedef qs_mm_gemv_fn qs_mm_gemv_bf16_fn;
typedef qs_mm_gemv_fn qs_mm_gemv_nf4_fn;
typedef qs_mm_gemv_fn qs_mm_gemv_fp4_fn;
typedef qs_mm_gemv_fn qs_mm_gemv_int8_fn;
typedef qs_mm_gemv_fn qs_mm_gemv_e4m3_fn;
typedef qs_mm_gemv_fn qs_mm_gemv_e5m2_fn;
typedef qs_mm_gemv_fn qs_mm_gemv_mxfp4_fn;
typedef qs_mm_gemv_fn qs_mm_gemv_mxfp8_fn;
typedef qs_mm_gemv_fn qs_mm_gemv_nvfp4_fn;

/* Matmul with int8 activations (src/ref/mm8_ref.c defines them): m rows of x codes (row i at
 * xq + i * w->k, codes in [-127, 127]) against rows r0 ... r0 + rows - 1 of W, out[i * ldo + r].
 * Per segment (a scale unit clipped to the row) the exact int32 sum a_s of x times the weight's
 * integer value, then out = sum_s fl(a_s * unit scale) ascending from +0, NaN rule:
 * - w8a8 (INT8, LLM.int8): the value is q - zp; the unit scales as the view gives them (the
 *   driver hands LLM.int8 a view of one unit scale 1 and applies SCB itself).
 * - nf4a8 / fp4a8: each 4-bit code stands for its codebook entry scaled to int8
 *   (qs_nf4_codebook_i8); the unit scale is the block's absmax.
 * The formats whose int8 path came later fuse each segment's step, t = fmaf(a_s, sc_s, t):
 * - mxfp4a8 / nvfp4a8: each E2M1 code stands for twice its value (qs_e2m1_i8x2), sc_s is half
 *   the block's scale (2^(E - 128); value(S & 0x7F) / 2); NVFP4 returns fl(t * s_global).
 * - e4m3a8: each code stands for 2^9 times its value (qs_e4m3_int9), segments of
 *   QS_MM_E4M3A8_SEG columns, sc_s = fl(scale * 2^-9) for all of them; a NaN code's segment
 *   makes t NaN.
 * xsum[i * ceil(k / u) + c] is the sum of x row i over elements [c u, c u + u), u the format's
 * xsum unit (struct qs_mm_traits.a8_xsum: w->group for w8a8, mxfp4a8 and nvfp4a8; 64 for the
 * others), for the offset and zero-point corrections of SIMD kernels. */
typedef void qs_mm_a8_fn(const int8_t *xq, const int32_t *xsum, int64_t m, const qs_mm_weight *w,
                         int64_t r0, int64_t rows, float *out, int64_t ldo);
typedef qs_mm_a8_fn qs_mm_w8a8_fn;
typedef qs_mm_a8_fn qs_mm_nf4a8_fn;
typedef qs_mm_a8_fn qs_mm_fp4a8_fn;
typedef qs_mm_a8_fn qs_mm_mxfp4a8_fn;
typedef qs_mm_a8_fn qs_mm_nvfp4a8_fn;
typedef qs_mm_a8_fn qs_mm_e4m3a8_fn;
#define QS_MM_E4M3A8_SEG 64 /* columns per integer segment of e4m3a8 (64 * 127 * 229376 < 2^31) */

/* Multi-row GEMV with bf16 activations: x holds bf16 bits (row i at x + i * ldx, w->k values),
 * otherwise as qs_mm_gemv_fn: y[i * ldy + r] for i < m, r < rows is row i of x against row
 * r0 + r of W by the bf16 definition of include/qsparse/matmul.h (src/ref/mm_abf16_ref.c: the
 * unscaled values rounded to bf16, exact products in the f32 GEMV's lanes and tree; SIMD kernels
 * sum in their own order and may flush denormals, within the bound stated there). Raw sums (no
 * bias) under the NaN rule; W streams once for all m rows of x. */
typedef void qs_mm_gemv_xbf16_fn(const qs_mm_weight *w, int64_t r0, int64_t rows,
                                 const uint16_t *x, int64_t ldx, int64_t m, float *y, int64_t ldy);
typedef qs_mm_gemv_xbf16_fn qs_mm_nf4abf16_fn;
typedef qs_mm_gemv_xbf16_fn qs_mm_fp4abf16_fn;
typedef qs_mm_gemv_xbf16_fn qs_mm_int8abf16_fn;
typedef qs_mm_gemv_xbf16_fn qs_mm_e4m3abf16_fn;
typedef qs_mm_gemv_xbf16_fn qs_mm_e5m2abf16_fn;
typedef qs_mm_gemv_xbf16_fn qs_mm_mxfp4abf16_fn;
typedef qs_mm_gemv_xbf16_fn qs_mm_mxfp8abf16_fn;
typedef qs_mm_gemv_xbf16_fn qs_mm_nvfp4abf16_fn;
typedef qs_mm_gemv_xbf16_fn qs_mm_bf16abf16_fn;

/* Tiled GEMM step of the f32-activation GEMM path (include/qsparse/matmul.h; src/ref/mm_gemm_ref.c
 * defines it): for r < rows and i < 16 * mp,
 *   s = +0; for p < k (ascending): s = fmaf(x_i[p], w[r * QS_MM_GEMM_LDW + p], s);
 *   c[r * ldc + i] = acc ? fl(c[r * ldc + i] + s) : s,
 * where x_i[p] = xt[(i / 16) * xs + 16 * p + i % 16]: the activations packed in panels of 16
 * rows, column by column (panel q at xt + q * xs). w holds `rows` rows of f32 weights at the fixed
 * stride QS_MM_GEMM_LDW (the driver's dequantized tile), k <= QS_MM_GEMM_KC. Every element is one
 * chain of fused multiply-adds in ascending p, so SIMD versions equal the reference bit for bit
 * whatever their register tile. */
#define QS_MM_GEMM_KC 256                  /* columns of W per GEMM slice */
#define QS_MM_GEMM_LDW (QS_MM_GEMM_KC + 16) /* row stride of the tile (off the 4 KiB stride) */
#define QS_MM_GEMM_NR_MAX 12 /* the widest register tile (nr) of an mm_gemm_f32 entry */
typedef void qs_mm_gemm_f32_fn(const float *xt, int64_t xs, int64_t mp, int64_t k,
                               const float *w, int64_t rows, float *c, int64_t ldc, int32_t acc);

/* 2:4 GEMV for one x row (2 * w->k dense columns; W holds the k kept values per row and the
 * meta): y[r] = the dot product of x gathered at row r0 + r's kept columns (mm_gather_sp24) with
 * that row's kept values, by the GEMV definition over the kept values (f32/f16/bf16 values: one
 * segment; NF4: the blocks of the compressed tensor), for r < rows, within the matmul tolerance
 * of it (SIMD kernels use FMA and their own lane order).
 * It also checks the used nibbles of the rows' meta (the first k / 2 of each row's words, as
 * mm_sp24_meta_bad and qs_sp24_partial_word_bad): nonzero if one is not one of the six codes,
 * y[0 .. rows) then unspecified; the check reads each row's meta just before the row's products
 * do (so the meta comes from memory once, with the values). */
typedef int qs_mm_gemv_sp24_fn(const qs_mm_weight *w, int64_t r0, int64_t rows, const float *x,
                               float *y);
typedef qs_mm_gemv_sp24_fn qs_mm_gemv_sp24_f32_fn;
typedef qs_mm_gemv_sp24_fn qs_mm_gemv_sp24_f16_fn;
typedef qs_mm_gemv_sp24_fn qs_mm_gemv_sp24_bf16_fn;
typedef qs_mm_gemv_sp24_fn qs_mm_gemv_sp24_nf4_fn;

/* Whether any nibble of the n 2:4 meta words w[0 .. n) is not one of the six codes (i0 < i1:
 * 0x4, 0x8, 0x9, 0xC, 0xD, 0xE; docs/sparsity.md §3.2): nonzero if one is not. */
typedef int qs_mm_sp24_meta_bad_fn(const uint16_t *w, int64_t n);

/* dst[c * ldd + r] = src[r * lds + c] for r < rows, c < cols: the bits moved as they are (the
 * 2:4 GEMM packs x^T panels and writes its y^T accumulators back with it). */
typedef void qs_mm_transpose_f32_fn(const float *src, int64_t lds, int64_t rows, int64_t cols,
                                    float *dst, int64_t ldd);

/* One member per slot; every member starts at its __ref kernel. */
struct qs_kernels {
#define QS_SLOT(slot) qs_##slot##_fn *slot;
#include "slots.inc"
#undef QS_SLOT
};

/* Slot indices, in slots.inc order. */
enum qs_slot_index {
#define QS_SLOT(slot) QS_SLOT_##slot,
#include "slots.inc"
#undef QS_SLOT
    QS_SLOT_COUNT
};

/* Declarations of every implementation. */
#define QS_KERNEL(slot, fn, rank, isa) qs_##slot##_fn fn;
#include "kernels.inc"
#undef QS_KERNEL

/* The operation families, one kernel list each (kernels_<family>.inc). */
enum qs_kernel_family {
    QS_FAMILY_QUANT,  /* quantize, dequantize, dtype conversions: compared bit for bit */
    QS_FAMILY_REDUCE, /* absmax, min/max, non-finite scan: bit for bit */
    QS_FAMILY_HIST,   /* calibration statistics: bit for bit */
    QS_FAMILY_SPARSE, /* N:M and 2:4 sparsity: bit for bit */
    QS_FAMILY_MATMUL, /* matmul: within a tolerance (tile metadata below) */
    QS_FAMILY_COUNT
};

/* How a matmul kernel reads its operands (kernels_matmul.inc). */
enum qs_packing { QS_PACK_NONE, QS_PACK_B, QS_PACK_AB };
/* The activation (left operand) element type of a matmul kernel. */
enum qs_act_type { QS_ACT_F32, QS_ACT_F16, QS_ACT_BF16, QS_ACT_INT8 };

/* Matmul metadata of an entry; all zero for the other families. */
struct qs_tile {
    int32_t mr, nr, kr;          /* register tile: rows x columns x depth step */
    int64_t min_m, min_n, min_k; /* smallest problem the kernel is chosen for */
    int32_t packing;             /* enum qs_packing */
    int32_t act;                 /* enum qs_act_type */
};

/* One row of the registry, for dispatch, tests and benchmarks. */
struct qs_kernel_entry {
    int32_t slot;       /* enum qs_slot_index */
    int32_t family;     /* enum qs_kernel_family */
    int32_t rank;       /* higher wins among the entries a context allows; 0 for __ref */
    uint32_t isa;       /* QS_ISA_* bits the kernel needs (a set, not a tier); 0 for __ref */
    void (*fn)(void);   /* cast to the slot's type before calling */
    const char *name;   /* "qs_nf4_quant__avx2" */
    struct qs_tile tile;
};

/* Every implementation compiled into this build, in kernels.inc order (family lists in turn). */
const struct qs_kernel_entry *qs_kernel_entries(int32_t *count);
/* "nf4_quant" for a slot index, NULL out of range. */
const char *qs_slot_name(int32_t slot);
/* The family of a slot (that of its entries), -1 out of range. */
int32_t qs_slot_family(int32_t slot);
/* The entry of `slot` among e[0 .. count) that runs for ISA bits `isa` and a problem of m x n x k:
 * the highest rank among those whose bits `isa` contains and whose min_m, min_n, min_k the
 * problem meets (the first such entry on a tie, which the build rules out within one list).
 * NULL if none qualifies. Deterministic: it depends on nothing else. */
const struct qs_kernel_entry *qs_kernel_select(const struct qs_kernel_entry *e, int32_t count,
                                               int32_t slot, uint32_t isa, int64_t m, int64_t n,
                                               int64_t k);
/* Fill k (and names) per slot with qs_kernel_select over the whole registry for `isa` and the
 * largest problem, so that a slot whose entries have shape minimums gets its best kernel for big
 * problems; shape-dependent callers ask qs_kernel_select with their own m, n, k. */
void qs_kernels_init(struct qs_kernels *k, const char **names, uint32_t isa);

#endif /* QS_CORE_KERNELS_H */
