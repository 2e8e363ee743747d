"""The SparseDeltaMemory layer (docs/spec.md §10-I.4, Z.9)."""

from __future__ import annotations

import copy
import math
import pickle
import re
import warnings

import pytest
import torch

import sdm
import sdm.layer
from conftest import rel_err


def _args(**overrides) -> sdm.SparseDeltaMemoryArgs:
    base = dict(dim=64, num_heads=2, slots_per_head=256, num_writes=8, num_reads=8, chunk_size=16,
                backprop_on_memory=True)
    base.update(overrides)
    return sdm.SparseDeltaMemoryArgs(**base)


def _layer(seed: int = 0, **overrides) -> sdm.SparseDeltaMemory:
    torch.manual_seed(seed)
    return sdm.SparseDeltaMemory(_args(**overrides), layer_id=0)


# ---- forward + backward finite ---------------------------------------------------

SMOKE_CONFIGS = {
    "h1_minimal": dict(num_heads=1, backprop_on_memory=False),
    "gate_and_readings_norm": dict(num_heads=1, backprop_on_memory=False, output_gate=True,
                                   normalize_readings=True),
    "h4": dict(num_heads=4, backprop_on_memory=False),
    "query_batchnorm": dict(num_heads=1, backprop_on_memory=False, query_batchnorm=True),
    "key_weighted_decay": dict(num_heads=1, backprop_on_memory=False, key_weighted_decay=True),
    "learned_memory": dict(num_heads=1, backprop_on_memory=True),
}


@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16])
@pytest.mark.parametrize("config", list(SMOKE_CONFIGS))
def test_forward_backward_finite(config, dtype):
    torch.manual_seed(0)
    args = sdm.SparseDeltaMemoryArgs(dim=256, slots_per_head=1024, num_writes=8, num_reads=8, chunk_size=64,
                                     **SMOKE_CONFIGS[config])
    layer = sdm.SparseDeltaMemory(args, layer_id=0).to(dtype).train()
    x = torch.randn(2, 128, 256, dtype=dtype, requires_grad=True)
    out, state = layer(x)
    assert out.shape == x.shape and out.dtype == dtype
    assert torch.isfinite(out).all()
    out.float().square().mean().backward()
    assert torch.isfinite(x.grad).all() and x.grad.abs().sum() > 0
    for name, param in layer.named_parameters():
        assert param.grad is not None, name
        assert torch.isfinite(param.grad).all(), name
    if args.backprop_on_memory:
        assert layer.memory.grad.abs().sum() > 0


# ---- gradients of the layer's parameters ---------------------------------------------------

GRAD_CONFIG = dict(dim=8, num_heads=2, slots_per_head=16, num_writes=3, num_reads=3, chunk_size=3,
                   output_gate=True, normalize_readings=True)


@pytest.mark.parametrize("extra", [dict(key_weighted_decay=True, query_batchnorm=True),  # G = W
                                   dict(key_weighted_decay=False)])  # G = 1
def test_gradcheck_layer_parameters_float64(extra):
    """gradcheck in float64 of the whole layer, every parameter and the input, with the core
    op computed by the float64 oracle, which a float64 layer runs on the CPU (the engine takes
    bf16 / f32 banks only; its own gradients are compared with the oracle's in the next test
    and in test_autograd)."""
    torch.manual_seed(0)
    layer = sdm.SparseDeltaMemory(sdm.SparseDeltaMemoryArgs(**GRAD_CONFIG, **extra)).double().train()
    names = [name for name, _ in layer.named_parameters()]
    params = tuple(p.detach().clone().requires_grad_() for p in layer.parameters())
    x = torch.randn(2, 5, 8, dtype=torch.float64, requires_grad=True)

    def fn(x, *flat):
        return torch.func.functional_call(layer, dict(zip(names, flat)), (x,))[0]

    assert torch.autograd.gradcheck(fn, (x, *params), eps=1e-6, atol=1e-7, rtol=1e-5)


@pytest.mark.parametrize("key_weighted_decay", [False, True])
def test_engine_layer_gradients_match_reference_layer(monkeypatch, key_weighted_decay):
    """Same float32 layer, core op by the engine vs by the oracle: identical slot selections,
    so the parameter gradients differ only by the op's rounding."""
    torch.manual_seed(0)
    layer = sdm.SparseDeltaMemory(sdm.SparseDeltaMemoryArgs(**{**GRAD_CONFIG, "dim": 16, "num_writes": 4,
                                                               "num_reads": 5, "chunk_size": 4,
                                                               "key_weighted_decay": key_weighted_decay}))
    x = torch.randn(3, 11, 16)

    def grads():
        layer.zero_grad()
        layer(x)[0].square().sum().backward()
        return {name: p.grad.clone() for name, p in layer.named_parameters()}

    state = {k: v.clone() for k, v in layer.state_dict().items()}
    engine = grads()
    layer.load_state_dict(state)  # undo the BatchNorm running-stat update of the first pass
    monkeypatch.setattr(sdm.layer.functional, "write_read", sdm.reference.write_read)
    reference = grads()
    for name in engine:
        assert rel_err(engine[name], reference[name]) < 1e-4, name


# ---- properties of the forward -------------------------------------------------------------

@pytest.mark.parametrize("num_heads", [1, 2])
def test_chunk_size_invariance(num_heads):
    layer = _layer(num_heads=num_heads, normalize_readings=True, chunk_size=64).eval()
    x = torch.randn(2, 100, 64)
    with torch.no_grad():
        reference = layer(x)[0]
        for chunk_size in (1, 7, 16, 128):
            layer.chunk_size = chunk_size
            assert rel_err(layer(x)[0], reference) < 1e-4, chunk_size


def test_train_and_eval_forward_agree():
    layer = _layer(output_gate=True, normalize_readings=True)
    x = torch.randn(2, 40, 64)
    train_out, train_state = layer.train()(x)  # saving forward, autograd records
    with torch.no_grad():
        eval_out, eval_state = layer.eval()(x)  # no-grad forward
    assert torch.equal(train_out.detach(), eval_out)
    assert torch.equal(train_state.memory.detach(), eval_state.memory)
    assert train_state.cache_len == eval_state.cache_len == 40


def test_eval_batchnorm_uses_running_statistics():
    layer = _layer(query_batchnorm=True)
    x = torch.randn(3, 20, 64)
    layer.train()(x)  # updates the running statistics
    with torch.no_grad():
        layer.eval()
        together = layer(x)[0]
        alone = layer(x[1:2])[0]
        train_alone = layer.train()(x[1:2])[0]
    assert rel_err(alone, together[1:2]) < 1e-5
    assert rel_err(train_alone, together[1:2]) > 1e-3, "train mode must use batch statistics"


@pytest.mark.parametrize("num_heads", [1, 2])
def test_prefill_then_decode_equals_full_forward(num_heads):
    """docs/spec.md §9 / I.3: f32, prefill 24 tokens then 16 single steps == one full forward."""
    layer = _layer(num_heads=num_heads, output_gate=True, normalize_readings=True).eval()
    x = torch.randn(2, 40, 64)
    with torch.no_grad():
        full, state = layer(x)
        cache = layer.create_kv_cache(2, 0, torch.float32, "cpu")
        pieces = [layer(x[:, :24], cache=cache)[0]]
        assert cache.cache_len == 24
        pieces += [layer(x[:, t:t + 1], cache=cache)[0] for t in range(24, 40)]
        assert cache.cache_len == 40
    assert rel_err(torch.cat(pieces, dim=1), full) < 1e-4
    assert rel_err(cache.memory, state.memory) < 1e-4


def test_prefill_in_pieces_and_bfloat16_cache():
    layer = _layer(key_weighted_decay=True).eval()
    x = torch.randn(2, 30, 64)
    with torch.no_grad():
        full = layer(x)[0]
        cache = layer.create_kv_cache(2, 0, torch.float32)
        pieces = torch.cat([layer(x[:, :13], cache=cache)[0], layer(x[:, 13:30], cache=cache)[0]], dim=1)
        bf16_cache = layer.create_kv_cache(2, 0, torch.bfloat16)
        bf16 = torch.cat([layer(x[:, :20], cache=bf16_cache)[0]] +
                         [layer(x[:, t:t + 1], cache=bf16_cache)[0] for t in range(20, 30)], dim=1)
    assert rel_err(pieces, full) < 1e-4
    assert bf16_cache.bank.dtype == torch.bfloat16
    assert rel_err(bf16, full) < 3e-2


def test_create_kv_cache():
    layer = _layer(num_heads=2)
    cache = layer.create_kv_cache(3, 0, torch.float32)
    assert isinstance(cache, sdm.SDMLayerState) and sdm.SparseDeltaMemoryCache is sdm.SDMLayerState
    assert cache.memory.shape == (3 * 2 * 256, 32) and cache.cache_len == 0
    assert cache[0] is cache.memory and cache.bank is cache.memory and len(cache) == 1
    assert torch.equal(cache.memory, layer.memory.detach().repeat(3, 1))
    cache.memory.add_(1)
    assert not torch.equal(cache.memory[:512], layer.memory.detach()), "the cache owns a copy"
    cache.reset()
    assert cache.cache_len == 0 and cache.memory.abs().sum() == 0
    no_memory = _layer(backprop_on_memory=False).create_kv_cache(2, 5, torch.bfloat16)
    assert no_memory.memory.abs().sum() == 0 and no_memory.cache_len == 5
    start = torch.randn(2 * 2 * 256, 32)
    from_state = layer.create_kv_cache(2, 7, torch.bfloat16, initial_memory=start)
    assert torch.equal(from_state.memory, start.bfloat16()) and from_state.cache_len == 7
    from_state.memory.zero_()
    assert start.abs().sum() > 0, "initial_memory is copied"
    with pytest.raises(ValueError, match=r"initial_memory must be \[1024, 32\] .*got \(3, 32\)"):
        layer.create_kv_cache(2, 0, torch.float32, initial_memory=torch.zeros(3, 32))
    with pytest.raises(TypeError, match="dtype must be torch.bfloat16 or torch.float32"):
        layer.create_kv_cache(1, 0, torch.float16)
    with pytest.raises(ValueError, match=r"the cache's memory is \(1536, 32\), expected \(1024, 32\) for batch 2"):
        with torch.no_grad():
            layer(torch.randn(2, 3, 64), cache=cache)


def test_training_from_a_cache_continues_the_state():
    """A differentiable call from a cache: the gradients are those of the same tokens after the
    cached prefix (the cache's bank is a detached starting point), and the cache advances."""
    layer = _layer()
    x = torch.randn(1, 12, 64)
    with torch.no_grad():
        full = layer(x)[0]
        cache = layer.create_kv_cache(1, 0, torch.float32)
        layer(x[:, :5], cache=cache)
    start = cache.memory.clone()
    tail = x[:, 5:].clone().requires_grad_()
    out, state = layer(tail, cache=cache)
    assert state is cache and cache.cache_len == 12 and not cache.memory.requires_grad
    assert rel_err(out.detach(), full[:, 5:]) < 1e-4
    out.square().sum().backward()
    assert torch.isfinite(tail.grad).all() and tail.grad.abs().sum() > 0
    fresh = layer.create_kv_cache(1, 5, torch.float32, initial_memory=start)
    again = tail.detach().clone().requires_grad_()
    layer(again, cache=fresh)[0].square().sum().backward()
    assert torch.equal(again.grad, tail.grad)


def test_two_dimensional_input():
    layer = _layer(output_gate=True).eval()
    x = torch.randn(3, 20, 64)
    freqs_cis = torch.zeros(20, 16)
    with torch.no_grad():
        out3 = layer(x)[0]
        out2 = layer(x.reshape(60, 64), freqs_cis=freqs_cis)[0]
    assert out2.shape == (60, 64)
    assert torch.equal(out2, out3.reshape(60, 64))
    with pytest.raises(ValueError, match="needs freqs_cis"):
        layer(x.reshape(60, 64))
    with pytest.raises(ValueError, match="not a multiple of freqs_cis rows"):
        layer(x.reshape(60, 64), freqs_cis=torch.zeros(7, 16))


def test_same_seed_same_parameters():
    a, b, c = _layer(seed=3), _layer(seed=3), _layer(seed=4)
    for (name, pa), (_, pb), (_, pc) in zip(a.named_parameters(), b.named_parameters(), c.named_parameters()):
        assert torch.equal(pa, pb), name
        if name not in ("readings_norm.weight", "readings_norm.bias") and "bias" not in name:
            assert not torch.equal(pa, pc), name


def test_init_weights_follows_spec():
    layer = _layer(dim=64, num_heads=2, A_init_range=(1.0, 16.0))
    sigma = 64 ** -0.5
    for linear in (layer.Wq_read, layer.Wk_write, layer.Wv_write, layer.Wo):
        assert linear.weight.abs().max() <= 3 * sigma and torch.equal(linear.bias, torch.zeros_like(linear.bias))
        assert abs(linear.weight.std().item() - sigma) < 0.25 * sigma
    A = layer.A_log.exp()
    assert ((A >= 1.0 - 1e-6) & (A <= 16.0 + 1e-5)).all()
    dt = torch.nn.functional.softplus(layer.dt_bias)
    assert ((dt >= 1e-3 * (1 - 1e-5)) & (dt <= 0.1 * (1 + 1e-5))).all()
    assert layer.memory.abs().max() <= 3 * sigma and layer.memory.abs().sum() > 0
    assert layer.A_log._no_weight_decay and layer.dt_bias._no_weight_decay
    assert layer.memory._is_memory_bank
    layer.init_weights(init_std=0.02, factor=2.0)
    assert layer.Wo.weight.abs().max() <= 0.03


def test_state_dict_round_trip():
    a = _layer(seed=1, query_batchnorm=True, output_gate=True, normalize_readings=True)
    a.train()(torch.randn(2, 9, 64))  # non-trivial BatchNorm statistics
    b = _layer(seed=2, query_batchnorm=True, output_gate=True, normalize_readings=True)
    b.load_state_dict(a.state_dict(), strict=True)
    x = torch.randn(2, 17, 64)
    with torch.no_grad():
        assert torch.equal(a.eval()(x)[0], b.eval()(x)[0])


def _spec_state_dict(D, H, sph, output_gate, batchnorm, readings_norm, learned_memory):
    """A state dict written from docs/spec.md §10's table (names and shapes), not from the module."""
    n = math.isqrt(sph)
    key_size, hd = H * 2 * n, D // H
    shapes = {
        "Wq_read.weight": (key_size, D), "Wq_read.bias": (key_size,),
        "Wk_write.weight": (key_size, D), "Wk_write.bias": (key_size,),
        "Wv_write.weight": (D, D), "Wv_write.bias": (D,),
        "a_proj.weight": (H, D), "a_proj.bias": (H,),
        "b_proj.weight": (H, D), "b_proj.bias": (H,),
        "A_log": (H,), "dt_bias": (H,),
        "Wo.weight": (D, D), "Wo.bias": (D,),
    }
    if output_gate:
        shapes.update({"Wog.weight": (D, D), "Wog.bias": (D,)})
    if batchnorm:
        for bn in ("query_bn", "key_bn"):
            shapes.update({f"{bn}.weight": (key_size,), f"{bn}.bias": (key_size,),
                           f"{bn}.running_mean": (key_size,), f"{bn}.running_var": (key_size,)})
    if learned_memory:
        shapes["memory"] = (H * sph, hd)
    if readings_norm:
        shapes.update({"readings_norm.weight": (hd,), "readings_norm.bias": (hd,)})
    state = {name: torch.randn(shape) for name, shape in shapes.items()}
    if batchnorm:
        for bn in ("query_bn", "key_bn"):
            state[f"{bn}.running_var"] = state[f"{bn}.running_var"].abs()
            state[f"{bn}.num_batches_tracked"] = torch.tensor(7)
    return state


@pytest.mark.parametrize("H,output_gate,batchnorm,readings_norm,learned_memory", [
    (1, False, False, False, False),
    (1, True, True, True, True),
    (2, False, False, False, True),
    (2, True, True, True, True),
    (2, True, False, True, False),
])
def test_spec_state_dict_loads_strict(H, output_gate, batchnorm, readings_norm, learned_memory):
    D, sph = 32, 64
    state = _spec_state_dict(D, H, sph, output_gate, batchnorm, readings_norm, learned_memory)
    layer = sdm.SparseDeltaMemory(sdm.SparseDeltaMemoryArgs(
        dim=D, num_heads=H, slots_per_head=sph, num_writes=4, num_reads=4, output_gate=output_gate,
        query_batchnorm=batchnorm, normalize_readings=readings_norm, backprop_on_memory=learned_memory))
    layer.load_state_dict(state, strict=True)
    for name, value in layer.state_dict().items():
        assert torch.equal(value, state[name]), name
    if learned_memory and H == 1:
        assert layer.memory.shape == (sph, D)


# ---- configuration ------------------------------------------------------------------------

def test_defaults_follow_spec_z9():
    args = sdm.SparseDeltaMemoryArgs()
    assert (args.num_writes, args.num_reads, args.chunk_size) == (64, 64, None)  # None kept, as 2.0.0
    assert args.effective_chunk_size == 64
    assert args.read_act == args.write_act == "Softmax" and args.snapshot_quant == "none"
    assert args.grad_bank_fp32 is False and args.A_init_range == (0.0, 16.0)


def test_memory_block_size_alias():
    with pytest.warns(DeprecationWarning, match="memory_block_size is deprecated"):
        args = sdm.SparseDeltaMemoryArgs(memory_block_size=32)
    assert args.chunk_size == 32
    with pytest.warns(DeprecationWarning):
        assert sdm.SparseDeltaMemoryArgs(chunk_size=32, memory_block_size=32).chunk_size == 32
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        assert sdm.SparseDeltaMemoryArgs(chunk_size=16).chunk_size == 16
    with pytest.raises(ValueError, match=r"chunk_size \(16\) and its deprecated alias memory_block_size \(32\)"):
        with warnings.catch_warnings():
            warnings.simplefilter("ignore", DeprecationWarning)
            sdm.SparseDeltaMemoryArgs(chunk_size=16, memory_block_size=32)


@pytest.mark.parametrize("overrides,error,message", [
    (dict(dim=66, num_heads=4), ValueError, r"dim \(66\) must be divisible by num_heads \(4\)"),
    (dict(slots_per_head=200), ValueError, r"slots_per_head \(200\) must be a perfect square"),
    (dict(dim=-1), ValueError, "dim must be set"),
    (dict(read_act="Swishy"), ValueError, r"read_act: unknown activation 'Swishy'"),
    (dict(write_act="Linear"), ValueError, r"write_act: torch\.nn\.Linear needs constructor arguments"),
    (dict(slots_per_head=1024, num_writes=300), ValueError, r"num_writes must be an int in 1\.\.256, got 300"),
    (dict(chunk_size=512), ValueError, r"chunk_size must be None or an int in 1\.\.256, got 512"),
])
def test_bad_layer_arguments(overrides, error, message):
    with pytest.raises(error, match=message):
        sdm.SparseDeltaMemory(_args(**overrides))


def test_bad_snapshot_mode():
    with pytest.raises(ValueError, match=r"snapshot_quant must be one of none, bf16, fp8, int4; got 'fp16'"):
        _args(snapshot_quant="fp16")


@pytest.mark.parametrize("act", ["l2_normalize", "ReLU", "Sigmoid"])
def test_other_activations_run(act):
    layer = _layer(read_act=act, write_act=act)
    out, _ = layer(torch.randn(2, 9, 64))
    out.sum().backward()
    assert torch.isfinite(out).all() and torch.isfinite(layer.Wq_read.weight.grad).all()


def test_snapshot_quant_and_grad_bank_fp32_reach_the_op():
    """Each option changes what it should and nothing else: fp8 snapshots change the gradients
    (restored rows approximated) but not the readings; grad_bank_fp32 (bf16 bank, T = 16 over
    chunks of 4: the bank gradient crosses chunks) changes the memory gradient by rounding only,
    and not the forward."""
    x = torch.randn(2, 16, 64)
    outs = {}
    for quant, grad_bank_fp32 in (("none", False), ("fp8", False), ("none", True)):
        layer = _layer(snapshot_quant=quant, grad_bank_fp32=grad_bank_fp32, chunk_size=4).bfloat16()
        out, _ = layer(x.bfloat16())
        out.float().square().sum().backward()
        assert layer.memory.grad.dtype == torch.bfloat16 and torch.isfinite(layer.memory.grad).all()
        # Read weights' gradients use the restored rows (docs/spec.md §4-8), which fp8 approximates.
        outs[quant, grad_bank_fp32] = (out.detach(), layer.Wq_read.weight.grad.clone(), layer.memory.grad.clone())
    plain, fp8, fp32_rows = outs["none", False], outs["fp8", False], outs["none", True]
    assert torch.equal(plain[0], fp8[0]), "readings never depend on the snapshot mode"
    assert not torch.equal(plain[1], fp8[1]), "fp8 snapshots approximate the restored rows"
    assert rel_err(fp8[1], plain[1]) < 0.2
    assert torch.equal(plain[0], fp32_rows[0]), "grad_bank_fp32 does not change the forward"
    assert not torch.equal(plain[2], fp32_rows[2]), "grad_bank_fp32 keeps the bank gradient rows in float32"
    assert rel_err(fp32_rows[2], plain[2]) < 3e-2


def test_memory_stats_logging():
    layer = _layer(log_memory_norms=True, log_memory_access_stats=True)
    layer(torch.randn(2, 8, 64))
    assert layer.memory_stats["memory_norm"] > 0
    assert 0 < layer.memory_stats["written_fraction"] <= 1


# ---- the args validate themselves; inputs, pickling and dtypes ------------------------------

@pytest.mark.parametrize("overrides,message", [
    (dict(num_writes=2.5), r"SparseDeltaMemoryArgs\.num_writes must be an int in 1\.\.256, got 2\.5"),
    (dict(num_reads=0), r"SparseDeltaMemoryArgs\.num_reads must be an int in 1\.\.256, got 0"),
    (dict(num_heads=0), r"SparseDeltaMemoryArgs\.num_heads must be a positive int, got 0"),
    (dict(dim=66, num_heads=4), r"dim \(66\) must be divisible by num_heads \(4\)"),
    (dict(dim=64.0), r"SparseDeltaMemoryArgs\.dim must be a positive int"),
    (dict(slots_per_head=200), r"slots_per_head \(200\) must be a perfect square n\*n .*196 or 225"),
    (dict(slots_per_head="256"), r"SparseDeltaMemoryArgs\.slots_per_head must be a positive int, got '256'"),
    (dict(slots_per_head=64, product_key_factor_dims=[4, 4]), r"product_key_factor_dims = \[4, 4\] address 16 slots"),
    (dict(product_key_factor_dims=[16, 0, 16]),
     r"SparseDeltaMemoryArgs\.product_key_factor_dims: factor_dims\[1\] must be in 1\.\.4294967295, got 0"),
    (dict(product_key_factor_dims="16x16"), r"product_key_factor_dims must be a sequence of ints"),
    (dict(chunk_size=0), r"SparseDeltaMemoryArgs\.chunk_size must be None or an int in 1\.\.256, got 0"),
    (dict(read_act="Swishy"), r"SparseDeltaMemoryArgs\.read_act: unknown activation 'Swishy'"),
    (dict(write_act=3), r"SparseDeltaMemoryArgs\.write_act must be an activation name"),
    (dict(read_act_scale=float("nan")), r"SparseDeltaMemoryArgs\.read_act_scale must be a finite number"),
    (dict(norm_eps=0.0), r"SparseDeltaMemoryArgs\.norm_eps must be a positive number, got 0\.0"),
    (dict(A_init_range=(2.0, 1.0)), r"SparseDeltaMemoryArgs\.A_init_range must be \(min, max\)"),
    (dict(output_gate="yes"), r"SparseDeltaMemoryArgs\.output_gate must be a bool, got 'yes'"),
    (dict(cuda_graph=1), r"SparseDeltaMemoryArgs\.cuda_graph must be a bool, got 1"),
    (dict(num_heads=8, slots_per_head=2**28), r"num_heads \* slots_per_head = 2147483648 bank rows"),
])
def test_args_validate_every_field_at_construction(overrides, message):
    with pytest.raises(ValueError, match=message):
        _args(**overrides)


def test_args_accept_every_field_of_sparse_delta_memory_2_0_0():
    fields = dict(dim=64, num_writes=8, num_reads=8, slots_per_head=256, chunk_size=16, read_act="Softmax",
                  write_act="l2_normalize", read_act_scale=2.0, write_act_scale=1.0, normalize_readings=True,
                  norm_eps=1e-5, dt_bias_init=0.0, A_init_range=(1.0, 8.0), backprop_on_memory=True,
                  output_gate=True, query_batchnorm=False, log_memory_access_stats=False, log_memory_norms=False,
                  num_heads=2, key_weighted_decay=True, snapshot_quant="none", cuda_graph=True,
                  grad_bank_fp32=False, product_key_factor_dims=[4, 8, 8])
    args = sdm.SparseDeltaMemoryArgs(**fields)
    assert all(getattr(args, name) == value for name, value in fields.items())
    positional = sdm.SparseDeltaMemoryArgs(64, 8, 8, 256)  # 2.0.0's field order
    assert (positional.num_writes, positional.num_reads, positional.slots_per_head) == (8, 8, 256)


@pytest.mark.parametrize("x,error,message", [
    (torch.randn(2, 0, 64), ValueError, r"x of shape \(2, 0, 64\) has no tokens"),
    (torch.randn(0, 5, 64), ValueError, r"x of shape \(0, 5, 64\) has no sequences"),
    (torch.randn(2, 5, 32), ValueError, r"x's last dimension must be dim = 64, got x of shape \(2, 5, 32\)"),
    (torch.randn(2, 5, 64, 1), ValueError, r"x must be \[B, T, D\] or \[B\*T, D\], got shape \(2, 5, 64, 1\)"),
    (torch.ones(2, 5, 64, dtype=torch.int64), TypeError, "x must be a floating-point tensor, got torch.int64"),
])
def test_bad_inputs_name_what_was_passed(x, error, message):
    with pytest.raises(error, match=message):
        _layer()(x)


@pytest.mark.parametrize("layer_dtype, x_dtype", [(torch.float32, torch.float64), (torch.float32, torch.bfloat16),
                                                   (torch.bfloat16, torch.float32), (torch.float32, torch.float16)])
def test_x_of_another_dtype_than_the_layer_is_refused_by_name(layer_dtype, x_dtype):
    layer = _layer().to(layer_dtype)
    message = (f"x is {x_dtype} but the layer's parameters are {layer_dtype}; pass x in {layer_dtype} or convert "
               f"the layer (layer.to({x_dtype}))")
    for x in (torch.randn(2, 5, 64, dtype=x_dtype), torch.randn(10, 64, dtype=x_dtype)):
        with pytest.raises(TypeError, match=re.escape(message)):
            layer(x, freqs_cis=torch.zeros(5, 1) if x.dim() == 2 else None)
    with torch.autocast("cpu", dtype=torch.bfloat16):  # autocast casts for the projections: accepted
        out, _ = _layer()(torch.randn(2, 5, 64))
    assert torch.isfinite(out).all()


@pytest.mark.parametrize("device", ["meta", pytest.param("cuda", marks=pytest.mark.skipif(
    not torch.cuda.is_available(), reason="no CUDA device"))])
@pytest.mark.parametrize("mode", ["prefill", "decode", "train"])
def test_a_cache_on_another_device_than_the_layer_is_refused_by_name(device, mode):
    layer = _layer()
    cache = layer.create_kv_cache(2, 0, torch.float32, device=device)
    x = torch.randn(2, 1 if mode == "decode" else 5, 64, requires_grad=mode == "train")
    with torch.set_grad_enabled(mode == "train"):
        with pytest.raises(ValueError, match=re.escape(
                f"the cache's memory is on {device}, but the layer computes on cpu (x and the layer's parameters); "
                f"build the cache there (create_kv_cache(..., device='cpu')) or move it "
                f"(cache.memory = cache.memory.to('cpu'))")):
            layer(x, cache=cache)
    assert cache.cache_len == 0


def test_create_kv_cache_refuses_bad_sizes_by_name():
    layer = _layer()
    for bsz, error in ((2.5, TypeError), (True, TypeError), ("2", TypeError), (None, TypeError),
                       (-1, ValueError), (0, ValueError)):
        shown = f"{type(bsz).__name__} {bsz!r}" if error is TypeError else str(bsz)
        with pytest.raises(error, match=re.escape(f"create_kv_cache: bsz (sequences) must be an int >= 1, got {shown}")):
            layer.create_kv_cache(bsz, 0, torch.float32)
    for seq_len, error in ((-5, ValueError), (-1, ValueError), (2.5, TypeError), (False, TypeError)):
        shown = f"{type(seq_len).__name__} {seq_len!r}" if error is TypeError else str(seq_len)
        with pytest.raises(error, match=re.escape(f"create_kv_cache: seq_len (tokens already consumed) must be an int "
                                                  f">= 0, got {shown}")):
            layer.create_kv_cache(2, seq_len, torch.float32)
    with pytest.raises(TypeError, match="create_kv_cache: initial_memory must be a tensor or None, got list"):
        layer.create_kv_cache(2, 0, torch.float32, initial_memory=[0.0])
    assert layer.create_kv_cache(torch.tensor(2), 0, torch.float32).memory.shape == (1024, 32)  # an index-like int
    with pytest.raises(TypeError, match="cache must be an sdm.SDMLayerState .* got Tensor"):
        layer(torch.randn(2, 5, 64), cache=torch.zeros(1024, 32))


def test_a_state_dict_loads_into_permuted_factor_dims_and_gives_another_model():
    """Documented, not a bug (docs/layer.md, as in 2.0.0): parameter shapes do not record the
    factor order, so [5, 6] loads into [6, 5] with strict=True and addresses other slots."""
    torch.manual_seed(0)
    saved = sdm.SparseDeltaMemory(_args(slots_per_head=30, num_writes=4, num_reads=4, product_key_factor_dims=[5, 6]))
    permuted = sdm.SparseDeltaMemory(_args(slots_per_head=30, num_writes=4, num_reads=4,
                                           product_key_factor_dims=[6, 5]))
    result = permuted.load_state_dict(saved.state_dict(), strict=True)
    assert not result.missing_keys and not result.unexpected_keys
    x = torch.randn(2, 7, 64)
    with torch.no_grad():
        assert not torch.allclose(permuted(x)[0], saved(x)[0])


def test_layer_pickles_saves_and_deep_copies(tmp_path):
    layer = _layer(read_act="l2_normalize", write_act="Softmax", write_act_scale=3.0, query_batchnorm=True).eval()
    x = torch.randn(2, 9, 64)
    with torch.no_grad():
        want = layer(x)[0]
        torch.save(layer, tmp_path / "layer.pt")
        loaded = torch.load(tmp_path / "layer.pt", weights_only=False)
        for other in (loaded, pickle.loads(pickle.dumps(layer)), copy.deepcopy(layer)):
            assert torch.equal(other(x)[0], want)


def test_float64_layer_runs_the_reference_and_other_dtypes_are_refused():
    layer = _layer(output_gate=True, normalize_readings=True)
    x = torch.randn(2, 11, 64)
    with torch.no_grad():
        want, want_state = layer(x)
        double = copy.deepcopy(layer).double()
        got, state = double(x.double())
    assert got.dtype == state.memory.dtype == torch.float64
    assert rel_err(got, want.double()) < 1e-5 and rel_err(state.memory, want_state.memory.double()) < 1e-5
    out, _ = double(x.double().requires_grad_())
    out.sum().backward()
    assert double.memory.grad.dtype == torch.float64 and double.memory.grad.abs().sum() > 0
    with torch.no_grad():
        cache = double.create_kv_cache(2, 0, torch.float64)
        steps = torch.cat([double(x.double()[:, :6], cache=cache)[0]] +
                          [double(x.double()[:, t:t + 1], cache=cache)[0] for t in range(6, 11)], dim=1)
    assert rel_err(steps, got) < 1e-10
    with pytest.raises(TypeError, match=r"the bank would be torch.float16 \(the dtype of the layer's memory\); the layer "
                                        r"supports float32 and bfloat16 \(and float64 on the CPU\)"):
        copy.deepcopy(layer).half()(x.half())
    no_memory = _layer(backprop_on_memory=False).half()
    with pytest.raises(TypeError, match=r"the bank would be torch.float16 \(the dtype of the layer's projections\)"):
        no_memory(x.half())


# ---- the drop-in interface of sparse-delta-memory 2.0.0 ------------------------------------

def test_forward_takes_mask_and_freqs_cis_and_returns_the_state():
    layer = _layer(backprop_on_memory=False).eval()
    x = torch.randn(2, 10, 64)
    with torch.no_grad():
        out, state = layer(x, None, None, None)
        masked, _ = layer(x, freqs_cis=None, mask=torch.ones(10, 10))
        bank = torch.zeros(2 * 2 * 256, 32)
        readings_state = layer.create_kv_cache(2, 0, torch.float32)
        layer(x, cache=readings_state)
    assert torch.equal(out, masked)
    assert isinstance(state, sdm.SDMLayerState) and state.cache_len == 10
    assert torch.equal(state.memory, readings_state.memory) and not torch.equal(state.memory, bank)


def test_cuda_graph_option_is_accepted_and_changes_nothing():
    """On the CPU (CUDA graphs are CUDA only) the flag is kept in the args and the layer computes
    the same with it: the output, the state and every gradient bitwise."""
    x = torch.randn(2, 12, 64)
    runs = {}
    for cuda_graph in (False, True):
        layer = _layer(seed=5, cuda_graph=cuda_graph)
        assert layer.args.cuda_graph is cuda_graph
        out, state = layer(x)
        (out.square().sum() + state.memory.sum()).backward()
        runs[cuda_graph] = (out.detach(), state.memory.detach(), {n: p.grad for n, p in layer.named_parameters()})
    (out, bank, grads), (graph_out, graph_bank, graph_grads) = runs[False], runs[True]
    assert torch.equal(out, graph_out) and torch.equal(bank, graph_bank)
    assert grads.keys() == graph_grads.keys()
    for name in grads:
        assert torch.equal(grads[name], graph_grads[name]), name


@pytest.mark.parametrize("factors,sph", [([4, 4, 4], 64), ([64], 64), ([2, 8, 2, 2], 64), ([3, 7], 21)])
def test_any_factor_list_addresses_the_bank(factors, sph):
    layer = _layer(slots_per_head=sph, product_key_factor_dims=factors, num_writes=5, num_reads=7,
                   query_batchnorm=True, backprop_on_memory=True)
    assert layer.Wk_write.out_features == 2 * sum(factors) and layer.key_bn.num_features == 2 * sum(factors)
    state = {name: torch.randn_like(value) if value.is_floating_point() else value
             for name, value in layer.state_dict().items()}
    state["query_bn.running_var"] = state["query_bn.running_var"].abs()
    state["key_bn.running_var"] = state["key_bn.running_var"].abs()
    other = _layer(seed=9, slots_per_head=sph, product_key_factor_dims=factors, num_writes=5, num_reads=7,
                   query_batchnorm=True, backprop_on_memory=True)
    other.load_state_dict(state, strict=True)
    x = torch.randn(2, 9, 64)
    out, final = other.eval()(x)
    assert torch.isfinite(out).all() and final.memory.shape == (2 * 2 * sph, 32)
    raw = other.Wk_write(x)
    raw = other.key_bn(raw.reshape(18, -1)).view(2, 9, 2, sum(factors)).transpose(1, 2)
    _, slots = sdm.product_key_topk(raw, factors, 5)
    assert slots.max() < sph and (slots[..., 1:] > slots[..., :-1]).all()


@pytest.mark.parametrize("output_gate", [False, True])
def test_the_layers_outputs_are_never_views(output_gate):
    """FSDP2 hooks a wrapped module's outputs; an in-place op on a view of one (`out += x`) drops
    the hook (wrong gradients, tests/python/test_distributed.py). Every path returns tensors of
    their own: [B, T, D] and [B*T, D] inputs, training and inference, with and without a cache."""
    layer = _layer(output_gate=output_gate)
    x = torch.randn(2, 5, 64, requires_grad=True)
    calls = {
        "train 3-D": lambda: layer(x),
        "train 2-D": lambda: layer(x.reshape(10, 64), freqs_cis=torch.zeros(5, 4)),
        "train from a cache": lambda: layer(x, cache=layer.create_kv_cache(2, 0, torch.float32)),
    }
    with torch.no_grad():
        calls["inference 3-D"] = lambda: layer(x)
        calls["decode"] = lambda: layer(x[:, :1], cache=layer.create_kv_cache(2, 0, torch.float32))
    for name, call in calls.items():
        with torch.set_grad_enabled(name.startswith("train")):
            out, state = call()
        assert out._base is None and state.memory._base is None, name
        assert out.shape == (x.shape if "2-D" not in name else (10, 64)) or name == "decode", name
    # The in-place residual gives the out-of-place one's gradients.
    grads = []
    for inplace in (False, True):
        x.grad = None
        out, _ = layer(x)
        if inplace:
            out += x
        else:
            out = out + x
        out.square().sum().backward()
        grads.append(x.grad.clone())
    assert torch.equal(grads[0], grads[1])


def test_a_bank_sharded_by_fsdp2_is_refused_by_name_outside_the_wrapped_forward(tmp_path):
    """Outside the forward of the module fully_shard wraps, the bank is a DTensor: the layer says
    so (and what to do) instead of mixing tensors; unsharded, it works (one gloo rank)."""
    import torch.distributed as dist
    from torch.distributed.fsdp import fully_shard

    dist.init_process_group("gloo", init_method=f"file://{tmp_path / 'store'}", rank=0, world_size=1)
    try:
        layer = sdm.SparseDeltaMemory(sdm.SparseDeltaMemoryArgs(dim=16, num_heads=2, slots_per_head=16,
                                                                num_writes=2, num_reads=2))
        layer.init_weights()
        fully_shard(layer)
        with pytest.raises(RuntimeError, match=r"create_kv_cache: the memory bank is sharded \(an FSDP2 DTensor\)"):
            layer.create_kv_cache(bsz=1, seq_len=0, dtype=torch.float32)
        y, _ = layer(torch.randn(1, 5, 16))  # through the wrapped forward: unsharded there
        assert y.shape == (1, 5, 16)
        layer.unshard()
        assert layer.create_kv_cache(bsz=1, seq_len=0, dtype=torch.float32).memory.shape == (32, 8)
        layer.reshard()
    finally:
        dist.destroy_process_group()
