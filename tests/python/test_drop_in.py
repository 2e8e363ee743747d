"""sdm as a drop-in for sparse-delta-memory 2.0.0 programs (issue 26): the top-level names, the
layer's statistics / init methods, cache.Cache, any torch.nn activation, args changed after
construction, the cuda_graph controls (their CPU-visible logic; the graphs themselves:
tests/python/test_cuda_graphs.py), and a 2.0.0-style program that uses all of them.

The expected values here are computed independently of the layer's statistics code: from the
layer's own projections, sdm.product_key_topk and the activations."""

from __future__ import annotations

import copy
import dataclasses
import io
import math
import re
import warnings

import pytest
import torch

import sdm
import sdm.cuda_graph
import sdm.errors
import sdm.layer
from conftest import rel_err

# sparse-delta-memory 2.0.0's get_memory_access_stats keys (memory_stats.py of 2.0.0, by reading).
STATS_KEYS = {"read_unique_pct", "write_unique_pct", "read_slot_entropy_normalized", "write_slot_entropy_normalized",
              "read_weight_max", "write_strength_max", "write_strength_mean", "output_norm", "forget_gate_min",
              "forget_gate_mean", "forget_gate_max", "input_gate_min", "input_gate_mean", "input_gate_max",
              "memory_grad_norm", "qk_proj_grad_norm", "output_proj_grad_norm"}
NORM_KEYS = {"memory_norm", "memory_max", "updated_memory_norm", "updated_memory_max", "slot_norm_mean",
             "slot_norm_max", "updated_slot_norm_mean", "updated_slot_norm_max"}


def _args(**overrides) -> sdm.SparseDeltaMemoryArgs:
    base = dict(dim=32, num_heads=2, slots_per_head=64, num_writes=4, num_reads=6, chunk_size=8)
    base.update(overrides)
    return sdm.SparseDeltaMemoryArgs(**base)


def _layer(seed: int = 0, **overrides) -> sdm.SparseDeltaMemory:
    torch.manual_seed(seed)
    return sdm.SparseDeltaMemory(_args(**overrides), layer_id=0)


# ---- the 2.0.0-style program ------------------------------------------------------------------

def run_2_0_0_program(device: str) -> dict:
    """A training + inference program written against sparse-delta-memory 2.0.0's surface; only
    the import names sdm. Returns what it observed (the GPU suite runs it on CUDA)."""
    from sdm import (SparseDeltaMemory, SparseDeltaMemoryArgs, UnsupportedConfigurationError,  # noqa: F401
                     UntestedHardwareWarning, reset_cuda_graphs, suspend_cuda_graphs)
    from sdm.cache import Cache
    from sdm.cuda_graph import reset_cuda_graphs as reset_from_module

    warnings.filterwarnings("ignore", category=UntestedHardwareWarning)
    torch.manual_seed(0)
    args = SparseDeltaMemoryArgs(dim=32, num_heads=2, slots_per_head=64, num_writes=4, num_reads=4,
                                 read_act="PReLU", write_act="Identity", log_memory_access_stats=True,
                                 log_memory_norms=True, cuda_graph=True)
    assert args.chunk_size is None
    layer = SparseDeltaMemory(args, layer_id=0).to(device)
    layer.init_weights(init_std=0.05, factor=2.0, width_scaling=1.0)
    assert "read_act.weight" in layer.state_dict()
    prelu_before = layer.read_act.weight.detach().clone()
    optimizer = torch.optim.AdamW(layer.parameters(), lr=1e-2)
    x = torch.randn(2, 12, 32, device=device)
    for _ in range(2):
        y, _ = layer(x)
        y.float().square().mean().backward()
        layer.collect_grad_stats()
        optimizer.step()
        optimizer.zero_grad(set_to_none=True)
    with suspend_cuda_graphs():   # 2.0.0's train.py probes another batch size this way
        probe, _ = layer(x[:1])
    reset_cuda_graphs()
    reset_from_module()
    layer.args.num_reads = 6   # honoured by the next call
    observed = {"prelu_trained": not torch.equal(prelu_before, layer.read_act.weight.detach()),
                "probe_shape": tuple(probe.shape)}
    layer.eval()
    with torch.no_grad():
        cache = layer.create_kv_cache(2, 0, torch.float32, device)
        outputs = [layer(x[:, :8], cache=cache)[0]]
        for t in range(8, 12):
            outputs.append(layer(x[:, t:t + 1], cache=cache)[0])
    observed["is_cache"] = isinstance(cache, Cache) and cache.cache_len == 12
    observed["decoded"] = torch.cat(outputs, dim=1)
    observed["stats"] = layer.get_memory_access_stats(reset=True)
    layer.args.slots_per_head = 16
    try:
        layer(x)
    except UnsupportedConfigurationError as error:
        observed["refused"] = str(error)
    observed["round_trip"] = SparseDeltaMemoryArgs(**dataclasses.asdict(args)) == args
    return observed


def test_a_2_0_0_program_runs_unchanged_on_cpu():
    observed = run_2_0_0_program("cpu")
    assert observed["prelu_trained"] and observed["probe_shape"] == (1, 12, 32) and observed["is_cache"]
    assert observed["decoded"].shape == (2, 12, 32) and torch.isfinite(observed["decoded"]).all()
    stats = observed["stats"]
    assert set(stats) == STATS_KEYS | NORM_KEYS
    assert 0 < stats["read_unique_pct"] <= 100 and 0 < stats["write_unique_pct"] <= 100
    assert stats["memory_grad_norm"] > 0 and stats["qk_proj_grad_norm"] > 0 and stats["output_proj_grad_norm"] > 0
    assert stats["updated_memory_norm"] > 0 and stats["output_norm"] > 0
    assert "args.slots_per_head was changed from 64 to 16" in observed["refused"]
    assert observed["round_trip"]


# ---- 1. top-level names -----------------------------------------------------------------------

def test_top_level_names():
    assert issubclass(sdm.UnsupportedConfigurationError, ValueError)
    assert issubclass(sdm.UntestedHardwareWarning, UserWarning)
    assert callable(sdm.reset_cuda_graphs) and sdm.cuda_graph.reset_cuda_graphs is sdm.reset_cuda_graphs
    assert sdm.cuda_graph.suspend_cuda_graphs is sdm.suspend_cuda_graphs
    for name in ("UnsupportedConfigurationError", "UntestedHardwareWarning", "reset_cuda_graphs",
                 "suspend_cuda_graphs", "Cache"):
        assert name in sdm.__all__


def test_batch_beyond_the_bank_row_limit_is_refused_before_any_work():
    layer = _layer(dim=8, num_heads=1, slots_per_head=65536, num_writes=2, num_reads=2, backprop_on_memory=False)
    rows_limit = (1 << 31) - 1
    B = rows_limit // 65536 + 1
    with pytest.raises(sdm.UnsupportedConfigurationError,
                       match=rf"batch {B} needs a bank of {B * 65536} rows .* at most {rows_limit} rows"):
        layer(torch.zeros(B, 1, 8))
    with pytest.raises(ValueError):   # caught as 2.0.0 documents: a ValueError
        layer(torch.zeros(B, 1, 8))


def test_untested_hardware_warning_once_per_device(monkeypatch):
    capability = {0: (8, 6), 1: (9, 0)}
    monkeypatch.setattr(torch.cuda, "get_device_capability", lambda index: capability[index])
    monkeypatch.setattr(torch.cuda, "get_device_name", lambda index: f"GPU{index}")
    monkeypatch.setattr(sdm.errors, "_checked_devices", set())
    with pytest.warns(sdm.UntestedHardwareWarning, match=r"device 0 \(GPU0, compute capability 8\.6\)"):
        sdm.errors.warn_if_untested(torch.device("cuda", 0))
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        sdm.errors.warn_if_untested(torch.device("cuda", 0))   # once per device
        sdm.errors.warn_if_untested(torch.device("cuda", 1))   # the tested capability
        sdm.errors.warn_if_untested(torch.device("cpu"))


# ---- 2. statistics and init_weights -----------------------------------------------------------

def _expected_access(layer: sdm.SparseDeltaMemory, x: torch.Tensor) -> dict:
    """The access statistics of one eval call, from the layer's projections (not its stats code)."""
    H, sph = layer.num_heads, layer.slots_per_head
    rows = H * sph
    out = {}
    with torch.no_grad():
        for kind, proj, norm, k, act in (("read", layer.Wq_read, layer.query_bn, layer.num_reads, layer.read_act),
                                         ("write", layer.Wk_write, layer.key_bn, layer.num_writes, layer.write_act)):
            values, slots = sdm.product_key_topk(layer._addressing(proj(x), norm), layer.product_key_factors, k)
            weights = act(values)
            head = (torch.arange(slots.shape[0]) % H * sph).view(-1, 1, 1)
            flat = (slots + head).reshape(-1)
            out[f"{kind}_unique_pct"] = 100.0 * flat.unique().numel() / rows
            hist = torch.zeros(rows, dtype=torch.float64).index_add_(0, flat, weights.reshape(-1).double())
            p = hist / hist.sum()
            entropy = -(p[p > 0] * p[p > 0].log()).sum().item()
            out[f"{kind}_slot_entropy_normalized"] = entropy / math.log(rows)
            out[f"{kind}_weights"] = weights
        g, beta = layer.compute_gates(x)
        out["forget_gate"] = torch.exp(g)
        out["input_gate"] = beta
    return out


def test_get_memory_access_stats_values_and_reset():
    layer = _layer(seed=3, log_memory_access_stats=True, write_act="Sigmoid").eval()
    x = torch.randn(2, 10, 32)
    want = _expected_access(layer, x)
    with torch.no_grad():
        out, _ = layer(x)
    stats = layer.get_memory_access_stats(reset=False)
    assert set(stats) == STATS_KEYS
    for key in ("read_unique_pct", "write_unique_pct"):
        assert stats[key] == pytest.approx(want[key], abs=1e-9), key
    for key in ("read_slot_entropy_normalized", "write_slot_entropy_normalized"):
        assert stats[key] == pytest.approx(want[key], rel=1e-5), key
    assert stats["read_weight_max"] == pytest.approx(want["read_weights"].max().item())
    assert stats["write_strength_max"] == pytest.approx(want["write_weights"].max().item())
    assert stats["write_strength_mean"] == pytest.approx(want["write_weights"].mean().item(), rel=1e-6)
    for name in ("forget_gate", "input_gate"):
        for reduce in ("min", "mean", "max"):
            assert stats[f"{name}_{reduce}"] == pytest.approx(getattr(want[name], reduce)().item(), rel=1e-6)
    assert stats["output_norm"] == pytest.approx(out.norm(dim=-1).mean().item(), rel=1e-6)
    assert stats["memory_grad_norm"] == stats["qk_proj_grad_norm"] == stats["output_proj_grad_norm"] == 0.0
    # a second call: the means are over both calls
    with torch.no_grad():
        out2, _ = layer(x * 2)
    two = layer.get_memory_access_stats(reset=True)
    assert two["output_norm"] == pytest.approx((out.norm(dim=-1).mean() + out2.norm(dim=-1).mean()).item() / 2,
                                               rel=1e-6)
    after_reset = layer.get_memory_access_stats()
    assert after_reset["read_unique_pct"] == after_reset["write_unique_pct"] == 0.0
    assert after_reset["read_slot_entropy_normalized"] == 0.0 and after_reset["output_norm"] == 0.0


def test_memory_norm_stats_are_the_banks_before_and_after():
    layer = _layer(seed=4, log_memory_access_stats=True, log_memory_norms=True).eval()
    x = torch.randn(1, 6, 32)
    with torch.no_grad():
        cache = layer.create_kv_cache(1, 0, torch.float32)
        before = cache.memory.clone()
        layer(x, cache=cache)
    stats = layer.get_memory_access_stats()
    assert set(stats) == STATS_KEYS | NORM_KEYS
    for prefix, bank in (("", before), ("updated_", cache.memory)):
        assert stats[f"{prefix}memory_norm"] == pytest.approx(bank.norm().item(), rel=1e-6)
        assert stats[f"{prefix}memory_max"] == pytest.approx(bank.abs().max().item())
        assert stats[f"{prefix}slot_norm_mean"] == pytest.approx(bank.norm(dim=-1).mean().item(), rel=1e-6)
        assert stats[f"{prefix}slot_norm_max"] == pytest.approx(bank.norm(dim=-1).max().item(), rel=1e-6)
    assert stats["memory_norm"] != stats["updated_memory_norm"]


def test_stats_off_train_mode_and_grad_stats():
    assert _layer().get_memory_access_stats() is None
    layer = _layer(seed=1, log_memory_access_stats=True)
    _layer().collect_grad_stats()   # logging off: nothing, no error
    x = torch.randn(2, 8, 32)
    y, _ = layer.train()(x)   # train mode records no forward statistics (2.0.0: eval mode only)
    y.square().sum().backward()
    layer.collect_grad_stats()
    stats = layer.get_memory_access_stats()
    assert stats["read_unique_pct"] == 0.0 and stats["output_norm"] == 0.0
    assert stats["memory_grad_norm"] == pytest.approx(layer.memory.grad.norm().item())
    qk = (layer.Wq_read.weight.grad.norm() + layer.Wk_write.weight.grad.norm()).item() / 2
    assert stats["qk_proj_grad_norm"] == pytest.approx(qk, rel=1e-6)
    assert stats["output_proj_grad_norm"] == pytest.approx(layer.Wo.weight.grad.norm().item())
    assert not any(name.startswith("_read") for name in layer.state_dict()), "the stats buffers are not persistent"


def test_init_weights_signature_and_scale():
    layer = _layer(seed=0)
    layer.init_weights(init_std=0.5, factor=5.0, width_scaling=3.0)   # width_scaling: accepted, unused (2.0.0)
    std = layer.Wq_read.weight.std().item()
    assert 0.07 < std < 0.1, std   # trunc-normal(0.1) at +-3 sigma: std about 0.0986
    assert layer.Wq_read.weight.abs().max().item() <= 0.3 + 1e-6
    torch.manual_seed(7)
    layer.init_weights(0.5, 5.0)
    a = layer.state_dict()
    torch.manual_seed(7)
    layer.init_weights(init_std=0.5, factor=5.0, width_scaling=99.0)
    assert all(torch.equal(a[k], v) for k, v in layer.state_dict().items())
    layer.init_weights()
    assert layer.Wq_read.weight.abs().max().item() <= 3 * 32 ** -0.5 + 1e-6


# ---- 3. cache.Cache ---------------------------------------------------------------------------

def test_cache_is_the_abstract_base_of_the_state():
    assert sdm.cache.Cache is sdm.Cache
    assert issubclass(sdm.SDMLayerState, sdm.cache.Cache)
    with pytest.raises(TypeError):
        sdm.cache.Cache()

    class Partial(sdm.cache.Cache):
        def __getitem__(self, index):
            return 0

    with pytest.raises(TypeError, match="abstract"):
        Partial()
    x = torch.tensor([[3.0, 4.0]])
    assert torch.allclose(sdm.cache.l2_normalize(x), torch.tensor([[0.6, 0.8]]))


# ---- 4. activations ---------------------------------------------------------------------------

@pytest.mark.parametrize("name", ["Identity", "Dropout", "PReLU", "Tanh"])
def test_any_torch_nn_activation_name(name):
    layer = _layer(read_act=name, write_act=name)
    assert isinstance(layer.read_act, getattr(torch.nn, name)) and isinstance(layer.write_act, getattr(torch.nn, name))
    y, _ = layer.eval()(torch.randn(1, 5, 32))
    assert torch.isfinite(y).all()


def test_activation_parameters_are_registered_and_trained():
    # every slot read and written, so that negative scores (PReLU's slope) are among them
    layer = _layer(read_act="PReLU", write_act="PReLU", num_reads=64, num_writes=64)
    keys = set(layer.state_dict())
    assert {"read_act.weight", "write_act.weight"} <= keys
    params = dict(layer.named_parameters())
    assert "read_act.weight" in params and "write_act.weight" in params
    y, _ = layer(torch.randn(2, 6, 32))
    y.square().sum().backward()
    assert layer.read_act.weight.grad is not None and layer.read_act.weight.grad.abs().sum() > 0
    assert layer.write_act.weight.grad is not None and layer.write_act.weight.grad.abs().sum() > 0
    clone = sdm.SparseDeltaMemory(_args(read_act="PReLU", write_act="PReLU", num_reads=64, num_writes=64))
    clone.load_state_dict(layer.state_dict(), strict=True)


def test_identity_activation_passes_the_scores():
    layer = _layer(seed=2, read_act="Identity").eval()
    x = torch.randn(1, 4, 32)
    seen = {}
    original = sdm.layer.functional.write_read_

    def spy(*args, **kwargs):
        seen["q_val"] = args[7]
        return original(*args, **kwargs)

    sdm.layer.functional.write_read_ = spy
    try:
        with torch.no_grad():
            layer(x)
            values, _ = sdm.product_key_topk(layer._addressing(layer.Wq_read(x), None), layer.product_key_factors,
                                             layer.num_reads)
    finally:
        sdm.layer.functional.write_read_ = original
    assert torch.equal(seen["q_val"], values)


# ---- 5. args changed after construction -------------------------------------------------------

def _spy_options(monkeypatch) -> list:
    calls = []
    original = sdm.layer.functional.write_read_

    def spy(*args, **kwargs):
        calls.append((args[1].shape[-1], args[6].shape[-1], kwargs["chunk_size"]))
        return original(*args, **kwargs)

    monkeypatch.setattr(sdm.layer.functional, "write_read_", spy)
    return calls


@pytest.mark.parametrize("field,value", [("num_reads", 3), ("num_writes", 2), ("chunk_size", 1)])
def test_changed_widths_and_chunk_size_are_honoured(monkeypatch, field, value):
    layer = _layer(seed=6).eval()
    x = torch.randn(2, 9, 32)
    calls = _spy_options(monkeypatch)
    with torch.no_grad():
        before, _ = layer(x)
        setattr(layer.args, field, value)
        after, _ = layer(x)
        fresh = sdm.SparseDeltaMemory(_args(**{field: value})).eval()
        fresh.load_state_dict(layer.state_dict())
        want, _ = fresh(x)
    assert calls[0] == (4, 6, 8)
    assert calls[1] == {"num_writes": (value, 6, 8), "num_reads": (4, value, 8), "chunk_size": (4, 6, 1)}[field]
    assert torch.equal(after, want)
    if field != "chunk_size":
        assert not torch.allclose(after, before)
    else:
        assert layer.chunk_size == 1 and rel_err(after, before) < 1e-4


def test_chunk_size_none_stays_none_and_args_round_trip():
    args = _args(chunk_size=None)
    layer = sdm.SparseDeltaMemory(args)
    assert args.chunk_size is None and layer.chunk_size == 64
    assert dataclasses.asdict(args)["chunk_size"] is None
    assert sdm.SparseDeltaMemoryArgs(**dataclasses.asdict(args)) == args
    layer.args.chunk_size = 16
    assert layer.chunk_size == 16
    layer.args.chunk_size = None
    assert layer.chunk_size == 64
    with pytest.warns(DeprecationWarning):
        old = _args(chunk_size=None, memory_block_size=32)
    assert (old.chunk_size, old.memory_block_size) == (32, None)   # 2.0.0 moves the alias and clears it
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        assert sdm.SparseDeltaMemoryArgs(**dataclasses.asdict(old)) == old
        assert copy.deepcopy(old) == old


@pytest.mark.parametrize("field,value", [("slots_per_head", 16), ("num_heads", 4), ("dim", 64), ("read_act", "ReLU"),
                                         ("product_key_factor_dims", [4, 4, 4]), ("output_gate", True),
                                         ("log_memory_access_stats", True), ("write_act_scale", 2.0)])
def test_a_change_the_layer_cannot_honour_is_refused_by_name(field, value):
    layer = _layer()
    setattr(layer.args, field, value)
    with pytest.raises(sdm.UnsupportedConfigurationError, match=rf"args\.{field} was changed from .* to "
                                                               rf"{re.escape(repr(value))} after the layer was built"):
        layer(torch.randn(1, 3, 32))


def test_replaced_args_and_in_place_list_changes_are_checked():
    layer = _layer(product_key_factor_dims=[8, 8])
    layer.args.product_key_factor_dims.append(1)   # a list changed in place
    with pytest.raises(sdm.UnsupportedConfigurationError, match=r"args\.product_key_factor_dims was changed"):
        layer(torch.randn(1, 3, 32))
    layer.args.product_key_factor_dims.pop()
    layer(torch.randn(1, 3, 32))
    layer.args = _args(dim=64, num_heads=2)
    with pytest.raises(sdm.UnsupportedConfigurationError, match=r"args\.dim was changed from 32 to 64"):
        layer(torch.randn(1, 3, 32))


def test_a_bad_value_set_after_construction_names_the_field():
    layer = _layer()
    layer.args.num_reads = 0
    with pytest.raises(ValueError, match=r"SparseDeltaMemoryArgs\.num_reads must be an int in 1\.\.256, got 0"):
        layer(torch.randn(1, 3, 32))
    layer.args.num_reads = 6
    layer.args.chunk_size = 1000
    with pytest.raises(ValueError, match=r"SparseDeltaMemoryArgs\.chunk_size must be None or an int in 1\.\.256"):
        layer(torch.randn(1, 3, 32))


# ---- 6. the cuda_graph controls (logic; CUDA: test_cuda_graphs.py) ----------------------------

def test_suspend_cuda_graphs_nests():
    assert not sdm.cuda_graph.cuda_graphs_suspended()
    with sdm.suspend_cuda_graphs():
        with sdm.suspend_cuda_graphs():
            assert sdm.cuda_graph.cuda_graphs_suspended()
        assert sdm.cuda_graph.cuda_graphs_suspended()
    assert not sdm.cuda_graph.cuda_graphs_suspended()
    with pytest.raises(RuntimeError):
        with sdm.suspend_cuda_graphs():
            raise RuntimeError
    assert not sdm.cuda_graph.cuda_graphs_suspended()


class _ReplayingGraph:
    """A stand-in for a captured graph on the CPU: replay runs the body on the static input."""

    def __init__(self, body, static_x, bank, outputs):
        self.body, self.static_x, self.bank, self.outputs = body, static_x, bank, outputs

    def replay(self):
        out, final = self.body(self.static_x, self.bank)
        self.outputs[0].copy_(out)
        if self.bank is None:
            self.outputs[1].copy_(final)


def _fake_capture(graphs, x, bank, body, pointers):
    static_x = x.clone()
    out, final = body(static_x, None if bank is None else bank.clone())   # a capture does not run the kernels
    outputs = (out.clone(), final if bank is not None else final.clone())
    entry = sdm.cuda_graph._Entry(None, static_x, outputs, pointers)
    entry.graph = _ReplayingGraph(body, static_x, bank, outputs)
    return entry


def test_layer_graphs_key_pointer_reset_and_limit_logic(monkeypatch):
    monkeypatch.setattr(sdm.cuda_graph.LayerGraphs, "_capture", _fake_capture)
    graphs = sdm.cuda_graph.LayerGraphs()
    body = lambda x, bank: (x * 2, x.sum(0) if bank is None else bank.add_(1))  # noqa: E731
    x = torch.ones(3, 2)
    out, final = graphs.run("k", (1,), x, None, body)
    assert graphs.stats == {"capture": 1}
    out2, final2 = graphs.run("k", (1,), x * 3, None, body)
    assert graphs.stats["replay"] == 1 and torch.equal(out2, x * 6) and torch.equal(final2, torch.full((2,), 9.0))
    out3, _ = graphs.run("k", (1,), x, None, body)
    assert torch.equal(out2, x * 6), "a replay never overwrites what an earlier call returned"
    graphs.run("k", (2,), x, None, body)   # the same key, another address: captured again
    assert graphs.stats["recapture"] == 1 and graphs.stats["capture"] == 2
    bank = torch.zeros(2)
    graphs.run("c", (3,), x, bank, body)
    _, returned = graphs.run("c", (3,), x, bank, body)
    assert returned is bank and torch.equal(bank, torch.full((2,), 2.0)), "a cache bank is updated in place"
    sdm.reset_cuda_graphs()
    assert graphs.entries == {}
    graphs.run("k", (2,), x, None, body)
    assert graphs.stats["capture"] == 4
    monkeypatch.setattr(sdm.cuda_graph, "MAX_GRAPHS_PER_LAYER", 1)
    graphs.run("other", (2,), x, None, body)
    assert graphs.stats["eager_full"] == 1 and "other" not in graphs.entries


def test_layer_graphs_capture_failure_runs_eager(monkeypatch):
    def failing(*args):
        raise RuntimeError("operation not permitted when stream is capturing")

    monkeypatch.setattr(sdm.cuda_graph.LayerGraphs, "_capture", failing)
    graphs = sdm.cuda_graph.LayerGraphs()
    body = lambda x, bank: (x + 1, x)  # noqa: E731
    for _ in range(2):
        out, _ = graphs.run("k", (), torch.zeros(2), None, body)
        assert torch.equal(out, torch.ones(2))
    assert graphs.stats == {"eager_capture_failed": 2} and graphs.failed == {"k"}
    sdm.reset_cuda_graphs()
    assert graphs.failed == set()


def test_cuda_graph_layer_copies_and_pickles_with_fresh_graphs():
    layer = _layer(cuda_graph=True)
    layer.graph_runner.entries["k"] = object()
    assert copy.deepcopy(layer).graph_runner.entries == {}
    buffer = io.BytesIO()
    torch.save(layer, buffer)
    buffer.seek(0)
    assert torch.load(buffer, weights_only=False).graph_runner.entries == {}
    layer.graph_runner.clear()


def test_cuda_graph_is_not_used_on_the_cpu_or_when_recording():
    layer = _layer(cuda_graph=True).eval()
    x = torch.randn(1, 4, 32)
    assert not layer._graphed(x)
    with torch.no_grad():
        layer(x)
    assert not layer.graph_runner.stats


def test_the_layer_graph_plumbing_on_the_cpu(monkeypatch):
    """The layer's side of cuda_graph (key, addresses, cache bank in place, copies out) with the
    stand-in graph above forced on the CPU: every call equals eager bitwise, a new cache is
    captured again, an args change is a new key."""
    monkeypatch.setattr(sdm.cuda_graph.LayerGraphs, "_capture", _fake_capture)
    monkeypatch.setattr(sdm.SparseDeltaMemory, "_graphed", lambda self, x3: self.args.cuda_graph)
    graphed = _layer(seed=8, cuda_graph=True).eval()
    eager = copy.deepcopy(graphed)
    eager.args = copy.deepcopy(graphed.args)
    eager.args.cuda_graph = False
    prompt, tokens = torch.randn(2, 7, 32), torch.randn(4, 2, 1, 32)
    with torch.no_grad():
        for _ in range(2):
            caches = [layer.create_kv_cache(2, 0, torch.float32) for layer in (graphed, eager)]
            for piece in (prompt, *tokens):
                (out, state), (want, want_state) = (layer(piece, cache=c) for layer, c in zip((graphed, eager), caches))
                assert torch.equal(out, want) and torch.equal(state.memory, want_state.memory)
                assert state is caches[0] and state.cache_len == want_state.cache_len
        stats = graphed.graph_runner.stats
        assert stats["capture"] + stats["recapture"] >= 3 and stats["replay"] == 2 * 3, dict(stats)
        first, _ = graphed(prompt)
        second, state = graphed(prompt)
        assert torch.equal(first, second) and torch.equal(state.memory, eager(prompt)[1].memory)
        for layer in (graphed, eager):
            layer.args.num_reads = 3
        assert torch.equal(graphed(prompt)[0], eager(prompt)[0])
        assert torch.equal(graphed(prompt)[0], eager(prompt)[0])
    assert len(graphed.graph_runner.entries) == 4   # prefill, decode, no cache, no cache with num_reads 3
