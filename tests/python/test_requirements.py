"""The Python and torch floors (issue 26 item 8): pyproject.toml declares the versions the package
checks at import (python/sdm/_requirements.py), the check's error names them, and every torch API
the package names exists in the running torch. Run on the GPU machine (Python 3.12, torch 2.11,
the declared floor) the last test is the floor check: it fails there for a torch API newer than
2.11 (as symbolic_shapes.optimization_hint once was)."""

from __future__ import annotations

import ast
import importlib
import pathlib
import tomllib

import pytest
import torch

import sdm
from sdm import _requirements

ROOT = pathlib.Path(__file__).resolve().parents[2]
PACKAGE = pathlib.Path(sdm.__file__).resolve().parent   # the imported package (an install copies python/sdm)


def test_pyproject_declares_the_floors_the_package_checks():
    project = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]
    assert project["requires-python"] == ">={}.{}".format(*_requirements.MIN_PYTHON)
    assert "torch>={}.{}".format(*_requirements.MIN_TORCH) in project["dependencies"]
    assert _requirements.MIN_PYTHON >= (3, 11) and _requirements.MIN_TORCH >= (2, 11)


def test_the_import_check_names_the_floor():
    _requirements.check()   # the running versions pass
    with pytest.raises(ImportError, match=r"sdm needs Python >= 3\.11, this is Python 3\.10"):
        _requirements.check(python=(3, 10))
    with pytest.raises(ImportError, match=r"sdm needs torch >= 2\.11, this is torch 2\.10\.1\+cu128"):
        _requirements.check(torch_version="2.10.1+cu128")
    _requirements.check(torch_version="2.11.0a0+git123")
    assert _requirements.version_tuple("2.13.0") == (2, 13)


def _torch_names() -> set[str]:
    """Every dotted torch name the package's source spells: ``torch.a.b.c`` attribute chains,
    chains on a name bound to a torch module (``from torch import nn``: ``nn.init.trunc_normal_``;
    ``import torch.nn.functional as F``: ``F.softplus``) and ``from torch.x import y``."""
    names = set()
    for path in PACKAGE.rglob("*.py"):
        tree = ast.parse(path.read_text(), str(path))
        roots = {"torch": "torch"}
        for node in ast.walk(tree):
            if isinstance(node, ast.ImportFrom) and node.module and node.module.split(".")[0] == "torch":
                for alias in node.names:
                    names.add(f"{node.module}.{alias.name}")
                    roots[alias.asname or alias.name] = f"{node.module}.{alias.name}"
            elif isinstance(node, ast.Import):
                for alias in node.names:
                    if alias.name.split(".")[0] == "torch" and alias.asname:
                        roots[alias.asname] = alias.name
        for node in ast.walk(tree):
            if isinstance(node, ast.Attribute):
                parts = []
                inner = node
                while isinstance(inner, ast.Attribute):
                    parts.append(inner.attr)
                    inner = inner.value
                if isinstance(inner, ast.Name) and inner.id in roots:
                    names.add(".".join([roots[inner.id], *reversed(parts)]))
    return names


def _resolve(name: str):
    parts = name.split(".")
    for split in range(len(parts), 0, -1):
        try:
            obj = importlib.import_module(".".join(parts[:split]))
        except ImportError:
            continue
        for attr in parts[split:]:
            obj = getattr(obj, attr)
        return obj
    raise ImportError(name)


def test_every_torch_api_the_package_names_exists_in_this_torch():
    names = _torch_names()
    assert {"torch.cuda.graph", "torch.nn.init.trunc_normal_", "torch.nn.functional.softplus"} <= names
    missing = []
    for name in sorted(names):
        if name.startswith("torch.ops.sdm."):   # the package's own operators (tests/python/test_ops.py)
            continue
        try:
            _resolve(name)
        except (AttributeError, ImportError):
            missing.append(name)
    # Optional by design (the package tolerates their absence): none today.
    assert not missing, f"torch {torch.__version__} lacks {missing}; the package declares torch >= " \
                        f"{'.'.join(map(str, _requirements.MIN_TORCH))}"


def test_the_package_imports_with_the_check_first():
    source = (PACKAGE / "__init__.py").read_text()
    assert source.index("_requirements.check()") < source.index("from .args import"), \
        "the version check runs before anything that needs a newer torch"
    assert sdm.__version__
