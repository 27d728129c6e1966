"""Triton GDN kernels vs the reference bodies, under Triton's CPU interpreter at tiny shapes (CI).

The interpreter cannot catch what only the GPU compiler rejects, so the kernels are also compiled for sm_90
(PTX and cubin with the wheel's ptxas, no GPU needed) at the default 27B tile settings, in a child process.
Inputs are fresh random values every run (the seed is in each failure message); outputs are poisoned with
NaN before the call and step-slot destinations in the state too, so an element never written fails.
"""

from __future__ import annotations

import random

import pytest
import torch
from gdn_batches import slot_batch, step_targets

from hinfer.batch import ForwardBatch
from hinfer.ops import gdn as ref

N_SLOTS = 40  # enough for every scenario's own slots plus its verify step slots


@pytest.fixture(scope="module")
def tg(interpreter):
    from hinfer.ops.triton import gdn, gdn_recurrent
    from hinfer.ops.triton.common import interpreted

    assert interpreted(gdn_recurrent._recurrent_kernel)
    return gdn


@pytest.fixture
def small_tiles(tg, monkeypatch):
    """Tiles smaller than the defaults so tiny shapes still span several programs per axis."""
    monkeypatch.setattr(tg, "CONV", {"small_q": 4, "BT": 8, "BC": 16, "num_warps": 4})
    monkeypatch.setattr(tg, "DECODE_TILES", ((1 << 30, 8, 2),))
    monkeypatch.setattr(
        tg, "_empty", lambda shape, dtype, device: torch.full(shape, float("nan"), dtype=dtype)
    )
    return tg


def _batch(lens: list[int], step: list[list[int] | None] | None = None) -> ForwardBatch:
    """Sequences of the given lengths on distinct random slots; verify rows (a step entry) get fresh step slots."""
    return slot_batch(lens, None if step is None else [st is not None for st in step], N_SLOTS)



# decode rows first (as the scheduler orders them), then chunks; one verify row per draft count 1..4
SCENARIOS = {
    "decode": ([1, 1, 1, 1, 1], None),
    "mixed": ([1, 1, 2, 3, 13, 29], None),
    "verify": ([1, 2, 3, 4, 2], [[0], [0], [0], [0], None]),
    # an 11-token verify row (past RECURRENT_MAX_TOKENS, within VERIFY_MAX_TOKENS) and a 19-token prefill row
    "verify+prefill": ([2, 4, 11, 1, 19], [[0], [0], [0], None, None]),
}


def _lens(name: str) -> tuple[list[int], list | None]:
    lens, step = SCENARIOS[name]
    # randomise the prefill lengths a little (keep decode/verify rows as they are)
    return [n if n <= 4 else n + random.randrange(-2, 3) for n in lens], step


@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16])
def test_gating(small_tiles, seed, dtype):
    tg = small_tiles
    t, hv = 37, 6
    a = torch.randn(t, hv + 3, dtype=dtype)[:, 1 : 1 + hv]  # strided like a slice of the fused projection
    b = torch.randn(t, hv + 3, dtype=dtype)[:, 2 : 2 + hv] * 3
    a_log = (torch.rand(hv) * 2.5).to(dtype)
    dt_bias = torch.randn(hv).to(dtype)
    a[0, 0] = 25.0  # softplus linear branch
    a[1, 1] = -30.0  # softplus tiny branch
    g, beta = tg.gdn_gating(a, b, a_log, dt_bias)
    g_ref, beta_ref = ref.gdn_gating_ref(a, b, a_log, dt_bias)
    assert g.dtype == beta.dtype == torch.float32
    torch.testing.assert_close(g, g_ref, rtol=2e-6, atol=1e-7, msg=lambda m: f"seed {seed}: {m}")
    tol = 2**-8 if dtype == torch.bfloat16 else 1e-6  # one bf16 ulp: sigmoid rounded to the b dtype
    torch.testing.assert_close(beta, beta_ref, rtol=0, atol=tol, msg=lambda m: f"seed {seed}: {m}")


@pytest.mark.parametrize("scenario", list(SCENARIOS))
def test_causal_conv1d(small_tiles, seed, scenario):
    tg = small_tiles
    lens, step = _lens(scenario)
    batch = _batch(lens, step)
    t, c, dt = sum(lens), 40, torch.bfloat16
    x = torch.randn(t, c + 24, dtype=dt)[:, 8 : 8 + c]  # row stride != c, as the qkv slice of in_proj
    w = torch.randn(c, 4, dtype=dt)
    state = torch.randn(N_SLOTS, c, 3, dtype=dt)
    st_k = state.clone()
    st_k[step_targets(batch)] = float("nan")
    st_r = state.clone()
    y = tg.causal_conv1d(x, w, st_k, batch)
    y_ref = ref.causal_conv1d_ref(x, w, st_r, batch)
    msg = f"seed {seed} lens {lens}"
    assert not y.isnan().any(), msg
    # fp32 accumulation in another order can flip a bf16 rounding: one ulp
    torch.testing.assert_close(y.float(), y_ref.float(), rtol=2**-7, atol=1e-3, msg=lambda m: f"{msg}: {m}")
    assert torch.equal(st_k, st_r), f"{msg}: conv state differs (copies of inputs must match bit for bit)"


@pytest.mark.parametrize(
    "scenario,chunk,dtype",
    [
        ("decode", 16, torch.float32),
        ("mixed", 16, torch.float32),
        ("mixed", 32, torch.bfloat16),
        ("verify", 16, torch.bfloat16),
        ("verify+prefill", 16, torch.float32),
        ("long", 64, torch.float32),
    ],
)
def test_gated_delta_rule(small_tiles, monkeypatch, seed, scenario, chunk, dtype):
    tg = small_tiles
    monkeypatch.setattr(tg, "CHUNK", dict(tg.CHUNK, BT=chunk, state_BV=16, out_BV=16))
    if scenario == "long":  # several 64-token chunks (all four 16-blocks of the inverse), plus a decode row
        lens, step = [1, 70 + random.randrange(0, 6), 33], None
    else:
        lens, step = _lens(scenario)
    batch = _batch(lens, step)
    t, hk, hv, kd, vd = sum(lens), 2, 4, 16, 32
    qkv = torch.randn(t, 2 * hk * kd + hv * vd + 8, dtype=dtype)  # strided views of one buffer, as the model
    q = qkv[:, : hk * kd].view(t, hk, kd)
    k = qkv[:, hk * kd : 2 * hk * kd].view(t, hk, kd)
    v = qkv[:, 2 * hk * kd : 2 * hk * kd + hv * vd].view(t, hv, vd)
    g = -(torch.rand(t, hv) * 1.5 + 0.01)
    beta = torch.rand(t, hv) * 0.98 + 0.01
    state = torch.randn(N_SLOTS, hv, kd, vd) * 0.5
    s_k = state.clone()
    s_k[step_targets(batch)] = float("nan")
    s_r = state.clone()
    o = tg.gated_delta_rule(q, k, v, g, beta, s_k, batch)
    o_ref = ref.gated_delta_rule_ref(q, k, v, g, beta, s_r, batch)
    msg = f"seed {seed} lens {lens}"
    assert o.dtype == dtype and not o.isnan().any(), msg
    tol = dict(rtol=2**-7, atol=2e-3) if dtype == torch.bfloat16 else dict(rtol=1e-4, atol=1e-5)
    torch.testing.assert_close(o.float(), o_ref.float(), **tol, msg=lambda m: f"{msg}: {m}")
    torch.testing.assert_close(s_k, s_r, rtol=1e-4, atol=1e-5, msg=lambda m: f"{msg}: state: {m}")


def test_dispatch_uses_triton(small_tiles, monkeypatch, seed, ops_backend):
    """HINFER_TRITON=1 routes hinfer.ops.gdn to these kernels."""
    tg = small_tiles
    ops_backend("triton")
    calls = []
    real = tg.causal_conv1d
    monkeypatch.setattr(tg, "causal_conv1d", lambda *a: calls.append(1) or real(*a))
    batch = _batch([1, 3])
    x = torch.randn(4, 16)
    out = ref.causal_conv1d(x, torch.randn(16, 4), torch.randn(N_SLOTS, 16, 3), batch)
    assert calls and out.shape == x.shape


def test_kernels_compile_for_sm90(compiled_child):
    """Every kernel at its default 27B-shape settings goes through Triton's whole sm_90 pipeline, and the fused step
    with whole rows (BV = V, the tile the sweep tries)."""
    res = compiled_child.call(__file__, "_compile_all")
    assert res.returncode == 0, res.stderr[-4000:]
    from hinfer.ops.triton import gdn as m

    tiles = len(m.DECODE_TILES) + len(m.FUSED_TILES) + 1  # each without and with step slots; + whole rows (BV = V)
    assert res.stdout.count("compiled") == 6 + 2 * tiles, res.stdout


def _compile_all() -> None:
    from triton.backends.compiler import GPUTarget
    from triton.compiler import ASTSource, compile

    from hinfer.ops.triton import gdn as m
    from hinfer.ops.triton import gdn_chunk, gdn_conv, gdn_decode, gdn_recurrent

    bf, f32, i32, i64 = "*bf16", "*fp32", "*i32", "*i64"
    ptrs = dict(x_ptr=bf, w_ptr=bf, st_ptr=bf, y_ptr=bf, cu_ptr=i32, slot_ptr=i64, step_ptr=i64)
    ptrs |= dict(tab_ptr=i32, a_ptr=bf, b_ptr=bf, alog_ptr=bf, dtb_ptr=bf, g_ptr=f32, beta_ptr=f32)
    ptrs |= dict(q_ptr=bf, k_ptr=bf, v_ptr=bf, s_ptr=f32, o_ptr=bf, u_ptr=f32, gc_ptr=f32, h_ptr=f32)
    ptrs |= dict(ctab_ptr=i32, stab_ptr=i32, scale="fp32", cw_ptr=bf, cs_ptr=bf, cnt_ptr=i32, z_ptr=bf, nw_ptr=bf,
                 eps="fp32")  # fmt: skip
    gqa = dict(REP=3, K=128)
    ch = dict(gqa, HV=48, V=128, BT=m.CHUNK["BT"], PREC=m.CHUNK["PREC"])
    cases = [
        (gdn_conv._conv_kernel, dict(BT=2, BC=m.CONV["BC"], USE_TAB=False, HAS_STEP=True, EMU=False), m.CONV),
        (gdn_conv._conv_kernel, dict(BT=m.CONV["BT"], BC=m.CONV["BC"], USE_TAB=True, HAS_STEP=False, EMU=False), m.CONV),
        (gdn_conv._gating_kernel, dict(BLOCK=1024, EMU=False), {"num_warps": 4}),
        *((gdn_recurrent._recurrent_kernel, dict(gqa, BV=bv, HAS_STEP=step, EMU=False), {"num_warps": w})
          for _, bv, w in m.DECODE_TILES for step in (False, True)),
        *((gdn_decode._fused_kernel, dict(gqa, V=128, BV=bv, HAS_STEP=step, EMU=False, PDL=step, NORM=True,
                                           EARLY=step),
           {"num_warps": w, **({"maxnreg": regs[0]} if regs and regs[0] else {})})
          for _, bv, w, *regs in (*m.FUSED_TILES, (0, 128, 8)) for step in (False, True)),
        (gdn_chunk._prep_kernel, dict(ch, SUB=16), {"num_warps": m.CHUNK["prep_warps"]}),
        (gdn_chunk._state_kernel, dict(ch, BV=m.CHUNK["state_BV"], HAS_STEP=True, INTERP=False),
         {"num_warps": m.CHUNK["state_warps"], "num_stages": m.CHUNK["state_stages"]}),
        (gdn_chunk._out_kernel, dict(ch, BV=m.CHUNK["out_BV"], EMU=False), {"num_warps": m.CHUNK["out_warps"]}),
    ]  # fmt: skip
    for fn, consts, opts in cases:
        types = (
            ptrs if fn.__name__.startswith("_conv") else dict(ptrs, w_ptr=f32)
        )  # the weight vs chunk w
        sig = {a: "constexpr" if a in consts else types.get(a, "i32") for a in fn.arg_names}
        # pointers and strides are 16-divisible at run time, as Triton's launcher would specialise them
        div = {(i,): [["tt.divisibility", 16]] for i, a in enumerate(fn.arg_names) if sig[a][0] == "*"}
        options = {k: v for k, v in opts.items() if k in ("num_warps", "num_stages", "maxnreg")}
        kernel = compile(ASTSource(fn, sig, constexprs=consts, attrs=div), target=GPUTarget("cuda", 90, 32),
                         options=options)  # fmt: skip
        assert kernel.asm.get("cubin"), fn.__name__
        print("compiled", fn.__name__, kernel.metadata.shared)
