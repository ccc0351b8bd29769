# SPDX-License-Identifier: MIT
"""Independent-reference tests: the library, loaded with ctypes straight from the shared object
named by QSPARSE_LIB (not through the Python binding), against numpy and ml_dtypes.

- f16 <-> f32 (docs/formats.md §0 rule 4) vs numpy astype: all 65536 f16 patterns and >= 1e6 f32.
- bf16 <-> f32 vs ml_dtypes.bfloat16: all 65536 bf16 patterns and >= 1e6 f32.
- FP8 E4M3 / E5M2 (§10) with scale 1.0 vs ml_dtypes float8_e4m3fn / float8_e5m2 casts, after
  clipping to +-448 / +-57344 (ml_dtypes does not saturate): >= 1e6 random f32 plus every finite
  f16 value; the scale from the data, fl(amax / max) and a division, vs numpy float32.
- E2M1 (§11) through MXFP4 with blocks whose amax lies in [4, 8), so that the FLOOR scale is 1,
  vs ml_dtypes.float4_e2m1fn; E4M3 through MXFP8 the same way (amax in [256, 512)).
- MXFP4 / MXFP8 with every scale (FLOOR and RCEIL) and NVFP4 (automatic and given s_global) on
  odd shapes salted with NaN / Inf, vs the §13 / §14 rules written in numpy with ml_dtypes casts.
- INT8 symmetric / asymmetric per tensor, row and group and LLM.int8 (§8, §9) vs the formulas
  written in numpy float32.

Every comparison runs on one context per ISA tier of the library's tier table that this CPU has
(qs_isa_tier_info; the scalar reference first) and on one with everything the CPU has. Run as a script (meson does): exit code 77 when numpy, ml_dtypes or pytest is missing.
"""
import ctypes
import os
import sys

try:
    import ml_dtypes
    import numpy as np
    import pytest
except ImportError:  # pragma: no cover - the skip path
    if __name__ == "__main__":
        sys.exit(77)
    raise

F32, F16, BF16 = 0, 1, 2
f32 = np.float32
FMT = {"int8": 3, "llm_int8": 4, "fp8_e4m3": 5, "fp8_e5m2": 6, "mxfp4": 7, "mxfp8": 8,
       "nvfp4": 9}
GRAN_TENSOR, GRAN_ROW, GRAN_GROUP = 0, 1, 2
PLANES = 4

# Values compared, per check (printed at the end of a script run).
COUNTS = {}


def count(name, n):
    COUNTS[name] = COUNTS.get(name, 0) + int(n)


class Allocator(ctypes.Structure):
    _fields_ = [("alloc", ctypes.c_void_p), ("free", ctypes.c_void_p), ("user", ctypes.c_void_p)]


class CtxParams(ctypes.Structure):
    _fields_ = [("num_threads", ctypes.c_int32), ("backend", ctypes.c_int32),
                ("isa_mask", ctypes.c_uint32), ("nonfinite", ctypes.c_int32),
                ("allocator", Allocator), ("reserved", ctypes.c_int64 * 8)]


class IsaTier(ctypes.Structure):
    _fields_ = [("name", ctypes.c_char_p), ("arch", ctypes.c_char_p),
                ("required", ctypes.c_uint32), ("allowed", ctypes.c_uint32),
                ("available", ctypes.c_int32), ("reserved", ctypes.c_int32)]


class QuantParams(ctypes.Structure):
    _fields_ = [("format", ctypes.c_int32), ("block_size", ctypes.c_int32),
                ("granularity", ctypes.c_int32), ("symmetric", ctypes.c_int32),
                ("double_quant", ctypes.c_int32), ("scale_rounding", ctypes.c_int32),
                ("scale", ctypes.c_float), ("reserved0", ctypes.c_int32),
                ("reserved", ctypes.c_int64 * 6)]


class QTensor(ctypes.Structure):
    _fields_ = [("data", ctypes.c_void_p), ("data_bytes", ctypes.c_int64),
                ("scale", ctypes.c_void_p), ("scale_bytes", ctypes.c_int64),
                ("zero_point", ctypes.c_void_p), ("zero_point_bytes", ctypes.c_int64),
                ("nested_scale", ctypes.c_void_p), ("nested_scale_bytes", ctypes.c_int64),
                ("global_scale", ctypes.c_float), ("nested_offset", ctypes.c_float),
                ("reserved", ctypes.c_int64 * 4)]


def load():
    path = os.environ.get("QSPARSE_LIB")
    if not path:
        pytest.skip("QSPARSE_LIB is not set")
    lib = ctypes.CDLL(path)
    P = ctypes.c_void_p
    i32, i64 = ctypes.c_int32, ctypes.c_int64
    lib.qs_ctx_params_init.argtypes = [ctypes.POINTER(CtxParams)]
    lib.qs_ctx_params_init.restype = None
    lib.qs_ctx_create.argtypes = [ctypes.POINTER(CtxParams), ctypes.POINTER(P)]
    lib.qs_ctx_create.restype = i32
    lib.qs_ctx_destroy.argtypes = [P]
    lib.qs_ctx_destroy.restype = None
    lib.qs_ctx_last_error.argtypes = [P]
    lib.qs_ctx_last_error.restype = ctypes.c_char_p
    lib.qs_isa_tier_count.argtypes = []
    lib.qs_isa_tier_count.restype = i32
    lib.qs_isa_tier_info.argtypes = [i32, ctypes.POINTER(IsaTier)]
    lib.qs_isa_tier_info.restype = i32
    lib.qs_ctx_isa_name.argtypes = [P]
    lib.qs_ctx_isa_name.restype = ctypes.c_char_p
    lib.qs_quant_params_init.argtypes = [ctypes.POINTER(QuantParams), i32]
    lib.qs_quant_params_init.restype = None
    lib.qs_quant_size.argtypes = [ctypes.POINTER(QuantParams), i64, i64, i32,
                                  ctypes.POINTER(i64)]
    lib.qs_quant_size.restype = i32
    lib.qs_quantize.argtypes = [P, ctypes.POINTER(QuantParams), P, i32, i64, i64,
                                ctypes.POINTER(QTensor)]
    lib.qs_quantize.restype = i32
    lib.qs_dequantize.argtypes = [P, ctypes.POINTER(QuantParams), ctypes.POINTER(QTensor), i64,
                                  i64, P, i32, i64]
    lib.qs_dequantize.restype = i32
    lib.qs_convert.argtypes = [P, P, i32, P, i32, i64, i64]
    lib.qs_convert.restype = i32
    return lib


class Lib:
    """The library and one context per ISA tier."""

    def __init__(self):
        self.lib = load()
        self.ctxs = []
        masks = []
        for i in range(self.lib.qs_isa_tier_count()):
            t = IsaTier()
            assert self.lib.qs_isa_tier_info(i, ctypes.byref(t)) == 0
            if t.available:
                masks.append(t.allowed)
        assert masks and masks[0] == 0  # the scalar reference first
        for mask in masks + [0xFFFFFFFF]:
            p = CtxParams()
            self.lib.qs_ctx_params_init(ctypes.byref(p))
            p.isa_mask = mask
            ctx = ctypes.c_void_p()
            assert self.lib.qs_ctx_create(ctypes.byref(p), ctypes.byref(ctx)) == 0
            self.ctxs.append(ctx)

    def close(self):
        for c in self.ctxs:
            self.lib.qs_ctx_destroy(c)

    def check(self, ctx, status):
        assert status == 0, (status, self.lib.qs_ctx_last_error(ctx).decode())

    def convert(self, ctx, src, dst_dtype):
        src = np.ascontiguousarray(src)
        sdt = {np.dtype(np.float32): F32, np.dtype(np.float16): F16,
               np.dtype(ml_dtypes.bfloat16): BF16}[src.dtype]
        out = np.empty(src.shape, dtype={F32: np.float32, F16: np.float16,
                                         BF16: ml_dtypes.bfloat16}[dst_dtype])
        self.check(ctx, self.lib.qs_convert(ctx, src.ctypes.data, sdt, out.ctypes.data,
                                            dst_dtype, src.size, out.nbytes))
        return out

    def params(self, fmt, **kw):
        p = QuantParams()
        self.lib.qs_quant_params_init(ctypes.byref(p), FMT[fmt])
        for k, v in kw.items():
            setattr(p, k, v)
        return p

    def quantize(self, ctx, p, x):
        """Quantize a 2-D f32 array; returns the planes as uint8 arrays and the struct."""
        x = np.ascontiguousarray(x, dtype=np.float32)
        rows, cols = x.shape
        planes = []
        for pl in range(PLANES):
            n = ctypes.c_int64()
            assert self.lib.qs_quant_size(ctypes.byref(p), rows, cols, pl, ctypes.byref(n)) == 0
            planes.append(np.zeros(n.value, dtype=np.uint8))
        q = QTensor()
        q.data, q.data_bytes = planes[0].ctypes.data, planes[0].size
        q.scale, q.scale_bytes = planes[1].ctypes.data, planes[1].size
        if planes[2].size:
            q.zero_point, q.zero_point_bytes = planes[2].ctypes.data, planes[2].size
        self.check(ctx, self.lib.qs_quantize(ctx, ctypes.byref(p), x.ctypes.data, F32, rows,
                                             cols, ctypes.byref(q)))
        return planes, q

    def dequantize(self, ctx, p, q, shape):
        out = np.empty(shape, dtype=np.float32)
        self.check(ctx, self.lib.qs_dequantize(ctx, ctypes.byref(p), ctypes.byref(q), shape[0],
                                               shape[1], out.ctypes.data, F32, out.nbytes))
        return out


@pytest.fixture(scope="module")
def qs():
    lib = Lib()
    yield lib
    lib.close()


RNG = np.random.default_rng(20261202)


def random_f32(n):
    """A mix: uniformly random bit patterns (every exponent, NaN and Inf included), normal values
    at scales 2^-30...2^30, and repeats of the specials."""
    bits = RNG.integers(0, 2**32, size=n // 2, dtype=np.uint64).astype(np.uint32).view(np.float32)
    m = n - bits.size
    normal = (RNG.standard_normal(m) * np.exp2(RNG.integers(-30, 31, size=m))).astype(np.float32)
    x = np.concatenate([bits, normal])
    specials = np.array([0.0, -0.0, np.inf, -np.inf, np.nan, -np.nan, 1e-45, 65504, 65520,
                         448, 464, 57344, 61440], dtype=np.float32)
    x[: specials.size] = specials
    return x


def all_f16_values():
    return np.arange(65536, dtype=np.uint32).astype(np.uint16).view(np.float16)


def assert_same_f(got, want, what):
    """Bit-identical, except that any NaN equals any NaN."""
    g = got.view(np.uint32 if got.itemsize == 4 else np.uint16)
    w = want.view(g.dtype)
    nan_g, nan_w = np.isnan(got.astype(np.float32)), np.isnan(want.astype(np.float32))
    bad = np.nonzero((g != w) & ~(nan_g & nan_w))[0]
    assert bad.size == 0, f"{what}: {bad.size} differ, first at {bad[0]}: {g[bad[0]]:#x} vs " \
                          f"{w[bad[0]]:#x}"
    assert np.array_equal(nan_g, nan_w), what


# ---- plain dtypes ------------------------------------------------------------------------------


def test_f16_all_patterns(qs):
    h = all_f16_values()
    for ctx in qs.ctxs:
        wide = qs.convert(ctx, h, F32)
        assert_same_f(wide, h.astype(np.float32), "f16 -> f32")
        back = qs.convert(ctx, wide, F16)
        assert_same_f(back, h, "f16 -> f32 -> f16")
        count("f16 patterns (both ways)", h.size)


def test_f16_from_f32(qs):
    x = random_f32(1_000_000)
    # every midpoint of adjacent f16 values and one f32 ulp either side: the rounding boundaries
    fin = all_f16_values().astype(np.float32)
    fin = np.unique(fin[np.isfinite(fin) & (fin >= 0)])
    mid = ((fin[:-1].astype(np.float64) + fin[1:]) / 2).astype(np.float32)
    x = np.concatenate([x, mid, -mid, np.nextafter(mid, np.float32(0)),
                        np.nextafter(mid, np.float32(np.inf))])
    with np.errstate(over="ignore"):
        want = x.astype(np.float16)
    for ctx in qs.ctxs:
        assert_same_f(qs.convert(ctx, x, F16), want, "f32 -> f16")
        count("f32 -> f16", x.size)


def test_bf16(qs):
    b = np.arange(65536, dtype=np.uint32).astype(np.uint16).view(ml_dtypes.bfloat16)
    x = random_f32(1_000_000)
    with np.errstate(invalid="ignore", over="ignore"):
        want = x.astype(ml_dtypes.bfloat16)
    for ctx in qs.ctxs:
        assert_same_f(qs.convert(ctx, b, F32), b.astype(np.float32), "bf16 -> f32")
        got = qs.convert(ctx, x, BF16)
        assert_same_f(got, want, "f32 -> bf16")
        # NaN bits are pinned by the spec: (u >> 16) | 0x0040
        nan = np.isnan(x)
        u = x.view(np.uint32)[nan]
        assert np.array_equal(got.view(np.uint16)[nan], ((u >> 16) | 0x40).astype(np.uint16))
        count("bf16 patterns -> f32", b.size)
        count("f32 -> bf16", x.size)


# ---- FP8 ---------------------------------------------------------------------------------------

FP8 = [("fp8_e4m3", ml_dtypes.float8_e4m3fn, 448.0), ("fp8_e5m2", ml_dtypes.float8_e5m2, 57344.0)]


def fp8_reference(y, dtype, vmax):
    """Saturating RNE codes from ml_dtypes; NaN -> 0x7F | sign (§10 rule 1)."""
    codes = np.clip(y, -vmax, vmax).astype(dtype).view(np.uint8).copy()
    nan = np.isnan(y)
    codes[nan] = np.where(np.signbit(y[nan]), 0xFF, 0x7F)
    return codes


@pytest.mark.parametrize("fmt,dtype,vmax", FP8)
def test_fp8_unit_scale(qs, fmt, dtype, vmax):
    f16 = all_f16_values().astype(np.float32)
    x = np.concatenate([random_f32(1_000_000), f16])
    want = fp8_reference(x, dtype, vmax)
    for ctx in qs.ctxs:
        p = qs.params(fmt, scale=1.0)
        planes, q = qs.quantize(ctx, p, x.reshape(1, -1))
        bad = np.nonzero(planes[0] != want)[0]
        assert bad.size == 0, f"{fmt}: {bad.size} codes differ, first x = {x[bad[0]]!r}: " \
                              f"{planes[0][bad[0]]:#x} vs {want[bad[0]]:#x}"
        assert planes[1].view(np.float32)[0] == 1.0
        count(f"{fmt} scale 1 codes", x.size)
        # decode: every code, against ml_dtypes' value
        codes = np.arange(256, dtype=np.uint8)
        q2 = QTensor()
        one = np.array([1.0], dtype=np.float32)
        q2.data, q2.data_bytes = codes.ctypes.data, 256
        q2.scale, q2.scale_bytes = one.ctypes.data, 4
        assert_same_f(qs.dequantize(ctx, p, q2, (1, 256))[0], codes.view(dtype).astype(np.float32),
                      f"{fmt} decode")


@pytest.mark.parametrize("fmt,dtype,vmax", FP8)
def test_fp8_scale_from_data(qs, fmt, dtype, vmax):
    for shape in [(1, 1), (33, 129), (512, 512)]:
        x = (RNG.standard_normal(shape) * 3).astype(np.float32)
        amax = np.float32(np.max(np.abs(x)))
        s = np.float32(amax / np.float32(vmax))  # fl(amax / max)
        want = fp8_reference((x / s).astype(np.float32).ravel(), dtype, vmax)
        dq = (want.view(dtype).astype(np.float32) * s).astype(np.float32)
        for ctx in qs.ctxs:
            p = qs.params(fmt)
            planes, q = qs.quantize(ctx, p, x)
            assert planes[1].view(np.float32)[0] == s
            assert np.array_equal(planes[0], want), fmt
            assert_same_f(qs.dequantize(ctx, p, q, shape).ravel(), dq, f"{fmt} dequant")
            count(f"{fmt} scale from data", x.size)


# ---- E2M1 and E4M3 inside MX blocks with a unit scale ------------------------------------------


def unit_scale_blocks(n_blocks, lo, hi, vmax):
    """Blocks of 32 whose amax is in [lo, hi) (FLOOR scale byte 0x7F) holding values in
    [-vmax*1.2, vmax*1.2] capped in magnitude below hi, plus the element grid's midpoints."""
    x = RNG.uniform(-vmax * 1.2, vmax * 1.2, size=(n_blocks, 32)).astype(np.float32)
    x = np.clip(x, np.nextafter(np.float32(-hi), np.float32(0)),
                np.nextafter(np.float32(hi), np.float32(0)))
    x[:, 0] = RNG.uniform(lo, hi, size=n_blocks).astype(np.float32) * \
        np.where(RNG.integers(0, 2, n_blocks) == 1, 1, -1)
    x[:, 0] = np.clip(x[:, 0], -np.nextafter(np.float32(hi), np.float32(0)),
                      np.nextafter(np.float32(hi), np.float32(0)))
    return x


def test_e2m1_via_mxfp4(qs):
    if not hasattr(ml_dtypes, "float4_e2m1fn"):
        pytest.skip("ml_dtypes without float4_e2m1fn")
    e2m1 = ml_dtypes.float4_e2m1fn
    x = unit_scale_blocks(40_000, 4.0, 8.0, 6.0)
    # every midpoint between E2M1 magnitudes, and one ulp either side, with both signs
    grid = np.array([0, 0.5, 1, 1.5, 2, 3, 4, 6], dtype=np.float32)
    mids = ((grid[:-1] + grid[1:]) / 2).astype(np.float32)
    edge = np.concatenate([mids, np.nextafter(mids, np.float32(0)),
                           np.nextafter(mids, np.float32(9)), grid, [6.5, 7.9999995]])
    edge = np.concatenate([edge, -edge, [-0.0]]).astype(np.float32)
    x[: edge.size, 1] = edge
    want = np.clip(x, -6, 6).astype(e2m1).view(np.uint8) & 0xF
    # RCEIL gives the unit scale when the block amax is exactly 6
    x6 = np.clip(x, -6, 6)
    x6[:, 0] = np.where(x6[:, 0] < 0, -6.0, 6.0)
    want6 = x6.astype(e2m1).view(np.uint8) & 0xF
    for ctx in qs.ctxs:
        for rounding, xx, ww in ((0, x, want), (1, x6, want6)):
            p = qs.params("mxfp4", scale_rounding=rounding)
            planes, q = qs.quantize(ctx, p, xx)
            assert np.all(planes[1] == 0x7F)
            data = planes[0]
            codes = np.empty(data.size * 2, dtype=np.uint8)
            codes[0::2], codes[1::2] = data & 0xF, data >> 4  # low nibble first (§11)
            bad = np.nonzero(codes != ww.ravel())[0]
            assert bad.size == 0, f"e2m1: {bad.size} differ, first x = {xx.ravel()[bad[0]]!r}"
            count("e2m1 via mxfp4", xx.size)


def test_e4m3_via_mxfp8(qs):
    dt = ml_dtypes.float8_e4m3fn
    x = unit_scale_blocks(20_000, 256.0, 512.0, 448.0)
    e4 = np.arange(0, 0x7F, dtype=np.uint8).view(dt).astype(np.float32)
    mids = ((e4[:-1].astype(np.float64) + e4[1:]) / 2).astype(np.float32)
    edge = np.concatenate([mids, np.nextafter(mids, np.float32(0)),
                           np.nextafter(mids, np.float32(1000))])
    flat = x[:, 1:].ravel().copy()
    flat[: 2 * edge.size] = np.concatenate([edge, -edge])
    x[:, 1:] = flat.reshape(x.shape[0], 31)
    want = fp8_reference(x.ravel(), dt, 448.0)
    for ctx in qs.ctxs:
        p = qs.params("mxfp8")
        planes, q = qs.quantize(ctx, p, x)
        assert np.all(planes[1] == 0x7F)
        assert np.array_equal(planes[0], want)
        count("e4m3 via mxfp8", x.size)


# ---- MX and NVFP4 with every scale, in numpy + ml_dtypes ---------------------------------------


def pad_blocks(x, block):
    """[rows, cols] -> [rows, nb, block], the missing elements of a row's last block as +0.0."""
    rows, cols = x.shape
    nb = -(-cols // block)
    pad = np.zeros((rows, nb * block), dtype=f32)
    pad[:, :cols] = x
    return pad.reshape(rows, nb, block)


def pack_low_first(codes, cols):
    """[rows, >= cols] nibble codes -> rows * ceil(cols / 2) bytes, element 2k in the low nibble."""
    c = codes[:, :cols].astype(np.uint8)
    if cols % 2:
        c = np.concatenate([c, np.zeros((c.shape[0], 1), np.uint8)], axis=1)
    return (c[:, 0::2] | (c[:, 1::2] << 4)).ravel()


def mx_reference(x, fmt, rceil):
    """§13: scale bytes and data bytes of MXFP4 / MXFP8 (E4M3)."""
    emax, vmax = (2, 6.0) if fmt == "mxfp4" else (8, 448.0)
    b = pad_blocks(x, 32)
    finite = np.all(np.isfinite(b), axis=2)
    amax = np.max(np.abs(np.where(np.isfinite(b), b, f32(0))), axis=2)
    _, e = np.frexp(amax)  # amax = m 2^e, m in [0.5, 1): floor(log2 amax) = e - 1, exactly
    if rceil:
        s = e - 1 - emax - 1
        for _ in range(3):  # the smallest s with vmax 2^s >= amax
            s = np.where(np.ldexp(vmax, s) < amax.astype(np.float64), s + 1, s)
    else:
        s = e - 1 - emax
    s = np.maximum(np.where(amax == 0, -127, s), -127)
    with np.errstate(invalid="ignore"):  # NaN blocks: their codes are replaced below
        y = np.ldexp(b, -s[..., None]).astype(f32)
    if fmt == "mxfp4":
        codes = np.clip(y, -vmax, vmax).astype(ml_dtypes.float4_e2m1fn).view(np.uint8) & 0xF
    else:
        codes = fp8_reference(y.ravel(), ml_dtypes.float8_e4m3fn, vmax).reshape(y.shape)
    codes = np.where(finite[..., None], codes, 0).astype(np.uint8)
    scales = np.where(finite, s + 127, 0xFF).astype(np.uint8).ravel()
    codes = codes.reshape(x.shape[0], -1)
    data = pack_low_first(codes, x.shape[1]) if fmt == "mxfp4" else codes[:, :x.shape[1]].ravel()
    return scales, data


def nan_amax(a, axis):
    """max |a| with every NaN ignored, signaling ones too (numpy's fmax may not ignore those)."""
    a = np.abs(a)
    return np.max(np.where(np.isnan(a), f32(0), a), axis=axis).astype(f32)


def nvfp4_reference(x, given):
    """§14: s_global, scale bytes and data bytes."""
    with np.errstate(invalid="ignore", over="ignore", divide="ignore"):
        amax_t = nan_amax(x.ravel(), axis=0)
        sg = f32(given) if given > 0 else f32(amax_t / f32(2688))
        if sg == 0:
            sg = f32(1)
        b = pad_blocks(x, 16)
        amax = nan_amax(b, axis=2)
        S = (amax / f32(f32(6) * sg)).astype(f32)
        Sc = np.where(S < f32(2.0**-9), f32(2.0**-9), S)
        code = (np.clip(Sc, 0, 448).astype(ml_dtypes.float8_e4m3fn).view(np.uint8) & 0x7F)
        code = np.where(S == 0, 0x38, code).astype(np.uint8)
        den = (code.view(ml_dtypes.float8_e4m3fn).astype(f32) * sg).astype(f32)
        y = (b / den[..., None]).astype(f32)
        p = np.clip(y, -6, 6).astype(ml_dtypes.float4_e2m1fn).view(np.uint8) & 0xF
    p = np.where(np.isnan(y) | (den[..., None] == 0), 0, p).astype(np.uint8)
    return sg, code.ravel(), pack_low_first(p.reshape(x.shape[0], -1), x.shape[1])


def salted(rows, cols, specials):
    x = (RNG.standard_normal((rows, cols)) *
         np.exp2(RNG.integers(-20, 20, size=(rows, cols)))).astype(f32)
    if specials:
        idx = RNG.integers(0, x.size, size=max(1, x.size // 500))
        x.ravel()[idx] = RNG.choice(np.array([np.nan, np.inf, -np.inf, 0.0, -0.0, 1e-45,
                                              7.9999995, 448, 6.0], dtype=f32), size=idx.size)
        # signaling NaNs of both signs: ignored by every amax like quiet ones
        x.ravel()[idx[::7]] = np.array([0x7FA00000, 0xFFA00001], dtype=np.uint32).view(f32)[
            np.arange(idx[::7].size) % 2]
    return x


MX_SHAPES = [(1, 1), (3, 31), (17, 33), (64, 4096), (5, 1000), (300, 257)]


@pytest.mark.parametrize("fmt", ["mxfp4", "mxfp8"])
def test_mx_full(qs, fmt):
    if fmt == "mxfp4" and not hasattr(ml_dtypes, "float4_e2m1fn"):
        pytest.skip("ml_dtypes without float4_e2m1fn")
    for k, (rows, cols) in enumerate(MX_SHAPES):
        x = salted(rows, cols, k % 2 == 1)
        for rceil in (0, 1):
            scales, data = mx_reference(x, fmt, rceil)
            for ctx in qs.ctxs:
                planes, _ = qs.quantize(ctx, qs.params(fmt, scale_rounding=rceil), x)
                assert np.array_equal(planes[1], scales), (fmt, rows, cols, rceil)
                bad = np.nonzero(planes[0] != data)[0]
                assert bad.size == 0, (fmt, rows, cols, rceil, bad[:4])
                count(f"{fmt} all scales", x.size)


def test_nvfp4_full(qs):
    if not hasattr(ml_dtypes, "float4_e2m1fn"):
        pytest.skip("ml_dtypes without float4_e2m1fn")
    for k, (rows, cols) in enumerate(MX_SHAPES):
        x = salted(rows, cols, k % 2 == 1)
        for given in (0.0, 0.037):
            sg, scales, data = nvfp4_reference(x, given)
            for ctx in qs.ctxs:
                planes, q = qs.quantize(ctx, qs.params("nvfp4", scale=given), x)
                assert np.float32(q.global_scale).view(np.uint32) == sg.view(np.uint32)
                assert np.array_equal(planes[1], scales), (rows, cols, given)
                bad = np.nonzero(planes[0] != data)[0]
                assert bad.size == 0, (rows, cols, given, bad[:4])
                count("nvfp4", x.size)


# ---- INT8 --------------------------------------------------------------------------------------


def int8_sym_ref(units):
    """§9 symmetric over each row of `units` (a 2-D view: one scale unit per row)."""
    amax = np.max(np.abs(units), axis=1).astype(f32)
    zero = amax == 0
    safe = np.where(zero, f32(1), amax)
    s = np.where(zero, f32(1), (safe / f32(127)).astype(f32)).astype(f32)
    mul = np.where(zero, f32(0), (f32(127) / safe).astype(f32)).astype(f32)
    q = np.clip(np.rint((units * mul[:, None]).astype(f32)), -127, 127).astype(np.int8)
    return q, s, None


def int8_asym_ref(units):
    lo = np.minimum(np.min(units, axis=1), f32(0)).astype(f32)
    hi = np.maximum(np.max(units, axis=1), f32(0)).astype(f32)
    same = hi == lo
    s = ((hi - lo).astype(f32) / f32(255)).astype(f32)
    s = np.maximum(s, np.finfo(f32).eps).astype(f32)
    s = np.where(same, f32(1), s).astype(f32)
    zp = np.clip(-128 - np.rint((lo / s).astype(f32)), -128, 127)
    zp = np.where(same, 0, zp).astype(np.int32)
    inv = (f32(1) / s).astype(f32)
    q = np.clip(np.rint((units * inv[:, None]).astype(f32)) + zp[:, None], -128, 127)
    return q.astype(np.int8), s, zp.astype(np.int8)


@pytest.mark.parametrize("symmetric", [1, 0])
@pytest.mark.parametrize("gran", [GRAN_TENSOR, GRAN_ROW, GRAN_GROUP])
def test_int8(qs, symmetric, gran):
    rows, cols, group = 97, 1030, 103
    x = (RNG.standard_normal((rows, cols)) *
         np.exp2(RNG.integers(-6, 6, size=(rows, 1)))).astype(f32)
    x[3] = 0.0                       # an all-zero row
    x[5] = np.abs(x[5])              # all positive: lo clamps to 0
    x[7] = -np.abs(x[7])             # all negative: hi clamps to 0
    units = {GRAN_TENSOR: x.reshape(1, -1), GRAN_ROW: x,
             GRAN_GROUP: x.reshape(-1, group)}[gran]
    q, s, zp = (int8_sym_ref if symmetric else int8_asym_ref)(units)
    zpi = np.zeros(s.size, dtype=np.int32) if zp is None else zp.astype(np.int32)
    dq = ((q.astype(np.int32) - zpi[:, None]).astype(f32) * s[:, None]).astype(f32)
    for ctx in qs.ctxs:
        p = qs.params("int8", symmetric=symmetric, granularity=gran,
                      block_size=group if gran == GRAN_GROUP else 0)
        planes, qt = qs.quantize(ctx, p, x)
        assert np.array_equal(planes[0].view(np.int8), q.ravel())
        assert np.array_equal(planes[1].view(f32), s)
        if zp is not None:
            assert np.array_equal(planes[2].view(np.int8), zp)
        assert_same_f(qs.dequantize(ctx, p, qt, x.shape).ravel(), dq.ravel(), "int8 dequant")
        count("int8 (all variants)", x.size)


def test_llm_int8(qs):
    rows, cols = 129, 1001
    x = (RNG.standard_normal((rows, cols)) * np.exp2(RNG.integers(-8, 8, (rows, 1)))).astype(f32)
    x[0] = 0.0
    x[1, :4] = np.array([1e-38, -5e-39, 0, 2e-39], dtype=f32)
    x[1, 4:] = 0.0
    x[2, 7] = np.nan
    stats = nan_amax(x, axis=1)
    with np.errstate(divide="ignore", invalid="ignore", over="ignore"):
        mul = (f32(127) / stats).astype(f32)
        prod = (x * mul[:, None]).astype(f32)
    prod = np.where(np.isnan(prod), f32(0), prod)
    q = np.clip(np.rint(prod), -127, 127).astype(np.int8)
    assert list(q[1, :4]) == [127, -127, 0, 127]
    c = f32(7.874015718698502e-3)
    dq = ((q.astype(f32) * stats[:, None]).astype(f32) * c).astype(f32)
    for ctx in qs.ctxs:
        p = qs.params("llm_int8")
        planes, qt = qs.quantize(ctx, p, x)
        assert np.array_equal(planes[0].view(np.int8), q.ravel())
        assert np.array_equal(planes[1].view(f32), stats)
        assert_same_f(qs.dequantize(ctx, p, qt, x.shape).ravel(), dq.ravel(), "llm dequant")
        count("llm_int8", x.size)


def test_reference_detects_a_difference():
    """The comparison helper fails on one flipped bit (a check that cannot fail is a defect)."""
    a = np.array([1.0, 2.0, np.nan], dtype=f32)
    b = a.copy()
    b.view(np.uint32)[1] ^= 1
    with pytest.raises(AssertionError):
        assert_same_f(a, b, "negative")
    assert_same_f(a, a.copy(), "positive")


if __name__ == "__main__":
    sys.dont_write_bytecode = True
    rc = pytest.main([__file__, "-q", "-p", "no:cacheprovider"])
    # pytest imported this file again under its module name; its counters are the ones filled
    mod = sys.modules.get("test_reference")
    for name, n in sorted((mod.COUNTS if mod else COUNTS).items()):
        print(f"{name}: {n} values compared")
    sys.exit(int(rc))
