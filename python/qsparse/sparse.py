# SPDX-License-Identifier: MIT
"""N:M and 2:4 structured sparsity (docs/sparsity.md) over the C API of include/qsparse/sparse.h.

    mask = qs.prune(w, "2:4", method="magnitude")     # or "wanda" with act_norm=, "tile"
    s = qs.compress(w, mask)                          # s.values (rows x K/2), s.meta (uint16)
    qs.decompress(s)                                  # == w * mask, bit for bit
    q = qs.quantize(s, "nf4")                         # kept values quantized, meta alongside
    qs.dequantize(q)                                  # dense again, pruned positions +0

Weights are float32, float16 or bfloat16 arrays whose last axis is the reduction axis K (a PyTorch
Linear weight [out, in]); leading axes are flattened into rows. Every number is computed by the C
library; this module checks arguments, allocates outputs and raises QsparseError on failure.
"""

import ctypes
import math
import re
from typing import Any, Optional, Sequence, Tuple

import numpy as np

from . import _arrays, _lib
from ._arrays import DTypeArg

QS_PRUNE_MAGNITUDE, QS_PRUNE_WANDA, QS_PRUNE_SCORE = 0, 1, 2
QS_TILE_BEST, QS_TILE_GREEDY = 0, 1
QS_DTYPE_MASK_U8 = 100

_c = ctypes
_I64 = _c.c_int64


def _fn(name: str) -> Any:
    """The C function `name`, declared from _capi.SIGNATURES when the library loaded."""
    return getattr(_lib.lib(), name)


def _call(name: str, *args: Any) -> None:
    _lib.check(_fn(name)(_lib.ctx(), *args))


def _null_or(a: Optional[np.ndarray]) -> Optional[ctypes.c_void_p]:
    return None if a is None else _lib.ptr(a)


def _parse_pattern(pattern: Any) -> Tuple[int, int]:
    """'2:4' -> (2, 4)."""
    if isinstance(pattern, tuple) and len(pattern) == 2:
        n, m = pattern
    else:
        mt = re.fullmatch(r"\s*(\d+)\s*:\s*(\d+)\s*", str(pattern))
        if not mt:
            raise ValueError(f"pattern must look like '2:4', got {pattern!r}")
        n, m = int(mt.group(1)), int(mt.group(2))
    if not (1 <= n < m <= 16):
        raise ValueError(f"N:M = {n}:{m} is not supported (need 1 <= N < M <= 16)")
    return int(n), int(m)


def _weight(w: Any, dtype: Any = None) -> Tuple[np.ndarray, int, str, int, int]:
    """(C-contiguous array, dtype code, dtype name, rows, cols) with rows = all leading axes."""
    x, code, name = _lib.as_float_array(w, dtype)
    if x.ndim == 0:
        raise ValueError("a weight needs at least one axis")
    cols = x.shape[-1]
    rows = int(np.prod(x.shape[:-1], dtype=np.int64)) if x.ndim > 1 else 1
    return x, code, name, rows, cols


def _native(a: np.ndarray) -> np.ndarray:
    """a in native byte order (a copy when it was not, e.g. big-endian data read from a file)."""
    return a if a.dtype.isnative else a.astype(a.dtype.newbyteorder("="))


def _norms(act_norm: Any, cols: int) -> np.ndarray:
    src = _arrays.as_array(act_norm)
    with np.errstate(over="ignore", under="ignore"):
        a = np.ascontiguousarray(src, dtype=np.float32).reshape(-1)
    if src.dtype != np.float32 and src.dtype.kind == "f" and a.size:
        # narrowing to float32 must not turn a norm into +Inf or 0 (another ranking)
        s = src.reshape(-1)
        bad = np.flatnonzero((np.isinf(a) & np.isfinite(s)) | ((a == 0) & (s != 0)))
        if bad.size:
            i = int(bad[0])
            raise ValueError(f"act_norm[{i}] = {float(s[i])!r} is outside float32's range "
                             f"(it would become {float(a[i])})")
    if a.shape[0] != cols:
        raise ValueError(f"act_norm has {a.shape[0]} values, the weight has {cols} columns")
    return a


def prune(w: Any, pattern: str = "2:4", method: str = "magnitude", act_norm: Any = None, *,
          dtype: DTypeArg = None, axis: int = -1) -> np.ndarray:
    """Return the N:M mask of `w` (a bool array of w's shape) along `axis` (the reduction axis:
    the last one for a PyTorch Linear weight [out, in]; axis=0 for weights stored [in, out];
    axis=1 for a Conv weight (K, C, R, S), so groups run along input channels as NVIDIA ASP does).

    method: "magnitude" (keep the N largest |w| of each group of M), "wanda" (|w| * act_norm[j],
    act_norm = ||X_j||_2 per input feature, length w.shape[-1]), "tile" (transposable 2:4: each
    4x4 tile keeps two per row and column, the best of the 90 patterns; with act_norm it ranks
    Wanda scores), "tile_greedy", or "score" (w holds float32 scores, larger kept). Ties keep the
    lower index; NaN ranks above +Inf (docs/sparsity.md §2.2).
    """
    n, m = _parse_pattern(pattern)
    if axis != -1:
        arr, _, name = _lib.as_float_array(w, dtype)
        if arr.ndim > 1 and axis not in (-1, arr.ndim - 1):
            if not -arr.ndim <= axis < arr.ndim:
                raise ValueError(f"axis {axis} out of range for a {arr.ndim}-D weight")
            moved = np.ascontiguousarray(np.moveaxis(arr, axis, -1))
            return np.moveaxis(prune(moved, pattern, method, act_norm, dtype=name), -1, axis)
    x, code, _, rows, cols = _weight(w, dtype)
    mask = np.empty(x.shape, np.uint8)
    norms = None
    if act_norm is not None:
        if method not in ("wanda", "tile", "tile_greedy"):
            raise ValueError(f"act_norm is only used by 'wanda' and 'tile', not {method!r}")
        norms = _norms(act_norm, cols)
    if method in ("tile", "tile_greedy"):
        if (n, m) != (2, 4):
            raise ValueError("the transposable TILE mask is 2:4 only")
        variant = QS_TILE_GREEDY if method == "tile_greedy" else QS_TILE_BEST
        _call("qs_sp24_tile_mask", _lib.ptr(x), code, rows, cols, _null_or(norms), variant,
              _lib.ptr(mask), mask.nbytes)
        return mask.view(np.bool_)
    codes = {"magnitude": QS_PRUNE_MAGNITUDE, "wanda": QS_PRUNE_WANDA, "score": QS_PRUNE_SCORE}
    if method not in codes:
        raise ValueError(f"unknown method {method!r}: expected 'magnitude', 'wanda', 'tile', "
                         "'tile_greedy' or 'score'")
    if method == "wanda" and norms is None:
        raise ValueError("method='wanda' needs act_norm (the per-feature ||X_j||_2)")
    _call("qs_nm_mask", _lib.ptr(x), code, rows, cols, n, m, codes[method], _null_or(norms),
          _lib.ptr(mask), mask.nbytes)
    return mask.view(np.bool_)


def check(x: Any, pattern: str = "2:4", *, tile: bool = False,
          dtype: DTypeArg = None) -> Tuple[bool, int]:
    """(ok, first_bad): whether a tensor (non-zero = kept) or a bool mask is N:M along its last
    axis (and transposable with tile=True); first_bad is the flat index of the first offending
    group's first element (or tile column's top element), -1 when ok."""
    n, m = _parse_pattern(pattern)
    arr, bits = _arrays.read(x, None if dtype is None else _arrays.dtype_name(dtype))
    if not bits and dtype is None and arr.dtype in (np.bool_, np.uint8):
        a = np.ascontiguousarray(arr).view(np.uint8)
        if a.ndim == 0:
            raise ValueError("a mask needs at least one axis")
        # rows from the shape, not size / cols: a (rows, 0) mask has size 0
        code, rows, cols = QS_DTYPE_MASK_U8, _rows(a.shape), a.shape[-1]
    else:
        a, code, _, rows, cols = _weight(x, dtype)
    bad = _I64(-1)
    st = _fn("qs_nm_check")(_lib.ctx(), _lib.ptr(a), code, rows, cols, n, m, int(bool(tile)),
                            _c.byref(bad))
    if st == _lib.QS_ERR_BAD_DATA:
        return False, int(bad.value)
    _lib.check(st)
    return True, -1


class Compressed24:
    """A 2:4-compressed weight (docs/sparsity.md §3): `values` (w's dtype, shape
    (..., K/2), kept elements in ascending position) and `meta` (uint16, shape (rows,
    ceil(K/16)), one nibble i0 | i1 << 2 per group, low bits first). `shape` and `dtype` describe
    the dense tensor."""

    def __init__(self, values: np.ndarray, meta: np.ndarray, shape: Tuple[int, ...],
                 dtype: str) -> None:
        self.values = values
        self.meta = meta
        self.shape = tuple(shape)
        self.dtype = dtype

    @property
    def nbytes(self) -> int:
        return self.values.nbytes + self.meta.nbytes

    def __repr__(self) -> str:
        return (f"Compressed24(shape={self.shape}, dtype={self.dtype}, values={self.values.shape},"
                f" meta={self.meta.shape})")

    def to_cutlass_meta(self, word_bits: int = 16) -> np.ndarray:
        """The meta words in the interleaved order of the CUTLASS / PyTorch SM80 sparse kernels
        (uint16 for word_bits=16, int32 words for 32, as PyTorch's tensor of that dtype)."""
        return meta_to_cutlass(self.meta, self.shape, word_bits)

    def to_bitmask(self) -> np.ndarray:
        """The compressed-tensors `sparse-24-bitmask` mask (docs/sparsity.md §5): uint8, shape
        (rows, ceil(K/8)), column c in byte c/8, bit c%8; `values` are that format's
        `compressed` tensor as they are."""
        rows, cols = _rows(self.shape), self.shape[-1]
        meta = np.ascontiguousarray(self.meta, dtype=np.uint16)
        out = np.empty((rows, (cols + 7) // 8), np.uint8)
        _call("qs_sp24_meta_to_bitmask", _lib.ptr(meta), meta.size, rows, cols, _lib.ptr(out),
              out.nbytes)
        return out

    @classmethod
    def from_bitmask(cls, values: Any, bitmask: Any, shape: Sequence[int]) -> "Compressed24":
        """A Compressed24 from compressed-tensors' `compressed` values and `bitmask` (exactly two
        bits per group of 4, else QsparseError)."""
        shape = tuple(int(s) for s in shape)
        rows, cols = _rows(shape), shape[-1]
        bm = np.ascontiguousarray(_arrays.as_array(bitmask), dtype=np.uint8)
        meta = np.empty((rows, (cols + 15) // 16), np.uint16)
        _call("qs_sp24_meta_from_bitmask", _lib.ptr(bm), bm.nbytes, rows, cols, _lib.ptr(meta),
              meta.size)
        vals, _, name = _lib.as_float_array(values)
        return cls(vals, meta, shape, name)

    def __qsparse_quantize__(self, format: str, **options: Any) -> "SparseQTensor":
        return quantize_sparse(self, format, **options)


class SparseQTensor:
    """2:4 weight whose kept values are quantized: `q` is the QTensor of the (rows x K/2)
    values, `meta` the plain 2:4 metadata. qs.dequantize() returns the dense array."""

    def __init__(self, q: Any, meta: np.ndarray, shape: Tuple[int, ...]) -> None:
        self.q = q
        self.meta = meta
        self.shape = tuple(shape)

    @property
    def format(self) -> str:
        return self.q.format

    @property
    def nbytes(self) -> int:
        return self.q.nbytes + self.meta.nbytes

    def __repr__(self) -> str:
        return f"SparseQTensor(format={self.format!r}, shape={self.shape})"

    def __qsparse_dequantize__(self, dtype: DTypeArg = "float32") -> np.ndarray:
        from ._quant import dequantize

        values = dequantize(self.q, dtype=dtype)
        return decompress(Compressed24(values, self.meta, self.shape, dtype))


def _rows(shape: Sequence[int]) -> int:
    return int(np.prod(shape[:-1], dtype=np.int64)) if len(shape) > 1 else 1


def compress(w: Any, mask: Any = None, *, dtype: DTypeArg = None) -> Compressed24:
    """Compress a 2:4 tensor: with `mask` (bool, w's shape) the kept positions are its True
    entries, otherwise the non-zero values of w (NaN counts as non-zero). A group keeping more
    than two raises QsparseError; groups keeping fewer are completed with +0 (§3.4)."""
    x, code, name, rows, cols = _weight(w, dtype)
    vb, mc = _I64(), _I64()
    _lib.check(_fn("qs_sp24_size")(code, rows, cols, _c.byref(vb), _c.byref(mc)))
    m = None
    if mask is not None:
        mk = _arrays.as_array(mask)
        m = np.ascontiguousarray(mk if mk.dtype == np.bool_ else mk != 0).view(np.uint8)
        if m.shape != x.shape:
            raise ValueError(f"mask shape {m.shape} differs from the weight's {x.shape}")
    values = _lib.empty_of(name, x.shape[:-1] + (cols // 2,), bits_ok=x.dtype == np.uint16)
    meta = np.empty((rows, (cols + 15) // 16), np.uint16)
    _call("qs_sp24_compress", _lib.ptr(x), code, rows, cols, _null_or(m), _lib.ptr(values),
          values.nbytes, _lib.ptr(meta), meta.size)
    return Compressed24(values, meta, x.shape, name)


def prune_compress(w: Any, act_norm: Any = None, *,
                   dtype: DTypeArg = None) -> Tuple[Compressed24, np.ndarray]:
    """Magnitude (or, with act_norm, Wanda) 2:4 pruning and compression in one pass:
    (Compressed24, bool mask)."""
    x, code, name, rows, cols = _weight(w, dtype)
    vb, mc = _I64(), _I64()
    _lib.check(_fn("qs_sp24_size")(code, rows, cols, _c.byref(vb), _c.byref(mc)))
    norms = None if act_norm is None else _norms(act_norm, cols)
    values = _lib.empty_of(name, x.shape[:-1] + (cols // 2,), bits_ok=x.dtype == np.uint16)
    meta = np.empty((rows, (cols + 15) // 16), np.uint16)
    mask = np.empty(x.shape, np.uint8)
    _call("qs_sp24_prune_compress", _lib.ptr(x), code, rows, cols, _null_or(norms),
          _lib.ptr(values), values.nbytes, _lib.ptr(meta), meta.size, _lib.ptr(mask), mask.nbytes)
    return Compressed24(values, meta, x.shape, name), mask.view(np.bool_)


def decompress(s: Any, dtype: DTypeArg = None) -> np.ndarray:
    """The dense array of a Compressed24 (pruned positions +0.0), or of a SparseQTensor."""
    if isinstance(s, SparseQTensor):
        return s.__qsparse_dequantize__("float32" if dtype is None else dtype)
    if not isinstance(s, Compressed24):
        raise ValueError(f"expected a Compressed24, got {type(s).__name__}")
    vals, code, name = _lib.as_float_array(s.values, s.dtype if dtype is None else dtype)
    shape = tuple(s.shape)
    if not shape:
        raise ValueError("a compressed tensor has at least one axis")
    rows, cols = _rows(shape), shape[-1]
    if vals.size * 2 != rows * cols:
        raise ValueError(f"values hold {vals.size} elements, shape {shape} needs "
                         f"{rows * cols // 2}")
    meta = _native(_arrays.as_array(s.meta))
    if meta.dtype != np.uint16:
        raise ValueError(f"meta must be uint16, got {meta.dtype}")
    meta = np.ascontiguousarray(meta)
    out = _lib.empty_of(name, shape, bits_ok=vals.dtype == np.uint16)
    if vals.dtype == np.uint16 and out.dtype != np.uint16:
        out = out.view(np.uint16)
    _call("qs_sp24_decompress", _lib.ptr(vals), code, _lib.ptr(meta), meta.size, rows, cols,
          _lib.ptr(out), out.nbytes)
    return out


def quantize_sparse(obj: Compressed24, fmt: str, **kw: Any) -> SparseQTensor:
    """Quantize the kept values of a Compressed24 in any format of qs.quantize (the rows x K/2
    values form the tensor, so scale blocks count kept values along the compressed row) and
    keep the meta alongside: returns a SparseQTensor, which qs.dequantize() makes dense."""
    from ._quant import quantize

    if not isinstance(obj, Compressed24):
        raise ValueError(f"expected a Compressed24, got {type(obj).__name__}")
    if obj.values.dtype == np.uint16:  # 16-bit values held as raw bits
        kw.setdefault("dtype", obj.dtype)
    rows = _rows(obj.shape)
    vals = np.asarray(obj.values).reshape(rows, obj.shape[-1] // 2)
    return SparseQTensor(quantize(vals, fmt, **kw), obj.meta, obj.shape)


def meta_to_cutlass(meta: Any, shape: Sequence[int], word_bits: int = 16) -> np.ndarray:
    """Plain meta (rows x K/16 uint16) -> the CUTLASS / PyTorch interleaved order; int32 words
    for word_bits=32 (PyTorch's int8 layout), else uint16."""
    meta = np.ascontiguousarray(_arrays.as_array(meta), dtype=np.uint16)
    rows, cols = _rows(shape), shape[-1]
    out = np.empty(meta.shape, np.uint16)
    _call("qs_sp24_meta_to_cutlass", _lib.ptr(meta), rows, cols,
          _arrays.option_int("word_bits", word_bits), _lib.ptr(out),
          out.size)
    return out.view(np.int32) if word_bits == 32 else out


def meta_from_cutlass(meta: Any, shape: Sequence[int], word_bits: int = 16) -> np.ndarray:
    """The inverse of meta_to_cutlass: plain uint16 meta (rows x K/16)."""
    # native order first: a view of big-endian words would swap every half
    src = np.ascontiguousarray(_native(_arrays.as_array(meta)))
    src = src.view(np.uint16).reshape(_rows(shape), -1)
    rows, cols = _rows(shape), shape[-1]
    out = np.empty((rows, cols // 16), np.uint16)
    _call("qs_sp24_meta_from_cutlass", _lib.ptr(src), rows, cols,
          _arrays.option_int("word_bits", word_bits), _lib.ptr(out),
          out.size)
    return out


def srste(w: Any, grad: Any, pattern: str = "2:4",
          lam: float = 2e-4) -> Tuple[np.ndarray, np.ndarray, np.ndarray]:
    """One SR-STE step on float32 master weights: (w * M, grad + lam * (1 - M) * w, M) with M the
    magnitude N:M mask recomputed from w (docs/sparsity.md §6.4)."""
    n, m = _parse_pattern(pattern)
    x, code, _, rows, cols = _weight(w)
    g, gcode, _, _, _ = _weight(grad)
    if code != _lib.QS_DTYPE_F32 or gcode != _lib.QS_DTYPE_F32 or g.shape != x.shape:
        raise ValueError("srste needs float32 weights and gradients of the same shape")
    lam = _arrays.option_float("lam", lam)
    if math.isfinite(lam) and math.isinf(_c.c_float(lam).value):
        raise ValueError(f"lam {lam!r} is outside float32's range (it would become inf)")
    wm, go, mask = np.empty_like(x), np.empty_like(g), np.empty(x.shape, np.uint8)
    _call("qs_nm_srste", _lib.ptr(x), _lib.ptr(g), rows, cols, n, m, float(lam), _lib.ptr(wm),
          _lib.ptr(go), _lib.ptr(mask), x.size)
    return wm, go, mask.view(np.bool_)


def apply_mask(x: Any, mask: Any, *, dtype: DTypeArg = None) -> np.ndarray:
    """x * mask with pruned positions +0 (kept elements copied bit for bit)."""
    a, code, name, _, _ = _weight(x, dtype)
    m = np.ascontiguousarray(_arrays.as_array(mask), dtype=np.bool_).view(np.uint8)
    if m.shape != a.shape:
        raise ValueError(f"mask shape {m.shape} differs from {a.shape}")
    out = np.empty_like(a)
    _call("qs_nm_apply_mask", _lib.ptr(a), code, _lib.ptr(m), a.size, _lib.ptr(out), out.nbytes)
    return out


def mask_flips(a: Any, b: Any) -> int:
    """Number of positions where two masks disagree (SR-STE mask stability)."""
    x = np.ascontiguousarray(_arrays.as_array(a), dtype=np.bool_).view(np.uint8)
    y = np.ascontiguousarray(_arrays.as_array(b), dtype=np.bool_).view(np.uint8)
    if x.shape != y.shape:
        raise ValueError("masks of different shapes")
    out = _I64()
    _call("qs_nm_mask_flips", _lib.ptr(x), _lib.ptr(y), x.size, _c.byref(out))
    return int(out.value)


def activation_norms(*xs: Any, dtype: DTypeArg = None) -> np.ndarray:
    """Wanda's act_norm from calibration activations: ||X_j||_2 per input feature j over every
    token of the given (tokens, features) arrays (leading axes are tokens), accumulated in double
    by the library (qs_act_sumsq_update, then qs_act_norms: a double sqrt, one rounding)."""
    if not xs:
        raise ValueError("activation_norms needs at least one array")
    sumsq = None
    for x in xs:
        a, code, _, rows, cols = _weight(x, dtype)
        if sumsq is None:
            sumsq = np.zeros(cols, np.float64)
        elif cols != sumsq.size:
            raise ValueError(f"activation arrays have {sumsq.size} and {cols} features")
        _call("qs_act_sumsq_update", _lib.ptr(a), code, rows, cols, _lib.ptr(sumsq), sumsq.size)
    norms = np.empty(sumsq.size, np.float32)
    _call("qs_act_norms", _lib.ptr(sumsq), sumsq.size, _lib.ptr(norms))
    return norms


def permute(w: Any, act_norm: Any = None, *, max_sweeps: int = 0, escapes: int = 0,
            seed: int = 0) -> Tuple[np.ndarray, float, float]:
    """Channel permutation search for 2:4 (docs/sparsity.md §6.5) on a float32 (rows, K) weight:
    returns (perm, kept_before, kept_after), where w[:, perm] keeps the fraction kept_after of
    the total score (|w|, or |w| * act_norm) under 2:4 magnitude pruning instead of kept_before.
    Apply the same permutation to the producing layer's output channels."""
    x, code, _, rows, cols = _weight(w)
    if code != _lib.QS_DTYPE_F32:
        raise ValueError("the permutation search takes float32 weights")
    norms = None if act_norm is None else _norms(act_norm, cols)
    perm = np.empty(cols, np.int32)
    before, after = _c.c_double(), _c.c_double()
    _call("qs_sp24_permute_search", _lib.ptr(x), rows, cols, _null_or(norms),
          _arrays.option_int("max_sweeps", max_sweeps),
          _arrays.option_int("escapes", escapes),
          _arrays.option_int("seed", seed, -2**63, 2**64 - 1) & 0xFFFFFFFFFFFFFFFF,
          _lib.ptr(perm), perm.size,
          _c.byref(before), _c.byref(after))
    return perm, before.value, after.value


__all__ = ["Compressed24", "SparseQTensor", "activation_norms", "apply_mask", "check", "compress",
           "decompress", "mask_flips", "meta_from_cutlass", "meta_to_cutlass", "permute", "prune",
           "prune_compress", "quantize_sparse", "srste"]
