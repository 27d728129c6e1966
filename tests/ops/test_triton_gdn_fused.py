"""The fused Gated DeltaNet step (conv + gates + rule + output norm in one kernel, gdn_decode.py) vs the reference
composition and vs the separate Triton kernels, under Triton's CPU interpreter at tiny shapes: outputs, the SSM state and the
conv state (bit for bit: copies of inputs), in decode and speculative-verify batches (step slots, a row of equal
slots), with several programs per key head (the last to arrive writes its q / k conv state). Outputs and
step-slot destinations are poisoned with NaN, so an element never written fails."""

from __future__ import annotations

import pytest
import torch
from gdn_batches import slot_batch, step_targets

from hinfer.batch import ForwardBatch
from hinfer.ops import gdn as ref

N_SLOTS = 40
HK, KD, HV, VD = 2, 16, 6, 32  # three value heads per key head, V in two blocks of 16: 6 programs per key head
EPS = 1e-6


@pytest.fixture
def tg(interpreter, monkeypatch):
    from hinfer.ops.triton import gdn

    monkeypatch.setattr(gdn, "CONV", {"small_q": 4, "BT": 8, "BC": 16, "num_warps": 4})
    monkeypatch.setattr(gdn, "DECODE_TILES", ((1 << 30, 8, 2),))
    monkeypatch.setattr(gdn, "FUSED_TILES", ((1 << 30, 16, 2),))
    monkeypatch.setattr(gdn, "_empty", lambda shape, dtype, device: torch.full(shape, float("nan"), dtype=dtype))
    return gdn


def _batch(lens: list[int], verify: list[bool] | None = None) -> ForwardBatch:
    return slot_batch(lens, verify, N_SLOTS)


def _inputs(t: int, dtype: torch.dtype):
    c = 2 * HK * KD + HV * VD
    proj = torch.randn(t, c + HV * VD + 2 * HV + 8, dtype=dtype)  # strided slices of one projection, as the model's
    qkv, z = proj[:, :c], proj[:, c : c + HV * VD].view(t, HV, VD)
    b, a = proj[:, c + HV * VD : c + HV * VD + HV] * 3, proj[:, c + HV * VD + HV : c + HV * VD + 2 * HV]
    a_log = (torch.rand(HV) * 2.5).to(dtype)
    dt_bias = torch.randn(HV).to(dtype)
    conv_w = (torch.randn(c, 4) * 0.5).to(dtype)
    norm_w = (torch.rand(VD) + 0.5).to(dtype)
    conv_state = torch.randn(N_SLOTS, c, 3, dtype=dtype)
    ssm_state = torch.randn(N_SLOTS, HV, KD, VD) * 0.5
    return qkv, a, b, z, a_log, dt_bias, conv_w, norm_w, conv_state, ssm_state


SCENARIOS = {
    "decode": ([1, 1, 1, 1], None),
    "short": ([1, 3, 8, 2], None),
    "verify": ([4, 1, 2, 4], [True, False, True, True]),  # the 1-token row keeps its own slot (a run of one)
}


@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16])
@pytest.mark.parametrize("scenario", list(SCENARIOS))
def test_fused_step_matches_reference_and_separate_kernels(tg, seed, scenario, dtype, monkeypatch):
    _check_fused(tg, seed, scenario, dtype, monkeypatch)


@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16])
@pytest.mark.parametrize("scenario", ["short", "verify"])
def test_fused_step_with_whole_rows_normalises_in_its_program(tg, seed, scenario, dtype, monkeypatch):
    """BV = V: each program holds a head's whole row and normalises it without the second ticket."""
    monkeypatch.setattr(tg, "FUSED_TILES", ((1 << 30, VD, 2),))
    _check_fused(tg, seed, scenario, dtype, monkeypatch)


@pytest.mark.parametrize("scenario", ["decode", "verify"])
def test_fused_step_with_a_register_cap(tg, seed, scenario, monkeypatch):
    """A tile row's fourth field (the launch's register cap) reaches the launch and changes nothing computed."""
    monkeypatch.setattr(tg, "FUSED_TILES", ((2, 16, 2, 0), (1 << 30, 16, 2, 96)))
    _check_fused(tg, seed, scenario, torch.bfloat16, monkeypatch)


def test_fused_tiles_from_the_environment(monkeypatch):
    """HINFER_GDN_FUSED_TILES-style rows: "inf" for the last bound, an optional register cap, a clear error."""
    from hinfer.ops.triton.gdn import pick_tile, tiles_from_env

    default = ((2, 16, 1),)
    monkeypatch.delenv("HINFER_TEST_TILES", raising=False)
    assert tiles_from_env("HINFER_TEST_TILES", default) == default
    monkeypatch.setenv("HINFER_TEST_TILES", "2:16:1, inf:32:2:168")
    tiles = tiles_from_env("HINFER_TEST_TILES", default)
    assert tiles == ((2, 16, 1), (1 << 30, 32, 2, 168))
    assert pick_tile(tiles, 2) == (16, 1) and pick_tile(tiles, 8) == (32, 2, 168)
    monkeypatch.setenv("HINFER_TEST_TILES", "inf:32")
    with pytest.raises(ValueError, match="most:BV:warps"):
        tiles_from_env("HINFER_TEST_TILES", default)


def _check_fused(tg, seed, scenario, dtype, monkeypatch):
    lens, verify = SCENARIOS[scenario]
    batch = _batch(lens, verify)
    qkv, a, b, z, a_log, dt_bias, conv_w, norm_w, conv_state, ssm_state = _inputs(sum(lens), dtype)
    heads = (HK, KD, HV, VD)
    results = {}
    for name in ("fused", "separate", "reference"):
        cs, ss = conv_state.clone(), ssm_state.clone()
        targets = step_targets(batch)
        cs[targets], ss[targets] = float("nan"), float("nan")
        if name == "reference":
            o = ref.gated_delta_net_ref(qkv, a, b, z, a_log, dt_bias, conv_w, norm_w, EPS, cs, ss, batch, heads)
        else:
            monkeypatch.setattr(tg, "FUSED_MAX_TOKENS", 16 if name == "fused" else 0)  # verify rows too
            o = tg.gated_delta_net(qkv, a, b, z, a_log, dt_bias, conv_w, norm_w, EPS, cs, ss, batch, heads)
        results[name] = (o, cs, ss)
    msg = f"seed {seed} lens {lens}"
    o_f, cs_f, ss_f = results["fused"]
    o_s, cs_s, ss_s = results["separate"]
    o_r, cs_r, ss_r = results["reference"]
    assert o_f.dtype == dtype and not o_f.isnan().any(), msg
    assert torch.equal(cs_f, cs_r) and torch.equal(cs_f, cs_s), f"{msg}: conv state"
    tol = dict(rtol=2**-7, atol=2e-3) if dtype == torch.bfloat16 else dict(rtol=1e-4, atol=1e-5)
    torch.testing.assert_close(o_f.float(), o_r.float(), **tol, msg=lambda m: f"{msg}: {m}")
    torch.testing.assert_close(o_f.float(), o_s.float(), **tol, msg=lambda m: f"{msg}: vs separate: {m}")
    torch.testing.assert_close(ss_f, ss_r, rtol=1e-4, atol=1e-5, msg=lambda m: f"{msg}: state: {m}")


def test_arrival_counters_are_left_zeroed(tg, seed):
    """Every key head's counter is back at zero after a step (the next step, or a graph replay, starts clean)."""
    from hinfer.ops.triton.gdn_decode import arrival_counters

    batch = _batch([1, 2, 1])
    qkv, a, b, z, a_log, dt_bias, conv_w, norm_w, conv_state, ssm_state = _inputs(4, torch.float32)
    tg.gated_delta_net(qkv, a, b, z, a_log, dt_bias, conv_w, norm_w, EPS, conv_state, ssm_state, batch,
                       (HK, KD, HV, VD))
    assert not arrival_counters(torch.device("cpu")).any()


def test_long_sequences_take_the_separate_kernels(tg, seed, monkeypatch):
    """A prefill row (past the recurrent kernel's length) sends the whole batch down the separate kernels."""
    from hinfer.ops.triton import gdn_decode

    calls = []
    monkeypatch.setattr(tg, "fused_decode_launch", lambda *a: calls.append(1))
    batch = _batch([1, 12])
    qkv, a, b, z, a_log, dt_bias, conv_w, norm_w, conv_state, ssm_state = _inputs(13, torch.float32)
    o = tg.gated_delta_net(qkv, a, b, z, a_log, dt_bias, conv_w, norm_w, EPS, conv_state, ssm_state, batch,
                           (HK, KD, HV, VD))
    assert not calls and not o.isnan().any()
    assert gdn_decode.fused_decode_launch is not None
