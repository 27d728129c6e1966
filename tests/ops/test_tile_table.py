"""The tile lookup (hinfer/ops/triton/tiles/table.py): buckets, when a tuned entry is taken, and the entries
the sweeps write (JSON for HINFER_TILES, lines for tuned.py) reading back as the same tiles."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path
from unittest import mock

import pytest

from hinfer.ops.triton.tiles import forms, table
from hinfer.ops.triton.tiles.attention import decode_config
from hinfer.ops.triton.tiles.forms import DecodeTile, MoeConfig, SkinnyConfig, Tile
from hinfer.ops.triton.tiles.linear import mma_config, skinny_config
from hinfer.ops.triton.tiles.moe import experts_mma_tile, pick_config

ROOT = Path(__file__).resolve().parents[2]
SKINNY = SkinnyConfig(64, 128, 16, 2, 4, 3)
MOE = MoeConfig(Tile(32, 64, 64, 4, 3, swap=True), Tile(32, 128, 64, 4, 3, swap=True))


def test_m_bucket_is_the_next_power_of_two_up_to_the_cap():
    ms = (0, 1, 2, 3, 5, 16, 17, 64, 65, 9000)
    assert [table.m_bucket(m) for m in ms] == [1, 1, 2, 4, 8, 16, 32, 64, 64, 64]
    assert table.m_bucket(3000, 1 << 16) == 4096


def test_a_tuned_entry_wins_where_it_fits_the_call():
    key = (forms.BF16, 1000, 2000, 8)
    with mock.patch.dict(table.TABLE, {key: SKINNY}):
        assert skinny_config(forms.BF16, 5, 1000, 2000, sms=132) == SKINNY  # M 5..8 share the bucket
        assert skinny_config(forms.BF16, 4, 1000, 2000, sms=132) != SKINNY  # another bucket
    gemv = SkinnyConfig(32, 256, 1, 1, 4, 3)
    with mock.patch.dict(table.TABLE, {(forms.BF16, 1000, 2000, 2): gemv}):
        assert skinny_config(forms.BF16, 2, 1000, 2000, sms=132).block_m == 16  # a GEMV tile: one row only


def test_int4_mma_fills_untuned_buckets_from_above():
    tile = SkinnyConfig(128, 128, 8, 2, 4, 2)
    with mock.patch.dict(table.TABLE, {(forms.INT4_MMA, 1024, 2048, 8): tile}):
        assert mma_config(2, 1024, 2048, sms=132) == tile  # bucket 2, then 4, then 8's entry
        assert mma_config(9, 1024, 2048, sms=132).block_m == 16  # 8's tile holds 8 rows only


def test_a_finer_bucket_takes_its_own_entry_else_the_power_of_two_above():
    fam = forms.MOE_INT4_MMA
    assert [table.m_bucket(m, 512, (24,)) for m in (9, 17, 18, 24, 25, 27, 33)] == [16, 24, 24, 24, 32, 32, 64]
    two, three = SkinnyConfig(32, 128, 8, 1, 2, 2, max_regs=96), SkinnyConfig(32, 128, 8, 1, 2, 2, max_regs=128)
    with mock.patch.dict(table.TABLE, {(fam, 2048, 3072, 24): two, (fam, 2048, 3072, 32): three}):
        assert experts_mma_tile(18, 2048, 3072, 18) == two  # two tokens' 18 pairs
        assert experts_mma_tile(27, 2048, 3072, 27) == three  # three tokens'
    with mock.patch.dict(table.TABLE, {(fam, 1024, 3072, 32): three}):
        assert experts_mma_tile(18, 1024, 3072, 18) == three  # no entry at 24: the 32 bucket's


def test_a_tiles_file_may_name_a_finer_bucket_of_its_family_only(tmp_path):
    tile = SkinnyConfig(32, 128, 8, 1, 2, 2, max_regs=96)
    path = tmp_path / "t.json"
    table.write(path, [table.entry(forms.MOE_INT4_MMA, 2048, 512, 24, tile)])
    assert table.load(path) == {(forms.MOE_INT4_MMA, 2048, 512, 24): tile}
    table.write(path, [table.entry(forms.INT4_MMA, 2048, 512, 24, tile)])
    with pytest.raises(ValueError, match="finer buckets"):
        table.load(path)


def test_moe_and_attention_take_entries_too():
    with mock.patch.dict(table.TABLE, {("moe_bf16", 512, 2048, 2048): MOE}):
        assert pick_config(1500, 8, 256, 2048, 512) == MOE
        assert pick_config(1500, 8, 256, 2048, 512, "int4") != MOE
    tile = DecodeTile(64, 4, 4, 2)
    with mock.patch.dict(table.TABLE, {("attention_decode", 6, 256, 2): tile}):
        assert decode_config(2, 6, 256) == tile


def test_decode_tiles_are_keyed_by_kv_format():
    tile = DecodeTile(64, 4, 3, 2)
    with mock.patch.dict(table.TABLE, {(forms.attention_decode_family("k8v4"), 6, 256, 2): tile}):
        assert decode_config(2, 6, 256, "k8v4") == tile
        assert decode_config(2, 6, 256, "int8") != tile and decode_config(2, 6, 256) != tile
    assert decode_config(2, 6, 256, "fp32") == decode_config(2, 6, 256, "bf16")  # no tiles of its own


def test_entries_round_trip_through_json_and_source(tmp_path):
    entries = [table.entry("int4", 5120, 17408, 1, SKINNY), table.entry("moe_int4", 512, 2048, 8, MOE),
               table.entry("attention_decode", 6, 256, 1, DecodeTile(32, 4, 5, 3))]  # fmt: skip
    path = tmp_path / "tiles.json"
    table.write(path, entries)
    loaded = table.load(path)
    assert loaded == {(e["family"], e["n"], e["k"], e["m"]): t for e, t in
                      zip(entries, (SKINNY, MOE, DecodeTile(32, 4, 5, 3)), strict=True)}  # fmt: skip
    for (family, n, k, m), tile in loaded.items():
        line = table.source_line(family, n, k, m, tile)
        key, value = eval("{" + line.strip().rstrip(",") + "}", vars(forms)).popitem()
        assert (key, value) == ((family, n, k, m), tile)


@pytest.mark.parametrize(
    "bad",
    [{"family": "int5", "n": 1, "k": 1, "m": 1, "tile": {}},
     {"family": "int4", "n": 1, "k": 1, "m": 3, "tile": {}},
     {"family": "int4", "n": 1, "k": 1, "m": 1, "tile": {"block_q": 1}}],
)  # fmt: skip
def test_a_bad_entry_is_refused(tmp_path, bad):
    path = tmp_path / "tiles.json"
    path.write_text(json.dumps([bad]))
    with pytest.raises(ValueError):
        table.load(path)


def test_hinfer_tiles_overrides_the_packaged_entry(tmp_path):
    path = tmp_path / "tiles.json"
    table.write(path, [table.entry(forms.INT4_MMA, 14336, 5120, 8, SkinnyConfig(128, 128, 8, 2, 4, 2))])
    code = "from hinfer.ops.triton.tiles.linear import mma_config; print(mma_config(8, 14336, 5120))"
    env = dict(os.environ, HINFER_TILES=str(path), PYTHONPATH=str(ROOT))
    out = subprocess.run([sys.executable, "-c", code], env=env, capture_output=True, text=True, check=True).stdout
    assert out.strip() == repr(SkinnyConfig(128, 128, 8, 2, 4, 2))
    assert mma_config(8, 14336, 5120) == table.TUNED[(forms.INT4_MMA, 14336, 5120, 8)]  # here: the packaged tile
