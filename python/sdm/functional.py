"""The SDM op as Python functions (SPEC Z.2, Z.10): thin wrappers over torch.ops.sdm.

Shapes (P streams, T tokens, W writes and R reads per token, hd bank row width):
    memory  [S, hd]      bfloat16 or float32, contiguous; stream p owns rows
                         [p * slots_per_stream, (p + 1) * slots_per_stream)
    k_idx   [P, T, W]    int32 / int64, absolute bank rows, distinct within a token
    k_val   [P, T, W]    float (rounded to the bank dtype)
    v       [P, T, hd]   float (rounded to the bank dtype)
    beta    [P, T] or [P, T, 1]   float (used in float32)
    g       [P, T, 1] or [P, T, W] float (used in float32): log-decay per token or per write
    q_idx   [P, T, R]    int32 / int64
    q_val   [P, T, R]    float (rounded to the bank dtype)
    readings [P, T, hd]  bank dtype
Errors: TypeError for dtypes, ValueError for shapes, devices, limits and (validate=True)
index ranges or repeated write slots, raised before anything is written.
"""

from __future__ import annotations

import torch
from torch import Tensor

from . import _ops  # noqa: F401  (loads the operators)


def records_grad(*tensors: Tensor) -> bool:
    """True when autograd would record an op on these tensors."""
    return torch.is_grad_enabled() and any(t.requires_grad for t in tensors)


def write_read(memory: Tensor, k_idx: Tensor, k_val: Tensor, v: Tensor, beta: Tensor, g: Tensor,
               q_idx: Tensor, q_val: Tensor, *, slots_per_stream: int, chunk_size: int = 64,
               snapshot_quant: str = "none", grad_bank_fp32: bool = False,
               validate: bool = True) -> tuple[Tensor, Tensor]:
    """Functional chunked op: returns ``(readings, final_bank)``.

    ``memory`` (the initial bank) is not modified; ``final_bank`` is a new tensor holding the
    state after the last token. Differentiable with respect to ``memory``, ``k_val``, ``v``,
    ``beta``, ``g`` and ``q_val``; a gradient flowing into ``final_bank`` is honoured. When
    autograd has nothing to record, it runs the no-grad forward on a copy of ``memory`` and
    saves nothing. ``chunk_size`` (clamped to T) changes results only through rounding.
    ``snapshot_quant`` ("none", "bf16", "fp8", "int4") sets how the pre-write rows are kept for
    the backward; ``grad_bank_fp32`` keeps a bfloat16 bank's gradient rows in float32.
    Works under ``torch.compile(fullgraph=True)``.
    """
    options = dict(slots_per_stream=slots_per_stream, chunk_size=chunk_size, snapshot_quant=snapshot_quant,
                   grad_bank_fp32=grad_bank_fp32, validate=validate)
    if records_grad(memory, k_val, v, beta, g, q_val):
        readings, final_bank, _saved = torch.ops.sdm.write_read(memory, k_idx, k_val, v, beta, g, q_idx, q_val,
                                                                **options)
        return readings, final_bank
    final_bank = memory.clone(memory_format=torch.contiguous_format)
    readings = torch.ops.sdm.write_read_(final_bank, k_idx, k_val, v, beta, g, q_idx, q_val, **options)
    return readings, final_bank


def write_read_(memory: Tensor, k_idx: Tensor, k_val: Tensor, v: Tensor, beta: Tensor, g: Tensor,
                q_idx: Tensor, q_val: Tensor, *, slots_per_stream: int, chunk_size: int = 64,
                snapshot_quant: str = "none", grad_bank_fp32: bool = False, validate: bool = True) -> Tensor:
    """In-place chunked op for inference (prefill, caches): updates ``memory`` to the final
    state and returns the readings; saves nothing for a backward. Raises RuntimeError naming
    :func:`sdm.write_read` if autograd would have to record it (grad mode on and an input
    requires grad)."""
    return torch.ops.sdm.write_read_(memory, k_idx, k_val, v, beta, g, q_idx, q_val,
                                     slots_per_stream=slots_per_stream, chunk_size=chunk_size,
                                     snapshot_quant=snapshot_quant, grad_bank_fp32=grad_bank_fp32,
                                     validate=validate)


def decode_step(memory: Tensor, k_idx: Tensor, k_val: Tensor, v: Tensor, beta: Tensor, g: Tensor,
                q_idx: Tensor, q_val: Tensor, *, slots_per_stream: int = 0, validate: bool = True) -> Tensor:
    """One token per stream, in place (SPEC E.1, Z.10): ``k_idx, k_val [..., W]``,
    ``v [..., hd]``, ``beta [..., 1]``, ``g [..., 1 or W]``, ``q_idx, q_val [..., R]``; the leading
    dims are the streams. Returns readings shaped like ``v`` in the bank dtype. With
    ``slots_per_stream >= 1`` stream p's indices must lie in its own rows. Inference only:
    raises RuntimeError if autograd would have to record it."""
    return torch.ops.sdm.decode_step(memory, k_idx, k_val, v, beta, g, q_idx, q_val,
                                     slots_per_stream=slots_per_stream, validate=validate)
