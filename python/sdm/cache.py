"""The state of one SparseDeltaMemory layer between calls: its bank and token count."""

from __future__ import annotations

from torch import Tensor


class SDMLayerState:
    """The bank ``[B * num_heads * slots_per_head, head_dim]`` and the number of tokens consumed.

    Returned by every :meth:`sdm.SparseDeltaMemory.forward` (the state after the call) and by
    :meth:`sdm.SparseDeltaMemory.create_kv_cache`; passed back as ``cache=`` it is the bank the
    next call starts from, and that call updates it (``memory`` and ``cache_len``).
    ``state[0]`` is ``memory`` (sparse-delta-memory 2.0.0's ``SDMLayerState`` interface);
    ``bank`` is another name of ``memory``.
    """

    def __init__(self, memory: Tensor, seq_len: int = 0) -> None:
        self.memory = memory
        self._cache_len = seq_len

    @property
    def cache_len(self) -> int:
        return self._cache_len

    @property
    def bank(self) -> Tensor:
        return self.memory

    def __getitem__(self, index: int) -> Tensor:
        if index == 0:
            return self.memory
        raise KeyError(index)

    def __len__(self) -> int:
        return 1

    def reset(self) -> None:
        """Zeroes the bank (to zeros, not to the learned memory) and the token count."""
        self.memory.zero_()
        self._cache_len = 0

    def update_(self, memory: Tensor, seq_len: int = 1) -> SDMLayerState:
        """Holds ``memory`` (detached) as the bank and adds ``seq_len`` to the count."""
        self.memory = memory.detach()
        self._cache_len += seq_len
        return self


SparseDeltaMemoryCache = SDMLayerState
