# SPDX-License-Identifier: MIT
"""Calibration observers over the C API of include/qsparse/calib.h (docs/calibration.md).

    obs = qs.Observer("entropy")            # or "minmax", "moving_average", "percentile", "mse"
    obs.update(x); obs.merge(other); obs.amax()
    b = obs.to_bytes(); obs2 = qs.Observer.from_bytes(b)
    scale, zero_point = obs.qparams("int8")  # "int8_asym", "fp8_e4m3", "fp8_e5m2", "nvfp4"
    codes, scale, zero_point = obs.quantize(x, "int8")

Every number comes from the C library: the histogram (power-of-two bins, uint64 counts, exact
merges in any order), the searches and the scales. NaN and +-Inf never enter a statistic; they
are counted (``obs.nan_count``, ``obs.inf_count``).

Per-channel observers (``axis=`` an int) keep one state per channel along that axis: the input is
viewed as [-1, channels] with the channel axis moved last, so ``axis=-1`` on activations
[tokens, features] gives one histogram per input feature. The channel count is fixed by the first
update.
"""

import ctypes
from typing import Any, Callable, Optional, Tuple, Union

import numpy as np

from . import _arrays, _capi, _lib

_c = ctypes

_METHODS = ("minmax", "moving_average", "percentile", "entropy", "mse")
_TARGETS = {"int8": 1, "int8_sym": 1, "int8_asym": 2, "fp8_e4m3": 3, "fp8_e5m2": 4, "nvfp4": 5}
_MSE_TARGETS = ("int8", "int8_sym", "fp8_e4m3", "fp8_e5m2")
_HIST_NO_WIDTH = -(2 ** 31)


# The mirror of qs_observer_params lives with the other struct mirrors (layout-checked at load).
_ObserverParams = _capi.ObserverParams


def _fn(name: str) -> Any:
    """The C function `name`, declared from _capi.SIGNATURES when the library loaded."""
    return getattr(_lib.lib(), name)


def _check_call(status: int) -> None:
    _lib.check(status)


class Observer:
    """A calibration observer: ``Observer(method, axis=None, **options)``.

    Options (docs/calibration.md defaults): ``num_bins=2048`` (a power of two, at most 2**20;
    at most 4096 for "entropy" and "mse", whose searches take time quadratic in the bin count:
    a few tenths of a second per channel at 4096), ``num_levels=128``
    and ``start_bin=128`` (entropy; MSE uses start_bin; by default both are capped at
    num_bins / 2), ``percentile=99.99``,
    ``averaging_constant=0.01`` (moving_average), ``target="int8"`` (the format MSE minimises
    the error of: "int8", "fp8_e4m3" or "fp8_e5m2"). ``axis=None`` observes the whole tensor.
    """

    def __init__(self, method: str = "minmax", axis: Optional[int] = None, *,
                 num_bins: int = 2048, num_levels: Optional[int] = None,
                 start_bin: Optional[int] = None, percentile: float = 99.99,
                 averaging_constant: float = 0.01, target: str = "int8",
                 _handle: Optional[int] = None) -> None:
        self._handle = None
        self._destroy = _fn("qs_observer_destroy")
        if _handle is not None:  # from_bytes
            self._handle = _handle
            p = _ObserverParams()
            _check_call(_fn("qs_observer_get_params")(_handle, _c.byref(p)))
            self._axis_arg = None
            return
        if method not in _METHODS:
            raise ValueError(f"unknown observer method {method!r}: expected one of {_METHODS}")
        if target not in _MSE_TARGETS:
            raise ValueError(f"MSE target must be one of {_MSE_TARGETS}, got {target!r}")
        if axis is not None and not isinstance(axis, (int, np.integer)):
            raise ValueError(f"axis must be None or an int, got {axis!r}")
        p = _ObserverParams()
        _fn("qs_observer_params_init")(_c.byref(p), _METHODS.index(method) + 1)
        p.axis = -1 if axis is None else 1
        p.num_bins = _arrays.option_int("num_bins", num_bins)
        p.start_bin = _arrays.option_int("start_bin", start_bin) if start_bin is not None \
            else min(128, p.num_bins // 2)
        p.num_levels = _arrays.option_int("num_levels", num_levels) if num_levels is not None \
            else min(128, p.start_bin)
        p.percentile = _arrays.option_float("percentile", percentile)
        p.averaging_constant = _arrays.option_float("averaging_constant", averaging_constant)
        if p.averaging_constant == 0.0 and float(averaging_constant) != 0.0:
            raise ValueError(f"averaging_constant {averaging_constant!r} is outside float32's "
                             f"range (it would become 0.0)")
        p.target = _TARGETS[target]
        handle = _c.c_void_p()
        _check_call(_fn("qs_observer_create")(_lib.ctx(), _c.byref(p), _c.byref(handle)))
        self._handle = handle
        self._axis_arg = None if axis is None else int(axis)

    def __del__(self) -> None:
        handle = getattr(self, "_handle", None)
        if handle is not None and handle.value:
            try:
                self._destroy(handle)
            except Exception:  # interpreter shutdown: the library may be gone already
                pass
            self._handle = None

    # ---- properties ---------------------------------------------------------------------------

    def _params(self) -> Any:
        p = _ObserverParams()
        _check_call(_fn("qs_observer_get_params")(self._handle, _c.byref(p)))
        return p

    @property
    def method(self) -> str:
        return _METHODS[self._params().method - 1]

    @property
    def per_channel(self) -> bool:
        return self._params().axis >= 0

    @property
    def channels(self) -> int:
        """Number of channels: 1 per tensor, 0 for a per-channel observer before any update."""
        n = _c.c_int64()
        _check_call(_fn("qs_observer_channels")(self._handle, _c.byref(n)))
        return n.value

    def _counts(self) -> Tuple[int, int, int]:
        f, a, b = _c.c_uint64(), _c.c_uint64(), _c.c_uint64()
        if self.channels == 0:
            return 0, 0, 0
        _check_call(_fn("qs_observer_counts")(self._handle, -1, _c.byref(f), _c.byref(a),
                                              _c.byref(b)))
        return f.value, a.value, b.value

    @property
    def count(self) -> int:
        """Finite values seen (all channels)."""
        return self._counts()[0]

    @property
    def nan_count(self) -> int:
        return self._counts()[1]

    @property
    def inf_count(self) -> int:
        return self._counts()[2]

    # ---- collecting ---------------------------------------------------------------------------

    def _as_2d(self, x: Any) -> Tuple[np.ndarray, int, Callable[[np.ndarray], np.ndarray]]:
        """(2-D C-contiguous view for the C observer, dtype code, undo) where undo maps a
        result of the 2-D shape back to x's shape and axis order."""
        arr, code, _ = _lib.as_float_array(x)
        if not self.per_channel:
            flat = arr.reshape(1, -1)
            return flat, code, lambda r: r.reshape(arr.shape)
        if arr.ndim == 0:
            raise ValueError("a per-channel observer needs at least a 1-D input")
        axis = -1 if self._axis_arg is None else self._axis_arg
        if not -arr.ndim <= axis < arr.ndim:
            raise ValueError(f"axis {axis} out of range for a {arr.ndim}-D input")
        axis %= arr.ndim
        # the C state keeps channels along its own axis: 1 (columns) for observers made here,
        # whatever a deserialized one says otherwise
        dest = 0 if self._params().axis == 0 else arr.ndim - 1
        moved = np.ascontiguousarray(np.moveaxis(arr, axis, dest))
        two = moved.reshape(moved.shape[0], -1) if dest == 0 else moved.reshape(-1, moved.shape[-1])
        return two, code, lambda r: np.moveaxis(r.reshape(moved.shape), dest, axis)

    def update(self, x: Any) -> "Observer":
        """Add a float32 / float16 / bfloat16 array to the statistics; returns self."""
        arr, code, _ = self._as_2d(x)
        rows, cols = arr.shape
        _check_call(_fn("qs_observer_update")(_lib.ctx(), self._handle, _lib.ptr(arr), code,
                                              rows, cols))
        return self

    def merge(self, other: "Observer") -> "Observer":
        """Merge another observer's statistics into this one (exact; returns self)."""
        if not isinstance(other, Observer):
            raise ValueError("merge expects an Observer")
        _check_call(_fn("qs_observer_merge")(_lib.ctx(), self._handle, other._handle))
        return self

    # ---- results ------------------------------------------------------------------------------

    def amax(self) -> Union[float, np.ndarray]:
        """The chosen clipping threshold: a float per tensor, a float32 array per channel."""
        n = self.channels
        out = np.zeros(max(n, 1), np.float32)
        _check_call(_fn("qs_observer_amax")(_lib.ctx(), self._handle,
                                            out.ctypes.data_as(_c.POINTER(_c.c_float)), n))
        return float(out[0]) if not self.per_channel else out[:n]

    def range(self) -> Tuple[Any, Any]:
        """(lo, hi): the observed finite range (moving average: the averages)."""
        n = self.channels
        lo, hi = np.zeros(max(n, 1), np.float32), np.zeros(max(n, 1), np.float32)
        _check_call(_fn("qs_observer_range")(_lib.ctx(), self._handle,
                                             lo.ctypes.data_as(_c.POINTER(_c.c_float)),
                                             hi.ctypes.data_as(_c.POINTER(_c.c_float)), n))
        if not self.per_channel:
            return float(lo[0]), float(hi[0])
        return lo[:n], hi[:n]

    def histogram(self, channel: int = 0) -> Tuple[np.ndarray, Optional[int]]:
        """(counts uint64 [num_bins], log2 of the bin width or None while only zeros were seen)."""
        nb = self._params().num_bins
        counts = np.zeros(nb, np.uint64)
        k = _c.c_int32()
        _check_call(_fn("qs_observer_histogram")(self._handle,
                                                 _arrays.option_int("channel", channel),
                                                 counts.ctypes.data_as(_c.POINTER(_c.c_uint64)),
                                                 nb, _c.byref(k)))
        return counts, (None if k.value == _HIST_NO_WIDTH else k.value)

    def qparams(self, target: str = "int8") -> Tuple[Any, Any]:
        """(scale, zero_point) for "int8", "int8_asym", "fp8_e4m3", "fp8_e5m2" or "nvfp4":
        floats per tensor, arrays (float32, int32) per channel."""
        if target not in _TARGETS:
            raise ValueError(f"unknown target {target!r}: expected one of {sorted(_TARGETS)}")
        n = self.channels
        s, z = np.zeros(max(n, 1), np.float32), np.zeros(max(n, 1), np.int32)
        _check_call(_fn("qs_observer_qparams")(_lib.ctx(), self._handle, _TARGETS[target],
                                               s.ctypes.data_as(_c.POINTER(_c.c_float)),
                                               z.ctypes.data_as(_c.POINTER(_c.c_int32)), n))
        if not self.per_channel:
            return float(s[0]), int(z[0])
        return s[:n], z[:n]

    def quantize(self, x: Any, target: str = "int8") -> Tuple[np.ndarray, Any, Any]:
        """Quantize x with the calibrated scales: (codes, scale, zero_point or None).

        int8 targets give int8 codes, fp8 targets uint8 codes, both in x's shape, with one scale
        per channel (or one). NVFP4 is available through qsparse.quantize with the scale from
        qparams("nvfp4")."""
        if target not in _TARGETS or target == "nvfp4":
            raise ValueError("target must be one of int8, int8_asym, fp8_e4m3, fp8_e5m2")
        arr, code, undo = self._as_2d(x)
        rows, cols = arr.shape
        n = self.channels
        is_int8 = target.startswith("int8")
        codes = np.empty(arr.shape, np.int8 if is_int8 else np.uint8)
        scale = np.empty(max(n, 1), np.float32)
        zp = np.zeros(max(n, 1), np.int8)
        q = _lib.QTensorC()
        q.data, q.data_bytes = codes.ctypes.data, codes.nbytes
        q.scale, q.scale_bytes = scale.ctypes.data, scale.nbytes
        if target == "int8_asym":
            q.zero_point, q.zero_point_bytes = zp.ctypes.data, zp.nbytes
        _check_call(_fn("qs_observer_quantize")(_lib.ctx(), self._handle, _TARGETS[target],
                                                _lib.ptr(arr), code, rows, cols, _c.byref(q)))
        scale, zp = scale[:max(n, 1)], zp[:max(n, 1)]
        if not self.per_channel:
            scale, zp = scale[0], zp[0]
        return undo(codes), scale, (zp if target == "int8_asym" else None)

    # ---- serialization ------------------------------------------------------------------------

    def to_bytes(self) -> bytes:
        """The versioned, little-endian serialization of the state (bytes)."""
        size = _c.c_int64()
        _check_call(_fn("qs_observer_serialized_size")(self._handle, _c.byref(size)))
        buf = (_c.c_uint8 * size.value)()
        written = _c.c_int64()
        _check_call(_fn("qs_observer_serialize")(_lib.ctx(), self._handle, buf, size.value,
                                                 _c.byref(written)))
        return bytes(buf[:written.value])

    @classmethod
    def from_bytes(cls, b: bytes) -> "Observer":
        """An observer from to_bytes() output; corrupt or truncated input, or an entropy / MSE
        state with more than 4096 bins, raises QsparseError."""
        if not isinstance(b, (bytes, bytearray, memoryview)):
            raise ValueError("from_bytes expects bytes")
        data = bytes(b)
        buf = (_c.c_uint8 * max(len(data), 1)).from_buffer_copy(data or b"\0")
        handle = _c.c_void_p()
        _check_call(_fn("qs_observer_deserialize")(_lib.ctx(), buf, len(data),
                                                   _c.byref(handle)))
        return cls(_handle=handle)

    def __reduce__(self) -> Tuple[Any, Tuple[bytes]]:
        return (Observer.from_bytes, (self.to_bytes(),))

    def __repr__(self) -> str:
        return f"Observer({self.method!r}, channels={self.channels})"
