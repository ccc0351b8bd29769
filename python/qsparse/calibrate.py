# SPDX-License-Identifier: MIT
"""`qsparse calibrate`: a model and some text in, the calibration statistics of every linear layer
out, in one file that `qsparse quantize --calib FILE` reads (tools/README.md, docs/calibration.md
§18).

    qsparse calibrate MODEL_DIR (--text FILE | --dataset-dir DIR) -o CALIB.safetensors
        [--max-length 512] [--batch-size 16] [--max-samples N] [--hessian f64|f32|f16|diag]
        [--include REGEX] [--exclude REGEX] [--no-folds] [--threads N] [--quiet]
    qsparse calibrate --merge A.safetensors B.safetensors ... -o CALIB.safetensors

The float model (transformers, float32, on the CPU) runs over the text in batches; a forward
pre-hook on every selected nn.Linear streams the layer's input, padding tokens left out, into
mergeable statistics computed by the library: S = X^T X (qs.Hessian: f32 ssyrk chunks added in
double), the per-channel sum of squares in double (qs_act_sumsq_update), the per-channel absmax
and the token count. No activation is kept after its batch. Linears that read the same input
tensor (q, k and v; gate and up) share one set of statistics. The file holds, per statistics base
B (a layer's checkpoint name without ".weight"): B.xtx (the upper triangle of S, row by row),
B.sumsq, B.absmax, B.tokens; its "qsparse.calibration" metadata maps every layer to its base and
records, per base, the operation before the layer whose output channels can absorb a
per-input-channel scale (AWQ, SmoothQuant), verified by running the model with the scale folded.

--merge adds the statistics of several files (text shards calibrated on different machines):
sums of S and of squares in double, absmax by max, token counts by addition, so a merge equals
the statistics of all the text up to the order of the double additions.

This module needs torch and transformers (the C tool does not); `python3 -m qsparse.calibrate`
is the same command.
"""

import argparse
import glob
import json
import math
import os
import re
import struct
import sys
import time
from typing import Any, Dict, Iterable, List, Optional, Sequence, Tuple

import numpy as np

from . import _lib
from .gptq import Hessian

# The selection of `qsparse quantize` (tools/cmd_quantize.c): statistics are collected for the
# layers the tool quantizes by default.
DEFAULT_INCLUDE = r"\.weight$"
DEFAULT_EXCLUDE = r"norm|embed|lm_head|(^|\.)(wte|wpe|ln_[a-z0-9]+)\."

FORMAT_VERSION = 1
HESSIAN_DTYPES = ("f64", "f32", "f16", "diag")
META_KEY = "qsparse.calibration"


class CalibrationError(Exception):
    """A usage or input error of the calibrate command (printed without a traceback)."""


# ---- text ----------------------------------------------------------------------------------------

def _lines(path: str) -> List[str]:
    with open(path, encoding="utf-8") as f:
        return [s.strip() for s in f if s.strip()]


def _json_texts(obj: Any, field: str, where: str) -> List[str]:
    if isinstance(obj, str):
        return [obj]
    if isinstance(obj, dict):
        if field not in obj:
            raise CalibrationError(f"{where}: a record without the field '{field}'")
        v = obj[field]
        if not isinstance(v, str):
            raise CalibrationError(f"{where}: field '{field}' is not a string")
        return [v]
    if isinstance(obj, list):
        out: List[str] = []
        for x in obj:
            out += _json_texts(x, field, where)
        return out
    raise CalibrationError(f"{where}: expected strings or objects with '{field}'")


def read_texts(text: Optional[str] = None, dataset_dir: Optional[str] = None,
               field: str = "text", max_samples: Optional[int] = None) -> List[str]:
    """The calibration samples, in a fixed order.

    text: a UTF-8 file, one sample per non-empty line. dataset_dir: a folder whose files are read
    in sorted path order (recursively): *.txt (one sample per non-empty line), *.jsonl (one JSON
    object per line, its `field`), *.json (a list of strings or of objects with `field`),
    *.parquet (column `field`, with pyarrow); a folder written by Hugging Face datasets'
    save_to_disk is read with datasets.load_from_disk. max_samples keeps the first N."""
    if (text is None) == (dataset_dir is None):
        raise CalibrationError("give one of --text FILE and --dataset-dir DIR")
    out: List[str] = []
    if text is not None:
        if not os.path.isfile(text):
            raise CalibrationError(f"--text {text}: no such file")
        out = _lines(text)
    else:
        if not os.path.isdir(dataset_dir):
            raise CalibrationError(f"--dataset-dir {dataset_dir}: no such folder")
        if os.path.exists(os.path.join(dataset_dir, "dataset_info.json")) and \
                os.path.exists(os.path.join(dataset_dir, "state.json")):
            try:
                import datasets
            except ImportError:
                raise CalibrationError(f"{dataset_dir} was written by datasets.save_to_disk: "
                                       "`pip install datasets` to read it") from None
            ds = datasets.load_from_disk(dataset_dir)
            if isinstance(ds, datasets.DatasetDict):
                ds = ds[sorted(ds.keys())[0]]
            if field not in ds.column_names:
                raise CalibrationError(f"{dataset_dir}: no column '{field}' "
                                       f"(columns: {', '.join(ds.column_names)}); --field")
            out = [s for s in ds[field] if isinstance(s, str) and s.strip()]
        else:
            files = sorted(p for p in glob.glob(os.path.join(dataset_dir, "**", "*"),
                                                recursive=True) if os.path.isfile(p))
            for p in files:
                if p.endswith(".txt"):
                    out += _lines(p)
                elif p.endswith(".jsonl"):
                    with open(p, encoding="utf-8") as f:
                        for i, line in enumerate(f):
                            if line.strip():
                                out += _json_texts(json.loads(line), field, f"{p}:{i + 1}")
                elif p.endswith(".json"):
                    with open(p, encoding="utf-8") as f:
                        out += _json_texts(json.load(f), field, p)
                elif p.endswith(".parquet"):
                    try:
                        import pyarrow.parquet as pq
                    except ImportError:
                        raise CalibrationError(f"{p}: `pip install pyarrow` to read parquet") \
                            from None
                    out += [s for s in pq.read_table(p, columns=[field]).column(field)
                            .to_pylist() if isinstance(s, str)]
            out = [s.strip() for s in out if s.strip()]
    if max_samples is not None:
        out = out[:max_samples]
    if not out:
        raise CalibrationError("no calibration text (empty file or folder)")
    return out


# ---- safetensors without the safetensors package -------------------------------------------------

_DT = {"F64": np.float64, "F32": np.float32, "F16": np.float16, "I64": np.int64}


def _write_safetensors(path: str, tensors: Sequence[Tuple[str, np.ndarray]],
                       metadata: Dict[str, str]) -> int:
    """Write (name, array) pairs in order, streaming, to a temporary file renamed into place.
    Returns the file size."""
    names = {np.dtype(v): k for k, v in _DT.items()}
    header: Dict[str, Any] = {"__metadata__": metadata}
    off = 0
    for name, a in tensors:
        n = a.nbytes
        header[name] = {"dtype": names[a.dtype], "shape": list(a.shape),
                        "data_offsets": [off, off + n]}
        off += n
    h = json.dumps(header, separators=(",", ":")).encode()
    h += b" " * (-len(h) % 8)
    tmp = f"{path}.qsparse-tmp-{os.getpid()}"
    try:
        with open(tmp, "wb") as f:
            f.write(struct.pack("<Q", len(h)))
            f.write(h)
            for _, a in tensors:
                f.write(np.ascontiguousarray(a).astype(a.dtype.newbyteorder("<"),
                                                       copy=False).tobytes())
        os.replace(tmp, path)
    finally:
        if os.path.exists(tmp):
            os.unlink(tmp)
    return 8 + len(h) + off


def read_safetensors(path: str) -> Tuple[Dict[str, np.ndarray], Dict[str, str]]:
    """({name: array}, metadata) of a safetensors file of F64/F32/F16/I64 tensors (memory-mapped
    arrays, read-only)."""
    with open(path, "rb") as f:
        n = struct.unpack("<Q", f.read(8))[0]
        header = json.loads(f.read(n))
    meta = header.pop("__metadata__", {}) or {}
    data = np.memmap(path, np.uint8, "r")
    out = {}
    for name, e in header.items():
        if e["dtype"] not in _DT:
            raise CalibrationError(f"{path}: {name} has dtype {e['dtype']}")
        b, t = e["data_offsets"]
        out[name] = data[8 + n + b:8 + n + t].view(np.dtype(_DT[e["dtype"]]).newbyteorder("<")) \
            .reshape(e["shape"])
    return out, meta


def _checkpoint_keys(model_dir: str) -> List[str]:
    """Tensor names of a model folder's safetensors file(s) (headers only)."""
    index = os.path.join(model_dir, "model.safetensors.index.json")
    if os.path.exists(index):
        files = sorted(set(json.load(open(index))["weight_map"].values()))
    else:
        files = [os.path.basename(p) for p in sorted(glob.glob(os.path.join(model_dir,
                                                                             "*.safetensors")))]
    keys: List[str] = []
    for fn in files:
        with open(os.path.join(model_dir, fn), "rb") as f:
            n = struct.unpack("<Q", f.read(8))[0]
            keys += [k for k in json.loads(f.read(n)) if k != "__metadata__"]
    if not keys:
        raise CalibrationError(f"{model_dir}: no safetensors weights")
    return keys


# ---- statistics ----------------------------------------------------------------------------------

class LayerStats:
    """Mergeable statistics of one input: S = X^T X (unless diagonal only), the per-channel sum
    of squares and absmax, the token count."""

    def __init__(self, k: int, full: bool = True) -> None:
        self.k = k
        self.h = Hessian(k) if full else None
        self.sumsq = np.zeros(k, np.float64)
        self.absmax = np.zeros(k, np.float32)
        self.tokens = 0

    def update(self, x: np.ndarray) -> None:
        """x: (tokens, K) float32, C-contiguous."""
        if x.shape[0] == 0:
            return
        try:
            if self.h is not None:
                self.h.update(x)  # refuses a NaN or Inf activation, adding nothing
            elif not np.isfinite(x).all():
                raise _lib.QsparseError(_lib.QS_ERR_NONFINITE, "a NaN or Inf activation")
        except _lib.QsparseError as e:
            raise CalibrationError(f"{e}: the float model overflowed on the calibration "
                                   "text") from None
        _lib.check(_lib.lib().qs_act_sumsq_update(_lib.ctx(), _lib.ptr(x), _lib.QS_DTYPE_F32,
                                                  x.shape[0], x.shape[1], _lib.ptr(self.sumsq),
                                                  self.k))
        np.maximum(self.absmax, np.abs(x).max(axis=0), out=self.absmax)
        self.tokens += x.shape[0]

    def xtx_packed(self) -> np.ndarray:
        """The upper triangle of S row by row, float64."""
        m = self.h.matrix()  # H = 2 S
        iu = np.triu_indices(self.k)
        return m[iu] * 0.5


def _packed_dtype(kind: str, packed: np.ndarray, tokens: int) -> np.ndarray:
    if kind == "f64":
        return packed
    if kind == "f32":
        return packed.astype(np.float32)
    # f16 holds the mean S / tokens: sums of thousands of squares overflow f16's 65504
    with np.errstate(over="ignore"):
        out = (packed / max(tokens, 1)).astype(np.float16)
    if not np.isfinite(out).all():
        raise CalibrationError("--hessian f16: a mean product beyond f16's range; use f32")
    return out


# ---- the model -----------------------------------------------------------------------------------

def _progress(done: int, total: int, tokens: int, t0: float, quiet: bool) -> None:
    if quiet or not sys.stderr.isatty():
        return
    width = 30
    fill = int(width * done / max(total, 1))
    sys.stderr.write(f"\rcalibrating [{'#' * fill}{' ' * (width - fill)}] {done}/{total} "
                     f"samples, {tokens} tokens, {time.time() - t0:.1f} s")
    if done == total:
        sys.stderr.write("\n")
    sys.stderr.flush()


def _module_keys(model: Any, keys: Sequence[str], include: str,
                 exclude: Optional[str]) -> Dict[str, str]:
    """{module name: checkpoint base} of the nn.Linear modules whose checkpoint weight the tool
    selects (include / exclude on the checkpoint name, as `qsparse quantize` applies them)."""
    import torch
    keyset = set(keys)
    inc = re.compile(include)
    exc = re.compile(exclude if exclude is not None else DEFAULT_EXCLUDE,
                     0 if exclude is not None else re.IGNORECASE)
    prefix = getattr(model, "base_model_prefix", "") or ""
    out = {}
    for name, mod in model.named_modules():
        if not isinstance(mod, torch.nn.Linear):
            continue
        cands = [name + ".weight"] + ([f"{prefix}.{name}.weight"] if prefix else [])
        hit = next((c for c in cands if c in keyset), None)
        if hit is None:
            ends = [k for k in keys if k.endswith("." + name + ".weight")]
            hit = ends[0] if len(ends) == 1 else None
        if hit is None or not inc.search(hit) or exc.search(hit):
            continue
        out[name] = hit[:-len(".weight")]
    return out


class _Capture:
    """Forward pre-hooks that stream every selected Linear's input into LayerStats."""

    def __init__(self, model: Any, modules: Dict[str, str], full: bool) -> None:
        import torch
        self.torch = torch
        self.model = model
        self.modules = modules
        self.full = full
        self.mask = None
        self.stats: Dict[str, LayerStats] = {}   # checkpoint base -> stats
        self.base_of: Dict[str, str] = {}        # checkpoint base of a layer -> its stats base
        self.order: List[str] = []               # modules (Linear and norms) in execution order
        self.first = True
        self.active = True  # off while the fold check runs the model with changed weights
        self.last: Optional[Tuple[Any, str]] = None  # (input tensor, stats base) of the last hook
        self.handles = []
        byname = dict(model.named_modules())
        for name in modules:
            self.handles.append(byname[name].register_forward_pre_hook(self._hook(name)))
        for name, mod in model.named_modules():
            if isinstance(mod, torch.nn.Linear) or _is_norm(mod):
                self.handles.append(mod.register_forward_hook(self._seen(name)))

    def close(self) -> None:
        for h in self.handles:
            h.remove()

    def _seen(self, name: str):
        def hook(mod, args, out):
            if self.first:
                self.order.append(name)
        return hook

    def _hook(self, name: str):
        base = self.modules[name]

        def hook(mod, args):
            if not self.active:
                return None
            x = args[0]
            if self.last is not None and x is self.last[0]:
                shared = self.last[1]
                if self.first:
                    self.base_of[base] = shared
                elif self.base_of.get(base) != shared:
                    raise CalibrationError(f"{base}: reads the input of {shared} in one batch "
                                           "and not in another")
                return None
            if self.first:
                self.base_of[base] = base
            elif self.base_of.get(base) != base:
                raise CalibrationError(f"{base}: its input changed between batches")
            self.last = (x, base)
            k = x.shape[-1]
            st = self.stats.get(base)
            if st is None:
                st = self.stats[base] = LayerStats(k, self.full)
            m = self.mask
            with self.torch.no_grad():
                if m is not None and x.dim() >= 3 and tuple(x.shape[:2]) == tuple(m.shape):
                    rows = x[m]
                else:
                    rows = x.reshape(-1, k)
                st.update(np.ascontiguousarray(rows.detach().float().cpu().numpy()))
            return None
        return hook


def _is_norm(mod: Any) -> bool:
    w = getattr(mod, "weight", None)
    return "norm" in type(mod).__name__.lower() and w is not None and w.dim() == 1


def _find_folds(model: Any, cap: _Capture, enc: Dict[str, Any], keys: Sequence[str],
                log) -> Dict[str, Dict[str, Any]]:
    """{stats base: fold} for each group of layers sharing an input whose input channels are the
    output channels of the last Linear or norm run before the group: verified by scaling that
    op's output channels by 1/s and the group's input columns by s (s random in [0.5, 2]) and
    checking that the model's output does not change (relative 1e-4)."""
    import torch
    byname = dict(model.named_modules())
    keyset = set(keys)
    name_of = {b: n for n, b in cap.modules.items()}
    members: Dict[str, List[str]] = {}
    for base, sb in cap.base_of.items():
        members.setdefault(sb, []).append(base)
    with torch.no_grad():
        ref = model(**enc)[0].float()
    gen = torch.Generator().manual_seed(0)
    folds = {}
    for sb, group in members.items():
        first = min(cap.order.index(name_of[b]) for b in group if name_of[b] in cap.order) \
            if any(name_of[b] in cap.order for b in group) else None
        if first is None:
            continue
        k = byname[name_of[sb]].in_features
        prev = None
        for cand in reversed(cap.order[:first]):
            mod = byname[cand]
            if isinstance(mod, torch.nn.Linear):
                if mod.out_features == k:
                    prev = cand
                    break
            elif mod.weight.shape[0] == k:
                prev = cand
                break
        if prev is None:
            continue
        pm = byname[prev]
        s = torch.rand(k, generator=gen) * 1.5 + 0.5
        saved = [(t, t.detach().clone()) for t in [pm.weight, getattr(pm, "bias", None)] +
                 [byname[name_of[b]].weight for b in group] if t is not None]
        with torch.no_grad():
            if isinstance(pm, torch.nn.Linear):
                pm.weight.div_(s[:, None])
            else:
                pm.weight.div_(s)
            if getattr(pm, "bias", None) is not None:
                pm.bias.div_(s)
            for b in group:
                byname[name_of[b]].weight.mul_(s[None, :])
            got = model(**enc)[0].float()
            for t, v in saved:
                t.copy_(v)
        rel = float((got - ref).norm() / ref.norm().clamp_min(1e-30))
        if rel > 1e-4:
            continue
        base = _ckpt_base(prev, keyset, model)
        if base is None:
            continue
        folds[sb] = {"module": base, "kind": "linear" if isinstance(pm, torch.nn.Linear)
                     else "norm", "weight": base + ".weight",
                     "bias": base + ".bias" if base + ".bias" in keyset else None}
        log(f"fold: {', '.join(group)} <- {base} (checked: output change {rel:.1e})")
    return folds


def _ckpt_base(name: str, keyset: set, model: Any) -> Optional[str]:
    prefix = getattr(model, "base_model_prefix", "") or ""
    for c in [name] + ([f"{prefix}.{name}"] if prefix else []):
        if c + ".weight" in keyset:
            return c
    ends = [k for k in keyset if k.endswith("." + name + ".weight")]
    return ends[0][:-len(".weight")] if len(ends) == 1 else None


def calibrate(model_dir: str, texts: Sequence[str], out: str, *, max_length: int = 512,
              batch_size: int = 16, hessian: str = "f64", include: str = DEFAULT_INCLUDE,
              exclude: Optional[str] = None, folds: bool = True, quiet: bool = False,
              log=None) -> Dict[str, Any]:
    """Run the float model over texts and write the calibration file `out`. Returns a summary
    {"layers", "bases", "tokens", "samples", "bytes", "seconds", "folds"}."""
    if hessian not in HESSIAN_DTYPES:
        raise CalibrationError(f"--hessian is one of {', '.join(HESSIAN_DTYPES)}")
    if not os.path.isfile(os.path.join(model_dir, "config.json")):
        raise CalibrationError(f"{model_dir}: not a model folder (no config.json)")
    try:
        import torch
        import transformers
    except ImportError as e:
        raise CalibrationError(f"qsparse calibrate runs the model with torch and transformers "
                               f"({e}); pip install torch transformers") from None
    if log is None:
        def log(s):
            if not quiet:
                sys.stderr.write(s + "\n")
    t0 = time.time()
    keys = _checkpoint_keys(model_dir)
    tok = transformers.AutoTokenizer.from_pretrained(model_dir)
    if tok.pad_token is None:
        tok.pad_token = tok.eos_token or tok.unk_token
    model = transformers.AutoModel.from_pretrained(model_dir, dtype=torch.float32).eval()
    modules = _module_keys(model, keys, include, exclude)
    if not modules:
        raise CalibrationError(f"{model_dir}: no linear layer matches the selection")
    cap = _Capture(model, modules, hessian != "diag")
    # batches of similar length: less padding to run and to drop
    lengths = [len(ids) for ids in tok(list(texts), truncation=True,
                                       max_length=max_length)["input_ids"]]
    order = np.argsort(lengths, kind="stable")
    done = 0
    probe = None
    try:
        with torch.no_grad():
            for i in range(0, len(order), batch_size):
                batch = [texts[j] for j in order[i:i + batch_size]]
                enc = tok(batch, padding=True, truncation=True, max_length=max_length,
                          return_tensors="pt")
                if probe is None:
                    probe = {k: v[:2] for k, v in enc.items()}
                m = enc.get("attention_mask")
                cap.mask = m.bool() if m is not None else None
                cap.last = None
                model(**enc)
                cap.first = False
                done += len(batch)
                _progress(done, len(texts), max((s.tokens for s in cap.stats.values()),
                                                default=0), t0, quiet)
        cap.active = False
        fold_map = _find_folds(model, cap, probe, keys, log) if folds else {}
    finally:
        cap.close()
    if not cap.stats:
        raise CalibrationError("the model never called a selected linear layer")
    tensors: List[Tuple[str, np.ndarray]] = []
    groups = {}
    for base in sorted(cap.stats):
        st = cap.stats[base]
        if hessian != "diag":
            tensors.append((base + ".xtx", _packed_dtype(hessian, st.xtx_packed(), st.tokens)))
        tensors += [(base + ".sumsq", st.sumsq), (base + ".absmax", st.absmax),
                    (base + ".tokens", np.array(st.tokens, np.int64))]
        g = {"members": sorted(b for b, s in cap.base_of.items() if s == base), "k": st.k}
        if base in fold_map:
            g["fold"] = fold_map[base]
        groups[base] = g
    meta = {"version": FORMAT_VERSION, "hessian": hessian, "samples": len(texts),
            "max_length": max_length, "model": os.path.basename(os.path.normpath(model_dir)),
            "layers": dict(sorted(cap.base_of.items())), "groups": groups}
    size = _write_safetensors(out, tensors, {META_KEY: json.dumps(meta, sort_keys=True),
                                             "qsparse.version": _version()})
    toks = max(s.tokens for s in cap.stats.values())
    secs = time.time() - t0
    small = sorted(b for b, s in cap.stats.items() if s.tokens < s.k)
    if small:
        log(f"warning: {len(small)} layer(s) saw fewer calibration tokens than inputs "
            f"({cap.stats[small[0]].tokens} < {cap.stats[small[0]].k} for {small[0]}): their "
            f"Hessian is singular and GPTQ will fit the calibration text; give more text")
    log(f"{out}: {len(cap.base_of)} layers ({len(cap.stats)} distinct inputs), {toks} tokens "
        f"from {len(texts)} samples, {size / 1e6:.1f} MB, {secs:.1f} s")
    return {"layers": len(cap.base_of), "bases": len(cap.stats), "tokens": toks,
            "samples": len(texts), "bytes": size, "seconds": secs, "folds": len(fold_map)}


def _version() -> str:
    return _lib.lib().qs_version_string().decode()


# ---- merge ---------------------------------------------------------------------------------------

def merge(paths: Sequence[str], out: str) -> Dict[str, Any]:
    """Add the statistics of calibration files of the same model and options into `out`."""
    if len(paths) < 2:
        raise CalibrationError("--merge needs at least two files")
    files = [read_safetensors(p) for p in paths]
    metas = []
    for p, (_, m) in zip(paths, files):
        if META_KEY not in m:
            raise CalibrationError(f"{p}: not a `qsparse calibrate` file (no {META_KEY})")
        metas.append(json.loads(m[META_KEY]))
    first = metas[0]
    for p, m in zip(paths[1:], metas[1:]):
        for k in ("version", "hessian", "layers"):
            if m.get(k) != first.get(k):
                raise CalibrationError(f"{p}: its '{k}' differs from {paths[0]}'s: the files "
                                       "come from different models or options")
    t0 = files[0][0]
    names = sorted(t0)
    for p, (t, _) in zip(paths[1:], files[1:]):
        if sorted(t) != names:
            raise CalibrationError(f"{p}: holds other tensors than {paths[0]}")
    tensors = []
    for name in names:
        base, kind = name.rsplit(".", 1)
        parts = [t[name] for t, _ in files]
        if kind == "absmax":
            v = np.maximum.reduce([np.asarray(a) for a in parts])
        elif kind == "xtx" and first["hessian"] == "f16":
            # means: weighted by each file's tokens, in double
            toks = [float(t[base + ".tokens"]) for t, _ in files]
            v = (sum(np.asarray(a, np.float64) * n for a, n in zip(parts, toks)) /
                 max(sum(toks), 1.0)).astype(np.float16)
        else:
            v = parts[0].astype(parts[0].dtype.newbyteorder("="), copy=True)
            for a in parts[1:]:
                v = v + a
            v = v.astype(parts[0].dtype.newbyteorder("="))
        tensors.append((name, np.asarray(v)))
    meta = dict(first)
    meta["samples"] = sum(m.get("samples", 0) for m in metas)
    size = _write_safetensors(out, tensors, {META_KEY: json.dumps(meta, sort_keys=True),
                                             "qsparse.version": _version()})
    return {"files": len(paths), "bytes": size, "samples": meta["samples"]}


# ---- command line --------------------------------------------------------------------------------

def _parser() -> argparse.ArgumentParser:
    ap = argparse.ArgumentParser(
        prog="qsparse calibrate",
        description="Run a Hugging Face model over text and write the calibration statistics of "
                    "its linear layers (Hessian X^T X, per-channel sums of squares and absmax, "
                    "token counts) for `qsparse quantize --calib FILE`.")
    ap.add_argument("model_dir", nargs="?", help="a Hugging Face model folder")
    ap.add_argument("--text", help="a UTF-8 text file, one sample per non-empty line")
    ap.add_argument("--dataset-dir", help="a folder of *.txt / *.jsonl / *.json / *.parquet "
                                          "files, or one written by datasets.save_to_disk")
    ap.add_argument("--field", default="text", help="the text field of JSON / parquet records")
    ap.add_argument("-o", "--output", required=True, help="the calibration file to write")
    ap.add_argument("--max-length", type=int, default=512, help="tokens per sample, at most")
    ap.add_argument("--batch-size", type=int, default=16)
    ap.add_argument("--max-samples", type=int, help="use the first N samples only")
    ap.add_argument("--hessian", default="f64", choices=HESSIAN_DTYPES,
                    help="how X^T X is stored: f64 (exact merges), f32 (half the size), f16 (the "
                         "mean X^T X / tokens, a quarter), diag (none: Wanda, AWQ's diagonal "
                         "search)")
    ap.add_argument("--include", default=DEFAULT_INCLUDE,
                    help="layers by checkpoint weight name (as qsparse quantize)")
    ap.add_argument("--exclude", default=None, help="layers left out (as qsparse quantize)")
    ap.add_argument("--no-folds", action="store_true",
                    help="skip the check of which operations can absorb AWQ / SmoothQuant scales")
    ap.add_argument("--threads", type=int, help="torch and library threads")
    ap.add_argument("--merge", nargs="+", metavar="FILE",
                    help="add these calibration files into -o instead of running a model")
    ap.add_argument("-q", "--quiet", action="store_true")
    return ap


def main(argv: Optional[Sequence[str]] = None) -> int:
    argv = list(sys.argv[1:] if argv is None else argv)
    if argv and argv[0] == "calibrate":  # as the C tool passes it on
        argv = argv[1:]
    a = _parser().parse_args(argv)
    try:
        if a.merge:
            if a.model_dir or a.text or a.dataset_dir:
                raise CalibrationError("--merge takes calibration files only")
            r = merge(a.merge, a.output)
            if not a.quiet:
                sys.stderr.write(f"{a.output}: {r['files']} files merged, {r['samples']} samples, "
                                 f"{r['bytes'] / 1e6:.1f} MB\n")
            return 0
        if not a.model_dir:
            raise CalibrationError("MODEL_DIR is required (or --merge FILE...)")
        if a.max_length < 1 or a.batch_size < 1:
            raise CalibrationError("--max-length and --batch-size must be positive")
        texts = read_texts(a.text, a.dataset_dir, a.field, a.max_samples)
        if a.threads:
            import torch
            torch.set_num_threads(a.threads)
            from . import set_num_threads
            set_num_threads(a.threads)
        calibrate(a.model_dir, texts, a.output, max_length=a.max_length,
                  batch_size=a.batch_size, hessian=a.hessian, include=a.include,
                  exclude=a.exclude, folds=not a.no_folds, quiet=a.quiet)
        return 0
    except (CalibrationError, OSError, ValueError) as e:
        sys.stderr.write(f"qsparse calibrate: error: {e}\n")
        return 2 if isinstance(e, CalibrationError) else 1


if __name__ == "__main__":
    sys.exit(main())
