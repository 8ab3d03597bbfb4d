"""Shared test setup: ``import model_corpus`` (and ``real_model_checks``,
``state_twins``) works from any test module (each is registered from its file, not by
putting tests/ on sys.path, where tests/codegen and tests/tracer would shadow the real
packages); the compile cache lives in a temporary directory for the whole session, so no
test (nor a subprocess a test starts) touches ~/.cache/tracejit."""

import atexit
import importlib.util
import os
import shutil
import sys
import tempfile

import pytest

_TESTS_DIR = os.path.dirname(os.path.abspath(__file__))
for _name in ("model_corpus", "real_model_checks", "state_twins"):
    if _name not in sys.modules:
        _spec = importlib.util.spec_from_file_location(
            _name, os.path.join(_TESTS_DIR, f"{_name}.py"))
        _module = importlib.util.module_from_spec(_spec)
        sys.modules[_name] = _module
        _spec.loader.exec_module(_module)

# Set when conftest is imported, not only in a fixture: jit reads TRACEJIT_CACHE_DIR when a
# function is decorated, and a test module may decorate while it is being collected.
# Registered before tracejit registers its own exit hook (which writes persisted counters),
# so the directory is removed after that hook has run, not recreated by it.
_SESSION_CACHE_DIR = tempfile.mkdtemp(prefix="tracejit-test-cache-")
os.environ["TRACEJIT_CACHE_DIR"] = _SESSION_CACHE_DIR
atexit.register(shutil.rmtree, _SESSION_CACHE_DIR, ignore_errors=True)


@pytest.fixture(scope="session", autouse=True)
def session_cache_dir():
    """The session's ``TRACEJIT_CACHE_DIR`` (a fresh temporary directory)."""
    os.environ["TRACEJIT_CACHE_DIR"] = _SESSION_CACHE_DIR
    return _SESSION_CACHE_DIR


def pytest_addoption(parser):
    parser.addoption(
        "--fuzz", type=int, default=None, metavar="N",
        help="run N random examples in the property-based tests instead of the fixed CI set "
             "(the same as TRACEJIT_FUZZ=N)",
    )


def pytest_configure(config):
    # Property-based test modules read TRACEJIT_FUZZ when they are imported (collection
    # comes after this hook), so the option reaches every one of them.
    fuzz = config.getoption("--fuzz", default=None)
    if fuzz:
        os.environ["TRACEJIT_FUZZ"] = str(fuzz)
