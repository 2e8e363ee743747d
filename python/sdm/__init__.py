"""Sparse Delta Memory for PyTorch.

    readings, final_bank = sdm.write_read(memory, k_idx, k_val, v, beta, g, q_idx, q_val,
                                          slots_per_stream=...)   # functional, differentiable
    readings = sdm.write_read_(memory, ...)                       # in place, inference
    readings = sdm.decode_step(memory, ...)                       # one token per stream, in place
    layer = sdm.SparseDeltaMemory(sdm.SparseDeltaMemoryArgs(dim=..., ...), layer_id)
    output, state = layer(x)                                      # state.memory: the bank after x
    values, slots = sdm.product_key_topk(raw, factor_dims, k)     # exact product-key top-k

sparse-delta-memory 2.0.0's other names: sdm.UnsupportedConfigurationError,
sdm.UntestedHardwareWarning, sdm.reset_cuda_graphs(), sdm.suspend_cuda_graphs() (also in
sdm.cuda_graph), sdm.cache.Cache. The operators are torch.ops.sdm.* (C++, see bindings/torch); sdm.reference holds the
float64 oracle used by the tests.
"""

from . import _requirements

_requirements.check()

from . import cache, cuda_graph, reference  # noqa: E402
from .args import SparseDeltaMemoryArgs  # noqa: E402
from .cache import Cache, SDMLayerState, SparseDeltaMemoryCache  # noqa: E402
from .cuda_graph import reset_cuda_graphs, suspend_cuda_graphs  # noqa: E402
from .errors import UnsupportedConfigurationError, UntestedHardwareWarning  # noqa: E402
from .functional import decode_step, write_read, write_read_  # noqa: E402
from .layer import SparseDeltaMemory  # noqa: E402
from .product_keys import product_key_topk  # noqa: E402

__version__ = "0.1.0"

__all__ = [
    "Cache",
    "SDMLayerState",
    "SparseDeltaMemory",
    "SparseDeltaMemoryArgs",
    "SparseDeltaMemoryCache",
    "UnsupportedConfigurationError",
    "UntestedHardwareWarning",
    "cache",
    "cuda_graph",
    "decode_step",
    "product_key_topk",
    "reference",
    "reset_cuda_graphs",
    "suspend_cuda_graphs",
    "write_read",
    "write_read_",
]
