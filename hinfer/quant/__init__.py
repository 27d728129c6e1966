"""Quantized weights (fp8 W8A8/W8A16, int4 W4A16), named recipes and in-place model quantization.

See docs/quantization.md for formats, layouts, measured errors and what is supported.
"""

from hinfer.quant.apply import RowSplitWeight, quantize_model, quantize_weight
from hinfer.quant.fp8 import Fp8Weight, dequantize_act_fp8_ref, quantize_act_fp8_ref, quantize_fp8
from hinfer.quant.int4 import Int4Weight, pack_int4, quantize_int4, unpack_int4
from hinfer.quant.recipes import RECIPES, QuantRecipe, get_recipe

__all__ = [
    "RECIPES", "Fp8Weight", "Int4Weight", "QuantRecipe", "RowSplitWeight", "dequantize_act_fp8_ref",
    "get_recipe", "pack_int4", "quantize_act_fp8_ref", "quantize_fp8", "quantize_int4", "quantize_model",
    "quantize_weight", "unpack_int4",
]  # fmt: skip
