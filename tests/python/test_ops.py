"""torch.ops.sdm: opcheck on every op, error mapping, the in-place forms, decode vs the oracle."""

from __future__ import annotations

import pytest
import torch

import sdm
from conftest import make_problem, rel_err
from saving_forward import saving_forward
from sdm._ops import new_saved

OPTIONS = dict(slots_per_stream=16, chunk_size=4)


def _problem(**kw):
    return make_problem(P=2, T=9, W=3, R=2, hd=5, slots_per_stream=16, **kw)


@pytest.mark.parametrize("G", [1, 3])
@pytest.mark.parametrize("bank_dtype", [torch.float32, torch.bfloat16])
def test_opcheck_write_read_saving(G, bank_dtype):
    """opcheck of the saving forward with `saved` holding zeros, and random bytes: the bytes the
    engine does not write keep the caller's, so eager and compiled calls mutate it alike."""
    p = _problem(G=G).cast(bank_dtype, torch.float32)
    zeros = new_saved(*p.tensors(), OPTIONS).zero_()
    noise = torch.randint(0, 256, zeros.shape, dtype=torch.uint8, generator=torch.Generator().manual_seed(G))
    for saved in (zeros, noise):
        torch.library.opcheck(torch.ops.sdm.write_read_saving.default, (*p.tensors(), saved), OPTIONS)


def test_opcheck_write_read_inplace():
    p = _problem(G=3, beta_2d=True).cast(torch.float32)
    torch.library.opcheck(torch.ops.sdm.write_read_.default, p.tensors(), OPTIONS)


def test_opcheck_write_read_backward():
    p = _problem(G=3).cast(torch.float32)
    readings, final_bank, saved = saving_forward(*p.tensors(), **OPTIONS)
    grad_readings = torch.randn_like(readings)
    args = (final_bank, saved, *p.tensors()[1:], grad_readings)
    torch.library.opcheck(torch.ops.sdm.write_read_backward.default, (*args, None), OPTIONS)
    torch.library.opcheck(torch.ops.sdm.write_read_backward.default, (*args, torch.randn_like(final_bank)),
                          OPTIONS)


def test_opcheck_saved_bytes():
    p = _problem().cast(torch.float32)
    nbytes, bank_grad_bf16 = torch.ops.sdm.write_read_plan(*p.tensors(), device=p.memory.device, **OPTIONS)
    assert not bank_grad_bf16
    _, _, saved = saving_forward(*p.tensors(), **OPTIONS)
    assert nbytes == saved.numel() > 0
    # Shape-only: meta tensors give the same size as the real ones.
    meta = [t.to("meta") for t in p.tensors()]
    assert torch.ops.sdm.write_read_plan(*meta, device=torch.device("cpu"), **OPTIONS) == (nbytes, False)
    bf16 = [t.to(torch.bfloat16) if t.is_floating_point() else t for t in meta]
    assert torch.ops.sdm.write_read_plan(*bf16, device=torch.device("cpu"), **OPTIONS)[1]
    assert not torch.ops.sdm.write_read_plan(*bf16, device=torch.device("cpu"), **OPTIONS, grad_bank_fp32=True)[1]


def test_opcheck_decode_step():
    p = make_problem(P=3, T=1, W=4, R=2, hd=7, slots_per_stream=16, G=4, dtype=torch.float32)
    torch.library.opcheck(torch.ops.sdm.decode_step.default, p.tensors(), {"slots_per_stream": 16})


def test_opcheck_reference_ops():
    p = _problem(G=3)
    torch.library.opcheck(torch.ops.sdm.reference_write_read.default, p.requiring_grad().tensors(), OPTIONS)
    readings, final_bank = torch.ops.sdm.reference_write_read(*p.tensors(), **OPTIONS)
    torch.library.opcheck(torch.ops.sdm.reference_write_read_backward.default,
                          (*p.tensors(), torch.randn_like(readings), torch.randn_like(final_bank)), OPTIONS)


def test_readings_match_reference():
    p = _problem(G=3)
    ref_readings, ref_bank = sdm.reference.write_read(*p.tensors(), **OPTIONS)
    readings, final_bank = sdm.write_read(*p.cast(torch.float32).tensors(), **OPTIONS)
    assert readings.dtype == final_bank.dtype == torch.float32
    assert rel_err(readings, ref_readings) < 1e-5
    assert rel_err(final_bank, ref_bank) < 1e-5


def test_inplace_equals_functional_bitwise():
    p = _problem(G=3).cast(torch.float32)
    readings, final_bank = sdm.write_read(*p.requiring_grad().tensors(), **OPTIONS)
    bank = p.memory.clone()
    inplace_readings = sdm.write_read_(bank, *p.tensors()[1:], **OPTIONS)
    assert torch.equal(inplace_readings, readings.detach())
    assert torch.equal(bank, final_bank.detach())


def test_functional_form_leaves_inputs_untouched():
    p = _problem(G=3).cast(torch.float32).requiring_grad()
    before = [t.detach().clone() for t in p.tensors()]
    readings, final_bank = sdm.write_read(*p.tensors(), **OPTIONS)
    (readings.square().sum() + final_bank.sum()).backward()
    for t, b in zip(p.tensors(), before):
        assert torch.equal(t.detach(), b)


def test_inplace_refuses_autograd_and_names_the_functional_form():
    p = _problem().cast(torch.float32)
    v = p.v.clone().requires_grad_()
    args = list(p.tensors())
    args[3] = v
    with pytest.raises(RuntimeError, match=r"sdm\.write_read_ .*v requires grad.*use the functional sdm\.write_read"):
        sdm.write_read_(*args, **OPTIONS)
    assert torch.equal(args[0], p.memory), "nothing may be written when the call is refused"
    with torch.no_grad():
        sdm.write_read_(*args, **OPTIONS)  # allowed without grad mode
    d = make_problem(P=2, T=1, W=2, R=2, hd=4, slots_per_stream=16, dtype=torch.float32)
    with pytest.raises(RuntimeError, match=r"sdm\.decode_step .*memory requires grad"):
        sdm.decode_step(d.memory.clone().requires_grad_(), *d.tensors()[1:])


def test_saving_forward_refuses_autograd_and_names_the_functional_form():
    p = _problem().cast(torch.float32)
    saved = new_saved(*p.tensors(), OPTIONS).zero_()
    args = list(p.tensors())
    args[2] = p.k_val.clone().requires_grad_()
    with pytest.raises(RuntimeError, match=r"sdm\.write_read_saving fills saved in place .*k_val requires grad.*"
                                           r"use the functional sdm\.write_read"):
        torch.ops.sdm.write_read_saving(*args, saved, **OPTIONS)
    assert not saved.any(), "nothing may be written when the call is refused"
    version = saved._version
    with torch.no_grad():  # allowed without grad mode: fills saved, bumps its version
        torch.ops.sdm.write_read_saving(*args, saved, **OPTIONS)
    assert saved.any() and saved._version > version


def test_inplace_bumps_version():
    p = _problem().cast(torch.float32)
    bank = p.memory.clone()
    version = bank._version
    sdm.write_read_(bank, *p.tensors()[1:], **OPTIONS)
    assert bank._version > version


def test_modified_final_bank_is_caught_by_autograd():
    p = _problem().cast(torch.float32).requiring_grad()
    readings, final_bank = sdm.write_read(*p.tensors(), **OPTIONS)
    with torch.no_grad():
        final_bank.mul_(2)
    with pytest.raises(RuntimeError, match="modified by an inplace operation"):
        readings.sum().backward()


def test_errors_map_to_python_types_with_the_cpp_message():
    p = _problem().cast(torch.float32)
    with pytest.raises(TypeError, match="memory must be bfloat16 or float32, got float16"):
        sdm.write_read(p.memory.half(), *p.tensors()[1:], **OPTIONS)
    with pytest.raises(TypeError, match="k_idx"):
        sdm.write_read(p.memory, p.k_idx.float(), *p.tensors()[2:], **OPTIONS)
    bad = p.k_idx.clone()
    bad[1, 4, 2] = 3  # stream 1 owns rows [16, 32)
    with pytest.raises(ValueError, match=r"k_idx\[stream 1, token 4, lane 2\] = 3 is outside stream 1's rows"):
        sdm.write_read(p.memory, bad, *p.tensors()[2:], **OPTIONS)
    with pytest.raises(ValueError, match="snapshot_quant"):
        sdm.write_read(*p.tensors(), snapshot_quant="fp16", **OPTIONS)
    with pytest.raises(ValueError, match="v"):
        sdm.write_read(p.memory, p.k_idx, p.k_val, p.v[:, :, :4], *p.tensors()[4:], **OPTIONS)


def test_backward_rejects_a_misaligned_or_resized_saved_buffer():
    p = _problem().cast(torch.float32)
    readings, final_bank, saved = saving_forward(*p.tensors(), **OPTIONS)
    grad_readings = torch.randn_like(readings)
    storage = torch.zeros(saved.numel() + 16, dtype=torch.uint8)
    offset = (16 - storage.data_ptr() % 16) % 16 + 1  # one byte past a 16-byte boundary
    misaligned = storage[offset:offset + saved.numel()]
    misaligned.copy_(saved)
    bank = final_bank.clone()
    with pytest.raises(ValueError, match=r"saved must start at a 16-byte aligned address"):
        torch.ops.sdm.write_read_backward(bank, misaligned, *p.inputs(), grad_readings, None, **OPTIONS)
    with pytest.raises(ValueError, match=r"saved must be a contiguous 1-D uint8 buffer of \d+ bytes"):
        torch.ops.sdm.write_read_backward(bank, saved[:-1], *p.inputs(), grad_readings, None, **OPTIONS)
    assert torch.equal(bank, final_bank)  # nothing restored by the rejected calls


def test_rejected_inplace_call_writes_nothing():
    p = _problem().cast(torch.float32)
    bank = p.memory.clone()
    repeated = p.k_idx.clone()
    repeated[0, 5, 1] = repeated[0, 5, 0]
    with pytest.raises(ValueError, match="k_idx"):
        sdm.write_read_(bank, repeated, *p.tensors()[2:], **OPTIONS)
    assert torch.equal(bank, p.memory)


@pytest.mark.parametrize("G", [1, 4])
# docs/numerics.md's bounds for a decode step (measured on the CPU over 4 shapes x 2 G x 20 seeds:
# f32 <= 3.7e-7, bf16 <= 5.0e-3).
@pytest.mark.parametrize("bank_dtype,tol", [(torch.float32, 1e-6), (torch.bfloat16, 1e-2)])
def test_decode_step_matches_reference(G, bank_dtype, tol):
    p = make_problem(P=3, T=1, W=4, R=3, hd=9, slots_per_stream=16, G=G)
    ref_readings, ref_bank = sdm.reference.write_read(*p.tensors(), slots_per_stream=16)
    q = p.cast(bank_dtype, torch.float32)
    bank = q.memory.clone()
    per_stream = [t.view(3, *t.shape[2:]) for t in q.tensors()[1:]]  # streams as the leading dim
    readings = sdm.decode_step(bank, *per_stream, slots_per_stream=16)
    assert readings.shape == (3, 9) and readings.dtype == bank_dtype
    assert rel_err(readings, ref_readings.view(3, 9)) < tol
    assert rel_err(bank, ref_bank) < tol
