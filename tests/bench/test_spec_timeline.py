"""bench/spec_timeline.py on the CPU tiny model through the graph batches run eagerly: every part of a round is
timed (the GPU lines are host time here) and the wrapped methods are
restored afterwards."""

from __future__ import annotations

import runpy
from pathlib import Path

from hinfer.engine.spec import decoder as dec
from hinfer.engine.spec import drafter as dr

SCRIPT = Path(__file__).resolve().parents[2] / "bench" / "spec_timeline.py"


def test_timeline_parts_of_a_round(make_engine_core):
    mod = runpy.run_path(str(SCRIPT))
    lanes, k = 2, 3
    core = make_engine_core(max_concurrency=lanes, spec="mtp", draft_tokens=k, spec_adaptive=False)
    core.runner.capture_graphs(lanes, core.ecfg.max_context, capture=False)
    core.spec.use_graphs(lanes, capture=False)
    core.runner.state.fill_random()
    before = (dec.SpecDecoder.step, dec.SpecDecoder.after_step, dr.DeviceDrafts.row)
    parts = mod["timeline"](core, lanes, 40, rounds=6)
    assert (dec.SpecDecoder.step, dec.SpecDecoder.after_step, dr.DeviceDrafts.row) == before
    assert set(parts) >= {"gpu: verification", "gpu: gap to next verification", "host: waiting for device tokens",
                          "host: after the wait to next verification launch", "round (verification to verification)"}
    assert all(v >= 0 for v in parts.values()) and parts["round (verification to verification)"] > 0
