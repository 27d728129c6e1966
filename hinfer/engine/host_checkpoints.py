"""Host-RAM spill of GDN checkpoints: the second tier of the prefix cache's checkpoint pool.

A device checkpoint slot costs as much as thousands of KV tokens (147 MiB on the 27B), so the device keeps only a
few. When one is evicted from the device (LRU), its conv + recurrent state of every GDN layer is copied into a row
of a host buffer, named by the same page-chain hash; a later request whose longest cached prefix ends there gets
the row copied straight into its own GDN slot. The buffer is allocated once (`--host-cache-gib`), pinned on CUDA
so both copies are asynchronous on the engine's stream: the spill is queued before the save that overwrites the
device slot, the restore before the prefill that reads the lane's slot, so stream order alone keeps them right
(the CPU never touches the rows). Rows are LRU-evicted with the same bookkeeping as the device slots.
"""

from __future__ import annotations

from hinfer.engine.gdn_checkpoints import CheckpointPool
from hinfer.engine.host_memory import host_tensors
from hinfer.engine.state import ModelState


class HostCheckpoints:
    def __init__(self, state: ModelState, rows: int) -> None:
        self.state = state
        conv, ssm = state.conv_state, state.ssm_state
        self.pinned = conv.device.type == "cuda"  # pinned host memory: the copies can be asynchronous
        # [row, gdn layer, ...]: one row is contiguous, so each copy is a single transfer
        self.conv, self.ssm = host_tensors(self, [((rows, conv.shape[0], *conv.shape[2:]), conv.dtype),
                                                  ((rows, ssm.shape[0], *ssm.shape[2:]), ssm.dtype)], self.pinned)
        self.index = CheckpointPool(range(rows))  # names, LRU, pins of the rows
        self.spills = 0
        self.restores = 0

    @property
    def capacity(self) -> int:
        return self.index.capacity

    @property
    def evictions(self) -> int:
        return self.index.evictions

    @property
    def nbytes(self) -> int:
        return self.conv.nbytes + self.ssm.nbytes

    def __len__(self) -> int:
        return len(self.index)

    def __contains__(self, name: bytes) -> bool:
        return name in self.index

    def spill(self, name: bytes, slot: int) -> None:
        """Copy device slot `slot` (the checkpoint `name`, about to be overwritten) into a host row."""
        row = self.index.reserve(name)
        if row is None:  # already on the host (saved, restored and saved again), or every row pinned
            return
        self.conv[row].copy_(self.state.conv_state[:, slot], non_blocking=self.pinned)
        self.ssm[row].copy_(self.state.ssm_state[:, slot], non_blocking=self.pinned)
        self.spills += 1

    def restore(self, names: list[bytes], slots: list[int]) -> None:
        """Copy the host rows of `names` (pinned by the caller) into the lanes' GDN slots `slots`."""
        for name, slot in zip(names, slots):
            row = self.index.slot_of(name)
            self.state.conv_state[:, slot].copy_(self.conv[row], non_blocking=self.pinned)
            self.state.ssm_state[:, slot].copy_(self.ssm[row], non_blocking=self.pinned)
            self.restores += 1

    def pin(self, name: bytes) -> None:
        self.index.pin(name)

    def unpin(self, name: bytes) -> None:
        self.index.unpin(name)

    def discard(self, name: bytes) -> None:
        self.index.discard(name)

    def clear(self) -> None:
        self.index.clear()

    def check(self) -> None:
        self.index.check()

