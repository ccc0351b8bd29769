# SPDX-License-Identifier: MIT
"""The CUDA plugin's compiled code, kernel by kernel, for one architecture: 128-bit global loads
and stores, other global loads and stores, local-memory traffic, registers, stack, shared memory
and the theoretical occupancy those allow with the kernel's block size. Exits 1 when a bulk
kernel (the ones that move a tensor's bytes: quantize, dequantize, reductions, matmul) has no
128-bit global load or uses local memory (but those KNOWN_LOCAL lists), or when a dequantize
kernel (the one that writes a tensor) has no 128-bit global store. Quantize kernels write a
quarter to an eighth of what they read (codes, a scale per block) and the matmul kernels one
float per output, so only their loads are held to 16 bytes.

Usage: python3 .ci/cuda_sass.py CUOBJDUMP PLUGIN [sm_90] [--quiet]   (--quiet: no table)
cuobjdump needs nvdisasm beside it or on PATH (PyPI: nvidia-cuda-cuobjdump, nvidia-cuda-nvdisasm).
"""
import os
import re
import subprocess
import sys

# Kernels whose bytes scale with the tensor: each must read 16 bytes per load instruction.
BULK = ("bq_kernel", "deq_kernel", "ewq_kernel", "mv_kernel", "mm_kernel", "reduce_kernel")
# ... and those that also write a tensor's bytes: each must write 16 bytes per store.
BULK_STORE = ("deq_kernel",)
# Local-memory traffic nvcc 13 leaves in bulk kernels on the architectures other than sm_86 /
# 89 / 90 (arrays indexed in loops it does not unroll there: the GEMV's x tile and codes, a GEMM
# tile index; 8 to 144 bytes of stack). Listed, not failed, until those kernels are reshaped
# (issue 31); any other kernel with local traffic fails.
_MV = tuple(f"mv_kernel<{k}>" for k in range(1, 11))
KNOWN_LOCAL = {
    "sm_80": ("mm_kernel",),
    "sm_100": ("mm_kernel", "deq_kernel<3, 0, 1>", "deq_kernel<4, 0, 1>", "deq_kernel<4, 0, 2>")
    + _MV,
    "sm_120": ("bq_kernel<4, 0>", "deq_kernel<0, 0, 0>", "deq_kernel<0, 1, 0>") + _MV,
}
# Threads per block (src/cuda: QS_CU_MM_THREADS for the GEMM, 256 for every other kernel).
THREADS = {"mm_kernel": 128}

# Per-SM limits of sm_80 ... sm_120 (the smallest where they differ: sm_86/89/120 have 1536
# threads and 100 KB of shared memory per SM, sm_80/90/100 2048 and 164/228 KB).
LIMITS = {
    "sm_80": (2048, 65536, 167936, 32), "sm_86": (1536, 65536, 102400, 16),
    "sm_89": (1536, 65536, 102400, 24), "sm_90": (2048, 65536, 233472, 32),
    "sm_100": (2048, 65536, 233472, 32), "sm_120": (1536, 65536, 102400, 32),
}


def run(cmd):
    env = dict(os.environ)
    env["PATH"] = os.path.dirname(cmd[0]) + os.pathsep + env.get("PATH", "")
    return subprocess.run(cmd, capture_output=True, text=True, env=env, check=True).stdout


def demangle(names):
    out = subprocess.run(["c++filt"], input="\n".join(names), capture_output=True, text=True)
    return dict(zip(names, out.stdout.splitlines())) if out.returncode == 0 else {}


def occupancy(arch, regs, shared, threads=256):
    max_threads, regfile, smem, max_blocks = LIMITS.get(arch, LIMITS["sm_90"])
    warps = threads // 32
    regs_warp = -(-max(regs, 1) * 32 // 256) * 256
    by_regs = regfile // (regs_warp * warps)
    by_smem = smem // (shared + 1024)
    blocks = min(by_regs, by_smem, max_threads // threads, max_blocks)
    return blocks * warps * 32 / max_threads


def main():
    args = [a for a in sys.argv[1:] if a != "--quiet"]
    quiet = len(args) < len(sys.argv) - 1
    cuobjdump, plugin = args[0], args[1]
    arch = args[2] if len(args) > 2 else "sm_90"
    sass = run([cuobjdump, "-sass", "-arch", arch, plugin])
    res = run([cuobjdump, "-res-usage", "-arch", arch, plugin])
    usage = {}
    for m in re.finditer(r"Function (\S+):\s*\n\s*REG:(\d+) STACK:(\d+) SHARED:(\d+) LOCAL:(\d+)",
                         res):
        usage[m.group(1)] = tuple(int(m.group(i)) for i in range(2, 6))
    funcs = {}
    for part in re.split(r"\n\s*Function : ", sass)[1:]:
        name, body = part.split("\n", 1)
        funcs[name.strip()] = body
    names = demangle(list(funcs))
    rows, bad, known = [], [], []
    for mangled, body in sorted(funcs.items(), key=lambda kv: names.get(kv[0], kv[0])):
        name = names.get(mangled, mangled)
        short = re.sub(r"_INTERNAL_\w+::", "", name)
        short = re.sub(r"\(.*\)$", "", short)
        short = re.sub(r"^void ", "", short)
        ld128 = len(re.findall(r"\bLDG\.E\.128\b", body))
        ldg = len(re.findall(r"\bLDG\b", body))
        st128 = len(re.findall(r"\bSTG\.E\.128\b", body))
        stg = len(re.findall(r"\bSTG\b", body))
        local = len(re.findall(r"\b(?:LDL|STL)\b", body))
        regs, stack, shared, _ = usage.get(mangled, (0, 0, 0, 0))
        bulk = short.startswith(BULK)
        threads = next((t for k, t in THREADS.items() if short.startswith(k)), 256)
        rows.append((short, ld128, ldg, st128, stg, local, regs, stack, shared, threads,
                     occupancy(arch, regs, shared, threads), bulk))
        if bulk and ld128 == 0:
            bad.append(f"{short}: no 128-bit global load")
        if short.startswith(BULK_STORE) and st128 == 0:
            bad.append(f"{short}: no 128-bit global store")
        if bulk and local and short in KNOWN_LOCAL.get(arch, ()):
            known.append(f"{short}: {local} local-memory loads/stores (known)")
        elif bulk and local:
            bad.append(f"{short}: {local} local-memory loads/stores")
    nbulk = sum(r[11] for r in rows)
    print(f"{arch}: {len(rows)} kernels, {nbulk} bulk (marked *): "
          f"{'ok' if not bad else f'{len(bad)} problems'}"
          f"{f', {len(known)} with known local memory' if known else ''}")
    if quiet:
        rows = []
    if rows:
        print("(LDG / STG: every global load / store instruction, LDG128 / STG128: those of 16"
              " bytes; occup: theoretical occupancy)")
        print(f"{'kernel':58} {'LDG128':>6} {'LDG':>4} {'STG128':>6} {'STG':>4} {'LDL/STL':>7} "
              f"{'regs':>4} {'stack':>5} {'smem':>5} {'thr':>4} {'occup':>5}")
    for r in rows:
        print(f"{('*' if r[11] else ' ') + r[0]:58.58} {r[1]:6d} {r[2]:4d} {r[3]:6d} {r[4]:4d} "
              f"{r[5]:7d} {r[6]:4d} {r[7]:5d} {r[8]:5d} {r[9]:4d} {r[10]:5.0%}")
    for k in known:
        print("cuda_sass:", k)
    for b in bad:
        print("cuda_sass:", b, file=sys.stderr)
    return 1 if bad else 0


if __name__ == "__main__":
    sys.exit(main())
