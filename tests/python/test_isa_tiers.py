# SPDX-License-Identifier: MIT
"""The ISA tier table as the binding sees it: names and masks come from the C library
(qs_isa_tier_info), backends() and set_backend() accept exactly those names, and a forced tier
gives a context named after it with the tier's mask clamped to the CPU."""

import ctypes

import pytest

import qsparse as qs
from qsparse import _lib


def test_table_comes_from_c():
    tiers = _lib.isa_tiers()
    cdll = _lib.lib()
    assert len(tiers) == cdll.qs_isa_tier_count() >= 2
    assert tiers[0] == {"name": "scalar", "arch": "any", "required": 0, "allowed": 0,
                        "available": True}
    names = [t["name"] for t in tiers]
    assert len(set(names)) == len(names)
    cpu = cdll.qs_cpu_isa()
    for t in tiers:
        assert t["required"] & ~t["allowed"] == 0
        assert t["arch"] in ("any", "x86_64", "aarch64")
        assert t["available"] == ((cpu & t["required"]) == t["required"])
    info = _lib.IsaTier()
    assert cdll.qs_isa_tier_info(len(tiers), ctypes.byref(info)) == _lib.QS_ERR_INVALID_ARG
    assert cdll.qs_isa_tier_info(-1, ctypes.byref(info)) == _lib.QS_ERR_INVALID_ARG


def test_backends_are_available_tiers():
    tiers = {t["name"]: t for t in _lib.isa_tiers()}
    got = qs.backends()
    assert got[0] == "scalar"
    for name in got:
        assert tiers[name]["available"]
    # order follows the table
    order = list(tiers)
    assert [order.index(n) for n in got] == sorted(order.index(n) for n in got)


def test_set_backend_uses_tier_masks():
    cdll = _lib.lib()
    cpu = cdll.qs_cpu_isa()
    try:
        for name in qs.backends():
            qs.set_backend(name)
            assert qs.backend() == name
            allows = next(t["allowed"] for t in _lib.isa_tiers() if t["name"] == name)
            assert cdll.qs_ctx_isa(_lib.ctx()) & ~(cpu & allows) == 0
        with pytest.raises(ValueError, match="unknown backend"):
            qs.set_backend("avx512-but-not-a-tier")
    finally:
        qs.set_backend("auto")
