"""Bad calls of the ops are refused before any work, with an error naming what the user passed,
and nothing is modified: sizes that would wrap in 64 bits, tensors on different (or meta)
devices, inputs sharing memory with the bank, inputs of too many dims, options of the wrong
type. The fake (meta) kernels apply the same rules as the real ones."""

from __future__ import annotations

import pytest
import torch
from torch._subclasses.fake_tensor import FakeTensorMode

import sdm
from conftest import make_problem

SLOTS = 8


def _problem(P=2, T=5, **kw):
    return make_problem(P=P, T=T, W=3, R=2, hd=4, slots_per_stream=SLOTS, dtype=torch.float32, **kw)


def _guarded_bank(p, guard_rows=2):
    """The problem's bank as a view inside a larger tensor, with guard rows of NaN around it."""
    S, hd = p.memory.shape
    storage = torch.full((S + 2 * guard_rows, hd), float("nan"))
    storage[guard_rows:guard_rows + S] = p.memory
    return storage, storage[guard_rows:guard_rows + S]


@pytest.mark.parametrize("P", [2, 4])
@pytest.mark.parametrize("slots", [2**62, 2**63 - 1, 2**31])
@pytest.mark.parametrize("validate", [True, False])
def test_slots_per_stream_that_would_wrap_is_refused_by_name(P, slots, validate):
    p = _problem(P=P)
    storage, bank = _guarded_bank(p)
    before = storage.clone()
    options = dict(slots_per_stream=slots, validate=validate)
    with pytest.raises(ValueError, match=rf"slots_per_stream = {slots} is too large"):
        sdm.write_read_(bank, *p.inputs(), **options)
    with pytest.raises(ValueError, match="slots_per_stream"):
        sdm.write_read(bank, *p.inputs(), **options)
    with pytest.raises(ValueError, match="slots_per_stream"):
        sdm.write_read(bank.clone().requires_grad_(), *p.inputs(), **options)
    d = make_problem(P=P, T=1, W=3, R=2, hd=4, slots_per_stream=SLOTS, dtype=torch.float32, decode_lead=(P,))
    with pytest.raises(ValueError, match="slots_per_stream"):
        sdm.decode_step(bank, *d.inputs(), **options)
    assert torch.equal(storage.isnan(), before.isnan())
    assert torch.equal(storage.nan_to_num(), before.nan_to_num())


def test_meta_bank_with_cpu_inputs_names_the_first_input():
    p = _problem()
    with pytest.raises(ValueError, match=r"k_idx must be on the bank's device meta \(memory\), got cpu"):
        sdm.write_read_(p.memory.to("meta"), *p.inputs(), slots_per_stream=SLOTS)
    with pytest.raises(ValueError, match="k_idx must be on the bank's device meta"):
        sdm.write_read(p.memory.to("meta"), *p.inputs(), slots_per_stream=SLOTS)


@pytest.mark.parametrize("name", ["k_idx", "k_val", "v", "beta", "g", "q_idx", "q_val"])
def test_cpu_bank_with_one_meta_input_names_it_and_writes_nothing(name):
    p = _problem()
    inputs = dict(zip(("k_idx", "k_val", "v", "beta", "g", "q_idx", "q_val"), p.inputs()))
    inputs[name] = inputs[name].to("meta")
    bank = p.memory.clone()
    with pytest.raises(ValueError, match=rf"{name} must be on the bank's device cpu \(memory\), got meta"):
        sdm.write_read_(bank, **inputs, slots_per_stream=SLOTS)
    with pytest.raises(ValueError, match=rf"{name} must be on the bank's device cpu"):
        sdm.write_read(bank.clone().requires_grad_(), **inputs, slots_per_stream=SLOTS)
    assert torch.equal(bank, p.memory)


def _bad_v(p):
    return p.v[:, :, :3].contiguous()


def test_meta_call_fails_as_eager_does_and_succeeds_when_valid():
    p = _problem()
    args = (p.memory, p.k_idx, p.k_val, _bad_v(p), p.beta, p.g, p.q_idx, p.q_val)
    with pytest.raises(ValueError) as eager:
        sdm.write_read_(p.memory.clone(), *args[1:], slots_per_stream=SLOTS)
    meta = [t.to("meta") for t in args]
    for op in (sdm.write_read_, sdm.write_read):
        with pytest.raises(ValueError) as traced:
            op(*meta, slots_per_stream=SLOTS)
        assert str(traced.value) == str(eager.value)
    readings = sdm.write_read_(*(t.to("meta") for t in p.tensors()), slots_per_stream=SLOTS)
    assert readings.device.type == "meta" and readings.shape == p.v.shape
    with pytest.raises(ValueError, match="chunk_size must be in 1..256, got 300"):
        sdm.write_read_(*(t.to("meta") for t in p.tensors()), slots_per_stream=SLOTS, chunk_size=300)


def test_meta_decode_step_checks_shapes():
    d = make_problem(P=3, T=1, W=3, R=2, hd=4, slots_per_stream=SLOTS, dtype=torch.float32, decode_lead=(3,))
    meta = [t.to("meta") for t in d.tensors()]
    assert sdm.decode_step(*meta).shape == d.v.shape
    meta[3] = meta[3][:, :2]  # v [3, 2] for hd 4
    with pytest.raises(ValueError, match=r"v must have shape \[\.\.\., hd\] = \[3, 4\], got \[3, 2\]"):
        sdm.decode_step(*meta)


def test_fake_tensor_mode_applies_the_real_rules():
    p = _problem()
    with FakeTensorMode() as mode:
        fake = [mode.from_tensor(t) for t in p.tensors()]
        assert sdm.write_read_(*fake, slots_per_stream=SLOTS).shape == p.v.shape
        with pytest.raises(ValueError, match="slots_per_stream = 4611686018427387904 is too large"):
            sdm.write_read_(*fake, slots_per_stream=2**62)
        fake[5] = mode.from_tensor(torch.zeros(2, 5, 2))  # g [P, T, 2]: neither 1 nor W = 3
        with pytest.raises(ValueError, match=r"g must have shape \[P, T, 1\]"):
            sdm.write_read(*fake, slots_per_stream=SLOTS)


def test_compiled_call_fails_like_eager():
    p = _problem()

    def run(memory, v):
        return sdm.write_read(memory, p.k_idx, p.k_val, v, p.beta, p.g, p.q_idx, p.q_val, slots_per_stream=SLOTS)

    with pytest.raises(ValueError) as eager:
        run(p.memory, _bad_v(p))
    with pytest.raises(Exception) as compiled:
        torch.compile(run, fullgraph=True, backend="eager")(p.memory, _bad_v(p))
    assert str(eager.value) in str(compiled.value)


@pytest.mark.parametrize("name", ["k_val", "v", "beta", "g", "q_val", "k_idx"])
def test_inplace_input_sharing_the_bank_is_refused(name):
    p = _problem()
    storage = torch.zeros(4096, dtype=torch.float32)
    bank = storage[: p.memory.numel()].view_as(p.memory)
    bank.copy_(p.memory)
    inputs = dict(zip(("k_idx", "k_val", "v", "beta", "g", "q_idx", "q_val"), p.inputs()))
    original = inputs[name]
    # The input's bytes start inside the bank's last row.
    start = p.memory.numel() - 2
    if original.is_floating_point():
        alias = storage[start:start + original.numel()].view_as(original)
        alias.copy_(original)
    else:
        alias = storage.view(torch.int32)[start:start + original.numel()].view(original.shape)
        alias.copy_(original.to(torch.int32))
    inputs[name] = alias
    before = storage.clone()
    with pytest.raises(ValueError, match=rf"{name} shares memory with memory \(the bank\), which the call writes"):
        sdm.write_read_(bank, **inputs, slots_per_stream=SLOTS)
    assert torch.equal(storage, before)


def test_decode_input_sharing_the_bank_is_refused():
    d = make_problem(P=2, T=1, W=3, R=2, hd=4, slots_per_stream=SLOTS, dtype=torch.float32, decode_lead=(2,))
    bank = d.memory.clone()
    before = bank.clone()
    v_alias = bank[:2]  # v [2, 4] = the bank's first two rows
    with pytest.raises(ValueError, match=r"v shares memory with memory \(the bank\)"):
        sdm.decode_step(bank, d.k_idx, d.k_val, v_alias, d.beta, d.g, d.q_idx, d.q_val)
    assert torch.equal(bank, before)


def test_functional_form_reads_an_aliased_input_correctly():
    """The functional op never writes `memory`, so an input viewing it is fine: same result as a copy."""
    p = _problem()
    v_alias = p.memory[:10].view(2, 5, 4)
    got = sdm.write_read(p.memory, p.k_idx, p.k_val, v_alias, p.beta, p.g, p.q_idx, p.q_val,
                         slots_per_stream=SLOTS)
    want = sdm.write_read(p.memory.clone(), p.k_idx, p.k_val, v_alias.clone(), p.beta, p.g, p.q_idx, p.q_val,
                          slots_per_stream=SLOTS)
    assert all(torch.equal(a, b) for a, b in zip(got, want))


def test_non_contiguous_view_of_the_bank_is_copied_not_refused():
    """A non-contiguous input is copied before the call (documented), so even a view of the bank
    the call updates in place is read as it was: the same result as passing a copy."""
    p = _problem()
    bank = p.memory.clone()  # [16, 4]
    v = bank.as_strided((2, 5, 4), (1, 2, 16))  # a non-contiguous view of the bank itself
    assert not v.is_contiguous() and v.untyped_storage().data_ptr() == bank.untyped_storage().data_ptr()
    want_bank = bank.clone()
    want = sdm.write_read_(want_bank, p.k_idx, p.k_val, v.clone(), p.beta, p.g, p.q_idx, p.q_val,
                           slots_per_stream=SLOTS)
    got = sdm.write_read_(bank, p.k_idx, p.k_val, v, p.beta, p.g, p.q_idx, p.q_val, slots_per_stream=SLOTS)
    assert torch.equal(got, want) and torch.equal(bank, want_bank)


@pytest.mark.parametrize("op", ["write_read_", "decode_step"])
def test_five_dim_input_is_named_as_itself(op):
    if op == "write_read_":
        p = _problem()
        v5 = p.v.view(2, 5, 4, 1, 1)
        call = lambda: sdm.write_read_(p.memory.clone(), p.k_idx, p.k_val, v5, p.beta, p.g, p.q_idx, p.q_val,
                                       slots_per_stream=SLOTS)
    else:
        d = make_problem(P=4, T=1, W=3, R=2, hd=4, slots_per_stream=SLOTS, dtype=torch.float32, decode_lead=(2, 2))
        v5 = d.v.view(2, 2, 1, 1, 4)
        call = lambda: sdm.decode_step(d.memory.clone(), d.k_idx, d.k_val, v5, d.beta, d.g, d.q_idx, d.q_val)
    with pytest.raises(ValueError, match="^v must have at most 4 dimensions, got 5"):
        call()


@pytest.mark.parametrize("option,value,kind", [
    ("slots_per_stream", 8.0, "an int, got float"),
    ("slots_per_stream", True, "an int, got bool"),
    ("slots_per_stream", "8", "an int, got str"),
    ("chunk_size", 4.5, "an int, got float"),
    ("snapshot_quant", 0, "a str, got int"),
    ("grad_bank_fp32", 1, "a bool, got int"),
    ("validate", None, "a bool, got NoneType"),
])
@pytest.mark.parametrize("op", [sdm.write_read, sdm.write_read_])
def test_option_of_the_wrong_type_is_named(op, option, value, kind):
    p = _problem()
    options = dict(slots_per_stream=SLOTS)
    options[option] = value
    with pytest.raises(TypeError, match=f"^{option} must be {kind}"):
        op(p.memory.clone(), *p.inputs(), **options)


def test_numpy_and_tensor_integers_are_accepted_as_options():
    np = pytest.importorskip("numpy")
    p = _problem()
    want = sdm.write_read(p.memory, *p.inputs(), slots_per_stream=SLOTS, chunk_size=4)
    got = sdm.write_read(p.memory, *p.inputs(), slots_per_stream=np.int64(SLOTS), chunk_size=np.int32(4))
    assert all(torch.equal(a, b) for a, b in zip(got, want))


def test_decode_step_option_types_are_named():
    d = make_problem(P=2, T=1, W=3, R=2, hd=4, slots_per_stream=SLOTS, dtype=torch.float32, decode_lead=(2,))
    with pytest.raises(TypeError, match="^slots_per_stream must be an int, got float"):
        sdm.decode_step(d.memory.clone(), *d.inputs(), slots_per_stream=8.0)
    with pytest.raises(TypeError, match="^validate must be a bool"):
        sdm.decode_step(d.memory.clone(), *d.inputs(), validate="yes")


def test_help_lists_every_argument_with_its_shape():
    for op, names in ((sdm.write_read, ["memory    [S, hd]", "k_idx     [P, T, W]", "slots_per_stream",
                                        "chunk_size", "snapshot_quant", "grad_bank_fp32", "validate"]),
                      (sdm.write_read_, ["q_val     [P, T, R]", "beta      [P, T] or [P, T, 1]"]),
                      (sdm.decode_step, ["k_idx     [..., W]", "v         [..., hd]", "slots_per_stream  int >= 0 "
                                         "(default 0)"])):
        for name in names:
            assert name in op.__doc__, (op.__name__, name)
