"""Read / write activations of the layer (SPEC F.1): applied over the K selected scores."""

from __future__ import annotations

from typing import Callable

import torch
from torch import Tensor, nn


def make_activation(name: str, scale: float, argument: str) -> Callable[[Tensor], Tensor]:
    """"Softmax" -> softmax(scale * x); "l2_normalize" -> x / (||x||_2 + 1e-12); otherwise the
    name of a parameter-free torch.nn activation. ValueError naming `argument` otherwise."""
    if name == "Softmax":
        return lambda x: torch.softmax(x * scale, dim=-1)
    if name == "l2_normalize":
        return lambda x: x / (torch.linalg.vector_norm(x, dim=-1, keepdim=True) + 1e-12)
    module_class = getattr(nn, name, None)
    if not (isinstance(module_class, type) and issubclass(module_class, nn.Module)
            and module_class.__module__ == "torch.nn.modules.activation"):
        raise ValueError(f"SparseDeltaMemoryArgs.{argument}: unknown activation {name!r}; expected 'Softmax', "
                         "'l2_normalize' or the name of a torch.nn activation such as 'ReLU' or 'Sigmoid'")
    module = module_class()
    if any(True for _ in module.parameters()):
        raise ValueError(f"SparseDeltaMemoryArgs.{argument}: activation {name!r} has parameters; "
                         "only parameter-free torch.nn activations are supported")
    return module
