# SPDX-License-Identifier: MIT
"""qsparse: Python binding of libqsparse (NF4/FP4/INT8/FP8/MXFP4/MXFP8/NVFP4 quantization, 2:4
sparsity) through ctypes and numpy.

The binding is thin: every number is computed by the C library; Python checks arguments,
allocates the buffers the C size queries ask for and turns error codes into exceptions.

    import qsparse as qs, numpy as np
    q = qs.quantize(np.ones(64, np.float32), "nf4")   # numpy, torch tensors, buffers
    qs.dequantize(q)
    qs.save("m.safetensors", {"l.weight": q})           # the tool's checkpoint keys
    qs.load("m.safetensors")["l.weight"]                # a QTensor again

docs/ecosystem.md says what loads where (transformers + bitsandbytes, compressed-tensors).
"""

from __future__ import annotations

import ctypes
from typing import Any, Dict, List, Optional

from . import _lib, checkpoint  # noqa: F401  (qs.checkpoint.bnb_quantization_config)
from ._lib import QsparseError
from ._quant import QTensor, codebook, convert, dequantize, formats, quantize
from .checkpoint import load, save
from .observer import Observer
from .sparse import compress, decompress, prune
from .matmul import PackedWeight, int8_vectorwise_quant, matmul, matmul_info, pack
from .profile import Profile, doctor, profile
from .recommend import recommend
from . import cuda  # the device API: arrays already on the GPU (qsparse.cuda)
from .gptq import Hessian, gptq, sparsegpt


# ISA tier names come from the C library's tier table (_lib.isa_tiers): each allows a mask of ISA
# bits (the context clamps it to the CPU) and is available when the CPU has the bits it requires.
def _tier_masks() -> Dict[str, int]:
    return {t["name"]: t["allowed"] for t in _lib.isa_tiers()}


def __getattr__(name: str) -> str:
    if name == "__version__":
        return _lib.lib().qs_version_string().decode()
    raise AttributeError(f"module 'qsparse' has no attribute {name!r}")


def backend() -> str:
    """The backend the calling thread's context runs on: "cpu" or "cuda"."""
    lib = _lib.lib()
    return lib.qs_backend_name(lib.qs_ctx_backend(_lib.ctx())).decode()


def _backend_names() -> List[str]:
    """Every backend the library knows now: the built-in ones ("auto", "cpu", "cuda"), then the
    backends of plugins loaded under other names (codes run on without a gap)."""
    lib = _lib.lib()
    names = []
    while True:
        name = lib.qs_backend_name(len(names))
        if name is None:
            return names
        names.append(name.decode())


def backends() -> List[str]:
    """Backends that can run in this process: "cpu" always, "cuda" when its plugin loads and
    finds a device (backend_message("cuda") says why not), and the backend of any plugin loaded
    with load_backend() that can run here."""
    lib = _lib.lib()
    return [name for code, name in enumerate(_backend_names())
            if code != _lib.QS_BACKEND_AUTO and lib.qs_backend_available(code)]


def _unknown_backend(name: object) -> ValueError:
    return ValueError(f"unknown backend {name!r}: expected one of {_backend_names()} "
                      "(a plugin's backend is known once load_backend() loaded it)")


def backend_message(name: str) -> str:
    """Why backend `name` is not available ("" when it is or was not tried)."""
    lib = _lib.lib()
    code = lib.qs_backend_from_name(name.encode()) if isinstance(name, str) else -1
    if code < 0:
        raise _unknown_backend(name)
    return (lib.qs_backend_message(code) or b"").decode("utf-8", "replace")


def load_backend(path: str) -> None:
    """Load the backend plugin in file `path` (an absolute path) and register its backend under
    the name it gives (a built-in one such as "cuda", or its own), for set_backend(). Loading
    the same backend again replaces it for contexts made afterwards.
    QsparseError (QS_ERR_BACKEND) with the library's reason (no such file, not loadable, no init
    symbol, another backend ABI version, a bad name) if the plugin is refused."""
    if not isinstance(path, str) or not path:
        raise ValueError(f"path must be a non-empty string, got {path!r}")
    lib = _lib.lib()
    status = lib.qs_backend_load(path.encode())
    if status != _lib.QS_OK:
        # a file that fails before naming its backend leaves the reason with the built-in
        # plugin backends (qs_backend_load in include/qsparse.h)
        raise QsparseError(status, (lib.qs_backend_message(_lib.QS_BACKEND_CUDA) or b"")
                           .decode("utf-8", "replace") or _lib.status_str(status))


def set_backend(name: str) -> None:
    """Run on backend `name`: "auto" (the CPU for host arrays), "cpu", "cuda" (host arrays
    through the GPU; qsparse.cuda takes arrays already on it) or a loaded plugin's backend.
    QsparseError (QS_ERR_BACKEND, with the reason) if it cannot run here. A call the backend does
    not implement (matmul, 2:4 compression or act_sumsq on "cuda") then raises QsparseError
    (QS_ERR_UNSUPPORTED, naming backend and operation); it never runs on the CPU instead."""
    if not isinstance(name, str):
        raise ValueError(f"backend name must be a string, got {type(name).__name__}")
    lib = _lib.lib()
    code = lib.qs_backend_from_name(name.encode())
    if code < 0:
        raise _unknown_backend(name)
    if not lib.qs_backend_available(code):
        raise QsparseError(_lib.QS_ERR_BACKEND,
                           f"backend {name!r} is not available: {backend_message(name)}")
    _lib.update_settings(backend=code)


def isa() -> str:
    """Name of the ISA tier the calling thread's context runs ("scalar", "avx2", "avx512", ...)."""
    return _lib.lib().qs_ctx_isa_name(_lib.ctx()).decode()


def isas() -> List[str]:
    """ISA tiers this process can run, lowest first ("scalar" always): what the CPU has, as
    clamped by QS_FORCE_ISA (each candidate is checked by making a context for it)."""
    lib = _lib.lib()
    out = []
    for tier in _lib.isa_tiers():
        if not tier["available"]:
            continue
        name = tier["name"]
        params = _lib.CtxParams()
        lib.qs_ctx_params_init(ctypes.byref(params))
        params.isa_mask = tier["allowed"]
        params.backend = _lib.QS_BACKEND_CPU
        handle = ctypes.c_void_p()
        if lib.qs_ctx_create(ctypes.byref(params), ctypes.byref(handle)) != _lib.QS_OK:
            continue
        try:
            if lib.qs_ctx_isa_name(handle).decode() == name:
                out.append(name)
        finally:
            lib.qs_ctx_destroy(handle)
    return out


def set_isa(name: str) -> None:
    """Run the CPU kernels of ISA tier `name` ("auto" for the best, or one of isas());
    QsparseError if it is unavailable."""
    if not isinstance(name, str):
        raise ValueError(f"ISA name must be a string, got {type(name).__name__}")
    if name == "auto":
        _lib.update_settings(isa_mask=_lib.QS_ISA_ALL)
        return
    masks = _tier_masks()
    if name not in masks:
        raise ValueError(f"unknown ISA {name!r}: expected 'auto' or one of {list(masks)}")
    old = _lib.settings()
    _lib.update_settings(isa_mask=masks[name])
    got = isa()
    if got != name:
        _lib.update_settings(isa_mask=old["isa_mask"])
        raise QsparseError(_lib.QS_ERR_BACKEND,
                           f"ISA {name!r} is not available here (this machine, or "
                           f"QS_FORCE_ISA, gives {got!r}; available: {isas()})")


def set_num_threads(n: int) -> None:
    """Threads per call: n >= 1, or 0 for OpenMP's default."""
    if isinstance(n, bool) or not isinstance(n, int) or not 0 <= n < 2**31:
        raise ValueError(f"number of threads must be an int >= 0, got {n!r}")
    _lib.update_settings(num_threads=n)


def get_num_threads() -> int:
    """The thread setting of set_num_threads (0 = OpenMP's default)."""
    return _lib.settings()["num_threads"]


def set_parallel(grain: Optional[int] = None, backoff: Optional[bool] = None) -> None:
    """How many of set_num_threads' threads a call uses (the library's threading policy):
    one per `grain` bytes the call reads and writes (default 1 MiB, so small calls stay on the
    calling thread; 0: every call of two chunks or more uses every thread), and with `backoff`
    (default True) only the calling thread for a while after a call that its threads made slower
    than one thread, as happens on a machine busy with other work. None leaves a setting as it
    is. Results are identical whatever the policy decides."""
    changes: Dict[str, Any] = {}
    if grain is not None:
        if isinstance(grain, bool) or not isinstance(grain, int) or grain < 0:
            raise ValueError(f"grain must be an int >= 0 (bytes per thread), got {grain!r}")
        changes["parallel_grain"] = grain
    if backoff is not None:
        if not isinstance(backoff, bool):
            raise ValueError(f"backoff must be True or False, got {backoff!r}")
        changes["parallel_backoff"] = int(backoff)
    if changes:
        _lib.update_settings(**changes)


def get_parallel() -> Dict[str, Any]:
    """The calling thread's policy: {"grain": bytes per thread, "backoff": bool}."""
    lib, handle, value = _lib.lib(), _lib.ctx(), ctypes.c_int64()
    out: Dict[str, Any] = {}
    for name, key in (("grain", _lib.QS_PARAM_PARALLEL_GRAIN),
                      ("backoff", _lib.QS_PARAM_PARALLEL_BACKOFF)):
        _lib.check(lib.qs_ctx_get(handle, key, ctypes.byref(value)))
        out[name] = value.value if name == "grain" else bool(value.value)
    return out


def kernels() -> Dict[str, str]:
    """{slot: implementation} of this thread's context: {"nf4_quant": "qs_nf4_quant__avx2", ...}."""
    lib = _lib.lib()
    c = _lib.ctx()
    out = {}
    for i in range(lib.qs_ctx_kernel_count(c)):
        slot, impl = ctypes.c_char_p(), ctypes.c_char_p()
        _lib.check(lib.qs_ctx_kernel_info(c, i, ctypes.byref(slot), ctypes.byref(impl)))
        out[slot.value.decode()] = impl.value.decode()
    return out


__all__ = ["Hessian", "Observer", "PackedWeight", "Profile", "QTensor", "QsparseError", "backend",
           "backend_message",
           "backends", "codebook", "compress", "convert", "decompress", "dequantize", "doctor",
           "formats", "get_num_threads", "get_parallel", "gptq", "int8_vectorwise_quant", "isa",
           "isas", "kernels", "load", "load_backend", "matmul", "matmul_info", "pack", "profile",
           "prune", "quantize", "recommend", "save", "set_backend", "sparsegpt", "set_isa",
           "set_num_threads", "set_parallel"]
