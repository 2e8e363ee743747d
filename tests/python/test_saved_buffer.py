"""The saving forward's `saved` buffer as the caller hands it in (torch.ops.sdm.write_read_saving,
docs/spec.md §4 and §11), on CPU and CUDA tensors: no engine zeroes it, and no backward reads what
the saving forward leaves unwritten.

For each case the saving forward runs into three buffers: all 0x00, all 0xFF (NaN in every float
format) and random bytes. A byte equal in the first two runs is one the engine writes: it must hold
the same value in the third. Every other byte must still hold what its buffer held (the engine
leaves some: the snapshot rows past the call's write groups, padding), and the 256-byte
stamp is written whole. The readings, the final bank and the backward's six gradients must be
bitwise equal for the three buffers, and equal to sdm.write_read's autograd gradients (its Function
allocates the buffer without zeroing). A bad buffer is refused by name before anything is written.
"""

from __future__ import annotations

import pytest
import torch

import sdm
from gpu_support import GPU_TEST, bitwise_equal, gpu_problem
from saving_forward import saving_forward
from sdm._ops import new_saved

DEVICES = ["cpu", pytest.param("cuda", marks=GPU_TEST)]
STAMP_BYTES = 256
# Awkward shapes: T not a multiple of C (padding tokens), few slots per stream (slots written by
# several tokens of a chunk), odd hd (the element path) or hd % 8 == 0 (the vector path), G = W, and
# with masked entries (validate=False): an out-of-range write and read, a repeated write slot.
SHAPES = {
    "odd_hd_masked": (dict(P=2, T=11, W=3, R=4, hd=5, slots_per_stream=8, G=3), 4, True),
    "vector_rows": (dict(P=2, T=37, W=4, R=3, hd=24, slots_per_stream=16), 8, False),
}
MODES = [(torch.float32, "none"), (torch.bfloat16, "none"), (torch.float32, "bf16"), (torch.float32, "fp8"),
         (torch.bfloat16, "int4")]


def _problem(shape: str, bank: torch.dtype, device: str):
    kwargs, chunk, masked = SHAPES[shape]
    p = gpu_problem(**kwargs, bank=bank, inputs=torch.float32, seed=21)
    if masked:
        p.k_idx[0, 2, 1] = -1                 # outside the bank
        p.q_idx[1, 5, 0] = 10_000
        p.k_idx[1, 6, 2] = p.k_idx[1, 6, 0]   # a repeated write slot: the later lane is masked
    options = dict(slots_per_stream=p.slots_per_stream, chunk_size=chunk, validate=False)
    return p.to(device), options


def _backward(p, final_bank, saved, dy, d_final, options):
    return torch.ops.sdm.write_read_backward(final_bank, saved, *p.inputs(), dy, d_final, **options)


@pytest.mark.parametrize("device", DEVICES)
@pytest.mark.parametrize("bank, mode", MODES)
@pytest.mark.parametrize("shape", list(SHAPES))
def test_unwritten_bytes_keep_the_callers_and_the_backward_never_reads_them(device, shape, bank, mode):
    p, options = _problem(shape, bank, device)
    options["snapshot_quant"] = mode
    gen = torch.Generator().manual_seed(5)
    dy = torch.randn(p.v.shape, generator=gen).to(device, bank)
    d_final = torch.randn(p.memory.shape, generator=gen).to(device, bank)
    nbytes = new_saved(*p.tensors(), options).numel()
    noise = torch.randint(0, 256, (nbytes,), dtype=torch.uint8, generator=gen).to(device)
    runs = {}
    for name, fill in (("zeros", 0x00), ("ones", 0xFF), ("noise", noise)):
        readings, final_bank, saved = saving_forward(*p.tensors(), fill=fill, **options)
        runs[name] = (readings, final_bank, saved.cpu(), _backward(p, final_bank, saved, dy, d_final, options))

    zeros, ones, noisy = (runs[name][2] for name in ("zeros", "ones", "noise"))
    written = zeros == ones
    assert written[:STAMP_BYTES].all(), "the stamp is written whole"
    assert not written.all(), "the engine leaves bytes of saved unwritten (it zeroes nothing)"
    assert torch.equal(noisy[written], zeros[written]), "a written byte does not depend on the buffer's bytes"
    assert (zeros[~written] == 0x00).all() and (ones[~written] == 0xFF).all(), "an unwritten byte keeps the caller's"
    assert torch.equal(noisy[~written], noise.cpu()[~written]), "an unwritten byte keeps the caller's"

    readings, final_bank, _, grads = runs["zeros"]
    assert all(torch.isfinite(g).all() for g in grads)
    for name in ("ones", "noise"):
        other_readings, other_bank, _, other_grads = runs[name]
        assert bitwise_equal(other_readings, readings) and bitwise_equal(other_bank, final_bank), name
        for k, (got, want) in enumerate(zip(other_grads, grads, strict=True)):
            assert bitwise_equal(got, want), f"{name}: gradient {k} depends on bytes the saving forward left"

    # sdm.write_read's Function: the same op pair on a buffer allocated without zeroing.
    leaves = [t.clone().requires_grad_(t.is_floating_point()) for t in p.tensors()]
    outputs = sdm.write_read(*leaves, **options)
    assert bitwise_equal(outputs[0].detach(), readings) and bitwise_equal(outputs[1].detach(), final_bank)
    torch.autograd.backward(outputs, (dy, d_final))
    autograd_grads = [t.grad for t in leaves if t.is_floating_point()]
    assert bitwise_equal(autograd_grads[0], grads[0].to(bank)), "grad memory (in the bank's dtype)"
    for k, (got, want) in enumerate(zip(autograd_grads[1:], grads[1:], strict=True), start=1):
        assert bitwise_equal(got, want), f"gradient {k}"


def _misaligned(nbytes: int, device: str) -> torch.Tensor:
    storage = torch.zeros(nbytes + 16, dtype=torch.uint8, device=device)
    offset = (16 - storage.data_ptr() % 16) % 16 + 1  # one byte past a 16-byte boundary
    return storage[offset:offset + nbytes]


@pytest.mark.parametrize("device", DEVICES)
def test_the_saving_forward_refuses_a_bad_saved_buffer_by_name(device):
    p, options = _problem("odd_hd_masked", torch.float32, device)
    good = new_saved(*p.tensors(), options)
    n = good.numel()
    assert n % 16 == 0
    bad_buffers = [
        (TypeError, r"saved must be uint8, got float32", torch.zeros(n // 4, device=device)),
        (ValueError, rf"saved must be a contiguous 1-D uint8 buffer of {n} bytes", good[:-1]),
        (ValueError, rf"saved must be a contiguous 1-D uint8 buffer of {n} bytes", good.view(2, n // 2)),
        (ValueError, rf"saved must be a contiguous 1-D uint8 buffer of {n} bytes",
         torch.zeros(2 * n, dtype=torch.uint8, device=device)[::2]),
        (ValueError, r"saved must start at a 16-byte aligned address", _misaligned(n, device)),
    ]
    if device == "cuda":
        bad_buffers.append((ValueError, r"saved must be on cuda", torch.zeros(n, dtype=torch.uint8)))
    for error, message, bad in bad_buffers:
        before = bad.clone()
        with pytest.raises(error, match=message):
            torch.ops.sdm.write_read_saving(*p.tensors(), bad, **options)
        assert bitwise_equal(bad, before), f"{message}: nothing may be written when the call is refused"
