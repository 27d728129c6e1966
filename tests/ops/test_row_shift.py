"""shift_rows' Triton kernel against its torch body (exact integers), under the interpreter or compiled."""

from __future__ import annotations

import pytest
import torch

from hinfer.fixtures import fixed_test_seed
from hinfer.ops.row_shift import shift_rows_ref

pytest.importorskip("triton")


def _case(g: torch.Generator, m: int, width: int, ps: int, rows: int):
    """Staged fields of `rows` lanes (m real), every real lane's moved row inside its pages."""
    table = torch.randperm(rows * width, generator=g)[: rows * width].view(rows, width).int() + 1
    lens = torch.randint(0, width * ps - 8, (rows,), generator=g).int()
    shift = torch.randint(0, 8, (m,), generator=g)
    pos = lens.long() + torch.randint(0, 3, (rows,), generator=g)  # a text-after-image offset rides along
    slot = torch.randint(0, 1 << 20, (rows,), generator=g)
    return pos, lens, slot, table, shift


def test_shift_rows_kernel_matches_reference(interpreter):
    from hinfer.ops.triton.row_shift import shift_rows

    seed = fixed_test_seed()
    print(f"test seed {seed}")
    g = torch.Generator().manual_seed(seed)
    for m, width, ps, rows in ((1, 4, 16, 1), (3, 9, 16, 4), (8, 33, 64, 8), (20, 5, 16, 24)):
        fields = _case(g, m, width, ps, rows)
        want = [f.clone() for f in fields]
        shift_rows_ref(*want[:4], want[4], ps)
        got = list(fields)
        shift_rows(*got[:4], got[4], ps)
        for name, a, b in zip(("positions", "cached_lens", "slot_mapping", "page_table"), got, want):
            assert torch.equal(a, b), (name, m, width, ps)
        assert not torch.equal(want[2][:m], fields[2][:m].clone().zero_())  # the slots were rewritten


def test_shift_rows_ref_moves_each_lane_to_its_page():
    pos = torch.tensor([5, 40], dtype=torch.int64)
    lens = torch.tensor([5, 30], dtype=torch.int32)
    slot = torch.zeros(2, dtype=torch.int64)
    table = torch.tensor([[7, 9, 11], [2, 4, 6]], dtype=torch.int32)
    shift_rows_ref(pos, lens, slot, table, torch.tensor([12, 3]), 16)
    assert pos.tolist() == [17, 43] and lens.tolist() == [17, 33]
    assert slot.tolist() == [9 * 16 + 1, 6 * 16 + 1]  # lane 0 crossed into its second page, lane 1 its third
