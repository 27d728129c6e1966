"""Every kernel gets the tile it got before: the tile lookups at the real shapes of the packaged configs
(27B, 35B-A3B, 122B-A10B) and M = 1 .. 64, against values recorded from the code (tile_pins.json; the tuned
entries were measured on the H200). A deliberate retune rewrites the file:

    python tests/ops/test_tile_pins.py --write
"""

from __future__ import annotations

import json
import sys
from dataclasses import fields, is_dataclass
from pathlib import Path

from hinfer.config import ModelConfig, load_model_config
from hinfer.fixtures import config_dir

PINS = Path(__file__).with_name("tile_pins.json")
CONFIGS = ("qwen3.6-27b", "qwen3.6-35b-a3b", "qwen3.5-122b-a10b")
MS = (1, 2, 4, 8, 16, 32, 64)
PREFILL_TS = (128, 512, 2048, 8192)  # MoE token counts past decode (its tiles change with T)
QS = (*range(1, 9), 16, 32, 64)  # attention decode: query rows per sequence
SMS = (132, 4)  # the H200 / H100; the CPU interpreter's stand-in
LINEAR_FMTS = ("bf16", "fp8_row", "fp8_block", "int4")
ADDED_LATER = ("ring", "fma_offset", "x_ahead", "words", "x_staged", "async_mma")  # SkinnyConfig's trailing fields


def _cfg(name: str) -> ModelConfig:
    return load_model_config(config_dir(name))


def linear_shapes(c: ModelConfig) -> list[tuple[str, int, int]]:
    """Every dense projection (name, N, K) the model runs: fused attention qkv + gate, GDN in_proj (all rows,
    or q k v z with the b / a rows apart), o_proj, GDN out_proj, the MLP or the MoE's shared expert, its gate
    and the router, the MTP fc and the lm_head."""
    h, hd, hv = c.hidden_size, c.head_dim, c.linear_num_value_heads
    kd, vd = c.linear_num_key_heads * c.linear_key_head_dim, hv * c.linear_value_head_dim
    out = [("qkv", c.num_attention_heads * hd * 2 + 2 * c.num_key_value_heads * hd, h),
           ("gdn_in", 2 * kd + 2 * vd + 2 * hv, h), ("gdn_qkvz", 2 * kd + 2 * vd, h), ("gdn_ab", 2 * hv, h),
           ("o_proj", h, c.num_attention_heads * hd), ("gdn_out", h, vd), ("mtp_fc", h, 2 * h),
           ("lm_head", c.vocab_size, h)]  # fmt: skip
    if c.num_experts:
        inter = c.shared_expert_intermediate_size
        out += [("shared_gate", 1, h), ("router", c.num_experts, h)]
    else:
        inter = c.intermediate_size
    return out + [("gate_up", 2 * inter, h), ("down", h, inter)]


def _plain(v) -> object:
    """A tile as the list of its fields (nested tiles as lists too), the recorded form."""
    if is_dataclass(v):
        # fields added later (the int4 ring, fma_offset, x_ahead) at their defaults leave the recorded form unchanged
        fs = list(fields(v))
        while fs and fs[-1].name in ADDED_LATER and getattr(v, fs[-1].name) == fs[-1].default:
            fs.pop()
        return [_plain(getattr(v, f.name)) for f in fs]
    if isinstance(v, dict):  # attention's launch dicts: their values in the order of the tile's fields
        return list(v.values())
    return list(v) if isinstance(v, tuple) else v


def _linear(out: dict, c: ModelConfig, sms: int) -> None:
    from hinfer.ops.triton.tiles.linear import mma_config, skinny_config, wgmma_config, wgmma_swept_faster

    for _, n, k in linear_shapes(c):
        at = f"{n}x{k} sms={sms}"
        for fmt in LINEAR_FMTS:
            out[f"{fmt} {at}"] = [_plain(skinny_config(fmt, m, n, k, sms=sms)) for m in MS]
        for fmt in ("fp8_row", "fp8_block"):
            out[f"{fmt}-a8 {at}"] = [_plain(skinny_config(fmt, m, n, k, a8=True, sms=sms)) for m in MS]
        out[f"int4_mma {at}"] = [_plain(mma_config(m, n, k, sms=sms)) for m in MS]
        # the warpgroup-MMA tile, and whether it takes over from the mma.sync kernel there
        out[f"int4_wgmma {at}"] = [[wgmma_swept_faster(m, n, k), _plain(wgmma_config(m, n, k, sms=sms))] for m in MS]


def _moe(out: dict, c: ModelConfig, sms: int) -> None:
    from hinfer.ops.triton.moe_align import max_blocks
    from hinfer.ops.triton.tiles import moe as mc

    e, top, h, i = c.num_experts, c.num_experts_per_tok, c.hidden_size, c.moe_intermediate_size
    for fmt in (mc.BF16, mc.INT4, mc.FP8):
        cfgs = [mc.pick_config(t, top, e, h, i, fmt) for t in MS + PREFILL_TS]
        out[f"moe_{fmt} I={i} H={h} sms={sms}"] = [_plain(x) for x in cfgs]
        clamped = [mc.clamp_to_shape(x, h, i, fmt) for x in cfgs]
        out[f"moe_{fmt} clamped I={i} H={h} sms={sms}"] = [_plain(x) for x in clamped]
    for n, k in ((2 * i, h), (h, i)):  # gate_up, down; blocks as moe._experts_mma aligns them
        blocks = [top if t == 1 else max_blocks(t * top, e, 8) for t in MS]
        tiles = [mc.experts_mma_tile(t * top, n, k, b, sms=sms) for t, b in zip(MS, blocks, strict=True)]
        # recorded as (BLOCK_N, warps, depth, K splits): block_m 8 is the call site's constant
        assert all((x.block_m, x.block_k) == (8, 128) for x in tiles)
        out[f"moe_int4_mma {n}x{k} sms={sms}"] = [[x.block_n, x.num_warps, x.num_stages, x.split_k] for x in tiles]
        tiles = [mc.fp8_experts_mma_tile(t * top, n, k, b, sms=sms) for t, b in zip(MS, blocks, strict=True)]
        assert all((x.block_m, x.block_k) == (8, 128) for x in tiles)
        out[f"moe_fp8_mma {n}x{k} sms={sms}"] = [
            [x.block_n, x.num_warps, x.num_stages, x.split_k, x.max_regs] for x in tiles
        ]


def current() -> dict[str, list]:
    """The tiles from the code as it is: per (family, shape, SM count), one per M (or T, or q rows)."""
    from hinfer.ops.triton.tiles.attention import decode_config, prefill_config
    from hinfer.ops.triton.tiles.forms import DECODE_KV_FORMATS
    from hinfer.ops.triton.tiles.linear import gemm_config

    out: dict[str, list] = {}
    for sms in SMS:
        for name in CONFIGS:
            c = _cfg(name)
            _linear(out, c, sms)
            if c.num_experts:
                _moe(out, c, sms)
    for name in CONFIGS:
        c = _cfg(name)
        g, d = c.num_attention_heads // c.num_key_value_heads, c.head_dim
        for kv in DECODE_KV_FORMATS:
            out[f"attention_decode {kv} g={g} d={d}"] = [_plain(decode_config(q, g, d, kv)) for q in QS]
        for kv in DECODE_KV_FORMATS:  # by head_dim only
            out[f"attention_prefill {kv} d={d}"] = [_plain(prefill_config(2048, g, d, kv))]
    out["gemm"] = [_plain(gemm_config(m, 5120, 5120, False)) for m in PREFILL_TS]
    out["gemm_promote"] = [_plain(gemm_config(m, 5120, 5120, True)) for m in PREFILL_TS]
    return out


def test_every_kernel_gets_its_recorded_tile():
    want = json.loads(PINS.read_text())
    got = json.loads(json.dumps(current()))  # tuples -> lists, as recorded
    assert got.keys() == want.keys()
    diff = [f"{key}: {got[key]} != {want[key]}" for key in want if got[key] != want[key]]
    assert not diff, f"{len(diff)} tiles changed, e.g.\n" + "\n".join(diff[:20])


if __name__ == "__main__":
    if sys.argv[1:] != ["--write"]:
        sys.exit(__doc__)
    pins = current()
    lines = [f"{json.dumps(k)}: {json.dumps(v)}" for k, v in sorted(pins.items())]
    PINS.write_text("{\n" + ",\n".join(lines) + "\n}\n")  # one line a key: diffs show what moved
    print(f"{len(pins)} tiles -> {PINS}")
