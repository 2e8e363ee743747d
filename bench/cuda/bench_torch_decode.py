"""Per-step latency of sdm.decode_step called from Python on CUDA (targets for decode8:
<= 30 us eager from Python, <= 10 us replayed in a CUDA graph).

    python3 bench/cuda/bench_torch_decode.py [--json FILE] [--steps N] [--reps N]

Configs decode8 / decode64: one token for 8 / 64 streams, hd 768, slots_per_stream 36864,
W = R = 64, bf16 bank, bf16 k_val / v / q_val, f32 beta / g, int32 indices (the C++ benchmark's
configs). Modes, each the median over --reps timed runs of --steps steps after a warm-up:
  eager, validate=False     a Python loop of sdm.decode_step calls; wall clock around the loop
                            and a final synchronize (so it counts the host's per-call overhead
                            whenever that exceeds the GPU time of a step)
  eager, validate=True      the default: the device index check and its host sync every step
  graph replay, 1 step      one captured step per torch.cuda.CUDAGraph.replay() (wall clock)
  graph replay, N steps     N captured steps in one graph, CUDA events around each replay
Prints a markdown table (the C++ benchmark's columns) and writes JSON.
"""

from __future__ import annotations

import argparse
import json
import statistics
import time

import torch

import sdm

CONFIGS = {"decode8": 8, "decode64": 64}
HD, SPS, W, R = 768, 36864, 64, 64


def make_inputs(streams: int, seed: int) -> tuple[torch.Tensor, tuple[torch.Tensor, ...]]:
    gen = torch.Generator(device="cuda").manual_seed(seed)
    dev = dict(device="cuda")

    def slots(k: int) -> torch.Tensor:
        rows = torch.rand(streams, SPS, generator=gen, **dev).argsort(dim=1)[:, :k]
        return (rows + torch.arange(streams, **dev).view(-1, 1) * SPS).to(torch.int32)

    def uniform(shape, lo, hi, dtype):
        return (torch.rand(*shape, generator=gen, **dev) * (hi - lo) + lo).to(dtype)

    memory = uniform((streams * SPS, HD), -0.1, 0.1, torch.bfloat16)
    inputs = (slots(W), uniform((streams, W), -0.3, 0.3, torch.bfloat16), uniform((streams, HD), -0.1, 0.1,
              torch.bfloat16), uniform((streams, 1), 0.0, 0.3, torch.float32),
              uniform((streams, 1), -0.5, -0.01, torch.float32), slots(R),
              uniform((streams, R), -0.3, 0.3, torch.bfloat16))
    return memory, inputs


def median_wall_us(body, steps: int, reps: int) -> float:
    body(steps)
    torch.cuda.synchronize()
    times = []
    for _ in range(reps):
        start = time.perf_counter()
        body(steps)
        torch.cuda.synchronize()
        times.append((time.perf_counter() - start) / steps * 1e6)
    return statistics.median(times)


def median_event_us(body, steps: int, reps: int) -> float:
    body()
    torch.cuda.synchronize()
    times = []
    for _ in range(reps):
        start, stop = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        start.record()
        body()
        stop.record()
        stop.synchronize()
        times.append(start.elapsed_time(stop) * 1e3 / steps)
    return statistics.median(times)


def capture(memory, inputs, steps: int) -> torch.cuda.CUDAGraph:
    side = torch.cuda.Stream()
    side.wait_stream(torch.cuda.current_stream())
    with torch.cuda.stream(side):
        sdm.decode_step(memory, *inputs, slots_per_stream=SPS, validate=False)
    torch.cuda.current_stream().wait_stream(side)
    graph = torch.cuda.CUDAGraph()
    with torch.cuda.graph(graph):
        for _ in range(steps):
            sdm.decode_step(memory, *inputs, slots_per_stream=SPS, validate=False)
    return graph


def bench(name: str, streams: int, steps: int, reps: int) -> list[dict]:
    memory, inputs = make_inputs(streams, seed=streams)
    rows = []

    def eager(validate: bool):
        def body(n: int):
            for _ in range(n):
                sdm.decode_step(memory, *inputs, slots_per_stream=SPS, validate=validate)
        return body

    with torch.no_grad():
        rows.append(("decode step, eager from Python, validate=False", median_wall_us(eager(False), steps, reps)))
        rows.append(("decode step, eager from Python, validate=True", median_wall_us(eager(True), steps, reps)))
        one = capture(memory, inputs, 1)
        rows.append(("decode step, torch CUDA graph, 1 step per replay",
                     median_wall_us(lambda n: [one.replay() for _ in range(n)], steps, reps)))
        many = capture(memory, inputs, steps)
        rows.append((f"decode step, torch CUDA graph, {steps} steps per replay",
                     median_event_us(many.replay, steps, reps)))
    moved = streams * (2 * W + R) * HD * 2  # bytes per step: W rows read + written, R rows read, bf16
    return [dict(config=name, mode=mode, us=us, gbytes_must_move=moved * 1e-9) for mode, us in rows]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--json", default="")
    parser.add_argument("--steps", type=int, default=200)
    parser.add_argument("--reps", type=int, default=5)
    args = parser.parse_args()
    if not torch.cuda.is_available():
        print("bench_torch_decode: skipped (no CUDA device)")
        return
    rows = []
    for name, streams in CONFIGS.items():
        rows += bench(name, streams, args.steps, args.reps)
    print(f"device: {torch.cuda.get_device_name()}, torch {torch.__version__}")
    print("\n| config | mode | us per step | GB must move |\n|---|---|---|---|")
    for r in rows:
        print(f"| {r['config']} | {r['mode']} | {r['us']:.2f} | {r['gbytes_must_move']:.4f} |")
    if args.json:
        with open(args.json, "w") as f:
            json.dump(dict(device=torch.cuda.get_device_name(), torch=torch.__version__, rows=rows), f, indent=1)


if __name__ == "__main__":
    main()
