"""The timeline probes (hinfer.ops.triton.mma_common.probe_stamp; bench/moe_chain_probe.py) go through Triton's
whole sm_90 pipeline inside the one-token int4 experts gate_up launch that routes its token: six SM clock reads and
two global timer reads, and the launch without them compiles as before (the same registers, no stamps). In a child
process (the `compiled_child` fixture)."""

from __future__ import annotations

import pytest

pytest.importorskip("triton")


def test_probed_experts_launch_compiles(compiled_child):
    res = compiled_child.call(__file__, "_compile", timeout=900)
    assert res.returncode == 0, res.stderr[-4000:]
    lines = dict(v.split(" ", 1) for v in res.stdout.splitlines() if v.startswith(("plain", "probed")))
    plain, probed = (dict(item.split("=") for item in lines[k].split()) for k in ("plain", "probed"))
    assert plain["clock"] == plain["timer"] == "0", lines
    assert probed["clock"] == "6" and probed["timer"] == "2", lines
    assert int(probed["regs"]) <= 128, lines


def _compile() -> None:
    from hinfer.ops.triton.linear_aot import compile_gluon_sm90, resources, sass_of
    from hinfer.ops.triton.moe_int4_mma import experts_mma_variant

    for probe in (False, True):
        _, fn, sig, cex, warps = experts_mma_variant(128, 8, 4, True, True, 9, False, depth=4, pdl=True, split=4,
                                                     act=True, route=8)  # fmt: skip
        cex = dict(cex) | {"maxnreg": 128, "PROBE": probe}
        k = compile_gluon_sm90(fn, sig | ({"probe_ptr": "*i64"} if probe else {}), cex, warps)
        sass = sass_of(k)
        print(f"{'probed' if probe else 'plain'} clock={sass.count('SR_CLOCK')} timer={sass.count('SR_GLOBALTIMER')} "
              f"regs={resources(k)['regs']}")
