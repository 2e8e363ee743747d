"""The SparseDeltaMemory layer on CUDA, unchanged: eval forward vs the same layer on the
CPU, the saving forward (autograd on) == the no-grad forward bitwise, prefill + decode through a
CUDA cache == one full forward. Training on CUDA (gradients, optimizer steps): test_cuda_backward.py."""

from __future__ import annotations

import copy

import pytest
import torch

import sdm
from gpu_support import GPU_TEST, bitwise_equal, rel_err

pytestmark = GPU_TEST

CONFIGS = {
    "plain": dict(num_heads=2),
    "gate_norm_learned_memory": dict(num_heads=2, output_gate=True, normalize_readings=True,
                                     backprop_on_memory=True),
    "key_weighted_decay": dict(num_heads=1, key_weighted_decay=True),
    "query_batchnorm": dict(num_heads=4, query_batchnorm=True),
}


def _layer(seed: int = 0, **overrides) -> sdm.SparseDeltaMemory:
    base = dict(dim=128, num_heads=2, slots_per_head=1024, num_writes=16, num_reads=16, chunk_size=32,
                backprop_on_memory=False)
    base.update(overrides)
    torch.manual_seed(seed)
    return sdm.SparseDeltaMemory(sdm.SparseDeltaMemoryArgs(**base), layer_id=0)


@pytest.mark.parametrize("config", list(CONFIGS))
def test_eval_forward_on_cuda_matches_cpu(config):
    cpu_layer = _layer(**CONFIGS[config]).eval()
    gpu_layer = copy.deepcopy(cpu_layer).cuda()
    x = torch.randn(2, 75, 128)
    with torch.no_grad():
        want = cpu_layer(x)[0]
        got = gpu_layer(x.cuda())[0]
    assert got.device.type == "cuda" and got.shape == x.shape
    assert rel_err(got, want) <= 1e-4


def test_eval_forward_with_autograd_on_equals_no_grad_bitwise():
    """With grad enabled the layer takes sdm.write_read's saving forward; readings are bitwise
    those of the no-grad forward (SPEC Z.4), so the outputs are too."""
    layer = _layer(output_gate=True, normalize_readings=True, backprop_on_memory=True).cuda().eval()
    x = torch.randn(2, 50, 128, device="cuda")
    recorded = layer(x)[0]
    assert recorded.requires_grad
    with torch.no_grad():
        plain = layer(x)[0]
    assert bitwise_equal(recorded.detach(), plain)


@pytest.mark.parametrize("num_heads", [1, 2])
def test_prefill_then_decode_on_cuda_equals_full_forward(num_heads):
    layer = _layer(num_heads=num_heads, output_gate=True, normalize_readings=True,
                   backprop_on_memory=True).cuda().eval()
    x = torch.randn(2, 40, 128, device="cuda")
    with torch.no_grad():
        full = layer(x)[0]
        cache = layer.create_kv_cache(2, 0, torch.float32, "cuda")
        pieces = [layer(x[:, :24], cache=cache)[0]]
        pieces += [layer(x[:, t:t + 1], cache=cache)[0] for t in range(24, 40)]
    assert cache.bank.device.type == "cuda" and cache.cache_len == 40
    assert rel_err(torch.cat(pieces, dim=1), full) <= 1e-4


def test_bfloat16_layer_and_cache_on_cuda():
    layer = _layer(key_weighted_decay=True).cuda().eval()
    x = torch.randn(2, 30, 128, device="cuda")
    with torch.no_grad():
        full = layer(x)[0]
        cache = layer.create_kv_cache(2, 0, torch.bfloat16, "cuda")
        pieces = torch.cat([layer(x[:, :20], cache=cache)[0]] +
                           [layer(x[:, t:t + 1], cache=cache)[0] for t in range(20, 30)], dim=1)
        bf16_out, bf16_state = layer.to(torch.bfloat16)(x.to(torch.bfloat16))  # the layer returns (output, state)
    assert cache.bank.dtype == torch.bfloat16
    assert rel_err(pieces, full) <= 3e-2
    assert bf16_out.dtype == torch.bfloat16 and bf16_out.shape == x.shape and torch.isfinite(bf16_out).all()
    assert bf16_state.memory.dtype == torch.bfloat16 and bf16_state.cache_len == 30


def test_a_callers_cuda_graph_of_layer_decode_steps_replays_bitwise_equal_to_eager():
    """The layer's ops are capture-safe (docs/layer.md), so a caller captures a layer decode step
    (a cache, T = 1) with torch.cuda.graph; replays from the same bank give eager's outputs and
    banks bit for bit, token after token. (The layer's own per-layer graphs, cuda_graph=True, are
    tested with sdm.cuda_graph; here the option is off and every eager call is plain.)"""
    layer = _layer(backprop_on_memory=True).cuda().eval()
    prompt = torch.randn(2, 9, 128, device="cuda")
    tokens = torch.randn(3, 2, 1, 128, device="cuda")
    with torch.no_grad():
        eager_cache = layer.create_kv_cache(2, 0, torch.float32, "cuda")
        layer(prompt, cache=eager_cache)
        eager = []
        for token in tokens:
            out, _ = layer(token, cache=eager_cache)
            eager.append((out.clone(), eager_cache.memory.clone()))

        cache = layer.create_kv_cache(2, 0, torch.float32, "cuda")
        layer(prompt, cache=cache)
        start = cache.memory.clone()
        static_x = tokens[0].clone()
        side = torch.cuda.Stream()
        side.wait_stream(torch.cuda.current_stream())
        with torch.cuda.stream(side):  # warm-up off the default stream, as torch.cuda.graph asks
            layer(static_x, cache=sdm.SDMLayerState(start.clone(), 9))
        torch.cuda.current_stream().wait_stream(side)
        graph = torch.cuda.CUDAGraph()
        with torch.cuda.graph(graph):
            static_out, _ = layer(static_x, cache=cache)
        bank = cache.memory  # the captured decode step updates this bank in place
        bank.copy_(start)
        for token, (want_out, want_bank) in zip(tokens, eager):
            static_x.copy_(token)
            graph.replay()
            torch.cuda.synchronize()
            assert bitwise_equal(static_out, want_out) and bitwise_equal(bank, want_bank)
