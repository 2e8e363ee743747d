"""The SDM op as Python functions: thin wrappers over torch.ops.sdm (docs/spec.md).

Each function's docstring lists its arguments with shapes and dtypes (``help(sdm.write_read)``).
Errors: TypeError for dtypes and option types, ValueError for shapes, devices, limits, memory
shared with the bank and (validate=True) index ranges or repeated write slots, all raised before
anything is written and naming the argument.
"""

from __future__ import annotations

import operator

import torch
from torch import Tensor

from ._ops import LIMITS, WriteReadFunction

# The C++ default (sdm/options.hpp), which the signatures below show; the docstrings' limits are
# the C++ ones too, filled in at import.
_DEFAULT_CHUNK = LIMITS["default_chunk"]

_CHUNKED_ARGS = """
    Arguments (P streams, T tokens, W writes and R reads per token, hd columns):
        memory    [S, hd] bfloat16 or float32, contiguous: the bank. Stream p owns rows
                  [p * slots_per_stream, (p + 1) * slots_per_stream); S >= P * slots_per_stream.
        k_idx     [P, T, W] int32 or int64: absolute bank rows written by each token, distinct
                  within a token and inside the token's stream.
        k_val     [P, T, W] float32 / bfloat16 / float16: write keys (rounded to the bank dtype).
        v         [P, T, hd] float: values (rounded to the bank dtype).
        beta      [P, T] or [P, T, 1] float: write strengths (used in float32).
        g         [P, T, 1] or [P, T, W] float: log-decay per token or per write (float32).
        q_idx     [P, T, R] int32 or int64: bank rows read by each token after its write
                  (duplicates allowed, additive).
        q_val     [P, T, R] float: read weights (rounded to the bank dtype).
        slots_per_stream  int >= 1: rows per stream.
        chunk_size        int in 1..{max_chunk} (default {default_chunk}), clamped to T: results depend on it only
                          through rounding.
        snapshot_quant    "none" (default), "bf16", "fp8" or "int4": how the pre-write rows are
                          kept for the backward (readings never depend on it).
        grad_bank_fp32    bool (default False): keep a bfloat16 bank's gradient rows in float32.
        validate          bool (default True): check every index first (ValueError naming the
                          tensor, stream, token and lane). With False, out-of-range entries are
                          masked: never written, read as 0; no memory outside the bank is touched.
    W and R are in 1..{max_width}. Tensors need not be contiguous (non-contiguous ones are copied), but
    none may share memory with a tensor the call writes.
""".format(**LIMITS)


def records_grad(*tensors: Tensor) -> bool:
    """True when autograd would record an op on these tensors."""
    return torch.is_grad_enabled() and any(t.requires_grad for t in tensors)


def _int_option(name: str, value) -> int:
    if isinstance(value, torch.SymInt):
        return value
    if isinstance(value, bool):
        raise TypeError(f"{name} must be an int, got bool {value!r}")
    try:
        return operator.index(value)
    except TypeError:
        raise TypeError(f"{name} must be an int, got {type(value).__name__} {value!r}") from None


def _bool_option(name: str, value) -> bool:
    if not isinstance(value, bool):
        raise TypeError(f"{name} must be a bool, got {type(value).__name__} {value!r}")
    return value


def _str_option(name: str, value) -> str:
    if not isinstance(value, str):
        raise TypeError(f"{name} must be a str, got {type(value).__name__} {value!r}")
    return value


def _chunked_options(slots_per_stream, chunk_size, snapshot_quant, grad_bank_fp32, validate) -> dict:
    return dict(slots_per_stream=_int_option("slots_per_stream", slots_per_stream),
                chunk_size=_int_option("chunk_size", chunk_size),
                snapshot_quant=_str_option("snapshot_quant", snapshot_quant),
                grad_bank_fp32=_bool_option("grad_bank_fp32", grad_bank_fp32),
                validate=_bool_option("validate", validate))


def write_read(memory: Tensor, k_idx: Tensor, k_val: Tensor, v: Tensor, beta: Tensor, g: Tensor,
               q_idx: Tensor, q_val: Tensor, *, slots_per_stream: int, chunk_size: int = _DEFAULT_CHUNK,
               snapshot_quant: str = "none", grad_bank_fp32: bool = False,
               validate: bool = True) -> tuple[Tensor, Tensor]:
    """Functional chunked op: returns ``(readings, final_bank)``.

    Each token decays and delta-writes its W rows, then reads its R rows (after its own write).
    ``readings`` is [P, T, hd] in the bank dtype; ``final_bank`` is a new tensor [S, hd] holding
    the state after the last token, and ``memory`` is not modified. Differentiable with respect to
    ``memory``, ``k_val``, ``v``, ``beta``, ``g`` and ``q_val``; a gradient flowing into
    ``final_bank`` is honoured. When autograd has nothing to record it runs the no-grad forward on
    a copy of ``memory`` and saves nothing. Works under ``torch.compile(fullgraph=True)``.
    """
    options = _chunked_options(slots_per_stream, chunk_size, snapshot_quant, grad_bank_fp32, validate)
    if records_grad(memory, k_val, v, beta, g, q_val):
        return WriteReadFunction.apply(memory, k_idx, k_val, v, beta, g, q_idx, q_val, options)
    final_bank = memory.clone(memory_format=torch.contiguous_format)
    readings = torch.ops.sdm.write_read_(final_bank, k_idx, k_val, v, beta, g, q_idx, q_val, **options)
    return readings, final_bank


def write_read_(memory: Tensor, k_idx: Tensor, k_val: Tensor, v: Tensor, beta: Tensor, g: Tensor,
                q_idx: Tensor, q_val: Tensor, *, slots_per_stream: int, chunk_size: int = _DEFAULT_CHUNK,
                snapshot_quant: str = "none", grad_bank_fp32: bool = False, validate: bool = True) -> Tensor:
    """In-place chunked op for inference (prefill, caches): updates ``memory`` to the final
    state and returns the readings [P, T, hd] in the bank dtype; saves nothing for a backward.
    Raises RuntimeError naming :func:`sdm.write_read` if autograd would have to record it (grad
    mode on and an input requires grad). No input may share memory with ``memory``.
    Not thread-safe on one bank: like any in-place torch op, calls updating the same ``memory``
    from several threads at once race (its final state is unspecified); separate banks are
    independent."""
    options = _chunked_options(slots_per_stream, chunk_size, snapshot_quant, grad_bank_fp32, validate)
    return torch.ops.sdm.write_read_(memory, k_idx, k_val, v, beta, g, q_idx, q_val, **options)


def decode_step(memory: Tensor, k_idx: Tensor, k_val: Tensor, v: Tensor, beta: Tensor, g: Tensor,
                q_idx: Tensor, q_val: Tensor, *, slots_per_stream: int = 0, validate: bool = True) -> Tensor:
    """One token per stream, in place: the same write-then-read as one token of
    :func:`write_read_`, with each written row rounded to the bank dtype once.

    Arguments (the leading dims ``...`` of ``k_idx`` are the streams; every tensor shares them):
        memory    [S, hd] bfloat16 or float32, contiguous: the bank, updated in place.
        k_idx     [..., W] int32 or int64: rows written, distinct per stream.
        k_val     [..., W] float: write keys.
        v         [..., hd] float: values.
        beta      [..., 1] float: write strength.
        g         [..., 1] or [..., W] float: log-decay.
        q_idx     [..., R] int32 or int64: rows read after the write.
        q_val     [..., R] float: read weights.
        slots_per_stream  int >= 0 (default 0). 0: indices may address any row of the bank.
                          >= 1: stream p's indices must lie in its rows
                          [p * slots_per_stream, (p + 1) * slots_per_stream).
        validate          bool (default True): check every index first; with False,
                          out-of-range entries are masked.
    W and R are in 1..{max_width}; at most {max_dims} dims per tensor. Returns readings shaped like ``v``
    in the bank dtype. Inference only: raises RuntimeError if autograd would have to record it. Not
    thread-safe on one bank (as :func:`write_read_`)."""
    return torch.ops.sdm.decode_step(memory, k_idx, k_val, v, beta, g, q_idx, q_val,
                                     slots_per_stream=_int_option("slots_per_stream", slots_per_stream),
                                     validate=_bool_option("validate", validate))


for _op in (write_read, write_read_):
    if _op.__doc__:  # docstrings are stripped under python -OO
        _op.__doc__ += _CHUNKED_ARGS
if decode_step.__doc__:
    decode_step.__doc__ = decode_step.__doc__.format(**LIMITS)
