/* SPDX-License-Identifier: MIT */
/*
 * The backend plugin ABI: what a shared module exports to be a libqsparse backend (the CUDA
 * plugin, libqsparse-cuda.so, is one; a ROCm or Metal plugin would be another), and what the
 * library hands it. Applications never need this header. A plugin includes it and nothing else
 * of the library: no private header and no library function, since a plugin may be loaded
 * RTLD_LOCAL under a library that was itself loaded RTLD_LOCAL. It reaches the library only
 * through the host services passed to its init.
 *
 * The handshake: the library dlopens the module, calls its QS_BACKEND_INIT_SYMBOL with
 * QS_BACKEND_ABI_VERSION and the host services, and accepts the operations returned only if
 * their abi_version equals its own. Any change to a struct, a callback or the meaning of an
 * operation here raises QS_BACKEND_ABI_VERSION (which is not the soname's QS_API_VERSION): a
 * plugin built for another version is refused with a message, never called.
 *
 * The calling context is an opaque handle (qs_backend_ctx). A call is described by public types
 * (qs_quant_params, qs_qtensor, qs_matmul_params, qs_weight) and by the plain structs below; the
 * library has already checked everything about it (shapes, overflow, NULL pointers, capacities,
 * parameters, and the data where the operation says so). An operation must keep the public
 * promises: the CPU backend's results (the same bits where the public header says so), never
 * abort or print, nothing written on error, the reason given to host->set_error (the library
 * adds a generic one when none was set).
 *
 * An operation left NULL is one the backend does not implement. A context created for that
 * backend gets QS_ERR_UNSUPPORTED from the entry point, with a message naming the backend and
 * the operation; the call never runs on another backend instead.
 */
#ifndef QSPARSE_PLUGIN_H
#define QSPARSE_PLUGIN_H

#include <stddef.h>
#include <stdint.h>

#include "../qsparse.h"
#include "matmul.h"

#ifdef __cplusplus
extern "C" {
#endif

/* 3: the opaque context and host services, plain layouts, backends keyed by name; matmul,
 * 2:4 and the Wanda statistic joined quantize and dequantize. 4: the device matmul (matmul_dev)
 * replaced the NF4 / INT8 GEMV (gemv_dev). */
#define QS_BACKEND_ABI_VERSION 4

/* The one symbol a plugin exports, of type qs_backend_init_fn. */
#define QS_BACKEND_INIT_SYMBOL "qs_backend_plugin_init"

/* The calling context, as a handle only the host services read. */
typedef struct qs_backend_ctx qs_backend_ctx;

/* What the library offers a plugin; valid for the life of the process. */
typedef struct qs_backend_host {
    int32_t abi_version; /* QS_BACKEND_ABI_VERSION of the library */
    int32_t reserved0;
    /* Record why the current operation fails (a complete message; it is copied, and cut to the
     * context's message length). */
    void (*set_error)(qs_backend_ctx *ctx, const char *message);
    /* Host scratch memory from the context's allocator, 64-byte aligned; NULL on failure. */
    void *(*scratch_alloc)(qs_backend_ctx *ctx, size_t bytes);
    void (*scratch_free)(qs_backend_ctx *ctx, void *p);
    /* Threads a call of this context may use (>= 1), as the CPU backend would. */
    int32_t (*num_threads)(const qs_backend_ctx *ctx);
    /* The context's QS_NONFINITE_* policy. The library has already scanned a quantize input under
     * QS_NONFINITE_REJECT; the device operations (below) must apply it themselves. */
    int32_t (*nonfinite)(const qs_backend_ctx *ctx);
} qs_backend_host;

/* ---- a quantized tensor's layout as plain data ---------------------------------------------- */

/* Driver families: how a format's scales are made (qs_backend_layout.family). */
#define QS_BACKEND_FAMILY_BNB4 0 /* blockwise absmax over the flattened tensor (NF4, FP4) */
#define QS_BACKEND_FAMILY_INT8 1 /* INT8 per tensor / row / group; LLM.int8 row statistics */
#define QS_BACKEND_FAMILY_FP8  2 /* one f32 scale for the tensor */
#define QS_BACKEND_FAMILY_MX   3 /* E8M0 block scales along rows */
#define QS_BACKEND_FAMILY_NV   4 /* E4M3 block scales along rows and an f32 tensor scale */

/* What one scale covers (qs_backend_layout.unit_rule; INT8's granularity is resolved). */
#define QS_BACKEND_UNITS_TENSOR      0 /* one for the whole tensor */
#define QS_BACKEND_UNITS_ROWS        1 /* one per row */
#define QS_BACKEND_UNITS_FLAT_BLOCKS 2 /* one per block of the flattened tensor (the last short) */
#define QS_BACKEND_UNITS_ROW_BLOCKS  3 /* one per block along each row (a row's last short) */

/* qs_backend_layout.flags */
#define QS_BACKEND_LAYOUT_ROWSTAT      1u /* INT8 family: the scale plane holds row absmax (SCB) */
#define QS_BACKEND_LAYOUT_GLOBAL_SCALE 2u /* qs_qtensor.global_scale is an f32 tensor scale */
#define QS_BACKEND_LAYOUT_ZERO_POINT   4u /* the zero-point plane is used (asymmetric INT8) */
#define QS_BACKEND_LAYOUT_DOUBLE_QUANT 8u /* scale holds uint8 codes, nested_scale their scales */

/* A rows x cols tensor quantized with some qs_quant_params, as the library computed it. */
/* The element rule of a format's codes (qs_backend_layout.element): what a backend decodes and
 * encodes, so that it never needs to switch on the format code. */
#define QS_BACKEND_ELEM_NF4  0 /* the NF4 codebook (4-bit, bitsandbytes) */
#define QS_BACKEND_ELEM_FP4  1 /* the bitsandbytes FP4 codebook (4-bit) */
#define QS_BACKEND_ELEM_INT8 2 /* int8 codes */
#define QS_BACKEND_ELEM_E4M3 3 /* OCP FP8 E4M3 "fn" (8-bit) */
#define QS_BACKEND_ELEM_E5M2 4 /* OCP FP8 E5M2 (8-bit) */
#define QS_BACKEND_ELEM_E2M1 5 /* OCP FP4 E2M1 (4-bit) */

typedef struct qs_backend_layout {
    int32_t format;    /* QS_FORMAT_* (for messages; the fields below say what it is) */
    int32_t family;    /* QS_BACKEND_FAMILY_* */
    int32_t element;   /* QS_BACKEND_ELEM_* */
    int32_t unit_rule; /* QS_BACKEND_UNITS_* */
    int32_t block;     /* block length, or INT8 group length; 0 without blocks */
    int64_t rows, cols;
    int64_t n;         /* rows * cols */
    int64_t units;     /* scales: blocks, rows, groups or 1 */
    uint32_t flags;    /* QS_BACKEND_LAYOUT_* */
    float elem_max;    /* largest finite element magnitude (FP8: the scale's divisor) */
    qs_plane_info plane[QS_PLANE_COUNT]; /* as qs_quant_plane_info: elem, shape, bytes */
} qs_backend_layout;

/* ---- 2:4 calls ------------------------------------------------------------------------------- */

#define QS_BACKEND_SP24_PRUNE      0 /* w (norms) -> values, meta (mask_out): qs_sp24_prune_compress */
#define QS_BACKEND_SP24_COMPRESS   1 /* w (mask_in) -> values, meta: qs_sp24_compress */
#define QS_BACKEND_SP24_DECOMPRESS 2 /* values_in, meta_in -> dst: qs_sp24_decompress */

/* One 2:4 call on a rows x cols tensor of `dtype` (cols % 4 == 0). Buffers the op does not use
 * are NULL; the others hold what the public function's documentation says. Host calls (sp24):
 * rows * cols > 0, and the library has checked the data (no group of a compress keeps more
 * than two, every meta nibble of a decompress is valid). Device calls (sp24_dev) may be empty
 * and check the data themselves: QS_ERR_BAD_DATA, nothing written. */
typedef struct qs_backend_sp24 {
    int32_t op;    /* QS_BACKEND_SP24_* */
    int32_t dtype; /* QS_DTYPE_* of w, values, values_in and dst (device calls: f32) */
    int64_t rows, cols;
    const void *w;          /* PRUNE, COMPRESS: rows x cols */
    const float *norms;     /* PRUNE: cols Wanda norms, or NULL for |w| */
    const uint8_t *mask_in; /* COMPRESS: rows x cols mask bytes, or NULL for the non-zeros of w */
    void *values;           /* PRUNE, COMPRESS: rows x cols / 2 kept values */
    uint16_t *meta;         /* PRUNE, COMPRESS: rows x ceil(cols / 16) words */
    uint8_t *mask_out;      /* PRUNE: rows x cols mask bytes, or NULL */
    const void *values_in;  /* DECOMPRESS: rows x cols / 2 */
    const uint16_t *meta_in; /* DECOMPRESS: rows x ceil(cols / 16) words */
    void *dst;              /* DECOMPRESS: rows x cols */
} qs_backend_sp24;

/* ---- the operations -------------------------------------------------------------------------- */

typedef struct qs_backend_ops {
    int32_t abi_version; /* QS_BACKEND_ABI_VERSION the plugin was built with: first, always */
    int32_t reserved0;
    /* The backend's name, 1 to 31 characters of [a-z0-9_-]: the registry's key. A built-in
     * name ("cuda") takes that backend's code; another name gets a code of its own when loaded
     * (qs_backend_from_name). "auto" and "cpu" are the library's. */
    const char *name;
    /* 1 if the backend can run here (e.g. a device is present), else 0 with a reason in why. */
    int32_t (*available)(char *why, size_t why_len);

    /* Host arrays: the calls of a context created for this backend. */

    /* qs_quantize: rows x cols of src_dtype into the planes of q (every plane the layout uses
     * is large enough); writes q->global_scale / q->nested_offset where the layout uses them. */
    qs_status (*quantize)(qs_backend_ctx *ctx, const qs_backend_layout *l,
                          const qs_quant_params *p, const void *src, int32_t src_dtype,
                          qs_qtensor *q);
    /* qs_dequantize: the planes of q into rows x cols of dst_dtype. */
    qs_status (*dequantize)(qs_backend_ctx *ctx, const qs_backend_layout *l,
                            const qs_quant_params *p, const qs_qtensor *q, void *dst,
                            int32_t dst_dtype);
    /* qs_matmul: y (M x N f32, large enough) = x . W^T + bias, every shape (M, N or K may be
     * 0: K = 0 gives y = +0 + bias). p is never NULL. wl is the layout of w->q (N x K, or
     * N x K/2 for QS_WEIGHT_SP24_QUANT) for quantized weights, NULL otherwise. Checked: all
     * but the nibbles of a 2:4 weight's meta, which the backend checks (QS_ERR_BAD_DATA, y
     * untouched), since the CPU checks them inside its GEMV. */
    qs_status (*matmul)(qs_backend_ctx *ctx, const qs_matmul_params *p, const void *x,
                        int32_t x_dtype, int64_t M, int64_t K, const qs_weight *w,
                        const qs_backend_layout *wl, int64_t N, const float *bias, float *y);
    /* qs_sp24_prune_compress, qs_sp24_compress, qs_sp24_decompress (and through them
     * qs_sp24_quantize / qs_sp24_dequantize). */
    qs_status (*sp24)(qs_backend_ctx *ctx, const qs_backend_sp24 *a);
    /* Calibration, qs_act_sumsq_update: sumsq[j] += sum over the rows of x[r][j]^2 in double,
     * rows in order, non-finite elements skipped (rows * cols > 0). */
    qs_status (*act_sumsq)(qs_backend_ctx *ctx, const void *src, int32_t dtype, int64_t rows,
                           int64_t cols, double *sumsq);

    /* Device arrays (include/qsparse/cuda.h, for any context). Every pointer is in device
     * memory, aligned for its element type; `stream` is the caller's stream (NULL: the
     * default one). */
    qs_status (*quantize_dev)(qs_backend_ctx *ctx, const qs_backend_layout *l,
                              const qs_quant_params *p, const void *src, int32_t src_dtype,
                              qs_qtensor *q, void *stream);
    qs_status (*dequantize_dev)(qs_backend_ctx *ctx, const qs_backend_layout *l,
                                const qs_quant_params *p, const qs_qtensor *q, void *dst,
                                int32_t dst_dtype, void *stream);
    /* qs_cuda_matmul: as matmul above with x, y, bias and every pointer of w (data, meta, the
     * planes of w->q) in device memory; the structs themselves and params in host memory. The
     * core checked what it can without reading device memory: everything but the 2:4 meta
     * nibbles. */
    qs_status (*matmul_dev)(qs_backend_ctx *ctx, const qs_matmul_params *p, const void *x,
                            int32_t x_dtype, int64_t M, int64_t K, const qs_weight *w,
                            const qs_backend_layout *wl, int64_t N, const float *bias, float *y,
                            void *stream);
    qs_status (*sp24_dev)(qs_backend_ctx *ctx, const qs_backend_sp24 *a, void *stream);
} qs_backend_ops;

/* A plugin's init: given the library's ABI version and services (keep the pointer), return
 * the operations (static storage, for the life of the process) or NULL to refuse. */
typedef const qs_backend_ops *qs_backend_init_fn(int32_t host_abi_version,
                                                 const qs_backend_host *host);

#ifdef __cplusplus
}
#endif

#endif /* QSPARSE_PLUGIN_H */
