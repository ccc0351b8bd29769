/* SPDX-License-Identifier: MIT */
/*
 * The backend seam. The public entry points validate every argument and size in the core, then
 * call the context's backend operations (struct qs_backend_ops); the CPU backend is the drivers
 * of quantize.c and dequantize.c. Other backends come from plugins: a shared module (the CUDA
 * one is libqsparse-cuda.so) exporting QS_BACKEND_INIT_SYMBOL, loaded by backend.c with dlopen
 * and accepted only when its ABI version equals QS_BACKEND_ABI_VERSION.
 *
 * A plugin is built from this source tree against this header and internal.h. Its operations
 * get arguments the core has already checked (the layout is computed, every plane and the
 * destination are large enough, nothing is NULL that is needed) and must keep the public
 * promises: nothing written on error, the reason in ctx->last_error (it may snprintf there; the
 * core adds a generic message when it stays empty).
 */
#ifndef QS_CORE_BACKEND_H
#define QS_CORE_BACKEND_H

#include "internal.h"

/* Raised whenever struct qs_backend_ops, struct qs_layout, struct qs_ctx or the meaning of an
 * operation changes: a plugin built for another version is refused, never called. */
#define QS_BACKEND_ABI_VERSION 2

/* The one symbol a plugin exports, of type qs_backend_init_fn. */
#define QS_BACKEND_INIT_SYMBOL "qs_backend_plugin_init"

/* A 2:4 call of the device API: op QS_SP24_DEV_PRUNE (w, norms -> values, meta, mask_out),
 * _COMPRESS (w, mask_in -> values, meta) or _DECOMPRESS (values_in, meta_in -> dst); rows x
 * cols f32 with cols % 4 == 0, every buffer large enough. */
#define QS_SP24_DEV_PRUNE 0
#define QS_SP24_DEV_COMPRESS 1
#define QS_SP24_DEV_DECOMPRESS 2

struct qs_sp24_dev {
    int32_t op;
    int64_t rows, cols;
    const float *w, *norms;
    const uint8_t *mask_in;
    float *values;
    uint16_t *meta;
    uint8_t *mask_out;
    const float *values_in;
    const uint16_t *meta_in;
    float *dst;
};

struct qs_backend_ops {
    int32_t abi_version; /* QS_BACKEND_ABI_VERSION the plugin was built with */
    int32_t backend;     /* the QS_BACKEND_* it implements (not AUTO, not CPU) */
    const char *name;    /* a short name for messages ("cuda") */
    /* 1 if the backend can run here (e.g. a device is present), else 0 with a reason in why. */
    int32_t (*available)(char *why, size_t why_len);
    qs_status (*quantize)(qs_ctx *ctx, const struct qs_layout *l, const qs_quant_params *p,
                          const void *src, int32_t src_dtype, qs_qtensor *q);
    qs_status (*dequantize)(qs_ctx *ctx, const struct qs_layout *l, const qs_quant_params *p,
                            const qs_qtensor *q, void *dst, int32_t dst_dtype);
    /* ABI 2: the device-pointer entry points (qs_cuda_*). Every pointer is in device memory,
     * aligned for its element type; `stream` is the caller's cudaStream_t (NULL: the default
     * stream). May be NULL in a plugin without them. */
    qs_status (*quantize_dev)(qs_ctx *ctx, const struct qs_layout *l, const qs_quant_params *p,
                              const void *src, int32_t src_dtype, qs_qtensor *q, void *stream);
    qs_status (*dequantize_dev)(qs_ctx *ctx, const struct qs_layout *l, const qs_quant_params *p,
                                const qs_qtensor *q, void *dst, int32_t dst_dtype, void *stream);
    qs_status (*gemv_dev)(qs_ctx *ctx, const struct qs_layout *l, const qs_quant_params *p,
                          const qs_qtensor *w, const float *x, float *y, void *stream);
    /* 2:4 on f32 device arrays, arguments checked by the core (struct qs_sp24_dev). */
    qs_status (*sp24_dev)(qs_ctx *ctx, const struct qs_sp24_dev *a, void *stream);
};

/* A plugin's init: given the host's ABI version, return its operations (static storage) or
 * NULL when it cannot serve that version. */
typedef const struct qs_backend_ops *qs_backend_init_fn(int32_t host_abi_version);

/* The CPU backend (backend_cpu.c). */
QS_INTERNAL const struct qs_backend_ops *qs_backend_cpu(void);
/* The operations for a context created with params->backend, or NULL (QS_ERR_BACKEND; the
 * reason is in qs_backend_message). AUTO picks a plugin backend that is available, else CPU. */
QS_INTERNAL const struct qs_backend_ops *qs_backend_select(int32_t backend);

/* The CPU drivers (quantize.c, dequantize.c), called after the core's checks. */
QS_INTERNAL qs_status qs_cpu_quantize(qs_ctx *ctx, const struct qs_layout *l,
                                      const qs_quant_params *p, const void *src,
                                      int32_t src_dtype, qs_qtensor *q);
QS_INTERNAL qs_status qs_cpu_dequantize(qs_ctx *ctx, const struct qs_layout *l,
                                        const qs_quant_params *p, const qs_qtensor *q, void *dst,
                                        int32_t dst_dtype);

#endif /* QS_CORE_BACKEND_H */
