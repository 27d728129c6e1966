"""`hinfer bench --vision` end to end on the CPU at a tiny size: random vision weights at the config's shapes,
the encoder timed per image size, the image prompt's first token through the engine (placed on submit, encoded
in its prefill) beside the text alone and text of the same length; the JSON and table land. Timings mean nothing
here."""

from __future__ import annotations

import json
import math

import torch

from hinfer.bench.vision import VisionSpec, encoder_flops, run_vision
from hinfer.bench.vision_report import vision_table
from hinfer.config import EngineConfig, ModelConfig
from hinfer.model.qwen3_5 import Qwen35ForCausalLM
from hinfer.model.random_init import random_init, random_vision
from hinfer.vision_config import VisionConfig

# the root conftest's tiny text model inside a multimodal wrapper; 16-pixel patches so the preprocessor's smallest
# image (256 x 256) is 64 tokens; vision token ids inside the tiny vocabulary
VISION = {"depth": 2, "hidden_size": 32, "num_heads": 4, "intermediate_size": 48, "out_hidden_size": 64,
          "num_position_embeddings": 36, "patch_size": 16, "spatial_merge_size": 2, "temporal_patch_size": 2}
IDS = {"image_token_id": 500, "video_token_id": 501, "vision_start_token_id": 502, "vision_end_token_id": 503}


def multimodal(text: dict) -> dict:
    text = text | {"model_type": "qwen3_5_text",
                   "rope_parameters": text["rope_parameters"] | {"mrope_section": [4, 2, 2]}}  # 8 rotary freqs
    return {"model_type": "qwen3_5", "text_config": text, "vision_config": VISION} | IDS


def test_vision_bench_runs_on_cpu(tmp_path, tiny_model):
    torch.set_num_threads(1)
    (tmp_path / "m").mkdir()
    (tmp_path / "m" / "config.json").write_text(json.dumps(multimodal(tiny_model[0].extra["raw"])))
    spec = VisionSpec(model=str(tmp_path / "m"), sizes=[256, 320], ttft_size=256, text_tokens=20, repeats=2,
                      out_dir=tmp_path / "out", command="hinfer bench m --vision")  # fmt: skip
    result = run_vision(spec, EngineConfig(device="cpu", page_size=16, prefill_chunk=64))
    enc = result["encoder"]
    assert [(r["size"], r["grid"], r["patches"], r["tokens"]) for r in enc] == [
        (256, [1, 16, 16], 256, 64), (320, [1, 20, 20], 400, 100)]  # fmt: skip
    assert all(len(r["encode_ms_all"]) == len(r["encode_device_pixels_ms_all"]) == 2 and r["encode_ms"] > 0
               and r["flops"] > 0 and r["floor_ms"] > 0 for r in enc)  # fmt: skip
    ttft = result["ttft"]
    assert list(ttft) == ["image", "text", "same_length"]
    assert ttft["image"]["prompt_tokens"] == ttft["same_length"]["prompt_tokens"] == 20 + 64 + 2
    assert ttft["text"]["prompt_tokens"] == 20 and ttft["image"]["image_tokens"] == 64
    assert all(t["cached_tokens"] == [0, 0] and 0 < t["ttft_min_s"] <= t["ttft_median_s"] <= t["ttft_max_s"]
               for t in ttft.values())  # fmt: skip
    assert all(result["checks"].values()) and len(result["checks"]) == 3
    meta = result["meta"]
    assert meta["kind"] == "vision" and meta["gpu"] == "cpu" and meta["vision_weights"] == "random"
    assert meta["command"] == "hinfer bench m --vision" and meta["workload"]["ttft_size"] == 256
    out = list((tmp_path / "out").glob("*-vision-m-bf16.json"))
    assert len(out) == 1 and json.loads(out[0].read_text())["ttft"]["image"]["image_tokens"] == 64
    table = vision_table(result)
    assert "| 256x256 | 256 | 64 |" in table and "| text + one image | 86 |" in table
    assert "| the text alone | 20 |" in table and "checks: all passed" in table


def test_random_vision_tower_is_finite_and_varies(seed, tiny_model):
    cfg = ModelConfig.from_dict(multimodal(tiny_model[0].extra["raw"]))
    model = random_init(Qwen35ForCausalLM(cfg, torch.float32), seed=seed)
    visual = random_vision(model, seed=seed)
    assert model.visual is visual and visual.pos_embed.weight.dtype == torch.float32
    norm = visual.blocks[0].norm1.weight
    assert abs(norm.mean().item() - 1) < 0.1  # plain LayerNorm: weights near 1, not zero-centred
    pixels = torch.rand(64, cfg.vision.patch_dim, generator=torch.Generator().manual_seed(seed)) * 2 - 1
    out = model.encode_images(pixels, [(1, 8, 8)])
    assert out.shape == (16, 64) and torch.isfinite(out).all() and 0.1 < out.std().item() < 10
    again = random_vision(model, seed=seed)
    assert torch.equal(again.merger.linear_fc2.weight, visual.merger.linear_fc2.weight)  # seeded


def test_encoder_flops_of_a_1024_image_at_27b_shapes(fixtures_dir):
    raw = json.loads((fixtures_dir / "qwen3.6-27b" / "config.json").read_text())
    v = VisionConfig.from_dict(raw)
    assert v is not None
    n, d, i = 4096, 1152, 4304  # 64 x 64 patches of 16 pixels
    per_block = 2 * n * d * (4 * d + 2 * i) + 4 * n * n * d
    merger = 2 * 1024 * (4 * d) * (4 * d + 5120)
    assert encoder_flops(v, (1, 64, 64)) == 2 * n * 1536 * d + 27 * per_block + merger
    assert math.isclose(encoder_flops(v, (1, 64, 64)) / 1e12, 5.56, rel_tol=0.01)  # ~5.6 TFLOP per image


def test_cli_flags():
    from hinfer.cli.commands.bench import fill_defaults
    from hinfer.cli.main import build_parser

    args = build_parser().parse_args(["bench", "qwen3.6-27b", "--vision", "--quant", "int4"])
    fill_defaults(args)
    assert (args.vision, args.image_sizes, args.ttft_image, args.text_tokens, args.repeats) == (
        True, [512, 1024, 2048], 1024, 100, 5)  # fmt: skip
    args = build_parser().parse_args(["bench", "x", "--vision", "--image-sizes", "1K,2K", "--repeats", "3"])
    assert (args.image_sizes, args.repeats) == ([1024, 2048], 3)
    assert build_parser().parse_args(["bench", "x"]).vision is False
