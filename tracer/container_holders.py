"""Lists and dicts a loop fills that something else holds too: such a loop is not captured.

A captured loop hands back the list it fills as a new, stacked list (``StackedList``: the
rows of its buffers), bound to the loop's name. Another holder of the list made before
the loop keeps the old object, which saw iteration 0's entry alone::

    self.cost_ = cost = []          # or: kept = hist; record = {"hist": []}; hist = record["hist"]
    for i in range(self.n_iter):
        ...
        cost.append(c)              # eager: self.cost_ is cost, n_iter entries

so compiled calls left ``self.cost_`` with one entry (a dict keyed by the index, ``hs[t] =
h``, likewise). Such a loop runs unrolled, as written (correct; its count is pinned).

Who holds the list is read from its reference count, which counts every holder, seen or
not: ``sys.getrefcount`` less our own local name is the references the loop machinery
holds plus everyone else's. The machinery's, each one verified, not assumed:

* the ``locals()`` dict the front end handed over (``frame_locals``; entries counted),
* the carried values' tuple (``values``; entries counted),
* the user's frame, one reference: its fast local of the loop's name, or the cell of that
  name when a nested function reads it (``frame_code`` says which; None when
  ``frame_locals`` is a dict the machinery made, and then no frame reference is allowed),
* ``machinery``: an earlier attempt's carried tuples and frame locals, whose user frame
  is then ``frame_code``'s (``_with_last_peeled``).

When the count is exactly that, nobody else holds the list and no search is made (the
common case, O(1)). Otherwise ``gc.get_referrers`` names a holder the garbage collector
tracks (a dict, list, tuple, object, generator, bound method, another function's cell, a
finished frame); and what is left unexplained after subtracting every tracked holder's
references is held by something the collector does not track, also refused: a NumPy
object array (``arr[0] = hist``), a ``slice``, a caller's or another thread's running
frame (running frames are not tracked).

Why a count cannot undercount, so that "exactly the machinery's" means nobody else: each
reference we subtract is one we saw (an entry we iterated over; the frame's slot, which
``locals()`` read a moment before in a frame suspended in this very call, or its cell,
which the collector shows us). Our own references are measured, not assumed:
``_OWN_REFERENCES`` is what ``_count`` gives for a list held by one local name of its
caller, the shape ``held_elsewhere`` calls it in (3 on CPython 3.11: the caller's local, the
callee's argument, ``getrefcount``'s own). A reference we did not foresee (another
interpreter's borrowed stack slot, a machinery frame binding the list) only makes the
count larger: a search, then a refusal, never a capture.

>>> def fill(also_in_a_dict):
...     hist = []
...     record = {"hist": hist} if also_in_a_dict else None
...     return held_elsewhere(["hist"], (hist,), locals(), fill.__code__)
>>> fill(False) is None
True
>>> fill(True).startswith("`hist` is also held by a dict")
True
>>> import numpy as np
>>> def fill_kept_in_an_object_array():
...     hist = []
...     kept = np.empty(1, dtype=object)
...     kept[0] = hist
...     return held_elsewhere(["hist"], (hist,), locals(), fill_kept_in_an_object_array.__code__)
>>> "the garbage collector does not track" in fill_kept_in_an_object_array()
True
"""

from __future__ import annotations

import gc
import sys
import types


def held_elsewhere(names, values, frame_locals, frame_code=None, machinery=()):
    """Why a list or dict the loop carries under one of ``names`` is not the loop's own
    (another name, a container, an object or an untracked holder has it too), or None.
    ``frame_code`` is the code of the frame whose ``locals()`` ``frame_locals`` is (the
    front end's call), None for a dict the machinery built."""
    for index, name in enumerate(names):  # (not zip: its reused pair would hold the value)
        # our one local name of it (_OWN_REFERENCES counts it): no comprehension or lambda
        # here may read it, or it becomes a cell, which gc.get_referrers shows as a holder
        value = values[index]
        if type(value) not in (list, dict) or _parameters(value):
            continue
        other = _other_name(name, value, frame_locals)
        if other is not None:
            return (f"`{name}` is also `{other}`: its entries would be the first trip's "
                    "alone there")
        own = _entries((*frame_locals.values(), *values, *_flat(machinery)), value)
        # the user's frame: its slot or cell of the loop's name (when frame_locals is its)
        frame = int(frame_code is not None and frame_locals.get(name) is value)
        others = _count(value) - _OWN_REFERENCES
        if others == own + frame:
            continue
        reason = _holder(name, value, others - own, frame and _in_cell(name, frame_code),
                         (frame_locals, values, *machinery), frame)
        if reason:
            return reason
    return None


def _holder(name, value, unexplained, cell_allowed, skipped, frame):
    """The holder of ``value`` the machinery's references do not explain (``unexplained``
    references past them; the frame's own one among them): a tracked one by its type, or
    the untracked rest."""
    for holder in gc.get_referrers(value):
        if any(holder is known for known in skipped):
            continue
        if cell_allowed and type(holder) is types.CellType:
            cell_allowed = False  # the frame's cell of the loop's name (one reference)
            unexplained -= 1
            frame = 0
            continue
        return (f"`{name}` is also held by a {type(holder).__name__} (an attribute, an entry, "
                "a closure or another name): its entries would be the first trip's alone "
                "there")
    if unexplained > frame:
        return (f"`{name}` is also held by something the garbage collector does not track (a "
                "NumPy object array, a slice, a caller's or another thread's frame): its "
                "entries would be the first trip's alone there")
    if unexplained < frame:  # a count we do not understand: not captured either
        return f"`{name}`: its reference count is below what the loop itself holds"
    return None


def _other_name(name, value, frame_locals):
    # (a function of its own: a loop variable left bound to the list here would be one
    # more reference in held_elsewhere's count)
    for other, held in frame_locals.items():
        if held is value and other != name:
            return other
    return None


def _flat(containers):
    """What ``containers`` (tuples, and dicts: their values) hold."""
    return [held for container in containers for held in (
        container.values() if type(container) is dict else container)]


def _entries(container, value):
    return sum(1 for held in container if held is value)


def _in_cell(name, code):
    """Whether the frame running ``code`` keeps ``name`` in a cell (a nested function
    reads it), not in a fast local."""
    return name in code.co_cellvars or name in code.co_freevars


def _count(value):
    return sys.getrefcount(value)


def _own_references():
    value = []  # one local name, as held_elsewhere's ``value``
    return _count(value)


_OWN_REFERENCES = _own_references()


def _parameters(value):
    """A dict of named entries (``{"W1": ..., "b1": ...}``): ``loop_dict_carries`` writes
    its results into this very dict when the body updates it in place, and a body that
    rebinds the name leaves it alone, as NumPy does."""
    return type(value) is dict and value and all(type(key) is str for key in value)
