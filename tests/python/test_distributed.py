"""Training SDM layers across processes with torch.distributed (docs/distributed.md).

Each fixture below starts its own process group (distributed_ranks.launch: torch.multiprocessing
spawn, a free loopback port) and trains distributed_model.TinyLM in it: DDP over 2 and 3 ranks,
FSDP2 (`fully_shard` per block and at the root) over 2, with and without torch.utils.checkpoint
around each block, with a bfloat16 MixedPrecisionPolicy, with torch.compile'd blocks, and a
torch.distributed.checkpoint save / load. The reference is single-process training on the
concatenated global batch from the same initial parameters.

gloo runs on the CPU everywhere; the same tests run with NCCL on GPUs when the machine has a
GPU per rank (they skip otherwise, saying why).

Tolerances (error = max |a - b| / max |b| per tensor, float64):
  float32      1e-5 for every step's loss and every parameter's gradient at every step, and for
               every parameter after the last step. The runs differ from the reference only in
               how sums are split (per-rank means, then the all-reduce); measured on the CPU:
               losses <= 2e-7, gradients <= 3e-6, parameters <= 2e-6. A step's update is
               ~1e-3 of a weight, so a missing or mis-reduced gradient fails every check.
  bfloat16     against the same mixed-precision arithmetic in one process
               (distributed_model.train_bf16_compute): 2e-2 for the first step's gradients
               (two roundings of the split sums to bfloat16: measured <= 7e-3), 1e-3 for every
               loss (measured <= 1.2e-4), 0.2 for the parameter updates after 3 steps (each
               step's bfloat16 copy of slightly different parameters can round differently and
               move a product-key selection: measured <= 0.08).
  bitwise      DDP run twice; checkpointed vs plain blocks; a resumed checkpoint vs the run
               that saved it.
"""

from __future__ import annotations

import pytest
import torch
import torch.distributed as dist
import torch.distributed.checkpoint as dcp

import distributed_model as dm
import distributed_ranks as ranks
from conftest import rel_err

F32_TOL = 1e-5
BF16_FIRST_GRAD_TOL = 2e-2
BF16_LOSS_TOL = 1e-3
BF16_UPDATE_TOL = 0.2


def _skip_reason(backend: str, world: int) -> str | None:
    if backend == "gloo":
        return None if dist.is_gloo_available() else "torch.distributed was built without gloo"
    if not dist.is_nccl_available():
        return "torch.distributed was built without NCCL"
    if torch.cuda.device_count() < world:
        return f"NCCL runs need one GPU per rank: {world} ranks, {torch.cuda.device_count()} GPUs here"
    return None


def _device(backend: str) -> torch.device:
    return torch.device("cuda", 0) if backend == "nccl" else torch.device("cpu")


@pytest.fixture(scope="module", params=["gloo", "nccl"], ids=["gloo-cpu", "nccl-cuda"])
def backend(request) -> str:
    return request.param


def _launch(backend, tmp_path_factory, scenario, world, **options) -> dict:
    reason = _skip_reason(backend, world)
    if reason:
        pytest.skip(reason)
    return ranks.launch(scenario, world, backend, tmp_path_factory.mktemp(f"{scenario}{world}"), **options)


@pytest.fixture(scope="module")
def ddp2(backend, tmp_path_factory):
    return _launch(backend, tmp_path_factory, "ddp", 2)


@pytest.fixture(scope="module")
def ddp2_again(backend, tmp_path_factory):
    return _launch(backend, tmp_path_factory, "ddp", 2, runs=("plain",))


@pytest.fixture(scope="module")
def ddp3(backend, tmp_path_factory):
    return _launch(backend, tmp_path_factory, "ddp", 3, runs=("plain",))


@pytest.fixture(scope="module")
def fsdp2(backend, tmp_path_factory):
    return _launch(backend, tmp_path_factory, "fsdp", 2)


@pytest.fixture(scope="module")
def fsdp2_compiled(backend, tmp_path_factory):
    return _launch(backend, tmp_path_factory, "fsdp_compile", 2)


@pytest.fixture(scope="module")
def fsdp2_layers(backend, tmp_path_factory):
    return _launch(backend, tmp_path_factory, "fsdp_layers", 2)


@pytest.fixture(scope="module")
def reference(backend):
    """Single-process float32 training on the concatenated batches, on the backend's device."""
    device = _device(backend)
    model = dm.build_model().to(device)
    return dm.train(model, torch.optim.SGD(model.parameters(), lr=dm.LEARNING_RATE), dm.global_batches(),
                    device=device)


def _initial_params() -> dict:
    return dm.named_full(dm.build_model())


def _assert_matches(run: dict, ref: dict) -> None:
    """float32: losses, every gradient at every step and the final parameters within F32_TOL."""
    assert rel_err(run["losses"], ref["losses"]) < F32_TOL
    assert run["grads"][0].keys() == ref["grads"][0].keys()
    for step, (grads, ref_grads) in enumerate(zip(run["grads"], ref["grads"], strict=True)):
        for name, grad in ref_grads.items():
            assert rel_err(grads[name], grad) < F32_TOL, f"gradient of {name} at step {step}"
    for name, param in ref["params"].items():
        assert rel_err(run["params"][name], param) < F32_TOL, f"parameter {name} after the last step"


def _assert_bitwise(a: dict, b: dict) -> None:
    assert torch.equal(a["losses"], b["losses"])
    for grads, other in zip(a["grads"], b["grads"], strict=True):
        for name in grads:
            assert torch.equal(grads[name], other[name]), name
    for name in a["params"]:
        assert torch.equal(a["params"][name], b["params"][name]), name


# ---- DDP --------------------------------------------------------------------------------


def test_ddp_two_ranks_match_single_process(ddp2, reference):
    _assert_matches(ddp2["plain"], reference)


def test_ddp_three_ranks_match_single_process(ddp3, reference):
    _assert_matches(ddp3["plain"], reference)


def test_ddp_is_bitwise_repeatable(ddp2, ddp2_again):
    _assert_bitwise(ddp2["plain"], ddp2_again["plain"])


def test_ddp_checkpointed_blocks_give_the_same_gradients(ddp2):
    _assert_bitwise(ddp2["checkpointed"], ddp2["plain"])


# ---- FSDP2 ------------------------------------------------------------------------------


def test_fsdp_matches_single_process(fsdp2, reference):
    _assert_matches(fsdp2["plain"], reference)


def test_fsdp_sharded_layers_with_an_inplace_residual_match_single_process(fsdp2_layers, reference):
    # Each SDM layer fully_shard-ed on its own and its output modified in place (`mixed += x`):
    # FSDP2's pre-backward hook (the all-gather before the layer's backward) sits on the output,
    # and an in-place op on a view drops it, so the layer must not return views. The single-process
    # reference adds out of place: the same numbers.
    _assert_matches(fsdp2_layers["inplace"], reference)


def test_fsdp_shards_the_memory_bank(fsdp2):
    # memory is [num_heads * slots_per_head, head_dim] = [128, 8]: 64 rows on each of 2 ranks.
    # Its gradient, reduce-scattered by FSDP2, is among those test_fsdp_matches_single_process checks.
    args = dm.layer_args(dm.ModelConfig())
    assert fsdp2["plain"]["memory_rows_per_rank"] == [args.num_heads * args.slots_per_head // 2] * 2


def test_fsdp_inference_cache_from_an_unsharded_block(fsdp2):
    # create_kv_cache between block.unshard() and block.reshard() copies the whole learned memory.
    run = fsdp2["plain"]
    assert torch.equal(run["cache_bank"], run["params"]["blocks.0.mixer.memory"].repeat(2, 1))


def test_fsdp_checkpointed_blocks_give_the_same_gradients(fsdp2):
    _assert_bitwise(fsdp2["checkpointed"], fsdp2["plain"])


@pytest.mark.parametrize("run, grad_bank_fp32", [("bf16", False), ("bf16_grad_bank_fp32", True)])
def test_fsdp_bf16_mixed_precision(fsdp2, backend, run, grad_bank_fp32):
    # No skip: a CPU whose bfloat16 compute is missing or wrong fails here, as a user's run would.
    record = fsdp2[run]
    # The policy reached the SDM layers: the bank they ran on was bfloat16; the sharded
    # gradients the optimiser sees are float32 (reduced in float32).
    assert record["bank_dtypes_in_forward"] == ["torch.bfloat16"]
    assert record["sharded_grad_dtypes"] == ["torch.float32"]
    device = _device(backend)
    model = dm.build_model(dm.ModelConfig(grad_bank_fp32=grad_bank_fp32)).to(device)
    ref = dm.train_bf16_compute(model, torch.optim.SGD(model.parameters(), lr=dm.LEARNING_RATE),
                                dm.global_batches().to(device))
    assert rel_err(record["losses"], ref["losses"]) < BF16_LOSS_TOL
    for name, grad in ref["grads"][0].items():
        assert rel_err(record["grads"][0][name], grad) < BF16_FIRST_GRAD_TOL, name
    initial = _initial_params()
    for name, param in ref["params"].items():
        update = record["params"][name] - initial[name]
        assert rel_err(update, param - initial[name]) < BF16_UPDATE_TOL, name


def test_fsdp_grad_bank_fp32_reaches_the_op(fsdp2):
    # With a bfloat16 bank, grad_bank_fp32 keeps the bank gradient in float32 across chunks
    # (T = 12, chunk 4): the first step's memory gradients must differ, if only by rounding.
    for block in range(2):
        name = f"blocks.{block}.mixer.memory"
        a, b = fsdp2["bf16"]["grads"][0][name], fsdp2["bf16_grad_bank_fp32"]["grads"][0][name]
        assert not torch.equal(a, b), name
        assert rel_err(a, b) < BF16_FIRST_GRAD_TOL, name


def test_fsdp_distributed_checkpoint_resumes_bitwise(fsdp2):
    resume = fsdp2["resume"]
    # A fresh model (other seed) and optimiser loaded from the checkpoint hold the saved
    # parameters, and the next two steps (AdamW: the optimiser state is part of the checkpoint)
    # give the same losses, gradients and parameters as the run that saved it.
    for name, param in resume["before"]["params"].items():
        assert torch.equal(resume["loaded_params"][name], param), name
    # The optimiser's no-weight-decay group, chosen by the names of the tagged parameters.
    assert resume["no_weight_decay"] == [f"blocks.{i}.mixer.{name}" for i in range(2) for name in ("A_log", "dt_bias")]
    _assert_bitwise(resume["resumed"], resume["continued"])


@pytest.mark.filterwarnings("ignore:torch.distributed is disabled, unavailable or uninitialized")
def test_fsdp_checkpoint_loads_into_one_process(fsdp2):
    # torch.distributed.checkpoint reshards: the 2-rank checkpoint loads into a plain model.
    resume = fsdp2["resume"]
    model = dm.build_model(seed=2)
    state = {"model": model.state_dict()}
    dcp.load(state, checkpoint_id=resume["checkpoint_dir"], no_dist=True)
    model.load_state_dict(state["model"])
    for name, param in model.named_parameters():
        assert torch.equal(param.detach(), resume["before"]["params"][name]), name


def test_fsdp_compiled_blocks_match_single_process(fsdp2_compiled, reference):
    _assert_matches(fsdp2_compiled["compiled"], reference)


# ---- activation checkpointing in one process -------------------------------------------


def test_checkpointed_blocks_recompute_the_layer_and_give_the_same_gradients():
    batch = dm.global_batches(steps=1)[0]
    grads, calls = {}, {}
    for checkpointed in (False, True):
        model = dm.build_model(dm.ModelConfig(checkpoint_blocks=checkpointed))
        count = [0]
        for block in model.blocks:
            block.mixer.register_forward_pre_hook(lambda module, args: count.__setitem__(0, count[0] + 1))
        dm.loss_fn(model, batch).backward()
        grads[checkpointed] = dm.named_full(model, of_grad=True)
        calls[checkpointed] = count[0]
    assert calls == {False: 2, True: 4}  # each block's layer runs again in the backward
    for name, grad in grads[False].items():
        assert torch.equal(grads[True][name], grad), name
