"""The timeline probes (hinfer.ops.triton.mma_common.probe_stamp; bench/moe_chain_probe.py) go through Triton's
whole sm_90 pipeline inside the one-token int4 experts gate_up launch that routes its token and the dense int4
kernel at its one-row tile: six SM clock reads and two global timer reads each, and the launches without them
compile without stamps. In a child
process (the `compiled_child` fixture)."""

from __future__ import annotations

import pytest

pytest.importorskip("triton")


def test_probed_launches_compile(compiled_child):
    res = compiled_child.call(__file__, "_compile", timeout=900)
    assert res.returncode == 0, res.stderr[-4000:]
    lines = [v.split() for v in res.stdout.splitlines() if v.startswith(("plain", "probed"))]
    assert len(lines) == 4, res.stdout
    for tag, kernel, *fields in lines:
        f = dict(item.split("=") for item in fields)
        assert (f["clock"], f["timer"]) == (("6", "2") if tag == "probed" else ("0", "0")), (kernel, f)
        assert int(f["regs"]) <= 128 or kernel == "dense", (kernel, f)


def _compile() -> None:
    from hinfer.ops.triton.linear_aot import compile_gluon_sm90, resources, sass_of
    from hinfer.ops.triton.linear_int4_mma import int4_mma_variant
    from hinfer.ops.triton.moe_int4_mma import experts_mma_variant

    experts = experts_mma_variant(128, 8, 4, True, True, 9, False, depth=4, pdl=True, split=4, act=True, route=8)
    dense = int4_mma_variant(128, 8, 4, 4, True, True, 4, pdl=True)  # the 35B-A3B GDN in_proj's one-row tile
    for probe in (False, True):
        for kernel, (_, fn, sig, cex, warps), regs in (("experts", experts, 128), ("dense", dense, 0)):
            cex = dict(cex) | {"maxnreg": regs, "PROBE": probe}
            k = compile_gluon_sm90(fn, sig | ({"probe_ptr": "*i64"} if probe else {}), cex, warps)
            sass = sass_of(k)
            print(f"{'probed' if probe else 'plain'} {kernel} clock={sass.count('SR_CLOCK')} "
                  f"timer={sass.count('SR_GLOBALTIMER')} regs={resources(k)['regs']}")
