"""A tile's x_staged (hinfer.ops.triton.linear_int4_mma.x_stage): the staged shape a launch asks for (groups
rounded up to a power of two, one row where a program reads one, BLOCK_M rows otherwise), the bound on its
shared memory, HINFER_X_STAGED's choice of tiles, and the sm_90 build of the dense and experts kernels with it
(a child process: the `compiled_child` fixture): x read from shared memory once per group, no spills. The
same bits as x read per group is a GPU test (tests/gpu/test_int4_mma.py, tests/gpu/test_moe_kernels.py)."""

from __future__ import annotations

from dataclasses import replace

import pytest

pytest.importorskip("triton")

from hinfer.ops.triton.linear_int4_mma import X_STAGE_BYTES, x_stage_shape, x_staged_choice  # noqa: E402
from hinfer.ops.triton.tiles.forms import SkinnyConfig  # noqa: E402

TILE = SkinnyConfig(128, 128, 8, 4, 4, 4)


def test_stage_shape():
    assert x_stage_shape(TILE, 2048, True) == (0, 1)  # not staged
    staged = replace(TILE, x_staged=True)
    assert x_stage_shape(staged, 2048, True) == (4, 1)  # 16 groups over 4 splits
    assert x_stage_shape(staged, 3072, True) == (8, 1)  # 6 a split, rounded up
    assert x_stage_shape(staged, 2048, False) == (4, 8)  # the tile's rows
    assert x_stage_shape(replace(staged, split_k=1), 5120, True) == (64, 1)  # 40 groups, 16 KB
    with pytest.raises(ValueError, match="shared memory"):
        x_stage_shape(replace(staged, split_k=1, block_m=16), 5120, False)  # 64 x 16 x 256 bytes
    assert 64 * 256 <= X_STAGE_BYTES


def test_staged_choice(monkeypatch):
    ahead = replace(TILE, x_ahead=True, ring=4, ring_pairs=True)
    monkeypatch.setenv("HINFER_X_STAGED", "tile")
    assert x_staged_choice(ahead, 2048, True) == ahead  # the table's tile
    monkeypatch.delenv("HINFER_X_STAGED")  # the default: one-row programs stage x
    got = x_staged_choice(ahead, 2048, True)
    assert got.x_staged and not got.x_ahead and not got.ring_pairs and got.ring == 4
    assert x_staged_choice(ahead, 2048, False) == ahead  # eight rows: only `all` stages them
    assert x_staged_choice(replace(TILE, split_k=1), 5120 * 4, True) == replace(TILE, split_k=1)  # 160 groups
    monkeypatch.setenv("HINFER_X_STAGED", "all")
    assert x_staged_choice(ahead, 2048, False).x_staged
    big = replace(TILE, split_k=1, block_m=16)
    assert x_staged_choice(big, 5120, False) == big  # does not fit: left as it is
    monkeypatch.setenv("HINFER_X_STAGED", "off")
    assert not x_staged_choice(replace(TILE, x_staged=True), 2048, True).x_staged
    monkeypatch.setenv("HINFER_X_STAGED", "yes")
    with pytest.raises(ValueError, match="HINFER_X_STAGED"):
        x_staged_choice(TILE, 2048, True)


def test_staged_launches_compile(compiled_child):
    res = compiled_child.call(__file__, "_compile", timeout=900)
    assert res.returncode == 0, res.stderr[-4000:]
    lines = {(v.split()[0], v.split()[1]): dict(item.split("=") for item in v.split()[2:])
             for v in res.stdout.splitlines() if v.startswith(("staged", "plain"))}  # fmt: skip
    assert len(lines) == 6, res.stdout
    for kernel in ("dense", "experts", "ring"):
        f, plain = lines["staged", kernel], lines["plain", kernel]
        # x's 16-byte shared loads (4 a group) and its buffer; no more spilled than reading x per group
        assert int(f["lds"]) >= 16 and int(f["smem"]) >= 1024, (kernel, f)
        assert int(f["stack"]) <= int(plain["stack"]) and int(f["regs"]) <= int(plain["regs"]) + 8, (kernel, f, plain)


def _compile() -> None:
    import re

    from hinfer.ops.triton.linear_aot import compile_gluon_sm90, resources, sass_of
    from hinfer.ops.triton.linear_int4_mma import int4_mma_variant
    from hinfer.ops.triton.moe_int4_mma import experts_mma_variant

    cases = {  # the 35B-A3B one-row GDN in_proj tile, its routed gate_up, and the 27B's ring tile
        "dense": int4_mma_variant(128, 8, 4, 4, True, True, 4, pdl=True, xg=4, xr=1),
        "experts": experts_mma_variant(128, 8, 4, True, True, 9, False, depth=4, pdl=True, split=4, act=True,
                                       route=8, xg=4, xr=1),  # fmt: skip
        "ring": int4_mma_variant(128, 8, 4, 4, True, True, 2, ring=4, pdl=True, max_regs=96, xg=16, xr=1),
    }
    for kernel, (_, fn, sig, cex, warps) in cases.items():
        for tag, xg in (("plain", 0), ("staged", cex["XG"])):
            c = dict(cex) | {"XG": xg} | ({"maxnreg": 128} if kernel == "experts" else {})
            k = compile_gluon_sm90(fn, sig, c, warps)
            r = resources(k)
            lds = len(re.findall(r"\bLDS", sass_of(k)))
            print(f"{tag} {kernel} lds={lds} stack={r['stack']} smem={r['smem']} regs={r['regs']}")
