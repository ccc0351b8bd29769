# SPDX-License-Identifier: MIT
"""INT8 W8A8 GEMM against torch._int_mm (oneDNN) on the same data, one thread, one process.

The weight W (N x K, float32) is quantized per row to INT8 (symmetric, qsparse's INT8 "row"
granularity) and x (M x K, float32) per token to int8 codes (what qs.matmul's int8 activations
do on the fly). Timed, each as the minimum over rounds of the calling thread's CPU time
(time.thread_time: on a shared, loaded machine the wall clock also counts other processes):

- torch._int_mm(xq, wq.t()): the bare int32 product, W as stored (N x K, row-major) — the
  "same data" case; torch._int_mm(xq, wqt) with W transposed to a contiguous K x N copy made
  once beforehand, in case oneDNN prefers that layout;
- torch, the whole W8A8 step: per-token quantization of x (absmax, scale, round, clamp),
  _int_mm, and the f32 rescale by both scales (what a W8A8 linear layer does);
- qs.matmul(x, wq, activations="int8"): qsparse's whole W8A8 step (per-token quantization,
  integer products, the f32 scales) through the Python binding;
- torch.matmul on the float32 data (MKL sgemm) for scale.

Ratios are qsparse's time over torch's (< 1: qsparse faster) by thread CPU time.

    python3 bench/int_mm_torch.py [M [N [K [rounds]]]]   (default 512 4096 4096 5)

QSPARSE_LIB picks the library (e.g. build/libqsparse.so of a build tree).
"""

import sys
import time

import numpy as np
import torch

import qsparse as qs


def best(fn, rounds):
    """(minimum thread CPU seconds, minimum wall seconds) over rounds, after one untimed call."""
    fn()
    tc, tw = float("inf"), float("inf")
    for _ in range(rounds):
        c0, w0 = time.thread_time(), time.perf_counter()
        fn()
        tc = min(tc, time.thread_time() - c0)
        tw = min(tw, time.perf_counter() - w0)
    return tc, tw


def main():
    M = int(sys.argv[1]) if len(sys.argv) > 1 else 512
    N = int(sys.argv[2]) if len(sys.argv) > 2 else 4096
    K = int(sys.argv[3]) if len(sys.argv) > 3 else 4096
    rounds = int(sys.argv[4]) if len(sys.argv) > 4 else 5
    torch.set_num_threads(1)
    qs.set_num_threads(1)
    rng = np.random.default_rng(1)
    w = (rng.standard_normal((N, K)) * 0.05).astype(np.float32)
    x = rng.standard_normal((M, K)).astype(np.float32)

    qw = qs.quantize(w, "int8", granularity="row", symmetric=True)
    wq = torch.from_numpy(np.ascontiguousarray(qw.data).view(np.int8).reshape(N, K))
    wscale = torch.from_numpy(np.ascontiguousarray(qw.scale, dtype=np.float32).reshape(N))
    wqt = wq.t().contiguous()
    xt = torch.from_numpy(x)
    amax = xt.abs().amax(dim=1, keepdim=True)
    xq = torch.clamp(torch.round(xt * (127.0 / amax)), -127, 127).to(torch.int8)

    def torch_w8a8():
        a = xt.abs().amax(dim=1, keepdim=True)
        q = torch.clamp(torch.round(xt * (127.0 / a)), -127, 127).to(torch.int8)
        acc = torch._int_mm(q, wq.t())
        return acc.to(torch.float32) * (a / 127.0) * wscale

    wf = torch.from_numpy(w)
    rows = [
        ("torch._int_mm, W as stored (N x K)", lambda: torch._int_mm(xq, wq.t())),
        ("torch._int_mm, W as K x N copy", lambda: torch._int_mm(xq, wqt)),
        ("torch W8A8 step (quantize x, _int_mm, rescale)", torch_w8a8),
        ("qs.matmul W8A8 (activations='int8')", lambda: qs.matmul(x, qw, activations="int8")),
        ("torch.matmul f32 (MKL sgemm)", lambda: torch.matmul(xt, wf.t())),
    ]
    print(f"M = {M}, N = {N}, K = {K}, 1 thread, minimum of {rounds} rounds; torch "
          f"{torch.__version__}, qsparse {qs.__version__} ({qs.backend()})")
    times = {}
    for name, fn in rows:
        tc, tw = best(fn, rounds)
        times[name] = tc
        print(f"{name:50s} {tc * 1e3:9.2f} ms thread CPU {tw * 1e3:9.2f} ms wall "
              f"{2.0 * M * N * K / tc * 1e-9:8.1f} GOP/s")
    q = times["qs.matmul W8A8 (activations='int8')"]
    bare = min(times["torch._int_mm, W as stored (N x K)"], times["torch._int_mm, W as K x N copy"])
    print(f"qsparse W8A8 speed over torch._int_mm (faster layout, bare int32 product): "
          f"{bare / q:.2f}x; over torch's whole W8A8 step: "
          f"{times['torch W8A8 step (quantize x, _int_mm, rescale)'] / q:.2f}x")


if __name__ == "__main__":
    main()
