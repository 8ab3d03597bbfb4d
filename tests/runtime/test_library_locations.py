"""Which frames are a library's: NumPy's error raised inside our stand-in is told from the
user's own error by the innermost frame outside NumPy and the standard library, so every
folder NumPy may be installed in counts as a library (tracer/locations.py)."""

import os
import site
import sys

import numpy as np

from tracejit.tracer import locations


def test_numpys_own_files_are_a_librarys():
    assert locations.is_library(np.__file__)
    assert locations.is_library(os.__file__)
    assert not locations.is_library(__file__)


def test_site_packages_on_sys_path_and_the_users_are_libraries(monkeypatch):
    layered = os.path.join(os.sep, "opt", "shared-env", "lib", "python3", "site-packages")
    monkeypatch.setattr(sys, "path", [*sys.path, layered])
    if site.ENABLE_USER_SITE:
        user = site.getusersitepackages()
    else:
        user = None
    prefixes = locations._library_prefixes()
    assert any(os.path.join(layered, "numpy", "x.py").startswith(p) for p in prefixes)
    if user:
        assert any(os.path.join(user, "numpy", "x.py").startswith(p) for p in prefixes)
    assert not any(__file__.startswith(p) for p in prefixes)
