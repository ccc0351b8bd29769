# SPDX-License-Identifier: MIT
"""The README's Python install steps, run as written on Debian 12's own Python: that Python is
externally managed (PEP 668), so `pip install .` outside a virtual environment is refused, which
is why the README makes one. The block is taken from README.md's Install section and run with
bash in the repository root, HOME in a temporary folder (the venv lands there) and Debian's
/usr/bin first on PATH; its apt-get line is left out when python3-venv is installed already
(installing needs root and the network). pip needs the network for the build tools; without it
the test is skipped, saying so. It builds the whole library once more (a few minutes)."""

import os
import re
import subprocess

import pytest

from conftest import ROOT
from test_docs import blocks

SYSTEM_PYTHON = "/usr/bin/python3"


def readme_install_block():
    found = [code for _, lang, code in blocks("README.md")
             if lang == "sh" and "python3 -m venv" in code]
    assert len(found) == 1, "README.md has one shell block that makes the virtual environment"
    return found[0]


def debian_python():
    if not os.path.exists(SYSTEM_PYTHON):
        pytest.skip(f"{SYSTEM_PYTHON} is not there (not Debian)")
    marker = subprocess.run([SYSTEM_PYTHON, "-c", "import sysconfig, os; print(os.path.exists("
                             "os.path.join(sysconfig.get_path('stdlib'), 'EXTERNALLY-MANAGED')))"],
                            capture_output=True, text=True, timeout=60).stdout.strip()
    if marker != "True":
        pytest.skip(f"{SYSTEM_PYTHON} is not externally managed (not Debian 12's Python)")


def test_readme_install_block_works_on_debians_python(tmp_path):
    debian_python()
    code = readme_install_block()
    lines = []
    for line in code.splitlines():
        if re.match(r"\s*apt-get install", line):
            if subprocess.run(["dpkg", "-s", "python3-venv"], capture_output=True).returncode:
                pytest.skip("python3-venv is not installed (the README installs it as root)")
            continue
        lines.append(line)
    # why the README makes a venv: Debian's pip refuses to install outside one
    refused = subprocess.run([SYSTEM_PYTHON, "-m", "pip", "install", "--dry-run", "--no-deps",
                              "."], cwd=ROOT, capture_output=True, text=True, timeout=300)
    assert refused.returncode != 0 and "externally-managed-environment" in refused.stderr, \
        refused.stderr

    env = {k: v for k, v in os.environ.items()
           if not k.startswith(("PYTHON", "QSPARSE", "VIRTUAL_ENV", "PIP_REQUIRE"))}
    env.update(HOME=str(tmp_path), PATH="/usr/bin:/bin:" + env.get("PATH", ""))
    proc = subprocess.run(["bash", "-c", "set -euo pipefail\n" + "\n".join(lines) + "\n"],
                          cwd=ROOT, env=env, capture_output=True, text=True, timeout=2400)
    if proc.returncode != 0 and re.search(r"NewConnectionError|Temporary failure in name "
                                          r"resolution|No matching distribution found",
                                          proc.stdout + proc.stderr):
        pytest.skip("no network for pip's build tools: " + proc.stderr[-300:])
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-3000:]
    venv = tmp_path / ".venvs" / "qsparse"
    assert (venv / "bin" / "qsparse").exists()
    # the package, the library inside it and the tool all came from this tree (pip's own
    # lines come first)
    out = proc.stdout.splitlines()
    with open(os.path.join(ROOT, "include", "qsparse.h")) as f:
        header = f.read()
    want = ".".join(re.search(rf"#define QS_VERSION_{k}\s+(\d+)", header).group(1)
                    for k in ("MAJOR", "MINOR", "PATCH"))
    assert any(line.split()[:1] == [want] for line in out), proc.stdout[-2000:]
    assert any(line.startswith("nf4 (block 64)") for line in out), proc.stdout[-2000:]
