"""Read / write activations of the layer: applied over the K selected scores of a token.

Modules (not closures), so a layer pickles, deep-copies and saves like any nn.Module."""

from __future__ import annotations

import torch
from torch import Tensor, nn


class ScaledSoftmax(nn.Module):
    """softmax(scale * x) over the last dim."""

    def __init__(self, scale: float = 1.0) -> None:
        super().__init__()
        self.scale = scale

    def forward(self, x: Tensor) -> Tensor:
        return torch.softmax(x * self.scale, dim=-1)


class L2Normalize(nn.Module):
    """x / (||x||_2 + 1e-12) over the last dim."""

    def forward(self, x: Tensor) -> Tensor:
        return x / (torch.linalg.vector_norm(x, dim=-1, keepdim=True) + 1e-12)


def _torch_module_class(name: str) -> type[nn.Module] | None:
    module_class = getattr(nn, name, None)
    if isinstance(module_class, type) and issubclass(module_class, nn.Module):
        return module_class
    return None


def check_activation(name: object, argument: str) -> None:
    """ValueError naming ``argument`` unless ``name`` is "Softmax", "l2_normalize" or the name of
    a torch.nn module built without arguments ("ReLU", "Identity", "Dropout", "PReLU", ...), as
    sparse-delta-memory 2.0.0 accepts (``getattr(torch.nn, name)()``)."""
    if not isinstance(name, str):
        raise ValueError(f"SparseDeltaMemoryArgs.{argument} must be an activation name (str), got {name!r}")
    if name in ("Softmax", "l2_normalize"):
        return
    module_class = _torch_module_class(name)
    if module_class is None:
        raise ValueError(f"SparseDeltaMemoryArgs.{argument}: unknown activation {name!r}; expected 'Softmax', "
                         "'l2_normalize' or the name of a torch.nn activation such as 'ReLU', 'Identity' or 'PReLU'")
    try:
        module_class()
    except TypeError:
        raise ValueError(f"SparseDeltaMemoryArgs.{argument}: torch.nn.{name} needs constructor arguments; "
                         "the activation is built as torch.nn.<name>() (as in sparse-delta-memory 2.0.0)") from None


def make_activation(name: str, scale: float, argument: str) -> nn.Module:
    """"Softmax" -> ScaledSoftmax(scale); "l2_normalize" -> L2Normalize(); otherwise
    ``torch.nn.<name>()``. A module with parameters (PReLU) is a submodule of the layer, so its
    parameters are in the layer's state dict and ``parameters()`` (the optimizer's)."""
    check_activation(name, argument)
    if name == "Softmax":
        return ScaledSoftmax(scale)
    if name == "l2_normalize":
        return L2Normalize()
    return _torch_module_class(name)()
