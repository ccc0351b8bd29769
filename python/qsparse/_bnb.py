# SPDX-License-Identifier: MIT
"""bitsandbytes' QuantState of a 4-bit QTensor, both ways (QTensor.to_bnb_state and
QTensor.from_bnb_state).

bitsandbytes describes an NF4 / FP4 weight by the packed codes (its ``Params4bit`` data) and a
``QuantState``: absmax, quant_map (the 16-entry codebook), blocksize, dtype and shape, plus with
double quantization the nested absmax, the nested quant_map (its 8-bit dynamic map), the nested
block size 256 and the offset. ``QuantState.as_dict(packed=True)`` stores the non-tensor items as
one uint8 tensor of JSON text under ``quant_state.bitsandbytes__nf4`` (or ``__fp4``): that is the
checkpoint layout (docs/formats.md, checkpoint keys), and ``QuantState.from_dict`` reads either
form. The codes and scales are ours bit for bit, so nothing is recomputed here.
"""

from __future__ import annotations

import json
from typing import TYPE_CHECKING, Any, Dict, Mapping

import numpy as np

from . import _arrays

if TYPE_CHECKING:  # pragma: no cover
    from ._quant import QTensor

BNB_FORMATS = ("nf4", "fp4")
NESTED_BLOCKSIZE = 256


def quant_state_json(q: "QTensor") -> Dict[str, Any]:
    """The non-tensor items of bitsandbytes' QuantState.as_dict, in its key order (json.dumps of
    this dict is the quant_state key's text, byte for byte as bitsandbytes writes it)."""
    d: Dict[str, Any] = {"quant_type": q.format, "blocksize": int(q.blocksize),
                         "dtype": q.dtype, "shape": [int(s) for s in q.shape]}
    if q.double_quant:
        d.update({"nested_blocksize": NESTED_BLOCKSIZE, "nested_dtype": "float32",
                  "nested_offset": float(q.nested_offset)})
    return d


def state_arrays(q: "QTensor") -> Dict[str, np.ndarray]:
    """The tensor items of the QuantState as numpy arrays (absmax, quant_map and the nested
    pair), with the bitsandbytes names."""
    from ._quant import codebook

    if q.format not in BNB_FORMATS:
        raise ValueError(f"a bitsandbytes QuantState holds nf4 or fp4 weights, not {q.format!r}")
    if q.absmax is None:
        raise ValueError(f"the {q.format} tensor has no absmax plane")
    out = {"absmax": np.ascontiguousarray(q.absmax), "quant_map": codebook(q.format)}
    if q.double_quant:
        if q.nested_absmax is None or q.nested_offset is None:
            raise ValueError("a double-quantized tensor needs nested_absmax and nested_offset")
        out["nested_absmax"] = np.ascontiguousarray(q.nested_absmax)
        out["nested_quant_map"] = codebook("dyn8")
    return out


def _torch() -> Any:
    try:
        import torch
    except ImportError as e:
        raise ImportError("QTensor.to_bnb_state builds torch tensors (what bitsandbytes reads): "
                          "pip install torch") from e
    return torch


def to_bnb_state(q: "QTensor", packed: bool = False) -> Dict[str, Any]:
    torch = _torch()
    arrays = state_arrays(q)
    items = quant_state_json(q)
    tensors = {k: torch.from_numpy(v.copy()) for k, v in arrays.items()}
    if packed:
        text = json.dumps(items).encode("utf-8")
        tensors["quant_state.bitsandbytes__" + q.format] = torch.tensor(list(text),
                                                                        dtype=torch.uint8)
        return tensors
    items["shape"] = tuple(items["shape"])
    d: Dict[str, Any] = {"quant_type": items["quant_type"], "absmax": tensors["absmax"],
                         "blocksize": items["blocksize"], "quant_map": tensors["quant_map"],
                         "dtype": items["dtype"], "shape": items["shape"]}
    if q.double_quant:
        d.update({"nested_absmax": tensors["nested_absmax"],
                  "nested_blocksize": items["nested_blocksize"],
                  "nested_quant_map": tensors["nested_quant_map"],
                  "nested_dtype": items["nested_dtype"],
                  "nested_offset": items["nested_offset"]})
    return d


def _state_dict(state: Any) -> Dict[str, Any]:
    """A QuantState, or its as_dict (packed or not, keys with or without a prefix), as one flat
    dict of the bitsandbytes item names."""
    if hasattr(state, "as_dict") and not isinstance(state, Mapping):
        state = state.as_dict(packed=False)
    if not isinstance(state, Mapping):
        raise ValueError(f"expected a QuantState or its as_dict(), got {type(state).__name__}")
    flat: Dict[str, Any] = {}
    for key, value in state.items():
        leaf = str(key).split(".")[-1]
        if leaf.startswith("bitsandbytes__"):  # the packed JSON items
            raw = np.ascontiguousarray(_arrays.as_array(value)).view(np.uint8).tobytes()
            try:
                flat.update(json.loads(raw.decode("utf-8")))
            except (UnicodeDecodeError, json.JSONDecodeError) as e:
                raise ValueError(f"{key}: not the JSON of a quant_state ({e})") from None
            flat.setdefault("quant_type", leaf[len("bitsandbytes__"):])
        else:
            flat[leaf] = value
    return flat


def from_bnb_state(data: Any, state: Any) -> "QTensor":
    from ._quant import QTensor, codebook

    s = _state_dict(state)
    fmt = s.get("quant_type")
    if fmt not in BNB_FORMATS:
        raise ValueError(f"quant_type must be 'nf4' or 'fp4', got {fmt!r}")
    for need in ("absmax", "blocksize", "shape"):
        if s.get(need) is None:
            raise ValueError(f"the quant_state has no {need!r}")
    quant_map = s.get("quant_map")
    if quant_map is not None and not np.array_equal(
            np.asarray(_arrays.as_array(quant_map), np.float32).reshape(-1), codebook(fmt)):
        raise ValueError(f"the quant_state's quant_map is not the {fmt} codebook")
    codes = np.ascontiguousarray(_arrays.as_array(data)).reshape(-1)
    if codes.dtype != np.uint8:
        codes = codes.view(np.uint8)
    nested = s.get("nested_absmax")
    kw: Dict[str, Any] = {}
    if nested is not None:
        if int(s.get("nested_blocksize", NESTED_BLOCKSIZE)) != NESTED_BLOCKSIZE:
            raise ValueError(f"nested_blocksize {s.get('nested_blocksize')} is not supported "
                             f"(bitsandbytes uses {NESTED_BLOCKSIZE})")
        nmap = s.get("nested_quant_map")
        if nmap is not None and not np.array_equal(
                np.asarray(_arrays.as_array(nmap), np.float32).reshape(-1), codebook("dyn8")):
            raise ValueError("the quant_state's nested_quant_map is not bitsandbytes' dynamic map")
        kw.update(nested_absmax=np.ascontiguousarray(_arrays.as_array(nested)).reshape(-1),
                  nested_offset=float(_arrays.as_array(s["nested_offset"]))
                  if not isinstance(s["nested_offset"], (int, float)) else s["nested_offset"],
                  double_quant=True)
    dtype = str(s.get("dtype", "float32"))
    return QTensor(fmt, tuple(int(d) for d in s["shape"]), codes,
                   absmax=np.ascontiguousarray(_arrays.as_array(s["absmax"])).reshape(-1),
                   blocksize=int(s["blocksize"]), dtype=_arrays.dtype_name(dtype), **kw)
