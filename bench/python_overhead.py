# SPDX-License-Identifier: MIT
"""What the Python binding adds to a call: qs.matmul, qs.dequantize and qs.quantize on small
tensors (where the binding's own work shows) against the same C function called through ctypes
with arguments prepared once, in the same run. Prints the time per call (minimum over rounds)
and the ratio binding / bare C; numpy's x @ w.T on the same f32 data is shown for scale.

    python3 bench/python_overhead.py [rounds [calls]]   (QSPARSE_LIB picks the library)

One thread (qs.set_num_threads(1)): the calls are too small to split.
"""

import ctypes
import importlib
import sys
import time

import numpy as np

import qsparse as qs
from qsparse import _lib, _quant

mm = importlib.import_module("qsparse.matmul")  # qs.matmul is the function of the same name


def best_us(fn, calls=2000, rounds=7):
    """Minimum over rounds of the mean time of `calls` calls, in microseconds."""
    fn()
    best = float("inf")
    for _ in range(rounds):
        t = time.perf_counter()
        for _ in range(calls):
            fn()
        best = min(best, (time.perf_counter() - t) / calls)
    return best * 1e6


# Each bare_* builds a call's arguments once and returns the call: it gives (status, the output
# array), and its closure keeps every array whose address the arguments hold alive.

def bare_matmul(x, w):
    """qs_matmul through ctypes with every argument built once (what qs.matmul rebuilds)."""
    wc, (n, k), keep = mm._weight_c(w)
    y = np.empty((x.shape[0], n), np.float32)
    params = mm.MatmulParams()
    args = (_lib.ctx(), ctypes.byref(params), _lib.ptr(x), _lib.QS_DTYPE_F32, x.shape[0], k,
            ctypes.byref(wc), n, None, _lib.ptr(y), y.nbytes)
    f = mm._fn("qs_matmul")
    return lambda: (f(*args), y, x, keep)[:2]


def bare_dequantize(q):
    p, qt, keep = _quant._c_tensor(q)
    out = np.empty(q.shape, np.float32)
    rows, cols = q.shape
    args = (_lib.ctx(), ctypes.byref(p), ctypes.byref(qt), rows, cols, _lib.ptr(out),
            _lib.QS_DTYPE_F32, out.nbytes)
    f = _lib.lib().qs_dequantize
    return lambda: (f(*args), out, keep)[:2]


def bare_quantize(w, fmt):
    """qs_quantize into the planes of a QTensor made once; the output is its code plane."""
    q = qs.quantize(w, fmt)
    p, qt, keep = _quant._c_tensor(q)
    rows, cols = w.shape
    args = (_lib.ctx(), ctypes.byref(p), _lib.ptr(w), _lib.QS_DTYPE_F32, rows, cols,
            ctypes.byref(qt))
    f = _lib.lib().qs_quantize
    return lambda: (f(*args), keep[0], w, keep)[:2]


def cases():
    """[(name, binding call, bare C call or None)] over one 8 x 64 weight and M = 1."""
    rng = np.random.default_rng(1)
    n, k = 8, 64
    w = rng.standard_normal((n, k)).astype(np.float32)
    x = rng.standard_normal((1, k)).astype(np.float32)
    out = [("numpy x @ w.T (f32)", lambda: x @ w.T, None)]
    for fmt in ("nf4", "int8", "nvfp4"):
        q = qs.quantize(w, fmt)
        out.append((f"qs.matmul, {fmt}", lambda q=q: qs.matmul(x, q), bare_matmul(x, q)))
    out.append(("qs.matmul, f32 weight", lambda: qs.matmul(x, w), bare_matmul(x, w)))
    q = qs.quantize(w, "nf4")
    out.append(("qs.dequantize, nf4", lambda: qs.dequantize(q), bare_dequantize(q)))
    out.append(("qs.quantize, nf4", lambda: qs.quantize(w, "nf4"), bare_quantize(w, "nf4")))
    return out


def main(rounds=7, calls=2000):
    qs.set_num_threads(1)  # before cases(): it renews the thread's context
    table = cases()
    print(f"python_overhead: 8 x 64 weight, M = 1, 1 thread, minimum over {rounds} rounds "
          f"of {calls} calls; numpy {np.__version__}, Python {sys.version.split()[0]}")
    print(f"{'call':28s} {'us/call':>9s} {'bare C':>9s} {'binding/C':>10s}")
    for name, fn, bare in table:
        t = best_us(fn, calls, rounds)
        if bare is None:
            print(f"{name:28s} {t:9.2f} {'-':>9s} {'-':>10s}")
            continue
        b = best_us(bare, calls, rounds)
        print(f"{name:28s} {t:9.2f} {b:9.2f} {t / b:10.2f}")


if __name__ == "__main__":
    main(*(int(a) for a in sys.argv[1:3]))
