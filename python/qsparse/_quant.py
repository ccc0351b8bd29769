# SPDX-License-Identifier: MIT
"""quantize / dequantize over qs_quantize and qs_dequantize, and the QTensor holding the planes.

The planes are numpy arrays with exactly the bytes the C API writes (spec/formats.md, the plane
table in include/qsparse.h); only their numpy shapes are chosen here for convenience, never their
order or content:

- nf4, fp4: data uint8 [(n+1)//2], high nibble first; absmax f32 [nb], or with double_quant
  the uint8 codes [nb] plus nested_absmax f32 [ceil(nb/256)] and nested_offset.
- int8: data int8 in the input's shape; scale f32 [1] (tensor), [rows] (row) or
  [rows, cols/group] (group); zero_point int8 of the same shape when asymmetric.
- llm_int8: data int8 in the input's shape; scale f32 [rows] (SCB, the row absmax).
- fp8_e4m3, fp8_e5m2: data uint8 in the input's shape; scale f32 [1].
- mxfp4, nvfp4: data uint8 [*lead, ceil(cols/2)], low nibble first; scale uint8
  [rows, ceil(cols/bs)] (E8M0 bytes for MX, E4M3 bytes for NVFP4); nvfp4 also global_scale f32.
- mxfp8: data uint8 (E4M3) in the input's shape; scale uint8 E8M0 [rows, ceil(cols/32)].

rows x cols is the input as [prod(shape[:-1]), shape[-1]] (a 0-D or 1-D tensor is one row).
"""

import ctypes
import math

import numpy as np

from . import _lib

_GRANULARITY = {"tensor": 0, "row": 1, "channel": 1, "group": 2}
_GRANULARITY_NAMES = {0: "tensor", 1: "row", 2: "group"}
_SCALE_ROUNDING = {"floor": 0, "rceil": 1}

_BNB4 = ("nf4", "fp4")
_MX = ("mxfp4", "mxfp8")
_FP8 = ("fp8_e4m3", "fp8_e5m2")


def formats():
    """Names of every format the library knows, in code order."""
    lib = _lib.lib()
    return [lib.qs_format_name(f).decode() for f in range(1, lib.qs_format_count() + 1)]


def _format_code(name):
    if not isinstance(name, str):
        raise ValueError(f"format must be a string, got {type(name).__name__}")
    code = _lib.lib().qs_format_from_name(name.encode())
    if code < 0:
        raise ValueError(f"unknown format {name!r}: expected one of {formats()}")
    return code


def _f32(name, value, *, zero_ok=False):
    """value rounded to the float32 the C struct holds; ValueError when that rounding changes its
    meaning: a finite value overflowing to inf, or (unless zero_ok) a non-zero one becoming 0,
    which the library would read as "derive from the data"."""
    v = float(value)
    with np.errstate(over="ignore", under="ignore"):
        f = float(np.float32(v))
    if (math.isinf(f) and math.isfinite(v)) or (f == 0.0 and v != 0.0 and not zero_ok):
        raise ValueError(f"{name} {value!r} is outside float32's range (it would become {f}); "
                         f"the library keeps it as a float32")
    return f


def _rows_cols(shape):
    if len(shape) == 0:
        return 1, 1
    cols = int(shape[-1])
    rows = int(math.prod(shape[:-1])) if len(shape) > 1 else 1
    return rows, cols


class QTensor:
    """A quantized tensor: the format's planes as numpy arrays plus the parameters that made them.

    Built by quantize(); may also be built by hand from stored planes (e.g. read back from a
    safetensors file) and passed to dequantize(), which checks every plane's dtype and size.
    """

    def __init__(self, format, shape, data, *, absmax=None, scale=None, zero_point=None,
                 global_scale=None, nested_absmax=None, nested_offset=None, blocksize=None,
                 double_quant=None, granularity=None, group_size=None, symmetric=None,
                 scale_rounding=None, dtype="float32"):
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
        if blocksize is None and format in _BNB4 + _MX + ("nvfp4",):
            blocksize = int(_lib.lib().qs_format_block_size(_format_code(format)))
        self.blocksize = blocksize
        if format == "int8":
            if granularity is None:
                granularity = "group" if group_size is not None else "row"
            if symmetric is None:
                symmetric = zero_point is None
        self.granularity = granularity
        self.group_size = group_size
        self.symmetric = symmetric
        self.scale_rounding = scale_rounding
        self.dtype = dtype

    @property
    def nbytes(self):
        """Bytes of every plane together (what a file stores, without its metadata)."""
        total = 0
        for a in (self.data, self.absmax, self.scale, self.zero_point, self.nested_absmax):
            if a is not None:
                total += a.nbytes
        total += 4 * (self.global_scale is not None) + 4 * (self.nested_offset is not None)
        return total

    @property
    def bits_per_weight(self):
        n = math.prod(self.shape)
        return 8.0 * self.nbytes / n if n else 0.0

    def __repr__(self):
        return (f"QTensor(format={self.format!r}, shape={self.shape}, blocksize={self.blocksize}, "
                f"bits_per_weight={self.bits_per_weight:.3f})")


def _params(fmt, code, *, blocksize=None, double_quant=False, granularity=None, group_size=None,
            symmetric=None, scale=None, scale_rounding=None):
    """Fill qs_quant_params; an option that does not apply to the format is a ValueError."""
    p = _lib.QuantParams()
    _lib.lib().qs_quant_params_init(ctypes.byref(p), code)

    def reject(name, value, allowed):
        if value is not None and fmt not in allowed:
            raise ValueError(f"option {name!r} does not apply to format {fmt!r}")

    reject("blocksize", blocksize, _BNB4 + _MX + ("nvfp4",))
    reject("double_quant", double_quant or None, _BNB4)
    reject("granularity", granularity, ("int8",))
    reject("group_size", group_size, ("int8",))
    reject("symmetric", symmetric, ("int8",))
    reject("scale", scale, _FP8 + ("nvfp4",))
    reject("scale_rounding", scale_rounding, _MX)

    if blocksize is not None:
        if isinstance(blocksize, bool) or not isinstance(blocksize, (int, np.integer)):
            raise ValueError(f"blocksize must be an int, got {blocksize!r}")
        if not -2**31 <= int(blocksize) < 2**31:
            raise ValueError(f"blocksize {blocksize} out of range")
        p.block_size = int(blocksize)
    if double_quant:
        p.double_quant = 1
    if fmt == "int8":
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
        s = float(scale)
        if not (math.isfinite(s) and s > 0.0):
            raise ValueError(f"scale must be finite and > 0, got {scale!r}")
        p.scale = _f32("scale", s)  # 1e-50 would become 0.0: "derive from the data"
    if scale_rounding is not None:
        if scale_rounding not in _SCALE_ROUNDING:
            raise ValueError(f"unknown scale_rounding {scale_rounding!r}: expected "
                             f"{sorted(_SCALE_ROUNDING)}")
        p.scale_rounding = _SCALE_ROUNDING[scale_rounding]
    return p


def _check_shape(fmt, p, shape, cols):
    """The one shape rule of the formats: INT8 groups must divide the last dimension."""
    if fmt == "int8" and p.granularity == 2 and cols % p.block_size:
        raise ValueError(f"int8 group_size {p.block_size} does not divide the last dimension "
                         f"({cols}) of shape {tuple(shape)}")


def _plane_sizes(p, rows, cols):
    lib = _lib.lib()
    out = []
    for plane in range(4):
        nbytes = ctypes.c_int64(0)
        status = lib.qs_quant_size(ctypes.byref(p), rows, cols, plane, ctypes.byref(nbytes))
        if status != _lib.QS_OK:
            # qs_quant_size has no context to hold a message; qs_quantize checks the same layout
            # first, with a context, and fails there before it reads or writes any buffer.
            empty = _lib.QTensorC()
            status2 = lib.qs_quantize(_lib.ctx(), ctypes.byref(p), None, _lib.QS_DTYPE_F32,
                                      rows, cols, ctypes.byref(empty))
            if status2 == status:
                _lib.check(status)
            raise _lib.QsparseError(status, f"qs_quant_size for a {rows} x {cols} tensor: "
                                            f"{_lib.status_str(status)}")
        out.append(nbytes.value)
    return out


def _plane_shapes(fmt, p, shape, rows, cols, sizes):
    """numpy shapes of the planes (same bytes as the C planes, see the module docstring)."""
    lead = tuple(shape[:-1]) if len(shape) > 1 else ()
    if fmt in _BNB4:
        data = (sizes[0],)
        sc = (sizes[1] // (1 if p.double_quant else 4),)
    elif fmt in ("mxfp4", "nvfp4"):
        data = lead + ((cols + 1) // 2,)
        sc = (rows, sizes[1] // rows if rows else 0)
    elif fmt == "mxfp8":
        data = tuple(shape)
        sc = (rows, sizes[1] // rows if rows else 0)
    elif fmt == "int8" and p.granularity == 2:
        data = tuple(shape)
        sc = (rows, cols // p.block_size)
    else:
        data = tuple(shape)
        sc = (sizes[1] // 4,)
    return data, sc


def quantize(a, format, *, blocksize=None, double_quant=False, granularity=None, group_size=None,
             symmetric=None, scale=None, scale_rounding=None, dtype=None):
    """Quantize a float32 / float16 / bfloat16 array to `format` and return a QTensor.

    Keywords (each only for the formats it applies to, else ValueError): blocksize (NF4/FP4:
    32...4096; MX 32 and NVFP4 16 are fixed), double_quant (NF4/FP4), granularity ("tensor",
    "row" = "channel", "group") with group_size, symmetric (INT8), scale (FP8: a given float32
    scale, scale=1.0 is a plain cast; NVFP4: the per-tensor scale), scale_rounding ("floor",
    "rceil"; MX).  dtype="float16" / "bfloat16" reads a uint16 array as those bits.
    An object with a ``__qsparse_quantize__(format, **options)`` method (e.g. a 2:4-compressed
    tensor) quantizes itself through it.
    """
    hook = getattr(a, "__qsparse_quantize__", None)
    if hook is not None and not isinstance(a, np.ndarray):
        options = dict(blocksize=blocksize, double_quant=double_quant, granularity=granularity,
                       group_size=group_size, symmetric=symmetric, scale=scale,
                       scale_rounding=scale_rounding, dtype=dtype)
        return hook(format, **{k: v for k, v in options.items()
                               if v is not None and v is not False})
    code = _format_code(format)
    x, src_dtype, dtype_name = _lib.as_float_array(a, dtype)
    shape = x.shape
    rows, cols = _rows_cols(shape)
    p = _params(format, code, blocksize=blocksize, double_quant=double_quant,
                granularity=granularity, group_size=group_size, symmetric=symmetric, scale=scale,
                scale_rounding=scale_rounding)
    _check_shape(format, p, shape, cols)
    sizes = _plane_sizes(p, rows, cols)
    data_shape, scale_shape = _plane_shapes(format, p, shape, rows, cols, sizes)

    data_dt = np.int8 if format in ("int8", "llm_int8") else np.uint8
    data = np.empty(data_shape, data_dt)
    if format in _BNB4:
        sc = np.empty(scale_shape, np.uint8 if p.double_quant else np.float32)
    elif format in _MX or format == "nvfp4":
        sc = np.empty(scale_shape, np.uint8)
    else:
        sc = np.empty(scale_shape, np.float32)
    zp = np.empty(scale_shape, np.int8) if sizes[2] else None
    nested = np.empty((sizes[3] // 4,), np.float32) if sizes[3] else None
    assert data.nbytes == sizes[0] and sc.nbytes == sizes[1]

    qt = _lib.QTensorC()
    qt.data, qt.data_bytes = data.ctypes.data, data.nbytes
    qt.scale, qt.scale_bytes = sc.ctypes.data, sc.nbytes
    if zp is not None:
        qt.zero_point, qt.zero_point_bytes = zp.ctypes.data, zp.nbytes
    if nested is not None:
        qt.nested_scale, qt.nested_scale_bytes = nested.ctypes.data, nested.nbytes
    _lib.check(_lib.lib().qs_quantize(_lib.ctx(), ctypes.byref(p), _lib.ptr(x), src_dtype, rows,
                                      cols, ctypes.byref(qt)))

    kw = dict(blocksize=int(p.block_size) if format in _BNB4 + _MX + ("nvfp4",) else None,
              dtype=dtype_name)
    if format in _BNB4:
        kw.update(absmax=sc, double_quant=bool(p.double_quant))
        if p.double_quant:
            kw.update(nested_absmax=nested, nested_offset=qt.nested_offset)
    else:
        kw["scale"] = sc
    if format == "int8":
        kw.update(zero_point=zp, granularity=_GRANULARITY_NAMES[p.granularity],
                  group_size=int(p.block_size) if p.granularity == 2 else None,
                  symmetric=bool(p.symmetric))
    if format == "nvfp4":
        kw["global_scale"] = qt.global_scale
    if format in _MX:
        kw["scale_rounding"] = "rceil" if p.scale_rounding == 1 else "floor"
    return QTensor(format, shape, data, **kw)


def _plane(q, name, arr, dtypes, nbytes):
    if nbytes == 0:
        return None
    if arr is None:
        raise ValueError(f"{q.format} tensor of shape {q.shape} needs the {name} plane")
    if isinstance(arr, np.ndarray) and not arr.dtype.isnative:  # big-endian file data: a copy
        arr = arr.astype(arr.dtype.newbyteorder("="))
    if not isinstance(arr, np.ndarray) or arr.dtype not in dtypes:
        raise ValueError(f"{name} must be a numpy array of {' or '.join(map(str, dtypes))}, "
                         f"got {getattr(arr, 'dtype', type(arr).__name__)}")
    if arr.nbytes != nbytes:
        raise ValueError(f"{name} holds {arr.nbytes} bytes, the {q.format} tensor of shape "
                         f"{q.shape} needs {nbytes}")
    return arr if arr.flags.c_contiguous else arr.copy(order="C")


def dequantize(q, dtype="float32"):
    """Decode a QTensor to a float32 (or dtype="float16" / "bfloat16") array of its shape."""
    if not isinstance(q, QTensor):
        hook = getattr(q, "__qsparse_dequantize__", None)
        if hook is not None:
            return hook(dtype=dtype)
        raise ValueError(f"expected a QTensor, got {type(q).__name__}")
    code = _format_code(q.format)
    dst_code = _lib.dtype_code(dtype)
    rows, cols = _rows_cols(q.shape)
    if any(s < 0 for s in q.shape):
        raise ValueError(f"negative shape {q.shape}")
    fmt = q.format
    p = _params(fmt, code,
                blocksize=q.blocksize if fmt in _BNB4 else None,
                double_quant=q.double_quant if fmt in _BNB4 else False,
                granularity=q.granularity if fmt == "int8" else None,
                group_size=q.group_size if fmt == "int8" else None,
                symmetric=q.symmetric if fmt == "int8" else None,
                scale_rounding=q.scale_rounding if fmt in _MX else None)
    _check_shape(fmt, p, q.shape, cols)
    sizes = _plane_sizes(p, rows, cols)

    i8, u8, f32 = np.dtype(np.int8), np.dtype(np.uint8), np.dtype(np.float32)
    data = _plane(q, "data", q.data, (i8, u8), sizes[0])
    if fmt in _BNB4:
        sc = _plane(q, "absmax", q.absmax, (u8,) if q.double_quant else (f32,), sizes[1])
    elif fmt in _MX or fmt == "nvfp4":
        sc = _plane(q, "scale", q.scale, (u8,), sizes[1])
    else:
        sc = _plane(q, "scale", q.scale, (f32,), sizes[1])
    zp = _plane(q, "zero_point", q.zero_point, (i8,), sizes[2])
    nested = _plane(q, "nested_absmax", q.nested_absmax, (f32,), sizes[3])

    qt = _lib.QTensorC()
    for field, arr in (("data", data), ("scale", sc), ("zero_point", zp),
                       ("nested_scale", nested)):
        if arr is not None:
            setattr(qt, field, arr.ctypes.data)
            setattr(qt, field + "_bytes", arr.nbytes)
    if fmt == "nvfp4":
        if q.global_scale is None:
            raise ValueError("an nvfp4 tensor needs global_scale")
        qt.global_scale = _f32("global_scale", q.global_scale)  # also when set after init
    if fmt in _BNB4 and q.double_quant:
        if q.nested_offset is None:
            raise ValueError("a double-quantized tensor needs nested_offset")
        qt.nested_offset = _f32("nested_offset", q.nested_offset, zero_ok=True)

    out = _lib.empty_of(dtype, q.shape)
    _lib.check(_lib.lib().qs_dequantize(_lib.ctx(), ctypes.byref(p), ctypes.byref(qt), rows,
                                        cols, _lib.ptr(out), dst_code, out.nbytes))
    return out


_CODEBOOKS = {"nf4": 1, "fp4": 2, "dyn8": 3, "e2m1": 4, "e4m3": 5, "e5m2": 6}


def codebook(name):
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


def convert(a, dtype, *, src_dtype=None):
    """Convert a float32/float16/bfloat16 array to `dtype` with the library's rounding rules."""
    x, code, _ = _lib.as_float_array(a, src_dtype)
    dst = _lib.dtype_code(dtype)
    out = _lib.empty_of(dtype, x.shape)
    _lib.check(_lib.lib().qs_convert(_lib.ctx(), _lib.ptr(x), code, _lib.ptr(out), dst, x.size,
                                     out.nbytes))
    return out
