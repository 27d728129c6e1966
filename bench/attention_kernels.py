"""Micro-benchmark of the norm / qk-norm-rope-write / paged attention Triton kernels at 27B shapes (H200).

    python bench/attention_kernels.py                  # default configs, the table
    python bench/attention_kernels.py --only decode --sweep decode    # tile/launch sweep, 4 decode cases
    python bench/attention_kernels.py --only prefill --sweep prefill  # tile sweep, 8K and 2K-over-30K
    python bench/attention_kernels.py --only decode --json bench/results/attn.json
    python bench/attention_kernels.py --only decode,prefill --kv-dtype int8   # KV caches in that format
    python bench/attention_kernels.py --only decode --decode-case 8,131072,1  # one decode case (Nsight Compute)
    python bench/attention_kernels.py --only decode --kv-dtype int4 --warps 8 --tuned-out tiles.json
                                   # the packaged tile at 8 warps (stages, programs an SM swept): the winners
    python bench/attention_kernels.py --only decode --sweep decode --heads 16,2   # the 35B-A3B's heads
    python bench/attention_kernels.py --only decode --sweep decode --kv-dtype fp8 --splits 13,33 --f16 \
        --tuned-out tiles.json     # the default tile also at these split counts, every tile also in fp16 form;
                                   # each key's winner into an HINFER_TILES file

Times are medians of triton.testing.do_bench (L2 flushed before every call). Floors: memory-bound kernels
bytes / 4.2e12 B/s (the measured device copy bandwidth), attention prefill FLOPs / 750e12 (cuBLAS bf16
GEMM); `ratio` = floor / measured (1.0 = at the ceiling). Peers in the same run: torch SDPA (causal, GQA)
on the same prefill shapes with contiguous K/V (an explicit mask past a cached prefix), and the engine's
cuDNN path on the same paged cache (`HINFER_PREFILL_CUDNN`: the cache read back in blocks, parts merged).
"""

from __future__ import annotations

import argparse
import dataclasses
import itertools
import json
import math
import random
import sys
import time
from pathlib import Path

import torch
import triton
from triton.testing import do_bench

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from hinfer.batch import SeqChunk, build_forward_batch  # noqa: E402
from hinfer.kv_format import CLI_KV_DTYPES, KV_FORMATS, CacheFormat  # noqa: E402
from hinfer.ops.kv_cache import allocate_kv, kv_scales  # noqa: E402
from hinfer.ops.rope import rope_inv_freq  # noqa: E402
from hinfer.ops.triton import attention as ta  # noqa: E402
from hinfer.ops.triton import attention_decode as dec  # noqa: E402
from hinfer.ops.triton import attention_prefill as pre  # noqa: E402
from hinfer.ops.triton import norm as tn  # noqa: E402
from hinfer.ops.triton.attention_common import int8_codes  # noqa: E402
from hinfer.ops.triton.attention_cudnn import cudnn_prefill  # noqa: E402
from hinfer.ops.triton.tiles.attention import DECODE, PREFILL, decode_config, prefill_config  # noqa: E402
from hinfer.ops.triton.tiles.forms import DecodeTile, PrefillTile  # noqa: E402
from hinfer.ops.triton.tiles.table import entry, m_bucket, source_line, write  # noqa: E402

BW, FLOPS = 4.2e12, 750e12
HIDDEN, H, HKV, D, R, PAGE, HV, VD = 5120, 24, 4, 256, 64, 64, 48, 128
HEADS_27B = (H, HKV)
BF16 = torch.bfloat16
ROWS: list[dict] = []
TILES: dict[tuple[str, str, str], tuple[tuple, object]] = {}  # (kind, case, config) -> (table key, tile)
KV = KV_FORMATS["bf16"]  # --kv-dtype: the format of the attention benchmarks' caches


def record(kind: str, case: str, cfg: str, ms: float, floor_s: float, unit: str, amount: float) -> None:
    us = ms * 1e3
    rate = amount / (ms * 1e-3)
    row = {"kind": kind, "case": case, "config": cfg, "us": us, "floor_us": floor_s * 1e6,
           "ratio": floor_s * 1e6 / us, unit: rate}  # fmt: skip
    ROWS.append(row)
    shown = f"{rate / 1e9:8.0f} GB/s" if unit == "bytes_s" else f"{rate / 1e12:8.1f} TF/s"
    print(f"{kind:9s} {case:28s} {cfg:34s} {us:10.1f} {floor_s * 1e6:10.1f} {row['ratio']:6.2f} {shown}")


def warm_gpu(seconds: float = 1.0) -> None:
    """Busy the GPU before the first case: a call's first case once read 50% slow on every tile (clocks still
    ramping from idle; bench/RESULTS.md, 2026-12-04)."""
    a = torch.randn(4096, 4096, device="cuda", dtype=BF16)
    start = torch.cuda.Event(enable_timing=True)
    end = torch.cuda.Event(enable_timing=True)
    start.record()
    while True:
        for _ in range(20):
            a @ a
        end.record()
        end.synchronize()
        if start.elapsed_time(end) > seconds * 1e3:
            return


def bench(fn) -> float:
    return do_bench(fn, warmup=10, rep=50, return_mode="median")


# ----------------------------------------------------------------------------------------------- norms


def bench_norms() -> None:
    for t in (1, 8, 64, 8192):
        _norms_case(t)


def _norms_case(t: int) -> None:
    x = torch.randn(t, HIDDEN, device="cuda", dtype=BF16)
    res = torch.randn_like(x)
    w = torch.randn(HIDDEN, device="cuda", dtype=BF16)
    n = t * HIDDEN * 2
    ms = bench(lambda: tn.rms_norm(x, w, 1e-6))
    record("norm", f"rms_norm T={t}", "-", ms, 2 * n / BW, "bytes_s", 2 * n)
    ms = bench(lambda: tn.add_rms_norm(x, res, w, 1e-6))
    record("norm", f"add_rms_norm T={t}", "-", ms, 4 * n / BW, "bytes_s", 4 * n)
    o = torch.randn(t, HV, VD, device="cuda", dtype=BF16)
    z = torch.randn(t, 2 * HV * VD, device="cuda", dtype=BF16)[:, HV * VD :].view(t, HV, VD)
    gw = torch.randn(VD, device="cuda", dtype=BF16)
    m = t * HV * VD * 2
    ms = bench(lambda: tn.gated_rms_norm(o, z, gw, 1e-6))
    record("norm", f"gated_rms_norm T={t}", "-", ms, 3 * m / BW, "bytes_s", 3 * m)


def bench_rope() -> None:
    for t in (1, 8, 64, 8192):
        _rope_case(t)


def _rope_case(t: int) -> None:
    qkv = torch.randn(t, H * 2 * D + 2 * HKV * D, device="cuda", dtype=BF16)
    q = qkv[:, : H * 2 * D].view(t, H, 2 * D).chunk(2, dim=-1)[0]
    k = qkv[:, H * 2 * D : H * 2 * D + HKV * D].view(t, HKV, D)
    v = qkv[:, H * 2 * D + HKV * D :].view(t, HKV, D)
    qw, kw = torch.randn(D, device="cuda", dtype=BF16), torch.randn(D, device="cuda", dtype=BF16)
    pos = torch.randint(0, 131072, (t,), device="cuda")
    inv = rope_inv_freq(R, 1e7, device="cuda")
    pages = t // PAGE + 2
    kc, vc = random_cache(pages, KV.k), random_cache(pages, KV.v)
    slots = torch.randperm(pages * PAGE, device="cuda")[:t]
    # q in and out, k and v in, the cache rows (and scales) written
    nbytes = 2 * (t * H * D * 2) + 2 * (t * HKV * D * 2) + t * KV.token_bytes(HKV, D)
    ms = bench(lambda: ta.qk_norm_rope_write(q, k, v, qw, kw, 1e-6, pos, inv, kc, vc, slots))
    record("rope", f"qk_norm_rope_write T={t} {KV.name}", "-", ms, nbytes / BW, "bytes_s", nbytes)


# ------------------------------------------------------------------------------------ paged attention


def make_batch(cached: list[int], q_lens: list[int]):
    need = [(c + n + PAGE - 1) // PAGE for c, n in zip(cached, q_lens)]
    pool = list(range(1, sum(need) + 1))
    random.Random(0).shuffle(pool)
    chunks, i = [], 0
    for c, n, p in zip(cached, q_lens, need):
        chunks.append(SeqChunk(token_ids=[1] * n, cached_len=c, page_ids=pool[i : i + p], gdn_slot=1))
        i += p
    batch = build_forward_batch(chunks, PAGE, "cuda")
    kc, vc = random_cache(len(pool) + 1, KV.k), random_cache(len(pool) + 1, KV.v)
    q = torch.randn(batch.num_tokens, H, D, device="cuda", dtype=BF16)
    return batch, q, kc, vc


def random_cache(pages: int, fmt: CacheFormat) -> torch.Tensor:
    """Token rows [pages, PAGE, HKV, D / pack] in a storage format, random (int8 / int4: codes and unit-range
    scales)."""
    dt = getattr(torch, fmt.torch_dtype)
    rows = allocate_kv(1, pages, PAGE, HKV, D, dt, "cuda")[1][0]
    if fmt.scaled:
        lo, hi = (-127, 128) if dt == torch.int8 else (0, 256)
        rows.copy_(torch.randint(lo, hi, rows.shape, device="cuda", dtype=dt))
        kv_scales(rows).fill_(1.0 / (127 if dt == torch.int8 else 7))
    else:
        rows.copy_(torch.randn(rows.shape, device="cuda", dtype=BF16).to(dt))
    return rows


DECODE_CASES = [(1, 1024, 1), (1, 32768, 1), (1, 131072, 1), (8, 1024, 1), (8, 32768, 1), (8, 131072, 1),
                (64, 1024, 1), (64, 32768, 1), (1, 32768, 4), (8, 32768, 4), (64, 1024, 4)]  # fmt: skip


DECODE_SWEEP_CASES = [(1, 131072, 1), (8, 32768, 1), (8, 131072, 1), (64, 1024, 1), (8, 32768, 4)]


def bench_decode(
    sweep: bool, cases: list[tuple[int, int, int]] | None = None, splits: tuple[int, ...] = (), f16: bool = False,
    words: bool = False, q8: bool = False, warps: tuple[int, ...] = (),
) -> None:
    for b, ctx, ql in cases or (DECODE_SWEEP_CASES if sweep else DECODE_CASES):
        _decode_case(b, ctx, ql, sweep, splits, f16, words, q8, warps)
        torch.cuda.empty_cache()


def _decode_case(
    b: int, ctx: int, ql: int, sweep: bool, fixed_splits: tuple[int, ...] = (), f16: bool = False,
    words: bool = False, q8: bool = False, warps: tuple[int, ...] = (),
) -> None:
    batch, q, kc, vc = make_batch([ctx - ql] * b, [ql] * b)
    nbytes = b * ctx * KV.token_bytes(HKV, D) + 2 * q.numel() * 2
    case = f"B={b} ctx={ctx // 1024}K q={ql} {KV.name}"
    out = torch.empty_like(q)
    lens = (batch.page_table, batch.cached_lens, batch.q_lens, batch.cu_q_lens)
    family = DECODE[KV.name]
    base = decode_config(ql, H // HKV, D, KV.name)
    configs: list[tuple[DecodeTile, int | None]] = [(base, None)]
    if sweep:
        configs += [
            (DecodeTile(block_n=bn, num_warps=base.num_warps, num_stages=s, ctas_per_sm=c), None)
            for bn, s, c in itertools.product((32, 64), (3, 4, 5), (2, 3, 4, 8))
            if DecodeTile(bn, base.num_warps, s, c) != base
        ]
        configs += [(base, n) for n in fixed_splits]  # the default tile at split counts of the caller's
    if warps:  # the default tile's forms at other warp counts, stages and programs an SM
        configs += [
            (dataclasses.replace(base, num_warps=w, num_stages=s, ctas_per_sm=c), None)
            for w, s, c in itertools.product(warps, (3, 4, 5), (1, 2, 3, 4))
            if (w, s, c) != (base.num_warps, base.num_stages, base.ctas_per_sm)
        ]
    if f16 and KV.k.elem_bytes == 1:  # every tile also in its fp16 form (1-byte formats)
        configs += [(dataclasses.replace(c, f16=True), n) for c, n in configs if not c.f16]
    if words and KV.k.elem_bytes == 1:  # every tile also with its word reads toggled (A/B in one process)
        configs += [(dataclasses.replace(c, words=not c.words), n) for c, n in configs]
    if q8 and int8_codes(KV.k):  # int8 keys: q8 toggled too
        configs += [(dataclasses.replace(c, q8=not c.q8), n) for c, n in configs]
    for i, (cfg, fixed) in enumerate(configs):
        kw = {"block_n": cfg.block_n, "num_warps": cfg.num_warps, "num_stages": cfg.num_stages}
        kw["ctas_per_sm"] = cfg.ctas_per_sm
        kw["f16"], kw["words"], kw["q8"] = cfg.f16, cfg.words, cfg.q8
        width = batch.page_table.shape[1] * PAGE
        splits = fixed or dec.decode_splits(b, HKV, width, cfg.block_n, q.device, cfg.ctas_per_sm)
        if fixed:
            kw["num_splits"] = fixed
        name = f"bn{cfg.block_n} w{cfg.num_warps} s{cfg.num_stages} cps{cfg.ctas_per_sm} sp{splits}"
        name += (" f16" if cfg.f16 else "") + (" words" if cfg.words else "") + (" q8" if cfg.q8 else "")
        name += " fixed" if fixed else " *" if i == 0 else ""
        TILES[("decode", case, name)] = ((family.name, H // HKV, D, m_bucket(ql, family.max_m)), cfg)
        try:
            ms = bench(
                lambda kw=kw: dec.paged_decode(q, kc, vc, out, *lens, D**-0.5, b, q.shape[0], ql, **kw)
            )
        except Exception as e:  # a config that does not fit (shared memory, registers)
            print(f"decode    {case:28s} {name:34s} failed: {type(e).__name__}")
            continue
        record("decode", case, name, ms, nbytes / BW, "bytes_s", nbytes)


PREFILL_CASES = [(0, 8192), (0, 2048), (30720, 2048), (126976, 2048), (0, 32768)]
PREFILL_SWEEP_CASES = [(0, 8192), (30720, 2048)]


def bench_prefill(sweep: bool, lazy: bool = False, f16: bool = False, words: bool = False, q8: bool = False) -> None:
    for cached, ql in PREFILL_SWEEP_CASES if sweep else PREFILL_CASES:
        _prefill_case(cached, ql, sweep, lazy, f16, words, q8)
        torch.cuda.empty_cache()


def _prefill_case(
    cached: int, ql: int, sweep: bool, lazy: bool = False, f16: bool = False, words: bool = False, q8: bool = False
) -> None:
    batch, q, kc, vc = make_batch([cached], [ql])
    flops = 4 * H * D * (ql * cached + ql * (ql + 1) // 2)  # QK^T and PV over the causal pairs
    case = f"cached={cached // 1024}K q={ql // 1024}K {KV.name}"
    out = torch.empty_like(q)
    lens = (batch.page_table, batch.cached_lens, batch.q_lens, batch.cu_q_lens)
    base = prefill_config(ql, H // HKV, D, KV.name)
    configs = [base]
    if sweep:
        configs += [
            PrefillTile(block_m=m, block_n=n, num_warps=w, num_stages=s)
            for m, n, w, s in itertools.product((64, 128), (32, 64, 128), (4, 8), (2, 3))
        ]
    if lazy:  # every tile also with the lazy rescale
        configs += [dataclasses.replace(c, lazy=True) for c in configs if not c.lazy]
    if f16 and KV.k.elem_bytes == 1:  # and in its fp16 form (1-byte formats)
        configs += [dataclasses.replace(c, f16=True) for c in configs if not c.f16]
    if words and KV.k.elem_bytes == 1:
        configs += [dataclasses.replace(c, words=not c.words) for c in configs]
    if q8 and int8_codes(KV.k):
        configs += [dataclasses.replace(c, q8=not c.q8) for c in configs]
    for cfg in configs:
        kw = {"block_m": cfg.block_m, "block_n": cfg.block_n, "num_warps": cfg.num_warps}
        kw["num_stages"] = cfg.num_stages
        kw["lazy"], kw["f16"], kw["words"], kw["q8"] = cfg.lazy, cfg.f16, cfg.words, cfg.q8
        name = f"bm{cfg.block_m} bn{cfg.block_n} w{cfg.num_warps} s{cfg.num_stages}" + (" lazy" if cfg.lazy else "")
        name += (" f16" if cfg.f16 else "") + (" words" if cfg.words else "") + (" q8" if cfg.q8 else "")
        name += " *" if cfg is base else ""
        family = PREFILL[KV.name]
        TILES[("prefill", case, name)] = ((family.name, H // HKV, D, m_bucket(ql, family.max_m)), cfg)
        try:
            ms = bench(lambda kw=kw: pre.paged_prefill(q, kc, vc, out, *lens, D**-0.5, 0, 1, ql, **kw))
        except Exception as e:
            print(f"prefill   {case:28s} {name:34s} failed: {type(e).__name__}")
            continue
        record("prefill", case, name, ms, flops / FLOPS, "flop_s", flops)
    try:  # the engine's cuDNN path (HINFER_PREFILL_CUDNN) on the same paged cache, any KV format
        torch.cuda.synchronize()
        t0 = time.perf_counter()  # the first call builds cuDNN's plans for this case's new shapes
        cudnn_prefill(q, kc, vc, batch.page_table[0], cached, out, D**-0.5)
        torch.cuda.synchronize()
        record("prefill", case, "cuDNN parts, first call (plans)", (time.perf_counter() - t0) * 1e3, flops / FLOPS,
               "flop_s", flops)  # fmt: skip
        ms = bench(lambda: cudnn_prefill(q, kc, vc, batch.page_table[0], cached, out, D**-0.5))
    except Exception as e:
        print(f"prefill   {case:28s} cuDNN failed: {type(e).__name__}: {str(e).splitlines()[0][:200]}")
    else:
        record("prefill", case, "cuDNN parts (paged, read back)", ms, flops / FLOPS, "flop_s", flops)
    if cached + ql <= 32768:
        _sdpa_peer(case, cached, ql, flops)


def _sdpa_peer(case: str, cached: int, ql: int, flops: int) -> None:
    """torch SDPA on contiguous K/V (no paging), same causal shape: the peer figure."""
    kv_len = cached + ql
    k = torch.randn(1, HKV, kv_len, D, device="cuda", dtype=BF16)
    v = torch.randn_like(k)
    q = torch.randn(1, H, ql, D, device="cuda", dtype=BF16)
    mask = None if cached == 0 else torch.ones(ql, kv_len, dtype=torch.bool, device="cuda").tril(cached)
    sdpa = torch.nn.functional.scaled_dot_product_attention
    try:
        ms = bench(lambda: sdpa(q, k, v, attn_mask=mask, is_causal=cached == 0, enable_gqa=True))
    except Exception as e:
        print(f"prefill   {case:28s} SDPA failed: {type(e).__name__}: {e}")
    else:
        record("prefill", case, "torch SDPA (contiguous)", ms, flops / FLOPS, "flop_s", flops)


def best(kind: str) -> None:
    """Per case, the fastest config (a sweep's answer; * marks the current default) and its tile table entry
    (hinfer/ops/triton/tiles/tuned.py; cases of one key may disagree: pick by the cases that matter)."""
    cases = sorted(
        {r["case"] for r in ROWS if r["kind"] == kind}, key=lambda c: [r["case"] for r in ROWS].index(c)
    )
    print(f"\nfastest {kind} config per case:")
    for c in cases:
        rows = [r for r in ROWS if r["kind"] == kind and r["case"] == c and "SDPA" not in r["config"]
                and "cuDNN" not in r["config"]]
        top = min(rows, key=lambda r: r["us"])
        dflt = next((r for r in rows if r["config"].endswith("*")), top)
        print(f"  {c:28s} best {top['config']:34s} {top['us']:9.1f} us   default {dflt['us']:9.1f} us")
        key, tile = TILES[(kind, c, top["config"])]
        print(f"  {'':28s} TUNED entry: {source_line(*key, tile).strip()}")


def key_winners(kind: str) -> list[dict]:
    """Per table key, the tile of the lowest geometric mean over that key's cases of its time / the case's
    fastest (tiles timed in every case of the key; fixed split counts left out): one tile serves them all."""
    timed: dict[tuple, dict[object, dict[str, float]]] = {}
    for r in ROWS:
        hit = TILES.get((r["kind"], r["case"], r["config"]))
        if r["kind"] != kind or hit is None or r["config"].endswith("fixed"):
            continue
        timed.setdefault(hit[0], {}).setdefault(hit[1], {})[r["case"]] = r["us"]
    out = []
    print(f"\n{kind} tile per key (geometric mean of time / the case's fastest):")
    for key, per_tile in timed.items():
        cases = set().union(*per_tile.values())
        fastest = {c: min(t[c] for t in per_tile.values() if c in t) for c in cases}
        score = {
            tile: math.exp(sum(math.log(t[c] / fastest[c]) for c in cases) / len(cases))
            for tile, t in per_tile.items()
            if t.keys() == cases
        }
        win = min(score, key=score.get)
        print(f"  {source_line(*key, win).strip()}  {score[win]:.3f} ({len(cases)} cases)")
        out.append(entry(*key, win))
    return out


def write_tiles(path: Path, entries: list[dict]) -> None:
    """Add these entries to the file's (same keys replaced), so sweeps of several formats make one file."""
    old = json.loads(path.read_text()) if path.exists() else []
    keys = {(e["family"], e["n"], e["k"], e["m"]) for e in entries}
    write(path, [e for e in old if (e["family"], e["n"], e["k"], e["m"]) not in keys] + entries)


def _case(text: str) -> tuple[int, int, int]:
    b, ctx, q = (int(v) for v in text.split(","))
    return b, ctx, q


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--only", choices=["norm", "rope", "decode", "prefill"], action="append")
    ap.add_argument("--sweep", choices=["decode", "prefill"], action="append", default=[])
    ap.add_argument("--json", type=Path, help="write the rows here")
    ap.add_argument("--decode-case", type=_case, action="append",
                    help="B,CTX,Q: this decode case instead of the list (repeatable; e.g. 8,131072,1 for Nsight Compute)")
    ap.add_argument("--splits", type=lambda v: tuple(int(x) for x in v.split(",")), default=(),
                    help="with --sweep decode: the default tile also at these split counts (e.g. 13,33)")
    ap.add_argument("--lazy", action="store_true",
                    help="prefill: every tile also with the lazy rescale (PrefillTile.lazy)")
    ap.add_argument("--f16", action="store_true",
                    help="a 1-byte KV format: every decode tile swept (--sweep decode) and every prefill tile also in "
                         "its f16 form")
    ap.add_argument("--words", action="store_true",
                    help="a 1-byte KV format: every decode / prefill tile also with its 32-bit word reads toggled "
                         "(DecodeTile.words)")
    ap.add_argument("--q8", action="store_true",
                    help="int8 keys (int8, k8v4): every decode / prefill tile also with its q8 form toggled (DecodeTile.q8)")
    ap.add_argument("--warps", type=lambda v: tuple(int(x) for x in v.split(",")), default=(),
                    help="decode: the default tile (its forms kept) also at these warp counts, stages 3-5 and 1-4 "
                         "programs an SM; with --tuned-out each key's winner is written as with --sweep")
    ap.add_argument("--tuned-out", type=Path,
                    help="with --sweep: each table key's winner over its cases, added to this HINFER_TILES file")
    ap.add_argument("--heads", type=lambda v: tuple(int(x) for x in v.split(",")), default=HEADS_27B,
                    help="query heads,KV heads of the attention cases (default 24,4: the 27B; 16,2 the 35B-A3B)")
    ap.add_argument("--kv-dtype", choices=CLI_KV_DTYPES, default="bf16",
                    help="KV-cache format of the decode and prefill cases (default bf16)")
    a = ap.parse_args()
    global KV, H, HKV
    KV = KV_FORMATS[a.kv_dtype]
    H, HKV = a.heads
    only = set(a.only or ["norm", "rope", "decode", "prefill"]) | set(a.sweep)
    print(torch.cuda.get_device_name(), f"torch {torch.__version__} triton {triton.__version__}")
    warm_gpu()
    print(f"{'kind':9s} {'case':28s} {'config':34s} {'us':>10s} {'floor us':>10s} {'ratio':>6s} rate")
    if "norm" in only:
        bench_norms()
    if "rope" in only:
        bench_rope()
    if "decode" in only:
        bench_decode("decode" in a.sweep, a.decode_case, a.splits, a.f16, a.words, a.q8, a.warps)
    if "prefill" in only:
        bench_prefill("prefill" in a.sweep, a.lazy, a.f16, a.words, a.q8)
    for kind in a.sweep + (["decode"] if a.warps and "decode" not in a.sweep else []):
        best(kind)
        if a.tuned_out:
            write_tiles(a.tuned_out, key_winners(kind))
    if a.json:
        a.json.parent.mkdir(parents=True, exist_ok=True)
        a.json.write_text(json.dumps(ROWS, indent=1))


if __name__ == "__main__":
    main()
