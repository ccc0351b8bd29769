# SPDX-License-Identifier: MIT
"""Measured format choice (include/qsparse/recommend.h).

    rows = qs.recommend(w, x=None, max_error=0.1, objective="speed")
    rows[0]   # {"label": "nf4 b64", "bits_per_weight": 4.5, "error": ..., "gemv_speedup": ...,
              #  "kernel": "qs_mm_dot_nf4__avx512", "slow": False, "reason": "", "rank": 1, ...}

Every candidate is made with the library (qs_quantize, 2:4 magnitude pruning) and measured on
this machine: its output error on x (or its weight error without x), its size, and its GEMV /
GEMM speed against dense float32 (OpenBLAS where the library has it) in a short probe of the real
kernels. Candidates within ``max_error`` come first, ranked by GEMV speed (``objective="speed"``)
or by bits per weight (``"size"``); the rest follow by error. Candidates the hardware runs on a
slow path carry ``slow=True`` and the reason.
"""

from __future__ import annotations

import ctypes
from typing import Any, Dict, List, Optional

import numpy as np

from . import _arrays, _lib
from ._capi import (QS_RECOMMEND_MAX_CANDIDATES, QS_RECOMMEND_SIZE, QS_RECOMMEND_SPEED,
                    Candidate, RecommendParams)

_OBJECTIVES = {"speed": QS_RECOMMEND_SPEED, "size": QS_RECOMMEND_SIZE}


def _f32_2d(name: str, a: Any) -> np.ndarray:
    """a as a C-contiguous float32 (rows, K) array: any input qs.quantize takes (float16 and
    bfloat16 widened by the library, float64 rounded)."""
    arr, code, dtype = _lib.as_float_array(a)
    if arr.ndim != 2 or arr.shape[0] < 1 or arr.shape[1] < 1:
        raise ValueError(f"{name} must be a non-empty 2-D array, got shape {arr.shape}")
    if code != _lib.QS_DTYPE_F32:
        from ._quant import convert

        arr = convert(arr, "float32", src_dtype=dtype)
    return arr


def recommend(w: Any, x: Optional[Any] = None, *, max_error: float = 0.1,
              objective: str = "speed", sparse24: bool = True, gemm_rows: int = 64,
              probe_seconds: float = 0.02) -> List[Dict[str, Any]]:
    """Rank every compressed form of weight w (N x K) by measurement on this machine; x
    (tokens x K) are activations to measure the output error on. Returns one dict per candidate,
    best first."""
    wf = _f32_2d("w", w)
    xf = None if x is None else _f32_2d("x", x)
    if xf is not None and xf.shape[1] != wf.shape[1]:
        raise ValueError(f"x has {xf.shape[1]} columns, w has {wf.shape[1]}")
    if objective not in _OBJECTIVES:
        raise ValueError(f"objective must be 'speed' or 'size', got {objective!r}")
    lib = _lib.lib()
    p = RecommendParams()
    lib.qs_recommend_params_init(ctypes.byref(p))
    p.objective = _OBJECTIVES[objective]
    p.max_error = _arrays.option_float("max_error", max_error)
    p.sparse24 = 1 if sparse24 else 0
    p.gemm_rows = _arrays.option_int("gemm_rows", gemm_rows)
    p.probe_seconds = _arrays.option_float("probe_seconds", probe_seconds)
    out = (Candidate * QS_RECOMMEND_MAX_CANDIDATES)()
    count = ctypes.c_int64(0)
    status = lib.qs_recommend(_lib.ctx(), ctypes.byref(p), _lib.ptr(wf), wf.shape[0],
                              wf.shape[1], None if xf is None else _lib.ptr(xf),
                              0 if xf is None else xf.shape[0], out, len(out),
                              ctypes.byref(count))
    if status == _lib.QS_ERR_INVALID_ARG:
        raise ValueError(_lib.last_error())
    _lib.check(status)
    rows = []
    for c in out[:count.value]:
        rows.append({
            "rank": c.rank, "label": c.label.decode(),
            "format": lib.qs_format_name(c.format).decode() if c.format else None,
            "sparse24": bool(c.sparse24), "int8_activations": bool(c.int8_activations),
            "bits_per_weight": c.bits_per_weight, "bytes": c.bytes, "error": c.error,
            "within_error": bool(c.within_error), "gemv_speedup": c.gemv_speedup,
            "gemv_speedup_mt": c.gemv_speedup_mt, "gemm_speedup": c.gemm_speedup,
            "kernel": (c.kernel or b"").decode(), "slow": bool(c.slow),
            "reason": c.reason.decode(),
        })
    return rows


def format_table(rows: List[Dict[str, Any]]) -> str:
    """The candidates as the text table `qsparse recommend` prints."""
    head = (f"{'#':>2} {'candidate':<22} {'bits/w':>6} {'error':>9} {'MB':>8} {'GEMV x':>7} "
            f"{'GEMV xT':>7} {'GEMM x':>7}  kernel")
    lines = [head]
    for r in rows:
        mark = "" if r["within_error"] else "  (over max_error)"
        slow = f"  slow: {r['reason']}" if r["slow"] else ""
        lines.append(f"{r['rank']:>2} {r['label']:<22} {r['bits_per_weight']:>6.3f} "
                     f"{r['error']:>9.3e} {r['bytes'] / 1e6:>8.2f} {r['gemv_speedup']:>7.2f} "
                     f"{r['gemv_speedup_mt']:>7.2f} {r['gemm_speedup']:>7.2f}  {r['kernel']}"
                     f"{mark}{slow}")
    return "\n".join(lines)
