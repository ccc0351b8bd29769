# SPDX-License-Identifier: MIT
"""qs.load and the `qsparse` tool refuse the same safetensors files (issue 35 item 7).

qs.load used to block on a FIFO, raise RecursionError or TypeError on a deeply nested or odd
header where its docstring promises ValueError, and accept duplicate keys, overlapping tensors
and non-integer shapes that the tool refuses. Each header below is written to a file and given
to both: `qsparse inspect` must exit 0 exactly when qs.load returns, and every refusal of
qs.load must be a ValueError."""

import json
import os
import struct
import subprocess
import sys

import pytest

import qsparse as qs


def entry(dtype="F32", shape=(2,), offsets=(0, 8)):
    return {"dtype": dtype, "shape": list(shape), "data_offsets": list(offsets)}


def text(obj):
    return json.dumps(obj)


def nested(depth):
    return '{"__metadata__": {"x": ' + "[" * depth + "]" * depth + "}}"


# (id, header text, data bytes, accepted)
CASES = [
    ("valid", text({"a": entry()}), 8, True),
    ("empty header", "{}", 0, True),
    ("eight dims", text({"a": entry(shape=[1] * 7 + [2])}), 8, True),
    ("empty tensors share an offset", text({"a": entry(shape=[0], offsets=[4, 4]),
                                            "b": entry(shape=[0], offsets=[4, 4]),
                                            "c": entry()}), 8, True),
    ("C64 and F8_E8M0", text({"a": entry("C64", [1], [0, 8]), "b": entry("F8_E8M0", [8],
                                                                          [8, 16])}), 16, True),
    ("metadata of strings", text({"__metadata__": {"k": "v"}, "a": entry()}), 8, True),
    ("duplicate tensor", '{"a": %s, "a": %s}' % (text(entry()), text(entry())), 8, False),
    ("duplicate field", '{"a": {"dtype": "F32", "dtype": "F32", "shape": [2], '
                        '"data_offsets": [0, 8]}}', 8, False),
    ("nested 5000 deep", nested(5000), 0, False),
    ("nested 1500 deep", nested(1500), 0, False),
    ("NaN shape", '{"a": {"dtype": "F32", "shape": [NaN], "data_offsets": [0, 8]}}', 8, False),
    ("Infinity offset", '{"a": {"dtype": "F32", "shape": [2], "data_offsets": [0, Infinity]}}',
     8, False),
    ("float shape", text({"a": entry(shape=[2.0])}), 8, False),
    ("bool shape", text({"a": entry(shape=[True, 2])}), 8, False),
    ("string shape", text({"a": entry(shape=["2"])}), 8, False),
    ("negative shape", text({"a": entry(shape=[-2])}), 8, False),
    ("nine dims", text({"a": entry(shape=[1] * 8 + [2])}), 8, False),
    ("shape past int64", text({"a": entry(shape=[2**64, 0])}), 8, False),
    ("element count past int64", text({"a": entry(shape=[2**62, 2**62, 0])}), 8, False),
    ("float offsets", text({"a": entry(offsets=[0.0, 8.0])}), 8, False),
    ("bool offsets", text({"a": entry(shape=[0], offsets=[False, False])}), 8, False),
    ("three offsets", text({"a": entry(offsets=[0, 8, 8])}), 8, False),
    ("offsets past the data", text({"a": entry(offsets=[8, 16])}), 8, False),
    ("offsets reversed", text({"a": entry(shape=[0], offsets=[8, 0])}), 8, False),
    ("overlap", text({"a": entry(offsets=[0, 8]), "b": entry(offsets=[4, 12])}), 12, False),
    ("overlap hidden by a short tensor", text({"a": entry("F32", [4], [0, 16]),
                                               "b": entry("F32", [1], [4, 8]),
                                               "c": entry("F32", [1], [12, 16])}), 16, False),
    ("unknown dtype", text({"a": entry("F128", [1], [0, 16])}), 16, False),
    ("entry is a list", '{"a": [1, 2]}', 0, False),
    ("entry lacks its shape", '{"a": {"dtype": "F32", "data_offsets": [0, 8]}}', 8, False),
    ("dtype is a list", text({"a": {"dtype": ["F32"], "shape": [2], "data_offsets": [0, 8]}}),
     8, False),
    ("metadata null", text({"__metadata__": None, "a": entry()}), 8, False),
    ("metadata a list", text({"__metadata__": ["x"], "a": entry()}), 8, False),
    ("metadata value a number", text({"__metadata__": {"k": 1}, "a": entry()}), 8, False),
    ("space before the header", " " + text({"a": entry()}), 8, False),
    ("NUL in a name", '{"a\\u0000b": %s}' % text(entry()), 8, False),
    ("unpaired surrogate", '{"a\\ud800": %s}' % text(entry()), 8, False),
    # the tool ignores an entry's other fields, but jansson refuses the whole text for these
    ("extra field past int64", '{"a": {"dtype": "F32", "shape": [2], "data_offsets": [0, 8], '
                               '"x": 18446744073709551616}}', 8, False),
    ("extra field NaN", '{"a": {"dtype": "F32", "shape": [2], "data_offsets": [0, 8], '
                        '"x": NaN}}', 8, False),
    ("extra field with NUL", '{"a": {"dtype": "F32", "shape": [2], "data_offsets": [0, 8], '
                             '"x": "a\u0000"}}', 8, False),
    ("extra field of ordinary values", '{"a": {"dtype": "F32", "shape": [2], '
                                       '"data_offsets": [0, 8], "x": [1.5, "s", null]}}', 8,
     True),
]


def write(path, header, data):
    h = header.encode("utf-8")
    with open(path, "wb") as f:
        f.write(struct.pack("<Q", len(h)) + h + bytes(data))


@pytest.mark.parametrize("name,header,data,accepted", CASES, ids=[c[0] for c in CASES])
def test_load_and_the_tool_agree(tool, tmp_path, name, header, data, accepted):
    path = tmp_path / "f.safetensors"
    write(path, header, data)
    r = subprocess.run([tool, "inspect", str(path)], capture_output=True, text=True, timeout=60)
    assert r.returncode == (0 if accepted else 1), (name, r.stdout, r.stderr)
    if accepted:
        qs.load(path)
    else:
        with pytest.raises(ValueError):
            qs.load(path)


@pytest.mark.parametrize("kind", ["fifo", "directory", "device"])
def test_load_refuses_special_files_without_blocking(tmp_path, kind):
    """qs.load of a FIFO waited for a writer forever; now a ValueError at once, as the tool."""
    if kind == "fifo":
        path = tmp_path / "p.safetensors"
        os.mkfifo(path)
        what = "a FIFO"
    elif kind == "directory":
        path, what = tmp_path, "a directory"
    else:
        path, what = "/dev/null", "a device"
    code = ("import sys, qsparse\n"
            "try:\n    qsparse.load(sys.argv[1])\n"
            "except ValueError as e:\n    print(e)\n    sys.exit(3)\n")
    env = dict(os.environ, PYTHONPATH=os.pathsep.join(
        [os.path.dirname(os.path.dirname(qs.__file__)), os.environ.get("PYTHONPATH", "")]))
    r = subprocess.run([sys.executable, "-c", code, str(path)], capture_output=True, text=True,
                       timeout=60, env=env)
    assert r.returncode == 3, (r.stdout, r.stderr)
    assert f"not a regular file ({what})" in r.stdout
