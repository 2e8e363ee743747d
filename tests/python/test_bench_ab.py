"""bench/ab_compare.py on the CPU, with fake benchmark binaries (small Python scripts printing the
tables and digest lines sdm_gpu_bench / sdm_gpu_topk_bench print): row keys, median ratios, the
per-binary environment, and a differing digest failing the run."""

from __future__ import annotations

import pathlib
import stat
import sys

sys.path.insert(0, str(pathlib.Path(__file__).resolve().parents[2] / "bench"))
import ab_compare  # noqa: E402

TABLE = """device: fake
| config | slots | C | distinct | mode | ms | tokens/s | GB must move | fraction of copy bw |
|---|---|---:|---:|---|---:|---:|---:|---:|
| readme | product_key | 64 | 0.430 | forward no-grad | {ms} | 4.59e+06 | 4.8318 | 0.448 |
digest readme, product_key, C 64, snapshot none: {digest}
digests readme, product_key, C 64, snapshot none: readings 1 saved 2
"""


def fake_bench(tmp_path: pathlib.Path, name: str, ms_by_round: list[float], digest: str = "abcd",
               env_ms: float | None = None) -> str:
    """A fake binary printing TABLE with the next of ms_by_round each time it runs (a counter file),
    or env_ms when FAKE_ENV=1."""
    counter = tmp_path / f"{name}.count"
    script = tmp_path / name
    script.write_text(f"""#!{sys.executable}
import os, pathlib
c = pathlib.Path({str(counter)!r})
n = int(c.read_text()) if c.exists() else 0
c.write_text(str(n + 1))
ms = {ms_by_round!r}[n]
if os.environ.get("FAKE_ENV") == "1":
    ms = {env_ms!r}
print({TABLE!r}.format(ms=ms, digest={digest!r}))
""")
    script.chmod(script.stat().st_mode | stat.S_IEXEC)
    return str(script)


def test_parse_output_keys_and_values():
    times, digests = ab_compare.parse_output(TABLE.format(ms=3.5, digest="ff"))
    assert times == {("readme", "product_key", "64", "forward no-grad"): 3.5}
    assert digests == {"readme, product_key, C 64, snapshot none": "ff"}
    topk = "| factors | k | rows | dtype | forward ms | backward ms |\n|---|---:|---:|---|---:|---:|\n" \
           "| 2x256 | 64 | 16384 | bfloat16 | 0.0517 | 0.0292 |\n"
    times, _ = ab_compare.parse_output(topk)
    assert times == {("2x256", "64", "16384", "bfloat16", "forward ms"): 0.0517,
                     ("2x256", "64", "16384", "bfloat16", "backward ms"): 0.0292}


def test_ratio_of_medians_and_equal_digests(tmp_path, capsys):
    base = fake_bench(tmp_path, "base", [4.0, 6.0, 5.0])
    new = fake_bench(tmp_path, "new", [2.0, 3.0, 2.5])
    rc = ab_compare.main(["--bin", f"base={base}", "--bin", f"new={new}", "--rounds", "3"])
    out = capsys.readouterr().out
    assert rc == 0
    assert "| readme, product_key, 64, forward no-grad | 4 / 6 / 5 | 2 / 3 / 2.5 | 0.500 |" in out
    assert "digests new: 3 of 3 equal to base round 1" in out


def test_a_differing_digest_fails(tmp_path, capsys):
    base = fake_bench(tmp_path, "base", [1.0])
    new = fake_bench(tmp_path, "new", [1.0], digest="beef")
    rc = ab_compare.main(["--bin", f"base={base}", "--bin", f"new={new}", "--rounds", "1"])
    assert rc == 1
    assert "digests new: 0 of 1 equal to base round 1" in capsys.readouterr().out


def test_environment_reaches_only_its_binary(tmp_path, capsys):
    path = fake_bench(tmp_path, "one", [2.0, 2.0], env_ms=1.0)
    rc = ab_compare.main(["--bin", f"plain={path}", "--bin", f"env={path}", "--env", "env=FAKE_ENV=1",
                          "--rounds", "1", "--", "--ignored"])
    assert rc == 0
    assert "| 2 | 1 | 0.500 |" in capsys.readouterr().out



def run_with_budget(tmp_path, budget: str) -> int:
    """Two fake binaries over two rounds under --budget; the exit status."""
    base = fake_bench(tmp_path, "base", [4.0, 6.0])
    new = fake_bench(tmp_path, "new", [2.0, 3.0])
    return ab_compare.main(["--bin", f"base={base}", "--bin", f"new={new}", "--rounds", "2", "--budget", budget])


def test_budget_stops_before_a_run_that_would_pass_it(tmp_path, capsys):
    rc = run_with_budget(tmp_path, "0")
    out = capsys.readouterr().out
    assert rc == 0
    assert "(stopped by --budget 0 s before new round 1: 1 of 4 runs)" in out
    assert "| readme, product_key, 64, forward no-grad | 4 | - | - |" in out


def test_a_generous_budget_runs_every_round(tmp_path, capsys):
    rc = run_with_budget(tmp_path, "600")
    out = capsys.readouterr().out
    assert rc == 0
    assert "stopped" not in out
    assert "| readme, product_key, 64, forward no-grad | 4 / 6 | 2 / 3 | 0.500 |" in out
