"""Side-exit codes that name no guard of the trace tree (``program.SideExit.code``).

Positive codes are a guard's index + 1. The three below are the others: a kernel found an
error NumPy raises too (an index out of range), a guard inside a captured loop's body
failed at some trip, or a guard inside a loop nested in such a body did (the whole call
leaves compiled code; ``stats()`` tells them apart). ``exit_reason`` names the user's lines
an exit can come from, found in the program's graph.
"""

import numpy as np

from tracejit.tracer.ir import Eqn, Guard

from .narrow_results import NARROW_CAST_OUT_OF_RANGE, is_stored_narrow

KERNEL_ERROR = -1
# The loop codes are far from a program's own statuses (a guard's number + 1, or a kernel's
# error code negated: -1 an index out of range, -2 a negative integer power, -3 out of
# memory), which the wrapper raises as they are: a kernel error must not read as a loop's.
LOOP_GUARD_FAILED = -(1 << 29)
INNER_LOOP_GUARD_FAILED = -(1 << 29) - 1


def body_exit(code):
    """The code a loop leaves with when its body program left with ``code``: a guard of
    the body (``code > 0``) is the loop's guard failing; a guard of a loop inside the body
    failing (at any depth) is an inner loop's; a float cast to a narrow integer out of its
    range stays that (NumPy raises nothing there: no kernel error); anything else is a
    kernel error.

    >>> [body_exit(code) for code in (3, LOOP_GUARD_FAILED, -2)] == [
    ...     LOOP_GUARD_FAILED, INNER_LOOP_GUARD_FAILED, KERNEL_ERROR]
    True
    """
    if code > 0:
        return LOOP_GUARD_FAILED
    if code in (LOOP_GUARD_FAILED, INNER_LOOP_GUARD_FAILED):
        return INNER_LOOP_GUARD_FAILED
    if code == -NARROW_CAST_OUT_OF_RANGE:
        return code
    return KERNEL_ERROR


def exit_places(graph, code):
    """The user's lines (``Location``s, in program order) a side exit ``code`` of the
    program built from ``graph`` can come from. The code alone does not say which guard or
    cast it was, but the program's graph holds every candidate: a failing guard of a
    captured loop's body (``LOOP_GUARD_FAILED``), of a loop nested in such a body at any
    depth (``INNER_LOOP_GUARD_FAILED``), or a float cast to a narrow integer result
    (``-NARROW_CAST_OUT_OF_RANGE``, ``codegen/narrow_results.py``). Empty for other codes,
    or when the graph kept no line.

    >>> import numpy as np
    >>> from tracejit.tracer import trace
    >>> def to_uint8(x):
    ...     return (x * 255).astype(np.uint8)
    >>> from tracejit.codegen.narrow_results import NARROW_CAST_OUT_OF_RANGE
    >>> graph = trace(to_uint8, np.zeros(3)).graph
    >>> [place.source for place in exit_places(graph, -NARROW_CAST_OUT_OF_RANGE)]
    ['return (x * 255).astype(np.uint8)']
    """
    if code == -NARROW_CAST_OUT_OF_RANGE:  # in the graph or in a loop body at any depth
        places = _places(graph, 0, 0, _is_narrow_cast, set())
    elif code in (LOOP_GUARD_FAILED, INNER_LOOP_GUARD_FAILED):
        places = _places(graph, 0, 1 if code == LOOP_GUARD_FAILED else 2,
                         lambda item: isinstance(item, Guard), set())
    else:
        places = []
    return list(dict.fromkeys(place for place in places if place is not None))


def _is_narrow_cast(item):
    return (isinstance(item, Eqn) and item.prim.name == "cast" and is_stored_narrow(item)
            and np.dtype(item.inputs[0].aval.dtype).kind == "f")


def _places(graph, depth, wanted, chosen, seen):
    """Locations of the items ``chosen`` picks in ``graph`` (at ``depth`` loops down) and
    in loop bodies inside it, from ``wanted`` levels down; ``seen``: bodies already walked
    (a loop has one equation per output, each with the body)."""
    places = []
    for item in graph.body:
        if depth >= wanted and chosen(item):
            places.append(item.location if isinstance(item, Guard)
                          else graph.locations.get(item.out.name))
        if isinstance(item, Eqn) and item.prim.name == "loop":
            body = item.params_dict["body"]
            if id(body) not in seen:
                seen.add(id(body))
                places += _places(body, depth + 1, wanted, chosen, seen)
    return places


def exit_reason(reason, graph, code, detail=""):
    """``reason`` (the short form ``stats()`` counts calls under: the text before the first
    ``:``), then the user's lines ``exit_places`` finds for ``code`` with their source, then
    ``detail``: ``"a guard in an inner loop's body failed: model.py:12: `if x[i, j] > 0:`"``.

    >>> exit_reason("a guard in a loop body failed", None, LOOP_GUARD_FAILED, "see explain()")
    'a guard in a loop body failed: see explain()'
    """
    places = exit_places(graph, code) if graph is not None else []
    where = " or ".join(f"{place.file}:{place.line}: `{place.source}`" if place.source
                        else f"{place.file}:{place.line}" for place in places)
    parts = [part for part in (where, detail) if part]
    return f"{reason}: {'; '.join(parts)}" if parts else reason
