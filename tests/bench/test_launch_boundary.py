"""bench/launch_boundary.py's chains in Triton's interpreter: one launch a GEMV and the persistent walk (one
program, so that its grid barrier opens in the interpreter's serial order) both give every GEMV's output of the
torch chain; a walk of several programs without the barrier covers every tile once."""

from __future__ import annotations

import sys
from pathlib import Path

import pytest
import torch

from hinfer.fixtures import fixed_test_seed

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))

from bench.launch_boundary import chain_launches, chain_persistent, chain_reference  # noqa: E402


def _chain(phases: int, d: int) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    g = torch.Generator().manual_seed(fixed_test_seed())
    ws = (torch.randn(phases, d, d, generator=g) * d**-0.5).bfloat16()
    buf = torch.zeros(phases + 1, d, dtype=torch.bfloat16)
    buf[0] = torch.randn(d, generator=g).bfloat16()
    return ws, buf, chain_reference(ws, buf[0])


def _close(got: torch.Tensor, want: torch.Tensor) -> None:
    # fp32 sums of bf16 products in another order, each output rounded to bf16: relative 1e-2 per GEMV at most
    err = (got.float() - want.float()).norm(dim=1) / want.float().norm(dim=1)
    assert (err < 1e-2).all(), err
    assert (got[1:] != 0).any(dim=1).all()  # every GEMV wrote


def test_one_launch_a_gemv(interpreter):
    ws, buf, want = _chain(3, 32)
    chain_launches(ws, buf, bn=8, bk=16, warps=1, pdl=False)
    _close(buf, want)


@pytest.mark.parametrize("prefetch,atomic_poll", [(False, False), (True, False), (False, True)])
def test_persistent_walk_with_its_barrier(interpreter, prefetch, atomic_poll):
    ws, buf, want = _chain(3, 32)
    cnt = torch.zeros(3, dtype=torch.int32)
    chain_persistent(ws, buf, cnt, programs=1, bn=8, bk=16, warps=1, prefetch=prefetch, atomic_poll=atomic_poll)
    _close(buf, want)
    assert cnt.tolist() == [1, 1, 1]  # each GEMV's count: the one program


def test_walk_without_barrier_covers_every_tile(interpreter):
    """Programs run one after another in the interpreter, so without the barrier each GEMV reads its input
    before the later programs wrote it: only the first GEMV is right; each tile is written once all the same."""
    ws, buf, want = _chain(2, 32)
    cnt = torch.zeros(2, dtype=torch.int32)
    chain_persistent(ws, buf, cnt, programs=3, bn=8, bk=16, warps=1, barrier=False)
    _close(buf[:2], want[:2])
    assert (buf[2] != 0).all() and cnt.tolist() == [0, 0]
