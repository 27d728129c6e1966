"""The drafter's chain moves its steps' rows on the device (hinfer/ops/row_shift.py): the kernel compiled against
its torch body."""

from __future__ import annotations

import pytest
import torch

from hinfer.fixtures import fixed_test_seed

pytestmark = [pytest.mark.gpu, pytest.mark.skipif(not torch.cuda.is_available(), reason="needs CUDA")]


def test_shift_rows_kernel_matches_its_torch_body() -> None:
    """At up to 64 lanes and a 256K-token page table (exact integers)."""
    from hinfer.ops.row_shift import shift_rows_ref
    from hinfer.ops.triton.row_shift import shift_rows

    g = torch.Generator().manual_seed(fixed_test_seed())
    for m, width, ps in ((1, 16, 16), (8, 4096, 64), (64, 300, 16)):
        table = (torch.randperm(m * width, generator=g).view(m, width).int() + 1).cuda()
        lens = torch.randint(0, width * ps - 8, (m,), generator=g).int().cuda()
        shift = torch.randint(0, 8, (m,), generator=g).cuda()
        pos, slot = lens.long() + 1, torch.zeros(m, dtype=torch.int64, device="cuda")
        want = [t.clone() for t in (pos, lens, slot, table)]
        shift_rows_ref(*want, shift, ps)
        got = [pos, lens, slot, table]
        shift_rows(*got, shift, ps)
        assert all(torch.equal(a, b) for a, b in zip(got, want)), (m, width, ps)
