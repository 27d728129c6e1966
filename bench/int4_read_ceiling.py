"""How fast the int4 kernel's reads alone can go: its access pattern without its math.

For each dense int4 shape at one row of x, three times on the same fragment-ordered weights (CUDA graph over
copies that do not fit in L2, as bench/int4_mma_tiles.py): the packaged int4 tensor-core kernel; a read probe that
walks the words exactly as that tile does (BLOCK_N / 16 stripes per program, its K splits, group by group: 1 KB
per stripe and group) and only folds them together with xor, at a few warp counts and pipeline depths; and a
whole-tensor read (torch's sum over the words, contiguous). Each beside the copy bandwidth measured in the run.

If the probe reaches the whole-tensor read, the words' layout and the tile's split are not what holds the kernel
back: its own latency chain is (loads in flight, unpack, MMA, split-K sum). If the probe is as slow as the
kernel, the pattern is; the same probe on a tile-major placement of the words (each program's tile of a group
in one run) says what re-laying them out would buy.

    python bench/int4_read_ceiling.py [--config qwen3.6-35b-a3b] [--json out.json]
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

import torch
import triton
import triton.language as tl

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from bench.linear_kernels import SHAPES, _copies, _gen, copy_bandwidth, graph_time, make_weight  # noqa: E402

STRIPE_GROUP_WORDS = 256  # one stripe's words for one 128-group: 16 rows x 128 nibbles / 8 (int4_mma_layout)
_WORDS = tl.constexpr(STRIPE_GROUP_WORDS)  # the kernel's copy: jit code reads only constexpr globals


@triton.jit
def _read_probe_kernel(w_ptr, out_ptr, row_words, groups, GROUPS_PER_SPLIT: tl.constexpr,
                       STRIPES: tl.constexpr, TILE_MAJOR: tl.constexpr):  # fmt: skip
    """xor of the words program (stripe block, K split) reads: STRIPES stripes x its groups x 256 words. TILE_MAJOR
    reads as many words from a layout that would keep each (stripe block, group) tile contiguous (STRIPES KB in
    one run) instead of 1 KB runs a stripe's row apart: what such a re-layout would buy."""
    pid_n, pid_k = tl.program_id(0), tl.program_id(1)
    local = tl.arange(0, STRIPES)[:, None].to(tl.int64)
    if TILE_MAJOR:
        offs = (pid_n * groups * STRIPES + local) * _WORDS + tl.arange(0, _WORDS)[None, :]
        step = STRIPES * _WORDS
    else:
        offs = (pid_n * STRIPES + local) * row_words + tl.arange(0, _WORDS)[None, :]
        step = _WORDS
    acc = tl.zeros([STRIPES, _WORDS], tl.int32)
    g0 = pid_k * GROUPS_PER_SPLIT
    for g in range(g0, tl.minimum(g0 + GROUPS_PER_SPLIT, groups)):
        acc ^= tl.load(w_ptr + offs + g * step)
    tl.store(out_ptr + pid_n * tl.num_programs(1) + pid_k, tl.reduce(acc, None, _xor))


@triton.jit
def _xor(a, b):
    return a ^ b


def read_probe(words: torch.Tensor, block_n: int, split_k: int, num_warps: int, num_stages: int,
               tile_major: bool = False) -> torch.Tensor:  # fmt: skip
    """words int32 [N/16, 2K] -> int32 [N/block_n, split_k]: each program's xor of the words it walked (with
    tile_major, of words at the places a tile-major layout would keep them)."""
    stripes_total, row_words = words.shape
    groups = row_words // STRIPE_GROUP_WORDS
    stripes = block_n // 16
    per_split = triton.cdiv(groups, split_k)
    out = torch.empty(stripes_total // stripes, split_k, dtype=torch.int32, device=words.device)
    _read_probe_kernel[(stripes_total // stripes, split_k)](
        words, out, row_words, groups, GROUPS_PER_SPLIT=per_split, STRIPES=stripes, TILE_MAJOR=tile_major,
        num_warps=num_warps, num_stages=num_stages,
    )  # fmt: skip
    return out


def probe_reference(words: torch.Tensor, block_n: int, split_k: int) -> torch.Tensor:
    """read_probe in torch: the same xor per (stripe block, K split)."""
    stripes_total, row_words = words.shape
    groups = row_words // STRIPE_GROUP_WORDS
    per_split = -(-groups // split_k)
    w = words.view(stripes_total // (block_n // 16), block_n // 16, groups, STRIPE_GROUP_WORDS)
    out = torch.zeros(w.shape[0], split_k, dtype=torch.int32, device=words.device)
    for s in range(split_k):
        part = w[:, :, s * per_split:(s + 1) * per_split].reshape(w.shape[0], -1)
        while part.shape[1] > 1:  # fold halves: log2 steps, not one per word
            if part.shape[1] % 2:
                part = torch.cat([part, torch.zeros_like(part[:, :1])], 1)
            part = part[:, 0::2] ^ part[:, 1::2]
        if part.shape[1]:
            out[:, s] = part[:, 0]
    return out


def main() -> None:
    from bench.linear_kernels import config_shapes
    from hinfer.ops.triton.linear_int4_mma import int4_mma_matmul
    from hinfer.ops.triton.tiles.linear import mma_config

    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--config", help="a packaged config (e.g. qwen3.6-35b-a3b): its dense shapes, not the 27B's")
    ap.add_argument("--json", type=Path)
    a = ap.parse_args()
    bw = copy_bandwidth()
    print(f"copy bandwidth {bw / 1e9:.0f} GB/s", flush=True)
    g = _gen(4)
    shapes = [s for s in (config_shapes(a.config) if a.config else SHAPES) if s[0] != "lm_head"]
    rows = []
    for name, n, k in {(n, k): (name, n, k) for name, n, k in shapes}.values():
        w, nbytes = make_weight("int4-mma", n, k, g)
        weights = _copies(w, nbytes, 128 << 20)
        words_bytes = w.words.numel() * 4
        x = torch.randn(1, k, generator=g, device="cuda").bfloat16()
        cfg = mma_config(1, n, k)
        t_kernel = graph_time(lambda wt, x=x, cfg=cfg: int4_mma_matmul(x, wt, cfg=cfg), weights)
        assert torch.equal(read_probe(w.words, cfg.block_n, cfg.split_k, 4, 3),
                           probe_reference(w.words, cfg.block_n, cfg.split_k))  # fmt: skip
        probes = {}
        for warps in (2, 4, 8):
            for stages in (1, 2, 3, 4):
                t = graph_time(lambda wt, a=warps, b=stages, bn=cfg.block_n, sk=cfg.split_k:
                               read_probe(wt.words, bn, sk, a, b), weights)  # fmt: skip
                probes[f"w{warps}s{stages}"] = t
        best = min(probes, key=probes.get)
        bw_, bs_ = int(best[1:best.index("s")]), int(best[best.index("s") + 1:])
        t_tile = graph_time(lambda wt, bn=cfg.block_n, sk=cfg.split_k, a=bw_, b=bs_:
                            read_probe(wt.words, bn, sk, a, b, True), weights)  # fmt: skip
        t_sum = graph_time(lambda wt: wt.words.sum(dtype=torch.int64), weights)
        row = {"shape": name, "n": n, "k": k, "tile": str(cfg), "bytes": nbytes, "word_bytes": words_bytes,
               "kernel_us": t_kernel * 1e6, "kernel_bw": nbytes / t_kernel / bw,
               "probe_us": probes[best] * 1e6, "probe_cfg": best, "probe_bw": words_bytes / probes[best] / bw,
               "tile_major_us": t_tile * 1e6, "tile_major_bw": words_bytes / t_tile / bw,
               "sum_us": t_sum * 1e6, "sum_bw": words_bytes / t_sum / bw,
               "probes_us": {key: v * 1e6 for key, v in probes.items()}}  # fmt: skip
        rows.append(row)
        print(f"{name:8s} {n:6d}x{k:<6d} kernel {row['kernel_us']:7.1f} us {row['kernel_bw']:6.1%} | probe "
              f"({best}) {row['probe_us']:7.1f} us {row['probe_bw']:6.1%} | tile-major {row['tile_major_bw']:6.1%} "
              f"| sum {row['sum_us']:7.1f} us "
              f"{row['sum_bw']:6.1%}   tile {cfg}", flush=True)  # fmt: skip
        del w, weights
        torch.cuda.empty_cache()
    if a.json:
        a.json.write_text(json.dumps({"copy_bw": bw, "rows": rows}, indent=1))


if __name__ == "__main__":
    main()
