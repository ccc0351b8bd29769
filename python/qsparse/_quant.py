# SPDX-License-Identifier: MIT
"""quantize / dequantize over qs_quantize and qs_dequantize, and the QTensor holding the planes.

The planes are numpy arrays with exactly the bytes the C API writes (the plane table in
include/qsparse.h). Their element types and shapes come from the library (qs_quant_plane_info)
and which options a format takes from qs_format_info_get; nothing about a format is restated
here. The numpy shapes follow the library's answer:

- a plane over the flattened tensor is 1-D (NF4/FP4 codes: packed bytes; scales; absmax);
- a plane with one line per tensor row is [rows, k] for scales and zero points, and for codes
  the input's shape when a line holds one code per element (INT8, FP8, MXFP8), else
  [*lead, k] (packed MXFP4 / NVFP4 bytes).

rows x cols is the input as [prod(shape[:-1]), shape[-1]] (a 0-D or 1-D tensor is one row).
The bitsandbytes formats (those with double quantization) call their scale plane ``absmax`` and
the nested one ``nested_absmax``, as bitsandbytes does.
"""

from __future__ import annotations

import ctypes
import functools
import math
from typing import Any, Dict, List, NamedTuple, Optional, Sequence, Tuple

import numpy as np

from . import _arrays, _capi, _lib
from ._arrays import DTypeArg

_GRANULARITY = {"tensor": 0, "row": 1, "channel": 1, "group": 2}
_GRANULARITY_NAMES = {0: "tensor", 1: "row", 2: "group"}
_SCALE_ROUNDING = {"floor": 0, "rceil": 1}

_ELEM_DTYPES = {_capi.QS_ELEM_U8: np.dtype(np.uint8), _capi.QS_ELEM_I8: np.dtype(np.int8),
                _capi.QS_ELEM_F32: np.dtype(np.float32)}


def formats() -> List[str]:
    """Names of every format the library knows, in code order."""
    lib = _lib.lib()
    return [lib.qs_format_name(f).decode() for f in range(1, lib.qs_format_count() + 1)]


_FORMAT_CODES: Dict[str, int] = {}  # the known names seen so far: one C call per name


def canonical_format(name: Any) -> Any:
    """The library's lower-case name of a format named in any letter case ("NF4" -> "nf4");
    anything else as it is (the caller's check says what is wrong with it)."""
    if isinstance(name, str) and not name.islower():
        code = _lib.lib().qs_format_from_name(name.encode())
        if code > 0:
            return _lib.lib().qs_format_name(code).decode()
    return name


def _format_code(name: str) -> int:
    if not isinstance(name, str):
        raise ValueError(f"format must be a string, got {type(name).__name__}")
    code = _FORMAT_CODES.get(name)
    if code is None:
        code = _lib.lib().qs_format_from_name(name.encode())
        if code < 0:
            raise ValueError(f"unknown format {name!r}: expected one of {formats()}")
        _FORMAT_CODES[name] = code
    return code


def _f32(name: str, value: Any, *, zero_ok: bool = False) -> float:
    """value rounded to the float32 the C struct holds; ValueError when that rounding changes its
    meaning: a finite value overflowing to inf, or (unless zero_ok) a non-zero one becoming 0,
    which the library would read as "derive from the data"."""
    if type(value) is np.float32:  # already one (QTensor keeps its scalars so): nothing to round
        return float(value)
    v = _arrays.option_float(name, value)
    with np.errstate(over="ignore", under="ignore"):
        f = float(np.float32(v))
    if (math.isinf(f) and math.isfinite(v)) or (f == 0.0 and v != 0.0 and not zero_ok):
        raise ValueError(f"{name} {value!r} is outside float32's range (it would become {f}); "
                         f"the library keeps it as a float32")
    return f


@functools.lru_cache(maxsize=None)
def _info(code: int) -> Tuple[str, int, int, int, bool]:
    """(name, default block size, QS_OPT_* options, QS_BLOCKS_*, global scale) of a format."""
    fi = _capi.FormatInfo()
    status = _lib.lib().qs_format_info_get(code, ctypes.byref(fi))
    if status != _lib.QS_OK:
        raise _lib.QsparseError(status, f"qs_format_info_get({code}): {_lib.status_str(status)}")
    return fi.name.decode(), fi.block_size, fi.options, fi.blocks, bool(fi.global_scale)


def _has(fmt: str, option: int) -> bool:
    """Whether format `fmt` reads the qs_quant_params field QS_OPT_* `option`."""
    return bool(_info(_format_code(fmt))[2] & option)


def _block_size_arg(block_size: Any, blocksize: Any) -> Any:
    """The block size given as block_size= (C's name) or blocksize= (bitsandbytes'): either,
    or both when they agree."""
    if block_size is not None and blocksize is not None and block_size != blocksize:
        raise ValueError(f"block_size={block_size!r} and blocksize={blocksize!r} disagree: "
                         f"give one (they are the same option)")
    return block_size if block_size is not None else blocksize


def _takes_blocksize(fmt: str) -> bool:
    # INT8 reads block_size as its group size, spelled group_size in Python
    return _has(fmt, _capi.QS_OPT_BLOCK_SIZE) and not _has(fmt, _capi.QS_OPT_GRANULARITY)


def _rows_cols(shape: Sequence[int]) -> Tuple[int, int]:
    if len(shape) == 0:
        return 1, 1
    cols = int(shape[-1])
    rows = int(math.prod(shape[:-1])) if len(shape) > 1 else 1
    return rows, cols


class QTensor:
    """A quantized tensor: the format's planes as numpy arrays plus the parameters that made them.

    Built by quantize(), by load() from a checkpoint, by from_bnb_state() from bitsandbytes'
    codes and QuantState, or by hand from stored planes; dequantize() and matmul() check every
    plane's dtype and size against the library's description before reading it. The planes hold
    exactly the bytes the C API writes (the plane table in include/qsparse.h; docs/formats.md
    defines every format).

    Attributes:
        format: the format name ("nf4", "fp4", "int8", "llm_int8", "fp8_e4m3", "fp8_e5m2",
            "mxfp4", "mxfp8", "nvfp4"; qs.formats() lists them).
        shape: the shape of the original tensor (a tuple of ints). Formats with blocks along
            rows see it as [prod(shape[:-1]), shape[-1]].
        data: the codes. uint8 packed pairs for NF4/FP4 (1-D over the flattened tensor, element
            2j in the high nibble) and MXFP4/NVFP4 ([*lead, ceil(cols/2)], low nibble first);
            int8 in the tensor's shape for INT8 / LLM.int8; uint8 E4M3/E5M2 bytes in the
            tensor's shape for FP8 and MXFP8.
        absmax: NF4/FP4 only: the float32 absmax of each block (1-D), or with double_quant its
            uint8 codes in bitsandbytes' 8-bit dynamic map. None for the other formats.
        scale: the scale plane of the other formats: float32 per tensor ([1]) for FP8, per row
            ([rows]) or [rows, groups] for INT8, the row absmax ([rows], bitsandbytes' SCB) for
            LLM.int8, E8M0 bytes [rows, ceil(cols/32)] for MX, E4M3 bytes [rows, ceil(cols/16)]
            for NVFP4. None for NF4/FP4.
        zero_point: INT8 with symmetric=False: int8 zero points in the scale's shape; else None.
        global_scale: NVFP4's float32 per-tensor scale (value = code * block scale * global
            scale); None for the other formats.
        nested_absmax: NF4/FP4 with double_quant: the float32 absmax of each block of 256
            absmax codes; else None.
        nested_offset: NF4/FP4 with double_quant: the float32 mean subtracted from the absmax
            before their quantization (bitsandbytes' offset); else None.
        nested_blocksize: 256 with double_quant (bitsandbytes' value), else None.
        block_size: elements per absmax block for NF4/FP4 (32..4096, a power of two); the fixed
            block of MX (32) and NVFP4 (16); None for INT8 (see group_size) and FP8. C's
            qs_quant_params.block_size; `blocksize`, bitsandbytes' spelling, is the same value.
        double_quant: whether the absmax are double-quantized (NF4/FP4).
        granularity, group_size, symmetric: INT8's options ("tensor", "row" or "group"; the
            group length; False with zero points). None for the other formats.
        scale_rounding: MX only: "floor" (OCP) or "rceil".
        dtype: the element type of the tensor that was quantized ("float32", "float16",
            "bfloat16"): what bitsandbytes' QuantState calls dtype; dequantize() returns float32
            unless asked otherwise.
    """

    def __init__(self, format: str, shape: Sequence[int], data: np.ndarray, *,
                 absmax: Optional[np.ndarray] = None, scale: Optional[np.ndarray] = None,
                 zero_point: Optional[np.ndarray] = None, global_scale: Optional[float] = None,
                 nested_absmax: Optional[np.ndarray] = None,
                 nested_offset: Optional[float] = None, blocksize: Optional[int] = None,
                 double_quant: Optional[bool] = None, granularity: Optional[str] = None,
                 group_size: Optional[int] = None, symmetric: Optional[bool] = None,
                 scale_rounding: Optional[str] = None, dtype: DTypeArg = "float32",
                 block_size: Optional[int] = None) -> None:
        format = canonical_format(format)
        blocksize = _block_size_arg(block_size, blocksize)
        self.format = format
        self.shape = tuple(int(s) for s in shape)
        self.data = data
        self.absmax = absmax
        self.scale = scale
        self.zero_point = zero_point
        self.global_scale = None if global_scale is None else \
            np.float32(_f32("global_scale", global_scale))
        self.nested_absmax = nested_absmax
        self.nested_offset = None if nested_offset is None else \
            np.float32(_f32("nested_offset", nested_offset, zero_ok=True))
        if double_quant is None:
            double_quant = nested_absmax is not None
        self.double_quant = bool(double_quant)
        self.nested_blocksize = 256 if self.double_quant else None
        known = isinstance(format, str) and _lib.lib().qs_format_from_name(format.encode()) > 0
        if blocksize is None and known and _takes_blocksize(format):
            blocksize = int(_lib.lib().qs_format_block_size(_format_code(format)))
        self.blocksize = blocksize
        if known and _has(format, _capi.QS_OPT_GRANULARITY):
            if granularity is None:
                granularity = "group" if group_size is not None else "row"
            if symmetric is None:
                symmetric = zero_point is None
        self.granularity = granularity
        self.group_size = group_size
        self.symmetric = symmetric
        self.scale_rounding = scale_rounding
        self.dtype = _arrays.dtype_name(dtype)

    def to_bnb_state(self, packed: bool = False) -> Dict[str, Any]:
        """This NF4 / FP4 tensor's bitsandbytes QuantState as the dict QuantState.as_dict()
        returns (torch tensors; needs torch): ``QuantState.from_dict(q.to_bnb_state(),
        device="cpu")`` rebuilds it, and bitsandbytes' ``dequantize_4bit(torch.from_numpy(
        q.data), state)`` then gives qs.dequantize(q, q.dtype) bit for bit. packed=True gives
        the checkpoint form (the non-tensor items as the JSON tensor
        ``quant_state.bitsandbytes__nf4``). ValueError for the other formats."""
        from . import _bnb

        return _bnb.to_bnb_state(self, packed)

    @classmethod
    def from_bnb_state(cls, data: Any, state: Any) -> "QTensor":
        """The QTensor of bitsandbytes' packed 4-bit codes `data` (Params4bit's data, any
        shape) and `state` (a QuantState, or its as_dict() packed or not, keys with or without
        a "weight." prefix). The quant_map must be the format's codebook (ValueError
        otherwise: the library decodes the standard maps only)."""
        from . import _bnb

        return _bnb.from_bnb_state(data, state)

    @property
    def nbytes(self) -> int:
        """Bytes of every plane together (what a file stores, without its metadata)."""
        total = 0
        for a in (self.data, self.absmax, self.scale, self.zero_point, self.nested_absmax):
            if a is not None:
                total += a.nbytes
        total += 4 * (self.global_scale is not None) + 4 * (self.nested_offset is not None)
        return total

    @property
    def block_size(self) -> Optional[int]:
        """Elements per block (the attribute `blocksize` in bitsandbytes' spelling)."""
        return self.blocksize

    @property
    def bits_per_weight(self) -> float:
        n = math.prod(self.shape)
        return 8.0 * self.nbytes / n if n else 0.0

    def __repr__(self) -> str:
        return (f"QTensor(format={self.format!r}, shape={self.shape}, "
                f"block_size={self.blocksize}, bits_per_weight={self.bits_per_weight:.3f})")


def _params(fmt: str, code: int, *, blocksize: Any = None, double_quant: bool = False,
            granularity: Any = None, group_size: Any = None, symmetric: Any = None,
            scale: Any = None, scale_rounding: Any = None) -> _capi.QuantParams:
    """Fill qs_quant_params; an option that does not apply to the format is a ValueError."""
    p = _lib.QuantParams()
    _lib.lib().qs_quant_params_init(ctypes.byref(p), code)

    def reject(name: str, value: Any, applies: bool) -> None:
        if value is not None and not applies:
            raise ValueError(f"option {name!r} does not apply to format {fmt!r}")

    grouped = _has(fmt, _capi.QS_OPT_GRANULARITY)
    reject("block_size", blocksize, _takes_blocksize(fmt))
    reject("double_quant", double_quant or None, _has(fmt, _capi.QS_OPT_DOUBLE_QUANT))
    reject("granularity", granularity, grouped)
    reject("group_size", group_size, grouped)
    reject("symmetric", symmetric, _has(fmt, _capi.QS_OPT_SYMMETRIC))
    reject("scale", scale, _has(fmt, _capi.QS_OPT_SCALE))
    reject("scale_rounding", scale_rounding, _has(fmt, _capi.QS_OPT_SCALE_ROUNDING))

    if blocksize is not None:
        if isinstance(blocksize, bool) or not isinstance(blocksize, (int, np.integer)):
            raise ValueError(f"block_size must be an int, got {blocksize!r}")
        if not -2**31 <= int(blocksize) < 2**31:
            raise ValueError(f"block_size {blocksize} out of range")
        p.block_size = int(blocksize)
    if double_quant:
        p.double_quant = 1
    if grouped:
        if granularity is None:
            granularity = "group" if group_size is not None else "row"
        if granularity not in _GRANULARITY:
            raise ValueError(f"unknown granularity {granularity!r}: expected one of "
                             f"{sorted(_GRANULARITY)}")
        p.granularity = _GRANULARITY[granularity]
        if p.granularity == 2:
            if group_size is None:
                raise ValueError("granularity='group' needs group_size")
            if isinstance(group_size, bool) or not isinstance(group_size, (int, np.integer)) \
                    or not 0 < int(group_size) < 2**31:
                raise ValueError(f"group_size must be a positive int, got {group_size!r}")
            p.block_size = int(group_size)
        elif group_size is not None:
            raise ValueError(f"group_size needs granularity='group', not {granularity!r}")
    if symmetric is not None:
        p.symmetric = 1 if symmetric else 0
    if scale is not None:
        s = _arrays.option_float("scale", scale)
        if not (math.isfinite(s) and s > 0.0):
            raise ValueError(f"scale must be finite and > 0, got {scale!r}")
        p.scale = _f32("scale", s)  # 1e-50 would become 0.0: "derive from the data"
    if scale_rounding is not None:
        if scale_rounding not in _SCALE_ROUNDING:
            raise ValueError(f"unknown scale_rounding {scale_rounding!r}: expected "
                             f"{sorted(_SCALE_ROUNDING)}")
        p.scale_rounding = _SCALE_ROUNDING[scale_rounding]
    return p


def _plane_infos(p: _capi.QuantParams, shape: Sequence[int], rows: int,
                 cols: int) -> List[_capi.PlaneInfo]:
    """The library's description of each plane; a shape the format cannot take is a ValueError
    with the library's reason, any other failure a QsparseError with it."""
    lib = _lib.lib()
    out = []
    for plane in range(_capi.QS_PLANE_COUNT):
        info = _capi.PlaneInfo()
        status = lib.qs_quant_plane_info(_lib.ctx(), ctypes.byref(p), rows, cols, plane,
                                         ctypes.byref(info))
        if status == _lib.QS_ERR_SHAPE:
            raise ValueError(f"{_lib.last_error()} (shape {tuple(shape)})")
        _lib.check(status)
        out.append(info)
    return out


def _plane_shape(info: _PlaneLayout, plane: int, shape: Sequence[int],
                 cols: int) -> Tuple[int, ...]:
    """numpy shape of a plane (same bytes as the C plane, see the module docstring)."""
    if info.ndim == 1:
        return (int(info.shape[0]),)
    k = int(info.shape[1])
    if plane != _capi.QS_PLANE_DATA:
        return (int(info.shape[0]), k)
    if k == cols:
        return tuple(shape)
    return (tuple(shape[:-1]) if len(shape) > 1 else ()) + (k,)


def _plane_dtype(info: _PlaneLayout) -> np.dtype:
    return _ELEM_DTYPES[info.elem]


def quantize(a: Any, format: str, *, block_size: Optional[int] = None, double_quant: bool = False,
             granularity: Optional[str] = None, group_size: Optional[int] = None,
             symmetric: Optional[bool] = None, scale: Optional[float] = None,
             scale_rounding: Optional[str] = None, dtype: DTypeArg = None,
             blocksize: Optional[int] = None) -> QTensor:
    """Quantize a tensor to `format` and return a QTensor.

    `a` is a numpy array of float32, float16, bfloat16 (ml_dtypes) or float64 (rounded to
    float32, a copy; a finite value beyond float32's range is a ValueError), a PyTorch CPU
    tensor of those types (bfloat16 included, read through DLPack without a copy), any other
    DLPack or ``__array__`` object, or a memoryview / buffer (a plain byte buffer with dtype=).

    Keywords (each only for the formats it applies to, else ValueError): block_size (NF4/FP4:
    32...4096; MX 32 and NVFP4 16 are fixed; blocksize, bitsandbytes' spelling, is the same
    keyword), double_quant (NF4/FP4), granularity ("tensor", "row" = "channel", "group") with
    group_size, symmetric (INT8; False: asymmetric with zero points), scale (FP8: a given float32
    scale, scale=1.0 is a plain cast; NVFP4: the per-tensor scale), scale_rounding ("floor",
    "rceil"; MX). dtype ("float16" / "bfloat16", a numpy, ml_dtypes or torch dtype) reads a
    uint16 array as those bits, or says what a byte buffer holds.
    An object with a ``__qsparse_quantize__(format, **options)`` method (e.g. a 2:4-compressed
    tensor) quantizes itself through it.
    """
    format = canonical_format(format)
    blocksize = _block_size_arg(block_size, blocksize)
    hook = getattr(a, "__qsparse_quantize__", None)
    if hook is not None and not isinstance(a, np.ndarray):
        options = dict(block_size=blocksize, double_quant=double_quant, granularity=granularity,
                       group_size=group_size, symmetric=symmetric, scale=scale,
                       scale_rounding=scale_rounding, dtype=dtype)
        return hook(format, **{k: v for k, v in options.items()
                               if v is not None and v is not False})
    code = _format_code(format)
    x, src_dtype, dtype_name = _lib.as_float_array(a, dtype)
    shape = x.shape
    rows, cols = _rows_cols(shape)
    p, infos = _layout_of(format, shape, blocksize, double_quant, granularity, group_size,
                          symmetric, scale_rounding, scale)
    planes = [np.empty(_plane_shape(i, pl, shape, cols), _plane_dtype(i)) if i.elem else None
              for pl, i in enumerate(infos)]
    for arr, i in zip(planes, infos):
        assert arr is None or arr.nbytes == i.bytes
    data, sc, zp, nested = planes

    qt = _lib.QTensorC()
    for field, arr in zip(("data", "scale", "zero_point", "nested_scale"), planes):
        if arr is not None:
            setattr(qt, field, _lib.address(arr))
            setattr(qt, field + "_bytes", arr.nbytes)
    _lib.check(_lib.lib().qs_quantize(_lib.ctx(), ctypes.byref(p), _lib.ptr(x), src_dtype, rows,
                                      cols, ctypes.byref(qt)))

    kw = dict(blocksize=int(p.block_size) if _takes_blocksize(format) else None,
              dtype=dtype_name)
    if _has(format, _capi.QS_OPT_DOUBLE_QUANT):
        kw.update(absmax=sc, double_quant=bool(p.double_quant))
        if p.double_quant:
            kw.update(nested_absmax=nested, nested_offset=qt.nested_offset)
    else:
        kw["scale"] = sc
    if _has(format, _capi.QS_OPT_GRANULARITY):
        kw.update(granularity=_GRANULARITY_NAMES[p.granularity],
                  group_size=int(p.block_size) if p.granularity == 2 else None)
    if _has(format, _capi.QS_OPT_SYMMETRIC):
        kw.update(zero_point=zp, symmetric=bool(p.symmetric))
    if _info(code)[4]:
        kw["global_scale"] = qt.global_scale
    if _has(format, _capi.QS_OPT_SCALE_ROUNDING):
        kw["scale_rounding"] = "rceil" if p.scale_rounding == 1 else "floor"
    return QTensor(format, shape, data, **kw)


def _plane(q: QTensor, name: str, arr: Optional[np.ndarray], dtypes: Sequence[np.dtype],
           nbytes: int) -> Optional[np.ndarray]:
    if nbytes == 0:
        return None
    if arr is None:
        raise ValueError(f"{q.format} tensor of shape {q.shape} needs the {name} plane")
    if not isinstance(arr, np.ndarray):  # a torch tensor, a buffer: the same bytes as numpy
        arr = _arrays.as_array(arr)
    if isinstance(arr, np.ndarray) and not arr.dtype.isnative:  # big-endian file data: a copy
        arr = arr.astype(arr.dtype.newbyteorder("="))
    if not isinstance(arr, np.ndarray) or arr.dtype not in dtypes:
        raise ValueError(f"{name} must be a numpy array of {' or '.join(map(str, dtypes))}, "
                         f"got {getattr(arr, 'dtype', type(arr).__name__)}")
    if arr.nbytes != nbytes:
        raise ValueError(f"{name} holds {arr.nbytes} bytes, the {q.format} tensor of shape "
                         f"{q.shape} needs {nbytes}")
    return arr if arr.flags.c_contiguous else arr.copy(order="C")


class _PlaneLayout(NamedTuple):
    """The fields of qs_plane_info this module reads, frozen (cached by _layout_cached)."""
    elem: int
    ndim: int
    shape: Tuple[int, int]
    bytes: int


def _layout(fmt: str, shape: Tuple[int, ...], blocksize: Any, double_quant: Any,
            granularity: Any, group_size: Any, symmetric: Any, scale_rounding: Any,
            scale: Any = None) -> Tuple[_capi.QuantParams, Tuple[_PlaneLayout, ...]]:
    """(qs_quant_params, the library's description of each plane) of a format, a shape and
    options (None / False for those not given): every check of _params and _plane_infos, which
    raise for a bad combination."""
    rows, cols = _rows_cols(shape)
    if any(s < 0 for s in shape):
        raise ValueError(f"negative shape {shape}")
    p = _params(fmt, _format_code(fmt), blocksize=blocksize, double_quant=double_quant,
                granularity=granularity, group_size=group_size, symmetric=symmetric,
                scale=scale, scale_rounding=scale_rounding)
    return p, tuple(_PlaneLayout(int(i.elem), int(i.ndim), (int(i.shape[0]), int(i.shape[1])),
                                 int(i.bytes)) for i in _plane_infos(p, shape, rows, cols))


# _layout of the tensors seen so far, which quantize(), dequantize() and qs.matmul() would
# otherwise ask the library for on every call (two thirds of a small qs.matmul call's time).
# typed: blocksize 64.0 (a ValueError) is not 64; an option of a type that cannot be hashed (a
# list) skips the cache and meets _layout's checks. Callers get their own copy of the
# parameters; the plane descriptions are immutable.
_layout_cached = functools.lru_cache(maxsize=1024, typed=True)(_layout)


def _layout_of(*key: Any) -> Tuple[_capi.QuantParams, Tuple[_PlaneLayout, ...]]:
    try:
        p, infos = _layout_cached(*key)
    except TypeError:  # an unhashable option or shape
        p, infos = _layout(*key)
    return type(p).from_buffer_copy(p), infos



def _c_tensor(q: QTensor) -> Tuple[_capi.QuantParams, _capi.QTensorC, Tuple[Any, ...]]:
    """(qs_quant_params, qs_qtensor, the plane arrays to keep alive) of a QTensor, every plane's
    dtype and size checked: what dequantize() and qs.matmul() hand to C."""
    fmt = q.format
    code = _format_code(fmt)
    opts = _info(code)[2]  # _has(fmt, ...) of each option, from one lookup
    bnb = bool(opts & _capi.QS_OPT_DOUBLE_QUANT)
    grouped = bool(opts & _capi.QS_OPT_GRANULARITY)
    p, infos = _layout_of(fmt, q.shape,
                          q.blocksize if opts & _capi.QS_OPT_BLOCK_SIZE and not grouped else None,
                          q.double_quant if bnb else False, q.granularity if grouped else None,
                          q.group_size if grouped else None,
                          q.symmetric if opts & _capi.QS_OPT_SYMMETRIC else None,
                          q.scale_rounding if opts & _capi.QS_OPT_SCALE_ROUNDING else None)

    i8, u8 = np.dtype(np.int8), np.dtype(np.uint8)
    # the codes are bytes: int8 and uint8 arrays both hold them
    data = _plane(q, "data", q.data, (i8, u8), infos[0].bytes)
    sc = _plane(q, "absmax" if bnb else "scale", q.absmax if bnb else q.scale,
                (_plane_dtype(infos[1]),), infos[1].bytes)
    zp = _plane(q, "zero_point", q.zero_point,
                (_plane_dtype(infos[2]),) if infos[2].elem else (), infos[2].bytes)
    nested = _plane(q, "nested_absmax", q.nested_absmax,
                    (_plane_dtype(infos[3]),) if infos[3].elem else (), infos[3].bytes)

    qt = _lib.QTensorC()
    for field, arr in (("data", data), ("scale", sc), ("zero_point", zp),
                       ("nested_scale", nested)):
        if arr is not None:
            setattr(qt, field, _lib.address(arr))
            setattr(qt, field + "_bytes", arr.nbytes)
    if _info(code)[4]:
        if q.global_scale is None:
            raise ValueError(f"an {fmt} tensor needs global_scale")
        qt.global_scale = _f32("global_scale", q.global_scale)  # also when set after init
    if bnb and q.double_quant:
        if q.nested_offset is None:
            raise ValueError("a double-quantized tensor needs nested_offset")
        qt.nested_offset = _f32("nested_offset", q.nested_offset, zero_ok=True)

    return p, qt, (data, sc, zp, nested)


def dequantize(q: Any, dtype: DTypeArg = "float32") -> np.ndarray:
    """Decode a QTensor to a float32 (or dtype="float16" / "bfloat16", as a name, numpy,
    ml_dtypes or torch dtype) array of its shape. A bfloat16 result needs ml_dtypes
    (ImportError saying so otherwise)."""
    if not isinstance(q, QTensor):
        hook = getattr(q, "__qsparse_dequantize__", None)
        if hook is not None:
            return hook(dtype=dtype)
        raise ValueError(f"expected a QTensor, got {type(q).__name__}")
    dst_code = _lib.dtype_code(dtype)
    p, qt, _keep = _c_tensor(q)
    rows, cols = _rows_cols(q.shape)
    out = _lib.empty_of(dtype, q.shape)
    _lib.check(_lib.lib().qs_dequantize(_lib.ctx(), ctypes.byref(p), ctypes.byref(qt), rows,
                                        cols, _lib.ptr(out), dst_code, out.nbytes))
    return out


_CODEBOOKS = {"nf4": 1, "fp4": 2, "dyn8": 3, "e2m1": 4, "e4m3": 5, "e5m2": 6}


def codebook(name: str) -> np.ndarray:
    """The float32 table of a codebook ("nf4", "fp4", "dyn8", "e2m1", "e4m3", "e5m2")."""
    if name not in _CODEBOOKS:
        raise ValueError(f"unknown codebook {name!r}: expected one of {sorted(_CODEBOOKS)}")
    lib = _lib.lib()
    which = _CODEBOOKS[name]
    out = np.empty(lib.qs_codebook_size(which), np.float32)
    status = lib.qs_codebook(which, out.ctypes.data_as(ctypes.POINTER(ctypes.c_float)), out.size)
    if status != _lib.QS_OK:
        raise _lib.QsparseError(status, f"qs_codebook({name}): {_lib.status_str(status)}")
    return out


def convert(a: Any, dtype: DTypeArg, *, src_dtype: DTypeArg = None) -> np.ndarray:
    """Convert a float32/float16/bfloat16 array to `dtype` with the library's rounding rules."""
    x, code, _ = _lib.as_float_array(a, src_dtype)
    dst = _lib.dtype_code(dtype)
    out = _lib.empty_of(dtype, x.shape)
    _lib.check(_lib.lib().qs_convert(_lib.ctx(), _lib.ptr(x), code, _lib.ptr(out), dst, x.size,
                                     out.nbytes))
    return out
