"""Shared helpers of the Python tests: random op problems of awkward shapes and the error
metric of the project (relative max error against the reference), from sdm_problem.py."""

from __future__ import annotations

import atexit
import os
import shutil
import tempfile

import pytest
import torch

from sdm_problem import Problem, make_problem, rel_err

__all__ = ["Problem", "make_problem", "rel_err"]

# A fresh Inductor cache per test session (the distributed ranks inherit it): a compiled graph
# cached by an earlier build of the extension bakes in that build's fake-kernel output sizes
# (e.g. the saved buffer's, which grew with its stamp) and fails against this build's op.
_INDUCTOR_CACHE = tempfile.mkdtemp(prefix="sdm-test-inductor-")
os.environ["TORCHINDUCTOR_CACHE_DIR"] = _INDUCTOR_CACHE
atexit.register(shutil.rmtree, _INDUCTOR_CACHE, ignore_errors=True)


@pytest.fixture(autouse=True)
def _deterministic_seed():
    torch.manual_seed(1234)
