"""bench/tile_variants.py: the HINFER_TILES files hold the model's packaged entries changed where the change
applies, and read back through the tile table's loader."""

from __future__ import annotations

from dataclasses import replace

from bench.tile_variants import main, model_shapes
from hinfer.ops.triton.tiles import table
from hinfer.ops.triton.tiles.forms import INT4_MMA, MOE_INT4_MMA
from hinfer.ops.triton.tiles.tuned import TUNED


def test_caps_files_hold_the_packaged_entries_capped(tmp_path):
    args = ["--config", "qwen3.6-35b-a3b", "--variants", "max_regs=128", "max_regs=96", "--out-dir", str(tmp_path)]
    assert main(args) == 0
    shapes = model_shapes("qwen3.6-35b-a3b")
    assert (1024, 2048) in shapes[MOE_INT4_MMA] and (2048, 512) in shapes[MOE_INT4_MMA]
    for family in (INT4_MMA, MOE_INT4_MMA):
        for cap in (128, 96):
            loaded = table.load(tmp_path / f"qwen3.6-35b-a3b-{family}-maxregs{cap}.json")
            want = {key: t for key, t in TUNED.items() if key[0] == family and key[1:3] in shapes[family]}
            assert loaded.keys() == want.keys() and want
            for key, tile in loaded.items():
                assert tile == replace(want[key], max_regs=cap)


def test_ring_pairs_go_only_to_tiles_with_x_ahead(tmp_path):
    main(["--config", "qwen3.6-27b", "--variants", "ring=3,ring_pairs=1", "--out-dir", str(tmp_path)])
    assert [p.name for p in tmp_path.iterdir()] == ["qwen3.6-27b-int4_mma-ring3-ringpairs1.json"]
    loaded = table.load(tmp_path / "qwen3.6-27b-int4_mma-ring3-ringpairs1.json")
    assert loaded and all(t.ring == 3 and t.ring_pairs is True and t.x_ahead for t in loaded.values())
    shapes = model_shapes("qwen3.6-27b")[INT4_MMA]
    want = [key for key, t in TUNED.items() if key[0] == INT4_MMA and key[1:3] in shapes and t.x_ahead
            and not t.fma_offset]  # the change sets the ring: every tile with x ahead takes it
    assert sorted(loaded) == sorted(want)


def test_a_ring_for_the_register_tiles_skips_fma_offset_ones(tmp_path):
    """ring=4,x_ahead=1 over the 35B-A3B's dense tiles (the register look-ahead today): every one changed that
    the kernel takes with a ring."""
    main(["--config", "qwen3.6-35b-a3b", "--variants", "ring=4,x_ahead=1,max_regs=96", "--families", "int4_mma",
          "--out-dir", str(tmp_path)])
    assert len(list(tmp_path.iterdir())) == 1
    loaded = table.load(tmp_path / "qwen3.6-35b-a3b-int4_mma-ring4-xahead1-maxregs96.json")
    assert loaded and all(t.ring == 4 and t.x_ahead and t.max_regs == 96 and not t.fma_offset
                          for t in loaded.values())


def test_max_m_changes_only_the_small_buckets(tmp_path):
    """--max-m 16: the experts' entries of one lane's bucket capped, the others left to the packaged tiles."""
    main(["--config", "qwen3.6-35b-a3b", "--variants", "max_regs=128", "--families", "moe_int4_mma", "--max-m", "16",
          "--out-dir", str(tmp_path)])  # fmt: skip
    loaded = table.load(tmp_path / "qwen3.6-35b-a3b-moe_int4_mma-maxregs128-m16.json")
    shapes = model_shapes("qwen3.6-35b-a3b")[MOE_INT4_MMA]
    want = {key for key in TUNED if key[0] == MOE_INT4_MMA and key[1:3] in shapes and key[3] <= 16}
    assert set(loaded) == want and want
    assert all(t.max_regs == 128 for t in loaded.values())


def test_a8_rows_files_hold_the_bf16_kernels_tiles(tmp_path):
    """--a8-rows: int4_a8 entries at those rows for every dense projection (not the bf16 head), each the bf16
    kernel's tile without x_ahead, one M bucket per row count."""
    from bench.linear_kernels import config_shapes
    from hinfer.ops.triton.tiles.forms import INT4_A8
    from hinfer.ops.triton.tiles.linear import mma_config

    assert main(["--config", "qwen3.6-27b", "--a8-rows", "2,4", "--out-dir", str(tmp_path)]) == 0
    loaded = table.load(tmp_path / "qwen3.6-27b-int4_a8-rows2-4.json")
    shapes = {(n, k) for name, n, k in config_shapes("qwen3.6-27b") if name != "lm_head"}
    assert {key[1:3] for key in loaded} == shapes and {key[3] for key in loaded} == {2, 4}
    for (family, n, k, m), tile in loaded.items():
        assert family == INT4_A8 and tile == replace(mma_config(m, n, k, sms=132), x_ahead=False)


def test_min_m_leaves_the_one_lane_bucket(tmp_path):
    """--min-m 32: the experts' buckets past one lane changed, one lane's (16) left packaged."""
    main(["--config", "qwen3.6-35b-a3b", "--variants", "max_regs=168", "--families", "moe_int4_mma", "--min-m", "32",
          "--out-dir", str(tmp_path)])  # fmt: skip
    loaded = table.load(tmp_path / "qwen3.6-35b-a3b-moe_int4_mma-maxregs168-from-m32.json")
    shapes = model_shapes("qwen3.6-35b-a3b")[MOE_INT4_MMA]
    want = {key for key in TUNED if key[0] == MOE_INT4_MMA and key[1:3] in shapes and key[3] >= 32}
    assert set(loaded) == want and want and all(key[3] > 16 for key in loaded)
    assert all(t.max_regs == 168 for t in loaded.values())
