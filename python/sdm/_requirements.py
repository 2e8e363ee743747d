"""The oldest Python and torch this package is tested with. pyproject.toml declares the same
floors (tests/python/test_requirements.py checks that they match); ``sdm`` checks them at import
and raises ImportError naming the versions instead of failing later on a missing API.

Tested: Python 3.11 with torch 2.13 (CPU, CI) and Python 3.12 with torch 2.11 (CUDA, H200)."""

from __future__ import annotations

import re
import sys

MIN_PYTHON = (3, 11)
MIN_TORCH = (2, 11)


def version_tuple(version: str) -> tuple[int, int]:
    """(major, minor) of a version string such as "2.11.0+cu130" or "2.13.0a0"."""
    match = re.match(r"(\d+)\.(\d+)", version)
    if match is None:
        raise ImportError(f"sdm: cannot read the version {version!r}")
    return int(match.group(1)), int(match.group(2))


def check(python: tuple[int, ...] = tuple(sys.version_info[:2]), torch_version: str | None = None) -> None:
    """ImportError naming the floor when the running Python or torch is older than it."""
    if tuple(python[:2]) < MIN_PYTHON:
        raise ImportError(f"sdm needs Python >= {MIN_PYTHON[0]}.{MIN_PYTHON[1]}, this is Python "
                          f"{python[0]}.{python[1]}")
    if torch_version is None:
        import torch
        torch_version = torch.__version__
    if version_tuple(str(torch_version)) < MIN_TORCH:
        raise ImportError(f"sdm needs torch >= {MIN_TORCH[0]}.{MIN_TORCH[1]}, this is torch {torch_version}; "
                          f"install torch >= {MIN_TORCH[0]}.{MIN_TORCH[1]} and rebuild sdm against it")
