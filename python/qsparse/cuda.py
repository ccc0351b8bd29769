# SPDX-License-Identifier: MIT
"""The CUDA backend's device API (include/qsparse/cuda.h) for arrays already on the GPU.

Arrays are any objects with ``__cuda_array_interface__`` (PyTorch CUDA tensors, CuPy arrays,
Numba device arrays): the binding reads their device pointer and size and never copies them.
The caller allocates every output on the device, with the byte sizes that ``plane_bytes``
gives. Work goes on a stream: ``stream=`` when given (a handle as an int, or an object with
``cuda_stream`` like ``torch.cuda.Stream`` or ``ptr`` like ``cupy.cuda.Stream``); otherwise, for
a PyTorch tensor argument, PyTorch's current stream on its device; otherwise the ``stream``
field of the first array's ``__cuda_array_interface__`` (the stream its producer used: 1 is the
legacy default stream, 2 the per-thread one); otherwise the legacy default stream. So results
are ordered after the work that produced the arrays, as the interface's protocol asks. Quantize,
dequantize and 2:4 give the CPU backend's bits; ``matmul`` and ``gemv`` are within the bound of
``include/qsparse/matmul.h``. Without a usable plugin every call raises QsparseError
(QS_ERR_BACKEND) with the reason, which ``qsparse.backend_message("cuda")`` also gives.

    planes = {k: torch.empty(n, dtype=torch.uint8, device="cuda")
              for k, n in qs.cuda.plane_bytes(w.shape, "nf4").items()}
    info = qs.cuda.quantize(w, "nf4", planes)            # w: a CUDA float32 tensor
    qs.cuda.dequantize(planes, w.shape, "nf4", out, **info)
"""

from __future__ import annotations

import ctypes
from typing import Any, Dict, Optional, Sequence

from . import _capi, _lib
from ._capi import MatmulParams, WeightC
from ._quant import _format_code, _params, _rows_cols

PLANES = ("data", "scale", "zero_point", "nested_scale")


def _device(a: Any, name: str):
    """(pointer, bytes, typestr) of a device array; ValueError for anything else."""
    iface = getattr(a, "__cuda_array_interface__", None)
    if iface is None:
        raise ValueError(f"{name} is not a CUDA array (no __cuda_array_interface__)")
    ptr = int(iface["data"][0])
    count = 1
    for s in iface["shape"]:
        count *= int(s)
    itemsize = int(iface["typestr"][2:])
    if iface.get("strides") not in (None, ()):
        expect, strides = itemsize, []
        for s in reversed(iface["shape"]):
            strides.insert(0, expect)
            expect *= int(s)
        if tuple(iface["strides"]) != tuple(strides) and count > 1:
            raise ValueError(f"{name} must be contiguous")
    return ptr, count * itemsize, iface["typestr"]


def _stream_handle(stream: Any) -> int:
    """The cudaStream_t of an int or of a stream object (torch: cuda_stream, CuPy: ptr)."""
    for attr in ("cuda_stream", "ptr"):
        if hasattr(stream, attr):
            return int(getattr(stream, attr))
    return int(stream)


def _stream(stream: Any, *arrays: Any):
    """The stream a call runs on (see the module's documentation for the order of the rules)."""
    if stream is not None:
        return ctypes.c_void_p(_stream_handle(stream))
    for a in arrays:
        if a is None:
            continue
        if type(a).__module__.startswith("torch") and getattr(a, "is_cuda", False):
            import torch  # only reached with a torch tensor in hand

            return ctypes.c_void_p(torch.cuda.current_stream(a.device).cuda_stream)
    for a in arrays:
        iface = getattr(a, "__cuda_array_interface__", None)
        if iface is not None:
            s = iface.get("stream")
            return ctypes.c_void_p(int(s) if isinstance(s, int) and s > 0 else 0)
    return ctypes.c_void_p(0)


def _quant_params(format: str, options: Dict[str, Any]):
    return _params(format, _format_code(format), **options)


def _qtensor(planes: Dict[str, Any], global_scale: float = 0.0, nested_offset: float = 0.0):
    qt = _lib.QTensorC()
    for name in PLANES:
        arr = planes.get(name)
        if arr is not None:
            ptr, nbytes, _ = _device(arr, name)
            setattr(qt, name, ptr)
            setattr(qt, name + "_bytes", nbytes)
    qt.global_scale = float(global_scale)
    qt.nested_offset = float(nested_offset)
    return qt


def available() -> bool:
    """Whether the CUDA plugin loads and finds a device."""
    lib = _lib.lib()
    return bool(lib.qs_backend_available(_capi.QS_BACKEND_CUDA))


def plane_bytes(shape: Sequence[int], format: str, **options: Any) -> Dict[str, int]:
    """Bytes of each plane a tensor of `shape` quantized as `format` needs (unused planes left
    out); options as qsparse.quantize takes them."""
    rows, cols = _rows_cols(shape)
    p = _quant_params(format, options)
    out = {}
    for k, name in enumerate(PLANES):
        n = ctypes.c_int64()
        _lib.check(_lib.lib().qs_quant_size(ctypes.byref(p), rows, cols, k, ctypes.byref(n)))
        if n.value:
            out[name] = n.value
    return out


def _dtype_code(typestr: str, dtype: Optional[str]) -> int:
    if dtype is not None:
        return {"float32": 0, "float16": 1, "bfloat16": 2}[dtype]
    if typestr.endswith("f4"):
        return _capi.QS_DTYPE_F32
    if typestr.endswith("f2"):
        return _capi.QS_DTYPE_F16
    raise ValueError(f"unsupported dtype {typestr!r}: float32, float16, or 16-bit data with "
                     "dtype='bfloat16'")


def quantize(src: Any, format: str, planes: Dict[str, Any], *,
             shape: Optional[Sequence[int]] = None, dtype: Optional[str] = None,
             stream: Any = None, **options: Any) -> Dict[str, float]:
    """Quantize the device array `src` into the device `planes` (a dict of PLANES names);
    returns the scalar fields {"global_scale", "nested_offset"} dequantize needs back."""
    ptr, _, typestr = _device(src, "src")
    iface = src.__cuda_array_interface__
    rows, cols = _rows_cols(shape if shape is not None else iface["shape"])
    p = _quant_params(format, options)
    qt = _qtensor(planes)
    _lib.check(_lib.lib().qs_cuda_quantize(_lib.ctx(), ctypes.byref(p), ctypes.c_void_p(ptr),
                                           _dtype_code(typestr, dtype), rows, cols,
                                           ctypes.byref(qt), _stream(stream, src)))
    return {"global_scale": qt.global_scale, "nested_offset": qt.nested_offset}


def dequantize(planes: Dict[str, Any], shape: Sequence[int], format: str, out: Any, *,
               global_scale: float = 0.0, nested_offset: float = 0.0,
               dtype: Optional[str] = None, stream: Any = None,
               **options: Any) -> None:
    """Dequantize device `planes` of a `shape` tensor into the device array `out`."""
    rows, cols = _rows_cols(shape)
    p = _quant_params(format, options)
    qt = _qtensor(planes, global_scale, nested_offset)
    ptr, nbytes, typestr = _device(out, "out")
    _lib.check(_lib.lib().qs_cuda_dequantize(_lib.ctx(), ctypes.byref(p), ctypes.byref(qt), rows,
                                             cols, ctypes.c_void_p(ptr),
                                             _dtype_code(typestr, dtype), nbytes,
                                             _stream(stream, planes.get("data"), out)))


def gemv(planes: Dict[str, Any], shape: Sequence[int], format: str, x: Any, y: Any, *,
         nested_offset: float = 0.0, global_scale: float = 0.0, stream: Any = None,
         **options: Any) -> None:
    """y = W x on the GPU for a weight W (`shape` rows x cols) quantized in any format, in
    device `planes`; x (cols float32) and y (rows float32) are device arrays. Within
    include/qsparse/matmul.h's bound (matmul with M = 1)."""
    rows, cols = _rows_cols(shape)
    p = _quant_params(format, options)
    qt = _qtensor(planes, global_scale, nested_offset)
    xp, xb, _ = _device(x, "x")
    yp, yb, _ = _device(y, "y")
    if xb < 4 * cols or yb < 4 * rows:
        raise ValueError(f"x needs {cols} and y {rows} float32 values")
    _lib.check(_lib.lib().qs_cuda_gemv(_lib.ctx(), ctypes.byref(p), ctypes.byref(qt), rows, cols,
                                       ctypes.c_void_p(xp), ctypes.c_void_p(yp),
                                       _stream(stream, x, y)))


def matmul(x: Any, y: Any, *, w: Any = None, planes: Optional[Dict[str, Any]] = None,
           shape: Optional[Sequence[int]] = None, format: Optional[str] = None,
           meta: Any = None, bias: Any = None, x_dtype: Optional[str] = None,
           w_dtype: Optional[str] = None, global_scale: float = 0.0, nested_offset: float = 0.0,
           stream: Any = None, **options: Any) -> None:
    """y = x . W^T (+ bias) on the GPU (include/qsparse/cuda.h qs_cuda_matmul), every array on
    the device: x (M, K) float32 / float16 (bfloat16 with x_dtype="bfloat16"), y (M, N) float32,
    bias N float32 or None. The weight W (N x K) is one of
    - ``w``: plain (N, K) values (float32, float16, or bfloat16 with w_dtype="bfloat16");
    - ``w`` and ``meta``: 2:4 kept values (N, K/2) and their meta (N, ceil(K/16)) uint16;
    - ``planes``, ``format`` (and its options, global_scale / nested_offset as quantize returned
      them): quantized, ``shape`` (N, K), or with ``meta`` the quantized kept values, ``shape``
      (N, K/2).
    Results are within include/qsparse/matmul.h's bound of the exact product."""
    iface = x.__cuda_array_interface__
    M, K = _rows_cols(iface["shape"])
    xp, _, xt = _device(x, "x")
    yp, yb, _ = _device(y, "y")
    wc = WeightC()
    keep: list = []
    if planes is not None:
        if shape is None or format is None:
            raise ValueError("a quantized weight needs shape= and format=")
        N, cols = _rows_cols(shape)
        p = _quant_params(format, options)
        qt = _qtensor(planes, global_scale, nested_offset)
        keep += [p, qt]
        wc.kind = 3 if meta is not None else 1
        wc.quant = ctypes.cast(ctypes.byref(p), ctypes.c_void_p)
        wc.q = ctypes.cast(ctypes.byref(qt), ctypes.c_void_p)
    elif w is not None:
        N, cols = _rows_cols(w.__cuda_array_interface__["shape"])
        wp, wb, wt = _device(w, "w")
        wc.kind = 2 if meta is not None else 0
        wc.dtype = _dtype_code(wt, w_dtype)
        wc.data = wp
        wc.data_bytes = wb
    else:
        raise ValueError("give the weight as w= (plain or 2:4 values) or planes= (quantized)")
    if meta is not None:
        mp, mb, _ = _device(meta, "meta")
        wc.meta = mp
        wc.meta_count = mb // 2
    bp = _device(bias, "bias")[0] if bias is not None else 0
    params = MatmulParams()
    _lib.lib().qs_matmul_params_init(ctypes.byref(params))
    _lib.check(_lib.lib().qs_cuda_matmul(_lib.ctx(), ctypes.byref(params), ctypes.c_void_p(xp),
                                         _dtype_code(xt, x_dtype), M, K, ctypes.byref(wc), N,
                                         ctypes.c_void_p(bp), ctypes.c_void_p(yp), yb,
                                         _stream(stream, x, y)))
    del keep


def _ptr_or_null(a: Any, name: str):
    return (ctypes.c_void_p(0), 0) if a is None else \
        (lambda t: (ctypes.c_void_p(t[0]), t[1]))(_device(a, name))


def sp24_prune_compress(w: Any, values: Any, meta: Any, *, norms: Any = None, mask: Any = None,
                        stream: Any = None) -> None:
    """2:4 prune and compress a rows x cols float32 device array w (|w|, or Wanda scores with
    norms: cols float32 on the device) into device arrays values (rows x cols/2 float32), meta
    (rows x ceil(cols/16) uint16) and optionally mask (rows x cols uint8), as
    qsparse.prune / compress do on the CPU, bit for bit."""
    rows, cols = _rows_cols(w.__cuda_array_interface__["shape"])
    wp, _, _ = _device(w, "w")
    vp, vb = _ptr_or_null(values, "values")
    mp, mb = _ptr_or_null(meta, "meta")
    kp, kb = _ptr_or_null(mask, "mask")
    np_, _ = _ptr_or_null(norms, "norms")
    _lib.check(_lib.lib().qs_cuda_sp24_prune_compress(_lib.ctx(), ctypes.c_void_p(wp), rows, cols,
                                                      np_, vp, vb, mp, mb // 2, kp, kb,
                                                      _stream(stream, w)))


def sp24_compress(w: Any, values: Any, meta: Any, *, mask: Any = None,
                  stream: Any = None) -> None:
    """Compress a 2:4 float32 device array (the kept positions: mask's non-zero bytes, or w's
    non-zero values); QsparseError (QS_ERR_BAD_DATA) if a group keeps more than two."""
    rows, cols = _rows_cols(w.__cuda_array_interface__["shape"])
    wp, _, _ = _device(w, "w")
    vp, vb = _ptr_or_null(values, "values")
    mp, mb = _ptr_or_null(meta, "meta")
    kp, _ = _ptr_or_null(mask, "mask")
    _lib.check(_lib.lib().qs_cuda_sp24_compress(_lib.ctx(), ctypes.c_void_p(wp), rows, cols, kp,
                                                vp, vb, mp, mb // 2, _stream(stream, w)))


def sp24_decompress(values: Any, meta: Any, out: Any, *, stream: Any = None) -> None:
    """Decompress device values and meta into the rows x cols float32 device array out."""
    rows, cols = _rows_cols(out.__cuda_array_interface__["shape"])
    vp, _ = _ptr_or_null(values, "values")
    mp, mb = _ptr_or_null(meta, "meta")
    op, ob = _ptr_or_null(out, "out")
    _lib.check(_lib.lib().qs_cuda_sp24_decompress(_lib.ctx(), vp, mp, mb // 2, rows, cols, op, ob,
                                                  _stream(stream, values, out)))
