"""Host buffers for the prefix cache's host tier: plain memory, page-locked with cudaHostRegister on CUDA.

Page-locked memory lets device <-> host copies run asynchronously on the engine's stream. torch's own pinned
allocator (`pin_memory=True`) rounds every block up to a power of two, which would lock 8 GiB for a 4.1 GiB
buffer; registering exactly the bytes of a plain tensor does not.
"""

from __future__ import annotations

import weakref

import torch


def host_tensors(owner: object, specs: list[tuple[tuple[int, ...], torch.dtype]], pinned: bool) -> list[torch.Tensor]:
    """One host tensor per (shape, dtype); page-locked when `pinned` until `owner` is collected."""
    out = [torch.empty(shape, dtype=dtype) for shape, dtype in specs]
    if pinned:
        from torch.cuda._pin_memory_utils import pin_memory

        for t in out:
            if t.numel():
                pin_memory(t.data_ptr(), t.nbytes)
        weakref.finalize(owner, _unpin, *out)  # holds the tensors until they are unregistered
    return out


def _unpin(*tensors: torch.Tensor) -> None:
    from torch.cuda._pin_memory_utils import unpin_memory

    for t in tensors:
        if t.numel():
            unpin_memory(t.data_ptr())
