# SPDX-License-Identifier: MIT
"""qs.Observer (docs/calibration.md) against independent numpy computations: the power-of-two
histogram (§3), exact merges of 10^6 samples split into shards (§3, §9), the percentile rule (§4),
TensorRT's entropy calibration re-implemented in numpy as pytorch-quantization describes it (§5),
serialization and corrupt input, per-channel observers, non-finite inputs (§0 rule 5) and the
scales of every target."""

import pickle

import numpy as np
import pytest

import qsparse as qs
from qsparse import _lib


def laplace(rng, shape, outliers=(), big=10.0):
    x = rng.laplace(size=shape).astype(np.float32)
    for c in outliers:
        x[..., c] *= big
    return x


def numpy_hist(x, nbins):
    """The §3 grid from scratch: k = the smallest integer with amax < N 2^k, bins floor(|x|/2^k)."""
    a = np.abs(x[np.isfinite(x)].astype(np.float64))
    amax = a.max()
    _, e = np.frexp(amax)
    k = int(e) - int(np.log2(nbins))
    idx = np.floor(np.ldexp(a, -k)).astype(np.int64)
    return np.bincount(idx, minlength=nbins).astype(np.uint64), k


def pq_entropy_bin(counts, start_bin=128, num_q=128):
    """pytorch-quantization's _compute_amax_entropy loop (calibration.md §5), written here with
    numpy from that description; returns the chosen bin index (amax = index * width)."""
    nbins = len(counts)
    nz = np.nonzero(counts)[0]
    n_used = nz[-1] + 1
    b = counts[:n_used].astype(np.float64).copy()
    b[0] = b[1]
    divs = []
    for i in range(start_bin, n_used + 1):
        p = b[:i].copy()
        p[i - 1] += b[i:].sum()
        dig = np.digitize(np.arange(i), np.linspace(0, i, num_q + 1)) - 1
        sums = np.bincount(dig, weights=b[:i], minlength=num_q)
        cnt = np.bincount(dig, weights=(b[:i] != 0).astype(np.float64), minlength=num_q)
        q = np.where(b[:i] != 0, sums[dig] / np.maximum(cnt[dig], 1), 0.0)
        p, qn = p / p.sum(), q / q.sum()
        m = p > 0
        divs.append(np.inf if np.any(qn[m] == 0) else np.sum(p[m] * np.log(p[m] / qn[m])))
    divs = np.array(divs)
    assert nbins >= n_used
    return start_bin + len(divs) - 1 - int(np.argmin(divs[::-1]))


def test_histogram_matches_numpy_grid():
    rng = np.random.default_rng(0)
    x = laplace(rng, (300, 64), outliers=(3,), big=20.0)
    x[5, 5] = np.nan
    x[7, 1] = -np.inf
    o = qs.Observer("percentile").update(x)
    counts, k = o.histogram()
    want, wk = numpy_hist(x, 2048)
    assert k == wk
    np.testing.assert_array_equal(counts, want)
    assert o.nan_count == 1 and o.inf_count == 1 and o.count == x.size - 2


@pytest.mark.parametrize("method", ["minmax", "percentile", "entropy", "mse"])
def test_merge_exact_million_samples(method):
    rng = np.random.default_rng(1)
    x = laplace(rng, (1000, 1000), outliers=(10, 500), big=30.0)
    whole = qs.Observer(method).update(x)
    cut = 123457  # uneven shards, different batch sizes, merged in both orders
    flat = x.reshape(-1)
    a, b = qs.Observer(method), qs.Observer(method)
    for s in range(0, cut, 50000):
        a.update(flat[s:min(s + 50000, cut)])
    for s in range(cut, flat.size, 333333):
        b.update(flat[s:s + 333333])
    ab = qs.Observer(method).merge(a).merge(b)
    ba = qs.Observer(method).merge(b).merge(a)
    assert ab.to_bytes() == whole.to_bytes()
    assert ba.to_bytes() == whole.to_bytes()
    assert ab.amax() == whole.amax()
    assert a.to_bytes() != whole.to_bytes()  # the comparison can fail


def test_entropy_reproduces_tensorrt_algorithm():
    rng = np.random.default_rng(2)
    for shape, outliers, big in (((4096, 64), (3,), 8.0), ((2000, 100), (), 1.0)):
        x = laplace(rng, shape, outliers=outliers, big=big)
        o = qs.Observer("entropy").update(x)
        counts, k = o.histogram()
        want = np.ldexp(np.float64(pq_entropy_bin(counts)), k)
        assert o.amax() == np.float32(want)


def test_percentile_rule():
    rng = np.random.default_rng(3)
    x = laplace(rng, (500, 80))
    for p in (99.0, 99.9, 99.99, 100.0):
        o = qs.Observer("percentile", percentile=p).update(x)
        counts, k = o.histogram()
        cum = np.cumsum(counts.astype(np.float64))
        idx = int(np.argmax(cum / cum[-1] >= p / 100.0))
        assert o.amax() == np.float32(np.ldexp(float(idx), k))


def test_serialization_roundtrip_and_corruption():
    rng = np.random.default_rng(4)
    x = laplace(rng, (50, 40))
    for method in ("minmax", "moving_average", "percentile", "entropy", "mse"):
        o = qs.Observer(method, num_bins=64).update(x).update(x[:7])
        b = o.to_bytes()
        assert b[:4] == b"QSOB" and b[4:8] == (1).to_bytes(4, "little")
        o2 = qs.Observer.from_bytes(b)
        assert o2.to_bytes() == b and o2.amax() == o.amax() and o2.method == method
        assert pickle.loads(pickle.dumps(o)).to_bytes() == b
        for i in range(0, len(b), 7):
            bad = bytearray(b)
            bad[i] ^= 0x40
            with pytest.raises(qs.QsparseError) as e:
                qs.Observer.from_bytes(bytes(bad))
            assert e.value.status in (_lib.QS_ERR_BAD_DATA, _lib.QS_ERR_UNSUPPORTED)
        for n in (0, 10, 71, len(b) - 1):
            with pytest.raises(qs.QsparseError) as e:
                qs.Observer.from_bytes(b[:n])
            assert e.value.status == _lib.QS_ERR_BAD_DATA


def test_per_channel():
    rng = np.random.default_rng(5)
    x = laplace(rng, (256, 12), outliers=(2,), big=50.0)
    o = qs.Observer("minmax", axis=-1).update(x[:100]).update(x[100:])
    np.testing.assert_array_equal(o.amax(), np.abs(x).max(axis=0))
    lo, hi = o.range()
    np.testing.assert_array_equal(lo, x.min(axis=0))
    np.testing.assert_array_equal(hi, x.max(axis=0))
    # rows as channels: axis=0 of the same data is the per-row range
    r = qs.Observer("minmax", axis=0).update(x)
    np.testing.assert_array_equal(r.amax(), np.abs(x).max(axis=1))
    # each channel's histogram observer equals a per-tensor observer of that column
    e = qs.Observer("entropy", axis=1).update(x)
    per = [qs.Observer("entropy").update(np.ascontiguousarray(x[:, c])).amax() for c in range(12)]
    np.testing.assert_array_equal(e.amax(), np.array(per, np.float32))
    # channel counts must agree across updates
    with pytest.raises(qs.QsparseError):
        o.update(x[:, :5])


def test_nonfinite_ignored_and_counted():
    rng = np.random.default_rng(6)
    x = laplace(rng, (100, 10))
    y = x.copy()
    y[::7, 3] = np.nan
    y[::11, 4] = np.inf
    for method in ("minmax", "percentile", "entropy", "mse"):
        a = qs.Observer(method).update(y)
        b = qs.Observer(method).update(y[np.isfinite(y)])
        assert a.amax() == b.amax() and np.isfinite(a.amax())
        assert a.nan_count == 15 and a.inf_count == 10


def test_moving_average_and_merge_refused():
    o = qs.Observer("moving_average", averaging_constant=0.5)
    o.update(np.array([1.0, -1.0], np.float32)).update(np.array([3.0, -3.0], np.float32))
    assert o.range() == (-2.0, 2.0)
    with pytest.raises(qs.QsparseError) as e:
        o.merge(qs.Observer("moving_average", averaging_constant=0.5))
    assert e.value.status == _lib.QS_ERR_UNSUPPORTED


def test_targets_and_quantize():
    x = np.array([[-1.0, 3.0, 0.5, 2.9]], np.float32)
    o = qs.Observer("minmax").update(x)
    assert o.qparams("int8") == (np.float32(3.0) / np.float32(127.0), 0)
    assert o.qparams("fp8_e4m3")[0] == np.float32(3.0) / np.float32(448.0)
    assert o.qparams("nvfp4")[0] == np.float32(3.0) / np.float32(2688.0)
    s, z = o.qparams("int8_asym")
    assert s == np.float32(4.0) / np.float32(255.0) and z == -64
    codes, scale, zp = o.quantize(x, "int8")
    mul = np.float32(127.0) / np.float32(3.0)
    np.testing.assert_array_equal(codes, np.clip(np.rint(x * mul), -127, 127).astype(np.int8))
    assert zp is None and scale == np.float32(3.0) / np.float32(127.0)
    # per channel along the last axis of a 3-D activation
    rng = np.random.default_rng(7)
    a = laplace(rng, (4, 30, 6))
    pc = qs.Observer("minmax", axis=-1).update(a)
    codes, scale, _ = pc.quantize(a, "int8")
    am = np.abs(a).max(axis=(0, 1))
    want = np.clip(np.rint(a * (np.float32(127.0) / am)), -127, 127).astype(np.int8)
    np.testing.assert_array_equal(codes, want)
    np.testing.assert_array_equal(scale, am / np.float32(127.0))


def test_half_inputs_match_float32():
    ml_dtypes = pytest.importorskip("ml_dtypes")
    rng = np.random.default_rng(8)
    x = laplace(rng, (64, 32))
    for dt in (np.float16, ml_dtypes.bfloat16):
        h = x.astype(dt)
        a = qs.Observer("entropy").update(h)
        b = qs.Observer("entropy").update(h.astype(np.float32))
        assert a.to_bytes() == b.to_bytes()


def test_sqnr_on_outlier_channels(capsys):
    """The issue's acceptance figures: per-tensor INT8 SQNR of each method (printed)."""
    rng = np.random.default_rng(9)
    x = laplace(rng, (512, 512), outliers=(5, 100, 300, 400), big=4.0)
    res = {}
    for m in ("minmax", "percentile", "entropy", "mse"):
        o = qs.Observer(m).update(x)
        codes, scale, _ = o.quantize(x, "int8")
        err = codes.astype(np.float64) * scale - x
        res[m] = 10 * np.log10(np.sum(x.astype(np.float64) ** 2) / np.sum(err ** 2))
    with capsys.disabled():
        print(" ".join(f"{m}={v:.2f}dB" for m, v in res.items()))
    assert res["percentile"] > res["minmax"] and res["mse"] > res["minmax"]


def test_bad_arguments():
    with pytest.raises(ValueError):
        qs.Observer("kl")
    with pytest.raises(qs.QsparseError):
        qs.Observer("entropy", num_bins=1000)
    with pytest.raises(ValueError):
        qs.Observer("minmax").update([1.0, 2.0])
    with pytest.raises(ValueError):
        qs.Observer.from_bytes("QSOB")


def _fnv1a64(data):
    h = 0xCBF29CE484222325
    for byte in data:
        h = ((h ^ byte) * 0x100000001B3) & 0xFFFFFFFFFFFFFFFF
    return h


def test_search_bin_bound():
    """Entropy and MSE searches are quadratic in the bin count: more than 4096 bins is refused at
    creation and in a byte string (a valid percentile state with 8192 bins whose method field was
    rewritten to entropy / MSE, checksum resealed), while percentile keeps 2**20."""
    for method in ("entropy", "mse"):
        with pytest.raises(qs.QsparseError, match="at most 4096 bins") as e:
            qs.Observer(method, num_bins=8192)
        assert e.value.status == _lib.QS_ERR_INVALID_ARG
    qs.Observer("percentile", num_bins=2**20)
    x = np.linspace(-3.0, 3.0, 2 * 64, dtype=np.float32).reshape(2, 64)
    b = bytearray(qs.Observer("percentile", axis=0, num_bins=8192).update(x).to_bytes())
    assert int.from_bytes(b[12:16], "little") == 3  # QS_OBSERVER_PERCENTILE
    for code in (4, 5):  # QS_OBSERVER_ENTROPY, QS_OBSERVER_MSE
        b[12:16] = code.to_bytes(4, "little")
        b[-8:] = _fnv1a64(b[:-8]).to_bytes(8, "little")
        with pytest.raises(qs.QsparseError, match="at most 4096 bins") as e:
            qs.Observer.from_bytes(bytes(b))
        assert e.value.status == _lib.QS_ERR_BAD_DATA


def test_search_at_max_bins_finishes():
    """Per-channel entropy and FP8 MSE (the slowest fake quantizer) at 4096 bins with every bin
    filled and the first candidate at bin 1: the worst case the bound allows, which only has to
    finish. Channel 0 holds one value per bin centre, so entropy's last candidate matches P
    exactly (KL 0) and the result is the whole range, 4096."""
    x = np.empty((2, 4096), np.float32)
    x[0] = np.arange(4096, dtype=np.float32) + 0.5
    x[1] = np.random.default_rng(8).uniform(0.0, 4096.0, 4096).astype(np.float32)
    ent = qs.Observer("entropy", axis=0, num_bins=4096, start_bin=1, num_levels=1).update(x)
    a = ent.amax()
    assert a[0] == 4096.0 and 0.0 < a[1] <= 4096.0
    mse = qs.Observer("mse", axis=0, num_bins=4096, start_bin=1, target="fp8_e4m3").update(x)
    assert all(0.0 < v <= 4096.0 for v in mse.amax())
