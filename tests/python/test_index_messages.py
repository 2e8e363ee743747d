"""The message for an index tensor of a wrong dtype (issue 22 item 8).

k_idx / q_idx of int8, int16, bool, uint8 or a float dtype reach the binding (to_sdm_dtype in
bindings/torch/tensor_ref.cpp) or the shared validation: either way the TypeError names the tensor,
says it must be int32 or int64, names the dtype given as torch spells it, and lists no float dtypes
(it used to say "has unsupported dtype Char (sdm takes float64, float32, ...)"). The bank is not
touched. Every entry point that takes indices: write_read, write_read_, decode_step.
"""

from __future__ import annotations

import pytest
import torch

import sdm
from gpu_support import gpu_problem

WRONG_INDEX_DTYPES = [torch.int8, torch.int16, torch.bool, torch.uint8, torch.float32, torch.float64]


def _name(dtype: torch.dtype) -> str:
    return str(dtype).removeprefix("torch.")


@pytest.mark.parametrize("op", ["write_read", "write_read_", "decode_step"])
@pytest.mark.parametrize("name", ["k_idx", "q_idx"])
@pytest.mark.parametrize("dtype", WRONG_INDEX_DTYPES, ids=_name)
def test_a_wrong_index_dtype_is_named_with_the_index_dtypes(op, name, dtype):
    decode = op == "decode_step"
    p = gpu_problem(P=2, T=1 if decode else 5, W=3, R=2, hd=4, slots_per_stream=8, seed=5,
                    decode_lead=(2,) if decode else None)
    args = dict(zip(("memory", "k_idx", "k_val", "v", "beta", "g", "q_idx", "q_val"), p.tensors()))
    args[name] = args[name].to(dtype)
    bank_before = args["memory"].clone()
    with pytest.raises(TypeError) as refused:
        if op == "decode_step":
            sdm.decode_step(*args.values(), slots_per_stream=8)
        else:
            getattr(sdm, op)(*args.values(), slots_per_stream=8, chunk_size=4)
    message = str(refused.value)
    assert message.startswith(f"{name} must be int32 or int64"), message
    assert message.endswith(f"got {_name(dtype)}"), message
    if not dtype.is_floating_point:
        assert "float" not in message, message
    assert torch.equal(args["memory"], bank_before)
