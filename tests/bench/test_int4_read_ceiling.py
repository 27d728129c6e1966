"""bench/int4_read_ceiling.py's read probe in Triton's interpreter: each program folds exactly the words its
(stripe block, K split) covers, as the torch twin does, uneven splits included."""

from __future__ import annotations

import functools
import sys
from pathlib import Path

import pytest
import torch

from hinfer.fixtures import fixed_test_seed

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))

from bench.int4_read_ceiling import probe_reference, read_probe  # noqa: E402


@pytest.mark.parametrize("block_n,split_k", [(32, 1), (64, 2), (32, 3)])
def test_read_probe_folds_each_programs_words(interpreter, block_n, split_k):
    g = torch.Generator().manual_seed(fixed_test_seed())
    words = torch.randint(-(2**31), 2**31 - 1, (8, 5 * 256), generator=g, dtype=torch.int64).to(torch.int32)
    got = read_probe(words, block_n, split_k, num_warps=1, num_stages=1)
    want = probe_reference(words, block_n, split_k)
    assert got.shape == (8 // (block_n // 16), split_k) and torch.equal(got, want)
    assert (want != 0).all()  # random words: a program that read nothing would show


def test_tile_major_probe_reads_each_word_once(interpreter):
    """The tile-major placement covers the same words, each program its own contiguous tiles: the xor of every
    program's result is the xor of all words, as the row-major probe's is."""
    g = torch.Generator().manual_seed(fixed_test_seed())
    words = torch.randint(-(2**31), 2**31 - 1, (8, 4 * 256), generator=g, dtype=torch.int64).to(torch.int32)
    rows = read_probe(words, 32, 2, num_warps=1, num_stages=1)
    tiles = read_probe(words, 32, 2, num_warps=1, num_stages=1, tile_major=True)
    def fold(t: torch.Tensor) -> int:
        return functools.reduce(lambda a, b: a ^ b, t.flatten().tolist())

    assert fold(rows) == fold(tiles) and not torch.equal(rows, tiles)
