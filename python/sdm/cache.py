"""The inference state of one SparseDeltaMemory layer (SPEC E.2, E.3)."""

from __future__ import annotations

from torch import Tensor


class SparseDeltaMemoryCache:
    """The bank ``[B * H * slots_per_head, hd]`` and the number of tokens it has consumed.

    Built by :meth:`sdm.SparseDeltaMemory.create_kv_cache`; the layer updates ``bank`` in place
    and advances ``cache_len`` on every forward that is given the cache.
    """

    def __init__(self, bank: Tensor, cache_len: int = 0) -> None:
        self.bank = bank
        self.cache_len = cache_len

    def reset(self) -> None:
        """Zeroes the bank (to zeros, not to the learned memory) and the token count."""
        self.bank.zero_()
        self.cache_len = 0

    def update_(self, bank: Tensor, num_tokens: int) -> None:
        """Stores ``bank`` (detached) and adds ``num_tokens`` to the count."""
        self.bank = bank.detach()
        self.cache_len += num_tokens
