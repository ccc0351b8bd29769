# SPDX-License-Identifier: MIT
"""What a newcomer meets in the first hour (issue 36): one vocabulary for the same option in C,
Python and the tool; one overwrite rule for an output file and an output folder; 2:4 + NF4
written in the tool's own layout and read back by qs.load; an already quantized input named as
such; the demo with a column count that not every format fits; per-layer tables in the order
people count; the same bits per weight from `quantize` and `inspect`."""

import json
import os

import numpy as np
import pytest

import qsparse as qs
from conftest import read_metadata, read_raw

safetensors_numpy = pytest.importorskip("safetensors.numpy")


def weights(seed=0):
    rng = np.random.default_rng(seed)
    return {"blk.2.weight": (rng.standard_normal((32, 128)) * 0.05).astype(np.float32),
            "blk.10.weight": (rng.standard_normal((64, 256)) * 0.05).astype(np.float32),
            "blk.10.bias": np.zeros(64, np.float32)}


@pytest.fixture
def src(tmp_path):
    path = tmp_path / "m.safetensors"
    safetensors_numpy.save_file(weights(), str(path))
    return path


def model_folder(tmp_path, name="model"):
    d = tmp_path / name
    d.mkdir()
    safetensors_numpy.save_file(weights(), str(d / "model.safetensors"))
    (d / "config.json").write_text(json.dumps({"model_type": "bert"}))
    return d


# ---- one vocabulary ---------------------------------------------------------------------------


def test_python_block_size_is_the_c_name():
    """block_size= (C's qs_quant_params.block_size) was a TypeError; blocksize= stays."""
    w = weights()["blk.10.weight"]
    a = qs.quantize(w, "nf4", block_size=128)
    b = qs.quantize(w, "nf4", blocksize=128)
    assert a.block_size == b.block_size == b.blocksize == 128
    assert a.data.tobytes() == b.data.tobytes() and a.absmax.tobytes() == b.absmax.tobytes()
    assert "block_size=128" in repr(a)
    assert qs.quantize(w, "nf4", block_size=64, blocksize=64).block_size == 64
    with pytest.raises(ValueError, match="disagree"):
        qs.quantize(w, "nf4", block_size=64, blocksize=128)
    with pytest.raises(ValueError, match="'block_size' does not apply"):
        qs.quantize(w, "int8", block_size=64)
    # the same keyword reaches GPTQ's format options and a 2:4 weight's values
    H = qs.Hessian(256).update(np.random.default_rng(1).standard_normal((64, 256)).astype(
        np.float32))
    assert qs.gptq(w, H, "nf4", block_size=128).block_size == 128
    assert qs.quantize(qs.compress(w * qs.prune(w, "2:4")), "nf4", block_size=32).q.block_size \
        == 32


def test_tool_speaks_the_same_words(run_tool, src, tmp_path):
    """--granularity row (Python's and the demo's word) was refused; --block-size is C's and
    Python's name; --asymmetric writes the demo's "int8 group 128 asym"."""
    w = weights()["blk.10.weight"]
    out = tmp_path / "row.safetensors"
    run_tool("quantize", src, "-o", out, "--format", "int8", "--granularity", "row", check=0)
    got = qs.load(out)["blk.10.weight"]
    want = qs.quantize(w, "int8", granularity="row")
    assert got.data.tobytes() == want.data.tobytes()
    assert got.scale.tobytes() == want.scale.tobytes()

    out = tmp_path / "asym.safetensors"
    run_tool("quantize", src, "-o", out, "--format", "int8", "--granularity", "group",
             "--block-size", "128", "--asymmetric", check=0)
    got = qs.load(out)["blk.10.weight"]
    want = qs.quantize(w, "int8", granularity="group", group_size=128, symmetric=False)
    assert got.symmetric is False and got.group_size == 128
    assert got.data.tobytes() == want.data.tobytes()
    assert got.zero_point.tobytes() == want.zero_point.tobytes()
    assert np.array_equal(qs.dequantize(got), qs.dequantize(want))

    out = tmp_path / "nf4.safetensors"
    run_tool("quantize", src, "-o", out, "--format", "nf4", "--block-size", "128", check=0)
    assert qs.load(out)["blk.10.weight"].block_size == 128
    r = run_tool("quantize", src, "-o", tmp_path / "x.safetensors", "--format", "nf4",
                 "--asymmetric")
    assert r.returncode == 2 and "--asymmetric applies to int8 only" in r.stderr
    r = run_tool("quantize", src, "-o", tmp_path / "x.safetensors", "--format", "int8",
                 "--granularity", "block")
    assert r.returncode == 2 and "tensor, row (or channel) or group" in r.stderr


# ---- one overwrite rule -----------------------------------------------------------------------


def test_an_existing_output_file_is_refused_unless_force(run_tool, src, tmp_path):
    out = tmp_path / "o.safetensors"
    out.write_bytes(b"previous contents")
    r = run_tool("quantize", src, "-o", out, "--format", "nf4")
    assert r.returncode == 1 and "exists: --force replaces it" in r.stderr
    assert out.read_bytes() == b"previous contents"
    run_tool("quantize", src, "-o", out, "--format", "nf4", "--force", "-q", check=0)
    assert "blk.10.weight.absmax" in read_raw(out)
    assert [n for n in os.listdir(tmp_path) if "qsparse-tmp" in n] == []


def test_an_existing_output_folder_is_refused_unless_force(run_tool, tmp_path):
    model = model_folder(tmp_path)
    out = tmp_path / "out"
    out.mkdir()
    (out / "old.txt").write_text("old")
    r = run_tool("quantize", model, "-o", out, "--format", "nf4")
    assert r.returncode == 1 and "exists: --force replaces it" in r.stderr
    assert os.listdir(out) == ["old.txt"]
    run_tool("quantize", model, "-o", out, "--format", "nf4", "--force", "-q", check=0)
    # replaced as a whole: the old file is gone, nothing is left beside the folder
    assert sorted(os.listdir(out)) == ["config.json", "model.safetensors"]
    assert sorted(os.listdir(tmp_path)) == ["model", "out"]
    # an empty folder is no output yet
    empty = tmp_path / "empty"
    empty.mkdir()
    run_tool("quantize", model, "-o", empty, "--format", "nf4", "-q", check=0)
    assert "config.json" in os.listdir(empty)


def test_force_never_swaps_kinds_nor_overwrites_the_input(run_tool, src, tmp_path):
    folder = tmp_path / "adir"
    folder.mkdir()
    (folder / "keep").write_text("x")
    r = run_tool("quantize", src, "-o", folder, "--format", "nf4", "--force")
    assert r.returncode == 1 and "is a folder; the input makes a file" in r.stderr
    assert os.listdir(folder) == ["keep"]
    model = model_folder(tmp_path)
    afile = tmp_path / "afile"
    afile.write_text("x")
    r = run_tool("quantize", model, "-o", afile, "--format", "nf4", "--force")
    assert r.returncode == 1 and "is a file; the input makes a folder" in r.stderr
    before = src.read_bytes()
    r = run_tool("quantize", src, "-o", src, "--format", "nf4", "--force")
    assert r.returncode == 1 and "is the input itself" in r.stderr
    assert src.read_bytes() == before


def test_a_quantized_input_is_named_as_such(run_tool, src, tmp_path):
    """It used to print "0 tensors quantized ... 1.00x" and exit 0 with a copy."""
    q = tmp_path / "q.safetensors"
    run_tool("quantize", src, "-o", q, "--format", "nf4", "-q", check=0)
    again = tmp_path / "again.safetensors"
    r = run_tool("quantize", q, "-o", again, "--format", "nf4")
    assert r.returncode == 1 and "is quantized already (its qsparse.quantized record)" in r.stderr
    assert not again.exists()
    # a bitsandbytes file without the tool's record: recognised by its keys
    qs.save(tmp_path / "bnb.safetensors", {"l.weight": qs.quantize(weights()["blk.2.weight"],
                                                                    "nf4")}, layout="bnb")
    raw = read_raw(tmp_path / "bnb.safetensors")
    stripped = {k: np.frombuffer(v[2], np.uint8).reshape(-1).copy() for k, v in raw.items()}
    safetensors_numpy.save_file(stripped, str(tmp_path / "plain.safetensors"))
    r = run_tool("quantize", tmp_path / "plain.safetensors", "-o", again, "--format", "nf4")
    assert r.returncode == 1 and "bitsandbytes 4-bit keys" in r.stderr
    # a float model with nothing selected is still a copy with a warning, as before
    r = run_tool("quantize", src, "-o", again, "--format", "nf4", "--include", "nothing",
                 check=0)
    assert "no tensor matched" in r.stderr


# ---- 2:4 + NF4 in the tool's own layout -----------------------------------------------------


@pytest.mark.parametrize("fmt,extra", [("nf4", []), ("nf4", ["--double-quant"]), ("int8", []),
                                       ("mxfp4", []), ("nvfp4", [])])
def test_sparse_24_in_the_qsparse_layout_reads_back(run_tool, src, tmp_path, fmt, extra):
    """--format nf4 --sparsity 2:4 was refused with "use compressed-tensors" (which refuses
    nf4). The tool's own layout now keeps the weight compressed and qs.load gives the
    SparseQTensor that Python makes from the same weight, bit for bit."""
    out = tmp_path / "o.safetensors"
    r = run_tool("quantize", src, "-o", out, "--format", fmt, "--sparsity", "2:4", *extra,
                 check=0)
    assert "2:4 sparse" in r.stdout
    loaded = qs.load(out)
    opts = {"double_quant": True} if extra else {}
    for name in ("blk.2.weight", "blk.10.weight"):
        w = weights()[name]
        mask = qs.prune(w, "2:4")
        want = qs.quantize(qs.compress(w * mask, mask), fmt, **opts)
        got = loaded[name]
        assert isinstance(got, qs.sparse.SparseQTensor) and got.shape == w.shape
        assert np.array_equal(got.meta, want.meta)
        assert np.array_equal(qs.dequantize(got), qs.dequantize(want))
        x = np.random.default_rng(2).standard_normal((3, w.shape[1])).astype(np.float32)
        assert np.array_equal(qs.matmul(x, got), qs.matmul(x, want))
    assert np.array_equal(loaded["blk.10.bias"], weights()["blk.10.bias"])
    record = json.loads(read_metadata(out)["qsparse.quantized"])
    assert record["blk.10.weight"]["sparsity"] == "2:4"
    assert record["blk.10.weight"]["shape"] == [64, 256]
    # qs.save writes the same keys, and inspect counts the meta in the bits per weight
    again = tmp_path / "again.safetensors"
    qs.save(again, {k: v for k, v in loaded.items()})
    assert set(read_raw(again)) == set(read_raw(out))
    info = {w["name"]: w for w in json.loads(run_tool("inspect", out, "--json",
                                                      check=0).stdout)["weights"]}
    assert info["blk.10.weight"]["shape"] == [64, 256] and info["blk.10.weight"]["tensors"] > 1
    assert info["blk.10.weight"]["format"].endswith("+2:4")


def test_sparse_24_without_a_format(run_tool, src, tmp_path):
    out = tmp_path / "o.safetensors"
    run_tool("quantize", src, "-o", out, "--format", "none", "--sparsity", "2:4", "-q", check=0)
    c = qs.load(out)["blk.10.weight"]
    w = weights()["blk.10.weight"]
    assert isinstance(c, qs.sparse.Compressed24)
    assert np.array_equal(qs.decompress(c), w * qs.prune(w, "2:4"))
    r = run_tool("quantize", src, "-o", tmp_path / "g.safetensors", "--format", "nf4",
                 "--sparsity", "2:4", "--method", "gptq", "--calib", src)
    assert r.returncode == 2 and "needs a loader layout" in r.stderr


def test_the_bitsandbytes_layout_still_refuses_24(run_tool, tmp_path):
    r = run_tool("quantize", model_folder(tmp_path), "-o", tmp_path / "o", "--format", "nf4",
                 "--sparsity", "2:4")
    assert r.returncode == 2 and "bitsandbytes layout cannot hold 2:4" in r.stderr


# ---- small things -----------------------------------------------------------------------------


def test_demo_with_columns_not_every_format_fits(run_tool):
    """--cols 200 exited 1 without a word (the int8 group-128 row cannot take it)."""
    r = run_tool("demo", "--rows", "64", "--cols", "200", check=0)
    lines = {line[:22].strip(): line for line in r.stdout.splitlines()}
    assert "n/a: int8 group size 128 does not divide cols 200" in lines["int8 group 128 asym"]
    assert float(lines["nf4 (block 64)"].split()[3]) == 4.5  # the other rows are all there
    assert "nvfp4" in lines and r.stderr == ""


def test_layer_tables_count_like_people(run_tool, src, tmp_path):
    out = tmp_path / "o.safetensors"
    r = run_tool("quantize", src, "-o", out, "--format", "nf4", check=0)
    rows = [line.split()[0] for line in r.stdout.splitlines()[1:3]]
    assert rows == ["blk.2.weight", "blk.10.weight"]
    text = run_tool("inspect", out, check=0).stdout.splitlines()
    names = [line.split()[0] for line in text[2:-1]]
    assert names == ["blk.2.weight", "blk.10.bias", "blk.10.weight"]


def test_quantize_and_inspect_agree_on_bits(run_tool, src, tmp_path):
    """quantize said 4.500 where inspect said 4.508: both count every byte of the weight."""
    out = tmp_path / "o.safetensors"
    r = run_tool("quantize", src, "-o", out, "--format", "nf4", "--double-quant", check=0)
    table = {line.split()[0]: line.split()[2] for line in r.stdout.splitlines()[1:3]}
    info = json.loads(run_tool("inspect", out, "--json", check=0).stdout)
    for w in info["weights"]:
        if w["name"] in table:
            assert table[w["name"]] == f"{w['bits_per_weight']:.3f}"
    assert table["blk.2.weight"] != "4.127"  # planes only; the file holds more
