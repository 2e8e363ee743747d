"""torch.ops.sdm.product_key_topk (CPU kernel): the selection rule against a brute-force
statement of it (topk_rule.py) on awkward inputs, the exact-top-k property, the backward
(finite differences in float64, the scatter formulation, bitwise determinism), fake kernels
and compile, and every argument check's message."""

from __future__ import annotations

import math
import zlib

import pytest
import torch

import sdm
from topk_rule import reference_topk

DTYPES = [torch.float32, torch.bfloat16, torch.float16, torch.float64]
INT_VIEW = {torch.float32: torch.int32, torch.bfloat16: torch.int16, torch.float16: torch.int16,
            torch.float64: torch.int64}


def bits(t: torch.Tensor) -> torch.Tensor:
    return t.contiguous().view(INT_VIEW[t.dtype])


def same_values(a: torch.Tensor, b: torch.Tensor) -> bool:
    """Bitwise equal, except that any NaN equals any NaN (IEEE leaves a NaN's sign and
    payload to the hardware)."""
    nan = a.isnan()
    return torch.equal(nan, b.isnan()) and torch.equal(bits(a)[~nan], bits(b)[~nan])


def awkward_scores(shape, kind: str, dtype: torch.dtype, generator: torch.Generator) -> torch.Tensor:
    """'randn', 'ties' (small integers and halves: exact ties everywhere, also among sums),
    'special' (ties plus signed zeros, NaN, +-inf)."""
    if kind == "randn":
        return torch.randn(shape, generator=generator).to(dtype)
    x = torch.randint(-3, 4, shape, generator=generator).double() / 2
    if kind == "special":
        pick = torch.randint(0, 8, shape, generator=generator)
        x = torch.where(pick == 0, torch.tensor(-0.0, dtype=torch.float64), x)
        x = torch.where(pick == 1, torch.tensor(0.0, dtype=torch.float64), x)
        x = torch.where(pick == 2, torch.tensor(math.nan, dtype=torch.float64), x)
        x = torch.where(pick == 3, torch.tensor(-math.inf, dtype=torch.float64), x)
        x = torch.where((pick == 4) & (torch.rand(shape, generator=generator) < 0.3),
                        torch.tensor(math.inf, dtype=torch.float64), x)
    return x.to(dtype)


FACTOR_CASES = [
    ([7], 3), ([5], 9), ([4, 4], 5), ([6, 6], 36), ([3, 5], 4), ([1, 9], 4), ([9, 1], 9),
    ([8, 8], 64), ([16, 16], 17), ([3, 5, 2], 7), ([4, 3, 5, 2], 11), ([2] * 9, 40), ([1, 1, 1], 2),
    ([5, 1, 3], 15), ([12, 12], 256),
]


@pytest.mark.parametrize("dims,k", FACTOR_CASES)
@pytest.mark.parametrize("kind", ["randn", "ties", "special"])
@pytest.mark.parametrize("dtype", DTYPES)
def test_selection_follows_the_rule(dims, k, kind, dtype):
    # A seed fixed by the case (crc32 of its description; Python's hash() of a str changes every run).
    generator = torch.Generator().manual_seed(zlib.crc32(repr((tuple(dims), k, kind, str(dtype))).encode()))
    raw = awkward_scores((3, 2, sum(dims)), kind, dtype, generator)
    values, slots = sdm.product_key_topk(raw, dims, k)
    want_values, want_slots = reference_topk(raw, dims, k)
    assert slots.dtype == torch.int64 and values.dtype == dtype
    assert torch.equal(slots, want_slots)
    assert same_values(values, want_values)


def test_bfloat16_selects_like_its_float32_upcast_with_two_factors():
    generator = torch.Generator().manual_seed(3)
    raw = awkward_scores((64, 32), "ties", torch.bfloat16, generator)
    _, slots = sdm.product_key_topk(raw, [16, 16], 64)
    _, slots32 = sdm.product_key_topk(raw.float(), [16, 16], 64)
    assert torch.equal(slots, slots32)


@pytest.mark.parametrize("dims,k", [([32, 32], 64), ([40, 24], 100), ([6, 7, 8], 50), ([300], 256)])
def test_selected_scores_are_an_exact_top_k(dims, k):
    # float32 scores without ties: the selection holds the k largest of all prod(dims) sums.
    raw = torch.randn(20, sum(dims), dtype=torch.float64).float()
    values, slots = sdm.product_key_topk(raw, dims, k)
    every = raw[:, :dims[0]]
    offset = dims[0]
    for w in dims[1:]:
        every = (every.unsqueeze(-1) + raw[:, offset:offset + w].unsqueeze(-2)).flatten(-2)
        offset += w
    best = torch.topk(every, min(k, every.shape[-1]), dim=-1).indices.sort(dim=-1).values
    assert torch.equal(slots, best)
    assert torch.equal(values, every.gather(-1, slots))
    assert (slots[:, 1:] > slots[:, :-1]).all()


def test_any_leading_shape_strides_and_empty_rows():
    raw = torch.randn(2, 3, 5, 18)
    values, slots = sdm.product_key_topk(raw, [9, 9], 10)
    assert values.shape == (2, 3, 5, 10)
    strided = raw.transpose(1, 2)  # non-contiguous rows
    v2, s2 = sdm.product_key_topk(strided, [9, 9], 10)
    assert torch.equal(s2, slots.transpose(1, 2)) and torch.equal(v2, values.transpose(1, 2))
    columns = torch.randn(18, 4).t()  # columns not contiguous: copied
    v3, s3 = sdm.product_key_topk(columns, [9, 9], 10)
    v4, s4 = sdm.product_key_topk(columns.contiguous(), [9, 9], 10)
    assert torch.equal(s3, s4) and torch.equal(v3, v4)
    v0, s0 = sdm.product_key_topk(torch.randn(0, 3, 18), [9, 9], 10)
    assert v0.shape == (0, 3, 10) and s0.shape == (0, 3, 10)


def test_gradients_match_finite_differences_in_float64():
    generator = torch.Generator().manual_seed(5)
    for dims, k in (([6, 6], 7), ([4, 3, 5], 9), ([11], 4)):
        raw = torch.randn(3, 2, sum(dims), dtype=torch.float64, generator=generator, requires_grad=True)
        assert torch.autograd.gradcheck(lambda r: sdm.product_key_topk(r, dims, k)[0], (raw,))


@pytest.mark.parametrize("dtype", DTYPES)
def test_backward_equals_the_scatter_formulation(dtype):
    dims, k = [5, 4, 6], 20
    raw = torch.randn(7, 3, sum(dims)).to(dtype).requires_grad_()
    values, slots = sdm.product_key_topk(raw, dims, k)
    grad = torch.randn(values.shape).to(dtype)
    values.backward(grad)
    want = torch.zeros(raw.shape, dtype=torch.float64)
    radix, offset = math.prod(dims), 0
    for w in dims:
        radix //= w
        want.scatter_add_(-1, slots // radix % w + offset, grad.double())
        offset += w
    tolerance = {torch.float64: 0, torch.float32: 1e-6}.get(dtype, 1e-2)
    assert raw.grad.dtype == dtype
    torch.testing.assert_close(raw.grad.double(), want, rtol=tolerance, atol=tolerance)
    untouched = want == 0
    assert (raw.grad[untouched] == 0).all()


def test_forward_and_backward_are_bitwise_deterministic_across_thread_counts(monkeypatch):
    raw = torch.randn(301, 38).bfloat16()
    grad = torch.randn(301, 48).bfloat16()
    results = []
    for threads in ("1", "2", "3"):
        monkeypatch.setenv("SDM_NUM_THREADS", threads)
        r = raw.clone().requires_grad_()
        values, slots = sdm.product_key_topk(r, [16, 4, 6, 12], 48)
        values.backward(grad)
        results.append((bits(values), slots, bits(r.grad)))
    for other in results[1:]:
        assert all(torch.equal(a, b) for a, b in zip(results[0], other))


def test_compiles_fullgraph_and_passes_opcheck():
    raw = torch.randn(4, 5, 24, requires_grad=True)
    compiled = torch.compile(lambda r: sdm.product_key_topk(r, [12, 12], 9), fullgraph=True, backend="aot_eager")
    values, slots = compiled(raw)
    want_values, want_slots = sdm.product_key_topk(raw, [12, 12], 9)
    assert torch.equal(values, want_values) and torch.equal(slots, want_slots)
    torch.library.opcheck(torch.ops.sdm.product_key_topk.default, (raw, [12, 12], 9))
    torch.library.opcheck(torch.ops.sdm.product_key_topk.default, (raw.detach().double(), [4, 3, 17], 5))


def test_fake_kernel_applies_the_same_checks():
    from torch._subclasses.fake_tensor import FakeTensorMode

    with FakeTensorMode():
        raw = torch.empty(3, 9)
        values, slots = torch.ops.sdm.product_key_topk(raw, [4, 5], 30)
        assert values.shape == (3, 20) and slots.dtype == torch.int64
        with pytest.raises(ValueError, match="raw has 9 columns but factor_dims = \\[4, 4\\] sum to 8"):
            torch.ops.sdm.product_key_topk(raw, [4, 4], 3)


@pytest.mark.parametrize("call,error,message", [
    (lambda: sdm.product_key_topk(torch.randn(2, 8), [4, 4], 0), ValueError, "k must be in 1..256, got 0"),
    (lambda: sdm.product_key_topk(torch.randn(2, 8), [4, 4], 257), ValueError, "k must be in 1..256, got 257"),
    (lambda: sdm.product_key_topk(torch.randn(2, 9), [4, 4], 3), ValueError,
     "raw has 9 columns but factor_dims = \\[4, 4\\] sum to 8"),
    (lambda: sdm.product_key_topk(torch.randn(2, 8), [], 3), ValueError, "factor_dims must list 1 to 512"),
    (lambda: sdm.product_key_topk(torch.randn(2, 8), [8, 0], 3), ValueError, "factor_dims\\[1\\] must be in 1.."),
    (lambda: sdm.product_key_topk(torch.randn(2, 513), [1] * 513, 3), ValueError, "got 513"),
    (lambda: sdm.product_key_topk(torch.randn(1, 3 * 2048), [2048] * 3, 3), ValueError,
     "address more than 4294967295 slots"),
    (lambda: sdm.product_key_topk(torch.ones(2, 8, dtype=torch.int32), [4, 4], 3), TypeError,
     "raw must be float32, bfloat16, float16 or float64, got int32"),
    (lambda: sdm.product_key_topk(torch.tensor(1.0), [1], 1), ValueError, "raw must have at least one dimension"),
    (lambda: torch.ops.sdm.product_key_topk_backward(torch.zeros(2, 3, dtype=torch.long), torch.zeros(2, 4), [4, 4]),
     ValueError, "grad_values must have slots' shape"),
    (lambda: torch.ops.sdm.product_key_topk_backward(torch.zeros(2, 3, dtype=torch.int32), torch.zeros(2, 3), [4, 4]),
     TypeError, "slots must be int64, got int32"),
    (lambda: torch.ops.sdm.product_key_topk_backward(torch.zeros(2, 17, dtype=torch.long), torch.zeros(2, 17), [4, 4]),
     ValueError, "slots must be \\[rows, kk\\] with kk in 1..min\\(256, prod\\(factor_dims\\) = 16\\)"),
])
def test_bad_arguments_are_refused_with_a_message_naming_them(call, error, message):
    with pytest.raises(error, match=message):
        call()


def test_backward_masks_slot_ids_outside_the_bank_without_validate():
    # (With validate, the default, they are refused by name: test_index_shapes.py.)
    slots = torch.tensor([[0, 5, 99, -1]])
    grad = torch.ones(1, 4)
    with pytest.raises(ValueError, match=r"slots\[row 0, entry 2\] = 99 is outside"):
        torch.ops.sdm.product_key_topk_backward(slots, grad, [4, 4])
    grad_raw = torch.ops.sdm.product_key_topk_backward(slots, grad, [4, 4], validate=False)
    want = torch.zeros(1, 8)
    want[0, [0, 1]] = 1  # slot 0 = (0, 0), slot 5 = (1, 1)
    want[0, [4, 5]] = 1
    assert torch.equal(grad_raw, want)
