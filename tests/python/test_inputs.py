# SPDX-License-Identifier: MIT
"""What the binding accepts as a tensor and as a dtype (python/qsparse/_arrays.py): every kind of
input gives the same bytes as the float32 (or float16 / bfloat16) numpy array of the same
values, and every refused input raises the documented error before the library runs, leaving
what it would have changed (an observer's state, a file) as it was."""

import array
import mmap

import numpy as np
import pytest

import qsparse as qs
from qsparse import _arrays, _lib

torch = pytest.importorskip("torch")
ml_dtypes = pytest.importorskip("ml_dtypes")
BF16 = np.dtype(ml_dtypes.bfloat16)


def weights(shape=(24, 64), seed=0):
    rng = np.random.default_rng(seed)
    w = (rng.standard_normal(shape) * 0.1).astype(np.float32)
    w.reshape(-1)[:6] = [0.0, -0.0, 1e-40, -3.5, 2.0 ** -20, 7.25]  # zeros, a denormal, ties
    return w


class ArrayOnly:
    """An object with __array__ and nothing else (pandas, xarray, PIL images are like this)."""

    def __init__(self, a):
        self._a = a

    def __array__(self, dtype=None, copy=None):
        return self._a if dtype is None else self._a.astype(dtype)


class DLPackOnly:
    """An object exporting DLPack and nothing else (JAX, CuPy-on-host, TensorFlow)."""

    def __init__(self, t):
        self._t = t

    def __dlpack__(self, stream=None, **kw):
        return self._t.__dlpack__()

    def __dlpack_device__(self):
        return self._t.__dlpack_device__()


def f32_kinds(w):
    """(label, object) pairs holding the float32 values of w."""
    t = torch.from_numpy(w.copy())
    grad = torch.nn.Parameter(torch.from_numpy(w.copy()))
    transposed = torch.from_numpy(np.ascontiguousarray(w.T)).T  # strided view
    return [
        ("numpy float64", w.astype(np.float64)),
        ("numpy longdouble", w.astype(np.longdouble)),
        ("numpy strided", np.asfortranarray(w)),
        ("numpy big-endian", w.astype(">f4")),
        ("torch", t),
        ("torch requires_grad", grad),
        ("torch strided", transposed),
        ("torch float64", t.double()),
        ("__array__ only", ArrayOnly(w)),
        ("__dlpack__ only", DLPackOnly(t)),
        ("memoryview", memoryview(w)),
    ]


def same_q(a, b):
    assert a.format == b.format and a.shape == b.shape and a.dtype == b.dtype
    for field in ("data", "absmax", "scale", "zero_point", "nested_absmax"):
        x, y = getattr(a, field), getattr(b, field)
        assert (x is None) == (y is None), field
        if x is not None:
            assert x.dtype == y.dtype and x.tobytes() == y.tobytes(), field
    assert a.global_scale == b.global_scale and a.nested_offset == b.nested_offset


FORMATS = [("nf4", {}), ("nf4", {"double_quant": True}), ("fp4", {}), ("int8", {}),
           ("llm_int8", {}), ("fp8_e4m3", {}), ("mxfp4", {}), ("nvfp4", {})]


@pytest.mark.parametrize("fmt,kw", FORMATS)
def test_quantize_every_float32_kind(fmt, kw):
    w = weights()
    ref = qs.quantize(w, fmt, **kw)
    for label, obj in f32_kinds(w):
        got = qs.quantize(obj, fmt, **kw)
        assert got.shape == w.shape, label
        same_q(got, ref)


def test_flat_buffers_take_the_float32_path():
    """1-D buffers (the values of w flattened) quantize like the flat numpy array; a byte
    buffer says its element type through dtype=."""
    w = weights()
    flat = w.reshape(-1)
    ref = qs.quantize(flat, "nf4")
    for obj, kw in [(array.array("f", flat), {}), (flat.tobytes(), {"dtype": "float32"}),
                    (bytearray(flat.tobytes()), {"dtype": np.float32}),
                    (memoryview(flat.tobytes()), {"dtype": torch.float32})]:
        same_q(qs.quantize(obj, "nf4", **kw), ref)
    m = mmap.mmap(-1, flat.nbytes)
    m.write(flat.tobytes())
    same_q(qs.quantize(m, "nf4", dtype="f32"), ref)
    del m


def test_float16_and_bfloat16_kinds():
    w = weights()
    h = w.astype(np.float16)
    b = w.astype(BF16)
    ref_h = qs.quantize(h, "nf4")
    ref_b = qs.quantize(b, "nf4")
    assert ref_h.dtype == "float16" and ref_b.dtype == "bfloat16"
    th = torch.from_numpy(h.copy())
    tb = torch.from_numpy(w.copy()).to(torch.bfloat16)
    # torch's own float32 -> bfloat16 rounding is round to nearest even, as ml_dtypes'
    assert tb.view(torch.int16).numpy().tobytes() == b.tobytes()
    for obj, ref in [(th, ref_h), (DLPackOnly(th), ref_h), (memoryview(h), ref_h),
                     (tb, ref_b), (DLPackOnly(tb), ref_b), (torch.nn.Parameter(tb), ref_b)]:
        same_q(qs.quantize(obj, "nf4"), ref)
    same_q(qs.quantize(h.view(np.uint16), "nf4", dtype=np.float16), ref_h)
    same_q(qs.quantize(b.view(np.uint16), "nf4", dtype=torch.bfloat16), ref_b)
    flat = qs.quantize(b.tobytes(), "nf4", dtype="bf16")  # raw bytes: a flat tensor
    assert flat.dtype == "bfloat16" and flat.shape == (b.size,)
    assert flat.data.tobytes() == ref_b.data.tobytes()
    assert flat.absmax.tobytes() == ref_b.absmax.tobytes()


def test_bfloat16_tensor_without_ml_dtypes(monkeypatch):
    """A torch bfloat16 tensor is read as bfloat16 bits without ml_dtypes too (not .numpy(),
    which fails for bfloat16); a bfloat16 result then is an error that says how to get one."""
    w = weights()
    ref = qs.quantize(w.astype(BF16), "nf4")
    monkeypatch.setattr(_arrays, "BF16", None)
    monkeypatch.setattr(_lib, "BF16", None)
    tb = torch.from_numpy(w).to(torch.bfloat16)
    same_q(qs.quantize(tb, "nf4"), ref)
    with pytest.raises(ImportError, match="pip install ml_dtypes"):
        qs.dequantize(ref, "bfloat16")
    with pytest.raises(ImportError, match="pip install ml_dtypes"):
        qs.convert(w, "bfloat16")
    # a bfloat16 bias is widened by the library like x and w: no ml_dtypes needed
    yb = qs.matmul(w[:2], w, tb[:, 0])
    assert yb.tobytes() == qs.matmul(w[:2], w, tb[:, 0].float().numpy()).tobytes()
    # bits in, bits out: compress of uint16 bfloat16 bits gives uint16 bits
    s = qs.compress(np.zeros((4, 8), np.uint16), dtype="bfloat16")
    assert s.values.dtype == np.uint16


def test_other_functions_take_every_kind():
    w = weights((16, 64))
    x = weights((5, 64), seed=1)
    t = torch.from_numpy(w.copy())
    tx = torch.from_numpy(x.copy())
    mask = qs.prune(w, "2:4")
    assert np.array_equal(qs.prune(t, "2:4"), mask)
    assert np.array_equal(qs.prune(w.astype(np.float64), "2:4"), mask)
    assert np.array_equal(qs.prune(t.T, "2:4", axis=0), qs.prune(w.T, "2:4", axis=0))
    norms = qs.sparse.activation_norms(x)
    assert qs.sparse.activation_norms(tx).tobytes() == norms.tobytes()
    wanda = qs.prune(w, "2:4", method="wanda", act_norm=norms)
    assert np.array_equal(qs.prune(t, "2:4", method="wanda", act_norm=torch.from_numpy(norms)),
                          wanda)
    s = qs.compress(w, mask)
    s2 = qs.compress(t, torch.from_numpy(mask))
    assert s.values.tobytes() == s2.values.tobytes() and s.meta.tobytes() == s2.meta.tobytes()
    assert qs.sparse.check(torch.from_numpy(mask))[0]
    q = qs.quantize(w, "nf4")
    bias = np.linspace(-1, 1, 16).astype(np.float32)
    y = qs.matmul(x, q, bias)
    assert qs.matmul(tx, q, torch.from_numpy(bias)).numpy().tobytes() == y.tobytes()  # torch out
    assert qs.matmul(x.astype(np.float64), q, bias.astype(np.float64)).tobytes() == y.tobytes()
    assert qs.matmul(x, t).tobytes() == qs.matmul(x, w).tobytes()
    codes, stats, cols = qs.int8_vectorwise_quant(x, 0.2)
    c2, s2_, k2 = qs.int8_vectorwise_quant(tx, 0.2)
    assert codes.tobytes() == c2.tobytes() and stats.tobytes() == s2_.tobytes()
    assert np.array_equal(cols, k2)
    o1, o2 = qs.Observer("percentile"), qs.Observer("percentile")
    o1.update(x)
    o2.update(tx)
    assert o1.to_bytes() == o2.to_bytes()
    assert qs.convert(tx, np.float16).tobytes() == qs.convert(x, "float16").tobytes()
    assert qs.sparse.apply_mask(t, torch.from_numpy(mask)).tobytes() == \
        qs.sparse.apply_mask(w, mask).tobytes()


@pytest.mark.parametrize("spelling", ["float16", "f16", "fp16", "half", "FLOAT16", np.float16,
                                      np.dtype("float16"), np.dtype("<f2"), "torch.float16",
                                      "f2"])
def test_dtype_spellings_float16(spelling):
    q = qs.quantize(weights(), "nf4")
    ref = qs.dequantize(q, "float16")
    torch_dt = torch.float16
    for d in (spelling, torch_dt):
        out = qs.dequantize(q, d)
        assert out.dtype == np.float16 and out.tobytes() == ref.tobytes()


@pytest.mark.parametrize("spelling", ["bfloat16", "bf16", ml_dtypes.bfloat16, BF16,
                                      "torch.bfloat16"])
def test_dtype_spellings_bfloat16(spelling):
    q = qs.quantize(weights(), "nf4")
    ref = qs.dequantize(q, "bfloat16")
    for d in (spelling, torch.bfloat16):
        out = qs.dequantize(q, d)
        assert out.dtype == BF16 and out.tobytes() == ref.tobytes()
    assert qs.dequantize(q, np.float32).tobytes() == qs.dequantize(q).tobytes()
    assert qs.dequantize(q, torch.float32).tobytes() == qs.dequantize(q).tobytes()


@pytest.mark.parametrize("bad,match", [
    ([1.0, 2.0], "expected an array"), (3.0, "expected an array"), (None, "expected an array"),
    ("abc", "expected an array"), (object(), "expected an array"),
    (np.zeros(8, np.int32), "unsupported dtype"), (np.zeros(8, bool), "unsupported dtype"),
    (np.zeros(8, np.complex64), "unsupported dtype"), (b"\0" * 32, "element type"),
    (np.full(8, 1e300), "outside float32's range"), (np.zeros(8, np.uint16), "needs dtype"),
])
def test_bad_inputs_raise_value_error(bad, match):
    with pytest.raises(ValueError, match=match):
        qs.quantize(bad, "nf4")


def test_bad_torch_and_device_inputs():
    with pytest.raises(ValueError, match="unsupported dtype"):
        qs.quantize(torch.zeros(8, dtype=torch.int32), "nf4")

    class OnGpu(DLPackOnly):
        def __dlpack_device__(self):
            return (2, 0)

    with pytest.raises(ValueError, match="move it to the CPU"):
        qs.quantize(OnGpu(torch.zeros(8)), "nf4")
    with pytest.raises(ValueError, match="does not hold"):  # float32 tensor, bf16 requested
        qs.quantize(torch.zeros(8), "nf4", dtype="bfloat16")
    with pytest.raises(ValueError, match="does not hold"):  # bf16 tensor, float16 requested
        qs.quantize(torch.zeros(8, dtype=torch.bfloat16), "nf4", dtype="float16")
    with pytest.raises(ValueError, match="whole"):
        qs.quantize(b"\0" * 6, "nf4", dtype="float32")


@pytest.mark.parametrize("bad", ["float8", "int8", np.int8, float, np.float64, torch.int8, 3,
                                 True, None])
def test_bad_dtype_arguments(bad):
    q = qs.quantize(weights(), "nf4")
    with pytest.raises(ValueError, match="unknown dtype"):
        qs.dequantize(q, bad)


@pytest.mark.parametrize("call", [
    lambda w: qs.quantize(w, "nf4", blocksize=64.0),
    lambda w: qs.quantize(w, "nf4", blocksize="64"),
    lambda w: qs.quantize(w, "fp8_e4m3", scale=[1.0]),
    lambda w: qs.quantize(w, "fp8_e4m3", scale="x"),
    lambda w: qs.matmul(w, w, threshold=None, activations="int8"),
    lambda w: qs.int8_vectorwise_quant(w, threshold=[1]),
    lambda w: qs.Observer("entropy", num_bins=2 ** 40),
    lambda w: qs.Observer("percentile", percentile="high"),
    lambda w: qs.sparse.permute(w, max_sweeps=1.5),
    lambda w: qs.sparse.srste(w, w, lam=None),
    lambda w: qs.compress(w).to_cutlass_meta(word_bits="16"),
])
def test_option_errors_are_value_errors(call):
    with pytest.raises(ValueError):
        call(np.zeros((4, 16), np.float32))


def test_refused_inputs_leave_state_untouched(tmp_path):
    obs = qs.Observer("entropy")
    obs.update(weights())
    before = obs.to_bytes()
    for bad in ([1.0], np.zeros(4, np.int64), np.full(4, 1e39), torch.zeros(4, dtype=torch.int8)):
        with pytest.raises(ValueError):
            obs.update(bad)
    assert obs.to_bytes() == before
    path = tmp_path / "out.safetensors"
    path.write_bytes(b"old contents")
    with pytest.raises(ValueError):
        qs.save(path, {"a": np.zeros(3, np.float32), "b": [1, 2]})
    with pytest.raises(ValueError):
        qs.save(path, {"l.weight": qs.quantize(weights(), "fp8_e4m3")}, layout="bnb")
    assert path.read_bytes() == b"old contents"
    assert sorted(p.name for p in tmp_path.iterdir()) == ["out.safetensors"]


def test_matmul_returns_the_callers_kind():
    w = weights((16, 64))
    x = weights((3, 64), seed=1)
    q = qs.quantize(w, "nf4")
    y = qs.matmul(x, q)
    assert isinstance(y, np.ndarray)
    ty = qs.matmul(torch.from_numpy(x), q, torch.from_numpy(w[:, 0].copy()))
    assert isinstance(ty, torch.Tensor) and ty.dtype == torch.float32 and ty.shape == (3, 16)
    assert ty.numpy().tobytes() == qs.matmul(x, q, w[:, 0].copy()).tobytes()
    # torch bfloat16 activations and weight too
    tb = torch.from_numpy(x).to(torch.bfloat16)
    assert isinstance(qs.matmul(tb, torch.from_numpy(w).to(torch.bfloat16)), torch.Tensor)


def test_format_names_in_any_case():
    w = weights((16, 64))
    ref = qs.quantize(w, "nf4")
    for name in ("NF4", "Nf4"):
        q = qs.quantize(w, name)
        assert q.format == "nf4"
        same_q(q, ref)
    q = qs.QTensor("FP8_E4M3", (4, 4), np.zeros((4, 4), np.uint8), scale=np.ones(1, np.float32))
    assert q.format == "fp8_e4m3"
    with pytest.raises(ValueError, match="unknown format"):
        qs.quantize(w, "nf5")


def test_tool_format_names_in_any_case(run_tool, tmp_path):
    from safetensors.numpy import save_file

    src = tmp_path / "m.safetensors"
    save_file({"a.weight": weights((16, 64))}, str(src))
    for name in ("nf4", "NF4"):
        run_tool("quantize", src, "-o", tmp_path / f"{name}.safetensors", "--format", name, "-q",
                 check=0)
    assert (tmp_path / "nf4.safetensors").read_bytes() == \
        (tmp_path / "NF4.safetensors").read_bytes()
