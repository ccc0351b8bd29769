# SPDX-License-Identifier: MIT
"""`qsparse quantize` on model folders, without any loader installed: a sharded folder (shards +
model.safetensors.index.json) in, a folder out with the shards and index rewritten, config.json's
quantization_config, the other files copied; the compressed-tensors keys and scale conventions
decoded with the library; --config-out for a single file. test_loaders.py loads such folders in
the real loaders."""

import json
import os

import numpy as np
import pytest

import qsparse as qs
from conftest import read_raw, tiny_model

safetensors_numpy = pytest.importorskip("safetensors.numpy")

Q = "encoder.layer.0.attention.self.query"


def sharded(tmp_path, dtype=np.float32):
    """tiny_model() split over two shards with an index, a config and a tokenizer file."""
    d = tmp_path / "model"
    (d / "sub").mkdir(parents=True)
    t = {k: v for k, v in tiny_model(dtype).items() if k != "encoder.layer.1.odd.weight"}
    names = sorted(t)
    parts = {"model-00001-of-00002.safetensors": names[: len(names) // 2],
             "model-00002-of-00002.safetensors": names[len(names) // 2:]}
    for shard, keys in parts.items():
        safetensors_numpy.save_file({k: t[k] for k in keys}, str(d / shard))
    (d / "model.safetensors.index.json").write_text(json.dumps(
        {"metadata": {"total_size": 1}, "weight_map": {k: s for s, ks in parts.items()
                                                       for k in ks}}))
    (d / "config.json").write_text(json.dumps({"model_type": "bert", "hidden_size": 32}))
    (d / "tokenizer.json").write_text('{"version": "1.0"}')
    (d / "sub" / "extra.json").write_text("{}")
    (d / "pytorch_model.bin").write_bytes(b"float weights, not copied")
    return d, t


def test_sharded_folder_nf4(run_tool, tmp_path):
    src, t = sharded(tmp_path)
    out = tmp_path / "out"
    r = run_tool("quantize", src, "-o", out, "--format", "nf4", check=0)
    assert "bitsandbytes layout" in r.stdout
    assert sorted(os.listdir(out)) == sorted(["config.json", "model-00001-of-00002.safetensors",
                                              "model-00002-of-00002.safetensors",
                                              "model.safetensors.index.json", "sub",
                                              "tokenizer.json"])
    assert (out / "sub" / "extra.json").read_text() == "{}"
    assert (out / "tokenizer.json").read_bytes() == (src / "tokenizer.json").read_bytes()
    cfg = json.loads((out / "config.json").read_text())
    assert cfg["model_type"] == "bert" and cfg["hidden_size"] == 32
    qc = cfg["quantization_config"]
    assert qc["quant_method"] == "bitsandbytes" and qc["bnb_4bit_quant_type"] == "nf4"
    assert qc["llm_int8_skip_modules"] == ["embeddings.word_embeddings"]
    # the index names every output tensor and its shard, and the bytes they hold
    idx = json.loads((out / "model.safetensors.index.json").read_text())
    found, total = {}, 0
    for shard in ("model-00001-of-00002.safetensors", "model-00002-of-00002.safetensors"):
        raw = read_raw(out / shard)
        for k, v in raw.items():
            found[k] = shard
            total += len(v[2])
    assert idx["weight_map"] == found and idx["metadata"]["total_size"] == total
    assert Q + ".weight.quant_state.bitsandbytes__nf4" in found
    # the quantized weight decodes to the library's result on the original
    raw = read_raw(out / found[Q + ".weight"])
    q = qs.QTensor("nf4", t[Q + ".weight"].shape, np.frombuffer(raw[Q + ".weight"][2], np.uint8),
                   absmax=np.frombuffer(raw[Q + ".weight.absmax"][2], np.float32))
    assert qs.dequantize(q).tobytes() == \
        qs.dequantize(qs.quantize(t[Q + ".weight"], "nf4")).tobytes()
    # an input that is quantized already is refused
    r = run_tool("quantize", out, "-o", tmp_path / "again", "--format", "nf4", check=1)
    assert "already has a quantization_config" in r.stderr


def test_compressed_tensors_conventions(run_tool, tmp_path):
    src, t = sharded(tmp_path)
    w = t[Q + ".weight"]
    for fmt, extra in (("nvfp4", []), ("int8", ["--granularity", "group", "--blocksize", "16"]),
                       ("mxfp4", []), ("fp8_e4m3", [])):
        out = tmp_path / fmt
        run_tool("quantize", src, "-o", out, "--format", fmt, *extra, "-q", check=0)
        idx = json.loads((out / "model.safetensors.index.json").read_text())
        raw = {}
        for shard in set(idx["weight_map"].values()):
            raw.update(read_raw(out / shard))
        assert Q + ".weight" not in raw or fmt in ("fp8_e4m3",)
        if fmt == "nvfp4":
            ref = qs.quantize(w, "nvfp4")
            assert raw[Q + ".weight_packed"][:2] == ("U8", [32, 16])
            assert raw[Q + ".weight_scale"][:2] == ("F8_E4M3", [32, 2])
            gs = np.frombuffer(raw[Q + ".weight_global_scale"][2], np.float32)
            assert raw[Q + ".weight_global_scale"][1] == [1]
            assert gs[0] == np.float32(1) / np.float32(ref.global_scale)  # the reciprocal
            assert raw[Q + ".weight_packed"][2] == np.asarray(ref.data).tobytes()
        elif fmt == "int8":
            ref = qs.quantize(w, "int8", group_size=16)
            assert raw[Q + ".weight_packed"][:2] == ("I32", [32, 8])
            codes = np.frombuffer(raw[Q + ".weight_packed"][2], np.uint8).astype(np.int16) - 128
            assert np.array_equal(codes, np.asarray(ref.data).reshape(-1))
            assert raw[Q + ".weight_scale"][:2] == ("F32", [32, 2])
            assert raw[Q + ".weight_shape"][2] == np.array([32, 32], np.int64).tobytes()
        elif fmt == "mxfp4":
            assert raw[Q + ".weight_packed"][:2] == ("U8", [32, 16])
            assert raw[Q + ".weight_scale"][:2] == ("U8", [32, 1])
        else:
            assert raw[Q + ".weight"][:2] == ("F8_E4M3", [32, 32])
            assert raw[Q + ".weight_scale"][:2] == ("F32", [1])
        qc = json.loads((out / "config.json").read_text())["quantization_config"]
        assert qc["quant_method"] == "compressed-tensors"
        assert qc["ignore"] == ["embeddings.word_embeddings"]


def test_single_file_config_out(run_tool, model_file, tmp_path):
    src, tensors = model_file
    out = tmp_path / "o.safetensors"
    cfg = tmp_path / "q.json"
    run_tool("quantize", src, "-o", out, "--format", "nf4", "--layout", "bitsandbytes",
             "--double-quant", "--config-out", cfg, "-q", check=0)
    qc = json.loads(cfg.read_text())
    assert qc["bnb_4bit_use_double_quant"] is True and qc["load_in_4bit"] is True
    assert qc["llm_int8_skip_modules"] == ["embeddings.word_embeddings"]
    r = run_tool("quantize", src, "-o", out, "--force", "--format", "mxfp8", "--layout", "ct",
                 "--config-out", "-", check=0)
    assert json.loads(r.stdout)["format"] == "mxfp8-quantized"
    assert "layer" in r.stderr  # the table goes to stderr when stdout holds the config
    r = run_tool("quantize", src, "-o", out, "--force", "--format", "nf4", "--config-out", "-",
                 check=1)
    assert "no loader config" in r.stderr


def test_modelopt_needs_every_module_amax(run_tool, tmp_path):
    src, t = sharded(tmp_path)
    amax = tmp_path / "a.json"
    amax.write_text(json.dumps({Q: 3.0}))
    r = run_tool("quantize", src, "-o", tmp_path / "o", "--format", "fp8_e4m3", "--layout",
                 "modelopt", "--act-amax", amax, check=1)
    assert "--act-amax has no positive finite amax for module" in r.stderr
    assert not (tmp_path / "o").exists()
    assert [n for n in os.listdir(tmp_path) if "qsparse-tmp" in n] == []


def test_embeddings_are_refused_for_loader_layouts(run_tool, tmp_path):
    """No loader layout replaces an embedding table: selecting one is an error there (and
    allowed in the tool's own layout)."""
    src, t = sharded(tmp_path)
    r = run_tool("quantize", src, "-o", tmp_path / "o", "--format", "nf4", "--exclude", "LayerNorm",
                 check=1)
    assert "embeddings.word_embeddings.weight is an embedding" in r.stderr
    assert not (tmp_path / "o").exists()
