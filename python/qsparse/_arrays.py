# SPDX-License-Identifier: MIT
"""What users hold, as the numpy arrays and dtype names the binding hands to C.

Every function of the package that takes a tensor goes through ``as_array`` (any element type)
or ``_lib.as_float_array`` (float inputs), and every dtype argument through ``dtype_name``, so
the accepted kinds are the same everywhere:

* numpy arrays and numpy scalars;
* objects exporting DLPack (``__dlpack__``), e.g. PyTorch CPU tensors, JAX CPU arrays: read
  without a copy; bfloat16 ones too (numpy has no bfloat16, so their bytes are read as uint16
  and marked as bfloat16, which ``as_float_array`` turns into ml_dtypes' bfloat16 or keeps as
  bits); a tensor that requires grad is read through its ``detach()``;
* objects with ``__array__`` (and no ``__dlpack__``);
* memoryviews and other buffer objects (bytes, bytearray, array.array, mmap): the buffer's own
  element format ('f' float32, 'e' float16, 'd' float64, 'H' uint16, ...); a plain byte buffer
  (format 'B') needs the element type from the caller, ``dtype=``.

Python numbers and lists are refused: the element type must come from the caller.
"""

from __future__ import annotations

import ctypes
from typing import Any, Optional, Tuple

import numpy as np

# DLPack (dlpack.h): DLDataTypeCode and the device type of host memory.
_DL_UINT, _DL_BFLOAT = 1, 4
_DL_CPU = 1


class _DLDevice(ctypes.Structure):
    _fields_ = [("device_type", ctypes.c_int32), ("device_id", ctypes.c_int32)]


class _DLDataType(ctypes.Structure):
    _fields_ = [("code", ctypes.c_uint8), ("bits", ctypes.c_uint8), ("lanes", ctypes.c_uint16)]


class _DLTensor(ctypes.Structure):
    _fields_ = [("data", ctypes.c_void_p), ("device", _DLDevice), ("ndim", ctypes.c_int32),
                ("dtype", _DLDataType), ("shape", ctypes.POINTER(ctypes.c_int64)),
                ("strides", ctypes.POINTER(ctypes.c_int64)), ("byte_offset", ctypes.c_uint64)]


try:  # CPython's capsule API (relabelling a bfloat16 DLPack tensor needs it)
    _capsule_pointer = ctypes.pythonapi.PyCapsule_GetPointer
    _capsule_pointer.restype = ctypes.c_void_p
    _capsule_pointer.argtypes = [ctypes.py_object, ctypes.c_char_p]
    _capsule_name = ctypes.pythonapi.PyCapsule_GetName
    _capsule_name.restype = ctypes.c_char_p
    _capsule_name.argtypes = [ctypes.py_object]
except AttributeError:  # pragma: no cover - PyPy: numpy's own DLPack import, no bfloat16
    _capsule_pointer = _capsule_name = None

# The device type names of DLPack, for messages.
_DL_DEVICES = {1: "cpu", 2: "cuda", 3: "cuda_host", 4: "opencl", 7: "vulkan", 8: "metal",
               10: "rocm", 13: "cuda_managed", 14: "oneapi"}


class _Capsule:
    """Hands an already exported DLPack capsule to np.from_dlpack, which takes ownership."""

    def __init__(self, capsule: Any, device: Tuple[int, int]) -> None:
        self._capsule = capsule
        self._device = device

    def __dlpack__(self, stream: Any = None, **_: Any) -> Any:
        return self._capsule

    def __dlpack_device__(self) -> Tuple[int, int]:
        return self._device


class _DLManagedVersioned(ctypes.Structure):
    # DLPack >= 1.0: version, manager_ctx, deleter, flags, then the tensor
    _fields_ = [("major", ctypes.c_uint32), ("minor", ctypes.c_uint32),
                ("manager_ctx", ctypes.c_void_p), ("deleter", ctypes.c_void_p),
                ("flags", ctypes.c_uint64), ("dl_tensor", _DLTensor)]


try:  # bfloat16 arrays are optional
    import ml_dtypes as _ml_dtypes

    BF16: Optional[np.dtype] = np.dtype(_ml_dtypes.bfloat16)
except ImportError:  # pragma: no cover - ml_dtypes is installed wherever the tests run
    BF16 = None


def _dl_tensor(capsule: Any) -> _DLTensor:
    name = _capsule_name(capsule)
    if name == b"dltensor_versioned":
        return _DLManagedVersioned.from_address(_capsule_pointer(capsule, name)).dl_tensor
    return _DLTensor.from_address(_capsule_pointer(capsule, b"dltensor"))


def _from_dlpack(x: Any) -> Tuple[np.ndarray, bool]:
    """A numpy view of a DLPack exporter's host memory (no copy), and whether its elements are
    bfloat16 (returned as uint16 bits: numpy cannot import bfloat16)."""
    device = tuple(x.__dlpack_device__()) if hasattr(x, "__dlpack_device__") else (_DL_CPU, 0)
    if int(device[0]) != _DL_CPU:
        where = _DL_DEVICES.get(int(device[0]), f"device type {device[0]}")
        raise ValueError(f"the {type(x).__name__} lives on {where}: qsparse reads host memory, "
                         f"move it to the CPU first (e.g. tensor.cpu())")
    try:
        capsule = x.__dlpack__()
    except (RuntimeError, BufferError) as e:
        detach = getattr(x, "detach", None)  # a torch tensor that requires grad refuses export
        if detach is None or "grad" not in str(e):
            raise ValueError(f"cannot read the {type(x).__name__} through DLPack: {e}") from e
        capsule = detach().__dlpack__()
    bf16 = False
    if _capsule_pointer is not None:
        tensor = _dl_tensor(capsule)
        bf16 = tensor.dtype.code == _DL_BFLOAT and tensor.dtype.bits == 16
    if bf16:
        # numpy cannot import bfloat16: relabel the (freshly exported) tensor as uint16 bits
        tensor.dtype.code = _DL_UINT
    try:
        arr = np.from_dlpack(_Capsule(capsule, (_DL_CPU, 0)))
    except (TypeError, BufferError, RuntimeError) as e:
        raise ValueError(f"cannot read the {type(x).__name__} through DLPack: {e}") from e
    return arr, bf16


def _from_buffer(x: Any, dtype: Optional[str]) -> np.ndarray:
    view = memoryview(x)
    if view.format in ("B", "b", "c") and view.itemsize == 1:
        if dtype is None:
            raise ValueError(f"a byte buffer ({type(x).__name__}) does not say its element type: "
                             f"pass dtype='float32', 'float16' or 'bfloat16'")
        if not view.c_contiguous:
            raise ValueError("a byte buffer must be contiguous")
        raw = np.frombuffer(view, np.uint8)
        item = 4 if dtype == "float32" else 2
        if raw.size % item:
            raise ValueError(f"a byte buffer of {raw.size} bytes does not hold whole {dtype} "
                             f"values")
        return raw.view(np.float32 if dtype == "float32" else
                        np.float16 if dtype == "float16" else np.uint16)
    try:
        return np.asarray(view)
    except (TypeError, ValueError, NotImplementedError) as e:
        raise ValueError(f"cannot read the buffer of a {type(x).__name__} (format "
                         f"{view.format!r}): {e}") from e


def read(x: Any, dtype: Optional[str] = None) -> Tuple[np.ndarray, bool]:
    """(numpy array, bf16_bits) of any accepted input kind (a view where possible): bf16_bits
    is True for a uint16 array holding a bfloat16 tensor's bits (a DLPack bfloat16 tensor
    without ml_dtypes). ValueError for anything else. `dtype` only serves a plain byte buffer."""
    if isinstance(x, np.ndarray):
        return x, False
    if isinstance(x, np.generic):  # a numpy scalar is a 0-D tensor of its own dtype
        return np.asarray(x), False
    if isinstance(x, (bool, int, float, complex, list, tuple, str)) or x is None:
        raise ValueError(f"expected an array (numpy, a DLPack tensor such as torch's, a buffer), "
                         f"got {type(x).__name__}: the element type must be chosen by the caller")
    if hasattr(x, "__dlpack__"):
        arr, bf16 = _from_dlpack(x)
        if bf16 and BF16 is not None:
            return arr.view(BF16), False
        return arr, bf16
    if hasattr(x, "__array__"):
        try:
            return np.asarray(x), False
        except (TypeError, ValueError, RuntimeError) as e:
            raise ValueError(f"cannot read the {type(x).__name__} through __array__: {e}") from e
    try:
        memoryview(x)
    except TypeError:
        raise ValueError(f"expected an array (numpy, a DLPack tensor such as torch's, a buffer), "
                         f"got {type(x).__name__}") from None
    return _from_buffer(x, dtype), dtype == "bfloat16"


def as_array(x: Any) -> np.ndarray:
    """read(x)'s array: for inputs read by value (masks, norms, bias); a bfloat16 tensor needs
    ml_dtypes here (ValueError otherwise)."""
    arr, bits = read(x)
    if bits:
        raise ValueError(f"a bfloat16 {type(x).__name__} is read as bfloat16 values only with "
                         f"ml_dtypes: pip install ml_dtypes")
    return arr


# A dtype argument: "float32" / "float16" / "bfloat16" (or an alias below), a numpy dtype or
# scalar type, ml_dtypes.bfloat16 or a torch dtype (dtype_name says which).
DTypeArg = Any

# dtype arguments: names and spellings of the three element types the library reads and writes.
_DTYPE_ALIASES = {
    "float32": "float32", "f32": "float32", "fp32": "float32", "float": "float32",
    "f4": "float32", "<f4": "float32", "single": "float32",
    "float16": "float16", "f16": "float16", "fp16": "float16", "half": "float16",
    "f2": "float16", "<f2": "float16",
    "bfloat16": "bfloat16", "bf16": "bfloat16",
}


def dtype_name(d: Any) -> str:
    """"float32", "float16" or "bfloat16" for a dtype argument: one of those names (or f32, fp16,
    half, bf16, ...), a numpy dtype or scalar type (np.float16, np.dtype("float32"),
    ml_dtypes.bfloat16) or a torch dtype (torch.bfloat16). ValueError for anything else."""
    if isinstance(d, str):
        key = d.strip().lower()
        key = key[len("torch."):] if key.startswith("torch.") else key
        if key in _DTYPE_ALIASES:
            return _DTYPE_ALIASES[key]
    elif d is not None and not isinstance(d, bool):
        try:
            name = np.dtype(d).name
        except TypeError:
            name = str(d)  # torch.float16 -> "torch.float16"
        name = name[len("torch."):] if name.startswith("torch.") else name
        if name in ("float32", "float16", "bfloat16"):
            return name
    raise ValueError(f"unknown dtype {d!r}: expected 'float32', 'float16' or 'bfloat16' (a name, "
                     f"a numpy dtype or type, ml_dtypes.bfloat16 or a torch dtype)")


# Numeric options: a value of the wrong type or range is a ValueError (the README's promise for
# option errors), never a TypeError from float()/int() or a silent wrap in a ctypes field.


def option_float(name: str, value: Any) -> float:
    """float(value) for option `name`; ValueError for a non-number (bool included)."""
    if isinstance(value, (bool, np.bool_, str, bytes)) or value is None:
        raise ValueError(f"{name} must be a number, got {value!r}")
    try:
        return float(value)
    except (TypeError, ValueError, OverflowError):
        raise ValueError(f"{name} must be a number, got {value!r}") from None


def option_int(name: str, value: Any, lo: int = -2**31, hi: int = 2**31 - 1) -> int:
    """int(value) for option `name`, lo <= value <= hi (an int32 field by default); ValueError
    for a non-integer (bool and float included) or a value out of range."""
    if isinstance(value, (bool, np.bool_)) or not isinstance(value, (int, np.integer)):
        raise ValueError(f"{name} must be an int, got {value!r}")
    v = int(value)
    if not lo <= v <= hi:
        raise ValueError(f"{name} {v} is out of range [{lo}, {hi}]")
    return v
