"""The attention kernels' roundings of scaled KV tiles, modelled in torch on the CPU (seconds): what rounding a
scale, or the probabilities times a scale, to 16 bits costs the output.

    python bench/kv_f16_numerics.py

1. int4 keys and values, bf16 dots (the prefill GPU test's case: 6 query heads' worth of queries, 4 x randn
   against keys and values of per-row magnitude 0.05-3, groups of 64): the output's relative L2 error against
   exact scaling when the tile is rounded to bf16 (the kernels' tile), and when also the keys' or the values'
   scales are first rounded to bf16 (packed bf16 pairs). A key's error passes through the softmax.
2. int8 values scaled after the dot (the decode kernel: p x scale rounded to the dot's dtype), 128K keys,
   values of magnitude 1 down to 3e-4: bf16, fp16, and fp16 with p and the row sums carrying 2^8.
"""

from __future__ import annotations

import argparse

import torch


def int4_scales(n: int, m: int, seed: int) -> None:
    g = torch.Generator().manual_seed(seed)
    d, group = 256, 64

    def quantize(x: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        xg = x.view(n, d // group, group)
        s = xg.abs().amax(-1, keepdim=True) / 7.0
        return torch.clamp(torch.round(xg / s), -8, 7), s

    def tile(c: torch.Tensor, s: torch.Tensor, bf16_scale: bool) -> torch.Tensor:
        s = s.to(torch.bfloat16).float() if bf16_scale else s
        return (c * s).view(n, d).to(torch.bfloat16).float()

    k = (torch.rand(n, 1, generator=g) * 3 + 0.05) * torch.randn(n, d, generator=g)
    v = (torch.rand(n, 1, generator=g) * 3 + 0.05) * torch.randn(n, d, generator=g)
    q = (4 * torch.randn(m, d, generator=g)).to(torch.bfloat16).float()
    (kc, ks), (vc, vs) = quantize(k), quantize(v)

    def attend(kt: torch.Tensor, vt: torch.Tensor) -> torch.Tensor:
        return torch.softmax(q @ kt.T * d**-0.5, -1) @ vt

    want = attend((kc * ks).view(n, d), (vc * vs).view(n, d))
    print(f"int4 K and V, {n} keys, {m} queries (relative L2 error of the output):")
    for name, kb, vb in (("tiles in bf16 (the kernels)", False, False), ("and keys' scales in bf16", True, False),
                         ("and values' scales in bf16", False, True), ("and both", True, True)):  # fmt: skip
        print(f"  {name:30s} {_rel(attend(tile(kc, ks, kb), tile(vc, vs, vb)), want):.2e}")


def int8_values(n: int, m: int, seed: int) -> None:
    g = torch.Generator().manual_seed(seed)
    d = 256
    print(f"int8 V scaled after the dot, {n} keys, {m} queries (relative L2 error of the output):")
    for vmag in (1.0, 1e-2, 1e-3, 3e-4):
        q = torch.randn(m, d, generator=g)
        k = torch.randn(n, d, generator=g)
        v = vmag * torch.randn(n, d, generator=g)
        vs = v.abs().amax(-1) / 127.0
        vc = torch.clamp(torch.round(v / vs[:, None]), -127, 127)
        s = q @ k.T * d**-0.5
        p = torch.exp(s - s.max(-1, keepdim=True).values)  # as the kernel holds them: <= 1 at the row's max
        rows = p.sum(-1, keepdim=True)
        pv = p * vs
        want = pv @ vc / rows
        err = [_rel((pv * shift).to(dt).float() / shift @ vc / rows, want)
               for dt, shift in ((torch.bfloat16, 1.0), (torch.float16, 1.0), (torch.float16, 256.0))]  # fmt: skip
        print(f"  |v| ~ {vmag:<7g} bf16 {err[0]:.2e}   fp16 {err[1]:.2e}   fp16 x 2^8 {err[2]:.2e}")


def _rel(out: torch.Tensor, want: torch.Tensor) -> float:
    return ((out - want).norm() / want.norm()).item()


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--seed", type=int, default=0)
    a = ap.parse_args()
    print(f"seed {a.seed}")
    int4_scales(8192, 256, a.seed)
    int8_values(131072, 8, a.seed)


if __name__ == "__main__":
    main()
