"""A captured loop writing in place into a carried array that shares memory with another.

NumPy's write through a view shows in its base and in every other view of it. A captured
body's trips see the carried array as a block parameter with no base and no views, so
within the loop only that name sees the writes. That is exact when the body reads nothing
else sharing the memory: the carried value goes through the loop alone, and the loop's
final value is written into the base at exit (``Tracer._update``: through the view's steps,
``tracejit.tracer.view_writes.write_through``; views of the base are read again). The
course's ``conv_backward`` is such a loop::

    da_prev_pad = dA_prev_pad[i]
    for w in range(n_W):
        for c in range(n_C):
            da_prev_pad[h:h + f, w:w + f, :] += W[:, :, :, c] * dZ[i, h, w, c]

When the body does read the base or another view of it (``ahead = y[1:]`` before ``for t:
ahead[t] = ahead[t] * 0.5 + y[t]``), NumPy's reads see the previous trips' writes, and the
captured body would read the memory as it was before the loop: refused, unrolled (the
trace follows each write into the root). So is a loop carrying two arrays of one memory,
or one nested in another loop's traced trip (the write at exit would go into the
enclosing trip's state, which ``Tracer._update`` refuses there).

>>> import numpy as np, tracejit as tj
>>> def accumulate(x):
...     out = np.zeros((2, x.shape[1]))
...     total = out[0]
...     for t in range(x.shape[0]):
...         total += x[t] * t
...     return out
>>> f = tj.jit(accumulate, cache="memory", dynamic=True)
>>> x = np.arange(12.0).reshape(4, 3)
>>> bool((f(x) == accumulate(x)).all())
True
"""

from __future__ import annotations

from .ir import Effect, Eqn, Guard, Var
from .loop_generalize import Refused
from .traced_array import Tracer


def sharing(name, outer, slots):
    """The names of the vars whose memory the carried array ``outer`` (written in place by
    the body) shares: its root's and every live view's of that root, ``outer``'s own
    included (the body reads none of them, or the capture is refused: ``check_reads``).
    None when it shares memory with nothing, or only with carried views of it (``prev =
    out[t - 1]`` in the body). Refused when it cannot be written through at exit, or
    another carried value shares its memory."""
    carried = {id(value) for value in slots if isinstance(value, Tracer)}
    root = outer.base_or_none()
    if root is None and all(id(view) in carried for view in outer.views or ()):
        return None
    if root is not None and outer.steps is None:
        raise _refusal(name, "a view tracejit cannot write through")
    root = outer if root is None else root
    shared = [root, *(root.views or ())]
    if any(value is not outer and (value is root or value.base_or_none() is root)
           for value in slots if isinstance(value, Tracer)) and root is not outer:
        raise _refusal(name, "another carried array shares it")
    return frozenset(value.ir_var.name for value in shared)


def check_reads(context, carries, recordings, index):
    """Refuse a loop (its index symbol ``index``) whose body reads memory a carried array
    writes into through another name (``carry.shared``, from ``sharing``), or whose write
    at exit would go into an enclosing loop's traced trip."""
    through = [carry for carry in carries if getattr(carry, "shared", None)]
    if not through:
        return
    if any(name != index for name in getattr(context, "loop_indices", None) or ()):
        raise _refusal(through[0].name, "the loop is nested in another loop's traced trip")
    read = {atom.name for recorded in recordings for item in recorded
            for atom in _atoms(item) if isinstance(atom, Var)}
    for carry in through:
        if carry.shared & read:
            raise _refusal(carry.name, "the body reads that memory through another name")


def _atoms(item):
    if isinstance(item, (Eqn, Effect)):
        return item.inputs
    if isinstance(item, Guard):
        return (item.predicate,)
    return ()


def _refusal(name, why):
    return Refused(f"`{name}` shares memory with another array (a view of it, or it of "
                   f"another) and the loop writes into it: {why}")
