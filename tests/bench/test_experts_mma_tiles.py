"""bench/experts_mma_tiles.py's --x: how every swept tile reads x (the sweep itself runs on the GPU)."""

from __future__ import annotations

import pytest

pytest.importorskip("triton")

from bench.experts_mma_tiles import read_x  # noqa: E402
from hinfer.ops.triton.tiles.forms import SkinnyConfig  # noqa: E402

TILE = SkinnyConfig(128, 128, 8, 4, 4, 4)


def test_read_x(monkeypatch):
    monkeypatch.delenv("HINFER_X_STAGED", raising=False)
    assert read_x(TILE, 2048, True, "decode").x_staged  # one pair a block: staged as the decode does
    assert not read_x(TILE, 2048, False, "decode").x_staged  # blocks of rows: per group
    assert read_x(TILE, 2048, False, "staged").x_staged  # 4 groups x 8 rows: 8 KB
    big = SkinnyConfig(128, 128, 8, 1, 4, 4)
    assert read_x(big, 3072, False, "staged") == big  # 32 groups x 8 rows: 64 KB, does not fit
    assert not read_x(read_x(TILE, 2048, True, "staged"), 2048, True, "per-group").x_staged
