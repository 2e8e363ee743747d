"""Times one training step (forward + backward) of a SparseDeltaMemory layer, and the product-key
top-k calls inside it, on the demo's configuration (python/sdm/demo: dim 64, one head, 4096 slots,
W = R = 16, batch 16 x 128 tokens, chunk 64) or another given by flags. Median of --reps steps
after 2 warm-ups.

    SDM_NUM_THREADS=2 python bench/layer_step.py --threads 2
"""

from __future__ import annotations

import argparse
import statistics
import time

import torch

import sdm


def median_ms(call, reps: int) -> float:
    for _ in range(2):
        call()
    times = []
    for _ in range(reps):
        t0 = time.perf_counter()
        call()
        times.append((time.perf_counter() - t0) * 1e3)
    return statistics.median(times)


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--dim", type=int, default=64)
    p.add_argument("--slots", type=int, default=4096)
    p.add_argument("--reads-writes", type=int, default=16)
    p.add_argument("--batch", type=int, default=16)
    p.add_argument("--seq-len", type=int, default=128)
    p.add_argument("--threads", type=int, default=2, help="torch threads (sdm's: SDM_NUM_THREADS)")
    p.add_argument("--reps", type=int, default=20)
    args = p.parse_args()
    torch.set_num_threads(args.threads)
    torch.manual_seed(0)
    layer = sdm.SparseDeltaMemory(sdm.SparseDeltaMemoryArgs(
        dim=args.dim, num_heads=1, slots_per_head=args.slots, num_writes=args.reads_writes,
        num_reads=args.reads_writes, chunk_size=64))
    x = torch.randn(args.batch, args.seq_len, args.dim, requires_grad=True)

    def step():
        layer.zero_grad(set_to_none=True)
        out, _ = layer(x)
        out.square().mean().backward()

    raw = layer.Wk_write(x).detach().view(args.batch, args.seq_len, 1, -1).transpose(1, 2).contiguous()
    factors = layer.product_key_factors
    total = median_ms(step, args.reps)
    topk = median_ms(lambda: sdm.product_key_topk(raw, factors, args.reads_writes), args.reps)
    print(f"| dim {args.dim}, {args.slots} slots, W = R = {args.reads_writes}, {args.batch} x {args.seq_len} tokens "
          f"| {total:.2f} ms | {2 * topk:.2f} ms (2 calls) | {args.batch * args.seq_len / total * 1e3:.0f} tokens/s |")


if __name__ == "__main__":
    main()
