# SPDX-License-Identifier: MIT
"""qs.recommend and `qsparse recommend`: the figures equal direct measurements with the binding
(quantize, matmul, numpy error), the ranking follows the objective, and the tool ranks the
candidates of a model file's linear layers (embeddings and norms left out)."""

import json
import subprocess

import numpy as np
import pytest

import qsparse as qs

FAST = dict(probe_seconds=0.001, gemm_rows=16)


def _data(seed=3):
    rng = np.random.default_rng(seed)
    return ((rng.standard_normal((40, 96)) * 0.05).astype(np.float32),
            rng.standard_normal((5, 96)).astype(np.float32))


def test_errors_and_sizes_match_direct_measurement():
    w, x = _data()
    rows = qs.recommend(w, x, max_error=0.05, **FAST)
    assert [r["rank"] for r in rows] == list(range(1, len(rows) + 1))
    assert len(rows) == 14  # 15 candidates, less int8 g128 (128 does not divide K = 96)
    assert "int8 g128 asym" not in [r["label"] for r in rows]
    y = qs.matmul(x, w)
    checked = 0
    for r in rows:
        if r["label"] == "nf4 b64":
            q = qs.quantize(w, "nf4", blocksize=64)
        elif r["label"] == "mxfp8":
            q = qs.quantize(w, "mxfp8")
        elif r["label"] == "int8 row / int8 act":
            q = qs.quantize(w, "int8")
        else:
            continue
        act = "int8" if r["int8_activations"] else "f32"
        yq = qs.matmul(x, q, activations=act)
        err = np.linalg.norm((yq - y).astype(np.float64)) / np.linalg.norm(y.astype(np.float64))
        assert r["error"] == pytest.approx(err, rel=1e-6)
        planes = sum(a.nbytes for a in (q.data, q.absmax, q.scale, q.zero_point,
                                        q.nested_absmax) if a is not None)
        assert r["bytes"] == planes
        assert r["bits_per_weight"] == pytest.approx(planes * 8 / w.size)
        checked += 1
    assert checked == 3
    within = [r["within_error"] for r in rows]
    assert within == sorted(within, reverse=True)  # every candidate within the bound first
    assert all(r["within_error"] == (r["error"] <= 0.05) for r in rows)


def test_size_objective_and_no_sparsity():
    w, _ = _data(4)
    rows = qs.recommend(w, objective="size", max_error=1.0, sparse24=False, **FAST)
    bits = [r["bits_per_weight"] for r in rows]
    assert bits == sorted(bits) and not any(r["sparse24"] for r in rows)
    assert rows[0]["label"] in ("nf4 b64 + dq", "mxfp4")  # the smallest forms: 4.13, 4.25 bits


def test_bad_arguments():
    w, x = _data()
    with pytest.raises(ValueError):
        qs.recommend(w, x[:, :5])
    with pytest.raises(ValueError):
        qs.recommend(w, objective="fast")
    with pytest.raises(ValueError):
        qs.recommend(w[0])
    with pytest.raises(ValueError):
        qs.recommend(w, max_error=-1.0)
    bad = w.copy()
    bad[1, 2] = np.nan
    with pytest.raises(qs.QsparseError):
        qs.recommend(bad)


def test_tool_recommend(tool, model_file):
    path, tensors = model_file
    proc = subprocess.run([tool, "recommend", str(path), "--json", "--layers", "2",
                           "--max-error", "0.2"], capture_output=True, text=True, timeout=300)
    assert proc.returncode == 0, proc.stderr
    doc = json.loads(proc.stdout)
    assert doc["layers"] == 2 and doc["isa"] == qs.isa()
    labels = [c["label"] for c in doc["candidates"]]
    assert "nf4 b64" in labels and "2:4 + nf4" in labels
    assert [c["rank"] for c in doc["candidates"]] == list(range(1, len(labels) + 1))
    words = subprocess.run([tool, "recommend", str(path.parent), "--layers", "1"],
                           capture_output=True, text=True, timeout=300)
    assert words.returncode == 0 and "nf4 b64" in words.stdout and "layers sampled" in words.stdout
    # the embedding and the norms are never sampled
    assert "embeddings" not in words.stderr and "LayerNorm" not in words.stderr
    bad = subprocess.run([tool, "recommend", str(path), "--objective", "fast"],
                         capture_output=True, text=True)
    assert bad.returncode == 2
    missing = subprocess.run([tool, "recommend", str(path.parent / "nope.safetensors")],
                             capture_output=True, text=True)
    assert missing.returncode == 1 and "qsparse recommend:" in missing.stderr
