# SPDX-License-Identifier: MIT
"""examples/dask_quantize.py on a local Dask cluster (worker processes) and a small synthetic
sharded model: the parts quantized by the workers and joined by merge-index are byte for byte
the folder of one `qsparse quantize` run, and the observers computed per worker and merged are
bit for bit one observer fed every batch."""

import json
import os
import subprocess
import sys

import numpy as np
import pytest

from conftest import ROOT, _find_tool
from synth_model import write_model

distributed = pytest.importorskip("dask.distributed")

EXAMPLES = os.path.join(ROOT, "examples")
sys.path.insert(0, EXAMPLES)
import dask_quantize  # noqa: E402


def tree(d):
    out = {}
    for root, _, files in os.walk(d):
        for f in files:
            p = os.path.join(root, f)
            out[os.path.relpath(p, d)] = open(p, "rb").read()
    return out


@pytest.fixture
def worker_env(monkeypatch):
    """The worker processes import the source tree's package (when QSPARSE_LIB is set) and the
    example module, as this process does."""
    paths = [EXAMPLES]
    if os.environ.get("QSPARSE_LIB"):
        paths.insert(0, os.path.join(ROOT, "python"))
    monkeypatch.setenv("PYTHONPATH", os.pathsep.join(paths + [os.environ.get("PYTHONPATH", "")]))
    tool = _find_tool()
    if tool is None:
        pytest.skip("the qsparse tool was not found")
    monkeypatch.setenv("QSPARSE_TOOL", tool)
    return tool


@pytest.fixture
def model(tmp_path):
    d = tmp_path / "model"
    write_model(d, layers=3, hidden=128, intermediate=256, vocab=200, shards=3, dtype="bf16")
    return d


def test_example_equals_one_run(tmp_path, model, worker_env):
    """The script as a user runs it (nvfp4, modelopt: the merged observers give its input
    scales), then one run of the tool with the same amax file."""
    out = tmp_path / "out"
    p = subprocess.run([sys.executable, os.path.join(EXAMPLES, "dask_quantize.py"), str(model),
                        str(out), "--format", "nvfp4", "--layout", "modelopt", "--parts", "2",
                        "--workers", "2", "--batches", "4", "--tokens", "16"],
                       capture_output=True, text=True, timeout=600)
    assert p.returncode == 0, p.stderr
    assert "3 shards from 2 parts" in p.stdout and "21 modules calibrated" in p.stdout
    amax = json.load(open(str(out) + ".act_amax.json"))
    assert len(amax) == 21 and all(v > 0 for v in amax.values())
    assert not os.path.exists(str(out) + ".parts")
    one = tmp_path / "one"
    subprocess.run([worker_env, "quantize", str(model), "-o", str(one), "--format", "nvfp4",
                    "--layout", "modelopt", "--act-amax", str(out) + ".act_amax.json",
                    "--quiet"], check=True, timeout=300)
    a, b = tree(out), tree(one)
    assert sorted(a) == sorted(b) and "hf_quant_config.json" in a
    for k in a:
        assert a[k] == b[k], k


def test_merged_observers_equal_one_observer(tmp_path, model, worker_env):
    """Three workers, six batches dealt round robin: the merged observers serialize to the bytes
    of observers fed all six batches in order by one worker; the example's forward pass is
    checked against a plain numpy one on one layer. The single observer runs in a worker, not in
    this process, because the forward pass's float32 matmuls are OpenBLAS sgemm, whose bits depend
    on its thread count on some CPUs (AVX2-only Zen: 1 and 2 threads differ), and dask's workers
    run it with one thread."""
    import qsparse as qs

    cluster = distributed.LocalCluster(n_workers=3, threads_per_worker=1, processes=True,
                                       dashboard_address=None)
    with cluster, distributed.Client(cluster) as client:
        merged = dask_quantize.run(client, str(model), str(tmp_path / "out"), "nf4",
                                   batches=6, tokens=16)
        single = client.submit(dask_quantize.observe, str(model), range(6), 16, "percentile",
                               pure=False).result()
    assert sorted(merged) == sorted(single) and len(single) == 21
    for m in single:
        assert merged[m].to_bytes() == single[m].to_bytes(), m
        assert merged[m].count == single[m].count == 6 * 16 * (256 if "down" in m else 128)
    # the inputs of layer 0's q_proj are the RMS-normed embeddings of the batch's tokens
    x = dask_quantize.layer_inputs(str(model), 2, 16)["model.layers.0.self_attn.q_proj"]
    t = dask_quantize._tensors(str(model))
    ids = np.random.default_rng(2).integers(0, 200, 16)
    e = dask_quantize._read(t["model.embed_tokens.weight"])[ids].astype(np.float64)
    g = dask_quantize._read(t["model.layers.0.input_layernorm.weight"]).astype(np.float64)
    ref = e / np.sqrt((e * e).mean(-1, keepdims=True) + 1e-5) * g
    np.testing.assert_allclose(x, ref, rtol=1e-5)
    assert isinstance(merged[m], qs.Observer)
