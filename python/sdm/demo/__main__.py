"""python -m sdm.demo: train two SDM recall models that differ only in memory size.

Both variants share every setting and the seed; only ``slots_per_head`` differs. The
point shown is SDM's: recall accuracy grows with the state size. Prints a progress bar per
variant, then a markdown table, and writes to --out: results.md, results.json and
recall_accuracy.png (accuracy vs step for both variants).
"""

from __future__ import annotations

import argparse
import json
import math
import sys
import time
from dataclasses import dataclass, field
from pathlib import Path

import torch

from ..args import MAX_BANK_ROWS, MAX_READS_WRITES, SparseDeltaMemoryArgs
from .model import RecallModel
from .recall_task import RecallTask


@dataclass
class RunResult:
    name: str
    slots_per_head: int
    parameters: int
    final_accuracy: float = 0.0
    tokens_per_second: float = 0.0
    seconds: float = 0.0
    steps: list[int] = field(default_factory=list)
    accuracy: list[float] = field(default_factory=list)
    loss: list[float] = field(default_factory=list)


def _int_in(low: int, high: int | None = None):
    """An argparse type: an int in low..high (no upper bound when high is None); anything else is
    a usage error stating the allowed range."""
    allowed = f"an int in {low}..{high}" if high is not None else f"an int >= {low}"

    def parse(text: str) -> int:
        try:
            value = int(text)
        except ValueError:
            raise argparse.ArgumentTypeError(f"must be {allowed}, got {text!r}") from None
        if value < low or (high is not None and value > high):
            raise argparse.ArgumentTypeError(f"must be {allowed}, got {value}")
        return value

    parse.__name__ = allowed  # argparse names the type in its messages
    return parse


def _positive_float(text: str) -> float:
    try:
        value = float(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"must be a positive number, got {text!r}") from None
    if not (value > 0 and math.isfinite(value)):
        raise argparse.ArgumentTypeError(f"must be a positive number, got {text!r}")
    return value


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    """The demo's options; a bad value is a usage error (exit status 2) that states the allowed
    range, before anything is built or written."""
    p = argparse.ArgumentParser(prog="python -m sdm.demo", description=__doc__,
                                formatter_class=_HelpFormatter)
    p.add_argument("--steps", type=_int_in(1), default=600, help="training steps per variant")
    p.add_argument("--num-pairs", type=_int_in(1, RecallTask.num_keys), default=32,
                   help="key-value pairs per sequence")
    p.add_argument("--seq-len", type=_int_in(4), default=128,
                   help="tokens per sequence: 2 * num_pairs context tokens, the rest queries (2 tokens each)")
    p.add_argument("--small-slots", type=_int_in(1, MAX_BANK_ROWS), default=16,
                   help="slots_per_head of the small-memory variant (a perfect square)")
    p.add_argument("--large-slots", type=_int_in(1, MAX_BANK_ROWS), default=4096,
                   help="slots_per_head of the large-memory variant (a perfect square)")
    p.add_argument("--dim", type=_int_in(1), default=64, help="model width")
    p.add_argument("--layers", type=_int_in(1), default=1, help="SDM blocks")
    p.add_argument("--reads-writes", type=_int_in(1, MAX_READS_WRITES), default=16, help="num_reads = num_writes")
    p.add_argument("--batch-size", type=_int_in(1), default=16, help="sequences per training step")
    p.add_argument("--lr", type=_positive_float, default=3e-3, help="peak learning rate (one-cycle schedule)")
    p.add_argument("--eval-every", type=_int_in(1), default=25, help="steps between accuracy points on the plot")
    p.add_argument("--eval-sequences", type=_int_in(1), default=256,
                   help="held-out sequences for the final accuracy")
    p.add_argument("--device", default="cpu", choices=("cpu", "cuda"), help="where to train")
    p.add_argument("--seed", type=int, default=0, help="seed of the parameters and the data")
    p.add_argument("--out", type=Path, default=Path("out"), help="directory the results are written to")
    args = p.parse_args(argv)
    queries, odd = divmod(args.seq_len - 2 * args.num_pairs, 2)
    if queries < 1 or odd:
        p.error(f"--seq-len must be 2 * num_pairs + 2 * queries with queries >= 1; got seq_len {args.seq_len} "
                f"for {args.num_pairs} pairs")
    args.num_queries = queries
    for flag, slots in (("--small-slots", args.small_slots), ("--large-slots", args.large_slots)):
        if math.isqrt(slots) ** 2 != slots:
            side = math.isqrt(slots)
            p.error(f"{flag} must be a perfect square n*n (two product-key factors of n keys), got {slots}; "
                    f"{side * side} or {(side + 1) ** 2} would do")
    if args.device == "cuda" and not torch.cuda.is_available():
        p.error("--device cuda: no CUDA device is available (torch.cuda.is_available() is False); use --device cpu")
    return args


class _HelpFormatter(argparse.RawDescriptionHelpFormatter, argparse.ArgumentDefaultsHelpFormatter):
    """The description as written, every option's default in its help."""


def build_model(args: argparse.Namespace, task: RecallTask, slots: int) -> RecallModel:
    torch.manual_seed(args.seed)
    layer_args = SparseDeltaMemoryArgs(dim=args.dim, num_heads=1, slots_per_head=slots,
                                       num_writes=args.reads_writes, num_reads=args.reads_writes,
                                       chunk_size=64)
    return RecallModel(task.vocab_size, layer_args, args.layers).to(args.device)


@torch.no_grad()
def evaluate(model: RecallModel, task: RecallTask, args: argparse.Namespace, seed: int) -> float:
    model.eval()
    generator = torch.Generator().manual_seed(seed)
    correct = total = 0
    for start in range(0, args.eval_sequences, 64):
        tokens, targets = task.batch(min(64, args.eval_sequences - start), generator)
        logits = model(tokens.to(args.device))
        asked = targets >= 0
        correct += (logits.argmax(-1).cpu()[asked] == targets[asked]).sum().item()
        total += asked.sum().item()
    model.train()
    return correct / total


def train(name: str, slots: int, args: argparse.Namespace, task: RecallTask) -> RunResult:
    model = build_model(args, task, slots)
    result = RunResult(name, slots, sum(p.numel() for p in model.parameters()))
    optimizer = torch.optim.AdamW(model.parameters(), lr=args.lr, weight_decay=0.0)
    schedule = torch.optim.lr_scheduler.OneCycleLR(optimizer, max_lr=args.lr, total_steps=args.steps,
                                                   pct_start=0.1)
    generator = torch.Generator().manual_seed(args.seed + 1)
    start = time.perf_counter()
    from tqdm import tqdm  # a demo extra: imported only to train, so --help works without it

    bar = tqdm(range(1, args.steps + 1), desc=f"{name:>12} ({slots} slots)", file=sys.stdout,
               dynamic_ncols=True, mininterval=1.0)
    for step in bar:
        tokens, targets = task.batch(args.batch_size, generator)
        loss, accuracy = model.loss_and_accuracy(tokens.to(args.device), targets.to(args.device))
        optimizer.zero_grad(set_to_none=True)
        loss.backward()
        torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
        optimizer.step()
        schedule.step()
        bar.set_postfix(loss=f"{loss.item():.3f}", acc=f"{accuracy:.3f}", refresh=False)
        if step % args.eval_every == 0 or step == args.steps:
            result.steps.append(step)
            result.accuracy.append(accuracy)
            result.loss.append(loss.item())
    result.seconds = time.perf_counter() - start
    result.tokens_per_second = args.steps * args.batch_size * task.seq_len / result.seconds
    result.final_accuracy = evaluate(model, task, args, seed=args.seed + 2)
    return result


def markdown_table(results: list[RunResult]) -> str:
    rows = ["| variant | slots per head | parameters | final accuracy | tokens/s |",
            "|---|---:|---:|---:|---:|"]
    for r in results:
        rows.append(f"| {r.name} | {r.slots_per_head} | {r.parameters:,} | {100 * r.final_accuracy:.1f}% | "
                    f"{r.tokens_per_second:,.0f} |")
    return "\n".join(rows)


def plot(results: list[RunResult], path: Path, title: str) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, ax = plt.subplots(figsize=(6.4, 4.0), dpi=120)
    for r in results:
        ax.plot(r.steps, [100 * a for a in r.accuracy], label=f"{r.name}: {r.slots_per_head} slots")
    ax.set_xlabel("training step")
    ax.set_ylabel("query accuracy (training batch), %")
    ax.set_ylim(0, 100)
    ax.set_title(title)
    ax.grid(alpha=0.3)
    ax.legend()
    fig.tight_layout()
    fig.savefig(path)
    plt.close(fig)


def main(argv: list[str] | None = None) -> int:
    args = parse_args(argv)
    task = RecallTask(num_pairs=args.num_pairs, num_queries=args.num_queries)
    print(f"SDM associative recall: {args.num_pairs} pairs, {task.num_queries} queries, "
          f"{task.seq_len} tokens per sequence, {args.steps} steps, device {args.device}, seed {args.seed}")
    results = [train("small memory", args.small_slots, args, task),
               train("large memory", args.large_slots, args, task)]
    table = markdown_table(results)
    print()
    print(table)
    args.out.mkdir(parents=True, exist_ok=True)
    (args.out / "results.md").write_text(table + "\n")
    (args.out / "results.json").write_text(json.dumps(
        {"config": {k: (str(v) if isinstance(v, Path) else v) for k, v in vars(args).items()},
         "results": [vars(r) for r in results]}, indent=2) + "\n")
    plot(results, args.out / "recall_accuracy.png",
         f"SDM recall, {args.num_pairs} pairs: accuracy vs memory size")
    total = sum(r.seconds for r in results)
    print(f"\nwrote {args.out / 'results.md'}, {args.out / 'results.json'}, {args.out / 'recall_accuracy.png'} "
          f"(training took {total:.0f} s)")
    return 0


if __name__ == "__main__":
    sys.exit(main())
