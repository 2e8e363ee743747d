"""The limits and defaults have one source, C++ (include/sdm/options.hpp, product_key_topk.hpp,
types.hpp), reported by torch.ops.sdm.limits(): the numbers docs/spec.md promises are the ones
it reports (a changed C++ constant fails here), every Python name and signature default is the
reported one, and each limit behaves as stated (the value at the limit is accepted, the next one
refused with the C++ message naming the argument)."""

from __future__ import annotations

import inspect
import pathlib
import re

import pytest
import torch

import sdm
from sdm import args as sdm_args
from sdm import product_keys
from sdm._ops import LIMITS

SPEC = (pathlib.Path(__file__).resolve().parents[2] / "docs" / "spec.md").read_text()


def _number(text: str) -> int:
    """'256', '2^31 - 1', '2^52' as an int."""
    match = re.fullmatch(r"\s*(\d+)(?:\^(\d+))?\s*(?:-\s*(\d+))?\s*", text)
    assert match, f"not a documented number: {text!r}"
    base, power, minus = match.groups()
    return int(base) ** int(power or 1) - int(minus or 0)


def _documented(pattern: str) -> int:
    """The number that `pattern`'s one group captures in docs/spec.md (found exactly once)."""
    found = re.findall(pattern, SPEC)
    assert len(found) == 1, f"docs/spec.md: {pattern!r} matches {len(found)} times"
    return _number(found[0])


NUMBER = r"(\d+(?:\^\d+)?(?: - \d+)?)"
DOCUMENTED = {
    "max_width": rf"\| W, R \| 1\.\.{NUMBER} \|",
    "max_chunk": rf"\| `chunk_size` \| 1\.\.{NUMBER} \(checked",
    "max_bank_rows": rf"\| bank rows S \| 1 \.\. {NUMBER} \|",
    "max_elements": rf"every tensor at most {NUMBER} elements",
    "max_dims": rf"\| tensor rank \| at most {NUMBER} dimensions",
    "default_chunk": rf"`WriteReadOptions {{slots_per_stream \(required\), chunk_size = {NUMBER},",
    "max_product_key_factors": rf"Limits: 1 to {NUMBER} factors of\s+width",
    "max_product_key_k": rf"at most 2\^32 - 1, `k` in 1\.\.{NUMBER}",
    "max_product_key_slots": rf"`prod\(n_f\)` and `sum\(n_f\)` at most {NUMBER},",
}


def test_limits_reports_each_constant_once_under_its_name():
    assert list(torch.ops.sdm.limits()) == list(DOCUMENTED)
    assert LIMITS == torch.ops.sdm.limits()
    assert all(type(value) is int for value in LIMITS.values())


@pytest.mark.parametrize("name", DOCUMENTED)
def test_the_cpp_constant_is_the_documented_number(name):
    assert LIMITS[name] == _documented(DOCUMENTED[name]), name


def test_the_documented_defaults_agree():
    """The Python signature, the args table and the C++ options state one chunk_size default."""
    assert _documented(r"slots_per_stream, chunk_size=(\d+), snapshot_quant") == LIMITS["default_chunk"]
    assert _documented(r"\| `chunk_size` \| None \(= (\d+)\) \|") == LIMITS["default_chunk"]
    assert _documented(r"\| `num_writes`, `num_reads` \| 64, 64 \| K of the write / read addressing, "
                       rf"in 1\.\.{NUMBER};") == min(LIMITS["max_width"], LIMITS["max_product_key_k"])


def test_python_names_are_the_cpp_values():
    assert (product_keys.MAX_FACTORS, product_keys.MAX_K, product_keys.MAX_SLOTS) == (
        LIMITS["max_product_key_factors"], LIMITS["max_product_key_k"], LIMITS["max_product_key_slots"])
    assert (sdm_args.DEFAULT_CHUNK_SIZE, sdm_args.MAX_CHUNK_SIZE, sdm_args.MAX_BANK_ROWS) == (
        LIMITS["default_chunk"], LIMITS["max_chunk"], LIMITS["max_bank_rows"])
    assert sdm_args.MAX_READS_WRITES == min(LIMITS["max_width"], LIMITS["max_product_key_k"])


CHUNKED_OPS = ("write_read_", "write_read_saving", "write_read_plan", "check_write_read", "write_read_backward",
               "reference_write_read", "reference_write_read_backward")


@pytest.mark.parametrize("op", CHUNKED_OPS)
def test_every_schema_defaults_chunk_size_to_the_cpp_default(op):
    (argument,) = [a for a in getattr(torch.ops.sdm, op).default._schema.arguments if a.name == "chunk_size"]
    assert argument.default_value == LIMITS["default_chunk"]


@pytest.mark.parametrize("function", [sdm.write_read, sdm.write_read_, sdm.reference.write_read])
def test_every_python_signature_defaults_chunk_size_to_the_cpp_default(function):
    assert inspect.signature(function).parameters["chunk_size"].default == LIMITS["default_chunk"]


def test_docstrings_state_the_cpp_limits():
    for function in (sdm.write_read, sdm.write_read_, sdm.decode_step):
        if function.__doc__ is None:  # python -OO
            pytest.skip("docstrings stripped")
        assert "{" not in function.__doc__, function.__name__
        assert f"W and R are in 1..{LIMITS['max_width']}" in function.__doc__
    assert (f"chunk_size        int in 1..{LIMITS['max_chunk']} (default {LIMITS['default_chunk']})"
            in sdm.write_read.__doc__)


def _args(**fields) -> sdm.SparseDeltaMemoryArgs:
    return sdm.SparseDeltaMemoryArgs(**{"dim": 8, "slots_per_head": 16, "num_writes": 4, "num_reads": 4, **fields})


def test_the_layer_default_chunk_size_is_the_cpp_default():
    args = _args()
    assert args.chunk_size is None  # 2.0.0: None stays None in the args
    assert args.effective_chunk_size == LIMITS["default_chunk"]
    assert sdm.SparseDeltaMemory(args).chunk_size == LIMITS["default_chunk"]


def _problem(T: int, hd: int = 4, W: int = 2, S: int = 8):
    g = torch.Generator().manual_seed(3)
    idx = torch.stack([torch.randperm(S, generator=g)[:W] for _ in range(T)]).view(1, T, W)
    return dict(memory=torch.randn(S, hd, generator=g), k_idx=idx, k_val=torch.rand(1, T, W, generator=g),
                v=torch.randn(1, T, hd, generator=g), beta=torch.rand(1, T, generator=g),
                g=-torch.rand(1, T, 1, generator=g), q_idx=idx.flip(-1), q_val=torch.rand(1, T, W, generator=g))


def test_the_op_default_is_the_reported_default():
    """A call without chunk_size is bitwise the call with the reported default, and (T above it)
    not the call with another chunk size, so the default reaches the engine."""
    T = LIMITS["default_chunk"] + 5
    inputs = _problem(T)
    default, _ = sdm.write_read(**inputs, slots_per_stream=8)
    same, _ = sdm.write_read(**inputs, slots_per_stream=8, chunk_size=LIMITS["default_chunk"])
    assert torch.equal(default, same)
    others = [sdm.write_read(**inputs, slots_per_stream=8, chunk_size=c)[0] for c in (1, 2, 3, T)]
    assert not all(torch.equal(default, other) for other in others)


def test_chunk_size_at_the_limit_is_accepted_and_above_it_refused():
    limit = LIMITS["max_chunk"]
    inputs = _problem(T=3)
    sdm.write_read(**inputs, slots_per_stream=8, chunk_size=limit)
    with pytest.raises(ValueError, match=rf"chunk_size must be in 1\.\.{limit}, got {limit + 1}"):
        sdm.write_read(**inputs, slots_per_stream=8, chunk_size=limit + 1)
    assert _args(chunk_size=limit).chunk_size == limit
    with pytest.raises(ValueError, match=rf"SparseDeltaMemoryArgs\.chunk_size must be None or an int in 1\.\.{limit}, "
                                         rf"got {limit + 1}"):
        _args(chunk_size=limit + 1)


def test_k_at_the_limit_is_accepted_and_above_it_refused():
    limit = LIMITS["max_product_key_k"]
    raw = torch.randn(2, 2 * 32)
    values, slots = sdm.product_key_topk(raw, [32, 32], limit)
    assert values.shape == slots.shape == (2, limit)
    with pytest.raises(ValueError, match=rf"k must be in 1\.\.{limit}, got {limit + 1}"):
        sdm.product_key_topk(raw, [32, 32], limit + 1)
    rw = sdm_args.MAX_READS_WRITES
    assert _args(slots_per_head=1024, num_writes=rw, num_reads=rw).num_writes == rw
    with pytest.raises(ValueError, match=rf"SparseDeltaMemoryArgs\.num_reads must be an int in 1\.\.{rw}, "
                                         rf"got {rw + 1}"):
        _args(slots_per_head=1024, num_reads=rw + 1)


def test_factor_count_at_the_limit_is_accepted_and_above_it_refused():
    limit = LIMITS["max_product_key_factors"]
    assert _args(slots_per_head=1, product_key_factor_dims=[1] * limit).factor_dims() == (1,) * limit
    assert torch.ops.sdm.product_key_columns([1] * limit) == limit
    with pytest.raises(ValueError, match=rf"^SparseDeltaMemoryArgs\.product_key_factor_dims: factor_dims must list "
                                         rf"1 to {limit} factor widths, got {limit + 1}$"):
        _args(slots_per_head=1, product_key_factor_dims=[1] * (limit + 1))
    with pytest.raises(ValueError, match=rf"^factor_dims must list 1 to {limit} factor widths, got {limit + 1}$"):
        sdm.product_key_topk(torch.randn(1, limit + 1), [1] * (limit + 1), 1)


def test_slots_and_columns_at_the_limit_are_accepted_and_above_it_refused():
    limit = LIMITS["max_product_key_slots"]
    fit = [65537, 65535]  # 2^32 - 1 slots
    assert limit == 65537 * 65535, "the widths below assume the documented 2^32 - 1"
    assert product_keys.check_factor_dims(fit) == tuple(fit)
    assert product_keys.check_factor_dims([limit]) == (limit,)
    with pytest.raises(ValueError, match=rf"^X: factor_dims = \[65536, 65536\] address more than {limit} slots$"):
        product_keys.check_factor_dims([65536, 65536], "X")
    with pytest.raises(ValueError, match=rf"^factor_dims = \[{limit}, 1\] sum to more than {limit} columns$"):
        product_keys.check_factor_dims([limit, 1])
    with pytest.raises(ValueError, match=rf"factor_dims\[0\] must be in 1\.\.{limit}, got {limit + 1}"):
        product_keys.check_factor_dims([limit + 1])


@pytest.mark.parametrize("dims,message", [
    ([8, 0], r"factor_dims\[1\] must be in 1\.\.4294967295, got 0 \(factor_dims = \[8, 0\]\)"),
    ([], "factor_dims must list 1 to 512 factor widths, got 0"),
    ([2**64], r"must hold 64-bit ints, got \[18446744073709551616\]"),
    ([4, True], r"must hold ints, got \[4, True\]"),
    ("16x16", "must be a sequence of ints, got '16x16'"),
])
def test_python_refuses_factor_dims_as_the_op_does(dims, message):
    with pytest.raises(ValueError, match=message):
        product_keys.check_factor_dims(dims)
    if isinstance(dims, list) and all(type(w) is int and abs(w) < 2**63 for w in dims):
        with pytest.raises(ValueError, match=message):  # the op's own message, word for word
            sdm.product_key_topk(torch.randn(1, max(sum(dims), 1)), dims, 1)


def test_the_backward_fake_kernel_refuses_factor_dims_as_the_op_does():
    from torch._subclasses.fake_tensor import FakeTensorMode

    slots = torch.zeros(2, 3, dtype=torch.int64)
    grad = torch.ones(2, 3)
    message = r"factor_dims\[1\] must be in 1\.\.4294967295, got 0"
    with pytest.raises(ValueError, match=message):
        torch.ops.sdm.product_key_topk_backward(slots, grad, [4, 0])
    with FakeTensorMode() as mode:
        fake_slots, fake_grad = mode.from_tensor(slots), mode.from_tensor(grad)
        assert torch.ops.sdm.product_key_topk_backward(fake_slots, fake_grad, [4, 5]).shape == (2, 9)
        with pytest.raises(ValueError, match=message):
            torch.ops.sdm.product_key_topk_backward(fake_slots, fake_grad, [4, 0])
