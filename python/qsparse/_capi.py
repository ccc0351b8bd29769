# SPDX-License-Identifier: MIT
"""The C API as ctypes sees it: constants, struct mirrors and function signatures, in one place.

Every struct mirror names its ``QS_STRUCT_*`` kind; ``check_layouts`` compares the size and every
field offset of each mirror with what the loaded library reports (``qs_struct_size``,
``qs_struct_offset``), so a mirror that drifts from include/qsparse.h fails at load time with the
field that differs instead of corrupting memory later.
"""

from __future__ import annotations

import ctypes
from typing import Dict, List, Optional, Tuple

c = ctypes

# ---- constants of include/qsparse.h (pinned there) -----------------------------------------------

QS_OK = 0
QS_ERR_INVALID_ARG = -1
QS_ERR_BUFFER_TOO_SMALL = -2
QS_ERR_OVERFLOW = -3
QS_ERR_UNSUPPORTED = -4
QS_ERR_NONFINITE = -5
QS_ERR_OUT_OF_MEMORY = -6
QS_ERR_BAD_DATA = -7
QS_ERR_SHAPE = -8
QS_ERR_BACKEND = -9

QS_DTYPE_F32, QS_DTYPE_F16, QS_DTYPE_BF16 = 0, 1, 2

QS_PARAM_NUM_THREADS = 1
QS_PARAM_NONFINITE = 2
QS_PARAM_ISA = 3
QS_PARAM_PROFILE = 4
QS_PARAM_PARALLEL_GRAIN = 5
QS_PARAM_PARALLEL_BACKOFF = 6

QS_ISA_AVX2 = 1 << 0
QS_ISA_AVX512 = 1 << 1
QS_ISA_AVX512_VNNI = 1 << 2
QS_ISA_AVX512_BF16 = 1 << 3
QS_ISA_AVX_VNNI = 1 << 4
QS_ISA_AVX512_FP16 = 1 << 5
QS_ISA_AMX_TILE = 1 << 6
QS_ISA_AMX_INT8 = 1 << 7
QS_ISA_AMX_BF16 = 1 << 16
QS_ISA_NEON = 1 << 8
QS_ISA_NEON_DOTPROD = 1 << 9
QS_ISA_NEON_FP16 = 1 << 10
QS_ISA_NEON_BF16 = 1 << 11
QS_ISA_SVE = 1 << 12
QS_ISA_NEON_I8MM = 1 << 13
QS_ISA_ALL = 0xFFFFFFFF

QS_BACKEND_AUTO, QS_BACKEND_CPU, QS_BACKEND_CUDA = 0, 1, 2

QS_PLANE_DATA, QS_PLANE_SCALE, QS_PLANE_ZERO_POINT, QS_PLANE_NESTED_SCALE = 0, 1, 2, 3
QS_PLANE_COUNT = 4

QS_ELEM_NONE, QS_ELEM_U8, QS_ELEM_I8, QS_ELEM_F32 = 0, 1, 2, 3

QS_BLOCKS_NONE, QS_BLOCKS_FLAT, QS_BLOCKS_ROWS = 0, 1, 2

QS_OPT_BLOCK_SIZE = 1 << 0
QS_OPT_DOUBLE_QUANT = 1 << 1
QS_OPT_GRANULARITY = 1 << 2
QS_OPT_SYMMETRIC = 1 << 3
QS_OPT_SCALE = 1 << 4
QS_OPT_SCALE_ROUNDING = 1 << 5

QS_STRUCT_ALLOCATOR = 1
QS_STRUCT_CTX_PARAMS = 2
QS_STRUCT_QUANT_PARAMS = 3
QS_STRUCT_QTENSOR = 4
QS_STRUCT_PLANE_INFO = 5
QS_STRUCT_FORMAT_INFO = 6
QS_STRUCT_OBSERVER_PARAMS = 7
QS_STRUCT_ISA_TIER = 8
QS_STRUCT_MATMUL_PARAMS = 9
QS_STRUCT_WEIGHT = 10
QS_STRUCT_PROFILE_ENTRY = 11
QS_STRUCT_RECOMMEND_PARAMS = 12
QS_STRUCT_CANDIDATE = 13
QS_STRUCT_GPTQ_PARAMS = 14
QS_STRUCT_SPARSEGPT_PARAMS = 15


# include/qsparse/profile.h
QS_RUNTIME_BLAS, QS_RUNTIME_OPENMP, QS_RUNTIME_COMPILER = 1, 2, 3

# include/qsparse/matmul.h
QS_WEIGHT_DENSE, QS_WEIGHT_QUANT, QS_WEIGHT_SP24, QS_WEIGHT_SP24_QUANT = 0, 1, 2, 3
QS_WEIGHT_PACKED = 4
QS_MATMUL_ACT_F32, QS_MATMUL_ACT_INT8, QS_MATMUL_ACT_BF16 = 0, 1, 2
QS_MATMUL_BF16_MAX_M = 16
QS_MATMUL_BLAS = 1

# ---- struct mirrors ------------------------------------------------------------------------------


class Allocator(c.Structure):
    _qs_kind = QS_STRUCT_ALLOCATOR
    _fields_ = [("alloc", c.c_void_p), ("free", c.c_void_p), ("user", c.c_void_p)]


class CtxParams(c.Structure):
    _qs_kind = QS_STRUCT_CTX_PARAMS
    _fields_ = [
        ("num_threads", c.c_int32),
        ("backend", c.c_int32),
        ("isa_mask", c.c_uint32),
        ("nonfinite", c.c_int32),
        ("allocator", Allocator),
        ("reserved", c.c_int64 * 8),
    ]


class QuantParams(c.Structure):
    _qs_kind = QS_STRUCT_QUANT_PARAMS
    _fields_ = [
        ("format", c.c_int32),
        ("block_size", c.c_int32),
        ("granularity", c.c_int32),
        ("symmetric", c.c_int32),
        ("double_quant", c.c_int32),
        ("scale_rounding", c.c_int32),
        ("scale", c.c_float),
        ("reserved0", c.c_int32),
        ("reserved", c.c_int64 * 6),
    ]


class QTensorC(c.Structure):
    _qs_kind = QS_STRUCT_QTENSOR
    _fields_ = [
        ("data", c.c_void_p),
        ("data_bytes", c.c_int64),
        ("scale", c.c_void_p),
        ("scale_bytes", c.c_int64),
        ("zero_point", c.c_void_p),
        ("zero_point_bytes", c.c_int64),
        ("nested_scale", c.c_void_p),
        ("nested_scale_bytes", c.c_int64),
        ("global_scale", c.c_float),
        ("nested_offset", c.c_float),
        ("reserved", c.c_int64 * 4),
    ]


class PlaneInfo(c.Structure):
    _qs_kind = QS_STRUCT_PLANE_INFO
    _fields_ = [
        ("elem", c.c_int32),
        ("bits", c.c_int32),
        ("ndim", c.c_int32),
        ("reserved0", c.c_int32),
        ("shape", c.c_int64 * 2),
        ("values", c.c_int64),
        ("bytes", c.c_int64),
        ("reserved", c.c_int64 * 4),
    ]


class FormatInfo(c.Structure):
    _qs_kind = QS_STRUCT_FORMAT_INFO
    _fields_ = [
        ("name", c.c_char_p),
        ("bits", c.c_int32),
        ("block_size", c.c_int32),
        ("block_min", c.c_int32),
        ("block_max", c.c_int32),
        ("blocks", c.c_int32),
        ("options", c.c_uint32),
        ("global_scale", c.c_int32),
        ("reserved0", c.c_int32),
        ("reserved", c.c_int64 * 4),
    ]


class ObserverParams(c.Structure):
    _qs_kind = QS_STRUCT_OBSERVER_PARAMS
    _fields_ = [
        ("method", c.c_int32),
        ("axis", c.c_int32),
        ("num_bins", c.c_int32),
        ("num_levels", c.c_int32),
        ("start_bin", c.c_int32),
        ("target", c.c_int32),
        ("averaging_constant", c.c_float),
        ("reserved0", c.c_int32),
        ("percentile", c.c_double),
        ("reserved", c.c_int64 * 6),
    ]


class IsaTier(c.Structure):
    """qs_isa_tier: one row of the library's ISA tier table."""
    _qs_kind = QS_STRUCT_ISA_TIER
    _fields_ = [
        ("name", c.c_char_p),
        ("arch", c.c_char_p),
        ("required", c.c_uint32),
        ("allowed", c.c_uint32),
        ("available", c.c_int32),
        ("reserved", c.c_int32),
    ]


class MatmulParams(c.Structure):
    """qs_matmul_params (include/qsparse/matmul.h)."""
    _qs_kind = QS_STRUCT_MATMUL_PARAMS
    _fields_ = [("activations", c.c_int32), ("threshold", c.c_float), ("reserved", c.c_int64 * 7)]


class WeightC(c.Structure):
    """qs_weight (include/qsparse/matmul.h): a weight as qs_matmul reads it."""
    _qs_kind = QS_STRUCT_WEIGHT
    _fields_ = [
        ("kind", c.c_int32),
        ("dtype", c.c_int32),
        ("data", c.c_void_p),
        ("data_bytes", c.c_int64),
        ("meta", c.c_void_p),
        ("meta_count", c.c_int64),
        ("quant", c.c_void_p),
        ("q", c.c_void_p),
        ("reserved", c.c_int64 * 4),
    ]


class ProfileEntry(c.Structure):
    """qs_profile_entry (include/qsparse/profile.h): one row of the profiling table."""
    _qs_kind = QS_STRUCT_PROFILE_ENTRY
    _fields_ = [
        ("op", c.c_char_p),
        ("kernel", c.c_char_p),
        ("isa", c.c_char_p),
        ("format", c.c_int32),
        ("threads", c.c_int32),
        ("calls", c.c_uint64),
        ("elements", c.c_uint64),
        ("bytes_in", c.c_uint64),
        ("bytes_out", c.c_uint64),
        ("ns", c.c_uint64),
        ("reserved", c.c_int64 * 4),
    ]


class RecommendParams(c.Structure):
    """qs_recommend_params (include/qsparse/recommend.h)."""
    _qs_kind = QS_STRUCT_RECOMMEND_PARAMS
    _fields_ = [
        ("objective", c.c_int32),
        ("max_error", c.c_float),
        ("sparse24", c.c_int32),
        ("gemm_rows", c.c_int32),
        ("probe_seconds", c.c_double),
        ("reserved", c.c_int64 * 6),
    ]


class Candidate(c.Structure):
    """qs_candidate (include/qsparse/recommend.h): one measured candidate."""
    _qs_kind = QS_STRUCT_CANDIDATE
    _fields_ = [
        ("label", c.c_char * 48),
        ("format", c.c_int32),
        ("sparse24", c.c_int32),
        ("int8_activations", c.c_int32),
        ("within_error", c.c_int32),
        ("bits_per_weight", c.c_double),
        ("bytes", c.c_int64),
        ("error", c.c_double),
        ("gemv_speedup", c.c_double),
        ("gemv_speedup_mt", c.c_double),
        ("gemm_speedup", c.c_double),
        ("kernel", c.c_char_p),
        ("slow", c.c_int32),
        ("rank", c.c_int32),
        ("reason", c.c_char * 96),
        ("reserved", c.c_int64 * 4),
    ]


QS_RECOMMEND_SPEED, QS_RECOMMEND_SIZE = 0, 1
QS_RECOMMEND_MAX_CANDIDATES = 32


class GptqParams(c.Structure):
    """qs_gptq_params (include/qsparse/gptq.h)."""
    _qs_kind = QS_STRUCT_GPTQ_PARAMS
    _fields_ = [("percdamp", c.c_double), ("block_size", c.c_int32), ("act_order", c.c_int32),
                ("static_groups", c.c_int32), ("scale_search", c.c_int32),
                ("reserved", c.c_int64 * 6)]


class SparseGptParams(c.Structure):
    """qs_sparsegpt_params (include/qsparse/gptq.h)."""
    _qs_kind = QS_STRUCT_SPARSEGPT_PARAMS
    _fields_ = [("percdamp", c.c_double), ("density", c.c_double), ("block_size", c.c_int32),
                ("n", c.c_int32), ("m", c.c_int32), ("reserved0", c.c_int32),
                ("reserved", c.c_int64 * 6)]


STRUCTS = (Allocator, CtxParams, QuantParams, QTensorC, PlaneInfo, FormatInfo, ObserverParams,
           IsaTier, MatmulParams, WeightC, ProfileEntry, RecommendParams, Candidate, GptqParams,
           SparseGptParams)

# ---- function signatures of the whole API: name -> (restype, argtypes) ---------------------------

P = c.c_void_p
Signature = Tuple[Optional[type], List[type]]

SIGNATURES: Dict[str, Signature] = {
    "qs_version_string": (c.c_char_p, []),
    "qs_version_number": (c.c_int32, []),
    "qs_api_version": (c.c_int32, []),
    "qs_status_str": (c.c_char_p, [c.c_int32]),
    "qs_dtype_size": (c.c_int32, [c.c_int32]),
    "qs_cpu_isa": (c.c_uint32, []),
    "qs_isa_name": (c.c_char_p, [c.c_uint32]),
    "qs_isa_tier_count": (c.c_int32, []),
    "qs_isa_tier_info": (c.c_int32, [c.c_int32, c.POINTER(IsaTier)]),
    "qs_struct_size": (c.c_int64, [c.c_int32]),
    "qs_struct_offset": (c.c_int64, [c.c_int32, c.c_char_p]),
    "qs_backend_name": (c.c_char_p, [c.c_int32]),
    "qs_backend_from_name": (c.c_int32, [c.c_char_p]),
    "qs_backend_available": (c.c_int32, [c.c_int32]),
    "qs_backend_message": (c.c_char_p, [c.c_int32]),
    "qs_backend_load": (c.c_int32, [c.c_char_p]),
    "qs_ctx_params_init": (None, [c.POINTER(CtxParams)]),
    "qs_ctx_create": (c.c_int32, [c.POINTER(CtxParams), c.POINTER(P)]),
    "qs_ctx_destroy": (None, [P]),
    "qs_ctx_last_error": (c.c_char_p, [P]),
    "qs_ctx_isa": (c.c_uint32, [P]),
    "qs_ctx_isa_name": (c.c_char_p, [P]),
    "qs_ctx_backend": (c.c_int32, [P]),
    "qs_ctx_set": (c.c_int32, [P, c.c_int32, c.c_int64]),
    "qs_ctx_get": (c.c_int32, [P, c.c_int32, c.POINTER(c.c_int64)]),
    "qs_ctx_kernel_count": (c.c_int32, [P]),
    "qs_ctx_kernel_info": (c.c_int32, [P, c.c_int32, c.POINTER(c.c_char_p),
                                       c.POINTER(c.c_char_p)]),
    "qs_format_count": (c.c_int32, []),
    "qs_format_name": (c.c_char_p, [c.c_int32]),
    "qs_format_from_name": (c.c_int32, [c.c_char_p]),
    "qs_format_block_size": (c.c_int32, [c.c_int32]),
    "qs_format_bits": (c.c_int32, [c.c_int32]),
    "qs_format_info_get": (c.c_int32, [c.c_int32, c.POINTER(FormatInfo)]),
    "qs_quant_params_init": (None, [c.POINTER(QuantParams), c.c_int32]),
    "qs_quant_size": (c.c_int32, [c.POINTER(QuantParams), c.c_int64, c.c_int64, c.c_int32,
                                  c.POINTER(c.c_int64)]),
    "qs_quant_plane_info": (c.c_int32, [P, c.POINTER(QuantParams), c.c_int64, c.c_int64,
                                        c.c_int32, c.POINTER(PlaneInfo)]),
    "qs_quantize": (c.c_int32, [P, c.POINTER(QuantParams), P, c.c_int32, c.c_int64, c.c_int64,
                                c.POINTER(QTensorC)]),
    "qs_dequantize": (c.c_int32, [P, c.POINTER(QuantParams), c.POINTER(QTensorC), c.c_int64,
                                  c.c_int64, P, c.c_int32, c.c_int64]),
    "qs_convert": (c.c_int32, [P, P, c.c_int32, P, c.c_int32, c.c_int64, c.c_int64]),
    "qs_codebook": (c.c_int32, [c.c_int32, c.POINTER(c.c_float), c.c_int64]),
    "qs_codebook_size": (c.c_int64, [c.c_int32]),
}

# include/qsparse/calib.h: observers and the Wanda statistics.
I32, I64, F32P, U64P = c.c_int32, c.c_int64, c.POINTER(c.c_float), c.POINTER(c.c_uint64)
OP = c.POINTER(ObserverParams)
SIGNATURES.update({
    "qs_observer_params_init": (None, [OP, I32]),
    "qs_observer_create": (I32, [P, OP, c.POINTER(P)]),
    "qs_observer_destroy": (None, [P]),
    "qs_observer_get_params": (I32, [P, OP]),
    "qs_observer_update": (I32, [P, P, P, I32, I64, I64]),
    "qs_observer_merge": (I32, [P, P, P]),
    "qs_observer_channels": (I32, [P, c.POINTER(I64)]),
    "qs_observer_amax": (I32, [P, P, F32P, I64]),
    "qs_observer_range": (I32, [P, P, F32P, F32P, I64]),
    "qs_observer_counts": (I32, [P, I64, U64P, U64P, U64P]),
    "qs_observer_histogram": (I32, [P, I64, U64P, I64, c.POINTER(I32)]),
    "qs_observer_serialized_size": (I32, [P, c.POINTER(I64)]),
    "qs_observer_serialize": (I32, [P, P, P, I64, c.POINTER(I64)]),
    "qs_observer_deserialize": (I32, [P, P, I64, c.POINTER(P)]),
    "qs_observer_qparams": (I32, [P, P, I32, F32P, c.POINTER(I32), I64]),
    "qs_observer_quantize": (I32, [P, P, I32, P, I32, I64, I64, c.POINTER(QTensorC)]),
    "qs_act_sumsq_update": (I32, [P, P, I32, I64, I64, P, I64]),
    "qs_act_norms": (I32, [P, P, I64, P]),
})

# include/qsparse/sparse.h: N:M masks, 2:4 compression and metadata converters.
SIGNATURES.update({
    "qs_nm_mask": (I32, [P, P, I32, I64, I64, I32, I32, I32, P, P, I64]),
    "qs_sp24_tile_mask": (I32, [P, P, I32, I64, I64, P, I32, P, I64]),
    "qs_nm_check": (I32, [P, P, I32, I64, I64, I32, I32, I32, c.POINTER(I64)]),
    "qs_sp24_size": (I32, [I32, I64, I64, c.POINTER(I64), c.POINTER(I64)]),
    "qs_sp24_compress": (I32, [P, P, I32, I64, I64, P, P, I64, P, I64]),
    "qs_sp24_prune_compress": (I32, [P, P, I32, I64, I64, P, P, I64, P, I64, P, I64]),
    "qs_sp24_decompress": (I32, [P, P, I32, P, I64, I64, I64, P, I64]),
    "qs_sp24_meta_to_cutlass": (I32, [P, P, I64, I64, I32, P, I64]),
    "qs_sp24_meta_from_cutlass": (I32, [P, P, I64, I64, I32, P, I64]),
    "qs_nm_srste": (I32, [P, P, P, I64, I64, I32, I32, c.c_float, P, P, P, I64]),
    "qs_nm_apply_mask": (I32, [P, P, I32, P, I64, P, I64]),
    "qs_nm_mask_flips": (I32, [P, P, P, I64, c.POINTER(I64)]),
    "qs_sp24_permute_search": (I32, [P, P, I64, I64, P, I32, I32, c.c_uint64, P, I64,
                                     c.POINTER(c.c_double), c.POINTER(c.c_double)]),
    "qs_sp24_meta_to_bitmask": (I32, [P, P, I64, I64, I64, P, I64]),
    "qs_sp24_meta_from_bitmask": (I32, [P, P, I64, I64, I64, P, I64]),
})

# include/qsparse/matmul.h: matmul with compressed weights and LLM.int8 activation quantization.
SIGNATURES.update({
    "qs_matmul_params_init": (None, [c.POINTER(MatmulParams)]),
    "qs_matmul": (I32, [P, c.POINTER(MatmulParams), P, I32, I64, I64, c.POINTER(WeightC), I64, P,
                        P, I64]),
    "qs_matmul_info": (c.c_uint32, []),
    "qs_matmul_pack_size": (I32, [P, c.POINTER(WeightC), I64, I64, c.POINTER(c.c_int64)]),
    "qs_matmul_pack": (I32, [P, c.POINTER(WeightC), I64, I64, P, I64]),
    "qs_int8_vectorwise_quant": (I32, [P, P, I32, I64, I64, c.c_float, P, I64, P, I64, P, I64,
                                       c.POINTER(I64)]),
})

# include/qsparse/profile.h: profiling counters and run-time facts.
SIGNATURES.update({
    "qs_profile_count": (I64, [P]),
    "qs_profile_get": (I32, [P, I64, c.POINTER(ProfileEntry)]),
    "qs_profile_dropped": (c.c_uint64, [P]),
    "qs_profile_reset": (I32, [P]),
    "qs_profile_json": (I32, [P, c.c_char_p, I64, c.POINTER(I64)]),
    "qs_runtime_info": (c.c_char_p, [P, I32]),
})

# include/qsparse/recommend.h: measured format choice.
SIGNATURES.update({
    "qs_recommend_params_init": (None, [c.POINTER(RecommendParams)]),
    "qs_recommend": (I32, [P, c.POINTER(RecommendParams), P, I64, I64, P, I64,
                           c.POINTER(Candidate), I64, c.POINTER(I64)]),
})

# include/qsparse/gptq.h: Hessian statistics, GPTQ, SparseGPT.
SIGNATURES.update({
    "qs_hessian_create": (I32, [P, I64, c.POINTER(P)]),
    "qs_hessian_destroy": (None, [P]),
    "qs_hessian_info": (I32, [P, c.POINTER(I64), c.POINTER(I64)]),
    "qs_hessian_update": (I32, [P, P, P, I32, I64, I64]),
    "qs_hessian_merge": (I32, [P, P, P]),
    "qs_hessian_get": (I32, [P, P, P, I64]),
    "qs_hessian_from_matrix": (I32, [P, P, I64, I64, c.POINTER(P)]),
    "qs_hessian_serialized_size": (I32, [P, c.POINTER(I64)]),
    "qs_hessian_serialize": (I32, [P, P, P, I64, c.POINTER(I64)]),
    "qs_hessian_deserialize": (I32, [P, P, I64, c.POINTER(P)]),
    "qs_hessian_error": (I32, [P, P, P, P, I64, I64, c.POINTER(c.c_double),
                               c.POINTER(c.c_double)]),
    "qs_hessian_rotate": (I32, [P, P, I32]),
    "qs_hadamard": (I32, [P, P, I64, I64, I32]),
    "qs_hadamard_block": (I32, [I64]),
    "qs_gptq_params_init": (None, [c.POINTER(GptqParams)]),
    "qs_gptq_quantize": (I32, [P, c.POINTER(GptqParams), c.POINTER(QuantParams), P, I64, I64, P,
                               c.POINTER(QTensorC), c.POINTER(c.c_double)]),
    "qs_sparsegpt_params_init": (None, [c.POINTER(SparseGptParams)]),
    "qs_sparsegpt": (I32, [P, c.POINTER(SparseGptParams), c.POINTER(QuantParams), P, I64, I64, P,
                           P, I64, c.POINTER(QTensorC), P, I64, c.POINTER(c.c_double)]),
})


def declare_all(cdll: ctypes.CDLL) -> None:
    """Set restype and argtypes of every function in SIGNATURES on a loaded library."""
    for name, (restype, argtypes) in SIGNATURES.items():
        fn = getattr(cdll, name)
        fn.restype = restype
        fn.argtypes = argtypes


def layout_mismatches(cdll: ctypes.CDLL) -> List[str]:
    """Every difference between the mirrors above and the library's structs (empty if none)."""
    out = []
    for cls in STRUCTS:
        kind = cls._qs_kind
        size = cdll.qs_struct_size(kind)
        if size != ctypes.sizeof(cls):
            out.append(f"{cls.__name__}: {ctypes.sizeof(cls)} bytes here, {size} in the library")
        for field, _ in cls._fields_:
            here = getattr(cls, field).offset
            there = cdll.qs_struct_offset(kind, field.encode())
            if here != there:
                out.append(f"{cls.__name__}.{field}: offset {here} here, {there} in the library")
    return out


def check_layouts(cdll: ctypes.CDLL, path: str) -> None:
    """Raise OSError naming every struct field whose layout differs from the library's."""
    bad = layout_mismatches(cdll)
    if bad:
        raise OSError(f"{path}: the library's structs differ from the binding's mirrors "
                      f"(library and package versions differ?): " + "; ".join(bad))

# include/qsparse/cuda.h: the device API (device pointers; the cudaStream_t as a pointer).
SIGNATURES.update({
    "qs_cuda_quantize": (c.c_int32, [P, c.POINTER(QuantParams), P, c.c_int32, c.c_int64,
                                     c.c_int64, c.POINTER(QTensorC), P]),
    "qs_cuda_dequantize": (c.c_int32, [P, c.POINTER(QuantParams), c.POINTER(QTensorC),
                                       c.c_int64, c.c_int64, P, c.c_int32, c.c_int64, P]),
    "qs_cuda_gemv": (c.c_int32, [P, c.POINTER(QuantParams), c.POINTER(QTensorC), c.c_int64,
                                 c.c_int64, P, P, P]),
    "qs_cuda_matmul": (c.c_int32, [P, c.POINTER(MatmulParams), P, c.c_int32, c.c_int64,
                                   c.c_int64, c.POINTER(WeightC), c.c_int64, P, P, c.c_int64,
                                   P]),
    "qs_cuda_sp24_prune_compress": (c.c_int32, [P, P, c.c_int64, c.c_int64, P, P, c.c_int64, P,
                                                c.c_int64, P, c.c_int64, P]),
    "qs_cuda_sp24_compress": (c.c_int32, [P, P, c.c_int64, c.c_int64, P, P, c.c_int64, P,
                                          c.c_int64, P]),
    "qs_cuda_sp24_decompress": (c.c_int32, [P, P, P, c.c_int64, c.c_int64, c.c_int64, P,
                                            c.c_int64, P]),
})
