"""Product-key selection (SPEC F.4, Z.8) against a brute-force ranking of all n*n slots."""

from __future__ import annotations

import pytest
import torch

import sdm


def _brute_force(raw: torch.Tensor, n: int, k: int) -> tuple[torch.Tensor, torch.Tensor]:
    """Every slot i1*n + i2 scored f1[i1] + f2[i2] (float32); ranked by descending score, exact
    ties to the smaller slot; the best min(k, n*n) returned in ascending slot order."""
    scores = raw.float()
    every = (scores[..., :n].unsqueeze(-1) + scores[..., n:].unsqueeze(-2)).flatten(-2)
    ranked = torch.sort(every, dim=-1, descending=True, stable=True).indices[..., : min(k, n * n)]
    slots = torch.sort(ranked, dim=-1).values
    return every.gather(-1, slots), slots


@pytest.mark.parametrize("n,k", [(4, 3), (5, 7), (8, 64), (3, 9), (6, 1)])
def test_matches_brute_force_on_random_scores(n, k):
    raw = torch.randn(3, 11, 2 * n)
    scores, slots = sdm.product_key_topk(raw, n, k)
    want_scores, want_slots = _brute_force(raw, n, k)
    assert torch.equal(slots, want_slots)
    assert torch.equal(scores, want_scores)


@pytest.mark.parametrize("n,k", [(4, 3), (6, 8), (5, 25)])
def test_exact_ties_go_to_the_smaller_slot(n, k):
    # Small integers: many exact ties among factor scores and among candidate sums.
    raw = torch.randint(-2, 3, (4, 9, 2 * n)).float()
    _, slots = sdm.product_key_topk(raw, n, k)
    _, want_slots = _brute_force(raw, n, k)
    assert torch.equal(slots, want_slots)


def test_all_equal_scores_pick_the_first_slots():
    n = 4
    _, slots = sdm.product_key_topk(torch.zeros(1, 2 * n), n, 5)
    assert slots.tolist() == [[0, 1, 2, 3, 4]]


def test_slots_distinct_ascending_and_scores_differentiable():
    n, k = 8, 16
    raw = torch.randn(2, 5, 2 * n, requires_grad=True)
    scores, slots = sdm.product_key_topk(raw, n, k)
    assert (slots[..., 1:] > slots[..., :-1]).all()
    assert scores.dtype == torch.float32 and slots.dtype == torch.int64
    scores.sum().backward()
    # Each selected score s1[a] + s2[b] sends gradient 1 to both factor channels.
    i1, i2 = slots // n, slots % n
    expected = torch.zeros_like(raw)
    expected.scatter_add_(-1, i1, torch.ones_like(i1, dtype=raw.dtype))
    expected.scatter_add_(-1, i2 + n, torch.ones_like(i2, dtype=raw.dtype))
    assert torch.equal(raw.grad, expected)


def test_bfloat16_scores_are_ranked_in_float32():
    raw = torch.randn(2, 7, 12).bfloat16()
    scores, slots = sdm.product_key_topk(raw, 6, 9)
    want_scores, want_slots = _brute_force(raw, 6, 9)
    assert scores.dtype == torch.float32
    assert torch.equal(slots, want_slots) and torch.equal(scores, want_scores)
