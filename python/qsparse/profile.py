# SPDX-License-Identifier: MIT
"""Profiling counters of the C library (include/qsparse/profile.h) and the ``doctor`` report.

    with qs.profile() as p:
        qs.quantize(w, "nf4")
    print(p)              # a table: op, kernel, format, calls, bytes, time, GB/s
    p.entries             # the rows as dicts
    p.json()              # the library's own JSON export

Counters are per context, off by default, and count successful calls only. ``qs.profile()``
switches them on for the calling thread's context for the duration of the ``with`` block.
Changing the thread count, ISA or backend inside the block makes a new context and ends the
counting.
"""

from __future__ import annotations

import contextlib
import ctypes
import json as _json
from typing import Any, Dict, Iterator, List

from . import _lib
from ._capi import (QS_PARAM_PROFILE, QS_RUNTIME_BLAS, QS_RUNTIME_COMPILER, QS_RUNTIME_OPENMP,
                    ProfileEntry)

_FIELDS = ("op", "kernel", "isa", "format", "threads", "calls", "elements", "bytes_in",
           "bytes_out", "ns")


class Profile:
    """The counters read at the end of a ``qs.profile()`` block."""

    def __init__(self) -> None:
        self.entries: List[Dict[str, Any]] = []
        self.dropped: int = 0
        self._json: str = ""

    def _collect(self, handle: ctypes.c_void_p) -> None:
        lib = _lib.lib()
        rows = []
        for i in range(lib.qs_profile_count(handle)):
            e = ProfileEntry()
            _lib.check(lib.qs_profile_get(handle, i, ctypes.byref(e)))
            row = {f: getattr(e, f) for f in _FIELDS}
            for f in ("op", "kernel", "isa"):
                row[f] = row[f].decode() if row[f] else ""
            row["format"] = (lib.qs_format_name(e.format).decode() if e.format else None)
            rows.append(row)
        self.entries = rows
        self.dropped = int(lib.qs_profile_dropped(handle))
        need = ctypes.c_int64(0)
        lib.qs_profile_json(handle, None, 0, ctypes.byref(need))
        buf = ctypes.create_string_buffer(need.value + 1)
        _lib.check(lib.qs_profile_json(handle, buf, need.value + 1, ctypes.byref(need)))
        self._json = buf.value.decode()

    def json(self) -> str:
        """The table as the C library exports it (qs_profile_json)."""
        return self._json

    def __str__(self) -> str:
        head = f"{'op':<11} {'kernel':<34} {'format':<9} {'thr':>3} {'calls':>7} " \
               f"{'MB in':>9} {'MB out':>9} {'ms':>9} {'GB/s':>7}"
        lines = [head]
        for r in self.entries:
            ms = r["ns"] / 1e6
            gbs = (r["bytes_in"] + r["bytes_out"]) / r["ns"] if r["ns"] else 0.0
            lines.append(f"{r['op']:<11} {r['kernel']:<34} {r['format'] or '-':<9} "
                         f"{r['threads']:>3} {r['calls']:>7} {r['bytes_in'] / 1e6:>9.2f} "
                         f"{r['bytes_out'] / 1e6:>9.2f} {ms:>9.3f} {gbs:>7.2f}")
        if self.dropped:
            lines.append(f"({self.dropped} calls not counted: the table was full)")
        return "\n".join(lines)


@contextlib.contextmanager
def profile() -> Iterator[Profile]:
    """Count every library call of this thread inside the block; yields a Profile that is
    filled when the block ends (also when it raises)."""
    lib = _lib.lib()
    handle = _lib.ctx()
    _lib.check(lib.qs_ctx_set(handle, QS_PARAM_PROFILE, 1))
    _lib.check(lib.qs_profile_reset(handle))
    result = Profile()
    try:
        yield result
    finally:
        if _lib.ctx().value == handle.value:
            result._collect(handle)
        lib.qs_ctx_set(handle, QS_PARAM_PROFILE, 0)


def doctor() -> Dict[str, Any]:
    """What the library sees here, the first thing a bug report should contain: version, the
    CPU's ISA features and the tier in use, OpenMP and BLAS, the backends and why one cannot run.
    The same facts as ``qsparse doctor --json``."""
    lib = _lib.lib()
    handle = _lib.ctx()
    cpu = lib.qs_cpu_isa()
    features = []
    for bit in range(32):
        if cpu & (1 << bit):
            name = lib.qs_isa_name(1 << bit)
            features.append(name.decode() if name else f"bit{bit}")
    backends = {}
    code = _lib.QS_BACKEND_CPU  # then "cuda" and any loaded plugin's backend, codes without a gap
    while lib.qs_backend_name(code) is not None:
        avail = bool(lib.qs_backend_available(code))  # may load a plugin: before the message
        msg = (lib.qs_backend_message(code) or b"").decode("utf-8", "replace")
        backends[lib.qs_backend_name(code).decode()] = {"available": avail, "message": msg}
        code += 1
    return {
        "version": lib.qs_version_string().decode(),
        "api_version": lib.qs_api_version(),
        "library": _lib.library_path(),
        "cpu_features": features,
        "isa": lib.qs_ctx_isa_name(handle).decode(),
        "tiers": [t["name"] for t in _lib.isa_tiers() if t["available"]],
        "openmp": lib.qs_runtime_info(handle, QS_RUNTIME_OPENMP).decode(),
        "blas": lib.qs_runtime_info(handle, QS_RUNTIME_BLAS).decode(),
        "compiler": lib.qs_runtime_info(handle, QS_RUNTIME_COMPILER).decode(),
        "backends": backends,
    }


def doctor_json() -> str:
    """doctor() as JSON text."""
    return _json.dumps(doctor(), indent=2)
