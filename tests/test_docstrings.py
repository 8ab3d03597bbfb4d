"""Every docstring example in tracer/, codegen/, runtime/ and benchmarks/ runs and prints
what it says, so the examples a reader copies never rot."""

import doctest
import importlib
import pkgutil

import pytest


def _modules():
    names = []
    for package in ("tracejit.tracer", "tracejit.codegen", "tracejit.runtime", "benchmarks"):
        root = importlib.import_module(package)
        names += [info.name for info in pkgutil.walk_packages(root.__path__, package + ".")
                  if not info.name.endswith("__main__")]
    return names


@pytest.mark.parametrize("name", _modules())
def test_docstring_examples_run(name):
    module = importlib.import_module(name)
    failed, _ = doctest.testmod(module, optionflags=doctest.ELLIPSIS, report=True)
    assert failed == 0, f"{name}: {failed} docstring example(s) failed (see the output)"
