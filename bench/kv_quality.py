"""KV-cache formats against a bf16 cache, on the CPU: attention-output error on long synthetic contexts, and
logit KL / top-1 agreement of small random models on long random and real-text prompts.

    python bench/kv_quality.py                   # the tables for docs/quantization.md; writes bench/results/
    python bench/kv_quality.py --contexts 4096 --length 1024 --models 1   # a quick run
    python bench/kv_quality.py --q8              # also int8 and k8v4 keys scored with int8-rounded queries

Attention (27B head shapes: 24 query heads over 4 kv heads of 256): keys and values are Gaussian with
per-channel scales drawn log-normally (sigma 0.75 for K, 0.5 for V: outlier channels, as trained models' keys
have), rounded to bf16; every format stores them through its reference quantizer
(`hinfer.ops.kv_cache.write_kv`) and is read back as the kernels read it (codes times scales; int4 keys are
stored rotated, H k, and rotated back here, which is what attention over rotated queries computes). 8 decode
queries per query head attend over the whole context: "spread" queries are Gaussian (attention spread over
thousands of keys), "focused" ones point at 4 random keys (scores ~15 above the rest: a few keys dominate, so
their quantization error is not averaged away). Error: ||o - o_bf16|| / ||o_bf16|| over all heads and
queries, in fp64, the worst of 3 draws.

Models (hinfer.model.random_init, fp32 activations, 8 layers of which 2 attention, head_dim 256 with 64
rotary dims, 6 query heads over 1 kv head): the same prompt with each KV format; KL(bf16 KV || format) in nats
per position and top-1 agreement, over every position and over the last quarter (the deepest context).
Prompts: random tokens, and real text: this checkout's docs/*.md and hinfer/**/*.py concatenated and encoded
with the Qwen3.5 tokenizer (hinfer.tokenizer.fixture_tokenizer_dir), model m taking the window that starts at
(m + 1/2) / models of it, its distinct tokens numbered 1, 2, ... in order of appearance (a random embedding
table does not care which rows, and the model's vocabulary stays small). Random weights have flatter attention
and logits than a trained model, so these figures order the formats; they do not predict quality on real
checkpoints (fp32 KV, the reference's own rounding distance, is shown for scale). With random weights real
text changes only the token statistics (repeated tokens and phrases, so repeated keys), not what attention
does with them.
"""

from __future__ import annotations

import argparse
import contextlib
import functools
import json
import sys
import time
from pathlib import Path

import torch

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from hinfer.config import ModelConfig  # noqa: E402
from hinfer.kv_format import KV_FORMATS, cache_format_of, rotated_keys  # noqa: E402
from hinfer.model.prompt_logits import prompt_logits  # noqa: E402
from hinfer.model.qwen3_5 import Qwen35ForCausalLM  # noqa: E402
from hinfer.model.random_init import random_init  # noqa: E402
from hinfer.ops import attention as attn_ops  # noqa: E402
from hinfer.ops.kv_cache import allocate_kv, hadamard, read_kv, write_kv  # noqa: E402
from hinfer.tokenizer import Tokenizer, fixture_tokenizer_dir  # noqa: E402

FORMATS = ("fp8", "int8", "k8v4", "int4")
Q8_FORMATS = ("int8", "k8v4")  # int8 keys: the attention kernels' q8 form (queries rounded to int8 per row)
ROOT = Path(__file__).resolve().parents[1]
HKV, G, D, PAGE = 4, 6, 256, 64
MODEL = dict(
    model_type="qwen3_5_text", vocab_size=8192, hidden_size=512, num_hidden_layers=8, num_attention_heads=6,
    num_key_value_heads=1, head_dim=256, linear_num_key_heads=4, linear_num_value_heads=8,
    linear_key_head_dim=64, linear_value_head_dim=64, linear_conv_kernel_dim=4, intermediate_size=1536,
    rms_norm_eps=1e-6, tie_word_embeddings=False, full_attention_interval=4,
    rope_parameters={"rope_type": "default", "rope_theta": 10000000.0, "partial_rotary_factor": 0.25},
)  # fmt: skip


def dtypes(fmt: str) -> tuple[torch.dtype, torch.dtype]:
    f = KV_FORMATS[fmt]
    return getattr(torch, f.k.torch_dtype), getattr(torch, f.v.torch_dtype)


def stored(x: torch.Tensor, dtype: torch.dtype, keys: bool = False) -> torch.Tensor:
    """x [N, HKV, D] written into a cache of `dtype` and read back in fp32, as the kernels see it; keys that
    the format stores rotated (H k) are rotated back (H H = D I)."""
    pages = -(-x.shape[0] // PAGE)
    cache = allocate_kv(1, pages, PAGE, HKV, D, dtype, "cpu")[1][0]
    rotate = keys and rotated_keys(cache_format_of(str(dtype)))
    write_kv(cache, torch.arange(x.shape[0]), hadamard(x) if rotate else x)
    back = read_kv(cache, torch.arange(pages), x.shape[0], torch.float32)
    return hadamard(back) / D if rotate else back


def attend(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor) -> torch.Tensor:
    """q [M, HKV, G, D] over k, v [N, HKV, D] -> [M, HKV, G, D], in fp64."""
    s = torch.einsum("mhgd,nhd->hgmn", q.double(), k.double()) * D**-0.5
    return torch.einsum("hgmn,nhd->mhgd", torch.softmax(s, -1), v.double())


def synthetic(n: int, gen: torch.Generator) -> tuple[torch.Tensor, torch.Tensor, dict[str, torch.Tensor]]:
    k_scale = torch.empty(HKV, D).log_normal_(0.0, 0.75, generator=gen)
    v_scale = torch.empty(HKV, D).log_normal_(0.0, 0.5, generator=gen)
    k = (torch.randn(n, HKV, D, generator=gen) * k_scale).to(torch.bfloat16)
    v = (torch.randn(n, HKV, D, generator=gen) * v_scale).to(torch.bfloat16)
    spread = torch.randn(8, HKV, G, D, generator=gen)
    needles = torch.randint(0, n, (8, HKV, G, 4), generator=gen)
    kf = k.float()
    target = torch.stack([kf[needles[..., j], torch.arange(HKV)[None, :, None]] for j in range(4)]).mean(0)
    focused = 15 * D**0.5 * target / target.pow(2).sum(-1, keepdim=True) + 0.3 * torch.randn(
        8, HKV, G, D, generator=gen
    )
    return k, v, {"spread": spread, "focused": focused}


@contextlib.contextmanager
def q8_queries():
    """The reference attention scoring int8 key caches with int8-rounded queries, as the kernels' q8 form does."""
    ref = attn_ops.paged_attention_ref

    def q8_ref(q, k_cache, v_cache, batch, scale):
        if k_cache.dtype == torch.int8:
            q = attn_ops.queries_int8_ref(q).to(q.dtype)
        return ref(q, k_cache, v_cache, batch, scale)

    attn_ops.paged_attention_ref = q8_ref
    try:
        yield
    finally:
        attn_ops.paged_attention_ref = ref


def attention_rows(contexts: list[int], draws: int, seed: int, q8: bool = False) -> list[dict]:
    rows = []
    for n in contexts:
        worst: dict[tuple[str, str], float] = {}
        for draw in range(draws):
            gen = torch.Generator().manual_seed(seed + 7919 * draw + n)
            k, v, queries = synthetic(n, gen)
            kf, vf = k.float(), v.float()
            deq = {f: (stored(k, dtypes(f)[0], keys=True), stored(v, dtypes(f)[1])) for f in FORMATS}
            for kind, q in queries.items():
                ref = attend(q, kf, vf)
                for f, (kq, vq) in deq.items():
                    err = ((attend(q, kq, vq) - ref).norm() / ref.norm()).item()
                    worst[(kind, f)] = max(worst.get((kind, f), 0.0), err)
                    if q8 and f in Q8_FORMATS:
                        err = ((attend(attn_ops.queries_int8_ref(q), kq, vq) - ref).norm() / ref.norm()).item()
                        worst[(kind, f"{f} q8")] = max(worst.get((kind, f"{f} q8"), 0.0), err)
        for (kind, f), err in worst.items():
            rows.append({"context": n, "queries": kind, "format": f, "rel_err": err})
            print(f"attention ctx {n:7d} {kind:8s} {f:8s} rel {err:.2e}", flush=True)
    return rows


def compare(ref: torch.Tensor, out: torch.Tensor) -> dict[str, float]:
    lp_ref, lp_out = torch.log_softmax(ref.double(), -1), torch.log_softmax(out.double(), -1)
    kl = (lp_ref.exp() * (lp_ref - lp_out)).sum(-1)
    return {"mean_kl": kl.mean().item(), "max_kl": kl.max().item(),
            "top1": (ref.argmax(-1) == out.argmax(-1)).float().mean().item()}  # fmt: skip


@functools.cache
def corpus_ids() -> list[int]:
    """docs/*.md and hinfer/**/*.py of this checkout, concatenated and encoded (~400K tokens)."""
    files = sorted((ROOT / "docs").glob("*.md")) + sorted((ROOT / "hinfer").rglob("*.py"))
    tok = Tokenizer.from_dir(fixture_tokenizer_dir())
    return tok.encode("\n\n".join(p.read_text() for p in files))


def text_ids(length: int, models: int, m: int, vocab: int) -> list[int]:
    """Model m's real-text prompt (module docstring): a window of the encoded docs and sources, its distinct
    tokens renumbered 1, 2, ... in order of appearance."""
    ids = corpus_ids()
    start = min(len(ids) - length, (2 * m + 1) * len(ids) // (2 * models))
    number: dict[int, int] = {}
    window = [number.setdefault(i, len(number) + 1) for i in ids[start : start + length]]
    assert len(window) == length and len(number) < vocab, (len(window), len(number))
    return window


def model_rows(
    models: int, length: int, seed: int, prompts: tuple[str, ...] = ("random", "text"), q8: bool = False
) -> list[dict]:
    cfg = ModelConfig.from_dict(MODEL)
    acc: dict[tuple[str, str, str], list[dict]] = {}
    for m in range(models):
        model = random_init(Qwen35ForCausalLM(cfg, torch.float32, "cpu"), seed=seed + m).eval()
        gen = torch.Generator().manual_seed(seed + 1000 + m)
        for prompt in prompts:
            if prompt == "random":
                ids = torch.randint(1, cfg.vocab_size, (length,), generator=gen).tolist()
            else:
                ids = text_ids(length, models, m, cfg.vocab_size)
            ref = prompt_logits(model, ids, PAGE, torch.bfloat16)
            for f in ("fp32", *FORMATS):
                k_dt, v_dt = dtypes(f)
                out = prompt_logits(model, ids, PAGE, k_dt, v_dt if v_dt != k_dt else None)
                for span, sl in (("all", slice(None)), ("last quarter", slice(-(length // 4), None))):
                    acc.setdefault((prompt, f, span), []).append(compare(ref[sl], out[sl]))
                if q8 and f in Q8_FORMATS:
                    with q8_queries():
                        out = prompt_logits(model, ids, PAGE, k_dt, v_dt if v_dt != k_dt else None)
                    for span, sl in (("all", slice(None)), ("last quarter", slice(-(length // 4), None))):
                        acc.setdefault((prompt, f"{f} q8", span), []).append(compare(ref[sl], out[sl]))
            print(f"model {m} {prompt} done", flush=True)
    rows = []
    for (prompt, f, span), vals in acc.items():
        row = {"prompt": prompt, "format": f, "positions": span, "length": length, "models": models}
        row |= {key: (max if key == "max_kl" else lambda xs: sum(xs) / len(xs))([v[key] for v in vals])
                for key in vals[0]}  # fmt: skip
        rows.append(row)
        print(
            f"model {prompt:6s} {f:8s} {span:12s} KL {row['mean_kl']:.2e} (max {row['max_kl']:.2e}) "
            f"top-1 {row['top1']:.4f}"
        )
    return rows


def tables(att: list[dict], mod: list[dict]) -> str:
    cols = [*FORMATS, *sorted({r["format"] for r in att} - set(FORMATS))]  # then the q8 forms, if run
    bf16 = KV_FORMATS["bf16"].token_bytes(HKV, D)
    bytes_row = {f: KV_FORMATS[f.split()[0]].token_bytes(HKV, D) / bf16 for f in cols}
    lines = ["| context | queries | " + " | ".join(cols) + " |", "|---|---|" + "---:|" * len(cols)]
    for n in sorted({r["context"] for r in att}):
        for kind in ("spread", "focused"):
            errs = {r["format"]: r["rel_err"] for r in att if r["context"] == n and r["queries"] == kind}
            lines.append(f"| {n:,} | {kind} | " + " | ".join(f"{errs[f]:.2e}" for f in cols) + " |")
    lines.append("| bytes vs bf16 | | " + " | ".join(f"{bytes_row[f]:.3f}" for f in cols) + " |")
    lines += [
        "",
        "| prompt | KV format | positions | mean KL (nats) | max KL | top-1 agreement |",
        "|---|---|---|---:|---:|---:|",
    ]
    for r in mod:
        lines.append(
            f"| {r['prompt']} | {r['format']} | {r['positions']} | {r['mean_kl']:.2e} | {r['max_kl']:.2e} "
            f"| {r['top1']:.2%} |"
        )
    return "\n".join(lines)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument(
        "--contexts", default="4096,32768,131072", help="attention contexts, tokens (default 4K,32K,128K)"
    )
    ap.add_argument(
        "--draws", type=int, default=3, help="synthetic draws per context (default 3; worst shown)"
    )
    ap.add_argument("--models", type=int, default=2, help="random models (default 2)")
    ap.add_argument("--length", type=int, default=4096, help="prompt tokens per model (default 4096)")
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--q8", action="store_true",
                    help="also int8 and k8v4 with the kernels' q8 form (queries rounded to int8 per row)")
    ap.add_argument("--out", type=Path, default=Path("bench/results"))
    a = ap.parse_args()
    t0 = time.monotonic()
    att = attention_rows([int(c) for c in a.contexts.split(",")], a.draws, a.seed, a.q8)
    mod = model_rows(a.models, a.length, a.seed, q8=a.q8) if a.models else []
    print(tables(att, mod))
    a.out.mkdir(parents=True, exist_ok=True)
    out = a.out / f"{time.strftime('%Y%m%d-%H%M%S')}-kv-quality-cpu.json"
    args = {k: str(v) for k, v in vars(a).items()}
    out.write_text(json.dumps({"args": args, "attention": att, "model": mod}, indent=1))
    print(f"wrote {out} in {time.monotonic() - t0:.0f} s")


if __name__ == "__main__":
    main()
