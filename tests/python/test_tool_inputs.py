# SPDX-License-Identifier: MIT
"""What `qsparse quantize` and `qsparse inspect` say about inputs that are not safetensors: a
PyTorch .bin (a zip of pickles), a legacy pickle, a GGUF, HDF5 or .npy file, a Git LFS pointer, a
JSON file, a model folder with only pytorch_model.bin or a .gguf, a folder without config.json.
Each gets a sentence naming what it is and what to do, never a header length read from its magic
bytes or a JSON parser's "(line -1)"; a pickle is never unpickled. A real safetensors file whose
header length begins with one of those magics still reads."""

import json
import os
import pickle
import struct
import zipfile

import numpy as np
import pytest

from conftest import tiny_model

NONSENSE = ("header of", "line -1", "is larger than")


def _zip_bin(path):
    """A file laid out as torch.save writes one: a zip archive holding data.pkl."""
    with zipfile.ZipFile(path, "w") as z:
        z.writestr("archive/data.pkl", pickle.dumps({"w": [0.0, 1.0]}, protocol=2))
        z.writestr("archive/version", "3\n")


class _Boom:
    """Unpickling this runs code: it creates the file named by MARK."""

    def __init__(self, mark):
        self.mark = mark

    def __reduce__(self):
        return (open, (self.mark, "w"))


FILES = [  # name, writer(path, tmp_path), words the message must hold
    ("pytorch_model.bin", lambda p, t: _zip_bin(p), ["zip archive", "never unpickles",
                                                     "save_pretrained"]),
    ("legacy.pt", lambda p, t: p.write_bytes(pickle.dumps(_Boom(str(t / "unpickled")),
                                                          protocol=2)),
     ["pickle", "never unpickles"]),
    ("model.Q4_K_M.gguf", lambda p, t: p.write_bytes(b"GGUF" + struct.pack("<IQQ", 3, 1, 0)),
     ["GGUF", "original Hugging Face model"]),
    ("tf_model.h5", lambda p, t: p.write_bytes(b"\x89HDF\r\n\x1a\n" + bytes(64)), ["HDF5"]),
    ("w.npy", lambda p, t: np.save(p, np.zeros(4, np.float32)), [".npy"]),
    ("lfs.safetensors", lambda p, t: p.write_text(
        "version https://git-lfs.github.com/spec/v1\noid sha256:00\nsize 100\n"),
     ["Git LFS pointer", "git lfs pull"]),
    ("model.safetensors.index.json", lambda p, t: p.write_text('{"weight_map": {}}'),
     ["JSON file", "pass the folder"]),
]


@pytest.mark.parametrize("name,write,words", FILES, ids=[f[0] for f in FILES])
@pytest.mark.parametrize("cmd", ["quantize", "inspect"])
def test_non_safetensors_file(run_tool, tmp_path, name, write, words, cmd):
    src = tmp_path / name
    write(src, tmp_path)
    out = tmp_path / "out.safetensors"
    args = ["-o", out, "--format", "nf4"] if cmd == "quantize" else []
    r = run_tool(cmd, src, *args, check=1)
    for w in words:
        assert w in r.stderr, (w, r.stderr)
    assert not any(n in r.stderr for n in NONSENSE), r.stderr
    assert not out.exists() and not (tmp_path / "unpickled").exists()


def _folder(tmp_path, files, config=True):
    d = tmp_path / "model"
    d.mkdir()
    if config:
        (d / "config.json").write_text('{"model_type": "bert"}')
    for name, write in files.items():
        write(d / name)
    return d


@pytest.mark.parametrize("files,words", [
    ({"pytorch_model.bin": _zip_bin}, ["pytorch_model", "no model.safetensors",
                                       "never unpickles"]),
    ({"pytorch_model.bin.index.json": lambda p: p.write_text("{}"),
      "pytorch_model-00001-of-00002.bin": _zip_bin}, ["pytorch_model", "never unpickles"]),
    ({"model-q4.gguf": lambda p: p.write_bytes(b"GGUF" + bytes(20))}, ["GGUF"]),
], ids=["bin", "bin-shards", "gguf"])
def test_folder_without_safetensors(run_tool, tmp_path, files, words):
    d = _folder(tmp_path, files)
    r = run_tool("quantize", d, "-o", tmp_path / "out", "--format", "nf4", check=1)
    for w in words:
        assert w in r.stderr, (w, r.stderr)
    assert "model.safetensors: No such file" not in r.stderr


def test_folder_without_config(run_tool, tmp_path):
    from safetensors.numpy import save_file

    d = tmp_path / "model"
    d.mkdir()
    save_file(tiny_model(), str(d / "model.safetensors"))
    r = run_tool("quantize", d, "-o", tmp_path / "out", "--format", "nf4", check=1)
    assert "has no config.json" in r.stderr and "pass the .safetensors file" in r.stderr
    assert "line -1" not in r.stderr


def test_safetensors_header_length_like_a_magic(run_tool, tmp_path):
    """A header of 0x280 bytes begins 80 02 like a pickle: still read as safetensors."""
    header = json.dumps({"w.weight": {"dtype": "F32", "shape": [2, 64],
                                      "data_offsets": [0, 512]}}).encode()
    header += b" " * (0x280 - len(header))
    src = tmp_path / "m.safetensors"
    src.write_bytes(struct.pack("<Q", 0x280) + header + np.ones(128, np.float32).tobytes())
    assert src.read_bytes()[:2] == b"\x80\x02"
    run_tool("quantize", src, "-o", tmp_path / "o.safetensors", "--format", "nf4", "-q", check=0)
