# SPDX-License-Identifier: MIT
"""Quantize a sharded model folder on a Dask cluster: calibration observers computed per worker
and merged, the shards quantized in parallel by `qsparse quantize --shard I/N`, the parts joined
by `qsparse merge-index`.

    python3 examples/dask_quantize.py MODEL_DIR OUT_DIR [--format nf4] [--layout L]
        [--parts N] [--workers W] [--scheduler tcp://HOST:8786] [--batches B] [--tokens T]
        [--observer percentile]

Without --scheduler it starts a LocalCluster of W worker processes on this machine; with one it
uses that cluster, whose workers must see MODEL_DIR and OUT_DIR's parent at the same paths (a
shared file system) and have the `qsparse` package and tool installed.

1. Calibration. Task b of B runs the model's linear layers on batch b of single-token inputs
   (the layer inputs of a Llama-shaped model: RMSNorm, q/k/v, o_proj of the attention output,
   gate/up, down of SiLU(gate) * up; with one token per sequence attention returns v itself, so
   no attention kernel is needed) and feeds one qs.Observer per linear module. The workers send
   their observers back (an Observer pickles as its to_bytes()), and the client merges them with
   Observer.merge: a histogram merged from pieces is bit for bit the histogram of all the data
   (docs/calibration.md §3), so the result does not depend on how batches were spread. The
   merged amax of each module is written to OUT_DIR.act_amax.json, the `--act-amax` file of the
   modelopt layout (its input_scale).
2. Quantization. Part i of N runs `qsparse quantize MODEL_DIR -o PARTS/part-i --shard i/N` (the
   shards whose position in the sorted shard list is i modulo N), each on some worker.
3. `qsparse merge-index OUT_DIR PARTS/part-*` joins them: the same files as one run without
   --shard, byte for byte.

A Slurm array or any other scheduler does steps 2 and 3 the same way: one `--shard
$SLURM_ARRAY_TASK_ID/$SLURM_ARRAY_TASK_COUNT` per task, then merge-index once.
"""

import argparse
import json
import logging
import os
import shutil
import struct
import subprocess
import sys

import numpy as np

import qsparse as qs


# ---- reading the model (numpy only: safetensors headers, memory-mapped data) -----------------

def _tensors(model_dir):
    """{name: (path, dtype, shape, offset)} of every tensor of the folder."""
    index = os.path.join(model_dir, "model.safetensors.index.json")
    files = (sorted(set(json.load(open(index))["weight_map"].values()))
             if os.path.exists(index) else ["model.safetensors"])
    out = {}
    for f in files:
        path = os.path.join(model_dir, f)
        with open(path, "rb") as fh:
            n = struct.unpack("<Q", fh.read(8))[0]
            header = json.loads(fh.read(n))
        for name, e in header.items():
            if name != "__metadata__":
                out[name] = (path, e["dtype"], e["shape"], 8 + n + e["data_offsets"][0])
    return out


def _read(entry):
    """A tensor as float32 (F32, F16 or BF16 in the file)."""
    path, dtype, shape, offset = entry
    count = int(np.prod(shape))
    raw = np.memmap(path, {"F32": "<f4", "F16": "<f2", "BF16": "<u2"}[dtype], "r", offset,
                    (count,))
    if dtype == "BF16":
        return (raw.astype(np.uint32) << 16).view(np.float32).reshape(shape)
    return np.asarray(raw, np.float32).reshape(shape)


def _rms_norm(x, w, eps):
    return x / np.sqrt((x * x).mean(-1, keepdims=True) + eps) * w


def layer_inputs(model_dir, batch, tokens=64):
    """{module: its input activations [tokens, in_features]} for calibration batch `batch`: token
    ids drawn from the batch number, each token its own sequence (see the module docstring)."""
    cfg = json.load(open(os.path.join(model_dir, "config.json")))
    t = _tensors(model_dir)
    eps = cfg.get("rms_norm_eps", 1e-5)
    ids = np.random.default_rng(batch).integers(0, cfg["vocab_size"], tokens)
    h = _read(t["model.embed_tokens.weight"])[ids]
    out = {}
    for i in range(cfg["num_hidden_layers"]):
        p = f"model.layers.{i}."

        def lin(name, x):
            out[p + name] = x
            return x @ _read(t[p + name + ".weight"]).T

        x = _rms_norm(h, _read(t[p + "input_layernorm.weight"]), eps)
        lin("self_attn.q_proj", x)
        lin("self_attn.k_proj", x)
        v = lin("self_attn.v_proj", x)
        h = h + lin("self_attn.o_proj", v)  # one token: attention returns v
        x = _rms_norm(h, _read(t[p + "post_attention_layernorm.weight"]), eps)
        gate, up = lin("mlp.gate_proj", x), lin("mlp.up_proj", x)
        h = h + lin("mlp.down_proj", gate / (1 + np.exp(-gate)) * up)
    return out


# ---- the tasks --------------------------------------------------------------------------------

def observe(model_dir, batches, tokens, method):
    """One task: {module: Observer} over the given calibration batches."""
    obs = {}
    for b in batches:
        for module, x in layer_inputs(model_dir, b, tokens).items():
            obs.setdefault(module, qs.Observer(method)).update(x.astype(np.float32))
    return obs


def merge_observers(parts):
    """Merge the workers' {module: Observer} dicts, in the order given (any order gives the
    same histograms)."""
    merged = {}
    for part in parts:
        for module, o in part.items():
            if module in merged:
                merged[module].merge(o)
            else:
                merged[module] = o
    return merged


def quantize_part(tool, model_dir, part_dir, i, n, options):
    """One task: `qsparse quantize --shard i/n`; returns its part folder."""
    if os.path.exists(part_dir):
        shutil.rmtree(part_dir)  # a retried task starts again
    cmd = [tool, "quantize", model_dir, "-o", part_dir, "--shard", f"{i}/{n}", "--quiet",
           "--threads", "1", *options]
    p = subprocess.run(cmd, capture_output=True, text=True)
    if p.returncode != 0:
        raise RuntimeError(f"{' '.join(cmd)}: {p.stderr}")
    return part_dir


def find_tool():
    t = os.environ.get("QSPARSE_TOOL") or shutil.which("qsparse")
    if not t:
        sys.exit("the qsparse tool was not found: put it on PATH or set QSPARSE_TOOL")
    return os.path.abspath(t)


def run(client, model_dir, out_dir, fmt="nf4", layout=None, parts=2, batches=8, tokens=64,
        method="percentile", tool=None):
    """The three steps on a Dask client; returns {module: merged Observer}."""
    tool = tool or find_tool()
    model_dir, out_dir = os.path.abspath(model_dir), os.path.abspath(out_dir)
    nworkers = max(1, len(client.scheduler_info()["workers"]))
    # 1. calibration: batches dealt to one task per worker, observers merged here
    groups = [list(range(batches))[w::nworkers] for w in range(nworkers)]
    futures = client.map(observe, [model_dir] * len(groups), groups, [tokens] * len(groups),
                         [method] * len(groups), pure=False)
    observers = merge_observers(client.gather(futures))
    amax_file = out_dir + ".act_amax.json"
    with open(amax_file, "w") as f:
        json.dump({m: float(o.amax()) for m, o in sorted(observers.items())}, f, indent=2)
    # 2. the parts, in parallel
    options = ["--format", fmt] + (["--layout", layout] if layout else [])
    if layout == "modelopt":
        options += ["--act-amax", amax_file]
    parts_dir = out_dir + ".parts"
    os.makedirs(parts_dir, exist_ok=True)
    futures = client.map(quantize_part, [tool] * parts, [model_dir] * parts,
                         [os.path.join(parts_dir, f"part-{i}") for i in range(parts)],
                         range(parts), [parts] * parts, [options] * parts, pure=False)
    part_dirs = client.gather(futures)
    # 3. one folder
    p = subprocess.run([tool, "merge-index", out_dir, *part_dirs], capture_output=True,
                       text=True)
    if p.returncode != 0:
        raise RuntimeError(p.stderr)
    shutil.rmtree(parts_dir)
    print(p.stdout.strip())
    print(f"{len(observers)} modules calibrated on {batches} batches of {tokens} tokens by "
          f"{nworkers} workers; act amax in {amax_file}")
    return observers


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("model_dir")
    ap.add_argument("out_dir")
    ap.add_argument("--format", default="nf4")
    ap.add_argument("--layout")
    ap.add_argument("--parts", type=int, default=2)
    ap.add_argument("--workers", type=int, default=2)
    ap.add_argument("--scheduler")
    ap.add_argument("--batches", type=int, default=8)
    ap.add_argument("--tokens", type=int, default=64)
    ap.add_argument("--observer", default="percentile")
    a = ap.parse_args()
    from dask.distributed import Client, LocalCluster

    if a.scheduler:
        client = Client(a.scheduler)
    else:
        client = Client(LocalCluster(n_workers=a.workers, threads_per_worker=1,
                                     processes=True, dashboard_address=None,
                                     silence_logs=logging.ERROR))
    with client:
        run(client, a.model_dir, a.out_dir, a.format, a.layout, a.parts, a.batches, a.tokens,
            a.observer)


if __name__ == "__main__":
    main()
