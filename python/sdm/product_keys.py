"""Product-key addressing (SPEC F.4, Z.8): which K bank slots a token writes or reads.

A head's raw scores ``[..., 2n]`` hold two factors of n keys each (slot = i1 * n + i2, n*n
slots). Selection, all in float32 (float64 stays float64):
  1. per factor, the k1 = min(K, n) best keys: descending score, exact ties to the smaller
     key index;
  2. candidates s1[a] + s2[b] over the k1 x k1 grid; the K' = min(K, k1^2) best: descending
     sum, exact ties to the smaller slot index;
  3. the K' selected slots in ascending slot order, with their scores.
Every ranking is a stable descending sort, so equal scores keep their ascending index
order: the rule is deterministic by construction. Listing each factor's k1 keys in
ascending key order makes grid position a*k1 + b ascend with the slot i1[a]*n + i2[b], so
the same stable sort applies to the grid. Gradients reach the raw scores through the
gathers (the selection itself is piecewise constant).
"""

from __future__ import annotations

import torch
from torch import Tensor


def _best_ascending(scores: Tensor, k: int) -> Tensor:
    """Positions of the k largest entries along the last dim (ties to the smaller position),
    listed in ascending position order."""
    ranked = torch.sort(scores.detach(), dim=-1, descending=True, stable=True).indices[..., :k]
    return torch.sort(ranked, dim=-1).values


def product_key_topk(raw: Tensor, num_keys: int, k: int) -> tuple[Tensor, Tensor]:
    """raw ``[..., 2 * num_keys]`` -> ``(scores [..., K'], slots [..., K'])``: the selected slots
    (int64, ascending, distinct, in [0, num_keys^2)) and their candidate scores."""
    n = num_keys
    if raw.shape[-1] != 2 * n:
        raise ValueError(f"product_key_topk: raw scores must have 2 * num_keys = {2 * n} channels, "
                         f"got {raw.shape[-1]}")
    scores = raw if raw.dtype == torch.float64 else raw.float()
    f1, f2 = scores[..., :n], scores[..., n:]
    k1 = min(k, n)
    i1 = _best_ascending(f1, k1)
    i2 = _best_ascending(f2, k1)
    grid = (f1.gather(-1, i1).unsqueeze(-1) + f2.gather(-1, i2).unsqueeze(-2)).flatten(-2)
    position = _best_ascending(grid, min(k, k1 * k1))
    slots = i1.gather(-1, position // k1) * n + i2.gather(-1, position % k1)
    return grid.gather(-1, position), slots
