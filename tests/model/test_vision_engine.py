"""Images through the engine: a request with images generates what the model's own multimodal forward predicts
(greedy), the images are encoded once, the prefix cache names image pages by content, and requests the engine
cannot serve get a clear error."""

from __future__ import annotations

from dataclasses import replace
from pathlib import Path

import hf_helpers as H
import pytest
import torch
import vision_helpers as V
from mtp_peek import PeekDrafter

from hinfer.batch import SeqChunk, build_forward_batch
from hinfer.config import EngineConfig, load_model_config
from hinfer.engine.factory import make_core, resolve_engine_config
from hinfer.engine.protocol import GenerationRequest
from hinfer.engine.spec import DraftJob, MTPDrafter, Proposal
from hinfer.fixtures import fixed_test_seed
from hinfer.model.image_prompt import ImageInput, place_images
from hinfer.model.loader import load_weights
from hinfer.model.qwen3_5 import Qwen35ForCausalLM
from hinfer.model.random_init import random_init
from hinfer.model.state import ModelState, StateShape
from hinfer.model.vision_grid import merged_tokens
from hinfer.sampling_params import SamplingParams
from hinfer.weights.hf_reader import HFCheckpoint

pytest.importorskip("transformers")

GRIDS = [(1, 4, 6), (1, 2, 4)]


@pytest.fixture(scope="module")
def model(tmp_path_factory: pytest.TempPathFactory) -> tuple[torch.nn.Module, Qwen35ForCausalLM]:
    hf = V.hf_multimodal(fixed_test_seed())
    path: Path = tmp_path_factory.mktemp("mm")
    hf.save_pretrained(path)
    ours = Qwen35ForCausalLM(load_model_config(path), dtype=torch.float32, with_vision=True)
    load_weights(ours, HFCheckpoint(path).iter_tensors(dtype=torch.float32, progress=False), source=str(path))
    ours.visual.load_state_dict(hf.model.visual.state_dict())
    return hf, ours


def _core(ours: Qwen35ForCausalLM, tokenizer, **kw):
    ecfg = resolve_engine_config(
        ours.cfg, EngineConfig(device="cpu", **{"max_context": 256, "page_size": 16} | kw)
    )
    return make_core(ours.cfg, ours, tokenizer, ecfg, torch.device("cpu"))


def _prompt(seed: int) -> list[int]:
    ids = H.prompt(20, vocab=V.IMAGE, seed=seed)
    for g in GRIDS:
        ids += (
            [V.START] + [V.IMAGE] * merged_tokens(g, 2) + [V.END] + H.prompt(5, vocab=V.IMAGE, seed=seed + 1)
        )
    return ids


def _images(seed: int) -> list[ImageInput]:
    return [ImageInput(V.random_pixels([g], 96, seed=seed + i), g) for i, g in enumerate(GRIDS)]


def _run(core, reqs: list[GenerationRequest], logprobs: dict[str, list[float]] | None = None) -> dict[str, list[int]]:
    """Every request to the end: -> its tokens (and each token's logprob into `logprobs`, when given)."""
    for r in reqs:
        core.add(r)
    out: dict[str, list[int]] = {r.request_id: [] for r in reqs}
    done: set[str] = set()
    while len(done) < len(reqs):
        for ev in core.step():
            out[ev.request_id] += ev.token_ids
            if logprobs is not None:
                logprobs.setdefault(ev.request_id, []).extend(ev.logprobs or [])
            if ev.finish_reason:
                done.add(ev.request_id)
    return out


@torch.no_grad()
def _hf_greedy(hf: torch.nn.Module, ids: list[int], images: list[ImageInput], n: int) -> list[int]:
    out: list[int] = []
    pixels = torch.cat([i.pixels for i in images])
    grid = torch.tensor([i.grid for i in images])
    for _ in range(n):
        t = torch.tensor([ids + out])
        logits = hf(
            input_ids=t, pixel_values=pixels, image_grid_thw=grid, mm_token_type_ids=(t == V.IMAGE).int()
        )
        out.append(int(logits.logits[0, -1].argmax()))
    return out


def test_greedy_matches_transformers_chunked_and_batched(model, tokenizer) -> None:
    hf, ours = model
    greedy = SamplingParams(temperature=0, max_tokens=6, ignore_eos=True)
    a, b = _prompt(1), _prompt(7)
    with H.one_thread():
        want = {"a": _hf_greedy(hf, a, _images(10), 6), "b": _hf_greedy(hf, b, _images(20), 6)}
        core = _core(ours, tokenizer, max_concurrency=2, prefill_chunk=16)  # chunks cut through the images
        got = _run(core, [GenerationRequest("a", a, greedy, images=_images(10)),
                          GenerationRequest("b", b, greedy, images=_images(20))])  # fmt: skip
    assert got == want


def test_prompt_logprobs_of_an_image_prompt_are_transformers(model, tokenizer) -> None:
    """Prompt logprobs of a prompt with images (chunks cut through the images, beside another lane): each prompt
    token's log-probability under transformers' multimodal forward, within 1e-4 (fp32)."""
    hf, ours = model
    ids = _prompt(5)
    with H.one_thread():
        core = _core(ours, tokenizer, max_concurrency=2, prefill_chunk=16)
        core.add(GenerationRequest("lp", ids, SamplingParams(temperature=0, max_tokens=2, ignore_eos=True,
                                                              prompt_logprobs=0), images=_images(50)))  # fmt: skip
        core.add(GenerationRequest("other", _prompt(8), SamplingParams(max_tokens=3), images=_images(60)))
        got = None
        while core.has_work:
            for ev in core.step():
                if ev.request_id == "lp" and ev.prompt_logprobs is not None:
                    got = ev.prompt_logprobs
        images = _images(50)
        t = torch.tensor([ids])
        with torch.no_grad():
            logits = hf(input_ids=t, pixel_values=torch.cat([i.pixels for i in images]),
                        image_grid_thw=torch.tensor([i.grid for i in images]),
                        mm_token_type_ids=(t == V.IMAGE).int()).logits[0].float()  # fmt: skip
    want = torch.log_softmax(logits[:-1], -1).gather(1, t[0, 1:, None])[:, 0]
    assert got is not None and len(got) == len(ids) and got[0] is None
    torch.testing.assert_close(torch.tensor(got[1:]), want, rtol=0, atol=1e-4)


def test_prefix_cache_tells_images_apart(model, tokenizer) -> None:
    """The same text with other pixels must not reuse the first request's image pages; the same pixels do."""
    _, ours = model
    greedy = SamplingParams(temperature=0, max_tokens=4, ignore_eos=True)
    ids = _prompt(3)
    with H.one_thread():
        fresh = _run(_core(ours, tokenizer), [GenerationRequest("x", ids, greedy, images=_images(40))])["x"]
        core = _core(ours, tokenizer)
        _run(core, [GenerationRequest("first", ids, greedy, images=_images(30))])
        other = _run(core, [GenerationRequest("other", ids, greedy, images=_images(40))])["other"]
        hits_before = core.prefix.hit_tokens
        again = _run(core, [GenerationRequest("again", ids, greedy, images=_images(40))])["again"]
    assert other == fresh == again
    assert core.prefix.hit_tokens > hits_before  # the repeated image was served from the cache


def test_requests_the_engine_cannot_serve(model, tiny_model, tokenizer) -> None:
    _, ours = model
    ids = _prompt(1)
    core = _core(ours, tokenizer)
    with pytest.raises(ValueError, match="placeholder"):
        core.add(GenerationRequest("few", ids, SamplingParams(max_tokens=1), images=_images(1)[:1]))
    cfg, text_only = tiny_model
    ecfg = resolve_engine_config(cfg, EngineConfig(device="cpu", max_context=256, page_size=16))
    core = make_core(cfg, text_only, tokenizer, ecfg, torch.device("cpu"))
    with pytest.raises(ValueError, match="takes no images"):
        core.add(GenerationRequest("t", [1, 2, 3], SamplingParams(max_tokens=1), images=_images(1)[:1]))


def _with_mtp(ours: Qwen35ForCausalLM) -> Qwen35ForCausalLM:
    """The same model with a random MTP head (the checkpoint transformers writes has none)."""
    spec = Qwen35ForCausalLM(replace(ours.cfg, mtp_num_hidden_layers=1), dtype=torch.float32, with_vision=True)
    random_init(spec, seed=fixed_test_seed())
    missing, unexpected = spec.load_state_dict(ours.state_dict(), strict=False)
    assert not unexpected and missing and all(k.startswith("mtp.") for k in missing)
    return spec


class _Known:
    """Drafts each request's known continuation: every draft accepted, so each round's K + 1 verified rows decide
    the output (their positions shifted by the images as the prompt's are)."""

    def __init__(self, expected: dict[str, list[int]]) -> None:
        self.expected = expected

    def draft(self, jobs: list[DraftJob]) -> list[Proposal | None]:
        out: list[Proposal | None] = []
        for j in jobs:
            n = len(j.seq.output_ids)
            out.append(Proposal(self.expected[j.seq.request_id][n : n + j.num_drafts]) if j.num_drafts else None)
        return out


@pytest.mark.parametrize("spec", ["mtp", "ngram", "known"])
def test_speculation_answers_image_prompts_as_plain_decoding(model, tokenizer, spec: str) -> None:
    """--spec with image prompts (two lanes, chunks cut through the images): greedy output token for token as
    without speculation, whether the drafts are the MTP head's (random: mostly rejected), prompt lookups, or all
    right (every verified row at its shifted position)."""
    _, ours = model
    with_mtp = _with_mtp(ours)
    greedy = SamplingParams(temperature=0, max_tokens=9, ignore_eos=True, logprobs=0)

    def reqs() -> list[GenerationRequest]:
        return [GenerationRequest("a", _prompt(1), greedy, images=_images(10)),
                GenerationRequest("b", _prompt(7), greedy, images=_images(20))]  # fmt: skip

    with H.one_thread():
        lp_want: dict[str, list[float]] = {}
        want = _run(_core(with_mtp, tokenizer, max_concurrency=2, prefill_chunk=16), reqs(), lp_want)
        core = _core(with_mtp, tokenizer, max_concurrency=2, prefill_chunk=16, spec="ngram" if spec == "ngram"
                     else "mtp", draft_tokens=3, spec_adaptive=False)  # fmt: skip
        if spec == "known":
            core.spec.drafter = _Known(want)
        lp_got: dict[str, list[float]] = {}
        got = _run(core, reqs(), lp_got)
    assert got == want
    for r in want:  # the logprobs too: a row at another position would move them long before the argmax
        torch.testing.assert_close(torch.tensor(lp_got[r]), torch.tensor(lp_want[r]), rtol=0, atol=1e-4)
    extra = core.stats().extra
    assert extra["spec_drafted"] > 0 or spec == "ngram"  # the random prompts repeat no n-gram
    if spec == "known":
        assert extra["spec_accepted"] == extra["spec_drafted"]


def test_position_fields_place_rows_as_the_target_does() -> None:
    """The MTP head's rows take the target's rotary positions: per axis inside images, the text's shift after
    them, generated rows at index + rope_delta (also for rows that run past the prompt)."""
    ids = [5, 6] + [V.IMAGE] * merged_tokens((1, 4, 6), 2) + [7, 8, 9]
    p = place_images(ids, V.IMAGE, [(1, 4, 6)], 2)
    n = len(ids)
    for start, end in [(0, 2), (0, n), (1, 5), (n - 3, n), (n - 2, n + 3), (n, n + 4)]:
        f = p.position_fields(start, end)
        want = [[p.positions[a][i] if i < n else i + p.rope_delta for i in range(start, end)] for a in range(3)]
        if "axis_positions" in f:
            assert f["axis_positions"] == want
        else:  # one run on every axis: the offset says it
            assert all(w == [i + f["rope_delta"] for i in range(start, end)] for w in want)


@torch.inference_mode()
def _head_from_scratch(mtp: MTPDrafter, seq, k: int) -> tuple[list[torch.Tensor], list[int]]:
    """The head's hidden states (at the last target position, then along the chain of its own drafts) and its k
    greedy drafts, on a private state: the target over the prompt (images in) and the tokens so far, then the head
    over the same rows at the same positions, its chain at generated positions (index + the prompt's shift)."""
    model, ps, images = mtp.model, 16, seq.images
    tokens = seq.prompt_ids + seq.output_ids
    n, length = len(tokens) - 1, len(seq.prompt_ids)
    pages = list(range(1, 2 + (len(tokens) + k) // ps))
    state = ModelState(model.cfg, StateShape(len(pages) + 1, ps, 2, torch.float32, torch.float32, mtp_layers=1), "cpu")
    axes = [a + [i + images.rope_delta for i in range(length, n)] for a in images.positions]
    chunk = SeqChunk(tokens[:n], 0, pages, 1, all_logits=True, axis_positions=axes, image_rows=images.rows,
                     image_embeds=images.embeds)  # fmt: skip
    batch = build_forward_batch([chunk], ps, "cpu")
    hs = [model.mtp_forward(torch.tensor(tokens[1:]), model(batch, state), batch, state)[-1:]]
    out: list[int] = []
    for j in range(k):
        out.append(int(model.compute_logits(hs[-1]).argmax()))
        if j + 1 < k:  # the chain: the head's own hidden state stands in for the target's
            b = build_forward_batch([SeqChunk([out[-1]], n + j, pages, 1, rope_delta=images.rope_delta)], ps, "cpu")
            hs.append(model.mtp_forward(torch.tensor([out[-1]]), hs[-1], b, state))
    return [h[0] for h in hs], out


def test_mtp_head_places_image_prompts_as_the_target(model, tokenizer) -> None:
    """With images the head's rows sit at the target's rotary positions (per axis inside the images, shifted
    after them, in the prompt chunks, in every round and along its chain of drafts): its hidden states and drafts
    equal the head recomputed from scratch over the whole sequence."""
    _, ours = model
    with_mtp = _with_mtp(ours)
    greedy = SamplingParams(temperature=0, max_tokens=8, ignore_eos=True)

    def reqs() -> list[GenerationRequest]:
        return [GenerationRequest("a", _prompt(1), greedy, images=_images(10)),
                GenerationRequest("b", _prompt(7), greedy, images=_images(20))]  # fmt: skip

    with H.one_thread():
        want = _run(_core(with_mtp, tokenizer, max_concurrency=2, prefill_chunk=16), reqs())
        core = _core(with_mtp, tokenizer, max_concurrency=2, prefill_chunk=16, spec="mtp", draft_tokens=3,
                     spec_adaptive=False)  # fmt: skip
        checked = core.spec.drafter = PeekDrafter(core.spec.drafter, _Known(want), _head_from_scratch)
        assert _run(core, reqs()) == want
    assert checked.checked >= 2 * 2
