# SPDX-License-Identifier: MIT
"""Streaming quantization of `qsparse quantize` (tools/cmd_quantize.c): the heap peak of --stats
against the largest tensor, on a 230 MB model and across model sizes; the per-layer error table
measured a chunk of rows at a time, against numpy; `--shard I/N` parts joined by `qsparse
merge-index` into the bytes of one run, and everything merge-index refuses.

tests/python/stream_big.py runs the heap check on an 8.6 GB model (minutes; not in CI)."""

import json
import os
import random
import re

import numpy as np
import pytest

import qsparse as qs
from conftest import read_raw
from synth_model import write_model

safetensors_numpy = pytest.importorskip("safetensors.numpy")


def tree(d):
    """{relative path: bytes} of every file under d."""
    out = {}
    for root, _, files in os.walk(d):
        for f in files:
            p = os.path.join(root, f)
            out[os.path.relpath(p, d)] = open(p, "rb").read()
    return out


def stats_of(run_tool, src, out, *args):
    s = str(out) + ".stats.json"
    r = run_tool("quantize", src, "-o", out, "--quiet", "--stats", "--stats-json", s,
                 "--threads", "1", *args, check=0)
    assert re.search(r"stats: heap peak [\d.]+ MB = [\d.]+x the largest tensor", r.stderr)
    return json.load(open(s))


# ---- the heap --------------------------------------------------------------------------------

def test_heap_peak_under_twice_the_largest_tensor(run_tool, tmp_path):
    """The rule of the 8 GB run, on 230 MB: bf16 (the planes and buffers are then largest next
    to the input), NF4 in the bitsandbytes layout, two shards."""
    info = write_model(tmp_path / "m", layers=8, hidden=1024, intermediate=2752, vocab=8000,
                       shards=2, dtype="bf16")
    assert info["bytes"] > 200e6
    s = stats_of(run_tool, tmp_path / "m", tmp_path / "o", "--format", "nf4")
    assert s["largest_tensor_bytes"] == info["largest"] == 8000 * 1024 * 2
    assert s["largest_quantized_bytes"] == info["largest_linear"] == 2752 * 1024 * 2
    assert s["tensors_quantized"] == 8 * 7
    assert s["bytes_read"] > info["bytes"]  # the files: tensors plus headers
    # a whole shard's output held at once would be 57 MB: the peak is one tensor's planes
    assert s["heap_peak_bytes"] < 2 * s["largest_tensor_bytes"]
    assert s["heap_peak_bytes"] < 2 * s["largest_quantized_bytes"]
    assert s["heap_peak_over_largest"] == pytest.approx(
        s["heap_peak_bytes"] / s["largest_tensor_bytes"])


@pytest.mark.parametrize("fmt", ["nf4", "llm_int8"])
def test_heap_peak_does_not_grow_with_the_model(run_tool, tmp_path, fmt):
    """Same shapes, 2 layers or 12: the peak is that of one tensor, plus the names and
    statistics of the others (bytes per tensor, not per weight)."""
    peaks = []
    for layers in (2, 12):
        d = tmp_path / f"m{layers}"
        write_model(d, layers=layers, hidden=512, intermediate=1376, vocab=1000, shards=1,
                    dtype="f32")
        peaks.append(stats_of(run_tool, d, tmp_path / f"o{layers}", "--format", fmt)
                     ["heap_peak_bytes"])
    # 10 more layers are 70 more weights of 1 to 2.8 MB each (0.15 to 0.4 MB quantized, all
    # held until the end by the old writer); each adds a few kB of names and entries
    assert (peaks[1] - peaks[0]) / 70 < 8192, peaks


def test_double_quant_plans_then_writes_the_same_bytes(run_tool, tmp_path):
    """With --double-quant the quant_state's length depends on the nested offset, so the plan
    quantizes each weight once to learn it; the file is the one the library's values give."""
    write_model(tmp_path / "m", layers=2, hidden=256, intermediate=688, vocab=500, shards=2,
                dtype="bf16")
    run_tool("quantize", tmp_path / "m", "-o", tmp_path / "o", "--format", "nf4",
             "--double-quant", "--quiet", "--threads", "1", check=0)
    name = "model.layers.1.mlp.down_proj.weight"
    shard = json.load(open(tmp_path / "o" / "model.safetensors.index.json"))["weight_map"][name]
    raw = read_raw(tmp_path / "o" / shard)
    state = json.loads(raw[name + ".quant_state.bitsandbytes__nf4"][2])
    src = json.load(open(tmp_path / "m" / "model.safetensors.index.json"))["weight_map"][name]
    import ml_dtypes
    w = safetensors_numpy.load_file(str(tmp_path / "m" / src))[name]
    w = np.frombuffer(w.tobytes(), ml_dtypes.bfloat16).reshape(w.shape)
    q = qs.quantize(w, "nf4", double_quant=True)
    assert state["nested_offset"] == float(q.nested_offset)
    assert raw[name][2] == q.data.tobytes()
    assert raw[name + ".absmax"][2] == q.absmax.tobytes()
    assert raw[name + ".nested_absmax"][2] == q.nested_absmax.tobytes()


# ---- the error table, a chunk of rows at a time ----------------------------------------------

CASES = [("nf4", [], {}), ("nf4", ["--double-quant"], {"double_quant": True}),
         ("fp4", ["--blocksize", "128"], {"blocksize": 128}),
         ("int8", ["--granularity", "group", "--blocksize", "128"],
          {"granularity": "group", "group_size": 128}),
         ("int8", ["--granularity", "tensor"], {"granularity": "tensor"}),
         ("llm_int8", [], {}), ("fp8_e4m3", [], {}), ("mxfp4", [], {}), ("mxfp8", [], {}),
         ("nvfp4", [], {})]


@pytest.mark.parametrize("fmt,args,kw", CASES, ids=[" ".join([c[0], *c[1]]) for c in CASES])
def test_error_table_in_chunks_matches_numpy(run_tool, tmp_path, fmt, args, kw):
    """1030 x 1536 = 1.6 M values are measured in chunks of 128 rows (a multiple of the 32 rows
    that keep NF4's nested blocks of 64 x 256 aligned) and a tail of 6; the table's numbers are
    numpy's on the library's decode of the whole tensor."""
    rng = np.random.default_rng(7)
    w = (rng.standard_normal((1030, 1536)) * rng.uniform(0.01, 3, (1030, 1))).astype(np.float32)
    w[5, 7] = 40.0  # one outlier: its block's error differs from the rest
    safetensors_numpy.save_file({"layer.weight": w}, str(tmp_path / "m.safetensors"))
    r = run_tool("quantize", tmp_path / "m.safetensors", "-o", tmp_path / "o.safetensors",
                 "--format", fmt, "--threads", "1", *args, check=0)
    row = next(line for line in r.stdout.splitlines() if line.startswith("layer.weight"))
    rel, mx = map(float, row.split()[-2:])
    deq = qs.dequantize(qs.quantize(w, fmt, **kw)).astype(np.float64)
    err = deq - w.astype(np.float64)
    assert rel == pytest.approx(np.sqrt((err ** 2).sum() / (w.astype(np.float64) ** 2).sum()),
                                rel=1e-3)
    assert mx == pytest.approx(np.abs(err).max(), rel=1e-3)


# ---- --shard and merge-index -----------------------------------------------------------------

def linear_modules(d):
    idx = json.load(open(os.path.join(d, "model.safetensors.index.json")))["weight_map"]
    return [k[: -len(".weight")] for k in idx if "_proj." in k]


LAYOUTS = [("nf4", "bitsandbytes", []), ("nf4", "bitsandbytes", ["--double-quant"]),
           ("llm_int8", "bitsandbytes", []), ("fp8_e4m3", "compressed-tensors", []),
           ("nvfp4", "modelopt", ["--act-amax"])]


@pytest.mark.parametrize("fmt,layout,extra", LAYOUTS,
                         ids=[" ".join([c[0], c[1], *c[2]]) for c in LAYOUTS])
@pytest.mark.parametrize("parts", [2, 3, 5])
def test_parts_merge_to_the_single_run(run_tool, tmp_path, fmt, layout, extra, parts):
    src = tmp_path / "m"
    write_model(src, layers=5, hidden=128, intermediate=344, vocab=300, shards=4, dtype="bf16")
    if extra == ["--act-amax"]:
        (tmp_path / "amax.json").write_text(json.dumps(
            {m: 1.0 + i / 7 for i, m in enumerate(linear_modules(src))}))
        extra = ["--act-amax", str(tmp_path / "amax.json")]
    opts = ["--format", fmt, "--layout", layout, *extra, "--quiet", "--threads", "1"]
    run_tool("quantize", src, "-o", tmp_path / "whole", *opts, check=0)
    dirs = []
    for i in range(parts):
        d = tmp_path / f"part{i}"
        run_tool("quantize", src, "-o", d, "--shard", f"{i}/{parts}", *opts, check=0)
        marker = json.load(open(d / "qsparse-part.json"))
        # shard j of the sorted list goes to part j mod N
        mine = [f"model-{j + 1:05d}-of-00004.safetensors" for j in range(4) if j % parts == i]
        assert marker["part"] == i and marker["parts"] == parts and marker["shards"] == mine
        assert sorted(f for f in os.listdir(d) if f.endswith(".safetensors")) == mine
        assert not (d / "model.safetensors.index.json").exists()
        dirs.append(d)
    random.Random(parts).shuffle(dirs)  # any order
    r = run_tool("merge-index", tmp_path / "merged", *dirs, check=0)
    assert f"4 shards from {parts} parts" in r.stdout
    whole, merged = tree(tmp_path / "whole"), tree(tmp_path / "merged")
    assert sorted(whole) == sorted(merged)
    for k in whole:
        assert merged[k] == whole[k], k
    idx = json.loads(merged["model.safetensors.index.json"])
    assert len(idx["weight_map"]) == sum(len(read_raw(tmp_path / "merged" / s))
                                         for s in set(idx["weight_map"].values()))


def test_merge_index_refuses(run_tool, tmp_path):
    src = tmp_path / "m"
    write_model(src, layers=3, hidden=64, intermediate=128, vocab=100, shards=3, dtype="f32")
    for i in range(3):
        run_tool("quantize", src, "-o", tmp_path / f"p{i}", "--format", "nf4", "--shard",
                 f"{i}/3", "--quiet", check=0)
    run_tool("quantize", src, "-o", tmp_path / "fp4", "--format", "fp4", "--shard", "1/3",
             "--quiet", check=0)
    run_tool("quantize", src, "-o", tmp_path / "two", "--format", "nf4", "--shard", "1/2",
             "--quiet", check=0)
    p = [tmp_path / f"p{i}" for i in range(3)]
    out = tmp_path / "out"
    cases = [([p[0], p[1]], "split 3 ways; 2 part folders given"),
             ([p[0], p[1], p[1]], "part 1 is given twice"),
             ([p[0], p[2], tmp_path / "two"], "another model or split"),
             ([p[0], tmp_path / "fp4", p[2]], "other options"),
             ([p[0], p[1], src], "no readable qsparse-part.json")]
    for parts, msg in cases:
        r = run_tool("merge-index", out, *parts, check=1)
        assert msg in r.stderr, (msg, r.stderr)
        assert not out.exists()
    os.remove(p[2] / "model-00003-of-00003.safetensors")
    r = run_tool("merge-index", out, *p, check=1)
    assert "model-00003-of-00003.safetensors" in r.stderr and not out.exists()
    assert [f for f in os.listdir(tmp_path) if ".qsparse-tmp-" in f] == []
    run_tool("merge-index", out, check=2)
    assert "usage" in run_tool("merge-index", "--help", check=0).stdout


def test_shard_option_errors(run_tool, tmp_path):
    src = tmp_path / "m"
    write_model(src, layers=1, hidden=64, intermediate=128, vocab=100, shards=1, dtype="f32")
    os.rename(src / "model-00001-of-00001.safetensors", src / "model.safetensors")
    os.remove(src / "model.safetensors.index.json")  # one file, no index
    for bad in ("2/2", "-1/2", "1/0", "1", "a/b", "1/2x"):
        r = run_tool("quantize", src, "-o", tmp_path / "o", "--format", "nf4", "--shard", bad,
                     check=2)
        assert "--shard is I/N" in r.stderr
    f = tmp_path / "one.safetensors"
    safetensors_numpy.save_file({"a.weight": np.ones((4, 64), np.float32)}, str(f))
    r = run_tool("quantize", f, "-o", tmp_path / "o.safetensors", "--format", "nf4", "--shard",
                 "0/2", check=2)
    assert "single file" in r.stderr
    # a model without an index is one shard: part 0 has it, part 1 has none but the config
    run_tool("quantize", src, "-o", tmp_path / "a", "--format", "nf4", "--shard", "0/2",
             "--quiet", check=0)
    run_tool("quantize", src, "-o", tmp_path / "b", "--format", "nf4", "--shard", "1/2",
             "--quiet", check=0)
    assert json.load(open(tmp_path / "b" / "qsparse-part.json"))["shards"] == []
    run_tool("merge-index", tmp_path / "ab", tmp_path / "b", tmp_path / "a", check=0)
    run_tool("quantize", src, "-o", tmp_path / "whole", "--format", "nf4", "--quiet", check=0)
    assert tree(tmp_path / "ab") == tree(tmp_path / "whole")
