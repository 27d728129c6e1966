"""hinfer.LLM takes images in chat messages ({"type": "image", "image": PIL image | bytes | path}): a tiny
random multimodal checkpoint at the real vocabulary, loaded through load_model (vision tensors included),
answers greedily as transformers does, and --no-vision (vision=False) loads the text model only."""

from __future__ import annotations

import io
import shutil
from pathlib import Path

import hf_helpers as H
import numpy as np
import pytest
import torch
import vision_helpers as V
from PIL import Image

from hinfer import LLM
from hinfer.fixtures import fixed_test_seed, tokenizer_dir
from hinfer.llm import take_images
from hinfer.model.image_preprocess import ImageSettings, preprocess_image
from hinfer.sampling_params import SamplingParams

pytest.importorskip("transformers")

IMAGE_PAD = 248056


@pytest.fixture(scope="module")
def checkpoint(tmp_path_factory: pytest.TempPathFactory) -> tuple[torch.nn.Module, Path]:
    from transformers import Qwen3_5Config, Qwen3_5ForConditionalGeneration

    text = H.hf_config("dense_tied").to_dict() | {"vocab_size": 248320}
    text["rope_parameters"] |= {"mrope_section": [1, 1, 0], "mrope_interleaved": True}
    vision = V.hf_vision_config(out_hidden_size=text["hidden_size"], patch_size=16).to_dict()
    cfg = Qwen3_5Config(text_config=text, vision_config=vision, tie_word_embeddings=True)
    torch.manual_seed(fixed_test_seed())
    hf = Qwen3_5ForConditionalGeneration(cfg).eval()
    H.randomize_(hf, fixed_test_seed())
    V.randomize_vision_(hf, fixed_test_seed(), prefix="model.visual.")
    path = tmp_path_factory.mktemp("mm-llm")
    hf.save_pretrained(path)
    for f in tokenizer_dir().iterdir():
        shutil.copy(f, path / f.name)
    return hf, path


def _image() -> Image.Image:
    rng = np.random.default_rng(1)
    return Image.fromarray(rng.integers(0, 256, (70, 90, 3), dtype=np.uint8))


def _messages(image) -> list[dict]:
    return [
        {"role": "user", "content": [{"type": "image", "image": image}, {"type": "text", "text": "What?"}]}
    ]


def test_llm_answers_as_transformers(checkpoint, tmp_path: Path) -> None:
    hf, path = checkpoint
    llm = LLM(str(path), device="cpu", max_context=512, max_concurrency=2)
    png = io.BytesIO()
    _image().save(png, format="PNG")
    (tmp_path / "a.png").write_bytes(png.getvalue())
    greedy = SamplingParams(temperature=0, max_tokens=4, ignore_eos=True)
    outs = llm.generate([_messages(_image()), _messages(png.getvalue()), _messages(str(tmp_path / "a.png"))],
                        greedy, enable_thinking=False)  # fmt: skip
    ids = outs[0].prompt_token_ids
    pixels, grid = preprocess_image(_image(), ImageSettings())
    assert ids.count(IMAGE_PAD) == grid[1] * grid[2] // 4
    assert all(o.prompt_token_ids == ids and o.token_ids == outs[0].token_ids for o in outs)
    want: list[int] = []
    with torch.no_grad():
        for _ in range(4):
            t = torch.tensor([ids + want])
            logits = hf(input_ids=t, pixel_values=pixels, image_grid_thw=torch.tensor([grid]),
                        mm_token_type_ids=(t == IMAGE_PAD).int()).logits  # fmt: skip
            want.append(int(logits[0, -1].argmax()))
    assert outs[0].token_ids == want


def test_no_vision_loads_text_only(checkpoint) -> None:
    _, path = checkpoint
    llm = LLM(str(path), device="cpu", max_context=256, max_concurrency=1, vision=False)
    assert llm.model.visual is None
    with pytest.raises(ValueError, match="takes no images"):
        llm.generate(_messages(_image()))


def test_take_images_keeps_text_messages() -> None:
    msgs = [{"role": "system", "content": "s"}, {"role": "user", "content": [{"type": "text", "text": "t"}]}]
    assert take_images(msgs) == (msgs, [])


def test_images_over_two_ranks(checkpoint) -> None:
    """--tensor-parallel 2: rank 0 holds the vision tower and encodes the image, its embeddings go to rank 1 with
    the chunks (on the CPU, each rank takes them to its device); the answer is one process's, token for token,
    its logprobs within 1e-4 (fp32)."""
    _, path = checkpoint
    greedy = SamplingParams(temperature=0, max_tokens=4, ignore_eos=True, logprobs=0)
    kw = dict(device="cpu", max_context=512, max_concurrency=2, prefill_chunk=64)  # the image spans chunks
    one = LLM(str(path), **kw).generate([_messages(_image())], greedy, enable_thinking=False)[0]
    with LLM(str(path), tensor_parallel=2, **kw) as llm:
        assert llm.model.visual is not None
        two = llm.generate([_messages(_image())], greedy, enable_thinking=False)[0]
    assert two.prompt_token_ids == one.prompt_token_ids and IMAGE_PAD in one.prompt_token_ids
    assert two.token_ids == one.token_ids
    torch.testing.assert_close(torch.tensor(two.logprobs), torch.tensor(one.logprobs), rtol=0, atol=1e-4)
