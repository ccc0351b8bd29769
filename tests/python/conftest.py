# SPDX-License-Identifier: MIT
"""Shared fixtures of the Python tests: the qsparse package, the `qsparse` tool and small
safetensors files.

The package is the installed one (`pip install .`). With QSPARSE_LIB set to a built
libqsparse.so, the tests use the source tree's python/qsparse with that library instead (the
development loop: `QSPARSE_LIB=build/libqsparse.so QSPARSE_TOOL=build/tools/qsparse pytest`).
The tool is QSPARSE_TOOL, else the `qsparse` installed beside this Python, else on PATH, else
build/tools/.
"""

import os
import shutil
import subprocess
import sys
import sysconfig

import numpy as np
import pytest

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

if os.environ.get("QSPARSE_LIB"):
    sys.path.insert(0, os.path.join(ROOT, "python"))


def _find_tool():
    env = os.environ.get("QSPARSE_TOOL")
    if env:
        return env
    scripts = sysconfig.get_path("scripts")
    for cand in (os.path.join(scripts, "qsparse") if scripts else None,
                 os.path.join(os.path.dirname(sys.executable), "qsparse"),
                 shutil.which("qsparse"),
                 os.path.join(ROOT, "build", "tools", "qsparse")):
        if cand and os.path.isfile(cand) and os.access(cand, os.X_OK):
            return cand
    return None


@pytest.fixture(scope="session")
def tool():
    path = _find_tool()
    if path is None:
        pytest.skip("the qsparse tool was not found (set QSPARSE_TOOL or pip install .)")
    return path


@pytest.fixture
def run_tool(tool):
    def run(*args, check=None):
        proc = subprocess.run([tool, *map(str, args)], capture_output=True, text=True,
                              timeout=300)
        if check is not None:
            assert proc.returncode == check, (proc.returncode, proc.stdout, proc.stderr)
        return proc
    return run


def tiny_model(dtype=np.float32, seed=0):
    """A two-layer transformer-like state dict: linear weights, biases, norms, an embedding."""
    rng = np.random.default_rng(seed)

    def w(*shape):
        return (rng.standard_normal(shape) * 0.05).astype(dtype)

    return {
        "embeddings.word_embeddings.weight": w(50, 32),
        "embeddings.LayerNorm.weight": np.ones(32, dtype),
        "encoder.layer.0.attention.self.query.weight": w(32, 32),
        "encoder.layer.0.attention.self.query.bias": w(32),
        "encoder.layer.0.intermediate.dense.weight": w(64, 32),
        "encoder.layer.0.output.dense.weight": w(32, 64),
        "encoder.layer.0.output.LayerNorm.weight": np.ones(32, dtype),
        "encoder.layer.1.attention.self.query.weight": w(32, 48),
        "encoder.layer.1.odd.weight": w(5, 7),
        "position_ids": np.arange(16, dtype=np.int64).reshape(1, 16),
    }


@pytest.fixture
def model_file(tmp_path):
    from safetensors.numpy import save_file

    tensors = tiny_model()
    path = tmp_path / "model.safetensors"
    save_file(tensors, str(path), metadata={"format": "pt"})
    return path, tensors


def read_raw(path):
    """{name: (dtype string, shape list, bytes)} read with the safetensors package."""
    import safetensors

    with open(path, "rb") as f:
        return {name: (d["dtype"], list(d["shape"]), bytes(d["data"]))
                for name, d in safetensors.deserialize(f.read())}


def read_metadata(path):
    import safetensors

    with safetensors.safe_open(str(path), framework="numpy") as f:
        return f.metadata()
