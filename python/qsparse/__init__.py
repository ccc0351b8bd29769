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
from typing import Dict, List

from . import _lib, checkpoint  # noqa: F401  (qs.checkpoint.bnb_quantization_config)
from ._lib import QsparseError
from ._quant import QTensor, codebook, convert, dequantize, formats, quantize
from .checkpoint import load, save
from .observer import Observer
from .sparse import compress, decompress, prune
from .matmul import int8_vectorwise_quant, matmul, matmul_info
from .profile import Profile, doctor, profile
from .recommend import recommend
from . import cuda  # the device API: arrays already on the GPU (qsparse.cuda)
from .gptq import Hessian, gptq, hadamard, sparsegpt


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


def backends() -> List[str]:
    """Backends that can run in this process: "cpu" always, "cuda" when its plugin loads and
    finds a device (backend_message("cuda") says why not)."""
    lib = _lib.lib()
    return [name for name in ("cpu", "cuda")
            if lib.qs_backend_available(lib.qs_backend_from_name(name.encode()))]


def backend_message(name: str) -> str:
    """Why backend `name` is not available ("" when it is or was not tried)."""
    lib = _lib.lib()
    code = lib.qs_backend_from_name(name.encode()) if isinstance(name, str) else -1
    if code < 0:
        raise ValueError(f"unknown backend {name!r}: expected 'auto', 'cpu' or 'cuda'")
    return (lib.qs_backend_message(code) or b"").decode("utf-8", "replace")


def set_backend(name: str) -> None:
    """Run on backend `name`: "auto" (the CPU for host arrays), "cpu" or "cuda" (host arrays
    through the GPU; qsparse.cuda takes arrays already on it).
    QsparseError (QS_ERR_BACKEND, with the reason) if it cannot run here."""
    if not isinstance(name, str):
        raise ValueError(f"backend name must be a string, got {type(name).__name__}")
    lib = _lib.lib()
    code = lib.qs_backend_from_name(name.encode())
    if code < 0:
        raise ValueError(f"unknown backend {name!r}: expected 'auto', 'cpu' or 'cuda'")
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


__all__ = ["Hessian", "Observer", "Profile", "QTensor", "QsparseError", "backend", "backend_message",
           "backends", "codebook", "compress", "convert", "decompress", "dequantize", "doctor",
           "formats", "get_num_threads", "gptq", "hadamard", "int8_vectorwise_quant", "isa", "isas",
           "kernels",
           "load", "matmul", "matmul_info", "profile", "prune", "quantize", "recommend", "save",
           "set_backend", "sparsegpt", "set_isa", "set_num_threads"]
