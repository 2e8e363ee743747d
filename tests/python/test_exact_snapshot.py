"""The exact snapshot (docs/spec.md §4): in eager calls sdm.write_read counts the write groups
(torch.ops.sdm.write_groups_count, one host sync) and sizes `saved` for exactly that many snapshot
rows; traced calls keep the worst case. Readings, final bank and every gradient are bitwise those of
the worst-case buffer; the exact size is the worst case less the unused rows; a buffer planned for
fewer rows than the call's groups is refused by name with nothing written; the ops pass opcheck.
The `gpu` cases run the same on CUDA banks (the device count equals the host count; under
validate=False a too-small CUDA buffer is not refused but nothing is written past it).
"""

from __future__ import annotations

import pytest
import torch

import sdm
from gpu_support import bitwise_equal, gpu_problem
from sdm._ops import new_saved

CASES = {  # (problem kwargs, chunk, masked)
    "odd_hd_masked": (dict(P=2, T=11, W=3, R=4, hd=5, slots_per_stream=8, G=3), 4, True),
    "long_groups": (dict(P=2, T=19, W=4, R=2, hd=6, slots_per_stream=6), 8, False),
    "W_ne_R": (dict(P=1, T=10, W=2, R=5, hd=8, slots_per_stream=24), 3, False),
}
MODES = [(torch.float32, "none", False), (torch.bfloat16, "none", False), (torch.bfloat16, "none", True),
         (torch.float32, "fp8", False), (torch.bfloat16, "int4", True), (torch.float32, "int4", False)]


def _problem(case: str, bank: torch.dtype, device: str = "cpu"):
    kwargs, chunk, masked = CASES[case]
    p = gpu_problem(**kwargs, bank=bank, inputs=torch.float32, seed=33)
    if masked:
        p.k_idx[0, 2, 1] = -1                 # outside the bank
        p.k_idx[1, 6, 2] = p.k_idx[1, 6, 0]   # a repeated write slot: the later lane is masked
    return p.to(device), dict(slots_per_stream=p.slots_per_stream, chunk_size=chunk, validate=not masked)


CUDA = [pytest.mark.gpu, pytest.mark.skipif(not torch.cuda.is_available(), reason="no CUDA device")]
DEVICES = ["cpu", pytest.param("cuda", marks=CUDA)]


def _count(p, options) -> int:
    return int(torch.ops.sdm.write_groups_count(*p.tensors(), slots_per_stream=options["slots_per_stream"],
                                                chunk_size=options["chunk_size"]))


def _worst_rows(p, chunk: int) -> int:
    P, T, W = p.k_idx.shape
    C = min(chunk, T)
    return P * -(-T // C) * C * W


def _saved_of_eager_call(p, options, **extra):
    """(outputs, grads, the `saved` tensor sdm.write_read's Function kept) of one eager training step."""
    kept = []

    def pack(t):
        if t.dtype == torch.uint8 and t.dim() == 1:
            kept.append(t)
        return t

    leaves = [t.detach().clone().requires_grad_(True) for t in (p.memory, p.k_val, p.v, p.beta, p.g, p.q_val)]
    memory, k_val, v, beta, g, q_val = leaves
    with torch.autograd.graph.saved_tensors_hooks(pack, lambda t: t):
        readings, final = sdm.write_read(memory, p.k_idx, k_val, v, beta, g, p.q_idx, q_val, **options, **extra)
    gen = torch.Generator().manual_seed(7)
    dy = torch.randn(readings.shape, generator=gen).to(readings)
    df = torch.randn(final.shape, generator=gen).to(final)
    grads = torch.autograd.grad((readings, final), leaves, (dy, df))
    return (readings, final), grads, kept


def _worst_case_step(p, options, mode, grad_bank_fp32):
    """The same step through the ops with the worst-case buffer (snapshot_rows 0)."""
    op_options = dict(options, snapshot_quant=mode, grad_bank_fp32=grad_bank_fp32)
    saved = new_saved(*p.tensors(), op_options)
    readings, final = torch.ops.sdm.write_read_saving(*p.tensors(), saved, **op_options)
    gen = torch.Generator().manual_seed(7)
    dy = torch.randn(readings.shape, generator=gen).to(readings)
    df = torch.randn(final.shape, generator=gen).to(final)
    grads = torch.ops.sdm.write_read_backward(final, saved, *p.inputs(), dy, df, **op_options)
    return (readings, final), grads, saved


@pytest.mark.parametrize("device", DEVICES)
@pytest.mark.parametrize("bank, mode, grad_bank_fp32", MODES)
@pytest.mark.parametrize("case", list(CASES))
def test_eager_step_uses_the_exact_buffer_and_gives_the_worst_case_bits(case, bank, mode, grad_bank_fp32, device):
    p, options = _problem(case, bank, device)
    outs, grads, kept = _saved_of_eager_call(p, options, snapshot_quant=mode, grad_bank_fp32=grad_bank_fp32)
    ref_outs, ref_grads, worst = _worst_case_step(p, options, mode, grad_bank_fp32)
    exact = new_saved(*p.tensors(), dict(options, snapshot_quant=mode, grad_bank_fp32=grad_bank_fp32,
                                      snapshot_rows=_count(p, options)))
    assert len(kept) == 1 and kept[0].numel() == exact.numel() < worst.numel()
    for a, b in zip(outs, ref_outs):
        assert bitwise_equal(a, b)
    for a, b in zip(grads, ref_grads):
        assert bitwise_equal(a, b.to(a.dtype))


@pytest.mark.parametrize("case", list(CASES))
def test_exact_size_is_the_worst_case_less_the_unused_rows(case):
    p, options = _problem(case, torch.bfloat16)
    size = lambda rows: new_saved(*p.tensors(), dict(options, snapshot_rows=rows)).numel()  # noqa: E731
    row_bytes = size(2) - size(1)
    assert row_bytes == 2 * p.memory.shape[1]
    fixed = size(1) - row_bytes
    assert size(0) == fixed + _worst_rows(p, options["chunk_size"]) * row_bytes
    assert size(_count(p, options)) == fixed + _count(p, options) * row_bytes


@pytest.mark.parametrize("device", DEVICES)
def test_a_call_with_no_write_group_gets_a_one_row_buffer(device):
    """Every write index outside the bank (validate=False): the count is 0, which as snapshot_rows
    would mean the worst case; the eager call sizes `saved` for exactly one row instead, and its
    outputs and gradients are the worst-case buffer's, bitwise."""
    p, options = _problem("long_groups", torch.float32, device)
    p.k_idx.fill_(-1)
    options = dict(options, validate=False)
    assert _count(p, options) == 0
    outs, grads, kept = _saved_of_eager_call(p, options)
    ref_outs, ref_grads, worst = _worst_case_step(p, options, "none", False)
    one_row = new_saved(*p.tensors(), dict(options, snapshot_rows=1))
    assert len(kept) == 1 and kept[0].numel() == one_row.numel() < worst.numel()
    for a, b in zip(outs, ref_outs):
        assert bitwise_equal(a, b)
    for a, b in zip(grads, ref_grads):
        assert bitwise_equal(a, b.to(a.dtype))


@pytest.mark.parametrize("device, validate", [("cpu", True), ("cpu", False), pytest.param("cuda", True, marks=CUDA)])
def test_too_few_rows_are_refused_by_name_and_nothing_is_written(device, validate):
    p, options = _problem("long_groups", torch.float32, device)
    options = dict(options, validate=validate, snapshot_rows=_count(p, options) - 1)
    saved = new_saved(*p.tensors(), options).fill_(0xA5)
    with pytest.raises(ValueError, match=r"saved.*snapshot rows"):
        torch.ops.sdm.write_read_saving(*p.tensors(), saved, **options)
    assert bool((saved == 0xA5).all())


def test_snapshot_rows_past_the_worst_case_are_refused_by_name():
    p, options = _problem("W_ne_R", torch.float32)
    with pytest.raises(ValueError, match="snapshot_rows"):
        new_saved(*p.tensors(), dict(options, snapshot_rows=_worst_rows(p, options["chunk_size"]) + 1))


def test_compiled_fullgraph_step_keeps_the_worst_case_and_the_bits():
    p, options = _problem("long_groups", torch.float32)
    eager_outs, eager_grads, _ = _saved_of_eager_call(p, options)
    compiled = torch.compile(sdm.write_read, fullgraph=True, backend="aot_eager")
    leaves = [t.detach().clone().requires_grad_(True) for t in (p.memory, p.k_val, p.v, p.beta, p.g, p.q_val)]
    memory, k_val, v, beta, g, q_val = leaves
    readings, final = compiled(memory, p.k_idx, k_val, v, beta, g, p.q_idx, q_val, **options)
    gen = torch.Generator().manual_seed(7)
    dy = torch.randn(readings.shape, generator=gen).to(readings)
    df = torch.randn(final.shape, generator=gen).to(final)
    grads = torch.autograd.grad((readings, final), leaves, (dy, df))
    for a, b in zip((readings, final, *grads), (*eager_outs, *eager_grads)):
        assert bitwise_equal(a, b)


def test_opcheck_with_an_exact_buffer():
    p, options = _problem("odd_hd_masked", torch.float32)
    count_options = dict(slots_per_stream=options["slots_per_stream"], chunk_size=options["chunk_size"])
    torch.library.opcheck(torch.ops.sdm.write_groups_count.default, p.tensors(), count_options)
    options = dict(options, snapshot_rows=_count(p, options))
    saved = new_saved(*p.tensors(), options)
    torch.library.opcheck(torch.ops.sdm.write_read_saving.default, (*p.tensors(), saved.fill_(0)), options)
    readings, final = torch.ops.sdm.write_read_saving(*p.tensors(), saved, **options)
    dy = torch.randn(readings.shape, generator=torch.Generator().manual_seed(3))
    torch.library.opcheck(torch.ops.sdm.write_read_backward.default, (final, saved, *p.inputs(), dy, None), options)


@pytest.mark.parametrize("case", [pytest.param(case, marks=CUDA) for case in CASES])
def test_cuda_count_equals_the_cpu_count(case):
    """Both engines number the rows by one rule (core/snapshot_row_rule.hpp): the same count."""
    p, options = _problem(case, torch.float32)
    cuda_count = torch.ops.sdm.write_groups_count(*p.to("cuda").tensors(), slots_per_stream=options["slots_per_stream"],
                                                  chunk_size=options["chunk_size"])
    assert cuda_count.device.type == "cuda"
    assert int(cuda_count) == _count(p, options) < _worst_rows(p, options["chunk_size"])


@pytest.mark.parametrize("device", [pytest.param("cuda", marks=CUDA)])
def test_cuda_too_few_rows_unvalidated_write_nothing_past_the_buffer(device):
    """validate=False: no count, no refusal; the groups past the buffer's rows store nothing, so the
    bytes after `saved` (here the rest of a larger allocation) keep theirs, and the backward runs."""
    p, options = _problem("long_groups", torch.float32, device)
    options = dict(options, validate=False, snapshot_rows=_count(p, options) // 2)
    nbytes = new_saved(*p.tensors(), options).numel()
    block = torch.full((nbytes + 4096,), 0xA5, dtype=torch.uint8, device=device)
    saved = block[:nbytes]
    readings, final = torch.ops.sdm.write_read_saving(*p.tensors(), saved, **options)
    dy = torch.ones_like(readings)
    torch.ops.sdm.write_read_backward(final, saved, *p.inputs(), dy, None, **options)
    torch.cuda.synchronize()
    assert bool((block[nbytes:] == 0xA5).all())
