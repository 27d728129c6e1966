"""Quantized weights (fp8 W8A8/W8A16, int4 W4A16, int4 and fp8 MoE routed experts), named recipes and in-place
model quantization.

See docs/quantization.md for formats, layouts, measured errors and what is supported.
"""

from __future__ import annotations

from typing import Any

# Lazy: `hinfer.quant.recipes` is torch-free and the memory plan imports it; the kernels' modules import torch.
_EXPORTS = {
    "RowSplitWeight": "apply", "quantize_model": "apply", "quantize_weight": "apply",
    "Fp8ExpertsWeight": "experts", "Int4ExpertsWeight": "experts", "quantize_experts": "experts",
    "quantize_experts_fp8": "experts", "quantize_experts_int4": "experts",
    "Fp8Weight": "fp8", "dequantize_act_fp8_ref": "fp8", "quantize_act_fp8_ref": "fp8", "quantize_fp8": "fp8",
    "Int4Weight": "int4", "pack_int4": "int4", "quantize_int4": "int4", "unpack_int4": "int4",
    "RECIPES": "recipes", "QuantRecipe": "recipes", "get_recipe": "recipes",
}  # fmt: skip
__all__ = sorted(_EXPORTS)


def __getattr__(name: str) -> Any:
    if name not in _EXPORTS:
        raise AttributeError(name)
    import importlib

    return getattr(importlib.import_module(f"hinfer.quant.{_EXPORTS[name]}"), name)
