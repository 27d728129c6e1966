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
# decode, a chunk saved at 4, a plain chunk, one saved at 8, a verify row (its state after each token goes to a
# step slot of its own); the passes' rows are gathered. Alone: one chunk saved at 6, its passes row slices.
CASES = {"mixed": ([1, 11, 6, 9, 3], {1: 4, 3: 8}, 4), "alone": ([10], {0: 6}, None)}


def _inputs(t: int):
    c = 2 * HK * KD + HV * VD
    qkv, z = torch.randn(t, c), torch.randn(t, HV, VD)
    b, a = torch.randn(t, HV) * 3, torch.randn(t, HV)
    weights = (torch.rand(HV) * 2.5, torch.randn(HV), torch.randn(c, 4) * 0.5, torch.rand(VD) + 0.5)
    states = (torch.randn(N_SLOTS, c, 3), torch.randn(N_SLOTS, HV, KD, VD) * 0.5)
    return (qkv, a, b, z), weights, states


def _chunks(case: str, slots: list[int], save_slots: dict[int, int], step_slots: list[int]):
    lens, saves, verify = CASES[case]
    return [SeqChunk(list(range(n)), 5, [0], slots[i], gdn_step_slots=step_slots if i == verify else None,
                     gdn_save=(saves[i], save_slots[i]) if i in save_slots else None)
            for i, n in enumerate(lens)]  # fmt: skip


def _run(rows, weights, states, chunks):
    qkv, a, b, z = rows
    conv, ssm = states[0].clone(), states[1].clone()
    batch = build_forward_batch(chunks, 4096, "cpu")
    o = ops.gated_delta_net(qkv, a, b, z, *weights[:2], weights[2], weights[3], EPS, conv, ssm, batch, HEADS)
    return o, conv, ssm


def _near(x: torch.Tensor, y: torch.Tensor) -> bool:
    return torch.allclose(x, y, rtol=1e-5, atol=1e-6)


def _check(case: str) -> None:
    lens, saves, verify = CASES[case]
    rows, weights, states = _inputs(sum(lens))
    pool = random.sample(range(N_SLOTS), N_SLOTS)
    slots = pool[: len(lens)]
    save_slots = {i: pool[len(lens) + k] for k, i in enumerate(saves)}
    step_slots = pool[len(lens) + len(saves) :][: lens[verify]] if verify is not None else []
    split = build_forward_batch(_chunks(case, slots, save_slots, step_slots), 4096, "cpu").gdn_split
    assert isinstance(split.first_rows, slice) == isinstance(split.second_rows, slice) == (case == "alone")
    o, conv, ssm = _run(rows, weights, states, _chunks(case, slots, save_slots, step_slots))
    o_ref, conv_ref, ssm_ref = _run(rows, weights, states, _chunks(case, slots, {}, step_slots))
    assert _near(o, o_ref), "the output changes with the save"
    untouched = [s for s in range(N_SLOTS) if s not in save_slots.values()]
    assert _near(conv[untouched], conv_ref[untouched]) and _near(ssm[untouched], ssm_ref[untouched])
    if step_slots:
        assert not torch.equal(ssm[step_slots], states[1][step_slots]), "the verify row writes its step slots"
    starts = [sum(lens[:i]) for i in range(len(lens))]
    for i, j in saves.items():  # the first j tokens of sequence i alone, from the same state
        part = tuple(t[starts[i] : starts[i] + j] for t in rows)
        _, conv_j, ssm_j = _run(part, weights, states, [SeqChunk(list(range(j)), 5, [0], slots[i])])
        assert _near(conv[save_slots[i]], conv_j[slots[i]]), f"conv state saved at {j} of sequence {i}"
        assert _near(ssm[save_slots[i]], ssm_j[slots[i]]), f"recurrent state saved at {j} of sequence {i}"


@pytest.mark.parametrize("case", list(CASES))
def test_reference_saves_inside_a_chunk(seed, ops_backend, case):
    ops_backend("reference")
    _check(case)


@pytest.mark.parametrize("case", list(CASES))
def test_triton_saves_inside_a_chunk(seed, ops_backend, interpreter, monkeypatch, case):
    from hinfer.ops.triton import gdn

    ops_backend("triton")
    monkeypatch.setattr(gdn, "CONV", {"small_q": 4, "BT": 8, "BC": 16, "num_warps": 4})
    _check(case)


def test_a_save_must_fall_inside_its_chunk():
    for j in (0, 3):
        with pytest.raises(ValueError, match="inside the chunk"):
            build_forward_batch([SeqChunk([1, 2, 3], 0, [0], 1, gdn_save=(j, 2))], 64, "cpu")
    with pytest.raises(ValueError, match="step slots"):
        build_forward_batch([SeqChunk([1, 2], 0, [0], 1, gdn_step_slots=[3, 4], gdn_save=(1, 2))], 64, "cpu")
