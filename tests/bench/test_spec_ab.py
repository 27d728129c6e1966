"""bench/spec_ab.py on the CPU tiny model: the switch's values take turns over windows of rounds in one engine,
each window's median round is kept per value, and the variable is restored afterwards."""

from __future__ import annotations

import os
import runpy
from pathlib import Path

SCRIPT = Path(__file__).resolve().parents[2] / "bench" / "spec_ab.py"


def test_alternate_takes_turns_and_restores_the_switch(make_engine_core, monkeypatch):
    mod = runpy.run_path(str(SCRIPT))
    monkeypatch.setenv("HINFER_SPEC_CHAIN", "1")
    core = make_engine_core(max_concurrency=2, spec="mtp", draft_tokens=3, spec_adaptive=False, max_context=1024)
    core.runner.capture_graphs(2, core.ecfg.max_context, capture=False)
    core.spec.use_graphs(2, capture=False)
    core.runner.state.fill_random()
    seen = []
    real = mod["measure"].spec_rounds

    def spy(*a, **k):
        seen.append(os.environ["HINFER_SPEC_CHAIN"])
        return real(*a, **k)

    monkeypatch.setattr(mod["measure"], "spec_rounds", spy)
    res = mod["alternate"](core, "HINFER_SPEC_CHAIN", ["1", "0"], 2, 40, rounds=3, reps=2)
    assert seen == ["1", "0", "1", "0"]
    assert set(res) == {"1", "0"} and all(len(v) == 2 and min(v) > 0 for v in res.values())
    assert os.environ["HINFER_SPEC_CHAIN"] == "1"
