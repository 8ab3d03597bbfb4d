"""Lists and dicts a loop fills that something else holds too: such a loop is not captured.

A captured loop hands back the list it fills as a new, stacked list (``StackedList``: the
rows of its buffers), bound to the loop's name. Another holder of the list made before
the loop keeps the old object, which saw iteration 0's entry alone::

    self.cost_ = cost = []          # or: kept = hist; record = {"hist": []}; hist = record["hist"]
    for i in range(self.n_iter):
        ...
        cost.append(c)              # eager: self.cost_ is cost, n_iter entries

so compiled calls left ``self.cost_`` with one entry (a dict keyed by the index, ``hs[t] =
h``, likewise). Such a loop runs unrolled, as
written (correct; its count is pinned). Holders looked for: another local name, and any
dict, list, tuple or object that refers to the list (``gc.get_referrers``) but the loop
machinery's own: the carried values' tuple, the function's frame and the cells of its names.
(A NumPy object array holding the list is not seen: arrays are not tracked by ``gc``.)

>>> def fill(also_in_a_dict):
...     hist = []
...     record = {"hist": hist} if also_in_a_dict else None
...     return held_elsewhere(["hist"], (hist,), {"hist": hist})
>>> fill(False) is None
True
>>> fill(True).startswith("`hist` is also held by a dict")
True
"""

from __future__ import annotations

import gc
import types

# The function's frame and the cells of its names (the front end's loop bodies are nested
# functions reading them): the loop's name itself. A tuple is the user's (pair = (hist, n))
# unless it is the carried values: this run's tuple, or a copy (a strided loop's earlier
# attempt keeps a list of them). (pair = (hist, x) over the carried names in their order
# looks like one: not seen.)
_MACHINERY = (types.FrameType, types.CellType)


def held_elsewhere(names, values, frame_locals):
    """Why a list or dict the loop carries under one of ``names`` is not the loop's own
    (another name, a container or an object holds it too), or None."""
    internal = {id(frame_locals), id(values)}
    for index, name in enumerate(names):  # (not zip: its reused pair would hold the value)
        value = values[index]
        if type(value) not in (list, dict) or _parameters(value):
            continue
        for other, held in frame_locals.items():  # (a comprehension's cell would hold it)
            if held is value and other != name:
                return (f"`{name}` is also `{other}`: its entries would be the first trip's "
                        "alone there")
        for holder in gc.get_referrers(value):
            if id(holder) in internal or isinstance(holder, _MACHINERY):
                continue
            if _carried(holder, values):
                continue
            return (f"`{name}` is also held by a {type(holder).__name__} (an attribute, an "
                    "entry or another name): its entries would be the first trip's alone "
                    "there")
    return None


def _parameters(value):
    """A dict of named entries (``{"W1": ..., "b1": ...}``): ``loop_dict_carries`` writes
    its results into this very dict when the body updates it in place, and a body that
    rebinds the name leaves it alone, as NumPy does."""
    return type(value) is dict and value and all(type(key) is str for key in value)


def _carried(holder, values):
    """``holder`` is a copy of the carried values (a strided loop's earlier attempt): the
    same objects in the same order (``is``: a traced value's ``==`` is an operation)."""
    return (type(holder) is tuple and len(holder) == len(values)
            and all(held is value for held, value in zip(holder, values)))
