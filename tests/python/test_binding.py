# SPDX-License-Identifier: MIT
"""Tests of the ctypes binding: every public function, the plane layouts against the spec's
hand-worked vectors (docs/formats.md §5.4, §6.2, §10, §13, §14), dtypes, backends, threads and
every error path (ValueError before the C call, QsparseError with the library's message)."""

import ctypes
import os
import shutil
import struct
import subprocess
import sys
import threading

import numpy as np
import pytest

import qsparse as qs
from qsparse import _capi, _lib

ml_dtypes = pytest.importorskip("ml_dtypes")

FORMATS = ["nf4", "fp4", "int8", "llm_int8", "fp8_e4m3", "fp8_e5m2", "mxfp4", "mxfp8", "nvfp4"]


def f32(*hexes):
    return np.array([struct.unpack("<f", bytes.fromhex(h)[::-1])[0] for h in hexes], np.float32)


def rand(shape, seed=1, scale=1.0):
    return (np.random.default_rng(seed).standard_normal(shape) * scale).astype(np.float32)


# ---- module-level functions ----------------------------------------------------------------------


def test_version_and_formats():
    assert qs.__version__.count(".") == 2
    assert qs.formats() == FORMATS
    with pytest.raises(AttributeError):
        qs.no_such_name  # noqa: B018


def test_isas_and_set_isa():
    names = qs.isas()
    assert names[0] == "scalar"
    try:
        for name in names:
            qs.set_isa(name)
            assert qs.isa() == name
            impls = qs.kernels()
            assert impls["nf4_quant"].startswith("qs_nf4_quant__")
            if name == "scalar":
                assert all(v.endswith("__ref") for v in impls.values())
        qs.set_isa("auto")
        assert qs.isa() == names[-1] or os.environ.get("QS_FORCE_ISA")
    finally:
        qs.set_isa("auto")


def test_set_isa_errors():
    with pytest.raises(ValueError, match="unknown ISA"):
        qs.set_isa("gpu9000")
    with pytest.raises(ValueError):
        qs.set_isa(3)
    missing = [b for b in ("avx2", "avx512", "neon", "neon-dotprod") if b not in qs.isas()]
    before = qs.isa()
    for name in missing:
        with pytest.raises(qs.QsparseError, match="not available") as e:
            qs.set_isa(name)
        assert e.value.status == _lib.QS_ERR_BACKEND
    assert qs.isa() == before  # a failed request leaves the setting as it was


def test_backends_cpu_and_cuda(tmp_path):
    # No CUDA plugin is built here: "cuda" is missing and says which file it looked for.
    assert qs.backends()[0] == "cpu"
    assert qs.backend() == "cpu"
    try:
        qs.set_backend("cpu")
        assert qs.backend() == "cpu"
        if "cuda" not in qs.backends():
            assert "libqsparse-cuda.so" in qs.backend_message("cuda") or \
                os.environ.get("QS_PLUGIN_PATH")
            with pytest.raises(qs.QsparseError, match="not available") as e:
                qs.set_backend("cuda")
            assert e.value.status == _lib.QS_ERR_BACKEND
            assert qs.backend() == "cpu"  # the failed request changed nothing
        qs.set_backend("auto")
        assert qs.backend() in qs.backends()
    finally:
        qs.set_backend("auto")
    with pytest.raises(ValueError, match="unknown backend"):
        qs.set_backend("avx2")  # ISA tiers are set_isa's
    with pytest.raises(ValueError, match="unknown backend"):
        qs.backend_message("gpu")
    with pytest.raises(ValueError):
        qs.set_backend(None)


_PLUGIN_SCRIPT = r"""
import sys
sys.path.insert(0, sys.argv[1])
import numpy as np
import qsparse as qs
from qsparse import _lib

plugin, missing = sys.argv[2], sys.argv[3]
try:
    qs.load_backend(missing)
    raise SystemExit("a missing plugin file was accepted")
except qs.QsparseError as e:
    assert e.status == _lib.QS_ERR_BACKEND and "no such file" in str(e), str(e)
try:
    qs.set_backend("recorder")
    raise SystemExit("an unknown backend was accepted")
except ValueError as e:
    assert "unknown backend" in str(e), str(e)
qs.load_backend(plugin)
assert "recorder" in qs.backends(), qs.backends()
assert qs.backend_message("recorder") == ""
assert qs.doctor()["backends"]["recorder"]["available"]
w = np.arange(4 * 64, dtype=np.float32).reshape(4, 64) / 256
x = np.ones((2, 64), np.float32)
q = qs.quantize(w, "nf4")  # on the CPU
qs.set_backend("recorder")
assert qs.backend() == "recorder"
# the recorder's matmul: y[m][n] = 1000 m + n (tests/plugins/test_plugin.h)
y = qs.matmul(x, w)
assert (y == 1000 * np.arange(2)[:, None] + np.arange(4)[None, :]).all(), y
try:
    qs.dequantize(q)
    raise SystemExit("a missing operation ran")
except qs.QsparseError as e:
    assert e.status == _lib.QS_ERR_UNSUPPORTED, e.status
    assert "recorder backend: dequantize (qs_dequantize) is not implemented" in str(e), str(e)
qs.set_backend("auto")
assert np.allclose(qs.matmul(x, w), x @ w.T, rtol=1e-5)  # the CPU again
print("plugin ok")
"""


def test_plugin_backend(tmp_path):
    # A plugin of its own name (tests/plugins/test_plugin.c, built against the plugin ABI header
    # alone): loaded, listed, selected, its matmul called, its missing dequantize refused by name.
    # In a fresh interpreter, since the registry is per process.
    cc = shutil.which("cc") or shutil.which("gcc")
    if cc is None:
        pytest.skip("no C compiler to build the test plugin")
    root = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
    plugin = str(tmp_path / "libqs-test-plugin-recorder.so")
    subprocess.run([cc, "-shared", "-fPIC", "-O1", "-Wall", "-Werror", "-DPLUGIN_VARIANT=RECORDER",
                    "-I", os.path.join(root, "include"),
                    os.path.join(root, "tests", "plugins", "test_plugin.c"), "-o", plugin],
                   check=True)
    pkg_parent = os.path.dirname(os.path.dirname(qs.__file__))
    r = subprocess.run([sys.executable, "-c", _PLUGIN_SCRIPT, pkg_parent, plugin,
                        str(tmp_path / "none.so")],
                       capture_output=True, text=True, timeout=120,
                       env=dict(os.environ, QSPARSE_LIB=qs._lib.library_path()))
    assert r.returncode == 0 and r.stdout.strip() == "plugin ok", r.stdout + r.stderr


def test_struct_layouts_match_the_library():
    assert _capi.layout_mismatches(_lib.lib()) == []
    assert _lib.lib().qs_struct_size(0) == -1
    assert _lib.lib().qs_struct_offset(_capi.QS_STRUCT_QUANT_PARAMS, b"no_such_field") == -1

    class Drifted(ctypes.Structure):  # a mirror that lost a field is named with its offset
        _qs_kind = _capi.QS_STRUCT_QUANT_PARAMS
        _fields_ = [("format", ctypes.c_int32), ("granularity", ctypes.c_int32)]

    saved = _capi.STRUCTS
    try:
        _capi.STRUCTS = (Drifted,)
        bad = _capi.layout_mismatches(_lib.lib())
        with pytest.raises(OSError, match="Drifted.granularity: offset 4 here, 8 in the library"):
            _capi.check_layouts(_lib.lib(), "libqsparse")
    finally:
        _capi.STRUCTS = saved
    assert any("bytes here" in b for b in bad)


@pytest.mark.parametrize("fmt", FORMATS)
def test_every_isa_gives_the_same_bits(fmt):
    x = rand((7, 80), seed=3)
    outs = []
    try:
        for name in qs.isas():
            qs.set_isa(name)
            q = qs.quantize(x, fmt)
            outs.append((q.data.tobytes(), (q.scale if q.absmax is None else q.absmax).tobytes(),
                         qs.dequantize(q).tobytes()))
    finally:
        qs.set_isa("auto")
    assert all(o == outs[0] for o in outs)


def test_threads_do_not_change_results():
    x = rand((64, 1024), seed=4)
    try:
        qs.set_num_threads(1)
        assert qs.get_num_threads() == 1
        a = qs.quantize(x, "nf4", double_quant=True)
        qs.set_num_threads(2)
        b = qs.quantize(x, "nf4", double_quant=True)
    finally:
        qs.set_num_threads(0)
    assert a.data.tobytes() == b.data.tobytes()
    assert a.absmax.tobytes() == b.absmax.tobytes()
    assert a.nested_offset == b.nested_offset
    for bad in (-1, 1.5, "2", True, 2**31):
        with pytest.raises(ValueError):
            qs.set_num_threads(bad)


def test_parallel_policy():
    """qs.set_parallel reaches every thread's context; the bits never depend on it."""
    x = rand((64, 1024), seed=4)
    assert qs.get_parallel() == {"grain": 1 << 20, "backoff": True}
    ref = qs.quantize(x, "nf4").data.tobytes()
    try:
        qs.set_num_threads(2)
        qs.set_parallel(grain=0, backoff=False)
        assert qs.get_parallel() == {"grain": 0, "backoff": False}
        assert qs.quantize(x, "nf4").data.tobytes() == ref
        qs.set_parallel(grain=4096)
        assert qs.get_parallel() == {"grain": 4096, "backoff": False}
        for bad in ({"grain": -1}, {"grain": 1.5}, {"grain": True}, {"backoff": 1}):
            with pytest.raises(ValueError):
                qs.set_parallel(**bad)
    finally:
        qs.set_num_threads(0)
        qs.set_parallel(grain=1 << 20, backoff=True)


def test_python_threads_get_their_own_context():
    x = rand((32, 256), seed=5)
    ref = qs.dequantize(qs.quantize(x, "nvfp4")).tobytes()
    results, errors = [], []

    def work():
        try:
            for _ in range(20):
                results.append(qs.dequantize(qs.quantize(x, "nvfp4")).tobytes())
            # errors stay in the failing thread's context
            with pytest.raises(qs.QsparseError, match="block_size is 16, got 6"):
                qs.quantize(x, "nvfp4", blocksize=6)
        except Exception as e:  # pragma: no cover - reported below
            errors.append(e)

    threads = [threading.Thread(target=work) for _ in range(4)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert not errors
    assert len(results) == 80 and all(r == ref for r in results)


def test_codebooks_and_convert():
    nf4 = qs.codebook("nf4")
    assert nf4.dtype == np.float32 and nf4.shape == (16,)
    assert nf4[0] == -1.0 and nf4[7] == 0.0 and nf4[15] == 1.0
    dyn8 = qs.codebook("dyn8")
    assert dyn8.shape == (256,) and dyn8[127] == 0.0 and dyn8[255] == 1.0
    assert dyn8[0] == f32("bf7e3333")[0]
    e4m3 = qs.codebook("e4m3")
    assert e4m3[0x7E] == 448.0 and np.isnan(e4m3[0x7F])
    assert list(qs.codebook("e2m1")[:8]) == [0, 0.5, 1, 1.5, 2, 3, 4, 6]
    with pytest.raises(ValueError, match="unknown codebook"):
        qs.codebook("nf5")

    x = np.array([1.0, 65520.0, np.nan, 1e-8, -2.5], np.float32)
    h = qs.convert(x, "float16")
    assert h.dtype == np.float16
    with np.errstate(over="ignore"):  # 65520 rounds to +Inf in float16, as intended
        assert h.tobytes() == x.astype(np.float16).tobytes()
    b = qs.convert(x, "bfloat16")
    assert b.dtype == ml_dtypes.bfloat16
    back = qs.convert(b, "float32")
    assert back[0] == 1.0 and back[4] == -2.5
    with pytest.raises(ValueError):
        qs.convert(x, "float64")


# ---- spec vectors --------------------------------------------------------------------------------


SPEC_IN = f32("3f800000", "bf800000", "3f000000", "3d22faff", "bf591cd8", "00000000", "be800000")


def test_nf4_spec_vectors():
    q = qs.quantize(SPEC_IN, "nf4")
    assert q.data.tobytes().hex() == "f0c70747"
    assert q.data.dtype == np.uint8 and q.data.shape == (4,)
    assert q.absmax.dtype == np.float32 and list(q.absmax) == [1.0]
    assert q.blocksize == 64 and q.shape == (7,) and q.format == "nf4"
    assert q.scale is None and q.nested_absmax is None and not q.double_quant
    assert qs.quantize(np.zeros(5, np.float32), "nf4").data.tobytes().hex() == "000000"
    nan = np.array([np.nan, 0.5, -1.0], np.float32)
    assert qs.quantize(nan, "nf4").data.tobytes().hex() == "0c07"
    # multiply by the reciprocal, never divide (§5.4)
    assert qs.quantize(f32("bffa131c", "40136ed4"), "nf4").data.tobytes().hex() == "1f"
    d = qs.dequantize(q)
    assert d.dtype == np.float32 and d.shape == (7,)
    assert d[0] == 1.0 and d[1] == -1.0


def test_fp4_spec_vector():
    q = qs.quantize(SPEC_IN, "fp4")
    assert q.data.tobytes().hex() == "3b51b0f0"


def test_double_quant_spec_example():
    # blocks of 2 whose absmax are [0.5, 1.0, 0.25, 0.75] (§6.2 example)
    x = np.array([0.5, 0, 1.0, 0, 0.25, 0, 0.75, 0], np.float32)
    q = qs.quantize(x, "nf4", blocksize=2, double_quant=True)
    assert q.absmax.dtype == np.uint8 and list(q.absmax) == [47, 255, 0, 207]
    assert q.nested_absmax.dtype == np.float32 and list(q.nested_absmax) == [0.375]
    assert q.nested_offset == np.float32(0.625) and q.nested_blocksize == 256
    assert q.double_quant and q.blocksize == 2
    d = qs.dequantize(q)
    assert d[2] == 1.0


def test_fp8_plain_cast_and_data_scale():
    x = np.array([1.0, 0.1, 240.0, 448.0, 464.0, 464.00003, np.inf, -np.inf, np.nan, -0.0,
                  -2.0**-7], np.float32)
    q = qs.quantize(x, "fp8_e4m3", scale=1.0)
    assert q.data.tobytes().hex() == "381d777e7e7e7efe7f8084"
    assert q.scale.dtype == np.float32 and list(q.scale) == [1.0]
    assert q.data.shape == x.shape
    y = np.array([1.0, -448.0 * 2], np.float32)
    q2 = qs.quantize(y, "fp8_e4m3")
    assert q2.scale[0] == np.float32(896.0) / np.float32(448.0)
    assert list(qs.dequantize(q2)) == [1.0, -896.0]
    q3 = qs.quantize(np.array([57344.0, 1.0], np.float32), "fp8_e5m2", scale=1.0)
    assert q3.data.tobytes().hex() == "7b3c"


def test_mxfp4_spec_vector():
    x = np.zeros(32, np.float32)
    x[:4] = [1.0, -0.75, 5.0, 7.9]
    q = qs.quantize(x, "mxfp4")
    assert q.scale.dtype == np.uint8 and q.scale.shape == (1, 1) and q.scale[0, 0] == 0x7F
    assert q.data.tobytes()[:3].hex() == "a27600"
    assert q.data.shape == (16,)
    r = qs.quantize(x, "mxfp4", scale_rounding="rceil")
    assert r.scale_rounding == "rceil" and qs.dequantize(r)[3] == 8.0
    nan = x.copy()
    nan[5] = np.nan
    assert qs.quantize(nan, "mxfp4").scale[0, 0] == 0xFF


def test_nvfp4_spec_vector():
    x = np.zeros((1, 32), np.float32)
    x[0, :4] = [6.0, -3.0, 0.7, 1.1]
    x[0, 16] = 2688.0
    q = qs.quantize(x, "nvfp4")
    assert q.global_scale == np.float32(1.0)
    assert q.scale.dtype == np.uint8 and q.scale.shape == (1, 2) and q.scale[0, 0] == 0x38
    assert q.data.tobytes()[:2].hex() == "d721"
    assert q.data.shape == (1, 16)
    g = qs.quantize(x, "nvfp4", scale=2.0)
    assert g.global_scale == np.float32(2.0)


def test_int8_layouts():
    x = rand((4, 12), seed=7)
    q = qs.quantize(x, "int8")
    assert q.granularity == "row" and q.symmetric and q.zero_point is None
    assert q.data.dtype == np.int8 and q.data.shape == (4, 12)
    amax = np.abs(x).max(axis=1)
    assert np.array_equal(q.scale, (amax / np.float32(127)).astype(np.float32))
    assert np.abs(q.data).max() == 127
    t = qs.quantize(x, "int8", granularity="tensor")
    assert t.scale.shape == (1,)
    c = qs.quantize(x, "int8", granularity="channel")
    assert c.granularity == "row" and c.scale.shape == (4,)
    g = qs.quantize(x, "int8", group_size=4)
    assert g.granularity == "group" and g.scale.shape == (4, 3) and g.group_size == 4
    a = qs.quantize(x, "int8", symmetric=False, granularity="group", group_size=6)
    assert a.zero_point.dtype == np.int8 and a.zero_point.shape == (4, 2)
    for qq in (q, t, c, g, a):
        d = qs.dequantize(qq)
        assert d.shape == x.shape
        assert np.max(np.abs(d - x)) <= np.max(np.abs(x)) / 100
    llm = qs.quantize(x, "llm_int8")
    assert np.array_equal(llm.scale, amax) and np.array_equal(llm.data, q.data)


@pytest.mark.parametrize("fmt", FORMATS)
@pytest.mark.parametrize("shape", [(0,), (1,), (7,), (3, 33), (2, 3, 40), ()])
def test_roundtrip_shapes(fmt, shape):
    x = rand(shape, seed=11)
    q = qs.quantize(x, fmt)
    assert q.shape == tuple(shape)
    d = qs.dequantize(q)
    assert d.shape == tuple(shape) and d.dtype == np.float32
    if x.size:
        err = np.sqrt(np.mean((d - x) ** 2)) / np.sqrt(np.mean(x**2))
        assert err < 0.25
    assert q.nbytes >= q.data.nbytes


@pytest.mark.parametrize("fmt", FORMATS)
def test_16bit_inputs_and_outputs(fmt):
    x = rand((3, 64), seed=12)
    h = x.astype(np.float16)
    b = x.astype(ml_dtypes.bfloat16)
    qh, qb = qs.quantize(h, fmt), qs.quantize(b, fmt)
    assert qh.dtype == "float16" and qb.dtype == "bfloat16"
    # the same bits through uint16 with dtype=
    qb2 = qs.quantize(b.view(np.uint16), fmt, dtype="bfloat16")
    qh2 = qs.quantize(h.view(np.uint16), fmt, dtype="float16")
    assert qb2.data.tobytes() == qb.data.tobytes() and qh2.data.tobytes() == qh.data.tobytes()
    # a float16 input quantizes as its exact float32 widening
    assert qh.data.tobytes() == qs.quantize(h.astype(np.float32), fmt).data.tobytes()
    d32 = qs.dequantize(qb)
    d16 = qs.dequantize(qb, dtype="float16")
    dbf = qs.dequantize(qb, dtype="bfloat16")
    assert d16.dtype == np.float16 and dbf.dtype == ml_dtypes.bfloat16
    assert d16.tobytes() == qs.convert(d32, "float16").tobytes()
    assert dbf.tobytes() == qs.convert(d32, "bfloat16").tobytes()


def test_noncontiguous_input_is_copied():
    x = rand((16, 128), seed=13)
    assert qs.quantize(x[:, ::2], "nf4").data.tobytes() == \
        qs.quantize(np.ascontiguousarray(x[:, ::2]), "nf4").data.tobytes()



def test_non_native_byte_order_is_converted():
    # Big-endian arrays (as read from some files) hold the same values: they are converted to
    # native order (a copy) instead of failing with "unsupported dtype", for every array argument.
    x = rand((4, 64), seed=21)
    for fmt in ("nf4", "int8", "fp8_e4m3", "nvfp4"):
        want = qs.quantize(x, fmt)
        got = qs.quantize(x.astype(">f4"), fmt)
        assert got.data.tobytes() == want.data.tobytes()
        assert got.scale is None or got.scale.tobytes() == want.scale.tobytes()
    h = x.astype(np.float16)
    assert qs.quantize(h.astype(">f2"), "mxfp4").data.tobytes() == \
        qs.quantize(h, "mxfp4").data.tobytes()
    bits = x.astype(ml_dtypes.bfloat16).view(np.uint16)
    assert qs.quantize(bits.astype(">u2"), "nf4", dtype="bfloat16").data.tobytes() == \
        qs.quantize(bits, "nf4", dtype="bfloat16").data.tobytes()
    assert qs.convert(x.astype(">f4"), "float16").tobytes() == qs.convert(x, "float16").tobytes()
    # hand-built planes in big-endian order (an int8 f32 scale, an nf4 absmax)
    i = qs.quantize(x, "int8")
    hand = qs.QTensor("int8", i.shape, i.data, scale=i.scale.astype(">f4"))
    assert qs.dequantize(hand).tobytes() == qs.dequantize(i).tobytes()
    n = qs.quantize(x, "nf4")
    hand = qs.QTensor("nf4", n.shape, n.data, absmax=n.absmax.astype(">f4"))
    assert qs.dequantize(hand).tobytes() == qs.dequantize(n).tobytes()
    o, ob = qs.Observer("entropy"), qs.Observer("entropy")
    assert ob.update(x.astype(">f4")).to_bytes() == o.update(x).to_bytes()


def test_float32_narrowing_never_changes_meaning():
    # A positive scale below float32's range (1e-50) once became 0.0, which the library reads as
    # "derive the scale from the data"; one above it became inf. Both are ValueErrors naming the
    # value, as is every other float the binding narrows to float32.
    x = rand(64)
    for fmt in ("fp8_e4m3", "fp8_e5m2", "nvfp4"):
        with pytest.raises(ValueError, match=r"scale 1e-50 is outside float32's range"):
            qs.quantize(x, fmt, scale=1e-50)
        with pytest.raises(ValueError, match=r"scale 1e\+39 is outside float32's range"):
            qs.quantize(x, fmt, scale=1e39)
    # the smallest float32 subnormal is still a scale, not "derive"
    tiny = float(np.float32(1e-45))
    assert qs.quantize(np.zeros(4, np.float32), "fp8_e4m3", scale=tiny).scale[0] == \
        np.float32(tiny)
    n = qs.quantize(rand((2, 32)), "nvfp4")
    for bad in (1e-50, 1e39):
        with pytest.raises(ValueError, match="global_scale"):
            qs.QTensor("nvfp4", n.shape, n.data, scale=n.scale, global_scale=bad)
    late = qs.quantize(rand((2, 32)), "nvfp4")
    late.global_scale = 1e-50  # set after construction: checked when dequantize narrows it
    with pytest.raises(ValueError, match="global_scale 1e-50"):
        qs.dequantize(late)
    d = qs.quantize(rand(512), "nf4", double_quant=True)
    with pytest.raises(ValueError, match="nested_offset 1e\\+39"):
        qs.QTensor("nf4", d.shape, d.data, absmax=d.absmax, nested_absmax=d.nested_absmax,
                   nested_offset=1e39)
    # an offset that small is just rounding: it stays allowed
    assert qs.QTensor("nf4", d.shape, d.data, absmax=d.absmax, nested_absmax=d.nested_absmax,
                      nested_offset=1e-50).nested_offset == 0.0
    with pytest.raises(ValueError, match="averaging_constant 1e-50"):
        qs.Observer("moving_average", averaging_constant=1e-50)
    w = rand((4, 8))
    with pytest.raises(ValueError, match="lam 1e\\+39"):
        qs.sparse.srste(w, w, lam=1e39)
    with pytest.raises(ValueError, match=r"act_norm\[3\] = 1e-50"):
        qs.prune(w, method="wanda", act_norm=np.array([1, 1, 1, 1e-50, 1, 1, 1, 1]))
    with pytest.raises(ValueError, match=r"act_norm\[0\] = 1e\+39"):
        qs.prune(w, method="wanda", act_norm=np.array([1e39] + [1.0] * 7))

# ---- errors --------------------------------------------------------------------------------------


def test_value_errors_before_the_c_call():
    x = rand(64)
    with pytest.raises(ValueError, match="unknown format"):
        qs.quantize(x, "nf5")
    with pytest.raises(ValueError, match="format must be a string"):
        qs.quantize(x, 4)
    for bad in (x.astype(np.int32), np.zeros(4, bool), x.astype(np.complex64)):
        with pytest.raises(ValueError, match="unsupported dtype"):
            qs.quantize(bad, "nf4")
    with pytest.raises(ValueError, match="needs dtype"):
        qs.quantize(x.view(np.uint16), "nf4")
    with pytest.raises(ValueError, match="does not hold"):
        qs.quantize(x, "nf4", dtype="bfloat16")
    with pytest.raises(ValueError, match="unknown dtype"):
        qs.quantize(x, "nf4", dtype="float8")
    with pytest.raises(ValueError, match="expected an array"):
        qs.quantize([1.0, 2.0], "nf4")
    for kw in ({"double_quant": True}, {"granularity": "row"}, {"blocksize": 64},
               {"symmetric": False}, {"scale": 1.0}, {"scale_rounding": "floor"}):
        with pytest.raises(ValueError, match="does not apply"):
            qs.quantize(x, "int8" if "blocksize" in kw or "scale" in kw or "double_quant" in kw
                        or "scale_rounding" in kw else "nf4", **kw)
    with pytest.raises(ValueError, match="granularity"):
        qs.quantize(x, "int8", granularity="block")
    with pytest.raises(ValueError, match="needs group_size"):
        qs.quantize(x, "int8", granularity="group")
    with pytest.raises(ValueError, match="group_size"):
        qs.quantize(x, "int8", granularity="row", group_size=8)
    with pytest.raises(ValueError, match="group_size"):
        qs.quantize(x, "int8", group_size=0)
    # the shape rule is the library's (qs_quant_plane_info), its message with the array's shape
    with pytest.raises(ValueError,
                       match=r"group size 4 does not divide cols 10 \(shape \(2, 10\)\)"):
        qs.quantize(rand((2, 10)), "int8", group_size=4)
    with pytest.raises(ValueError, match="scale must be"):
        qs.quantize(x, "fp8_e4m3", scale=0.0)
    with pytest.raises(ValueError, match="scale must be"):
        qs.quantize(x, "fp8_e4m3", scale=float("nan"))
    with pytest.raises(ValueError, match="scale_rounding"):
        qs.quantize(x, "mxfp4", scale_rounding="up")
    with pytest.raises(ValueError, match="block_size must be an int"):
        qs.quantize(x, "nf4", blocksize=64.0)
    with pytest.raises(ValueError, match="out of range"):
        qs.quantize(x, "nf4", blocksize=2**40)
    with pytest.raises(ValueError, match="expected a QTensor"):
        qs.dequantize(x)
    with pytest.raises(ValueError, match="unknown dtype"):
        qs.dequantize(qs.quantize(x, "nf4"), dtype="float64")


def test_library_errors_carry_the_library_message():
    x = rand(64)
    with pytest.raises(qs.QsparseError, match=r"nf4 block_size 3: must be even") as e:
        qs.quantize(x, "nf4", blocksize=3)
    assert e.value.status == _lib.QS_ERR_INVALID_ARG and isinstance(e.value, RuntimeError)
    with pytest.raises(ValueError, match="does not divide"):
        qs.dequantize(qs.QTensor("int8", (2, 10), np.zeros((2, 10), np.int8),
                                 scale=np.ones(5, np.float32), group_size=4))
    with pytest.raises(qs.QsparseError, match="block_size is 32"):
        qs.quantize(x, "mxfp4", blocksize=16)
    with pytest.raises(qs.QsparseError, match="block_size is 16"):
        qs.quantize(x, "nvfp4", blocksize=32)
    with pytest.raises(qs.QsparseError, match="block_size"):
        qs.quantize(x, "nf4", blocksize=8192)


@pytest.mark.parametrize("fmt,options", [("llm_int8", {}), ("int8", {}),
                                         ("int8", {"symmetric": False})])
def test_rows_times_zero_scale_plane_overflow(fmt, options):
    # cols == 0 with rows > 2^61: one f32 scale per row is more than int64 bytes. The size
    # query once wrapped to a negative size (numpy: "negative dimensions are not allowed") and
    # the kernel wrote scales past the buffer; now the library refuses before any buffer exists.
    x = np.empty((2**61 + 1, 0), np.float16)
    with pytest.raises(qs.QsparseError, match="overflows int64") as e:
        qs.quantize(x, fmt, **options)
    assert e.value.status == _lib.QS_ERR_OVERFLOW
    hand = qs.QTensor(fmt, x.shape, np.zeros(x.shape, np.int8), scale=np.ones(4, np.float32),
                      zero_point=None if options.get("symmetric", True) else np.zeros(4, np.int8))
    with pytest.raises(qs.QsparseError) as e:
        qs.dequantize(hand)
    assert e.value.status == _lib.QS_ERR_OVERFLOW


def test_plane_shapes_and_dtypes_come_from_the_library():
    # a 3-D tensor: rows = 2 * 3, cols = 45; shapes as the module docstring of _quant promises
    x = rand((2, 3, 45), seed=12)
    want = {
        "nf4": ((135,), np.uint8, (5,), np.float32),  # 270 codes in 5 blocks of 64
        "int8": ((2, 3, 45), np.int8, (6,), np.float32),
        "llm_int8": ((2, 3, 45), np.int8, (6,), np.float32),
        "fp8_e4m3": ((2, 3, 45), np.uint8, (1,), np.float32),
        "mxfp4": ((2, 3, 23), np.uint8, (6, 2), np.uint8),
        "mxfp8": ((2, 3, 45), np.uint8, (6, 2), np.uint8),
        "nvfp4": ((2, 3, 23), np.uint8, (6, 3), np.uint8),
    }
    for fmt, (dshape, ddt, sshape, sdt) in want.items():
        q = qs.quantize(x, fmt)
        sc = q.absmax if fmt == "nf4" else q.scale
        assert (q.data.shape, q.data.dtype, sc.shape, sc.dtype) == (dshape, ddt, sshape, sdt), fmt
    g = qs.quantize(x, "int8", group_size=15, symmetric=False)
    assert g.scale.shape == (6, 3) and g.zero_point.shape == (6, 3)
    assert g.zero_point.dtype == np.int8
    d = qs.quantize(x, "fp4", double_quant=True)
    assert d.absmax.dtype == np.uint8 and d.nested_absmax.shape == (1,)
    info = _capi.PlaneInfo()
    p = _capi.QuantParams()
    _lib.lib().qs_quant_params_init(ctypes.byref(p), 7)  # mxfp4
    assert _lib.lib().qs_quant_plane_info(None, ctypes.byref(p), 6, 45, 0, ctypes.byref(info)) == 0
    assert (info.elem, info.bits, info.ndim, list(info.shape), info.values, info.bytes) == \
        (_capi.QS_ELEM_U8, 4, 2, [6, 23], 270, 138)


def test_check_raises_with_message():
    _lib.check(_lib.QS_OK)
    with pytest.raises(qs.QsparseError) as e:
        _lib.check(_lib.QS_ERR_OVERFLOW)
    assert e.value.status == _lib.QS_ERR_OVERFLOW and "QS_ERR_OVERFLOW" in str(e.value)


def test_dequantize_checks_hand_built_planes():
    x = rand((4, 64), seed=9)
    q = qs.quantize(x, "nf4")
    ok = qs.QTensor("nf4", (4, 64), q.data.copy(), absmax=q.absmax.copy())
    assert qs.dequantize(ok).tobytes() == qs.dequantize(q).tobytes()
    with pytest.raises(ValueError, match="holds 127 bytes"):
        qs.dequantize(qs.QTensor("nf4", (4, 64), q.data[:-1], absmax=q.absmax))
    with pytest.raises(ValueError, match="needs the absmax plane"):
        qs.dequantize(qs.QTensor("nf4", (4, 64), q.data))
    with pytest.raises(ValueError, match="absmax must be a numpy array of float32"):
        qs.dequantize(qs.QTensor("nf4", (4, 64), q.data, absmax=q.absmax.astype(np.float64)))
    with pytest.raises(ValueError, match="unknown format"):
        qs.dequantize(qs.QTensor("nf9", (4, 64), q.data, absmax=q.absmax))
    with pytest.raises(ValueError, match="negative shape"):
        qs.dequantize(qs.QTensor("nf4", (-4, 64), q.data, absmax=q.absmax))
    n = qs.quantize(x, "nvfp4")
    with pytest.raises(ValueError, match="global_scale"):
        qs.dequantize(qs.QTensor("nvfp4", n.shape, n.data, scale=n.scale))
    dq = qs.quantize(x, "nf4", double_quant=True)
    with pytest.raises(ValueError, match="nested_offset"):
        qs.dequantize(qs.QTensor("nf4", dq.shape, dq.data, absmax=dq.absmax,
                                 nested_absmax=dq.nested_absmax))
    i = qs.quantize(x, "int8", symmetric=False, granularity="tensor")
    hand = qs.QTensor("int8", i.shape, i.data, scale=i.scale, zero_point=i.zero_point,
                      granularity="tensor")
    assert not hand.symmetric
    assert qs.dequantize(hand).tobytes() == qs.dequantize(i).tobytes()
    assert "nf4" in repr(q) and q.bits_per_weight == pytest.approx(4.5)


def test_cached_layouts_follow_the_tensor():
    """The binding asks the library for a format's parameters and plane sizes once per format,
    shape and options (qsparse._quant._layout_cached). A QTensor changed after a call must still
    meet every check; options equal in value but not in type must not share an entry; the
    parameters handed to C are each call's own copy."""
    from qsparse import _quant

    x = rand((8, 64), seed=10)
    a = rand((3, 64), seed=11)
    q = qs.quantize(x, "nf4")
    y = qs.matmul(a, q)
    want = qs.dequantize(q).tobytes()
    q.blocksize = 32                         # a valid size, but the absmax plane is for 64
    with pytest.raises(ValueError, match="absmax holds 32 bytes"):
        qs.matmul(a, q)
    q.blocksize = 64.0                       # == 64 and hashes alike: a float is refused
    with pytest.raises(ValueError, match="block_size must be an int"):
        qs.dequantize(q)
    q.blocksize = 64
    q.shape = (4, 64)                        # planes of 8 rows
    with pytest.raises(ValueError, match="data holds 256 bytes"):
        qs.dequantize(q)
    q.shape = [8, 64]                        # a list cannot key the cache: checked uncached
    assert qs.dequantize(q).tobytes() == want
    q.shape = (8, 64)
    assert qs.matmul(a, q).tobytes() == y.tobytes()
    p, _, _ = _quant._c_tensor(q)
    p.block_size = 7
    assert _quant._c_tensor(q)[0].block_size == 64
    # read-only planes and x: their addresses come from ndarray.ctypes, not a writable buffer
    ro = [arr.copy() for arr in (q.data, q.absmax, a)]
    for arr in ro:
        arr.flags.writeable = False
    q2 = qs.QTensor("nf4", (8, 64), ro[0], absmax=ro[1])
    assert qs.matmul(ro[2], q2).tobytes() == y.tobytes()
    assert qs.matmul(np.broadcast_to(a[0], (3, 64)), q)[2].tobytes() == y[0].tobytes()
    # quantize shares the cache: a scale is part of the key
    s1 = qs.quantize(x, "fp8_e4m3", scale=1.0)
    s2 = qs.quantize(x, "fp8_e4m3", scale=0.5)
    assert s1.scale[0] == 1.0 and s2.scale[0] == 0.5

def test_python_overhead_bench_compares_like_with_like():
    """bench/python_overhead.py's bare ctypes calls give the binding's results (status 0, the
    same bytes), so its ratio compares the same work; and the script runs."""
    sys.path.insert(0, os.path.join(os.path.dirname(os.path.dirname(os.path.dirname(
        os.path.abspath(__file__)))), "bench"))
    try:
        import python_overhead as po
    finally:
        sys.path.pop(0)
    old = qs.get_num_threads()
    try:
        table = po.cases()
        assert len(table) == 7
        for name, call, bare in table[1:]:
            status, out = bare()
            got = call()
            assert status == 0, name
            want = got.data if isinstance(got, qs.QTensor) else got
            assert out.tobytes() == want.tobytes(), name
        po.main(rounds=1, calls=3)
    finally:
        qs.set_num_threads(old)

def test_quantize_hook_protocol():
    class Compressed:
        def __qsparse_quantize__(self, fmt, **options):
            return ("hooked", fmt, options)

        def __qsparse_dequantize__(self, dtype):
            return ("dehooked", dtype)

    # either spelling reaches the hook as block_size, the one name of the options
    for kw in ({"blocksize": 128}, {"block_size": 128}):
        assert qs.quantize(Compressed(), "nf4", **kw) == ("hooked", "nf4", {"block_size": 128})
    assert qs.dequantize(Compressed()) == ("dehooked", "float32")


def _run_py(code, env):
    full = dict(os.environ)
    full.update(env)
    return subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                          env=full, timeout=120)


def test_library_lookup_order():
    here = qs._lib.library_path()
    assert os.path.exists(here) or "/" not in here
    # an explicit QSPARSE_LIB is used, and a wrong one is reported, not silently replaced
    pkg_parent = os.path.dirname(os.path.dirname(qs.__file__))
    code = ("import sys; sys.path.insert(0, %r); import qsparse, numpy as np;"
            "print(qsparse._lib.library_path())" % pkg_parent)
    r = _run_py(code, {"QSPARSE_LIB": here})
    assert r.returncode == 0 and r.stdout.strip() == here
    code_bad = ("import sys; sys.path.insert(0, %r); import qsparse, numpy as np;"
                "qsparse.quantize(np.ones(4, np.float32), 'nf4')" % pkg_parent)
    r = _run_py(code_bad, {"QSPARSE_LIB": "/nonexistent/libqsparse.so"})
    assert r.returncode != 0 and "QSPARSE_LIB='/nonexistent/libqsparse.so'" in r.stderr


def test_lib_contract_helpers():
    import ctypes

    bits = _lib.declare("qs_format_bits", ctypes.c_int32, [ctypes.c_int32])
    assert bits(1) == 4 and bits(3) == 8 and bits(99) == 0
    assert _lib.status_str(_lib.QS_ERR_SHAPE).startswith("QS_ERR_SHAPE")
    assert isinstance(_lib.ctx(), ctypes.c_void_p) and _lib.ctx().value
    assert _lib.ctx().value == _lib.ctx().value  # cached per thread
    with pytest.raises(qs.QsparseError):
        qs.quantize(rand(8), "nf4", blocksize=5)
    assert "block_size 5" in _lib.last_error()
    a, code, name = _lib.as_float_array(np.zeros(3, np.float16))
    assert code == _lib.QS_DTYPE_F16 and name == "float16"
    out = _lib.empty_of("bfloat16", (2, 3))
    assert out.shape == (2, 3) and out.dtype == ml_dtypes.bfloat16
    assert _lib.ptr(out).value == out.ctypes.data
