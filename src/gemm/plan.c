/* SPDX-License-Identifier: MIT */
/*
 * The one place where a matmul call's path and kernels are chosen. Everything it needs comes
 * from the weight's descriptor (which kernel slots the format has) and from the kernel registry
 * (which entry of a slot runs for this context and shape, and that entry's tile and minimum
 * shape: kernels_matmul.inc), through qs_ctx_kernel_select:
 *
 * - int8 activations and a format with an integer kernel (descriptor a8_slot): the A8 path.
 * - bf16 activations, up to QS_MATMUL_BF16_MAX_M rows of x, a dense weight whose descriptor has a
 *   bf16 kernel (bf16_slot) and a SIMD entry of it for this context: the GEMV_BF16 path. Without
 *   one (a tier without bf16 products, 2:4 or f32 / f16 weights, more rows) the f32 plan below
 *   runs on x^: a reference bf16 kernel would only be a slower form of that.
 * Otherwise, and for the x^ of int8 and bf16 activations:
 * - The GEMM path wherever an mm_gemm_f32 entry takes the shape (every entry's min_m is
 *   QS_MATMUL_GEMM_MIN_M, so the public constant states the rule): the 2:4 outer product for 2:4
 *   weights; sgemm on the caller's plain f32 weight, or on dequantized panels where the build has
 *   no SIMD GEMM kernel, when the build has OpenBLAS; the tiled kernel otherwise.
 * - Else the GEMV path: the descriptor's gemv kernel, for 2:4 weights its fused 2:4 kernel, or
 *   x gathered per row when the format has none.
 * Task sizes follow the chosen entry's register tile (nr rows of W per tile).
 */
#include <limits.h>

#include "gemm_internal.h"

/* Register tiles of W rows per task: GEMV and A8-GEMV tasks are small, for load balance (handed
 * out dynamically, a few microseconds each); A8 GEMM tasks keep a block of W rows in cache while
 * blocks of x rows go by. Kernels that decode their W rows into a panel per call (QS_PACK_B) get
 * tasks of 4 panels and 256 x rows a call (the decode amortized over many x rows, the call's
 * totals still in L2), the others 64 x rows a call. */
#define GEMV_TILES_PER_TASK 16
#define A8_GEMV_TILES_PER_TASK 4
#define A8_GEMM_TILES_PER_TASK 16
#define A8_PACKED_TILES_PER_TASK 4
#define A8_X_ROWS 64
#define A8_PACKED_X_ROWS 256

static int blas_shape(const struct qs_mm_job *j)
{
#ifdef QS_HAVE_BLAS
    return j->M <= INT_MAX && j->K <= INT_MAX && j->N <= INT_MAX;
#else
    (void)j;
    return 0;
#endif
}

/* Whether the build has a SIMD mm_gemm_f32 kernel (for any tier, not only the context's): then
 * every tier runs the tiled path, whose bits are the reference kernel's on every tier. */
static int build_has_simd_gemm(void)
{
    int32_t count;
    const struct qs_kernel_entry *e = qs_kernel_entries(&count);

    for (int32_t i = 0; i < count; i++)
        if (e[i].slot == QS_SLOT_mm_gemm_f32 && e[i].rank > 0)
            return 1;
    return 0;
}

static int64_t tile_rows(const struct qs_kernel_entry *e)
{
    return e && e->tile.nr > 0 ? e->tile.nr : 1;
}

void qs_mm_plan_f32(const qs_ctx *ctx, struct qs_mm_job *j)
{
    struct qs_mm_plan *p = &j->plan;
    const struct qs_kernel_entry *gemm =
        qs_ctx_kernel_select(ctx, QS_SLOT_mm_gemm_f32, j->M, j->N, j->K);
    int sparse = j->kind == QS_WEIGHT_SP24 || j->kind == QS_WEIGHT_SP24_QUANT;
    int32_t slot;

    p->task_rows = 0;
    if (gemm) {
        if (sparse) {
            p->path = QS_MM_GEMM_SP24;
            p->slot = QS_SLOT_mm_sp24_axpy;
        } else if (j->kind == QS_WEIGHT_DENSE && j->dtype == QS_DTYPE_F32 && blas_shape(j)) {
            p->path = QS_MM_GEMM_BLAS; /* sgemm reads the caller's weight in place */
            p->slot = -1;
            p->entry = NULL;
            return;
        } else if (!build_has_simd_gemm() && blas_shape(j)) {
            /* no SIMD GEMM kernel in this build (-Dsimd=false, or an architecture without one):
             * OpenBLAS on dequantized panels, the panels made by the dequantize kernels */
            p->path = QS_MM_GEMM_BLAS;
            p->slot = j->t                       ? j->t->dequant_slot
                      : j->dtype == QS_DTYPE_F16 ? QS_SLOT_cvt_f16_f32
                                                 : QS_SLOT_cvt_bf16_f32;
        } else {
            p->path = QS_MM_GEMM_TILED;
            p->slot = QS_SLOT_mm_gemm_f32;
        }
        p->entry = qs_ctx_kernel_select(ctx, p->slot, j->M, j->N, j->K);
        return;
    }
    slot = sparse && j->mt->sp24_gemv_slot >= 0 ? j->mt->sp24_gemv_slot : j->mt->gemv_slot;
    p->path = !sparse                      ? QS_MM_GEMV
              : j->mt->sp24_gemv_slot >= 0 ? QS_MM_GEMV_SP24
                                           : QS_MM_GEMV_SP24_GATHER;
    p->slot = slot;
    p->entry = qs_ctx_kernel_select(ctx, slot, j->M, j->N, j->K);
    p->task_rows = GEMV_TILES_PER_TASK * tile_rows(p->entry);
}

/* The entry of `slot` for the call's shape. One that runs AMX tiles only once the OS has granted
 * this process the tile state (qs_x86_amx_request; Linux asks for it per process): refused, the
 * best entry without the AMX bits runs instead. */
static const struct qs_kernel_entry *select_entry(const qs_ctx *ctx, int32_t slot,
                                                  const struct qs_mm_job *j)
{
    const struct qs_kernel_entry *e = qs_ctx_kernel_select(ctx, slot, j->M, j->N, j->K);
#if defined(__x86_64__)
    const uint32_t amx = QS_ISA_AMX_TILE | QS_ISA_AMX_INT8 | QS_ISA_AMX_BF16;
    if (e && (e->isa & amx) && !qs_x86_amx_request()) {
        int32_t count;
        const struct qs_kernel_entry *all = qs_kernel_entries(&count);
        e = qs_kernel_select(all, count, slot, ctx->isa & ~amx, j->M, j->N, j->K);
    }
#endif
    return e;
}

void qs_mm_plan_make(const qs_ctx *ctx, struct qs_mm_job *j, int32_t activations)
{
    struct qs_mm_plan *p = &j->plan;

    if (activations == QS_MATMUL_ACT_BF16 && j->mt->bf16_slot >= 0 &&
        (j->kind == QS_WEIGHT_QUANT || j->kind == QS_WEIGHT_DENSE) &&
        j->M <= QS_MATMUL_BF16_MAX_M) {
        const struct qs_kernel_entry *e =
            qs_ctx_kernel_select(ctx, j->mt->bf16_slot, j->M, j->N, j->K);
        if (e && e->rank > 0) {
            p->path = QS_MM_GEMV_BF16;
            p->slot = j->mt->bf16_slot;
            p->entry = e;
            p->task_rows = GEMV_TILES_PER_TASK * tile_rows(e);
            return;
        }
    }
    if (activations == QS_MATMUL_ACT_INT8 && j->kind == QS_WEIGHT_QUANT && j->mt->a8_slot >= 0) {
        int gemv = !qs_ctx_kernel_select(ctx, QS_SLOT_mm_gemm_f32, j->M, j->N, j->K);
        p->path = QS_MM_A8;
        p->slot = j->mt->a8_slot;
        p->entry = select_entry(ctx, p->slot, j);
        if (p->entry && p->entry->tile.packing == QS_PACK_B) {
            p->task_rows = A8_PACKED_TILES_PER_TASK * tile_rows(p->entry);
            p->x_rows = A8_PACKED_X_ROWS;
        } else {
            p->task_rows =
                (gemv ? A8_GEMV_TILES_PER_TASK : A8_GEMM_TILES_PER_TASK) * tile_rows(p->entry);
            p->x_rows = A8_X_ROWS;
        }
        return;
    }
    qs_mm_plan_f32(ctx, j);
}

void qs_mm_f32_scratch(const struct qs_mm_job *j, int64_t *per_thread, int64_t *panel, int64_t *xt)
{
    *per_thread = 0;
    *panel = 0;
    *xt = 0;
    switch (j->plan.path) {
    case QS_MM_GEMV_SP24_GATHER: *per_thread = j->w.k; break; /* the gathered x */
    case QS_MM_GEMM_TILED: qs_mm_gemm_tiled_scratch(j, per_thread, xt); break;
    case QS_MM_GEMM_BLAS: qs_mm_gemm_blas_scratch(j, per_thread, panel); break;
    case QS_MM_GEMM_SP24: qs_mm_gemm_sp24_scratch(j, per_thread, panel, xt); break;
    default: break;
    }
}

void qs_mm_run_f32(struct qs_mm_job *j)
{
    switch (j->plan.path) {
    case QS_MM_GEMM_TILED: qs_mm_gemm_tiled_run(j); break;
    case QS_MM_GEMM_BLAS: qs_mm_gemm_blas_run(j); break;
    case QS_MM_GEMM_SP24: qs_mm_gemm_sp24_run(j); break;
    default: qs_mm_gemv_run(j); break;
    }
}
