"""Hugging Face transformers on the same shapes, in the same run: the baseline `--vs-hf` compares against."""

from __future__ import annotations

import json
import time
from pathlib import Path

import torch

from hinfer.config import ModelConfig, find_config_file


def hf_decode(path: Path, cfg: ModelConfig, depth: int, steps: int = 16) -> float:
    """tok/s of transformers' Qwen3.5 decoding one sequence at `depth` (bf16, random weights, its own cache)."""
    from transformers import AutoConfig, AutoModelForCausalLM

    raw = json.loads(find_config_file(path).read_text())
    text = raw.get("text_config", raw) | {
        "num_hidden_layers": cfg.num_hidden_layers, "layer_types": list(cfg.layer_types),
        "model_type": "qwen3_5_moe_text" if cfg.is_moe else "qwen3_5_text", "mtp_num_hidden_layers": 0,
    }  # fmt: skip
    text.pop("quantization_config", None)
    hf_cfg = AutoConfig.for_model(**text)
    with torch.device("meta"):
        model = AutoModelForCausalLM.from_config(hf_cfg, torch_dtype=torch.bfloat16)
    model = model.to_empty(device="cuda").eval()
    with torch.no_grad():
        for name, p in model.named_parameters():
            if p.dim() == 1:
                p.normal_(0, 0.1) if "norm" in name else p.uniform_(0.5, 1.5)
            else:
                p.normal_(0, p.shape[-1] ** -0.5)
    ids = torch.randint(1, cfg.vocab_size, (1, depth), device="cuda")
    with torch.inference_mode():
        out = model(ids, use_cache=True)
        past, nxt = out.past_key_values, out.logits[:, -1:].argmax(-1)
        for i in range(steps + 2):
            if i == 2:  # two warm-up steps
                torch.cuda.synchronize()
                t0 = time.perf_counter()
            out = model(nxt, past_key_values=past, use_cache=True)
            past, nxt = out.past_key_values, out.logits[:, -1:].argmax(-1)
        torch.cuda.synchronize()
    dt = time.perf_counter() - t0
    del model, past, out
    torch.cuda.empty_cache()
    return steps / dt
