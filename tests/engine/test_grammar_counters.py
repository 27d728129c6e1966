"""The sampler's grammar counters: host time and counts of the structured-output work, in EngineCore.stats()."""

from __future__ import annotations

from hinfer.engine.protocol import GenerationRequest
from hinfer.sampling_params import SamplingParams, StructuredOutput


def test_counters_count_constrained_rows_only(make_engine_core):
    core = make_engine_core(max_concurrency=2)
    core.add(GenerationRequest("free", [5] * 8, SamplingParams(temperature=0, max_tokens=10, ignore_eos=True)))
    while core.has_work:
        core.step()
    assert not any(k.startswith("grammar_") for k in core.stats().extra)  # no grammar ran: no figures
    so = StructuredOutput(regex="[ab]{6}")
    core.add(GenerationRequest("re", [7] * 8, SamplingParams(temperature=0, max_tokens=20, structured=so)))
    core.add(GenerationRequest("free2", [5] * 8, SamplingParams(temperature=0, max_tokens=10, ignore_eos=True)))
    done, text = {}, ""
    while core.has_work:
        for ev in core.step():
            text += ev.text if ev.request_id == "re" else ""
            if ev.finish_reason:
                done[ev.request_id] = ev.usage.completion_tokens
    n = done["re"]
    assert len(text) == 6 and set(text) <= {"a", "b"} and done["free2"] == 10  # the grammar ended its request
    ex = core.stats().extra
    assert ex["grammar_steps"] == ex["grammar_masks"] == ex["grammar_accepted"] == n  # one row per step it ran
    assert ex["grammar_fill_s"] > 0 and ex["grammar_apply_s"] > 0 and ex["grammar_accept_s"] > 0
