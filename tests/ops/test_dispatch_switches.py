"""Kernel-path switches: HINFER_FUSE_LAUNCHES (each fusion up to its default rows, none, or a comma list of the
named fusions at any rows; an unknown name is an error), HINFER_FUSION_ROWS (the default rows moved) and HINFER_INT4_WGMMA (the tuned table, or a row count),
with the tile table's say on where the warpgroup-MMA kernel takes over."""

from __future__ import annotations

import pytest
import torch

from hinfer.ops.dispatch import FUSIONS, launch_fusions


def test_default_rows_none_or_a_list(monkeypatch):
    monkeypatch.delenv("HINFER_FUSE_LAUNCHES", raising=False)
    assert [n for n in FUSIONS if launch_fusions(n, 1)] == [n for n, most in FUSIONS.items() if most != 0]
    at_8 = [n for n, most in FUSIONS.items() if most is None or most >= 8]
    assert [n for n in FUSIONS if launch_fusions(n, 8)] == at_8
    monkeypatch.setenv("HINFER_FUSE_LAUNCHES", "0")
    assert not any(launch_fusions(n, 1) for n in FUSIONS)
    monkeypatch.setenv("HINFER_FUSE_LAUNCHES", "slot_sum, gate")
    assert [n for n in FUSIONS if launch_fusions(n, 8)] == ["slot_sum", "gate"]
    with pytest.raises(ValueError, match="unknown launch fusion"):
        launch_fusions("routr", 1)


def test_fusion_rows_move_the_limits(monkeypatch):
    """HINFER_FUSION_ROWS moves a fusion's row limit under the default switch and leaves the others alone."""
    monkeypatch.delenv("HINFER_FUSE_LAUNCHES", raising=False)
    monkeypatch.setenv("HINFER_FUSION_ROWS", "route=4, down_route=4,slot_sum=0")
    assert launch_fusions("route", 4) and not launch_fusions("route", 5) and launch_fusions("down_route", 3)
    assert not launch_fusions("slot_sum", 1) and launch_fusions("tail", FUSIONS["tail"])
    assert launch_fusions("gate", 64)  # no limit: untouched
    monkeypatch.setenv("HINFER_FUSION_ROWS", "rout=4")
    with pytest.raises(ValueError, match="HINFER_FUSION_ROWS"):
        launch_fusions("route", 1)
    monkeypatch.setenv("HINFER_FUSION_ROWS", "route=four")
    with pytest.raises(ValueError, match="HINFER_FUSION_ROWS"):
        launch_fusions("route", 1)


def test_int4_wgmma_rows(monkeypatch):
    from hinfer.ops.dispatch import int4_wgmma_rows

    monkeypatch.delenv("HINFER_INT4_WGMMA", raising=False)
    assert int4_wgmma_rows() is None
    monkeypatch.setenv("HINFER_INT4_WGMMA", "tuned")
    assert int4_wgmma_rows() is None
    monkeypatch.setenv("HINFER_INT4_WGMMA", "0")
    assert int4_wgmma_rows() == 0
    monkeypatch.setenv("HINFER_INT4_WGMMA", "16")
    assert int4_wgmma_rows() == 16
    monkeypatch.setenv("HINFER_INT4_WGMMA", "on")
    with pytest.raises(ValueError, match="row count"):
        int4_wgmma_rows()


def test_wgmma_takes_over_where_its_sweep_won(monkeypatch):
    """By default the warpgroup-MMA kernel takes a shape at an M bucket only where tuned.py has its entry (the
    sweep writes one only where it won); a row count overrides that at every shape; bf16 scales only."""
    from hinfer.ops.triton.tiles import table
    from hinfer.ops.triton.tiles.forms import INT4_WGMMA, SkinnyConfig
    from hinfer.quant.int4_mma_weight import Int4MmaWeight

    n, k = 192, 256
    w = Int4MmaWeight(torch.zeros(n // 16, 2 * k, dtype=torch.int32), torch.ones(k // 128, n).bfloat16(), None, n, k)
    monkeypatch.setitem(table.TABLE, (INT4_WGMMA, n, k, 8), SkinnyConfig(64, 128, 8, 1, 4, 1))
    monkeypatch.delenv("HINFER_INT4_WGMMA", raising=False)
    assert [m for m in range(1, 17) if w._wgmma_takes(m)] == [5, 6, 7, 8]
    monkeypatch.setenv("HINFER_INT4_WGMMA", "12")
    assert [m for m in range(1, 17) if w._wgmma_takes(m)] == [12, 13, 14, 15, 16]
    monkeypatch.setenv("HINFER_INT4_WGMMA", "0")
    assert not any(w._wgmma_takes(m) for m in range(1, 17))


def test_int4_decode_a8(monkeypatch):
    from hinfer.ops.dispatch import int4_decode_a8

    monkeypatch.delenv("HINFER_INT4_DECODE", raising=False)
    assert int4_decode_a8() == "tuned"
    for v in ("tuned", "a8", "bf16"):
        monkeypatch.setenv("HINFER_INT4_DECODE", v)
        assert int4_decode_a8() == v
    monkeypatch.setenv("HINFER_INT4_DECODE", "int8")
    with pytest.raises(ValueError, match="HINFER_INT4_DECODE"):
        int4_decode_a8()


def test_a8_takes_over_where_its_sweep_won(monkeypatch):
    """By default the int4 x int8 kernel takes a shape at an M bucket only where tuned.py has its entry (the sweep
    writes one only where it beat the bf16 kernel); `a8` wherever it fits (up to 8 rows); `bf16` never."""
    from hinfer.ops.triton.tiles import table
    from hinfer.ops.triton.tiles.forms import INT4_A8, SkinnyConfig
    from hinfer.quant.int4_mma_weight import Int4MmaWeight

    n, k = 256, 512
    w = Int4MmaWeight(torch.zeros(n // 16, 2 * k, dtype=torch.int32), torch.ones(k // 128, n).bfloat16(), None, n, k)
    monkeypatch.setitem(table.TABLE, (INT4_A8, n, k, 1), SkinnyConfig(128, 128, 8, 1, 4, 2, 4))

    def takes() -> list[int]:
        return [m for m in range(1, 17) if w._a8_takes(torch.zeros(m, k))]

    monkeypatch.delenv("HINFER_INT4_DECODE", raising=False)
    assert takes() == [1]
    monkeypatch.setenv("HINFER_INT4_DECODE", "a8")
    assert takes() == list(range(1, 9))
    monkeypatch.setenv("HINFER_INT4_DECODE", "bf16")
    assert takes() == []
