"""The paged attention kernels (decode, prefill, qk-norm-rope-write) at their default 27B-shape settings go
through Triton's whole sm_90 pipeline for every KV format, without spills in decode and prefill (in a child
process: the `compiled_child` fixture)."""

from __future__ import annotations

import pytest

pytest.importorskip("triton")

# prefill's lazy rescale at the default tile (255 registers): bf16, fp8 and int4 without spills; int8 and k8v4 keys
# (scaled after the dot) a few bytes of stack beside it (the sweep weighs them)
LAZY_STACK = {"bf16": 0, "fp8": 0, "int8": 8, "k8v4": 24, "int4": 0}
# prefill's f16 form where its loop gains (sm_90 SASS per 32-key loop: fp8 553 -> 462 instructions, int4 714 ->
# 623): the stack holds values kept across the loop (int4 with the lazy rescale reloads five of them in it; int8
# and k8v4 spill inside the loop at every setting: left out)
F16_STACK = {"fp8": 40, "int4": 104}
# decode's q8 form (int8 keys as stored, int8 queries): k8v4 without spills; int8 at 255 registers keeps a few
# bytes of stack in either dot form (the sweep weighs them)
Q8_STACK = {"int8": 24, "k8v4": 0}


def test_attention_kernels_compile_for_sm90(compiled_child):
    res = compiled_child.call(__file__, "_compile_all", timeout=900)
    assert res.returncode == 0, res.stderr[-4000:]
    assert res.stdout.count("compiled") == 5 * 5, res.stdout  # five kernels a format


def _compile_all() -> None:
    from hinfer.ops.triton import attention_aot as aot
    from hinfer.ops.triton import attention_rope as rope
    from hinfer.ops.triton.linear_aot import resources

    for name, (k, v) in aot.CACHES.items():
        for q_max in (1, 8):  # decode; verify rows (wgmma config)
            r = resources(aot.decode_kernel(name, q_max, f16=False, words=False, q8=False))
            assert r["stack"] == 0, (name, q_max, r)
            print("compiled decode", name, q_max, r)
        if k[1] != "bfloat16":  # the 1-byte formats' f16 form (dots in fp16, codes by their bits), words
            for f16, words in ((True, False), (True, True), (False, True)):
                r = resources(aot.decode_kernel(name, 1, f16, words, q8=False))
                assert r["stack"] == 0, (name, "f16", f16, "words", words, r)
        if name in Q8_STACK:  # int8 keys' q8 form, with bf16 and fp16 dots
            for f16 in (False, True):
                r = resources(aot.decode_kernel(name, 1, f16, q8=True))
                assert r["stack"] <= Q8_STACK[name], (name, "q8", f16, r)
        # one split writing the gated output itself (the model's sigmoid gate in the same launch)
        r = resources(aot.decode_kernel(name, 1, f16=False, words=False, direct=True, gate=True, q8=False))
        assert r["stack"] == 0, (name, "gated", r)
        f16_packaged = aot.prefill_config(8192, aot.H // aot.HKV, aot.D, name).f16
        for direct in (True, False):  # one pass, or split-KV partials (a short chunk over a long prefix)
            r = resources(aot.prefill_kernel(name, direct, lazy=False))
            # the split partials' epilogue costs the int4 format 8 bytes of stack at 255 registers: a short
            # chunk's path, where it is noise; the packaged f16 form (fp8, one-pass launches only: the wrapper's
            # rule) keeps values across the loop
            assert r["stack"] <= (F16_STACK[name] if f16_packaged and direct else 0) + (0 if direct else 16), r
            if direct:  # the lazy rescale (one-pass launches only)
                r = resources(aot.prefill_kernel(name, lazy=True, f16=False))
                print("compiled prefill lazy", name, r)
                assert r["stack"] <= LAZY_STACK[name], (name, "lazy", r)
            if direct and name in Q8_STACK:  # int8 keys' q8 form
                r = resources(aot.prefill_kernel(name, q8=True))
                assert r["stack"] == 0, (name, "prefill q8", r)
            if direct and name in F16_STACK:  # the f16 form, eager and lazy
                for lazy in (False, True):
                    r = resources(aot.prefill_kernel(name, lazy=lazy, f16=True))
                    assert r["stack"] <= F16_STACK[name], (name, "f16", lazy, r)
        print("compiled prefill", name, r)
        for tensor in (0, 1):  # the cuDNN path's read-back of K and V
            r = resources(aot.read_kernel(name, tensor))
            assert r["stack"] == 0, (name, "read", tensor, r)
        types, ints = aot.kernel_types(name)
        rt = dict(q_ptr="*bf16", k_ptr="*bf16", v_ptr="*bf16", qo_ptr="*bf16", qw_ptr="*bf16", kw_ptr="*bf16",
                  pos_ptr="*i64", freq_ptr=aot.F32, kc_ptr=k[0], vc_ptr=v[0], slot_ptr="*i64", eps="fp32",
                  attn_factor="fp32", axes_ptr="*i32", ks_ptr=types["ks_ptr"], vs_ptr=types["vs_ptr"])  # fmt: skip
        consts = dict(H=aot.H, HKV=aot.HKV, H_PAD=32, HKV_PAD=aot.HKV, D=aot.D, R_HALF=32, PAGE=aot.PAGE, EMU=False,
                      LOG_D=8, MULTI_AXIS=name == "bf16", PDL=name == "int8", **aot.read_codes(name)["rope"])  # fmt: skip
        # the rope kernel keeps a small stack at bf16 too (40 B before the KV formats): not checked
        r = resources(aot.compile_sm90(rope._qk_norm_rope_write_kernel, rt, ints, consts, {"num_warps": 8}))
        print("compiled rope", name, r)
    r = resources(aot.merge_kernel())  # the cuDNN path's merge of parts
    assert r["stack"] == 0, ("merge", r)
    for gate in (False, True):  # the split decode's combine, CHUNK splits at a time up to the last with keys
        r = resources(aot.combine_kernel(gate))
        assert r["stack"] == 0, ("combine", gate, r)
