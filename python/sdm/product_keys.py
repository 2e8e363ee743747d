"""Product-key addressing: which slots of its head's bank a token writes or reads.

``product_key_topk(raw, factor_dims, k)`` is ``torch.ops.sdm.product_key_topk`` (C++ kernels on
CPU and CUDA) with its autograd formula; the selection rule is stated in docs/spec.md
("Product-key top-k") and include/sdm/product_key_topk.hpp. This module registers the op's
fake kernels (so ``torch.compile`` traces it) and its backward (a deterministic C++ kernel).
"""

from __future__ import annotations

import operator
from collections.abc import Sequence

import torch
from torch import Tensor

from ._ops import LIMITS

# The C++ limits (include/sdm/product_key_topk.hpp), as torch.ops.sdm.limits() reports them.
MAX_FACTORS = LIMITS["max_product_key_factors"]
MAX_K = LIMITS["max_product_key_k"]
MAX_SLOTS = LIMITS["max_product_key_slots"]
_INT64 = range(-(2**63), 2**63)


def check_factor_dims(factor_dims: object, argument: str = "factor_dims") -> tuple[int, ...]:
    """``factor_dims`` as a tuple of ints, checked by the C++ rule (``torch.ops.sdm.product_key_columns``:
    1 to ``MAX_FACTORS`` positive widths whose product, the slots per head, and sum, the score
    columns, are at most ``MAX_SLOTS``). ValueError naming ``argument`` otherwise."""
    if isinstance(factor_dims, (str, bytes)) or not isinstance(factor_dims, Sequence):
        raise ValueError(f"{argument} must be a sequence of ints, got {factor_dims!r}")
    if any(isinstance(w, bool) for w in factor_dims):
        raise ValueError(f"{argument} must hold ints, got {list(factor_dims)!r}")
    try:
        dims = tuple(operator.index(w) for w in factor_dims)
    except TypeError:
        raise ValueError(f"{argument} must hold ints, got {list(factor_dims)!r}") from None
    if not all(w in _INT64 for w in dims):  # the op's int[] holds int64
        raise ValueError(f"{argument} must hold 64-bit ints, got {list(dims)}")
    try:
        torch.ops.sdm.product_key_columns(list(dims))
    except ValueError as error:
        if argument == "factor_dims":
            raise
        raise ValueError(f"{argument}: {error}") from None
    return dims


@torch.library.register_fake("sdm::product_key_topk")
def _product_key_topk_fake(raw, factor_dims, k):
    probe = raw.new_empty([0] * (raw.dim() - 1) + [raw.shape[-1]]) if raw.dim() else raw
    kk = torch.ops.sdm.product_key_topk_selected(probe, factor_dims, k)
    shape = (*raw.shape[:-1], kk)
    return raw.new_empty(shape), raw.new_empty(shape, dtype=torch.int64)


@torch.library.register_fake("sdm::product_key_topk_backward")
def _product_key_topk_backward_fake(slots, grad_values, factor_dims, *, validate=True):
    columns = torch.ops.sdm.product_key_columns(factor_dims)
    return grad_values.new_empty((*slots.shape[:-1], columns))


def _setup(ctx, inputs, output):
    raw, factor_dims, _k = inputs
    ctx.save_for_backward(output[1])
    ctx.factor_dims = list(factor_dims)
    ctx.raw_dtype = raw.dtype


def _backward(ctx, grad_values, _grad_slots):
    (slots,) = ctx.saved_tensors
    # The forward's own slots: in range by construction (validate would cost a host sync on CUDA).
    grad_raw = torch.ops.sdm.product_key_topk_backward(slots, grad_values.to(ctx.raw_dtype), ctx.factor_dims,
                                                       validate=False)
    return grad_raw, None, None


torch.library.register_autograd("sdm::product_key_topk", _backward, setup_context=_setup)


def product_key_topk(raw: Tensor, factor_dims: Sequence[int], k: int) -> tuple[Tensor, Tensor]:
    """Exact top-k over the sums of one score from each product-key factor.

    ``raw [..., sum(factor_dims)]`` (float32, bfloat16, float16 or float64, CPU or CUDA) holds
    the factors side by side. Returns ``(values, slots)``, each ``[..., min(k, prod(factor_dims))]``:
    slot ids ``(..(c_0 * n_1 + c_1) * ..) * n_{F-1} + c_{F-1}`` (int64, strictly ascending) and
    their scores rounded to raw's dtype. ``values`` is differentiable with respect to ``raw``
    (deterministic backward). ``k`` in 1..``MAX_K``. Rule: docs/spec.md, "Product-key top-k"."""
    return torch.ops.sdm.product_key_topk(raw, list(factor_dims), operator.index(k))
