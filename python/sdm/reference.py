"""The float64 oracle (docs/spec.md §1; C++ sdm::reference) as a differentiable PyTorch function.

Slow, token by token, CPU only; accepts float64 banks and inputs. Meant for tests: it is what
the engine's readings and gradients are compared with, and what torch.autograd.gradcheck
checks in float64.
"""

from __future__ import annotations

import torch
from torch import Tensor

from ._ops import LIMITS


def write_read(memory: Tensor, k_idx: Tensor, k_val: Tensor, v: Tensor, beta: Tensor, g: Tensor,
               q_idx: Tensor, q_val: Tensor, *, slots_per_stream: int, chunk_size: int = LIMITS["default_chunk"],
               **_engine_options) -> tuple[Tensor, Tensor]:
    """As :func:`sdm.write_read` (same arguments; engine-only options such as snapshot_quant are
    accepted and ignored) computed by the float64 token recurrence; readings and final bank
    are rounded once to the bank dtype."""
    return torch.ops.sdm.reference_write_read(memory, k_idx, k_val, v, beta, g, q_idx, q_val,
                                              slots_per_stream=slots_per_stream, chunk_size=chunk_size)
