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
Coverage: the examples are spread deterministically over every (entry point, corruption) pair
(OPS x CORRUPTIONS, 66 pairs: decode_step has no chunk_size / snapshot_quant); within a pair
Hypothesis draws the rest (shape, dtypes, options: snapshot_quant including the lossy modes on the
saving path, grad_bank_fp32, validate). The autograd form compares all six gradients (memory,
k_val, v, beta, g, q_val). Uncorrupted calls get four times a corrupted pair's share, so most
examples are compared with the reference. A refused call must name the argument the corruption
touched (as a whole word: "v" does not match "k_val").
The reference runs on the inputs the engine computes with (k_val, v, q_val rounded to the bank
dtype). Tolerances are docs/numerics.md's ("The fuzz test's bounds" says why and what was
measured): readings and final bank 1e-4 (f32 bank) / 2e-2 (bf16), the decode step 1e-6 / 1e-2,
both against max(max|b|, the largest |entry| of the initial bank and v) (tiny sums cancel);
gradients 1e-4 / 3e-2 (bf16: 6e-2 for k_val, beta, g, q_val), with a lossy snapshot the gradients
of memory, v and beta its bound (bf16 1e-2, fp8 8e-2, int4 2e-1) and those of k_val, g and q_val
2 (a sanity bound).
CI runs a fixed, derandomized budget (CI_EXAMPLES over all pairs; the example set is a function of
this file and the Hypothesis version, 6.170.17 when written, with no example database);
SDM_FUZZ_EXAMPLES=N sets the budget (and draws fresh seeds).
"""

from __future__ import annotations

import os
import re

import pytest
import torch
from hypothesis import HealthCheck, event, given, settings
from hypothesis import strategies as st

import sdm
from conftest import make_problem
from gpu_support import GPU_TEST

EXAMPLES = int(os.environ.get("SDM_FUZZ_EXAMPLES", "0"))
CI_EXAMPLES = 1320

ARGUMENT_NAMES = ("memory", "k_idx", "k_val", "v", "beta", "g", "q_idx", "q_val", "slots_per_stream",
                  "chunk_size", "snapshot_quant", "grad_bank_fp32", "validate")
INPUT_NAMES = ("k_idx", "k_val", "v", "beta", "g", "q_idx", "q_val")
FLOAT_INPUTS = ("k_val", "v", "beta", "g", "q_val")
GRAD_NAMES = ("memory", "k_val", "v", "beta", "g", "q_val")
ROUNDED_ON_ENTRY = ("k_val", "v", "q_val")
GUARD = 2
# Against the float64 reference: docs/numerics.md's bounds ("The fuzz test's bounds" there says how
# the forward outputs are measured on these tiny shapes, and why three gradients of a lossy snapshot
# get a sanity bound only).
FORWARD_TOLERANCE = {torch.float32: 1e-4, torch.bfloat16: 2e-2}
DECODE_TOLERANCE = {torch.float32: 1e-6, torch.bfloat16: 1e-2}
GRAD_TOLERANCE = {torch.float32: 1e-4, torch.bfloat16: 3e-2}
# bf16 banks: the gradients of k_val, beta, g and q_val have a tail on tiny shapes (the C++ fuzz,
# tests/cpp/engine/test_fuzz_entry_points.cpp, measured 4.9e-2 once in 100000; this one <= 2.7e-2).
BF16_TAIL_GRADS, BF16_TAIL_TOLERANCE = ("k_val", "beta", "g", "q_val"), 6e-2
SNAPSHOT_GRAD_TOLERANCE = {"bf16": 1e-2, "fp8": 8e-2, "int4": 2e-1}
# The gradients formed as dot products of restored (quantised) rows with other terms.
ROW_DOT_GRADS = ("k_val", "g", "q_val")
ROW_DOT_LOSSY_TOLERANCE = 2.0

OPS = ("write_read", "write_read_grad", "write_read_", "decode_step")
CORRUPTIONS = ("none", "index_below", "index_at_end", "index_huge", "repeat_write", "dtype", "shape", "empty",
               "non_contiguous", "meta", "other_device", "alias", "chunk_size", "slots_per_stream",
               "snapshot_quant", "option_type", "nonfinite")
CHUNKED_ONLY = ("chunk_size", "snapshot_quant")  # options decode_step does not take
PAIRS = [(op, c) for op in OPS for c in CORRUPTIONS if not (op == "decode_step" and c in CHUNKED_ONLY)]
DEVICES = ["cpu", pytest.param("cuda", marks=GPU_TEST)]


def budget(corruption: str) -> int:
    """Examples of one (op, corruption) pair: the total spread over PAIRS, four shares for "none"."""
    total = EXAMPLES or CI_EXAMPLES
    shares = len(PAIRS) + 3 * len(OPS)
    return max(2, round(total * (4 if corruption == "none" else 1) / shares))


def fuzz_settings(corruption: str) -> settings:
    return settings(max_examples=budget(corruption), derandomize=not EXAMPLES, deadline=None, database=None,
                    suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large])


@st.composite
def calls(draw, op):
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
        # Lossy snapshots make the autograd form's gradients approximate (their own bounds).
        options["snapshot_quant"] = draw(st.sampled_from(["none", "bf16", "fp8", "int4"]))
        options["grad_bank_fp32"] = draw(st.booleans())
    return problem, options, draw(st.randoms(use_true_random=False))


def _corrupt(op, corruption, tensors, options, bank, rng):
    """Applies one corruption in place of `tensors` (a name -> tensor dict) / `options`. Returns
    (corrupted, touched): False when the corruption leaves the call valid (so its results can be
    checked), and the argument it changed (None when it changed nothing; a pair of names when a
    refusal may name either)."""
    corrupted, touched = _apply(op, corruption, tensors, options, bank, rng)
    return corrupted, touched


def _apply(op, corruption, tensors, options, bank, rng):
    slots = options["slots_per_stream"]
    if corruption in ("index_below", "index_at_end", "index_huge", "repeat_write"):
        name = "k_idx" if corruption == "repeat_write" or rng.random() < 0.5 else "q_idx"
        idx = tensors[name].clone()
        flat = idx.view(-1, idx.shape[-1])
        row = rng.randrange(flat.shape[0])
        stream = row // (flat.shape[0] // bank_streams(tensors))
        if corruption == "repeat_write":
            if flat.shape[1] < 2:
                return False, None
            flat[row, 1] = flat[row, 0]
        else:
            value = {"index_below": stream * slots - 1, "index_at_end": (stream + 1) * slots,
                     "index_huge": 2**31 - 1}[corruption]
            flat[row, rng.randrange(flat.shape[1])] = value
        tensors[name] = idx
        return True, name
    if corruption == "dtype":
        name = rng.choice(INPUT_NAMES)
        tensors[name] = tensors[name].to(rng.choice([torch.uint8, torch.float64, torch.int16]))
        return True, name
    if corruption == "shape":
        name = rng.choice(INPUT_NAMES)
        t = tensors[name]
        if rng.random() < 0.5:
            tensors[name] = t.unsqueeze(0)
            # beta [P, T] -> [1, P, T] is the valid [P, T, 1] form when P = T = 1.
            valid = op != "decode_step" and name == "beta" and t.dim() == 2 and t.shape == (1, 1)
            return not valid, None if valid else name
        W = tensors["k_idx"].shape[-1]
        tensors[name] = torch.cat([t, t[..., :1]], dim=-1)
        # g [.., 1] -> [.., 2] is the valid per-write form when W = 2.
        if name == "g" and t.shape[-1] == 1 and W == 2:
            return False, None
        # W (R) is carried by k_idx and k_val (q_idx and q_val) alone unless g is per-write
        # (G = W > 1): one of two disagreeing tensors has no majority against it, and the
        # message may name either.
        pair = {"k_idx": "k_val", "k_val": "k_idx", "q_idx": "q_val", "q_val": "q_idx"}.get(name)
        if pair is not None and not (name[0] == "k" and W > 1 and tensors["g"].shape[-1] == W):
            return True, (name, pair)
        return True, name
    if corruption == "empty":
        name = rng.choice(INPUT_NAMES)
        tensors[name] = tensors[name][..., :0]
        return True, name
    if corruption == "non_contiguous":
        name = rng.choice(INPUT_NAMES)
        t = tensors[name]
        tensors[name] = torch.stack([t, t], dim=-1)[..., 0]  # same values, stride 2
        return False, name
    if corruption == "meta":
        name = rng.choice(INPUT_NAMES)
        tensors[name] = tensors[name].to("meta")
        return True, name
    if corruption == "other_device":
        name = rng.choice(INPUT_NAMES)
        other = "cpu" if bank.is_cuda else ("cuda" if torch.cuda.is_available() else "meta")
        tensors[name] = tensors[name].to(other)
        return True, name
    if corruption == "alias":
        # A float input (of the bank's dtype) viewing the bank's bytes: refused by the in-place
        # ops, fine for the functional one (it never writes `memory`).
        name = rng.choice(FLOAT_INPUTS)
        t = tensors[name]
        if t.numel() > bank.numel():
            return False, None
        tensors[name] = bank.view(-1)[: t.numel()].view(t.shape)
        return op in ("write_read_", "decode_step"), name
    if corruption == "chunk_size":
        options["chunk_size"] = rng.choice([0, -1, 257, 2**40])
        return True, "chunk_size"
    if corruption == "slots_per_stream":
        options["slots_per_stream"] = rng.choice([-1, 2**62, 2**63 - 1, slots * 2**20])
        return True, "slots_per_stream"
    if corruption == "snapshot_quant":
        options["snapshot_quant"] = rng.choice(["fp16", "", "NONE"])
        return True, "snapshot_quant"
    if corruption == "option_type":
        key = rng.choice(sorted(options))
        options[key] = {"slots_per_stream": float(slots), "chunk_size": 2.5, "snapshot_quant": 4,
                        "grad_bank_fp32": 1, "validate": "yes"}[key]
        return True, key
    if corruption == "nonfinite":
        name = rng.choice(("k_val", "v", "q_val"))
        t = tensors[name].clone()
        t.view(-1)[rng.randrange(t.numel())] = rng.choice([float("nan"), float("inf"), -float("inf")])
        tensors[name] = t
        return False, name
    assert corruption == "none", corruption
    return False, None


def bank_streams(tensors):
    return tensors["k_idx"].shape[0]


def names(message: str, argument: str) -> bool:
    """Whether `message` names `argument` as a word of its own ("v" is not in "k_val")."""
    return re.search(rf"(?<![A-Za-z0-9_]){re.escape(argument)}(?![A-Za-z0-9_])", message) is not None


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
        return readings, final_bank, leaf.grad, *(floats[n].grad for n in FLOAT_INPUTS)
    if op == "write_read_":
        return sdm.write_read_(bank, *args, **options), bank
    return sdm.decode_step(bank, *args, **options), bank


def _reference(op, problem, tensors, options):
    """Readings and final bank (and the six gradients of the autograd form) from the float64 oracle,
    on the inputs the engine computes with: k_val, v and q_val rounded to the bank dtype
    (docs/numerics.md: the accuracy is measured on the same rounded inputs)."""
    memory = problem.memory.clone()
    args = {n: t.cpu().to(memory.dtype) if n in ROUNDED_ON_ENTRY else t.cpu() for n, t in tensors.items()}
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
    return readings, final_bank, leaf.grad, *(floats[n].grad for n in FLOAT_INPUTS)


def _bits(t):
    """The tensor's bytes as integers, so that NaN compares equal to itself."""
    if not t.is_floating_point():
        return t
    return t.view({1: torch.uint8, 2: torch.int16, 4: torch.int32, 8: torch.int64}[t.element_size()])


def _error(got, want, floor: float = 0.0) -> float:
    """max|got - want| / max(max|want|, floor); the largest |got| when both are 0."""
    got, want = got.detach().cpu().double(), want.detach().cpu().double()
    scale = max(want.abs().max().item(), floor)
    if scale == 0:
        return got.abs().max().item()
    return (got - want).abs().max().item() / scale


def _lossy_snapshot(op, dtype, options) -> bool:
    """Whether the call's gradients come from a lossy snapshot (bf16 on a bf16 bank is "none")."""
    if op != "write_read_grad":
        return False
    mode = options["snapshot_quant"]
    return not (mode == "none" or (mode == "bf16" and dtype == torch.bfloat16))


def _row_dot_floor(op, dtype, want, options) -> float:
    """The scale the sanity bound of a lossy snapshot's row-dot gradients (ROW_DOT_GRADS) is
    measured against: the largest |entry| of any reference gradient of the call. Their quantisation
    error scales with the restored rows and the bank gradient, not with the result, which can cancel
    to far below it (a fresh example: grad_g 7.6e-4 against 1.65e-3 on the CPU and the GPU alike,
    bank gradient 1.0; docs/numerics.md, "The fuzz test's bounds"). 0 (the plain metric) otherwise."""
    if not _lossy_snapshot(op, dtype, options):
        return 0.0
    return max(w.detach().abs().max().item() for w in want[2:] if w.numel() > 0)


def _forward_floor(problem) -> float:
    """The scale of the bank rows a call computes with (its initial bank and values): readings and
    final bank are sums of such rows, and on these tiny shapes they can cancel to far below it,
    so their rounding errors are measured against it (docs/numerics.md, "The fuzz test's bounds")."""
    return max(problem.memory.abs().max().item(), problem.v.abs().max().item())


def _tolerances(op, dtype, options):
    """Per output of _run: readings, final bank, then (autograd form) the six gradients."""
    if op == "decode_step":
        return [DECODE_TOLERANCE[dtype]] * 2
    forward = [FORWARD_TOLERANCE[dtype]] * 2
    if op != "write_read_grad":
        return forward
    exact = [BF16_TAIL_TOLERANCE if dtype == torch.bfloat16 and name in BF16_TAIL_GRADS else GRAD_TOLERANCE[dtype]
             for name in GRAD_NAMES]
    if not _lossy_snapshot(op, dtype, options):
        return forward + exact
    lossy = [max(tol, SNAPSHOT_GRAD_TOLERANCE[options["snapshot_quant"]]) for tol in exact]
    return forward + [ROW_DOT_LOSSY_TOLERANCE if name in ROW_DOT_GRADS else tol
                      for name, tol in zip(GRAD_NAMES, lossy)]


def check_call(device, op, corruption, call):
    problem, options, rng = call
    S, hd = problem.memory.shape
    storage = torch.full((S + 2 * GUARD, hd), 7.0, dtype=problem.memory.dtype, device=device)
    bank = storage[GUARD:GUARD + S]
    bank.copy_(problem.memory)
    tensors = dict(zip(INPUT_NAMES, (t.to(device) for t in problem.inputs())))
    corrupted, touched = _corrupt(op, corruption, tensors, options, bank, rng)
    storage_before = storage.clone()
    inputs_before = {n: t.clone() for n, t in tensors.items() if t.device.type != "meta"}

    try:
        out = _run(op, bank, tensors, options)
    except (TypeError, ValueError, RuntimeError) as error:
        message = str(error)
        event(f"{op} {corruption}: refused")
        assert corrupted, f"a valid call ({op}, {corruption}, {options}) was refused: {message}"
        touched = (touched,) if isinstance(touched, str) else touched or ()
        assert any(names(message, argument) for argument in touched), \
            f"{op} {corruption}: the message does not name {' or '.join(touched) or '(nothing touched)'}: {message}"
        assert torch.equal(_bits(storage), _bits(storage_before)), f"refused call modified the bank: {message}"
        for name, before in inputs_before.items():
            assert torch.equal(_bits(tensors[name]), _bits(before)), f"refused call modified {name}"
        return
    event(f"{op} {corruption}: ran")
    # Invalid calls are refused whenever they are checked: only an index corruption with
    # validate=False runs (its entries masked).
    index_corruption = corruption in ("index_below", "index_at_end", "index_huge", "repeat_write")
    assert not corrupted or (index_corruption and not options["validate"]), \
        f"{op} {corruption} was accepted: options {options}"
    # Guard rows are never written.
    assert torch.equal(storage[:GUARD], storage_before[:GUARD])
    assert torch.equal(storage[GUARD + S:], storage_before[GUARD + S:])
    if corrupted or corruption == "nonfinite":
        return
    want = _reference(op, problem, tensors, options)
    labels = ("readings", "final_bank", *(f"grad_{n}" for n in GRAD_NAMES))
    tolerances = _tolerances(op, problem.memory.dtype, options)
    assert len(out) == len(want) == len(tolerances)
    event(f"{op}: compared with the reference")
    floor = _forward_floor(problem)
    row_dot_floor = _row_dot_floor(op, problem.memory.dtype, want, options)
    for i, (label, got_t, want_t, tol) in enumerate(zip(labels, out, want, tolerances)):
        assert got_t is not None, label
        if i < 2:
            error = _error(got_t, want_t, floor)
        else:
            error = _error(got_t, want_t, row_dot_floor if GRAD_NAMES[i - 2] in ROW_DOT_GRADS else 0.0)
        assert error <= tol, (op, label, problem.memory.dtype, options, error, tol)


@pytest.mark.parametrize("device", DEVICES)
def test_every_entry_point_is_safe_on_any_input(device):
    """Every (entry point, corruption) pair, each with its budget of drawn examples."""
    for op, corruption in PAIRS:
        @fuzz_settings(corruption)
        @given(call=calls(op))
        def check(call):
            check_call(device, op, corruption, call)

        check()
