# SPDX-License-Identifier: MIT
"""qs.prune / qs.compress / qs.decompress and the sparse helpers (docs/sparsity.md), checked
against numpy oracles written here: a stable descending sort per group for N:M masks, an
enumeration of the 90 transposable patterns for TILE, w * mask for round trips, and the spec's
hand-worked rows."""

import itertools

import numpy as np
import pytest

import qsparse as qs
from qsparse import sparse as sp

try:
    import ml_dtypes

    BF16 = np.dtype(ml_dtypes.bfloat16)
except ImportError:  # pragma: no cover
    BF16 = None


def rank_key(s):
    """Sort key of §2.2: NaN first (either sign), then larger values; ties by index (stable)."""
    s = np.asarray(s, dtype=np.float64)
    return np.where(np.isnan(s), np.inf, s), np.isnan(s)


def oracle_mask(scores, n, m):
    rows, cols = scores.shape
    out = np.zeros(scores.shape, bool)
    for r in range(rows):
        for c in range(0, cols, m):
            g = scores[r, c:c + m].astype(np.float64)
            nan = np.isnan(g)
            # stable sort: by (not NaN, -value); NaNs tie with each other, -0 == +0
            vals = np.where(nan, 0.0, g) + 0.0
            order = sorted(range(m), key=lambda i: (not nan[i], -vals[i]))
            out[r, c + np.array(order[:n])] = True
    return out


def weights(rng, shape, specials=True):
    w = rng.standard_normal(shape).astype(np.float32)
    if specials:
        flat = w.reshape(-1)
        idx = rng.choice(flat.size, size=max(1, flat.size // 10), replace=False)
        flat[idx] = rng.choice(np.array([0.0, -0.0, np.inf, -np.inf, np.nan, 1.0, -1.0],
                                        np.float32), size=idx.size)
    return w


@pytest.mark.parametrize("pattern", ["1:2", "2:4", "4:8", "3:4", "2:3", "8:16"])
@pytest.mark.parametrize("dt", ["float32", "float16", "bfloat16"])
def test_prune_magnitude_matches_oracle(pattern, dt):
    if dt == "bfloat16" and BF16 is None:
        pytest.skip("ml_dtypes missing")
    n, m = map(int, pattern.split(":"))
    rng = np.random.default_rng(n * 100 + m)
    w = weights(rng, (7, m * 6))
    wd = w.astype({"float32": np.float32, "float16": np.float16, "bfloat16": BF16}[dt])
    mask = qs.prune(wd, pattern)
    assert mask.dtype == np.bool_ and mask.shape == w.shape
    np.testing.assert_array_equal(mask, oracle_mask(np.abs(wd.astype(np.float32)), n, m))
    assert sp.check(mask, pattern) == (True, -1)


def test_prune_axis():
    w = np.random.default_rng(4).standard_normal((32, 12)).astype(np.float32)  # [in, out]
    np.testing.assert_array_equal(qs.prune(w, "2:4", axis=0), qs.prune(w.T.copy(), "2:4").T)


def test_prune_spec_examples():
    # §2.2: scores [+Inf, +Inf, NaN, 0] keep {0, 2}; [+Inf, NaN, NaN, 1] keep {1, 2}
    w = np.array([[np.inf, np.inf, np.nan, 0], [np.inf, np.nan, -np.nan, 1]], np.float32)
    np.testing.assert_array_equal(qs.prune(w, "2:4"), [[1, 0, 1, 0], [0, 1, 1, 0]])
    np.testing.assert_array_equal(qs.prune(np.ones((1, 4), np.float32), "2:4"), [[1, 1, 0, 0]])


def test_prune_wanda():
    rng = np.random.default_rng(3)
    w = rng.standard_normal((16, 64)).astype(np.float32)
    norms = (rng.random(64) * 4).astype(np.float32)
    mask = qs.prune(w, "2:4", method="wanda", act_norm=norms)
    np.testing.assert_array_equal(mask, oracle_mask(np.abs(w) * norms, 2, 4))
    x = rng.standard_normal((300, 64)).astype(np.float32)
    got = sp.activation_norms(x[:100], x[100:])
    np.testing.assert_allclose(got, np.sqrt((x.astype(np.float64) ** 2).sum(0)), rtol=1e-6)
    assert not np.array_equal(mask, qs.prune(w, "2:4"))
    with pytest.raises(ValueError):
        qs.prune(w, "2:4", method="wanda")
    with pytest.raises(qs.QsparseError):
        qs.prune(w, "2:4", method="wanda", act_norm=np.full(64, np.nan, np.float32))


PAIRS = [(0, 1), (0, 2), (0, 3), (1, 2), (1, 3), (2, 3)]
PATTERNS = [p for p in itertools.product(range(6), repeat=4)
            if all(sum(c in PAIRS[i] for i in p) == 2 for c in range(4))]


def tile_oracle(s):
    best, keep = -1.0, None
    for p in PATTERNS:
        total = sum(float(s[r, c]) for r in range(4) for c in PAIRS[p[r]])
        if total > best:
            best, keep = total, p
    out = np.zeros((4, 4), bool)
    for r in range(4):
        out[r, list(PAIRS[keep[r]])] = True
    return out


def test_tile_against_all_90_patterns():
    assert len(PATTERNS) == 90
    rng = np.random.default_rng(11)
    for trial in range(6):
        w = (rng.integers(-2, 3, (8, 12)) if trial % 2 else rng.standard_normal((8, 12)))
        w = w.astype(np.float32)
        mask = qs.prune(w, "2:4", method="tile")
        for a in range(0, 8, 4):
            for b in range(0, 12, 4):
                np.testing.assert_array_equal(mask[a:a + 4, b:b + 4],
                                              tile_oracle(np.abs(w[a:a + 4, b:b + 4])))
        assert sp.check(mask, "2:4", tile=True) == (True, -1)
        assert sp.check(mask.T.copy(), "2:4") == (True, -1)  # W^T is 2:4 too


def test_compress_spec_example_and_round_trip():
    row = np.array([[1, 2, 0, 0, 0, 3, 4, 0, 5, 0, 0, 6, 0, 0, 7, 8]], np.float32)
    s = qs.compress(row)
    np.testing.assert_array_equal(s.values, [[1, 2, 3, 4, 5, 6, 7, 8]])
    assert s.meta.dtype == np.uint16 and s.meta.shape == (1, 1)
    assert int(s.meta[0, 0]) == 0xEC94
    np.testing.assert_array_equal(qs.decompress(s), row)


@pytest.mark.parametrize("dt", ["float32", "float16", "bfloat16"])
@pytest.mark.parametrize("cols", [4, 12, 16, 36, 100, 4100])
def test_round_trip_bit_exact(dt, cols):
    if dt == "bfloat16" and BF16 is None:
        pytest.skip("ml_dtypes missing")
    rng = np.random.default_rng(cols)
    npdt = {"float32": np.float32, "float16": np.float16, "bfloat16": BF16}[dt]
    w = weights(rng, (5, cols)).astype(npdt)
    mask = qs.prune(w, "2:4")
    mask[:, ::7] = False  # groups with fewer than two kept take the fill rule (§3.4)
    s = qs.compress(w, mask)
    assert s.values.dtype == w.dtype and s.values.shape == (5, cols // 2)
    assert s.meta.shape == (5, (cols + 15) // 16)
    want = np.where(mask, w, np.zeros((), npdt))
    got = qs.decompress(s)
    assert got.dtype == w.dtype
    assert got.view(np.uint8).tobytes() == want.view(np.uint8).tobytes()
    # the one-pass prune + compress gives the same bytes as mask then compress
    s2, m2 = sp.prune_compress(w)
    s3 = qs.compress(w, qs.prune(w, "2:4"))
    np.testing.assert_array_equal(m2, qs.prune(w, "2:4"))
    assert s2.values.tobytes() == s3.values.tobytes()
    np.testing.assert_array_equal(s2.meta, s3.meta)


def test_bitmask_interchange():
    rng = np.random.default_rng(9)
    w = rng.standard_normal((6, 20)).astype(np.float32)
    mask = qs.prune(w, "2:4")
    s = qs.compress(w, mask)
    bm = s.to_bitmask()
    np.testing.assert_array_equal(bm, np.packbits(mask, axis=-1, bitorder="little"))
    s2 = sp.Compressed24.from_bitmask(s.values, bm, w.shape)
    np.testing.assert_array_equal(s2.meta, s.meta)
    np.testing.assert_array_equal(qs.decompress(s2), np.where(mask, w, np.float32(0)))
    bm[0, 0] |= 0x0F  # all four kept in the first group
    with pytest.raises(qs.QsparseError):
        sp.Compressed24.from_bitmask(s.values, bm, w.shape)


def test_errors():
    w = np.zeros((2, 6), np.float32)
    with pytest.raises(qs.QsparseError) as e:
        qs.prune(w, "2:4")
    assert e.value.status == -8 and "multiple of M" in str(e.value)
    with pytest.raises(ValueError):
        qs.prune(np.zeros((2, 8), np.float32), "4:4")
    three = np.array([[1, 2, 3, 0]], np.float32)
    with pytest.raises(qs.QsparseError) as e:
        qs.compress(three)
    assert e.value.status == -7
    assert sp.check(three, "2:4") == (False, 0)
    with pytest.raises(qs.QsparseError):
        qs.compress(three, np.array([[1, 1, 0, 1]], bool))
    s = qs.compress(np.array([[1, 2, 0, 0]], np.float32))
    s.meta[0, 0] = 0x5
    with pytest.raises(qs.QsparseError) as e:
        qs.decompress(s)
    assert e.value.status == -7


@pytest.mark.parametrize("fmt", ["nf4", "fp4", "int8", "fp8_e4m3", "mxfp4", "nvfp4"])
def test_sparse_quantized(fmt):
    rng = np.random.default_rng(1)
    w = rng.standard_normal((16, 128)).astype(np.float32)
    s = qs.compress(w, qs.prune(w, "2:4"))
    q = qs.quantize(s, fmt)
    assert isinstance(q, sp.SparseQTensor) and q.format == fmt
    dense = qs.dequantize(q)
    assert dense.shape == w.shape
    # equal to dequantizing the quantized kept values and scattering them back
    vals = qs.dequantize(qs.quantize(s.values, fmt))
    ref = qs.decompress(sp.Compressed24(vals, s.meta, s.shape, "float32"))
    assert dense.tobytes() == ref.tobytes()
    assert np.all(dense[~qs.prune(w, "2:4")] == 0)
    assert sp.quantize_sparse(s, fmt).q.data.tobytes() == q.q.data.tobytes()


def cutlass_offsets(m, ncols, word_bits):
    """PyTorch's scatter offsets of the CUTLASS meta order (docs/sparsity.md §4), in numpy."""
    rows = np.repeat(np.arange(m)[:, None], ncols, 1)
    cols = np.repeat(np.arange(ncols)[None, :], m, 0)
    group, inter = (32, 4) if word_bits == 16 else (16, 2)
    rows = rows // group * group + (rows % 8) * inter + (rows % group) // 8
    tr = ((rows % 2 == 0) & (cols % 2 == 1)).astype(int)
    bl = ((rows % 2 == 1) & (cols % 2 == 0)).astype(int)
    rows, cols = rows + tr - bl, cols - tr + bl
    return (cols // 2 * m * 2 + rows * 2 + cols % 2).reshape(-1)


@pytest.mark.parametrize("word_bits", [16, 32])
def test_cutlass_meta_matches_formula(word_bits):
    rng = np.random.default_rng(word_bits)
    rows, cols = 64, 256
    meta = rng.integers(0, 65536, (rows, cols // 16), dtype=np.uint16)
    words = meta if word_bits == 16 else meta.view(np.uint32)
    want = np.empty(words.size, words.dtype)
    want[cutlass_offsets(rows, words.shape[1], word_bits)] = words.reshape(-1)
    got = sp.meta_to_cutlass(meta, (rows, cols), word_bits)
    assert got.tobytes() == want.tobytes()
    np.testing.assert_array_equal(sp.meta_from_cutlass(got, (rows, cols), word_bits), meta)


def test_srste_and_helpers():
    rng = np.random.default_rng(2)
    w = rng.standard_normal((8, 32)).astype(np.float32)
    g = rng.standard_normal((8, 32)).astype(np.float32)
    wm, go, mask = sp.srste(w, g, "2:4", 1e-2)
    np.testing.assert_array_equal(mask, qs.prune(w, "2:4"))
    np.testing.assert_array_equal(wm, np.where(mask, w, np.float32(0)))
    np.testing.assert_array_equal(go, np.where(mask, g, g + np.float32(1e-2) * w))
    np.testing.assert_array_equal(sp.apply_mask(w, mask), wm)
    assert sp.mask_flips(mask, mask) == 0
    assert sp.mask_flips(mask, ~mask) == mask.size


def test_permutation():
    rng = np.random.default_rng(5)
    w = rng.standard_normal((64, 128)).astype(np.float32)
    perm, before, after = sp.permute(w, escapes=2, seed=1)
    assert sorted(perm.tolist()) == list(range(128))
    assert after > before

    def kept(x):
        return float(np.abs(x[qs.prune(x, "2:4")]).astype(np.float64).sum() /
                     np.abs(x).astype(np.float64).sum())

    assert before == pytest.approx(kept(w), rel=1e-6)
    assert after == pytest.approx(kept(np.ascontiguousarray(w[:, perm])), rel=1e-6)


def test_empty_rows_return_at_once():
    """A checkpoint may declare a 2**40 x 0 tensor: nothing to convert, so every call returns at
    once (the C library used to visit each empty row: hours), with empty results."""
    huge = 2**40
    values = np.zeros((huge, 0), np.float32)
    s = sp.Compressed24.from_bitmask(values, np.zeros((huge, 0), np.uint8), shape=(huge, 0))
    assert s.meta.shape == (huge, 0) and s.shape == (huge, 0)
    assert s.to_bitmask().shape == (huge, 0)
    assert s.to_cutlass_meta(16).size == 0 and s.to_cutlass_meta(32).size == 0
    assert sp.meta_from_cutlass(s.meta, (huge, 0)).shape == (huge, 0)
    assert qs.decompress(s).shape == (huge, 0)
    assert qs.sparse.check(values) == (True, -1)
    assert qs.sparse.check(np.zeros((huge, 0), bool), tile=True) == (True, -1)
    assert qs.prune(values).shape == (huge, 0)
    assert qs.prune(values, method="tile").shape == (huge, 0)
    perm, before, after = qs.sparse.permute(values)
    assert perm.size == 0 and before == after == 1.0
    # 0 rows: the permutation search has no score, so it returns the identity at once
    perm, before, after = qs.sparse.permute(np.zeros((0, 2**16), np.float32), escapes=3)
    assert np.array_equal(perm, np.arange(2**16)) and before == after == 1.0


def test_big_endian_arrays_mean_their_values():
    """Arrays in non-native byte order hold the same values: weights, norms, values and meta words
    are converted (a copy), never misread as swapped bytes nor refused as another dtype."""
    rng = np.random.default_rng(12)
    w = rng.standard_normal((32, 64)).astype(np.float32)
    norms = rng.uniform(0.5, 2.0, 64).astype(np.float32)
    np.testing.assert_array_equal(qs.prune(w.astype(">f4"), "2:4", method="wanda",
                                           act_norm=norms.astype(">f4")),
                                  qs.prune(w, "2:4", method="wanda", act_norm=norms))
    s = qs.compress(w, qs.prune(w))
    sb = qs.compress(w.astype(">f4"), qs.prune(w))
    assert sb.values.tobytes() == s.values.tobytes() and sb.meta.tobytes() == s.meta.tobytes()
    big = sp.Compressed24(s.values.astype(">f4"), s.meta.astype(">u2"), s.shape, s.dtype)
    assert qs.decompress(big).tobytes() == qs.decompress(s).tobytes()
    assert big.to_bitmask().tobytes() == s.to_bitmask().tobytes()
    for word_bits in (16, 32):
        c = sp.meta_to_cutlass(s.meta.astype(">u2"), w.shape, word_bits)
        assert c.tobytes() == sp.meta_to_cutlass(s.meta, w.shape, word_bits).tobytes()
        swapped = c.astype(">u2" if word_bits == 16 else ">i4")
        np.testing.assert_array_equal(sp.meta_from_cutlass(swapped, w.shape, word_bits), s.meta)
