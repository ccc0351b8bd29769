# SPDX-License-Identifier: MIT
"""Options that do not fit the C field they go to are refused, never converted (issue 35 item 8):
ctypes wraps an int into an int32 or int64 field without a word (qs.gptq(block=2**32 + 128)
ran with block 128), and a threshold below float32's range became 0, which means "no outliers",
the opposite of what was asked. The rest of the binding already refuses such values."""

import numpy as np
import pytest

import qsparse as qs


def layer(seed=0, k=64, rows=16):
    rng = np.random.default_rng(seed)
    x = rng.standard_normal((128, k)).astype(np.float32)
    w = (rng.standard_normal((rows, k)) * 0.05).astype(np.float32)
    return x, w, qs.Hessian(k).update(x)


@pytest.mark.parametrize("block", [2**32 + 128, 2**31, -2**31 - 1, 2**64 + 128])
def test_gptq_and_sparsegpt_block_out_of_int32(block):
    _, w, h = layer()
    with pytest.raises(ValueError, match="block"):
        qs.gptq(w, h, "nf4", blocksize=64, block=block)
    with pytest.raises(ValueError, match="block"):
        qs.sparsegpt(w, h, "2:4", block=block)
    # the same call with an in-range block runs
    qs.gptq(w, h, "nf4", blocksize=64, block=128)


@pytest.mark.parametrize("value", [1.5, True, "64", None])
def test_block_must_be_an_int(value):
    _, w, h = layer()
    with pytest.raises(ValueError, match="block"):
        qs.gptq(w, h, "nf4", blocksize=64, block=value)


def test_hessian_sizes_out_of_int64():
    with pytest.raises(ValueError, match="K"):
        qs.Hessian(2**64 + 64)  # would have wrapped to K = 64
    with pytest.raises(ValueError, match="tokens"):
        qs.Hessian.from_matrix(np.eye(8), tokens=2**64 + 3)
    assert qs.Hessian.from_matrix(np.eye(8), tokens=3).tokens == 3


@pytest.mark.parametrize("threshold", [1e-50, 1e39])
def test_threshold_outside_float32(threshold):
    rng = np.random.default_rng(1)
    x = rng.standard_normal((4, 64)).astype(np.float32)
    w = qs.quantize(rng.standard_normal((8, 64)).astype(np.float32), "llm_int8")
    with pytest.raises(ValueError, match="threshold"):
        qs.matmul(x, w, activations="int8", threshold=threshold)
    with pytest.raises(ValueError, match="threshold"):
        qs.int8_vectorwise_quant(x, threshold=threshold)
    # a tiny threshold that float32 holds (a subnormal) is kept: every nonzero |x| is an outlier
    codes, _, outliers = qs.int8_vectorwise_quant(x, threshold=1e-40)
    assert np.all(codes == 0) and len(outliers) == 64
