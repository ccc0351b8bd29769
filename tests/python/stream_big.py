# SPDX-License-Identifier: MIT
"""The large-model run of `qsparse quantize`: a synthetic Llama-shaped model larger than the
heap it is allowed, quantized to NF4 (bitsandbytes layout), with the tool's heap peak (--stats)
checked against twice its largest tensor.

    python3 tests/python/stream_big.py [--dir /tmp] [--keep] [--layers 20 --hidden 4096 ...]

The defaults write an 8.6 GB bfloat16 model in 4 shards of about 2.1 GB (20 layers, hidden 4096,
intermediate 11008, vocabulary 32000: Llama-7B's shapes with 20 of its 32 layers), quantize it
with `/usr/bin/time -v` around the tool (peak RSS; `--stats-json` for the heap), print the
numbers and delete the files unless --keep. It needs about 11.5 GB of free disk under --dir and
takes minutes; CI runs the same check on a 230 MB model (test_stream.py). Exit status 1 when the
heap peak is not under twice the largest tensor.
"""

import argparse
import json
import os
import re
import shutil
import subprocess
import sys
import tempfile
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from synth_model import write_model  # noqa: E402


def tool():
    t = os.environ.get("QSPARSE_TOOL") or shutil.which("qsparse")
    if not t:
        sys.exit("set QSPARSE_TOOL to the qsparse tool (build/tools/qsparse)")
    return t


def run(dirpath, layers, hidden, intermediate, vocab, shards, dtype, fmt="nf4", threads=0,
        keep=False, out=sys.stdout):
    """Write, quantize and measure; returns the numbers as a dict."""
    work = tempfile.mkdtemp(prefix="qsparse-big-", dir=dirpath)
    try:
        src, dst = os.path.join(work, "model"), os.path.join(work, "out")
        t0 = time.monotonic()
        info = write_model(src, layers, hidden, intermediate, vocab, shards, dtype)
        t_write = time.monotonic() - t0
        print(f"model: {info['bytes'] / 1e9:.2f} GB of {dtype} in {shards} shards "
              f"(largest tensor {info['largest'] / 1e6:.1f} MB, largest linear weight "
              f"{info['largest_linear'] / 1e6:.1f} MB), written in {t_write:.1f} s", file=out)
        stats = os.path.join(work, "stats.json")
        cmd = [tool(), "quantize", src, "-o", dst, "--format", fmt, "--layout", "bitsandbytes",
               "--quiet", "--stats", "--stats-json", stats]
        if threads:
            cmd += ["--threads", str(threads)]
        timer = ["/usr/bin/time", "-v"] if os.path.exists("/usr/bin/time") else []
        t0 = time.monotonic()
        p = subprocess.run(timer + cmd, capture_output=True, text=True)
        wall = time.monotonic() - t0
        if p.returncode != 0:
            raise RuntimeError(f"{' '.join(cmd)} failed:\n{p.stdout}\n{p.stderr}")
        s = json.load(open(stats))
        m = re.search(r"Maximum resident set size \(kbytes\): (\d+)", p.stderr)
        rss = int(m.group(1)) * 1024 if m else s["peak_rss_bytes"]
        out_bytes = sum(os.path.getsize(os.path.join(dst, f)) for f in os.listdir(dst)
                        if f.endswith(".safetensors"))
        r = {"model_bytes": info["bytes"], "output_bytes": out_bytes,
             "largest_tensor_bytes": s["largest_tensor_bytes"],
             "largest_tensor": s["largest_tensor"],
             "largest_quantized_bytes": s["largest_quantized_bytes"],
             "heap_peak_bytes": s["heap_peak_bytes"],
             "heap_peak_over_largest": s["heap_peak_over_largest"],
             "heap_peak_over_largest_quantized":
                 s["heap_peak_bytes"] / s["largest_quantized_bytes"],
             "max_rss_bytes": rss, "wall_seconds": wall,
             "tensors_quantized": s["tensors_quantized"]}
        print(f"quantized to {fmt}: {out_bytes / 1e9:.2f} GB, {r['tensors_quantized']} "
              f"tensors in {wall:.1f} s ({info['bytes'] / 1e6 / wall:.0f} MB/s read)", file=out)
        print(f"heap peak {r['heap_peak_bytes'] / 1e6:.1f} MB = "
              f"{r['heap_peak_over_largest']:.3f}x the largest tensor ({r['largest_tensor']}, "
              f"{r['largest_tensor_bytes'] / 1e6:.1f} MB) = "
              f"{r['heap_peak_over_largest_quantized']:.3f}x the largest quantized one "
              f"({r['largest_quantized_bytes'] / 1e6:.1f} MB); max RSS {rss / 1e6:.1f} MB",
              file=out)
        if keep:
            print(f"kept in {work}", file=out)
        return r
    finally:
        if not keep:
            shutil.rmtree(work, ignore_errors=True)


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--dir", default=tempfile.gettempdir())
    ap.add_argument("--layers", type=int, default=20)
    ap.add_argument("--hidden", type=int, default=4096)
    ap.add_argument("--intermediate", type=int, default=11008)
    ap.add_argument("--vocab", type=int, default=32000)
    ap.add_argument("--shards", type=int, default=4)
    ap.add_argument("--dtype", choices=["bf16", "f16", "f32"], default="bf16")
    ap.add_argument("--format", default="nf4")
    ap.add_argument("--threads", type=int, default=0)
    ap.add_argument("--keep", action="store_true")
    a = ap.parse_args()
    r = run(a.dir, a.layers, a.hidden, a.intermediate, a.vocab, a.shards, a.dtype, a.format,
            a.threads, a.keep)
    print(json.dumps(r, indent=2))
    if not r["heap_peak_bytes"] < 2 * r["largest_tensor_bytes"]:
        print("FAIL: the heap peak is not under twice the largest tensor")
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
