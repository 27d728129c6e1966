"""hinfer: a specialized inference engine for the Qwen3.5 hybrid model family on one Hopper GPU."""

from __future__ import annotations

from typing import Any

__version__ = "0.1.0"
__all__ = ["LLM", "SamplingParams", "__version__"]


def __getattr__(name: str) -> Any:  # lazy: `hinfer --help` should not pay for importing torch
    if name == "LLM":
        from hinfer.llm import LLM

        return LLM
    if name == "SamplingParams":
        from hinfer.sampling_params import SamplingParams

        return SamplingParams
    raise AttributeError(name)
