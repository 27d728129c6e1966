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


# Unpins that came due while a CUDA graph was being captured: cudaHostUnregister is not allowed then (it would
# invalidate the capture), and a collected owner can run its finalizer at any allocation, capture included.
_deferred: list[tuple[torch.Tensor, ...]] = []


def _capturing() -> bool:
    return torch.cuda.is_available() and torch.cuda.is_current_stream_capturing()


def _unpin(*tensors: torch.Tensor) -> None:
    if _capturing():
        _deferred.append(tensors)
        return
    from torch.cuda._pin_memory_utils import unpin_memory

    pending = [*_deferred, tensors]
    _deferred.clear()
    for group in pending:
        for t in group:
            if t.numel():
                unpin_memory(t.data_ptr())


def release_deferred() -> None:
    """Unpin what came due during a capture (called once a capture ends)."""
    if _deferred and not _capturing():
        _unpin()
