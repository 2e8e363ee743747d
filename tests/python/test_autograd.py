"""Autograd of sdm.write_read (docs/spec.md §11).

How the gradients are checked, and why: the engine takes bfloat16 / float32 banks only, so
finite differences on it would need float32 steps, whose truncation/rounding noise (~1e-3)
hides real errors. Instead, two checks that can each fail:
  1. torch.autograd.gradcheck in float64 of the float64 oracle exposed as an op
     (torch.ops.sdm.reference_write_read with its registered backward): all six float
     inputs and the final-bank output, G = 1 and G = W. This validates the oracle's
     backward and the autograd plumbing (gradient order, final-bank gradient).
  2. the engine's autograd gradients (float32 banks) against the oracle's float64 gradients
     for the same upstream gradients, relative max error < 1e-4 (the tolerance of
     docs/spec.md for f32); bfloat16 banks < 3e-2.
"""

from __future__ import annotations

import pytest
import torch

import sdm
from conftest import make_problem, rel_err

NAMES = ("memory", "k_val", "v", "beta", "g", "q_val")


def _grads(fn, problem, grad_readings, grad_final_bank, **options):
    p = problem.requiring_grad()
    readings, final_bank = fn(*p.tensors(), slots_per_stream=p.slots_per_stream, **options)
    torch.autograd.backward((readings, final_bank),
                            (grad_readings.to(readings.dtype), grad_final_bank.to(final_bank.dtype)))
    return (readings, final_bank), [t.grad for t in p.float_inputs()]


@pytest.mark.parametrize("G", [1, 3])
def test_gradcheck_reference_op_float64(G):
    p = make_problem(P=2, T=7, W=3, R=2, hd=4, slots_per_stream=8, G=G)

    def fn(memory, k_val, v, beta, g, q_val):
        return sdm.reference.write_read(memory, p.k_idx, k_val, v, beta, g, p.q_idx, q_val,
                                        slots_per_stream=8, chunk_size=3)

    inputs = tuple(t.detach().clone().requires_grad_() for t in p.float_inputs())
    assert torch.autograd.gradcheck(fn, inputs, eps=1e-6, atol=1e-8, rtol=1e-6)


@pytest.mark.parametrize("G", [1, 4])
@pytest.mark.parametrize("chunk_size", [1, 5, 64])
@pytest.mark.parametrize("index_dtype", [torch.int32, torch.int64])
def test_engine_gradients_match_reference_float32(G, chunk_size, index_dtype):
    p = make_problem(P=3, T=19, W=4, R=3, hd=7, slots_per_stream=24, G=G, index_dtype=index_dtype,
                     beta_2d=(G == 1))
    gen = torch.Generator().manual_seed(7)
    grad_readings = torch.randn(p.v.shape, generator=gen, dtype=torch.float64)
    grad_final = torch.randn(p.memory.shape, generator=gen, dtype=torch.float64)
    (ref_y, ref_bank), ref = _grads(sdm.reference.write_read, p, grad_readings, grad_final, chunk_size=chunk_size)
    (y, bank), got = _grads(sdm.write_read, p.cast(torch.float32), grad_readings, grad_final,
                            chunk_size=chunk_size)
    assert rel_err(y, ref_y) < 1e-5 and rel_err(bank, ref_bank) < 1e-5
    for name, a, b in zip(NAMES, got, ref):
        assert a.shape == b.shape and a.dtype == torch.float32, name
        assert rel_err(a, b) < 1e-4, name


@pytest.mark.parametrize("grad_bank_fp32", [False, True])
def test_engine_gradients_match_reference_bfloat16(grad_bank_fp32):
    p = make_problem(P=2, T=17, W=4, R=4, hd=8, slots_per_stream=32, G=4)
    gen = torch.Generator().manual_seed(3)
    grad_readings = torch.randn(p.v.shape, generator=gen, dtype=torch.float64)
    grad_final = torch.randn(p.memory.shape, generator=gen, dtype=torch.float64)
    bf16 = p.cast(torch.bfloat16, torch.float32)
    (_, _), ref = _grads(sdm.reference.write_read, bf16.cast(torch.bfloat16, torch.float64).cast(torch.float64),
                         grad_readings, grad_final, chunk_size=8)
    (y, bank), got = _grads(sdm.write_read, bf16, grad_readings, grad_final, chunk_size=8,
                            grad_bank_fp32=grad_bank_fp32)
    assert y.dtype == bank.dtype == got[0].dtype == torch.bfloat16
    for name, a, b in zip(NAMES, got, ref):
        assert rel_err(a, b) < 3e-2, name


def test_final_bank_gradient_is_honoured():
    """Only the final bank carries a loss: the gradients must equal the oracle's (and be
    non-zero), which fails if the incoming final-bank gradient were dropped."""
    p = make_problem(P=2, T=11, W=3, R=2, hd=5, slots_per_stream=16, G=3)
    grad_final = torch.randn(p.memory.shape, dtype=torch.float64)
    zeros = torch.zeros(p.v.shape, dtype=torch.float64)
    _, ref = _grads(sdm.reference.write_read, p, zeros, grad_final, chunk_size=4)
    _, got = _grads(sdm.write_read, p.cast(torch.float32), zeros, grad_final, chunk_size=4)
    # q_val only shapes the readings: its gradient is exactly zero here.
    assert torch.equal(got[-1], torch.zeros_like(got[-1])) and torch.equal(ref[-1], torch.zeros_like(ref[-1]))
    for name, a, b in zip(NAMES[:-1], got[:-1], ref[:-1]):
        assert rel_err(a, b) < 1e-4, name
    # A loss on the final bank alone: no gradient flows into readings (autograd passes None).
    q = p.cast(torch.float32).requiring_grad()
    _, final_bank = sdm.write_read(*q.tensors(), slots_per_stream=16, chunk_size=4)
    (final_bank.double() * grad_final).sum().backward()
    for name, t, b in zip(NAMES[:-1], q.float_inputs()[:-1], ref[:-1]):
        assert rel_err(t.grad, b) < 1e-4, name


@pytest.mark.parametrize("loss_on", ["readings", "final_bank"])
def test_an_output_outside_the_loss_reaches_the_backward_op_as_nothing(monkeypatch, loss_on):
    """sdm.write_read's Function does not materialise the gradient of an output outside the loss: a
    final bank outside it reaches write_read_backward as None (no bank-sized zero tensor), readings
    outside it as zeros of the readings' shape (the op needs them). The backward op runs with
    validate=False (the forward checked the same indices) and the gradients are those of the loss."""
    calls = []
    backward_op = torch.ops.sdm.write_read_backward

    def spy(*args, **options):
        calls.append((args[9], args[10], options["validate"]))  # grad_readings, grad_final_bank
        return backward_op(*args, **options)

    monkeypatch.setattr(torch.ops.sdm, "write_read_backward", spy)
    p = make_problem(P=2, T=11, W=3, R=2, hd=5, slots_per_stream=16, G=3)
    gen = torch.Generator().manual_seed(9)
    grad_readings = torch.randn(p.v.shape, generator=gen, dtype=torch.float64)
    grad_final = torch.randn(p.memory.shape, generator=gen, dtype=torch.float64)
    if loss_on == "readings":
        grad_final.zero_()
    else:
        grad_readings.zero_()
    _, ref = _grads(sdm.reference.write_read, p, grad_readings, grad_final, chunk_size=4)
    q = p.cast(torch.float32).requiring_grad()
    readings, final_bank = sdm.write_read(*q.tensors(), slots_per_stream=16, chunk_size=4)
    output, upstream = (readings, grad_readings) if loss_on == "readings" else (final_bank, grad_final)
    (output.double() * upstream).sum().backward()
    ((dy, d_final, validate),) = calls
    assert validate is False
    if loss_on == "readings":
        assert d_final is None
    else:
        assert torch.equal(dy, torch.zeros_like(readings)) and d_final is not None
    for name, t, b in zip(NAMES, q.float_inputs(), ref):
        if b.abs().max() > 0:
            assert rel_err(t.grad, b) < 1e-4, name


@pytest.mark.parametrize("mode", ["none", "bf16", "fp8", "int4"])
def test_snapshot_modes_keep_readings_and_approximate_gradients(mode):
    p = make_problem(P=2, T=16, W=4, R=4, hd=8, slots_per_stream=32, G=1)
    q = p.cast(torch.float32)
    gen = torch.Generator().manual_seed(5)
    grad_readings = torch.randn(p.v.shape, generator=gen, dtype=torch.float64)
    grad_final = torch.zeros(p.memory.shape, dtype=torch.float64)
    (y0, bank0), exact = _grads(sdm.write_read, q, grad_readings, grad_final, chunk_size=8)
    (y, bank), got = _grads(sdm.write_read, q, grad_readings, grad_final, chunk_size=8, snapshot_quant=mode)
    assert torch.equal(y, y0) and torch.equal(bank, bank0), "readings never depend on the snapshot mode"
    tol = {"none": 0.0, "bf16": 2e-2, "fp8": 1e-1, "int4": 3e-1}[mode]
    for name, a, b in zip(NAMES, got, exact):
        assert torch.isfinite(a).all(), name
        assert rel_err(a, b) <= tol, name


def test_backward_is_deterministic():
    p = make_problem(P=3, T=21, W=4, R=3, hd=6, slots_per_stream=16, G=4).cast(torch.float32)
    grad_readings = torch.randn(p.v.shape, dtype=torch.float64)
    grad_final = torch.randn(p.memory.shape, dtype=torch.float64)
    _, first = _grads(sdm.write_read, p, grad_readings, grad_final, chunk_size=5)
    _, second = _grads(sdm.write_read, p, grad_readings, grad_final, chunk_size=5)
    for name, a, b in zip(NAMES, first, second):
        assert torch.equal(a, b), name
