"""Gated DeltaNet with a state save inside a chunk (SeqChunk.gdn_save, a prefix-cache checkpoint that no longer
ends the chunk), beside decode and verify rows: the output and every state but the saved ones equal the run
without the save, the save slot holds the state
after the chunk's first j tokens (as running those j tokens alone leaves it), and no other slot changes. Within
fp32 rounding (rtol 1e-5, atol 1e-6; torch sums the rows of another batch in another order, the chunked rule's
chunks fall elsewhere): the reference twin, and the Triton kernels under the CPU interpreter at tiny shapes."""

from __future__ import annotations

import random

import pytest
import torch

from hinfer.batch import SeqChunk, build_forward_batch
from hinfer.ops import gdn as ops

N_SLOTS = 24
HK, KD, HV, VD = 2, 16, 4, 16
HEADS = (HK, KD, HV, VD)
EPS = 1e-6
LENS = [1, 11, 6, 9, 3]  # decode, a chunk saved at SAVES[1], a plain chunk, one saved at SAVES[3], a verify row
SAVES = {1: 4, 3: 8}
VERIFY = 4  # its state after each token goes to a step slot of its own


def _inputs(t: int):
    c = 2 * HK * KD + HV * VD
    qkv, z = torch.randn(t, c), torch.randn(t, HV, VD)
    b, a = torch.randn(t, HV) * 3, torch.randn(t, HV)
    weights = (torch.rand(HV) * 2.5, torch.randn(HV), torch.randn(c, 4) * 0.5, torch.rand(VD) + 0.5)
    states = (torch.randn(N_SLOTS, c, 3), torch.randn(N_SLOTS, HV, KD, VD) * 0.5)
    return (qkv, a, b, z), weights, states


def _chunks(slots: list[int], save_slots: dict[int, int], step_slots: list[int]):
    return [SeqChunk(list(range(n)), 5, [0], slots[i], gdn_step_slots=step_slots if i == VERIFY else None,
                     gdn_save=(SAVES[i], save_slots[i]) if i in save_slots else None)
            for i, n in enumerate(LENS)]  # fmt: skip


def _run(rows, weights, states, chunks):
    qkv, a, b, z = rows
    conv, ssm = states[0].clone(), states[1].clone()
    batch = build_forward_batch(chunks, 4096, "cpu")
    o = ops.gated_delta_net(qkv, a, b, z, *weights[:2], weights[2], weights[3], EPS, conv, ssm, batch, HEADS)
    return o, conv, ssm


def _near(x: torch.Tensor, y: torch.Tensor) -> bool:
    return torch.allclose(x, y, rtol=1e-5, atol=1e-6)


def _check(rows, weights, states) -> None:
    pool = random.sample(range(N_SLOTS), N_SLOTS)
    slots = pool[: len(LENS)]
    save_slots = {i: pool[len(LENS) + k] for k, i in enumerate(SAVES)}
    step_slots = pool[len(LENS) + len(SAVES) :][: LENS[VERIFY]]
    o, conv, ssm = _run(rows, weights, states, _chunks(slots, save_slots, step_slots))
    o_ref, conv_ref, ssm_ref = _run(rows, weights, states, _chunks(slots, {}, step_slots))
    assert _near(o, o_ref), "the output changes with the save"
    untouched = [s for s in range(N_SLOTS) if s not in save_slots.values()]
    assert _near(conv[untouched], conv_ref[untouched]) and _near(ssm[untouched], ssm_ref[untouched])
    assert not torch.equal(ssm[step_slots], states[1][step_slots]), "the verify row writes its step slots"
    starts = [sum(LENS[:i]) for i in range(len(LENS))]
    for i, j in SAVES.items():  # the first j tokens of sequence i alone, from the same state
        part = tuple(t[starts[i] : starts[i] + j] for t in rows)
        _, conv_j, ssm_j = _run(part, weights, states, [SeqChunk(list(range(j)), 5, [0], slots[i])])
        assert _near(conv[save_slots[i]], conv_j[slots[i]]), f"conv state saved at {j} of sequence {i}"
        assert _near(ssm[save_slots[i]], ssm_j[slots[i]]), f"recurrent state saved at {j} of sequence {i}"


def test_reference_saves_inside_a_chunk(seed, ops_backend):
    ops_backend("reference")
    _check(*_inputs(sum(LENS)))


def test_triton_saves_inside_a_chunk(seed, ops_backend, interpreter, monkeypatch):
    from hinfer.ops.triton import gdn

    ops_backend("triton")
    monkeypatch.setattr(gdn, "CONV", {"small_q": 4, "BT": 8, "BC": 16, "num_warps": 4})
    _check(*_inputs(sum(LENS)))


def test_a_save_must_fall_inside_its_chunk():
    for j in (0, 3):
        with pytest.raises(ValueError, match="inside the chunk"):
            build_forward_batch([SeqChunk([1, 2, 3], 0, [0], 1, gdn_save=(j, 2))], 64, "cpu")
    with pytest.raises(ValueError, match="step slots"):
        build_forward_batch([SeqChunk([1, 2], 0, [0], 1, gdn_step_slots=[3, 4], gdn_save=(1, 2))], 64, "cpu")
