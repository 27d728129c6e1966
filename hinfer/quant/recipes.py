"""Named quantization recipes: which of the model's fused projection weights are converted, and how.

Converted (`targets`), each a [N, K] weight of hinfer.model.qwen3_5:
  attn_qkv  Attention.qkv_proj.weight (q + gate, k, v fused)     attn_o   Attention.o_proj
  gdn_in    GatedDeltaNet.in_proj.weight (qkv, z, b, a fused)   gdn_out  GatedDeltaNet.out_proj
  mlp       MLP.gate_up.weight, MLP.down_proj (dense layers)   shared_expert  the MoE layers' shared-expert MLP
  experts   SparseMoE.experts_gate_up [E, 2I, H] and experts_down [E, H, I] (the routed experts)
Routed experts are converted by every quantized recipe (`hinfer.quant.experts.Int4ExpertsWeight` for int4,
`Fp8ExpertsWeight` for fp8 with the recipe's per-channel or 128x128 block scales; run by the grouped expert
kernels of hinfer/ops/triton/moe*.py, FMT 1 and 2): they are ~95% of an MoE model's parameters, the 122B-A10B
fits one 141 GB H200 only with them in int4 (fp8: ~133 GiB at 8 lanes x 64K, over the 141 GB card), and the
35B-A3B's decode reads mostly expert bytes.
Kept in the model dtype by every recipe here: embed_tokens, lm_head (tied or not), the MTP head (fc and its
layer: it runs once per draft token; convert_mtp, recipe int4-mtp, converts it too), MoE routers (`router`, `shared_expert_gate`),
GDN conv1d weight, A_log, dt_bias, all norms, and - with keep_gdn_ab (default) - the last 2*HV rows of the fused
GDN in_proj (in_proj_b, in_proj_a): tiny (96 rows of 16480 on the 27B) but they set the decay
g = -exp(A_log) * softplus(a + dt_bias) and beta; int4's ~10% relative error on a dot product would shift
exp(g) by tens of percent, and the official FP8 checkpoints keep them bf16 too. The head rows are quantized
and the tail rows computed in bf16 by `RowSplitWeight` (at decode one launch with int4 tensor-core heads, whose
extra programs take the tail rows; two otherwise; no concatenation copy).
The MTP head's MoE layer (routed experts included) follows convert_mtp like the rest of the head.
"""

from __future__ import annotations

from dataclasses import dataclass, replace

EXPERTS = "experts"
ALL_TARGETS = frozenset({"attn_qkv", "attn_o", "gdn_in", "gdn_out", "mlp", "shared_expert", EXPERTS})
# what `targets=None` means per format: everything its kernels cover
FORMAT_TARGETS = {"bf16": frozenset(), "fp8": ALL_TARGETS, "int4": ALL_TARGETS}


@dataclass(frozen=True)
class QuantRecipe:
    name: str
    fmt: str  # "bf16" | "fp8" | "int4"
    # None: what the format's kernels cover (FORMAT_TARGETS[fmt]); always a frozenset once built
    targets: frozenset[str] | None = None
    keep_gdn_ab: bool = True
    convert_mtp: bool = False
    fp8_scales: str = "channel"  # "channel" (our conversion) | "block" (128x128, the official layout)
    int4_group: int = 128
    int4_zero_point: bool = True  # asymmetric: see docs/quantization.md for the measurement behind it

    def __post_init__(self) -> None:
        if self.fmt not in FORMAT_TARGETS:
            raise ValueError(f"recipe {self.name}: unknown format {self.fmt!r}")
        t = FORMAT_TARGETS[self.fmt] if self.targets is None else frozenset(self.targets)
        if t - ALL_TARGETS:
            raise ValueError(f"recipe {self.name}: unknown targets {sorted(t - ALL_TARGETS)}")
        object.__setattr__(self, "targets", t)

    def __str__(self) -> str:  # logs name a recipe by its name
        return self.name

    @property
    def experts(self) -> bool:
        """Whether the MoE routed experts are converted (the "experts" target)."""
        return EXPERTS in self.targets

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
    # the MTP head in int4 too: a draft step reads ~0.2 GB of head instead of ~0.75 (27B), its acceptance to be
    # measured on real weights
    "int4-mtp": replace(_INT4, name="int4-mtp", convert_mtp=True),
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
