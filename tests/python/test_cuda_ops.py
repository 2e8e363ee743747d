"""The torch.ops.sdm operators on CUDA tensors: sdm.write_read_, sdm.write_read and
sdm.decode_step against the CPU engine on the same inputs (f32 bank rel <= 1e-4, bf16 <= 2e-2),
bitwise run-to-run determinism, torch's current stream honoured, CUDA-graph capture == eager and
the device index check's errors. The backward on CUDA: test_cuda_backward.py."""

from __future__ import annotations

import pytest
import torch

import sdm
from gpu_support import GPU_TEST, bitwise_equal, gpu_problem, rel_err, tolerance

pytestmark = GPU_TEST

CHUNKED_SHAPES = {
    "tiny_T_not_multiple_of_C": dict(P=2, T=13, W=3, R=2, hd=6, slots_per_stream=16, index=torch.int64),
    "odd_hd_G_eq_W_W_ne_R": dict(P=3, T=70, W=8, R=5, hd=41, slots_per_stream=64, G=8, index=torch.int32),
    "readme_like": dict(P=2, T=130, W=64, R=32, hd=768, slots_per_stream=1024, index=torch.int32),
}
CHUNK = {"tiny_T_not_multiple_of_C": 4, "odd_hd_G_eq_W_W_ne_R": 16, "readme_like": 64}


def _options(problem, chunk_size, validate=True):
    return dict(slots_per_stream=problem.slots_per_stream, chunk_size=chunk_size, validate=validate)


@pytest.mark.parametrize("bank", [torch.float32, torch.bfloat16])
@pytest.mark.parametrize("shape", list(CHUNKED_SHAPES))
def test_write_read_inplace_matches_cpu_engine(shape, bank):
    cpu = gpu_problem(**CHUNKED_SHAPES[shape], bank=bank, seed=1)
    gpu = cpu.to("cuda")
    with torch.no_grad():
        want = sdm.write_read_(cpu.memory, *cpu.inputs(), **_options(cpu, CHUNK[shape]))
        got = sdm.write_read_(gpu.memory, *gpu.inputs(), **_options(gpu, CHUNK[shape]))
    assert got.device.type == "cuda" and got.dtype == bank and got.shape == want.shape
    assert rel_err(got, want) <= tolerance(bank)
    assert rel_err(gpu.memory, cpu.memory) <= tolerance(bank)


@pytest.mark.parametrize("inputs", [torch.float32, torch.bfloat16, torch.float16])
def test_write_read_functional_no_grad_matches_cpu_and_leaves_memory(inputs):
    cpu = gpu_problem(P=2, T=37, W=5, R=7, hd=24, slots_per_stream=32, G=5, inputs=inputs, seed=2)
    gpu = cpu.to("cuda")
    initial = gpu.memory.clone()
    want, want_bank = sdm.write_read(cpu.memory, *cpu.inputs(), **_options(cpu, 8))
    got, got_bank = sdm.write_read(gpu.memory, *gpu.inputs(), **_options(gpu, 8))
    assert bitwise_equal(gpu.memory, initial), "the functional form must not modify memory"
    assert rel_err(got, want) <= 1e-4
    assert rel_err(got_bank, want_bank) <= 1e-4


def test_saving_forward_runs_and_equals_no_grad_bitwise():
    """Under autograd sdm.write_read runs the saving forward on CUDA: same readings, bitwise (SPEC Z.4)."""
    gpu = gpu_problem(P=2, T=40, W=4, R=3, hd=16, slots_per_stream=32, seed=3).to("cuda")
    with torch.no_grad():
        plain, plain_bank = sdm.write_read(gpu.memory, *gpu.inputs(), **_options(gpu, 16))
    v = gpu.v.clone().requires_grad_(True)
    inputs = list(gpu.inputs())
    inputs[2] = v
    saving, saving_bank = sdm.write_read(gpu.memory, *inputs, **_options(gpu, 16))
    assert saving.requires_grad
    assert bitwise_equal(saving.detach(), plain) and bitwise_equal(saving_bank.detach(), plain_bank)


@pytest.mark.parametrize("bank", [torch.float32, torch.bfloat16])
@pytest.mark.parametrize("case", [
    dict(P=6, W=4, R=3, hd=20, slots_per_stream=32, G=1, decode_lead=(2, 3), sps_arg=32),
    dict(P=4, W=64, R=64, hd=768, slots_per_stream=512, G=64, decode_lead=(4,), sps_arg=0, index=torch.int32),
    dict(P=3, W=7, R=9, hd=13, slots_per_stream=16, G=1, decode_lead=(3,), sps_arg=16),
])
def test_decode_step_matches_cpu_engine(case, bank):
    case = dict(case)
    sps_arg = case.pop("sps_arg")
    cpu = gpu_problem(**case, bank=bank, seed=5)
    gpu = cpu.to("cuda")
    with torch.no_grad():
        want = sdm.decode_step(cpu.memory, *cpu.inputs(), slots_per_stream=sps_arg)
        got = sdm.decode_step(gpu.memory, *gpu.inputs(), slots_per_stream=sps_arg)
    assert got.shape == gpu.v.shape and got.dtype == bank and got.device.type == "cuda"
    assert rel_err(got, want) <= tolerance(bank)
    assert rel_err(gpu.memory, cpu.memory) <= tolerance(bank)
    # ... and the float64 reference step on the same (rounded) inputs within docs/numerics.md's
    # decode bounds (1e-6 f32, 1e-2 bf16; the CPU engine measured <= 3.7e-7 / 5.0e-3).
    start = gpu_problem(**case, bank=bank, seed=5)
    P = case["P"]
    per_token = [t.reshape(P, 1, *t.shape[len(case["decode_lead"]):]) for t in start.inputs()]
    ref, ref_bank = sdm.reference.write_read(start.memory.double(), *(t.double() if t.is_floating_point() else t
                                                                      for t in per_token),
                                             slots_per_stream=case["slots_per_stream"])
    decode_tol = 1e-6 if bank == torch.float32 else 1e-2
    assert rel_err(got, ref.view(got.shape)) <= decode_tol
    assert rel_err(gpu.memory, ref_bank) <= decode_tol


def test_two_runs_are_bitwise_equal():
    base = gpu_problem(P=2, T=100, W=16, R=16, hd=64, slots_per_stream=256, bank=torch.bfloat16, seed=6).to("cuda")
    dec = gpu_problem(P=4, W=16, R=16, hd=64, slots_per_stream=256, decode_lead=(4,), bank=torch.bfloat16,
                       seed=7).to("cuda")
    results = []
    for _ in range(2):
        bank, dec_bank = base.memory.clone(), dec.memory.clone()
        with torch.no_grad():
            readings = sdm.write_read_(bank, *base.inputs(), **_options(base, 64))
            decoded = sdm.decode_step(dec_bank, *dec.inputs(), slots_per_stream=256)
        results.append((readings, bank, decoded, dec_bank))
    for first, second in zip(*results):
        assert bitwise_equal(first, second)


def test_ops_run_on_torchs_current_stream():
    """A side stream first sleeps, then writes the bank; an op that ignored the current stream
    (running on the legacy default stream, which does not wait for torch's non-blocking streams)
    would read the bank before it is written."""
    problem = gpu_problem(P=2, T=30, W=8, R=8, hd=32, slots_per_stream=64, seed=8).to("cuda")
    with torch.no_grad():
        want_bank = problem.memory.clone()
        want = sdm.write_read_(want_bank, *problem.inputs(), **_options(problem, 8))
        bank = torch.zeros_like(problem.memory)
        side = torch.cuda.Stream()
        side.wait_stream(torch.cuda.current_stream())
        with torch.cuda.stream(side):
            torch.cuda._sleep(50_000_000)  # ~25 ms of GPU time on this stream
            bank.copy_(problem.memory)
            got = sdm.write_read_(bank, *problem.inputs(), **_options(problem, 8))
        torch.cuda.current_stream().wait_stream(side)
    assert bitwise_equal(got, want) and bitwise_equal(bank, want_bank)


def test_cuda_graph_replay_of_decode_step_equals_eager_bitwise():
    """torch.cuda.graph captures three decode steps (validate=True: the device check is skipped
    while capturing); two replays equal the eager steps bitwise."""
    problem = gpu_problem(P=8, W=64, R=64, hd=768, slots_per_stream=1024, decode_lead=(8,),
                           bank=torch.bfloat16, index=torch.int32, seed=9).to("cuda")
    inputs = problem.inputs()
    with torch.no_grad():
        eager_bank = problem.memory.clone()
        eager = [sdm.decode_step(eager_bank, *inputs, slots_per_stream=1024) for _ in range(3)]

        bank = problem.memory.clone()
        side = torch.cuda.Stream()
        side.wait_stream(torch.cuda.current_stream())
        with torch.cuda.stream(side):  # warm-up off the default stream, as torch.cuda.graph asks
            sdm.decode_step(bank.clone(), *inputs, slots_per_stream=1024)
        torch.cuda.current_stream().wait_stream(side)
        graph = torch.cuda.CUDAGraph()
        with torch.cuda.graph(graph):
            captured = [sdm.decode_step(bank, *inputs, slots_per_stream=1024) for _ in range(3)]
        for _ in range(2):
            bank.copy_(problem.memory)
            for r in captured:
                r.fill_(float("nan"))
            graph.replay()
            torch.cuda.synchronize()
            assert bitwise_equal(bank, eager_bank)
            for r, e in zip(captured, eager):
                assert bitwise_equal(r, e)


def test_cuda_graph_replay_of_write_read_inplace_equals_eager_bitwise():
    problem = gpu_problem(P=2, T=100, W=16, R=16, hd=64, slots_per_stream=256, bank=torch.bfloat16,
                           seed=10).to("cuda")
    with torch.no_grad():
        eager_bank = problem.memory.clone()
        eager = sdm.write_read_(eager_bank, *problem.inputs(), **_options(problem, 16))
        bank = problem.memory.clone()
        side = torch.cuda.Stream()
        side.wait_stream(torch.cuda.current_stream())
        with torch.cuda.stream(side):
            sdm.write_read_(bank.clone(), *problem.inputs(), **_options(problem, 16))
        torch.cuda.current_stream().wait_stream(side)
        graph = torch.cuda.CUDAGraph()
        with torch.cuda.graph(graph):
            captured = sdm.write_read_(bank, *problem.inputs(), **_options(problem, 16))
        for _ in range(2):
            bank.copy_(problem.memory)
            captured.fill_(float("nan"))
            graph.replay()
            torch.cuda.synchronize()
            assert bitwise_equal(captured, eager) and bitwise_equal(bank, eager_bank)


def _plant(problem, tensor: str, position: tuple[int, ...], value: int):
    getattr(problem, tensor)[position] = value


@pytest.mark.parametrize("tensor, position, value, names", [
    ("k_idx", (1, 5, 2), 0, "k_idx[stream 1, token 5, lane 2]"),
    ("q_idx", (1, 9, 1), -5, "q_idx[stream 1, token 9, lane 1]"),
    ("k_idx", (0, 3, 2), None, "k_idx[stream 0, token 3, lane 2]"),  # repeats lane 0
])
def test_device_index_check_raises_value_error_like_the_cpu(tensor, position, value, names):
    cpu = gpu_problem(P=2, T=10, W=3, R=2, hd=8, slots_per_stream=16, seed=11)
    _plant(cpu, tensor, position, cpu.k_idx[0, 3, 0].item() if value is None else value)
    gpu = cpu.to("cuda")
    initial = gpu.memory.clone()
    with pytest.raises(ValueError) as cpu_error, torch.no_grad():
        sdm.write_read_(cpu.memory, *cpu.inputs(), **_options(cpu, 4))
    with pytest.raises(ValueError) as gpu_error, torch.no_grad():
        sdm.write_read_(gpu.memory, *gpu.inputs(), **_options(gpu, 4))
    assert names in str(gpu_error.value)
    assert str(gpu_error.value) == str(cpu_error.value)
    assert bitwise_equal(gpu.memory, initial), "nothing may be written when the check fails"


@pytest.mark.parametrize("sps", [16, 0])
def test_decode_index_check_names_stream_and_lane(sps):
    cpu = gpu_problem(P=2, W=3, R=2, hd=8, slots_per_stream=16, decode_lead=(2,), seed=12)
    cpu.k_idx[1, 1] = 99 if sps == 0 else 3  # outside the bank / outside stream 1's rows
    gpu = cpu.to("cuda")
    initial = gpu.memory.clone()
    with pytest.raises(ValueError) as cpu_error, torch.no_grad():
        sdm.decode_step(cpu.memory, *cpu.inputs(), slots_per_stream=sps)
    with pytest.raises(ValueError, match=r"k_idx\[stream 1, lane 1\]") as gpu_error, torch.no_grad():
        sdm.decode_step(gpu.memory, *gpu.inputs(), slots_per_stream=sps)
    assert str(gpu_error.value) == str(cpu_error.value)
    assert bitwise_equal(gpu.memory, initial)


def test_inputs_on_another_device_are_refused_by_name():
    gpu = gpu_problem(P=1, T=4, W=2, R=2, hd=8, slots_per_stream=8, seed=13).to("cuda")
    inputs = list(gpu.inputs())
    inputs[3] = inputs[3].cpu()  # beta
    with pytest.raises(ValueError, match="beta"), torch.no_grad():
        sdm.write_read_(gpu.memory, *inputs, **_options(gpu, 4))


def test_inplace_op_refuses_autograd_on_cuda():
    gpu = gpu_problem(P=1, T=4, W=2, R=2, hd=8, slots_per_stream=8, seed=14).to("cuda")
    v = gpu.v.clone().requires_grad_(True)
    inputs = list(gpu.inputs())
    inputs[2] = v
    with pytest.raises(RuntimeError, match="use the functional sdm.write_read"):
        sdm.write_read_(gpu.memory, *inputs, **_options(gpu, 4))
