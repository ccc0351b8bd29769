# SPDX-License-Identifier: MIT
"""Loading of the C library and the plumbing every Python module of qsparse shares.

This is the contract the other modules (quantization, observer.py, sparse.py) build on:

* ``lib()`` returns the cached ``ctypes.CDLL``, found through the ``QSPARSE_LIB`` environment
  variable (a path), then next to this package, then on the system.
* ``ctx()`` returns the calling thread's ``qs_ctx *`` (a ``ctypes.c_void_p``), created lazily with
  the settings of ``set_num_threads`` / ``set_backend`` / ``set_isa``.  A C context may be used by
  one thread at a time and ctypes releases the GIL during calls, so each Python thread gets its
  own context.
* ``check(status)`` raises ``QsparseError`` (a ``RuntimeError``) carrying the library's message.
* ``declare(name, restype, argtypes)`` declares a C function once and returns it (the core API
  is declared from ``_capi.SIGNATURES`` when the library loads, and its struct mirrors are
  checked against the library's layout then).
* ``as_float_array(x, dtype=None)`` validates an input tensor and returns it C-contiguous with
  its ``QS_DTYPE_*`` code; ``ptr(a)`` gives a ``c_void_p`` to a numpy array's first byte.

No numerics live here: Python only checks arguments, allocates the buffers the C size queries
ask for and calls the library.
"""

from __future__ import annotations

import ctypes
import ctypes.util
import glob
import os
import threading
from typing import Any, Dict, List, Tuple

import numpy as np

from . import _arrays
from ._arrays import BF16  # ml_dtypes' bfloat16, or None without ml_dtypes

# Constants and struct mirrors live in _capi (the one place for the C API's shapes); they are
# re-exported here because every module of the binding reaches them through _lib.
from ._capi import (  # noqa: E402,F401
    QS_BACKEND_AUTO, QS_BACKEND_CPU, QS_BACKEND_CUDA, QS_DTYPE_BF16, QS_DTYPE_F16, QS_DTYPE_F32,
    QS_ERR_BACKEND, QS_ERR_BAD_DATA, QS_ERR_BUFFER_TOO_SMALL, QS_ERR_INVALID_ARG, QS_ERR_NONFINITE,
    QS_ERR_OUT_OF_MEMORY, QS_ERR_OVERFLOW, QS_ERR_SHAPE, QS_ERR_UNSUPPORTED, QS_ISA_ALL,
    QS_ISA_AVX2, QS_ISA_AVX512, QS_ISA_AVX512_BF16, QS_ISA_AVX512_VNNI, QS_ISA_NEON,
    QS_ISA_NEON_BF16, QS_ISA_NEON_DOTPROD, QS_ISA_NEON_FP16, QS_OK, QS_PARAM_NONFINITE,
    QS_PARAM_NUM_THREADS, QS_PARAM_PARALLEL_BACKOFF, QS_PARAM_PARALLEL_GRAIN, QS_PLANE_DATA,
    QS_PLANE_NESTED_SCALE, QS_PLANE_SCALE, QS_PLANE_ZERO_POINT, Allocator, CtxParams, FormatInfo,
    IsaTier, PlaneInfo, QTensorC, QuantParams)
from . import _capi  # noqa: E402

DTYPE_NAMES = {QS_DTYPE_F32: "float32", QS_DTYPE_F16: "float16", QS_DTYPE_BF16: "bfloat16"}
DTYPE_CODES = {v: k for k, v in DTYPE_NAMES.items()}


class QsparseError(RuntimeError):
    """A libqsparse call failed: ``status`` is the qs_status code, the text the library's."""

    def __init__(self, status: int, message: str) -> None:
        super().__init__(message)
        self.status = status


# ---- finding and loading the library -------------------------------------------------------------

_PKG_DIR = os.path.dirname(os.path.abspath(__file__))
_load_lock = threading.Lock()
_lib = None


def _candidates_next_to_package() -> List[str]:
    names = []
    for pattern in ("libqsparse.so", "libqsparse.so.*", "libqsparse.*.dylib", "libqsparse.dylib",
                    "qsparse.dll", "libqsparse.dll"):
        names.extend(sorted(glob.glob(os.path.join(_PKG_DIR, pattern))))
    return names


def _load(path: str) -> ctypes.CDLL:
    cdll = ctypes.CDLL(path)
    _capi.declare_all(cdll)
    _capi.check_layouts(cdll, path)
    return cdll


def library_path() -> str:
    """The path the library was loaded from (loads it if needed)."""
    return lib()._name


def lib() -> Any:
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
        for name in (ctypes.util.find_library("qsparse"), "libqsparse.so.1", "libqsparse.so",
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


def declare(name: str, restype: Any, argtypes: List[Any]) -> Any:
    """Declare (once) and return the C function `name` of the library."""
    fn = getattr(lib(), name)
    fn.restype = restype
    fn.argtypes = argtypes
    return fn


# ---- contexts ------------------------------------------------------------------------------------

_settings_lock = threading.Lock()
# parallel_grain / parallel_backoff: None keeps the library's default (or QS_PARALLEL_* from the
# environment)
_settings = {"num_threads": 0, "isa_mask": QS_ISA_ALL, "backend": QS_BACKEND_AUTO,
             "parallel_grain": None, "parallel_backoff": None, "generation": 0}
_local = threading.local()


class _CtxHolder:
    """Owns one qs_ctx; destroys it when the thread ends or the settings change."""

    def __init__(self, generation: int) -> None:
        params = CtxParams()
        lib().qs_ctx_params_init(ctypes.byref(params))
        with _settings_lock:
            params.num_threads = _settings["num_threads"]
            params.isa_mask = _settings["isa_mask"]
            params.backend = _settings["backend"]
            policy = [(QS_PARAM_PARALLEL_GRAIN, _settings["parallel_grain"]),
                      (QS_PARAM_PARALLEL_BACKOFF, _settings["parallel_backoff"])]
        handle = ctypes.c_void_p()
        status = lib().qs_ctx_create(ctypes.byref(params), ctypes.byref(handle))
        if status != QS_OK:
            why = ""
            if status == QS_ERR_BACKEND:  # no context to hold the reason: the registry has it
                why = (lib().qs_backend_message(params.backend) or b"").decode("utf-8", "replace")
            raise QsparseError(status, "qs_ctx_create: " + (why + " (" if why else "")
                               + status_str(status) + (")" if why else ""))
        self.handle = handle
        self.generation = generation
        self._destroy = lib().qs_ctx_destroy
        for key, value in policy:
            if value is not None:
                check(lib().qs_ctx_set(handle, key, int(value)))

    def __del__(self) -> None:
        handle = getattr(self, "handle", None)
        if handle is not None and handle.value:
            try:
                self._destroy(handle)
            except Exception:  # interpreter shutdown: the library may be gone already
                pass
            self.handle = None


def isa_tiers() -> List[Dict[str, Any]]:
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


def ctx() -> ctypes.c_void_p:
    """The calling thread's qs_ctx pointer (ctypes.c_void_p), created on first use."""
    holder = getattr(_local, "holder", None)
    generation = _settings["generation"]
    if holder is None or holder.generation != generation:
        _local.holder = None  # destroy the old context before making the new one
        holder = _CtxHolder(generation)
        _local.holder = holder
    return holder.handle


def update_settings(**changes: int) -> None:
    """Change context settings; every thread's context is rebuilt on its next ctx() call."""
    with _settings_lock:
        _settings.update(changes)
        _settings["generation"] += 1


def settings() -> Dict[str, int]:
    with _settings_lock:
        return dict(_settings)


def status_str(status: int) -> str:
    s = lib().qs_status_str(status)
    return s.decode() if s else f"status {status}"


def last_error() -> str:
    msg = lib().qs_ctx_last_error(ctx())
    return msg.decode("utf-8", "replace") if msg else ""


def check(status: int) -> None:
    """Raise QsparseError with the context's last message unless status is QS_OK."""
    if status == QS_OK:
        return
    msg = last_error() or status_str(status)
    raise QsparseError(status, f"{msg} ({status_str(status)})")


# ---- arrays --------------------------------------------------------------------------------------


def address(a: np.ndarray) -> int:
    """The address of the first byte of a C-contiguous numpy array. A writable one's comes from
    its buffer (0.6 us); ndarray.ctypes, which read-only and empty arrays take, costs 2 us,
    several times a call's C time for a small qs.matmul."""
    try:
        return ctypes.addressof(ctypes.c_char.from_buffer(a))
    except (TypeError, ValueError, BufferError):
        return a.ctypes.data


def ptr(a: np.ndarray) -> ctypes.c_void_p:
    """c_void_p to the first byte of a C-contiguous numpy array."""
    return ctypes.c_void_p(address(a))


def dtype_code(name: Any) -> int:
    """QS_DTYPE_* of a dtype argument ("float32", np.float16, ml_dtypes.bfloat16, torch.bfloat16,
    ...: _arrays.dtype_name); ValueError otherwise."""
    return DTYPE_CODES[_arrays.dtype_name(name)]


def _narrow_to_f32(x: np.ndarray) -> np.ndarray:
    """float64 (or longer) values rounded to float32 (numpy's round to nearest even, a copy);
    a finite value beyond float32's range is a ValueError, not a silent inf."""
    with np.errstate(over="ignore", under="ignore", invalid="ignore"):
        out = x.astype(np.float32, order="C")
    over = np.isinf(out) & np.isfinite(x)
    if over.any():
        i = int(np.flatnonzero(over.reshape(-1))[0])
        raise ValueError(f"element {i} = {float(x.reshape(-1)[i])!r} of the {x.dtype} input is "
                         f"outside float32's range (it would become inf)")
    return out


def as_float_array(x: Any, dtype: Any = None) -> Tuple[np.ndarray, int, str]:
    """Validate a tensor input: returns (C-contiguous array, QS_DTYPE_* code, dtype name).

    x may be anything _arrays.read accepts (numpy arrays, torch and other DLPack tensors
    including bfloat16, objects with __array__, memoryviews and buffers). Its elements may be
    float32, float16, bfloat16 (ml_dtypes), float64 or longer (rounded to float32, a copy; a
    finite value beyond float32's range is a ValueError), or uint16 holding float16 or bfloat16
    bits when dtype="float16" / "bfloat16" says which, in either byte order (a non-native one is
    converted, a copy). dtype may also be given for a float array, and must then match it
    (float64 with dtype="float32" is converted). Anything else is a ValueError, raised before any
    C call. Python numbers and lists are not converted: the element type must be chosen by the
    caller, not guessed here.
    """
    want = None if dtype is None else _arrays.dtype_name(dtype)
    x, bf16_bits = _arrays.read(x, want)
    if bf16_bits and want is None:
        want = "bfloat16"
    if not x.dtype.isnative:  # e.g. big-endian data read from a file: the same values, native
        x = x.astype(x.dtype.newbyteorder("="))
    dt = x.dtype
    wide = dt.kind == "f" and dt.itemsize > 4  # float64, longdouble
    if want is not None:
        code = DTYPE_CODES[want]
        if code == QS_DTYPE_F32:
            ok = dt == np.float32 or wide
        elif code == QS_DTYPE_F16:
            ok = dt == np.float16 or dt == np.uint16
        else:
            ok = dt == np.uint16 or (BF16 is not None and dt == BF16)
        if not ok:
            raise ValueError(f"array of dtype {dt} does not hold {want} values")
        if bf16_bits and code != QS_DTYPE_BF16:
            raise ValueError(f"a bfloat16 tensor does not hold {want} values")
    elif dt == np.float32 or wide:
        code = QS_DTYPE_F32
    elif dt == np.float16:
        code = QS_DTYPE_F16
    elif BF16 is not None and dt == BF16:
        code = QS_DTYPE_BF16
    elif dt == np.uint16:
        raise ValueError("a uint16 array needs dtype='float16' or dtype='bfloat16'")
    else:
        raise ValueError(f"unsupported dtype {dt}: expected a float array (float32, float16, "
                         f"bfloat16, float64)")
    if wide:
        return _narrow_to_f32(x), QS_DTYPE_F32, "float32"
    # (np.ascontiguousarray would turn a 0-D array into 1-D)
    return (x if x.flags.c_contiguous else x.copy(order="C")), code, DTYPE_NAMES[code]


def empty_of(dtype_name: Any, shape: Tuple[int, ...], *, bits_ok: bool = False) -> np.ndarray:
    """An uninitialised output array of dtype float32, float16 or bfloat16 (ml_dtypes').
    Without ml_dtypes a bfloat16 output is an error saying how to get one, unless bits_ok (the
    caller gave bfloat16 as uint16 bits and gets bits back)."""
    code = dtype_code(dtype_name)
    if code == QS_DTYPE_F32:
        return np.empty(shape, np.float32)
    if code == QS_DTYPE_F16:
        return np.empty(shape, np.float16)
    if BF16 is not None:
        return np.empty(shape, BF16)
    if bits_ok:
        return np.empty(shape, np.uint16)
    raise ImportError("a bfloat16 output needs the ml_dtypes package (numpy has no bfloat16): "
                      "pip install ml_dtypes (or qsparse[bfloat16]); or ask for "
                      "dtype='float32' / 'float16'")
