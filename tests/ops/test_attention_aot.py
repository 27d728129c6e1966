"""The paged attention kernels (decode, prefill, qk-norm-rope-write) at their default 27B-shape settings go
through Triton's whole sm_90 pipeline for every KV format, without spills in decode and prefill (in a child
process: the `compiled_child` fixture)."""

from __future__ import annotations

import pytest

pytest.importorskip("triton")

# 27B: 24 query heads, 4 kv heads of 256, rotary 64, pages of 64. Per format and tensor: (pointer type, torch
# dtype, rows per page, elements per row, scales per token and head): an int8 page has one row of scales after
# its 64, an int4 one eight (rows of 128 bytes; 4 scales of 64 values per token and head)
H, HKV, D, PAGE = 24, 4, 256, 64
BF16, FP8 = ("*bf16", "bfloat16", PAGE, D, 0), ("*fp8e4nv", "float8_e4m3fn", PAGE, D, 0)
INT8, INT4 = ("*i8", "int8", PAGE + 1, D, 1), ("*u8", "uint8", PAGE + 8, D // 2, 4)
CACHES = {"bf16": (BF16, BF16), "fp8": (FP8, FP8), "int8": (INT8, INT8), "k8v4": (INT8, INT4),
          "int4": (INT4, INT4)}
F32 = "*fp32"
# prefill's lazy rescale at the default tile (255 registers): bf16, fp8 and int4 without spills; int8 and k8v4 keys
# (scaled after the dot) a few bytes of stack beside it (the sweep weighs them)
LAZY_STACK = {"bf16": 0, "fp8": 0, "int8": 8, "k8v4": 24, "int4": 0}
# prefill's f16 form where its loop gains (sm_90 SASS per 32-key loop: fp8 553 -> 462 instructions, int4 714 ->
# 623): the stack holds values kept across the loop (int4 with the lazy rescale reloads five of them in it; int8
# and k8v4 spill inside the loop at every setting: left out)
F16_STACK = {"fp8": 40, "int4": 104}


def test_attention_kernels_compile_for_sm90(compiled_child):
    res = compiled_child.call(__file__, "_compile_all", timeout=900)
    assert res.returncode == 0, res.stderr[-4000:]
    assert res.stdout.count("compiled") == 5 * len(CACHES), res.stdout


def _compile(fn, types: dict, ints: dict, consts: dict, opts: dict) -> dict:
    from triton.backends.compiler import GPUTarget
    from triton.compiler import ASTSource, compile

    from hinfer.ops.triton.linear_aot import resources

    sig, div = {}, {}
    for i, a in enumerate(fn.arg_names):
        sig[a] = "constexpr" if a in consts else types.get(a, "i32")
        # pointers and 16-divisible integers are specialised so at run time, as Triton's launcher would
        if sig[a][0] == "*" or (sig[a] == "i32" and ints.get(a, 1) % 16 == 0):
            div[(i,)] = [["tt.divisibility", 16]]
    src = ASTSource(fn, sig, constexprs=consts, attrs=div)
    return resources(compile(src, target=GPUTarget("cuda", 90, 64), options=opts))


def _strides(k: tuple, v: tuple) -> dict[str, int]:
    """Cache and scale strides (elements) of a layer's K and V pages, as the wrappers pass them."""
    out = {}
    for name, (_, _, rows, elems, groups) in (("k", k), ("v", v)):
        out |= {f"s{name}p": rows * HKV * elems, f"s{name}t": HKV * elems, f"s{name}h": elems}
        out |= {f"{name}sp": rows * HKV * elems // 4, f"{name}st": HKV * groups, f"{name}sh": groups}
    out |= dict(sks=out["skt"], skc=out["skh"], svs=out["svt"], svc=out["svh"])  # the rope kernel's names
    return out | dict(sqt=H * 2 * D, sqh=2 * D, sot=H * D, soh=D, s_pt=4096)


def _compile_all() -> None:
    import torch

    from hinfer.ops.kv_cache import allocate_kv
    from hinfer.ops.triton import attention_decode as dec
    from hinfer.ops.triton import attention_prefill as pre
    from hinfer.ops.triton import attention_rope as rope
    from hinfer.ops.triton.attention_common import cache_args
    from hinfer.ops.triton.tiles.attention import decode_config, decode_rows, prefill_config
    from hinfer.ops.triton.tiles.forms import DecodeTile, PrefillTile

    def opts(cfg: DecodeTile | PrefillTile) -> dict:
        return {"num_warps": cfg.num_warps, "num_stages": cfg.num_stages}

    for name, (k, v) in CACHES.items():
        ints = _strides(k, v)
        scales = dict(ks_ptr=F32 if k[4] else k[0], vs_ptr=F32 if v[4] else v[0])
        # the read codes each wrapper picks for these caches
        kc, vc = (allocate_kv(1, 1, PAGE, HKV, D, getattr(torch, t[1]), "meta")[1][0] for t in (k, v))
        dec_fmt, pre_fmt = dec.decode_cache_args(kc, vc), pre.prefill_cache_args(kc, vc)
        codes = {"dec": dict(K_FMT=dec_fmt[0][-1], V_FMT=dec_fmt[1][-1]),
                 "pre": dict(K_FMT=pre_fmt[0][-1], V_FMT=pre_fmt[1][-1]),
                 "rope": dict(K_FMT=cache_args(kc)[-1], V_FMT=cache_args(vc)[-1])}  # fmt: skip
        types = dict(q_ptr="*bf16", k_ptr=k[0], v_ptr=v[0], o_ptr="*bf16", op_ptr=F32, lse_ptr=F32,
                     pt_ptr="*i32", cached_ptr="*i32", qlens_ptr="*i32", cu_ptr="*i32", qk_scale="fp32",
                     g_ptr="*bf16", **scales)  # fmt: skip
        for q_max in (1, 8):  # decode; verify rows (wgmma config)
            m_pad = decode_rows(q_max, H // HKV)
            cfg = decode_config(q_max, H // HKV, D, name)
            consts = dict(G=H // HKV, Q_MAX=q_max, M_PAD=m_pad, D=D, PAGE=PAGE, BLOCK_N=cfg.block_n,
                          DIRECT=False, EMU=False, PDL=q_max == 1, F16=False, WORDS=False,
                          **codes["dec"])  # fmt: skip
            r = _compile(dec._decode_kernel, types, ints, consts, opts(cfg))
            assert r["stack"] == 0, (name, q_max, r)
            print("compiled decode", name, q_max, r)
        if k[1] != "bfloat16":  # the 1-byte formats' f16 form (dots in fp16, codes by their bits), words
            cfg = decode_config(1, H // HKV, D, name)
            one = dict(consts, Q_MAX=1, M_PAD=decode_rows(1, H // HKV), BLOCK_N=cfg.block_n, PDL=True)
            for f16, words in ((True, False), (True, True), (False, True)):
                r = _compile(dec._decode_kernel, types, ints, dict(one, F16=f16, WORDS=words), opts(cfg))
                assert r["stack"] == 0, (name, "f16", f16, "words", words, r)
        # one split writing the gated output itself (the model's sigmoid gate in the same launch)
        cfg = decode_config(1, H // HKV, D, name)
        consts = dict(consts, Q_MAX=1, M_PAD=decode_rows(1, H // HKV), BLOCK_N=cfg.block_n, DIRECT=True, GATE=True)
        r = _compile(dec._decode_kernel, types, ints, consts, opts(cfg))
        assert r["stack"] == 0, (name, "gated", r)
        cfg = prefill_config(8192, H // HKV, D, name)
        for direct in (True, False):  # one pass, or split-KV partials (a short chunk over a long prefix)
            consts = dict(G=H // HKV, D=D, PAGE=PAGE, BLOCK_M=cfg.block_m, BLOCK_N=cfg.block_n, EMU=False,
                          DIRECT=direct, LAZY=False, F16=cfg.f16 and direct, WORDS=cfg.words,
                          **codes["pre"])  # fmt: skip
            r = _compile(pre._prefill_kernel, types, ints, consts, opts(cfg))
            # the split partials' epilogue costs the int4 format 8 bytes of stack at 255 registers: a short
            # chunk's path, where it is noise; the packaged f16 form (fp8, one-pass launches only: the wrapper's
            # rule) keeps values across the loop
            assert r["stack"] <= (F16_STACK[name] if cfg.f16 and direct else 0) + (0 if direct else 16), (name, r)
            if direct:  # the lazy rescale (one-pass launches only)
                r = _compile(pre._prefill_kernel, types, ints, dict(consts, LAZY=True, F16=False), opts(cfg))
                print("compiled prefill lazy", name, r)
                assert r["stack"] <= LAZY_STACK[name], (name, "lazy", r)
            if direct and name in F16_STACK:  # the f16 form, eager and lazy
                for lazy in (False, True):
                    r = _compile(pre._prefill_kernel, types, ints, dict(consts, LAZY=lazy, F16=True), opts(cfg))
                    assert r["stack"] <= F16_STACK[name], (name, "f16", lazy, r)
        print("compiled prefill", name, r)
        rt = dict(q_ptr="*bf16", k_ptr="*bf16", v_ptr="*bf16", qo_ptr="*bf16", qw_ptr="*bf16", kw_ptr="*bf16",
                  pos_ptr="*i64", freq_ptr=F32, kc_ptr=k[0], vc_ptr=v[0], slot_ptr="*i64", eps="fp32",
                  attn_factor="fp32", axes_ptr="*i32", **scales)  # fmt: skip
        consts = dict(H=H, HKV=HKV, H_PAD=32, HKV_PAD=HKV, D=D, R_HALF=32, PAGE=PAGE, EMU=False, LOG_D=8,
                      MULTI_AXIS=name == "bf16", PDL=name == "int8", **codes["rope"])  # fmt: skip
        # the rope kernel keeps a small stack at bf16 too (40 B before the KV formats): not checked
        r = _compile(rope._qk_norm_rope_write_kernel, rt, ints, consts, {"num_warps": 8})
        print("compiled rope", name, r)
