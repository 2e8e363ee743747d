"""Shared helpers of the Python tests: random op problems of awkward shapes and the error
metric of the project (relative max error against the reference), from sdm_problem.py."""

from __future__ import annotations

import pytest
import torch

from sdm_problem import Problem, make_problem, rel_err

__all__ = ["Problem", "make_problem", "rel_err"]


@pytest.fixture(autouse=True)
def _deterministic_seed():
    torch.manual_seed(1234)
