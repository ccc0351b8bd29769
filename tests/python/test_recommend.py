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


def _folder(tmp_path, model_file):
    path, tensors = model_file
    d = tmp_path / "model"
    d.mkdir()
    (d / "model.safetensors").write_bytes(path.read_bytes())
    (d / "config.json").write_text('{"model_type": "bert"}')
    return d, tensors


LINEAR = ["encoder.layer.0.attention.self.query.weight", "encoder.layer.0.intermediate.dense.weight",
          "encoder.layer.0.output.dense.weight", "encoder.layer.1.attention.self.query.weight"]


def _recommend(tool, *args, env=None):
    proc = subprocess.run([tool, "recommend", *map(str, args)], capture_output=True, text=True,
                          timeout=300, env=env)
    assert proc.returncode == 0, proc.stderr
    return proc


def test_tool_recommend(tool, model_file, tmp_path):
    """Every row is something `qsparse quantize` writes, with the command that writes it (run
    here); the error is measured on the model's own weights; the speed is the median of
    --repeats runs with a stability flag."""
    d, tensors = _folder(tmp_path, model_file)
    doc = json.loads(_recommend(tool, d, "--json", "--layers", "2", "--repeats", "2",
                                "--max-error", "0.2").stdout)
    assert doc["layers"] == 2 and doc["repeats"] == 2 and doc["isa"] == qs.isa()
    assert doc["error_on"] == "weights"
    labels = [c["label"] for c in doc["candidates"]]
    assert "nf4 b64" in labels and [c["rank"] for c in doc["candidates"]] == \
        list(range(1, len(labels) + 1))
    # nothing that quantize cannot write: no int8 activations chosen at run time (bitsandbytes'
    # LLM.int8 computes them itself), no asymmetric int8, no fp8_e5m2 in a folder
    left = {c["label"]: c["why"] for c in doc["left_out"]}
    assert "fp8 e5m2" in left and "llm.int8" in left and not set(left) & set(labels)
    assert not [x for x in labels if "asym" in x or ("int8 act" in x and "llm" not in x)]
    for c in doc["candidates"]:
        assert isinstance(c["stable"], bool) and c["spread"] >= 1.0
        cmd = c["command"].split()
        assert cmd[:3] == ["qsparse", "quantize", str(d)] and cmd[3:5] == ["-o", "OUT_DIR"]
        out = tmp_path / ("out-" + str(c["rank"]))
        r = subprocess.run([tool, *cmd[1:3], "-o", str(out), *cmd[5:], "-q"],
                           capture_output=True, text=True, timeout=300)
        assert r.returncode == 0, (c["command"], r.stderr)
        assert (out / "config.json").exists()
    # the error of the decoded weight, on the model's own weights (the 2 sampled layers)
    nf4 = next(c for c in doc["candidates"] if c["label"] == "nf4 b64")
    sampled = [LINEAR[0], LINEAR[-1]]
    want = max(np.linalg.norm(qs.dequantize(qs.quantize(tensors[k], "nf4")) - tensors[k]) /
               np.linalg.norm(tensors[k]) for k in sampled)
    assert nf4["error_max"] == pytest.approx(want, rel=1e-4)
    words = _recommend(tool, d, "--layers", "1", "--repeats", "1")
    assert "nf4 b64" in words.stdout and "layers sampled" in words.stdout
    assert "qsparse quantize " in words.stdout and "not written by the tool:" in words.stdout
    # the embedding and the norms are never sampled
    assert "embeddings" not in words.stderr and "LayerNorm" not in words.stderr
    bad = subprocess.run([tool, "recommend", str(d), "--objective", "fast"],
                         capture_output=True, text=True)
    assert bad.returncode == 2
    missing = subprocess.run([tool, "recommend", str(d / "nope.safetensors")],
                             capture_output=True, text=True)
    assert missing.returncode == 1 and "qsparse recommend:" in missing.stderr


def test_tool_recommend_on_calibration_activations(tool, model_file, tmp_path):
    from safetensors.numpy import save_file

    path, tensors = model_file
    rng = np.random.default_rng(3)
    x = {k: rng.standard_normal((40, tensors[k].shape[1])).astype(np.float32) for k in LINEAR}
    calib = tmp_path / "calib.safetensors"
    save_file({k[:-len(".weight")] + ".inputs": v for k, v in x.items()}, str(calib))
    doc = json.loads(_recommend(tool, path, "--json", "--layers", "2", "--repeats", "1",
                                "--calib", calib).stdout)
    assert doc["error_on"] == "activations"
    nf4 = next(c for c in doc["candidates"] if c["label"] == "nf4 b64")
    err = []
    for k in (LINEAR[0], LINEAR[-1]):
        y = x[k].astype(np.float64) @ tensors[k].T.astype(np.float64)
        yq = x[k].astype(np.float64) @ qs.dequantize(qs.quantize(tensors[k], "nf4")).T
        err.append(np.linalg.norm(yq - y) / np.linalg.norm(y))
    assert nf4["error_max"] == pytest.approx(max(err), rel=1e-3)
    # single-file commands write a single file (the tool's own keys, fp8_e5m2 included)
    assert any(c["label"] == "fp8 e5m2" for c in doc["candidates"])
    assert all(c["command"].split()[4] == "OUT.safetensors" for c in doc["candidates"])
    # a layer without activations in the file is an error naming the key
    save_file({"other.inputs": x[LINEAR[0]]}, str(calib))
    r = subprocess.run([tool, "recommend", str(path), "--calib", str(calib), "--layers", "1"],
                       capture_output=True, text=True, timeout=300)
    assert r.returncode == 1 and ".inputs" in r.stderr


def test_tool_recommend_flags_a_busy_machine(tool, model_file):
    import os

    path, _ = model_file
    env = dict(os.environ, QSPARSE_TOOL_TEST_LOADAVG="64")
    words = _recommend(tool, path, "--layers", "1", "--repeats", "1", env=env).stdout
    assert "warning: the machine is busy" in words and "not reliable" in words
    doc = json.loads(_recommend(tool, path, "--json", "--layers", "1", "--repeats", "1",
                                env=env).stdout)
    assert doc["busy"] is True and doc["load_average"] == 64
