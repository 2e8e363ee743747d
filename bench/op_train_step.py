"""Times the op's training step as PyTorch runs it: sdm.write_read (saving forward) and the
backward through autograd, with the loss on the readings only (the final bank unused, as in a
layer without a cache), on random problems drawn like the tests' (tests/python/sdm_problem.py).
Median of --reps steps after 3 warm-ups; CPU wall time, or CUDA events on a GPU.

    SDM_NUM_THREADS=2 python bench/op_train_step.py --threads 2     # a bank-heavy CPU config
"""

from __future__ import annotations

import argparse
import pathlib
import statistics
import sys
import time

import torch

import sdm

sys.path.insert(0, str(pathlib.Path(__file__).resolve().parents[1] / "tests" / "python"))
from sdm_problem import make_problem  # noqa: E402


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--device", default="cpu")
    ap.add_argument("--P", type=int, default=2)
    ap.add_argument("--T", type=int, default=256)
    ap.add_argument("--W", type=int, default=8)
    ap.add_argument("--R", type=int, default=8)
    ap.add_argument("--hd", type=int, default=64)
    ap.add_argument("--slots", type=int, default=262144, help="rows per stream")
    ap.add_argument("--chunk", type=int, default=64)
    ap.add_argument("--bank", choices=["float32", "bfloat16"], default="float32")
    ap.add_argument("--reps", type=int, default=15)
    ap.add_argument("--threads", type=int, default=0, help="torch.set_num_threads (0: leave)")
    a = ap.parse_args()
    if a.threads:
        torch.set_num_threads(a.threads)
    bank = getattr(torch, a.bank)
    p = make_problem(P=a.P, T=a.T, W=a.W, R=a.R, hd=a.hd, slots_per_stream=a.slots, dtype=bank,
                     input_dtype=torch.float32, seed=3).to(a.device)
    memory = p.memory.clone().requires_grad_()
    v = p.v.clone().requires_grad_()

    def step() -> None:
        readings, _final_bank = sdm.write_read(memory, p.k_idx, p.k_val, v, p.beta, p.g, p.q_idx, p.q_val,
                                               slots_per_stream=a.slots, chunk_size=a.chunk)
        readings.float().square().sum().backward()
        memory.grad = None
        v.grad = None

    for _ in range(3):
        step()
    times = []
    for _ in range(a.reps):
        if a.device == "cpu":
            t0 = time.perf_counter()
            step()
            times.append((time.perf_counter() - t0) * 1e3)
        else:
            start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
            start.record()
            step()
            end.record()
            torch.cuda.synchronize()
            times.append(start.elapsed_time(end))
    rows = a.P * a.slots
    print(f"op training step, {a.device}, bank [{rows}, {a.hd}] {a.bank}, P {a.P} T {a.T} W {a.W} R {a.R} "
          f"C {a.chunk}: median {statistics.median(times):.1f} ms (min {min(times):.1f}, max {max(times):.1f}, "
          f"{a.reps} steps)")


if __name__ == "__main__":
    main()
