"""bench/tile_caps.py: the capped HINFER_TILES files hold the model's packaged entries, each with its cap, and
read back through the tile table's loader."""

from __future__ import annotations

from bench.tile_caps import main, model_shapes
from hinfer.ops.triton.tiles import table
from hinfer.ops.triton.tiles.forms import INT4_MMA, MOE_INT4_MMA
from hinfer.ops.triton.tiles.tuned import TUNED


def test_caps_files_hold_the_packaged_entries_capped(tmp_path):
    assert main(["--config", "qwen3.6-35b-a3b", "--caps", "128,96", "--out-dir", str(tmp_path)]) == 0
    shapes = model_shapes("qwen3.6-35b-a3b")
    assert (1024, 2048) in shapes[MOE_INT4_MMA] and (2048, 512) in shapes[MOE_INT4_MMA]
    for family in (INT4_MMA, MOE_INT4_MMA):
        for cap in (128, 96):
            loaded = table.load(tmp_path / f"qwen3.6-35b-a3b-{family}-{cap}regs.json")
            want = {key: t for key, t in TUNED.items() if key[0] == family and key[1:3] in shapes[family]}
            assert loaded.keys() == want.keys() and want
            for key, tile in loaded.items():
                assert tile.max_regs == cap and tile == type(tile)(**{**vars(want[key]), "max_regs": cap})


def test_a_dense_model_has_no_experts_file(tmp_path):
    main(["--config", "qwen3.6-27b", "--caps", "96", "--out-dir", str(tmp_path)])
    assert [p.name for p in tmp_path.iterdir()] == ["qwen3.6-27b-int4_mma-96regs.json"]
