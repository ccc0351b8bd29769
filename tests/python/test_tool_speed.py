# SPDX-License-Identifier: MIT
"""The tool is fast by default: --quiet does not decode the weights for an error table nobody
reads, the thread count is chosen per tensor (one thread for small tensors, no more than the
load average leaves idle for large ones), and --help and `qsparse doctor` say what to do on a
shared machine. The tool's own --profile table shows which operations ran with how many
threads (no timing is asserted)."""

import json
import os

import numpy as np
import pytest

CORES = len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else os.cpu_count()


@pytest.fixture(scope="module")
def model(tmp_path_factory):
    from safetensors.numpy import save_file

    rng = np.random.default_rng(0)
    path = tmp_path_factory.mktemp("speed") / "m.safetensors"
    save_file({"big.weight": (rng.standard_normal((2048, 2048)) * 0.02).astype(np.float32),
               "small.weight": (rng.standard_normal((64, 96)) * 0.02).astype(np.float32)},
              str(path))
    return path


def profile(run_tool, model, tmp_path, *args, load=None):
    """{(op, MB in rounded): threads} from the tool's --profile table."""
    env_load = {} if load is None else {"QSPARSE_TOOL_TEST_LOADAVG": str(load)}
    old = {k: os.environ.get(k) for k in env_load}
    os.environ.update(env_load)
    try:
        r = run_tool("--profile", "quantize", model, "-o", tmp_path / "o.safetensors",
                     "--format", "nf4", *args, check=0)
    finally:
        for k, v in old.items():
            if v is None:
                os.environ.pop(k, None)
            else:
                os.environ[k] = v
    rows = {}
    lines = r.stderr.splitlines()
    start = next(i for i, line in enumerate(lines) if line.startswith("op ")) + 1
    for line in lines[start:]:
        f = line.split()
        if len(f) < 8 or not f[-4].replace(".", "").isdigit():
            continue
        op, thr, mb_in = f[0], int(f[-6]), float(f[-4])
        rows.setdefault(op, []).append((mb_in, thr))
    return rows, r


def test_quiet_skips_the_decode(run_tool, model, tmp_path):
    loud, r = profile(run_tool, model, tmp_path)
    assert "dequantize" in loud and "rel.RMSE" in r.stdout
    quiet, r = profile(run_tool, model, tmp_path, "--quiet")
    assert set(quiet) == {"quantize"} and r.stdout == ""
    # the same file either way
    assert "quantize" in loud


def expect(big, small):
    """The profile's rows (MB in, threads) when the big tensor ran on `big` threads and the small
    one on `small`: one row per thread count (the table sums calls with the same count)."""
    if big == small:
        return [(16.8, big)]
    return sorted([(0.02, small), (16.78, big)])


def test_threads_per_tensor_size(run_tool, model, tmp_path):
    # an idle machine: the 4M-element tensor gets every core, the small one a single thread
    rows, _ = profile(run_tool, model, tmp_path, "-q", load=0)
    assert sorted(rows["quantize"]) == expect(CORES, 1)
    # beside busy jobs (load average = the core count): one thread for everything
    rows, _ = profile(run_tool, model, tmp_path, "-q", load=CORES)
    assert sorted(rows["quantize"]) == expect(1, 1)
    # --threads N is obeyed for every tensor
    rows, _ = profile(run_tool, model, tmp_path, "-q", "--threads", "3", load=0)
    assert sorted(rows["quantize"]) == expect(3, 3)


def test_same_bytes_for_any_thread_choice(run_tool, model, tmp_path):
    outs = []
    for i, args in enumerate([["--threads", "1"], ["--threads", "2"], []]):
        out = tmp_path / f"o{i}.safetensors"
        run_tool("quantize", model, "-o", out, "--format", "nf4", "-q", *args, check=0)
        outs.append(out.read_bytes())
    assert outs[0] == outs[1] == outs[2]


def test_help_and_doctor_say_what_to_do_on_a_shared_machine(run_tool):
    h = run_tool("quantize", "--help", check=0).stdout
    assert "--threads 1" in h and "shared" in h and "load average" in h
    d = run_tool("doctor", check=0).stdout
    assert "shared machine" in d and "--threads 1" in d and "tool threads:" in d
    j = json.loads(run_tool("doctor", "--json", check=0).stdout)
    t = j["tool_threads"]
    assert t["cores"] == CORES and 1 <= t["idle"] <= CORES and t["parallel_elements"] == 1 << 22
