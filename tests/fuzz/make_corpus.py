#!/usr/bin/env python3
# SPDX-License-Identifier: MIT
"""Writes the seed corpora of the fuzz targets into tests/fuzz/corpus/<target>/.

A handful of small inputs per target, valid and near-valid, in the byte layout each target's
header comment describes. The observer seeds are real serialized observers written by the
library through the Python binding (set QSPARSE_LIB to a built libqsparse.so); without it the
observer corpus is left as it is. Deterministic: the same files on every run.

    QSPARSE_LIB=build-dev/libqsparse.so python3 tests/fuzz/make_corpus.py
"""

import hashlib
import json
import os
import random
import struct
import sys

HERE = os.path.dirname(os.path.abspath(__file__))
CORPUS = os.path.join(HERE, "corpus")
rng = random.Random(20261203)


def write(target, name, data):
    d = os.path.join(CORPUS, target)
    os.makedirs(d, exist_ok=True)
    with open(os.path.join(d, name), "wb") as f:
        f.write(bytes(data))


def f32s(values):
    return b"".join(struct.pack("<f", v) for v in values)


def normals(n, scale=1.0):
    return [rng.gauss(0.0, scale) for _ in range(n)]


SPECIAL = [0.0, -0.0, float("nan"), float("inf"), -float("inf"), 1e-45, 3.4028235e38, 448.0,
           -57344.0, 6.0, 0.5]

# ---- quantize: format, flags, block choice, rows, cols, dtype, scale choice, short, [scale], data
NO_SHORT = 0xFF


def quantize_seed(fmt, rows, cols, flags=0, bsel=0, dtype=0, ssel=0, short=NO_SHORT, scale=None,
                  values=None):
    head = bytes([fmt, flags, bsel, rows, cols, dtype, ssel, short])
    if ssel & 1:
        head += struct.pack("<f", scale)
    values = values if values is not None else normals(rows * cols)
    if dtype == 0:
        body = f32s(values)
    else:  # f16 bits through struct's half type; bf16 as the top half of f32
        body = b"".join(struct.pack("<e", max(-65504.0, min(65504.0, v))) if dtype == 1
                        else struct.pack("<f", v)[2:] for v in values)
    return head + body


def quantize_corpus():
    t = "fuzz_quantize"
    for fmt, name in enumerate(["", "nf4", "fp4", "int8", "llm_int8", "fp8_e4m3", "fp8_e5m2",
                                "mxfp4", "mxfp8", "nvfp4"]):
        if fmt == 0:
            continue
        write(t, f"{name}_f32_2x64", quantize_seed(fmt, 2, 64))
        specials = [SPECIAL[i % len(SPECIAL)] for i in range(3 * 40)]
        write(t, f"{name}_specials_3x40", quantize_seed(fmt, 3, 40, values=specials))
    write(t, "nf4_double_quant_f16", quantize_seed(1, 4, 80, flags=1, dtype=1))
    write(t, "fp4_block_choice_bf16", quantize_seed(2, 2, 66, bsel=128 + 5, dtype=2))
    write(t, "int8_group16_asym", quantize_seed(3, 2, 64, flags=2 | (2 << 2), bsel=128 + 6))
    write(t, "int8_tensor_reject_nan", quantize_seed(3, 1, 8, flags=1 << 5, values=SPECIAL[:8]))
    write(t, "fp8_given_scale", quantize_seed(5, 1, 16, ssel=1, scale=0.25))
    write(t, "mxfp4_rceil", quantize_seed(7, 2, 40, flags=1 << 4))
    write(t, "nvfp4_short_scale_plane", quantize_seed(9, 2, 32, short=1))
    write(t, "int8_row_group_not_dividing", quantize_seed(3, 2, 30, flags=2 << 2, bsel=128 + 6))
    write(t, "invalid_format", quantize_seed(10, 1, 4))


# ---- dequantize: format, flags, block choice, rows, cols, dtype, short, gscale, offset, planes


def dequantize_seed(fmt, rows, cols, planes, flags=0, bsel=0, dtype=0, short=NO_SHORT,
                    gscale=1.0, offset=0.0):
    head = bytes([fmt, flags, bsel, rows, cols, dtype, short])
    g = gscale if isinstance(gscale, bytes) else struct.pack("<f", gscale)
    return head + g + struct.pack("<f", offset) + planes


def rand_bytes(n):
    return bytes(rng.getrandbits(8) for _ in range(n))


def dequantize_corpus():
    t = "fuzz_dequantize"
    # NF4 2x64: 64 data bytes, 2 f32 absmax.
    write(t, "nf4_2x64", dequantize_seed(1, 2, 64, rand_bytes(64) + f32s([1.5, 0.25])))
    write(t, "fp4_nan_absmax", dequantize_seed(2, 2, 64, rand_bytes(64) + f32s([float("nan"), 2.0])))
    # NF4 double quant: codes + nested scale.
    write(t, "nf4_double_quant", dequantize_seed(1, 2, 64, rand_bytes(64 + 2) + f32s([0.01]),
                                                 flags=1, offset=0.5))
    write(t, "int8_row", dequantize_seed(3, 2, 16, rand_bytes(32) + f32s([0.1, float("inf")])))
    write(t, "int8_asym_tensor", dequantize_seed(3, 2, 16, rand_bytes(32) + f32s([0.1]) + b"\x05",
                                                 flags=2))
    write(t, "llm_int8", dequantize_seed(4, 2, 8, rand_bytes(16) + f32s([127.0, -0.0])))
    write(t, "fp8_e4m3_all_codes", dequantize_seed(5, 4, 64, bytes(range(256)) + f32s([2.0])))
    write(t, "fp8_e5m2_nan_scale", dequantize_seed(6, 1, 64, bytes(range(0, 256, 4))
                                                   + f32s([float("nan")])))
    write(t, "mxfp4_2x64", dequantize_seed(7, 2, 64, rand_bytes(64) + bytes([127, 0xFF, 0, 130])))
    write(t, "mxfp8_ff_scale", dequantize_seed(8, 1, 64, bytes([0xFF, 0x7F]) * 32
                                               + bytes([0xFF, 127])))
    # NVFP4 with a NaN tensor scale and an E4M3 NaN block scale (issue 10 item 4).
    write(t, "nvfp4_nan_scales", dequantize_seed(9, 1, 32, rand_bytes(16) + bytes([0x7F, 0x38]),
                                                 gscale=float("nan")))
    write(t, "nvfp4_bf16_out", dequantize_seed(9, 2, 48, rand_bytes(48) + rand_bytes(6),
                                               dtype=2, gscale=0.5))
    write(t, "nf4_short_dst", dequantize_seed(1, 1, 64, rand_bytes(32) + f32s([1.0]), short=4))


# ---- sp24: op, flags, rows, cols, dtype, short, meta bytes, source bytes

VALID_NIBBLES = [4, 8, 12, 9, 13, 14]


def meta_words(rows, cols, bad=False):
    words = []
    for _ in range(rows):
        groups = [rng.choice(VALID_NIBBLES) for _ in range(cols // 4)]
        if bad and groups:
            groups[0] = 3  # i0 == i1: not one of the six codes
        for w in range((cols + 15) // 16):
            v = 0
            for j, g in enumerate(groups[4 * w:4 * w + 4]):
                v |= g << (4 * j)
            words.append(v)
    return b"".join(struct.pack("<H", w) for w in words)


def bitmask(rows, cols):
    out = b""
    for _ in range(rows):
        bits = []
        for _ in range(cols // 4):
            keep = rng.sample(range(4), 2)
            bits += [1 if i in keep else 0 for i in range(4)]
        bits += [0] * (-len(bits) % 8)
        out += bytes(sum(b << i for i, b in enumerate(bits[k:k + 8])) for k in range(0, len(bits), 8))
    return out


def sp24_corpus():
    t = "fuzz_sp24"
    OP_DEC, OP_TO_BM, OP_FROM_BM, OP_TO_CU, OP_FROM_CU = range(5)
    head = lambda op, flags, r, c, dt=0, short=NO_SHORT: bytes([op, flags, r, c, dt, short])
    write(t, "decompress_f32_4x32", head(OP_DEC, 0, 4, 32) + meta_words(4, 32)
          + f32s(normals(4 * 16)))
    write(t, "decompress_f16_3x20", head(OP_DEC, 0, 3, 20, 1) + meta_words(3, 20) + rand_bytes(60))
    write(t, "decompress_bad_nibble", head(OP_DEC, 0, 2, 16) + meta_words(2, 16, bad=True)
          + f32s(normals(16)))
    write(t, "to_bitmask_5x24", head(OP_TO_BM, 0, 5, 24) + meta_words(5, 24))
    write(t, "from_bitmask_4x40", head(OP_FROM_BM, 0, 4, 40) + bitmask(4, 40))
    write(t, "to_cutlass16_32x32", head(OP_TO_CU, 4, 32, 32) + meta_words(32, 32))
    write(t, "to_cutlass32_16x64", head(OP_TO_CU, 4 | 1, 16, 64) + meta_words(16, 64))
    write(t, "from_cutlass16_32x64", head(OP_FROM_CU, 4, 32, 64) + rand_bytes(32 * 64 // 8))
    write(t, "to_cutlass_bad_rows", head(OP_TO_CU, 0, 24, 32) + meta_words(24, 32))


# ---- safetensors: whole files


def st_file(tensors, metadata=None, order=None, pad=0):
    header, data = {}, b""
    if metadata is not None:
        header["__metadata__"] = metadata
    for name, dtype, shape, blob in tensors:
        header[name] = {"dtype": dtype, "shape": shape,
                        "data_offsets": [len(data), len(data) + len(blob)]}
        data += blob
    h = json.dumps(header, separators=(",", ":")).encode() + b" " * pad
    return struct.pack("<Q", len(h)) + h + data


def st_raw(header, data):
    h = json.dumps(header, separators=(",", ":")).encode()
    return struct.pack("<Q", len(h)) + h + data


def safetensors_corpus():
    t = "fuzz_safetensors"
    write(t, "two_tensors", st_file([("w", "F32", [2, 2], f32s([1, 2, 3, 4])),
                                     ("b", "BF16", [2], b"\x80\x3f\x00\x40")],
                                    metadata={"format": "pt"}, pad=3))
    write(t, "empty_and_scalar", st_file([("e", "F16", [0, 4], b""), ("s", "I64", [], bytes(8)),
                                          ("u", "U8", [3], b"abc")]))
    write(t, "empty_header", st_file([]))
    write(t, "overlap", st_raw({"a": {"dtype": "U8", "shape": [4], "data_offsets": [0, 4]},
                                "b": {"dtype": "U8", "shape": [4], "data_offsets": [2, 6]}},
                               bytes(8)))
    # An empty tensor sorted between two overlapping ones (issue 10 item 6).
    write(t, "overlap_hidden_by_empty",
          st_raw({"a": {"dtype": "U8", "shape": [4], "data_offsets": [0, 4]},
                  "e": {"dtype": "U8", "shape": [0], "data_offsets": [1, 1]},
                  "b": {"dtype": "U8", "shape": [2], "data_offsets": [2, 4]}}, bytes(4)))
    write(t, "bad_dtype", st_raw({"a": {"dtype": "F33", "shape": [1], "data_offsets": [0, 4]}},
                                 bytes(4)))
    write(t, "huge_shape", st_raw({"a": {"dtype": "F32", "shape": [2**62, 4],
                                         "data_offsets": [0, 0]}}, b""))
    write(t, "offsets_past_end", st_raw({"a": {"dtype": "U8", "shape": [8],
                                               "data_offsets": [0, 8]}}, bytes(4)))
    write(t, "truncated_length", b"\xff\x00\x00\x00\x00\x00\x00\x00{}")


# ---- observer: real serialized observers


def observer_corpus():
    lib = os.environ.get("QSPARSE_LIB")
    if not lib:
        print("QSPARSE_LIB not set: observer corpus left as it is", file=sys.stderr)
        return
    sys.path.insert(0, os.path.join(HERE, "..", "..", "python"))
    import numpy as np
    import qsparse as qs

    t = "fuzz_observer"
    r = np.random.default_rng(7)
    x = r.standard_normal((3, 8)).astype(np.float32)
    x[0, 0], x[1, 1], x[2, 2] = np.nan, np.inf, 0.0
    seeds = [
        ("minmax", qs.Observer("minmax")),
        ("moving_average", qs.Observer("moving_average")),
        ("percentile_8bins", qs.Observer("percentile", num_bins=8)),
        ("entropy_16bins", qs.Observer("entropy", num_bins=16, num_levels=4, start_bin=4)),
        ("mse_8bins", qs.Observer("mse", num_bins=8, start_bin=2)),
        ("minmax_axis0", qs.Observer("minmax", axis=0)),
        ("percentile_axis1_4bins", qs.Observer("percentile", axis=1, num_bins=4)),
    ]
    for name, o in seeds:
        write(t, name + "_empty", b"\x00" + o.to_bytes())
        o.update(x)
        b = o.to_bytes()
        write(t, name, b"\x00" + b)
        # The same bytes with a mode byte that recomputes the checksum, and a flipped count.
        flipped = bytearray(b)
        flipped[64 + 3] ^= 1
        write(t, name + "_fixsum_flip", b"\x01" + bytes(flipped))
    write(t, "truncated", b"\x00" + seeds[0][1].to_bytes()[:40])


# ---- matmul: kind, flags, M, N, K, short, format, quant flags, block choice, threshold choice,
# [threshold], global_scale, nested_offset, weight (data or planes), meta, x, bias
MM_BIAS, MM_ACT8, MM_MISALIGN, MM_REJECT, MM_FIX_META = 1, 2, 4, 8, 0x80


def matmul_seed(kind, M, N, K, flags=0, fmt=0, qflags=0, bsel=0, tsel=0, short=NO_SHORT,
                weight=b"", meta=b"", x=None, bias=None):
    head = bytes([kind, flags, M, N, K, short, fmt, qflags, bsel, tsel])
    head += f32s([1.0, 0.0])  # global_scale, nested_offset
    x = f32s(normals(M * K)) if x is None else x
    bias = (f32s(normals(N)) if flags & MM_BIAS else b"") if bias is None else bias
    return head + weight + meta + x + bias


def matmul_corpus():
    t = "fuzz_matmul"
    write(t, "dense_f32_3x5x16", matmul_seed(0, 3, 5, 16, weight=f32s(normals(5 * 16))))
    write(t, "dense_f32_bias_gemm_17x4x8",
          matmul_seed(0, 17, 4, 8, flags=MM_BIAS, weight=f32s(normals(4 * 8))))
    write(t, "dense_f32_act8_outliers",
          matmul_seed(0, 2, 3, 12, flags=MM_ACT8, tsel=1, weight=f32s(normals(3 * 12)),
                      x=f32s([v * 4.0 for v in normals(2 * 12)])))
    write(t, "sp24_f32_valid_meta", matmul_seed(2, 2, 3, 32, flags=MM_FIX_META,
                                                weight=f32s(normals(3 * 16)),
                                                meta=rand_bytes(3 * 2 * 2)))
    # Quantized weights: plane bytes are arbitrary (scales included); what follows the planes is
    # read as meta, x and bias in that order, so these only need to be long enough.
    for fmt, name in enumerate(["", "nf4", "fp4", "int8", "llm_int8", "fp8_e4m3", "fp8_e5m2",
                                "mxfp4", "mxfp8", "nvfp4"]):
        if fmt == 0:
            continue
        write(t, f"quant_{name}_2x3x32", matmul_seed(1, 2, 3, 32, fmt=fmt, qflags=2,
                                                     weight=rand_bytes(3 * 32 + 64)))
        write(t, f"quant_{name}_act8_2x3x32",
              matmul_seed(1, 2, 3, 32, flags=MM_ACT8 | MM_BIAS, fmt=fmt, tsel=1,
                          weight=rand_bytes(3 * 32 + 64)))
    write(t, "sp24_quant_int8_valid_meta",
          matmul_seed(3, 2, 2, 32, flags=MM_FIX_META | MM_ACT8, fmt=3, qflags=1 << 2,
                      weight=rand_bytes(2 * 16 + 8), meta=rand_bytes(2 * 2 * 2)))
    write(t, "dense_f16_misaligned", matmul_seed(0, 2, 2, 8, flags=MM_MISALIGN | (1 << 4),
                                                 weight=f32s(normals(2 * 8)),
                                                 x=rand_bytes(2 * 8 * 2)))
    write(t, "dense_short_y", matmul_seed(0, 2, 2, 8, short=0, weight=f32s(normals(16))))
    # M = 255: the 8-byte huge size follows the threshold choice; here M huge, N = 0, K = 8.
    write(t, "huge_m_zero_n", bytes([0, 0, 255, 1 | (1 << 3), 8, NO_SHORT, 0, 0, 0, 0])
          + struct.pack("<Q", 1 << 62) + f32s([1.0, 0.0]))


# ---- hessian: mode, activation rows, blob length (u16), blob, f32 weights and activations


def hessian_blob(k, s, tokens=1, version=1):
    """A serialized Hessian (include/qsparse/gptq.h): "QSHS", version, header 32, 0, K, tokens,
    the upper triangle of S row by row, FNV-1a of everything before it."""
    b = b"QSHS" + struct.pack("<IIIQQ", version, 32, 0, k, tokens)
    b += b"".join(struct.pack("<d", s[r][c]) for r in range(k) for c in range(r, k))
    h = 0xcbf29ce484222325
    for byte in b:
        h = ((h ^ byte) * 0x100000001b3) & 0xFFFFFFFFFFFFFFFF
    return b + struct.pack("<Q", h)


def gram(k, tokens, hrng, scale=1.0):
    x = [[hrng.gauss(0.0, 1.0) * scale for _ in range(k)] for _ in range(tokens)]
    return [[sum(x[t][r] * x[t][c] for t in range(tokens)) for c in range(k)] for r in range(k)]


def hessian_seed(mode, arows, blob, values):
    return bytes([mode, arows]) + struct.pack("<H", len(blob)) + blob + f32s(values)


def hessian_corpus():
    t = "fuzz_hessian"
    hrng = random.Random(35)
    normals_h = lambda n, sc=0.05: [hrng.gauss(0.0, sc) for _ in range(n)]  # noqa: E731
    # mode: bit 0 fix the checksum, bits 1-3 the format, bits 4-7 the weight's rows
    for name, k, sel, rows, arows, s_scale in [("int8_k8", 8, 0, 3, 4, 1.0),
                                               ("int8_asym_k4", 4, 1, 2, 2, 1.0),
                                               ("llm_int8_k12", 12, 2, 4, 0, 1.0),
                                               ("mxfp4_k32", 32, 3, 2, 3, 1.0),
                                               ("nvfp4_k16", 16, 4, 3, 2, 1.0),
                                               ("int8_group_k32", 32, 7, 2, 1, 1.0)]:
        blob = hessian_blob(k, gram(k, 2 * k, hrng), tokens=2 * k)
        write(t, name, hessian_seed(1 | sel << 1 | rows << 4, arows, blob,
                                    normals_h(rows * k) + normals_h(arows * k, 1.0)))
    k = 64  # NF4 and FP4 blocks of 64
    blob = hessian_blob(k, gram(k, 80, hrng), tokens=80)
    write(t, "nf4_k64", hessian_seed(1 | 5 << 1 | 2 << 4, 1, blob, normals_h(2 * k + k, 1.0)))
    # huge activations (bit 7 scales them by 2^100) and Hessians near the double range
    blob = hessian_blob(8, gram(8, 8, hrng), tokens=8)
    write(t, "huge_acts", hessian_seed(1 | 0 << 1 | 2 << 4, 0x80 | 3, blob,
                                       normals_h(16) + [1e30] + normals_h(23, 1.0)))
    big = [[(4e307 if r == c else 1e307) for c in range(4)] for r in range(4)]
    write(t, "near_dbl_max", hessian_seed(1 | 3 << 4, 1, hessian_blob(4, big), normals_h(16)))
    tiny = [[(1e-300 if r == c else 0.0) for c in range(4)] for r in range(4)]
    write(t, "tiny", hessian_seed(1 | 2 << 1 | 2 << 4, 0, hessian_blob(4, tiny), normals_h(8)))
    write(t, "asym_int8_huge_weights",
          hessian_seed(1 | 1 << 1 | 2 << 4, 0,
                       hessian_blob(4, [[1.0 if r == c else 0.0 for c in range(4)]
                                        for r in range(4)]),
                       [3.3e38, -3.3e38, 1.0e38, -2.0e38, 3.0e38, -1.0, 2.5e38, -3.3e38]))
    write(t, "zero_rows", hessian_seed(1, 2, hessian_blob(4, gram(4, 4, hrng)), [float("nan")] * 8))
    write(t, "bad_version", hessian_seed(1 | 2 << 4, 0, hessian_blob(4, gram(4, 4, hrng), version=2),
                                         normals_h(8)))
    write(t, "bad_checksum", hessian_seed(0, 0, hessian_blob(4, gram(4, 4, hrng))[:-1] + b"x", []))


# ---- sidefiles: mode, then entries (kind, name, content or link target)

SF_FILE, SF_DIR, SF_LINK, SF_FIFO = 0, 1, 2, 3
SF_NAMES = ["config.json", "model.safetensors.index.json", "model.safetensors", "s0.safetensors",
            "s1.safetensors", "tokenizer.json", "generation_config.json", "sub", "sub/a.json",
            "sub/b", "qsparse-part.json", "hf_quant_config.json", "x.bin", ".hidden", "loop",
            "onnx"]
SF_TARGETS = ["../secret.txt", "../../secret.txt", "../../../secret.txt", "/proc/self/environ",
              "/etc", "/dev/zero", ".", "..", "sub", "sub/a.json", "config.json",
              "tokenizer.json", "nowhere", "@/secret.txt", "s0.safetensors",
              "../p1/s1.safetensors", "../p0/config.json", "../m/config.json"]


def sf_file(name, content, second=False):
    content = content.encode() if isinstance(content, str) else content
    return bytes([SF_FILE | (4 if second else 0), SF_NAMES.index(name)]) + \
        struct.pack("<H", len(content)) + content


def sf_link(name, target, second=False):
    return bytes([SF_LINK | (4 if second else 0), SF_NAMES.index(name),
                  SF_TARGETS.index(target)])


def sf_other(kind, name, second=False):
    return bytes([kind | (4 if second else 0), SF_NAMES.index(name)])


def sidefiles_corpus():
    t = "fuzz_sidefiles"
    w = f32s([0.5, -1.0, 2.0, 0.25])
    shard0 = st_file([("a.weight", "F32", [2, 2], w)])
    shard1 = st_file([("b.weight", "F32", [2, 2], w)])
    config = json.dumps({"model_type": "bert", "hidden_size": 2})
    index = json.dumps({"metadata": {"total_size": 32},
                        "weight_map": {"a.weight": "s0.safetensors", "b.weight": "s1.safetensors"}})
    write(t, "model_single", bytes([0]) + sf_file("config.json", config) +
          sf_file("model.safetensors", shard0) + sf_file("tokenizer.json", '{"v": 1}') +
          sf_other(SF_DIR, "sub") + sf_file("sub/a.json", "{}"))
    write(t, "model_sharded", bytes([0]) + sf_file("config.json", config) +
          sf_file("model.safetensors.index.json", index) + sf_file("s0.safetensors", shard0) +
          sf_file("s1.safetensors", shard1) + sf_link("tokenizer.json", "sub/a.json") +
          sf_other(SF_DIR, "sub") + sf_file("sub/a.json", "{}"))
    write(t, "model_links_out", bytes([0]) + sf_file("config.json", config) +
          sf_file("model.safetensors", shard0) + sf_link("generation_config.json", "../secret.txt") +
          sf_link("tokenizer.json", "/proc/self/environ") + sf_link("onnx", "/etc") +
          sf_link("loop", "."))
    write(t, "model_fifo_config", bytes([0]) + sf_other(SF_FIFO, "config.json") +
          sf_file("model.safetensors", shard0))
    write(t, "model_fifo_index", bytes([0]) + sf_file("config.json", config) +
          sf_other(SF_FIFO, "model.safetensors.index.json") + sf_file("s0.safetensors", shard0))
    write(t, "model_tensor_in_two_shards", bytes([0]) + sf_file("config.json", config) +
          sf_file("model.safetensors.index.json", index) + sf_file("s0.safetensors", shard0) +
          sf_file("s1.safetensors", st_file([("a.weight", "F32", [2, 2], w),
                                             ("b.weight", "F32", [2, 2], w)])))

    def marker(part, shards, inputs=("s0.safetensors", "s1.safetensors")):
        return json.dumps({"qsparse_part": "0.2.0", "part": part, "parts": 2,
                           "shards": list(shards), "input_shards": list(inputs),
                           "indexed": True, "options": ["--format", "nf4"]})

    parts = (sf_file("qsparse-part.json", marker(0, ["s0.safetensors"])) +
             sf_file("config.json", config) + sf_file("s0.safetensors", shard0) +
             sf_file("tokenizer.json", '{"v": 1}') +
             sf_file("qsparse-part.json", marker(1, ["s1.safetensors"]), True) +
             sf_file("config.json", config, True) + sf_file("s1.safetensors", shard1, True))
    write(t, "merge_two_parts", bytes([1]) + parts)
    write(t, "merge_swapped", bytes([3]) + parts)
    bad = ["../../escaped.safetensors", "s1.safetensors"]
    write(t, "merge_escaping_name", bytes([1]) +
          sf_file("qsparse-part.json", marker(0, bad[:1], bad)) + sf_file("config.json", config) +
          sf_file("qsparse-part.json", marker(1, bad[1:], bad), True) +
          sf_file("config.json", config, True) + sf_file("s1.safetensors", shard1, True))
    write(t, "merge_link_out", bytes([1]) +
          sf_file("qsparse-part.json", marker(0, ["s0.safetensors"])) +
          sf_link("config.json", "../secret.txt") + sf_link("s0.safetensors", "../../secret.txt") +
          sf_file("qsparse-part.json", marker(1, ["s1.safetensors"]), True) +
          sf_file("config.json", config, True) + sf_file("s1.safetensors", shard1, True))
    write(t, "merge_duplicate_tensor", bytes([1]) +
          sf_file("qsparse-part.json", marker(0, ["s0.safetensors"])) +
          sf_file("config.json", config) + sf_file("s0.safetensors", shard0) +
          sf_file("qsparse-part.json", marker(1, ["s1.safetensors"]), True) +
          sf_file("config.json", config, True) + sf_file("s1.safetensors", shard0, True))


if __name__ == "__main__":
    quantize_corpus()
    dequantize_corpus()
    sp24_corpus()
    safetensors_corpus()
    observer_corpus()
    matmul_corpus()
    hessian_corpus()
    sidefiles_corpus()
    total = sum(len(fs) for _, _, fs in os.walk(CORPUS))
    print(f"{total} seed files under {os.path.relpath(CORPUS)}")
