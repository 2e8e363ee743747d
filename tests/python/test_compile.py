"""torch.compile(fullgraph=True): the functional op and the layer trace without graph breaks
(fake kernels, registered autograd) and match eager."""

from __future__ import annotations

import pytest
import torch

import sdm
from conftest import make_problem, rel_err


def _loss_and_grads(fn, tensors):
    leaves = [t.detach().clone().requires_grad_(t.is_floating_point()) for t in tensors]
    readings, final_bank = fn(*leaves)
    loss = readings.square().sum() + (final_bank * 0.5).sum()
    loss.backward()
    return readings.detach(), final_bank.detach(), [t.grad for t in leaves if t.is_floating_point()]


def test_compiled_write_read_matches_eager():
    p = make_problem(P=2, T=13, W=3, R=2, hd=6, slots_per_stream=16, G=3, dtype=torch.float32)

    def step(memory, k_idx, k_val, v, beta, g, q_idx, q_val):
        # Surrounding torch math, as in a layer, so the graph is more than the op.
        readings, final_bank = sdm.write_read(memory * 1.0, k_idx, k_val, v, torch.sigmoid(beta), g, q_idx,
                                              q_val, slots_per_stream=16, chunk_size=4)
        return readings * 2.0, final_bank

    compiled = torch.compile(step, fullgraph=True)
    eager_y, eager_bank, eager_grads = _loss_and_grads(step, p.tensors())
    y, bank, grads = _loss_and_grads(compiled, p.tensors())
    # Inductor's fused sigmoid may differ from eager's in the last bit: compare with a tolerance.
    assert rel_err(y, eager_y) < 1e-6 and rel_err(bank, eager_bank) < 1e-6
    for a, b in zip(grads, eager_grads):
        assert rel_err(a, b) < 1e-6
    # No-grad path (clone + in-place op, functionalised by the compiler).
    with torch.no_grad():
        y, bank = compiled(*p.tensors())
    assert rel_err(y, eager_y) < 1e-6 and rel_err(bank, eager_bank) < 1e-6


def _bitwise_grads(fn, tensors, loss_on):
    """Outputs of fn(*tensors) and the gradients of a loss on `loss_on` ("both", "readings" or
    "final_bank"; the other output takes no part), with fresh leaves."""
    leaves = [t.detach().clone().requires_grad_(t.is_floating_point()) for t in tensors]
    readings, final_bank = fn(*leaves)
    gen = torch.Generator().manual_seed(3)
    loss = 0
    if loss_on in ("both", "readings"):
        loss = loss + (readings.float() * torch.randn(readings.shape, generator=gen)).sum()
    if loss_on in ("both", "final_bank"):
        loss = loss + (final_bank.float() * torch.randn(final_bank.shape, generator=gen)).sum()
    loss.backward()
    return [readings.detach(), final_bank.detach()] + [t.grad for t in leaves if t.is_floating_point()]


@pytest.mark.parametrize("backend", ["aot_eager", "inductor"])
@pytest.mark.parametrize("loss_on", ["both", "readings", "final_bank"])
def test_compiled_functional_form_is_bitwise_eager(backend, loss_on):
    """sdm.write_read alone under torch.compile(fullgraph=True): its autograd Function (the saving
    forward into a buffer it allocates uninitialised, then the backward op) traces with both backends,
    and the outputs and every gradient are bitwise eager's, also with one output outside the loss.
    Awkward shapes: T % C != 0, odd hd, G = W, a bf16 bank with float32 inputs, a lossy snapshot."""
    p = make_problem(P=2, T=11, W=3, R=4, hd=5, slots_per_stream=8, G=3, dtype=torch.bfloat16,
                     input_dtype=torch.float32, seed=4)
    options = dict(slots_per_stream=8, chunk_size=4, snapshot_quant="fp8", grad_bank_fp32=True)

    def functional(*tensors):
        return sdm.write_read(*tensors, **options)

    eager = _bitwise_grads(functional, p.tensors(), loss_on)
    compiled = _bitwise_grads(torch.compile(functional, fullgraph=True, backend=backend), p.tensors(), loss_on)
    assert len(compiled) == len(eager) == 8
    for k, (got, want) in enumerate(zip(compiled, eager)):
        assert _bitwise(got, want), k


def test_compiled_functional_form_with_dynamic_shapes_matches_eager():
    """One torch.compile(dynamic=True) function serves several T: the saved buffer is sized for each
    call (the plan specialises on the sizes it reads), bitwise equal to eager."""
    def functional(*tensors):
        return sdm.write_read(*tensors, slots_per_stream=8, chunk_size=4)

    compiled = torch.compile(functional, dynamic=True, fullgraph=True)
    for T in (5, 9, 14):
        p = make_problem(P=2, T=T, W=3, R=2, hd=4, slots_per_stream=8, dtype=torch.float32)
        for got, want in zip(_bitwise_grads(compiled, p.tensors(), "both"),
                             _bitwise_grads(functional, p.tensors(), "both")):
            assert _bitwise(got, want), T


def test_compiled_layer_matches_eager():
    torch.manual_seed(0)
    layer = sdm.SparseDeltaMemory(sdm.SparseDeltaMemoryArgs(
        dim=32, num_heads=2, slots_per_head=64, num_writes=4, num_reads=4, chunk_size=8, output_gate=True,
        normalize_readings=True, key_weighted_decay=True))
    x = torch.randn(2, 20, 32)
    compiled = torch.compile(layer, fullgraph=True)

    def run(module):
        layer.zero_grad()
        out, _state = module(x)
        out.square().mean().backward()
        return out.detach(), {n: p.grad.clone() for n, p in layer.named_parameters()}

    eager_out, eager_grads = run(layer)
    out, grads = run(compiled)
    assert rel_err(out, eager_out) < 1e-5
    for name in eager_grads:
        assert rel_err(grads[name], eager_grads[name]) < 1e-4, name


def test_inplace_ops_compile_with_dynamic_shapes_and_match_eager():
    """The fake kernels of write_read_ and decode_step check shapes on the traced example without
    specialising: one dynamic graph serves several T (or stream counts), bitwise equal to eager."""
    def chunked(bank, *inputs):
        return sdm.write_read_(bank, *inputs, slots_per_stream=8)

    def decode(bank, *inputs):
        return sdm.decode_step(bank, *inputs, slots_per_stream=8)

    compiled_chunked = torch.compile(chunked, dynamic=True, fullgraph=True)
    for T in (5, 7, 9):
        p = make_problem(P=2, T=T, W=3, R=2, hd=4, slots_per_stream=8, dtype=torch.float32)
        bank, eager_bank = p.memory.clone(), p.memory.clone()
        assert torch.equal(compiled_chunked(bank, *p.inputs()), chunked(eager_bank, *p.inputs()))
        assert torch.equal(bank, eager_bank)
    compiled_decode = torch.compile(decode, dynamic=True, fullgraph=True)
    for P in (2, 3):
        d = make_problem(P=P, T=1, W=3, R=2, hd=4, slots_per_stream=8, dtype=torch.float32, decode_lead=(P,))
        bank, eager_bank = d.memory.clone(), d.memory.clone()
        assert torch.equal(compiled_decode(bank, *d.inputs()), decode(eager_bank, *d.inputs()))
        assert torch.equal(bank, eager_bank)


# ---- compiled and eager accept the same inputs (issue 22: non-contiguous inputs) -----------


def _permuted(t: torch.Tensor) -> torch.Tensor:
    """The same values with permuted strides (leading dims swapped in memory), or with a stride
    of 2 in the last dim for a 1-D or 2-D tensor: a non-contiguous input the eager ops copy."""
    if t.dim() >= 3:
        out = t.transpose(0, 1).contiguous().transpose(0, 1)
    else:
        out = torch.stack([t, t], dim=-1)[..., 0]
    assert torch.equal(out, t) and not out.is_contiguous()
    return out


def _bitwise(a: torch.Tensor, b: torch.Tensor) -> bool:
    return a.dtype == b.dtype and a.shape == b.shape and torch.equal(a.contiguous().view(torch.uint8),
                                                                     b.contiguous().view(torch.uint8))


def test_every_op_compiles_with_non_contiguous_inputs_bitwise_equal_to_eager():
    """Each op under torch.compile(fullgraph=True) with every input but an in-place bank
    non-contiguous (the eager kernels copy them; the fake kernels must accept what they accept):
    write_read with autograd (its backward, write_read_backward, through autograd), write_read
    without grad (a non-contiguous initial bank too: it is copied), write_read_, decode_step and
    product_key_topk with its backward. Bitwise equal to eager."""
    p = make_problem(P=3, T=7, W=3, R=2, hd=5, slots_per_stream=8, G=3, dtype=torch.float32)
    inputs = [_permuted(t) for t in p.inputs()]
    options = dict(slots_per_stream=8, chunk_size=3)

    def functional(memory, *inputs):
        return sdm.write_read(memory, *inputs, **options)

    compiled = torch.compile(functional, fullgraph=True)
    # Autograd: the saving forward and write_read_backward, from non-contiguous leaves' views.
    eager_y, eager_bank, eager_grads = _loss_and_grads(functional, [p.memory, *inputs])
    leaves = [t.detach().clone().requires_grad_(t.is_floating_point()) for t in (p.memory, *p.inputs())]
    nc_leaves = [leaves[0]] + [_permuted(t) for t in leaves[1:]]
    y, bank = compiled(*nc_leaves)
    (y.square().sum() + (bank * 0.5).sum()).backward()
    assert _bitwise(y, eager_y) and _bitwise(bank, eager_bank)
    for got, want in zip([t.grad for t in leaves if t.is_floating_point()], eager_grads, strict=True):
        assert _bitwise(got, want)

    with torch.no_grad():  # clone + write_read_, from a non-contiguous initial bank
        memory = _permuted(p.memory)
        assert all(_bitwise(a, b) for a, b in zip(compiled(memory, *inputs), functional(memory, *inputs)))

    def inplace(bank, *inputs):
        return sdm.write_read_(bank, *inputs, **options)

    bank, eager_bank = p.memory.clone(), p.memory.clone()
    assert _bitwise(torch.compile(inplace, fullgraph=True)(bank, *inputs), inplace(eager_bank, *inputs))
    assert _bitwise(bank, eager_bank)
    # ... and refuse the same: a bank updated in place must be contiguous, eager and compiled.
    for fn in (inplace, torch.compile(inplace, fullgraph=True)):
        with pytest.raises(Exception, match="memory must be contiguous"):
            fn(_permuted(p.memory.clone()), *inputs)

    d = make_problem(P=6, T=1, W=3, R=2, hd=5, slots_per_stream=8, dtype=torch.float32, decode_lead=(2, 3))
    d_inputs = [_permuted(t) for t in d.inputs()]

    def decode(bank, *inputs):
        return sdm.decode_step(bank, *inputs, slots_per_stream=0)

    bank, eager_bank = d.memory.clone(), d.memory.clone()
    assert _bitwise(torch.compile(decode, fullgraph=True)(bank, *d_inputs), decode(eager_bank, *d_inputs))
    assert _bitwise(bank, eager_bank)

    raw = torch.randn(4, 3, 10)

    def topk(raw):
        values, slots = sdm.product_key_topk(raw, [4, 6], 5)
        return values, slots

    results = {}
    for name, fn in (("eager", topk), ("compiled", torch.compile(topk, fullgraph=True))):
        leaf = raw.clone().requires_grad_()
        values, slots = fn(_permuted(leaf))
        (values * torch.arange(5.0)).sum().backward()
        results[name] = (values.detach(), slots, leaf.grad)
    assert all(_bitwise(a, b) for a, b in zip(results["compiled"], results["eager"]))


def test_compiled_layer_at_batch_one_matches_eager():
    """At B = 1 the layer's head split gives non-contiguous op inputs: the compiled layer traces
    (forward and backward) and matches eager."""
    torch.manual_seed(0)
    layer = sdm.SparseDeltaMemory(sdm.SparseDeltaMemoryArgs(
        dim=32, num_heads=2, slots_per_head=64, num_writes=4, num_reads=4, chunk_size=8, key_weighted_decay=True))
    x = torch.randn(1, 11, 32)
    compiled = torch.compile(layer, fullgraph=True)

    def run(module):
        layer.zero_grad()
        out, state = module(x)
        (out.square().mean() + state.memory.sum()).backward()
        return out.detach(), state.memory.detach(), {n: p.grad.clone() for n, p in layer.named_parameters()}

    eager_out, eager_bank, eager_grads = run(layer)
    out, bank, grads = run(compiled)
    assert rel_err(out, eager_out) < 1e-5 and rel_err(bank, eager_bank) < 1e-5
    for name in eager_grads:
        assert rel_err(grads[name], eager_grads[name]) < 1e-4, name
    with torch.no_grad():  # inference: the in-place op, and a decode step from a cache
        cache, eager_cache = layer.create_kv_cache(1, 0, torch.float32), layer.create_kv_cache(1, 0, torch.float32)
        assert rel_err(compiled(x, cache=cache)[0], layer(x, cache=eager_cache)[0]) < 1e-5
        assert rel_err(compiled(x[:, :1], cache=cache)[0], layer(x[:, :1], cache=eager_cache)[0]) < 1e-5
