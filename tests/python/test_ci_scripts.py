# SPDX-License-Identifier: MIT
"""What the CI scripts do before they install anything: .ci/deps looks at the PyTorch CPU index
once, with no retries and a short timeout, before it installs torch from there, so a machine that
reaches PyPI only falls back at once instead of spending pip's retries and timeouts (minutes,
twice: with and without --break-system-packages). The torch section runs here with a stand-in
python3 that records each call and answers as an unreachable index would."""

import os
import re
import stat
import subprocess

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

FAKE = """#!/bin/sh
echo "$*" >> "$LOG"
case "$*" in
  "-c import torch") exit 1 ;;
  *download.pytorch.org*) exit 1 ;;
esac
exit 0
"""


def test_deps_probes_the_torch_index_once_without_retries(tmp_path):
    text = open(os.path.join(ROOT, ".ci", "deps"), encoding="utf-8").read()
    start = text.index("loader_install() {")
    end = text.index("LOADER_PACKAGES=")
    snippet = "set -eu\n" + text[start:end]
    assert "--index-url" in snippet
    fake = tmp_path / "bin" / "python3"
    fake.parent.mkdir()
    fake.write_text(FAKE)
    fake.chmod(fake.stat().st_mode | stat.S_IEXEC)
    log = tmp_path / "log"
    env = dict(os.environ, PATH=f"{fake.parent}:/usr/bin:/bin", LOG=str(log))
    r = subprocess.run(["bash", "-c", snippet], env=env, capture_output=True, text=True,
                       timeout=60)
    assert r.returncode == 0, r.stderr
    calls = log.read_text().splitlines()
    index_calls = [c for c in calls if "download.pytorch.org" in c]
    # one look at the unreachable index, with no retries and a short timeout; then PyPI
    assert len(index_calls) == 1, calls
    assert re.search(r"--retries 0\b", index_calls[0]) and re.search(r"--timeout \d+",
                                                                     index_calls[0])
    assert any(c.startswith("-m pip install") and "torch" in c and "--index-url" not in c
               for c in calls), calls
    assert "not reachable" in r.stdout
