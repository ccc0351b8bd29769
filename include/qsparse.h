/* SPDX-License-Identifier: MIT */
/*
 * libqsparse public API: quantization of neural-network tensors to NF4, FP4, INT8, FP8, MXFP4,
 * MXFP8 and NVFP4, bit-compatible with the reference formats named in docs/formats.md.
 *
 * Conventions used by every function below:
 * - Every fallible function returns a qs_status: QS_OK (0) or a negative error code. The library
 *   never aborts and never prints; the detailed message of the last failure is kept in the context
 *   (qs_ctx_last_error).
 * - On error, no output buffer has been written.
 * - Element counts, shapes and byte capacities are int64_t and must be >= 0. Enum-valued arguments
 *   are int32_t. Callers own every buffer; size queries give the exact bytes needed.
 * - No alignment is required anywhere (a tensor may start at any byte). Inputs and outputs must
 *   not overlap.
 * - A NaN that the library computes into a float output (a dequantized value with a NaN scale or
 *   code, for example) is the canonical quiet NaN: f32 0x7FC00000, f16 0x7E00, bf16 0x7FC0, on
 *   every ISA and with every compiler. NaNs that are only moved (dtype conversions, 2:4
 *   compression) keep their bits; statistics ignore NaN (docs/nan.md).
 * - A qs_ctx is used by one thread at a time; distinct contexts are independent.
 * - The library assumes the default floating-point environment (round to nearest, no
 *   flush-to-zero) and never changes it.
 */
#ifndef QSPARSE_H
#define QSPARSE_H

#include <stddef.h>
#include <stdint.h>

#ifdef __cplusplus
extern "C" {
#endif

#if defined(_WIN32)
#  if defined(QS_BUILDING_LIBRARY)
#    define QS_API __declspec(dllexport)
#  elif defined(QS_STATIC)
#    define QS_API
#  else
#    define QS_API __declspec(dllimport)
#  endif
#elif defined(__GNUC__)
#  define QS_API __attribute__((visibility("default")))
#else
#  define QS_API
#endif

/* ---------------------------------------------------------------------------------------------
 * Version
 * ------------------------------------------------------------------------------------------- */

#define QS_VERSION_MAJOR 0
#define QS_VERSION_MINOR 2
#define QS_VERSION_PATCH 0
/* The ABI generation: the shared library's soname is libqsparse.so.QS_API_VERSION. 1: the backend
 * seam (qs_ctx_backend_name became qs_ctx_isa_name; QS_BACKEND_CUDA, plane and format queries). */
#define QS_API_VERSION 1

/** The library version as "MAJOR.MINOR.PATCH" (a static string). */
QS_API const char *qs_version_string(void);
/** The library version as MAJOR * 10000 + MINOR * 100 + PATCH. */
QS_API int32_t qs_version_number(void);
/** QS_API_VERSION of the library actually loaded (compare with the header's to detect a mismatch). */
QS_API int32_t qs_api_version(void);

/* ---------------------------------------------------------------------------------------------
 * Status codes (values are pinned forever)
 * ------------------------------------------------------------------------------------------- */

typedef int32_t qs_status;

#define QS_OK                    0
#define QS_ERR_INVALID_ARG      -1  /* null pointer, negative count, unknown enum, bad block size */
#define QS_ERR_BUFFER_TOO_SMALL -2  /* an output capacity is below what a size query returns */
#define QS_ERR_OVERFLOW         -3  /* a size or byte count does not fit in int64_t */
#define QS_ERR_UNSUPPORTED      -4  /* valid values that this format, build or backend does not support */
#define QS_ERR_NONFINITE        -5  /* NaN or Inf input while the context rejects non-finite values */
#define QS_ERR_OUT_OF_MEMORY    -6  /* the context's allocator returned NULL */
#define QS_ERR_BAD_DATA         -7  /* quantized input that no quantizer can produce (corrupt) */
#define QS_ERR_SHAPE            -8  /* shapes that do not fit the format (e.g. group size) */
#define QS_ERR_BACKEND          -9  /* a backend that was explicitly asked for is not available */

/** A static, human-readable name for a status ("QS_ERR_INVALID_ARG: invalid argument"). */
QS_API const char *qs_status_str(qs_status status);

/* ---------------------------------------------------------------------------------------------
 * Element types of plain (unquantized) tensors
 * ------------------------------------------------------------------------------------------- */

#define QS_DTYPE_F32  0  /* IEEE binary32 */
#define QS_DTYPE_F16  1  /* IEEE binary16, passed as uint16_t bits */
#define QS_DTYPE_BF16 2  /* bfloat16, passed as uint16_t bits */

/** Bytes per element of a dtype (4 or 2), or 0 for an unknown dtype. */
QS_API int32_t qs_dtype_size(int32_t dtype);
/** "float32", "float16", "bfloat16", or NULL for an unknown dtype. */
QS_API const char *qs_dtype_name(int32_t dtype);
/** The dtype for a name above (also "f32", "f16", "bf16"), or -1. */
QS_API int32_t qs_dtype_from_name(const char *name);

/* ---------------------------------------------------------------------------------------------
 * Instruction sets and the context
 * ------------------------------------------------------------------------------------------- */

/* ISA bits: one per CPU feature a kernel may need (x86 in bits 0-7 and 16-23, Arm in 8-15).
 * A mask of 0 means the scalar reference only. Tiers (below) are named sets of these bits. */
#define QS_ISA_AVX2          (1u << 0)  /* x86-64 AVX2 + FMA + F16C, OS saves YMM state */
#define QS_ISA_AVX512        (1u << 1)  /* AVX-512 F/BW/DQ/VL, OS saves ZMM and opmask state */
#define QS_ISA_AVX512_VNNI   (1u << 2)  /* AVX512_VNNI (with AVX-512) */
#define QS_ISA_AVX512_BF16   (1u << 3)  /* AVX512_BF16 (with AVX-512) */
#define QS_ISA_AVX_VNNI      (1u << 4)  /* AVX-VNNI: the VEX encoding, no AVX-512 needed */
#define QS_ISA_AVX512_FP16   (1u << 5)  /* AVX512_FP16 (with AVX-512) */
#define QS_ISA_AMX_TILE      (1u << 6)  /* AMX-TILE, OS saves XTILECFG and XTILEDATA state */
#define QS_ISA_AMX_INT8      (1u << 7)  /* AMX-INT8 (with AMX-TILE) */
#define QS_ISA_AMX_BF16      (1u << 16) /* AMX-BF16 (with AMX-TILE) */
#define QS_ISA_NEON          (1u << 8)  /* AArch64 Advanced SIMD */
#define QS_ISA_NEON_DOTPROD  (1u << 9)  /* SDOT/UDOT */
#define QS_ISA_NEON_FP16     (1u << 10) /* FP16 arithmetic */
#define QS_ISA_NEON_BF16     (1u << 11) /* BF16 instructions */
#define QS_ISA_SVE           (1u << 12) /* detected and reported; no SVE kernels yet */
#define QS_ISA_NEON_I8MM     (1u << 13) /* Int8 matrix multiply (SMMLA/UMMLA/USDOT) */
#define QS_ISA_ALL           0xFFFFFFFFu

/** The ISA bits this CPU and OS support (detected on each call; cheap). */
QS_API uint32_t qs_cpu_isa(void);
/** Name of a single ISA bit ("avx2", "neon-dotprod", ...), "scalar" for 0, NULL otherwise. */
QS_API const char *qs_isa_name(uint32_t isa_bit);

/**
 * An ISA tier: a named set of ISA bits, what QS_FORCE_ISA, the test suite, the benchmarks and
 * the Python binding call a level. Tiers need not nest (AVX-VNNI without AVX-512, dot product
 * vs I8MM vs SVE). One table in the library lists them, in order from the reference up.
 */
typedef struct qs_isa_tier {
    const char *name;  /* "scalar", "avx2", "avx-vnni", "avx512", "neon-i8mm", ... */
    const char *arch;  /* "any", "x86_64" or "aarch64": where its bits can exist */
    uint32_t required; /* the tier is available when the CPU has all of these bits */
    uint32_t allowed;  /* the ISA mask that QS_FORCE_ISA=<name> applies (required included) */
    int32_t available; /* 1 if this CPU and OS have every bit of `required`, else 0 */
    int32_t reserved;  /* 0 */
} qs_isa_tier;

/** Number of ISA tiers in the table (all architectures). */
QS_API int32_t qs_isa_tier_count(void);
/**
 * Fill *info with tier `index` (0 <= index < qs_isa_tier_count(); index 0 is "scalar"). The
 * strings are static. QS_ERR_INVALID_ARG for a null `info` or an index out of range.
 */
QS_API qs_status qs_isa_tier_info(int32_t index, qs_isa_tier *info);

/** Allocator hooks. alloc returns memory aligned to `align` (a power of two) or NULL. */
typedef struct qs_allocator {
    void *(*alloc)(void *user, size_t size, size_t align);
    void (*free)(void *user, void *ptr);
    void *user;
} qs_allocator;

/* Policy for NaN / Inf inputs of quantizers. */
#define QS_NONFINITE_ENCODE 0 /* default: the defined bits of docs/formats.md */
#define QS_NONFINITE_REJECT 1 /* return QS_ERR_NONFINITE before writing anything */

/*
 * Backends: where a context's operations run. An operation is a call of one of these families:
 * qs_quantize, qs_dequantize, qs_matmul, 2:4 (qs_sp24_prune_compress, qs_sp24_compress,
 * qs_sp24_decompress, and through them qs_sp24_quantize / qs_sp24_dequantize) and the
 * calibration statistic qs_act_sumsq_update. Its arguments are validated in the core, then the
 * context's backend runs it. The CPU backend is always there and runs every operation. Other
 * backends are plugins (include/qsparse/plugin.h); one that lacks an operation makes the call
 * return QS_ERR_UNSUPPORTED on a context created for it, with a message naming the backend and
 * the operation (qs_ctx_last_error): the call never runs on the CPU instead. The CUDA plugin runs
 * quantize, dequantize and matmul on host arrays, plus the device API (qsparse/cuda.h). Every
 * other function computes on the CPU whatever the context's backend (masks, observers, Hessians,
 * GPTQ / SparseGPT, conversions, metadata reorders).
 *
 * Plugins are shared modules loaded with dlopen the first time their backend is asked for (a
 * context, qs_backend_available, qs_cuda_*, or qs_backend_load), from the file named by the
 * QS_PLUGIN_PATH environment variable, else the backend's file (libqsparse-cuda.so for CUDA) in
 * the directory of the loaded libqsparse. The current directory is never searched: a relative
 * QS_PLUGIN_PATH (or qs_backend_load path) is joined to it once and that absolute file is
 * checked and loaded, and where libqsparse is linked into the program itself, its directory is
 * the program's own, read from /proc/self/exe, not argv[0] (the Python package's tool: the
 * package folder, where it installs the plugin). A plugin is accepted only if it exports its init
 * symbol, was built for this library's backend ABI version and gives a valid backend name; every
 * failure leaves the CPU backend working and a message naming the cause and the absolute path
 * of the file (qs_backend_message). A plugin registers the backend it names: a built-in one (CUDA) takes its
 * code, a backend of another name (loaded with qs_backend_load) gets the next free code, which
 * qs_backend_from_name finds; codes run from 0 without a gap, qs_backend_name is NULL past the
 * last one.
 */
#define QS_BACKEND_AUTO 0 /* host arrays run on the CPU; device arrays go through qs_cuda_* */
#define QS_BACKEND_CPU  1 /* CPU, best ISA allowed by isa_mask */
#define QS_BACKEND_CUDA 2 /* the CUDA plugin; qs_ctx_create gives QS_ERR_BACKEND without it */

/** "auto", "cpu", "cuda", a loaded plugin backend's own name, or NULL for an unknown code. The
 * string lives as long as the process. Thread-safe. */
QS_API const char *qs_backend_name(int32_t backend);
/** The backend code for a name above, or -1. */
QS_API int32_t qs_backend_from_name(const char *name);
/**
 * Whether a context created for `backend` would run (1) or get QS_ERR_BACKEND (0). For a plugin
 * backend this loads the plugin if no load was tried yet. AUTO and CPU are always 1.
 */
QS_API int32_t qs_backend_available(int32_t backend);
/**
 * Why a plugin backend is not available: "backend plugin PATH: no such file", "... cannot be
 * loaded: ...", "... does not export qs_backend_plugin_init", "... built for backend ABI version
 * N, this library has M", "... the backend name "cpu" is the library's own", or the plugin's own
 * reason (e.g. no device). A file that fails before it names its backend leaves its message with
 * every built-in plugin backend (CUDA), since it may have been meant for any of them. "" when
 * the backend is available, was not tried yet, and for AUTO / CPU. The string stays valid until
 * the next load. Thread-safe.
 */
QS_API const char *qs_backend_message(int32_t backend);
/**
 * Load a backend plugin from `path` and register it for the backend it names; that backend's
 * search beside the library is then not made (a later plugin for the same backend replaces an
 * earlier one for contexts created afterwards). path NULL repeats the default search of every
 * built-in plugin backend. Returns QS_OK (path NULL: some plugin backend has a plugin) or
 * QS_ERR_BACKEND (the reason in qs_backend_message(QS_BACKEND_CUDA), or in that of the backend
 * the plugin named). Thread-safe.
 */
QS_API qs_status qs_backend_load(const char *path);

typedef struct qs_ctx_params {
    int32_t num_threads;  /* 0: OpenMP's default; 1: single-threaded */
    int32_t backend;      /* QS_BACKEND_*: AUTO (default), CPU, CUDA, or a plugin backend's code */
    uint32_t isa_mask;    /* intersected with qs_cpu_isa() and QS_FORCE_ISA; default QS_ISA_ALL */
    int32_t nonfinite;    /* QS_NONFINITE_* */
    qs_allocator allocator; /* alloc == NULL: the C library's aligned allocation */
    int64_t reserved[8];  /* must be zero */
} qs_ctx_params;

typedef struct qs_ctx qs_ctx;

/** Fill *params with the defaults. */
QS_API void qs_ctx_params_init(qs_ctx_params *params);

/**
 * Create a context: detects the CPU once, intersects the result with params->isa_mask and the
 * QS_FORCE_ISA environment variable (a tier name of qs_isa_tier_info: "scalar", "avx2",
 * "avx512", "neon", ...; it applies that tier's `allowed` mask, so a level above what the machine
 * has is clamped, never honoured; an unknown name forces nothing) and fills the context's kernel
 * table: per slot, the highest-ranked kernel whose ISA bits the result contains.
 * params may be NULL for the defaults. Returns QS_ERR_INVALID_ARG for a null `out` or bad params,
 * QS_ERR_BACKEND when params->backend names a backend that cannot run here (the reason is in
 * qs_backend_message), QS_ERR_OUT_OF_MEMORY if the allocator fails. Thread-safe.
 */
QS_API qs_status qs_ctx_create(const qs_ctx_params *params, qs_ctx **out);
/** Destroy a context (NULL is accepted). */
QS_API void qs_ctx_destroy(qs_ctx *ctx);
/** The message of the last failure in this context ("" if none; never NULL). */
QS_API const char *qs_ctx_last_error(const qs_ctx *ctx);
/** The ISA bits the context's kernel table was built for. */
QS_API uint32_t qs_ctx_isa(const qs_ctx *ctx);
/** Name of the last tier of the tier table (qs_isa_tier_info) whose `required` bits the
 * context's ISA contains: "scalar", "avx2", "avx512", "avx512-vnni", "neon", ... */
QS_API const char *qs_ctx_isa_name(const qs_ctx *ctx);
/** The backend the context runs on: QS_BACKEND_CPU, QS_BACKEND_CUDA or a plugin backend's code
 * (never AUTO); -1 for NULL. */
QS_API int32_t qs_ctx_backend(const qs_ctx *ctx);

/* Keys for qs_ctx_set / qs_ctx_get. */
#define QS_PARAM_NUM_THREADS 1 /* >= 0; 0 = OpenMP default */
#define QS_PARAM_NONFINITE   2 /* QS_NONFINITE_* */
#define QS_PARAM_ISA         3 /* get only: same as qs_ctx_isa */
#define QS_PARAM_PROFILE     4 /* 0 (default) or 1: profiling counters (qsparse/profile.h) */
#define QS_PARAM_PARALLEL_GRAIN   5 /* >= 0: bytes of work per thread, default 1048576 */
#define QS_PARAM_PARALLEL_BACKOFF 6 /* 1 (default) or 0: back off from threads on a busy machine */

/*
 * Threads. QS_PARAM_NUM_THREADS is the most a call uses; how many it does use follows its work
 * and the machine:
 *   - a call gets one thread per QS_PARAM_PARALLEL_GRAIN bytes it reads and writes (1 MiB by
 *     default, about 100 us of work), so a small call (a 64 x 256 f32 quantize moves about
 *     80 KiB) runs on the calling thread and never wakes another; 0 lets any call of two chunks
 *     or more use every thread;
 *   - with QS_PARAM_PARALLEL_BACKOFF (the default), a parallel call that took longer than its
 *     work would have taken on one thread (the other threads got no CPU in time, because other
 *     processes hold them) makes the context's next calls run on the calling thread for a while:
 *     10 ms, doubled after each further such call up to 1 s, halved again after a call that the
 *     threads made faster. On a busy machine calls then cost about what their work costs on one
 *     thread; on a quiet one large calls use every thread.
 * Results are identical whatever this decides (fixed chunks). The environment variables
 * QS_PARALLEL_GRAIN (bytes) and QS_PARALLEL_BACKOFF (0 or 1), read by qs_ctx_create, set a new
 * context's defaults. Idle OpenMP threads spin before they sleep (GNU OpenMP: up to a few ms);
 * on a machine shared with other work, OMP_WAIT_POLICY=passive in the environment of the
 * process makes them sleep at once.
 */

/** Set a context parameter. QS_ERR_INVALID_ARG for an unknown key or value. */
QS_API qs_status qs_ctx_set(qs_ctx *ctx, int32_t key, int64_t value);
/** Read a context parameter into *value. */
QS_API qs_status qs_ctx_get(const qs_ctx *ctx, int32_t key, int64_t *value);

/** Number of kernel-table slots (one per kernel family and operation). */
QS_API int32_t qs_ctx_kernel_count(const qs_ctx *ctx);
/**
 * Which kernel the context runs for slot `index` (0 <= index < qs_ctx_kernel_count): the slot
 * name ("nf4_quant") in *slot and the function name ("qs_nf4_quant__avx2") in *impl.
 */
QS_API qs_status qs_ctx_kernel_info(const qs_ctx *ctx, int32_t index, const char **slot,
                                    const char **impl);

/* ---------------------------------------------------------------------------------------------
 * Formats
 * ------------------------------------------------------------------------------------------- */

#define QS_FORMAT_NF4       1 /* bitsandbytes NF4 (formats.md §2, §3, §5) */
#define QS_FORMAT_FP4       2 /* bitsandbytes FP4 (formats.md §4, §5); not OCP E2M1 */
#define QS_FORMAT_INT8      3 /* plain INT8, per tensor / row / group, symmetric or not (§9) */
#define QS_FORMAT_LLM_INT8  4 /* LLM.int8 row-wise absmax, stores the row absmax (SCB) (§8) */
#define QS_FORMAT_FP8_E4M3  5 /* OCP E4M3 "fn", saturating, per-tensor f32 scale (§14) */
#define QS_FORMAT_FP8_E5M2  6 /* OCP E5M2, saturating, per-tensor f32 scale (§14) */
#define QS_FORMAT_MXFP4     7 /* OCP MX v1.0, E2M1 elements, 32-blocks, E8M0 scale (§13) */
#define QS_FORMAT_MXFP8     8 /* OCP MX v1.0, E4M3 elements, 32-blocks, E8M0 scale (§13) */
#define QS_FORMAT_NVFP4     9 /* NVIDIA NVFP4: E2M1, 16-blocks, E4M3 scale, f32 tensor scale (§14) */

/** Number of the highest format code (formats are 1 ... qs_format_count()). */
QS_API int32_t qs_format_count(void);
/** Lower-case name ("nf4", "fp8_e4m3", "llm_int8", ...) or NULL for an unknown format. */
QS_API const char *qs_format_name(int32_t format);
/** Format code for a name above in any letter case ("NF4", "nf4"), or -1. */
QS_API int32_t qs_format_from_name(const char *name);
/** Default block size: 64 for NF4/FP4, 32 for MX, 16 for NVFP4, 0 for formats without blocks. */
QS_API int32_t qs_format_block_size(int32_t format);
/** Bits of one stored element code (4 or 8), or 0 for an unknown format. */
QS_API int32_t qs_format_bits(int32_t format);

/* Where a format's blocks run (qs_format_info.blocks). */
#define QS_BLOCKS_NONE 0 /* no blocks: one scale per tensor or per row */
#define QS_BLOCKS_FLAT 1 /* over the flattened tensor, a block may span rows (NF4, FP4) */
#define QS_BLOCKS_ROWS 2 /* along each row, never spanning two (INT8 groups, MX, NVFP4) */

/* Fields of qs_quant_params a format reads (qs_format_info.options); the others must keep the
 * values of qs_quant_params_init. */
#define QS_OPT_BLOCK_SIZE     (1u << 0) /* block_size (fixed where block_min == block_max) */
#define QS_OPT_DOUBLE_QUANT   (1u << 1)
#define QS_OPT_GRANULARITY    (1u << 2)
#define QS_OPT_SYMMETRIC      (1u << 3) /* symmetric = 0 adds the zero-point plane */
#define QS_OPT_SCALE          (1u << 4)
#define QS_OPT_SCALE_ROUNDING (1u << 5)

/** What a format is: the answers of the queries above in one struct. */
typedef struct qs_format_info {
    const char *name;      /* as qs_format_name */
    int32_t bits;          /* bits of one element code */
    int32_t block_size;    /* the default block size; 0 for formats without blocks */
    int32_t block_min;     /* block sizes accepted (INT8: the group size); equal when fixed */
    int32_t block_max;
    int32_t blocks;        /* QS_BLOCKS_* */
    uint32_t options;      /* QS_OPT_* */
    int32_t global_scale;  /* 1: qs_qtensor.global_scale holds an f32 per-tensor scale (NVFP4) */
    int32_t reserved0;
    int64_t reserved[4];   /* zero */
} qs_format_info;

/** Fill *info for `format`. QS_ERR_INVALID_ARG for an unknown format or a NULL info. */
QS_API qs_status qs_format_info_get(int32_t format, qs_format_info *info);

/* INT8 granularity. */
#define QS_GRAN_TENSOR 0 /* one scale for the whole tensor */
#define QS_GRAN_ROW    1 /* one scale per row (= per output channel) */
#define QS_GRAN_GROUP  2 /* one scale per `block_size` consecutive elements of a row */

/* MX scale rounding. */
#define QS_MX_SCALE_FLOOR 0 /* OCP sample algorithm: floor(log2 amax) - emax (default) */
#define QS_MX_SCALE_RCEIL 1 /* NVIDIA: 2^ceil(log2(amax / elem_max)), never clips */

/**
 * Format parameters. Initialise with qs_quant_params_init(), then change what differs.
 * Each field applies to some formats only; the others must keep their initial values.
 */
typedef struct qs_quant_params {
    int32_t format;         /* QS_FORMAT_* */
    int32_t block_size;     /* NF4/FP4: 32...4096 power of two (or an even size 2...4096);
                               INT8 with QS_GRAN_GROUP: the group size, must divide cols;
                               MX: 32, NVFP4: 16 (fixed) */
    int32_t granularity;    /* INT8: QS_GRAN_*; default QS_GRAN_ROW. LLM.int8 is always by row */
    int32_t symmetric;      /* INT8: 1 (default) symmetric, 0 asymmetric with zero points */
    int32_t double_quant;   /* NF4/FP4: 1 quantizes the absmax again (formats.md §6) */
    int32_t scale_rounding; /* MX: QS_MX_SCALE_FLOOR (default) or QS_MX_SCALE_RCEIL */
    float scale;            /* FP8: a given scale (> 0, finite); 0 = from the data (amax / max).
                               NVFP4: a given per-tensor scale; 0 = amax / 2688 */
    int32_t reserved0;
    int64_t reserved[6];    /* must be zero */
} qs_quant_params;

/** Fill *params with the defaults for `format` (also for an unknown one: checked later). */
QS_API void qs_quant_params_init(qs_quant_params *params, int32_t format);

/*
 * A quantized tensor is a set of caller-owned planes:
 *
 * | format        | data                     | scale                               | zero_point    | nested_scale        |
 * |---------------|--------------------------|-------------------------------------|---------------|---------------------|
 * | NF4, FP4      | (n+1)/2 bytes, high nibble first | f32 absmax [nb]; with double_quant uint8 codes [nb] | - | f32 [ceil(nb/256)] (double_quant) |
 * | INT8          | int8 [rows*cols]         | f32 [1 | rows | rows*cols/group]    | int8, same count (asymmetric) | - |
 * | LLM_INT8      | int8 [rows*cols]         | f32 row absmax [rows] (SCB)         | -             | -                   |
 * | FP8_E4M3/E5M2 | uint8 [rows*cols]        | f32 [1]                             | -             | -                   |
 * | MXFP4         | rows*ceil(cols/2) bytes, low nibble first | E8M0 bytes [rows*ceil(cols/32)] | - | -              |
 * | MXFP8         | uint8 [rows*cols] (E4M3) | E8M0 bytes [rows*ceil(cols/32)]     | -             | -                   |
 * | NVFP4         | rows*ceil(cols/2) bytes, low nibble first | E4M3 bytes [rows*ceil(cols/16)] | - | -              |
 *
 * with n = rows * cols and nb = ceil(n / block_size): NF4/FP4 blocks run over the flattened tensor;
 * INT8 groups, MX and NVFP4 blocks run along each row and never span two rows. A 1-D tensor is
 * rows = 1. NVFP4 also has the f32 per-tensor scale (`global_scale`); double quantization the f32
 * mean offset (`nested_offset`); they live in the struct itself.
 */
#define QS_PLANE_DATA         0
#define QS_PLANE_SCALE        1
#define QS_PLANE_ZERO_POINT   2
#define QS_PLANE_NESTED_SCALE 3
#define QS_PLANE_COUNT        4

typedef struct qs_qtensor {
    void *data;            int64_t data_bytes;
    void *scale;           int64_t scale_bytes;
    void *zero_point;      int64_t zero_point_bytes;
    void *nested_scale;    int64_t nested_scale_bytes;
    float global_scale;    /* NVFP4: written by quantize, read by dequantize */
    float nested_offset;   /* NF4/FP4 double quantization: written by quantize, read by dequantize */
    int64_t reserved[4];   /* must be zero */
} qs_qtensor;

/**
 * Exact size in bytes of one plane (QS_PLANE_*) for a rows x cols tensor; 0 for a plane the
 * format does not use. Returns QS_ERR_INVALID_ARG for bad params or negative sizes, QS_ERR_SHAPE
 * for a group size that does not divide cols, QS_ERR_OVERFLOW when the size exceeds int64_t.
 * It has no context for a message: qs_quant_plane_info answers the same with one.
 */
QS_API qs_status qs_quant_size(const qs_quant_params *params, int64_t rows, int64_t cols,
                               int32_t plane, int64_t *bytes);

/* Element types of the planes (qs_plane_info.elem). */
#define QS_ELEM_NONE 0 /* the format does not use the plane */
#define QS_ELEM_U8   1 /* bytes: codes (two 4-bit codes per byte when bits == 4) or byte scales */
#define QS_ELEM_I8   2 /* int8 codes or zero points */
#define QS_ELEM_F32  3 /* f32 scales */

/** One plane of a quantized tensor, as qs_quant_plane_info describes it. */
typedef struct qs_plane_info {
    int32_t elem;       /* QS_ELEM_* */
    int32_t bits;       /* bits of one stored value: 4 (two per byte), 8 or 32; 0 if unused */
    int32_t ndim;       /* 0 unused; 1: shape[0] values over the flattened tensor;
                           2: shape[0] = rows lines of shape[1] (one line per tensor row) */
    int32_t reserved0;
    int64_t shape[2];   /* in elements of `elem` (bytes for QS_ELEM_U8); shape[1] is 1 when
                           ndim == 1; {0, 1} for an unused plane */
    int64_t values;     /* stored values: codes, scales or zero points */
    int64_t bytes;      /* = qs_quant_size(); shape[0] * shape[1] * sizeof(elem) */
    int64_t reserved[4];
} qs_plane_info;

/**
 * Describe plane `plane` (QS_PLANE_*) of a rows x cols tensor quantized with *params: its
 * element type, shape and exact byte size, so that bindings and tools allocate and name planes
 * by asking the library. ctx may be NULL; when given, a failure leaves its message there
 * (qs_ctx_last_error). Statuses as qs_quant_size; *info is written only on QS_OK.
 */
QS_API qs_status qs_quant_plane_info(qs_ctx *ctx, const qs_quant_params *params, int64_t rows,
                                     int64_t cols, int32_t plane, qs_plane_info *info);

/**
 * Quantize a rows x cols row-major tensor of `src_dtype` elements into the planes of *q.
 * Every plane the format uses must be non-NULL with a capacity of at least qs_quant_size();
 * unused planes are ignored. q->global_scale / q->nested_offset are written where used.
 *
 * Returns QS_OK; QS_ERR_INVALID_ARG (null pointer, bad params, negative size), QS_ERR_SHAPE,
 * QS_ERR_OVERFLOW, QS_ERR_BUFFER_TOO_SMALL, QS_ERR_NONFINITE (reject policy),
 * QS_ERR_OUT_OF_MEMORY (double quantization needs nb floats of scratch), QS_ERR_UNSUPPORTED (the
 * context's backend has no quantize). Nothing is written on error. Results are identical for
 * every ISA and thread count.
 */
QS_API qs_status qs_quantize(qs_ctx *ctx, const qs_quant_params *params, const void *src,
                             int32_t src_dtype, int64_t rows, int64_t cols, qs_qtensor *q);

/**
 * Dequantize the planes of *q (a rows x cols tensor quantized with *params) into dst, as
 * `dst_dtype` elements, row-major; dst_bytes is dst's capacity. Scale and zero-point planes are
 * decoded as stored (formats.md §5.3, §6.2, §8, §9, §10, §13, §14).
 *
 * Returns QS_OK, QS_ERR_INVALID_ARG, QS_ERR_SHAPE, QS_ERR_OVERFLOW, QS_ERR_BUFFER_TOO_SMALL
 * (a plane or dst shorter than its size), QS_ERR_UNSUPPORTED (the context's backend has no
 * dequantize). Nothing is written on error.
 */
QS_API qs_status qs_dequantize(qs_ctx *ctx, const qs_quant_params *params, const qs_qtensor *q,
                               int64_t rows, int64_t cols, void *dst, int32_t dst_dtype,
                               int64_t dst_bytes);

/**
 * Convert n elements between plain dtypes (f32, f16, bf16) with the library's rules: RNE,
 * overflow to +-Inf, NaN kept (formats.md §0 rule 4). dst_bytes is dst's capacity.
 */
QS_API qs_status qs_convert(qs_ctx *ctx, const void *src, int32_t src_dtype, void *dst,
                            int32_t dst_dtype, int64_t n, int64_t dst_bytes);

/* ---------------------------------------------------------------------------------------------
 * Struct layouts, for bindings that mirror the public structs (e.g. with ctypes)
 * ------------------------------------------------------------------------------------------- */

#define QS_STRUCT_ALLOCATOR       1 /* qs_allocator */
#define QS_STRUCT_CTX_PARAMS      2 /* qs_ctx_params */
#define QS_STRUCT_QUANT_PARAMS    3 /* qs_quant_params */
#define QS_STRUCT_QTENSOR         4 /* qs_qtensor */
#define QS_STRUCT_PLANE_INFO      5 /* qs_plane_info */
#define QS_STRUCT_FORMAT_INFO     6 /* qs_format_info */
#define QS_STRUCT_OBSERVER_PARAMS 7 /* qs_observer_params (qsparse/calib.h) */
#define QS_STRUCT_ISA_TIER        8 /* qs_isa_tier */
#define QS_STRUCT_MATMUL_PARAMS   9 /* qs_matmul_params (qsparse/matmul.h) */
#define QS_STRUCT_WEIGHT          10 /* qs_weight (qsparse/matmul.h) */
#define QS_STRUCT_PROFILE_ENTRY   11 /* qs_profile_entry (qsparse/profile.h) */
#define QS_STRUCT_RECOMMEND_PARAMS 12 /* qs_recommend_params (qsparse/recommend.h) */
#define QS_STRUCT_CANDIDATE       13 /* qs_candidate (qsparse/recommend.h) */
#define QS_STRUCT_GPTQ_PARAMS     14 /* qs_gptq_params (qsparse/gptq.h) */
#define QS_STRUCT_SPARSEGPT_PARAMS 15 /* qs_sparsegpt_params (qsparse/gptq.h) */

/** sizeof the struct QS_STRUCT_* as compiled into the library, or -1 for an unknown kind. */
QS_API int64_t qs_struct_size(int32_t kind);
/** offsetof the field named `field` ("block_size") in struct `kind`, or -1 if there is none. */
QS_API int64_t qs_struct_offset(int32_t kind, const char *field);

/* ---------------------------------------------------------------------------------------------
 * Codebooks (the tables a checkpoint stores as quant_map / nested_quant_map)
 * ------------------------------------------------------------------------------------------- */

#define QS_CODEBOOK_NF4    1 /* 16 f32 values, formats.md §2 */
#define QS_CODEBOOK_FP4    2 /* 16 f32 values, formats.md §4 (bitsandbytes FP4) */
#define QS_CODEBOOK_DYN8   3 /* 256 f32 values, the signed dynamic map of formats.md §6.3 */
#define QS_CODEBOOK_E2M1   4 /* 16 f32 values, formats.md §11 */
#define QS_CODEBOOK_E4M3   5 /* 256 f32 values (NaN for 0x7F, 0xFF), formats.md §10 */
#define QS_CODEBOOK_E5M2   6 /* 256 f32 values (Inf, NaN included), formats.md §10 */

/**
 * Copy codebook `which` into dst (capacity `count` floats). Returns QS_ERR_INVALID_ARG for an
 * unknown codebook or NULL dst, QS_ERR_BUFFER_TOO_SMALL if count is short (nothing written).
 */
QS_API qs_status qs_codebook(int32_t which, float *dst, int64_t count);
/** Number of entries of a codebook (16 or 256), or 0 for an unknown one. */
QS_API int64_t qs_codebook_size(int32_t which);

#ifdef __cplusplus
}
#endif

/* N:M and 2:4 sparsity (docs/sparsity.md). */
#include "qsparse/sparse.h"
/* Calibration: observers, targets, dynamic quantization (docs/calibration.md). */
#include "qsparse/calib.h"
/* Matmul with compressed weights and LLM.int8 activations. */
#include "qsparse/matmul.h"
/* The device API of the CUDA backend plugin (device pointers, a CUDA stream). */
#include "qsparse/cuda.h"
/* Second-order calibration: Hessians, GPTQ, SparseGPT (docs/calibration.md §14-§16). */
#include "qsparse/gptq.h"

#endif /* QSPARSE_H */
