# SPDX-License-Identifier: MIT
"""Loading of the C library and the plumbing every Python module of qsparse shares.

This is the contract the other modules (quantization, observer.py, sparse.py) build on:

* ``lib()`` returns the cached ``ctypes.CDLL``, found through the ``QSPARSE_LIB`` environment
  variable (a path), then next to this package, then on the system.
* ``ctx()`` returns the calling thread's ``qs_ctx *`` (a ``ctypes.c_void_p``), created lazily with
  the settings of ``set_num_threads`` / ``set_backend``.  A C context may be used by one thread at
  a time and ctypes releases the GIL during calls, so each Python thread gets its own context.
* ``check(status)`` raises ``QsparseError`` (a ``RuntimeError``) carrying the library's message.
* ``declare(name, restype, argtypes)`` declares a C function once and returns it.
* ``as_float_array(x, dtype=None)`` validates an input tensor and returns it C-contiguous with
  its ``QS_DTYPE_*`` code; ``ptr(a)`` gives a ``c_void_p`` to a numpy array's first byte.

No numerics live here: Python only checks arguments, allocates the buffers the C size queries
ask for and calls the library.
"""

import ctypes
import ctypes.util
import glob
import os
import threading

import numpy as np

try:  # bfloat16 arrays are optional: without ml_dtypes pass uint16 bits with dtype="bfloat16"
    import ml_dtypes as _ml_dtypes

    BF16 = np.dtype(_ml_dtypes.bfloat16)
except ImportError:  # pragma: no cover - ml_dtypes is installed wherever the tests run
    _ml_dtypes = None
    BF16 = None

# Status codes and constants of include/qsparse.h (pinned there forever).
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
DTYPE_NAMES = {QS_DTYPE_F32: "float32", QS_DTYPE_F16: "float16", QS_DTYPE_BF16: "bfloat16"}
DTYPE_CODES = {v: k for k, v in DTYPE_NAMES.items()}

QS_PARAM_NUM_THREADS = 1
QS_PARAM_NONFINITE = 2

QS_ISA_AVX2 = 1 << 0
QS_ISA_AVX512 = 1 << 1
QS_ISA_AVX512_VNNI = 1 << 2
QS_ISA_AVX512_BF16 = 1 << 3
QS_ISA_NEON = 1 << 8
QS_ISA_NEON_DOTPROD = 1 << 9
QS_ISA_NEON_FP16 = 1 << 10
QS_ISA_NEON_BF16 = 1 << 11
QS_ISA_ALL = 0xFFFFFFFF

QS_BACKEND_AUTO = 0
QS_BACKEND_CPU = 1

QS_PLANE_DATA, QS_PLANE_SCALE, QS_PLANE_ZERO_POINT, QS_PLANE_NESTED_SCALE = 0, 1, 2, 3


class QsparseError(RuntimeError):
    """A libqsparse call failed: ``status`` is the qs_status code, the text the library's."""

    def __init__(self, status, message):
        super().__init__(message)
        self.status = status


# ---- ctypes mirrors of the public structs (include/qsparse.h) ------------------------------------


class Allocator(ctypes.Structure):
    _fields_ = [("alloc", ctypes.c_void_p), ("free", ctypes.c_void_p), ("user", ctypes.c_void_p)]


class CtxParams(ctypes.Structure):
    _fields_ = [
        ("num_threads", ctypes.c_int32),
        ("backend", ctypes.c_int32),
        ("isa_mask", ctypes.c_uint32),
        ("nonfinite", ctypes.c_int32),
        ("allocator", Allocator),
        ("reserved", ctypes.c_int64 * 8),
    ]


class QuantParams(ctypes.Structure):
    _fields_ = [
        ("format", ctypes.c_int32),
        ("block_size", ctypes.c_int32),
        ("granularity", ctypes.c_int32),
        ("symmetric", ctypes.c_int32),
        ("double_quant", ctypes.c_int32),
        ("scale_rounding", ctypes.c_int32),
        ("scale", ctypes.c_float),
        ("reserved0", ctypes.c_int32),
        ("reserved", ctypes.c_int64 * 6),
    ]


class QTensorC(ctypes.Structure):
    _fields_ = [
        ("data", ctypes.c_void_p),
        ("data_bytes", ctypes.c_int64),
        ("scale", ctypes.c_void_p),
        ("scale_bytes", ctypes.c_int64),
        ("zero_point", ctypes.c_void_p),
        ("zero_point_bytes", ctypes.c_int64),
        ("nested_scale", ctypes.c_void_p),
        ("nested_scale_bytes", ctypes.c_int64),
        ("global_scale", ctypes.c_float),
        ("nested_offset", ctypes.c_float),
        ("reserved", ctypes.c_int64 * 4),
    ]


class IsaTier(ctypes.Structure):
    """qs_isa_tier: one row of the library's ISA tier table."""
    _fields_ = [
        ("name", ctypes.c_char_p),
        ("arch", ctypes.c_char_p),
        ("required", ctypes.c_uint32),
        ("allowed", ctypes.c_uint32),
        ("available", ctypes.c_int32),
        ("reserved", ctypes.c_int32),
    ]


def isa_tiers():
    """The tier table of the C library, in its order: [{"name", "arch", "required", "allowed",
    "available"}, ...] ("scalar" first)."""
    cdll = lib()
    out = []
    for i in range(cdll.qs_isa_tier_count()):
        t = IsaTier()
        check(cdll.qs_isa_tier_info(i, ctypes.byref(t)))
        out.append({"name": t.name.decode(), "arch": t.arch.decode(), "required": t.required,
                    "allowed": t.allowed, "available": bool(t.available)})
    return out


# ---- finding and loading the library -------------------------------------------------------------

_PKG_DIR = os.path.dirname(os.path.abspath(__file__))
_load_lock = threading.Lock()
_lib = None


def _candidates_next_to_package():
    names = []
    for pattern in ("libqsparse.so", "libqsparse.so.*", "libqsparse.*.dylib", "libqsparse.dylib",
                    "qsparse.dll", "libqsparse.dll"):
        names.extend(sorted(glob.glob(os.path.join(_PKG_DIR, pattern))))
    return names


def _declare_core(cdll):
    """Argument and return types of the core API used by every module."""
    c = ctypes
    sigs = {
        "qs_version_string": (c.c_char_p, []),
        "qs_version_number": (c.c_int32, []),
        "qs_status_str": (c.c_char_p, [c.c_int32]),
        "qs_dtype_size": (c.c_int32, [c.c_int32]),
        "qs_cpu_isa": (c.c_uint32, []),
        "qs_isa_name": (c.c_char_p, [c.c_uint32]),
        "qs_ctx_params_init": (None, [c.POINTER(CtxParams)]),
        "qs_ctx_create": (c.c_int32, [c.POINTER(CtxParams), c.POINTER(c.c_void_p)]),
        "qs_ctx_destroy": (None, [c.c_void_p]),
        "qs_ctx_last_error": (c.c_char_p, [c.c_void_p]),
        "qs_ctx_isa": (c.c_uint32, [c.c_void_p]),
        "qs_ctx_backend_name": (c.c_char_p, [c.c_void_p]),
        "qs_ctx_set": (c.c_int32, [c.c_void_p, c.c_int32, c.c_int64]),
        "qs_ctx_get": (c.c_int32, [c.c_void_p, c.c_int32, c.POINTER(c.c_int64)]),
        "qs_ctx_kernel_count": (c.c_int32, [c.c_void_p]),
        "qs_ctx_kernel_info": (c.c_int32, [c.c_void_p, c.c_int32, c.POINTER(c.c_char_p),
                                           c.POINTER(c.c_char_p)]),
        "qs_format_count": (c.c_int32, []),
        "qs_format_name": (c.c_char_p, [c.c_int32]),
        "qs_format_from_name": (c.c_int32, [c.c_char_p]),
        "qs_format_block_size": (c.c_int32, [c.c_int32]),
        "qs_format_bits": (c.c_int32, [c.c_int32]),
        "qs_quant_params_init": (None, [c.POINTER(QuantParams), c.c_int32]),
        "qs_quant_size": (c.c_int32, [c.POINTER(QuantParams), c.c_int64, c.c_int64, c.c_int32,
                                      c.POINTER(c.c_int64)]),
        "qs_quantize": (c.c_int32, [c.c_void_p, c.POINTER(QuantParams), c.c_void_p, c.c_int32,
                                    c.c_int64, c.c_int64, c.POINTER(QTensorC)]),
        "qs_dequantize": (c.c_int32, [c.c_void_p, c.POINTER(QuantParams), c.POINTER(QTensorC),
                                      c.c_int64, c.c_int64, c.c_void_p, c.c_int32, c.c_int64]),
        "qs_convert": (c.c_int32, [c.c_void_p, c.c_void_p, c.c_int32, c.c_void_p, c.c_int32,
                                   c.c_int64, c.c_int64]),
        "qs_codebook": (c.c_int32, [c.c_int32, c.POINTER(c.c_float), c.c_int64]),
        "qs_codebook_size": (c.c_int64, [c.c_int32]),
        "qs_isa_tier_count": (c.c_int32, []),
        "qs_isa_tier_info": (c.c_int32, [c.c_int32, c.POINTER(IsaTier)]),
    }
    for name, (restype, argtypes) in sigs.items():
        fn = getattr(cdll, name)
        fn.restype = restype
        fn.argtypes = argtypes


def _load(path):
    cdll = ctypes.CDLL(path)
    _declare_core(cdll)
    return cdll


def library_path():
    """The path the library was loaded from (loads it if needed)."""
    return lib()._name


def lib():
    """The libqsparse ``ctypes.CDLL``: QSPARSE_LIB, then next to the package, then the system."""
    global _lib
    if _lib is not None:
        return _lib
    with _load_lock:
        if _lib is not None:
            return _lib
        env = os.environ.get("QSPARSE_LIB")
        if env:
            # An explicit path is honoured or reported, never silently replaced by another copy.
            try:
                _lib = _load(env)
            except OSError as e:
                raise OSError(f"QSPARSE_LIB={env!r} could not be loaded: {e}") from e
            return _lib
        tried = []
        for path in _candidates_next_to_package():
            try:
                _lib = _load(path)
                return _lib
            except OSError as e:
                tried.append(f"{path}: {e}")
        for name in (ctypes.util.find_library("qsparse"), "libqsparse.so.0", "libqsparse.so",
                     "libqsparse.dylib", "qsparse.dll"):
            if not name:
                continue
            try:
                _lib = _load(name)
                return _lib
            except OSError as e:
                tried.append(f"{name}: {e}")
        raise OSError("libqsparse not found: set QSPARSE_LIB to the shared library's path, or "
                      "install the package with `pip install .` (tried: " + "; ".join(tried) + ")")


def declare(name, restype, argtypes):
    """Declare (once) and return the C function `name` of the library."""
    fn = getattr(lib(), name)
    fn.restype = restype
    fn.argtypes = argtypes
    return fn


# ---- contexts ------------------------------------------------------------------------------------

_settings_lock = threading.Lock()
_settings = {"num_threads": 0, "isa_mask": QS_ISA_ALL, "backend": QS_BACKEND_AUTO,
             "generation": 0}
_local = threading.local()


class _CtxHolder:
    """Owns one qs_ctx; destroys it when the thread ends or the settings change."""

    def __init__(self, generation):
        params = CtxParams()
        lib().qs_ctx_params_init(ctypes.byref(params))
        with _settings_lock:
            params.num_threads = _settings["num_threads"]
            params.isa_mask = _settings["isa_mask"]
            params.backend = _settings["backend"]
        handle = ctypes.c_void_p()
        status = lib().qs_ctx_create(ctypes.byref(params), ctypes.byref(handle))
        if status != QS_OK:
            raise QsparseError(status, "qs_ctx_create: " + status_str(status))
        self.handle = handle
        self.generation = generation
        self._destroy = lib().qs_ctx_destroy

    def __del__(self):
        handle = getattr(self, "handle", None)
        if handle is not None and handle.value:
            try:
                self._destroy(handle)
            except Exception:  # interpreter shutdown: the library may be gone already
                pass
            self.handle = None


def ctx():
    """The calling thread's qs_ctx pointer (ctypes.c_void_p), created on first use."""
    holder = getattr(_local, "holder", None)
    generation = _settings["generation"]
    if holder is None or holder.generation != generation:
        _local.holder = None  # destroy the old context before making the new one
        holder = _CtxHolder(generation)
        _local.holder = holder
    return holder.handle


def update_settings(**changes):
    """Change context settings; every thread's context is rebuilt on its next ctx() call."""
    with _settings_lock:
        _settings.update(changes)
        _settings["generation"] += 1


def settings():
    with _settings_lock:
        return dict(_settings)


def status_str(status):
    s = lib().qs_status_str(status)
    return s.decode() if s else f"status {status}"


def last_error():
    msg = lib().qs_ctx_last_error(ctx())
    return msg.decode("utf-8", "replace") if msg else ""


def check(status):
    """Raise QsparseError with the context's last message unless status is QS_OK."""
    if status == QS_OK:
        return
    msg = last_error() or status_str(status)
    raise QsparseError(status, f"{msg} ({status_str(status)})")


# ---- arrays --------------------------------------------------------------------------------------


def ptr(a):
    """c_void_p to the first byte of a C-contiguous numpy array."""
    return ctypes.c_void_p(a.ctypes.data)


def dtype_code(name):
    """QS_DTYPE_* for "float32" / "float16" / "bfloat16" (ValueError otherwise)."""
    if name not in DTYPE_CODES:
        raise ValueError(f"unknown dtype {name!r}: expected one of {sorted(DTYPE_CODES)}")
    return DTYPE_CODES[name]


def as_float_array(x, dtype=None):
    """Validate a tensor input: returns (C-contiguous array, QS_DTYPE_* code, dtype name).

    Accepted: float32, float16, ml_dtypes.bfloat16 arrays, or uint16 arrays holding float16 or
    bfloat16 bits when dtype="float16" / "bfloat16" says which, in either byte order (a
    non-native one is converted, a copy).  Anything else is a ValueError,
    raised before any C call.  Python numbers and lists are not converted: the element type must
    be chosen by the caller, not guessed here.
    """
    if isinstance(x, np.generic):  # a numpy scalar is a 0-D tensor of its own dtype
        x = np.asarray(x)
    if not isinstance(x, np.ndarray):
        raise ValueError(f"expected a numpy array, got {type(x).__name__}")
    if not x.dtype.isnative:  # e.g. big-endian data read from a file: the same values, native
        x = x.astype(x.dtype.newbyteorder("="))
    dt = x.dtype
    if dtype is not None:
        code = dtype_code(dtype)
        if code == QS_DTYPE_F32:
            ok = dt == np.float32
        elif code == QS_DTYPE_F16:
            ok = dt == np.float16 or dt == np.uint16
        else:
            ok = dt == np.uint16 or (BF16 is not None and dt == BF16)
        if not ok:
            raise ValueError(f"array of dtype {dt} does not hold {dtype} values")
    elif dt == np.float32:
        code = QS_DTYPE_F32
    elif dt == np.float16:
        code = QS_DTYPE_F16
    elif BF16 is not None and dt == BF16:
        code = QS_DTYPE_BF16
    elif dt == np.uint16:
        raise ValueError("a uint16 array needs dtype='float16' or dtype='bfloat16'")
    else:
        raise ValueError(f"unsupported dtype {dt}: expected float32, float16 or bfloat16")
    # (np.ascontiguousarray would turn a 0-D array into 1-D)
    return (x if x.flags.c_contiguous else x.copy(order="C")), code, DTYPE_NAMES[code]


def empty_of(dtype_name, shape):
    """An uninitialised output array of a plain dtype; bfloat16 is ml_dtypes' or uint16 bits."""
    code = dtype_code(dtype_name)
    if code == QS_DTYPE_F32:
        return np.empty(shape, np.float32)
    if code == QS_DTYPE_F16:
        return np.empty(shape, np.float16)
    return np.empty(shape, BF16 if BF16 is not None else np.uint16)
