"""Multi-query associative recall (MQAR): a seeded generator of training batches.

A sequence holds ``num_pairs`` key-value pairs, then queries::

    k1 v1 k2 v2 ... kN vN  q ? q ? ...      (q: a key from the context, ?: the query marker)

At each marker the model must predict the value paired with the key just before it; only
those positions carry a target (elsewhere the target is -100, ignored by cross_entropy).
Keys are distinct within a sequence and drawn from ``num_keys`` key tokens; values are
drawn from ``num_values`` value tokens. Token ids: keys [0, num_keys), values
[num_keys, num_keys + num_values), the marker num_keys + num_values.
"""

from __future__ import annotations

from dataclasses import dataclass

import torch

IGNORE = -100


@dataclass(frozen=True)
class RecallTask:
    num_pairs: int = 32
    num_queries: int = 32
    num_keys: int = 64
    num_values: int = 64

    def __post_init__(self) -> None:
        if not 1 <= self.num_pairs <= self.num_keys:
            raise ValueError(f"num_pairs must be in 1..num_keys ({self.num_keys}), got {self.num_pairs}")
        if self.num_queries < 1:
            raise ValueError(f"num_queries must be >= 1, got {self.num_queries}")

    @property
    def vocab_size(self) -> int:
        return self.num_keys + self.num_values + 1

    @property
    def marker(self) -> int:
        return self.num_keys + self.num_values

    @property
    def seq_len(self) -> int:
        return 2 * self.num_pairs + 2 * self.num_queries

    def batch(self, batch_size: int, generator: torch.Generator) -> tuple[torch.Tensor, torch.Tensor]:
        """Returns (tokens [B, seq_len], targets [B, seq_len]) as int64 on the CPU."""
        B, N, Q = batch_size, self.num_pairs, self.num_queries
        keys = torch.rand(B, self.num_keys, generator=generator).argsort(dim=1)[:, :N]
        values = torch.randint(self.num_keys, self.num_keys + self.num_values, (B, N), generator=generator)
        asked = torch.randint(0, N, (B, Q), generator=generator)
        context = torch.stack([keys, values], dim=-1).reshape(B, 2 * N)
        queries = torch.stack([keys.gather(1, asked), torch.full((B, Q), self.marker)], dim=-1).reshape(B, 2 * Q)
        tokens = torch.cat([context, queries], dim=1)
        targets = torch.full_like(tokens, IGNORE)
        targets[:, 2 * N + 1::2] = values.gather(1, asked)
        return tokens, targets
