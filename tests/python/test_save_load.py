# SPDX-License-Identifier: MIT
"""qs.save / qs.load (python/qsparse/checkpoint.py) and the bitsandbytes QuantState of a QTensor
(python/qsparse/_bnb.py): round trips, byte identity with the `qsparse` tool's files, files
written by bitsandbytes + transformers read back, and bitsandbytes decoding our states bit for
bit."""

import json
import struct

import numpy as np
import pytest

import qsparse as qs
from conftest import read_raw

ml_dtypes = pytest.importorskip("ml_dtypes")

CASES = [("nf4", {}), ("nf4", {"double_quant": True, "blocksize": 128}), ("fp4", {}),
         ("fp4", {"blocksize": 32, "double_quant": True}), ("llm_int8", {}), ("int8", {}),
         ("int8", {"granularity": "group", "group_size": 32, "symmetric": False}),
         ("int8", {"granularity": "tensor"}), ("fp8_e4m3", {}), ("fp8_e5m2", {"scale": 0.5}),
         ("mxfp4", {}), ("mxfp8", {"scale_rounding": "rceil"}), ("nvfp4", {})]


def weights(shape=(48, 96), seed=0, dtype=np.float32):
    rng = np.random.default_rng(seed)
    return (rng.standard_normal(shape) * 0.1).astype(dtype)


def bits(a):
    return a.dtype.str, a.shape, a.tobytes()


def test_round_trip_every_format(tmp_path):
    w = weights()
    tensors = {f"l{i}.weight": qs.quantize(w, f, **kw) for i, (f, kw) in enumerate(CASES)}
    tensors["half.weight"] = qs.quantize(w.astype(np.float16), "nf4")
    tensors["odd.weight"] = qs.quantize(weights((5, 7)), "nf4")   # an odd element count
    tensors["conv.weight"] = qs.quantize(weights((4, 3, 2, 32)), "mxfp4")   # 4-D, row blocks
    plain = {"l0.bias": np.arange(5, dtype=np.float32), "ids": np.arange(6).reshape(2, 3),
             "mask": np.array([True, False]), "scalar": np.float64(2.5),
             "bf16": w[:2].astype(ml_dtypes.bfloat16), "f8": w[:2].astype(ml_dtypes.float8_e4m3fn),
             "big_endian": np.arange(3, dtype=">i4")}
    path = tmp_path / "m.safetensors"
    qs.save(path, {**tensors, **plain}, metadata={"note": "hi"})
    back = qs.load(path)
    assert set(back) == set(tensors) | set(plain)
    for name, q in tensors.items():
        b = back[name]
        assert isinstance(b, qs.QTensor), name
        assert (b.format, b.shape, b.dtype, b.blocksize, b.double_quant) == \
            (q.format, q.shape, q.dtype, q.blocksize, q.double_quant), name
        for field in ("granularity", "group_size", "symmetric", "scale_rounding"):
            assert getattr(b, field) == getattr(q, field), (name, field)
        assert bits(qs.dequantize(b)) == bits(qs.dequantize(q)), name
        for field in ("data", "absmax", "scale", "zero_point", "nested_absmax"):
            x, y = getattr(q, field), getattr(b, field)
            assert (x is None) == (y is None), (name, field)
            if x is not None:
                assert x.tobytes() == y.tobytes(), (name, field)
        assert b.global_scale == q.global_scale and b.nested_offset == q.nested_offset
    for name, a in plain.items():
        b = back[name]
        assert isinstance(b, np.ndarray) and b.shape == np.shape(a), name
        assert np.array_equal(b.astype(np.float64), np.asarray(a).astype(np.float64)), name
    import safetensors

    with safetensors.safe_open(str(path), framework="numpy") as f:
        meta = f.metadata()
    assert meta["note"] == "hi" and meta["format"] == "pt"
    record = json.loads(meta["qsparse.quantized"])
    assert record["l1.weight"] == {"format": "nf4", "shape": [48, 96], "dtype": "float32",
                                   "blocksize": 128, "double_quant": True}


def test_torch_reads_what_save_writes(tmp_path):
    torch = pytest.importorskip("torch")
    from safetensors.torch import load_file

    w = weights()
    tb = torch.from_numpy(w).to(torch.bfloat16)
    path = tmp_path / "m.safetensors"
    qs.save(path, {"a.weight": qs.quantize(w, "fp8_e4m3"), "b.weight": qs.quantize(w, "nf4"),
                   "t": tb})
    got = load_file(str(path))
    assert got["a.weight"].dtype == torch.float8_e4m3fn and got["a.weight"].shape == w.shape
    assert got["a.weight_scale"].shape == ()
    assert got["b.weight"].shape == ((w.size + 1) // 2, 1)
    assert torch.equal(got["t"], tb)
    assert json.loads(bytes(got["b.weight.quant_state.bitsandbytes__nf4"].numpy())) == {
        "quant_type": "nf4", "blocksize": 64, "dtype": "float32", "shape": [48, 96]}
    assert isinstance(qs.load(path)["t"], np.ndarray)


TOOL_CASES = [("nf4", [], "nf4", {}), ("nf4", ["--double-quant"], "nf4", {"double_quant": True}),
              ("fp4", ["--blocksize", "128"], "fp4", {"blocksize": 128}),
              ("llm_int8", [], "llm_int8", {}), ("fp8_e4m3", [], "fp8_e4m3", {}),
              ("fp8_e5m2", [], "fp8_e5m2", {}), ("mxfp4", [], "mxfp4", {}),
              ("mxfp8", [], "mxfp8", {}), ("nvfp4", [], "nvfp4", {}),
              ("int8", [], "int8", {}),
              ("int8", ["--granularity", "group", "--blocksize", "16",
                        "--exclude", "odd|norm|embed"], "int8",
               {"granularity": "group", "group_size": 16}),
              ("int8", ["--granularity", "tensor"], "int8", {"granularity": "tensor"})]


def _tool_cli(run_tool, cli, extra, fmt):
    """The tool's name for `fmt`: before `--format llm_int8` existed, `int8` meant LLM.int8 and
    plain INT8 had no CLI name (then the plain INT8 cases do not apply)."""
    usage = run_tool("quantize", "--help")
    if "llm_int8" in usage.stdout + usage.stderr:
        return cli
    if fmt == "llm_int8":
        return "int8"
    if fmt == "int8":
        pytest.skip("this tool writes no plain INT8")
    return cli


@pytest.mark.parametrize("cli,extra,fmt,kw", TOOL_CASES)
def test_same_bytes_as_the_tool(tmp_path, run_tool, model_file, cli, extra, fmt, kw):
    """qs.load reads the tool's file; qs.save of qs.quantize of the same tensors writes the
    same keys with the same dtypes, shapes and bytes."""
    src, tensors = model_file
    cli = _tool_cli(run_tool, cli, extra, fmt)
    out = tmp_path / "tool.safetensors"
    run_tool("quantize", src, "-o", out, "--format", cli, "--quiet", *extra, check=0)
    back = qs.load(out)
    quantized = {k for k, v in back.items() if isinstance(v, qs.QTensor)}
    assert quantized == {k for k in tensors if k.endswith(".weight") and "embed" not in k
                         and "LayerNorm" not in k and not ("odd" in k and "--exclude" in extra)}
    for k in quantized:
        assert back[k].format == fmt and back[k].shape == tensors[k].shape
        ref = qs.quantize(tensors[k], fmt, **kw)
        assert bits(qs.dequantize(back[k])) == bits(qs.dequantize(ref)), k
    mine = {k: qs.quantize(tensors[k], fmt, **kw) if k in quantized else v
            for k, v in back.items()}
    ours = tmp_path / "ours.safetensors"
    qs.save(ours, mine)
    a, b = read_raw(out), read_raw(ours)
    assert sorted(a) == sorted(b)
    for k in a:
        assert a[k] == b[k], k


def strip_metadata(src, dst):
    """Copy a safetensors file without its __metadata__ (what another writer produces)."""
    raw = src.read_bytes()
    (n,) = struct.unpack("<Q", raw[:8])
    header = json.loads(raw[8:8 + n])
    data = raw[8 + n:]
    header.pop("__metadata__", None)
    text = json.dumps(header).encode()
    text += b" " * (-len(text) % 8)
    dst.write_bytes(struct.pack("<Q", len(text)) + text + data)


@pytest.mark.parametrize("fmt,kw", [("nf4", {}), ("fp4", {"double_quant": True}),
                                    ("llm_int8", {}), ("fp8_e4m3", {}), ("fp8_e5m2", {}),
                                    ("mxfp8", {})])
def test_recognised_without_the_record(tmp_path, fmt, kw):
    w = weights()
    q = qs.quantize(w, fmt, **kw)
    qs.save(tmp_path / "a.safetensors", {"x.weight": q, "x.bias": w[0]})
    strip_metadata(tmp_path / "a.safetensors", tmp_path / "b.safetensors")
    back = qs.load(tmp_path / "b.safetensors")
    assert set(back) == {"x.weight", "x.bias"}
    assert back["x.weight"].format == fmt
    assert bits(qs.dequantize(back["x.weight"])) == bits(qs.dequantize(q))


def test_save_refusals(tmp_path):
    w = weights()
    path = tmp_path / "x.safetensors"
    for fmt in ("fp8_e4m3", "int8", "mxfp4", "nvfp4"):
        with pytest.raises(ValueError, match="layout 'bnb'"):
            qs.save(path, {"l.weight": qs.quantize(w, fmt)}, layout="bnb")
    with pytest.raises(ValueError, match="unknown layout"):
        qs.save(path, {"l.weight": qs.quantize(w, "nf4")}, layout="gguf")
    with pytest.raises(ValueError, match="twice"):
        qs.save(path, {"l.weight": qs.quantize(w, "llm_int8"), "l.SCB": w[0]})
    with pytest.raises(ValueError, match="an LLM.int8 weight is 2-D"):
        qs.save(path, {"l.weight": qs.quantize(w.reshape(-1), "llm_int8")})
    bad = qs.quantize(w, "nf4")
    bad.absmax = bad.absmax[:-1]
    with pytest.raises(ValueError, match="absmax"):
        qs.save(path, {"l.weight": bad})
    assert not path.exists() and list(tmp_path.iterdir()) == []
    qs.save(path, {"l.weight": qs.quantize(w, "nf4")}, layout="bnb")
    assert isinstance(qs.load(path)["l.weight"], qs.QTensor)


def test_load_refusals(tmp_path):
    p = tmp_path / "bad.safetensors"
    for raw, match in [(b"", "not a safetensors"), (struct.pack("<Q", 100) + b"{}", "fit"),
                       (struct.pack("<Q", 2) + b"[]", "JSON object"),
                       (struct.pack("<Q", 2) + b"{x", "not JSON")]:
        p.write_bytes(raw)
        with pytest.raises(ValueError, match=match):
            qs.load(p)
    head = json.dumps({"a": {"dtype": "F32", "shape": [4], "data_offsets": [0, 8]}}).encode()
    p.write_bytes(struct.pack("<Q", len(head)) + head + bytes(8))
    with pytest.raises(ValueError, match="does not fit"):
        qs.load(p)


# ---- bitsandbytes ---------------------------------------------------------------------------


@pytest.fixture(scope="module")
def bnb():
    pytest.importorskip("torch")
    return pytest.importorskip("bitsandbytes")


def decode_4bit(packed, state, fmt):
    """bitsandbytes' definition in numpy, float32 steps: codebook[code] * absmax[block] over the
    flattened tensor, the absmax first decoded from the dynamic map plus the offset when nested."""
    codes = packed.reshape(-1)
    c = np.empty(codes.size * 2, np.uint8)
    c[0::2], c[1::2] = codes >> 4, codes & 15
    n = int(np.prod(tuple(state.shape)))
    absmax = state.absmax.numpy()
    if state.nested:
        nested = state.state2
        absmax = (nested.code.numpy()[absmax] *
                  np.repeat(nested.absmax.numpy(), 256)[:absmax.size]).astype(np.float32)
        absmax = (absmax + np.float32(state.offset.item())).astype(np.float32)
    out = qs.codebook(fmt)[c[:n]] * np.repeat(absmax, state.blocksize)[:n]
    return out.astype(np.float32).reshape(tuple(state.shape))


def same_but_fp4_zero(theirs, ours):
    """Bit for bit, except that bitsandbytes' CPU kernels decode FP4 code 8 as +0.0 where its
    CUDA semantics, which the library follows (docs/formats.md, FP4), give -0.0."""
    t, o = theirs.view(np.uint32), ours.view(np.uint32)
    diff = t != o
    assert np.all(o[diff] == 0x80000000) and np.all(t[diff] == 0), np.flatnonzero(diff)[:5]


@pytest.mark.parametrize("fmt", ["nf4", "fp4"])
@pytest.mark.parametrize("dq", [False, True])
# rows that are whole blocks: bitsandbytes 0.50's CPU dequantize_4bit misplaces the blocks of
# a (64, 96) tensor with block 64 (elements from 128 on; its own codes and absmax, decoded by
# the definition, give the library's values: test_from_bnb_state_reads_bitsandbytes)
@pytest.mark.parametrize("blocksize,shape", [(32, (96, 128)), (64, (33, 64)), (256, (4, 1024)),
                                             (4096, (2, 4096)), (64, (5, 7)), (128, (1000,))])
def test_to_bnb_state_decodes_bit_for_bit(bnb, fmt, dq, blocksize, shape):
    import torch
    from bitsandbytes.functional import QuantState, dequantize_4bit

    w = weights(shape, seed=blocksize)
    w.reshape(-1)[:3] = [0.0, -0.0, 1e-3]
    q = qs.quantize(w, fmt, blocksize=blocksize, double_quant=dq)
    ours = qs.dequantize(q)
    for packed in (False, True):
        state = QuantState.from_dict(q.to_bnb_state(packed=packed), device=torch.device("cpu"))
        assert state.blocksize == blocksize and tuple(state.shape) == shape
        assert state.nested == dq
        theirs = dequantize_4bit(torch.from_numpy(q.data.reshape(-1, 1)), state).numpy()
        assert theirs.size == ours.size  # (a 1-D shape comes back as (1, n))
        theirs = theirs.reshape(shape)
        if fmt == "nf4":
            assert theirs.tobytes() == ours.tobytes()
        else:
            same_but_fp4_zero(theirs, ours)


@pytest.mark.parametrize("fmt", ["nf4", "fp4"])
@pytest.mark.parametrize("dq", [False, True])
def test_from_bnb_state_reads_bitsandbytes(bnb, fmt, dq):
    import torch
    from bitsandbytes.functional import dequantize_4bit, quantize_4bit

    w = weights((64, 96), seed=3)
    packed, state = quantize_4bit(torch.from_numpy(w), blocksize=64, quant_type=fmt,
                                  compress_statistics=dq)
    ref = decode_4bit(packed.numpy(), state, fmt)
    for st in (state, state.as_dict(), state.as_dict(packed=True)):
        q = qs.QTensor.from_bnb_state(packed, st)
        assert (q.format, q.shape, q.blocksize, q.double_quant) == (fmt, (64, 96), 64, dq)
        assert qs.dequantize(q).tobytes() == ref.tobytes()
    # bitsandbytes' CPU decoder agrees on rows of whole blocks (see above)
    p2, s2 = quantize_4bit(torch.from_numpy(w[:, :64].copy()), blocksize=64, quant_type=fmt,
                           compress_statistics=dq)
    same_but_fp4_zero(dequantize_4bit(p2, s2).numpy(),
                      qs.dequantize(qs.QTensor.from_bnb_state(p2, s2)))
    if fmt == "nf4":  # NF4 codes and scales are bitsandbytes' own (its CPU FP4 quantizer is not)
        q = qs.quantize(w, "nf4", blocksize=64, double_quant=dq)
        assert q.data.tobytes() == packed.numpy().tobytes()
        if not dq:
            assert q.absmax.tobytes() == state.absmax.numpy().tobytes()
    with pytest.raises(ValueError, match="quant_map"):
        d = state.as_dict()
        d["quant_map"] = d["quant_map"] * 2
        qs.QTensor.from_bnb_state(packed, d)


def test_to_bnb_state_refuses_other_formats(bnb):
    with pytest.raises(ValueError, match="nf4 or fp4"):
        qs.quantize(weights(), "int8").to_bnb_state()


def _tiny_bert(folder):
    torch = pytest.importorskip("torch")
    transformers = pytest.importorskip("transformers")
    torch.manual_seed(0)
    cfg = transformers.BertConfig(vocab_size=64, hidden_size=64, num_hidden_layers=1,
                                  num_attention_heads=2, intermediate_size=128,
                                  max_position_embeddings=32)
    transformers.BertModel(cfg).save_pretrained(folder)
    return transformers


@pytest.mark.parametrize("kind", ["nf4", "nf4-dq", "fp4", "int8"])
def test_load_reads_transformers_bitsandbytes_checkpoints(bnb, tmp_path, kind):
    """A model quantized and saved by transformers + bitsandbytes reads back into QTensors
    that decode to what bitsandbytes decodes; and qs.save(layout="bnb") of those QTensors,
    with bnb_quantization_config, is a folder transformers loads to the same outputs."""
    import torch
    import bitsandbytes.functional as F

    transformers = _tiny_bert(tmp_path / "f32")
    if kind == "int8":
        cfg = transformers.BitsAndBytesConfig(load_in_8bit=True)
    else:
        cfg = transformers.BitsAndBytesConfig(load_in_4bit=True, bnb_4bit_quant_type=kind[:3],
                                              bnb_4bit_use_double_quant=kind.endswith("dq"),
                                              bnb_4bit_compute_dtype=torch.float32)
    model = transformers.AutoModel.from_pretrained(tmp_path / "f32", quantization_config=cfg,
                                                   device_map="cpu")
    model.save_pretrained(tmp_path / "bnb")
    back = qs.load(tmp_path / "bnb" / "model.safetensors")
    linears = {n + ".weight": m for n, m in model.named_modules()
               if isinstance(m, torch.nn.Linear)}
    assert {k for k, v in back.items() if isinstance(v, qs.QTensor)} == set(linears)
    for name, module in linears.items():
        q = back[name]
        if kind == "int8":
            assert q.format == "llm_int8"
            assert q.data.tobytes() == module.weight.data.numpy().tobytes()
            assert q.scale.tobytes() == module.weight.SCB.numpy().tobytes()
        else:
            assert q.format == kind[:3] and q.double_quant == kind.endswith("dq")
            theirs = F.dequantize_4bit(module.weight.data, module.weight.quant_state).numpy()
            same_but_fp4_zero(theirs, qs.dequantize(q))

    # and back: our file plus the config block loads as written, to the same outputs
    out = tmp_path / "ours"
    out.mkdir()
    qs.save(out / "model.safetensors", back, layout="bnb")
    config = json.loads((tmp_path / "f32" / "config.json").read_text())
    config["quantization_config"] = qs.checkpoint.bnb_quantization_config(back)
    (out / "config.json").write_text(json.dumps(config))
    ours = transformers.AutoModel.from_pretrained(out, device_map="cpu")
    ids = torch.tensor([[1, 5, 9, 33, 2]])
    with torch.no_grad():
        a = model(input_ids=ids).last_hidden_state
        b = ours(input_ids=ids).last_hidden_state
    assert torch.equal(a, b)


LAYOUT_CASES = [  # tool options, QTensor format (None: the weight stays an array), quantize kw
    (["--format", "nf4", "--layout", "bitsandbytes"], "nf4", {}),
    (["--format", "fp8_e4m3", "--layout", "compressed-tensors"], "fp8_e4m3", {}),
    (["--format", "int8", "--layout", "compressed-tensors"], "int8", {}),
    (["--format", "int8", "--layout", "compressed-tensors", "--granularity", "tensor"], "int8",
     {"granularity": "tensor"}),
    (["--format", "int8", "--layout", "compressed-tensors", "--granularity", "group",
      "--blocksize", "16"], "int8", {"granularity": "group", "group_size": 16}),
    (["--format", "mxfp4", "--layout", "compressed-tensors"], "mxfp4", {}),
    (["--format", "mxfp8", "--layout", "compressed-tensors"], "mxfp8", {}),
    (["--format", "nvfp4", "--layout", "compressed-tensors"], "nvfp4", {}),
    (["--format", "none", "--sparsity", "2:4", "--layout", "compressed-tensors"], None, {}),
    (["--format", "fp8_e4m3", "--layout", "modelopt"], "fp8_e4m3", {}),
    (["--format", "nvfp4", "--layout", "modelopt"], "nvfp4", {}),
]


@pytest.mark.parametrize("args,fmt,kw", LAYOUT_CASES,
                         ids=["-".join(a[1::2]) for a, _, _ in LAYOUT_CASES])
def test_load_reads_every_tool_layout(tmp_path, run_tool, model_file, args, fmt, kw):
    """Every layout the tool writes reads back with qs.load, as a file and as a folder: the
    weights decode as the library decodes them (compressed-tensors' NVFP4 keeps 1 / scale, read
    back as fl(1 / g))."""
    src, tensors = model_file
    sel = ["--include", r"(query|dense)\.weight$"]  # rows of a multiple of 16: every layout
    amax = tmp_path / "amax.json"
    amax.write_text(json.dumps({k[:-len(".weight")]: 3.0 for k in tensors}))
    extra = ["--act-amax", str(amax)] if "modelopt" in args else []
    out = tmp_path / "out.safetensors"
    run_tool("quantize", src, "-o", out, "--quiet", *sel, *args, *extra, check=0)
    folder = tmp_path / "folder"
    (tmp_path / "in").mkdir()
    (tmp_path / "in" / "model.safetensors").write_bytes(src.read_bytes())
    (tmp_path / "in" / "config.json").write_text('{"model_type": "bert"}')
    run_tool("quantize", tmp_path / "in", "-o", folder, "--quiet", *sel, *args, *extra, check=0)
    for back in (qs.load(out), qs.load(folder)):
        names = [k for k in tensors if k.endswith((".query.weight", ".dense.weight"))]
        assert len(names) == 4
        for k in names:
            if fmt is None:
                kept = np.where(qs.prune(tensors[k], "2:4"), tensors[k], np.float32(0))
                assert isinstance(back[k], np.ndarray) and bits(back[k]) == bits(kept)
                continue
            assert isinstance(back[k], qs.QTensor) and back[k].format == fmt, k
            q = qs.quantize(tensors[k], fmt, **kw)
            if fmt == "nvfp4" and "compressed-tensors" in args:
                g = np.float32(1) / np.float32(q.global_scale)
                assert back[k].global_scale == np.float32(1) / g
                q = qs.QTensor(fmt, q.shape, q.data, scale=q.scale,
                               global_scale=back[k].global_scale)
            assert bits(qs.dequantize(back[k])) == bits(qs.dequantize(q)), k
        # the other tensors come back as they were
        assert bits(back["embeddings.word_embeddings.weight"]) == \
            bits(tensors["embeddings.word_embeddings.weight"])
        assert not [k for k in back if k.endswith(("_packed", "_global_scale", "_shape"))]
