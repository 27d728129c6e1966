"""Plain decode run a step ahead (EngineCore, `--decode-ahead`; ModelRunner.launch): through the static graph
batches run eagerly on the CPU, the engine gives the same tokens, texts and finish reasons as reading every step
first, with lanes stopping on stop tokens, stop strings and length, aborted in flight, joining mid-stream, or
needing the host every step (penalties, logprobs); the prefix cache's decode checkpoints saved ahead restore the
right state; nothing leaks."""

from __future__ import annotations

import random

import torch

from hinfer.engine.protocol import GenerationRequest
from hinfer.sampling_params import SamplingParams as SP
from tests.engine.test_prefix_cache import one_thread  # noqa: F401  (autouse: one torch thread here too)


def _core(make_engine_core, ahead: bool, **kw):
    core = make_engine_core(decode_ahead=ahead, **kw)
    core.runner.capture_graphs(core.ecfg.max_concurrency, core.ecfg.max_context, capture=False)
    return core


def _counting(core) -> list[int]:
    """Lanes per step run ahead, recorded as the runner launches them."""
    lanes: list[int] = []
    launch = core.runner.launch

    def counted(chunks, prev=None, **kw):
        lanes.append(len(chunks))
        return launch(chunks, prev, **kw)

    core.runner.launch = counted
    return lanes


def _drive(core, reqs: list[tuple[int, GenerationRequest]], aborts: dict[int, str] | None = None) -> dict:
    """Add each request at its step, abort at theirs; -> request id: (tokens, text, finish reason)."""
    out: dict[str, list] = {r.request_id: [[], "", None] for _, r in reqs}
    step = 0
    pending = sorted(reqs, key=lambda x: x[0])
    while pending or core.has_work:
        while pending and pending[0][0] <= step:
            core.add(pending.pop(0)[1])
        if aborts and step in aborts:
            core.abort(aborts[step])
        for ev in core.step():
            o = out[ev.request_id]
            o[0] += ev.token_ids
            o[1] += ev.text
            o[2] = ev.finish_reason or o[2]
        step += 1
        assert step < 2000
    return {k: tuple(v) for k, v in out.items()}


def _assert_clean(core) -> None:
    assert not core.has_work and core._ahead is None
    core.clear_prefix_cache()
    st = core.stats()
    assert (st.pages_free, st.slots_free, st.lanes_busy) == (st.pages_total, st.slots_total, 0)


def second_turn(cores: dict, prompt: list[int]) -> dict[str, tuple[list, int]]:
    """Each core's greedy answer of 6 tokens to `prompt`: name -> (its logprobs, the prompt tokens it had cached)."""
    out = {}
    for name, core in cores.items():
        core.add(GenerationRequest(name, prompt, SP(temperature=0, max_tokens=6, ignore_eos=True, logprobs=0)))
        cached, lps = 0, []
        while core.has_work:
            for ev in core.step():
                lps += ev.logprobs or []
                if ev.usage is not None:
                    cached = ev.usage.cached_tokens
        out[name] = (lps, cached)
    return out


def _requests(rng: random.Random, stop_tok: int, stop_str: str) -> list[tuple[int, GenerationRequest]]:
    def prompt(n):
        return [rng.randrange(1, 1024) for _ in range(n)]

    specs = [
        (0, SP(temperature=0, max_tokens=30, ignore_eos=True)),
        (0, SP(temperature=0.8, top_p=0.9, seed=7, max_tokens=25, ignore_eos=True)),
        (0, SP(temperature=0, max_tokens=40, stop_token_ids=[stop_tok])),
        (3, SP(temperature=0, max_tokens=1, ignore_eos=True)),
        (5, SP(temperature=1.0, top_k=20, seed=3, max_tokens=18, ignore_eos=True)),
        (9, SP(temperature=0, max_tokens=30, stop=[stop_str])),
        (12, SP(temperature=0, max_tokens=30, frequency_penalty=2.0, presence_penalty=0.5, ignore_eos=True)),
        (20, SP(temperature=0, max_tokens=10, logprobs=2, ignore_eos=True)),
        (26, SP(temperature=0.7, seed=11, max_tokens=22, ignore_eos=True)),
    ]
    return [(at, GenerationRequest(f"r{i}", prompt(rng.randint(1, 40)), p)) for i, (at, p) in enumerate(specs)]


def ahead_against_in_turn(make, count, seed: int) -> tuple[dict, dict, list[int], object]:
    """The mixed requests (stop tokens, stop strings, length, sampling, penalties, logprobs, joining mid-stream)
    through `make(True)` (its launches counted by `count`) and `make(False)`; -> (outputs ahead, outputs in
    turn, the counted lanes, the ahead core)."""
    rng = random.Random(seed)
    # a stop token and a stop string the greedy lanes will meet: taken from a plain run of the first prompt
    p0 = [rng.randrange(1, 1024) for _ in range(20)]
    probe = make(False, max_concurrency=4)
    toks, text, _ = _drive(probe, [(0, GenerationRequest("p", p0, SP(temperature=0, max_tokens=40, ignore_eos=True)))])["p"]
    stop_tok, stop_str = toks[7], text[len(text) // 3 : len(text) // 3 + 2] or "e"
    in_turn = _drive(make(False, max_concurrency=4, prefill_chunk=16), _requests(random.Random(seed + 1), stop_tok, stop_str))
    core = make(True, max_concurrency=4, prefill_chunk=16)
    lanes = count(core)
    return _drive(core, _requests(random.Random(seed + 1), stop_tok, stop_str)), in_turn, lanes, core


def test_ahead_equals_reading_every_step(make_engine_core, seed):
    got, plain, lanes, core = ahead_against_in_turn(lambda ahead, **kw: _core(make_engine_core, ahead, **kw),
                                                    _counting, seed)  # fmt: skip
    assert got == plain
    assert len(lanes) > 20 and max(lanes) >= 2  # most steps ran ahead, several lanes at once
    _assert_clean(core)


def abort_requests(rng: random.Random, n: int, per_step: int, tokens: tuple[int, int]) -> list:
    """n requests, `per_step` joining a step, greedy or sampled, max_tokens drawn from `tokens`."""
    return [(i // per_step, GenerationRequest(f"a{i}", [rng.randrange(1, 1024) for _ in range(rng.randint(1, 30))],
                                              SP(temperature=rng.choice([0, 0.9]), seed=i,
                                                 max_tokens=rng.randint(*tokens), ignore_eos=True)))
            for i in range(n)]  # fmt: skip


def assert_aborts_cut_short(got: dict, in_turn: dict) -> None:
    """An aborted request got the start of its output read in turn; every other one the whole of it."""
    for rid, (t, text, fin) in got.items():
        if fin == "abort":
            assert t == in_turn[rid][0][: len(t)]
        else:
            assert (t, text, fin) == in_turn[rid]
    assert sum(f == "abort" for _, _, f in got.values()) >= 2


def test_abort_in_flight_and_soak_leak_nothing(make_engine_core, seed):
    reqs = abort_requests(random.Random(seed), 12, 2, (1, 30))
    plain = _drive(_core(make_engine_core, False, max_concurrency=3, prefill_chunk=16), reqs)
    core = _core(make_engine_core, True, max_concurrency=3, prefill_chunk=16)
    lanes = _counting(core)
    got = _drive(core, reqs, {8: "a1", 15: "a4", 16: "a5", 30: "a9"})
    assert lanes
    assert_aborts_cut_short(got, plain)
    _assert_clean(core)


def test_decode_checkpoints_saved_ahead_restore_the_right_state(make_engine_core, seed):
    """Turn 1 decodes ahead past page boundaries (the prefix cache saves the GDN state there, queued behind the
    step in flight); turn 2 resumes from the last one, its logprobs (which move by ~5e-3 with a wrong state) as a
    cache-off engine's."""
    rng = random.Random(seed)
    on, off = _core(make_engine_core, True), make_engine_core(prefix_cache=False)
    lanes = _counting(on)
    prompt = [rng.randrange(1, 1024) for _ in range(21)]
    answer = _drive(on, [(0, GenerationRequest("t1", prompt, SP(temperature=0, max_tokens=40, ignore_eos=True)))])
    assert len(lanes) >= 30
    turn2 = prompt + answer["t1"][0] + [rng.randrange(1, 1024) for _ in range(5)]
    lp = second_turn({"on": on, "off": off}, turn2)
    assert lp["on"][1] == 48 and lp["off"][1] == 0  # 21 + 40 - 1 tokens run in turn 1: boundaries 16, 32, 48
    assert max(abs(a - b) for a, b in zip(lp["on"][0], lp["off"][0])) < 1e-4
    _assert_clean(on)


def test_sampler_advance_counts_like_update(seed):
    """A step run ahead records its tokens from the device (Sampler.advance) as update does from the host."""
    from hinfer.engine.sampler import RowState, Sampler

    g = torch.Generator().manual_seed(seed)
    params = [SP(frequency_penalty=0.5), SP(), SP(repetition_penalty=1.2), SP(presence_penalty=1.0)]
    counts = []
    for how in ("update", "advance"):
        sampler = Sampler(64, "cpu", max_rows=4)
        rows = [RowState(p, seed=i, slot=3 - i, prompt_ids=[1, 2]) for i, p in enumerate(params)]
        for r in rows:
            sampler.add_row(r)
        for _ in range(20):
            ids = torch.randint(0, 8, (4,), generator=g)  # few ids: repeats
            if how == "update":
                sampler.update(rows, ids.tolist())
            else:
                sampler.advance(rows, ids)
        counts.append((sampler.counts.clone(), [r.num_generated for r in rows]))
        g.manual_seed(seed)
    assert torch.equal(counts[0][0], counts[1][0]) and counts[0][1] == counts[1][1] == [20] * 4
    assert counts[0][0].sum() == 60 and counts[0][0][2].sum() == 0  # the row without penalties counts nothing
