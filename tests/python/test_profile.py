# SPDX-License-Identifier: MIT
"""Profiling counters through Python (qs.profile) and the tool (--profile), and the doctor
report (qs.doctor, `qsparse doctor`): the counters add up to the calls made, are off outside the
block, follow the forced ISA tier; the doctor's facts agree with the binding's own queries."""

import json
import os
import subprocess

import numpy as np
import pytest

import qsparse as qs


def _w(rows=64, cols=256, seed=1):
    return np.random.default_rng(seed).standard_normal((rows, cols)).astype(np.float32)


def _planes(q):
    return sum(a.nbytes for a in (q.data, q.absmax, q.scale, q.zero_point, q.nested_absmax)
               if a is not None)


def test_profile_counts_add_up():
    w = _w()
    with qs.profile() as p:
        q = qs.quantize(w, "nf4")
        qs.quantize(w, "nf4")
        back = qs.dequantize(q)
        with pytest.raises((ValueError, qs.QsparseError)):
            qs.quantize(w, "nf4", blocksize=3)  # refused: not counted
    rows = {(r["op"], r["format"]): r for r in p.entries}
    assert set(rows) == {("quantize", "nf4"), ("dequantize", "nf4")}
    qr, dr = rows[("quantize", "nf4")], rows[("dequantize", "nf4")]
    assert qr["calls"] == 2 and dr["calls"] == 1
    assert qr["elements"] == 2 * w.size and qr["bytes_in"] == 2 * w.nbytes
    assert qr["bytes_out"] == 2 * _planes(q)
    assert dr["bytes_in"] == _planes(q) and dr["bytes_out"] == back.nbytes
    assert qr["kernel"] == qs.kernels()["nf4_quant"]
    assert dr["kernel"] == qs.kernels()["nf4_dequant"]
    assert all(r["isa"] == qs.isa() and r["ns"] > 0 for r in p.entries)
    # the library's JSON export holds the same rows
    doc = json.loads(p.json())
    assert doc["isa"] == qs.isa() and doc["dropped"] == 0
    assert [(e["op"], e["calls"], e["bytes_out"]) for e in doc["entries"]] == \
        [(r["op"], r["calls"], r["bytes_out"]) for r in p.entries]
    assert qr["kernel"] in str(p) and dr["kernel"] in str(p)


def test_profile_off_outside_the_block():
    w = _w(8, 64)
    qs.quantize(w, "int8")
    with qs.profile() as p:
        pass
    assert p.entries == []
    with qs.profile() as p:
        qs.quantize(w, "int8")
    qs.quantize(w, "int8")  # after the block: not counted anywhere
    assert [r["calls"] for r in p.entries] == [1]
    with qs.profile() as p2:
        pass
    assert p2.entries == []


@pytest.mark.parametrize("tier", ["scalar", "avx2"])
def test_profile_follows_forced_tier(tier):
    if tier not in qs.isas():
        pytest.skip(f"{tier} cannot run here")
    old = qs.isa()
    qs.set_isa(tier)
    try:
        with qs.profile() as p:
            qs.quantize(_w(8, 64), "mxfp4")
        kernel = p.entries[0]["kernel"]
        assert kernel == qs.kernels()["mxfp4_quant"]
        assert kernel.endswith("__ref" if tier == "scalar" else "__avx2")
        assert p.entries[0]["isa"] == tier
    finally:
        qs.set_isa("auto" if old == qs.isas()[-1] else old)


def test_doctor_agrees_with_the_binding():
    d = qs.doctor()
    assert d["version"] == qs.__version__
    assert d["isa"] == qs.isa()
    assert d["tiers"] == qs.isas() or set(qs.isas()) <= set(d["tiers"])
    assert d["backends"]["cpu"]["available"] is True
    assert d["backends"]["cuda"]["available"] == ("cuda" in qs.backends())
    if not d["backends"]["cuda"]["available"]:
        assert d["backends"]["cuda"]["message"]  # the reason is never empty
    if qs.matmul_info()["blas"]:
        assert not d["blas"].startswith("none")
    assert "threads" in d["openmp"] or d["openmp"].startswith("none")


def test_tool_doctor(tool):
    words = subprocess.run([tool, "doctor"], capture_output=True, text=True, check=True).stdout
    doc = json.loads(subprocess.run([tool, "doctor", "--json"], capture_output=True, text=True,
                                    check=True).stdout)
    assert doc["version"] == qs.__version__
    assert f"tier in use:    {doc['isa']}" in words
    assert doc["cpu_features"] in words
    for name in ("cpu", "cuda"):
        assert isinstance(doc["backends"][name]["available"], bool)
    if not doc["backends"]["cuda"]["available"]:
        # the plugin is tried before the reason is read: the words name it too
        reason = doc["backends"]["cuda"]["message"]
        assert reason and f"backend cuda    not available: {reason}" in words
    # a forced lower tier shows in the report
    env = dict(os.environ, QS_FORCE_ISA="scalar")
    forced = json.loads(subprocess.run([tool, "doctor", "--json"], capture_output=True,
                                       text=True, check=True, env=env).stdout)
    assert forced["isa"] == "scalar" and forced["force_isa"] == "scalar"
    bad = subprocess.run([tool, "doctor", "--frobnicate"], capture_output=True, text=True)
    assert bad.returncode == 2 and "unknown option" in bad.stderr


def test_tool_profile_json(tool):
    proc = subprocess.run([tool, "--profile=json", "demo", "--rows", "64", "--cols", "128"],
                          capture_output=True, text=True)
    assert proc.returncode == 0, proc.stderr
    doc = json.loads(proc.stderr.strip().splitlines()[-1])
    ops = {(e["op"], e["format"]) for e in doc["entries"]}
    for fmt in ("nf4", "fp4", "int8", "llm_int8", "mxfp4", "mxfp8", "nvfp4"):
        assert ("quantize", fmt) in ops and ("dequantize", fmt) in ops
    assert all(e["elements"] % (64 * 128) == 0 for e in doc["entries"])
    plain = subprocess.run([tool, "demo", "--rows", "64", "--cols", "128"], capture_output=True,
                           text=True)
    assert plain.returncode == 0 and "profile" not in plain.stderr
    table = subprocess.run([tool, "--profile", "demo", "--rows", "64", "--cols", "128"],
                           capture_output=True, text=True)
    assert table.returncode == 0 and "qs_nf4_quant__" in table.stderr
    bad = subprocess.run([tool, "--profile=xml", "demo"], capture_output=True, text=True)
    assert bad.returncode == 2
