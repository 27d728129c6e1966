"""Request-level timings on EngineCore, the engine the server steps (scheduler, chunked prefill, prefix cache,
sampler, CUDA graphs): the time to first token of one request, and the decode rate of N lanes over a window of
steps. A step returns once its sampled ids are on the host, so a clock read after it is honest."""

from __future__ import annotations

import time
from dataclasses import dataclass

from hinfer.bench import measure
from hinfer.engine.core import EngineCore
from hinfer.engine.protocol import GenerationRequest, TokenEvent
from hinfer.model.image_prompt import ImageInput
from hinfer.sampling_params import SamplingParams


@dataclass
class FirstToken:
    seconds: float  # submitted -> the step that returned the first token
    prompt_tokens: int
    cached_tokens: int  # usage.cached_tokens: the prefix taken from the cache
    token_id: int  # the (greedy) token


def first_token(core: EngineCore, request_id: str, prompt: list[int], images: list[ImageInput] | None = None
                ) -> FirstToken:  # fmt: skip
    """One greedy request for one token on an idle core, stepped until it is out. With images (preprocessed,
    one placeholder run each in the prompt) the engine places them on submit and encodes them in the prefill."""
    assert not core.has_work, "time a request on an idle engine"
    measure.sync(core.runner.device)  # nothing queued before (e.g. spills) is charged to this request
    params = SamplingParams(temperature=0, max_tokens=1, ignore_eos=True)
    t0 = time.perf_counter()
    core.add(GenerationRequest(request_id, list(prompt), params, images=list(images or [])))
    seconds, tokens, final = 0.0, [], None
    while final is None:
        for ev in core.step():
            if ev.token_ids and not seconds:
                seconds = time.perf_counter() - t0
            tokens += ev.token_ids
            if ev.finish_reason:
                final = ev
    if final.finish_reason != "length":
        raise RuntimeError(f"{request_id} ended with {final.finish_reason!r}")
    return FirstToken(seconds, final.usage.prompt_tokens, final.usage.cached_tokens, tokens[0])


class DecodeLanes:
    """Requests decoding side by side on `core` (greedy unless `params` gives each lane its own): their prompts
    are prefilled on construction, then `window` times steps in which every lane makes one token. `max_tokens`
    must outlast every window; `tokens` keeps what each lane made, `made` what it made in the last window (its
    untimed steps included): lanes through their prefill early decode while the others' goes on, so the totals
    may differ by a few tokens, the windows' counts not."""

    def __init__(self, core: EngineCore, prompts: list[list[int]], max_tokens: int, tag: str,
                 params: list[SamplingParams] | None = None) -> None:  # fmt: skip
        self.core = core
        self.ids = [f"{tag}-{i}" for i in range(len(prompts))]
        self.tokens: dict[str, list[int]] = {rid: [] for rid in self.ids}
        self.made: dict[str, int] = {}
        greedy = SamplingParams(temperature=0, max_tokens=max_tokens, ignore_eos=True)
        for i, (rid, p) in enumerate(zip(self.ids, prompts)):
            core.add(GenerationRequest(rid, list(p), params[i] if params else greedy))
        started: set[str] = set()
        while len(started) < len(self.ids):
            for ev in core.step():
                self._check(ev)
                self.tokens[ev.request_id] += ev.token_ids
                if ev.token_ids:
                    started.add(ev.request_id)

    def window(self, steps: int, warmup: int) -> float:
        """-> tok/s over `steps` steps, after `warmup` untimed ones."""
        start = {rid: len(t) for rid, t in self.tokens.items()}
        for _ in range(warmup):
            self._step()
        measure.sync(self.core.runner.device)
        t0 = time.perf_counter()
        made = sum(self._step() for _ in range(steps))
        measure.sync(self.core.runner.device)
        seconds = time.perf_counter() - t0
        self.made = {rid: len(t) - start[rid] for rid, t in self.tokens.items()}
        return made / seconds

    def close(self) -> None:
        for rid in self.ids:
            self.core.abort(rid)
        while self.core.has_work:
            self.core.step()

    def _step(self) -> int:
        made = 0
        for _ in range(2):  # a step that only queues the next one ahead (decode a step ahead) yields no tokens
            for ev in self.core.step():
                self._check(ev)
                self.tokens[ev.request_id] += ev.token_ids
                made += len(ev.token_ids)
            if made:
                break
        if made != len(self.ids):
            raise RuntimeError(f"{made} tokens from {len(self.ids)} decoding lanes in one step")
        return made

    @staticmethod
    def _check(ev: TokenEvent) -> None:
        if ev.finish_reason is not None:
            raise RuntimeError(f"{ev.request_id} ended ({ev.finish_reason}) while its lane was being timed")
