# SPDX-License-Identifier: MIT
"""`bash .ci/demo`, the README's first command: it installs what the demo needs and nothing else
(a C compiler, Meson and Ninja; it used to install the whole test stack, about 4.2 GB with
torch's CUDA wheels, to print a table from a C program), a run that works writes nothing on
stderr, and a second run builds nothing before the demo starts."""

import os
import shutil
import subprocess

import pytest

from conftest import ROOT

DEMO_PACKAGES = {"gcc", "libc6-dev", "meson", "ninja-build"}


def deps_list(*args):
    proc = subprocess.run(["bash", os.path.join(ROOT, ".ci", "deps"), *args, "--list"],
                          capture_output=True, text=True, timeout=60)
    assert proc.returncode == 0, proc.stderr
    lines = dict(line.split(":", 1) for line in proc.stdout.splitlines())
    return set(lines["apt"].split()), set(lines["pip"].split())


def test_the_demo_installs_only_what_it_needs():
    apt, pip = deps_list("--demo")
    assert apt == DEMO_PACKAGES and pip == set()
    full_apt, full_pip = deps_list()
    assert DEMO_PACKAGES - {"libc6-dev"} <= full_apt and {"torch", "numpy"} <= full_pip
    with open(os.path.join(ROOT, ".ci", "demo")) as f:
        assert "bash .ci/deps --demo\n" in f.read()


def _installed(pkg):
    return shutil.which("dpkg") and subprocess.run(
        ["dpkg", "-s", pkg], capture_output=True).returncode == 0


def test_the_demo_runs_cleanly_and_a_second_run_builds_nothing():
    if not all(_installed(p) for p in DEMO_PACKAGES):
        pytest.skip("the demo's packages are not all installed (.ci/deps --demo would install "
                    "them as root)")
    demo = ["bash", os.path.join(ROOT, ".ci", "demo"), "--rows", "64", "--cols", "256"]
    first = subprocess.run(demo, capture_output=True, text=True, timeout=1800)
    assert first.returncode == 0 and first.stderr == "", first.stderr
    assert "nf4 (block 64)" in first.stdout and "n/a" not in first.stdout
    log = os.path.join(ROOT, "build-demo", ".ninja_log")
    with open(log) as f:
        built = f.read()
    second = subprocess.run(demo, capture_output=True, text=True, timeout=600)
    assert second.returncode == 0 and second.stderr == "", second.stderr
    with open(log) as f:
        assert f.read() == built  # ninja had nothing to do
    # the same table, timings aside
    assert [line[:70] for line in second.stdout.splitlines()] == \
        [line[:70] for line in first.stdout.splitlines()]
