"""The vision tower in `.hinfer` artifacts: `hinfer convert` carries a checkpoint's `model.visual.*` as `visual.*`
(bf16, whatever the recipe), the artifact loads into a model that answers an image prompt exactly as the folder
does, and `--no-vision` (converting or loading) leaves the tower out."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest
import torch
from PIL import Image

from hinfer import LLM, SamplingParams
from hinfer.cli.commands.convert import convert_checkpoint
from hinfer.errors import HinferError
from hinfer.weights.artifact import FORMAT_VERSION, open_artifact
from hinfer.weights.synth import write_synthetic_checkpoint

TEXT = {"hidden_size": 32, "intermediate_size": 64, "num_attention_heads": 2, "num_key_value_heads": 1,
        "head_dim": 16, "linear_num_key_heads": 1, "linear_num_value_heads": 2, "linear_key_head_dim": 8,
        "linear_value_head_dim": 8, "max_position_embeddings": 512}  # fmt: skip
VISION = {"depth": 1, "hidden_size": 32, "intermediate_size": 48, "num_heads": 2, "out_hidden_size": 32,
          "num_position_embeddings": 64}  # fmt: skip
N_VISUAL = 21  # tensors of a one-block tower


@pytest.fixture(scope="module")
def ckpt(tmp_path_factory, fixtures_dir) -> Path:
    """A tiny Qwen3.5-0.8B-shaped checkpoint with its vision tower (the real tokenizer, so prompts take images)."""
    return write_synthetic_checkpoint(fixtures_dir / "qwen3.5-0.8b", tmp_path_factory.mktemp("ck") / "ck", layers=4,
                                      progress=False, overrides=TEXT, vision=True, vision_overrides=VISION)


@pytest.fixture(scope="module")
def arts(ckpt, tmp_path_factory) -> dict[str, Path]:
    d = tmp_path_factory.mktemp("art")
    out = {q: convert_checkpoint(ckpt, d / f"m-{q}.hinfer", q) for q in ("bf16", "int4")}
    out["text"] = convert_checkpoint(ckpt, d / "m-text.hinfer", "int4", vision=False)
    return out


def _llm(path: Path, **kw) -> LLM:
    return LLM(str(path), device="cpu", max_concurrency=1, max_context=512, **kw)


def _ask(llm: LLM) -> tuple[list[int], int]:
    """Greedy tokens of a prompt holding one image, and its prompt token count."""
    img = Image.new("RGB", (64, 48), (30, 120, 220))
    msgs = [{"role": "user", "content": [{"type": "image", "image": img}, {"type": "text", "text": "What?"}]}]
    out = llm.generate([msgs], SamplingParams(max_tokens=6, temperature=0.0, ignore_eos=True))[0]
    return out.token_ids, len(out.prompt_token_ids)


def test_the_tower_is_stored_bf16_whatever_the_recipe(arts):
    for q in ("bf16", "int4"):
        art = open_artifact(arts[q])
        visual = {n: t for n, t in art.tensors.items() if n.startswith("visual.")}
        assert art.version == FORMAT_VERSION == 3 and art.has_visual and len(visual) == N_VISUAL, q
        assert all(t.dtype == torch.bfloat16 for t in visual.values()) and visual["visual.pos_embed.weight"].shape == (
            64, 32)  # fmt: skip
        assert not any(p.startswith("visual.") for p in art.layout)  # never quantized
    art = open_artifact(arts["text"])
    assert not art.has_visual and art.version == 3


@pytest.mark.parametrize("q", ["bf16", "int4"])
def test_artifact_answers_an_image_as_the_folder_does(ckpt, arts, q):
    folder = _llm(ckpt, weights=q)
    art = _llm(arts[q])
    for name, p in folder.model.visual.state_dict().items():
        assert torch.equal(p, art.model.visual.state_dict()[name]), name
    assert _ask(art) == _ask(folder)
    assert _ask(art)[1] > 64  # the image's tokens are in the prompt


def test_no_vision_leaves_the_tower_out(arts):
    with pytest.raises(ValueError, match="takes no images"):
        _ask(_llm(arts["text"]))  # converted with --no-vision
    llm = _llm(arts["bf16"], vision=False)  # loaded with --no-vision
    assert llm.model.visual is None and llm.engine_config.vision is False
    with pytest.raises(ValueError, match="takes no images"):
        _ask(llm)


def test_plan_and_inspect_see_the_tower(arts):
    def run(*args: str) -> str:
        r = subprocess.run([sys.executable, "-m", "hinfer", *args], capture_output=True, text=True, timeout=120)
        assert r.returncode == 0, r.stderr
        return r.stdout

    assert "vision:  21 tensors" in run("inspect", str(arts["bf16"]))
    assert "vision:  none (text only)" in run("inspect", str(arts["text"]))
    assert "vision tower" in run("plan", str(arts["int4"]), "--device", "cpu")
    assert "vision tower" not in run("plan", str(arts["text"]), "--device", "cpu")


def test_convert_refuses_a_tower_that_does_not_match_its_config(ckpt, tmp_path):
    import json

    view = tmp_path / "view"
    view.mkdir()
    for f in ckpt.iterdir():
        if f.name != "config.json":
            (view / f.name).symlink_to(f)
    raw = json.loads((ckpt / "config.json").read_text())
    raw["vision_config"]["intermediate_size"] = 40
    (view / "config.json").write_text(json.dumps(raw))
    bad = r"vision tensor 'model.visual.blocks.0.mlp.linear_fc1.(weight|bias)' has shape"
    with pytest.raises(HinferError, match=bad):
        convert_checkpoint(view, tmp_path / "v.hinfer", "bf16")
    assert not (tmp_path / "v.hinfer").exists()
