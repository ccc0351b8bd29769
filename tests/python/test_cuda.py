# SPDX-License-Identifier: MIT
"""qsparse.cuda, the device API, where no GPU can run it (CI): sizes agree with qs.quantize,
the core's argument checks answer before the plugin is asked, and every call without a usable
plugin raises QsparseError(QS_ERR_BACKEND) with the reason qs.backend_message("cuda") gives.
The GPU results themselves are checked by tests/cuda/run.sh on a GPU machine."""
import numpy as np
import pytest

import qsparse as qs
from qsparse import _lib


class FakeDevice:
    """An object with __cuda_array_interface__ over host memory: enough for the checks that
    happen before any device access."""

    def __init__(self, arr, offset=0, stream=None):
        self.arr = arr
        self.__cuda_array_interface__ = {
            "shape": arr.shape, "typestr": arr.dtype.str, "version": 3,
            "data": (arr.ctypes.data + offset, False), "strides": None, "stream": stream}


def test_plane_bytes_match_quantize():
    w = np.linspace(-1, 1, 6 * 64, dtype=np.float32).reshape(6, 64)
    for fmt, kw in [("nf4", {}), ("nf4", {"double_quant": True}), ("int8", {}),
                    ("nvfp4", {}), ("mxfp4", {})]:
        q = qs.quantize(w, fmt, **kw)
        sizes = qs.cuda.plane_bytes(w.shape, fmt, **kw)
        assert sizes["data"] == q.data.nbytes
        scale = q.absmax if fmt == "nf4" else q.scale
        assert sizes["scale"] == scale.nbytes
        assert sizes.get("nested_scale", 0) == (q.nested_absmax.nbytes if kw else 0)
        assert sizes.get("zero_point", 0) == 0


@pytest.mark.skipif(qs.cuda.available(), reason="a usable GPU: tests/cuda/run.sh covers it")
def test_without_gpu_every_call_says_why():
    w = np.zeros((4, 64), np.float32)
    planes = {k: FakeDevice(np.zeros(n, np.uint8)) for k, n in
              qs.cuda.plane_bytes(w.shape, "nf4").items()}
    with pytest.raises(qs.QsparseError) as e:
        qs.cuda.quantize(FakeDevice(w), "nf4", planes)
    assert e.value.status == _lib.QS_ERR_BACKEND
    assert "libqsparse-cuda.so" in str(e.value)
    out = FakeDevice(np.zeros((4, 64), np.float32))
    with pytest.raises(qs.QsparseError):
        qs.cuda.dequantize(planes, w.shape, "nf4", out)
    with pytest.raises(qs.QsparseError):
        qs.cuda.gemv(planes, w.shape, "nf4", FakeDevice(np.zeros(64, np.float32)),
                     FakeDevice(np.zeros(4, np.float32)))
    with pytest.raises(qs.QsparseError) as e:
        qs.cuda.sp24_decompress(FakeDevice(np.zeros((4, 32), np.float32)),
                                FakeDevice(np.zeros((4, 4), np.uint16)), out)
    assert e.value.status == _lib.QS_ERR_BACKEND
    with pytest.raises(qs.QsparseError) as e:  # every format reaches the plugin
        qs.cuda.matmul(FakeDevice(np.zeros((1, 64), np.float32)),
                       FakeDevice(np.zeros((1, 4), np.float32)), planes=planes, shape=w.shape,
                       format="nf4")
    assert e.value.status == _lib.QS_ERR_BACKEND


def test_checks_come_before_the_plugin():
    w = np.zeros((4, 64), np.float32)
    planes = {k: FakeDevice(np.zeros(n, np.uint8)) for k, n in
              qs.cuda.plane_bytes(w.shape, "nf4").items()}
    buf = np.zeros(4 * 64 + 1, np.float32)
    with pytest.raises(qs.QsparseError) as e:  # a misaligned device pointer
        qs.cuda.quantize(FakeDevice(buf[:256].reshape(4, 64), offset=2), "nf4", planes)
    assert e.value.status == _lib.QS_ERR_INVALID_ARG
    short = dict(planes, data=FakeDevice(np.zeros(10, np.uint8)))
    with pytest.raises(qs.QsparseError) as e:
        qs.cuda.quantize(FakeDevice(w), "nf4", short)
    assert e.value.status == _lib.QS_ERR_BUFFER_TOO_SMALL
    with pytest.raises(qs.QsparseError) as e:  # y holds 3 of 4 outputs
        qs.cuda.matmul(FakeDevice(np.zeros((1, 64), np.float32)),
                       FakeDevice(np.zeros((1, 3), np.float32)),
                       w=FakeDevice(np.zeros((4, 64), np.float32)))
    assert e.value.status == _lib.QS_ERR_BUFFER_TOO_SMALL
    with pytest.raises(qs.QsparseError) as e:  # 2:4 needs K % 4 == 0
        qs.cuda.matmul(FakeDevice(np.zeros((1, 6), np.float32)),
                       FakeDevice(np.zeros((1, 4), np.float32)),
                       w=FakeDevice(np.zeros((4, 3), np.float32)),
                       meta=FakeDevice(np.zeros((4, 1), np.uint16)))
    assert e.value.status == _lib.QS_ERR_SHAPE
    vals = FakeDevice(np.zeros((4, 32), np.float32))
    meta = FakeDevice(np.zeros((4, 4), np.uint16))
    with pytest.raises(qs.QsparseError) as e:  # cols % 4
        qs.cuda.sp24_prune_compress(FakeDevice(np.zeros((4, 6), np.float32)), vals, meta)
    assert e.value.status == _lib.QS_ERR_SHAPE
    with pytest.raises(qs.QsparseError) as e:  # meta too short
        qs.cuda.sp24_compress(FakeDevice(w), vals, FakeDevice(np.zeros(3, np.uint16)))
    assert e.value.status == _lib.QS_ERR_BUFFER_TOO_SMALL
    with pytest.raises(ValueError, match="not a CUDA array"):
        qs.cuda.quantize(w, "nf4", planes)


def test_the_stream_of_a_call():
    """stream= wins (an int or a stream object); else the array's __cuda_array_interface__
    stream (1: legacy, 2: per-thread); else the legacy default stream (NULL)."""
    a = FakeDevice(np.zeros(4, np.float32), stream=0x1234)
    b = FakeDevice(np.zeros(4, np.float32))

    class TorchLikeStream:
        cuda_stream = 0x77

    class CupyLikeStream:
        ptr = 0x88

    assert qs.cuda._stream(None, a).value == 0x1234
    assert qs.cuda._stream(None, b, a).value is None  # the first array's field decides
    assert qs.cuda._stream(None, None, a).value == 0x1234
    assert qs.cuda._stream(5, a).value == 5
    assert qs.cuda._stream(TorchLikeStream(), a).value == 0x77
    assert qs.cuda._stream(CupyLikeStream(), a).value == 0x88
    assert qs.cuda._stream(None, FakeDevice(np.zeros(1, np.float32), stream=2)).value == 2
    assert qs.cuda._stream(None).value is None
