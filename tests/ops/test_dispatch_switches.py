"""Kernel-path switches: HINFER_FUSE_LAUNCHES (each fusion up to its default rows, none, or a comma list of the
named fusions at any rows; an unknown name is an error) and HINFER_INT4_WGMMA (a row count)."""

from __future__ import annotations

import pytest

from hinfer.ops.dispatch import FUSIONS, launch_fusions


def test_default_rows_none_or_a_list(monkeypatch):
    monkeypatch.delenv("HINFER_FUSE_LAUNCHES", raising=False)
    assert [n for n in FUSIONS if launch_fusions(n, 1)] == [n for n, most in FUSIONS.items() if most != 0]
    assert [n for n in FUSIONS if launch_fusions(n, 8)] == [n for n, most in FUSIONS.items() if most is None]
    monkeypatch.setenv("HINFER_FUSE_LAUNCHES", "0")
    assert not any(launch_fusions(n, 1) for n in FUSIONS)
    monkeypatch.setenv("HINFER_FUSE_LAUNCHES", "slot_sum, gate")
    assert [n for n in FUSIONS if launch_fusions(n, 8)] == ["slot_sum", "gate"]
    with pytest.raises(ValueError, match="unknown launch fusion"):
        launch_fusions("routr", 1)


def test_int4_wgmma_rows(monkeypatch):
    from hinfer.ops.dispatch import int4_wgmma_rows

    monkeypatch.delenv("HINFER_INT4_WGMMA", raising=False)
    assert int4_wgmma_rows() == 0
    monkeypatch.setenv("HINFER_INT4_WGMMA", "16")
    assert int4_wgmma_rows() == 16
    monkeypatch.setenv("HINFER_INT4_WGMMA", "on")
    with pytest.raises(ValueError, match="row count"):
        int4_wgmma_rows()
