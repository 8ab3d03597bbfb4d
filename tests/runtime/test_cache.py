"""The on-disk compile cache across processes: a second process loads what the first
compiled (no tracing, no LLVM); the directory is private; entries are not pickles; a
damaged, deleted or foreign entry is ignored and rebuilt; processes racing on an empty
cache all compute right results and leave a valid cache; editing the function or a
helper in another module invalidates its entries; counters add up across processes.

Every process here is a real ``python`` subprocess running a small user project (a
``main.py`` and a ``helper.py``) written into ``tmp_path``; results are compared with the
same NumPy arithmetic done here.
"""

from __future__ import annotations

import ast
import io
import json
import os
import shutil
import stat
import subprocess
import sys
import textwrap
import time
from pathlib import Path

import numpy as np
import pytest

import tracejit.runtime.cache  # noqa: F401 (tracejit.runtime.cache)
import tracejit.runtime.serialize  # noqa: F401 (tracejit.runtime.serialize)
from tracejit import runtime
from tracejit.runtime import cli
from tracejit.runtime.cache import MAGIC, read_entry, read_header

MAIN = textwrap.dedent('''\
    """Calls ``model`` on each array given as JSON in argv[1]; prints results and stats."""
    import json
    import os
    import sys
    import time

    import numpy as np

    import helper
    from tracejit import jit


    @jit
    def model(x):
        if x.sum() > 0:
            return helper.scale(x) + 1
        return x - 1


    start_at = float(os.environ.get("START_AT", "0"))
    time.sleep(max(0.0, start_at - time.time()))  # racing processes start together
    inputs = [np.asarray(values, dtype=np.float64) for values in json.loads(sys.argv[1])]
    results = [model(x).tolist() for x in inputs]
    print(json.dumps({"results": results, "stats": model.stats()}))
''')

HELPER = textwrap.dedent('''\
    def scale(x):
        return x * 2
''')

POSITIVE = [1.0, 2.0, 3.0]
NEGATIVE = [-1.0, -2.0, -4.0]
LONG = [float(value) for value in range(1, 11)]  # a second entry: (8, 16] after size 3


def expected(values, factor=2, offset=1):
    """What the project's ``model`` computes, in NumPy."""
    x = np.asarray(values, dtype=np.float64)
    return (x * factor + offset).tolist() if x.sum() > 0 else (x - 1).tolist()


class Project:
    """A user's project in a temporary directory, with its own compile cache."""

    def __init__(self, root: Path, cache_dir: Path):
        self.root, self.cache_dir = root, cache_dir
        root.mkdir(parents=True, exist_ok=True)
        (root / "main.py").write_text(MAIN)
        (root / "helper.py").write_text(HELPER)

    def env(self, **extra):
        env = {key: value for key, value in os.environ.items()
               if key not in ("TRACEJIT_DISABLE", "TRACEJIT_LOG")}
        # Edits within one second keep a file's size and mtime: never reuse a stale .pyc.
        env.update(TRACEJIT_CACHE_DIR=str(self.cache_dir), PYTHONDONTWRITEBYTECODE="1")
        env.update(extra)
        return env

    def command(self, inputs):
        return [sys.executable, "main.py", json.dumps(inputs)]

    def run(self, inputs):
        """Run ``main.py`` on ``inputs`` in a fresh interpreter; its JSON report."""
        completed = subprocess.run(self.command(inputs), cwd=self.root, env=self.env(),
                                   capture_output=True, text=True, timeout=120)
        assert completed.returncode == 0, completed.stderr
        assert "Traceback" not in completed.stderr, completed.stderr
        return json.loads(completed.stdout)

    def edit(self, name, old, new):
        path = self.root / name
        text = path.read_text()
        assert old in text
        path.write_text(text.replace(old, new))

    def entries(self):
        return sorted(self.cache_dir.glob("v1/*/*.tjc"))

    def entry_for(self, size):
        """The entry file whose signature covers arrays of ``size`` elements."""
        for path in self.entries():
            (leaf,) = read_header(path)["signature"]
            (dim,) = leaf[2]
            if dim == size or (isinstance(dim, list) and dim[0] <= size <= dim[1]):
                return path
        raise AssertionError(f"no entry for size {size} in {self.entries()}")


def verify(cache_dir):
    """``tracejit cache verify`` in this process: (exit status, output)."""
    out = io.StringIO()
    status = cli.main(["cache", "verify", "--cache-dir", str(cache_dir)], out=out)
    return status, out.getvalue()


def assert_valid_entry(path):
    header, _ = read_entry(path)  # raises CorruptEntry on a bad checksum or format
    assert header["key"] == path.stem


@pytest.fixture
def project(tmp_path):
    return Project(tmp_path / "project", tmp_path / "cache")


# --- warm starts -------------------------------------------------------------------------
def test_a_second_process_loads_the_compiled_variant_from_disk(project):
    first = project.run([POSITIVE])
    assert first["results"] == [expected(POSITIVE)]
    assert (first["stats"]["compiles"], first["stats"]["disk_hits"]) == (1, 0)
    second = project.run([POSITIVE, [4.0, 5.0, 6.0]])
    assert second["results"] == [expected(POSITIVE), expected([4.0, 5.0, 6.0])]
    stats = second["stats"]
    assert (stats["disk_hits"], stats["compiles"], stats["compiled_calls"]) == (1, 0, 2)
    assert stats["traced_calls"] == 0


def test_a_trace_tree_with_both_paths_is_loaded_whole(project):
    inputs = [POSITIVE, NEGATIVE, NEGATIVE, NEGATIVE, POSITIVE]
    first = project.run(inputs)
    assert first["stats"]["paths"] == 2 and first["stats"]["compiles"] == 2
    second = project.run(inputs)
    assert second["results"] == [expected(values) for values in inputs]
    stats = second["stats"]
    assert (stats["disk_hits"], stats["compiles"], stats["paths"]) == (1, 0, 2)
    assert stats["compiled_calls"] == len(inputs)
    assert stats["side_exits"] == {} and stats["eager_calls"] == {}


def test_the_cache_directory_is_created_private_to_the_user(tmp_path):
    project = Project(tmp_path / "project", tmp_path / "not" / "yet" / "cache")
    project.run([POSITIVE])
    for folder in [project.cache_dir, project.cache_dir / "v1",
                   *(path.parent for path in project.entries())]:
        assert stat.S_IMODE(folder.stat().st_mode) == 0o700, folder
    for entry in project.entries():
        assert stat.S_IMODE(entry.stat().st_mode) & 0o077 == 0, entry


def _imported_modules(module):
    tree = ast.parse(Path(module.__file__).read_text())
    names = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            names.update(alias.name.split(".")[0] for alias in node.names)
        elif isinstance(node, ast.ImportFrom) and node.module:
            names.add(node.module.split(".")[0])
    return names


def test_entries_are_tracejit_files_not_pickles(project):
    project.run([POSITIVE])
    (entry,) = project.entries()
    assert entry.read_bytes().startswith(MAGIC)
    for module in (runtime.cache, runtime.serialize):
        imported = _imported_modules(module)
        assert not imported & {"pickle", "cPickle", "dill", "cloudpickle", "marshal", "shelve"}


# --- damaged entries ---------------------------------------------------------------------
@pytest.fixture(scope="module")
def populated(tmp_path_factory):
    """A cache holding two entries of ``model`` (sizes 3 and 9..16), made once."""
    root = tmp_path_factory.mktemp("populated")
    project = Project(root / "project", root / "cache")
    report = project.run([POSITIVE, LONG])
    assert report["stats"]["compiles"] == 2 and len(project.entries()) == 2
    return project


def _truncate(path, other):
    data = path.read_bytes()
    path.write_bytes(data[: len(data) // 2])


def _garbage(path, other):
    path.write_bytes(b"this is not a cache entry\n" * 40)


def _flip_a_middle_byte(path, other):
    data = bytearray(path.read_bytes())
    data[len(data) // 2] ^= 0xFF
    path.write_bytes(bytes(data))


def _empty(path, other):
    """What a crash can leave of an entry written without fsync (cache_trust.write)."""
    path.write_bytes(b"")


def _delete(path, other):
    path.unlink()


def _replace_with_another_keys_entry(path, other):
    shutil.copyfile(other, path)


DAMAGE = {"truncated": _truncate, "garbage": _garbage, "flipped-byte": _flip_a_middle_byte,
          "empty": _empty, "deleted": _delete, "foreign": _replace_with_another_keys_entry}


@pytest.mark.parametrize("damage", list(DAMAGE))
def test_a_damaged_entry_is_ignored_recompiled_and_rewritten(populated, tmp_path, damage):
    # The same project (its files are part of the key), a copy of its cache.
    project = Project(populated.root, tmp_path / "cache")
    shutil.copytree(populated.cache_dir, project.cache_dir)
    damaged, intact = project.entry_for(3), project.entry_for(10)
    DAMAGE[damage](damaged, intact)
    if damage != "deleted":
        assert verify(project.cache_dir)[0] != 0
    report = project.run([POSITIVE, LONG])
    assert report["results"] == [expected(POSITIVE), expected(LONG)]
    stats = report["stats"]
    assert (stats["compiles"], stats["disk_hits"]) == (1, 1)  # rebuilt one, loaded one
    assert_valid_entry(damaged)
    status, output = verify(project.cache_dir)
    assert status == 0, output
    assert "2 of 2 entries ok" in output
    again = project.run([POSITIVE])
    assert (again["stats"]["compiles"], again["stats"]["disk_hits"]) == (0, 1)


def test_processes_racing_on_an_empty_cache_all_compute_right_and_leave_a_valid_cache(
        project):
    inputs = [POSITIVE, NEGATIVE, NEGATIVE, LONG, POSITIVE]
    env = project.env(START_AT=str(time.time() + 1.5))
    processes = [subprocess.Popen(project.command(inputs), cwd=project.root, env=env,
                                  stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
                 for _ in range(4)]
    for process in processes:
        stdout, stderr = process.communicate(timeout=120)
        assert process.returncode == 0, stderr
        assert "Traceback" not in stderr, stderr
        assert json.loads(stdout)["results"] == [expected(values) for values in inputs]
    completed = subprocess.run(
        [sys.executable, "-m", "tracejit", "cache", "verify", "--cache-dir",
         str(project.cache_dir)], env=project.env(), capture_output=True, text=True,
        timeout=60)
    assert completed.returncode == 0, completed.stdout + completed.stderr
    assert len(project.entries()) == 2
    assert not list(project.cache_dir.rglob(".tmp-*"))  # no half-written files left
    later = project.run(inputs)
    assert later["stats"]["compiles"] == 0


# --- invalidation ------------------------------------------------------------------------
def test_editing_a_helper_in_another_module_invalidates_the_entry(project):
    assert project.run([POSITIVE])["stats"]["compiles"] == 1
    project.edit("helper.py", "x * 2", "x * 3")
    edited = project.run([POSITIVE])
    assert edited["results"] == [expected(POSITIVE, factor=3)]
    assert (edited["stats"]["compiles"], edited["stats"]["disk_hits"]) == (1, 0)
    again = project.run([POSITIVE])
    assert again["results"] == [expected(POSITIVE, factor=3)]
    assert (again["stats"]["compiles"], again["stats"]["disk_hits"]) == (0, 1)


def test_editing_the_jit_function_invalidates_the_entry(project):
    assert project.run([POSITIVE])["stats"]["compiles"] == 1
    project.edit("main.py", "helper.scale(x) + 1", "helper.scale(x) + 5")
    edited = project.run([POSITIVE])
    assert edited["results"] == [expected(POSITIVE, offset=5)]
    assert (edited["stats"]["compiles"], edited["stats"]["disk_hits"]) == (1, 0)


# --- counters across processes -----------------------------------------------------------
def test_counters_are_summed_across_processes(project):
    reports = [project.run([POSITIVE, NEGATIVE]), project.run([POSITIVE, NEGATIVE, NEGATIVE])]
    completed = subprocess.run(
        [sys.executable, "-m", "tracejit", "cache", "stats", "--json", "--cache-dir",
         str(project.cache_dir)], env=project.env(), capture_output=True, text=True,
        timeout=60)
    assert completed.returncode == 0, completed.stderr
    (row,) = [row for row in json.loads(completed.stdout) if row["function"] == "model"]
    for counter in ("calls", "compiled_calls", "traced_calls", "compiles", "disk_hits"):
        assert row[counter] == sum(report["stats"][counter] for report in reports), counter
    side_exits = {}
    for report in reports:
        for label, count in report["stats"]["side_exits"].items():
            side_exits[label] = side_exits.get(label, 0) + count
    assert side_exits and row["side_exits"] == side_exits
    assert row["calls"] == 5
    assert row["file"] == str(project.root / "main.py")


ACTIVATION_MAIN = textwrap.dedent('''\
    import json
    import sys

    import numpy as np

    from tracejit import jit

    ACTIVATION = np.tanh


    @jit
    def model(x):
        return ACTIVATION(x) * 2


    print(json.dumps({"result": model(np.linspace(-1.0, 1.0, 5)).tolist(),
                      "stats": model.stats()}))
''')


def test_a_global_function_is_part_of_the_entry_and_rebinding_it_recompiles(project):
    """``ACTIVATION = np.tanh`` is guarded by identity and stored by import path: a
    second process loads the entry; editing the module to np.sin does not reuse it."""
    (project.root / "main.py").write_text(ACTIVATION_MAIN)
    x = np.linspace(-1.0, 1.0, 5)
    for _ in range(2):
        completed = subprocess.run([sys.executable, "main.py"], cwd=project.root,
                                   env=project.env(), capture_output=True, text=True,
                                   timeout=120)
        assert completed.returncode == 0, completed.stderr
        report = json.loads(completed.stdout)
        np.testing.assert_allclose(report["result"], np.tanh(x) * 2, rtol=1e-12)
    assert report["stats"]["disk_hits"] == 1
    project.edit("main.py", "ACTIVATION = np.tanh", "ACTIVATION = np.sin")
    completed = subprocess.run([sys.executable, "main.py"], cwd=project.root,
                               env=project.env(), capture_output=True, text=True, timeout=120)
    report = json.loads(completed.stdout)
    np.testing.assert_allclose(report["result"], np.sin(x) * 2, rtol=1e-12)
    assert report["stats"]["disk_hits"] == 0


# --- what the key covers: the defining files, as this process resolves them ----------------
SCRIPT_WITH_HELPER = textwrap.dedent('''\
    import json

    import numpy as np

    from tracejit import jit


    def helper(x):
        return x * FACTOR


    @jit
    def f(x):
        return helper(x) + 1.0


    print(json.dumps({"result": f(np.arange(4.0)).tolist(), "stats": f.stats()}))
''')


def _run_script(folder, cache_dir, *arguments, env=None):
    completed = subprocess.run([sys.executable, *arguments], cwd=folder, capture_output=True,
                               text=True, timeout=120, env=env or dict(
                                   os.environ, TRACEJIT_CACHE_DIR=str(cache_dir),
                                   PYTHONDONTWRITEBYTECODE="1"))
    assert completed.returncode == 0, completed.stderr
    assert "Traceback" not in completed.stderr, completed.stderr
    return json.loads(completed.stdout.strip().splitlines()[-1])


def test_two_scripts_with_the_same_function_and_helper_names_do_not_share_an_entry(tmp_path):
    """a/model.py and b/model.py both run as __main__ with ``helper`` and ``f``: b must
    compute with its own helper (it used to print a's result, loaded from a's entry)."""
    cache_dir = tmp_path / "cache"
    for name, factor in (("a", "2.0"), ("b", "3.0")):
        (tmp_path / name).mkdir()
        (tmp_path / name / "model.py").write_text(SCRIPT_WITH_HELPER.replace("FACTOR", factor))
    for round_number in range(2):
        for name, factor in (("a", 2.0), ("b", 3.0)):
            report = _run_script(tmp_path / name, cache_dir, "model.py")
            assert report["result"] == (np.arange(4.0) * factor + 1.0).tolist(), name
            assert report["stats"]["disk_hits"] == round_number, (name, report["stats"])


def test_a_helper_this_process_finds_in_another_file_invalidates_the_entry(tmp_path):
    """One main.py; ``helper`` comes from whichever directory PYTHONPATH names first. The
    entry recorded a helper in first/; a process that imports second/helper.py must not
    use it, though first/helper.py is unchanged."""
    project = Project(tmp_path / "project", tmp_path / "cache")
    for folder, body in (("first", "x * 2"), ("second", "x * 7")):
        (tmp_path / folder).mkdir()
        (tmp_path / folder / "helper.py").write_text(f"def scale(x):\n    return {body}\n")
    (project.root / "helper.py").unlink()
    reports = {}
    for folder in ("first", "first", "second", "second"):
        env = project.env(PYTHONPATH=os.pathsep.join([str(tmp_path / folder),
                                                      os.environ.get("PYTHONPATH", "")]))
        completed = subprocess.run(project.command([POSITIVE]), cwd=project.root, env=env,
                                   capture_output=True, text=True, timeout=120)
        assert completed.returncode == 0, completed.stderr
        report = json.loads(completed.stdout)
        factor = 2 if folder == "first" else 7
        assert report["results"] == [expected(POSITIVE, factor=factor)], folder
        reports.setdefault(folder, []).append(report["stats"])
    # The entry made with first/ serves first/ again, not second/ (one key: rewritten).
    assert [stats["disk_hits"] for stats in reports["first"]] == [0, 1]
    assert [stats["disk_hits"] for stats in reports["second"]] == [0, 1]


def test_a_function_without_readable_source_is_cached_in_memory_only(tmp_path):
    cache_dir = tmp_path / "cache"
    command = textwrap.dedent('''\
        import json
        import numpy as np
        from tracejit import jit
        namespace = {"jit": jit, "np": np}
        exec("def helper(x):\\n    return x * 5.0\\n"
             "@jit\\ndef g(x):\\n    return helper(x) - 1.0\\n", namespace)

        @jit
        def f(x):
            return x + 2.0

        x = np.arange(3.0)
        print(json.dumps({"result": [f(x).tolist(), namespace["g"](x).tolist(),
                                     namespace["g"](x).tolist()],
                          "stats": namespace["g"].stats()}))
    ''')
    for _ in range(2):
        report = _run_script(tmp_path, cache_dir, "-c", command)
        x = np.arange(3.0)
        assert report["result"] == [(x + 2.0).tolist(), (x * 5 - 1).tolist(),
                                    (x * 5 - 1).tolist()]
        assert report["stats"]["compiled_calls"] == 1  # compiled, in memory
        assert report["stats"]["disk_hits"] == 0
    assert not list(cache_dir.glob("v1/*/*.tjc"))
