"""Property-based fuzzing of every public entry point (Hypothesis): sdm.write_read (no-grad and
with autograd), sdm.write_read_ and sdm.decode_step, on CPU tensors and (where a GPU and a CUDA
build exist) CUDA tensors.

Each example draws a valid problem of random small shape (0-free dims, G = 1 or W, bf16 / f32
banks, f32 / bf16 / f16 inputs, int32 / int64 indices), places the bank inside a larger buffer
between guard rows, then applies at most one corruption: an index at or beyond a stream boundary,
a repeated write slot, a wrong dtype, a wrong or empty shape, a non-contiguous input, a tensor on
the meta device, an input viewing the bank, an option at or beyond its limit or of the wrong type,
NaN / Inf values, an input on another device. Properties:
  * no crash or hang (the call returns or raises TypeError / ValueError / RuntimeError);
  * a refused call names an argument the user passed, and modifies nothing (bitwise: the whole
    buffer, guard rows included, and every input);
  * an accepted call never writes a guard row (validate=False included);
  * an accepted call on finite, valid inputs agrees with the float64 reference (readings, final
    bank; gradients for the autograd form) within the project's tolerances.
CI runs a fixed, derandomized budget; SDM_FUZZ_EXAMPLES=N raises it (and draws fresh seeds).
"""

from __future__ import annotations

import os

import pytest
import torch
from hypothesis import HealthCheck, event, given, settings
from hypothesis import strategies as st

import sdm
from conftest import make_problem, rel_err
from gpu_support import GPU_TEST

EXAMPLES = int(os.environ.get("SDM_FUZZ_EXAMPLES", "0"))
FUZZ = settings(max_examples=EXAMPLES or 400, derandomize=not EXAMPLES, deadline=None, database=None,
                suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large])

ARGUMENT_NAMES = ("memory", "k_idx", "k_val", "v", "beta", "g", "q_idx", "q_val", "slots_per_stream",
                  "chunk_size", "snapshot_quant", "grad_bank_fp32", "validate")
INPUT_NAMES = ("k_idx", "k_val", "v", "beta", "g", "q_idx", "q_val")
FLOAT_INPUTS = ("k_val", "v", "beta", "g", "q_val")
GUARD = 2
# rel_err against the float64 reference (tests/python/test_autograd.py uses the same bounds).
TOLERANCE = {torch.float32: 1e-4, torch.bfloat16: 3e-2}

CORRUPTIONS = ("none", "index_below", "index_at_end", "index_huge", "repeat_write", "dtype", "shape", "empty",
               "non_contiguous", "meta", "other_device", "alias", "chunk_size", "slots_per_stream",
               "snapshot_quant", "option_type", "nonfinite")
DEVICES = ["cpu", pytest.param("cuda", marks=GPU_TEST)]


@st.composite
def calls(draw):
    op = draw(st.sampled_from(["write_read", "write_read_grad", "write_read_", "decode_step"]))
    P = draw(st.integers(1, 3))
    T = 1 if op == "decode_step" else draw(st.integers(1, 9))
    W = draw(st.integers(1, 4))
    R = draw(st.integers(1, 4))
    hd = draw(st.integers(1, 7))
    slots = draw(st.integers(max(W, R), 12))
    G = draw(st.sampled_from([1, W]))
    bank = draw(st.sampled_from([torch.float32, torch.bfloat16]))
    inputs = torch.float32 if op == "write_read_grad" else draw(st.sampled_from([torch.float32, torch.bfloat16,
                                                                                  torch.float16]))
    index = draw(st.sampled_from([torch.int32, torch.int64]))
    problem = make_problem(P=P, T=T, W=W, R=R, hd=hd, slots_per_stream=slots, G=G, dtype=bank,
                           input_dtype=inputs, index_dtype=index, seed=draw(st.integers(0, 2**16)),
                           beta_2d=op != "decode_step" and draw(st.booleans()),
                           decode_lead=(P,) if op == "decode_step" else None)
    # The two index tensors may have different dtypes.
    problem.q_idx = problem.q_idx.to(draw(st.sampled_from([torch.int32, torch.int64])))
    options = dict(slots_per_stream=slots, validate=draw(st.booleans()))
    if op != "decode_step":
        options["chunk_size"] = draw(st.integers(1, 10))
        # Quantised snapshots make gradients approximate: the autograd form keeps exact ones.
        modes = ["none", "bf16", "fp8", "int4"] if op != "write_read_grad" else ["none"]
        options["snapshot_quant"] = draw(st.sampled_from(modes))
    corruption = draw(st.sampled_from(CORRUPTIONS))
    return op, problem, options, corruption, draw(st.randoms(use_true_random=False))


def _corrupt(op, corruption, tensors, options, bank, rng):
    """Applies one corruption in place of `tensors` (a name -> tensor dict) / `options`. Returns
    False when the corruption leaves the call valid (so its results can be checked)."""
    slots = options["slots_per_stream"]
    if corruption in ("index_below", "index_at_end", "index_huge", "repeat_write"):
        name = "k_idx" if corruption == "repeat_write" or rng.random() < 0.5 else "q_idx"
        idx = tensors[name].clone()
        flat = idx.view(-1, idx.shape[-1])
        row = rng.randrange(flat.shape[0])
        stream = row // (flat.shape[0] // bank_streams(tensors))
        if corruption == "repeat_write":
            if flat.shape[1] < 2:
                return False
            flat[row, 1] = flat[row, 0]
        else:
            value = {"index_below": stream * slots - 1, "index_at_end": (stream + 1) * slots,
                     "index_huge": 2**31 - 1}[corruption]
            flat[row, rng.randrange(flat.shape[1])] = value
        tensors[name] = idx
        return True
    if corruption == "dtype":
        name = rng.choice(INPUT_NAMES)
        tensors[name] = tensors[name].to(rng.choice([torch.uint8, torch.float64, torch.int16]))
        return True
    if corruption == "shape":
        name = rng.choice(INPUT_NAMES)
        t = tensors[name]
        if rng.random() < 0.5:
            tensors[name] = t.unsqueeze(0)
            return True
        tensors[name] = torch.cat([t, t[..., :1]], dim=-1)
        # g [.., 1] -> [.., 2] is the valid per-write form when W = 2.
        return not (name == "g" and t.shape[-1] == 1 and tensors["k_idx"].shape[-1] == 2)
    if corruption == "empty":
        name = rng.choice(INPUT_NAMES)
        tensors[name] = tensors[name][..., :0]
        return True
    if corruption == "non_contiguous":
        name = rng.choice(INPUT_NAMES)
        t = tensors[name]
        tensors[name] = torch.stack([t, t], dim=-1)[..., 0]  # same values, stride 2
        return False
    if corruption == "meta":
        name = rng.choice(INPUT_NAMES)
        tensors[name] = tensors[name].to("meta")
        return True
    if corruption == "other_device":
        name = rng.choice(INPUT_NAMES)
        other = "cpu" if bank.is_cuda else ("cuda" if torch.cuda.is_available() else "meta")
        tensors[name] = tensors[name].to(other)
        return True
    if corruption == "alias":
        # A float input (of the bank's dtype) viewing the bank's bytes: refused by the in-place
        # ops, fine for the functional one (it never writes `memory`).
        name = rng.choice(FLOAT_INPUTS)
        t = tensors[name]
        if t.numel() > bank.numel():
            return False
        tensors[name] = bank.view(-1)[: t.numel()].view(t.shape)
        return op in ("write_read_", "decode_step")
    if corruption == "chunk_size" and "chunk_size" in options:
        options["chunk_size"] = rng.choice([0, -1, 257, 2**40])
        return True
    if corruption == "slots_per_stream":
        options["slots_per_stream"] = rng.choice([-1, 2**62, 2**63 - 1, slots * 2**20])
        return True
    if corruption == "snapshot_quant" and "snapshot_quant" in options:
        options["snapshot_quant"] = rng.choice(["fp16", "", "NONE"])
        return True
    if corruption == "option_type":
        key = rng.choice(sorted(options))
        options[key] = {"slots_per_stream": float(slots), "chunk_size": 2.5, "snapshot_quant": 4,
                        "validate": "yes"}[key]
        return True
    if corruption == "nonfinite":
        name = rng.choice(("k_val", "v", "q_val"))
        t = tensors[name].clone()
        t.view(-1)[rng.randrange(t.numel())] = rng.choice([float("nan"), float("inf"), -float("inf")])
        tensors[name] = t
        return False
    return False


def bank_streams(tensors):
    return tensors["k_idx"].shape[0]


def _run(op, bank, tensors, options):
    args = [tensors[n] for n in INPUT_NAMES]
    if op == "write_read":
        return sdm.write_read(bank, *args, **options)
    if op == "write_read_grad":
        leaf = bank.detach().clone().requires_grad_()
        floats = {n: tensors[n].detach().clone().requires_grad_() if tensors[n].is_floating_point()
                  and tensors[n].device.type != "meta" else tensors[n] for n in INPUT_NAMES}
        readings, final_bank = sdm.write_read(leaf, *(floats[n] for n in INPUT_NAMES), **options)
        (readings.float().square().sum() + final_bank.float().sum()).backward()
        return readings, final_bank, leaf.grad, floats["v"].grad
    if op == "write_read_":
        return sdm.write_read_(bank, *args, **options), bank
    return sdm.decode_step(bank, *args, **options), bank


def _reference(op, problem, tensors, options):
    """Readings and final bank (and gradients of the autograd form) from the float64 oracle."""
    args = {n: t.cpu() for n, t in tensors.items()}
    memory = problem.memory.clone()
    if op == "decode_step":
        args = {n: t.unsqueeze(1) for n, t in args.items()}  # [P, 1, ...]
    kw = dict(slots_per_stream=options["slots_per_stream"], chunk_size=options.get("chunk_size", 1))
    if op != "write_read_grad":
        readings, final_bank = sdm.reference.write_read(memory, *(args[n] for n in INPUT_NAMES), **kw)
        return (readings.squeeze(1) if op == "decode_step" else readings), final_bank
    leaf = memory.double().requires_grad_()
    floats = {n: args[n].double().requires_grad_() if args[n].is_floating_point() else args[n] for n in INPUT_NAMES}
    readings, final_bank = sdm.reference.write_read(leaf, *(floats[n] for n in INPUT_NAMES), **kw)
    # Same loss as _run, on the readings rounded to the bank dtype as the engine's are.
    (readings.square().sum() + final_bank.sum()).backward()
    return readings, final_bank, leaf.grad, floats["v"].grad


def _bits(t):
    """The tensor's bytes as integers, so that NaN compares equal to itself."""
    if not t.is_floating_point():
        return t
    return t.view({1: torch.uint8, 2: torch.int16, 4: torch.int32, 8: torch.int64}[t.element_size()])


def _close(got, want, dtype):
    got, want = got.detach().cpu().double(), want.detach().cpu().double()
    if want.abs().max().item() == 0:
        return got.abs().max().item() <= TOLERANCE[dtype]
    return rel_err(got, want) <= TOLERANCE[dtype] * (2 if dtype == torch.float32 else 1)


@pytest.mark.parametrize("device", DEVICES)
@FUZZ
@given(call=calls())
def test_every_entry_point_is_safe_on_any_input(device, call):
    op, problem, options, corruption, rng = call
    S, hd = problem.memory.shape
    storage = torch.full((S + 2 * GUARD, hd), 7.0, dtype=problem.memory.dtype, device=device)
    bank = storage[GUARD:GUARD + S]
    bank.copy_(problem.memory)
    tensors = dict(zip(INPUT_NAMES, (t.to(device) for t in problem.inputs())))
    corrupted = _corrupt(op, corruption, tensors, options, bank, rng)
    storage_before = storage.clone()
    inputs_before = {n: t.clone() for n, t in tensors.items() if t.device.type != "meta"}

    try:
        out = _run(op, bank, tensors, options)
    except (TypeError, ValueError, RuntimeError) as error:
        message = str(error)
        event(f"{corruption}: refused")
        assert corrupted, f"a valid call ({corruption}, {options}) was refused: {message}"
        assert any(name in message for name in ARGUMENT_NAMES), message
        assert torch.equal(_bits(storage), _bits(storage_before)), f"refused call modified the bank: {message}"
        for name, before in inputs_before.items():
            assert torch.equal(_bits(tensors[name]), _bits(before)), f"refused call modified {name}"
        return
    event(f"{corruption}: ran")
    # Invalid calls are refused whenever they are checked: only an index corruption with
    # validate=False runs (its entries masked).
    index_corruption = corruption in ("index_below", "index_at_end", "index_huge", "repeat_write")
    assert not corrupted or (index_corruption and not options["validate"]), \
        f"{corruption} was accepted: options {options}"
    # Guard rows are never written.
    assert torch.equal(storage[:GUARD], storage_before[:GUARD])
    assert torch.equal(storage[GUARD + S:], storage_before[GUARD + S:])
    if corrupted or corruption == "nonfinite":
        return
    want = _reference(op, problem, tensors, options)
    dtype = problem.memory.dtype
    for got_t, want_t in zip(out, want):
        assert _close(got_t, want_t, dtype), (op, options, rel_err(got_t, want_t))
