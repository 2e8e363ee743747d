"""An independent, brute-force statement of the product-key top-k rule (docs/spec.md,
"Product-key top-k"), written for clarity on small rows: every candidate of every stage is
listed and ranked with Python's sort. The tests compare torch.ops.sdm.product_key_topk with it."""

from __future__ import annotations

import math

import numpy as np
import torch


def score_order(x: float) -> tuple[float, int]:
    """Scores compare by value, -0 below +0, NaN as -inf."""
    if math.isnan(x):
        return (-math.inf, 0)
    return (x, 0 if math.copysign(1.0, x) < 0 else 1)


def _add(a: float, b: float, dtype: torch.dtype) -> float:
    if dtype == torch.float64:
        return a + b
    with np.errstate(invalid="ignore"):
        return float(np.float32(a) + np.float32(b))


def _round(x: float, dtype: torch.dtype) -> float:
    return torch.tensor(x, dtype=torch.float64 if dtype == torch.float64 else torch.float32).to(dtype).item()


def reference_row(row: torch.Tensor, dims: list[int], k: int) -> tuple[list[float], list[int]]:
    """(values, slots) of one row: slots ascending, values as float (already in row's dtype)."""
    dtype = row.dtype
    values = row.double().tolist()  # exact: every input dtype widens exactly
    offsets = [sum(dims[:f]) for f in range(len(dims))]

    def ranked(f: int) -> list[tuple[float, int]]:
        cols = values[offsets[f]: offsets[f] + dims[f]]
        order = sorted(range(dims[f]), key=lambda c: (score_order(cols[c]), c), reverse=True)
        return [(cols[c], c) for c in order[: min(k, dims[f])]]

    running = ranked(0)  # (score, slot id), best first
    for f in range(1, len(dims)):
        factor = ranked(f)
        n, m = len(running), len(factor)
        c = min(k, n * m)
        candidates = []
        for i in range(n):
            for j in range(m):
                if (i + 1) * (j + 1) <= c:
                    s = _add(running[i][0], factor[j][0], dtype)
                    candidates.append((score_order(s), i + j, i, s, running[i][1] * dims[f] + factor[j][1]))
        candidates.sort(key=lambda t: t[:3], reverse=True)
        last = f + 1 == len(dims)
        running = [(s if last or dtype not in (torch.bfloat16, torch.float16) else _round(s, dtype), slot)
                   for _, _, _, s, slot in candidates[:c]]
    chosen = sorted(running, key=lambda t: t[1])
    return [_round(s, dtype) for s, _ in chosen], [slot for _, slot in chosen]


def reference_topk(raw: torch.Tensor, dims: list[int], k: int) -> tuple[torch.Tensor, torch.Tensor]:
    rows = raw.reshape(-1, raw.shape[-1])
    kk = min(k, math.prod(dims))
    values = torch.empty(rows.shape[0], kk, dtype=raw.dtype)
    slots = torch.empty(rows.shape[0], kk, dtype=torch.int64)
    for r in range(rows.shape[0]):
        v, s = reference_row(rows[r], dims, k)
        values[r] = torch.tensor(v, dtype=torch.float64).to(raw.dtype)
        slots[r] = torch.tensor(s, dtype=torch.int64)
    shape = (*raw.shape[:-1], kk)
    return values.view(shape), slots.view(shape)
