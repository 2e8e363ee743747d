"""The state of one SparseDeltaMemory layer between calls: its bank and token count.

``Cache`` is the abstract base of a layer's state (sparse-delta-memory 2.0.0's ``cache.Cache``:
a model's full cache is a ``list[Cache]``); ``SDMLayerState`` is the one sdm's layer uses.
``l2_normalize`` is 2.0.0's helper of the same module."""

from __future__ import annotations

from abc import ABC, abstractmethod

import torch
from torch import Tensor


def l2_normalize(x: Tensor, dim: int = -1, eps: float = 1e-12) -> Tensor:
    """x / (||x||_2 + eps) along ``dim``."""
    return x / (torch.linalg.vector_norm(x, dim=dim, keepdim=True) + eps)


class Cache(ABC):
    """The state of one layer between calls. Subclasses define indexing (``cache[0]``), the
    token count ``cache_len``, ``update_`` (in place, returns the cache) and ``reset``."""

    @abstractmethod
    def __getitem__(self, index: int) -> Tensor | int:
        ...

    @property
    @abstractmethod
    def cache_len(self) -> int:
        ...

    @abstractmethod
    def update_(self, *args, **kwargs) -> Cache:
        ...

    @abstractmethod
    def reset(self) -> None:
        ...


class SDMLayerState(Cache):
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
