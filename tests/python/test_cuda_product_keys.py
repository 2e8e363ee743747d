"""torch.ops.sdm.product_key_topk on CUDA tensors: the same bits as the CPU kernel (which
tests/python/test_product_keys.py checks against a brute-force statement of the rule), forward and
backward, on tie-heavy, signed-zero, NaN and infinite scores; stream order, CUDA-graph capture and
torch.compile; the CUDA-only dtype refusal."""

from __future__ import annotations

import math

import pytest
import torch

import sdm
from gpu_support import GPU_TEST

pytestmark = GPU_TEST

CASES = [([7], 3), ([16, 16], 64), ([256, 256], 64), ([256, 256], 128), ([3, 5, 2], 7), ([4, 3, 5, 2], 11),
         ([2] * 12, 100), ([70000, 3], 10), ([12, 12], 256)]


def scores(shape, kind: str, dtype: torch.dtype, generator: torch.Generator) -> torch.Tensor:
    if kind == "randn":
        return torch.randn(shape, generator=generator).to(dtype)
    x = torch.randint(-3, 4, shape, generator=generator).double() / 2
    if kind == "special":
        pick = torch.randint(0, 10, shape, generator=generator)
        for code, value in enumerate((-0.0, 0.0, math.nan, -math.inf, math.inf)):
            x = torch.where(pick == code, torch.tensor(value, dtype=torch.float64), x)
    return x.to(dtype)


def same_values(a: torch.Tensor, b: torch.Tensor) -> bool:
    """Bitwise equal; any NaN equals any NaN (the NaN an addition returns is the hardware's)."""
    view = {torch.float32: torch.int32}.get(a.dtype, torch.int16)
    nan = a.isnan()
    return torch.equal(nan, b.isnan()) and torch.equal(a.view(view)[~nan], b.view(view)[~nan])


@pytest.mark.parametrize("dims,k", CASES)
@pytest.mark.parametrize("kind", ["randn", "ties", "special"])
@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16, torch.float16])
def test_cuda_equals_cpu_bit_for_bit(dims, k, kind, dtype):
    generator = torch.Generator().manual_seed(len(dims) * 1000 + k)
    raw = scores((5, 7, sum(dims)), kind, dtype, generator)
    values, slots = sdm.product_key_topk(raw, dims, k)
    got_values, got_slots = sdm.product_key_topk(raw.cuda(), dims, k)
    assert torch.equal(got_slots.cpu(), slots) and same_values(got_values.cpu(), values)
    grad = torch.randn(values.shape, generator=generator).to(dtype)
    want = torch.ops.sdm.product_key_topk_backward(slots, grad, dims)
    got = torch.ops.sdm.product_key_topk_backward(got_slots, grad.cuda(), dims)
    assert torch.equal(got.cpu(), want)


def test_autograd_graph_capture_and_compile_on_cuda():
    raw = torch.randn(64, 512, device="cuda", dtype=torch.bfloat16, requires_grad=True)
    values, slots = sdm.product_key_topk(raw, [256, 256], 64)
    values.float().sum().backward()
    assert raw.grad.dtype == torch.bfloat16 and raw.grad.float().sum().item() == 2 * 64 * 64
    static = raw.detach().clone()
    stream = torch.cuda.Stream()
    stream.wait_stream(torch.cuda.current_stream())
    with torch.cuda.stream(stream):
        sdm.product_key_topk(static, [256, 256], 64)
    torch.cuda.current_stream().wait_stream(stream)
    graph = torch.cuda.CUDAGraph()
    with torch.cuda.graph(graph):
        graph_values, graph_slots = sdm.product_key_topk(static, [256, 256], 64)
    static.copy_(torch.randn_like(static))
    graph.replay()
    eager_values, eager_slots = sdm.product_key_topk(static, [256, 256], 64)
    assert torch.equal(graph_slots, eager_slots) and torch.equal(graph_values, eager_values)
    compiled = torch.compile(lambda r: sdm.product_key_topk(r, [256, 256], 64), fullgraph=True)
    assert torch.equal(compiled(static)[1], eager_slots)


def test_float64_is_refused_on_cuda():
    with pytest.raises(TypeError, match=r"raw on CUDA must be float32, bfloat16 or float16, got float64"):
        sdm.product_key_topk(torch.randn(2, 8, device="cuda", dtype=torch.float64), [4, 4], 3)
