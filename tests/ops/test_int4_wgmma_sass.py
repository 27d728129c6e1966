"""The int4 warpgroup-MMA kernel with each group's MMA left in flight (`async_mma`) through Triton's whole sm_90
pipeline: its SASS keeps one group of HGMMAs in flight (WARPGROUP.DEPBAR.LE gsb0, 0x1) at every group but the
last of a round of two chunks, and no instruction writes a register an HGMMA in flight reads as A or accumulates
into before the wait that retires it (hinfer.ops.triton.linear_aot.wgmma_hazards, itself checked on listings with
such writes). In a child process (the `compiled_child` fixture)."""

from __future__ import annotations

import pytest

pytest.importorskip("triton")

TILES = ((64, 32, 1, 4, 4), (128, 32, 2, 8, 2), (256, 8, 4, 8, 2))  # BLOCK_N, BLOCK_M, split, warps, x's groups


def test_in_flight_mmas_keep_their_registers(compiled_child):
    res = compiled_child.call(__file__, "_compile", timeout=900)
    assert res.returncode == 0, res.stderr[-4000:]
    lines = [v.split() for v in res.stdout.splitlines() if v.startswith("tile")]
    assert len(lines) == len(TILES), res.stdout
    for (*_, xg), (_, tile, in_flight, hazards, stack) in zip(TILES, lines, strict=True):
        # a round of two chunks: every group's MMA but the round's last is waited for with the next in flight
        assert int(in_flight) == 2 * xg - 1, f"{tile}: {in_flight} waits leaving one in flight"
        assert hazards == "0", f"{tile}: {res.stdout}"
        assert stack == "0", f"{tile}: spills"


def _compile() -> None:
    from hinfer.ops.triton.linear_aot import compile_gluon_sm90, resources, sass_of, wgmma_hazards
    from hinfer.ops.triton.linear_int4_wgmma import int4_wgmma_variant

    for block_n, block_m, split, warps, xg in TILES:
        _, fn, sig, cex, w = int4_wgmma_variant(block_n, block_m, split, warps, True, True, xg, async_mma=True)
        k = compile_gluon_sm90(fn, sig, cex, w)
        sass = sass_of(k)
        found = wgmma_hazards(sass)
        for v in found:
            print(v)
        print(f"tile {block_n}x{block_m}/{split}/w{warps}/x{xg} {sass.count('DEPBAR.LE gsb0, 0x1')} {len(found)} "
              f"{resources(k)['stack']}")


LISTING = """
        /*0100*/                   WARPGROUP.ARRIVE ;
        /*0110*/                   HGMMA.64x32x16.F32.BF16 R24, R56, gdesc[UR4], R24 ;
        /*0120*/                   HGMMA.64x32x16.F32.BF16 R24, R60, gdesc[UR8], R24, gsb0 ;
        /*0130*/                   LOP3.LUT R90, R91, 0xf, RZ, 0xc0, !PT ;
        /*0140*/                   HGMMA.64x32x16.F32.BF16 R24, R88, gdesc[UR4], R24, gsb0 ;
        /*0150*/                   LOP3.LUT R{reg}, R91, 0xf, RZ, 0xc0, !PT ;
        /*0160*/                   WARPGROUP.DEPBAR.LE gsb0, 0x1 ;
        /*0170*/                   LOP3.LUT R57, R91, 0xf, RZ, 0xc0, !PT ;
        /*0180*/                   LDG.E.128 R{wide}, desc[UR6][R2.64] ;
        /*0190*/                   WARPGROUP.DEPBAR.LE gsb0, 0x0 ;
        /*01a0*/                   LOP3.LUT R89, R91, 0xf, RZ, 0xc0, !PT ;
"""


@pytest.mark.parametrize(("reg", "wide", "hazards"), [(70, 100, 0), (58, 100, 1), (30, 100, 1), (70, 86, 1)])
def test_the_hazard_check_sees_writes_to_registers_in_flight(reg, wide, hazards):
    """R58 is an A register of the first group in flight, R30 its accumulator; R86..R89 (a 128-bit load) reach
    the second group's A after the first wait; R57 is written after the first group retired, R89 after both."""
    from hinfer.ops.triton.linear_aot import wgmma_hazards

    assert len(wgmma_hazards(LISTING.format(reg=reg, wide=wide))) == hazards


LOOP = """
        /*0100*/                   LOP3.LUT R57, R91, 0xf, RZ, 0xc0, !PT ;
        /*0110*/                   WARPGROUP.ARRIVE ;
        /*0120*/                   HGMMA.64x32x16.F32.BF16 R24, R56, gdesc[UR4], R24, gsb0 ;
        /*0130*/                   WARPGROUP.DEPBAR.LE gsb0, 0x{keep} ;
        /*0140*/               @P1 BRA 0x100 ;
        /*0150*/                   WARPGROUP.DEPBAR.LE gsb0, 0x0 ;
"""


@pytest.mark.parametrize(("keep", "hazards"), [(1, 1), (0, 0)])
def test_the_hazard_check_follows_a_loop_back(keep, hazards):
    """An MMA left in flight at a loop's end and the loop's first instruction rewriting its A: the same
    instructions write the same registers each iteration, so one left in flight across the back edge is
    overwritten by the next iteration's unpack (why the kernel's x-through-registers loop keeps its MMAs waited)."""
    from hinfer.ops.triton.linear_aot import wgmma_hazards

    assert len(wgmma_hazards(LOOP.format(keep=keep))) == hazards
