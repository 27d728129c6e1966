"""Host-tier unpinning waits out a CUDA graph capture (cudaHostUnregister would invalidate it)."""

from __future__ import annotations

import torch

from hinfer.engine import host_memory


def test_unpin_during_capture_is_deferred_then_released(monkeypatch):
    import torch.cuda._pin_memory_utils as pin_utils

    unpinned: list[int] = []
    monkeypatch.setattr(pin_utils, "unpin_memory", unpinned.append)
    a, b, empty = torch.ones(4), torch.ones(2), torch.empty(0)
    monkeypatch.setattr(host_memory, "_capturing", lambda: True)
    host_memory._unpin(a, empty)
    host_memory.release_deferred()  # still capturing: nothing happens
    assert unpinned == [] and len(host_memory._deferred) == 1
    monkeypatch.setattr(host_memory, "_capturing", lambda: False)
    host_memory._unpin(b)  # the next unpin outside a capture takes the deferred ones along
    assert unpinned == [a.data_ptr(), b.data_ptr()] and host_memory._deferred == []
    host_memory._unpin(a)
    monkeypatch.setattr(host_memory, "_capturing", lambda: True)
    host_memory._unpin(b)
    monkeypatch.setattr(host_memory, "_capturing", lambda: False)
    host_memory.release_deferred()
    assert unpinned[-2:] == [a.data_ptr(), b.data_ptr()] and host_memory._deferred == []
