"""The examples run as a user runs them (a fresh interpreter, from the repository root)
and print what their docstrings promise. The compiled ones run with ``--quick`` and a
compile cache of their own, so compile counts start from zero."""

from __future__ import annotations

import os
import re
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]


def run_example(name, *args, cache_dir=None):
    env = dict(os.environ)
    if cache_dir is not None:
        env["TRACEJIT_CACHE_DIR"] = str(cache_dir)
    env.pop("TRACEJIT_DISABLE", None)
    completed = subprocess.run(
        [sys.executable, str(ROOT / "examples" / name), *args],
        cwd=ROOT,
        env=env,
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert completed.returncode == 0, completed.stdout + completed.stderr
    return completed.stdout


def search(pattern, output):
    match = re.search(pattern, output)
    assert match, f"{pattern!r} not in:\n{output}"
    return match


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


def test_quickstart_walks_through_its_five_steps(tmp_path):
    output = run_example("quickstart.py", "--quick", cache_dir=tmp_path)
    for step in range(1, 6):
        assert re.search(rf"^{step}\. ", output, re.MULTILINE), output
    assert "f([ 1. -1.  2.]) = [ 2. -2.  4.]" in output
    assert output.count("f([-3. -2. -1.]) = [-5. -4. -3.]") == 3
    assert "2 compiled paths" in output
    error = float(search(r"max \|diff\| (\S+)", output).group(1))
    assert error < 1e-4, output
    cache_listing = output.split("\n5. ")[1]
    assert "dynamic_graph_example" in cache_listing and "block" in cache_listing


def test_mlp_train_compiled_steps_match_eager_and_loss_falls(tmp_path):
    output = run_example("mlp_train.py", "--quick", cache_dir=tmp_path)
    assert "compiled and eager losses agree at every step" in output
    rows = re.findall(r"^\s+(\d+)\s+(\d+\.\d+) \| (\d+\.\d+) \| (\d+\.\d+) \| (\d+\.\d+)$",
                      output, re.MULTILINE)
    assert len(rows) == 11, output  # every steps // 10, and the last step
    for _, *losses in rows:  # the four variants print the same loss to 4 decimals
        assert len(set(losses)) == 1, output
    first, last = map(float, search(r"loss fell from (\S+) to (\S+)", output).groups())
    assert last < first / 2, output
    held_out = float(search(r"held-out (\S+)", output).group(1))
    assert held_out > 0.8, output
    # each compiled variant: one compile, then every step native, nothing eager
    stats = re.findall(r"\.stats\(\): (\d+) compiled calls, (\d+) traced, eager none, "
                       r"(\d+) compile\(s\)", output)
    assert len(stats) == 3, output
    for compiled_calls, traced, compiles in stats:
        assert int(compiled_calls) + int(traced) == 60 and int(compiles) == 1, output
    assert "its backward pass: a compiled program of" in output


def test_variable_length_compiles_once_per_bucket_and_warm_starts(tmp_path):
    pattern = (r"(\d+) distinct lengths, (\d+) buckets, (\d+) variants: (\d+) compiles .*?"
               r"(\d+) loaded from the disk cache; \d+ compiled calls, eager none")
    output = run_example("variable_length.py", "--quick", cache_dir=tmp_path)
    lengths, buckets, variants, compiles, loaded = map(int, search(pattern, output).groups())
    assert lengths > buckets == 3, output
    assert (variants, compiles, loaded) == (buckets, buckets, 0), output
    assert "compiled vs eager: max |diff|" in output and "-> agree" in output
    assert len(re.findall(r"^  rnn_classifier ", output, re.MULTILINE)) == buckets

    # a second process starts from the disk cache: no tracing, no LLVM
    output = run_example("variable_length.py", "--quick", cache_dir=tmp_path)
    lengths, buckets, variants, compiles, loaded = map(int, search(pattern, output).groups())
    assert (variants, compiles, loaded) == (buckets, 0, buckets), output
    assert "-> agree" in output


def test_transformer_block_reuses_each_bucket(tmp_path):
    output = run_example("transformer_block.py", "--quick", cache_dir=tmp_path)
    lengths, buckets, variants, compiles = map(int, search(
        r"(\d+) lengths, (\d+) buckets, (\d+) variants: (\d+) compiles", output).groups())
    assert lengths > buckets
    assert variants == compiles == buckets, output
    assert "eager none" in output
    assert "-> agree" in output
    assert len(re.findall(r"^  transformer_block ", output, re.MULTILINE)) == buckets


@pytest.mark.parametrize("name", ["mlp_train.py", "variable_length.py",
                                  "transformer_block.py", "quickstart.py",
                                  "dask_data_parallel.py"])
def test_compiled_examples_document_their_command_line(name):
    source = (ROOT / "examples" / name).read_text()
    docstring = source.split('"""')[1]
    assert f"python examples/{name}" in docstring
    assert "--quick" in docstring


def test_cnn_any_size_trains_on_eight_sizes_with_one_compile(tmp_path):
    output = run_example("cnn_any_size.py", "--quick", cache_dir=tmp_path)
    losses = [float(value) for value in re.findall(r"mean loss ([\d.]+)", output)]
    assert len(losses) == 2 and losses[1] < losses[0], output
    search(r"8 image sizes, 1 compile\(s\), \d+ compiled calls, eager calls 0", output)


def test_dask_data_parallel_workers_warm_start_and_match_one_process(tmp_path):
    pytest.importorskip("distributed")
    pytest.importorskip("cloudpickle")
    output = run_example("dask_data_parallel.py", "--quick", cache_dir=tmp_path)
    sizes = [int(size) for size in search(r"in \d+ partitions of ([\d, ]+) rows",
                                          output).group(1).split(", ")]
    assert len(set(sizes)) > 1, output  # ragged
    search(r"client: compiled the step in \S+ s \(1 compile\)", output)
    shipped = re.findall(r"^ship: \S+ installed 1 entry \(1 adopted, 0 rejected\)$", output,
                         re.MULTILINE)
    assert len(shipped) == 2, output
    assert "-> agree" in output
    gap = float(search(r"max relative diff (\S+) ->", output).group(1))
    assert gap < 1e-9, output
    first, last = map(float, search(r"loss fell from (\S+) to (\S+);", output).groups())
    assert last < first / 2, output
    # every partition's step ran native code on its worker, loaded from what ship sent
    workers = re.findall(r"^worker \S+: (\d+) calls, (\d+) compiled, (\d+) compiles, "
                         r"(\d+) warm start \(disk_hits\), eager none$", output, re.MULTILINE)
    assert len(workers) == 2, output
    steps = int(search(r"(\d+) SGD steps", output).group(1))
    assert sum(int(calls) for calls, *_ in workers) == len(sizes) * steps, output
    for calls, compiled, compiles, warm_starts in workers:
        assert int(calls) == int(compiled) > 0, output
        assert (int(compiles), int(warm_starts)) == (0, 1), output


def test_dask_data_parallel_without_dask_says_how_to_install_it():
    """The example runs with dask's imports failing, as where it is not installed."""
    script = ("import runpy, sys\n"
              "for name in ('dask', 'distributed', 'cloudpickle'):\n"
              "    sys.modules[name] = None  # import raises ImportError\n"
              f"sys.argv = [{str(ROOT / 'examples' / 'dask_data_parallel.py')!r}, '--quick']\n"
              "runpy.run_path(sys.argv[0], run_name='__main__')\n")
    completed = subprocess.run([sys.executable, "-c", script], cwd=ROOT, capture_output=True,
                               text=True, timeout=120)
    assert completed.returncode == 0, completed.stdout + completed.stderr
    assert "pip install 'tracejit[dask]'" in completed.stdout
    assert "loss" not in completed.stdout
