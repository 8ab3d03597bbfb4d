"""The examples run as a user runs them (a fresh interpreter, from the repository root)
and print what their docstrings promise."""

from __future__ import annotations

import re
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]


def run_example(name, *args):
    completed = subprocess.run(
        [sys.executable, str(ROOT / "examples" / name), *args],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert completed.returncode == 0, completed.stderr
    return completed.stdout


def test_seed_dynamic_graph_prints_both_branches():
    lines = run_example("seed_dynamic_graph.py").splitlines()
    assert len(lines) == 2
    assert "took x * 2" in lines[0]
    assert "out = [ 2. -2.  4.]" in lines[0]
    assert "x.grad = [2. 2. 2.]" in lines[0]
    assert "took x - 2" in lines[1]
    assert "out = [-5. -4. -3.]" in lines[1]
    assert "x.grad = [1. 1. 1.]" in lines[1]


def test_mlp_eager_loss_falls_by_more_than_half():
    output = run_example("mlp_eager.py", "--steps", "60")
    match = re.search(r"loss fell from (\d+\.\d+) to (\d+\.\d+)", output)
    assert match, output
    first, last = map(float, match.groups())
    assert last < first / 2, output
    losses = [float(value) for value in re.findall(r"loss (\d+\.\d+)", output)]
    assert len(losses) == 11  # a report every steps // 10, and the first step's
    assert abs(losses[0] - first) < 1e-3  # the summary rounds to 3 decimals
