"""``cuda_graph=True`` on CUDA (sdm.cuda_graph, issue 26 item 6): the layer's inference calls
(prefill and decode with a cache, and calls without one) are captured per shape and replayed,
bitwise equal to eager; reset_cuda_graphs() makes the next call capture again; calls inside
suspend_cuda_graphs(), training calls and calls inside the caller's own capture run eager. And
tests/python/test_drop_in.py's 2.0.0-style program on CUDA."""

from __future__ import annotations

import copy

import pytest
import torch

import sdm
from gpu_support import GPU_TEST, bitwise_equal

pytestmark = GPU_TEST


def _pair(seed: int = 0, **overrides) -> tuple[sdm.SparseDeltaMemory, sdm.SparseDeltaMemory]:
    """(graphed, eager): the same weights, cuda_graph on and off, in eval mode on CUDA."""
    base = dict(dim=128, num_heads=2, slots_per_head=1024, num_writes=16, num_reads=16, chunk_size=32,
                backprop_on_memory=True, cuda_graph=True)
    base.update(overrides)
    torch.manual_seed(seed)
    graphed = sdm.SparseDeltaMemory(sdm.SparseDeltaMemoryArgs(**base)).cuda().eval()
    eager = copy.deepcopy(graphed)
    eager.args = copy.deepcopy(graphed.args)
    eager.args.cuda_graph = False
    return graphed, eager


def _generate(layer, prompt, tokens, cache=None):
    """Prefill then decode token by token; (outputs, banks) of every call, copied."""
    seen = []
    with torch.no_grad():
        if cache is None:
            cache = layer.create_kv_cache(prompt.shape[0], 0, torch.float32, "cuda")
        out, _ = layer(prompt, cache=cache)
        seen.append((out.clone(), cache.memory.clone()))
        for token in tokens:
            out, _ = layer(token, cache=cache)
            seen.append((out.clone(), cache.memory.clone()))
    return seen


@pytest.mark.parametrize("config", [dict(), dict(output_gate=True, normalize_readings=True, key_weighted_decay=True),
                                    dict(query_batchnorm=True, num_heads=4), dict(read_act="PReLU"),
                                    dict(snapshot_quant="fp8", backprop_on_memory=False)])
def test_prefill_and_decode_replay_bitwise_equal_to_eager(config):
    graphed, eager = _pair(**config)
    torch.manual_seed(1)
    prompt = torch.randn(8, 33, 128, device="cuda")
    tokens = torch.randn(6, 8, 1, 128, device="cuda")
    want = _generate(eager, prompt, tokens)
    for prompt_round in range(2):   # a new cache per prompt: captured again for its bank, then replayed
        got = _generate(graphed, prompt, tokens)
        for step, ((out, bank), (want_out, want_bank)) in enumerate(zip(got, want)):
            assert bitwise_equal(out, want_out) and bitwise_equal(bank, want_bank), (prompt_round, step)
    stats = graphed.graph_runner.stats
    assert stats["capture"] >= 2 and stats["replay"] >= 2 * 5, dict(stats)
    assert not eager.graph_runner.stats


def test_the_same_cache_reused_replays_without_recapture():
    graphed, eager = _pair(seed=2)
    prompt = torch.randn(2, 16, 128, device="cuda")
    tokens = torch.randn(5, 2, 1, 128, device="cuda")
    cache = graphed.create_kv_cache(2, 0, torch.float32, "cuda")
    eager_cache = eager.create_kv_cache(2, 0, torch.float32, "cuda")
    for _ in range(3):
        with torch.no_grad():
            cache.memory.copy_(eager_cache.memory.zero_())   # same bank tensor, new prompt
        got = _generate(graphed, prompt, tokens, cache)
        want = _generate(eager, prompt, tokens, eager_cache)
        assert all(bitwise_equal(a[0], b[0]) and bitwise_equal(a[1], b[1]) for a, b in zip(got, want))
    stats = graphed.graph_runner.stats
    assert stats["capture"] == 2 and stats["recapture"] == 0, dict(stats)   # one prefill key, one decode key
    assert stats["replay"] == 3 * 6 - 2


def test_calls_without_a_cache_replay_and_return_their_own_tensors():
    graphed, eager = _pair(seed=3)
    xs = torch.randn(3, 4, 20, 128, device="cuda")
    with torch.no_grad():
        got = [graphed(x) for x in xs]
        want = [eager(x) for x in xs]
    for (out, state), (want_out, want_state) in zip(got, want):   # earlier results not overwritten by later replays
        assert bitwise_equal(out, want_out) and bitwise_equal(state.memory, want_state.memory)
    assert graphed.graph_runner.stats["replay"] == 2
    x2d = xs[0].reshape(80, 128)
    with torch.no_grad():
        freqs = torch.zeros(20, 4, device="cuda")
        out2d = [graphed(x2d, freqs_cis=freqs)[0] for _ in range(2)]
        assert bitwise_equal(out2d[1], eager(x2d, freqs_cis=freqs)[0]) and out2d[1]._base is None


def test_reset_suspend_training_and_outer_capture_paths():
    graphed, eager = _pair(seed=4)
    x = torch.randn(2, 12, 128, device="cuda")
    stats = graphed.graph_runner.stats
    with torch.no_grad():
        graphed(x)
        graphed(x)
        assert (stats["capture"], stats["replay"]) == (1, 1)
        sdm.reset_cuda_graphs()
        assert graphed.graph_runner.entries == {}
        graphed(x)
        assert stats["capture"] == 2, "after reset_cuda_graphs() the next call captures again"
        with sdm.suspend_cuda_graphs():
            out, _ = graphed(x)
        assert (stats["capture"], stats["replay"]) == (2, 1), "suspended: eager"
        assert bitwise_equal(out, eager(x)[0])
    # a call autograd records (training) runs eager, with gradients equal to cuda_graph=False's
    graphed.train()
    eager.train()
    y, _ = graphed(x)
    y.square().sum().backward()
    z, _ = eager(x)
    z.square().sum().backward()
    assert (stats["capture"], stats["replay"]) == (2, 1)
    assert bitwise_equal(y, z)
    for (name, p), q in zip(graphed.named_parameters(), eager.parameters()):
        assert bitwise_equal(p.grad, q.grad), name
    # inside the caller's own capture the layer runs eager (is captured by it)
    graphed.eval()
    with torch.no_grad():
        static_x = x.clone()
        graphed(static_x)   # warm-up (replays the key captured above)
        graph = torch.cuda.CUDAGraph()
        with torch.cuda.graph(graph):
            static_out, _ = graphed(static_x)
        before = dict(stats)
        static_x.copy_(x * 0.5)
        graph.replay()
        assert bitwise_equal(static_out, eager(x * 0.5)[0]) and dict(stats) == before


def test_args_changes_and_parameter_updates_take_effect_in_graphs():
    graphed, eager = _pair(seed=5)
    x = torch.randn(2, 12, 128, device="cuda")
    with torch.no_grad():
        graphed(x)
        graphed(x)
        for layer in (graphed, eager):
            layer.args.num_reads = 4
            layer.args.chunk_size = 8
        assert bitwise_equal(graphed(x)[0], eager(x)[0])   # a new key: captured
        assert bitwise_equal(graphed(x)[0], eager(x)[0])   # replayed
        for layer in (graphed, eager):
            layer.Wo.weight.mul_(1.5)                         # in place (an optimizer step): the replay sees it
        assert bitwise_equal(graphed(x)[0], eager(x)[0])
    state = eager.state_dict()
    graphed.load_state_dict({k: v.clone() for k, v in state.items()}, assign=True)   # new tensors: captured again
    with torch.no_grad():
        assert bitwise_equal(graphed(x)[0], eager(x)[0])
    assert graphed.graph_runner.stats["recapture"] == 1


def test_bfloat16_layer_and_cache():
    graphed, eager = _pair(seed=6)
    graphed, eager = graphed.bfloat16(), eager.bfloat16()
    prompt = torch.randn(4, 9, 128, device="cuda", dtype=torch.bfloat16)
    tokens = torch.randn(4, 4, 1, 128, device="cuda", dtype=torch.bfloat16)

    def run(layer):
        with torch.no_grad():
            cache = layer.create_kv_cache(4, 0, torch.bfloat16, "cuda")
        return _generate(layer, prompt, tokens, cache)

    for (out, bank), (want_out, want_bank) in zip(run(graphed), run(eager)):
        assert bitwise_equal(out, want_out) and bitwise_equal(bank, want_bank)


def test_the_2_0_0_program_runs_on_cuda():
    from test_drop_in import NORM_KEYS, STATS_KEYS, run_2_0_0_program
    observed = run_2_0_0_program("cuda")
    assert observed["prelu_trained"] and observed["is_cache"] and observed["round_trip"]
    assert observed["decoded"].is_cuda and torch.isfinite(observed["decoded"]).all()
    assert set(observed["stats"]) == STATS_KEYS | NORM_KEYS
    assert "args.slots_per_head was changed" in observed["refused"]
