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

--claims: inside each CTA of the slot walk (equal-work cut) instead: its 16 warps claim batches of
positions from a shared counter, each claiming its next batch as it starts the last worker of its
current one, and walk the batch's workers one after another. Prints the CTA's span (when its last
warp ends) over its ideal (its work / 16), with batches of 16 to the end (slots_staged.cu kBatch) and
with tiered batches (the share's last 256 positions in batches of 4), the longest worker over the
ideal, and the summed span of each chunk's slowest CTA (a launch's length, in member units). The
model leaves out what a batch costs to start (its task, row-source and ring loads, about 16 % of the
walk's stall samples by ncu): the tiers it favoured measured 3 % slower at readme heavy and were
dropped (docs/performance.md, "Stop 55").

--side-split N: a written slot read at least N times in a chunk has its read side walked by its own
worker, at its first read position, with the kernel's floor applied (kernel_side_split: at least 2,
and at least ceil(C R / 512): flagship at C 128 splits from 32) (0, the default: never, as today's
kernel walks it; the split is a candidate of stops 57-58, docs/performance.md).

--workers: the kinds of the slot walk's workers instead (which path of slots_staged.cu walks them): a
write group of one entry read at most once (its task holds the entries: one straight block), a
longer written group (its members through walk_window), a read-only group of one read, a longer
read-only group; as fractions of the workers, with the members the long groups hold and the workers
a position.

    python bench/compare/walk_shares_balance.py [--configs flagship,readme] [--chunk 64] [--shares 5,22] [--tokens 512]
                                                [--side slot|write] [--worker 4] [--assume-worker 16] [--claims|--workers]
"""

from __future__ import annotations

import argparse
import heapq
import math

import torch

from slot_inputs import CONFIGS, PATTERNS, make_inputs


def chunk_groups(writes: torch.Tensor,
                 reads: torch.Tensor) -> tuple[list[tuple[int, int, int, int]], list[tuple[int, int]]]:
    """One chunk's groups from its sorted write and read slots: per written slot (its first write
    position, its writes, its first read position, its reads; 0, 0 where the chunk does not read it),
    and per slot read but not written (its first read position, its reads); positions count within
    the writes and within the reads."""
    ws, wcount = torch.unique_consecutive(writes, return_counts=True)
    rs, rcount = torch.unique_consecutive(reads, return_counts=True)
    wfirst = (torch.cumsum(wcount, 0) - wcount).tolist()
    rfirst = (torch.cumsum(rcount, 0) - rcount).tolist()
    read_groups = {slot: (first, size) for slot, first, size in zip(rs.tolist(), rfirst, rcount.tolist())}
    written = [(first, size, *read_groups.get(slot, (0, 0)))
               for slot, first, size in zip(ws.tolist(), wfirst, wcount.tolist())]
    written_slots = set(ws.tolist())
    read_only = [group for slot, group in read_groups.items() if slot not in written_slots]
    return written, read_only


def position_costs(writes: torch.Tensor, reads: torch.Tensor, worker: int, side_split: int = 0) -> list[int]:
    """Cost of every position of one chunk (sorted writes, then sorted reads; with no reads, the
    write walk's positions). side_split > 0: a written slot read at least that often has its read
    side walked by a worker of its own at its first read position (stop 57's candidate: the write
    group's worker then costs its writes only)."""
    written, read_only = chunk_groups(writes, reads)
    reads0 = writes.numel()  # the first read position
    cost = [0] * (writes.numel() + reads.numel())
    for first, size, read_first, read_size in written:
        if side_split > 0 and read_size >= side_split:
            cost[first] = worker + size
            cost[reads0 + read_first] = worker + read_size
        else:
            cost[first] = worker + size + read_size
    for first, size in read_only:
        cost[reads0 + first] = worker + size
    return cost


def kernel_side_split(reads: int, C: int, R: int) -> int:
    """The side split the kernel runs when asked for `reads` (0: never): at least 2 (backward.hpp
    read_side_apart), and at least ceil(C R / 512) (slots_staged.cu plan_side_split: at most 512
    scratch blocks a stream and column step; flagship at C 128: 32)."""
    return 0 if reads <= 0 else max(reads, 2, -(-C * R // 512))


WORKER_KINDS = ("single write", "long write", "single read-only", "long read-only")


def worker_kinds(writes: torch.Tensor, reads: torch.Tensor) -> tuple[dict[str, int], int]:
    """One chunk's workers by kind (WORKER_KINDS; a written group is single when it has one write
    entry and at most one read, slot_task_data.cuh task_holds_entries), and the members of its long
    groups (their write and read entries)."""
    written, read_only = chunk_groups(writes, reads)
    kinds = dict.fromkeys(WORKER_KINDS, 0)
    long_members = 0
    for _, size, _, read_size in written:
        single = size == 1 and read_size <= 1
        kinds["single write" if single else "long write"] += 1
        long_members += 0 if single else size + read_size
    for _, size in read_only:
        kinds["single read-only" if size == 1 else "long read-only"] += 1
        long_members += 0 if size == 1 else size
    return kinds, long_members


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
        cuts = balanced_cuts(by, shares)
    else:
        cuts = [n * j // shares for j in range(shares + 1)]
    return [sum(cost[cuts[j]:cuts[j + 1]]) for j in range(shares)]


WALK_WARPS, BATCH = 16, 16  # slots_staged.cu kStageWarps, kBatch
TAIL_BATCH, TAIL_POSITIONS = 4, WALK_WARPS * BATCH  # the tiered batches' tail


def share_batches(first: int, end: int, tiered: bool) -> list[tuple[int, int]]:
    """A share's batches (first position, size) in claim order: BATCH positions at a time, and where
    tiered the last TAIL_POSITIONS TAIL_BATCH at a time."""
    tail = end - min(end - first, TAIL_POSITIONS) if tiered else end
    head = [(b, min(BATCH, tail - b)) for b in range(first, tail, BATCH)]
    return head + [(b, min(TAIL_BATCH, end - b)) for b in range(tail, end, TAIL_BATCH)]


def cta_span(cost: list[int], batches: list[tuple[int, int]], warps: int = WALK_WARPS) -> int:
    """When the CTA's last warp ends: warps claim the batches in order, each claiming its next one as
    it starts the last worker (cost > 0) of its current one (at once where a batch has none), and
    walk a batch's workers one after another, each taking its cost."""
    claims = [(0, w, 0) for w in range(warps)]  # (claim time, warp, when its claimed batch may start)
    span, k = 0, 0
    while claims:
        _, warp, start = heapq.heappop(claims)
        if k == len(batches):
            span = max(span, start)
            continue
        base, size = batches[k]
        k += 1
        workers = [c for c in cost[base:base + size] if c > 0]
        end = start + sum(workers)
        span = max(span, end)
        heapq.heappush(claims, (end - workers[-1] if workers else start, warp, end))
    return span


def balanced_cuts(cost: list[int], shares: int) -> list[int]:
    """The share boundaries of the cut at equal work (walk_cuts.cu)."""
    n, total = len(cost), sum(cost)
    cuts, running, j = [0], 0, 1
    for q, c in enumerate(cost):
        running += c
        while j < shares and running >= (j * total + shares - 1) // shares:
            cuts.append(q + 1)
            j += 1
    return cuts + [n] * (shares + 1 - len(cuts))


def print_claims(costs: list[list[int]], name: str, pattern: str, chunk: int, shares: int) -> None:
    """One row of --claims (see the module's comment) over the chunks' position costs."""
    ratios = {False: [], True: []}
    launch = {False: 0, True: 0}
    longest = []
    for cost in costs:
        cuts = balanced_cuts(cost, shares)
        slowest = {False: 0, True: 0}
        for j in range(shares):
            work = sum(cost[cuts[j]:cuts[j + 1]])
            if work == 0:
                continue
            ideal = work / WALK_WARPS
            longest.append(max(cost[cuts[j]:cuts[j + 1]]) / ideal)
            for tiered in (False, True):
                span = cta_span(cost, share_batches(cuts[j], cuts[j + 1], tiered))
                ratios[tiered].append(span / ideal)
                slowest[tiered] = max(slowest[tiered], span)
        for tiered in (False, True):
            launch[tiered] += slowest[tiered]
    mean = lambda v: f"{sum(v) / len(v):.2f} (max {max(v):.2f})"
    print(f"| {name} | {pattern} | {chunk} | {shares} | {mean(ratios[False])} | {mean(ratios[True])} | "
          f"{mean(longest)} | {launch[False]} | {launch[True]} | {launch[True] / launch[False]:.3f} |", flush=True)


def chunk_keys(k: torch.Tensor, q: torch.Tensor, p: int, t0: int, chunk: int) -> tuple[torch.Tensor, torch.Tensor]:
    """The sorted write and read slots of the chunk of stream p starting at token t0."""
    return (k[p, t0:t0 + chunk].reshape(-1).sort().values, q[p, t0:t0 + chunk].reshape(-1).sort().values)


def print_workers(keys: list[tuple[torch.Tensor, torch.Tensor]], name: str, pattern: str, chunk: int) -> None:
    """One row of --workers (see the module's comment) over the chunks' sorted keys (chunk_keys)."""
    totals = dict.fromkeys(WORKER_KINDS, 0)
    long_members = positions = 0
    for writes, reads in keys:
        kinds, members = worker_kinds(writes, reads)
        for kind, count in kinds.items():
            totals[kind] += count
        long_members += members
        positions += writes.numel() + reads.numel()
    workers = sum(totals.values())
    cells = " | ".join(f"{totals[kind] / workers:.3f}" for kind in WORKER_KINDS)
    print(f"| {name} | {pattern} | {chunk} | {cells} | {long_members / positions:.3f} | {workers / positions:.3f} |",
          flush=True)


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
    ap.add_argument("--side-split", type=int, default=0,
                    help="the slot walk's side split: a written slot read this often or more has its read side "
                         "walked apart (0: never, today's kernel; docs/performance.md, stop 57)")
    ap.add_argument("--claims", action="store_true", help="the warps' claims inside each CTA (see above)")
    ap.add_argument("--workers", action="store_true", help="the kinds of the slot walk's workers (see above)")
    args = ap.parse_args()
    if args.workers:
        if args.claims or args.side != "slot":
            ap.error("--workers counts the slot walk's workers (--side slot, without --claims)")
        print("| config | slots | C | " + " | ".join(WORKER_KINDS) + " | members in long groups | workers a position |")
        print("|---|---|---:|" + "---:|" * (len(WORKER_KINDS) + 2))
    elif args.claims:
        if args.side != "slot":
            ap.error("--claims models the slot walk (--side slot)")
        print("| config | slots | C | shares | span / ideal, batches of 16 | span / ideal, tiered | longest worker / ideal "
              "| launches, batches of 16 | launches, tiered | tiered / 16 |")
        print("|---|---|---:|---:|---|---|---|---:|---:|---:|")
    else:
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
                writes, reads = chunk_keys(k, q, p, t0, C)
                if args.side == "write":
                    return position_costs(writes, writes[:0], worker)
                return position_costs(writes, reads, worker, kernel_side_split(args.side_split, C, config["R"]))

            chunks = [(p, t0) for p in range(min(config["P"], args.streams)) for t0 in range(0, config["T"], C)]
            if args.workers:
                print_workers([chunk_keys(k, q, p, t0, C) for p, t0 in chunks], name, pattern, C)
                continue
            costs = [chunk_costs(p, t0, args.worker) for p, t0 in chunks]
            assumed = [chunk_costs(p, t0, args.assume_worker) for p, t0 in chunks] if args.assume_worker else costs
            for shares in share_counts:
                if args.claims:
                    print_claims(costs, name, pattern, C, shares)
                    continue
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
