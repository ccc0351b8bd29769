# SPDX-License-Identifier: MIT
"""The safetensors header as the `qsparse` tool reads it (tools/safetensors.c), for qs.load.

The tool and qs.load must refuse the same files, so this module applies the tool's rules, each
as a ValueError naming the file: a regular file only, opened non-blocking (a FIFO is refused at
once instead of waiting for a writer); a header length inside the file and under 100 MB, the
header starting with '{'; JSON as jansson reads it with JSON_REJECT_DUPLICATES (a duplicate key
at any depth, NaN / Infinity, an integer outside int64, a string holding U+0000 or an unpaired
surrogate are errors, and nesting too deep for Python's parser is a ValueError, not a
RecursionError); "__metadata__" an object of strings; every entry an object with a known dtype,
at most 8 dimensions of integers >= 0 (not 2.0, not true, not "3") whose byte count fits int64,
and integer data_offsets [begin, end] inside the data section spanning exactly that count; and
no two non-empty tensors sharing a byte.
"""

from __future__ import annotations

import json
import mmap
import os
import stat
import struct
from typing import Any, Dict, List, Tuple

MAX_HEADER = 100 * 1000 * 1000  # QS_ST_MAX_HEADER
MAX_DIMS = 8  # QS_ST_MAX_DIMS
_INT64 = (-(1 << 63), (1 << 63) - 1)

# The tool's dtype table (tools/safetensors.c): name -> bytes per element.
SIZES = {"BOOL": 1, "U8": 1, "I8": 1, "F8_E4M3": 1, "F8_E5M2": 1, "F8_E8M0": 1, "I16": 2,
         "U16": 2, "F16": 2, "BF16": 2, "I32": 4, "U32": 4, "F32": 4, "I64": 8, "U64": 8,
         "F64": 8, "C64": 8}

Entry = Tuple[str, Tuple[int, ...], int, int]  # dtype, shape, begin, end (in the data section)


def _kind(mode: int) -> str:
    if stat.S_ISFIFO(mode):
        return "a FIFO"
    if stat.S_ISDIR(mode):
        return "a directory"
    if stat.S_ISCHR(mode) or stat.S_ISBLK(mode):
        return "a device"
    return "a socket or other special file"


def open_map(path: str) -> mmap.mmap:
    """The file mapped read-only; ValueError for anything but a regular file of >= 8 bytes."""
    flags = os.O_RDONLY | getattr(os, "O_NONBLOCK", 0) | getattr(os, "O_NOCTTY", 0) | \
        getattr(os, "O_CLOEXEC", 0)
    fd = os.open(path, flags)
    try:
        st = os.fstat(fd)
        if not stat.S_ISREG(st.st_mode):
            raise ValueError(f"{path}: not a regular file ({_kind(st.st_mode)})")
        if st.st_size < 8:
            raise ValueError(f"{path}: not a safetensors file (only {st.st_size} bytes)")
        return mmap.mmap(fd, 0, access=mmap.ACCESS_READ)
    finally:
        os.close(fd)


def _no_duplicates(pairs: List[Tuple[str, Any]]) -> Dict[str, Any]:
    out: Dict[str, Any] = {}
    for k, v in pairs:
        if k in out:
            raise ValueError(f"duplicate key {k!r}")
        out[k] = v
    return out


def _no_constant(name: str) -> Any:
    raise ValueError(f"{name} is not JSON")


def _bad_string(s: str) -> bool:
    return "\0" in s or any(0xD800 <= ord(c) <= 0xDFFF for c in s)


def _check_values(root: Any) -> None:
    """Strings and integers as jansson accepts them, over the whole document (no recursion)."""
    todo = [root]
    while todo:
        v = todo.pop()
        if isinstance(v, dict):
            for k, x in v.items():
                if _bad_string(k):
                    raise ValueError(f"key {k!r} holds U+0000 or an unpaired surrogate")
                todo.append(x)
        elif isinstance(v, list):
            todo.extend(v)
        elif isinstance(v, str):
            if _bad_string(v):
                raise ValueError(f"string {v!r} holds U+0000 or an unpaired surrogate")
        elif isinstance(v, int) and not isinstance(v, bool):
            if not _INT64[0] <= v <= _INT64[1]:
                raise ValueError(f"integer {v} is outside int64")


def _is_int(v: Any) -> bool:
    return isinstance(v, int) and not isinstance(v, bool)


def _entry(path: str, key: str, e: Any, data_size: int) -> Entry:
    if not isinstance(e, dict):
        raise ValueError(f"{path}: tensor {key!r}: entry is not a JSON object")
    st, shape, offs = e.get("dtype"), e.get("shape"), e.get("data_offsets")
    if not isinstance(st, str) or not isinstance(shape, list) or not isinstance(offs, list):
        raise ValueError(f"{path}: tensor {key!r}: needs string dtype, array shape and array "
                         f"data_offsets")
    if st not in SIZES:
        raise ValueError(f"{path}: tensor {key!r}: unknown dtype {st[:20]!r}")
    if len(shape) > MAX_DIMS:
        raise ValueError(f"{path}: tensor {key!r}: {len(shape)} dimensions (at most {MAX_DIMS})")
    numel = 1
    for s in shape:
        if not _is_int(s) or s < 0:
            raise ValueError(f"{path}: tensor {key!r}: shape entries must be integers >= 0")
        numel *= s
        if numel > _INT64[1]:
            raise ValueError(f"{path}: tensor {key!r}: element count overflows")
    nbytes = numel * SIZES[st]
    if nbytes > _INT64[1]:
        raise ValueError(f"{path}: tensor {key!r}: byte count overflows")
    if len(offs) != 2 or not _is_int(offs[0]) or not _is_int(offs[1]):
        raise ValueError(f"{path}: tensor {key!r}: data_offsets must be [begin, end]")
    b, end = offs
    if b < 0 or end < 0 or b > end or end > data_size:
        raise ValueError(f"{path}: tensor {key!r} ({st} {shape}, bytes {b}..{end}) does not fit "
                         f"the data section of {data_size} bytes")
    if end - b != nbytes:
        raise ValueError(f"{path}: tensor {key!r} ({st} {shape}, bytes {b}..{end}) does not fit: "
                         f"its data_offsets span {end - b} bytes, dtype and shape need {nbytes}")
    return st, tuple(shape), b, end


def parse(path: str, buf: memoryview) -> Tuple[int, Dict[str, str], Dict[str, Entry]]:
    """(header length, metadata, {name: entry}) of the mapped file, or a ValueError."""
    (n,) = struct.unpack("<Q", buf[:8])
    if n > MAX_HEADER:
        raise ValueError(f"{path}: header of {n} bytes is larger than the {MAX_HEADER}-byte "
                         f"limit")
    if n > len(buf) - 8:
        raise ValueError(f"{path}: header of {n} bytes does not fit in the file")
    if n < 2 or buf[8] != ord("{"):
        raise ValueError(f"{path}: not a safetensors file (the header must be a JSON object)")
    try:
        header = json.loads(bytes(buf[8:8 + n]).decode("utf-8"),
                            object_pairs_hook=_no_duplicates, parse_constant=_no_constant)
        _check_values(header)
    except RecursionError:
        raise ValueError(f"{path}: the header is not JSON (nested too deeply)") from None
    except (UnicodeDecodeError, ValueError) as e:  # json.JSONDecodeError is a ValueError
        raise ValueError(f"{path}: the header is not JSON ({e})") from None
    if not isinstance(header, dict):
        raise ValueError(f"{path}: the header is not a JSON object")
    metadata = header.pop("__metadata__", {})
    if not isinstance(metadata, dict):
        raise ValueError(f"{path}: __metadata__ is not an object")
    for k, v in metadata.items():
        if not isinstance(v, str):
            raise ValueError(f"{path}: __metadata__ value of {k!r} is not a string")
    data_size = len(buf) - 8 - n
    entries = {key: _entry(path, key, e, data_size) for key, e in header.items()}
    # no two non-empty tensors share a byte: in order of their start, each begins at or after
    # the furthest end so far (not only its neighbour's)
    spans = sorted((b, end, key) for key, (_, _, b, end) in entries.items() if end > b)
    far = None
    for b, end, key in spans:
        if far is not None and b < far[1]:
            raise ValueError(f"{path}: tensors {far[2]!r} and {key!r} overlap in the data "
                             f"section")
        if far is None or end > far[1]:
            far = (b, end, key)
    return n, metadata, entries
