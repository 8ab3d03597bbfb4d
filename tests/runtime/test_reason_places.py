"""An untraceable call's reason names the user's line once, then its source when there is
some (``tracer/tracing._with_user_line``): an error raised naming its line already
(``line_prefix``) read ``model.py:5: model.py:5: ...``, and an exec'd function, whose
source Python does not keep, ended its reason with an empty source line."""

import linecache

import numpy as np

from tracejit import jit

SOURCE = """import numpy as np
def write_item(x):
    out = np.zeros(3, np.int64)
    out[1] = x.sum().item()
    return out
def dot_into(x):
    return np.dot(x, x, out=np.zeros(()))
"""


def _defined(filename):
    """SOURCE's functions, compiled under ``filename``; with their text in ``linecache``
    (a file's, or a generated program's: the front end rewrites them) unless it is
    ``<string>`` (plain ``exec``: run as they are)."""
    if filename != "<string>":
        linecache.cache[filename] = (len(SOURCE), None, SOURCE.splitlines(True), filename)
    namespace = {}
    exec(compile(SOURCE, filename, "exec"), namespace)  # noqa: S102 - the test's own text
    return namespace


def _reason(function, x):
    jitted = jit(function, cache=False)
    expected = function(x)
    np.testing.assert_array_equal(jitted(x), expected)
    return jitted.stats()["eager_reasons"]["untraceable"]


def test_the_place_is_named_once_with_its_source():
    filename = "<generated-model-reason-places>"
    try:
        reason = _reason(_defined(filename)["write_item"], np.arange(3.0))
    finally:
        linecache.cache.pop(filename, None)
    place = f"{filename}:4: "
    assert reason.startswith(f"untraceable: {place}assigning a run-time Python float"), reason
    assert reason.count(place) == 1 and reason.endswith("\n    out[1] = x.sum().item()"), reason


def test_an_execd_function_without_source_ends_with_its_message():
    reason = _reason(_defined("<string>")["dot_into"], np.arange(3.0))
    assert reason.startswith("untraceable: <string>:7: np.dot(..., out=...)"), reason
    assert reason.count("<string>:7") == 1 and reason == reason.rstrip(), reason
