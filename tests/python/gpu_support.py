"""Helpers of the tests that run on CUDA tensors (tests/python/test_cuda_*.py and the fuzz test's
CUDA case): the `requires_cuda` marks, problems drawn on the CPU by sdm_problem.py with the GPU
tests' argument names (so the CPU engine sees the same inputs; tests move them with
``.to("cuda")``), the GPU tolerances and a bitwise comparison."""

from __future__ import annotations

import pytest
import torch

import sdm_problem
from sdm_problem import Problem, rel_err

__all__ = ["GPU_TEST", "bitwise_equal", "gpu_problem", "rel_err", "tolerance"]

# A test module on CUDA tensors: `pytestmark = GPU_TEST` (the `gpu` marker, and a skip without a
# CUDA device). `pytest -m gpu` selects them on a GPU machine.
GPU_TEST = [pytest.mark.gpu, pytest.mark.skipif(not torch.cuda.is_available(), reason="no CUDA device")]


def gpu_problem(P: int = 2, T: int = 13, W: int = 3, R: int = 2, hd: int = 6, slots_per_stream: int = 16,
                G: int = 1, bank: torch.dtype = torch.float32, inputs: torch.dtype | None = None,
                index: torch.dtype = torch.int64, seed: int = 0, decode_lead: tuple[int, ...] | None = None) -> Problem:
    """sdm_problem.make_problem on the CPU: bank dtype ``bank`` (default float32), other float
    inputs ``inputs`` (default ``bank``), indices ``index``."""
    return sdm_problem.make_problem(P, T, W, R, hd, slots_per_stream, G, dtype=bank, input_dtype=inputs,
                                    index_dtype=index, seed=seed, decode_lead=decode_lead)


def tolerance(bank: torch.dtype) -> float:
    return 2e-2 if bank == torch.bfloat16 else 1e-4


def bitwise_equal(a: torch.Tensor, b: torch.Tensor) -> bool:
    """Same dtype, shape and bytes (NaN payloads and signed zeros included)."""
    if a.dtype != b.dtype or a.shape != b.shape:
        return False
    return torch.equal(a.contiguous().view(torch.uint8), b.contiguous().view(torch.uint8))
