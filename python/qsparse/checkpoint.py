# SPDX-License-Identifier: MIT
"""qs.save / qs.load: QTensors and plain arrays in safetensors files, with the checkpoint keys of
the `qsparse quantize` tool (tools/checkpoint_keys.c is the table; docs/ecosystem.md lists them).

For a weight named N = P.weight:

    nf4, fp4     N U8 [(n+1)/2, 1], N.absmax (F32, or U8 with double quantization),
                 N.quant_map F32 [16], N.nested_absmax F32 and N.nested_quant_map F32 [256]
                 (double quantization), N.quant_state.bitsandbytes__nf4 (or __fp4) U8: the JSON
                 quant_state as bitsandbytes' json.dumps writes it
    llm_int8     N I8 [out, in], P.SCB F32 [out] (row absmax), P.weight_format U8 [] = 0
    fp8_e4m3/e5m2 N F8_E4M3 / F8_E5M2 in the weight's shape, N_scale F32 []
    mxfp4        N U8 [rows, ceil(cols/2)], N_scale U8 [rows, ceil(cols/32)] (E8M0)
    mxfp8        N F8_E4M3 [rows, cols], N_scale U8 [rows, ceil(cols/32)]
    nvfp4        N U8 [rows, ceil(cols/2)], N_scale F8_E4M3 [rows, ceil(cols/16)], N_scale_2 F32 []
    int8         N I8 in the weight's shape, N_scale F32 (the library's scale plane shape),
                 N_zero_point I8 (asymmetric only)

A 2:4 weight (a SparseQTensor: `qsparse quantize --sparsity 2:4`, or qs.quantize of a
Compressed24) is stored compressed: the keys above for its kept values as a [rows, cols/2]
tensor, and N.sp24_meta U16 [rows, ceil(cols/16)] its meta words; a Compressed24 (`--format none
--sparsity 2:4`) is N, the kept values in their dtype [rows, cols/2], and N.sp24_meta. Their
record entry gives the dense shape and "sparsity": "2:4"; load() returns them as they were.

and the metadata entry "qsparse.quantized": a JSON object giving per quantized weight its
format, shape and source dtype (plus the options that decoding needs: blocksize, double_quant,
granularity, group_size, symmetric, scale_rounding). layout="bnb" writes the bitsandbytes
formats only (nf4, fp4, llm_int8: what transformers + bitsandbytes load) and refuses the others.

load() reads the record when present (every layout the tool writes: the record's "layout" says
where compressed-tensors renamed a weight's keys); without it (a file from bitsandbytes or another
writer)
it recognises bitsandbytes 4-bit weights by their quant_state key, LLM.int8 ones by an I8
weight beside P.SCB F32, FP8 by an F8 weight beside N_scale F32 [] and MXFP8 by an F8_E4M3
weight beside N_scale U8; every other key comes back as a numpy array.
"""

from __future__ import annotations

import json
import os
import struct
import tempfile
from typing import Any, Dict, List, Mapping, Optional, Tuple, Union

import numpy as np

from . import _arrays, _bnb, _lib, _st_header
from ._quant import QTensor
from .sparse import Compressed24, SparseQTensor

LAYOUTS = ("qsparse", "bitsandbytes", "bnb")  # "bnb" is short for "bitsandbytes"
_BNB_LAYOUT_FORMATS = ("nf4", "fp4", "llm_int8")
_RECORD = "qsparse.quantized"
_SP24_META = ".sp24_meta"  # the meta words of a 2:4 weight (tools/checkpoint_keys.h)

# safetensors dtype <-> numpy (F8 and BF16 are ml_dtypes' types when ml_dtypes is installed)
_ST_NUMPY = {"F64": np.float64, "F32": np.float32, "F16": np.float16, "I64": np.int64,
             "I32": np.int32, "I16": np.int16, "I8": np.int8, "U64": np.uint64,
             "U32": np.uint32, "U16": np.uint16, "U8": np.uint8, "BOOL": np.bool_,
             "C64": np.complex64}
_ST_ML = {"BF16": "bfloat16", "F8_E4M3": "float8_e4m3fn", "F8_E5M2": "float8_e5m2",
          "F8_E8M0": "float8_e8m0fnu"}

Tensor = Union[QTensor, SparseQTensor, Compressed24, np.ndarray]


def _ml_dtype(st: str) -> np.dtype:
    try:
        import ml_dtypes
    except ImportError:
        raise ImportError(f"a {st} tensor is read as numpy values only with ml_dtypes (numpy has "
                          f"no {_ST_ML[st]}): pip install ml_dtypes") from None
    return np.dtype(getattr(ml_dtypes, _ST_ML[st]))


def _st_dtype(a: np.ndarray, bf16_bits: bool = False) -> str:
    if bf16_bits:
        return "BF16"
    for st, t in _ST_NUMPY.items():
        if a.dtype.newbyteorder("=") == np.dtype(t).newbyteorder("="):
            return st
    name = a.dtype.name
    for st, ml in _ST_ML.items():
        if name == ml:
            return st
    raise ValueError(f"safetensors cannot hold dtype {a.dtype}")


# ---- writing -----------------------------------------------------------------------------------


def _module_prefix(name: str) -> str:
    return name[:-len(".weight")] if name.endswith(".weight") else name


def _rows_cols(shape: Tuple[int, ...]) -> Tuple[int, int]:
    if not shape:
        return 1, 1
    rows = 1
    for s in shape[:-1]:
        rows *= int(s)
    return rows, int(shape[-1])


def _record(q: QTensor) -> Dict[str, Any]:
    r: Dict[str, Any] = {"format": q.format, "shape": list(q.shape), "dtype": q.dtype}
    for field in ("blocksize", "granularity", "group_size", "symmetric", "scale_rounding"):
        v = getattr(q, field)
        if v is not None:
            r[field] = v
    if q.double_quant:
        r["double_quant"] = True
    return r


def _plane2(a: Optional[np.ndarray], rows: int, what: str, name: str) -> np.ndarray:
    """A row-blocked plane as [rows, k], as the tool writes it."""
    if a is None:
        raise ValueError(f"{name}: the QTensor has no {what} plane")
    a = np.ascontiguousarray(a)
    return a.reshape(rows, -1) if rows else a


def _quantized_keys(name: str, q: QTensor) -> List[Tuple[str, str, np.ndarray]]:
    """[(key, safetensors dtype, array)] of one QTensor, in the tool's table order."""
    # decoding the planes once checks every dtype and size against the library's description
    from ._quant import _c_tensor

    _c_tensor(q)
    fmt = q.format
    rows, cols = _rows_cols(q.shape)
    if fmt in _bnb.BNB_FORMATS:
        state = _bnb.state_arrays(q)
        text = json.dumps(_bnb.quant_state_json(q)).encode("utf-8")
        keys = [(name, "U8", np.ascontiguousarray(q.data).reshape(-1, 1)),
                (name + ".absmax", _st_dtype(state["absmax"]), state["absmax"].reshape(-1)),
                (name + ".quant_map", "F32", state["quant_map"])]
        if q.double_quant:
            keys += [(name + ".nested_absmax", "F32", state["nested_absmax"].reshape(-1)),
                     (name + ".nested_quant_map", "F32", state["nested_quant_map"])]
        keys.append((name + ".quant_state.bitsandbytes__" + fmt, "U8",
                     np.frombuffer(text, np.uint8)))
        return keys
    if fmt == "llm_int8":
        if len(q.shape) != 2:
            raise ValueError(f"{name}: an LLM.int8 weight is 2-D [out, in], got {q.shape}")
        p = _module_prefix(name)
        return [(name, "I8", np.ascontiguousarray(q.data).reshape(q.shape)),
                (p + ".SCB", "F32", np.ascontiguousarray(q.scale).reshape(-1)),
                (p + ".weight_format", "U8", np.zeros((), np.uint8))]
    if fmt in ("fp8_e4m3", "fp8_e5m2"):
        st = "F8_E4M3" if fmt == "fp8_e4m3" else "F8_E5M2"
        return [(name, st, np.ascontiguousarray(q.data).reshape(q.shape)),
                (name + "_scale", "F32", np.ascontiguousarray(q.scale).reshape(()))]
    if fmt in ("mxfp4", "mxfp8"):
        return [(name, "U8" if fmt == "mxfp4" else "F8_E4M3", _plane2(q.data, rows, "data", name)),
                (name + "_scale", "U8", _plane2(q.scale, rows, "scale", name))]
    if fmt == "nvfp4":
        return [(name, "U8", _plane2(q.data, rows, "data", name)),
                (name + "_scale", "F8_E4M3", _plane2(q.scale, rows, "scale", name)),
                (name + "_scale_2", "F32", np.asarray(q.global_scale, np.float32).reshape(()))]
    if fmt == "int8":
        keys = [(name, "I8", np.ascontiguousarray(q.data).reshape(q.shape)),
                (name + "_scale", "F32", np.ascontiguousarray(q.scale))]
        if q.zero_point is not None:
            keys.append((name + "_zero_point", "I8", np.ascontiguousarray(q.zero_point)))
        return keys
    raise ValueError(f"{name}: format {fmt!r} has no checkpoint keys")


def _sparse_keys(name: str, t: Union[SparseQTensor, Compressed24]
                 ) -> Tuple[List[Tuple[str, str, np.ndarray]], Dict[str, Any]]:
    """The keys and the record entry of a 2:4 compressed weight (module docstring)."""
    shape = tuple(int(s) for s in t.shape)
    if len(shape) != 2:
        raise ValueError(f"{name}: a 2:4 weight is stored as 2-D [rows, cols], got {shape}")
    rows, cols = shape
    meta = np.ascontiguousarray(t.meta, dtype=np.uint16).reshape(rows, -1)
    if isinstance(t, SparseQTensor):
        keys = _quantized_keys(name, t.q)
        rec = _record(t.q)
    else:
        vals, _, dtype = _lib.as_float_array(t.values, t.dtype)
        st = "BF16" if dtype == "bfloat16" else _st_dtype(vals)
        keys = [(name, st, np.ascontiguousarray(vals).reshape(rows, cols // 2))]
        rec = {"format": "none", "dtype": dtype}
    rec.update(shape=[rows, cols], sparsity="2:4")
    return keys + [(name + _SP24_META, "U16", meta)], rec


def _write_safetensors(path: str, entries: List[Tuple[str, str, np.ndarray]],
                       metadata: Dict[str, str]) -> None:
    header: Dict[str, Any] = {"__metadata__": metadata} if metadata else {}
    offset = 0
    for key, st, a in entries:
        n = a.nbytes
        header[key] = {"dtype": st, "shape": [int(s) for s in a.shape],
                       "data_offsets": [offset, offset + n]}
        offset += n
    text = json.dumps(header, separators=(",", ":")).encode("utf-8")
    text += b" " * (-len(text) % 8)  # the data section starts 8-byte aligned
    folder = os.path.dirname(os.path.abspath(path))
    fd, tmp = tempfile.mkstemp(prefix="." + os.path.basename(path) + ".", dir=folder)
    try:
        with os.fdopen(fd, "wb") as f:
            f.write(struct.pack("<Q", len(text)))
            f.write(text)
            for _, _, a in entries:
                le = a if a.dtype.byteorder != ">" else a.astype(a.dtype.newbyteorder("<"))
                f.write(np.ascontiguousarray(le).view(np.uint8).reshape(-1).data)
        os.replace(tmp, path)
    except BaseException:
        try:
            os.unlink(tmp)
        except OSError:
            pass
        raise


def save(path: Union[str, os.PathLike], tensors: Mapping[str, Any], layout: str = "qsparse",
         metadata: Optional[Mapping[str, str]] = None) -> None:
    """Write `tensors` ({name: QTensor or array}) to the safetensors file `path`.

    A QTensor named N becomes the keys of its format (module docstring; the tool's table) and
    an entry of the "qsparse.quantized" metadata record (so does a 2:4 SparseQTensor or
    Compressed24, compressed, with layout="qsparse"); an array (numpy, torch, any input
    qs.quantize takes; bfloat16 and float8 too) is written as it is. layout="qsparse" (the
    tool's keys, every format) or "bnb" (nf4, fp4 and llm_int8 only, bitsandbytes' key names;
    other formats are a ValueError). `metadata` adds string entries to the header. The file is
    written to a temporary file beside it and renamed, so `path` never holds a partial file;
    a key written twice (say a tensor "x.SCB" beside an LLM.int8 "x.weight") is a ValueError
    before anything is written.
    """
    if layout not in LAYOUTS:
        raise ValueError(f"unknown layout {layout!r}: qs.save writes {list(LAYOUTS)}; the "
                         f"compressed-tensors and modelopt layouts come from the tool "
                         f"(qsparse quantize --layout, docs/ecosystem.md)")
    if not isinstance(tensors, Mapping):
        raise ValueError(f"tensors must be a dict of name -> QTensor or array, got "
                         f"{type(tensors).__name__}")
    entries: List[Tuple[str, str, np.ndarray]] = []
    record: Dict[str, Any] = {}
    for name, t in tensors.items():
        if not isinstance(name, str) or not name:
            raise ValueError(f"tensor names must be non-empty strings, got {name!r}")
        if isinstance(t, (SparseQTensor, Compressed24)):
            if layout != "qsparse":
                raise ValueError(f"{name}: layout {layout!r} cannot hold a 2:4 compressed weight: "
                                 f"use layout='qsparse'")
            keys, record[name] = _sparse_keys(name, t)
            entries += keys
        elif isinstance(t, QTensor):
            if layout != "qsparse" and t.format not in _BNB_LAYOUT_FORMATS:
                raise ValueError(f"{name}: layout {layout!r} holds {list(_BNB_LAYOUT_FORMATS)} "
                                 f"weights (what bitsandbytes loads), not {t.format!r}: use "
                                 f"layout='qsparse'")
            if layout != "qsparse" and len(t.shape) != 2:
                raise ValueError(f"{name}: layout {layout!r} holds the 2-D weights of linear "
                                 f"layers (transformers replaces nn.Linear), got shape {t.shape}")
            entries += _quantized_keys(name, t)
            record[name] = _record(t)
        else:
            arr, bits = _arrays.read(t)
            if arr.dtype.byteorder == ">" or (arr.dtype.byteorder == "=" and
                                              np.little_endian is False):
                arr = arr.astype(arr.dtype.newbyteorder("<"))  # safetensors is little-endian
            # (np.ascontiguousarray would make a 0-D array 1-D)
            entries.append((name, _st_dtype(arr, bits),
                            arr if arr.flags.c_contiguous else arr.copy(order="C")))
    seen: Dict[str, int] = {}
    for key, _, _ in entries:
        if key in seen:
            raise ValueError(f"key {key!r} would be written twice (a tensor of that name beside a "
                             f"quantized weight whose companion it is)")
        seen[key] = 1
    meta = {str(k): str(v) for k, v in (metadata or {}).items()}
    meta.setdefault("format", "pt")
    if record:
        meta[_RECORD] = json.dumps(record, separators=(",", ":"))
        meta["qsparse.version"] = _lib.lib().qs_version_string().decode()
    _write_safetensors(os.fspath(path), entries, meta)


def bnb_quantization_config(tensors: Mapping[str, Any],
                            skip_modules: Optional[List[str]] = None,
                            compute_dtype: str = "float32") -> Dict[str, Any]:
    """The config.json "quantization_config" under which transformers loads the bitsandbytes
    weights of `tensors` (the dict given to save(..., layout="bnb")) as written: NF4 / FP4 with
    or without double quantization, or LLM.int8. Every QTensor must share one of those formats
    (and one double_quant setting); `skip_modules` names the linear modules left unquantized
    (transformers replaces every other nn.Linear). ValueError otherwise."""
    kinds = {(t.format, bool(t.double_quant)) for t in tensors.values() if isinstance(t, QTensor)}
    if len(kinds) != 1:
        raise ValueError(f"a bitsandbytes config needs one format for every quantized weight, "
                         f"got {sorted(kinds) or 'none'}")
    ((fmt, dq),) = kinds
    if fmt not in _BNB_LAYOUT_FORMATS:
        raise ValueError(f"bitsandbytes does not load {fmt!r} weights")
    four = fmt in _bnb.BNB_FORMATS
    return {"quant_method": "bitsandbytes", "load_in_4bit": four, "load_in_8bit": not four,
            "bnb_4bit_quant_type": fmt if four else "fp4", "bnb_4bit_use_double_quant": dq,
            "bnb_4bit_compute_dtype": _arrays.dtype_name(compute_dtype),
            "bnb_4bit_quant_storage": "uint8", "llm_int8_threshold": 6.0,
            "llm_int8_has_fp16_weight": False, "llm_int8_skip_modules": skip_modules}


# ---- reading -----------------------------------------------------------------------------------


class _Raw:
    """The tensors of a safetensors file as (dtype string, shape, bytes view), unparsed."""

    def __init__(self, path: str) -> None:
        # the tool's reading rules (_st_header): both refuse the same files
        self._map = _st_header.open_map(path)
        buf = memoryview(self._map)
        n, self.metadata, parsed = _st_header.parse(path, buf)
        data = buf[8 + n:]
        self.entries: Dict[str, Tuple[str, Tuple[int, ...], memoryview]] = {
            key: (st, shape, data[b:end]) for key, (st, shape, b, end) in parsed.items()}

    def bytes_of(self, key: str) -> np.ndarray:
        return np.frombuffer(self.entries[key][2], np.uint8)

    def array(self, key: str) -> np.ndarray:
        st, shape, view = self.entries[key]
        dt = np.dtype(_ST_NUMPY[st]) if st in _ST_NUMPY else _ml_dtype(st)
        return np.frombuffer(view, dt.newbyteorder("<")).reshape(shape)

    def plane(self, key: str, dtype: Any, shape: Optional[Tuple[int, ...]] = None) -> np.ndarray:
        """A key's bytes as `dtype` (the plane's element type; F8 bytes are uint8 codes)."""
        st, kshape, view = self.entries[key]
        a = np.frombuffer(view, np.dtype(dtype).newbyteorder("<"))
        return a.reshape(shape if shape is not None else kshape)


def _take(raw: _Raw, used: set, key: str) -> str:
    if key not in raw.entries:
        raise ValueError(f"the checkpoint has no {key!r}")
    used.add(key)
    return key


def _read_bnb4(raw: _Raw, used: set, name: str, fmt: str) -> QTensor:
    state: Dict[str, Any] = {}
    state["quant_state.bitsandbytes__" + fmt] = raw.bytes_of(
        _take(raw, used, name + ".quant_state.bitsandbytes__" + fmt))
    for item in ("absmax", "quant_map", "nested_absmax", "nested_quant_map"):
        if name + "." + item in raw.entries:
            k = _take(raw, used, name + "." + item)
            st = raw.entries[k][0]
            state[item] = raw.plane(k, np.uint8 if st == "U8" else np.float32).reshape(-1)
    return QTensor.from_bnb_state(raw.plane(_take(raw, used, name), np.uint8), state)


def _read_ct(raw: _Raw, used: set, name: str, fmt: str, shape: Tuple[int, ...],
             dtype: str) -> QTensor:
    """A weight of the tool's compressed-tensors layout (docs/layouts.md): keys on the module P
    of N = P.weight, some renamed (P.weight_packed, P.weight_global_scale)."""
    p = _module_prefix(name)
    rows, cols = _rows_cols(shape)
    if len(shape) != 2:
        raise ValueError(f"{name}: a compressed-tensors weight is 2-D, the record says {shape}")
    if fmt == "int8":
        # codes + 128 as bytes, four to an I32 word, the first in the low byte
        packed = raw.plane(_take(raw, used, p + ".weight_packed"), np.uint8, (-1,))
        if packed.size != rows * cols:
            raise ValueError(f"{name}: {p}.weight_packed holds {packed.size} codes, not "
                             f"{rows} x {cols}")
        if p + ".weight_shape" in raw.entries:
            got = tuple(int(v) for v in raw.array(_take(raw, used, p + ".weight_shape")))
            if got != shape:
                raise ValueError(f"{name}: {p}.weight_shape says {got}, the record {shape}")
        data = (packed ^ np.uint8(0x80)).view(np.int8).reshape(shape)
        scale = raw.plane(_take(raw, used, p + ".weight_scale"), np.float32)
        if scale.size == 1:
            return QTensor(fmt, shape, data, scale=scale.reshape(1), granularity="tensor",
                           dtype=dtype)
        if scale.size == rows:
            return QTensor(fmt, shape, data, scale=scale.reshape(rows), granularity="row",
                           dtype=dtype)
        g = scale.size // max(rows, 1)
        if g * rows != scale.size or cols % g:
            raise ValueError(f"{name}: {p}.weight_scale {list(scale.shape)} is not one scale "
                             f"per tensor, row or group of a {rows} x {cols} weight")
        return QTensor(fmt, shape, data, scale=scale.reshape(rows, g), granularity="group",
                       group_size=cols // g, dtype=dtype)
    if fmt in ("fp8_e4m3", "mxfp8"):
        data = raw.plane(_take(raw, used, p + ".weight"), np.uint8).reshape(shape)
    elif fmt in ("mxfp4", "nvfp4"):
        data = raw.plane(_take(raw, used, p + ".weight_packed"), np.uint8).reshape(rows, -1)
    else:
        raise ValueError(f"{name}: the compressed-tensors layout has no format {fmt!r}")
    if fmt == "fp8_e4m3":
        scale = raw.plane(_take(raw, used, p + ".weight_scale"), np.float32).reshape(1)
        return QTensor(fmt, shape, data, scale=scale, dtype=dtype)
    scale = raw.plane(_take(raw, used, p + ".weight_scale"), np.uint8).reshape(rows, -1)
    kw: Dict[str, Any] = {"dtype": dtype}
    if fmt == "nvfp4":
        # compressed-tensors divides by weight_global_scale: the library's per-tensor scale is
        # its reciprocal (amax / 2688), as the tool wrote it (1 / scale in float32)
        g = raw.plane(_take(raw, used, p + ".weight_global_scale"), np.float32).reshape(-1)[0]
        kw["global_scale"] = float(np.float32(1.0) / g)
    return QTensor(fmt, shape, data, scale=scale, **kw)


def _read_sparse(raw: _Raw, used: set, name: str, r: Mapping[str, Any]) -> Tensor:
    """A 2:4 weight stored compressed: a SparseQTensor, or a Compressed24 for format none."""
    try:
        rows, cols = (int(s) for s in r["shape"])
    except (KeyError, TypeError, ValueError):
        raise ValueError(f"{name}: a 2:4 weight's record needs its shape [rows, cols]") from None
    meta = raw.plane(_take(raw, used, name + _SP24_META), np.uint16).reshape(rows, -1)
    if r.get("format") == "none":
        st = raw.entries[_take(raw, used, name)][0]
        dt = {"F32": np.float32, "F16": np.float16, "BF16": np.uint16}.get(st)
        if dt is None:
            raise ValueError(f"{name}: 2:4 values of dtype {st} (expected F32, F16 or BF16)")
        values = raw.plane(name, dt).reshape(rows, cols // 2)
        return Compressed24(values, meta, (rows, cols),
                            {"F32": "float32", "F16": "float16", "BF16": "bfloat16"}[st])
    # the format's keys hold the kept values, a dense tensor of half the columns
    values = {k: v for k, v in r.items() if k != "sparsity"}
    values["shape"] = [rows, cols // 2]
    return SparseQTensor(_read_quantized(raw, used, name, values), meta, (rows, cols))


def _read_quantized(raw: _Raw, used: set, name: str, r: Mapping[str, Any]) -> Tensor:
    fmt = r.get("format")
    if not isinstance(fmt, str):
        raise ValueError(f"{name}: the qsparse.quantized record has no format")
    if r.get("sparsity") == "2:4" and name + _SP24_META in raw.entries:
        return _read_sparse(raw, used, name, r)
    if fmt == "none":  # pruned only, stored dense (a loader layout's --format none)
        return raw.array(_take(raw, used, name))
    if fmt in _bnb.BNB_FORMATS:
        return _read_bnb4(raw, used, name, fmt)
    try:
        shape = tuple(int(s) for s in r["shape"])
    except (KeyError, TypeError, ValueError):
        raise ValueError(f"{name}: the qsparse.quantized record has no valid shape") from None
    dtype = str(r.get("dtype", "float32"))
    rows, _ = _rows_cols(shape)
    kw: Dict[str, Any] = {"dtype": dtype}
    layout = r.get("layout", "qsparse")
    if layout == "compressed-tensors":
        return _read_ct(raw, used, name, fmt, shape, dtype)
    if layout not in ("qsparse", "bitsandbytes", "modelopt"):
        # modelopt keeps the tool's names (P.weight, P.weight_scale, P.weight_scale_2)
        raise ValueError(f"{name}: unknown layout {layout!r} in the qsparse.quantized record")
    if fmt == "llm_int8":
        p = _module_prefix(name)
        data = raw.plane(_take(raw, used, name), np.int8)
        scale = raw.plane(_take(raw, used, p + ".SCB"), np.float32).reshape(-1)
        if p + ".weight_format" in raw.entries:
            used.add(p + ".weight_format")
        return QTensor(fmt, shape, data.reshape(shape), scale=scale, **kw)
    if fmt in ("fp8_e4m3", "fp8_e5m2"):
        data = raw.plane(_take(raw, used, name), np.uint8).reshape(shape)
        scale = raw.plane(_take(raw, used, name + "_scale"), np.float32).reshape(1)
        return QTensor(fmt, shape, data, scale=scale, **kw)
    if fmt in ("mxfp4", "mxfp8", "nvfp4"):
        data = raw.plane(_take(raw, used, name), np.uint8)
        lead = shape[:-1] if len(shape) > 1 else ()
        data = data.reshape(shape if fmt == "mxfp8" else lead + (data.size // max(rows, 1),))
        scale = raw.plane(_take(raw, used, name + "_scale"), np.uint8)
        scale = scale.reshape(rows, -1) if rows else scale
        if fmt == "nvfp4":
            kw["global_scale"] = float(raw.plane(_take(raw, used, name + "_scale_2"),
                                                 np.float32).reshape(-1)[0])
        if r.get("scale_rounding") is not None:
            kw["scale_rounding"] = r["scale_rounding"]
        return QTensor(fmt, shape, data, scale=scale, **kw)
    if fmt == "int8":
        data = raw.plane(_take(raw, used, name), np.int8).reshape(shape)
        scale = raw.plane(_take(raw, used, name + "_scale"), np.float32)
        zp = None
        if name + "_zero_point" in raw.entries:
            zp = raw.plane(_take(raw, used, name + "_zero_point"), np.int8)
        granularity, group_size = r.get("granularity"), r.get("group_size")
        if granularity is None:
            granularity, group_size = _int8_granularity(scale.shape, shape)
        return QTensor(fmt, shape, data, scale=scale, zero_point=zp, granularity=granularity,
                       group_size=group_size, symmetric=zp is None, **kw)
    raise ValueError(f"{name}: unknown format {fmt!r} in the qsparse.quantized record")


def _int8_granularity(scale_shape: Tuple[int, ...],
                      shape: Tuple[int, ...]) -> Tuple[str, Optional[int]]:
    """INT8 granularity from the scale plane's shape, for a record without it (the tool writes
    format, shape and dtype only): [1] or [] per tensor, [rows] per row, [rows, g] per group of
    the power-of-two size (else the size cols / g rounded up) that makes g groups per row."""
    rows, cols = _rows_cols(shape)
    if len(scale_shape) == 2 and (scale_shape[1] > 1 or rows == 1 and cols > 1):
        g = scale_shape[1]
        sizes = [1 << k for k in range(31) if -(-cols // (1 << k)) == g]
        return "group", sizes[0] if sizes else -(-cols // g)
    count = 1
    for s in scale_shape:
        count *= s
    return ("tensor" if count == 1 and rows != 1 else "row"), None


def _recognise(raw: _Raw) -> Dict[str, Dict[str, Any]]:
    """Quantized weights of a file without a qsparse.quantized record, by their keys."""
    found: Dict[str, Dict[str, Any]] = {}
    for key, (st, shape, _) in raw.entries.items():
        for fmt in _bnb.BNB_FORMATS:
            tail = ".quant_state.bitsandbytes__" + fmt
            if key.endswith(tail) and key[:-len(tail)] in raw.entries:
                found[key[:-len(tail)]] = {"format": fmt}
        if st == "I8" and len(shape) == 2:
            scb = raw.entries.get(_module_prefix(key) + ".SCB")
            if scb is not None and scb[0] == "F32" and scb[1] == (shape[0],):
                found[key] = {"format": "llm_int8", "shape": list(shape)}
        if st in ("F8_E4M3", "F8_E5M2"):
            sc = raw.entries.get(key + "_scale")
            if sc is not None and sc[0] == "F32" and sc[1] in ((), (1,)):
                found[key] = {"format": "fp8_e4m3" if st == "F8_E4M3" else "fp8_e5m2",
                              "shape": list(shape)}
            elif sc is not None and sc[0] == "U8" and st == "F8_E4M3" and len(shape) == 2:
                found[key] = {"format": "mxfp8", "shape": list(shape)}
    return found


def _folder_files(folder: str) -> List[str]:
    """The safetensors files of a model folder: the shards its index names, else
    model.safetensors."""
    index = os.path.join(folder, "model.safetensors.index.json")
    if os.path.isfile(index):
        try:
            with open(index, encoding="utf-8") as f:
                weight_map = json.load(f)["weight_map"]
            shards = sorted(set(weight_map.values()))
        except (OSError, ValueError, KeyError, TypeError, AttributeError) as e:
            raise ValueError(f"{index}: not a safetensors index ({e})") from None
        for s in shards:
            if not isinstance(s, str) or os.path.basename(s) != s:
                raise ValueError(f"{index}: shard name {s!r} is not a file of the folder")
        return [os.path.join(folder, s) for s in shards]
    single = os.path.join(folder, "model.safetensors")
    if os.path.isfile(single):
        return [single]
    raise ValueError(f"{folder}: a model folder holds model.safetensors or "
                     f"model.safetensors.index.json; this one has neither")


def load(path: Union[str, os.PathLike]) -> Dict[str, Tensor]:
    """Read a safetensors file: {name: QTensor} for every quantized weight (by the
    qsparse.quantized record, else recognised by its keys: module docstring; a 2:4 weight stored
    compressed comes back as a SparseQTensor, or a Compressed24 without a format), and {name:
    numpy array} for every other key (read-only views of the memory-mapped file; BF16 and F8 need
    ml_dtypes). A file of the tool (any --layout: qsparse, bitsandbytes, compressed-tensors,
    modelopt; a weight that `--format none --sparsity 2:4` pruned is an array), of qs.save, or of
    bitsandbytes / transformers (a save_pretrained of a 4-bit or 8-bit model) reads back; a
    malformed file is a ValueError. A model folder (the tool's output folder, or any with
    model.safetensors or a model.safetensors.index.json) gives the tensors of all its shards.
    A compressed-tensors weight comes back under its weight's name (P.weight), not the file's
    P.weight_packed; an activation scale (modelopt's P.input_scale) is an array. Every file is
    checked by the tool's rules (qsparse._st_header) and a file the tool refuses is a ValueError
    here: a FIFO or device (refused without blocking), a malformed or over-deep header, duplicate
    keys, non-integer or over-8-dimensional shapes, offsets outside the data, overlapping
    tensors."""
    path = os.fspath(path)
    if os.path.isdir(path):
        out: Dict[str, Tensor] = {}
        for f in _folder_files(path):
            for k, v in _load_file(f).items():
                if k in out:
                    raise ValueError(f"{f}: tensor {k!r} is also in another shard")
                out[k] = v
        return out
    return _load_file(path)


def _load_file(path: str) -> Dict[str, Tensor]:
    raw = _Raw(path)
    record: Dict[str, Any] = {}
    if _RECORD in raw.metadata:
        try:
            record = json.loads(raw.metadata[_RECORD])
        except json.JSONDecodeError as e:
            raise ValueError(f"{path}: the {_RECORD} metadata is not JSON ({e})") from None
        if not isinstance(record, dict):
            raise ValueError(f"{path}: the {_RECORD} metadata is not a JSON object")
    for name, r in _recognise(raw).items():
        record.setdefault(name, r)
    out: Dict[str, Tensor] = {}
    used: set = set()
    for name, r in record.items():
        if isinstance(r, dict) and r.get("format") == "none":
            continue  # --format none --sparsity 2:4: the pruned weight, stored as it is
        if name not in raw.entries and not (isinstance(r, dict) and
                                             r.get("layout") == "compressed-tensors"):
            raise ValueError(f"{path}: the {_RECORD} record names {name!r}, which the file lacks")
        out[name] = _read_quantized(raw, used, name, r)
    for key in raw.entries:
        if key not in used:
            out[key] = raw.array(key)
    return out


__all__ = ["LAYOUTS", "bnb_quantization_config", "load", "save"]
