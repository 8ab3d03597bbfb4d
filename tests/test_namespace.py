"""One import namespace, ``tracejit``: the root folders tracer/, codegen/ and runtime/ are
installed as ``tracejit.tracer``, ``tracejit.codegen`` and ``tracejit.runtime`` under the
public face ``tracejit`` (its files are in runtime/_tracejit/), and nothing top-level named
``runtime``, ``tracer`` or ``codegen`` is installed, so a user's own modules of those names
(a ``codegen.py`` next to their script) neither break tracejit nor are broken by it."""

from __future__ import annotations

import ast
import os
import shutil
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

import tracejit
import tracejit.runtime

ROOT = Path(__file__).resolve().parents[1]
OLD_NAMES = ("runtime", "tracer", "codegen")


def run_python(*args, cwd, timeout=180):
    env = dict(os.environ)
    env.pop("PYTHONPATH", None)  # only what is installed, and the script's own folder
    env.pop("TRACEJIT_DISABLE", None)
    completed = subprocess.run([sys.executable, *args], cwd=cwd, env=env, capture_output=True,
                               text=True, timeout=timeout)
    return completed


def test_the_demo_runs_beside_a_users_own_codegen_runtime_and_tracer(tmp_path):
    """The README's demo, copied into a folder that also holds the user's ``codegen.py``,
    ``runtime/`` package and ``tracer.py``; those are imported first, so any import of the
    old names inside tracejit would get the user's modules and fail."""
    for example in (ROOT / "examples").glob("*.py"):  # the demo and the helpers it imports
        shutil.copy(example, tmp_path / example.name)
    (tmp_path / "codegen.py").write_text("OWNER = 'user'\n")
    (tmp_path / "tracer.py").write_text("OWNER = 'user'\n")
    (tmp_path / "runtime").mkdir()
    (tmp_path / "runtime" / "__init__.py").write_text("OWNER = 'user'\n")
    (tmp_path / "main.py").write_text(textwrap.dedent("""\
        import runpy
        import sys

        import codegen
        import runtime
        import tracer

        assert codegen.OWNER == runtime.OWNER == tracer.OWNER == "user"
        sys.argv = ["quickstart.py", "--quick"]
        runpy.run_path("quickstart.py", run_name="__main__")
        import tracejit

        assert sys.modules["runtime"] is runtime and sys.modules["codegen"] is codegen
        assert tracejit.runtime is not runtime
        print("users-modules-intact")
        """))
    completed = run_python("main.py", cwd=tmp_path)
    output = completed.stdout + completed.stderr
    assert completed.returncode == 0, output
    assert "[compiled code]" in completed.stdout, output
    assert "users-modules-intact" in completed.stdout, output


def test_nothing_top_level_but_tracejit_is_installed(tmp_path):
    """Started outside the checkout: ``import runtime`` (and tracer, codegen) fails, and
    ``tracejit`` comes from the installed package."""
    probe = textwrap.dedent("""\
        import importlib.util
        import json

        import tracejit

        print(json.dumps({
            "old": [name for name in ("runtime", "tracer", "codegen")
                    if importlib.util.find_spec(name) is not None],
            "jit": tracejit.jit.__module__,
        }))
        """)
    completed = run_python("-c", probe, cwd=tmp_path)
    assert completed.returncode == 0, completed.stderr
    assert completed.stdout.strip().endswith(
        '{"old": [], "jit": "tracejit.runtime.jit"}'), completed.stdout
    failed = run_python("-c", "import runtime", cwd=tmp_path)
    assert failed.returncode == 1 and "ModuleNotFoundError" in failed.stderr, failed.stderr


def test_the_public_face_exposes_what_the_runtime_exports():
    assert set(tracejit.__all__) == set(tracejit.runtime.__all__)
    for name in tracejit.runtime.__all__:
        assert getattr(tracejit, name) is getattr(tracejit.runtime, name), name
    for name in ("jit", "tensor", "nn", "optim", "data", "testing", "grad", "value_and_grad",
                 "no_grad"):
        assert name in tracejit.__all__, name
    assert tracejit.__version__ == tracejit.runtime.version.__version__


def test_public_submodules_import_by_their_public_names():
    import tracejit.nn
    from tracejit.data import BucketBatcher

    assert tracejit.nn is tracejit.runtime.nn
    assert BucketBatcher is tracejit.runtime.data.BucketBatcher


def test_python_m_tracejit_runs_the_command(tmp_path):
    helped = run_python("-m", "tracejit", "--help", cwd=tmp_path, timeout=60)
    assert helped.returncode == 0 and "cache" in helped.stdout, helped.stdout + helped.stderr
    listed = run_python("-m", "tracejit", "cache", "list", "--cache-dir",
                        str(tmp_path / "cache"), cwd=tmp_path, timeout=60)
    assert listed.returncode == 0, listed.stdout + listed.stderr
    assert "Traceback" not in listed.stdout + listed.stderr


def _python_files():
    for folder in ("tracer", "codegen", "runtime", "tests", "examples", "benchmarks", "docs"):
        yield from sorted((ROOT / folder).rglob("*.py"))


def test_no_source_file_imports_the_old_top_level_names():
    """``python -m pytest`` puts the checkout on sys.path, where ``import runtime`` would
    still find a second copy of the package; so the old names are looked for in the
    source instead."""
    found = []
    for path in _python_files():
        for node in ast.walk(ast.parse(path.read_text(), str(path))):
            if isinstance(node, ast.Import):
                modules = [alias.name for alias in node.names]
            elif isinstance(node, ast.ImportFrom) and not node.level and node.module:
                modules = [node.module]
            else:
                continue
            if any(module.split(".")[0] in OLD_NAMES for module in modules):
                found.append(f"{path.relative_to(ROOT)}:{node.lineno}")
    assert not found, found


def test_every_package_folder_is_installed():
    """pyproject.toml lists the packages (a package-dir mapping cannot be found): every
    folder with an ``__init__.py`` under the three roots is listed and mapped."""
    tomllib = pytest.importorskip("tomllib")
    settings = tomllib.loads((ROOT / "pyproject.toml").read_text())["tool"]["setuptools"]
    expected = {"tracejit"}
    for root in OLD_NAMES:
        for init in (ROOT / root).rglob("__init__.py"):
            relative = init.parent.relative_to(ROOT).as_posix()
            if not relative.startswith("runtime/_tracejit"):
                expected.add("tracejit." + relative.replace("/", "."))
    assert set(settings["packages"]) == expected
    assert settings["package-dir"] == {"tracejit": "runtime/_tracejit",
                                       **{f"tracejit.{name}": name for name in OLD_NAMES}}
    face = Path(tracejit.__file__).parent
    assert (face / "py.typed").is_file() and (face / "__main__.py").is_file()


def test_no_second_copy_was_imported_under_an_old_name():
    """``python -m pytest`` puts the checkout on sys.path, so ``import_module("runtime")``
    would load the runtime/ folder a second time as a top-level package (whose types are
    not tracejit's); by the time this runs, most test modules have been imported."""
    for name in OLD_NAMES:
        module = sys.modules.get(name)
        origin = Path(getattr(module, "__file__", None) or "/").resolve()
        assert module is None or not origin.is_relative_to(ROOT), (name, origin)
