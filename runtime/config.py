"""Options: built once, at the edge, from ``jit``'s arguments and the environment.

Nothing deeper in tracejit reads the environment; everything gets an ``Options``, and
codegen's process-wide settings are handed to it here (``configure_codegen``).

    TRACEJIT_CACHE_DIR   where compiled code is kept (default $XDG_CACHE_HOME/tracejit,
                         else ~/.cache/tracejit)
    TRACEJIT_DISABLE=1   run every jit function eagerly
    TRACEJIT_UNVALIDATED_PYTHON=1   compile on a Python tracejit's suite has not passed on
                         (3.14 and later; without it, jit functions run eagerly there)
    TRACEJIT_LOG=recompiles,guards,kernels,cache   log those topics to stderr
    TRACEJIT_COMPILE=auto|sync|background   the default of jit's ``compile`` option
                         (else "auto")
    TRACEJIT_NUM_THREADS     the thread pool's size (default: the cores this process may use)
    TRACEJIT_GEMM=auto|own|blas   the float32 GEMM of 2-D products (``codegen/blas.py``)
    TRACEJIT_GEMM_ISA=avx512|avx2   the own GEMM's instruction set (default: the host's best)

>>> Options.build(dynamic=True).dynamic
True
>>> Options.build(static_argnames="mode").static_argnames
('mode',)
"""

from __future__ import annotations

import logging
import os
import sys
import warnings
from dataclasses import asdict, dataclass, field

LOG_TOPICS = ("recompiles", "guards", "kernels", "cache", "loops")

# The newest Python the test suite passes on. On CPython 3.14 (built from Ubuntu's source
# package, 2026-11-28) it showed wrong results (a dict subclass read whole from outside
# kept a stale value; a caller's frame holding a list was not found as a holder: 3.14
# counts references differently), so jit functions run eagerly there unless the user
# opts in: eager NumPy is never wrong.
VALIDATED_PYTHON = (3, 13)
_warned_python = []


def unvalidated_python(environ):
    """The reason jit functions run eagerly on this Python, or None."""
    if sys.version_info[:2] <= VALIDATED_PYTHON or environ.get(
            "TRACEJIT_UNVALIDATED_PYTHON", "") not in ("", "0"):
        return None
    version = ".".join(map(str, sys.version_info[:2]))
    reason = f"Python {version} not yet validated, TRACEJIT_UNVALIDATED_PYTHON=1 compiles"
    if not _warned_python:
        _warned_python.append(reason)
        warnings.warn(
            f"tracejit is validated up to Python {VALIDATED_PYTHON[0]}."
            f"{VALIDATED_PYTHON[1]}, not yet on {version}: jit functions run eagerly "
            "(NumPy). Set TRACEJIT_UNVALIDATED_PYTHON=1 to compile anyway.",
            RuntimeWarning, stacklevel=4)
    return reason


class OptionError(ValueError):
    """An option with a value tracejit does not accept; the message lists the choices."""


DEFAULT_CACHE_MAX = 1 << 30  # bytes of entries kept before the least recently used go


def parse_size(text):
    """Bytes from a size like ``500K``, ``200M``, ``1G`` or ``1048576``; ValueError if not.

    >>> parse_size("1.5K"), parse_size("200M") == 200 << 20
    (1536, True)
    """
    units = {"": 1, "b": 1, "k": 1 << 10, "kb": 1 << 10, "m": 1 << 20, "mb": 1 << 20,
             "g": 1 << 30, "gb": 1 << 30}
    cleaned = str(text).strip().lower()
    number = cleaned.rstrip("kmgb")
    unit = cleaned[len(number):]
    try:
        value = float(number)
    except ValueError:
        value = -1
    if not value >= 0 or unit not in units:
        raise ValueError(f"{text!r} is not a size (examples: 500K, 200M, 1G)")
    return int(value * units[unit])


def default_cache_max(environ=os.environ):
    """The cache's size cap: ``TRACEJIT_CACHE_MAX`` (a size; 0 turns the cap off), else
    ``DEFAULT_CACHE_MAX``."""
    text = environ.get("TRACEJIT_CACHE_MAX", "")
    if not text:
        return DEFAULT_CACHE_MAX
    try:
        return parse_size(text)
    except ValueError as error:
        raise OptionError(f"TRACEJIT_CACHE_MAX: {error}") from None


def default_cache_dir(environ=os.environ, platform=sys.platform):
    """``TRACEJIT_CACHE_DIR``; else the platform's cache folder: ``$XDG_CACHE_HOME/tracejit``
    or ``~/.cache/tracejit`` on Linux, and where platformdirs says on macOS
    (``~/Library/Caches/tracejit``) and Windows (``%LOCALAPPDATA%\\tracejit\\Cache``)."""
    explicit = environ.get("TRACEJIT_CACHE_DIR")
    if explicit:
        return os.path.abspath(os.path.expanduser(explicit))
    if platform in ("darwin", "win32"):
        import platformdirs  # a dependency on those platforms only (pyproject markers)

        return platformdirs.user_cache_dir("tracejit", appauthor=False)
    base = environ.get("XDG_CACHE_HOME") or os.path.join(os.path.expanduser("~"), ".cache")
    return os.path.join(base, "tracejit")


@dataclass(frozen=True)
class Options:
    dynamic: object = "auto"
    buckets: object = "pow2"
    max_variants: int = 8
    hot_exit: int = 2
    cache: object = True
    fallback: str = "eager"
    check: bool = False
    disabled: str = ""  # why every call runs eagerly ("": it compiles)
    # "capture" | "unroll": loops over a dynamic range become one loop node, compiled once
    # per bucket whatever the trip count and run by a native driver (codegen/native_loop.py;
    # loops with independent iterations become whole-array kernels, tracer/loop_vectorize).
    # "unroll" traces every iteration (one compile per length).
    loops: str = "capture"
    static_argnames: tuple = ()  # arguments specialized by value (as in JAX)
    static_argnums: tuple = ()
    # "auto" | "sync" | "background". "background": a new variant's first call returns the
    # trace's result and its LLVM compile runs on a daemon thread; calls before it is ready
    # run eagerly (runtime/background.py). "sync": every call waits for its compile.
    # "auto": sync unless the compile is estimated long (then background) or would take
    # minutes (then not at all), and no compiling through a recompile storm
    # (runtime/compile_policy.py). Not part of the cache key: the code is the same.
    compile: str = "auto"
    profile: bool = False  # TRACEJIT_PROFILE=1: programs count time per kernel (explain())
    cache_dir: str = field(default_factory=default_cache_dir)
    cache_max: int = DEFAULT_CACHE_MAX  # TRACEJIT_CACHE_MAX: entries kept, in bytes (LRU)

    @staticmethod
    def build(environ=os.environ, **options):
        unknown = set(options) - {"dynamic", "buckets", "max_variants", "hot_exit", "cache",
                                  "fallback", "check", "static_argnames", "static_argnums",
                                  "loops", "compile"}
        if unknown:
            raise OptionError(
                f"jit() got unknown options {sorted(unknown)}; the options are dynamic, "
                "buckets, max_variants, hot_exit, cache, fallback, check, static_argnames, "
                "static_argnums, loops and compile"
            )
        options.setdefault("compile", environ.get("TRACEJIT_COMPILE", "") or "auto")
        for name, kind in (("static_argnames", str), ("static_argnums", int)):
            if name in options:
                value = options[name]
                options[name] = (value,) if isinstance(value, kind) else tuple(value)
        built = Options(
            disabled=("TRACEJIT_DISABLE" if environ.get("TRACEJIT_DISABLE", "") not in (
                "", "0") else unvalidated_python(environ) or ""),
            profile=environ.get("TRACEJIT_PROFILE", "") not in ("", "0"),
            cache_dir=default_cache_dir(environ),
            cache_max=default_cache_max(environ),
            **options,
        )
        built.validate()
        configure_logging(environ.get("TRACEJIT_LOG", ""))
        configure_codegen(environ)
        return built

    def validate(self):
        if self.dynamic not in ("auto", True, False):
            raise OptionError(f"dynamic must be 'auto', True or False, not {self.dynamic!r}")
        if not (self.buckets == "pow2" or isinstance(self.buckets, (list, tuple, dict))):
            raise OptionError(
                "buckets must be 'pow2', a list of edges (e.g. [16, 64, 256]) or a dict "
                f"naming arguments and dims, not {self.buckets!r}"
            )
        if isinstance(self.buckets, (list, tuple)) and (
            not all(isinstance(edge, int) and edge > 1 for edge in self.buckets)
        ):
            raise OptionError(f"bucket edges must be integers > 1, not {self.buckets!r}")
        for name in ("max_variants", "hot_exit"):
            value = getattr(self, name)
            if not isinstance(value, int) or value < 1:
                raise OptionError(f"{name} must be a positive integer, not {value!r}")
        if self.cache not in (True, False, "memory"):
            raise OptionError(f"cache must be True, 'memory' or False, not {self.cache!r}")
        if not all(isinstance(name, str) for name in self.static_argnames) or not all(
            type(number) is int for number in self.static_argnums
        ):
            raise OptionError("static_argnames takes names and static_argnums positions, not "
                              f"{self.static_argnames!r} / {self.static_argnums!r}")
        if self.loops not in ("unroll", "capture"):
            raise OptionError(f"loops must be 'unroll' or 'capture', not {self.loops!r}")
        if self.fallback not in ("eager", "raise"):
            raise OptionError(f"fallback must be 'eager' or 'raise', not {self.fallback!r}")
        if self.compile not in ("auto", "sync", "background"):
            raise OptionError("compile must be 'auto', 'sync' or 'background', not "
                              f"{self.compile!r}")

    @property
    def disk_cache(self):
        return self.cache is True

    def key_fields(self):
        """The options that change compiled code (part of the disk cache key)."""
        fields = asdict(self)
        for name in ("cache", "check", "disabled", "cache_dir", "cache_max", "fallback",
                     "max_variants", "hot_exit", "compile"):
            fields.pop(name)
        fields["buckets"] = repr(fields["buckets"])
        return fields


_configured_topics = None


def configure_logging(spec):
    """Turn on the ``tracejit.<topic>`` loggers named in ``spec`` (comma separated)."""
    global _configured_topics
    topics = tuple(sorted(topic.strip() for topic in spec.split(",") if topic.strip()))
    if topics == _configured_topics:
        return
    _configured_topics = topics
    unknown = [topic for topic in topics if topic not in LOG_TOPICS and topic != "all"]
    if unknown:
        print(f"tracejit: TRACEJIT_LOG names unknown topics {unknown}; known: "
              f"{', '.join(LOG_TOPICS)}", file=sys.stderr)
    enabled = LOG_TOPICS if "all" in topics else topics
    root = logging.getLogger("tracejit")
    if enabled and not any(getattr(h, "_tracejit", False) for h in root.handlers):
        handler = logging.StreamHandler(sys.stderr)
        handler.setFormatter(logging.Formatter("%(name)s: %(message)s"))
        handler._tracejit = True
        root.addHandler(handler)
    for topic in LOG_TOPICS:
        logger = logging.getLogger(f"tracejit.{topic}")
        logger.setLevel(logging.DEBUG if topic in enabled else logging.WARNING)


def configure_codegen(environ=os.environ):
    """Hand codegen the process-wide settings it takes from the environment (it reads
    none itself): the thread pool's size, the float32 GEMM's choice and instruction
    set, and which math runs through NumPy's own loops (``TRACEJIT_NUMPY_MATH``).
    ``Options.build`` calls it for every jit function (codegen used to read them whenever
    it compiled, so a variable set before a function is made still counts).
    Codegen checks them where it uses them, as before (a bad value makes compiling fail
    and the function run eagerly), and fixes the GEMM's two at their first use. Codegen
    used alone keeps its defaults."""
    from tracejit.codegen import blas, gemm, numpy_loops, parallel

    parallel.set_thread_count(environ.get("TRACEJIT_NUM_THREADS", "").strip() or None)
    blas.set_gemm_setting(environ.get("TRACEJIT_GEMM", "").strip().lower() or None)
    gemm.set_isa(environ.get("TRACEJIT_GEMM_ISA", "").strip().lower() or None)
    # 1 (the default): float64 math is NumPy's bits; 0: our own; all: float32's too
    numpy_loops.set_numpy_math(environ.get("TRACEJIT_NUMPY_MATH", "").strip() or None)


def logger(topic):
    return logging.getLogger(f"tracejit.{topic}")
