"""The side-by-side benchmark's inputs (bench/compare/slot_inputs.py), on the CPU: shapes, the
addressing rules both systems rely on, and the reuse each slot pattern promises (its distinct
fraction of a chunk's write entries, the range bench/slot_patterns.hpp states for the C++ one)."""

from __future__ import annotations

import pathlib
import sys

import pytest
import torch

sys.path.insert(0, str(pathlib.Path(__file__).resolve().parents[2] / "bench" / "compare"))
from slot_inputs import CONFIGS, distinct_fraction, make_inputs  # noqa: E402

SMALL = dict(CONFIGS["small"], P=2, T=640)  # 10 chunks of 64 per stream


@pytest.mark.parametrize("pattern", ["product_key", "heavy_reuse"])
def test_inputs_follow_the_op_contract(pattern):
    c = SMALL
    x = make_inputs(c, pattern, device="cpu")
    P, T, W, R, sps, hd = (c[k] for k in ("P", "T", "W", "R", "sps", "hd"))
    assert x["memory"].shape == (P * sps, hd) and x["memory"].dtype == torch.bfloat16
    for idx, val, width in (("k_idx", "k_val", W), ("q_idx", "q_val", R)):
        slots = x[idx]
        assert slots.shape == (P, T, width) and slots.dtype == torch.int32
        stream = torch.arange(P).view(P, 1, 1) * sps
        assert bool(((slots >= stream) & (slots < stream + sps)).all()), "a slot outside its stream"
        assert bool((slots[..., 1:] > slots[..., :-1]).all()), "slots of a token not strictly ascending"
        torch.testing.assert_close(x[val].float().sum(-1), torch.ones(P, T), atol=2e-2, rtol=0)
    assert bool((x["g"] < 0).all()) and bool(((x["beta"] > 0) & (x["beta"] < 1)).all())


def test_same_seed_same_tensors_other_seed_other_slots():
    a, b = make_inputs(SMALL, "product_key", device="cpu"), make_inputs(SMALL, "product_key", device="cpu")
    assert all(torch.equal(a[k], b[k]) for k in a)
    c = make_inputs(SMALL, "product_key", seed=1, device="cpu")
    assert not torch.equal(a["k_idx"], c["k_idx"])


def test_heavy_reuse_reuses_more_than_product_keys():
    pk = distinct_fraction(make_inputs(SMALL, "product_key", device="cpu")["k_idx"], 64)
    heavy = distinct_fraction(make_inputs(SMALL, "heavy_reuse", device="cpu")["k_idx"], 64)
    assert 0.4 <= pk <= 0.55, pk
    assert 0.15 <= heavy <= 0.22, heavy


def test_distinct_fraction_counts_rows_per_chunk():
    k_idx = torch.tensor([[[0, 1], [0, 1], [2, 3]]], dtype=torch.int32)  # chunk of 2: {0,1} twice; then {2,3}
    assert distinct_fraction(k_idx, 2) == pytest.approx((2 / 4 + 2 / 2) / 2)


def test_unknown_pattern_is_named():
    with pytest.raises(ValueError, match="heavy"):
        make_inputs(SMALL, "zipf", device="cpu")
