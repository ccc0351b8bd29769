/* SPDX-License-Identifier: MIT */
/*
 * Private declarations of the second-order calibration (docs/calibration.md §14-§16): the
 * Hessian state, the dense linear algebra GPTQ and SparseGPT share (LAPACK/BLAS when the build
 * has OpenBLAS, plain C loops otherwise), and the quantization grid with fixed scales.
 */
#ifndef QS_GPTQ_INTERNAL_H
#define QS_GPTQ_INTERNAL_H

#include <math.h>

#include "../core/format_traits.h"
#include "../core/internal.h"
#include "../ref/element_hd.h"
#include "../ref/mx_ref.h"
#include "../ref/ref.h"
#include "qsparse/gptq.h"

struct qs_hessian {
    qs_allocator alloc;
    int64_t k;
    int64_t tokens;
    double *s; /* S = X^T X, k * k row-major; the upper triangle is the state */
};

/* linalg.c -------------------------------------------------------------------------------- */

/* The GPTQ inverse factor: from S (upper triangle, k x k row-major) and the weight's dead columns
 * (diag S == 0; dead[j] set to 1 there), U = chol(H_damped^-1) upper with H = 2 S, H^-1 = U^T U,
 * into u (k * k f32 row-major; the strict lower part is zero). Returns QS_OK, QS_ERR_BAD_DATA
 * (not positive definite, or a factor that is not finite with a positive normal f32 diagonal),
 * QS_ERR_OUT_OF_MEMORY. */
QS_INTERNAL qs_status qs_gptq_hinv(qs_ctx *ctx, const struct qs_hessian *h, double percdamp,
                                   const int32_t *perm, uint8_t *dead, float *u);

/* c[m x n] -= a[m x k] * b[k x n] (row-major with leading dimensions), sgemm or loops. */
QS_INTERNAL void qs_gptq_gemm_sub(const qs_ctx *ctx, int64_t m, int64_t n, int64_t k,
                                  const float *a, int64_t lda, const float *b, int64_t ldb,
                                  float *c, int64_t ldc);

/* grid.c: a format's grid with scales fixed per (row, group) --------------------------------- */

struct qs_grid {
    int32_t format;
    const struct qs_format_traits *t; /* its descriptor: the grid switches on its driver family */
    int32_t unit_tensor; /* one scale for the whole tensor (INT8 per tensor) */
    int32_t group;      /* scale group length in logical columns (lcols for a row or tensor) */
    int32_t dynamic;    /* 1: groups are fitted when reached (qs_grid_fit), 0: fixed at init */
    int32_t search;     /* MXFP4, dynamic: groups are fitted by qs_grid_fit_search */
    int32_t symmetric, qmin, rounding;
    int64_t rows, lcols, groups; /* groups per row */
    float s_global;     /* NVFP4 */
    float *a;           /* per (row, group): NF4/FP4 absmax, INT8 scale, NVFP4 den */
    float *b;           /* NF4/FP4 1/absmax, INT8 mul */
    int32_t *zp;        /* INT8 zero point */
    uint8_t *sb;        /* MX and NVFP4 scale byte */
    uint8_t *codes;     /* rows * lcols element codes, one per byte */
};

/* Check the format, shapes and the planes of *q for a rows x lcols logical weight and allocate
 * the grid. src (rows x src_cols f32, the original weight) fixes the tensor/row scales, the NVFP4
 * per-tensor scale and, with static_groups (src_cols == lcols), every group. */
QS_INTERNAL qs_status qs_grid_init(qs_ctx *ctx, struct qs_grid *g, const qs_quant_params *p,
                                   int64_t rows, int64_t lcols, const float *src,
                                   int64_t src_cols, int32_t static_groups, const qs_qtensor *q,
                                   const char *who);
QS_INTERNAL void qs_grid_free(qs_ctx *ctx, struct qs_grid *g);
/* Fit the scale of (row, group gi) to the group's current values v[0 ... len) by the format's
 * rule. No-op unless the grid is dynamic. */
QS_INTERNAL void qs_grid_fit(struct qs_grid *g, int64_t row, int64_t gi, const float *v,
                             int64_t len);
/* One MXFP4 block swept by GPTQ with a fixed scale: per column, its code, rounded value and
 * error (x - q) / U_jj. */
#define QS_MX_SWEEP 32
struct qs_mx_sweep {
    uint8_t code[QS_MX_SWEEP];
    float q[QS_MX_SWEEP], er[QS_MX_SWEEP];
};
/* MXFP4 with its search (grid_search.c): fit the E8M0 scale of (row, group gi) to the
 * group's current values v[0 ... len), len <= 32, choosing between the OCP floor exponent e and
 * e + 1 the one whose GPTQ sweep over the group has the smaller loss sum ((v - q) / U_ii)^2; u
 * is U at the group's first diagonal entry (row stride ldu). Ties keep the rounding rule's.
 * Returns 1 with the chosen scale's sweep in *out (the codes, values and errors the GPTQ sweep
 * computes for the group, bit for bit: same element rule, same updates in the same order), or
 * 0 where there was nothing to choose (the rule's scale is set; the caller sweeps the group). */
QS_INTERNAL int qs_grid_fit_search(struct qs_grid *g, int64_t row, int64_t gi, const float *v,
                                   int64_t len, const float *u, int64_t ldu,
                                   struct qs_mx_sweep *out);
/* 2^(127 - sb) for a scale byte sb < 0xFF: a float for every such byte (2^-127, sb = 0xFE, a
 * subnormal). A product by it rounds once, as ldexpf(x, 127 - sb) does, so x * inv is the MX
 * element rule's scaled value without the libm call. */
static inline float qs_grid_mx_inv(uint8_t sb)
{
    return qs_f32_from_bits(sb < 0xFE ? (uint32_t)(0xFE - sb) << 23 : 0x00400000u);
}
/* The MXFP4 element rule against scale byte sb: the code of x into *code, and its value. */
static inline float qs_grid_mx_round(uint8_t sb, float x, uint8_t *code)
{
    *code = sb == 0xFF ? 0 : qs_hd_e2m1_encode(x * qs_grid_mx_inv(sb));
    return qs_e2m1_values[*code] * qs_e8m0_decode_inline(sb);
}
/* Round x at logical (row, col) with its group's scale; stores the code, returns the value that
 * qs_dequantize gives for it. */
QS_INTERNAL float qs_grid_round(struct qs_grid *g, int64_t row, int64_t col, float x);
/* Write the planes of *q (as qs_quantize lays them out for rows x lcols). */
QS_INTERNAL qs_status qs_grid_store(qs_ctx *ctx, const struct qs_grid *g,
                                    const qs_quant_params *p, qs_qtensor *q);

/* gptq.c: the argument checks GPTQ and SparseGPT share (parameters, shapes, a finite w). */
QS_INTERNAL qs_status qs_gptq_check_common(qs_ctx *ctx, const float *w, int64_t rows,
                                           int64_t cols, const qs_hessian *h, double percdamp,
                                           int32_t block, const int64_t *reserved,
                                           int32_t reserved0, const char *who);

/* The message of a factor qs_gptq_hinv refused (QS_ERR_BAD_DATA). */
#define QS_GPTQ_HINV_BAD "the dampened Hessian is not positive definite, or its inverse factor " \
    "is not finite with a positive diagonal in float (raise percdamp, or scale the calibration " \
    "data)"

/* The total of the per-row losses that GPTQ and SparseGPT report, summed in row order. */
static inline double qs_calib_loss_sum(const double *rl, int64_t rows)
{
    double s = 0.0;
    for (int64_t r = 0; r < rows; r++)
        s += rl[r];
    return s;
}

#endif /* QS_GPTQ_INTERNAL_H */
