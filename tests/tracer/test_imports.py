"""Each tracer module imports on its own, and every import left inside a function marks a
real import cycle.

``python -c "import tracejit.tracer.ir"`` first runs the packages' ``__init__`` files, which
import the whole package in one fixed order, so a module that imports only because its
neighbours happened to be loaded first would pass. Here each module is imported in a fresh
interpreter with ``tracejit`` and ``tracejit.tracer`` registered as bare packages (their
``__init__`` not run): what gets imported is what the module's own imports pull in.

An import inside a function hides a dependency and runs on every call; it is worth that
only where importing at the top would close a cycle. ``test_lazy_imports_break_cycles``
reads the import statements and checks, for each one inside a function, that the module
it imports already imports the importer through top-level imports.
"""

from __future__ import annotations

import ast
import subprocess
import sys
from collections import deque
from pathlib import Path

import tracejit.tracer

TRACER = Path(tracejit.tracer.__file__).parent

# Lazy imports that would close no cycle, left for their owner to hoist: (importer,
# imported). A new lazy import that breaks no cycle fails the test; remove an entry once it
# is hoisted. (loops, loop_autodiff and loop_containers import Tracer at the top from
# traced_array, which does not reach them; tracing -> frontend -> loops does.)
NOT_YET_HOISTED = set()


def _module_names():
    """Tracer modules by their dotted name under ``tracejit.tracer`` (``"ops"`` for the
    ``ops`` package's ``__init__``); the package's own ``__init__`` is left out."""
    names = []
    for path in sorted(TRACER.rglob("*.py")):
        parts = list(path.relative_to(TRACER).with_suffix("").parts)
        if parts[-1] == "__init__":
            parts.pop()
        if parts and "__pycache__" not in parts:
            names.append(".".join(parts))
    return names


MODULES = _module_names()


def _source_path(module):
    path = TRACER.joinpath(*module.split("."))
    return path / "__init__.py" if path.is_dir() else path.with_suffix(".py")


def _imports(module):
    """``(line, imported, lazy)`` for each import statement of ``module``: ``imported`` is
    a tracer module name, or the top-level name of anything else (``"inspect"``); ``lazy``
    when the statement sits inside a function."""
    path = _source_path(module)
    package = module.split(".") if path.name == "__init__.py" else module.split(".")[:-1]
    found = []

    def visit(node, lazy):
        for child in ast.iter_child_nodes(node):
            if isinstance(child, ast.Import):
                found.extend((child.lineno, alias.name.split(".")[0], lazy)
                             for alias in child.names)
            elif isinstance(child, ast.ImportFrom):
                found.extend((child.lineno, name, lazy) for name in _resolve(package, child))
            visit(child, lazy or isinstance(
                child, (ast.FunctionDef, ast.AsyncFunctionDef, ast.Lambda)))

    visit(ast.parse(path.read_text()), False)
    return found


def _resolve(package, node):
    if node.level == 0:
        prefix = "tracejit.tracer"
        if node.module != prefix and not node.module.startswith(prefix + "."):
            return [node.module.split(".")[0]]
        base = node.module[len(prefix) + 1:].split(".") if node.module != prefix else []
    else:
        base = package[:len(package) - node.level + 1] + (
            node.module.split(".") if node.module else [])
    names = []
    for alias in node.names:
        submodule = ".".join(base + [alias.name])
        names.append(submodule if submodule in MODULES else ".".join(base))
    return names


def _top_level_graph():
    return {module: {name for _, name, lazy in _imports(module) if not lazy and name in MODULES}
            for module in MODULES}


def _path(graph, start, goal):
    """A chain of top-level imports from ``start`` to ``goal``, or ``None``."""
    previous, queue = {start: None}, deque([start])
    while queue:
        module = queue.popleft()
        if module == goal:
            chain = []
            while module is not None:
                chain.append(module)
                module = previous[module]
            return chain[::-1]
        for name in sorted(graph[module]):
            if name not in previous:
                previous[name] = module
                queue.append(name)
    return None


def lazy_imports():
    """``(importer, line, imported, cycle)`` for every import inside a function, where
    ``cycle`` is the chain of top-level imports from the imported module back to the
    importer (``None``: hoisting it would close no cycle)."""
    graph = _top_level_graph()
    return [(module, line, name, _path(graph, name, module) if name in MODULES else None)
            for module in MODULES for line, name, lazy in _imports(module) if lazy]


_ALONE = """
import importlib, importlib.util, sys, types
for name, folder in (("tracejit", None), ("tracejit.tracer", sys.argv[2])):
    package = types.ModuleType(name)
    package.__path__ = ([folder] if folder else
                        list(importlib.util.find_spec(name).submodule_search_locations))
    sys.modules[name] = package
importlib.import_module(sys.argv[1])
"""

# _ALONE for each module (argv: _ALONE, the tracer folder, the modules), each in a child
# forked from one interpreter that has imported NumPy (every tracer module imports it; it
# imports no tracejit): as fresh as a new interpreter for tracejit's imports, without
# starting one and importing NumPy per module. Prints the modules that failed.
_EACH_ALONE = """
import os, subprocess, sys, traceback
import numpy

alone, folder, failed = sys.argv[1], sys.argv[2], []
for module in sys.argv[3:]:
    if not hasattr(os, "fork"):
        if subprocess.run([sys.executable, "-c", alone, module, folder]).returncode:
            failed.append(module)
        continue
    child = os.fork()
    if child == 0:
        try:
            sys.argv = ["-c", module, folder]
            exec(alone, {"__name__": "__main__"})
        except BaseException:
            sys.stderr.write(f"--- {module}:\\n{traceback.format_exc()}")
            sys.stderr.flush()
            os._exit(1)
        os._exit(0)
    if os.waitpid(child, 0)[1]:
        failed.append(module)
print(" ".join(failed))
"""


def test_each_module_imports_alone():
    result = subprocess.run(
        [sys.executable, "-c", _EACH_ALONE, _ALONE, str(TRACER),
         *(f"tracejit.tracer.{module}" for module in MODULES)],
        capture_output=True, text=True, timeout=300)
    assert result.returncode == 0, result.stderr
    assert not result.stdout.split(), (
        f"modules that do not import alone: {result.stdout.split()}\n{result.stderr}")


def test_the_package_imports_in_a_fresh_interpreter():
    result = subprocess.run([sys.executable, "-c", "import tracejit.tracer"],
                            capture_output=True, text=True, timeout=120)
    assert result.returncode == 0, result.stderr


def test_lazy_imports_break_cycles():
    free = [(module, line, name) for module, line, name, cycle in lazy_imports()
            if cycle is None and (module, name) not in NOT_YET_HOISTED]
    assert not free, (
        "imports inside functions that close no cycle; import them at the top:\n"
        + "\n".join(f"  tracer/{module}:{line} imports {name}" for module, line, name in free))


def test_the_graph_reader_sees_a_known_cycle():
    # tracing -> array_methods -> numpy_api -> ...: numpy_api may not import tracing at
    # the top; if the reader found no such chain, every lazy import would look free.
    graph = _top_level_graph()
    assert _path(graph, "tracing", "numpy_api")
    assert _path(graph, "numpy_api", "tracing") is None
    assert ("dims", "numpy_api") in {(module, name) for module, _, name, cycle
                                     in lazy_imports() if cycle}
