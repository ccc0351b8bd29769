# SPDX-License-Identifier: MIT
"""Tests of `qsparse quantize` and `qsparse inspect`: round trips through safetensors (read back
with the safetensors package and numpy, decoded with the library), the bitsandbytes keys and JSON
quant_state, tensor selection, and files that are truncated, malformed or hostile, which must give
an error and a non-zero exit without touching the output path; also costs that grow with the number
of tensors, names that carry terminal escapes, special files, signals at every point of a write, an
input truncated under the tool, and the output's mode.

Some tests stop the tool at a known point through its test hook: QSPARSE_TOOL_TEST_STOP=open
(the input is validated, no tensor read yet) or =write (the temporary output holds its header)
makes it stop itself with SIGSTOP; the test then acts (truncates the input, sends a signal) and
continues it with SIGCONT."""

import json
import os
import pty
import resource
import signal
import stat
import struct
import subprocess
import time

import numpy as np
import pytest

import qsparse as qs
from conftest import read_metadata, read_raw, tiny_model

QUANTIZED = ["encoder.layer.0.attention.self.query.weight",
             "encoder.layer.0.intermediate.dense.weight",
             "encoder.layer.0.output.dense.weight",
             "encoder.layer.1.attention.self.query.weight",
             "encoder.layer.1.odd.weight"]
COPIED = ["embeddings.word_embeddings.weight", "embeddings.LayerNorm.weight",
          "encoder.layer.0.attention.self.query.bias", "encoder.layer.0.output.LayerNorm.weight",
          "position_ids"]


def arr(raw, dtype):
    return np.frombuffer(raw[2], dtype).reshape(raw[1])


def planes_from_file(raw, name, fmt, shape):
    """Build a QTensor from the keys the tool wrote for weight `name`."""
    if fmt in ("nf4", "fp4"):
        state = json.loads(raw[f"{name}.quant_state.bitsandbytes__{fmt}"][2])
        nested = "nested_offset" in state
        absmax = raw[f"{name}.absmax"]
        return qs.QTensor(fmt, state["shape"], arr(raw[name], np.uint8).reshape(-1),
                          absmax=arr(absmax, np.uint8 if nested else np.float32),
                          nested_absmax=arr(raw[f"{name}.nested_absmax"], np.float32)
                          if nested else None,
                          nested_offset=state.get("nested_offset"),
                          blocksize=state["blocksize"], double_quant=nested), state
    if fmt == "llm_int8":
        prefix = name[:-len(".weight")]
        return qs.QTensor("llm_int8", shape, arr(raw[name], np.int8),
                          scale=arr(raw[prefix + ".SCB"], np.float32)), None
    if fmt.startswith("fp8"):
        return qs.QTensor(fmt, shape, arr(raw[name], np.uint8),
                          scale=arr(raw[name + "_scale"], np.float32).reshape(1)), None
    gs = arr(raw[name + "_scale_2"], np.float32).item() if fmt == "nvfp4" else None
    return qs.QTensor(fmt, shape, arr(raw[name], np.uint8),
                      scale=arr(raw[name + "_scale"], np.uint8), global_scale=gs), None


@pytest.mark.parametrize("fmt,extra", [("nf4", []), ("fp4", []), ("nf4", ["--double-quant"]),
                                       ("fp4", ["--double-quant", "--blocksize", "128"]),
                                       ("llm_int8", []), ("fp8_e4m3", []), ("fp8_e5m2", []),
                                       ("mxfp4", []), ("mxfp8", []), ("nvfp4", [])])
def test_roundtrip_matches_the_library(run_tool, model_file, tmp_path, fmt, extra):
    src, tensors = model_file
    out = tmp_path / "out.safetensors"
    r = run_tool("quantize", src, "-o", out, "--format", fmt, *extra, check=0)
    raw = read_raw(out)
    lib_fmt = fmt
    opts = {}
    if "--double-quant" in extra:
        opts["double_quant"] = True
    if "--blocksize" in extra:
        opts["blocksize"] = int(extra[extra.index("--blocksize") + 1])

    for name in COPIED:  # everything else is copied byte for byte
        assert raw[name][2] == tensors[name].tobytes()
        assert raw[name][1] == list(tensors[name].shape)
    for name in QUANTIZED:
        w = tensors[name]
        q_file, state = planes_from_file(raw, name, fmt, w.shape)
        q_lib = qs.quantize(w, lib_fmt, **opts)
        assert q_file.data.tobytes() == q_lib.data.tobytes(), name
        d_file, d_lib = qs.dequantize(q_file), qs.dequantize(q_lib)
        assert d_file.shape == w.shape and d_file.tobytes() == d_lib.tobytes()
        assert name in r.stdout  # one row of the error table per layer
        rel = np.sqrt(np.sum((d_file - w) ** 2) / np.sum(w**2))
        row = next(line for line in r.stdout.splitlines() if line.startswith(name + " "))
        assert float(row.split()[3]) == pytest.approx(rel, rel=2e-3)
        if fmt in ("nf4", "fp4"):
            check_bnb_keys(raw, name, fmt, w, q_lib, state)
    meta = read_metadata(out)
    assert meta["format"] == "pt"  # the input's metadata is kept
    rec = json.loads(meta["qsparse.quantized"])
    assert sorted(rec) == sorted(QUANTIZED)
    assert rec[QUANTIZED[0]] == {"format": lib_fmt, "shape": [32, 32], "dtype": "float32"}
    assert "MB ->" in r.stdout.splitlines()[-1]


def check_bnb_keys(raw, name, fmt, w, q, state):
    n = w.size
    assert raw[name][0] == "U8" and raw[name][1] == [(n + 1) // 2, 1]
    nb = q.absmax.size
    assert raw[name + ".quant_map"][0] == "F32" and raw[name + ".quant_map"][1] == [16]
    assert arr(raw[name + ".quant_map"], np.float32).tobytes() == qs.codebook(fmt).tobytes()
    expect = {"quant_type": fmt, "blocksize": q.blocksize, "dtype": "float32",
              "shape": list(w.shape)}
    if q.double_quant:
        assert raw[name + ".absmax"][:2] == ("U8", [nb])
        assert raw[name + ".nested_absmax"][:2] == ("F32", [q.nested_absmax.size])
        assert arr(raw[name + ".nested_quant_map"], np.float32).tobytes() == \
            qs.codebook("dyn8").tobytes()
        expect.update(nested_blocksize=256, nested_dtype="float32",
                      nested_offset=float(q.nested_offset))
    else:
        assert raw[name + ".absmax"][:2] == ("F32", [nb])
    # byte-exact Python json.dumps text, as bitsandbytes writes it
    assert raw[f"{name}.quant_state.bitsandbytes__{fmt}"][2] == json.dumps(expect).encode()
    assert state == expect


@pytest.mark.parametrize("dtype", ["float16", "bfloat16"])
def test_16bit_models(run_tool, tmp_path, dtype):
    import ml_dtypes
    from safetensors.numpy import save_file

    npdt = np.float16 if dtype == "float16" else ml_dtypes.bfloat16
    w = (np.random.default_rng(3).standard_normal((16, 64)) * 0.1).astype(npdt)
    src = tmp_path / "m.safetensors"
    if dtype == "float16":
        save_file({"l.weight": w}, str(src))
    else:  # safetensors' numpy API has no bfloat16: write the BF16 header by hand
        header = json.dumps({"l.weight": {"dtype": "BF16", "shape": [16, 64],
                                          "data_offsets": [0, w.nbytes]}}).encode()
        src.write_bytes(struct.pack("<Q", len(header)) + header + w.tobytes())
    out = tmp_path / "o.safetensors"
    run_tool("quantize", src, "-o", out, "--format", "nf4", check=0)
    raw = read_raw(out)
    state = json.loads(raw["l.weight.quant_state.bitsandbytes__nf4"][2])
    assert state["dtype"] == dtype
    assert raw["l.weight"][2] == qs.quantize(w, "nf4").data.tobytes()


def test_selection_include_exclude(run_tool, model_file, tmp_path):
    src, tensors = model_file
    out = tmp_path / "o.safetensors"
    run_tool("quantize", src, "-o", out, "--format", "llm_int8", "--include", "query", check=0)
    raw = read_raw(out)
    assert raw[QUANTIZED[0]][0] == "I8" and raw[QUANTIZED[3]][0] == "I8"
    assert raw[QUANTIZED[1]][2] == tensors[QUANTIZED[1]].tobytes()
    # query.bias matches the include but is 1-D: never quantized
    assert raw["encoder.layer.0.attention.self.query.bias"][0] == "F32"
    run_tool("quantize", src, "-o", out, "--force", "--format", "llm_int8",
             "--exclude", r"layer\.1", check=0)
    raw = read_raw(out)
    assert raw[QUANTIZED[0]][0] == "I8" and raw[QUANTIZED[3]][0] == "F32"
    # an explicit --exclude replaces the default one: embeddings are now quantized too
    assert raw["embeddings.word_embeddings.weight"][0] == "I8"
    r = run_tool("quantize", src, "-o", out, "--force", "--format", "nf4", "--include", "nothing",
                 check=0)
    assert "no tensor matched" in r.stderr


def test_inspect(run_tool, model_file, tmp_path):
    src, tensors = model_file
    out = tmp_path / "o.safetensors"
    run_tool("quantize", src, "-o", out, "--format", "nf4", "--double-quant", check=0)
    info = json.loads(run_tool("inspect", out, "--json", check=0).stdout)
    by = {w["name"]: w for w in info["weights"]}
    assert set(by) == set(tensors)  # companions folded into their weight
    q = by[QUANTIZED[0]]
    assert q["format"] == "nf4/64+dq" and q["shape"] == [32, 32] and q["dtype"] == "F32"
    raw = read_raw(out)
    parts = [n for n in raw if n.startswith(QUANTIZED[0])]
    assert q["tensors"] == len(parts) == 6
    assert q["bytes"] == sum(len(raw[n][2]) for n in parts)
    assert q["bits_per_weight"] == pytest.approx(8 * q["bytes"] / 1024)
    assert by["position_ids"]["format"] == "-" and by["position_ids"]["bits_per_weight"] == 64
    assert info["parameters"] == sum(t.size for t in tensors.values())
    assert info["quantized_parameters"] == sum(tensors[n].size for n in QUANTIZED)
    assert info["file_bytes"] == os.path.getsize(out)
    text = run_tool("inspect", out, check=0).stdout
    assert "nf4/64+dq" in text and "total:" in text and "quantized:" in text
    for fmt, label in (("llm_int8", "llm_int8"), ("fp8_e4m3", "fp8_e4m3"), ("nvfp4", "nvfp4"),
                       ("mxfp4", "mxfp4")):
        run_tool("quantize", src, "-o", out, "--force", "--format", fmt, check=0)
        info = json.loads(run_tool("inspect", out, "--json", check=0).stdout)
        w = {x["name"]: x for x in info["weights"]}[QUANTIZED[2]]
        assert w["format"] == label and w["shape"] == [32, 64]
    plain = json.loads(run_tool("inspect", src, "--json", check=0).stdout)
    assert all(w["format"] == "-" for w in plain["weights"])


def test_inspect_recognises_foreign_layouts_by_the_key_table(run_tool, tmp_path):
    # files from other writers, without a "qsparse.quantized" record: a weight dtype that only
    # quantized formats use plus the format's first companion key with its dtype
    # (tools/checkpoint_keys.c); MXFP8's E4M3 codes with U8 E8M0 scales are not per-tensor FP8
    layout = [("a.weight", "I8", [4, 8], 32), ("a.SCB", "F32", [4], 16),
              ("a.weight_format", "U8", [], 1),
              ("b.weight", "F8_E4M3", [4, 8], 32), ("b.weight_scale", "F32", [], 4),
              ("c.weight", "F8_E5M2", [4, 8], 32), ("c.weight_scale", "F32", [], 4),
              ("m.weight", "F8_E4M3", [4, 32], 128), ("m.weight_scale", "U8", [4, 1], 4),
              ("n.weight", "F8_E4M3", [4, 8], 32), ("scb_only.SCB", "F32", [4], 16),
              ("i8.weight", "I8", [4, 8], 32)]
    header, at = {}, 0
    for name, dtype, shape, size in layout:
        header[name] = entry(dtype, shape, at, at + size)
        at += size
    src = tmp_path / "foreign.safetensors"
    src.write_bytes(st_bytes(header, bytes(at)))
    info = json.loads(run_tool("inspect", src, "--json", check=0).stdout)
    got = {w["name"]: (w["format"], w["tensors"], w["bytes"]) for w in info["weights"]}
    assert got == {"a.weight": ("llm_int8", 3, 49), "b.weight": ("fp8_e4m3", 2, 36),
                   "c.weight": ("fp8_e5m2", 2, 36), "m.weight": ("mxfp8", 2, 132),
                   "n.weight": ("-", 1, 32), "scb_only.SCB": ("-", 1, 16),
                   "i8.weight": ("-", 1, 32)}


def test_bad_arguments(run_tool, model_file, tmp_path):
    src, _ = model_file
    out = tmp_path / "o.safetensors"
    cases = [
        ([], "required"),
        (["--format", "nf4"], "required"),
        (["-o", out, "--format", "nf5"], "unknown format"),
        (["-o", out, "--format", "int8", "--double-quant"], "applies to nf4 and fp4"),
        (["-o", out, "--format", "mxfp4", "--blocksize", "64"], "fixed block size"),
        (["-o", out, "--format", "nf4", "--blocksize", "x"], "positive integer"),
        (["-o", out, "--format", "nf4", "--include", "("], "regular expression"),
        (["-o", out, "--format", "nf4", "--bogus"], "unknown option"),
        (["-o", out, "--format", "nf4", "extra"], "unexpected argument"),
        (["-o"], "needs a value"),
    ]
    for args, msg in cases:
        r = run_tool("quantize", src, *args)
        assert r.returncode == 2 and msg in r.stderr, (args, r.stderr)
    assert not out.exists()
    r = run_tool("quantize", src, "-o", out, "--format", "nf4", "--blocksize", "3")
    assert r.returncode == 2 and "nf4 block_size 3: must be even" in r.stderr
    assert not out.exists()
    assert run_tool("quantize", "--help", check=0).stdout.startswith("usage")
    assert run_tool("inspect").returncode == 2
    assert run_tool("inspect", src, "--bogus").returncode == 2
    assert run_tool("inspect", tmp_path / "missing.safetensors").returncode == 1


def test_existing_companion_keys_are_refused(run_tool, tmp_path):
    from safetensors.numpy import save_file

    src = tmp_path / "m.safetensors"
    save_file({"a.weight": np.ones((4, 64), np.float32),
               "a.weight.absmax": np.ones(4, np.float32)}, str(src))
    r = run_tool("quantize", src, "-o", tmp_path / "o.safetensors", "--format", "nf4")
    assert r.returncode == 1 and "already has a tensor 'a.weight.absmax'" in r.stderr


def test_write_failures_leave_nothing(run_tool, model_file, tmp_path):
    src, _ = model_file
    r = run_tool("quantize", src, "-o", tmp_path / "no" / "dir.safetensors", "--format", "nf4")
    assert r.returncode == 1 and "temporary file" in r.stderr
    target = tmp_path / "adir"
    target.mkdir()
    before = sorted(os.listdir(tmp_path))
    r = run_tool("quantize", src, "-o", target, "--format", "nf4", "--force")
    assert r.returncode == 1 and "is a folder; the input makes a file" in r.stderr
    assert sorted(os.listdir(tmp_path)) == before and os.listdir(target) == []


# ---- malformed and hostile files -----------------------------------------------------------------


def st_bytes(header, data=b"", length=None):
    h = header if isinstance(header, bytes) else json.dumps(header).encode()
    return struct.pack("<Q", len(h) if length is None else length) + h + data


def entry(dtype, shape, begin, end):
    return {"dtype": dtype, "shape": shape, "data_offsets": [begin, end]}


HOSTILE = {
    "empty": (b"", "truncated"),
    "short": (b"\x05\x00\x00", "truncated"),
    "huge_header": (st_bytes(b"{}", length=1 << 40), "larger than"),
    "header_past_end": (st_bytes(b"{}", length=1000), "truncated"),
    "not_object": (st_bytes(b"[1, 2]"), "not a safetensors file"),
    "bad_json": (st_bytes(b'{"a": {"dtype": '), "malformed header JSON"),
    "duplicate_key": (st_bytes(b'{"a": {}, "a": {}}'), "duplicate"),
    "entry_not_object": (st_bytes({"a": 3}), "not a JSON object"),
    "missing_fields": (st_bytes({"a": {"dtype": "F32"}}), "needs string dtype"),
    "unknown_dtype": (st_bytes({"a": entry("F128", [2], 0, 32)}, b"\0" * 32), "unknown dtype"),
    "negative_shape": (st_bytes({"a": entry("F32", [-1, 4], 0, 16)}, b"\0" * 16),
                       "integers >= 0"),
    "too_many_dims": (st_bytes({"a": entry("F32", [1] * 9, 0, 4)}, b"\0" * 4), "dimensions"),
    "numel_overflow": (st_bytes({"a": entry("F32", [2**40, 2**40], 0, 4)}, b"\0" * 4),
                       "overflows"),
    "offsets_past_end": (st_bytes({"a": entry("F32", [64, 64], 0, 16384)}, b"\0" * 64),
                         "outside the data section"),
    "offsets_reversed": (st_bytes({"a": entry("F32", [0], 8, 4)}, b"\0" * 8),
                         "outside the data section"),
    "negative_offset": (st_bytes({"a": entry("F32", [1], -4, 0)}, b"\0" * 8),
                        "negative data_offsets"),
    "size_mismatch": (st_bytes({"a": entry("F32", [4, 4], 0, 60)}, b"\0" * 64), "span 60 bytes"),
    "bad_offsets_type": (st_bytes({"a": {"dtype": "F32", "shape": [1],
                                         "data_offsets": [0, "4"]}}, b"\0" * 4),
                         "data_offsets must be"),
    "overlap": (st_bytes({"a.weight": entry("F32", [2, 4], 0, 32),
                          "b.weight": entry("F32", [2, 4], 16, 48)}, b"\0" * 48), "overlap"),
    # an empty tensor sorted between two overlapping ones once hid their overlap
    "overlap_behind_empty": (st_bytes({"a.weight": entry("F32", [2, 4], 0, 32),
                                       "e": entry("F32", [0], 16, 16),
                                       "b.weight": entry("F32", [2, 4], 16, 48)}, b"\0" * 48),
                             "tensors 'a.weight' and 'b.weight' overlap"),
    "overlap_behind_empties": (st_bytes({"a": entry("U8", [40], 0, 40),
                                         "e1": entry("U8", [0], 8, 8),
                                         "e2": entry("U8", [0], 20, 20),
                                         "c": entry("U8", [8], 32, 40)}, b"\0" * 40),
                               "tensors 'a' and 'c' overlap"),
    "metadata_not_string": (st_bytes({"__metadata__": {"k": 1}}), "not a string"),
    "offset_not_integer": (st_bytes({"a": entry("F32", [1], 0, 4.0)}, b"\0" * 4),
                           "data_offsets must be"),
}


@pytest.mark.parametrize("case", sorted(HOSTILE))
def test_hostile_files(run_tool, tmp_path, case):
    blob, message = HOSTILE[case]
    src = tmp_path / "bad.safetensors"
    src.write_bytes(blob)
    out = tmp_path / "out.safetensors"
    out.write_bytes(b"previous contents")
    before = sorted(os.listdir(tmp_path))
    r = run_tool("quantize", src, "-o", out, "--force", "--format", "nf4")
    assert r.returncode == 1, (r.stdout, r.stderr)
    assert "error:" in r.stderr and message in r.stderr, r.stderr
    assert out.read_bytes() == b"previous contents"
    assert sorted(os.listdir(tmp_path)) == before  # no temporary file left behind
    r = run_tool("inspect", src)
    assert r.returncode == 1 and message in r.stderr


def test_valid_edge_files(run_tool, tmp_path):
    # an empty tensor list, a zero-size tensor and a scalar are all valid
    src = tmp_path / "edge.safetensors"
    # (empty tensors own no bytes: one inside another tensor's range overlaps nothing)
    src.write_bytes(st_bytes({"e.weight": entry("F32", [0, 4], 0, 0),
                              "s": entry("F32", [], 0, 4),
                              "inside": entry("F32", [0], 2, 2)}, b"\0\0\x80\x3f"))
    out = tmp_path / "o.safetensors"
    run_tool("quantize", src, "-o", out, "--format", "nf4", check=0)
    raw = read_raw(out)
    assert raw["s"] == ("F32", [], b"\0\0\x80\x3f") and raw["e.weight"][1] == [0, 4]
    assert raw["inside"] == ("F32", [0], b"")
    empty = tmp_path / "empty.safetensors"
    empty.write_bytes(st_bytes(b"{}"))
    run_tool("quantize", empty, "-o", out, "--force", "--format", "nf4", check=0)
    assert read_raw(out) == {}


# ---- interruption and the progress bar -----------------------------------------------------------


def big_model(path, layers=8):
    from safetensors.numpy import save_file

    rng = np.random.default_rng(0)
    save_file({f"l{i}.weight": rng.standard_normal((1024, 1024), np.float32)
               for i in range(layers)}, str(path))


@pytest.mark.parametrize("delay", [0.05, 0.3, 0.8])
def test_interrupt_never_leaves_a_partial_output(tool, tmp_path, delay):
    src = tmp_path / "big.safetensors"
    big_model(src)
    work = tmp_path / "work"
    work.mkdir()
    out = work / "out.safetensors"
    proc = subprocess.Popen([tool, "quantize", str(src), "-o", str(out), "--format", "nf4",
                             "--quiet"], stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)
    time.sleep(delay)
    proc.send_signal(signal.SIGINT)
    proc.wait(timeout=60)
    files = os.listdir(work)
    assert proc.returncode in (0, -signal.SIGINT)
    if proc.returncode == 0:
        assert files == ["out.safetensors"]
    # never a temporary file; an output only when complete (the signal may come after the rename)
    assert files in ([], ["out.safetensors"])
    if files:
        assert len(read_raw(out)) == 8 * 4


def quantize_on_pty(tool, src, out):
    """`qsparse quantize SRC -o OUT --format nf4` with stderr on a pseudo-terminal (where the
    tool draws its progress bar): (exit status, everything it wrote there)."""
    master, slave = pty.openpty()
    proc = subprocess.Popen([tool, "quantize", str(src), "-o", str(out), "--force", "--format",
                             "nf4"],
                            stdout=subprocess.DEVNULL, stderr=slave)
    os.close(slave)
    chunks = []
    while True:
        try:
            data = os.read(master, 4096)
        except OSError:  # EIO once the tool has exited and closed its side
            break
        if not data:
            break
        chunks.append(data)
    proc.wait(timeout=60)
    os.close(master)
    return proc.returncode, b"".join(chunks).decode()


def test_progress_bar_only_on_a_terminal(tool, model_file, tmp_path):
    src, _ = model_file
    out = tmp_path / "o.safetensors"
    returncode, text = quantize_on_pty(tool, src, out)
    assert returncode == 0
    # one bar: each tensor is quantized and written before the next (streaming)
    assert "quantizing [" in text and "#" in text and "\r" in text and "5/5" in text
    r = subprocess.run([tool, "quantize", str(src), "-o", str(out), "--force", "--format", "nf4"],
                       capture_output=True, text=True)
    assert r.returncode == 0 and "quantizing" not in r.stderr


@pytest.mark.parametrize("scale", [1e-7, 3.0, 1e17, 123456.0])
def test_nested_offset_is_printed_like_python(run_tool, tmp_path, scale):
    """The quant_state's nested_offset is Python's repr of the f32 offset (formats.md §7), in the
    fixed and the exponent notation alike."""
    from safetensors.numpy import save_file

    w = (np.random.default_rng(8).standard_normal((8, 64)) * scale).astype(np.float32)
    src = tmp_path / "m.safetensors"
    save_file({"l.weight": w}, str(src))
    out = tmp_path / "o.safetensors"
    run_tool("quantize", src, "-o", out, "--format", "nf4", "--double-quant", check=0)
    text = read_raw(out)["l.weight.quant_state.bitsandbytes__nf4"][2].decode()
    offset = float(qs.quantize(w, "nf4", double_quant=True).nested_offset)
    assert text.endswith(f'"nested_offset": {offset!r}}}')
    assert json.loads(text)["nested_offset"] == offset


def test_mutated_files_never_crash(run_tool, tmp_path):
    """Seeded mutations of a valid file (header bytes, digits, truncation, length field): every
    run ends with exit 0 or a clean error (1), never a signal."""
    import random

    from safetensors.numpy import save_file

    base_path = tmp_path / "base.safetensors"
    save_file({"a.weight": np.ones((8, 64), np.float32), "b.bias": np.ones(8, np.float32)},
              str(base_path), metadata={"k": "v"})
    base = base_path.read_bytes()
    hl = int.from_bytes(base[:8], "little")
    rnd = random.Random(7)
    src, out = tmp_path / "m.safetensors", tmp_path / "o.safetensors"
    for i in range(40):
        b = bytearray(base)
        kind = i % 4
        if kind == 0:
            for _ in range(rnd.randint(1, 4)):
                b[rnd.randrange(8, 8 + hl)] = rnd.randrange(256)
        elif kind == 1:
            digits = [j for j in range(8, 8 + hl) if chr(b[j]).isdigit()]
            b[rnd.choice(digits)] = ord(rnd.choice("0123456789"))
        elif kind == 2:
            b = b[:rnd.randrange(len(b))]
        else:
            b[:8] = rnd.choice([0, 1, hl - 1, hl + 1, len(b), 2**63, 2**64 - 1]).to_bytes(8,
                                                                                       "little")
        src.write_bytes(bytes(b))
        for args in (("inspect", src), ("quantize", src, "-o", out, "--format", "nf4", "-q")):
            r = run_tool(*args)
            assert r.returncode in (0, 1), (i, args[0], r.returncode, r.stderr)
            assert r.returncode == 0 or "error:" in r.stderr


# ---- costs that grow with the number of tensors ---------------------------------------------------


def many_tensors(n_weights, n_copied):
    """n_weights tiny 1x2 float32 weights (quantized) and n_copied 1-element biases (copied):
    the header dict and the data section."""
    header, data = {}, bytearray()
    for i in range(max(n_weights, n_copied)):
        if i < n_weights:
            header[f"blk.{i}.weight"] = entry("F32", [1, 2], len(data), len(data) + 8)
            data += struct.pack("<2f", 1.0, -float(i % 7))
        if i < n_copied:
            header[f"blk.{i}.bias"] = entry("F32", [1], len(data), len(data) + 4)
            data += struct.pack("<f", float(i))
    return header, bytes(data)


def test_hundred_thousand_tensors(run_tool, tmp_path):
    """Issue 10 item 3: every per-tensor step (companion-key check, duplicate-name check, header
    writing, inspect's lookups) is n log n or better. 10^5 input tensors, 1.9 x 10^5 output
    ones: about a second of CPU per tool run now; the old pairwise name scans, quadratic in the
    output tensors (30 s of CPU for 5 x 10^4 of them), needed about ten minutes, so run_tool's
    300 s timeout ends them and the test fails."""
    src, out = tmp_path / "many.safetensors", tmp_path / "out.safetensors"
    n_w, n_c = 30_000, 70_000
    header, data = many_tensors(n_w, n_c)
    src.write_bytes(st_bytes(json.dumps(header, separators=(",", ":")).encode(), data))
    run_tool("quantize", src, "-o", out, "--format", "nf4", "--quiet", check=0)
    with open(out, "rb") as f:
        hl = struct.unpack("<Q", f.read(8))[0]
        written = json.loads(f.read(hl))
    assert len(written) == 1 + n_w * 4 + n_c  # __metadata__, four keys per weight, the biases
    assert written["blk.29999.weight"]["dtype"] == "U8"
    assert written["blk.29999.weight.quant_state.bitsandbytes__nf4"]["dtype"] == "U8"
    assert written["blk.69999.bias"]["shape"] == [1]
    info = json.loads(run_tool("inspect", out, "--json", check=0).stdout)
    assert info["tensors"] == n_w * 4 + n_c and len(info["weights"]) == n_w + n_c
    assert info["quantized_parameters"] == 2 * n_w
    # the companion-key check still finds a clash among them all
    header["blk.7777.weight.absmax"] = entry("F32", [1], len(data), len(data) + 4)
    src.write_bytes(st_bytes(json.dumps(header).encode(), data + b"\0" * 4))
    r = run_tool("quantize", src, "-o", out, "--force", "--format", "nf4", "--quiet")
    assert r.returncode == 1 and "already has a tensor 'blk.7777.weight.absmax'" in r.stderr


# ---- hostile names and metadata ---------------------------------------------------------------


EVIL = "evil\x1b]0;owned\x07\x1b[2J\u009b31m\u202e\r\\"
EVIL_SHOWN = "evil\\x1b]0;owned\\x07\\x1b[2J\\u009b31m\\u202e\\r\\\\"


def assert_terminal_safe(text):
    """No C0 control but newline, no DEL, no C1 control, no bidirectional override."""
    bad = [c for c in text if (ord(c) < 0x20 and c != "\n") or 0x7F <= ord(c) <= 0x9F
           or 0x202A <= ord(c) <= 0x202E or 0x2066 <= ord(c) <= 0x2069]
    assert not bad, (bad, text[:2000])


def test_names_with_escape_sequences_are_printed_escaped(run_tool, tool, tmp_path):
    """Issue 10 item 6: names (and metadata strings) reach the terminal escaped, in inspect's
    table, quantize's error table, progress bar and error messages."""
    from safetensors.numpy import save_file

    w = (np.random.default_rng(4).standard_normal((4, 64)) * 0.1).astype(np.float32)
    src, out = tmp_path / "evil.safetensors", tmp_path / "o.safetensors"
    save_file({EVIL + ".weight": w, "x\x1b[31m": np.ones(2, np.float32)}, str(src),
              metadata={"note\x1b[5m": "v"})
    r = run_tool("quantize", src, "-o", out, "--format", "nf4", check=0)
    assert_terminal_safe(r.stdout + r.stderr)
    assert EVIL_SHOWN + ".weight" in r.stdout  # the error table row
    assert EVIL + ".weight" in read_raw(out)  # the file itself keeps the name as it was

    # a pseudo-terminal shows the progress bar with the name in it
    returncode, bar = quantize_on_pty(tool, src, out)
    assert returncode == 0 and "quantizing [" in bar and "evil\\x1b]0;" in bar
    assert_terminal_safe(bar.replace("\r", ""))

    r = run_tool("inspect", out, check=0)
    assert_terminal_safe(r.stdout)
    assert EVIL_SHOWN + ".weight" in r.stdout and "x\\x1b[31m" in r.stdout
    j = run_tool("inspect", out, "--json", check=0).stdout
    assert j.isascii()
    assert_terminal_safe(j)
    names = {x["name"] for x in json.loads(j)["weights"]}
    assert names == {EVIL + ".weight", "x\x1b[31m"}

    # error messages quoting names: a clash, and a header entry the reader refuses
    save_file({EVIL + ".weight": w, EVIL + ".weight.absmax": np.ones(4, np.float32)}, str(src))
    r = run_tool("quantize", src, "-o", out, "--force", "--format", "nf4")
    assert r.returncode == 1
    assert_terminal_safe(r.stderr)
    assert f"already has a tensor '{EVIL_SHOWN}.weight.absmax'" in r.stderr
    src.write_bytes(st_bytes({EVIL: entry("F99", [1], 0, 4)}, b"\0" * 4))
    for args in (("inspect", src), ("quantize", src, "-o", out, "--force", "--format", "nf4")):
        r = run_tool(*args)
        assert r.returncode == 1 and f"tensor '{EVIL_SHOWN}': unknown dtype" in r.stderr
        assert_terminal_safe(r.stderr)
    # a message cut inside a UTF-8 sequence (names are long, messages are not) shows the
    # dangling bytes as \xHH instead of printing invalid UTF-8
    long_name = "\u00e9" * 400
    src.write_bytes(st_bytes({long_name: entry("F99", [1], 0, 4)}, b"\0" * 4))
    r = run_tool("inspect", src)  # text=True: invalid UTF-8 would raise here
    assert r.returncode == 1 and r.stderr.rstrip("\n").endswith("\\xc3")
    assert_terminal_safe(r.stderr)
    # a format string taken from the metadata is escaped too
    src.write_bytes(st_bytes({"__metadata__": {"qsparse.quantized": json.dumps(
        {"a.weight": {"format": "\x1b[2J", "shape": [2, 2], "dtype": "\x07"}})},
        "a.weight": entry("U8", [2], 0, 2)}, b"\0\0"))
    r = run_tool("inspect", src, check=0)
    assert "\\x1b[2J" in r.stdout and "\\x07" in r.stdout
    assert_terminal_safe(r.stdout)
    # ... and one too long for its field is cut between characters, never inside one (the
    # --json output once lost such a weight: jansson refuses a string of invalid UTF-8)
    src.write_bytes(st_bytes({"__metadata__": {"qsparse.quantized": json.dumps(
        {"a.weight": {"format": "\u00e9" * 40, "shape": [2, 2], "dtype": "\u20ac" * 9}})},
        "a.weight": entry("U8", [2], 0, 2)}, b"\0\0"))
    w = json.loads(run_tool("inspect", src, "--json", check=0).stdout)["weights"]
    assert [(x["name"], x["format"], x["dtype"]) for x in w] == [
        ("a.weight", "\u00e9" * 15, "\u20ac" * 5)]


def quant_state_file(path, shape, record=None):
    """A bitsandbytes-style weight whose quant_state claims `shape`, or (record=True) a weight
    described by a qsparse.quantized metadata record with that shape."""
    if record:
        meta = {"qsparse.quantized": json.dumps(
            {f"l{i}.weight": {"format": "nf4", "shape": s, "dtype": "float32"}
             for i, s in enumerate(shape)})}
        header = {"__metadata__": meta}
        for i in range(len(shape)):
            header[f"l{i}.weight"] = entry("U8", [4], 4 * i, 4 * i + 4)
        path.write_bytes(st_bytes(header, b"\0" * (4 * len(shape))))
        return
    state = json.dumps({"quant_type": "nf4", "blocksize": 64, "dtype": "float32",
                        "shape": shape}).encode()
    path.write_bytes(st_bytes({
        "l.weight": entry("U8", [4, 1], 0, 4),
        "l.weight.quant_state.bitsandbytes__nf4": entry("U8", [len(state)], 4, 4 + len(state)),
    }, b"\0" * 4 + state))


@pytest.mark.parametrize("shape,record,message", [
    ([2**40, 2**40], False, "shape in its quant_state overflows"),
    ([2**62, 2, 2], False, "shape in its quant_state overflows"),
    ([3, -1], False, "not an integer >= 0"),
    ([[2**62, 4]], True, "shape in its qsparse.quantized metadata overflows"),
    ([[2**62, 1], [2**62, 1], [2**62, 1]], True, "parameter count overflows"),
    ([["2", 2]], True, "not an integer >= 0"),
    ([7], True, "not a list of at most 8 integers"),
])
def test_inspect_refuses_overflowing_metadata_shapes(run_tool, tmp_path, shape, record, message):
    """Issue 10 item 6: shapes taken from metadata are checked like header shapes and the totals
    are added with overflow checks; the old code summed them with signed overflow (and printed
    a negative parameter count)."""
    src = tmp_path / "m.safetensors"
    quant_state_file(src, shape, record)
    for args in ((), ("--json",)):
        r = run_tool("inspect", src, *args)
        assert r.returncode == 1 and message in r.stderr, (r.stdout, r.stderr)
        assert r.stdout == ""
    quant_state_file(src, [2**31, 2**31] if not record else [[2**31, 2**31]], record)
    info = json.loads(run_tool("inspect", src, "--json", check=0).stdout)
    assert info["parameters"] == 2**62  # large but representable: shown as it is


# ---- special files --------------------------------------------------------------------------------


@pytest.mark.parametrize("kind", ["fifo", "directory", "device"])
def test_special_files_are_refused_without_blocking(tool, tmp_path, kind):
    """Issue 10 item 6: a FIFO used to block inspect forever (open waits for a writer)."""
    path = tmp_path / "special"
    if kind == "fifo":
        os.mkfifo(path)
        what = "a FIFO"
    elif kind == "directory":
        path.mkdir()
        what = "a directory"
    else:
        path, what = "/dev/null", "a device"
    out = tmp_path / "o.safetensors"
    for args in (("inspect", path), ("quantize", path, "-o", out, "--format", "nf4")):
        r = subprocess.run([tool, *map(str, args)], capture_output=True, text=True, timeout=30)
        # quantize reads a directory as a model folder: without config.json it has none
        msg = "config.json" if kind == "directory" and args[0] == "quantize" else \
            f"not a regular file ({what})"
        assert r.returncode == 1 and msg in r.stderr, r.stderr
    assert not out.exists()


# ---- signals, SIGKILL leftovers, truncated inputs, modes -----------------------------------------


def stopped_tool(tool, args, point, preexec_fn=None, env=None):
    """Start the tool with its test hook set to stop at `point`; return it once it has stopped."""
    env = dict(os.environ if env is None else env, QSPARSE_TOOL_TEST_STOP=point)
    proc = subprocess.Popen([tool, *map(str, args)], env=env, stdout=subprocess.PIPE,
                            stderr=subprocess.PIPE, text=True, preexec_fn=preexec_fn)
    _, status = os.waitpid(proc.pid, os.WUNTRACED)
    if not os.WIFSTOPPED(status):
        proc.returncode = os.waitstatus_to_exitcode(status)
        out, err = proc.communicate()
        pytest.fail(f"the tool did not stop at '{point}' (exit {proc.returncode}): {err}")
    return proc


def no_core():
    """Child setup of the signal tests: no core dumps, and every fatal signal at its default
    action whatever the test runner inherited (nohup, or a CI runner, ignores SIGHUP; the tool
    rightly keeps an inherited SIG_IGN, which the test of that case sets on purpose)."""
    resource.setrlimit(resource.RLIMIT_CORE, (0, 0))
    for name in FATAL_SIGNALS:
        signal.signal(getattr(signal, name), signal.SIG_DFL)


def temp_files(work):
    return sorted(n for n in os.listdir(work) if ".qsparse-tmp-" in n)


FATAL_SIGNALS = [s for s in ("SIGHUP", "SIGINT", "SIGQUIT", "SIGILL", "SIGTRAP", "SIGABRT",
                             "SIGBUS", "SIGFPE", "SIGUSR1", "SIGSEGV", "SIGUSR2", "SIGPIPE",
                             "SIGALRM", "SIGTERM", "SIGSTKFLT", "SIGXCPU", "SIGXFSZ", "SIGVTALRM",
                             "SIGPROF", "SIGPOLL", "SIGPWR", "SIGSYS", "SIGRTMIN", "SIGRTMAX")
                 if hasattr(signal, s)]


@pytest.mark.parametrize("signame", FATAL_SIGNALS)
def test_every_fatal_signal_mid_write_removes_the_temp(tool, model_file, tmp_path, signame):
    """Issue 10 item 7: a signal whose default action ends the process, arriving while the
    temporary output is being written, removes it; the old output stays as it was, and the
    tool still dies of that signal. (Only SIGINT, SIGTERM and SIGHUP were handled.)"""
    sig = getattr(signal, signame)
    src, _ = model_file
    work = tmp_path / "work"
    work.mkdir()
    out = work / "out.safetensors"
    out.write_bytes(b"previous contents")
    proc = stopped_tool(tool, ["quantize", src, "-o", out, "--force", "--format", "nf4", "-q"],
                        "write",
                        preexec_fn=no_core)
    tmp = temp_files(work)
    assert len(tmp) == 1 and f".qsparse-tmp-{proc.pid}-" in tmp[0]
    os.kill(proc.pid, sig)
    os.kill(proc.pid, signal.SIGCONT)
    proc.communicate(timeout=60)
    assert proc.returncode == -sig
    assert os.listdir(work) == ["out.safetensors"]
    assert out.read_bytes() == b"previous contents"


def test_sigxfsz_from_a_file_size_limit_removes_the_temp(tool, tmp_path):
    """A real SIGXFSZ (the output outgrows RLIMIT_FSIZE mid-write) left the temp behind."""
    src = tmp_path / "big.safetensors"
    big_model(src, layers=2)
    work = tmp_path / "work"
    work.mkdir()
    out = work / "out.safetensors"
    out.write_bytes(b"previous contents")

    def limit():
        no_core()
        resource.setrlimit(resource.RLIMIT_FSIZE, (1 << 19, 1 << 19))

    r = subprocess.run([tool, "quantize", str(src), "-o", str(out), "--force", "--format", "nf4",
                        "-q"],
                       preexec_fn=limit, capture_output=True, timeout=120)
    assert r.returncode == -signal.SIGXFSZ
    assert os.listdir(work) == ["out.safetensors"]
    assert out.read_bytes() == b"previous contents"


@pytest.mark.parametrize("signame", ["SIGHUP", "SIGINT", "SIGTERM", "SIGUSR1", "SIGPIPE"])
def test_an_inherited_ignored_signal_stays_ignored(tool, model_file, tmp_path, signame):
    """Issue 10 item 7: `nohup` (SIGHUP ignored before exec) must keep protecting the run; the
    handlers used to replace the inherited SIG_IGN."""
    sig = getattr(signal, signame)
    src, tensors = model_file
    out = tmp_path / "out.safetensors"
    proc = stopped_tool(tool, ["quantize", src, "-o", out, "--format", "nf4", "-q"], "write",
                        preexec_fn=lambda: signal.signal(sig, signal.SIG_IGN))
    os.kill(proc.pid, sig)
    os.kill(proc.pid, signal.SIGCONT)
    proc.communicate(timeout=60)
    assert proc.returncode == 0
    raw = read_raw(out)
    assert raw["position_ids"][2] == tensors["position_ids"].tobytes() and len(raw) == 5 * 4 + 5
    assert temp_files(tmp_path) == []


def test_sigkill_leftover_is_named_and_removed_by_the_next_run(tool, run_tool, model_file,
                                                                tmp_path):
    """Issue 10 item 7: no handler sees SIGKILL, so its temp carries the pid; the next write to
    the same output removes temps whose process is gone, and only those."""
    src, _ = model_file
    work = tmp_path / "work"
    work.mkdir()
    out = work / "out.safetensors"
    out.write_bytes(b"previous contents")
    proc = stopped_tool(tool, ["quantize", src, "-o", out, "--force", "--format", "nf4", "-q"],
                        "write")
    proc.kill()
    proc.communicate(timeout=60)
    assert proc.returncode == -signal.SIGKILL
    stale = temp_files(work)
    assert stale == [n for n in stale if n.startswith(f".out.safetensors.qsparse-tmp-{proc.pid}-")]
    assert len(stale) == 1 and out.read_bytes() == b"previous contents"
    # a live process's temp, another output's stale temp and a lookalike name are all kept
    live = f".out.safetensors.qsparse-tmp-{os.getpid()}-abcDEF"
    other = f".other.safetensors.qsparse-tmp-{proc.pid}-abcdef"
    odd = f".out.safetensors.qsparse-tmp-{proc.pid}-abcdef.keep"
    for name in (live, other, odd):
        (work / name).write_bytes(b"x")
    run_tool("quantize", src, "-o", out, "--force", "--format", "nf4", "-q", check=0)
    assert sorted(os.listdir(work)) == sorted([live, other, odd, "out.safetensors"])
    assert len(read_raw(out)) == 5 * 4 + 5


@pytest.mark.parametrize("case", ["quantized_read", "copied_write", "last_bytes"])
def test_input_truncated_during_the_run(tool, tmp_path, case):
    """Issue 10 item 7: another program truncates the input while the tool has it mapped. Reading
    a lost page raised SIGBUS and killed the tool; now it is a message and exit status 1, with
    no temp left and the old output intact. Bytes cut from the last mapped page raise no signal
    (they read as zeros): the size check before the rename catches those."""
    from safetensors.numpy import save_file

    rng = np.random.default_rng(1)
    src = tmp_path / "in.safetensors"
    # 2 MB tensors: larger than the writer's buffer, so copying one is a write() from the map
    save_file({"l.weight": rng.standard_normal((512, 1024), np.float32)}, str(src))
    size = os.path.getsize(src)
    hl = struct.unpack("<Q", src.read_bytes()[:8])[0]
    work = tmp_path / "work"
    work.mkdir()
    out = work / "out.safetensors"
    out.write_bytes(b"previous contents")
    args = ["quantize", src, "-o", out, "--force", "--format", "nf4", "-q"]
    if case == "copied_write":
        args += ["--include", "nothing"]
    point = "open" if case == "quantized_read" else "write"
    proc = stopped_tool(tool, args, point)
    os.truncate(src, size - 1 if case == "last_bytes" else 8 + hl + 4096)
    os.kill(proc.pid, signal.SIGCONT)
    _, err = proc.communicate(timeout=60)
    assert proc.returncode == 1, (proc.returncode, err)
    assert "while it was being read" in err
    assert os.listdir(work) == ["out.safetensors"]
    assert out.read_bytes() == b"previous contents"


def test_inspect_of_an_input_truncated_while_mapped(tool, tmp_path):
    src = tmp_path / "in.safetensors"
    w = np.zeros((64, 64), np.uint8).reshape(-1)
    state = json.dumps({"quant_type": "nf4", "blocksize": 64, "dtype": "float32",
                        "shape": [64, 128]}).encode()
    pad = 1 << 16  # the quant_state sits pages away from the header
    src.write_bytes(st_bytes({
        "l.weight": entry("U8", [pad], 0, pad),
        "l.weight.quant_state.bitsandbytes__nf4": entry("U8", [len(state)], pad, pad + len(state)),
    }, bytes(pad) + state))
    del w
    proc = stopped_tool(tool, ["inspect", src], "open")
    os.truncate(src, 4096)
    os.kill(proc.pid, signal.SIGCONT)
    out, err = proc.communicate(timeout=60)
    assert proc.returncode == 1 and "while it was being read" in err, (proc.returncode, err)


@pytest.mark.parametrize("existing,umask,expect", [(0o600, 0o022, 0o600), (0o640, 0o077, 0o640),
                                                   (0o444, 0o022, 0o444), (None, 0o022, 0o644),
                                                   (None, 0o077, 0o600), (None, 0o027, 0o640)])
def test_output_mode(tool, model_file, tmp_path, existing, umask, expect):
    """Issue 10 item 7: overwriting an output keeps its permissions (0600 became 0644); a new
    output gets 0666 less the umask."""
    src, _ = model_file
    out = tmp_path / "out.safetensors"
    if existing is not None:
        out.write_bytes(b"previous contents")
        os.chmod(out, existing)
    r = subprocess.run([tool, "quantize", str(src), "-o", str(out), "--force", "--format", "nf4",
                        "-q"],
                       preexec_fn=lambda: os.umask(umask), capture_output=True, timeout=120)
    assert r.returncode == 0, r.stderr
    assert stat.S_IMODE(os.stat(out).st_mode) == expect
    assert len(read_raw(out)) == 5 * 4 + 5
