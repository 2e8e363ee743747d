"""torch.compile(fullgraph=True): the functional op and the layer trace without graph breaks
(fake kernels, registered autograd) and match eager."""

from __future__ import annotations

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
