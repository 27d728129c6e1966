"""hinfer.LLM: the offline Python API. Runs the same EngineCore as the server, stepping it in the caller's thread."""

from __future__ import annotations

from collections import deque
from dataclasses import dataclass, field, replace
from pathlib import Path

import torch
from PIL import Image

from hinfer.config import EngineConfig
from hinfer.engine.factory import build_core, load_model
from hinfer.engine.protocol import GenerationRequest, TokenEvent
from hinfer.model.image_decode import decode_image
from hinfer.model.image_preprocess import ImageSettings, preprocess_image
from hinfer.model.image_prompt import ImageInput, expand_image_pads
from hinfer.sampling_params import SamplingParams

Prompt = str | list[int] | list[dict]


@dataclass
class RequestOutput:
    prompt_token_ids: list[int]
    token_ids: list[int]
    text: str
    finish_reason: str | None
    logprobs: list[float] | None = None
    cached_tokens: int = 0  # prompt tokens taken from the prefix cache
    prompt_logprobs: list[float | None] | None = None  # with SamplingParams.prompt_logprobs (first is None)
    events: list[TokenEvent] = field(default_factory=list, repr=False)


def take_images(messages: list[dict]) -> tuple[list[dict], list[Image.Image]]:
    """The messages with each image item reduced to {"type": "image"} (what the template places), and the images
    (decoded: PIL images as they are, bytes and file paths through the decoder's checks) in order."""
    out, images = [], []
    for m in messages:
        content = m.get("content")
        if not isinstance(content, list):
            out.append(m)
            continue
        items = []
        for item in content:
            if isinstance(item, dict) and item.get("type") == "image":
                img = item.get("image")
                if isinstance(img, str | Path):
                    img = Path(img).read_bytes()
                images.append(decode_image(img) if isinstance(img, bytes) else img)
                items.append({"type": "image"})
            else:
                items.append(item)
        out.append({**m, "content": items})
    return out, images


class LLM:
    """`LLM("demo")` or `LLM("/path/to/checkpoint", device="cuda", dtype="bf16")`."""

    def __init__(
        self,
        model: str = "demo",
        device: str = "auto",
        dtype: str | None = None,
        engine_config: EngineConfig | None = None,
        **engine_kwargs,
    ) -> None:
        ecfg = engine_config or EngineConfig(device=device, dtype=dtype or "auto", **engine_kwargs)
        self._loaded = load_model(model, ecfg)
        self.config = self._loaded.cfg
        self.engine_config = self._loaded.ecfg
        self.model = self._loaded.model
        self.tokenizer = self._loaded.tokenizer
        self.core = build_core(self._loaded)
        self._next_id = 0

    def default_sampling(self, **fields) -> SamplingParams:
        """SamplingParams with the model's sampling defaults (its generation_config.json, as
        EngineConfig.generation_config picks them), then `fields`: what generate uses when given none."""
        return self.core.sampling_defaults.params(**fields)

    def encode_prompt(self, prompt: Prompt, **template_kwargs) -> list[int]:
        """A string is used as is; a list of ints is token ids; a list of messages gets the chat template (user
        content items {"type": "image", "image": a PIL image, bytes or a file path} become the image's tokens)."""
        return self.encode_with_images(prompt, **template_kwargs)[0]

    def encode_with_images(self, prompt: Prompt, **template_kwargs) -> tuple[list[int], list[ImageInput]]:
        """encode_prompt, and the prompt's images preprocessed for the engine (GenerationRequest.images)."""
        if isinstance(prompt, str):
            return self.tokenizer.encode(prompt), []
        if not (prompt and isinstance(prompt[0], dict)):
            return list(prompt), []  # type: ignore[arg-type]
        messages, images = take_images(prompt)  # type: ignore[arg-type]
        ids = self.tokenizer.encode(self.tokenizer.apply_chat_template(messages, **template_kwargs))
        if not images:
            return ids, []
        vision = self.model.visual.cfg if self.model.visual is not None else None
        if vision is None:
            raise ValueError("this model takes no images (no vision tower loaded)")
        inputs = [ImageInput(*preprocess_image(img, ImageSettings.from_config(vision))) for img in images]
        pad = self.tokenizer.token_to_id("<|image_pad|>")
        return expand_image_pads(ids, pad, [i.grid for i in inputs], vision.spatial_merge_size), inputs

    def generate(
        self,
        prompts: Prompt | list[Prompt],
        sampling: SamplingParams | list[SamplingParams] | None = None,
        **template_kwargs,
    ) -> list[RequestOutput]:
        if isinstance(prompts, str) or (prompts and isinstance(prompts[0], dict | int)):
            prompts = [prompts]  # type: ignore[list-item]
        params = sampling if isinstance(sampling, list) else [sampling or self.default_sampling()] * len(prompts)
        outs: dict[str, RequestOutput] = {}
        queue: deque[GenerationRequest] = deque()
        for prompt, p in zip(prompts, params):
            rid = f"llm-{self._next_id}"
            self._next_id += 1
            ids, images = self.encode_with_images(prompt, **template_kwargs)
            req = GenerationRequest(rid, ids, replace(p), images=images)
            req.sampling.validate()
            self.core.validate(req)  # bad input fails before anything runs
            queue.append(req)
            outs[rid] = RequestOutput(req.prompt_token_ids, [], "", None)
        order, pending = list(outs), set(outs)
        sch = self.core.scheduler
        while pending:
            # hand requests over only as lanes free up: offline work never meets the queue limit or its timeout
            while queue and len(sch.running) + len(sch.waiting) < sch.max_concurrency:
                self.core.add(queue.popleft())
            for ev in self.core.step():
                o = outs[ev.request_id]
                o.events.append(ev)
                o.token_ids += ev.token_ids
                o.text += ev.text
                if ev.prompt_logprobs is not None:
                    o.prompt_logprobs = ev.prompt_logprobs
                if ev.logprobs is not None:
                    o.logprobs = (o.logprobs or []) + ev.logprobs
                if ev.finish_reason is not None:
                    o.finish_reason = ev.finish_reason
                    o.cached_tokens = ev.usage.cached_tokens if ev.usage is not None else 0
                    pending.discard(ev.request_id)
        return [outs[r] for r in order]

    def clear_prefix_cache(self) -> None:
        """Forget every cached prefix (KV pages and GDN checkpoints); later prompts are computed in full."""
        self.core.clear_prefix_cache()

    @torch.inference_mode()
    def logits(self, token_ids: list[int]) -> torch.Tensor:
        """Full-sequence fp32 logits [L, V] of one prompt, on a private state (parity checks)."""
        return self.core.runner.prompt_logits(token_ids, self.engine_config.page_size)

    def close(self) -> None:
        """Stop what the engine started: with tensor_parallel > 1, the other ranks' processes (also done at exit)."""
        self.core.close()

    def __enter__(self) -> LLM:
        return self

    def __exit__(self, *exc) -> None:
        self.close()
