# SPDX-License-Identifier: MIT
"""The Python distribution's name. "qsparse" on PyPI belongs to an unrelated project (its own
top-level qsparse package), so `pip install qsparse` must not be what the README tells anyone to
run: this project's distribution is "libqsparse", imported as qsparse."""

import importlib.metadata
import os
import re
import sys

import pytest

import qsparse as qs

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))


def _pyproject_name():
    text = open(os.path.join(ROOT, "pyproject.toml"), encoding="utf-8").read()
    if sys.version_info >= (3, 11):
        import tomllib
        return tomllib.loads(text)["project"]["name"]
    return re.search(r'(?m)^name\s*=\s*"([^"]+)"', text).group(1)


def test_distribution_name_is_ours():
    assert _pyproject_name() == "libqsparse"


def test_readme_names_the_distribution():
    readme = open(os.path.join(ROOT, "README.md"), encoding="utf-8").read()
    assert "pip show libqsparse" in readme
    assert not re.search(r"(?m)^\s*pip install qsparse\b", readme)


@pytest.mark.skipif(bool(os.environ.get("QSPARSE_LIB")),
                    reason="QSPARSE_LIB: the source tree's package, not an installed one")
def test_installed_distribution_provides_the_package():
    dist = importlib.metadata.distribution("libqsparse")
    files = {str(f).replace(os.sep, "/") for f in dist.files or ()}
    assert "qsparse/__init__.py" in files
    assert os.path.realpath(os.path.dirname(qs.__file__)) == \
        os.path.realpath(str(dist.locate_file("qsparse")))
    assert dist.version == qs.__version__


@pytest.mark.skipif(bool(os.environ.get("QSPARSE_LIB")),
                    reason="QSPARSE_LIB: the source tree's package, not an installed one")
def test_installed_doctor_looks_for_the_plugin_in_the_package(run_tool, tool):
    """The wheel's tool is linked statically: the library's search beside "its" library would
    look in the scripts folder; the wheel installs libqsparse-cuda.so in the package folder."""
    import json
    import subprocess

    pkg = os.path.realpath(os.path.dirname(qs.__file__))
    if os.path.realpath(os.path.dirname(tool)) == os.path.realpath(os.path.join(ROOT, "build",
                                                                                  "tools")):
        pytest.skip("QSPARSE_TOOL is the build tree's tool, not the installed one")
    env = {k: v for k, v in os.environ.items() if k != "QS_PLUGIN_PATH"}
    out = subprocess.run([tool, "doctor", "--json"], capture_output=True, text=True, env=env,
                         timeout=60, check=True).stdout
    j = json.loads(out)
    assert os.path.realpath(os.path.dirname(j["cuda_plugin"])) == pkg
    cuda = j["backends"]["cuda"]
    assert cuda["available"] or os.path.dirname(j["cuda_plugin"]) in cuda["message"]
