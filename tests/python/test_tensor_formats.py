# SPDX-License-Identifier: MIT
"""Per-tensor formats (`qsparse quantize --tensor-format REGEX=FORMAT`, llama.cpp's
--tensor-type) and `--dry-run`: the first matching pattern gives a tensor its format, "none" keeps
it float; a layout that holds one format per model refuses a mix; the dry run makes every check
and prints the output size the real run writes, writing nothing. The real loaders read a mixed
compressed-tensors folder in tests/python/test_loaders.py."""

import json
import re

import numpy as np
import pytest

import qsparse as qs
from conftest import tiny_model

QUERY0 = "encoder.layer.0.attention.self.query.weight"
DENSE = ["encoder.layer.0.intermediate.dense.weight", "encoder.layer.0.output.dense.weight"]
QUERY1 = "encoder.layer.1.attention.self.query.weight"


@pytest.fixture
def model(tmp_path):
    from safetensors.numpy import save_file

    tensors = tiny_model()
    d = tmp_path / "model"
    d.mkdir()
    save_file(tensors, str(d / "model.safetensors"))
    (d / "config.json").write_text('{"model_type": "bert"}')
    return d, tensors


def test_mixed_formats_in_one_file(run_tool, model, tmp_path):
    d, tensors = model
    out = tmp_path / "o.safetensors"
    r = run_tool("quantize", d / "model.safetensors", "-o", out, "--format", "nf4",
                 "--tensor-format", r"dense\.weight$=int8", "--tensor-format", "layer\\.1\\.=none",
                 "--tensor-format", "odd=NVFP4", check=0)
    # rule order; the odd weight of layer 1 matched "none" first, so NVFP4 took nothing
    assert "\nformats: int8: 2, nf4: 1\n" in r.stdout
    back = qs.load(out)
    want = {QUERY0: "nf4", DENSE[0]: "int8", DENSE[1]: "int8", "encoder.layer.1.odd.weight": None}
    for k, fmt in want.items():
        if fmt is None:  # layer.1 matched "none" first: kept float
            assert isinstance(back[k], np.ndarray) and back[k].tobytes() == tensors[k].tobytes()
            continue
        assert back[k].format == fmt
        assert qs.dequantize(back[k]).tobytes() == \
            qs.dequantize(qs.quantize(tensors[k], fmt)).tobytes()
    assert back[QUERY1].tobytes() == tensors[QUERY1].tobytes()
    # the error table names each tensor's format
    assert re.search(r"intermediate\.dense\.weight .* int8$", r.stdout, re.M)


def test_dry_run_prints_the_size_and_writes_nothing(run_tool, model, tmp_path):
    d, _ = model
    args = ["--format", "nvfp4", "--tensor-format", "dense=fp8_e4m3", "--include",
            r"(query|dense)\.weight$"]
    dry = run_tool("quantize", d, "-o", tmp_path / "dry", *args, "--dry-run", check=0)
    assert not (tmp_path / "dry").exists()
    assert "nothing written" in dry.stdout and "nan" in dry.stdout
    real = run_tool("quantize", d, "-o", tmp_path / "real", *args, check=0)
    size = (tmp_path / "real" / "model.safetensors").stat().st_size
    mb = re.search(r"-> ([0-9.]+) MB", dry.stdout).group(1)
    assert float(mb) == round(size / 1e6, 2)
    assert re.search(r"-> ([0-9.]+) MB", real.stdout).group(1) == mb
    cfg = json.load(open(tmp_path / "real" / "config.json"))
    qc = cfg["quantization_config"]
    assert qc["format"] == "mixed-precision" and cfg["dtype"] == "bfloat16"
    groups = {g["format"]: sorted(g["targets"]) for g in qc["config_groups"].values()}
    assert groups == {"float-quantized": sorted(k[:-len(".weight")] for k in DENSE),
                      "nvfp4-pack-quantized": sorted(k[:-len(".weight")]
                                                     for k in (QUERY0, QUERY1))}
    # a dry run checks what the real run checks
    bad = run_tool("quantize", d, "-o", tmp_path / "x", "--format", "nf4", "--tensor-format",
                   "dense=fp4", "--dry-run", check=1)
    assert "bitsandbytes layout holds one format" in bad.stderr


def test_one_format_layouts_refuse_a_mix(run_tool, model, tmp_path):
    d, _ = model
    r = run_tool("quantize", d, "-o", tmp_path / "o", "--format", "nf4", "--tensor-format",
                 "dense=fp4", check=1)
    assert "holds one format per model" in r.stderr and not (tmp_path / "o").exists()
    # "none" is not a format of its own: it leaves the module out of the loader's replacement
    run_tool("quantize", d, "-o", tmp_path / "o", "--format", "nf4", "--tensor-format",
             "output=none", "-q", check=0)
    qc = json.load(open(tmp_path / "o" / "config.json"))["quantization_config"]
    assert "encoder.layer.0.output.dense" in qc["llm_int8_skip_modules"]
    # a rule's format must fit the layout too, before anything is read
    r = run_tool("quantize", d, "-o", tmp_path / "p", "--format", "nf4", "--tensor-format",
                 "dense=fp8_e4m3", check=2)
    assert "--tensor-format 'dense=fp8_e4m3'" in r.stderr and "bitsandbytes" in r.stderr


@pytest.mark.parametrize("spec,msg", [("dense", "REGEX=FORMAT"), ("dense=nf5", "unknown format"),
                                      ("(=nf4", "bad regular expression"), ("=nf4", "REGEX=FORMAT")])
def test_bad_rules(run_tool, model, tmp_path, spec, msg):
    d, _ = model
    r = run_tool("quantize", d / "model.safetensors", "-o", tmp_path / "o.safetensors",
                 "--format", "nf4", "--tensor-format", spec, check=2)
    assert msg in r.stderr
