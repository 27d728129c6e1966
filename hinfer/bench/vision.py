"""`hinfer bench --vision`: the vision tower's time per image at several sizes, and the time to first token of a
prompt holding one image beside the same prompt without it, on EngineCore (the engine the server steps: the
request's image placed on submit and its pages named by its content, encoded by the prefill step that reaches
it, image tokens at their (t, h, w) rotary positions).

1. encoder: a seeded random-noise image of each size through the real preprocessor (its host ms recorded), then
   `encode_images` as the runner calls it (pixels from host memory), and again from pixels already on the device;
   CUDA events, medians of `repeats` after a warm-up; the FLOPs of one image over the bf16 GEMM rate measured in
   the same run give a floor.
2. TTFT, greedy one-token requests on an idle core, the prefix cache cleared before each, three cases taking
   turns, every repeat with new text:
   image:  half the text, <|vision_start|>, the image's placeholder tokens, <|vision_end|>, the other half;
   text:   the same text alone;
   same length: the image's tokens replaced by text (the image prompt's prefill without the encoder).
A table on stdout and a JSON in --out (GPU name, commit, command). With a config the weights are random at the
real shapes, the vision tower's too (from the config's vision_config); --device cpu runs a tiny config as a smoke
test whose timings mean nothing.
"""

from __future__ import annotations

import json
import logging
import platform
import random
import time
from collections.abc import Callable
from dataclasses import asdict, dataclass, field, replace
from functools import partial
from pathlib import Path

import numpy as np
import torch
from PIL import Image

from hinfer.bench import floors, measure
from hinfer.bench.agent import percentile
from hinfer.bench.engine_timing import FirstToken, first_token
from hinfer.bench.run import build_model, git_commit, resolve_model, truncate_layers
from hinfer.config import EngineConfig, load_model_config
from hinfer.engine.core import EngineCore
from hinfer.engine.factory import make_core, resolve_engine_config
from hinfer.fixtures import tokenizer_dir
from hinfer.model.image_preprocess import ImageSettings, preprocess_image
from hinfer.model.image_prompt import ImageInput
from hinfer.model.qwen3_5 import Qwen35ForCausalLM
from hinfer.model.random_init import random_vision
from hinfer.model.vision_grid import Grid, merged_tokens
from hinfer.model.vision_loader import load_vision_weights
from hinfer.tokenizer import Tokenizer
from hinfer.vision_config import VisionConfig

log = logging.getLogger("hinfer.bench")

CASES = ("image", "text", "same_length")


@dataclass
class VisionSpec:
    model: str
    sizes: list[int] = field(default_factory=lambda: [512, 1024, 2048])  # square images timed through the encoder
    ttft_size: int = 1024  # the image of the TTFT prompt
    text_tokens: int = 100  # the TTFT prompt's text, around the image
    repeats: int = 5
    weights: str = "bf16"
    layers: int | None = None
    seed: int = 0
    out_dir: Path = Path("bench/results")
    command: str = ""  # the command line, recorded in the JSON


def noise_image(side: int, seed: int) -> Image.Image:
    """A square RGB image of seeded noise (the encoder's cost does not depend on what the pixels show)."""
    rng = np.random.default_rng(seed)
    return Image.fromarray(rng.integers(0, 256, (side, side, 3), dtype=np.uint8), "RGB")


def prepared(side: int, settings: ImageSettings, seed: int) -> tuple[ImageInput, float]:
    """-> (the preprocessed image, seconds the preprocessor took on the host)."""
    img = noise_image(side, seed)
    t0 = time.perf_counter()
    pixels, grid = preprocess_image(img, settings)
    return ImageInput(pixels, grid), time.perf_counter() - t0


def encoder_flops(v: VisionConfig, grid: Grid) -> int:
    """Multiply-adds x 2 of encoding one image: patch embedding, every block's projections and attention within
    each frame, the merger."""
    t, h, w = grid
    n, d, i, m = t * h * w, v.hidden_size, v.intermediate_size, v.hidden_size * v.merge_unit
    block = 2 * n * d * (3 * d + d + 2 * i) + t * 4 * (h * w) ** 2 * d
    merger = 2 * (n // v.merge_unit) * m * (m + v.out_hidden_size)
    return 2 * n * v.patch_dim * d + v.depth * block + merger


def timed(fn: Callable[[], object], repeats: int, dev: torch.device) -> list[float]:
    """Seconds of each of `repeats` calls, after one untimed: CUDA events on the GPU, the wall clock elsewhere."""
    fn()
    measure.sync(dev)
    out = []
    for _ in range(repeats):
        if dev.type == "cuda":
            a, b = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
            a.record()
            fn()
            b.record()
            b.synchronize()
            out.append(a.elapsed_time(b) / 1e3)
        else:
            t0 = time.perf_counter()
            fn()
            out.append(time.perf_counter() - t0)
    return out


@torch.inference_mode()
def encoder_rows(model: Qwen35ForCausalLM, spec: VisionSpec, dev: torch.device, gemm_flops: float) -> list[dict]:
    v = model.visual.cfg
    settings = ImageSettings.from_config(v)
    rows = []
    for k, side in enumerate(spec.sizes):
        img, prep_s = prepared(side, settings, spec.seed + k)
        host = timed(partial(model.encode_images, img.pixels, [img.grid]), spec.repeats, dev)
        device = timed(partial(model.encode_images, img.pixels.to(dev), [img.grid]), spec.repeats, dev)
        flops = encoder_flops(v, img.grid)
        med = percentile(host, 0.5)
        rows.append({
            "size": side, "grid": list(img.grid), "patches": img.pixels.shape[0],
            "tokens": merged_tokens(img.grid, v.spatial_merge_size), "preprocess_ms": 1e3 * prep_s,
            "encode_ms": 1e3 * med, "encode_ms_all": [1e3 * s for s in host],
            "encode_device_pixels_ms": 1e3 * percentile(device, 0.5),
            "encode_device_pixels_ms_all": [1e3 * s for s in device], "flops": flops,
            "tflop_s": flops / med / 1e12, "floor_ms": 1e3 * flops / gemm_flops, "ratio": flops / gemm_flops / med,
        })  # fmt: skip
        log.info("encoder %dx%d (%d tokens): %.2f ms (%.2f from device pixels; floor %.2f), preprocess %.1f ms",
                 side, side, rows[-1]["tokens"], 1e3 * med, rows[-1]["encode_device_pixels_ms"],
                 rows[-1]["floor_ms"], 1e3 * prep_s)  # fmt: skip
    return rows


class Prompts:
    """Seeded text ids that are never one of the vision tokens, and the three TTFT prompts built from them."""

    def __init__(self, spec: VisionSpec, v: VisionConfig, vocab: int, image_tokens: int) -> None:
        self._rng, self._vocab, self._v = random.Random(spec.seed), vocab, v
        self._special = {v.image_token_id, v.video_token_id, v.vision_start_token_id, v.vision_end_token_id}
        self.head, self.tail = spec.text_tokens // 2, spec.text_tokens - spec.text_tokens // 2
        self.image_tokens = image_tokens

    def ids(self, n: int) -> list[int]:
        out: list[int] = []
        while len(out) < n:
            t = self._rng.randrange(1, self._vocab)
            if t not in self._special:
                out.append(t)
        return out

    def cases(self) -> dict[str, list[int]]:
        head, tail = self.ids(self.head), self.ids(self.tail)
        v = self._v
        image = [v.vision_start_token_id, *[v.image_token_id] * self.image_tokens, v.vision_end_token_id]
        return {"image": head + image + tail, "text": head + tail,
                "same_length": head + self.ids(len(image)) + tail}  # fmt: skip


def ttft_cases(core: EngineCore, prompts: Prompts, img: ImageInput, repeats: int, tag: str) -> dict[str, list[FirstToken]]:
    """`repeats` samples of each case, in rotating order so drift falls on all of them."""
    out: dict[str, list[FirstToken]] = {c: [] for c in CASES}
    for r in range(repeats):
        ids = prompts.cases()
        for case in CASES[r % 3:] + CASES[: r % 3]:
            core.clear_prefix_cache()
            images = [img] if case == "image" else None
            out[case].append(first_token(core, f"{tag}{case}{r}", ids[case], images))
    return out


def summary(samples: list[FirstToken]) -> dict:
    s = [x.seconds for x in samples]
    return {"prompt_tokens": samples[0].prompt_tokens, "cached_tokens": [x.cached_tokens for x in samples],
            "ttft_s": s, "ttft_median_s": percentile(s, 0.5), "ttft_min_s": min(s), "ttft_max_s": max(s)}  # fmt: skip


def attach_vision(model: Qwen35ForCausalLM, path: Path, is_ckpt: bool, seed: int) -> str:
    """The tower from the checkpoint when it has one, else random at the config's shapes. -> where it came from."""
    if is_ckpt:
        from hinfer.model.vision import VisionEncoder
        from hinfer.weights.hf_reader import HFCheckpoint

        ck = HFCheckpoint(path)
        if ck.has_visual:
            dev, dtype = model.embed_tokens.device, model.embed_tokens.dtype
            model.visual = VisionEncoder(model.cfg.vision, dtype, dev)  # type: ignore[arg-type]
            load_vision_weights(model.visual, ((n, t.to(dev)) for n, t in ck.iter_visual(dtype)), str(path))
            return "checkpoint"
    random_vision(model, seed=seed)
    return "random"


def run_vision(spec: VisionSpec, ecfg: EngineConfig) -> dict:
    """-> the result written to JSON: {"meta", "encoder", "ttft", "checks"}."""
    if ecfg.device != "cpu" and not torch.cuda.is_available():
        raise SystemExit("hinfer bench --vision needs a CUDA GPU (or --device cpu for a smoke run of a tiny config)")
    if spec.repeats < 1 or spec.text_tokens < 2 or min(spec.sizes + [spec.ttft_size], default=0) < 1:
        raise SystemExit("--vision needs --repeats >= 1, --text-tokens >= 2 and image sizes >= 1")
    dev = torch.device("cpu" if ecfg.device == "cpu" else "cuda")
    dtype = torch.bfloat16 if dev.type == "cuda" else torch.float32
    path, is_ckpt = resolve_model(spec.model)
    cfg = truncate_layers(load_model_config(path), spec.layers)
    v = cfg.vision
    if v is None:
        raise SystemExit(f"{spec.model}: its config has no vision_config (a text-only model)")
    settings = ImageSettings.from_config(v)
    ttft_img, ttft_prep_s = prepared(spec.ttft_size, settings, spec.seed + 1000)
    image_tokens = merged_tokens(ttft_img.grid, v.spatial_merge_size)
    ps = ecfg.page_size
    max_context = -(-(spec.text_tokens + image_tokens + 2 + 4) // ps) * ps
    cfg = replace(cfg, max_position_embeddings=max(cfg.max_position_embeddings, max_context))
    ecfg = resolve_engine_config(cfg, replace(
        ecfg, device=dev.type, dtype="bf16" if dev.type == "cuda" else "fp32", spec=None, max_concurrency=1,
        max_context=max_context, kv_capacity=2 * max_context))  # fmt: skip
    gemm = floors.matmul_flops(dev)
    log.info("measured: bf16 GEMM %.0f TFLOP/s", gemm / 1e12)
    model = build_model(path, is_ckpt, cfg, spec.weights, dev=dev, dtype=dtype)
    source = attach_vision(model, path, is_ckpt, spec.seed)
    tok = Tokenizer.from_dir(tokenizer_dir())
    vocab = min(cfg.vocab_size, tok.vocab_size)
    core = make_core(cfg, model, tok, ecfg, dev)
    prompts = Prompts(spec, v, vocab, image_tokens)
    encoder = encoder_rows(model, spec, dev, gemm)
    # one untimed round at the real shapes: kernel compilation and autotuning stay out of the timings
    ttft_cases(core, prompts, ttft_img, 1, "warm-")
    measure.sync(dev)
    samples = ttft_cases(core, prompts, ttft_img, spec.repeats, "")
    ttft = {case: summary(s) for case, s in samples.items()}
    image, text, same = (ttft[c]["ttft_median_s"] for c in CASES)
    ttft["image"] |= {"image_size": spec.ttft_size, "image_tokens": image_tokens, "preprocess_ms": 1e3 * ttft_prep_s,
                      "over_text": image / text, "over_same_length": image / same,
                      "image_cost_ms": 1e3 * (image - same)}  # fmt: skip
    for case, t in ttft.items():
        log.info("TTFT %s: median %.1f ms (%d prompt tokens)", case, 1e3 * t["ttft_median_s"], t["prompt_tokens"])
    ok = {
        "image_prompt_counts_its_image_tokens": ttft["image"]["prompt_tokens"] == spec.text_tokens + image_tokens + 2,
        "same_length_matches_image": ttft["same_length"]["prompt_tokens"] == ttft["image"]["prompt_tokens"],
        "nothing_from_the_cache": all(n == 0 for t in ttft.values() for n in t["cached_tokens"]),
    }  # fmt: skip
    for name, good in ok.items():
        if not good:
            log.warning("check failed: %s", name)
    meta = {
        "kind": "vision", "gpu": torch.cuda.get_device_name() if dev.type == "cuda" else "cpu",
        "commit": git_commit(), "command": spec.command, "model": str(spec.model), "layers": cfg.num_hidden_layers,
        "weights": spec.weights, "vision_weights": source, "vision_dtype": str(dtype).removeprefix("torch."),
        "vision_params": v.param_count, "kv_dtype": ecfg.kv_dtype, "page_size": ecfg.page_size,
        "prefill_chunk": ecfg.prefill_chunk, "prefix_cache": ecfg.prefix_cache, "gemm_tflop_s": gemm / 1e12,
        "torch": torch.__version__, "python": platform.python_version(),
        "workload": {k: val for k, val in asdict(spec).items() if k not in ("model", "weights", "layers", "out_dir",
                                                                             "command")},
    }  # fmt: skip
    result = {"meta": meta, "encoder": encoder, "ttft": ttft, "checks": ok}
    spec.out_dir.mkdir(parents=True, exist_ok=True)
    out = spec.out_dir / f"{time.strftime('%Y%m%d-%H%M%S')}-vision-{Path(str(spec.model)).name}-{spec.weights}.json"
    out.write_text(json.dumps(result, indent=1))
    log.info("wrote %s", out)
    return result
