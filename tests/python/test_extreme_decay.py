"""Extreme log-decays (docs/numerics.md, "Decay factors"; issue 22 item 3).

g = -inf erases the written row (exp(-inf) = 0): finite math, which the float64 reference and
decode_step compute. g far below the normal range (-1e5 ... -1e30) is finite too. The chunked
engines must agree with the float64 reference at every chunk size, in the forward, the saving
forward and the backward (every snapshot mode), with finite gradients. Checks:
  1. the float64 reference op's own gradients at such g, by torch.autograd.gradcheck (central
     differences in float64; at g = -inf both the numeric and the analytic derivative are 0);
  2. sdm.write_read (CPU and CUDA) against the reference: readings, final bank and all six
     gradients, f32 bank < 1e-4, bf16 bank < 3e-2 (as test_autograd.py), lossy snapshots their
     documented bounds; everything finite;
  3. sdm.write_read_ (no-grad, in place) gives the functional op's readings bit for bit;
  4. the issue's example: one slot, g = [-0.1, -inf, -0.1], token 2 reads the reference's value.
"""

from __future__ import annotations

import math

import pytest
import torch

import sdm
from gpu_support import GPU_TEST, bitwise_equal
from sdm_problem import make_problem, rel_err

DEVICES = ["cpu", pytest.param("cuda", marks=GPU_TEST)]
NAMES = ("memory", "k_val", "v", "beta", "g", "q_val")
EXTREMES = (-1e5, -1e6, -1e10, -1e30, -math.inf)
# Gradient bounds of the lossy snapshot modes (docs/numerics.md, tests/cpp/engine/test_engine_backward.cpp).
SNAPSHOT_TOL = {"none": None, "bf16": 1e-2, "fp8": 8e-2, "int4": 2e-1}


def _extreme_problem(P, T, W, R, hd, slots_per_stream, G, C, seed, pattern):
    """A float64 problem (hot slots) whose g holds extreme values: "mixed" (a quarter of the
    entries drawn from EXTREMES), "edges" (-inf at the first and last token of chunks and of the
    sequence) or one value of EXTREMES at every 5th token."""
    p = make_problem(P=P, T=T, W=W, R=R, hd=hd, slots_per_stream=slots_per_stream, G=G, seed=seed)
    gen = torch.Generator().manual_seed(seed + 1)
    g = p.g.clone()
    if pattern == "mixed":
        pick = torch.rand(g.shape, generator=gen) < 0.25
        values = torch.tensor(EXTREMES, dtype=g.dtype)[torch.randint(0, len(EXTREMES), g.shape, generator=gen)]
        g = torch.where(pick, values, g)
    elif pattern == "edges":
        for t in {0, C - 1, C, 2 * C - 1, (T - 1) // C * C, T - 1}:
            if t < T:
                g[:, t, :] = -math.inf
    else:
        g[:, 2::5, :] = pattern
    p.g = g
    return p


def _grads(fn, problem, dy, d_final, **options):
    p = problem.requiring_grad()
    readings, final_bank = fn(*p.tensors(), slots_per_stream=p.slots_per_stream, **options)
    torch.autograd.backward((readings, final_bank), (dy.to(readings), d_final.to(final_bank)))
    return readings.detach(), final_bank.detach(), [t.grad for t in p.float_inputs()]


@pytest.mark.parametrize("G", [1, 2])
def test_reference_gradients_at_extreme_decay_by_finite_differences(G):
    p = make_problem(P=1, T=7, W=2, R=2, hd=3, slots_per_stream=3, G=G, seed=3)
    p.g[0, 1, 0] = -math.inf
    p.g[0, 3, -1] = -1e5
    p.g[0, 5, 0] = -1e30

    def fn(memory, k_val, v, beta, g, q_val):
        return sdm.reference.write_read(memory, p.k_idx, k_val, v, beta, g, p.q_idx, q_val,
                                        slots_per_stream=3, chunk_size=3)

    inputs = tuple(t.detach().clone().requires_grad_() for t in p.float_inputs())
    assert torch.autograd.gradcheck(fn, inputs, eps=1e-6, atol=1e-8, rtol=1e-6)


@pytest.mark.parametrize("device", DEVICES)
@pytest.mark.parametrize("bank", [torch.float32, torch.bfloat16])
@pytest.mark.parametrize("G", [1, 3])
@pytest.mark.parametrize("chunk_size", [1, 3, 64, 256])
@pytest.mark.parametrize("pattern", ["mixed", "edges", -1e5, -1e10, -math.inf])
def test_engine_matches_reference_at_extreme_decay(device, bank, G, chunk_size, pattern):
    p = _extreme_problem(P=2, T=301, W=3, R=2, hd=5, slots_per_stream=8, G=G, C=chunk_size,
                         seed=11 + chunk_size + G, pattern=pattern)
    gen = torch.Generator().manual_seed(5)
    dy = torch.randn(p.v.shape, generator=gen, dtype=torch.float64)
    d_final = torch.randn(p.memory.shape, generator=gen, dtype=torch.float64)
    # The oracle (float64 recurrence, CPU) gets the engine's inputs and rounds them as the engine does.
    inputs = p.cast(bank, torch.float32)
    ref_y, ref_bank, ref = _grads(sdm.reference.write_read, inputs, dy, d_final, chunk_size=chunk_size)
    tol = 1e-4 if bank == torch.float32 else 3e-2

    engine = inputs.to(device)
    y_plain = sdm.write_read_(engine.memory.clone(), *engine.inputs(), slots_per_stream=p.slots_per_stream,
                              chunk_size=chunk_size)
    assert torch.isfinite(y_plain).all()
    for mode, mode_tol in SNAPSHOT_TOL.items():
        y, final_bank, got = _grads(sdm.write_read, engine, dy, d_final, chunk_size=chunk_size, snapshot_quant=mode)
        assert bitwise_equal(y, y_plain), mode
        assert rel_err(y.cpu(), ref_y) < tol and rel_err(final_bank.cpu(), ref_bank) < tol, mode
        exact = mode == "none" or (mode == "bf16" and bank == torch.bfloat16)
        for name, a, b in zip(NAMES, got, ref):
            assert torch.isfinite(a).all(), (mode, name)
            assert rel_err(a.cpu(), b) < (tol if exact else mode_tol), (mode, name)


@pytest.mark.parametrize("device", DEVICES)
def test_erased_row_reads_the_reference_value(device):
    """The issue's example: k = [[0], [0], [0]], g = [-0.1, -inf, -0.1], C = 3."""
    p = make_problem(P=1, T=3, W=1, R=1, hd=4, slots_per_stream=1, G=1, seed=2)
    p.g = torch.tensor([-0.1, -math.inf, -0.1], dtype=torch.float64).view(1, 3, 1)
    ref_y, _ = sdm.reference.write_read(*p.tensors(), slots_per_stream=1, chunk_size=3)
    engine = p.cast(torch.float32).to(device)
    for chunk_size in (1, 2, 3):
        y, _ = sdm.write_read(*engine.tensors(), slots_per_stream=1, chunk_size=chunk_size)
        assert torch.isfinite(y).all(), chunk_size
        assert rel_err(y.cpu(), ref_y) < 1e-5, chunk_size
