"""4-bit key schemes side by side, on the CPU: which one the int4 KV format stores its keys in.

    python bench/kv_key_schemes.py                  # the table in docs/quantization.md (KV cache, int4 keys)
    python bench/kv_key_schemes.py --contexts 4096 --draws 1   # a quick run

Every candidate costs 4.125-4.5 bits per key value. Keys and queries are bench/kv_quality.py's synthetic ones
(27B head shapes, log-normal per-channel scales; "spread" and "focused" queries), plus a set with per-channel
means ("biased": each channel's mean drawn N(0, 1) times its scale, as the few large channels of trained
models' keys are offset): the quantized keys are stored in fp32 (scales rounded to their storage type first),
values stay bf16 (the key error alone) or go through the int4 value format (the whole format, V as k8v4's).
Error: ||o - o_bf16|| / ||o_bf16|| of the attention output, in fp64, the worst of the draws.

Schemes: `sym` maps [-amax, amax] of a group onto codes -7..7 (the value format's rule); `asym` maps
[min, max] onto 0..15 with an fp16 scale and an fp16 minimum (llama.cpp's q4_1 rule); `had-` first rotates each key by
the normalised Walsh-Hadamard matrix of head_dim (queries alike, so scores are unchanged), which spreads a few
large channels over all of them; the number is the group size, the suffix the scale's storage.
"""

from __future__ import annotations

import argparse
import runpy
import sys
import time
from collections.abc import Callable
from pathlib import Path

import torch

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from hinfer.ops.kv_cache import hadamard  # noqa: E402

KQ = runpy.run_path(str(Path(__file__).resolve().parent / "kv_quality.py"))
HKV, D = KQ["HKV"], KQ["D"]


def sym(x: torch.Tensor, group: int, scale_dtype: torch.dtype) -> torch.Tensor:
    g = x.unflatten(-1, (-1, group))
    s = (g.abs().amax(-1, keepdim=True) / 7).to(scale_dtype).float()
    q = torch.floor(g / torch.where(s > 0, s, 1.0) + 0.5).clamp(-7, 7)
    return (q * s).flatten(-2)


def asym(x: torch.Tensor, group: int, scale_dtype: torch.dtype) -> torch.Tensor:
    g = x.unflatten(-1, (-1, group))
    lo = g.amin(-1, keepdim=True).to(scale_dtype).float()
    s = ((g.amax(-1, keepdim=True) - lo) / 15).to(scale_dtype).float()
    q = torch.floor((g - lo) / torch.where(s > 0, s, 1.0) + 0.5).clamp(0, 15)
    return (q * s + lo).flatten(-2)


def rotated(quant: Callable[[torch.Tensor], torch.Tensor]) -> Callable[[torch.Tensor], torch.Tensor]:
    """Quantize H k / sqrt(D) and rotate back (H / sqrt(D) is orthonormal and symmetric): the scores
    q . k_hat equal (H q) . quant(H k) / D, what the kernels compute."""
    return lambda x: hadamard(quant(hadamard(x) * D**-0.5)) * D**-0.5


F16, F32 = torch.float16, torch.float32
# name -> (bits per value, quantizer of fp32 keys [..., D])
SCHEMES: dict[str, tuple[float, Callable[[torch.Tensor], torch.Tensor]]] = {
    "sym64-f32": (4.5, lambda x: sym(x, 64, F32)),
    "sym32-f16": (4.5, lambda x: sym(x, 32, F16)),
    "asym64-f16": (4.5, lambda x: asym(x, 64, F16)),
    "sym128-f32": (4.25, lambda x: sym(x, 128, F32)),
    "had-sym64-f32": (4.5, rotated(lambda x: sym(x, 64, F32))),
    "had-sym32-f16": (4.5, rotated(lambda x: sym(x, 32, F16))),
    "had-asym64-f16": (4.5, rotated(lambda x: asym(x, 64, F16))),
    "had-sym128-f32": (4.25, rotated(lambda x: sym(x, 128, F32))),
    "had-sym256-f32": (4.125, rotated(lambda x: sym(x, 256, F32))),
}


def int4_values(v: torch.Tensor) -> torch.Tensor:
    return KQ["stored"](v, torch.uint8)


def rows(contexts: list[int], draws: int, seed: int) -> list[dict]:
    out = []
    for n in contexts:
        worst: dict[tuple[str, str, str], float] = {}
        for draw in range(draws):
            gen = torch.Generator().manual_seed(seed + 7919 * draw + n)
            k, v, queries = KQ["synthetic"](n, gen)
            mean = torch.randn(HKV, D, generator=gen) * k.float().std(0)
            keysets = {"zero-mean": k.float(), "biased": (k.float() + mean).bfloat16().float()}
            vf, v4 = v.float(), int4_values(v)
            for keys, kf in keysets.items():
                for kind, q in queries.items():
                    ref = KQ["attend"](q, kf, vf)
                    for name, (_, quant) in SCHEMES.items():
                        kq = quant(kf)
                        for vname, vv in (("V bf16", vf), ("V int4", v4)):
                            err = ((KQ["attend"](q, kq, vv) - ref).norm() / ref.norm()).item()
                            key = (f"{keys} {kind}", name, vname)
                            worst[key] = max(worst.get(key, 0.0), err)
        for (case, name, vname), err in worst.items():
            out.append({"context": n, "case": case, "scheme": name, "values": vname, "rel_err": err})
        print(f"context {n} done", flush=True)
    return out


def table(res: list[dict]) -> str:
    cases = list(dict.fromkeys(r["case"] for r in res))
    lines = ["| key scheme | bits | " + " | ".join(cases) + " |", "|---|---:|" + "---:|" * len(cases)]
    for name, (bits, _) in SCHEMES.items():
        for vname in ("V bf16", "V int4"):
            worst = {c: max(r["rel_err"] for r in res if r["case"] == c and r["scheme"] == name
                            and r["values"] == vname) for c in cases}  # fmt: skip
            errs = " | ".join(f"{worst[c]:.2e}" for c in cases)
            lines.append(f"| {name}, {vname} | {bits} | {errs} |")
    return "\n".join(lines)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--contexts", default="4096,32768", help="contexts, tokens (default 4K,32K)")
    ap.add_argument("--draws", type=int, default=3, help="draws per context (default 3; worst shown)")
    ap.add_argument("--seed", type=int, default=0)
    a = ap.parse_args()
    t0 = time.monotonic()
    res = rows([int(c) for c in a.contexts.split(",")], a.draws, a.seed)
    print(table(res))
    print(f"{time.monotonic() - t0:.0f} s")


if __name__ == "__main__":
    main()
