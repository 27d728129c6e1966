"""GDN Triton kernels vs the reference bodies at the real 27B shapes on the GPU (HK=16, HV=48, K=V=128,
conv channels 10240), bf16 activations, fp32 state. Run with `pytest tests/gpu/test_gdn_kernels.py -s` to see
the measured errors. The reference runs on CPU copies (true fp32, no TF32 anywhere).

Thresholds (relative L2 = ||out - ref|| / ||ref||; the reference's own bf16 output rounding is ~1.7e-3):
- conv1d: y within one bf16 ulp elementwise; conv states bit-identical (they are copies of inputs).
- gating: g rtol 1e-5; beta within one bf16 ulp (sigmoid rounded to the b dtype).
- recurrent (decode/verify, fp32 math): o rel-L2 <= 5e-3; state rel-L2 <= 1e-5.
- chunked prefill (tf32 tensor-core dots): o rel-L2 <= 1e-2; state rel-L2 <= 5e-3. A CPU simulation of the
  same algorithm with tf32-rounded operands over 1024 tokens gave 4e-4..7e-4 for both (o and state).
"""

from __future__ import annotations

import random

import pytest
import torch

from hinfer.batch import ForwardBatch, SeqChunk, build_forward_batch
from hinfer.ops import gdn as ref

pytestmark = [pytest.mark.gpu, pytest.mark.skipif(not torch.cuda.is_available(), reason="needs CUDA")]

HK, HV, KD, VD, CONV = 16, 48, 128, 128, 10240
N_SLOTS = 160


@pytest.fixture(scope="module")
def tg():
    """The kernels compiled for the GPU (tests/conftest.py leaves TRITON_INTERPRET unset where CUDA is)."""
    from hinfer.ops.triton import gdn, gdn_recurrent
    from hinfer.ops.triton.common import interpreted

    kernel = gdn_recurrent._recurrent_kernel
    assert not interpreted(kernel), "interpreted on a GPU: tests/triton_interpreter.py"
    return gdn


@pytest.fixture(autouse=True)
def poison_outputs(tg, monkeypatch):
    """Outputs start as NaN, so an element the kernels never write fails the comparison."""
    monkeypatch.setattr(
        tg, "_empty", lambda shape, dtype, device: torch.full(shape, float("nan"), dtype=dtype, device=device)
    )


def _batch(lens: list[int], verify: list[bool] | None = None, n_slots: int = N_SLOTS) -> ForwardBatch:
    pool = random.sample(range(1, n_slots), n_slots - 1)
    chunks = []
    for i, n in enumerate(lens):
        st = [pool.pop() for _ in range(n)] if verify is not None and verify[i] else None
        chunks.append(SeqChunk(list(range(n)), 0, [0], pool.pop(), gdn_step_slots=st))
    return build_forward_batch(chunks, 1 << 20, "cuda")


def _cpu(batch: ForwardBatch) -> ForwardBatch:
    fields = {f: getattr(batch, f) for f in batch.__dataclass_fields__}
    return ForwardBatch(**{f: v.cpu() if isinstance(v, torch.Tensor) else v for f, v in fields.items()})


def _rel(a: torch.Tensor, b: torch.Tensor) -> float:
    a, b = a.double().cpu(), b.double().cpu()
    return ((a - b).norm() / b.norm()).item()


def _poison_steps(state: torch.Tensor, batch: ForwardBatch) -> None:
    if batch.gdn_step_slots is not None:
        own = set(batch.gdn_slots.tolist())
        tgt = sorted({s for row in batch.gdn_step_slots.tolist() for s in row} - own)
        state[tgt] = float("nan")


def _layer_params() -> tuple[torch.Tensor, ...]:
    """One GDN layer's parameters and states at the 27B shapes: norm weight, A_log, dt_bias, conv weight, conv
    and SSM states of N_SLOTS slots."""
    norm_w = (torch.rand(VD, device="cuda") + 0.5).bfloat16()
    a_log = (torch.rand(HV, device="cuda") * 2.5).bfloat16()
    dt_bias = torch.randn(HV, device="cuda").bfloat16()
    conv_w = (torch.randn(CONV, 4, device="cuda") * 0.5).bfloat16()
    conv_state = torch.randn(N_SLOTS, CONV, 3, device="cuda").bfloat16()
    ssm_state = torch.randn(N_SLOTS, HV, KD, VD, device="cuda") * 0.1
    return norm_w, a_log, dt_bias, conv_w, conv_state, ssm_state


CASES = {
    "decode1": ([1], None),
    "decode8": ([1] * 8, None),
    "decode64": ([1] * 64, None),
    "verify8x4": ([4] * 8, [True] * 8),
    "prefill3": ([1, 1, 700, 1100, 333], None),  # two decode rows mixed in, 2133 prefill tokens
}


@pytest.mark.parametrize("case", list(CASES))
def test_causal_conv1d(tg, seed, case):
    lens, verify = CASES[case]
    batch = _batch(lens, verify)
    t = sum(lens)
    proj = torch.randn(t, CONV + 6240, dtype=torch.bfloat16, device="cuda")
    x = proj[:, :CONV]  # a slice of the fused in_proj output (row stride != CONV)
    w = (torch.randn(CONV, 4, device="cuda") * 0.5).bfloat16()
    state = torch.randn(N_SLOTS, CONV, 3, device="cuda").bfloat16()
    s_k = state.clone()
    _poison_steps(s_k, batch)
    s_r = state.cpu()
    y = tg.causal_conv1d(x, w, s_k, batch)
    y_ref = ref.causal_conv1d_ref(x.cpu(), w.cpu(), s_r, _cpu(batch))
    print(f"\nconv {case}: y rel-L2 {_rel(y.float(), y_ref.float()):.2e}")
    assert not y.isnan().any(), f"seed {seed}: unwritten output"
    torch.testing.assert_close(
        y.float().cpu(), y_ref.float(), rtol=2**-7, atol=2e-3, msg=lambda m: f"seed {seed}: {m}"
    )
    assert torch.equal(s_k.cpu(), s_r), f"seed {seed}: conv state differs"


def test_gdn_gating(tg, seed):
    t = 2133
    a = torch.randn(t, 2 * HV, dtype=torch.bfloat16, device="cuda")[:, :HV] * 3
    b = torch.randn(t, 2 * HV, dtype=torch.bfloat16, device="cuda")[:, HV:] * 3
    a_log = (torch.rand(HV, device="cuda") * 2.7).bfloat16()
    dt_bias = torch.randn(HV, device="cuda").bfloat16()
    g, beta = tg.gdn_gating(a, b, a_log, dt_bias)
    g_ref, beta_ref = ref.gdn_gating_ref(a.cpu(), b.cpu(), a_log.cpu(), dt_bias.cpu())
    torch.testing.assert_close(g.cpu(), g_ref, rtol=1e-5, atol=1e-7, msg=lambda m: f"seed {seed}: {m}")
    torch.testing.assert_close(beta.cpu(), beta_ref, rtol=0, atol=2**-8, msg=lambda m: f"seed {seed}: {m}")


@pytest.mark.parametrize("case", list(CASES))
def test_gated_delta_rule(tg, seed, case):
    lens, verify = CASES[case]
    batch = _batch(lens, verify)
    t = sum(lens)
    # q, k, v as the model has them: silu'd conv output views of one [T, 10240] buffer (bf16)
    qkv = torch.nn.functional.silu(torch.randn(t, CONV, device="cuda")).bfloat16()
    q = qkv[:, : HK * KD].view(t, HK, KD)
    k = qkv[:, HK * KD : 2 * HK * KD].view(t, HK, KD)
    v = qkv[:, 2 * HK * KD :].view(t, HV, VD)
    g = -torch.exp(torch.rand(HV, device="cuda") * 2.7) * torch.nn.functional.softplus(
        torch.randn(t, HV, device="cuda") - 3
    )
    beta = torch.sigmoid(torch.randn(t, HV, device="cuda") * 2)
    state = torch.randn(N_SLOTS, HV, KD, VD, device="cuda") * 0.1
    s_k = state.clone()
    _poison_steps(s_k, batch)
    o = tg.gated_delta_rule(q, k, v, g, beta, s_k, batch)
    s_r = state.cpu()
    o_ref = ref.gated_delta_rule_ref(q.cpu(), k.cpu(), v.cpu(), g.cpu(), beta.cpu(), s_r, _cpu(batch))
    touched = set(batch.gdn_slots.tolist())
    if batch.gdn_step_slots is not None:
        touched |= {s for row in batch.gdn_step_slots.tolist() for s in row}
    touched = sorted(touched)
    e_o, e_s = _rel(o.float(), o_ref.float()), _rel(s_k[touched], s_r[touched])
    print(f"\ngdn {case}: o rel-L2 {e_o:.2e}  state rel-L2 {e_s:.2e}")
    chunked = max(lens) > tg.RECURRENT_MAX_TOKENS
    assert not o.isnan().any() and not s_k.isnan().any(), f"seed {seed}: unwritten output/state"
    assert e_o <= (1e-2 if chunked else 5e-3), f"seed {seed}: o rel-L2 {e_o}"
    assert e_s <= (5e-3 if chunked else 1e-5), f"seed {seed}: state rel-L2 {e_s}"
    untouched = torch.ones(N_SLOTS, dtype=torch.bool)
    untouched[touched] = False
    assert torch.equal(s_k[untouched.cuda()], state[untouched.cuda()]), f"seed {seed}: other slots changed"


@pytest.mark.parametrize("tiles", ["packaged", "whole-rows", "capped"])
@pytest.mark.parametrize("case", ["decode1", "decode8", "decode64", "verify8x4"])
def test_fused_step_matches_the_separate_kernels(tg, seed, monkeypatch, case, tiles):
    """conv + gates + rule + output norm in one kernel (gdn_decode.py) vs the four kernels, at 27B shapes: the conv
    state bit for bit, normalised outputs and SSM state to rounding (the arithmetic is the same step for step), run
    twice (the arrival counters must come back to zero); a graph replay of the fused step repeats the eager one.
    whole-rows: BV = V, each program normalising its head's rows itself; capped: the launches under register caps
    (spilling), which must change nothing computed."""
    if tiles == "whole-rows":
        monkeypatch.setattr(tg, "FUSED_TILES", ((1 << 30, VD, 8),))
    if tiles == "capped":
        monkeypatch.setattr(tg, "FUSED_TILES", ((2, 16, 1, 96), (1 << 30, 32, 2, 128)))
    lens, verify = CASES[case]
    batch = _batch(lens, verify)
    t = sum(lens)
    proj = torch.randn(t, CONV + HV * VD + 2 * HV, device="cuda").bfloat16()
    qkv, z = proj[:, :CONV], proj[:, CONV : CONV + HV * VD].view(t, HV, VD)
    b, a = proj[:, CONV + HV * VD : CONV + HV * VD + HV] * 3, proj[:, CONV + HV * VD + HV :]
    norm_w, a_log, dt_bias, conv_w, conv_state, ssm_state = _layer_params()
    heads = (HK, KD, HV, VD)
    out = {}
    for fused in (False, True, True):
        monkeypatch.setattr(tg, "FUSED_MAX_TOKENS", 16 if fused else 0)  # verify rows too
        cs, ss = conv_state.clone(), ssm_state.clone()
        _poison_steps(ss, batch)
        o = tg.gated_delta_net(qkv, a, b, z, a_log, dt_bias, conv_w, norm_w, 1e-6, cs, ss, batch, heads)
        out.setdefault(fused, []).append((o, cs, ss))
    (o_s, cs_s, ss_s), = out[False]
    for o_f, cs_f, ss_f in out[True]:
        assert not o_f.isnan().any() and not ss_f.isnan().any(), f"seed {seed}: unwritten output / state"
        assert torch.equal(cs_f, cs_s), f"seed {seed}: conv state"
        e_o, e_s = _rel(o_f.float(), o_s.float()), _rel(ss_f, ss_s)
        print(f"\nfused gdn {case}: o rel-L2 {e_o:.2e}  state rel-L2 {e_s:.2e}")
        assert e_o <= 2e-3 and e_s <= 1e-5, f"seed {seed}: o {e_o} state {e_s}"
    from hinfer.ops.triton.gdn_decode import arrival_counters

    assert not arrival_counters(qkv.device).any()
    monkeypatch.setattr(tg, "FUSED_MAX_TOKENS", 16)
    cs, ss = conv_state.clone(), ssm_state.clone()
    graph = torch.cuda.CUDAGraph()
    with torch.cuda.graph(graph):
        o_g = tg.gated_delta_net(qkv, a, b, z, a_log, dt_bias, conv_w, norm_w, 1e-6, cs, ss, batch, heads)
    cs.copy_(conv_state)
    ss.copy_(ssm_state)
    graph.replay()
    torch.cuda.synchronize()
    o_f, cs_f, ss_f = out[True][0]
    assert torch.equal(cs, cs_f) and torch.equal(o_g, o_f), f"seed {seed}: graph replay differs"


def test_state_saved_inside_a_chunk(tg, seed):
    """A prefix-cache checkpoint inside a prompt chunk (SeqChunk.gdn_save) at 27B shapes through the model's op:
    output and final states as without the save (the chunked rule's chunks fall elsewhere: rounding), the saved
    conv state bit for bit and the saved recurrent state as running the chunk's first j tokens alone (within the
    chunked prefill's state threshold, 5e-3)."""
    from hinfer.ops.gdn import gated_delta_net

    lens, saves = [1, 700, 333], {1: 448, 2: 64}
    pool = random.sample(range(1, N_SLOTS), 2 * len(lens))
    slots, save_slots = pool[: len(lens)], pool[len(lens) :]
    t = sum(lens)
    proj = torch.randn(t, CONV + HV * VD + 2 * HV, device="cuda").bfloat16()
    qkv, z = proj[:, :CONV], proj[:, CONV : CONV + HV * VD].view(t, HV, VD)
    b, a = proj[:, CONV + HV * VD : CONV + HV * VD + HV] * 3, proj[:, CONV + HV * VD + HV :]
    weights = ((torch.rand(HV, device="cuda") * 2.5).bfloat16(), torch.randn(HV, device="cuda").bfloat16(),
               (torch.randn(CONV, 4, device="cuda") * 0.5).bfloat16(), (torch.rand(VD, device="cuda") + 0.5).bfloat16())  # fmt: skip
    states = (torch.randn(N_SLOTS, CONV, 3, device="cuda").bfloat16(), torch.randn(N_SLOTS, HV, KD, VD, device="cuda") * 0.1)

    def run(rows: slice, chunks: list[SeqChunk]):
        cs, ss = states[0].clone(), states[1].clone()
        batch = build_forward_batch(chunks, 1 << 20, "cuda")
        o = gated_delta_net(qkv[rows], a[rows], b[rows], z[rows], *weights, 1e-6, cs, ss, batch, (HK, KD, HV, VD))
        return o, cs, ss

    def chunks(with_saves: bool) -> list[SeqChunk]:
        return [SeqChunk(list(range(n)), 0, [0], slots[i],
                         gdn_save=(saves[i], save_slots[i]) if with_saves and i in saves else None)
                for i, n in enumerate(lens)]  # fmt: skip

    o, cs, ss = run(slice(0, t), chunks(True))
    o_ref, cs_ref, ss_ref = run(slice(0, t), chunks(False))
    others = [s for s in range(N_SLOTS) if s not in save_slots]
    e_o, e_s = _rel(o.float(), o_ref.float()), _rel(ss[others], ss_ref[others])
    print(f"\ngdn save inside a chunk: o rel-L2 {e_o:.2e}  states rel-L2 {e_s:.2e}")
    assert e_o <= 1e-2 and e_s <= 5e-3 and torch.equal(cs[others], cs_ref[others]), f"seed {seed}"
    start = 0
    for i, n in enumerate(lens):
        if i in saves:
            j = saves[i]
            _, cs_j, ss_j = run(slice(start, start + j), [SeqChunk(list(range(j)), 0, [0], slots[i])])
            assert torch.equal(cs[save_slots[i]], cs_j[slots[i]]), f"conv state saved at {j}, seed {seed}"
            e = _rel(ss[save_slots[i]], ss_j[slots[i]])
            assert e <= 5e-3, f"recurrent state saved at {j}: rel-L2 {e}, seed {seed}"
        start += n


def test_fused_step_reads_its_state_ahead_of_the_pdl_wait(tg, seed, monkeypatch):
    """The fused step behind the projection that writes its inputs (a PDL launch, as in the model), in a CUDA graph:
    reading the state and slots before the PDL wait (FUSED_EARLY) gives the outputs and states of reading them
    after it, bit for bit, over three replays with fresh inputs each."""
    from hinfer.ops.triton.linear import bf16_linear

    batch = _batch([1] * 8)
    hidden = 1024
    w = (torch.randn(CONV + HV * VD + 2 * HV, hidden, device="cuda") * 0.05).bfloat16()
    x = torch.empty(8, hidden, device="cuda", dtype=torch.bfloat16)
    norm_w, a_log, dt_bias, conv_w, conv_state, ssm_state = _layer_params()
    xs = [torch.randn(8, hidden, device="cuda").bfloat16() for _ in range(3)]
    runs = {}
    for early in (False, True):
        monkeypatch.setattr(tg, "FUSED_EARLY", early)
        cs, ss = conv_state.clone(), ssm_state.clone()

        def step(cs=cs, ss=ss):
            proj = bf16_linear(x, w)
            qkv, z = proj[:, :CONV], proj[:, CONV : CONV + HV * VD].view(8, HV, VD)
            b, a = proj[:, CONV + HV * VD : CONV + HV * VD + HV], proj[:, CONV + HV * VD + HV :]
            return tg.gated_delta_net(qkv, a, b, z, a_log, dt_bias, conv_w, norm_w, 1e-6, cs, ss, batch,
                                      (HK, KD, HV, VD))  # fmt: skip

        x.copy_(xs[0])
        step()  # eager first: the arrival counters are allocated outside the capture
        cs.copy_(conv_state)
        ss.copy_(ssm_state)
        graph = torch.cuda.CUDAGraph()
        with torch.cuda.graph(graph):
            y = step()
        outs = []
        for xi in xs:
            x.copy_(xi)
            graph.replay()
            outs.append(y.clone())
        torch.cuda.synchronize()
        runs[early] = (outs, cs, ss)
    for (o0, o1) in zip(runs[False][0], runs[True][0]):
        assert not o1.isnan().any() and torch.equal(o0, o1), f"seed {seed}: outputs differ"
    assert torch.equal(runs[False][1], runs[True][1]) and torch.equal(runs[False][2], runs[True][2]), f"seed {seed}"
