# SPDX-License-Identifier: MIT
"""Output error of 2:4 pruning: magnitude vs Wanda vs Wanda + channel permutation.

For a linear layer y = W x, prune W to 2:4 along its input axis and report
||W X - W' X||_F / ||W X||_F on held-out tokens (docs/sparsity.md §6.1, §6.2, §6.5).

No model weights can be downloaded here, so the layer is synthetic but shaped like an LLM
projection: W is heavy-tailed (Student-t, 5 degrees of freedom, scaled to std 0.02); the
activations have log-normal per-feature scales, Laplace token noise, and 1% "massive activation"
features 20x larger than the rest, as observed in LLaMA-class models. Wanda's norms ||X_j||_2 come
from calibration tokens; the error is measured on different tokens of the same distribution.

Usage: QSPARSE_LIB=build/libqsparse.so PYTHONPATH=python python3 bench/sparse_error.py
       [--out 512] [--in 512] [--tokens 2048] [--seed 0] [--sweeps 8] [--escapes 4]
"""

import argparse
import os
import sys
import time

import numpy as np

sys.path.insert(0, os.path.join(os.path.dirname(os.path.dirname(os.path.abspath(__file__))),
                                "python"))
import qsparse as qs  # noqa: E402
from qsparse import sparse as sp  # noqa: E402


def layer(rng, d_out, d_in, tokens):
    w = rng.standard_t(5, (d_out, d_in))
    w = (w / w.std() * 0.02).astype(np.float32)
    scale = np.exp(rng.normal(0.0, 0.5, d_in))
    outliers = rng.choice(d_in, max(1, d_in // 100), replace=False)
    scale[outliers] *= 20.0

    def acts():
        return (rng.laplace(0.0, 1.0, (tokens, d_in)) * scale).astype(np.float32)

    return w, acts(), acts()


def rel_error(w, w_pruned, x):
    y = x.astype(np.float64) @ w.astype(np.float64).T
    yp = x.astype(np.float64) @ w_pruned.astype(np.float64).T
    return float(np.linalg.norm(y - yp) / np.linalg.norm(y))


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--out", type=int, default=512)
    ap.add_argument("--in", dest="d_in", type=int, default=512)
    ap.add_argument("--tokens", type=int, default=2048)
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--sweeps", type=int, default=8)
    ap.add_argument("--escapes", type=int, default=4)
    a = ap.parse_args()

    rng = np.random.default_rng(a.seed)
    w, x_cal, x_eval = layer(rng, a.out, a.d_in, a.tokens)
    norms = sp.activation_norms(x_cal)
    print(f"layer {a.out} x {a.d_in}, {a.tokens} calibration + {a.tokens} eval tokens, "
          f"isa {qs.isa()}")

    results = []
    m_mag = qs.prune(w, "2:4", method="magnitude")
    results.append(("2:4 magnitude", rel_error(w, np.where(m_mag, w, 0), x_eval)))
    m_wanda = qs.prune(w, "2:4", method="wanda", act_norm=norms)
    results.append(("2:4 Wanda", rel_error(w, np.where(m_wanda, w, 0), x_eval)))

    t0 = time.time()
    perm, before, after = sp.permute(w, act_norm=norms, max_sweeps=a.sweeps,
                                     escapes=a.escapes, seed=a.seed)
    t_perm = time.time() - t0
    wp = np.ascontiguousarray(w[:, perm])
    m_perm = qs.prune(wp, "2:4", method="wanda", act_norm=norms[perm])
    # Evaluate in the permuted basis: the producer layer's outputs are permuted the same way.
    results.append(("2:4 Wanda + permutation",
                    rel_error(wp, np.where(m_perm, wp, 0), np.ascontiguousarray(x_eval[:, perm]))))
    m_tile = qs.prune(w, "2:4", method="tile", act_norm=norms)
    results.append(("2:4 Wanda TILE (transposable)",
                    rel_error(w, np.where(m_tile, w, 0), x_eval)))
    m48 = qs.prune(w, "4:8", method="wanda", act_norm=norms)
    results.append(("4:8 Wanda", rel_error(w, np.where(m48, w, 0), x_eval)))

    print(f"{'method':32s} {'||WX - W`X|| / ||WX||':>24s}")
    for name, err in results:
        print(f"{name:32s} {err:24.4f}")
    print(f"permutation search: Wanda score kept {before:.4f} -> {after:.4f} "
          f"({t_perm:.1f} s, {a.sweeps} sweeps max, {a.escapes} escapes)")


if __name__ == "__main__":
    main()
