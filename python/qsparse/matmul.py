# SPDX-License-Identifier: MIT
"""Matmul with compressed weights (include/qsparse/matmul.h) and LLM.int8 activation quantization.

    y = qs.matmul(x, w)                              # x (..., K), w (N, K): y (..., N) float32
    y = qs.matmul(x, qs.quantize(w, "nf4"), bias)    # any QTensor, Compressed24, SparseQTensor
    y = qs.matmul(x, q8, activations="int8", threshold=6.0)  # LLM.int8 with the outlier split
    y = qs.matmul(x, q, activations="bf16")           # x rounded to bf16, bf16 products
    pw = qs.pack(q); y = qs.matmul(x, pw)            # packed once for this context's kernels
    codes, row_stats, outlier_cols = qs.int8_vectorwise_quant(x, threshold=6.0)

Every number is computed by the C library; this module checks arguments, describes the weight to
C, allocates the output and raises QsparseError on failure.
"""

from __future__ import annotations

import ctypes
import math
from typing import Any, Dict, Tuple

import numpy as np

from . import _arrays, _lib, _quant
from .sparse import Compressed24, SparseQTensor

from ._capi import (QS_MATMUL_ACT_BF16, QS_MATMUL_ACT_F32, QS_MATMUL_ACT_INT8, QS_MATMUL_BLAS,
                    QS_WEIGHT_DENSE, QS_WEIGHT_PACKED, QS_WEIGHT_QUANT, QS_WEIGHT_SP24,
                    QS_WEIGHT_SP24_QUANT,
                    MatmulParams, WeightC)

_ACTIVATIONS = {"f32": QS_MATMUL_ACT_F32, "float32": QS_MATMUL_ACT_F32, "int8": QS_MATMUL_ACT_INT8,
                "bf16": QS_MATMUL_ACT_BF16, "bfloat16": QS_MATMUL_ACT_BF16}

_I64 = ctypes.c_int64


def _fn(name: str) -> Any:
    """The C function `name`, declared from _capi.SIGNATURES when the library loaded."""
    return getattr(_lib.lib(), name)


def _threshold(value: Any) -> float:
    """The outlier threshold as the float32 the C parameter holds: finite, >= 0, and not one
    that float32 turns into 0 ("no outliers", the opposite of a tiny threshold) or Inf."""
    t = _arrays.option_float("threshold", value)
    if not math.isfinite(t) or t < 0.0:
        raise ValueError(f"threshold must be finite and >= 0, got {t}")
    return _quant._f32("threshold", t)


def blas() -> bool:
    """True when the library's GEMM path calls OpenBLAS sgemm (the build found it)."""
    return bool(_fn("qs_matmul_info")() & QS_MATMUL_BLAS)


def matmul_info() -> Dict[str, bool]:
    """Build facts of the matmul as a dict: {"blas": True when the GEMM path (16 or more rows of
    x) multiplies dequantized weight tiles with OpenBLAS sgemm, False when it uses the library's
    own dot products}. Exported as qsparse.matmul_info()."""
    return {"blas": blas()}


class PackedWeight:
    """A weight packed by qs.pack for this process's library and ISA tier (qs_matmul_pack):
    qs.matmul takes it like the weight it came from, with the same results. `buffer` (uint8) is
    its own copy of everything; `shape` is (N, K). It is valid only for the library build and
    tier that packed it (qs.set_backend / QS_FORCE_ISA changes make qs.matmul refuse it)."""

    __slots__ = ("buffer", "shape")

    def __init__(self, buffer: np.ndarray, shape: Tuple[int, int]) -> None:
        self.buffer = buffer
        self.shape = shape

    @property
    def nbytes(self) -> int:
        return int(self.buffer.nbytes)

    def __repr__(self) -> str:
        return f"PackedWeight(shape={self.shape}, nbytes={self.nbytes})"


def pack(w: Any) -> PackedWeight:
    """Pack any weight qs.matmul accepts (a float array, QTensor, Compressed24, SparseQTensor)
    into the form this context's matmul kernels read fastest (qs_matmul_pack): double-quantized
    absmax is decoded once instead of on every call. The result holds its own copy."""
    if isinstance(w, PackedWeight):
        raise ValueError("the weight is packed already")
    wc, (n, k), keep = _weight_c(w)
    size = _I64(0)
    _lib.check(_fn("qs_matmul_pack_size")(_lib.ctx(), ctypes.byref(wc), n, k, ctypes.byref(size)))
    buf = np.empty(size.value, np.uint8)
    _lib.check(_fn("qs_matmul_pack")(_lib.ctx(), ctypes.byref(wc), n, k, _lib.ptr(buf), buf.nbytes))
    del keep
    return PackedWeight(buf, (n, k))


def _weight_c(w: Any) -> Tuple[WeightC, Tuple[int, int], Tuple[Any, ...]]:
    """(WeightC, (N, K), objects to keep alive) for any weight qs.matmul accepts."""
    wc = WeightC()
    if isinstance(w, PackedWeight):
        wc.kind = QS_WEIGHT_PACKED
        wc.data, wc.data_bytes = _lib.address(w.buffer), w.buffer.nbytes
        return wc, w.shape, (w.buffer,)
    if isinstance(w, _quant.QTensor):
        shape = w.shape
        p, qt, keep = _quant._c_tensor(w)
        wc.kind = QS_WEIGHT_QUANT
    elif isinstance(w, SparseQTensor):
        shape = w.shape
        if len(w.q.shape) != 2 or len(shape) != 2 or w.q.shape != (shape[0], shape[1] // 2):
            raise ValueError(f"SparseQTensor of shape {shape} holds values of shape {w.q.shape}")
        p, qt, keep = _quant._c_tensor(w.q)
        meta = np.ascontiguousarray(_arrays.as_array(w.meta), dtype=np.uint16)
        wc.kind = QS_WEIGHT_SP24_QUANT
        wc.meta, wc.meta_count = _lib.address(meta), meta.size
        keep = keep + (meta,)
    elif isinstance(w, Compressed24):
        shape = w.shape
        values, code, _ = _lib.as_float_array(w.values, w.dtype if w.values.dtype == np.uint16
                                              else None)
        meta = np.ascontiguousarray(_arrays.as_array(w.meta), dtype=np.uint16)
        wc.kind, wc.dtype = QS_WEIGHT_SP24, code
        wc.data, wc.data_bytes = _lib.address(values), values.nbytes
        wc.meta, wc.meta_count = _lib.address(meta), meta.size
        keep = (values, meta)
    else:
        values, code, _ = _lib.as_float_array(w)
        shape = values.shape
        wc.kind, wc.dtype = QS_WEIGHT_DENSE, code
        wc.data, wc.data_bytes = _lib.address(values), values.nbytes
        keep = (values,)
    if wc.kind in (QS_WEIGHT_QUANT, QS_WEIGHT_SP24_QUANT):
        wc.quant = ctypes.addressof(p)
        wc.q = ctypes.addressof(qt)
        keep = keep + (p, qt)
    if len(shape) != 2:
        raise ValueError(f"the weight must be 2-D (N, K), got shape {tuple(shape)}")
    return wc, (int(shape[0]), int(shape[1])), keep


def matmul(x: Any, w: Any, bias: Any = None, *, activations: str = "f32",
           threshold: float = 0.0) -> Any:
    """y = x . w^T (+ bias) as float32, x of shape (..., K) (float32, float16 or bfloat16),
    w of shape (N, K): a float32/float16/bfloat16 array, a QTensor of any format, a
    Compressed24, a SparseQTensor (qs.compress / qs.quantize of one) or a PackedWeight (qs.pack
    of any of them). Returns (..., N) float32 of the caller's kind: a torch tensor (CPU) when x is
    one, else a numpy array. A bias may be float32, float16 or bfloat16 (bfloat16 without
    ml_dtypes too, as x and w).

    activations="int8" quantizes x per token on the fly (LLM.int8 vector-wise, integer dot
    products against INT8 / LLM_INT8 weights, NF4 / FP4 through their codebooks scaled to int8,
    MXFP4 / NVFP4 through doubled E2M1 values and FP8 E4M3 through its values times 2**9; the
    other weights multiply the dequantized codes in float32); threshold > 0 (bitsandbytes uses
    6.0) sends every column of x holding an |x| >= threshold through float32 instead. See
    docs/int8_activations.md for the definition and the error bound.

    activations="bf16" rounds x to bfloat16 and multiplies bf16 values with float32 sums, as
    AVX512-BF16 does (NF4 / FP4 codebooks rounded to bf16); up to 16 rows of x run the bf16
    kernels where the CPU has them, everything else the float32 path on the rounded x. See
    docs/bf16_activations.md for the definition and the error bound."""
    if activations not in _ACTIVATIONS:
        raise ValueError(f"activations must be 'f32', 'int8' or 'bf16', got {activations!r}")
    threshold = _threshold(threshold)
    if threshold > 0.0 and activations != "int8":
        raise ValueError("an outlier threshold needs activations='int8'")
    xa, xcode, _ = _lib.as_float_array(x)
    if xa.ndim < 1:
        raise ValueError("x must have at least one axis (K)")
    wc, (n, k), keep = _weight_c(w)
    if xa.shape[-1] != k:
        raise ValueError(f"x has K = {xa.shape[-1]} columns, the weight {k}")
    m = math.prod(xa.shape[:-1])
    b = None
    if bias is not None:
        ba, bf16_bits = _arrays.read(bias)
        if bf16_bits or ba.dtype.name == "bfloat16":
            # widened by the library, with or without ml_dtypes (as x and w are read)
            b = _quant.convert(bias, "float32")
        elif ba.dtype.kind not in "fiu":
            raise ValueError(f"bias must hold numbers, got dtype {ba.dtype}")
        else:
            with np.errstate(over="ignore"):
                b = np.ascontiguousarray(ba, dtype=np.float32)
        if b.shape != (n,):
            raise ValueError(f"bias must have shape ({n},), got {ba.shape}")
    params = MatmulParams()
    params.activations = _ACTIVATIONS[activations]
    params.threshold = threshold
    y = np.empty(xa.shape[:-1] + (n,), np.float32)
    _lib.check(_fn("qs_matmul")(_lib.ctx(), ctypes.byref(params), _lib.ptr(xa), xcode, m, k,
                                ctypes.byref(wc), n, None if b is None else _lib.ptr(b),
                                _lib.ptr(y), y.nbytes))
    del keep
    return _like(x, y)


def _like(x: Any, y: np.ndarray) -> Any:
    """y in the caller's kind: a torch tensor (CPU, float32, sharing y's memory) for a torch x,
    else the numpy array."""
    if type(x).__module__.split(".")[0] == "torch":
        import torch

        return torch.from_numpy(y)
    return y


def int8_vectorwise_quant(x: Any, threshold: float = 0.0
                          ) -> Tuple[np.ndarray, np.ndarray, np.ndarray]:
    """bitsandbytes' int8_vectorwise_quant(x, threshold) for a 2-D (M, K) x: returns (codes int8
    (M, K), row_stats float32 (M,), outlier_cols int64 ascending). Columns with any
    |x| >= threshold (threshold > 0) are outliers: their codes are 0 and the row absmax skips
    the outlier elements themselves."""
    xa, code, _ = _lib.as_float_array(x)
    if xa.ndim != 2:
        raise ValueError(f"x must be 2-D (M, K), got shape {xa.shape}")
    threshold = _threshold(threshold)
    m, k = xa.shape
    codes = np.empty((m, k), np.int8)
    stats = np.empty(m, np.float32)
    cols = np.empty(k, np.int64)
    count = _I64(0)
    _lib.check(_fn("qs_int8_vectorwise_quant")(_lib.ctx(), _lib.ptr(xa), code, m, k, threshold,
                                               _lib.ptr(codes), codes.nbytes, _lib.ptr(stats),
                                               m, _lib.ptr(cols), k, ctypes.byref(count)))
    return codes, stats, cols[:count.value].copy()
