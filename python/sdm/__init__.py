"""Sparse Delta Memory for PyTorch.

    readings, final_bank = sdm.write_read(memory, k_idx, k_val, v, beta, g, q_idx, q_val,
                                          slots_per_stream=...)   # functional, differentiable
    readings = sdm.write_read_(memory, ...)                       # in place, inference
    readings = sdm.decode_step(memory, ...)                       # one token per stream, in place
    layer = sdm.SparseDeltaMemory(sdm.SparseDeltaMemoryArgs(dim=..., ...), layer_id)
    output, state = layer(x)                                      # state.memory: the bank after x
    values, slots = sdm.product_key_topk(raw, factor_dims, k)     # exact product-key top-k

The operators are torch.ops.sdm.* (C++, see bindings/torch); sdm.reference holds the
float64 oracle used by the tests.
"""

from . import reference
from .args import SparseDeltaMemoryArgs
from .cache import SDMLayerState, SparseDeltaMemoryCache
from .functional import decode_step, write_read, write_read_
from .layer import SparseDeltaMemory
from .product_keys import product_key_topk

__version__ = "0.1.0"

__all__ = [
    "SDMLayerState",
    "SparseDeltaMemory",
    "SparseDeltaMemoryArgs",
    "SparseDeltaMemoryCache",
    "decode_step",
    "product_key_topk",
    "reference",
    "write_read",
    "write_read_",
]
