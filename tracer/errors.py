"""Errors tracejit raises on purpose. Each names what was wrong and what to do about it."""

from __future__ import annotations


class TracejitError(Exception):
    """Base class: every error tracejit raises deliberately derives from it."""


class UnsupportedError(TracejitError, TypeError):
    """A NumPy function, ufunc method or argument that tracejit has no rule for."""


class TraceError(TracejitError):
    """A function cannot be traced; the message starts with the user's ``file:line``."""
