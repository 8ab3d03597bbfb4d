"""Where in the user's code something happened: the first frame outside tracejit and NumPy.

Rewritten functions are compiled with the user's file name and line numbers, so their
frames point at the user's source as well.
"""

from __future__ import annotations

import linecache
import os
import site
import sys
import sysconfig

import numpy as np

from .dims import _USER_CALLERS
from .ir import Location

_TRACEJIT_ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
_INTERNAL_DIRS = tuple(
    os.path.join(_TRACEJIT_ROOT, package) + os.sep for package in ("tracer", "runtime", "codegen")
) + (os.path.dirname(np.__file__) + os.sep,)


def _library_prefixes():
    """The standard library and every site-packages folder this interpreter imports from:
    its own, the user's (``pip install --user``), and ones put on ``sys.path`` by a ``.pth``
    file or PYTHONPATH (a venv layered on another's packages), so an error raised inside
    NumPy installed there is not taken for the user's own code."""
    paths = {sysconfig.get_paths()[key] for key in ("stdlib", "platstdlib", "purelib", "platlib")}
    paths.update(getattr(site, "getsitepackages", list)())
    if site.ENABLE_USER_SITE:
        paths.add(site.getusersitepackages())
    paths.update(path for path in sys.path
                 if os.path.basename(path.rstrip(os.sep)) in ("site-packages", "dist-packages"))
    return tuple(path.rstrip(os.sep) + os.sep for path in paths if path)


_LIBRARY_PREFIXES = _library_prefixes()
_TRACEJIT_DIRS = _INTERNAL_DIRS[:3]


def is_library(filename):
    """Installed code: the standard library and site-packages (not the user's files)."""
    return filename.startswith(_LIBRARY_PREFIXES) or filename.startswith("<frozen")


def is_tracejit(filename):
    """tracejit's own code and the code it generates (``is_internal`` also counts
    NumPy's)."""
    return filename.startswith(_TRACEJIT_DIRS) or filename.startswith("<tracejit")


def is_internal(filename):
    return filename.startswith(_INTERNAL_DIRS) or filename.startswith("<frozen")


def called_by_user(skip=1):
    """Whether a protocol call on a traced value (``hash(x)``, ``x.__array_interface__``)
    comes from the user's code rather than tracejit's own (which hashes tracers as dict
    keys and lets NumPy probe them). Standard-library and NumPy frames in between are
    looked through (tracejit's WeakSets of views hash from ``_weakrefset.py``); a tracejit
    frame that calls on the user's behalf (``dims.calls_for_the_user``) counts as the
    user's."""
    frame = sys._getframe(skip + 1)
    first = frame.f_code
    if first in _TRACEJIT_CODES:  # the common case: a dict of tracejit's
        return False
    while frame is not None:
        code = frame.f_code
        if code in _USER_CALLERS:
            return True
        filename = code.co_filename
        if is_tracejit(filename):
            if code is first and len(_TRACEJIT_CODES) < 4096:
                _TRACEJIT_CODES.add(code)
            return False
        if not filename.startswith(_INTERNAL_DIRS[3:]) and (
                not filename.startswith(_STANDARD_LIBRARY)
                or filename.startswith(_SITE_PACKAGES)):
            return True
        frame = frame.f_back
    return False


_TRACEJIT_CODES = set()  # tracejit's functions found hashing tracers (not the user's behalf)
_STANDARD_LIBRARY = tuple(
    path.rstrip("/") + "/" for path in {sysconfig.get_paths()[key] for key in (
        "stdlib", "platstdlib")} if path) + ("<frozen",)
_SITE_PACKAGES = tuple(  # (inside platstdlib in a venv)
    path.rstrip("/") + "/" for path in {sysconfig.get_paths()[key] for key in (
        "purelib", "platlib")} if path)


def line_prefix(location):
    """``"file:line: "`` to start a message with the user's line, or ``""`` without one.

    >>> line_prefix(Location("model.py", 12)), line_prefix(None)
    ('model.py:12: ', '')
    """
    return f"{location.file}:{location.line}: " if location else ""


# (file, line, function) -> Location: a trace asks once per equation (~1 us then). Keyed by
# what a Location holds, not by the code object: code objects compare equal by content, not
# file, so the same function in two files (a copied script) named the first file's line.
_KNOWN_LINES = {}


def user_location(skip=1):
    """The ``Location`` of the innermost frame in user code, or ``None``."""
    frame = sys._getframe(skip)
    while frame is not None:
        code = frame.f_code
        if not is_internal(code.co_filename):
            key = (code.co_filename, frame.f_lineno, code.co_name)
            known = _KNOWN_LINES.get(key)
            if known is None:
                if len(_KNOWN_LINES) >= 4096:  # lines of code made at run time (exec)
                    _KNOWN_LINES.clear()
                source = linecache.getline(code.co_filename, key[1]).strip()
                known = _KNOWN_LINES[key] = Location(*key[:2], code.co_name, source)
            return known
        frame = frame.f_back
    return None
