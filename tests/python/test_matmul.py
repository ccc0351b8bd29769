# SPDX-License-Identifier: MIT
"""qs.matmul and qs.int8_vectorwise_quant: every weight the binding models against numpy's float64
product of x and the dequantized weight; int8 activations within the bound of
include/qsparse/matmul.h; the LLM.int8 outlier split against a numpy model of bitsandbytes'
int8_vectorwise_quant + int8_mixed_scaled_mm; argument errors."""

import ctypes

import numpy as np
import pytest

import qsparse as qs

RNG = np.random.default_rng(7)


def _rel(got, want):
    return np.linalg.norm(got - want) / max(np.linalg.norm(want), 1e-300)


def _weights(w):
    """(name, weight object, its dense float64 form) for every kind."""
    out = [("f32", w, w.astype(np.float64)),
           ("f16", w.astype(np.float16), w.astype(np.float16).astype(np.float64))]
    for fmt, kw in (("nf4", {}), ("nf4", {"double_quant": True}), ("fp4", {}),
                    ("int8", {}), ("int8", {"granularity": "tensor", "symmetric": False}),
                    ("int8", {"group_size": 16}), ("llm_int8", {}), ("fp8_e4m3", {}),
                    ("fp8_e5m2", {}), ("mxfp4", {}), ("mxfp8", {}), ("nvfp4", {})):
        q = qs.quantize(w, fmt, **kw)
        out.append((f"{fmt}{kw}", q, qs.dequantize(q).astype(np.float64)))
    s, _ = qs.sparse.prune_compress(w)
    out.append(("sp24", s, qs.decompress(s).astype(np.float64)))
    for fmt in ("nf4", "int8", "mxfp4"):
        sq = qs.quantize(s, fmt)
        out.append((f"sp24+{fmt}", sq, qs.dequantize(sq).astype(np.float64)))
    return out


@pytest.mark.parametrize("m", [1, 5, 40])
def test_every_weight_kind(m):
    n, k = 24, 96
    w = (RNG.standard_normal((n, k)) * 0.05).astype(np.float32)
    x = RNG.standard_normal((m, k)).astype(np.float32)
    bias = RNG.standard_normal(n).astype(np.float32)
    for name, wobj, dense in _weights(w):
        y = qs.matmul(x, wobj, bias)
        assert y.dtype == np.float32 and y.shape == (m, n), name
        want = x.astype(np.float64) @ dense.T + bias
        assert _rel(y, want) <= 1e-5, name


def test_leading_axes_and_f16_activations():
    w = (RNG.standard_normal((7, 33)) * 0.1).astype(np.float32)
    x = RNG.standard_normal((2, 3, 33)).astype(np.float16)
    q = qs.quantize(w, "nf4")
    y = qs.matmul(x, q)
    assert y.shape == (2, 3, 7)
    want = x.astype(np.float64) @ qs.dequantize(q).astype(np.float64).T
    assert _rel(y, want) <= 1e-5


def test_int8_activations_bound():
    n, k, m = 16, 128, 6
    w = (RNG.standard_normal((n, k)) * 0.05).astype(np.float32)
    x = RNG.standard_normal((m, k)).astype(np.float32)
    for fmt in ("int8", "llm_int8", "nf4", "fp4", "mxfp4", "nvfp4", "fp8_e4m3"):
        q = qs.quantize(w, fmt)
        dense = qs.dequantize(q).astype(np.float64)
        y8 = qs.matmul(x, q, activations="int8")
        y32 = qs.matmul(x, q)
        r = np.abs(x).max(axis=1, keepdims=True).astype(np.float64)
        bound = 1.001 * r / 254.0 * np.abs(dense).sum(axis=1) + \
            1e-5 * (np.abs(x).astype(np.float64) @ np.abs(dense).T)
        if fmt in ("nf4", "fp4"):  # the int8 codebook's rounding (docs/int8_activations.md)
            am = np.repeat(np.asarray(q.absmax, np.float64), 64).reshape(n, k)
            bound = bound + 1.001 / 254.0 * ((np.abs(x) + r / 254.0) @ am.T)
        assert np.all(np.abs(y8 - y32) <= bound), fmt
        assert np.mean(y8 == y32) < 0.5, fmt  # the int8 path really ran


def _bnb_vectorwise(x, threshold):
    """bitsandbytes' int8_vectorwise_quant (default backend) in numpy, float32 arithmetic."""
    a = x.astype(np.float32).copy()
    cols = np.zeros(0, np.int64)
    if threshold > 0:
        outliers = np.abs(a) >= threshold
        cols = np.flatnonzero(outliers.any(axis=0))
        a[outliers] = 0
    stats = np.abs(a).max(axis=1).astype(np.float32)
    with np.errstate(divide="ignore", invalid="ignore"):
        scaled = a * (np.float32(127.0) / stats[:, None])
    codes = np.nan_to_num(np.rint(scaled), nan=0.0).astype(np.int8)
    codes[:, cols] = 0
    return codes, stats, cols


def test_vectorwise_quant_matches_numpy_model():
    x = np.clip(RNG.standard_normal((9, 64)) * 2, -5.5, 5.5).astype(np.float32)
    x[1, 5] = 8.0
    x[7, 40] = -6.0   # exactly the threshold: an outlier (>=)
    x[3, 63] = 5.99
    codes, stats, cols = qs.int8_vectorwise_quant(x, threshold=6.0)
    wc, ws, wcols = _bnb_vectorwise(x, 6.0)
    assert list(cols) == [5, 40]
    np.testing.assert_array_equal(cols, wcols)
    np.testing.assert_array_equal(stats, ws)
    np.testing.assert_array_equal(codes, wc)
    codes0, stats0, cols0 = qs.int8_vectorwise_quant(x)
    assert cols0.size == 0 and stats0[1] == 8.0


def test_llm_int8_outlier_split_matches_numpy_model():
    n, k, m = 12, 64, 5
    w = (RNG.standard_normal((n, k)) * 0.05).astype(np.float32)
    x = RNG.standard_normal((m, k)).astype(np.float32)
    x[0, 10] = 20.0
    x[3, 50] = -9.0
    bias = RNG.standard_normal(n).astype(np.float32)
    q = qs.quantize(w, "llm_int8")
    y = qs.matmul(x, q, bias, activations="int8", threshold=6.0)

    ca, sca, cols = _bnb_vectorwise(x, 6.0)
    cb, scb = q.data.astype(np.int64), q.scale.astype(np.float32)
    acc = (ca.astype(np.int64) @ cb.T).astype(np.float32)  # exact int32 sums
    inner = (((acc * sca[:, None]) * scb[None, :]) * np.float32(1 / 16129)).astype(np.float32)
    # outlier columns: x as given against fl(fl(q * SCB) * fl(1/127)), summed in column order
    wdq = ((cb[:, cols].astype(np.float32) * scb[:, None]) * np.float32(1 / 127)).astype(np.float32)
    out = np.zeros((m, n), np.float32)
    for c in range(len(cols)):
        out = (out + x[:, cols[c]][:, None] * wdq[:, c][None, :]).astype(np.float32)
    want = ((inner + out) + bias).astype(np.float32)
    np.testing.assert_array_equal(y, want)
    # and it is close to the float product, closer than without the split
    exact = x.astype(np.float64) @ qs.dequantize(q).astype(np.float64).T + bias
    plain = qs.matmul(x, q, bias, activations="int8")
    assert _rel(y, exact) * 2 < _rel(plain, exact)


# bitsandbytes' CUDA kernel kdequant_mm_int32_fp16 (csrc/kernels.cu): MM_DEQUANT_CONST is
# 6.200012e-05f, the float nearest 1/(127 * 127), and the product is formed left to right,
# fmaf(acc * rowStats * colStats, MM_DEQUANT_CONST, bias). Its CPU/default backend multiplies by
# 6.200124e-05 instead, a typo 1.8e-5 too large.
BNB_CUDA_MM_DEQUANT_CONST = np.float32(6.200012e-05)


def _bnb_cuda_mm_dequant(acc, row_stats, col_stats):
    """bitsandbytes' CUDA int8_mm_dequant without bias, in float32 (before its float16 store)."""
    v = ((acc.astype(np.float32) * row_stats[:, None]).astype(np.float32) *
         col_stats[None, :]).astype(np.float32)
    return (v * BNB_CUDA_MM_DEQUANT_CONST).astype(np.float32)


@pytest.mark.parametrize("m", [1, 3, 17, 40])  # GEMV (M < 16) and GEMM paths
def test_llm_int8_dequant_is_bitsandbytes_cuda_rule(m):
    assert BNB_CUDA_MM_DEQUANT_CONST == np.float32(1 / 16129)
    assert BNB_CUDA_MM_DEQUANT_CONST.view(np.uint32) == 0x38820610
    # one times one is one (the CPU backend's constant gives 1.000018)
    one = qs.quantize(np.ones((1, 1), np.float32), "llm_int8")
    assert qs.matmul(np.ones((m, 1), np.float32), one, activations="int8").tolist() == [[1.0]] * m
    n, k = 24, 96
    w = (RNG.standard_normal((n, k)) * 0.05).astype(np.float32)
    x = RNG.standard_normal((m, k)).astype(np.float32)
    q = qs.quantize(w, "llm_int8")
    y = qs.matmul(x, q, activations="int8")
    ca, sca, _ = _bnb_vectorwise(x, 0.0)
    acc = ca.astype(np.int64) @ q.data.astype(np.int64).T
    np.testing.assert_array_equal(y, _bnb_cuda_mm_dequant(acc, sca, q.scale.astype(np.float32)))


def test_threads_bit_identical():
    w = (RNG.standard_normal((300, 128)) * 0.05).astype(np.float32)
    x = RNG.standard_normal((33, 128)).astype(np.float32)
    q = qs.quantize(w, "nf4")
    old = qs.get_num_threads()
    try:
        qs.set_num_threads(1)
        a = qs.matmul(x, q)
        qs.set_num_threads(2)
        b = qs.matmul(x, q)
    finally:
        qs.set_num_threads(old)
    np.testing.assert_array_equal(a, b)


@pytest.mark.parametrize("m", [1, 5, 16, 20])
def test_bf16_activations_bound(m):
    """activations="bf16" within the bound of include/qsparse/matmul.h against the float32
    result for every weight kind (M = 16: the bf16 kernels' largest M, 20: the float32 path on
    x^), x^ rounded as ml_dtypes rounds to bfloat16 (an independent reference), and a bfloat16 x
    gives the bits of the float32 x it holds."""
    ml_dtypes = pytest.importorskip("ml_dtypes")
    n, k = 24, 96
    w = (RNG.standard_normal((n, k)) * 0.05).astype(np.float32)
    x = RNG.standard_normal((m, k)).astype(np.float32)
    xh = x.astype(ml_dtypes.bfloat16)
    xhat = xh.astype(np.float64)
    changed, kinds = 0.0, _weights(w)
    for name, wobj, dense in kinds:
        y = qs.matmul(x, wobj, activations="bf16")
        y32 = qs.matmul(x, wobj)
        c = 1.0 if name.startswith(("nf4", "fp4")) else 0.0  # the codebooks rounded to bf16
        absxw = np.abs(x).astype(np.float64) @ np.abs(dense).T
        # the denormal terms are below 1e-30 for these magnitudes
        bound = (2.0**-8 + c * (2.0**-8 + 2.0**-16) + (3.2 * k + 16) * 2.0**-24) * absxw + 1e-30
        assert np.all(np.abs(y - y32) <= bound), name
        # against x^ @ W: only the float32 sums and the codebook rounding
        near = (c * (2.0**-8 + 2.0**-16) + (3.2 * k + 16) * 2.0**-24) * \
            (np.abs(xhat) @ np.abs(dense).T) + 1e-30
        assert np.all(np.abs(y - xhat @ dense.T) <= near), name
        np.testing.assert_array_equal(qs.matmul(xh, wobj, activations="bf16"), y)
        changed += np.mean(y != y32)
    assert changed / len(kinds) > 0.9  # the rounding of x really happened


def test_errors():
    w = RNG.standard_normal((8, 32)).astype(np.float32)
    x = RNG.standard_normal((2, 32)).astype(np.float32)
    q = qs.quantize(w, "nf4")
    with pytest.raises(ValueError):
        qs.matmul(x[:, :16], q)                       # K mismatch
    with pytest.raises(ValueError):
        qs.matmul(x, q, activations="int4")
    with pytest.raises(ValueError):
        qs.matmul(x, q, threshold=6.0)                # threshold needs int8 activations
    with pytest.raises(ValueError):
        qs.matmul(x, q, activations="bf16", threshold=6.0)
    with pytest.raises(ValueError):
        qs.matmul(x, q, np.zeros(7, np.float32))      # bias of the wrong length
    with pytest.raises(ValueError):
        qs.matmul(x.astype(np.int32), q)
    with pytest.raises(ValueError):                    # float64 beyond float32's range
        qs.matmul(np.full_like(x, 1e300, dtype=np.float64), q)
    with pytest.raises(ValueError):
        qs.int8_vectorwise_quant(x, threshold=-1.0)
    # a QTensor whose planes were cut short: the library refuses it
    bad = qs.quantize(w, "int8")
    bad.data = bad.data[:4]
    with pytest.raises((ValueError, qs.QsparseError)):
        qs.matmul(x, bad)


def test_matmul_info_and_mirrors():
    """qs.matmul_info() reports the library's QS_MATMUL_BLAS bit (the module's blas() is hidden
    behind the qs.matmul function); the matmul struct mirrors live in _capi with the other
    mirrors, checked field by field against the library's layout."""
    from qsparse import _capi, _lib

    info = qs.matmul_info()
    assert info == {"blas": bool(_lib.lib().qs_matmul_info() & _capi.QS_MATMUL_BLAS)}
    assert "matmul_info" in qs.__all__
    for cls, kind in ((_capi.MatmulParams, 9), (_capi.WeightC, 10)):
        assert cls in _capi.STRUCTS and cls._qs_kind == kind
        assert _lib.lib().qs_struct_size(kind) == ctypes.sizeof(cls)
    assert _lib.lib().qs_struct_offset(_capi.QS_STRUCT_WEIGHT, b"q") == _capi.WeightC.q.offset
    # one past the last struct kind the binding mirrors is unknown to the library
    assert _lib.lib().qs_struct_size(max(c._qs_kind for c in _capi.STRUCTS) + 1) == -1
    assert _capi.layout_mismatches(_lib.lib()) == []
    for name in ("qs_matmul", "qs_matmul_info", "qs_int8_vectorwise_quant"):
        assert name in _capi.SIGNATURES


NF4_I8 = np.array([-127, -88, -67, -50, -36, -23, -12, 0, 10, 20, 31, 43, 56, 71, 92, 127])
FP4_I8 = np.array([0, 1, 85, 127, 42, 64, 21, 32, 0, -1, -85, -127, -42, -64, -21, -32])


@pytest.mark.parametrize("fmt,book", [("nf4", NF4_I8), ("fp4", FP4_I8)])
@pytest.mark.parametrize("m", [2, 24])
def test_bnb4_int8_activations_match_numpy_model(fmt, book, m):
    """NF4 / FP4 with int8 activations as docs/int8_activations.md defines it: exact int32 block
    sums of the codes against the int8 codebook, t = sum fl(a_b * absmax_b), y = fl(t * fl(r /
    16129)), the outlier columns in f32 against the dequantized weight, then the bias."""
    n, k = 20, 256
    w = (RNG.standard_normal((n, k)) * 0.05).astype(np.float32)
    x = RNG.standard_normal((m, k)).astype(np.float32)
    x[0, 3] = 7.0
    bias = RNG.standard_normal(n).astype(np.float32)
    q = qs.quantize(w, fmt)
    y = qs.matmul(x, q, bias, activations="int8", threshold=6.0)
    ca, sca, cols = _bnb_vectorwise(x, 6.0)
    packed = np.asarray(q.data).reshape(-1)
    codes = np.empty(packed.size * 2, np.int64)
    codes[0::2], codes[1::2] = packed >> 4, packed & 0xF
    w8 = book[codes[:n * k]].reshape(n, k)
    absmax = np.asarray(q.absmax, np.float32)
    a = np.einsum("mbk,nbk->mnb", ca.reshape(m, k // 64, 64).astype(np.int64),
                  w8.reshape(n, k // 64, 64))
    t = np.zeros((m, n), np.float32)
    for b in range(k // 64):  # ascending blocks, f32 steps
        t = (t + a[:, :, b].astype(np.float32) * absmax.reshape(n, k // 64)[None, :, b]) \
            .astype(np.float32)
    inner = (t * (sca / np.float32(16129.0))[:, None]).astype(np.float32)
    wdq = qs.dequantize(q)
    out = np.zeros((m, n), np.float32)
    for c in cols:
        out = (out + x[:, c][:, None] * wdq[:, c][None, :]).astype(np.float32)
    want = ((inner + out) + bias).astype(np.float32)
    assert list(cols) == [3]
    np.testing.assert_array_equal(y, want)


@pytest.mark.parametrize("m", [1, 5, 40])
def test_packed_weights_same_bits(m):
    """qs.pack: every weight kind packed gives the bits of the weight it came from, with f32, int8
    and bf16 activations, and its buffer is its own (the source may go)."""
    n, k = 24, 96
    w = (RNG.standard_normal((n, k)) * 0.05).astype(np.float32)
    x = RNG.standard_normal((m, k)).astype(np.float32)
    for name, wobj, _ in _weights(w):
        pw = qs.pack(wobj)
        assert isinstance(pw, qs.PackedWeight) and pw.shape == (n, k), name
        for act in ("f32", "int8", "bf16"):
            want = qs.matmul(x, wobj, activations=act)
            got = qs.matmul(x, pw, activations=act)
            assert np.array_equal(got.view(np.uint32), want.view(np.uint32)), (name, act)
    with pytest.raises(ValueError):
        qs.pack(pw)


def test_packed_weight_refused_when_damaged_or_misused():
    w = (RNG.standard_normal((8, 64)) * 0.05).astype(np.float32)
    pw = qs.pack(qs.quantize(w, "nf4"))
    x = RNG.standard_normal((2, 64)).astype(np.float32)
    qs.matmul(x, pw)
    with pytest.raises(ValueError, match="x has K"):
        qs.matmul(RNG.standard_normal((2, 32)).astype(np.float32), pw)
    bad = qs.PackedWeight(pw.buffer.copy(), pw.shape)
    bad.buffer[20] ^= 0x40
    with pytest.raises(qs.QsparseError, match="damaged|packed"):
        qs.matmul(x, bad)
    junk = qs.PackedWeight(np.zeros(pw.nbytes, np.uint8), pw.shape)
    with pytest.raises(qs.QsparseError, match="no packed weight"):
        qs.matmul(x, junk)
