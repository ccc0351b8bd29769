# SPDX-License-Identifier: MIT
"""The CUDA plugin on a machine without a usable GPU (CI): the core must run with the plugin
absent, present, and replaced by a corrupt file (truncated, or not an ELF file at all), never
crash and never print, and say why "cuda" is not available, naming the cause and the file.

Usage: QSPARSE_LIB=.../libqsparse.so python3 tests/cuda/no_gpu_check.py PLUGIN_OR_EMPTY SCRATCH
Each case runs in a child process (a crash there is a failure, not a crash of this script) with
QS_PLUGIN_PATH set; the child's stdout must be exactly its one report line and its stderr empty.
"""
import os
import subprocess
import sys

HERE = os.path.dirname(os.path.abspath(__file__))
PY = os.path.join(HERE, "..", "..", "python")

CHILD = r"""
import sys
sys.path.insert(0, sys.argv[1])
import numpy as np
import qsparse as qs
w = np.linspace(-1, 1, 256, dtype=np.float32).reshape(4, 64)
qs.set_backend("cpu")
cpu = qs.quantize(w, "nf4")
qs.set_backend("auto")
auto = qs.quantize(w, "nf4")
same = np.array_equal(cpu.data, auto.data) and np.array_equal(cpu.absmax, auto.absmax)
try:
    qs.set_backend("cuda")
    raised = ""
except qs.QsparseError as e:
    raised = str(e)
finally:
    qs.set_backend("auto")
print("REPORT", qs.backends(), same, repr(qs.backend_message("cuda")), repr(raised))
"""


def run_case(name, plugin_path, want_cause):
    env = dict(os.environ, QS_PLUGIN_PATH=plugin_path)
    p = subprocess.run([sys.executable, "-c", CHILD, PY], env=env, capture_output=True,
                       text=True, timeout=300)
    lines = p.stdout.splitlines()
    problems = []
    if p.returncode != 0:
        problems.append(f"exit status {p.returncode}")
    if p.stderr:
        problems.append(f"stderr not empty: {p.stderr[:500]!r}")
    if len(lines) != 1 or not lines[0].startswith("REPORT "):
        problems.append(f"stdout is not exactly the report line: {p.stdout[:500]!r}")
    else:
        line = lines[0]
        if "['cpu']" not in line:
            problems.append("cuda listed as available without a GPU")
        if " True " not in line:
            problems.append("AUTO quantized differently from the CPU")
        if plugin_path not in line or want_cause not in line:
            problems.append(f"message does not name {plugin_path!r} and {want_cause!r}")
    print(f"{name}: {'ok' if not problems else 'FAILED: ' + '; '.join(problems)}")
    if p.stdout:
        print("   ", p.stdout.strip()[:400])
    return not problems


def main():
    plugin, scratch = sys.argv[1], sys.argv[2]
    os.makedirs(scratch, exist_ok=True)
    ok = run_case("plugin absent", os.path.join(scratch, "libqsparse-cuda.so"), "no such file")
    if plugin:
        ok &= run_case("plugin present, no GPU", plugin, "cuda backend not available")
        data = open(plugin, "rb").read()
        cut = os.path.join(scratch, "truncated", "libqsparse-cuda.so")
        os.makedirs(os.path.dirname(cut), exist_ok=True)
        with open(cut, "wb") as f:
            f.write(data[: len(data) // 2])
        ok &= run_case("plugin truncated", cut, "cannot be loaded")
        junk = os.path.join(scratch, "junk", "libqsparse-cuda.so")
        os.makedirs(os.path.dirname(junk), exist_ok=True)
        with open(junk, "wb") as f:
            f.write(b"\x7fELF" + bytes(range(256)) * 64)
        ok &= run_case("plugin corrupt", junk, "cannot be loaded")
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
