"""Dicts of parameters a captured loop carries: fixed keys, one array carry per key.

Course-assignment training loops keep their parameters in a dict and build a new one
at every step, or update the one they have::

    p = initialize(n_x, n_h, n_y)                 # {"W1": ..., "b1": ..., ...}
    for i in range(num_iterations):
        grads = backward(p, forward(X, p), X, Y)
        p = {k: p[k] - lr * grads["d" + k] for k in p}      # rebound: a new dict
        # or  p["W1"] = p["W1"] - lr * grads["dW1"]          # updated in place
        # or  for k in p: p[k] -= lr * grads["d" + k]

The dict's keys are the same at every trip; only its values move. That is JAX's
``fori_loop`` with a dict carry: the loop (``tracejit.tracer.loops``) sees one carried
name per key (``p['W1']``, ...), each an array carry as ``h = f(h)`` is, and the body is
called with a dict holding them. After the loop the name holds a dict of the loop's
results: the dict iteration 0 wrote into when the body updates it in place (its keys set
to the results, as NumPy's last step leaves it), else a new dict (NumPy's last one is a
new dict too, and nothing else holds it).

A name the body binds to a new dict at every trip that held no dict before the loop
(``grads, cost = propagate(w, b, X, Y)``, read after the loop; ``best =
copy.deepcopy(p)``), or an empty one (``model = {}`` before ``model = {'W1': W1, ...}``
at every trip), is carried the same way, key by key (its string keys the same at every
trip).

Refused (the loop unrolls, ``explain()`` says why): keys that change (added, removed,
reordered), a dict the body both changes and replaces, a value that is a container
(a list or dict inside the dict). A dict keyed by the loop index (``hs[t] = h``) is
``tracejit.tracer.loop_containers``' and is left to it.

>>> import numpy as np
>>> from tracejit import jit
>>> def fit(x, steps):
...     p = {"w": np.zeros(3), "b": np.zeros(1)}
...     for i in range(steps):
...         p = {"w": p["w"] + 0.1 * x, "b": p["b"] - 0.1}
...     return p
>>> fit_jit = jit(fit)
>>> got, want = fit_jit(np.ones(3), 40), fit(np.ones(3), 40)
>>> all(np.allclose(got[k], want[k]) for k in want)
True
"""

from __future__ import annotations

import numpy as np

from .loop_generalize import Refused
from .traced_array import Tracer

# Entry values carried as the loop's other names are: arrays, numbers, and objects the
# body leaves alone (a string, None). A container inside the dict is refused.
_CARRIED = (Tracer, np.ndarray, np.generic, int, float, complex, bool, str, type(None))


def _entries_carried(mapping):
    return all(isinstance(value, _CARRIED) for value in mapping.values())


class _DictName:
    """One carried name holding a dict of fixed keys: ``keys``, whether the body updates
    the dict in place (``in_place``) or rebinds the name to a new one."""

    def __init__(self, name, original, keys, in_place):
        self.name, self.original, self.keys, self.in_place = name, original, keys, in_place

    def flat_names(self):
        return [f"{self.name}[{key!r}]" for key in self.keys]

    def enter(self, values):
        """The dict the body sees in a traced trip."""
        return dict(zip(self.keys, values))

    def leave(self, entered, entered_items, returned):
        """The values the trip leaves in the dict, checked to keep its keys and its kind
        of update."""
        if type(returned) is not dict or list(returned) != self.keys:
            raise Refused(f"`{self.name}` changes its keys inside the loop")
        if self.in_place and returned is not entered:
            raise Refused(f"`{self.name}` is updated in place at the first iteration and "
                          "rebound at another")
        if not self.in_place and (returned is entered or _changed(entered, entered_items)):
            raise Refused(f"`{self.name}` is changed in place and rebound in the loop")
        return [returned[key] for key in self.keys]

    def after(self, finals):
        if self.in_place:
            for key, final in zip(self.keys, finals):
                self.original[key] = final
            return self.original
        return dict(zip(self.keys, finals))


def _changed(mapping, items):
    return list(mapping) != [key for key, _ in items] or any(
        mapping[key] is not value for key, value in items)


def _dict_name(name, original, snap, after):
    """The ``_DictName`` of a carried name, None when it is no dict of fixed keys (a dict
    keyed by the loop index, a list, an array)."""
    if snap is None and type(after) is dict and type(original) is not dict:
        return _made_in_the_loop(name, original, after)
    if snap is None or snap[0] != "dict" or type(after) is not dict:
        return None
    before_items = snap[2]
    keys = [key for key, _ in before_items]
    if not keys and after is not original and not original:
        # model = {} before the loop, model = {'W1': W1, ...} rebound at every trip
        # (dennybritz's nn-from-scratch): the empty dict is what a loop of no trips leaves
        return _made_in_the_loop(name, original, after)
    if not keys or list(after) != keys:
        return None  # a dict the loop adds keys to (hs[t] = h): loop_containers'
    if not (_entries_carried(after) and _entries_carried(dict(before_items))):
        raise Refused(f"`{name}` holds a container (a list or dict) among its values")
    if after is original:
        return _DictName(name, original, keys, in_place=True)
    if _changed(original, before_items):
        raise Refused(f"`{name}` is changed in place and rebound in the loop")
    return _DictName(name, original, keys, in_place=False)


def _made_in_the_loop(name, original, after):
    """A name the body binds to a new dict of fixed string keys at every trip, unbound or
    no dict before the loop (``grads, cost = propagate(w, b, X, Y)``, ``best =
    copy.deepcopy(p)``): a dict of results, carried key by key; None for other dicts."""
    keys = list(after)
    if not keys or len(keys) > _MADE_KEYS or not all(type(key) is str for key in keys):
        return None
    if not _entries_carried(after):
        raise Refused(f"`{name}` holds a container (a list or dict) among its values")
    return _DictName(name, original, keys, in_place=False)


# A dict of more keys than this made in a loop is no dict of results (a lookup table)
_MADE_KEYS = 64


class Flattened:
    """The loop's carried names with each dict of fixed keys spread into one name per key:
    the names, values and body the loop captures, and ``regroup`` for its results."""

    def __init__(self, body, names, originals, snapshots, values, entering, dicts):
        self.dicts = dicts  # per original name: a _DictName or None
        self.names, self.originals, self.snapshots, self.values = [], [], [], []
        self.entering = None if entering is None else []
        for position, (name, original, snap, value) in enumerate(
                zip(names, originals, snapshots, values)):
            spread = dicts[position]
            if spread is None:
                self.names.append(name)
                self.originals.append(original)
                self.snapshots.append(snap)
                self.values.append(value)
                if entering is not None:
                    self.entering.append(entering[position])
                continue
            before = dict(snap[2]) if snap is not None else {}  # (made in the loop)
            self.names += spread.flat_names()
            self.originals += [before.get(key, original) for key in spread.keys]
            self.snapshots += [None] * len(spread.keys)
            self.values += [value[key] for key in spread.keys]
            if entering is not None:
                vars_in = entering[position] if isinstance(entering[position], dict) else {}
                self.entering += [vars_in.get(key) for key in spread.keys]
        self.body = self._flat_body(body)

    def _flat_body(self, body):
        dicts = self.dicts

        def flat_body(t, *flat):
            objects, entered, position = [], [], 0
            for spread in dicts:
                if spread is None:
                    objects.append(flat[position])
                    entered.append(None)
                    position += 1
                    continue
                width = len(spread.keys)
                mapping = spread.enter(flat[position: position + width])
                objects.append(mapping)
                entered.append((mapping, list(mapping.items())))
                position += width
            returned = tuple(body(t, *objects))
            outputs = []
            for spread, value, entry in zip(dicts, returned, entered):
                if spread is None:
                    outputs.append(value)
                else:
                    outputs += spread.leave(entry[0], entry[1], value)
            return tuple(outputs)

        # a while loop's body says where its exit is (tracejit.tracer.while_loops)
        flat_body.__dict__.update(getattr(body, "__dict__", {}))
        return flat_body

    def regroup(self, finals):
        """The loop's results per original name."""
        grouped, position = [], 0
        for spread in self.dicts:
            if spread is None:
                grouped.append(finals[position])
                position += 1
                continue
            width = len(spread.keys)
            grouped.append(spread.after(list(finals[position: position + width])))
            position += width
        return tuple(grouped)


def flatten(body, names, originals, snapshots, values, entering):
    """A ``Flattened`` view of the loop when it carries a dict of fixed keys, else None.
    Raises ``Refused`` for a dict the loop cannot carry key by key."""
    dicts = [_dict_name(name, original, snap, value)
             for name, original, snap, value in zip(names, originals, snapshots, values)]
    if all(spread is None for spread in dicts):
        return None
    return Flattened(body, names, originals, snapshots, values, entering, dicts)


def entering_vars(value, entering_var):
    """What enters iteration 0 for a dict of arrays: ``{key: var}`` (``entering_var`` of
    each value), so iteration 0 may join the loop as it does for plain arrays."""
    return {key: entering_var(item) for key, item in value.items()}
