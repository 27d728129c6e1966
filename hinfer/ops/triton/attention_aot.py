"""Ahead-of-time compilation of the paged attention kernels for sm_90 at the 27B's shapes: no GPU needed.

The decode and prefill kernels for every KV format, in any of their tile forms, through Triton's whole sm_90
pipeline: registers, stack and shared memory, and the opcodes of the key loop's SASS (the figures the docs
quote per form come from here). `tests/ops/test_attention_aot.py` compiles the packaged tiles with it.

    python -m hinfer.ops.triton.attention_aot --kernel decode --kv-dtype int4 --f16 [--words]
    python -m hinfer.ops.triton.attention_aot --kernel decode --kv-dtype int8,k8v4 --q8
    python -m hinfer.ops.triton.attention_aot --kernel prefill --kv-dtype fp8 --f16 [--lazy] [--split]
"""

from __future__ import annotations

import argparse

import torch
from triton.compiler import ASTSource, compile

from hinfer.ops.kv_cache import allocate_kv
from hinfer.ops.triton import attention_decode as dec
from hinfer.ops.triton import attention_prefill as pre
from hinfer.ops.triton import kv_read, parts_merge
from hinfer.ops.triton.attention_common import cache_args
from hinfer.ops.triton.linear_aot import TARGET, resources, sass_loops, sass_of
from hinfer.ops.triton.tiles.attention import decode_config, decode_rows, prefill_config

# 27B: 24 query heads, 4 kv heads of 256, pages of 64. Per format and tensor: (pointer type, torch dtype, rows per
# page, elements per row, scales per token and head): an int8 page has one row of scales after its 64, an int4 one
# eight (rows of 128 bytes; 4 scales of 64 values per token and head)
H, HKV, D, PAGE = 24, 4, 256, 64
BF16, FP8 = ("*bf16", "bfloat16", PAGE, D, 0), ("*fp8e4nv", "float8_e4m3fn", PAGE, D, 0)
INT8, INT4 = ("*i8", "int8", PAGE + 1, D, 1), ("*u8", "uint8", PAGE + 8, D // 2, 4)
CACHES = {"bf16": (BF16, BF16), "fp8": (FP8, FP8), "int8": (INT8, INT8), "k8v4": (INT8, INT4),
          "int4": (INT4, INT4)}  # fmt: skip
F32 = "*fp32"


def strides(k: tuple, v: tuple) -> dict[str, int]:
    """Cache and scale strides (elements) of a layer's K and V pages, as the wrappers pass them."""
    out = {}
    for name, (_, _, rows, elems, groups) in (("k", k), ("v", v)):
        out |= {f"s{name}p": rows * HKV * elems, f"s{name}t": HKV * elems, f"s{name}h": elems}
        out |= {f"{name}sp": rows * HKV * elems // 4, f"{name}st": HKV * groups, f"{name}sh": groups}
    out |= dict(sks=out["skt"], skc=out["skh"], svs=out["svt"], svc=out["svh"])  # the rope kernel's names
    return out | dict(sqt=H * 2 * D, sqh=2 * D, sot=H * D, soh=D, s_pt=4096)


def compile_sm90(fn, types: dict, ints: dict, consts: dict, opts: dict):
    """The kernel compiled for sm_90; arguments not in `types` / `consts` are i32, and pointers and
    16-divisible integers (by `ints`) are specialised so, as Triton's launcher would at run time."""
    sig, div = {}, {}
    for i, a in enumerate(fn.arg_names):
        sig[a] = "constexpr" if a in consts else types.get(a, "i32")
        if sig[a][0] == "*" or (sig[a] == "i32" and ints.get(a, 1) % 16 == 0):
            div[(i,)] = [["tt.divisibility", 16]]
    return compile(ASTSource(fn, sig, constexprs=consts, attrs=div), target=TARGET, options=opts)


def kernel_types(name: str) -> tuple[dict, dict]:
    """(argument types, strides) of the attention kernels over the `name` format's caches."""
    k, v = CACHES[name]
    scales = dict(ks_ptr=F32 if k[4] else k[0], vs_ptr=F32 if v[4] else v[0])
    types = dict(q_ptr="*bf16", k_ptr=k[0], v_ptr=v[0], o_ptr="*bf16", op_ptr=F32, lse_ptr=F32, pt_ptr="*i32",
                 cached_ptr="*i32", qlens_ptr="*i32", cu_ptr="*i32", qk_scale="fp32", g_ptr="*bf16",
                 **scales)  # fmt: skip
    return types, strides(k, v)


def read_codes(name: str, q8: bool = False) -> dict[str, dict]:
    """The K_FMT / V_FMT read codes each kernel's wrapper picks for the `name` format's caches (decode, prefill,
    and the rope kernel that writes them)."""
    k, v = CACHES[name]
    kc, vc = (allocate_kv(1, 1, PAGE, HKV, D, getattr(torch, t[1]), "meta")[1][0] for t in (k, v))
    d, p = dec.decode_cache_args(kc, vc, q8), pre.prefill_cache_args(kc, vc)
    return {"dec": dict(K_FMT=d[0][-1], V_FMT=d[1][-1]), "pre": dict(K_FMT=p[0][-1], V_FMT=p[1][-1]),
            "rope": dict(K_FMT=cache_args(kc)[-1], V_FMT=cache_args(vc)[-1])}  # fmt: skip


def _q8_codes(name: str, kernel: str, q8: bool) -> tuple[bool, dict]:
    """(whether the q8 form applies: int8 keys only, the read codes) as the wrappers decide."""
    q8 = q8 and CACHES[name][0] == INT8
    return q8, read_codes(name, q8)[kernel]


def decode_kernel(name: str, q_max: int = 1, f16: bool | None = None, words: bool | None = None,
                  direct: bool = False, tile: tuple[int, int, int] | None = None, gate: bool = False,
                  q8: bool | None = None):  # fmt: skip
    """The decode kernel over `name`'s caches at the packaged tile (or `tile` = (block_n, warps, stages)), in the
    tile's forms unless f16 / words / q8 are given; `direct` one split writing the output (gated by
    sigmoid(gate) with `gate`)."""
    cfg = decode_config(q_max, H // HKV, D, name)
    bn, nw, ns = tile or (cfg.block_n, cfg.num_warps, cfg.num_stages)
    types, ints = kernel_types(name)
    one_byte = CACHES[name][0][0] != "*bf16"
    q8, codes = _q8_codes(name, "dec", cfg.q8 if q8 is None else q8)
    consts = dict(G=H // HKV, Q_MAX=q_max, M_PAD=decode_rows(q_max, H // HKV), D=D, PAGE=PAGE, BLOCK_N=bn,
                  DIRECT=direct, EMU=False, PDL=q_max == 1, F16=(cfg.f16 if f16 is None else f16) and one_byte,
                  WORDS=cfg.words if words is None else words, GATE=gate and direct, Q8=q8, **codes)  # fmt: skip
    return compile_sm90(dec._decode_kernel, types, ints, consts, {"num_warps": nw, "num_stages": ns})


def read_kernel(name: str, tensor: int = 0):
    """The cuDNN path's read-back kernel over `name`'s K (tensor 0) or V (1) cache, writing bf16."""
    cache = CACHES[name][tensor]
    ptr, dtype, groups = cache[0], cache[1], cache[4]
    kc = allocate_kv(1, 1, PAGE, HKV, D, getattr(torch, dtype), "meta")[1][0]
    types = dict(c_ptr=ptr, s_ptr=F32 if groups else ptr, pages_ptr="*i32", out_ptr="*bf16")
    st = strides(cache, cache)  # its K names
    ints = dict(stride_p=st["skp"], stride_t=st["skt"], stride_h=st["skh"], s_p=st["ksp"], s_t=st["kst"],
                s_h=st["ksh"])  # fmt: skip
    consts = dict(D=D, PAGE=PAGE, BLOCK_N=kv_read.BLOCK_N, FMT=cache_args(kc)[-1], EMU=False)
    return compile_sm90(kv_read._read_kv_kernel, types, ints, consts, {"num_warps": 4, "num_stages": 2})


def merge_kernel():
    """The cuDNN path's merge of a part into the running sum (bf16 part, fp32 sums), head_dim 256."""
    types = dict(acc_ptr=F32, lacc_ptr=F32, o_ptr="*bf16", lse_ptr=F32)
    consts = dict(D=D, BLOCK_R=parts_merge.BLOCK_R)
    return compile_sm90(parts_merge._merge_kernel, types, {"s_ar": D, "s_or": D}, consts, {"num_warps": 4})


def combine_kernel(gate: bool = False, splits: int = 256):
    """The split decode's (and split prefill's) combine over up to `splits` splits, head_dim 256, gated with
    `gate`."""
    types = dict(op_ptr=F32, lse_ptr=F32, o_ptr="*bf16", g_ptr="*bf16")
    consts = dict(D=D, S_PAD=splits, EMU=False, PDL=True, GATE=gate)
    return compile_sm90(dec._combine_kernel, types, {"sot": H * D, "soh": D, "sgt": H * 2 * D, "sgh": 2 * D},
                        consts, {"num_warps": 4})  # fmt: skip


def prefill_kernel(name: str, direct: bool = True, lazy: bool | None = None, f16: bool | None = None,
                   words: bool | None = None, tile: tuple[int, int, int, int] | None = None,
                   q8: bool | None = None):  # fmt: skip
    """The prefill kernel over `name`'s caches at the packaged 8K tile (or `tile` = (block_m, block_n, warps,
    stages)); the tile's forms unless given (f16, lazy and the tile's q8 on one-pass launches only, as the
    wrapper)."""
    cfg = prefill_config(8192, H // HKV, D, name)
    bm, bn, nw, ns = tile or (cfg.block_m, cfg.block_n, cfg.num_warps, cfg.num_stages)
    types, ints = kernel_types(name)
    one_byte = CACHES[name][0][0] != "*bf16"
    q8, codes = _q8_codes(name, "pre", cfg.q8 and direct if q8 is None else q8)
    consts = dict(G=H // HKV, D=D, PAGE=PAGE, BLOCK_M=bm, BLOCK_N=bn, EMU=False, DIRECT=direct,
                  LAZY=(cfg.lazy if lazy is None else lazy) and direct,
                  F16=(cfg.f16 if f16 is None else f16) and one_byte and direct,
                  WORDS=cfg.words if words is None else words, Q8=q8, **codes)  # fmt: skip
    return compile_sm90(pre._prefill_kernel, types, ints, consts, {"num_warps": nw, "num_stages": ns})


def _ints(v: str) -> tuple[int, ...]:
    return tuple(int(x) for x in v.split(","))


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--kernel", choices=["decode", "prefill"], default="decode")
    ap.add_argument("--kv-dtype", default="bf16,fp8,int8,k8v4,int4",
                    help="KV formats, comma-separated (default: all)")
    ap.add_argument("--f16", action=argparse.BooleanOptionalAction, default=None,
                    help="the f16 form on / off (default: the packaged tile's)")
    ap.add_argument("--words", action=argparse.BooleanOptionalAction, default=None,
                    help="tiles read by 32-bit words on / off (default: the packaged tile's)")
    ap.add_argument("--q8", action=argparse.BooleanOptionalAction, default=None,
                    help="int8 keys: int8 queries and int8 scores on / off (default: the packaged tile's)")
    ap.add_argument("--lazy", action=argparse.BooleanOptionalAction, default=None,
                    help="prefill: the lazy rescale on / off (default: the packaged tile's)")
    ap.add_argument("--split", action="store_true", help="prefill: split-KV partials instead of one pass")
    ap.add_argument("--direct", action="store_true",
                    help="decode: one split writing the output itself (default: split-KV partials)")
    ap.add_argument("--q-max", type=int, default=1, help="decode: tokens a sequence (default 1)")
    ap.add_argument("--tile", type=_ints, help="decode BLOCK_N,WARPS,STAGES; prefill BLOCK_M,BLOCK_N,WARPS,STAGES")
    ap.add_argument("--top", type=int, default=16, help="opcodes shown per loop (default 16)")
    a = ap.parse_args()
    for name in a.kv_dtype.split(","):
        if a.kernel == "decode":
            kern = decode_kernel(name, a.q_max, a.f16, a.words, a.direct, a.tile, q8=a.q8)
        else:
            kern = prefill_kernel(name, not a.split, a.lazy, a.f16, a.words, a.tile, q8=a.q8)
        print(name, a.kernel, resources(kern))
        for c in sass_loops(sass_of(kern)):
            if sum(c.values()) > 100:  # the key loop (and the partials' epilogue loops are short)
                print(f"  loop {sum(c.values())} instructions:", dict(c.most_common(a.top)))


if __name__ == "__main__":
    main()
