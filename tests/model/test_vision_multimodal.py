"""Parity of the multimodal forward with transformers' Qwen3_5ForConditionalGeneration on a tiny random config:
image placeholders replaced by our vision tower's embeddings, (t, h, w) rotary positions for image tokens and
the shifted positions of the text after them, through our paged model.

fp32 logits within FP32_ATOL of transformers' (the text parity tests' bound; we see ~1e-5), for one image in
one pass, several images of different sizes in chunks that cut through images, and decode steps after them.
"""

from __future__ import annotations

from dataclasses import replace
from pathlib import Path

import hf_helpers as H
import pytest
import torch
import vision_helpers as V

from hinfer.batch import SeqChunk
from hinfer.config import load_model_config
from hinfer.fixtures import fixed_test_seed
from hinfer.model.image_prompt import PromptImages, place_images
from hinfer.model.loader import load_weights
from hinfer.model.qwen3_5 import Qwen35ForCausalLM
from hinfer.model.vision_grid import merged_tokens
from hinfer.weights.hf_reader import HFCheckpoint

pytest.importorskip("transformers")

FP32_ATOL = 1e-3
IMAGE, START, END = V.IMAGE, V.START, V.END
MERGE = V.TINY_VISION["spatial_merge_size"]


@pytest.fixture(scope="module")
def models(tmp_path_factory: pytest.TempPathFactory) -> tuple[torch.nn.Module, Qwen35ForCausalLM]:
    with H.one_thread():
        hf = V.hf_multimodal(fixed_test_seed())
        path: Path = tmp_path_factory.mktemp("mm")
        hf.save_pretrained(path)
        cfg = load_model_config(path)
        ours = Qwen35ForCausalLM(cfg, dtype=torch.float32, with_vision=True)
        load_weights(
            ours, HFCheckpoint(path).iter_tensors(dtype=torch.float32, progress=False), source=str(path)
        )
        assert ours.visual is not None
        ours.visual.load_state_dict(hf.model.visual.state_dict())
    return hf, ours


def _prompt(grids: list[tuple[int, int, int]], seed: int) -> list[int]:
    """Text, then each image bracketed by vision start/end, text between and after."""
    ids = H.prompt(9, vocab=IMAGE, seed=seed)
    for i, g in enumerate(grids):
        ids += (
            [START]
            + [IMAGE] * merged_tokens(g, MERGE)
            + [END]
            + H.prompt(3 + 2 * i, vocab=IMAGE, seed=seed + i)
        )
    return ids


@torch.no_grad()
def _hf_logits(hf: torch.nn.Module, ids: list[int], pixels: torch.Tensor, grids) -> torch.Tensor:
    t = torch.tensor([ids])
    out = hf(input_ids=t, pixel_values=pixels, image_grid_thw=torch.tensor(grids),
             mm_token_type_ids=(t == IMAGE).int())  # fmt: skip
    return out.logits[0].float()


@torch.no_grad()
def _our_logits(ours: Qwen35ForCausalLM, ids: list[int], n_prompt: int, pixels, grids, chunks: list[int]):
    """Prefill ids[:n_prompt] in chunks, then the rest one token at a time -> logits [len(ids), V]."""
    placed: PromptImages = place_images(ids[:n_prompt], IMAGE, grids, MERGE)
    placed.embeds = ours.encode_images(pixels, grids)
    s = H.Session(ours, max_tokens=len(ids) + 16)
    sid = s.new_seq()
    out, start = [], 0
    for n in chunks + [1] * (len(ids) - n_prompt):
        end = start + n
        fields = placed.chunk_fields(start, end) if end <= n_prompt else {"rope_delta": placed.rope_delta}
        chunk = replace(s._chunk(sid, ids[start:end]), **fields)
        out.append(_step(s, sid, chunk))
        start = end
    return torch.cat(out)


def _step(s: H.Session, sid: int, chunk: SeqChunk) -> torch.Tensor:
    from hinfer.batch import build_forward_batch

    batch = build_forward_batch([chunk], s.page_size, "cpu")
    hidden = s.model(batch, s.state)
    s.seqs[sid].cached += len(chunk.token_ids)
    return s.model.compute_logits(hidden[batch.logits_indices])


def _check(got: torch.Tensor, ref: torch.Tensor, what: str) -> None:
    assert got.shape == ref.shape
    err = (got - ref).abs().max().item()
    assert err <= FP32_ATOL, f"{what}: max abs logits error {err:.3g}"


def test_one_image_one_pass(models) -> None:
    hf, ours = models
    grids = [(1, 4, 6)]
    ids = _prompt(grids, seed=1)
    pixels = V.random_pixels(grids, ours.visual.cfg.patch_dim, seed=2)
    with H.one_thread():
        ref = _hf_logits(hf, ids, pixels, grids)
        _check(_our_logits(ours, ids, len(ids), pixels, grids, [len(ids)]), ref, "one image")


def test_several_images_chunked_then_decode(models) -> None:
    """Three images of different shapes; prefill chunks that start and end inside images; 4 decode steps."""
    hf, ours = models
    grids = [(1, 6, 6), (1, 2, 8), (1, 10, 4)]
    ids = _prompt(grids, seed=3)
    n_prompt = len(ids)
    ids += H.prompt(4, vocab=IMAGE, seed=9)
    pixels = V.random_pixels(grids, ours.visual.cfg.patch_dim, seed=4)
    chunks = [11, 7, 1, 13, n_prompt - 32]  # the first image's 9 tokens start at 10
    with H.one_thread():
        ref = _hf_logits(hf, ids, pixels, grids)
        _check(
            _our_logits(ours, ids, n_prompt, pixels, grids, chunks), ref, "several images, chunked + decode"
        )


def test_image_changes_the_logits(models) -> None:
    """The images matter: other pixels give other logits after the image (the parity above is not vacuous)."""
    _, ours = models
    grids = [(1, 4, 6)]
    ids = _prompt(grids, seed=1)
    with H.one_thread():
        a = _our_logits(ours, ids, len(ids), V.random_pixels(grids, 96, seed=2), grids, [len(ids)])
        b = _our_logits(ours, ids, len(ids), V.random_pixels(grids, 96, seed=3), grids, [len(ids)])
    first = ids.index(IMAGE)
    assert torch.equal(a[:first], b[:first])
    assert (a[first:] - b[first:]).abs().max() > 0.1


def test_positions_match_transformers(models) -> None:
    hf, _ = models
    grids = [(1, 6, 6), (1, 2, 8), (1, 10, 4)]
    ids = _prompt(grids, seed=3)
    t = torch.tensor([ids])
    ref, delta = hf.model.get_rope_index(t, (t == IMAGE).int(), image_grid_thw=torch.tensor(grids))
    placed = place_images(ids, IMAGE, grids, MERGE)
    assert placed.positions == ref[:, 0].tolist()
    assert placed.rope_delta == delta.item()


def test_placeholder_count_must_match() -> None:
    with pytest.raises(ValueError, match="placeholder"):
        place_images([1, IMAGE, IMAGE, 2], IMAGE, [(1, 4, 6)], MERGE)
    with pytest.raises(ValueError, match="one run"):
        place_images([1, IMAGE, 2, IMAGE, 3], IMAGE, [(1, 2, 4)], MERGE)


def test_images_are_found_by_chunk() -> None:
    """Which images a prefill chunk reaches, and each image's embeddings landing in its own rows."""
    grids = [(1, 2, 2), (1, 2, 4), (1, 4, 2)]  # 1, 2 and 2 tokens
    ids = [1, IMAGE, 2, IMAGE, IMAGE, 3, 4, IMAGE, IMAGE, 5]
    placed = place_images(ids, IMAGE, grids, MERGE)
    assert placed.counts == [1, 2, 2]
    assert placed.images_in(0, 2) == [0] and placed.images_in(2, 4) == [1] and placed.images_in(4, 8) == [1, 2]
    assert placed.images_in(5, 7) == [] and placed.images_in(9, 10) == []
    for i in (2, 0, 1):
        placed.set_image(i, torch.full((placed.counts[i], 3), float(i)))
    assert placed.embeds[:, 0].tolist() == [0, 1, 1, 2, 2] and placed.encoded == {0, 1, 2}
