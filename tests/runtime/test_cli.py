"""The ``tracejit`` command, run as a user runs it (``python -m tracejit`` and the
``tracejit`` console script, in subprocesses) on a cache filled by a real program: every
verb and flag, its output, its exit status; empty and missing caches and unknown names
get one clear line, and nothing ever prints a traceback.
"""

from __future__ import annotations

import json
import os
import re
import shutil
import subprocess
import sys
import textwrap
import time

import pytest

from tracejit.runtime.cache import read_header
from tracejit.runtime.version import __version__

PROGRAM = textwrap.dedent('''\
    """Fills a cache: two jit functions, one with both paths of a branch compiled."""
    import numpy as np

    from tracejit import jit


    @jit
    def encoder(x, w):
        return np.tanh(x @ w) * 2


    @jit
    def decoder(h):
        if h.sum() > 0:
            return h * 2 + 1
        return h - 1


    x, w = np.ones((4, 3)), np.full((3, 5), 0.5)
    encoder(x, w)
    encoder(x, w)
    for sign in (1, -1, -1, -1, 1):
        decoder(sign * np.arange(1.0, 6.0))
''')

SCRIPT = shutil.which("tracejit")
RUNNERS = ["python -m tracejit"] + (["tracejit"] if SCRIPT else [])


def run_cli(*args, cache_dir=None, runner="python -m tracejit", env_cache_dir=None):
    """Run the command with ``args`` (``--cache-dir`` after the verb when given); assert it
    printed no traceback. The environment's cache directory is ``env_cache_dir`` or
    ``cache_dir``, so a mistake can never reach a real cache."""
    command = [sys.executable, "-m", "tracejit"] if runner == "python -m tracejit" else [SCRIPT]
    command += list(args)
    if cache_dir is not None:
        command += ["--cache-dir", str(cache_dir)]
    env = dict(os.environ)
    if env_cache_dir or cache_dir:
        env["TRACEJIT_CACHE_DIR"] = str(env_cache_dir or cache_dir)
    completed = subprocess.run(command, env=env, capture_output=True, text=True, timeout=60)
    output = completed.stdout + completed.stderr
    assert "Traceback" not in output, output
    return completed


@pytest.fixture(scope="module")
def filled_cache(tmp_path_factory):
    """A cache written by ``PROGRAM`` (two functions, an entry each), made once; tests
    that change it work on a copy."""
    root = tmp_path_factory.mktemp("cli")
    (root / "program.py").write_text(PROGRAM)
    cache_dir = root / "cache"
    env = dict(os.environ, TRACEJIT_CACHE_DIR=str(cache_dir))
    subprocess.run([sys.executable, "program.py"], cwd=root, env=env, check=True,
                   timeout=120)
    return cache_dir


@pytest.fixture
def cache_copy(filled_cache, tmp_path):
    copy = tmp_path / "cache"
    shutil.copytree(filled_cache, copy)
    return copy


def entry_files(cache_dir):
    return sorted(cache_dir.glob("v1/*/*.tjc"))


def functions_in(cache_dir):
    return sorted(read_header(path)["function"] for path in entry_files(cache_dir))


# --- list ----------------------------------------------------------------------------------
@pytest.mark.parametrize("runner", RUNNERS)
def test_list_prints_one_line_per_entry(filled_cache, runner):
    completed = run_cli("cache", "list", cache_dir=filled_cache, runner=runner)
    assert completed.returncode == 0
    lines = completed.stdout.splitlines()
    assert lines[0].split()[:4] == ["function", "file", "age", "signature"]
    assert sum(line.startswith("encoder ") for line in lines) == 1
    assert sum(line.startswith("decoder ") for line in lines) == 1
    assert "float64[4,3]" in completed.stdout  # encoder's signature
    assert re.search(r"^2 entries, [\d.]+K in ", lines[-1]), lines[-1]


def test_list_with_function_names_shows_only_theirs(filled_cache):
    completed = run_cli("cache", "list", "decoder", cache_dir=filled_cache)
    assert completed.returncode == 0
    lines = completed.stdout.splitlines()
    assert sum(line.startswith("decoder ") for line in lines) == 1
    assert not any(line.startswith("encoder ") for line in lines)
    assert re.search(r"^1 entries, ", lines[-1]), lines[-1]
    both = run_cli("cache", "list", "decoder", "encoder", cache_dir=filled_cache)
    assert re.search(r"^2 entries, ", both.stdout.splitlines()[-1])
    missing = run_cli("cache", "list", "nothing_here", cache_dir=filled_cache)
    assert missing.returncode != 0 and "no cache entry for 'nothing_here'" in missing.stderr


def test_list_json_parses_with_a_row_per_entry(filled_cache):
    completed = run_cli("cache", "list", "--json", cache_dir=filled_cache)
    assert completed.returncode == 0
    rows = json.loads(completed.stdout)
    assert sorted(row["function"] for row in rows) == ["decoder", "encoder"]
    for row in rows:
        assert {"key", "signature", "paths", "kernels", "bytes", "path"} <= set(row)
        assert os.path.basename(row["path"]) == row["key"] + ".tjc"
    (decoder,) = [row for row in rows if row["function"] == "decoder"]
    assert decoder["paths"] == 2  # both directions of the branch were compiled


# --- show ----------------------------------------------------------------------------------
SHOW_FLAGS = {
    "--ir": [r"graph decoder", r"guard bool\(%\d+\) == True", r"in %0: f64\[5\]"],
    "--llvm": [r"define .*@tj_decoder", r"\bret\b"],
    "--asm": [r"tj_decoder\w*:", r"\bretq?\b", r"\bv?mov\w*\s"],
    "--guards": [r"entry guards:", r"h: ndarray float64\[5\]", r"guard bool"],
    "--source": [r"rewritten model source:", r"def decoder\(h\):", r"def run\("],
}


@pytest.mark.parametrize("flag", list(SHOW_FLAGS))
def test_show_with_each_flag_prints_its_section(filled_cache, flag):
    completed = run_cli("cache", "show", "decoder", flag, cache_dir=filled_cache)
    assert completed.returncode == 0, completed.stderr
    text = completed.stdout
    assert text.startswith("decoder  (__main__, ")
    # The branch's guard number depends on the guards before it (e.g. its margin guard).
    assert "path [root]" in text and re.search(r"path \[exit at guard \d+\]", text)
    for pattern in SHOW_FLAGS[flag]:
        assert re.search(pattern, text), (flag, pattern)
    assert "encoder" not in text


def test_show_without_flags_is_a_short_summary(filled_cache):
    completed = run_cli("cache", "show", "encoder", cache_dir=filled_cache)
    assert completed.returncode == 0
    assert "signature (float64[4,3], float64[3,5])" in completed.stdout
    assert completed.stdout.startswith("encoder  (__main__, ") and "program.py)" in (
        completed.stdout)
    assert "define" not in completed.stdout and "entry guards" not in completed.stdout


def test_show_finds_entries_by_key_prefix_and_json_parses(filled_cache):
    key = read_header(entry_files(filled_cache)[0])["key"]
    completed = run_cli("cache", "show", key[:10], "--json", cache_dir=filled_cache)
    assert completed.returncode == 0
    (shown,) = json.loads(completed.stdout)
    assert shown["header"]["key"] == key
    assert shown["paths"] and "graph" in shown["paths"][0]["graph"]


# --- stats ---------------------------------------------------------------------------------
def test_stats_shows_counters_the_program_left(filled_cache):
    completed = run_cli("cache", "stats", cache_dir=filled_cache)
    assert completed.returncode == 0
    text = completed.stdout
    assert "encoder  (__main__" in text and "decoder  (__main__" in text
    assert "calls 2: compiled 1, traced 1, eager 0" in text  # encoder
    assert "calls 5:" in text and "side exits: 2 x" in text  # decoder
    rows = json.loads(run_cli("cache", "stats", "--json", cache_dir=filled_cache).stdout)
    assert {row["function"]: row["calls"] for row in rows} == {"encoder": 2, "decoder": 5}


# --- clear ---------------------------------------------------------------------------------
def test_clear_one_function_keeps_the_others(cache_copy):
    completed = run_cli("cache", "clear", "encoder", cache_dir=cache_copy)
    assert completed.returncode == 0
    assert completed.stdout.strip() == "removed 1 entry"
    assert functions_in(cache_copy) == ["decoder"]


def test_clear_all_empties_the_cache(cache_copy):
    completed = run_cli("cache", "clear", cache_dir=cache_copy)
    assert completed.returncode == 0
    assert completed.stdout.strip() == "removed 2 entries"
    assert entry_files(cache_copy) == []
    listed = run_cli("cache", "list", cache_dir=cache_copy)
    assert listed.returncode == 0 and "is empty" in listed.stdout


# --- verify --------------------------------------------------------------------------------
def test_verify_passes_on_a_good_cache(filled_cache):
    completed = run_cli("cache", "verify", cache_dir=filled_cache)
    assert completed.returncode == 0
    assert completed.stdout.strip() == "2 of 2 entries ok"


def test_verify_fails_and_names_a_corrupt_file(cache_copy):
    corrupt = entry_files(cache_copy)[0]
    data = bytearray(corrupt.read_bytes())
    data[len(data) // 2] ^= 0x55
    corrupt.write_bytes(bytes(data))
    completed = run_cli("cache", "verify", cache_dir=cache_copy)
    assert completed.returncode != 0
    assert f"corrupt: {corrupt}: " in completed.stdout
    assert "its signature does not match" in completed.stdout
    assert "1 of 2 entries ok" in completed.stdout
    problems = json.loads(run_cli("cache", "verify", "--json", cache_dir=cache_copy).stdout)
    assert [row["path"] for row in problems if not row["ok"]] == [str(corrupt)]


# --- prune ---------------------------------------------------------------------------------
def test_prune_removes_the_least_recently_used_entries(cache_copy):
    files = entry_files(cache_copy)
    now = time.time()
    for age, path in enumerate(sorted(files, key=lambda p: read_header(p)["function"])):
        os.utime(path, (now - 1000 * (age + 1), now - 1000 * (age + 1)))  # decoder newest
    newest = [p for p in files if read_header(p)["function"] == "decoder"][0]
    limit = newest.stat().st_size + 10
    completed = run_cli("cache", "prune", "--max-size", str(limit), cache_dir=cache_copy)
    assert completed.returncode == 0
    assert completed.stdout.startswith("removed 1 entries;")
    assert entry_files(cache_copy) == [newest]


@pytest.mark.parametrize("size", ["abc", "-5M", "10Q"])
def test_prune_refuses_a_size_it_cannot_read(cache_copy, size):
    completed = run_cli("cache", "prune", f"--max-size={size}", cache_dir=cache_copy)
    assert completed.returncode == 1
    assert completed.stderr.strip() == (f"tracejit: --max-size: {size!r} is not a size "
                                        "(examples: 500K, 200M, 1G)")
    assert len(entry_files(cache_copy)) == 2


# --- version and help ----------------------------------------------------------------------
@pytest.mark.parametrize("runner", RUNNERS)
def test_version_and_help(runner, tmp_path):
    version = run_cli("--version", runner=runner, env_cache_dir=tmp_path)
    assert version.returncode == 0 and version.stdout.strip() == f"tracejit {__version__}"
    top = run_cli("--help", runner=runner, env_cache_dir=tmp_path)
    assert top.returncode == 0
    assert top.stdout.startswith("usage: tracejit") and "cache" in top.stdout
    verbs = run_cli("cache", "--help", runner=runner, env_cache_dir=tmp_path)
    assert verbs.returncode == 0
    for verb in ("list", "show", "stats", "clear", "verify", "prune", "resign"):
        assert re.search(rf"^\s+{verb}\s", verbs.stdout, re.MULTILINE), verb


# --- empty and missing caches, unknown names -------------------------------------------------
@pytest.mark.parametrize("state", ["empty", "missing"])
@pytest.mark.parametrize("verb", [["list"], ["stats"], ["verify"], ["clear"],
                                  ["prune", "--max-size", "1M"], ["list", "--json"],
                                  ["resign"], ["resign", "--yes"]])
def test_verbs_on_an_empty_or_missing_cache_succeed_with_one_line(tmp_path, state, verb):
    cache_dir = tmp_path / "cache"
    if state == "empty":
        cache_dir.mkdir()
    completed = run_cli("cache", *verb, cache_dir=cache_dir)
    assert completed.returncode == 0, completed.stderr
    assert completed.stderr == ""
    if "--json" in verb:
        assert json.loads(completed.stdout) == []
    else:
        assert len(completed.stdout.strip().splitlines()) == 1
        assert not completed.stdout.startswith("tracejit")  # success carries no prefix
    if state == "missing" and verb[0] in ("list", "stats", "verify", "resign"):
        assert not cache_dir.exists()  # looking does not create it


@pytest.mark.parametrize("state", ["empty", "missing", "filled"])
@pytest.mark.parametrize("verb", ["show", "clear"])
def test_show_or_clear_of_an_unknown_name_is_one_line_on_stderr_and_fails(
        filled_cache, tmp_path, state, verb):
    cache_dir = {"empty": tmp_path / "empty", "missing": tmp_path / "missing",
                 "filled": filled_cache}[state]
    if state == "empty":
        cache_dir.mkdir()
    completed = run_cli("cache", verb, "no_such_function", cache_dir=cache_dir)
    assert completed.returncode == 1
    assert completed.stdout == ""
    (line,) = completed.stderr.strip().splitlines()
    expected = ("no cache entry for 'no_such_function'" if state == "filled"
                else "is empty")
    assert line.startswith("tracejit: ") and expected in line


def test_an_unknown_verb_is_a_usage_error_without_a_traceback(tmp_path):
    completed = run_cli("cache", "explode", cache_dir=tmp_path)
    assert completed.returncode == 2
    assert "invalid choice: 'explode'" in completed.stderr


def test_cache_dir_before_the_topic_is_honoured(filled_cache, tmp_path):
    elsewhere = tmp_path / "elsewhere"
    completed = run_cli("--cache-dir", str(filled_cache), "cache", "list", "--json",
                        env_cache_dir=elsewhere)
    assert completed.returncode == 0
    assert sorted(row["function"] for row in json.loads(completed.stdout)) == [
        "decoder", "encoder"]


# --- trust ---------------------------------------------------------------------------------
def test_a_cache_others_can_write_is_refused_in_one_line(cache_copy):
    cache_copy.chmod(0o777)
    for verb in (["list"], ["verify"], ["stats"], ["prune", "--max-size", "1M"]):
        completed = run_cli("cache", *verb, cache_dir=cache_copy)
        assert completed.returncode == 1 and completed.stdout == ""
        (line,) = completed.stderr.strip().splitlines()
        assert line.startswith("tracejit: refusing the compile cache at ") and (
            "other users can write to it" in line)
    assert len(entry_files(cache_copy)) == 2  # prune removed nothing


def test_resign_asks_for_confirmation_then_signs_a_copied_cache(cache_copy):
    (cache_copy / "signing.key").unlink()  # as if copied without its key: nothing verifies
    assert run_cli("cache", "verify", cache_dir=cache_copy).returncode == 1
    asked = run_cli("cache", "resign", cache_dir=cache_copy)
    assert asked.returncode == 1 and "resign --yes" in asked.stderr
    assert run_cli("cache", "verify", cache_dir=cache_copy).returncode == 1
    signed = run_cli("cache", "resign", "--yes", cache_dir=cache_copy)
    assert signed.returncode == 0, signed.stdout + signed.stderr
    # 2 entries, the pool's runtime and the entry guards' array check
    assert signed.stdout.startswith("signed 4 file(s)")
    verified = run_cli("cache", "verify", cache_dir=cache_copy)
    assert verified.returncode == 0 and "2 of 2 entries ok" in verified.stdout


# --- polish: pipes, exit codes, dry runs, the environment, the size cap --------------------
def test_output_cut_by_a_closed_pipe_is_not_an_error(filled_cache):
    command = [sys.executable, "-m", "tracejit", "cache", "show", "decoder", "--asm", "--ir",
               "--cache-dir", str(filled_cache)]
    env = dict(os.environ, TRACEJIT_CACHE_DIR=str(filled_cache))
    reader = subprocess.Popen(command, env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE)
    reader.stdout.readline()
    reader.stdout.close()  # `| head -1`
    _, errors = reader.communicate(timeout=60)
    assert reader.returncode == 0, errors
    assert b"Broken pipe" not in errors and b"Traceback" not in errors


@pytest.mark.parametrize("args", [["cache"], ["cache", "nope"], ["cache", "list", "--nope"],
                                  ["cache", "prune"], ["nope"]])
def test_bad_arguments_exit_2_with_usage(tmp_path, args):
    completed = run_cli(*args, env_cache_dir=tmp_path)
    assert completed.returncode == 2
    assert "usage: tracejit" in completed.stderr


def test_every_option_has_help():
    import argparse

    from tracejit.runtime.cli import build_parser

    def walk(parser):
        yield parser
        for action in parser._actions:
            for sub in getattr(action, "choices", None) or {}:
                if isinstance(action.choices, dict):
                    yield from walk(action.choices[sub])

    for parser in walk(build_parser()):
        for action in parser._actions:
            if action.dest != "help" and not isinstance(action, argparse._SubParsersAction):
                assert action.help, f"{parser.prog}: {action.option_strings or action.dest}"


def test_prune_dry_run_removes_nothing(cache_copy):
    before = entry_files(cache_copy)
    completed = run_cli("cache", "prune", "--max-size", "1", "--dry-run", cache_dir=cache_copy)
    assert completed.returncode == 0
    assert completed.stdout.count("would remove ") == 3  # two entries and the total
    assert entry_files(cache_copy) == before


def test_list_sorts_by_function_and_shows_file_and_age(filled_cache):
    lines = run_cli("cache", "list", cache_dir=filled_cache).stdout.splitlines()
    assert lines[0].split()[:4] == ["function", "file", "age", "signature"]
    names = [line.split()[0] for line in lines[1:-1]]
    assert names == sorted(names) == ["decoder", "encoder"]
    assert all("program.py" in line for line in lines[1:-1])


def test_long_signatures_are_cut_between_arguments():
    from tracejit.runtime.cli import _clip

    text = "(float32[1..8,16], float32[16,64], float32[64,64])"
    clipped = _clip(text, 30, ", ")
    assert clipped == "(float32[1..8,16], \u2026" and len(clipped) <= 30


@pytest.mark.parametrize("args", [["env"], ["--version", "--verbose"], ["env", "--json"]])
def test_env_prints_versions_cpu_blas_threads_and_cache(tmp_path, args):
    completed = run_cli(*args, env_cache_dir=tmp_path)
    assert completed.returncode == 0, completed.stderr
    if "--json" in args:
        info = json.loads(completed.stdout)
        assert info["tracejit"] == __version__ and info["threads"] >= 1
        assert info["cache_dir"] == str(tmp_path)
        return
    for key in ("tracejit", "numpy", "llvmlite", "cpu", "cpu_features", "blas", "threads",
                "cache_dir", "cache_max_bytes", "cache_trusted"):
        assert re.search(rf"^{key}\s+\S", completed.stdout, re.MULTILINE), key


def test_the_cache_keeps_under_its_size_cap(tmp_path):
    script = tmp_path / "many.py"
    script.write_text(textwrap.dedent("""
        import numpy as np
        from tracejit import jit

        @jit(dynamic=False)
        def scale(x):
            return x * 2 + 1

        for size in range(1, 7):
            scale(np.ones(size))
    """))
    cache_dir = tmp_path / "cache"
    env = dict(os.environ, TRACEJIT_CACHE_DIR=str(cache_dir))
    subprocess.run([sys.executable, str(script)], env=env, check=True, timeout=120)
    sizes = [path.stat().st_size for path in entry_files(cache_dir)]
    assert len(sizes) == 6
    cap = 2 * max(sizes) + 100
    env["TRACEJIT_CACHE_MAX"] = str(cap)
    shutil.rmtree(cache_dir)
    subprocess.run([sys.executable, str(script)], env=env, check=True, timeout=120)
    kept = entry_files(cache_dir)
    assert 1 <= len(kept) <= 3 and sum(path.stat().st_size for path in kept) <= cap


@pytest.mark.parametrize("platform", ["darwin", "win32"])
def test_the_cache_folder_on_macos_and_windows_comes_from_platformdirs(monkeypatch, platform):
    import types

    from tracejit.runtime.config import default_cache_dir

    asked = []
    stub = types.SimpleNamespace(user_cache_dir=lambda name, appauthor=None: (
        asked.append((name, appauthor)) or f"/platform-cache/{name}"))
    monkeypatch.setitem(sys.modules, "platformdirs", stub)
    assert default_cache_dir({}, platform) == "/platform-cache/tracejit"
    assert asked == [("tracejit", False)]
    assert default_cache_dir({"TRACEJIT_CACHE_DIR": "/mine"}, platform) == "/mine"
    assert default_cache_dir({"XDG_CACHE_HOME": "/xdg"}, "linux") == "/xdg/tracejit"
