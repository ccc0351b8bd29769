# SPDX-License-Identifier: MIT
"""qsparse: Python binding of libqsparse (NF4/FP4/INT8/FP8/MXFP4/MXFP8/NVFP4 quantization, 2:4
sparsity) through ctypes and numpy.

The binding is thin: every number is computed by the C library; Python checks arguments,
allocates the buffers the C size queries ask for and turns error codes into exceptions.

    import qsparse as qs, numpy as np
    q = qs.quantize(np.ones(64, np.float32), "nf4")
    qs.dequantize(q)
"""

from . import _lib
from ._lib import QsparseError
from ._quant import QTensor, codebook, convert, dequantize, formats, quantize

# Other modules land with their own issues; the binding works without them.
try:
    from .observer import Observer  # noqa: F401
except ImportError:
    pass
try:
    from .sparse import compress, decompress, prune  # noqa: F401
except ImportError:
    pass
try:
    from .matmul import matmul  # noqa: F401
except ImportError:
    pass

# Backend names are the ISA tiers of the C library's tier table (_lib.isa_tiers): each allows a
# mask of ISA bits (the context clamps it to the CPU) and is available when the CPU has the bits
# it requires.
def _tier_masks():
    return {t["name"]: t["allowed"] for t in _lib.isa_tiers()}


def __getattr__(name):
    if name == "__version__":
        return _lib.lib().qs_version_string().decode()
    raise AttributeError(f"module 'qsparse' has no attribute {name!r}")


def backend():
    """Name of the backend the calling thread's context runs ("scalar", "avx2", "avx512", ...)."""
    return _lib.lib().qs_ctx_backend_name(_lib.ctx()).decode()


def backends():
    """Backends this process can run, lowest first ("scalar" always): what the CPU has, as
    clamped by QS_FORCE_ISA (each candidate is checked by making a context for it)."""
    import ctypes

    lib = _lib.lib()
    out = []
    for tier in _lib.isa_tiers():
        if not tier["available"]:
            continue
        name = tier["name"]
        params = _lib.CtxParams()
        lib.qs_ctx_params_init(ctypes.byref(params))
        params.isa_mask = tier["allowed"]
        handle = ctypes.c_void_p()
        if lib.qs_ctx_create(ctypes.byref(params), ctypes.byref(handle)) != _lib.QS_OK:
            continue
        try:
            if lib.qs_ctx_backend_name(handle).decode() == name:
                out.append(name)
        finally:
            lib.qs_ctx_destroy(handle)
    return out


def set_backend(name):
    """Run on `name` ("auto", "cpu", or one of backends()); QsparseError if it is unavailable."""
    if not isinstance(name, str):
        raise ValueError(f"backend name must be a string, got {type(name).__name__}")
    if name in ("auto", "cpu"):
        _lib.update_settings(isa_mask=_lib.QS_ISA_ALL,
                             backend=_lib.QS_BACKEND_AUTO if name == "auto" else
                             _lib.QS_BACKEND_CPU)
        return
    masks = _tier_masks()
    if name not in masks:
        raise ValueError(f"unknown backend {name!r}: expected 'auto', 'cpu' or one of "
                         f"{list(masks)}")
    old = _lib.settings()
    _lib.update_settings(isa_mask=masks[name], backend=_lib.QS_BACKEND_CPU)
    got = backend()
    if got != name:
        _lib.update_settings(isa_mask=old["isa_mask"], backend=old["backend"])
        raise QsparseError(_lib.QS_ERR_BACKEND,
                           f"backend {name!r} is not available here (this machine, or "
                           f"QS_FORCE_ISA, gives {got!r}; available: {backends()})")


def set_num_threads(n):
    """Threads per call: n >= 1, or 0 for OpenMP's default."""
    if isinstance(n, bool) or not isinstance(n, int) or not 0 <= n < 2**31:
        raise ValueError(f"number of threads must be an int >= 0, got {n!r}")
    _lib.update_settings(num_threads=n)


def get_num_threads():
    """The thread setting of set_num_threads (0 = OpenMP's default)."""
    return _lib.settings()["num_threads"]


def kernels():
    """{slot: implementation} of this thread's context: {"nf4_quant": "qs_nf4_quant__avx2", ...}."""
    import ctypes

    lib = _lib.lib()
    c = _lib.ctx()
    out = {}
    for i in range(lib.qs_ctx_kernel_count(c)):
        slot, impl = ctypes.c_char_p(), ctypes.c_char_p()
        _lib.check(lib.qs_ctx_kernel_info(c, i, ctypes.byref(slot), ctypes.byref(impl)))
        out[slot.value.decode()] = impl.value.decode()
    return out


__all__ = ["QTensor", "QsparseError", "backend", "backends", "codebook", "convert", "dequantize",
           "formats", "get_num_threads", "kernels", "quantize", "set_backend", "set_num_threads"]
for _name in ("Observer", "prune", "compress", "decompress", "matmul"):
    if _name in globals():
        __all__.append(_name)
