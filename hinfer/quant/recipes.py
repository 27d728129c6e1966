"""Named quantization recipes: which of the model's fused projection weights are converted, and how.

Converted (`targets`), each a [N, K] weight of hinfer.model.qwen3_5:
  attn_qkv  Attention.qkv_proj.weight (q + gate, k, v fused)     attn_o   Attention.o_proj
  gdn_in    GatedDeltaNet.in_proj.weight (qkv, z, b, a fused)   gdn_out  GatedDeltaNet.out_proj
  mlp       MLP.gate_up.weight, MLP.down_proj (dense layers)   shared_expert  the MoE layers' shared-expert MLP
Kept in the model dtype by every recipe here: embed_tokens, lm_head (tied or not), the MTP head (fc and its
layer: it runs once per draft token; convert_mtp turns it on), MoE routers (`router`, `shared_expert_gate`),
GDN conv1d weight, A_log, dt_bias, all norms, and - with keep_gdn_ab (default) - the last 2*HV rows of the fused
GDN in_proj (in_proj_b, in_proj_a): tiny (96 rows of 16480 on the 27B) but they set the decay
g = -exp(A_log) * softplus(a + dt_bias) and beta; int4's ~10% relative error on a dot product would shift
exp(g) by tens of percent, and the official FP8 checkpoints keep them bf16 too. The head rows are quantized
and the tail rows computed in bf16 by `RowSplitWeight` (two launches at decode, no concatenation copy).
MoE routed experts stay bf16 for now (their grouped kernels belong to the MoE work; `experts` is reserved).
"""

from __future__ import annotations

from dataclasses import dataclass, field, replace

ALL_TARGETS = frozenset({"attn_qkv", "attn_o", "gdn_in", "gdn_out", "mlp", "shared_expert"})


@dataclass(frozen=True)
class QuantRecipe:
    name: str
    fmt: str  # "bf16" | "fp8" | "int4"
    targets: frozenset[str] = field(default=ALL_TARGETS)
    keep_gdn_ab: bool = True
    convert_mtp: bool = False
    experts: bool = False  # MoE routed experts: not supported yet
    fp8_scales: str = "channel"  # "channel" (our conversion) | "block" (128x128, the official layout)
    int4_group: int = 128
    int4_zero_point: bool = True  # asymmetric: see docs/quantization.md for the measurement behind it

    def describe(self) -> str:
        if self.fmt == "bf16":
            return "bf16: nothing converted"
        how = (f"fp8 e4m3 {self.fp8_scales} scales" if self.fmt == "fp8"
               else f"int4 g{self.int4_group} {'asym' if self.int4_zero_point else 'sym'} + bf16 scales")
        kept = " (GDN in_proj b/a rows kept)" if self.keep_gdn_ab and "gdn_in" in self.targets else ""
        return f"{self.name}: {how} on {', '.join(sorted(self.targets))}{kept}"


_INT4 = QuantRecipe("int4-default", "int4")
RECIPES: dict[str, QuantRecipe] = {
    "bf16": QuantRecipe("bf16", "bf16", frozenset()),
    "fp8-default": QuantRecipe("fp8-default", "fp8"),
    "fp8-block": QuantRecipe("fp8-block", "fp8", fp8_scales="block"),
    "int4-default": _INT4,
    "int4-sym": replace(_INT4, name="int4-sym", int4_zero_point=False),
}
FORMAT_DEFAULT = {"bf16": "bf16", "fp8": "fp8-default", "int4": "int4-default"}


def get_recipe(name: str | QuantRecipe) -> QuantRecipe:
    """A recipe, a recipe name, or a format name (bf16 | fp8 | int4 -> its default recipe)."""
    if isinstance(name, QuantRecipe):
        return name
    key = FORMAT_DEFAULT.get(name, name)
    if key not in RECIPES:
        raise ValueError(f"unknown quantization recipe {name!r}; expected one of "
                         f"{', '.join([*FORMAT_DEFAULT, *RECIPES])}")
    return RECIPES[key]
