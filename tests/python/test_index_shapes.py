"""Index-shape confusions and foreign buffers at every entry point, on CPU and CUDA tensors.

Each case hands one entry point (sdm.write_read without and with autograd, sdm.write_read_, the
backward op torch.ops.sdm.write_read_backward, sdm.decode_step, and the product-key top-k forward
and backward) an index tensor of the wrong shape: an extra leading, middle or trailing dim, a
dim dropped (down to a scalar), each dim one longer or shorter, two dims swapped, an empty dim,
five dims. The call must raise ValueError naming that tensor and leave the bank as it was (the
CUDA build once crashed here: a 4-D shape in the message). The backward op and the top-k backward
must also refuse a buffer of another call (saved) and slots outside the grid.
"""

from __future__ import annotations

import re

import pytest
import torch

import sdm
from gpu_support import GPU_TEST, gpu_problem
from saving_forward import saving_forward

DEVICES = ["cpu", pytest.param("cuda", marks=GPU_TEST)]
OPS = ("write_read", "write_read_grad", "write_read_", "write_read_backward", "decode_step")


def confusions(t: torch.Tensor) -> list[tuple[str, torch.Tensor]]:
    """Wrong shapes of an index tensor: every one is refused whatever the other tensors are."""
    out = [("extra leading dim", t.unsqueeze(0)), ("extra middle dim", t.unsqueeze(1)),
           ("extra trailing dim", t.unsqueeze(-1)), ("scalar", t.reshape(-1)[0].clone()),
           ("five dims", t.reshape(1, 1, *t.shape) if t.dim() == 3 else t.reshape(1, 1, 1, *t.shape))]
    if t.dim() >= 2:
        out.append(("first dim dropped", t[0].clone()))
    if t.dim() == 3:
        out.append(("flattened streams", t.reshape(-1, t.shape[-1])))
    for d in range(t.dim()):
        if d < t.dim() - 1:  # a longer last dim can be a valid W or R
            longer = torch.cat([t, t.narrow(d, 0, 1)], dim=d)
            out.append((f"dim {d} one longer", longer))
        if t.shape[d] > 1 and d < t.dim() - 1:
            out.append((f"dim {d} one shorter", t.narrow(d, 0, t.shape[d] - 1).clone()))
        out.append((f"dim {d} empty", t.narrow(d, 0, 0).clone()))
    if t.dim() == 3 and t.shape[0] != t.shape[1]:
        out.append(("streams and tokens swapped", t.transpose(0, 1).contiguous()))
    return out


TENSOR_NAMES = ("memory", "k_idx", "k_val", "v", "beta", "g", "q_idx", "q_val", "readings")


def blamed(message: str) -> str | None:
    """The tensor a message names first (the one it blames)."""
    places = {name: m.start() for name in TENSOR_NAMES
              if (m := re.search(rf"(?<![\w.']){name}(?![\w'])", message))}
    return min(places, key=places.get) if places else None


def _problem(op: str, device: str):
    decode = op == "decode_step"
    p = gpu_problem(P=2, T=1 if decode else 7, W=3, R=2, hd=5, slots_per_stream=8, seed=3,
                    decode_lead=(2,) if decode else None).to(device)
    return p


def _saved_of(p, options):
    _, final_bank, saved = saving_forward(*p.tensors(), **options)
    return final_bank, saved


def _call(op: str, p, name: str, bad: torch.Tensor, validate: bool):
    args = dict(zip(("memory", "k_idx", "k_val", "v", "beta", "g", "q_idx", "q_val"), p.tensors()))
    args[name] = bad
    tensors = list(args.values())
    chunked = dict(slots_per_stream=p.slots_per_stream, chunk_size=4, validate=validate)
    if op == "write_read":
        return sdm.write_read(*tensors, **chunked)
    if op == "write_read_grad":
        tensors[0] = tensors[0].clone().requires_grad_()
        return sdm.write_read(*tensors, **chunked)
    if op == "write_read_":
        return sdm.write_read_(*tensors, **chunked)
    if op == "write_read_backward":
        final_bank, saved = _saved_of(p, dict(slots_per_stream=p.slots_per_stream, chunk_size=4))
        dy = torch.ones_like(p.v, dtype=p.memory.dtype)
        return torch.ops.sdm.write_read_backward(final_bank, saved, *tensors[1:], dy, None, **chunked)
    return sdm.decode_step(*tensors, slots_per_stream=p.slots_per_stream, validate=validate)


@pytest.mark.parametrize("device", DEVICES)
@pytest.mark.parametrize("op", OPS)
@pytest.mark.parametrize("name", ["k_idx", "q_idx"])
@pytest.mark.parametrize("validate", [True, False])
def test_a_misshaped_index_tensor_is_refused_by_name(device, op, name, validate):
    p = _problem(op, device)
    bank_before = p.memory.clone()
    for what, bad in confusions(getattr(p, name)):
        with pytest.raises(ValueError) as refused:
            _call(op, p, name, bad, validate)
        message = str(refused.value)
        assert blamed(message) == name, f"{what}: {message}"
        assert torch.equal(p.memory, bank_before), what


def _stamp_problem(device, seed):
    return gpu_problem(P=2, T=9, W=3, R=2, hd=6, slots_per_stream=8, seed=seed).to(device)


@pytest.mark.parametrize("device", DEVICES)
def test_the_backward_refuses_a_saved_buffer_of_another_call(device):
    options = dict(slots_per_stream=8, chunk_size=4)
    p, other = _stamp_problem(device, 1), _stamp_problem(device, 2)  # same shapes, other indices
    final_bank, saved = _saved_of(p, options)
    _, foreign = _saved_of(other, options)
    assert saved.shape == foreign.shape
    dy = torch.ones_like(p.v)
    backward = torch.ops.sdm.write_read_backward
    grads = backward(final_bank, saved, *p.inputs(), dy, None, **options)  # its own buffer
    assert all(torch.isfinite(g).all() for g in grads)
    with pytest.raises(ValueError, match="saved was made for other index values"):
        backward(final_bank, foreign, *p.inputs(), dy, None, **options)
    garbage = torch.randint(0, 256, saved.shape, dtype=torch.uint8, device=device,
                            generator=torch.Generator(device).manual_seed(0))
    with pytest.raises(ValueError, match="saved does not start with the stamp"):
        backward(final_bank, garbage, *p.inputs(), dy, None, **options)
    bf16 = dict(options, snapshot_quant="fp8")
    with pytest.raises(ValueError, match="saved"):  # another size, or another stamp
        backward(final_bank, saved, *p.inputs(), dy, None, **bf16)


@pytest.mark.parametrize("device", DEVICES)
def test_topk_backward_refuses_slots_outside_the_grid(device):
    raw = torch.randn(4, 10, device=device, generator=torch.Generator(device).manual_seed(0))
    dims = [5, 5]
    _, slots = torch.ops.sdm.product_key_topk(raw, dims, 3)
    grad = torch.ones(slots.shape, device=device)
    good = torch.ops.sdm.product_key_topk_backward(slots, grad, dims)
    assert torch.isfinite(good).all()
    for bad_value in (25, -1):
        bad = slots.clone()
        bad[2, 1] = bad_value
        with pytest.raises(ValueError, match=rf"slots\[row 2, entry 1\] = {bad_value} is outside"):
            torch.ops.sdm.product_key_topk_backward(bad, grad, dims)
        masked = torch.ops.sdm.product_key_topk_backward(bad, grad, dims, validate=False)
        assert torch.isfinite(masked).all()
    for what, bad in confusions(slots.unsqueeze(0))[:4]:
        with pytest.raises(ValueError, match="slots|grad_values"):
            torch.ops.sdm.product_key_topk_backward(bad, grad, dims)
