"""Shared helpers of the GPU tests of the torch ops: random op problems drawn on the CPU by
tests/python/sdm_problem.py (so the CPU engine sees the same inputs; tests move them with
``.to("cuda")``), the project's error metric, tolerances and a bitwise comparison. Every test here
is skipped when torch sees no CUDA device."""

from __future__ import annotations

import sys
from pathlib import Path

import pytest
import torch

# tests/python holds the shared problem module; appended, so this folder's conftest stays first.
sys.path.append(str(Path(__file__).resolve().parent.parent / "python"))

import sdm_problem  # noqa: E402
from sdm_problem import Problem, rel_err  # noqa: E402

__all__ = ["Problem", "bitwise_equal", "make_problem", "rel_err", "tolerance"]


def pytest_collection_modifyitems(config, items):
    if torch.cuda.is_available():
        return
    skip = pytest.mark.skip(reason="no CUDA device: the GPU tests of the torch ops are skipped")
    for item in items:
        item.add_marker(skip)


def make_problem(P: int = 2, T: int = 13, W: int = 3, R: int = 2, hd: int = 6, slots_per_stream: int = 16,
                 G: int = 1, bank: torch.dtype = torch.float32, inputs: torch.dtype | None = None,
                 index: torch.dtype = torch.int64, seed: int = 0, decode_lead: tuple[int, ...] | None = None) -> Problem:
    """sdm_problem.make_problem on the CPU with the GPU tests' names: bank dtype ``bank`` (default
    float32), other float inputs ``inputs`` (default ``bank``), indices ``index``."""
    return sdm_problem.make_problem(P, T, W, R, hd, slots_per_stream, G, dtype=bank, input_dtype=inputs,
                                    index_dtype=index, seed=seed, decode_lead=decode_lead)


def tolerance(bank: torch.dtype) -> float:
    return 2e-2 if bank == torch.bfloat16 else 1e-4


def bitwise_equal(a: torch.Tensor, b: torch.Tensor) -> bool:
    """Same dtype, shape and bytes (NaN payloads and signed zeros included)."""
    if a.dtype != b.dtype or a.shape != b.shape:
        return False
    return torch.equal(a.contiguous().view(torch.uint8), b.contiguous().view(torch.uint8))


@pytest.fixture(autouse=True)
def _deterministic_seed():
    torch.manual_seed(1234)
