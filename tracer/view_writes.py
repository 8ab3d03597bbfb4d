"""Writes through views, as NumPy makes them: into the base, seen by every view of it.

NumPy's basic indexing, ``.T`` and flips give views: ``a = buf[i]; a[2:4] += d`` writes
into ``buf``, and every other view of ``buf`` (``b = buf[i, 1:]``) shows the write. The
trace is functional, so each view records the steps that read it from its root (the array
that is no view: ``steps``, a tuple of ``(primitive, params)``); a write through a view
becomes a write into the root at the view's place (the steps run backwards, each
``slice`` a ``setitem`` of its parent), and every live view of the root is read again
from the new root. deeplearning.ai's ``conv_backward`` accumulates into
``da_prev_pad = dA_prev_pad[i]`` this way, and from-scratch RNNs into ``dh = dhs[t]``.

A view whose steps are unknown (a gather of ``W[c]`` with a run-time ``c``,
``as_strided``) and reshapes other than adding or dropping unit axes (NumPy copies where
the layout does not allow a view; which one it does is not traced) have no steps: a write
through them, or into a base while they show the written place, is refused as before.

>>> import numpy as np, tracejit as tj
>>> def accumulate(x):
...     buf = np.zeros((2, 3))
...     row = buf[1]
...     row[1:] += x
...     return buf, row * 2
>>> f = tj.jit(accumulate, cache="memory")
>>> f(np.ones(2))[0]
array([[0., 0., 0.],
       [0., 1., 1.]])
"""

from __future__ import annotations

import numpy as np

from . import ops
from .indexing import apart, setitem


class KeptRoot:
    """A followable view's reference to its root, called as the weak reference it replaces
    (``view.view_base()``), that keeps the root alive as a NumPy view's ``.base`` does: with
    ``a = buf[1]; b = buf[1, 1:]; buf = buf * 2``, a write through ``a`` must still reach
    ``b`` through the old ``buf``, which no name holds any more.

    >>> class Root: pass
    >>> root = Root()
    >>> kept = KeptRoot(root)
    >>> del root
    >>> type(kept()).__name__
    'Root'
    """

    __slots__ = ("root",)

    def __init__(self, root):
        self.root = root

    def __call__(self):
        return self.root


def steps_of(source, root, prim, params):
    """The steps reading ``prim(source, **params)`` from ``root``, or None when a write
    through it cannot be followed (``source`` has unknown steps; a reshape that moves
    elements, which NumPy may have copied)."""
    before = () if source is root else getattr(source, "steps", None)
    if before is None:
        return None
    if prim.name == "reshape" and not _only_unit_axes(source.shape, params["shape"]):
        return None
    return before + ((prim, params),)


def _only_unit_axes(shape, new_shape):
    """Whether ``new_shape`` is ``shape`` with axes of length 1 added or dropped: a view
    whatever the layout (``x[i]`` is a slice and such a reshape)."""
    def kept(dims):
        return [dim for dim in dims if not (type(dim) is int and dim == 1)]
    old, new = kept(shape), kept(new_shape)
    return len(old) == len(new) and all(a is b or a == b for a, b in zip(old, new))


def followable(view, written=None):
    """Whether a write of ``written`` (a region of the root, None: anywhere) can leave
    ``view`` right: it is apart from the write, or its steps can read it again."""
    return view.steps is not None or (written is not None and apart(view.region, written))


def write_through(view, root, value):
    """``root`` after writing ``value`` over all of ``view`` (a view of it by
    ``view.steps``): each step's parent is read from ``root`` again, and the steps run
    backwards put the value in place."""
    parents = _read(root, view.steps[:-1])
    for (prim, params), parent in zip(reversed(view.steps), reversed(parents)):
        value = _put_back(prim, params, parent, value)
    return value


def _put_back(prim, params, parent, value):
    """``parent`` with ``prim(parent, **params)`` replaced by ``value``."""
    name = prim.name
    if name == "slice":
        index = tuple(slice(start, limit, step) for start, limit, step in zip(
            params["starts"], params["limits"], params["steps"]))
        return setitem(parent, index, value)
    if name == "reshape":
        return ops.bind(prim, value, shape=tuple(parent.shape))
    if name == "transpose":
        return ops.bind(prim, value, perm=tuple(int(axis) for axis in np.argsort(
            params["perm"])))
    if name == "flip":
        return ops.bind(prim, value, **params)
    raise AssertionError(f"no way back through {name}")


def read_again(root, view):
    """``view`` read from ``root`` by its steps (after a write into ``root``)."""
    return _read(root, view.steps)[-1]


def _read(root, steps):
    """``root`` and what each of ``steps`` reads from the one before."""
    values = [root]
    for prim, params in steps:
        values.append(ops.bind(prim, values[-1], **params))
    return values


def numpy_root(array):
    """The NumPy array owning ``array``'s memory when ``array`` is a view of one made
    here by basic indexing (``dA_prev_pad[i]``); None otherwise."""
    root = array.base
    while isinstance(root, np.ndarray) and root.base is not None:
        root = root.base
    return root if isinstance(root, np.ndarray) else None


def index_in(view, root):
    """``(index, shape)`` with ``root[index].reshape(shape)`` the very view ``view`` is
    of ``root`` (same memory, strides and shape), for a C-contiguous ``root`` and a view
    basic indexing makes (ints and slices, steps of either sign, no transposes); None
    otherwise. The candidate is checked against NumPy, so a wrong guess cannot pass."""
    if not root.flags.c_contiguous or view.dtype != root.dtype or root.ndim == 0:
        return None
    itemsize = root.itemsize
    offset, remainder = divmod(_address(view) - _address(root), itemsize)
    if remainder or not 0 <= offset < max(root.size, 1):
        return None
    unit = [int(np.prod(root.shape[k + 1:])) for k in range(root.ndim)]
    # (an empty root: every view of it starts at 0; its units and lengths may be 0)
    starts = [offset // unit[k] % root.shape[k] if root.size else 0 for k in range(root.ndim)]
    axes = [(length, stride // itemsize) for length, stride in zip(view.shape, view.strides)
            if length != 1]
    index = _match(axes, unit, starts, root.shape, 0)
    if index is None:
        return None
    if index and all(type(item) is int for item in index):  # one element (t[:1]): no view
        index = index[:-1] + (slice(index[-1], index[-1] + 1),)
    candidate = root[index].reshape(view.shape)
    same = _address(candidate) == _address(view) and candidate.shape == view.shape and all(
        length == 1 or a == b for length, a, b in zip(view.shape, candidate.strides,
                                                       view.strides))
    return (index, view.shape) if same else None


def _match(axes, unit, starts, shape, first):
    """An index of ints and slices over ``shape``'s axes from ``first`` on, whose slices
    walk ``axes`` (``(length, element stride)``, in order)."""
    if first == len(shape):
        return () if not axes else None
    if axes:
        length, stride = axes[0]
        step, rest = divmod(stride, unit[first]) if unit[first] else (0, 1)
        last = starts[first] + (length - 1) * step
        if step and not rest and 0 <= last < shape[first]:
            stop = starts[first] + length * step
            tail = _match(axes[1:], unit, starts, shape, first + 1)
            if tail is not None:
                return (slice(starts[first], stop if stop >= 0 else None, step),) + tail
    tail = _match(axes, unit, starts, shape, first + 1)
    return None if tail is None else (starts[first],) + tail


def _address(array):
    return array.__array_interface__["data"][0]
