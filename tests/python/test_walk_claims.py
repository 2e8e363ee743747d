"""The host model of the staged slot walk's claims (bench/compare/walk_shares_balance.py --claims), on
the CPU: a share's batches as slots_staged.cu ShareBatches cuts them, and a CTA's span under the
kernel's claim rule (a warp claims its next batch as it starts its current batch's last worker); the
count of its workers by kind (--workers); and the positions' costs with the side split (stop 57's
candidate: a long read side of a written slot costs at its own first read position)."""

from __future__ import annotations

import pathlib
import random
import sys

sys.path.insert(0, str(pathlib.Path(__file__).resolve().parents[2] / "bench" / "compare"))
import torch  # noqa: E402
from walk_shares_balance import (  # noqa: E402
    TAIL_POSITIONS,
    balanced_cuts,
    cta_span,
    kernel_side_split,
    position_costs,
    share_batches,
    worker_kinds,
)


def test_batches_cover_each_position_once():
    rng = random.Random(5)
    for _ in range(200):
        first = rng.randrange(0, 500)
        end = first + rng.randrange(0, 900)
        for tiered in (False, True):
            batches = share_batches(first, end, tiered)
            covered = [q for base, size in batches for q in range(base, base + size)]
            assert covered == list(range(first, end)), (first, end, tiered)
            assert all(size > 0 for _, size in batches)


def test_tiered_batches_are_small_only_in_the_tail():
    batches = share_batches(100, 100 + 300, tiered=True)  # 44 positions of 16s, then 256 of 4s
    assert batches[:3] == [(100, 16), (116, 16), (132, 12)]
    assert batches[3:] == [(144 + 4 * i, 4) for i in range(TAIL_POSITIONS // 4)]
    assert share_batches(0, 40, tiered=False) == [(0, 16), (16, 16), (32, 8)]
    assert share_batches(0, 40, tiered=True) == [(q, 4) for q in range(0, 40, 4)]  # a short share: all tail


def test_span_follows_the_claim_rule():
    # Warp 0 walks [1, 10] and claims at 1 (as its last worker starts); warp 1 walks [2, 3] and claims
    # at 2: warp 0 takes the last batch, which starts when its walk ends at 11: span 14 (claiming at a
    # batch's end instead would give it to warp 1: span 11).
    assert cta_span([1, 10, 2, 3, 3], [(0, 2), (2, 2), (4, 1)], warps=2) == 14
    # Positions without a worker cost nothing; a batch without workers is claimed past at once.
    assert cta_span([0, 0, 5, 0], [(0, 2), (2, 2)], warps=2) == 5
    # Batches of 16 leave one warp a batch behind; batches of 4 even it out.
    ones = [1] * 40
    assert cta_span(ones, share_batches(0, 40, tiered=False), warps=2) == 24
    assert cta_span(ones, share_batches(0, 40, tiered=True), warps=2) == 20


def test_balanced_cuts_split_work_evenly():
    cost = [4, 0, 0, 4, 1, 1, 1, 1, 0, 4]
    cuts = balanced_cuts(cost, 2)
    assert cuts == [0, 4, 10]  # cut 1 after the position where the running cost reaches ceil(16 / 2) = 8
    assert balanced_cuts([0] * 5, 3)[-1] == 5


def test_worker_kinds_follow_task_holds_entries():
    # Slot 1: two writes (long); 2: one write, one read (single); 3: one write, two reads (long);
    # 5: one write (single); read-only 4: one read (single); read-only 6: two reads (long).
    writes = torch.tensor([1, 1, 2, 3, 5])
    reads = torch.tensor([2, 3, 3, 4, 6, 6])
    kinds, long_members = worker_kinds(writes, reads)
    assert kinds == {"single write": 2, "long write": 2, "single read-only": 1, "long read-only": 1}
    assert long_members == 2 + 3 + 2


def test_side_split_moves_a_long_read_side_to_its_first_read():
    # Slot 1: two writes, read three times (sorted reads 0-2); slot 2: one write read once (read 3);
    # read-only slot 4: two reads (4, 5). Writes are positions 0-2, reads 3-8.
    writes = torch.tensor([1, 1, 2])
    reads = torch.tensor([1, 1, 1, 2, 4, 4])
    assert position_costs(writes, reads, worker=4) == [4 + 2 + 3, 0, 4 + 1 + 1, 0, 0, 0, 0, 4 + 2, 0]
    # Split from 3 reads: slot 1's write worker keeps its writes, its read side costs at read 0.
    assert position_costs(writes, reads, worker=4, side_split=3) == [4 + 2, 0, 4 + 1 + 1, 4 + 3, 0, 0, 0, 4 + 2, 0]
    # From 4 reads no slot is read often enough: the costs are the unsplit ones.
    assert position_costs(writes, reads, worker=4, side_split=4) == position_costs(writes, reads, worker=4)


def test_kernel_side_split_follows_the_kernels_floor():
    # Never split when not asked; at least 2 reads; at least ceil(C R / 512) (flagship C 128: 32).
    assert kernel_side_split(0, 64, 128) == 0
    assert kernel_side_split(1, 16, 8) == 2
    assert kernel_side_split(16, 64, 64) == 16
    assert kernel_side_split(16, 64, 128) == 16
    assert kernel_side_split(16, 128, 128) == 32
    assert kernel_side_split(16, 128, 129) == 33
