"""The demo (python -m sdm.demo) at a tiny size: it runs, writes its outputs, and reports
finite accuracies; the recall task generator is seeded and well-formed; a bad option is a usage
error stating the allowed range, and --help shows every default."""

import json
import math

import pytest
import torch

from sdm.demo.__main__ import main
from sdm.demo.recall_task import IGNORE, RecallTask


def test_recall_task_is_seeded_and_well_formed():
    task = RecallTask(num_pairs=5, num_queries=4, num_keys=8, num_values=6)
    tokens, targets = task.batch(3, torch.Generator().manual_seed(7))
    again, _ = task.batch(3, torch.Generator().manual_seed(7))
    assert torch.equal(tokens, again)
    assert tokens.shape == targets.shape == (3, task.seq_len)
    for b in range(3):
        pairs = dict(zip(tokens[b, 0:10:2].tolist(), tokens[b, 1:10:2].tolist()))
        assert len(pairs) == 5 and all(k < 8 for k in pairs) and all(8 <= v < 14 for v in pairs.values())
        for q in range(4):
            key, marker = tokens[b, 10 + 2 * q].item(), tokens[b, 11 + 2 * q].item()
            assert marker == task.marker
            assert targets[b, 11 + 2 * q].item() == pairs[key]
        assert (targets[b] != IGNORE).sum().item() == 4


def test_demo_runs_at_a_tiny_size(tmp_path):
    out = tmp_path / "out"
    assert main(["--steps", "3", "--num-pairs", "4", "--seq-len", "16", "--small-slots", "4",
                 "--large-slots", "64", "--reads-writes", "4", "--dim", "16", "--batch-size", "2",
                 "--eval-every", "1", "--eval-sequences", "8", "--out", str(out)]) == 0
    for name in ("results.md", "results.json", "recall_accuracy.png"):
        assert (out / name).stat().st_size > 0
    results = json.loads((out / "results.json").read_text())["results"]
    assert [r["slots_per_head"] for r in results] == [4, 64]
    for r in results:
        assert math.isfinite(r["final_accuracy"]) and 0.0 <= r["final_accuracy"] <= 1.0
        assert len(r["accuracy"]) == 3 and all(math.isfinite(a) for a in r["accuracy"])
    assert "| small memory | 4 |" in (out / "results.md").read_text()


def test_help_works_without_the_demo_extras():
    """`python -m sdm.demo --help` needs neither tqdm nor matplotlib (they are imported to train)."""
    import subprocess
    import sys

    blocked = "import sys; sys.modules['tqdm'] = None; sys.modules['matplotlib'] = None; "
    run = subprocess.run([sys.executable, "-c", blocked + "import runpy; sys.argv = ['sdm.demo', '--help']; "
                          "runpy.run_module('sdm.demo', run_name='__main__')"],
                         capture_output=True, text=True, timeout=120)
    assert run.returncode == 0, run.stderr
    assert "--steps" in run.stdout


@pytest.mark.parametrize("flags, message", [
    (["--eval-every", "0"], "argument --eval-every: must be an int >= 1, got 0"),
    (["--steps", "0"], "argument --steps: must be an int >= 1, got 0"),
    (["--steps", "x"], "argument --steps: must be an int >= 1, got 'x'"),
    (["--num-pairs", "0"], "argument --num-pairs: must be an int in 1..64, got 0"),
    (["--num-pairs", "65"], "argument --num-pairs: must be an int in 1..64, got 65"),
    (["--small-slots", "15"], "--small-slots must be a perfect square n*n (two product-key factors of n keys), "
                              "got 15; 9 or 16 would do"),
    (["--large-slots", "0"], "argument --large-slots: must be an int in 1..2147483647, got 0"),
    (["--reads-writes", "300"], "argument --reads-writes: must be an int in 1..256, got 300"),
    (["--batch-size", "0"], "argument --batch-size: must be an int >= 1, got 0"),
    (["--eval-sequences", "0"], "argument --eval-sequences: must be an int >= 1, got 0"),
    (["--dim", "0"], "argument --dim: must be an int >= 1, got 0"),
    (["--layers", "0"], "argument --layers: must be an int >= 1, got 0"),
    (["--lr", "-1"], "argument --lr: must be a positive number, got '-1'"),
    (["--lr", "nan"], "argument --lr: must be a positive number, got 'nan'"),
    (["--device", "tpu"], "argument --device: invalid choice: 'tpu'"),
    (["--num-pairs", "4", "--seq-len", "9"], "--seq-len must be 2 * num_pairs + 2 * queries"),
])
def test_bad_options_are_usage_errors_stating_the_allowed_range(flags, message, tmp_path, capsys):
    out = tmp_path / "out"
    with pytest.raises(SystemExit) as exit_info:
        main([*flags, "--out", str(out)])
    assert exit_info.value.code == 2
    assert message in capsys.readouterr().err
    assert not out.exists()


@pytest.mark.skipif(torch.cuda.is_available(), reason="checks the message given without a CUDA device")
def test_device_cuda_without_cuda_is_a_usage_error(tmp_path, capsys):
    with pytest.raises(SystemExit) as exit_info:
        main(["--device", "cuda", "--out", str(tmp_path / "out")])
    assert exit_info.value.code == 2
    assert "--device cuda: no CUDA device is available" in capsys.readouterr().err


def test_help_shows_every_default(capsys):
    with pytest.raises(SystemExit):
        main(["--help"])
    text = " ".join(capsys.readouterr().out.split())  # argparse wraps lines
    for default in ("(default: 600)", "(default: 32)", "(default: 128)", "(default: 16)", "(default: 4096)",
                    "(default: 64)", "(default: 0.003)", "(default: 25)", "(default: 256)", "(default: cpu)",
                    "(default: out)"):
        assert default in text, default
