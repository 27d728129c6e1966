"""Quantized models vs bf16 on small random models: greedy (top-1) agreement and mean KL, per recipe.

    python bench/quant_numerics.py              # CPU is fine; prints a markdown table, writes bench/results/

For each model (dense and MoE, random weights from hinfer.model.random_init) the bf16 model and a copy
quantized with each recipe run the same teacher-forced prompts; at every position we compare the next-token
distributions: top-1 agreement (the greedy token is the same), mean KL(bf16 || quantized) in nats, and the
logits' relative error. Random weights are Gaussian and their distributions flatter than a trained model's,
so these figures order the recipes; they do not predict quality on real checkpoints.
"""

from __future__ import annotations

import argparse
import contextlib
import copy
import json
import sys
import time
from pathlib import Path

import torch

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from hinfer.config import ModelConfig  # noqa: E402
from hinfer.model.prompt_logits import prompt_logits  # noqa: E402
from hinfer.model.qwen3_5 import Qwen35ForCausalLM  # noqa: E402
from hinfer.model.random_init import random_init  # noqa: E402
from hinfer.quant import quantize_model  # noqa: E402
from hinfer.quant.int4 import Int4Weight  # noqa: E402

BASE = dict(
    model_type="qwen3_5_text", vocab_size=8192, hidden_size=512, num_hidden_layers=8, num_attention_heads=8,
    num_key_value_heads=2, head_dim=64, linear_num_key_heads=4, linear_num_value_heads=8,
    linear_key_head_dim=64, linear_value_head_dim=64, linear_conv_kernel_dim=4, intermediate_size=1536,
    rms_norm_eps=1e-6, tie_word_embeddings=False, full_attention_interval=4,
    rope_parameters={"rope_type": "default", "rope_theta": 10000000.0, "partial_rotary_factor": 0.25},
)  # fmt: skip
MOE = dict(model_type="qwen3_5_moe_text", num_experts=32, num_experts_per_tok=4, moe_intermediate_size=256,
           shared_expert_intermediate_size=256)
RECIPES = ("fp8-default", "fp8-block", "int4-default", "int4-sym")
PREFILL_ROWS = 64  # past this many rows an int4 matmul is a prefill GEMM (the decode kernels' MAX_M)
# the int4 recipes again, their int4 matmuls through another reference body: the prompt's (past PREFILL_ROWS) as
# a prefill mode computes it (HINFER_INT4_PREFILL), or every one as an int4 x int8 decode would (x in int8 per
# token and 128-group: what each position of a decode step would see)
VARIANT_REFS = {"+fp8-prefill": ("matmul_ref_fp8", PREFILL_ROWS), "+w4a8-prefill": ("matmul_ref_w4a8", PREFILL_ROWS),
                "+a8-int8": ("matmul_ref_a8", 0)}


@contextlib.contextmanager
def int4_variant(ref: str, rows: int):
    """Int4Weight.matmul past `rows` rows computes reference body `ref` (the CPU runs reference bodies)."""
    plain = Int4Weight.matmul

    def matmul(self, x, out=None):
        if x.numel() // x.shape[-1] <= rows:
            return plain(self, x, out)
        y = getattr(self, ref)(x)
        return y if out is None else out.copy_(y.reshape(out.shape))

    Int4Weight.matmul = matmul
    try:
        yield
    finally:
        Int4Weight.matmul = plain


def logits(model: Qwen35ForCausalLM, ids: list[int]) -> torch.Tensor:
    """Next-token logits at every position of one prompt, fp32."""
    return prompt_logits(model, ids, page_size=64).float()


def compare(ref: torch.Tensor, out: torch.Tensor) -> dict[str, float]:
    lp_ref, lp_out = torch.log_softmax(ref, -1), torch.log_softmax(out, -1)
    kl = (lp_ref.exp() * (lp_ref - lp_out)).sum(-1)
    return {
        "top1_agree": (ref.argmax(-1) == out.argmax(-1)).float().mean().item(),
        "mean_kl": kl.mean().item(),
        "logits_rel_err": ((out - ref).norm() / ref.norm()).item(),
    }


def run(models: int, prompts: int, length: int, seed: int) -> list[dict]:
    rows = []
    for kind, extra in (("dense", {}), ("moe", MOE)):
        cfg = ModelConfig.from_dict(BASE | extra)
        names = [*RECIPES, *(r + v for r in RECIPES if r.startswith("int4") for v in VARIANT_REFS)]
        acc: dict[str, list[dict]] = {r: [] for r in names}
        entropy = []
        for m in range(models):
            model = random_init(Qwen35ForCausalLM(cfg, torch.bfloat16, with_mtp=False), seed=seed + m).eval()
            gen = torch.Generator().manual_seed(seed + 1000 + m)
            ids = [torch.randint(1, cfg.vocab_size, (length,), generator=gen).tolist() for _ in range(prompts)]
            refs = [logits(model, x) for x in ids]
            entropy += [-(torch.log_softmax(r, -1).exp() * torch.log_softmax(r, -1)).sum(-1).mean().item()
                        for r in refs]  # fmt: skip
            for recipe in RECIPES:
                q = copy.deepcopy(model)
                quantize_model(q, recipe)
                acc[recipe] += [compare(r, logits(q, x)) for r, x in zip(refs, ids)]
                for variant, (ref, past) in VARIANT_REFS.items() if recipe.startswith("int4") else ():
                    with int4_variant(ref, past):
                        acc[recipe + variant] += [compare(r, logits(q, x)) for r, x in zip(refs, ids)]
        for recipe, vals in acc.items():
            row = {"model": kind, "recipe": recipe, "positions": len(vals) * length,
                   "bf16_entropy_nats": sum(entropy) / len(entropy)}  # fmt: skip
            for key in vals[0]:
                row[key] = sum(v[key] for v in vals) / len(vals)
            rows.append(row)
            print(f"{kind:5s} {recipe:26s} top1 {row['top1_agree']:.4f}  KL {row['mean_kl']:.5f}  "
                  f"rel {row['logits_rel_err']:.4f}", flush=True)  # fmt: skip
    return rows


def table(rows: list[dict]) -> str:
    lines = ["| model | recipe | top-1 agreement | mean KL (nats) | logits rel. error |", "|---|---|---|---|---|"]
    for r in rows:
        lines.append(f"| {r['model']} | {r['recipe']} | {r['top1_agree']:.2%} | {r['mean_kl']:.4f} | "
                     f"{r['logits_rel_err']:.3f} |")  # fmt: skip
    return "\n".join(lines)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--models", type=int, default=3, help="random models per kind (default 3)")
    ap.add_argument("--prompts", type=int, default=2, help="prompts per model (default 2)")
    ap.add_argument("--length", type=int, default=128, help="tokens per prompt (default 128)")
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--out", type=Path, default=Path("bench/results"))
    args = ap.parse_args()
    torch.set_num_threads(max(1, torch.get_num_threads()))
    t0 = time.monotonic()
    rows = run(args.models, args.prompts, args.length, args.seed)
    print(table(rows))
    args.out.mkdir(parents=True, exist_ok=True)
    out = args.out / f"{time.strftime('%Y%m%d-%H%M%S')}-quant-numerics-cpu.json"
    out.write_text(json.dumps({"args": {k: str(v) for k, v in vars(args).items()}, "rows": rows}, indent=1))
    print(f"wrote {out} in {time.monotonic() - t0:.0f} s")


if __name__ == "__main__":
    main()
