# SPDX-License-Identifier: MIT
"""Second-order calibration over the C API of include/qsparse/gptq.h (docs/calibration.md
§14-§16): Hessian statistics, GPTQ and SparseGPT.

    H = qs.Hessian(K)
    H.update(x)                       # activations (tokens, K): float32 / float16 / bfloat16
    H.merge(other); b = H.to_bytes(); H2 = qs.Hessian.from_bytes(b)
    q = qs.gptq(w, H, "nf4", blocksize=64)                 # an ordinary QTensor
    s = qs.sparsegpt(w, H, "2:4")                          # an ordinary Compressed24
    sq = qs.sparsegpt(w, H, "2:4", format="nf4")           # a SparseQTensor (2:4 + NF4)

Every number comes from the C library; the weight w is (out, K) float32 (a Linear weight).
"""

import ctypes
from typing import Any, Optional

import numpy as np

from . import _arrays, _capi, _lib
from ._quant import QTensor, _c_tensor, quantize
from .sparse import Compressed24, SparseQTensor, _parse_pattern, compress

_c = ctypes
_INT64 = (-2**63, 2**63 - 1)


def _fn(name):
    return getattr(_lib.lib(), name)


class Hessian:
    """H = 2 X^T X of a linear layer's input activations (K x K, kept as X^T X in float64)."""

    def __init__(self, k: int, *, _handle: Optional[Any] = None) -> None:
        self._handle = None
        self._destroy = _fn("qs_hessian_destroy")
        if _handle is not None:
            self._handle = _handle
            return
        k = _arrays.option_int("K", k, *_INT64)  # an int64 argument: never wrapped
        handle = _c.c_void_p()
        _lib.check(_fn("qs_hessian_create")(_lib.ctx(), k, _c.byref(handle)))
        self._handle = handle

    def __del__(self):
        handle = getattr(self, "_handle", None)
        if handle is not None and handle.value:
            try:
                self._destroy(handle)
            except Exception:  # interpreter shutdown
                pass
            self._handle = None

    def _info(self):
        k, t = _c.c_int64(), _c.c_int64()
        _lib.check(_fn("qs_hessian_info")(self._handle, _c.byref(k), _c.byref(t)))
        return k.value, t.value

    @property
    def k(self) -> int:
        return self._info()[0]

    @property
    def tokens(self) -> int:
        """Activation rows seen (summed over merges)."""
        return self._info()[1]

    def update(self, x: Any, *, dtype: Optional[str] = None) -> "Hessian":
        """Add activations x of shape (..., K): every leading axis counts as tokens."""
        arr, code, _ = _lib.as_float_array(x, dtype)
        if arr.ndim < 1:
            raise ValueError("activations need at least one axis (..., K)")
        cols = arr.shape[-1]
        rows = int(np.prod(arr.shape[:-1], dtype=np.int64)) if arr.ndim > 1 else 1
        _lib.check(_fn("qs_hessian_update")(_lib.ctx(), self._handle, _lib.ptr(arr), code, rows,
                                            cols))
        return self

    def merge(self, other: "Hessian") -> "Hessian":
        """self += other (another shard's statistics, same K)."""
        if not isinstance(other, Hessian):
            raise ValueError("merge expects a Hessian")
        _lib.check(_fn("qs_hessian_merge")(_lib.ctx(), self._handle, other._handle))
        return self

    def matrix(self) -> np.ndarray:
        """H = 2 X^T X as a (K, K) float64 array."""
        k = self.k
        out = np.empty((k, k), np.float64)
        _lib.check(_fn("qs_hessian_get")(_lib.ctx(), self._handle, _lib.ptr(out), out.size))
        return out

    @classmethod
    def from_matrix(cls, h: Any, tokens: int = 0) -> "Hessian":
        """A Hessian holding a given symmetric matrix H (its upper triangle is read)."""
        a = np.ascontiguousarray(h, dtype=np.float64)
        if a.ndim != 2 or a.shape[0] != a.shape[1]:
            raise ValueError(f"H must be square (K, K), got shape {a.shape}")
        handle = _c.c_void_p()
        tokens = _arrays.option_int("tokens", tokens, *_INT64)
        _lib.check(_fn("qs_hessian_from_matrix")(_lib.ctx(), _lib.ptr(a), a.shape[0], tokens,
                                                 _c.byref(handle)))
        return cls(0, _handle=handle)

    def to_bytes(self) -> bytes:
        """The versioned, checksummed little-endian serialization (magic "QSHS")."""
        size = _c.c_int64()
        _lib.check(_fn("qs_hessian_serialized_size")(self._handle, _c.byref(size)))
        buf = np.empty(size.value, np.uint8)
        written = _c.c_int64()
        _lib.check(_fn("qs_hessian_serialize")(_lib.ctx(), self._handle, _lib.ptr(buf),
                                               buf.size, _c.byref(written)))
        return buf[:written.value].tobytes()

    @classmethod
    def from_bytes(cls, b: Any) -> "Hessian":
        """A Hessian from to_bytes() output; corrupt input raises QsparseError."""
        if not isinstance(b, (bytes, bytearray, memoryview)):
            raise ValueError("from_bytes expects bytes")
        data = np.frombuffer(bytes(b) or b"\0", np.uint8).copy()
        handle = _c.c_void_p()
        _lib.check(_fn("qs_hessian_deserialize")(_lib.ctx(), _lib.ptr(data), len(bytes(b)),
                                                 _c.byref(handle)))
        return cls(0, _handle=handle)

    def __reduce__(self):
        return (Hessian.from_bytes, (self.to_bytes(),))

    def __repr__(self) -> str:
        k, t = self._info()
        return f"Hessian(K={k}, tokens={t})"


def _weight2d(w: Any, h: Hessian) -> np.ndarray:
    if not isinstance(h, Hessian):
        raise ValueError(f"H must be a qs.Hessian, got {type(h).__name__}")
    arr = np.asarray(w)
    if arr.dtype != np.float32:
        raise ValueError(f"the weight must be float32, got {arr.dtype}")
    if arr.ndim != 2:
        raise ValueError(f"the weight must be 2-D (out, K), got shape {arr.shape}")
    return np.ascontiguousarray(arr)


def gptq(w: Any, H: Hessian, format: str, *, percdamp: float = 0.01, block: int = 128,
         act_order: bool = False, static_groups: bool = False, scale_search: bool = True,
         **format_options: Any) -> QTensor:
    """GPTQ-quantize w (out, K) float32 with Hessian H into `format` ("nf4", "fp4", "int8",
    "mxfp4", "nvfp4"); format_options as qs.quantize (blocksize, granularity, group_size,
    symmetric, scale, scale_rounding). Returns an ordinary QTensor (qs.dequantize, qs.matmul).
    scale_search (MXFP4 with dynamic groups): each 32-block's E8M0 scale is the OCP floor one or
    the next power of two up, whichever gives the smaller GPTQ loss over the block; False keeps
    the scale_rounding rule's. `gptq.last_loss` holds GPTQ's objective of the last call."""
    x = _weight2d(w, H)
    rows, cols = x.shape
    q = quantize(x, format, **format_options)  # RTN planes of the right shapes, overwritten
    p, qt, keep = _c_tensor(q)
    gp = _capi.GptqParams()
    _fn("qs_gptq_params_init")(_c.byref(gp))
    # checked here, not assigned to the int32 / double fields as they are: ctypes would wrap
    # block=2**32 + 128 to 128 without a word
    gp.percdamp = _arrays.option_float("percdamp", percdamp)
    gp.block_size = _arrays.option_int("block", block)
    gp.act_order, gp.static_groups = int(bool(act_order)), int(bool(static_groups))
    gp.scale_search = int(bool(scale_search))
    loss = _c.c_double()
    _lib.check(_fn("qs_gptq_quantize")(_lib.ctx(), _c.byref(gp), _c.byref(p), _lib.ptr(x), rows,
                                       cols, H._handle, _c.byref(qt), _c.byref(loss)))
    for name, arr in zip(("data", "absmax" if q.absmax is not None else "scale", "zero_point"),
                         keep[:3]):
        if arr is not None:
            setattr(q, name, arr)
    if q.global_scale is not None:
        q.global_scale = np.float32(qt.global_scale)
    gptq.last_loss = loss.value
    return q


gptq.last_loss = 0.0


def sparsegpt(w: Any, H: Hessian, pattern: str = "2:4", format: Optional[str] = None, *,
              density: Optional[float] = None, percdamp: float = 0.01, block: int = 128,
              dense: bool = False, **format_options: Any) -> Any:
    """SparseGPT-prune w (out, K) float32 with Hessian H.

    pattern "N:M" (e.g. "2:4") or "unstructured" with density= (fraction kept). Returns an
    ordinary Compressed24 for "2:4", a SparseQTensor for "2:4" with format= (the kept values
    GPTQ-quantized jointly), and the dense pruned float32 array for other patterns or with
    dense=True. `sparsegpt.last_loss` holds the objective of the last call."""
    x = _weight2d(w, H)
    rows, cols = x.shape
    sp = _capi.SparseGptParams()
    _fn("qs_sparsegpt_params_init")(_c.byref(sp))
    sp.percdamp = _arrays.option_float("percdamp", percdamp)
    sp.block_size = _arrays.option_int("block", block)
    if pattern == "unstructured":
        if density is None:
            raise ValueError("pattern 'unstructured' needs density=")
        sp.n, sp.m, sp.density = 0, 0, _arrays.option_float("density", density)
    else:
        if density is not None:
            raise ValueError("density= applies to pattern 'unstructured' only")
        sp.n, sp.m = _parse_pattern(pattern)
    out = np.empty((rows, cols), np.float32)
    loss = _c.c_double()
    if format is None:
        if format_options:
            raise ValueError("format options need format=")
        _lib.check(_fn("qs_sparsegpt")(_lib.ctx(), _c.byref(sp), None, _lib.ptr(x), rows, cols,
                                       H._handle, _lib.ptr(out), out.size, None, None, 0,
                                       _c.byref(loss)))
        sparsegpt.last_loss = loss.value
        if dense or (sp.n, sp.m) != (2, 4):
            return out
        return compress(out, out != 0)
    if (sp.n, sp.m) != (2, 4):
        raise ValueError("format= needs pattern '2:4'")
    # planes of the right shapes for (rows, K/2) kept values, overwritten
    q = quantize(np.zeros((rows, cols // 2), np.float32), format, **format_options)
    p, qt, keep = _c_tensor(q)
    meta = np.zeros((rows, (cols + 15) // 16), np.uint16)
    _lib.check(_fn("qs_sparsegpt")(_lib.ctx(), _c.byref(sp), _c.byref(p), _lib.ptr(x), rows,
                                   cols, H._handle, _lib.ptr(out), out.size, _c.byref(qt),
                                   _lib.ptr(meta), meta.size, _c.byref(loss)))
    for name, arr in zip(("data", "absmax" if q.absmax is not None else "scale", "zero_point"),
                         keep[:3]):
        if arr is not None:
            setattr(q, name, arr)
    if q.global_scale is not None:
        q.global_scale = np.float32(qt.global_scale)
    sparsegpt.last_loss = loss.value
    if dense:
        return out
    return SparseQTensor(q, meta, (rows, cols))


sparsegpt.last_loss = 0.0

__all__ = ["Hessian", "gptq", "sparsegpt", "Compressed24"]
