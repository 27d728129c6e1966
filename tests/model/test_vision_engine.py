"""Images through the engine: a request with images generates what the model's own multimodal forward predicts
(greedy), the images are encoded once, the prefix cache names image pages by content, and requests the engine
cannot serve get a clear error."""

from __future__ import annotations

from pathlib import Path

import hf_helpers as H
import pytest
import torch
import vision_helpers as V

from hinfer.config import EngineConfig, load_model_config
from hinfer.engine.factory import make_core, resolve_engine_config
from hinfer.engine.protocol import GenerationRequest
from hinfer.fixtures import fixed_test_seed
from hinfer.model.image_prompt import ImageInput
from hinfer.model.loader import load_weights
from hinfer.model.qwen3_5 import Qwen35ForCausalLM
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


def _run(core, reqs: list[GenerationRequest]) -> dict[str, list[int]]:
    for r in reqs:
        core.add(r)
    out: dict[str, list[int]] = {r.request_id: [] for r in reqs}
    done: set[str] = set()
    while len(done) < len(reqs):
        for ev in core.step():
            out[ev.request_id] += ev.token_ids
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
    with pytest.raises(ValueError, match="prompt logprobs"):
        core.add(
            GenerationRequest("lp", ids, SamplingParams(max_tokens=1, prompt_logprobs=1), images=_images(1))
        )
    cfg, text_only = tiny_model
    ecfg = resolve_engine_config(cfg, EngineConfig(device="cpu", max_context=256, page_size=16))
    core = make_core(cfg, text_only, tokenizer, ecfg, torch.device("cpu"))
    with pytest.raises(ValueError, match="takes no images"):
        core.add(GenerationRequest("t", [1, 2, 3], SamplingParams(max_tokens=1), images=_images(1)[:1]))
