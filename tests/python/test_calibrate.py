# SPDX-License-Identifier: MIT
"""`qsparse calibrate` and the calibrated methods of `qsparse quantize`, on a small random BERT
(2 layers, hidden 64) written by transformers with a word-level tokenizer, so that every number
can be recomputed here from the float model's own layer inputs:

- the statistics (X^T X, sums of squares, absmax, tokens without padding) against hooks on the
  same model, q/k/v sharing one set, the fold of attention.output.dense into value found and
  nothing else; f32 / f16 / diag storage; shards merged equal to one run over all the text;
  text from a folder of .txt and .jsonl files; errors with a message and no output;
- the tool's table: each layer's output error tr(dW H dW^T) / tr(W H W^T) recomputed from the
  activations, GPTQ's below round-to-nearest's on every layer; an unsupported GPTQ format refused
  before the first layer; --damp / --block / --act-order reaching GPTQ; Wanda and SparseGPT
  pruning without a format; AWQ's scales folded into value's rows and bias so that the product
  of the two layers is kept; --rotate writing W R and recording the block.

A missing torch / transformers / tokenizers skips the module with its reason."""

import json
import os
import subprocess
import sys

import numpy as np
import pytest

import qsparse as qs
from conftest import read_metadata, read_raw

torch = pytest.importorskip("torch", reason="qsparse calibrate needs torch")
transformers = pytest.importorskip("transformers", reason="qsparse calibrate needs transformers")
tokenizers = pytest.importorskip("tokenizers", reason="the test's tokenizer needs tokenizers")

from qsparse import calibrate as cal  # noqa: E402

WORDS = ("the a of to and in is it that for on with as was by at this be are from or an "
         "model layer weight input output scale block token text value error table file run "
         "quantize prune bias norm grid round search rotate fold merge shard row column").split()
K = 64
LINEARS = ("attention.self.query", "attention.self.key", "attention.self.value",
           "attention.output.dense", "intermediate.dense", "output.dense")


def sentences(n, seed):
    rng = np.random.default_rng(seed)
    return [" ".join(rng.choice(WORDS, size=int(rng.integers(4, 14)))) for _ in range(n)]


@pytest.fixture(scope="module")
def bert(tmp_path_factory):
    d = tmp_path_factory.mktemp("bert")
    vocab = {w: i for i, w in enumerate(["[PAD]", "[UNK]", "[CLS]", "[SEP]"] + WORDS)}
    tk = tokenizers.Tokenizer(tokenizers.models.WordLevel(vocab, unk_token="[UNK]"))
    tk.pre_tokenizer = tokenizers.pre_tokenizers.Whitespace()
    fast = transformers.PreTrainedTokenizerFast(tokenizer_object=tk, pad_token="[PAD]",
                                                unk_token="[UNK]")
    fast.save_pretrained(str(d))
    torch.manual_seed(0)
    config = transformers.BertConfig(vocab_size=len(vocab), hidden_size=K, num_hidden_layers=2,
                                     num_attention_heads=4, intermediate_size=2 * K,
                                     max_position_embeddings=64)
    model = transformers.BertModel(config).eval()
    with torch.no_grad():  # weights with some spread per input channel, biases not zero
        for name, p in model.named_parameters():
            if p.dim() == 2 and "embeddings" not in name:
                p.mul_(1.0 + torch.rand(p.shape[1]) * 3.0)
            elif name.endswith("bias"):
                p.normal_(0.0, 0.05)
    model.save_pretrained(str(d))
    return str(d), model, fast


def captured(model, tok, texts, max_length=512, batch=16):
    """{checkpoint base: float64 (tokens, K) inputs without padding} by forward pre-hooks,
    batches by length as qsparse calibrate runs them."""
    acts, hooks = {}, []
    mask = {}
    for name, mod in model.named_modules():
        if isinstance(mod, torch.nn.Linear):
            def pre(m, args, name=name):
                x = args[0]
                if x.dim() == 3:
                    x = x[mask["m"]]
                acts.setdefault(name, []).append(x.detach().double().numpy().reshape(-1,
                                                                                      x.shape[-1]))
            hooks.append(mod.register_forward_pre_hook(pre))
    lengths = [len(i) for i in tok(texts, truncation=True, max_length=max_length)["input_ids"]]
    order = np.argsort(lengths, kind="stable")
    with torch.no_grad():
        for i in range(0, len(texts), batch):
            enc = tok([texts[j] for j in order[i:i + batch]], padding=True, return_tensors="pt")
            mask["m"] = enc["attention_mask"].bool()
            model(**enc)
    for h in hooks:
        h.remove()
    return {k: np.concatenate(v) for k, v in acts.items()}


def run_calibrate(*args, check=0):
    # this Python, with the qsparse package the tests import (the installed one, or python/ in
    # the development loop)
    pkg = os.path.dirname(os.path.dirname(os.path.abspath(qs.__file__)))
    env = dict(os.environ, QSPARSE_PYTHON=sys.executable,
               PYTHONPATH=os.pathsep.join([pkg, os.environ.get("PYTHONPATH", "")]))
    from conftest import _find_tool
    tool = _find_tool()
    cmd = [tool, "calibrate"] if tool else [sys.executable, "-m", "qsparse.calibrate"]
    p = subprocess.run(cmd + [str(a) for a in args], capture_output=True, text=True, env=env,
                       timeout=600)
    if check is not None:
        assert p.returncode == check, (p.returncode, p.stdout, p.stderr)
    return p


@pytest.fixture(scope="module")
def texts(tmp_path_factory):
    d = tmp_path_factory.mktemp("text")
    t = sentences(60, 1)
    (d / "calib.txt").write_text("\n".join(t) + "\n\n")
    h = sentences(40, 2)
    (d / "held.txt").write_text("\n".join(h) + "\n")
    return d, t, h


@pytest.fixture(scope="module")
def calib_file(bert, texts, tmp_path_factory):
    out = tmp_path_factory.mktemp("calib") / "calib.safetensors"
    p = run_calibrate(bert[0], "--text", texts[0] / "calib.txt", "-o", out)
    return out, p


@pytest.fixture(scope="module")
def held_file(bert, texts, tmp_path_factory):
    out = tmp_path_factory.mktemp("held") / "held.safetensors"
    run_calibrate(bert[0], "--text", texts[0] / "held.txt", "-o", out, "-q")
    return out


def unpack(v, k):
    m = np.zeros((k, k))
    m[np.triu_indices(k)] = v
    return m + np.triu(m, 1).T


def test_statistics_match_the_layer_inputs(bert, texts, calib_file):
    path, p = calib_file
    t, meta = cal.read_safetensors(str(path))
    m = json.loads(meta["qsparse.calibration"])
    acts = captured(bert[1], bert[2], texts[1])
    for i in range(2):
        pre = f"encoder.layer.{i}."
        # q, k and v read one tensor: one set of statistics, the query's
        for n in ("attention.self.query", "attention.self.key", "attention.self.value"):
            assert m["layers"][pre + n] == pre + "attention.self.query"
        for n in ("attention.output.dense", "intermediate.dense", "output.dense"):
            assert m["layers"][pre + n] == pre + n
        for n in ("attention.self.query", "attention.output.dense", "intermediate.dense",
                  "output.dense"):
            x = acts[pre + n]
            k = x.shape[1]
            assert int(t[pre + n + ".tokens"]) == x.shape[0]
            s = unpack(np.asarray(t[pre + n + ".xtx"]), k)
            ref = x.T @ x
            scale = np.abs(np.diag(ref)).max()
            assert np.abs(s - ref).max() < 1e-5 * scale, n
            assert np.allclose(t[pre + n + ".sumsq"], (x * x).sum(0), rtol=1e-5, atol=0)
            assert np.array_equal(t[pre + n + ".absmax"],
                                  np.abs(x).max(0).astype(np.float32))
    # the only fold: attention.output.dense's scales into value's output channels
    folds = {b: g["fold"] for b, g in m["groups"].items() if "fold" in g}
    assert folds == {f"encoder.layer.{i}.attention.output.dense": {
        "module": f"encoder.layer.{i}.attention.self.value", "kind": "linear",
        "weight": f"encoder.layer.{i}.attention.self.value.weight",
        "bias": f"encoder.layer.{i}.attention.self.value.bias"} for i in range(2)}
    assert m["samples"] == len(texts[1]) and m["hessian"] == "f64"
    # 15 distinct inputs (pooler included), each K (K + 1) / 2 doubles: the file's size
    assert os.path.getsize(path) < 1.1 * sum(a.nbytes for a in t.values()) + 20000


def test_storage_kinds_and_merge(bert, texts, calib_file, tmp_path):
    full, _ = cal.read_safetensors(str(calib_file[0]))
    name = "encoder.layer.1.output.dense"
    k = 2 * K
    # in this process (the command is this function behind argparse): no torch start-up each
    for kind, tol in (("f32", 1e-6), ("f16", 2e-3)):
        out = tmp_path / f"{kind}.safetensors"
        cal.calibrate(bert[0], texts[1], str(out), hessian=kind, quiet=True)
        t, meta = cal.read_safetensors(str(out))
        assert json.loads(meta["qsparse.calibration"])["hessian"] == kind
        v = np.asarray(t[name + ".xtx"], np.float64)
        ref = np.asarray(full[name + ".xtx"])
        if kind == "f16":
            v = v * int(t[name + ".tokens"])  # f16 holds the mean
        assert np.abs(v - ref).max() < tol * np.abs(ref).max(), kind
        assert t[name + ".xtx"].dtype == (np.float32 if kind == "f32" else np.float16)
    out = tmp_path / "diag.safetensors"
    cal.calibrate(bert[0], texts[1], str(out), hessian="diag", quiet=True)
    t, _ = cal.read_safetensors(str(out))
    assert not any(n.endswith(".xtx") for n in t)
    assert os.path.getsize(out) < os.path.getsize(calib_file[0]) / 10

    # two shards of the text, merged: the statistics of all of it
    d = tmp_path / "shards"
    d.mkdir()
    half = len(texts[1]) // 2
    (d / "a.txt").write_text("\n".join(texts[1][:half]))
    (d / "b.txt").write_text("\n".join(texts[1][half:]))
    for s in "ab":
        cal.calibrate(bert[0], cal.read_texts(str(d / f"{s}.txt")), str(d / f"{s}.safetensors"),
                      quiet=True)
    run_calibrate("--merge", d / "a.safetensors", d / "b.safetensors", "-o", d / "m.safetensors",
                  "-q")
    merged, meta = cal.read_safetensors(str(d / "m.safetensors"))
    assert sorted(merged) == sorted(full)
    assert json.loads(meta["qsparse.calibration"])["samples"] == len(texts[1])
    for n in merged:
        a, b = np.asarray(merged[n]), np.asarray(full[n])
        if n.endswith(".tokens") or n.endswith(".absmax"):
            assert np.array_equal(a, b), n
        else:
            assert np.abs(a - b).max() <= 1e-5 * np.abs(b).max(), n


def test_dataset_dir_and_errors(bert, texts, tmp_path):
    d = tmp_path / "ds"
    (d / "sub").mkdir(parents=True)
    (d / "a.txt").write_text("\n".join(texts[1][:10]))
    (d / "sub" / "b.jsonl").write_text("\n".join(json.dumps({"text": s, "id": i})
                                                 for i, s in enumerate(texts[1][10:20])))
    assert cal.read_texts(dataset_dir=str(d)) == texts[1][:20]
    assert cal.read_texts(dataset_dir=str(d), max_samples=3) == texts[1][:3]
    out = tmp_path / "c.safetensors"
    cal.main([bert[0], "--dataset-dir", str(d), "-o", str(out), "-q"])
    assert json.loads(read_metadata(out)["qsparse.calibration"])["samples"] == 20
    for args, msg in [
        (["--text", texts[0] / "calib.txt", "--dataset-dir", d], "one of --text"),
        (["--text", tmp_path / "missing.txt"], "no such file"),
        (["--dataset-dir", tmp_path / "nothing"], "no such folder"),
        (["--text", texts[0] / "calib.txt", "--hessian", "f8"], "invalid choice"),
    ]:
        bad = tmp_path / "bad.safetensors"
        p = run_calibrate(bert[0], *args, "-o", bad, check=None)
        assert p.returncode == 2 and msg in p.stderr, p.stderr
        assert not bad.exists()
    p = run_calibrate(tmp_path, "--text", texts[0] / "calib.txt", "-o", tmp_path / "x", check=2)
    assert "no config.json" in p.stderr
    p = run_calibrate("--merge", out, "-o", tmp_path / "m", check=2)
    assert "at least two" in p.stderr
    p = run_calibrate("--help", check=0)
    assert "--dataset-dir" in p.stdout and "--merge" in p.stdout


# ---- the tool ---------------------------------------------------------------------------------

def table(stdout):
    """{layer: [columns after the name]} of the quantize table."""
    rows = {}
    for line in stdout.splitlines():
        f = line.split()
        if f and f[0].endswith(".weight"):
            rows[f[0][:-len(".weight")]] = f[1:]
    return rows


def weights(bert):
    from safetensors.numpy import load_file
    return load_file(os.path.join(bert[0], "model.safetensors"))


def test_table_output_errors_and_gptq_options(run_tool, bert, texts, calib_file, held_file,
                                              tmp_path):
    w = weights(bert)
    acts = captured(bert[1], bert[2], texts[1])
    src = os.path.join(bert[0], "model.safetensors")
    p = run_tool("quantize", src, "-o", tmp_path / "g.safetensors", "--format", "nf4",
                 "--method", "gptq", "--calib", calib_file[0], "--heldout", held_file, check=0)
    assert "out.err" in p.stdout and "held.err" in p.stdout
    rows = table(p.stdout)
    assert len(rows) == 13  # 12 encoder linears and the pooler
    raw = read_raw(tmp_path / "g.safetensors")
    for i in range(2):
        for n in LINEARS:
            name = f"encoder.layer.{i}.{n}"
            cols = rows[name]
            out_err, rtn = float(cols[5]), float(cols[6])
            assert out_err < rtn, (name, cols)
            # the column is tr(dW H dW^T) / tr(W H W^T) of the written weight on these inputs
            q = qs.QTensor("nf4", w[name + ".weight"].shape,
                           np.frombuffer(raw[name + ".weight"][2], np.uint8),
                           absmax=np.frombuffer(raw[name + ".weight.absmax"][2], np.float32),
                           blocksize=64)
            x = acts[name]
            d = qs.dequantize(q).astype(np.float64) - w[name + ".weight"]
            ref = np.linalg.norm(x @ d.T) ** 2 / np.linalg.norm(x @ w[name + ".weight"].T) ** 2
            assert abs(out_err - ref) < 1e-3 * ref + 1e-9, (name, out_err, ref)
            assert int(cols[4]) == x.shape[0]
    assert "output error (tr(dW H dW^T) / tr(W H W^T)) at or below the baseline's on 13 of 13" \
        in p.stdout

    # an unsupported format stops before any layer, nothing written
    out = tmp_path / "fp8.safetensors"
    p = run_tool("quantize", src, "-o", out, "--format", "fp8_e4m3", "--method", "gptq",
                 "--calib", calib_file[0], check=2)
    assert "--method gptq cannot quantize to fp8_e4m3" in p.stderr and not out.exists()
    assert "quantizing" not in p.stderr
    # the options reach GPTQ: each changes the written codes (--block only schedules the same
    # updates: it is accepted, the codes stay within rounding of the default's)
    base = read_raw(tmp_path / "g.safetensors")
    for i, extra in enumerate((["--damp", "0.5"], ["--no-act-order"])):
        o = tmp_path / f"o{i}.safetensors"  # the tool refuses to overwrite without --force
        run_tool("quantize", src, "-o", o, "--format", "nf4", "--method", "gptq", "--calib",
                 calib_file[0], "-q", *extra, check=0)
        got = read_raw(o)
        assert any(got[k][2] != base[k][2] for k in got if k.endswith("query.weight")), extra
    run_tool("quantize", src, "-o", tmp_path / "b.safetensors", "--format", "nf4", "--method",
             "gptq", "--calib", calib_file[0], "-q", "--block", "16", check=0)
    for bad, msg in ((["--damp", "-1"], "--damp"), (["--block", "0"], "--block"),
                     (["--rotate", "hadamard:3"], "--rotate"),
                     (["--method", "rtn", "--no-act-order"], "--act-order")):
        args = ["--method", "gptq", *bad] if bad[0] != "--method" else bad
        p = run_tool("quantize", src, "-o", tmp_path / "x.safetensors", "--format", "nf4",
                     "--calib", calib_file[0], *args, check=2)
        assert msg in p.stderr, (bad, p.stderr)


def test_wanda_and_sparsegpt_prune_only(run_tool, bert, calib_file, tmp_path):
    w = weights(bert)
    src = os.path.join(bert[0], "model.safetensors")
    got = {}
    for method in ("wanda", "sparsegpt"):
        out = tmp_path / f"{method}.safetensors"
        p = run_tool("quantize", src, "-o", out, "--format", "none", "--sparsity", "2:4",
                     "--layout", "compressed-tensors", "--method", method, "--calib",
                     calib_file[0], check=0)
        rows = table(p.stdout)
        raw = read_raw(out)
        name = "encoder.layer.0.intermediate.dense"
        v = np.frombuffer(raw[name + ".weight"][2], np.float32).reshape(w[name + ".weight"].shape)
        assert ((v.reshape(-1, 4) != 0).sum(1) <= 2).all()
        got[method] = v
        for layer, cols in rows.items():
            if layer.startswith("encoder"):
                assert float(cols[5]) < float(cols[6]), (method, layer, cols)  # below magnitude
    # Wanda keeps original values; SparseGPT updates the kept ones
    name = "encoder.layer.0.intermediate.dense.weight"
    kept = got["wanda"] != 0
    assert np.array_equal(got["wanda"][kept], w[name][kept])
    assert not np.array_equal(got["sparsegpt"][got["sparsegpt"] != 0],
                              w[name][got["sparsegpt"] != 0])


def decode_int8(raw, name, shape):
    codes = np.frombuffer(raw[name][2], np.int8).reshape(shape).astype(np.float32)
    scale = np.frombuffer(raw[name + "_scale"][2], np.float32).reshape(-1, 1)
    return codes * scale


def test_awq_folds_scales_into_value(run_tool, bert, calib_file, tmp_path):
    w = weights(bert)
    src = os.path.join(bert[0], "model.safetensors")
    out = tmp_path / "awq.safetensors"
    p = run_tool("quantize", src, "-o", out, "--format", "int8", "--method", "awq", "--calib",
                 calib_file[0], check=0)
    rows = table(p.stdout)
    raw = read_raw(out)
    for i in range(2):
        pre = f"encoder.layer.{i}."
        assert rows[pre + "attention.output.dense"][-2] == "awq"
        assert rows[pre + "attention.self.query"][-1] == "rtn"  # "awq: no fold, rtn"
        o = decode_int8(raw, pre + "attention.output.dense.weight", (K, K))
        v = decode_int8(raw, pre + "attention.self.value.weight", (K, K))
        bv = np.frombuffer(raw[pre + "attention.self.value.bias"][2], np.float32)
        wo, wv = w[pre + "attention.output.dense.weight"], w[pre + "attention.self.value.weight"]
        # o's columns were multiplied by s, value's rows and bias divided by s: the products
        # of the two layers stay the float model's, up to int8 rounding
        assert not np.allclose(bv, w[pre + "attention.self.value.bias"])
        prod, ref = o @ v, wo @ wv
        assert np.linalg.norm(prod - ref) < 0.02 * np.linalg.norm(ref)
        assert np.allclose(o @ bv, wo @ w[pre + "attention.self.value.bias"], rtol=0.05,
                           atol=1e-3)
        # the search keeps the output error at or below round-to-nearest's
        c = rows[pre + "attention.output.dense"]
        assert float(c[5]) <= float(c[6])


def test_smoothquant_folds_into_value(run_tool, bert, calib_file, tmp_path):
    w = weights(bert)
    src = os.path.join(bert[0], "model.safetensors")
    out = tmp_path / "sq.safetensors"
    p = run_tool("quantize", src, "-o", out, "--format", "int8", "--smoothquant", "0.5",
                 "--calib", calib_file[0], check=0)
    rows = table(p.stdout)
    raw = read_raw(out)
    t, _ = cal.read_safetensors(str(calib_file[0]))
    for i in range(2):
        pre = f"encoder.layer.{i}."
        assert rows[pre + "attention.output.dense"][-2:] == ["smoothquant", "a=0.50"]
        assert rows[pre + "attention.self.query"][-1] != "a=0.50"  # no fold: unchanged
        bv = np.frombuffer(raw[pre + "attention.self.value.bias"][2], np.float32)
        b0 = w[pre + "attention.self.value.bias"]
        # s_j = sqrt(amax(X_j) / amax(W_j)): value's bias was divided by exactly that
        amax = np.asarray(t[pre + "attention.output.dense.absmax"], np.float64)
        wmax = np.abs(w[pre + "attention.output.dense.weight"]).max(0).astype(np.float64)
        s = np.clip(np.maximum(amax, 1e-5) ** 0.5 / np.maximum(wmax, 1e-5) ** 0.5, 1e-5, 1e5)
        assert np.allclose(bv, b0 / s.astype(np.float32), rtol=1e-6, atol=0)
        o = decode_int8(raw, pre + "attention.output.dense.weight", (K, K))
        v = decode_int8(raw, pre + "attention.self.value.weight", (K, K))
        ref = w[pre + "attention.output.dense.weight"] @ w[pre + "attention.self.value.weight"]
        assert np.linalg.norm(o @ v - ref) < 0.02 * np.linalg.norm(ref)


@pytest.fixture(scope="module")
def llama(bert, tmp_path_factory):
    """A random 2-layer Llama (RMSNorm, SiLU-gated MLP) with the same tokenizer."""
    d = tmp_path_factory.mktemp("llama")
    bert[2].save_pretrained(str(d))
    torch.manual_seed(1)
    config = transformers.LlamaConfig(vocab_size=len(bert[2]), hidden_size=K,
                                      intermediate_size=2 * K, num_hidden_layers=2,
                                      num_attention_heads=4, num_key_value_heads=4,
                                      max_position_embeddings=64)
    model = transformers.LlamaForCausalLM(config).eval()
    with torch.no_grad():
        for name, p in model.named_parameters():
            if "norm" in name:
                p.uniform_(0.5, 1.5)
            elif p.dim() == 2 and "embed" not in name:
                p.mul_(1.0 + torch.rand(p.shape[1]) * 3.0)
    model.save_pretrained(str(d))
    return str(d), model


def test_llama_folds_and_awq_checkpoint(run_tool, llama, texts, tmp_path):
    """On a Llama every group folds (input_layernorm -> q/k/v, post_attention_layernorm ->
    gate/up, up -> down, v -> o); AWQ's checkpoint, decoded, computes the float model's hidden
    states up to int8 rounding, its norms and rows divided by the scales its columns carry."""
    from safetensors.numpy import load_file
    calib = tmp_path / "llama.safetensors"
    cal.calibrate(llama[0], texts[1], str(calib), quiet=True)
    m = json.loads(read_metadata(calib)["qsparse.calibration"])
    folds = {b: g["fold"]["module"] for b, g in m["groups"].items() if "fold" in g}
    for i in range(2):
        pre = f"model.layers.{i}."
        assert folds == {**folds, pre + "self_attn.q_proj": pre + "input_layernorm",
                         pre + "mlp.gate_proj": pre + "post_attention_layernorm",
                         pre + "mlp.down_proj": pre + "mlp.up_proj",
                         pre + "self_attn.o_proj": pre + "self_attn.v_proj"}
        assert m["layers"][pre + "self_attn.v_proj"] == pre + "self_attn.q_proj"
        assert m["layers"][pre + "mlp.up_proj"] == pre + "mlp.gate_proj"
    assert len(folds) == 8
    src = os.path.join(llama[0], "model.safetensors")
    out = tmp_path / "awq.safetensors"
    p = run_tool("quantize", src, "-o", out, "--format", "int8", "--method", "awq", "--calib",
                 calib, check=0)
    assert sum("awq a=" in line for line in p.stdout.splitlines()) == 14
    raw, orig = read_raw(out), load_file(src)
    rec = json.loads(read_metadata(out)["qsparse.quantized"])
    state = {}
    for name, a in orig.items():
        if name in rec:
            state[name] = torch.from_numpy(decode_int8(raw, name, a.shape))
        else:
            state[name] = torch.from_numpy(np.frombuffer(raw[name][2], a.dtype)
                                           .reshape(a.shape).copy())
    assert not np.array_equal(state["model.layers.0.input_layernorm.weight"].numpy(),
                              orig["model.layers.0.input_layernorm.weight"])
    q = transformers.LlamaForCausalLM(llama[1].config).eval()
    q.load_state_dict(state, strict=False)
    enc = bert_tok(llama)(texts[2][:8], padding=True, return_tensors="pt")
    with torch.no_grad():
        ref = llama[1].model(**enc).last_hidden_state
        got = q.model(**enc).last_hidden_state
    rel = float((got - ref).norm() / ref.norm())
    assert rel < 0.02, rel


def bert_tok(model):
    return transformers.AutoTokenizer.from_pretrained(model[0])


def test_rotate_writes_w_r(run_tool, bert, calib_file, tmp_path):
    w = weights(bert)
    src = os.path.join(bert[0], "model.safetensors")
    out = tmp_path / "rot.safetensors"
    run_tool("quantize", src, "-o", out, "--format", "int8", "--rotate", "hadamard:16", "-q",
             check=0)
    rec = json.loads(read_metadata(out)["qsparse.quantized"])
    name = "encoder.layer.0.intermediate.dense.weight"
    assert rec[name]["rotation"] == {"type": "hadamard", "block": 16}
    got = decode_int8(read_raw(out), name, w[name].shape)
    wr = qs.hadamard(w[name], 16)
    assert np.linalg.norm(got - wr) < 0.01 * np.linalg.norm(wr)
    # the loader's side: rotating the input gives the layer's output
    x = np.random.default_rng(3).standard_normal((5, K)).astype(np.float32)
    y = x @ w[name].T
    assert np.linalg.norm(qs.hadamard(x, 16) @ got.T - y) < 0.02 * np.linalg.norm(y)


def test_calibration_with_mains_rules(run_tool, bert, calib_file, tmp_path):
    """Calibration beside the rules main brought: magnitude 2:4 in the tool's own layout is
    stored compressed (its kept values quantized), and its table columns measure that weight
    (the method is the baseline); a `qsparse calibrate` file whose layer counts 0 tokens is
    refused like an empty NAME.inputs (no calibration data), nothing written."""
    from safetensors.numpy import save_file
    src = os.path.join(bert[0], "model.safetensors")
    out = tmp_path / "s.safetensors"
    p = run_tool("quantize", src, "-o", out, "--format", "int8", "--sparsity", "2:4", "--calib",
                 calib_file[0], check=0)
    rows = {k: v for k, v in table(p.stdout).items() if k.startswith("encoder")}
    assert len(rows) == 12, p.stdout
    for layer, cols in rows.items():
        assert 0 < float(cols[5]) == float(cols[6]), (layer, cols)  # out.err = mag+rtn
    name = "encoder.layer.0.intermediate.dense.weight"
    assert isinstance(qs.load(out)[name], qs.sparse.SparseQTensor)
    assert name + ".sp24_meta" in read_raw(out)

    tensors, meta = cal.read_safetensors(str(calib_file[0]))
    base = json.loads(meta["qsparse.calibration"])["layers"]["encoder.layer.0.intermediate.dense"]
    tensors = dict(tensors)
    tensors[base + ".tokens"] = np.zeros_like(tensors[base + ".tokens"])
    bad = tmp_path / "zero.safetensors"
    save_file(tensors, str(bad), metadata=meta)
    out = tmp_path / "z.safetensors"
    p = run_tool("quantize", src, "-o", out, "--format", "nf4", "--method", "gptq", "--calib",
                 bad, "-q", check=1)
    assert base + ".tokens: 0 tokens: no calibration data" in p.stderr, p.stderr
    assert not out.exists()
