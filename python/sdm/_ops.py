"""Loads the torch.ops.sdm operators and registers what lives on the Python side of them:
the fake (meta) kernels that let torch.compile trace the ops, and the autograd formulas of
the functional ops: WriteReadFunction (sdm.write_read under autograd: the saving forward into a
buffer it allocates, then the backward op) and the reference op's registered formula. No math
happens here: every kernel is C++ (bindings/torch/).

``LIMITS``: every limit and default of the ops, read once from C++ (``torch.ops.sdm.limits()``,
the constants of include/sdm/options.hpp, product_key_topk.hpp, types.hpp); the package restates none."""

from __future__ import annotations

import glob
import os

import torch

_HERE = os.path.dirname(os.path.abspath(__file__))


def _library_path() -> str:
    found = sorted(glob.glob(os.path.join(_HERE, "_C*.so")))
    if not found:
        raise ImportError(
            f"sdm: the compiled operator library (_C.so) is missing from {_HERE}; "
            "install the package with `pip install --no-build-isolation .`"
        )
    return found[0]


torch.ops.load_library(_library_path())

# max_width (W, R), max_chunk, default_chunk, max_bank_rows, max_elements, max_dims,
# max_product_key_factors, max_product_key_k, max_product_key_slots.
LIMITS: dict[str, int] = dict(torch.ops.sdm.limits())

_INPUT_NAMES = ("k_idx", "k_val", "v", "beta", "g", "q_idx", "q_val")


# Compiled and eager accept the same inputs: the eager kernels copy every input but the bank
# they update to a contiguous tensor (bindings/torch contiguous_inputs; the functional op also
# copies its initial bank), so the fake kernels check a contiguous tensor of the same shape in
# their place (`copied=True`) and the tensor itself (its strides) for a bank updated in place.


def _static(t: torch.Tensor, copied: bool = False) -> torch.Tensor:
    """`t`, or a contiguous tensor of its concrete shape when `copied` or when its sizes are
    symbolic: the saved buffer's size is a shape-only C++ function of concrete sizes (it
    specialises)."""
    if not copied and all(isinstance(s, int) for s in t.shape):
        return t
    return t.new_empty([int(s) for s in t.shape])


def _example_size(s) -> int:
    """A size's value in the traced example, without adding a guard when torch knows it (a
    symbolic size's hint); `int(s)` (which specialises) only when no hint exists."""
    if isinstance(s, int):
        return s
    hint = getattr(s.node, "hint", None)
    return int(hint) if hint is not None else int(s)


def _hinted(t: torch.Tensor, copied: bool = False) -> torch.Tensor:
    """`t`, or a contiguous tensor of its example shape when `copied` or when its sizes are
    symbolic: the shape checks of ops whose outputs do not depend on sizes run on the traced
    example."""
    if not copied and all(isinstance(s, int) for s in t.shape):
        return t
    return t.new_empty([_example_size(s) for s in t.shape])


# ---- fake kernels: the real ops' shape / dtype / device / option checks, then output metadata --


@torch.library.register_fake("sdm::write_read_")
def _write_read_inplace_fake(memory, k_idx, k_val, v, beta, g, q_idx, q_val, *, validate=True, **options):
    torch.ops.sdm.check_write_read(_hinted(memory), *(_hinted(t, copied=True) for t in (k_idx, k_val, v, beta, g,
                                                                                       q_idx, q_val)), **options)
    return v.new_empty(v.shape, dtype=memory.dtype)


def _plan(memory, k_idx, k_val, v, beta, g, q_idx, q_val, options, memory_copied) -> tuple[int, torch.dtype]:
    """(bytes of `saved`, bank-gradient dtype) of the call's plan (C++ sdm::plan_write_read).
    `memory_copied`: the eager kernel works on a contiguous copy of `memory`."""
    tensors = [_static(memory, memory_copied), *(_static(t, copied=True) for t in (k_idx, k_val, v, beta, g, q_idx,
                                                                                   q_val))]
    nbytes, bank_grad_bf16 = torch.ops.sdm.write_read_plan(*tensors, device=memory.device, **options)
    return nbytes, torch.bfloat16 if bank_grad_bf16 else torch.float32


def _check_saved(saved, nbytes: int) -> None:
    """The fake kernels' check of a `saved` argument: dtype and size (C++ check_saved)."""
    if saved.dtype != torch.uint8:
        raise TypeError(f"saved must be uint8, got {str(saved.dtype).removeprefix('torch.')}")
    if saved.dim() != 1 or saved.shape[0] != nbytes:
        raise ValueError(f"saved must be a contiguous 1-D uint8 buffer of {nbytes} bytes (write_read_saved_bytes), "
                         f"got shape {list(saved.shape)}")


@torch.library.register_fake("sdm::write_read_saving")
def _write_read_saving_fake(memory, k_idx, k_val, v, beta, g, q_idx, q_val, saved, *, validate=True, **options):
    nbytes, _ = _plan(memory, k_idx, k_val, v, beta, g, q_idx, q_val, options, memory_copied=True)
    _check_saved(saved, nbytes)
    return v.new_empty(v.shape, dtype=memory.dtype), memory.new_empty(memory.shape)


def _grads_like(memory_grad_dtype, memory, k_val, v, beta, g, q_val):
    return (
        memory.new_empty(memory.shape, dtype=memory_grad_dtype),
        torch.empty_like(k_val, memory_format=torch.contiguous_format),
        torch.empty_like(v, memory_format=torch.contiguous_format),
        torch.empty_like(beta, memory_format=torch.contiguous_format),
        torch.empty_like(g, memory_format=torch.contiguous_format),
        torch.empty_like(q_val, memory_format=torch.contiguous_format),
    )


@torch.library.register_fake("sdm::write_read_backward")
def _write_read_backward_fake(final_bank, saved, k_idx, k_val, v, beta, g, q_idx, q_val, grad_readings,
                              grad_final_bank, *, validate=True, **options):
    nbytes, bank_grad_dtype = _plan(final_bank, k_idx, k_val, v, beta, g, q_idx, q_val, options,
                                    memory_copied=False)
    _check_saved(saved, nbytes)
    return _grads_like(bank_grad_dtype, final_bank, k_val, v, beta, g, q_val)


@torch.library.register_fake("sdm::write_groups_count")
def _write_groups_count_fake(memory, k_idx, k_val, v, beta, g, q_idx, q_val, **options):
    torch.ops.sdm.check_write_read(_hinted(memory, copied=True), *(_hinted(t, copied=True) for t in (
        k_idx, k_val, v, beta, g, q_idx, q_val)), **options)
    return memory.new_empty((), dtype=torch.int64)


@torch.library.register_fake("sdm::decode_step")
def _decode_step_fake(memory, k_idx, k_val, v, beta, g, q_idx, q_val, *, validate=True, **options):
    torch.ops.sdm.check_decode_step(_hinted(memory), *(_hinted(t, copied=True) for t in (k_idx, k_val, v, beta, g,
                                                                                         q_idx, q_val)), **options)
    return v.new_empty(v.shape, dtype=memory.dtype)


@torch.library.register_fake("sdm::reference_write_read")
def _reference_write_read_fake(memory, k_idx, k_val, v, beta, g, q_idx, q_val, **options):
    return v.new_empty(v.shape, dtype=memory.dtype), memory.new_empty(memory.shape)


@torch.library.register_fake("sdm::reference_write_read_backward")
def _reference_write_read_backward_fake(memory, k_idx, k_val, v, beta, g, q_idx, q_val, grad_readings,
                                        grad_final_bank, **options):
    return _grads_like(memory.dtype, memory, k_val, v, beta, g, q_val)


# ---- autograd of the functional ops (docs/spec.md §11) --------------------------------------------
# Gradients reach the initial bank and every float input (k_val, v, beta, g, q_val); an
# incoming final-bank gradient is passed to the backward. The backward op only reads the final
# bank (the bank at each chunk's start comes from it and the saved snapshot rows), so no tensor
# the caller can see is modified. The indices are integers and get no gradient.


def _shape_stand_in(t: torch.Tensor) -> torch.Tensor:
    """A contiguous meta tensor of t's dtype and concrete shape: planning reads shapes only."""
    return torch.empty([int(s) for s in t.shape], dtype=t.dtype, device="meta")


def new_saved(memory, k_idx, k_val, v, beta, g, q_idx, q_val, options) -> torch.Tensor:
    """An uninitialised `saved` buffer for write_read_saving on these tensors (`options`: the
    op's keyword options): write_read_saved_bytes bytes of uint8 on memory's device. No engine
    needs it zeroed: the saving forward writes every byte the backward reads (docs/spec.md §4)."""
    shapes = [_shape_stand_in(t) for t in (memory, k_idx, k_val, v, beta, g, q_idx, q_val)]
    planned = {name: value for name, value in options.items() if name != "validate"}
    nbytes, _ = torch.ops.sdm.write_read_plan(*shapes, device=memory.device, **planned)
    return memory.new_empty((nbytes,), dtype=torch.uint8)


def _may_count(memory: torch.Tensor) -> bool:
    """Whether the saving forward may count the write groups first, for an exact `saved`: the
    count costs one host sync (`.item()`), so not while tracing (torch.compile) nor while a CUDA
    graph is being captured (both engines count: CPU on the host, CUDA on the bank's stream)."""
    if torch.compiler.is_compiling():
        return False
    return not (memory.is_cuda and torch.cuda.is_current_stream_capturing())


def exact_snapshot_rows(memory, k_idx, k_val, v, beta, g, q_idx, q_val, options) -> int:
    """The call's write-group count (torch.ops.sdm.write_groups_count, one host sync): the
    `snapshot_rows` of an exact `saved`, at least 1 (a call with no write group gets a one-row
    buffer: snapshot_rows 0 means the worst case); 0 (the worst case, no sync) where _may_count
    says no."""
    if not _may_count(memory):
        return 0
    count = torch.ops.sdm.write_groups_count(memory, k_idx, k_val, v, beta, g, q_idx, q_val,
                                             slots_per_stream=options["slots_per_stream"],
                                             chunk_size=options.get("chunk_size", LIMITS["default_chunk"]))
    return max(int(count.item()), 1)


class WriteReadFunction(torch.autograd.Function):
    """``sdm.write_read`` under autograd: the saving forward (write_read_saving) into a `saved`
    buffer allocated here without zeroing (sized for the call's write groups where
    exact_snapshot_rows counts them, else the worst case) and kept for the backward op
    (write_read_backward), which takes the same snapshot_rows.
    ``apply(memory, k_idx, k_val, v, beta, g, q_idx, q_val, options)``, ``options`` the ops'
    keyword options; returns (readings, final_bank)."""

    @staticmethod
    def forward(ctx, memory, k_idx, k_val, v, beta, g, q_idx, q_val, options):
        # Eager: `saved` holds one snapshot row per write group (exact, after one host sync); traced
        # or captured: the worst case, one per write entry (no sync). Bits are the same either way.
        options = dict(options)
        options["snapshot_rows"] = exact_snapshot_rows(memory, k_idx, k_val, v, beta, g, q_idx, q_val, options)
        saved = new_saved(memory, k_idx, k_val, v, beta, g, q_idx, q_val, options)
        readings, final_bank = torch.ops.sdm.write_read_saving(memory, k_idx, k_val, v, beta, g, q_idx, q_val, saved,
                                                               **options)
        ctx.save_for_backward(final_bank, saved, k_idx, k_val, v, beta, g, q_idx, q_val)
        ctx.options = options
        ctx.memory_dtype = memory.dtype
        # An unused final bank (or readings) gets no gradient: None reaches the backward instead of a
        # zero-filled bank-sized tensor (the op treats an absent final-bank gradient as zero).
        ctx.set_materialize_grads(False)
        return readings, final_bank

    @staticmethod
    def backward(ctx, grad_readings, grad_final_bank):
        final_bank, saved, k_idx, k_val, v, beta, g, q_idx, q_val = ctx.saved_tensors
        if grad_readings is None:
            grad_readings = v.new_zeros(v.shape, dtype=final_bank.dtype)
        options = dict(ctx.options)
        # The forward checked these same indices (autograd refuses saved tensors changed since).
        options["validate"] = False
        d_memory, d_k_val, d_v, d_beta, d_g, d_q_val = torch.ops.sdm.write_read_backward(
            final_bank, saved, k_idx, k_val, v, beta, g, q_idx, q_val, grad_readings, grad_final_bank, **options)
        return d_memory.to(ctx.memory_dtype), None, d_k_val, d_v, d_beta, d_g, None, d_q_val, None


def _reference_setup(ctx, inputs, keyword_only_inputs, output):
    ctx.save_for_backward(*inputs)
    ctx.options = dict(keyword_only_inputs)


def _reference_backward(ctx, grad_readings, grad_final_bank):
    memory, k_idx, k_val, v, beta, g, q_idx, q_val = ctx.saved_tensors
    if grad_readings is None:
        grad_readings = v.new_zeros(v.shape, dtype=memory.dtype)
    d_memory, d_k_val, d_v, d_beta, d_g, d_q_val = torch.ops.sdm.reference_write_read_backward(
        memory, k_idx, k_val, v, beta, g, q_idx, q_val, grad_readings, grad_final_bank, **ctx.options)
    return d_memory, None, d_k_val, d_v, d_beta, d_g, None, d_q_val


torch.library.register_autograd("sdm::reference_write_read", _reference_backward, setup_context=_reference_setup)
