"""Product-key top-k: a selection by torch sorts (two factors, a stable
sort per factor, then over the k1 x k1 candidate grid), timed against
torch.ops.sdm.product_key_topk on the same shapes.

    python bench/topk/torch_sorts.py --device cuda            # torch sorts only (no sdm needed)
    python bench/topk/torch_sorts.py --device cpu --with-sdm  # both, on the CPU

Median of --reps calls (after 2 warm-ups); CUDA timings with CUDA events. Prints a markdown table.
"""

from __future__ import annotations

import argparse
import statistics
import time

import torch


def _best_ascending(scores: torch.Tensor, k: int) -> torch.Tensor:
    ranked = torch.sort(scores, dim=-1, descending=True, stable=True).indices[..., :k]
    return torch.sort(ranked, dim=-1).values


def torch_sorts_topk(raw: torch.Tensor, n: int, k: int) -> tuple[torch.Tensor, torch.Tensor]:
    scores = raw.float()
    f1, f2 = scores[..., :n], scores[..., n:]
    k1 = min(k, n)
    i1, i2 = _best_ascending(f1, k1), _best_ascending(f2, k1)
    grid = (f1.gather(-1, i1).unsqueeze(-1) + f2.gather(-1, i2).unsqueeze(-2)).flatten(-2)
    position = _best_ascending(grid, min(k, k1 * k1))
    return grid.gather(-1, position), i1.gather(-1, position // k1) * n + i2.gather(-1, position % k1)


def median_ms(call, device: str, reps: int) -> float:
    for _ in range(2):
        call()
    times = []
    for _ in range(reps):
        if device == "cuda":
            start, stop = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
            start.record()
            call()
            stop.record()
            stop.synchronize()
            times.append(start.elapsed_time(stop))
        else:
            t0 = time.perf_counter()
            call()
            times.append((time.perf_counter() - t0) * 1e3)
    return statistics.median(times)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--device", default="cuda")
    parser.add_argument("--with-sdm", action="store_true", help="also time sdm.product_key_topk")
    parser.add_argument("--reps", type=int, default=20)
    parser.add_argument("--rows-scale", type=float, default=1.0, help="multiply the row counts (CPU: fewer rows)")
    args = parser.parse_args()
    if args.with_sdm:
        import sdm
    shapes = [(256, 64, 16384), (256, 128, 32768), (512, 64, 16384)]
    print(f"| side | k | rows | dtype | torch sorts ms |{' sdm ms | speedup |' if args.with_sdm else ''}")
    print(f"|---:|---:|---:|---|---:|{'---:|---:|' if args.with_sdm else ''}")
    for side, k, rows in shapes:
        rows = max(1, int(rows * args.rows_scale))
        for dtype in (torch.bfloat16, torch.float32):
            raw = torch.randn(rows, 2 * side, device=args.device).to(dtype)
            old = median_ms(lambda: torch_sorts_topk(raw, side, k), args.device, args.reps)
            line = f"| {side} | {k} | {rows} | {str(dtype).removeprefix('torch.')} | {old:.3f} |"
            if args.with_sdm:
                new = median_ms(lambda: sdm.product_key_topk(raw, [side, side], k), args.device, args.reps)
                line += f" {new:.3f} | {old / new:.1f}x |"
            print(line, flush=True)


if __name__ == "__main__":
    main()
