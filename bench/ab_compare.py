"""A/B of benchmark binaries on one machine: runs each binary (sdm_gpu_bench, sdm_gpu_topk_bench or
any program printing the same kind of markdown table) with the same arguments, the binaries
alternated round by round, and prints one table of every row's times per binary and round with
each binary's median ratio to the first, and whether each binary's digests (`digest <label>: <hex>`
lines, `sdm_gpu_bench --digest`) equal the first binary's at every row and round.

    python3 bench/ab_compare.py --bin base=/path/to/old/sdm_gpu_bench --bin new=build/bench/cuda/sdm_gpu_bench \
        [--env sums=SDM_TOPK_BWD=sums] [--rounds 2] [--timeout 120] [--logs DIR] -- --configs readme --digest

A table's rows are keyed by the columns before its first time column (a header `ms` or ending in
` ms`), less `distinct`; every time column is a value (the key then names it). Columns after the
time columns are ignored. Exit status 1 when a run fails or a digest differs.

`--budget SECONDS` bounds the whole comparison (a device call's limit): a run after the first does
not start when the time so far plus the longest run so far would pass it, and the table of the runs
done is printed with a line saying where it stopped (an outer `timeout` would kill the table with it).
"""

from __future__ import annotations

import argparse
import os
import pathlib
import re
import statistics
import subprocess
import sys
import time


def parse_output(text: str) -> tuple[dict[tuple[str, ...], float], dict[str, str]]:
    """One run's output -> ({row key: ms}, {digest label: hex})."""
    times: dict[tuple[str, ...], float] = {}
    digests: dict[str, str] = {}
    header: list[str] | None = None
    for line in text.splitlines():
        m = re.match(r"digest (.+?): (.+)$", line)  # not the per-tensor "digests ..." lines
        if m:
            digests[m[1]] = m[2].strip()
            continue
        if not line.startswith("|"):
            header = None
            continue
        cells = [c.strip() for c in line.strip().strip("|").split("|")]
        if header is None:
            header = cells
            continue
        if all(set(c) <= set("-: ") for c in cells):
            continue  # the separator row
        timed = [i for i, h in enumerate(header) if h == "ms" or h.endswith(" ms")]
        if not timed or len(cells) != len(header):
            continue
        key = tuple(c for i, c in enumerate(cells[: timed[0]]) if header[i] != "distinct")
        for i in timed:
            try:
                value = float(cells[i])
            except ValueError:
                continue
            times[key + ((header[i],) if len(timed) > 1 else ())] = value
    return times, digests


def run(binary: str, args: list[str], env: dict[str, str], timeout: float) -> tuple[int, str]:
    try:
        done = subprocess.run([binary, *args], capture_output=True, text=True, timeout=timeout,
                              env={**os.environ, **env})
        return done.returncode, done.stdout + done.stderr
    except subprocess.TimeoutExpired as e:
        out = e.stdout.decode() if isinstance(e.stdout, bytes) else (e.stdout or "")
        return 124, out


def main(argv: list[str]) -> int:
    if "--" in argv:
        cut = argv.index("--")
        own, bench_args = argv[:cut], argv[cut + 1:]
    else:
        own, bench_args = argv, []
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--bin", action="append", required=True, help="NAME=PATH (the first is the base)")
    ap.add_argument("--env", action="append", default=[], help="NAME=VAR=VALUE: an environment variable for one binary")
    ap.add_argument("--rounds", type=int, default=2)
    ap.add_argument("--timeout", type=float, default=300.0, help="seconds a run")
    ap.add_argument("--logs", help="folder for every run's output (NAME_rROUND.log)")
    ap.add_argument("--budget", type=float, help="seconds for the whole comparison (see above)")
    opts = ap.parse_args(own)
    bins = [b.split("=", 1) for b in opts.bin]
    if any(len(b) != 2 for b in bins):
        ap.error("--bin takes NAME=PATH")
    names = [n for n, _ in bins]
    envs: dict[str, dict[str, str]] = {n: {} for n in names}
    for item in opts.env:
        name, _, assignment = item.partition("=")
        var, _, value = assignment.partition("=")
        if name not in envs or not var:
            ap.error(f"--env {item}: NAME=VAR=VALUE with NAME one of {names}")
        envs[name][var] = value
    if opts.logs:
        pathlib.Path(opts.logs).mkdir(parents=True, exist_ok=True)

    times: dict[str, list[dict]] = {n: [] for n in names}
    digests: dict[str, list[dict]] = {n: [] for n in names}
    failed = False
    start, longest, stopped = time.monotonic(), 0.0, None
    for r in range(opts.rounds):
        for name, path in bins:
            now = time.monotonic()
            if opts.budget is not None and longest > 0 and now - start + longest > opts.budget:
                stopped = f"{name} round {r + 1}"
                break
            rc, out = run(path, bench_args, envs[name], opts.timeout)
            longest = max(longest, time.monotonic() - now)
            if opts.logs:
                pathlib.Path(opts.logs, f"{name}_r{r + 1}.log").write_text(out)
            if rc != 0:
                failed = True
                print(f"{name} round {r + 1}: exit status {rc}", file=sys.stderr)
            t, d = parse_output(out)
            times[name].append(t)
            digests[name].append(d)
        if stopped:
            break

    if stopped:
        done = sum(len(times[n]) for n in names)
        print(f"(stopped by --budget {opts.budget:g} s before {stopped}: {done} of {opts.rounds * len(names)} runs)")
    keys = sorted({k for n in names for t in times[n] for k in t})
    base = names[0]
    print("| row | " + " | ".join(names) + " | " + " | ".join(f"{n} / {base}" for n in names[1:]) + " |")
    print("|---|" + "---|" * len(names) + "---:|" * (len(names) - 1))
    for key in keys:
        runs = {n: [t[key] for t in times[n] if key in t] for n in names}
        cells = [" / ".join(f"{v:.4g}" for v in runs[n]) or "-" for n in names]
        ratios = []
        for n in names[1:]:
            if runs[n] and runs[base]:
                ratios.append(f"{statistics.median(runs[n]) / statistics.median(runs[base]):.3f}")
            else:
                ratios.append("-")
        print(f"| {', '.join(key)} | " + " | ".join(cells) + " | " + " | ".join(ratios) + " |")

    reference = digests[base][0] if digests[base] else {}
    for n in names:
        rows = differ = 0
        for d in digests[n]:
            for label in set(reference) | set(d):
                rows += 1
                differ += reference.get(label) != d.get(label)
        if rows:
            print(f"digests {n}: {rows - differ} of {rows} equal to {base} round 1")
            failed = failed or differ > 0
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
