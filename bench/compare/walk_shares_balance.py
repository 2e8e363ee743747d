"""How evenly the CUDA backward's staged slot walk (src/cuda/backward/slots_staged.cu) spreads a
chunk's work over the CTAs that share it, simulated on the host from the benchmark's slot patterns
(slot_inputs.py: product-key top-k over an AR(1) latent, and heavy reuse).

Per chunk of C tokens of one stream the walk's positions are the C*W sorted write entries, then the
C*R sorted read entries. A worker sits at a group's first position: each written slot's first write
position (its members: the slot's writes and all its reads, wherever they sit), and each read-only
slot's first read position (its reads). A worker costs `worker` member-units (its G and M0 pieces
and the G store) plus one per member; every other position costs nothing. The walk's CTAs (shares)
take contiguous ranges of positions; this prints, for the cut at equal position counts and for the
cut at equal work (walk_cuts.cu: cut j after the position where the running cost reaches
ceil(j * total / S)), the busiest share's work over the mean share's, averaged over the chunks
(and the worst chunk). A launch lasts about as long as its busiest CTA.

--side write: the forward's write walk (src/cuda/forward/write_walk.cu) instead, which cuts a chunk's
C*W sorted write positions into shares at equal counts: a write group's worker sits at its first
position and costs `worker` + its size; the default share count is write_walk.cu's walk_shares.

--assume-worker N: the equal-work cut weighs a worker N (the cut kernel's constant) while the work
is measured with --worker (the true cost), to see how much a wrong weight costs.

    python bench/compare/walk_shares_balance.py [--configs flagship,readme] [--chunk 64] [--shares 5,22] [--tokens 512]
                                                [--side slot|write] [--worker 4] [--assume-worker 16]
"""

from __future__ import annotations

import argparse
import math

import torch

from slot_inputs import CONFIGS, PATTERNS, make_inputs


def position_costs(writes: torch.Tensor, reads: torch.Tensor, worker: int) -> list[int]:
    """Cost of every position of one chunk (sorted writes, then sorted reads; with no reads, the
    write walk's positions)."""
    ws, wcount = torch.unique_consecutive(writes, return_counts=True)
    rs, rcount = torch.unique_consecutive(reads, return_counts=True)
    wfirst = (torch.cumsum(wcount, 0) - wcount).tolist()
    rfirst = (torch.cumsum(rcount, 0) - rcount).tolist()
    reads_of = dict(zip(rs.tolist(), rcount.tolist()))
    written = set(ws.tolist())
    cost = [0] * (writes.numel() + reads.numel())
    for slot, first, size in zip(ws.tolist(), wfirst, wcount.tolist()):
        cost[first] = worker + size + reads_of.get(slot, 0)
    for slot, first, size in zip(rs.tolist(), rfirst, rcount.tolist()):
        if slot not in written:
            cost[writes.numel() + first] = worker + size
    return cost


def default_shares(config: dict, chunk: int, side: str, sms: int = 132) -> int:
    """The walk's share count on a 132-SM H100: slots_staged.cu staged_walk_shares, write_walk.cu walk_shares."""
    steps = math.ceil(config["hd"] / 256)
    if side == "slot":
        return math.ceil(sms / (config["P"] * steps))
    warps = 8 if chunk <= 64 else 16
    wanted = math.ceil(2 * sms / (config["P"] * steps))
    most = max(1, chunk * config["W"] // (warps * 32))
    return max(1, min(wanted, most))


def share_work(cost: list[int], shares: int, balanced: bool, cut_cost: list[int] | None = None) -> list[int]:
    """Each share's work (by `cost`) when the cut is at equal counts or at equal `cut_cost` (default `cost`)."""
    n = len(cost)
    by = cost if cut_cost is None else cut_cost
    total = sum(by)
    if balanced and total > 0:
        cuts, running, j = [0], 0, 1
        for q, c in enumerate(by):
            running += c
            while j < shares and running >= (j * total + shares - 1) // shares:  # integer ceil, as the kernel
                cuts.append(q + 1)
                j += 1
        cuts += [n] * (shares + 1 - len(cuts))
    else:
        cuts = [n * j // shares for j in range(shares + 1)]
    return [sum(cost[cuts[j]:cuts[j + 1]]) for j in range(shares)]


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--configs", default="readme,big,flagship")
    ap.add_argument("--chunk", type=int, default=64)
    ap.add_argument("--shares", default="", help="comma list (default: the walk's count on a 132-SM H100)")
    ap.add_argument("--tokens", type=int, default=512, help="tokens per stream simulated (a prefix of T)")
    ap.add_argument("--streams", type=int, default=2, help="streams simulated (of P)")
    ap.add_argument("--worker", type=int, default=4, help="a worker's (a group's) fixed cost in member units")
    ap.add_argument("--assume-worker", type=int, default=0, help="the equal-work cut's worker weight (default: --worker)")
    ap.add_argument("--side", choices=("slot", "write"), default="slot",
                    help="the backward's staged slot walk or the forward's write walk")
    args = ap.parse_args()
    print("| config | slots | C | shares | equal counts: busiest / mean (worst chunk) | equal work: busiest / mean (worst chunk) |")
    print("|---|---|---:|---:|---|---|")
    for name in args.configs.split(","):
        config = dict(CONFIGS[name], T=min(CONFIGS[name]["T"], args.tokens))
        share_counts = ([int(s) for s in args.shares.split(",")] if args.shares
                        else [default_shares(config, args.chunk, args.side)])
        for pattern in PATTERNS:
            x = make_inputs(config, pattern, seed=0, device="cpu")
            k, q = x["k_idx"].long(), x["q_idx"].long()
            C = args.chunk
            def chunk_costs(p: int, t0: int, worker: int) -> list[int]:
                writes = k[p, t0:t0 + C].reshape(-1).sort().values
                reads = writes[:0] if args.side == "write" else q[p, t0:t0 + C].reshape(-1).sort().values
                return position_costs(writes, reads, worker)

            chunks = [(p, t0) for p in range(min(config["P"], args.streams)) for t0 in range(0, config["T"], C)]
            costs = [chunk_costs(p, t0, args.worker) for p, t0 in chunks]
            assumed = [chunk_costs(p, t0, args.assume_worker) for p, t0 in chunks] if args.assume_worker else costs
            for shares in share_counts:
                cells = []
                for balanced in (False, True):
                    ratios = []
                    for cost, cut_cost in zip(costs, assumed):
                        work = share_work(cost, shares, balanced, cut_cost)
                        ratios.append(max(work) / (sum(work) / shares))
                    cells.append(f"{sum(ratios) / len(ratios):.3f} ({max(ratios):.3f})")
                print(f"| {name} | {pattern} | {C} | {shares} | {cells[0]} | {cells[1]} |", flush=True)


if __name__ == "__main__":
    main()
